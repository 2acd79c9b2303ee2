#!/usr/bin/env bash
# jobs_test.sh -- gpctl's job commands against the real scheduler, the
# registry and a small simulated fleet (run by tests/run.sh through
# tests/harness/with-stack.sh: GP_BUILD, GP_NATS_URL, GP_STACK_DIR set).
#
# Checks: submit (flags, -f YAML, -f JSON),
# idempotent resubmission, a typed refusal (exit 1), get jobs (tenant and
# admin lists, filters, JSON), describe job of a job that cannot be placed
# (why it waits), placement and get attempts, watch jobs until SIGINT
# (exit 0), cancel job, summary's jobs and GPU utilization.
# test-tags: pass=san (tests/run.sh)
set -u
GPCTL=$GP_BUILD/bin/gpctl
SCHED=$GP_BUILD/bin/gridpool-scheduler
REGISTRY=$GP_BUILD/bin/gridpool-registry
SIM=$GP_BUILD/bin/gridpool-sim
TENANT=op                       # the simulator's operator tenant: owns every site and pool

# shellcheck source=tests/lib/lib.sh
. "$(dirname "$0")/../../lib/lib.sh"
tap_on_fail=gpctl_on_fail

pyjson() {    # python expression on `d` (the parsed stdout); prints its value
    /usr/bin/python3 -c "import json; d=json.load(open('$tmp/out')); print($1)" 2>>"$tmp/err"
}

# job_state ID: the job's state from gpctl get jobs ID -o json, or "".
job_state() {
    run get jobs "$1" --tenant "$TENANT" -o json
    [ "$rc" -eq 0 ] && pyjson 'd[0]["state"]'
}

wait_state() {  # ID, states regex, tries (x 0.25 s)
    local s
    for _ in $(seq 1 "$3"); do
        s=$(job_state "$1")
        echo "$s" | grep -Eq "^($2)$" && return 0
        sleep 0.25
    done
    return 1
}

# ---- the stack ----------------------------------------------------------------------

spawn registry "$REGISTRY" --config "$GP_STACK_DIR/gp.env" --http-port 0
spawn sim "$SIM" --config "$GP_STACK_DIR/gp.env" --http-port 0 --sites 3 --seed 7 \
    --inventory-out "$tmp/inv.json"
spawn scheduler "$SCHED" --config "$GP_STACK_DIR/gp.env" --http-port 0
for _ in $(seq 1 150); do
    grep -q '^sim: registered' "$GP_STACK_DIR/sim.log" &&
        "$GPCTL" --timeout 500 health scheduler >/dev/null 2>&1 && break
    sleep 0.2
done
expect "the scheduler answers health" 0 '' health scheduler registry
grep -q '^sim: registered' "$GP_STACK_DIR/sim.log"
ok "the simulated fleet registered" $?
sleep 1                                  # a heartbeat or two: nodes healthy

# ---- submit ------------------------------------------------------------------------

expect "submit with flags" 0 '' submit --tenant "$TENANT" --name t1 --command 'sim:run=600s exit=0' \
    --gpus 1 --request-id gpctl-t1
grep -Eq '^job/[A-Za-z0-9_-]+ submitted' "$tmp/out"
ok "submit prints the job id" $?
job1=$(sed -nE 's|^job/([A-Za-z0-9_-]+) submitted.*|\1|p' "$tmp/out")
expect "the same request id again" 0 '' submit --tenant "$TENANT" --name t1 \
    --command 'sim:run=600s exit=0' --gpus 1 --request-id gpctl-t1 -o json
json_check "an idempotent resubmission returns the same job" "d['id'] == '$job1'"

cat >"$tmp/wait.yaml" <<'EOF'
name: never-fits
command: "sim:run=60s"
gpus_per_node: 1
gpu_models: [NO-SUCH-GPU]
EOF
expect "submit -f job.yaml" 0 '' submit --tenant "$TENANT" -f "$tmp/wait.yaml" -o json
json_check "the YAML job is the spec" "d['spec']['gpu_models'] == ['NO-SUCH-GPU'] and d['spec']['name'] == 'never-fits'"
job2=$(pyjson 'd["id"]')
printf '{"command": "sim:run=600s", "gpus_per_node": 1, "priority": 10}\n' >"$tmp/j.json"
expect "submit -f job.json with a flag over it" 0 '' submit --tenant "$TENANT" -f "$tmp/j.json" \
    --priority 20 -o json
