#!/usr/bin/env bash
# instance_test.sh -- GPU instances on two real gridpool-agents at two
# sites: an instance (kind instance, a named port) serves on its endpoint
# (the node's address and a host port the agent picked, mapped by the CNI
# portmap plugin) while it runs; its site loses power (the agent and its
# container killed at once); it is recreated on the other site with a new
# endpoint, told in its started event, its failures untouched (a platform
# fault); metering bills each attempt only for the time it ran.  An
# instance that exits by itself (status 0 too) is restarted with backoff,
# each exit counted against max_attempts.  A draining node's instance moves
# after the operator's notice period, not at once.  The image cache keeps
# to its size bound.
#   Real registry, scheduler, recovery, metering, runc, skopeo, umoci,
#   docker-registry, CNI ptp and portmap.
# test-tags: pass=normal timeout=600
set -u
B=$GP_BUILD
G="$B/bin/gpctl --timeout 5000"
D=$GP_STACK_DIR
TENANT=acme
# shellcheck source=tests/lib/lib.sh
. "$(dirname "$0")/../../lib/lib.sh"
# shellcheck source=tests/lib/oci.sh
. "$(dirname "$0")/../../lib/oci.sh"

for t in runc skopeo umoci docker-registry; do
    command -v "$t" >/dev/null || { echo "1..0 # SKIP $t not installed (make deps)"; exit 0; }
done
[ -x /usr/lib/cni/portmap ] || { echo "1..0 # SKIP no CNI portmap plugin (make deps)"; exit 0; }
[ "$(id -u)" = 0 ] || { echo "1..0 # SKIP containers need root (the agent maps id ranges)"; exit 0; }
on_fail() {
    echo "# jobs:"; sql "SELECT id, kind, state, reason, failures, platform_faults FROM jobs" | sed 's/^/#   /'
    echo "# attempts:"; sql "SELECT job_id, attempt, node, state, reason, endpoints FROM attempts" | sed 's/^/#   /'
    echo "# agent warnings:"; grep -h 'level=warn' "$D"/agent-*.log | tail -n 6 | sed 's/^/#   /'
}
tap_on_fail=on_fail
chmod 0711 "$D"
# the node's address in endpoints: its first interface address that is up
ADDR=$(ip -4 -o addr show scope global up | awk '{sub(/\/.*/, "", $4); print $4; exit}')
ADDR=${ADDR:-127.0.0.1}

oci_image "$B/test-image" && oci_registry && oci_push "$B/test-image" test/busybox:1
ok "a test image in a registry on $OCI_REG" $?
spawn registry "$B/bin/gridpool-registry" --config "$D/gp.env" --http-port 0 --heartbeat-ms 500 \
    --lease-ms 3000 --sweep-ms 200
for _ in $(seq 1 100); do $G health registry >/dev/null 2>&1 && break; sleep 0.1; done
$G create tenant op --kind operator >/dev/null &&
    $G create tenant acme --kind customer --parent op >/dev/null &&
    $G create tenant beta --kind customer --parent op >/dev/null &&
    $G create site s1 --tenant op --region r1 --lat 52.5 --lon 13.4 >/dev/null &&
    $G create site s2 --tenant op --region r1 --lat 48.1 --lon 11.6 >/dev/null &&
    $G create pool p-all --tenant op --scope global >/dev/null
ok "a tenant, two sites and a global pool are created" $?
agent() {     # site node containers' net, first host port (two agents on one host: two of each)
    spawn "agent-$2" "$B/bin/gridpool-agent" --config "$D/gp.env" --site "$1" --node "$2" \
        --gpu-backend sim --sim-gpus 2 --sim-model L4 --http-port 0 --heartbeat-ms 500 \
        --stop-grace-ms 1000 --state-dir "$D/state-$2" --runtime-root "$D/runtime-$2" \
        --seccomp-profile "$B/seccomp.json" --insecure-registries "$OCI_REG" \
        --default-memory-mb 128 --default-scratch-mb 8 --container-net "$3" \
        --port-min "$4" --port-max $(($4 + 99)) --image-keep 8 --image-cache-mb 1
}
agent s1 n1 10.93.0.0/16 42100
agent s2 n2 10.94.0.0/16 43100
for _ in $(seq 1 100); do
    [ "$($G get nodes -o json 2>/dev/null | grep -o '"state":"healthy"' | wc -l)" -ge 2 ] && break
    sleep 0.1
done
spawn sched "$B/bin/gridpool-scheduler" --config "$D/gp.env" --http-port 0 --instance sched \
    --heartbeat-ms 500 --lease-ms 3000 --fence-margin-ms 300 --place-ms 200 \
    --dispatch-timeout-ms 3000 --claim-ms 2000 --reconcile-ms 500 --reconcile-grace-ms 500 \
    --checkpoint-root "$D/ckpt" --instance-drain-notice-ms 4000
