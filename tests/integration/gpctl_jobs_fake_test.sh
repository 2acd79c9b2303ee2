#!/usr/bin/env bash
# gpctl_jobs_fake_test.sh -- gpctl's job commands over the bus against
# tests/helpers/gpctl_fake_scheduler.c (the job API's contract served from
# memory, pages of 2 jobs), the registry and a 3-site simulated fleet (for
# summary's healthy GPUs).  Run by tests/run.sh through with-stack.sh.
# gpctl_jobs_test.sh does the same against the real scheduler once it
# serves the job API.
set -u
GPCTL=$GP_BUILD/bin/gpctl
FAKE=$GP_BUILD/test/bin/gpctl_fake_scheduler
REGISTRY=$GP_BUILD/bin/gridpool-registry
SIM=$GP_BUILD/bin/gridpool-sim
tmp=$(mktemp -d /tmp/gpctl-jobs-fake.XXXXXX)
n=0
failed=0
pids=()

cleanup() {
    for p in "${pids[@]}"; do
        kill "$p" 2>/dev/null && wait "$p" 2>/dev/null
    done
    rm -rf "$tmp"
}
trap cleanup EXIT

ok() {        # description, condition result (0 = pass)
    n=$((n + 1))
    if [ "$2" -eq 0 ]; then
        echo "ok $n - $1"
    else
        echo "not ok $n - $1"
        failed=$((failed + 1))
        echo "# exit $rc; stdout: $(head -c 800 "$tmp/out")"
        echo "# stderr: $(head -c 600 "$tmp/err")"
    fi
}

run() {       # gpctl args...; sets rc, writes $tmp/out and $tmp/err
    "$GPCTL" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
}

expect() {    # description, exit code, stderr regex (may be ""), gpctl args...
    local what=$1 want=$2 re=$3
    shift 3
    run "$@"
    local pass=1
    if [ "$rc" -eq "$want" ] && { [ -z "$re" ] || grep -Eq "$re" "$tmp/err"; }; then
        pass=0
    fi
    ok "$what" $pass
}

json_check() {  # description, python expression on `d` (the parsed stdout)
    /usr/bin/python3 -c "import json,sys; d=json.load(open('$tmp/out')); sys.exit(0 if ($2) else 1)" \
        2>>"$tmp/err"
    ok "$1" $?
}

start() {     # name, program, args...
    local name=$1
    shift
    mkdir -p "$GP_STACK_DIR/pids"
    "$@" >"$GP_STACK_DIR/$name.log" 2>&1 </dev/null &
    pids+=($!)
    echo $! >"$GP_STACK_DIR/pids/$name.pid"
}

# ---- without a scheduler --------------------------------------------------------------

expect "submit without a scheduler: exit 3, names it" 3 \
    'no responders on gp\.api\.acme\.job\.submit: is gridpool-scheduler running' \
    submit --tenant acme --command x --gpus 1
expect "watch with a bad tenant: exit 2" 2 'expected 1 to 63' watch jobs --tenant 'a.b'
expect "get attempts without --job: exit 2" 2 'attempts need --job' get attempts --tenant acme
expect "cancel without a job id: exit 2" 2 'missing job ID' cancel job --tenant acme
expect "get jobs with a bad site: exit 2" 2 'not a site id' get jobs --site 'a b'

# ---- the stack ------------------------------------------------------------------------

start registry "$REGISTRY" --config "$GP_STACK_DIR/gp.env" --http-port 0
start sim "$SIM" --config "$GP_STACK_DIR/gp.env" --http-port 0 --sites 3 --seed 7
start fake "$FAKE" --config "$GP_STACK_DIR/gp.env" --http-port 0
for _ in $(seq 1 150); do
    grep -q '^sim: registered' "$GP_STACK_DIR/sim.log" &&
        "$GPCTL" --timeout 500 get jobs >/dev/null 2>&1 && break
    sleep 0.2
done
grep -q '^sim: registered' "$GP_STACK_DIR/sim.log"
ok "the simulated fleet registered" $?

# ---- submit ----------------------------------------------------------------------------

expect "submit with flags" 0 '' submit --tenant acme --name big --command 'sim:run=600s' \
    --gpus 2 --nodes 2 --env A=1 --priority 300
grep -q '^job/j-0001 submitted (tenant acme, 2x2 GPUs): running$' "$tmp/out"
ok "submit prints the id, GPUs and state" $?
cat >"$tmp/job.yaml" <<'EOF'
name: waits
command: "sim:run=60s"
gpus_per_node: 1
gpu_models: [H100]
client_request_id: req-1
EOF
expect "submit -f job.yaml -o json" 0 '' submit --tenant acme -f "$tmp/job.yaml" -o json
json_check "the Job as JSON: the file's spec" \
    "d['id'] == 'j-0002' and d['state'] == 'pending' and d['spec']['gpu_models'] == ['H100'] and d['spec']['name'] == 'waits'"
