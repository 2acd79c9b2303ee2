#!/usr/bin/env bash
# checkpoint_test.sh -- checkpoints that outlive the node: a container job
# on two real gridpool-agents at two sites, its checkpoints in the shared
# store (a folder both nodes mount, standing for an object store), reported
# through the agent (container.h: the report protocol); its site loses power
# (the agent and its container killed at once); the job is placed on the
# other site and resumes from the last reported checkpoint: the attempt's
# resume_step, the job's own output and its state file agree.
#   Real registry, scheduler, recovery, runc, skopeo, umoci, docker-registry.
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
[ "$(id -u)" = 0 ] || { echo "1..0 # SKIP containers need root (the agent maps id ranges)"; exit 0; }
on_fail() {
    echo "# jobs:"; sql "SELECT id, state, reason, checkpoint_step FROM jobs" | sed 's/^/#   /'
    echo "# attempts:"; sql "SELECT attempt, node, state, reason, resume_step FROM attempts" | sed 's/^/#   /'
    echo "# agent warnings:"; grep -h 'level=warn' "$D"/agent-*.log | tail -n 6 | sed 's/^/#   /'
}
tap_on_fail=on_fail
chmod 0711 "$D"
STORE=$D/store
mkdir -p "$STORE" && chmod 0711 "$STORE"

oci_image "$B/test-image" && oci_registry && oci_push "$B/test-image" test/busybox:1
ok "a test image in a registry on $OCI_REG" $?
spawn registry "$B/bin/gridpool-registry" --config "$D/gp.env" --http-port 0 --heartbeat-ms 500 \
    --lease-ms 3000 --sweep-ms 200
for _ in $(seq 1 100); do $G health registry >/dev/null 2>&1 && break; sleep 0.1; done
$G create tenant op --kind operator >/dev/null &&
    $G create tenant acme --kind customer --parent op >/dev/null &&
    $G create site s1 --tenant op --region r1 --lat 52.5 --lon 13.4 >/dev/null &&
    $G create site s2 --tenant op --region r1 --lat 48.1 --lon 11.6 >/dev/null &&
    $G create pool p-all --tenant op --scope global >/dev/null
ok "a tenant, two sites and a global pool are created" $?
agent() {     # site node containers' net (two agents on one host: two nets)
    spawn "agent-$2" "$B/bin/gridpool-agent" --config "$D/gp.env" --site "$1" --node "$2" \
        --gpu-backend sim --sim-gpus 1 --sim-model L4 --http-port 0 --heartbeat-ms 500 \
        --stop-grace-ms 1000 --state-dir "$D/state-$2" --runtime-root "$D/runtime-$2" \
        --seccomp-profile "$B/seccomp.json" --insecure-registries "$OCI_REG" \
        --default-memory-mb 128 --default-scratch-mb 8 --checkpoint-shared-root "$STORE" \
        --container-net "$3"
}
agent s1 n1 10.91.0.0/16
agent s2 n2 10.92.0.0/16
for _ in $(seq 1 100); do
    [ "$($G get nodes -o json 2>/dev/null | grep -o '"state":"healthy"' | wc -l)" -ge 2 ] && break
    sleep 0.1
done
spawn sched "$B/bin/gridpool-scheduler" --config "$D/gp.env" --http-port 0 --instance sched \
    --heartbeat-ms 500 --lease-ms 3000 --fence-margin-ms 300 --place-ms 200 \
    --dispatch-timeout-ms 3000 --claim-ms 2000 --reconcile-ms 500 --reconcile-grace-ms 500 \
    --checkpoint-root "$D/ckpt" --checkpoint-shared-root "$STORE"
spawn recovery "$B/bin/gridpool-recovery" --config "$D/gp.env" --http-port 0 --replace-ms 100
for _ in $(seq 1 100); do grep -q 'feed_ready.*nodes=2' "$D/sched.log" && break; sleep 0.1; done
grep -q 'feed_ready.*nodes=2' "$D/sched.log"
ok "two agents at two sites, the scheduler (with a shared checkpoint store) and recovery run" $?

# The job: resumes from $GP_RESUME_STEP; each step writes its state to the
# store, then reports it (a rename into $GP_REPORT_DIR).
job='step=${GP_RESUME_STEP:-0}
echo "resumed from step $step (checkpoint ${GP_RESUME_CHECKPOINT:-none}; state file says $(cat /checkpoint/state 2>/dev/null || echo none))"
while :; do
  step=$((step + 1)); sleep 0.3
  echo $step >/checkpoint/state.tmp && mv /checkpoint/state.tmp /checkpoint/state
  echo "step=$step id=state-$step" >$GP_REPORT_DIR/r.tmp && mv $GP_REPORT_DIR/r.tmp $GP_REPORT_DIR/checkpoint
  echo "at step $step"