spawn recovery "$B/bin/gridpool-recovery" --config "$D/gp.env" --http-port 0 --replace-ms 100
spawn metering "$B/bin/gridpool-metering" --config "$D/gp.env" --http-port 0 --instance m1 \
    --window-ms 1000 --grace-ms 300 --silent-ms 3000 --sweep-ms 200 --claim-ms 3000
for _ in $(seq 1 100); do grep -q 'feed_ready.*nodes=2' "$D/sched.log" && break; sleep 0.1; done
# metering seals a new Redis's shards pg-timeout-ms + 1 s after its start
# (services/metering/epoch.c) and refuses readings until then: an
# attempt cut before that would be metered nothing
for _ in $(seq 1 150); do grep -q 'event=redis_rebuilt' "$D/metering.log" && break; sleep 0.1; done
grep -q 'feed_ready.*nodes=2' "$D/sched.log" && grep -q 'event=redis_rebuilt' "$D/metering.log"
ok "two agents at two sites, the scheduler, recovery and metering run (metering's shards sealed)" $?

# ---- bad input ----------------------------------------------------------------------
out=$($G submit --tenant acme --kind instance --image "$OCI_REG/test/busybox:1" --gpus 1 \
    --max-run 60 2>&1)
echo "$out" | grep -q 'INVAL.*max_run_s.*an instance runs until it is stopped'
ok "an instance with a max run is refused at submit: $out" $?
out=$($G submit --tenant acme --command 'sim:run=10s' --port http:80 --gpus 1 2>&1)
echo "$out" | grep -q 'INVAL.*ports.*need an image'
ok "ports without a container are refused at submit: $out" $?
out=$($G submit --tenant acme --image "$OCI_REG/test/busybox:1" --port http:80 --port http:81 \
    --gpus 1 2>&1)
echo "$out" | grep -q 'INVAL.*ports.*unique'
ok "two ports of one name are refused at submit: $out" $?

# ---- an instance serves on its endpoint --------------------------------------------------
serve='echo "hello from attempt $GP_ATTEMPT" >/scratch/index.html; exec httpd -f -p 8080 -h /scratch'
j=$(submit --kind instance --image "$OCI_REG/test/busybox:1" --command "$serve" --gpus 1 \
    --port http:8080)
wait_sql "SELECT state FROM jobs WHERE id = '$j'" running 150
ok "an instance with a named port runs" $?
ep1=$(sql "SELECT endpoints FROM attempts WHERE job_id = '$j' AND attempt = 1")
node1=$(sql "SELECT node FROM attempts WHERE job_id = '$j' AND attempt = 1")
site1=$(sql "SELECT site FROM attempts WHERE job_id = '$j' AND attempt = 1")
hp1=$(echo "$ep1" | sed -n "s|^http=$ADDR:\([0-9]*\)/tcp\$|\1|p")
[ -n "$hp1" ]
ok "its attempt has an endpoint on the node's address: $ep1" $?
get() { curl -s --max-time 2 "http://$ADDR:$1/index.html"; }
for _ in $(seq 1 30); do [ "$(get "$hp1")" = "hello from attempt 1" ] && break; sleep 0.2; done
[ "$(get "$hp1")" = "hello from attempt 1" ]
st=$?
if [ $st != 0 ]; then
    curl -sv --max-time 2 "http://$ADDR:$hp1/index.html" 2>&1 | sed 's/^/#   curl: /'
    iptables -t nat -S | grep -i hostport | sed 's/^/#   nat: /'
    iptables -S FORWARD | sed 's/^/#   filter: /'
    ip netns exec "gp-$j-1" netstat -ltn 2>&1 | sed 's/^/#   in the container: /'
fi
ok "a TCP connection from the host to $ADDR:$hp1 reaches it (it answers 'hello from attempt 1')" $st
$G describe job "$j" --tenant acme >"$tmp/describe1" 2>&1
grep -q "^Endpoints: *http=$ADDR:$hp1/tcp (attempt 1, running)" "$tmp/describe1" &&
    grep -q '^  Kind: *instance' "$tmp/describe1" && grep -q '^  Max Run: *until cancelled' "$tmp/describe1"
ok "gpctl describe job shows its kind and endpoint" $?
[ "$(sql "SELECT reason FROM job_events WHERE job_id = '$j' AND event = 'started'")" = "endpoints $ep1" ]
ok "its started event names the endpoint" $?
# another tenant's container tries the endpoint: its packets are DNAT'ed to
# the instance's container address, which its own net's chain drops
p=$(TENANT=beta submit --image "$OCI_REG/test/busybox:1" --gpus 1 --max-attempts 1 \
    --command "if nc -w 2 $ADDR $hp1 </dev/null; then echo port=open; else echo port=closed; fi")
