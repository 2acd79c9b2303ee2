#!/usr/bin/env bash
# container_test.sh -- a real workload runs as an OCI container on a real
# gridpool-agent (simulated GPUs, real runc, skopeo and umoci), from an
# image in a real registry (Debian's docker-registry), placed by the real
# scheduler: what the job can and cannot reach, and that no process of it
# outlives its end.
#
#   1. isolation: its uid on the node is none of the agent's (a user
#      namespace of its own range), no capability; its environment holds the
#      allow-list only (no GP_NATS_*, nothing of the agent's); the agent's
#      credentials file is not there; its config.json grants exactly its
#      GPU's device node; neither the leaf's (NATS) port nor any address of
#      the node answers it, the internet (a namespace standing for it) does;
#      its root is read-only, /scratch writable and
#      bounded; its output is kept on the node;
#   2. escapes: a setsid child that ignores SIGTERM is gone after a cancel,
#      after the job's own end, and after its lease ran out on a hung agent;
#   3. two tenants' attempts on one node: different id ranges, checkpoint
#      folders only their own ids may enter, neither sees the other's
#      processes nor reaches the other's ports;
#   4. bad input: an unknown image, a digest the registry lacks, memory
#      beyond the node's: failed starts with the reason, the node not charged;
#   5. the digest the first attempt pulled is recorded on the job, and a
#      later attempt runs it;
#   6. an image no attempt runs leaves the cache (image-keep 0).
# test-tags: pass=san timeout=600
set -u
B=$GP_BUILD
G="$B/bin/gpctl --timeout 5000"
D=$GP_STACK_DIR
# shellcheck source=tests/lib/lib.sh
. "$(dirname "$0")/../../lib/lib.sh"
# shellcheck source=tests/lib/oci.sh
. "$(dirname "$0")/../../lib/oci.sh"

for t in runc skopeo umoci docker-registry; do
    command -v "$t" >/dev/null || { echo "1..0 # SKIP $t not installed (make deps)"; exit 0; }
done
[ "$(id -u)" = 0 ] || { echo "1..0 # SKIP containers need root (the agent maps id ranges)"; exit 0; }

on_fail() {
    echo "# gpctl errors:"; tail -n 3 "$tmp/gpctl.err" 2>/dev/null | sed 's/^/#   /'
    echo "# jobs:"; sql "SELECT id, state, reason FROM jobs ORDER BY created_ms" | sed 's/^/#   /'
    echo "# agent warnings:"; grep -h 'level=warn' "$D"/agent-*.log | tail -n 8 | sed 's/^/#   /'
    echo "# scheduler warnings:"; grep -h 'level=warn' "$D/sched.log" | tail -n 5 | sed 's/^/#   /'
}
tap_on_fail=on_fail

# "The internet": a namespace of its own behind a veth, at a public
# address (TEST-NET-3), serving TCP on 8080; a container's egress reaches
# it through the node's masquerade.
INET=gpinet$$
ip netns add "$INET" && ip link add "gpi${$}a" type veth peer name "gpi${$}b" &&
    ip link set "gpi${$}b" netns "$INET" && ip addr add 203.0.113.1/24 dev "gpi${$}a" &&
    ip link set "gpi${$}a" up && ip netns exec "$INET" ip addr add 203.0.113.10/24 dev "gpi${$}b" &&
    ip netns exec "$INET" ip link set "gpi${$}b" up && ip netns exec "$INET" ip link set lo up
inet_ok=$?
inet_down() { ip link delete "gpi${$}a" 2>/dev/null; ip netns delete "$INET" 2>/dev/null; }
testlib_at_exit inet_down
ip netns exec "$INET" /usr/bin/python3 -m http.server 8080 --bind 203.0.113.10 >/dev/null 2>&1 &
pids+=($!)
ST=$D/agent-state
# A container's ids pass through the stack folder (0700 by mktemp) to the
# image cache and checkpoint folders, as through /var/lib on a node.
chmod 0711 "$D"
IDBASE=1879048192
events() { sql "SELECT string_agg(event, ',' ORDER BY seq) FROM job_events WHERE job_id = '$1'"; }
jstate() { sql "SELECT state FROM jobs WHERE id = '$1'"; }
out_of() { cat "$ST/logs/$1/${2:-1}/output.1" "$ST/logs/$1/${2:-1}/output" 2>/dev/null; }
bundle() { echo "$ST/bundles/gp-$1-${2:-1}"; }
# host pids whose uid is in the containers' ranges
ctr_pids() { ps -e -o uid=,pid= | awk -v b=$IDBASE '$1 >= b && $1 < b + 64 * 65536 { print $2 }'; }
wait_running() { wait_sql "SELECT state FROM jobs WHERE id = '$1'" running 150 &&
    for _ in $(seq 1 100); do [ -s "$(bundle "$1")/pid" ] && return 0; sleep 0.1; done; return 1; }