json_check "the flag overrides the file" "d['spec']['priority'] == 20"
job3=$(pyjson 'd["id"]')
expect "a spec the scheduler refuses: exit 1, code and field" 1 '^gpctl: [A-Z]+: .*pool' \
    submit --tenant "$TENANT" --command 'sim:run=1s' --gpus 1 --pool no-such-pool

# ---- get, describe ----------------------------------------------------------------------

expect "get jobs --tenant" 0 '' get jobs --tenant "$TENANT"
head -1 "$tmp/out" | grep -q '^ID  *TENANT  *STATE  *GPUS  *PRIO  *AGE  *ATTEMPTS  *SITE/NODE  *REASON'
ok "jobs table header" $?
grep -q "^$job2 " "$tmp/out"
ok "the jobs table lists the job" $?
expect "get jobs (admin list) -o json" 0 '' get jobs -o json
json_check "the admin list has every job" "{'$job1','$job2','$job3'} <= {j['id'] for j in d}"
expect "get jobs --state pending" 0 '' get jobs --tenant "$TENANT" --state pending -o json
json_check "the state filter" "all(j['state'] == 'pending' for j in d) and '$job2' in [j['id'] for j in d]"

wait_state "$job2" pending 20
expect "describe job of a job that cannot be placed" 0 '' describe job "$job2" --tenant "$TENANT"
grep -q '^Why It Waits: .*wrong model' "$tmp/out"
ok "describe says why it waits (wrong model)" $?
grep -q '^Events:' "$tmp/out" && grep -q "#1 submitted" "$tmp/out"
ok "describe lists the events" $?
expect "describe job without --tenant (found in the admin list)" 0 '' describe job "$job2"
expect "describe of an unknown job: exit 1 NOTFOUND" 1 '^gpctl: NOTFOUND: ' \
    describe job no-such-job --tenant "$TENANT"

wait_state "$job1" 'starting|running' 80
ok "the first job is placed" $?
expect "get attempts" 0 '' get attempts --job "$job1" --tenant "$TENANT"
head -1 "$tmp/out" | grep -q '^ATTEMPT  *RANK  *SITE  *NODE  *GPUS  *STATE' &&
    grep -Eq '^1  *0  *s[0-9]+ ' "$tmp/out"
ok "the attempts table has attempt 1 on a site" $?

expect "summary" 0 '' summary
grep -q '^Jobs: ' "$tmp/out" && grep -Eq '^GPU utilization: +[0-9.]+%' "$tmp/out"
ok "summary shows jobs by state and GPU utilization" $?
expect "summary -o json" 0 '' summary -o json
json_check "summary JSON: jobs and utilization" "d['jobs']['total'] >= 3 and d['gpu_utilization']['booked'] >= 1"

# ---- watch, cancel ------------------------------------------------------------------------

"$GPCTL" watch jobs --tenant "$TENANT" >"$tmp/watch.out" 2>"$tmp/watch.err" &
wpid=$!
for _ in $(seq 1 40); do grep -q Watching "$tmp/watch.err" && break; sleep 0.1; done
expect "cancel job" 0 '' cancel job "$job3" --tenant "$TENANT"
grep -q "^job/$job3 cancel requested: " "$tmp/out"
ok "cancel prints the state after" $?
for _ in $(seq 1 40); do grep -q "$job3 #[0-9]* cancelled" "$tmp/watch.out" && break; sleep 0.1; done
kill -INT "$wpid"
wait "$wpid"
wrc=$?
grep -q "$job3 #[0-9]* cancelled -> cancelled" "$tmp/watch.out"
rc=$wrc; ok "watch jobs prints the cancelled event" $?
[ "$wrc" -eq 0 ]
ok "watch jobs exits 0 on Ctrl-C" $?
wait_state "$job3" cancelled 20
ok "the cancelled job is cancelled" $?
expect "cancel job of the others" 0 '' cancel job "$job1" --tenant "$TENANT"
expect "cancel job" 0 '' cancel job "$job2" --tenant "$TENANT"

tap_end