wait_sql "SELECT state FROM jobs WHERE id = '$p'" succeeded 150
pn=$(sql "SELECT node FROM attempts WHERE job_id = '$p' AND attempt = 1")
out=$($G logs "$p" --tenant beta 2>/dev/null)
echo "$out" | grep -qx port=closed
rc_=$?
if [ $rc_ != 0 ]; then
    echo "$out" | sed 's/^/#   probe: /'
    iptables -L FORWARD -v -n | sed 's/^/#   forward: /'
    iptables -t nat -S | grep -E 'HOSTPORT|CNI-DN' | sed 's/^/#   nat: /'
fi
(exit $rc_)
ok "another tenant's container (on $pn) cannot reach the instance's endpoint" $?

# ---- the power cut: the agent and its container at once ------------------------------
sleep 1
started1=$(sql "SELECT started_ms FROM attempts WHERE job_id = '$j' AND attempt = 1")
kill -9 "$(cat "$D/pids/agent-$node1.pid")"
runc --root "$D/runtime-$node1" kill --all "gp-$j-1" KILL 2>/dev/null
cut_ms=$(date +%s%3N)
ok "site $site1 loses power" 0
t0=$(date +%s%3N)
wait_sql "SELECT state || ' ' || (node <> '$node1')::text FROM attempts WHERE job_id = '$j' AND attempt = 2" \
    'running true' 300
st=$?
ok "the instance is recreated on the other site ($(sql "SELECT site FROM attempts WHERE job_id = '$j' AND attempt = 2")) in $(( $(date +%s%3N) - t0 )) ms" $st
ep2=$(sql "SELECT endpoints FROM attempts WHERE job_id = '$j' AND attempt = 2")
hp2=$(echo "$ep2" | sed -n "s|^http=$ADDR:\([0-9]*\)/tcp\$|\1|p")
[ -n "$hp2" ] && [ "$hp2" != "$hp1" ]
ok "with a new endpoint: $ep2" $?
for _ in $(seq 1 30); do [ "$(get "$hp2")" = "hello from attempt 2" ] && break; sleep 0.2; done
[ "$(get "$hp2")" = "hello from attempt 2" ]
ok "it answers there ('hello from attempt 2')" $?
[ "$(sql "SELECT count(*) FROM job_events WHERE job_id = '$j' AND event = 'started' AND reason = 'endpoints $ep2'")" = 1 ]
ok "a started event names the new endpoint" $?
[ "$(sql "SELECT failures || ' ' || platform_faults FROM jobs WHERE id = '$j'")" = "0 1" ]
ok "the power cut is the platform's fault: its attempts counter untouched (failures 0, platform_faults 1)" $?

# ---- billed only while it ran ----------------------------------------------------------
sleep 2
$G cancel job "$j" --tenant acme >/dev/null
wait_sql "SELECT state FROM jobs WHERE id = '$j'" cancelled 100
ok "the tenant stops it" $?
sleep 5
"$B/test/bin/usage_dump" "$GP_NATS_URL" inst 2000 >"$tmp/usage.jsonl" 2>"$tmp/dump.err"
read -r s2 e2 < <(sql "SELECT started_ms, ended_ms FROM attempts WHERE job_id = '$j' AND attempt = 2" | tr '|' ' ')
/usr/bin/python3 - "$tmp/usage.jsonl" "$j" "$started1" "$cut_ms" "$s2" "$e2" >"$tmp/bill.out" 2>&1 <<'PYEOF'
import json, sys
path, job, s1, cut, s2, e2 = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:])
g = {1: 0, 2: 0}
for line in open(path):
    r = json.loads(line)
    if r.get("job_id") == job:
        g[r["attempt"]] = g.get(r["attempt"], 0) + r["gpu_ms"]
# a cancelled attempt runs on until the runtime killed it: the stop grace
# (--stop-grace-ms 1000: httpd, pid 1, ignores SIGTERM) is GPU time it held
ran1, ran2 = cut - s1, e2 - s2 + 1000
print("metered attempt 1: %d ms of %d ms it ran; attempt 2: %d ms of %d ms (its stop grace included)"
      % (g[1], ran1, g[2], ran2))
# one GPU each: never more than it ran (a heartbeat's rounding: 500 ms),
# and most of it (a power cut loses the last reading: at most 2 s)
ok = 0 < g[1] <= ran1 + 500 and g[1] >= ran1 - 2000 and 0 < g[2] <= ran2 + 500 and g[2] >= ran2 - 2000
sys.exit(0 if ok else 1)
PYEOF
st=$?
sed 's/^/# /' "$tmp/bill.out"
ok "metering billed each attempt for the time it ran, nothing for the gap between them" $st

# ---- its own exits: restarted with backoff, counted -----------------------------------------
k=$(submit --kind instance --image "$OCI_REG/test/busybox:1" --command 'sleep 1; exit 0' --gpus 1 \
    --max-attempts 3)