done'
j=$(submit --image "$OCI_REG/test/busybox:1" --command "$job" --gpus 1 --checkpoint-uri shared: \
    --max-attempts 1)
wait_sql "SELECT state FROM jobs WHERE id = '$j'" running 150
ok "a job with its checkpoints in the shared store runs" $?
node1=$(sql "SELECT node FROM attempts WHERE job_id = '$j' AND attempt = 1")
site1=$(sql "SELECT site FROM attempts WHERE job_id = '$j' AND attempt = 1")
wait_sql "SELECT checkpoint_step >= 4 FROM jobs WHERE id = '$j'" t 100
rc_=$?; ok "its reported checkpoints reach the job ($(sql "SELECT 'step ' || checkpoint_step || ', id ' || checkpoint_id FROM jobs WHERE id = '$j'"))" $rc_
[ -f "$STORE/acme/$j/state" ] && [ "$(stat -c %a "$STORE/acme/$j")" = 700 ]
ok "its state lives in the store's folder of the job ($STORE/acme/$j, 0700)" $?

# ---- the power cut: the agent and its container at once ------------------------------
kill -9 "$(cat "$D/pids/agent-$node1.pid")"
runc --root "$D/runtime-$node1" kill --all "gp-$j-1" KILL 2>/dev/null
sleep 0.3
cut_step=$(sql "SELECT checkpoint_step FROM jobs WHERE id = '$j'")
ok "site $site1 loses power at checkpoint step $cut_step" 0
# (a boolean cast to text is 'true')
wait_sql "SELECT state || ' ' || (node <> '$node1')::text FROM attempts WHERE job_id = '$j' AND attempt = 2" \
    'running true' 150
st=$?
ok "the job runs again on the other site ($(sql "SELECT site FROM attempts WHERE job_id = '$j' AND attempt = 2"))" $st
[ "$(sql "SELECT failures || ' ' || platform_faults FROM jobs WHERE id = '$j'")" = "0 1" ]
ok "the power cut is the platform's fault: not charged (failures 0, platform_faults 1)" $?
rs=$(sql "SELECT resume_step FROM attempts WHERE job_id = '$j' AND attempt = 2")
[ "$rs" = "$cut_step" ]
ok "attempt 2's resume_step is the last reported checkpoint ($rs)" $?
for _ in $(seq 1 50); do $G logs "$j" --tenant acme --attempt 2 2>/dev/null | grep -q 'at step' && break; sleep 0.2; done
line=$($G logs "$j" --tenant acme --attempt 2 | head -n 1)
said=$(echo "$line" | sed -n 's/.*state file says \([0-9]*\))$/\1/p')
case "$line" in "resumed from step $cut_step (checkpoint state-$cut_step; state file says "*) true ;; *) false ;; esac &&
    [ -n "$said" ] && [ "$said" -ge "$cut_step" ]
ok "its own output: $line (a state past the last report was not reported: not resumed from)" $?
$G logs "$j" --tenant acme --attempt 2 | grep -q "^at step $((cut_step + 1))$"
rc_=$?; ok "... and it goes on from step $((cut_step + 1))" $rc_
sql "SELECT a.attempt, a.resume_step, j.checkpoint_step, j.checkpoint_id FROM jobs j JOIN attempts a ON a.job_id = j.id" | sed 's/^/# /'
$G logs "$j" --tenant acme --attempt 2 | tail -n 2 | sed 's/^/# attempt 2 says: /'
$G cancel job "$j" --tenant acme >/dev/null
wait_sql "SELECT state FROM jobs WHERE id = '$j'" cancelled 100
ok "it is cancelled" $?

# ---- the power comes back: the agent reclaims what its last run left -----------------
ip netns list | grep -q "^gp-$j-1 "
left=$?
site_of() { [ "$1" = n1 ] && echo s1 || echo s2; }
net_of() { [ "$1" = n1 ] && echo 10.91.0.0/16 || echo 10.92.0.0/16; }
agent "$(site_of "$node1")" "$node1" "$(net_of "$node1")"
for _ in $(seq 1 100); do grep -q containers_ready "$D/agent-$node1.log" && break; sleep 0.1; done
[ $left -eq 0 ] && grep -q "container_net_reclaimed id=gp-$j-1" "$D/agent-$node1.log" &&
    ! ip netns list | grep -q "^gp-$j-1 " && [ ! -e "$D/state-$node1/cni/gp-$j-1.json" ]
ok "$node1 starts again: the network its attempt 1 left (namespace, veth, rules) is reclaimed" $?

tap_end