# the container's init pid on the node
ctr_init() { cat "$(bundle "$1")/pid"; }

# ---- the image, the registry ---------------------------------------------------

oci_image "$B/test-image"
ok "a test image is built from busybox-static by umoci" $?
oci_registry && oci_push "$B/test-image" test/busybox:1
ok "it is pushed to a registry on $OCI_REG" $?
IMG=$OCI_REG/test/busybox:1

# ---- the stack: registry, scheduler, one real agent ----------------------------

spawn registry "$B/bin/gridpool-registry" --config "$D/gp.env" --http-port 0 --heartbeat-ms 500 \
    --lease-ms 3000 --sweep-ms 200
for _ in $(seq 1 100); do $G health registry >/dev/null 2>&1 && break; sleep 0.1; done
$G create tenant op --kind operator >/dev/null &&
    $G create tenant acme --kind customer --parent op >/dev/null &&
    $G create tenant beta --kind customer --parent op >/dev/null &&
    $G create site s1 --tenant op --region r1 --lat 52.5 --lon 13.4 >/dev/null &&
    $G create pool p-all --tenant op --scope global >/dev/null
ok "tenants, a site and a global pool are created" $?
printf 'nats-password=agent-secret-canary\n' >"$D/agent.cred"
chmod 0600 "$D/agent.cred"
# The agent's own environment carries a canary a container must not see.
GP_CANARY=agent-env-canary spawn agent-n1 "$B/bin/gridpool-agent" --config "$D/gp.env" \
    --site s1 --node n1 --gpu-backend sim --sim-gpus 2 --sim-model L4 --http-port 0 \
    --heartbeat-ms 500 --stop-grace-ms 1000 --state-dir "$ST" --runtime-root "$D/runtime" \
    --seccomp-profile "$B/seccomp.json" --insecure-registries "$OCI_REG" --id-base $IDBASE \
    --default-memory-mb 256 --default-scratch-mb 16 --max-memory-mb 2048 --image-keep 0
apid=${pids[-1]}
for _ in $(seq 1 100); do $G get nodes n1 -o json 2>/dev/null | grep -q '"state":"healthy"' && break; sleep 0.1; done
grep -q 'containers_ready' "$D/agent-n1.log"
ok "the agent registers with containers ready (runc, the seccomp profile)" $?
spawn sched "$B/bin/gridpool-scheduler" --config "$D/gp.env" --http-port 0 --instance sched \
    --heartbeat-ms 500 --lease-ms 3000 --fence-margin-ms 300 --place-ms 200 \
    --dispatch-timeout-ms 3000 --claim-ms 2000 --reconcile-ms 500 --reconcile-grace-ms 500 \
    --checkpoint-root "$D/ckpt" --log-level debug
for _ in $(seq 1 100); do grep -q 'feed_ready.*nodes=1' "$D/sched.log" && break; sleep 0.1; done
ok "the scheduler loaded the node" $?

# ---- 1. isolation ------------------------------------------------------------------