expect "the same request id again" 0 '' submit --tenant acme -f "$tmp/job.yaml" -o json
json_check "the same job comes back" "d['id'] == 'j-0002'"
printf '{"command": "sim:run=600s", "gpus_per_node": 1, "priority": 10}\n' >"$tmp/job.json"
expect "submit -f job.json with a flag over it" 0 '' submit --tenant beta -f "$tmp/job.json" \
    --priority 20 -o json
json_check "the flag overrides the file" "d['spec']['priority'] == 20 and d['tenant'] == 'beta'"
printf 'command: x\ngpus_per_node: 1\n' | "$GPCTL" submit --tenant beta -f - >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 0 ] && grep -q '^job/j-0004 submitted' "$tmp/out"
ok "submit -f - reads stdin" $?
expect "a refused spec: exit 1 with the code and the field" 1 \
    '^gpctl: NOTFOUND: pool: no such pool nope$' submit --tenant acme --command x --gpus 1 --pool nope
expect "a bad flag value: exit 2, names the flag" 2 '^gpctl: --gpus: gpus_per_node' \
    submit --tenant acme --command x --gpus 0
printf 'command: x\ngpus_per_node: "1"\n' >"$tmp/bad.yaml"
expect "a bad file: exit 2, names the file and line" 2 'bad.yaml:2: gpus_per_node: expected a number' \
    submit --tenant acme -f "$tmp/bad.yaml"

# ---- get jobs (pages of 2) ----------------------------------------------------------------

expect "get jobs (admin, every page)" 0 '' get jobs
head -1 "$tmp/out" | grep -q '^ID  *TENANT  *STATE  *GPUS  *PRIO  *AGE  *ATTEMPTS  *SITE/NODE  *REASON$'
ok "jobs table header" $?
[ "$(grep -c '^j-000[1-4] ' "$tmp/out")" -eq 4 ]
ok "all 4 jobs over 2 pages" $?
grep -Eq '^j-0001 +acme +running +2x2 +300 ' "$tmp/out"
ok "a job's row: state, nodes x GPUs, priority" $?
grep -Eq '^j-0002 +acme +pending +1x1 +100 .* no node fits$' "$tmp/out"
ok "a pending job's row with its reason" $?
grep -Eq '^j-0001 +acme +running +2x2 +300 +[0-9a-z]+ +1/3 +- ' "$tmp/out"
ok "lists carry no attempts: SITE/NODE is - in the table" $?
expect "get jobs -o wide" 0 '' get jobs -o wide
grep -Eq '^j-0001 +acme +running +2x2 +300 +[0-9a-z]+ +1/3 +s0001/n-fake-1 ' "$tmp/out" &&
    grep -Eq '^j-0002 +acme +pending .* - +no node fits$' "$tmp/out"
ok "-o wide fills SITE/NODE of the latest attempt" $?
expect "get jobs --tenant acme -o json" 0 '' get jobs --tenant acme -o json
json_check "the tenant's jobs only" "[j['id'] for j in d] == ['j-0001', 'j-0002']"
expect "get jobs --state running" 0 '' get jobs --state running -o json
json_check "the state filter" "[j['id'] for j in d] == ['j-0001', 'j-0003', 'j-0004']"
expect "get jobs --site s0001" 0 '' get jobs --site s0001 -o json
json_check "the site filter" "len(d) == 3"
expect "get jobs ID --tenant" 0 '' get jobs j-0002 --tenant acme -o json
json_check "one job" "len(d) == 1 and d[0]['id'] == 'j-0002'"
expect "get jobs --state bogus: exit 2" 2 'states: pending, starting' get jobs --state bogus

# ---- describe, attempts ----------------------------------------------------------------------

expect "describe job (pending)" 0 '' describe job j-0002 --tenant acme
grep -q '^Why It Waits: *2,911 nodes: 2,400 wrong model, 300 not enough free GPUs, 211 outside the latency bound$' "$tmp/out"
ok "describe says why it waits" $?
grep -q '^  GPU Models: *H100$' "$tmp/out" && grep -q '^Events:' "$tmp/out" &&
    grep -q 'acme/j-0002 #1 submitted -> pending' "$tmp/out"
ok "describe shows the spec and the events" $?
expect "describe job without --tenant (found in the admin list)" 0 '' describe job j-0001
grep -Eq '^  1 +1 +s0001 +n-fake-2 +0,1 +running ' "$tmp/out"
ok "describe shows the attempts" $?
expect "describe of an unknown job: exit 1 NOTFOUND" 1 '^gpctl: NOTFOUND: job j-9999' \
    describe job j-9999 --tenant acme