# step 6's backoff: from the second exit on, 2 s (doubling) before the next;
# the job waits with the reason saying so.  Read from the job while it
# waits, not from timestamps: on a loaded machine a placement pass stamps
# its attempts with the time it began, earlier than the failure it acts on.
why=
for _ in $(seq 1 300); do
    r=$(sql "SELECT state || '|' || reason FROM jobs WHERE id = '$k'")
    case "$r" in *"next attempt in 2 s (backoff)"*) [ -z "$why" ] && why=${r#*|} ;; esac
    case "$r" in failed\|*) break ;; esac
    sleep 0.1
done
[ "${r%%|*}" = failed ]
ok "an instance that keeps exiting fails after max_attempts (3) of its own exits" $?
[ "$(sql "SELECT count(*) FROM attempts WHERE job_id = '$k' AND state = 'failed' AND reason LIKE 'exited with status 0 (an instance runs until it is stopped)'")" = 3 ]
ok "each exit, status 0 too, ended its attempt as its own failure (3 attempts)" $?
[ -n "$why" ]
ok "it was restarted with backoff: after its second exit it waited (${why:-never saw 'next attempt in 2 s (backoff)'})" $?

# ---- a drained node: the instance moves after the notice --------------------------------
site_of() { [ "$1" = n1 ] && echo s1 || echo s2; }
net_of() { [ "$1" = n1 ] && echo 10.93.0.0/16 || echo 10.94.0.0/16; }
port_of() { [ "$1" = n1 ] && echo 42100 || echo 43100; }
agent "$(site_of "$node1")" "$node1" "$(net_of "$node1")" "$(port_of "$node1")"
for _ in $(seq 1 100); do
    [ "$($G get nodes -o json 2>/dev/null | grep -o '"state":"healthy"' | wc -l)" -ge 2 ] && break
    sleep 0.1
done
[ "$($G get nodes -o json 2>/dev/null | grep -o '"state":"healthy"' | wc -l)" = 2 ]
ok "the power is back at $site1: $node1 healthy again" $?
! iptables -t nat -S CNI-HOSTPORT-DNAT | grep -qF "gp-$j-1\\\"" && ! ip netns list | grep -q "^gp-$j-1 "
ok "... its agent took down what attempt 1 left: the port mapping, the namespace" $?
m=$(submit --kind instance --image "$OCI_REG/test/busybox:1" --command "$serve" --gpus 1 \
    --port http:8080)
wait_sql "SELECT state FROM jobs WHERE id = '$m'" running 150
nodem=$(sql "SELECT node FROM attempts WHERE job_id = '$m' AND attempt = 1")
$G drain node "$nodem" >/dev/null
d0=$(date +%s%3N)
wait_sql "SELECT count(*) FROM job_events WHERE job_id = '$m' AND event = 'preempting' AND reason LIKE '%notice%'" 1 100
rc_=$?; ok "draining $nodem: the instance is given notice ($(sql "SELECT reason FROM job_events WHERE job_id = '$m' AND event = 'preempting'"))" $rc_
sleep 2
[ "$(sql "SELECT state FROM attempts WHERE job_id = '$m' AND attempt = 1")" = running ]
ok "... and still runs 2 s into its 4 s notice" $?
wait_sql "SELECT state FROM attempts WHERE job_id = '$m' AND attempt = 2" running 300
st=$?
moved_ms=$(( $(date +%s%3N) - d0 ))
n2=$(sql "SELECT node FROM attempts WHERE job_id = '$m' AND attempt = 2")
[ $st = 0 ] && [ "$moved_ms" -ge 4000 ] && [ -n "$n2" ] && [ "$n2" != "$nodem" ]
ok "after the notice it runs on the other node, $n2 ($moved_ms ms after the drain)" $?
[ "$(sql "SELECT state FROM attempts WHERE job_id = '$m' AND attempt = 1")" = preempted ]
ok "... its attempt on $nodem ended preempted" $?
[ "$(sql "SELECT failures FROM jobs WHERE id = '$m'")" = 0 ]
ok "... not charged (failures 0)" $?
$G cancel job "$m" --tenant acme >/dev/null
wait_sql "SELECT state FROM jobs WHERE id = '$m'" cancelled 100
for _ in $(seq 1 100); do grep -q 'image_removed.*reason=image-cache-mb' "$D"/agent-n*.log && break; sleep 0.1; done
grep -h 'image_removed.*reason=image-cache-mb' "$D"/agent-n*.log | head -n 1 | grep -q 'kb=[1-9]'
rc_=$?; ok "the image cache is bounded by size: with image-cache-mb 1 and image-keep 8 the busybox image left once no attempt ran it ($(grep -ho 'image_removed.*' "$D"/agent-n*.log | head -n 1))" $rc_

tap_end