NPORT=${GP_NATS_URL##*:}
HOSTIP=$(ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')
HOSTIP=${HOSTIP:-127.0.0.1}
probe='echo "uid=$(id -u) gid=$(id -g)"; grep CapEff /proc/self/status; env | sort;
echo "creds=$(cat '"$D/agent.cred"' 2>&1 | head -c 80)";
if nc -z -w 2 127.0.0.1 '"$NPORT"' 2>/dev/null; then echo leaf=open; else echo leaf=closed; fi;
if nc -z -w 2 '"$HOSTIP"' '"$NPORT"' 2>/dev/null; then echo host=open; else echo host=closed; fi;
if nc -w 3 203.0.113.10 8080 </dev/null 2>/dev/null; then echo inet=open; else echo inet=closed; fi;
if nc -w 2 10.89.0.1 22 </dev/null 2>/dev/null; then echo gw=open; else echo gw=closed; fi;
if touch /bin/x 2>/dev/null; then echo root=rw; else echo root=ro; fi;
if dd if=/dev/zero of=/scratch/f bs=1M count=8 2>/dev/null; then echo scratch8=ok; fi;
if dd if=/dev/zero of=/scratch/g bs=1M count=32 2>/dev/null; then echo scratch32=ok; else echo scratch32=full; fi;
ls /dev | tr "\n" " "; echo; echo probe-done; sleep 30'
j1=$(TENANT=acme submit --image "$IMG" --command "$probe" --gpus 1 --max-attempts 1)
wait_running "$j1"
ok "1. a job from $IMG runs in a container" $?
hostuid=$(awk '/^Uid:/ { print $2 }' "/proc/$(ctr_init "$j1")/status" 2>/dev/null)
[ -n "$hostuid" ] && [ "$hostuid" -ge $IDBASE ] && [ "$hostuid" != "$(stat -c %u /proc/$apid)" ]
ok "1. its processes run as node uid $hostuid: the containers' range, not the agent's" $?
for _ in $(seq 1 100); do out_of "$j1" | grep -q probe-done && break; sleep 0.1; done
out=$(out_of "$j1")
echo "$out" | grep -q '^uid=0 gid=0$' && echo "$out" | grep -q 'CapEff:.0000000000000000'
ok "1. root in the container holds no capability" $?
! echo "$out" | grep -q 'GP_NATS\|GP_CANARY\|agent-env-canary' &&
    echo "$out" | grep -q "^GP_JOB_ID=$j1$" && echo "$out" | grep -q '^GP_ATTEMPT=1$' &&
    echo "$out" | grep -q '^GP_IMAGE_ENV=from-image$'
ok "1. its environment: gridpool's variables and the image's, nothing of the agent's" $?
echo "$out" | grep -q '^creds=cat: can.t open' && ! echo "$out" | grep -q 'canary'
ok "1. the agent's credentials file is not there for it" $?
echo "$out" | grep -q '^leaf=closed$' && echo "$out" | grep -q '^host=closed$' &&
    echo "$out" | grep -q '^gw=closed$'
ok "1. neither the leaf's port nor the node's addresses ($HOSTIP, its gateway 10.89.0.1) answer it" $?
[ $inet_ok -eq 0 ] && echo "$out" | grep -q '^inet=open$'
ok "1. the internet does (203.0.113.10:8080, through the node's masquerade)" $?
echo "$out" | grep -q '^root=ro$' && echo "$out" | grep -q '^scratch8=ok$' &&
    echo "$out" | grep -q '^scratch32=full$'
ok "1. a read-only root; /scratch takes 8 MiB but not 32 (16 MiB)" $?
cfg=$(bundle "$j1")/config.json
gpu=$(sql "SELECT gpus[1] FROM attempts WHERE job_id = '$j1'")
devs=$(python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); print(" ".join("%s:%s" % (d.get("major"), d.get("minor")) for d in c["linux"]["resources"]["devices"] if d.get("allow") and d.get("major") == 195))' "$cfg")
[ "$devs" = "195:$gpu 195:255" ]
ok "1. its device cgroup allows its GPU's node (195:$gpu) and nvidiactl only: $devs" $?
python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); l=c["linux"]; p=c["process"]
assert c["root"]["readonly"] and p["noNewPrivileges"] and not any(p["capabilities"].values())
assert {n["type"] for n in l["namespaces"]} >= {"user","pid","network","mount","ipc","uts","cgroup"}
assert l["uidMappings"][0]["hostID"] >= int(sys.argv[2]) and l["seccomp"]["defaultAction"] == "SCMP_ACT_ERRNO"
assert l["resources"]["memory"]["limit"] == 256 << 20 and l["resources"]["pids"]["limit"] > 0' "$cfg" $IDBASE
ok "1. its config: user namespace, no capability, no new privileges, seccomp, cgroup limits" $?
echo "$out" | grep -v '^[A-Z_]*=' | sed 's/^/#   saw: /'
$G logs "$j1" --tenant acme >"$D/logs.acme" 2>&1 && grep -q '^probe-done$' "$D/logs.acme" &&
    grep -q '^leaf=closed$' "$D/logs.acme"
ok "1. gpctl logs: its output comes back to its tenant" $?
$G logs "$j1" --tenant beta >"$D/logs.beta" 2>&1
[ $? -eq 1 ] && grep -q 'NOTFOUND' "$D/logs.beta" && ! grep -q 'probe-done' "$D/logs.beta"
rc_=$?; ok "1. gpctl logs: another tenant is refused ($(head -c 100 "$D/logs.beta"))" $rc_
$G logs "$j1" --tenant acme --bytes 11 >"$D/logs.tail" 2>&1 && [ "$(cat "$D/logs.tail")" = "probe-done" ]
ok "1. gpctl logs --bytes 11: the last 11 bytes" $?
$G cancel job "$j1" --tenant acme >/dev/null
wait_sql "SELECT state FROM jobs WHERE id = '$j1'" cancelled 100
ok "1. it is cancelled" $?
dg=$(skopeo inspect --tls-verify=false "docker://$IMG" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Digest"])')
[ "$(sql "SELECT image_digest FROM jobs WHERE id = '$j1'")" = "$dg" ]
ok "5. the digest its attempt pulled ($dg) is recorded on the job" $?

# ---- 2. escapes: a setsid child that ignores SIGTERM ---------------------------------

gone() { for _ in $(seq 1 "$1"); do [ -z "$(ctr_pids)" ] && return 0; sleep 0.1; done; return 1; }
escaper="setsid sh -c 'trap \"\" TERM; while :; do sleep 1; done' & sleep 1"
j2=$(TENANT=acme submit --image "$IMG" --command "$escaper; sleep 1000" --gpus 1 --max-attempts 1)
wait_running "$j2" && for _ in $(seq 1 50); do [ "$(ctr_pids | wc -l)" -ge 3 ] && break; sleep 0.1; done
[ "$(ctr_pids | wc -l)" -ge 3 ]
rc_=$?; ok "2. a job with a setsid child that ignores SIGTERM runs ($(ctr_pids | wc -l) processes)" $rc_
$G cancel job "$j2" --tenant acme >/dev/null
wait_sql "SELECT state FROM jobs WHERE id = '$j2'" cancelled 100 && gone 100
ok "2. cancelled: no process of it is left on the node" $?
j3=$(TENANT=acme submit --image "$IMG" --command "$escaper; exit 0" --gpus 1 --max-attempts 1)
wait_sql "SELECT state FROM jobs WHERE id = '$j3'" succeeded 150 && gone 100
ok "2. its main process exits 0: the job succeeded, its setsid child is gone too" $?
timeout 10 $G logs "$j3" --tenant acme --follow >/dev/null 2>&1
ok "2. gpctl logs --follow of an ended attempt returns" $?
j4=$(TENANT=acme submit --image "$IMG" --command "$escaper; sleep 1000" --gpus 1 --max-attempts 1)
wait_running "$j4" && sleep 0.5 && kill -STOP "$apid"
t0=$(date +%s)
gone 200
rc_=$?; ok "2. the agent hangs (SIGSTOP): its lease guard kills the container at the lease's end ($(( $(date +%s) - t0 )) s)" $rc_
kill -CONT "$apid"
$G cancel job "$j4" --tenant acme >/dev/null
wait_sql "SELECT state IN ('cancelled','failed') FROM jobs WHERE id = '$j4'" t 100 && gone 100
ok "2. the agent resumes; the job is ended and nothing of it runs" $?

# ---- 3. two tenants on one node --------------------------------------------------------

ja=$(TENANT=acme submit --image "$IMG" --gpus 1 --max-attempts 1 \
    --command 'echo acme-secret >/scratch/s; echo acme-secret >/checkpoint/s;
printf "#!/bin/sh\necho acme-port\n" >/tmp/hi && chmod +x /tmp/hi && nc -ll -p 7000 -e /tmp/hi & sleep 1001')
wait_running "$ja"
ipa=$(ip netns exec "gp-$ja-1" ip -4 -o addr show eth0 2>/dev/null | sed -n 's/.* inet \([0-9.]*\)\/.*/\1/p')
for _ in $(seq 1 30); do [ "$(/bin/busybox nc -w 2 "$ipa" 7000 </dev/null 2>/dev/null)" = acme-port ] && break; sleep 0.2; done
[ -n "$ipa" ] && [ "$(/bin/busybox nc -w 2 "$ipa" 7000 </dev/null 2>/dev/null)" = acme-port ]
ok "3. acme's attempt listens on $ipa:7000 (the node reaches it)" $?
jb=$(TENANT=beta submit --image "$IMG" --gpus 1 --max-attempts 1 \
    --command 'sleep 1; for p in /proc/[0-9]*; do tr "\0" " " <$p/cmdline; echo; done >/tmp/ps;
echo "procs: $(grep -c . /tmp/ps)"; grep -q "^sleep 1001 $" /tmp/ps && echo sees-acme;
if nc -w 2 '"$ipa"' 7000 </dev/null 2>/dev/null | grep -q acme; then echo reaches-acme; fi;
ls -A /scratch | tr "\n" " "; echo "scratch-listed"; cat /checkpoint/s 2>&1; sleep 1002')
wait_running "$jb"
ok "3. acme's and beta's attempts run on n1 at once" $?
ua=$(awk '/^Uid:/ { print $2 }' "/proc/$(ctr_init "$ja")/status")
ub=$(awk '/^Uid:/ { print $2 }' "/proc/$(ctr_init "$jb")/status")
[ -n "$ua" ] && [ -n "$ub" ] && [ "$ua" != "$ub" ]
ok "3. they run as different node uids ($ua, $ub)" $?
ca=$(stat -c '%u %a' "$D/ckpt/$ja") cb=$(stat -c '%u %a' "$D/ckpt/$jb")
[ "$ca" = "$ua 700" ] && [ "$cb" = "$ub 700" ]
ok "3. each checkpoint folder is its own attempt's alone ($ca; $cb)" $?
for _ in $(seq 1 50); do out_of "$jb" | grep -q scratch-listed && break; sleep 0.1; done
ob=$(out_of "$jb")
echo "$ob" | grep -q '^procs: [1-5]$' && echo "$ob" | grep -q '^scratch-listed$' &&
    ! echo "$ob" | grep -q 'acme-secret\|sees-acme\|reaches-acme'
ok "3. beta sees neither acme's processes, nor its scratch, nor its checkpoint, nor reaches its port" $?
echo "$ob" | sed 's/^/#   beta saw: /'
$G cancel job "$ja" --tenant acme >/dev/null; $G cancel job "$jb" --tenant beta >/dev/null
gone 150
ok "3. both are cancelled, nothing left" $?

# ---- 4. bad input ------------------------------------------------------------------

jx=$(TENANT=acme submit --image "$OCI_REG/test/nope:1" --command true --gpus 1 --max-attempts 1)
jd=$(TENANT=acme submit --image "$OCI_REG/test/busybox@sha256:$(printf '%064d' 0)" --command true \
    --gpus 1 --max-attempts 1)
jm=$(TENANT=acme submit --image "$IMG" --command true --gpus 1 --max-attempts 1 --memory 999999)
wait_sql "SELECT count(*) FROM jobs WHERE id IN ('$jx','$jd','$jm') AND state = 'failed'" 3 150
ok "4. an unknown image, a digest the registry lacks, memory beyond the node's: each job failed" $?
rx=$(sql "SELECT reason FROM attempts WHERE job_id = '$jx'")
rd=$(sql "SELECT reason FROM attempts WHERE job_id = '$jd'")
rm_=$(sql "SELECT reason FROM attempts WHERE job_id = '$jm'")
case "$rx" in *"image $OCI_REG/test/nope: pull failed"*) true ;; *) false ;; esac
ok "4. unknown image: the registry's reason ($rx)" $?
case "$rd" in *"image sha256:0000"*"pull failed"*) true ;; *) false ;; esac
ok "4. missing digest: the registry's reason ($rd)" $?
case "$rm_" in *"memory_mb 999999 is beyond"*) true ;; *) false ;; esac
ok "4. memory beyond the node's: refused at start ($rm_)" $?
$G submit --tenant acme --image busybox --command true --gpus 1 >/dev/null 2>"$D/short.err"
[ $? -ne 0 ] && grep -q 'INVAL.*image: needs a registry host' "$D/short.err"
rc_=$?; ok "4. a short image name is refused at submit: $(head -c 120 "$D/short.err")" $rc_

# ---- 5. a second attempt runs the first one's digest -------------------------------

jr=$(TENANT=acme submit --image "$IMG" --command 'exit 3' --gpus 1 --max-attempts 2)
wait_sql "SELECT state FROM jobs WHERE id = '$jr'" failed 150
grep -q "attempt_pulling.*job=$jr attempt=2 .*image=$OCI_REG/test/busybox@$dg" "$D/agent-n1.log" &&
    [ "$(sql "SELECT count(*) FROM attempts WHERE job_id = '$jr' AND image_digest = '$dg'")" = 2 ]
ok "5. its second attempt is sent the pinned digest and runs it" $?
for _ in $(seq 1 50); do [ -z "$(ls "$ST/images" | grep -v '^gc-')" ] && break; sleep 0.1; done
[ -z "$(ls "$ST/images" | grep -v '^gc-')" ] && grep -q "image_removed digest=$dg" "$D/agent-n1.log"
ok "6. no attempt runs it any more: the image is removed from the node's cache (image-keep 0)" $?

tap_end