expect "describe of a job of any tenant that does not exist: exit 1" 1 'NOTFOUND' \
    describe job j-9999
expect "describe job -o json" 0 '' describe job j-0001 --tenant acme -o json
json_check "the Job with its attempts" "len(d['attempts']) == 2 and d['attempts'][0]['site'] == 's0001'"
expect "get attempts" 0 '' get attempts --job j-0001 --tenant acme
head -1 "$tmp/out" | grep -q '^ATTEMPT  *RANK  *SITE  *NODE  *GPUS  *STATE  *CREATED  *STARTED  *ENDED  *EXIT  *LATENCY  *SCORE'
ok "attempts table header" $?
grep -Eq '^1 +0 +s0001 +n-fake-1 +0,1 +running .* 7\.5ms +900 +500/400/0/0/0$' "$tmp/out"
ok "an attempt's row: site, node, GPUs, latency, score breakdown" $?

# ---- summary ------------------------------------------------------------------------------------

for _ in $(seq 1 50); do
    "$GPCTL" summary -o json >"$tmp/out" 2>/dev/null &&
        /usr/bin/python3 -c "import json,sys; d=json.load(open('$tmp/out')); sys.exit(0 if d['gpu_utilization']['healthy'] >= 11 else 1)" 2>/dev/null && break
    sleep 0.2
done
expect "summary" 0 '' summary
grep -Eq '^  running +3$' "$tmp/out" && grep -Eq '^  pending +1$' "$tmp/out"
ok "summary counts jobs by state" $?
grep -Eq '^GPU utilization: +[0-9.]+% +\(6 GPUs booked by starting and running jobs / 11 GPUs on healthy nodes\)$' "$tmp/out"
ok "summary: GPU utilization = booked / healthy GPUs" $?
expect "summary -o json" 0 '' summary -o json
json_check "summary JSON: jobs and utilization" \
    "d['jobs']['total'] == 4 and d['jobs']['running'] == 3 and d['gpu_utilization']['booked'] == 6 and abs(d['gpu_utilization']['pct'] - 54.5) < 0.1"

# ---- watch, cancel --------------------------------------------------------------------------------

"$GPCTL" watch jobs --tenant acme >"$tmp/watch.out" 2>"$tmp/watch.err" &
wpid=$!
"$GPCTL" watch jobs --job j-0003 -o json >"$tmp/watch2.out" 2>"$tmp/watch2.err" &
wpid2=$!
for _ in $(seq 1 50); do
    grep -q Watching "$tmp/watch.err" && grep -q Watching "$tmp/watch2.err" && break
    sleep 0.1
done
grep -q '^Watching gp\.events\.acme\.job\.\*\.\* ' "$tmp/watch.err" &&
    grep -q '^Watching gp\.events\.\*\.job\.j-0003\.\* ' "$tmp/watch2.err"
rc=$?; ok "watch subscribes to the jobEvent pattern" $rc
expect "cancel job" 0 '' cancel job j-0002 --tenant acme
grep -q '^job/j-0002 cancel requested: cancelled - cancelled by the tenant$' "$tmp/out"
ok "cancel prints the state after" $?
expect "cancel job of another tenant" 0 '' cancel job j-0003 --tenant beta
expect "cancel of an unknown job: exit 1" 1 '^gpctl: NOTFOUND: ' cancel job j-9999 --tenant acme
for _ in $(seq 1 50); do
    grep -q 'j-0002 #2 cancelled' "$tmp/watch.out" && grep -q 'cancelled' "$tmp/watch2.out" && break
    sleep 0.1
done
kill -INT "$wpid" "$wpid2"
wait "$wpid"; wrc=$?
wait "$wpid2"; wrc2=$?
grep -Eq '^[0-9T:.-]+Z acme/j-0002 #2 cancelled -> cancelled reason="cancelled by the tenant"$' \
    "$tmp/watch.out" && ! grep -q 'j-0003' "$tmp/watch.out"
rc=$?; ok "watch --tenant prints that tenant's events, one line each" $rc
/usr/bin/python3 -c "
import json,sys
ev=[json.loads(l) for l in open('$tmp/watch2.out')]
sys.exit(0 if len(ev) == 1 and ev[0]['job_id'] == 'j-0003' and ev[0]['event'] == 'cancelled' else 1)"
rc=$?; ok "watch --job -o json prints that job's events as JSON lines" $rc
[ "$wrc" -eq 0 ] && [ "$wrc2" -eq 0 ]
rc=$?; ok "watch exits 0 on Ctrl-C" $rc

echo "1..$n"
[ "$failed" -eq 0 ]
