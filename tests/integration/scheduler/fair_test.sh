#!/usr/bin/env bash
# fair_test.sh -- fair share and preemption with resume at fleet
# level (issue 7): gridpool-registry, one gridpool-scheduler and a
# simulated fleet (gridpool-sim --sites 4 --seed 7: 10 nodes, 35 GPUs; the
# L4s are site s0004's 3 nodes x 8 GPUs, the RTX 4090s site s0001's 3 nodes
# x 2 GPUs; jobs name the model, so each part has its own nodes: a pool
# cannot be named before the fleet's pools are loaded), with the
# simulator's ground truth (--truth).
# Run under tests/harness/with-stack.sh.
#
#   1. Fairness. Tenants ta and tb (equal weight, the default) each submit
#      10 x the capacity of the L4 nodes (240 one-GPU jobs of 10 s), all
#      of ta's before any of tb's and before the fleet is up, so first come
#      first served would give ta the L4s for the whole window. Over a
#      window of WINDOW_S from the first start, the GPU-seconds each
#      received (attempts table, and the simulator's truth) are within 10 %
#      of each other, the L4s was kept busy, and both still had work
#      waiting at the end (each asked for more than it got throughout).
#      Contrapositive: a light tenant td (no usage) submitting mid-window is
#      placed ahead of the heavy tenants' 300-odd older jobs (within two
#      job lengths), where first come first served would make it wait
#      minutes.
#   2. Preemption with resume (concurrently, on the RTX 4090s, tenant tc): six
#      interruptible priority-100 jobs (sim:run=20s ckpt=2s) fill the 6 GPUs
#      (priority 100, the heavy tenants' priority: a pass claims the
#      place-batch pending jobs of highest priority, so lower-priority jobs
#      are not claimed at all while 480 L4 jobs wait, even for idle nodes);
#      a priority-500 job asking for a whole 2-GPU node preempts the two
#      attempts on one node (event preempting, preemptions recorded), the
#      victims get checkpoint then stop, go back to pending, are placed
#      again with RunAttempt.resume_ms = their checkpointed progress (> 0,
#      seen in the agent's attempt_started line) and finish having done
#      run= of work in all: the truth's second attempt held the GPUs for
#      run - resume_ms and reports progress run=; no cascade.
# test-tags: pass=normal (tests/run.sh)
set -u
B=$GP_BUILD
D=$GP_STACK_DIR
G="$B/bin/gpctl --timeout 20000"
tmp=$(mktemp -d /tmp/sched-fair-test.XXXXXX)
WINDOW_S=${GP_FAIR_WINDOW_S:-75}
JOBS=240              # per heavy tenant: 10 x the 24 L4 GPUs
RUN_S=10
GRACE_MS=1500
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

ok() {        # description, status (0 = pass)
    n=$((n + 1))
    if [ "$2" -eq 0 ]; then
        echo "ok $n - $1"
    else
        echo "not ok $n - $1"
        failed=$((failed + 1))
    fi
}
py() { /usr/bin/python3 -c "$@"; }
sql() { psql "$GP_PG_CONNINFO" -XAtq -c "$1" 2>>"$tmp/psql.err"; }
wall_ms() { date +%s%3N; }
wait_sql() {  # query, expected, tries (x 0.2 s)
    for _ in $(seq 1 "$3"); do
        [ "$(sql "$1")" = "$2" ] && return 0
        sleep 0.2
    done
    return 1
}
submit() {    # tenant, args... -> job id
    local t=$1
    shift
    $G submit --tenant "$t" -o json "$@" 2>>"$tmp/gpctl.err" |
        py 'import json,sys; print(json.load(sys.stdin)["id"])'
}
t_start=$(date +%s)

# ---- the stack: registry, scheduler, tenants; the fleet comes later -----------

# Default heartbeat, staleness and leases, and a lenient dispatch deadline:
# on a loaded machine a tight one turns a slow answer into failed starts
# and stale nodes, which is not what this test is about.
"$B/bin/gridpool-registry" --config "$D/gp.env" --http-port 0 >"$D/registry.log" 2>&1 </dev/null &
pids+=($!)
for _ in $(seq 1 100); do $G health registry >/dev/null 2>&1 && break; sleep 0.1; done
"$B/bin/gridpool-scheduler" --config "$D/gp.env" --http-port 0 \
    --place-ms 200 --dispatch-timeout-ms 10000 --preempt-grace-ms $GRACE_MS \
    --checkpoint-root "$tmp/ckpt" >"$D/scheduler.log" 2>&1 </dev/null &
pids+=($!)
$G create tenant op --kind operator >/dev/null &&
    for t in ta tb tc td; do $G create tenant $t --kind customer --parent op >/dev/null || exit 1; done
ok "registry up; tenants op (operator), ta, tb, tc, td (customers of op) created" $?
for _ in $(seq 1 100); do $G health scheduler >/dev/null 2>&1 && break; sleep 0.1; done

# All of ta's jobs, then all of tb's, before the fleet exists (the scheduler
# claims nothing while it knows no node), so ta's are all older.
subs() {      # tenant -> accepted count: gridpool-sim's workload generator
    # alone (one process, asynchronous submissions through gp.api): every job
    # one GPU, an L4, priority 100, not interruptible, sim:run=RUN_S, exit 0
    cat >"$tmp/wl-$1.conf" <<EOF
name=fair-$1
seed=1
jobs=$JOBS
rate=2000
inflight=64
timeout_ms=20000
tenants=$1:1
gpus=1:1
nodes=1:1
models=L4:1
origin=0
interruptible=0
priority=100:1
run_s=$RUN_S-$RUN_S
fail=0
exit_nonzero=0
forever=0
hang=0
start_fail=0
max_price=0
load=80-80
ids_out=$tmp/ids-$1
EOF
    "$B/bin/gridpool-sim" --config "$D/gp.env" --http-port 0 --sites 4 --seed 7 --no-fleet \
        --workload "$tmp/wl-$1.conf" >"$D/wl-$1.log" 2>&1 </dev/null
    wc -l <"$tmp/ids-$1" 2>/dev/null || echo 0
}
na=$(subs ta)
nb=$(subs tb)
[ "$na" = $JOBS ] && [ "$nb" = $JOBS ] &&
    [ "$(sql "SELECT max(created_ms) FILTER (WHERE tenant = 'ta') < min(created_ms) FILTER (WHERE tenant = 'tb')
              FROM jobs")" = t ]
echo "# submitted in $(($(date +%s) - t_start)) s since the start"
ok "ta then tb each submitted $JOBS one-GPU ${RUN_S} s L4 jobs, every ta job older ($na, $nb accepted)" $?

"$B/bin/gridpool-sim" --config "$D/gp.env" --http-port 0 --sites 4 --seed 7 --spread-ms 500 \
    --truth "$D/truth.jsonl" --inventory-out "$D/inv.json" >"$D/sim.log" 2>&1 </dev/null &
simpid=$!
pids+=($simpid)
for _ in $(seq 1 300); do grep -q '^sim: registered' "$D/sim.log" && break; sleep 0.1; done
$G get nodes -o json >"$D/nodes.json" 2>>"$tmp/gpctl.err"
py "
import json, sys, collections
g = collections.Counter()
for x in json.load(open('$D/nodes.json')): g[(x['site'], x['gpus'][0]['model'])] += len(x['gpus'])
print('# GPUs per site and model:', dict(g))
sys.exit(not (sum(v for k, v in g.items() if k[1] == 'L4') == g[('s0004', 'L4')] == 24 and
              sum(v for k, v in g.items() if k[1] == 'RTX 4090') == g[('s0001', 'RTX 4090')] == 6))"
rc=$?   # (before the message: a command substitution in it would reset \$?)
ok "the fleet registered ($(grep '^sim: registered' "$D/sim.log")); L4: s0004's 24 GPUs only, RTX 4090: s0001's 6 only" $rc

# ---- 2. preemption with resume, on the RTX 4090s (during the fairness window) ---

lows=()
for i in 1 2 3 4 5 6; do
    lows+=("$(submit tc --command 'sim:run=20s ckpt=2s' --gpus 1 --model 'RTX 4090' --priority 100 --interruptible)")
done
inlows="'$(echo "${lows[@]}" | sed "s/ /','/g")'"
# every low job runs and has checkpointed once (so a victim has progress to resume)
wait_sql "SELECT count(*) FROM jobs WHERE id IN ($inlows) AND state = 'running' AND progress_ms > 0" 6 100
ok "six interruptible priority-100 checkpointing jobs fill the RTX 4090s and checkpoint" $?
hi=$(submit tc --command 'sim:run=8s exit=0' --gpus 2 --model 'RTX 4090' --priority 500)
wait_sql "SELECT count(*) FROM job_events WHERE job_id = '$hi' AND event = 'preempting'" 1 50
ok "a priority-500 job asking for a whole 2-GPU node starts a preemption (event preempting)" $?
victims=$(sql "SELECT string_agg(job_id, ' ' ORDER BY job_id) FROM attempts WHERE preempted_by = '$hi'")
nv=$(echo $victims | wc -w)
inv="'$(echo $victims | sed "s/ /','/g")'"
vrow=$(sql "SELECT count(DISTINCT a.node) || ':' || bool_and(j.interruptible AND j.priority = 100)
            FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE a.preempted_by = '$hi'")
[ "$nv" = 2 ] && [ "$vrow" = '1:true' ]
ok "its victims are the two interruptible priority-100 attempts on one node ($victims; nodes:all low = $vrow)" $?
# the victims' jobs go back to pending (or are already placed again)
wait_sql "SELECT count(*) FROM job_events WHERE job_id IN ($inv) AND event = 'requeued'" 2 75
ok "both victims were requeued" $?
for v in $victims; do
    grep "preempt_signal.*job=$v " "$D/scheduler.log" |
        sed -E 's/.*action=([a-z]+).*result=([A-Z]+).*/\1:\2/' | tr '\n' ' '
    echo
done >"$tmp/sig"
[ "$nv" = 2 ] && [ "$(sort -u "$tmp/sig")" = 'checkpoint:OK stop:OK ' ]
rc=$?
ok "each victim got checkpoint, then stop, both acked ($(tr '\n' '|' <"$tmp/sig"))" $rc
rec=$(sql "SELECT string_agg(j.preemptions || '/' || a.state, ' ') FROM jobs j
           JOIN attempts a ON a.job_id = j.id AND a.attempt = 1 WHERE j.id IN ($inv)")
[ "$rec" = '1/preempted 1/preempted' ]
ok "the preemptions are recorded (job preemptions 1, first attempt preempted: $rec)" $?
wait_sql "SELECT state IN ('starting','running','succeeded') FROM attempts WHERE job_id = '$hi'" t 75
ok "the high-priority job is placed on the freed node" $?
# The victims run again once the RTX 4090s have room (the high job or the other
# low jobs end) and finish.
wait_sql "SELECT count(*) FROM jobs WHERE id IN ($inv) AND state = 'succeeded' AND attempts_made = 2" 2 250
ok "both victims were placed again (attempt 2) and succeeded" $?
# resume_ms of attempt 2 (RunAttempt, as the agent logged it) = the
# progress checkpointed by attempt 1 (the scheduler's row), > 0
res=""
for v in $victims; do
    r=$(grep -o "attempt_started .*job=$v attempt=2 .*resume_ms=[0-9]*" "$D/sim.log" | grep -o 'resume_ms=[0-9]*' | cut -d= -f2)
    c=$(sql "SELECT progress_ms FROM attempts WHERE job_id = '$v' AND attempt = 1")
    res="$res $v:resume=${r:-none}:ckpt=${c:-none}"
done
echo "$res" | py "
import sys
xs = sys.stdin.read().split()
ok = len(xs) == 2
for x in xs:
    j, r, c = x.split(':'); r = r.split('=')[1]; c = c.split('=')[1]
    ok = ok and r.isdigit() and r == c and int(r) > 0
sys.exit(not ok)"
ok "attempt 2 was dispatched with resume_ms = attempt 1's checkpointed progress, > 0 ($res )" $?

# ---- 1b. a light tenant mid-window ------------------------------------------------

sleep 5                # the heavy tenants' usage is read (usage-ms) and large
tl=$(wall_ms)
light=()
for i in 1 2 3 4; do
    light+=("$(submit td --command "sim:run=${RUN_S}s exit=0" --gpus 1 --model L4)")
done
inl="'$(echo "${light[@]}" | sed "s/ /','/g")'"
older=$(sql "SELECT count(*) FROM jobs WHERE tenant IN ('ta','tb') AND state = 'pending'")
wait_sql "SELECT count(*) FROM attempts WHERE job_id IN ($inl)" 4 $((RUN_S * 10 + 25))
rc=$?
took=$(py "print(round(($(sql "SELECT coalesce(max(created_ms), 0) FROM attempts WHERE job_id IN ($inl)") - $tl) / 1000, 1))")
# The L4 jobs started together and end in waves a job length apart, so the
# light jobs wait up to one job length for GPUs; first come first served
# would make them wait for the older jobs: $older / 24 GPUs x RUN_S, minutes.
[ $rc -eq 0 ] && py "import sys; sys.exit(not ($took <= 2 * $RUN_S and $older >= 100))"
rc=$?
ok "a light tenant's 4 jobs are placed within two job lengths ($took s) ahead of $older older pending jobs of ta and tb" $rc

# ---- 1. fairness over the window ------------------------------------------------------

t0=$(sql "SELECT min(a.started_ms) FROM attempts a JOIN jobs j ON j.id = a.job_id
          WHERE j.tenant IN ('ta','tb')")
t1=$((t0 + WINDOW_S * 1000))
while [ "$(wall_ms)" -lt $((t1 + 500)) ]; do sleep 0.5; done
left=$(sql "SELECT string_agg(c::text, ' ' ORDER BY tenant) FROM (SELECT tenant, count(*) c FROM jobs
            WHERE tenant IN ('ta','tb') AND state = 'pending' GROUP BY tenant) x")
echo "# attempts of ta and tb by state: $(sql "SELECT string_agg(state || '=' || c, ' ') FROM (SELECT a.state, count(*) c
    FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE j.tenant IN ('ta','tb') GROUP BY 1 ORDER BY 1) x")"
kill -TERM "$simpid"             # still running attempts get their sim_stop truth line
for _ in $(seq 1 100); do kill -0 "$simpid" 2>/dev/null || break; sleep 0.1; done
sql "SELECT j.tenant, sum(cardinality(a.gpus) * greatest(0, least(coalesce(a.ended_ms, $t1), $t1)
            - greatest(a.started_ms, $t0))) / 1000.0
     FROM attempts a JOIN jobs j ON j.id = a.job_id
     WHERE j.tenant IN ('ta','tb') AND a.started_ms IS NOT NULL GROUP BY j.tenant ORDER BY 1" >"$tmp/db"
sql "SELECT id || ' ' || tenant FROM jobs" >"$tmp/tenants"
py "
import json
ten = dict(l.split() for l in open('$tmp/tenants'))
db = dict((l.split('|')[0], float(l.split('|')[1])) for l in open('$tmp/db'))
tr = {'ta': 0.0, 'tb': 0.0}
for l in open('$D/truth.jsonl'):
    x = json.loads(l); t = ten.get(x['job_id'])
    if t in tr:
        tr[t] += x['gpus'] * max(0, min(x['end_ms'], $t1) - max(x['start_ms'], $t0)) / 1000.0
a, b = db.get('ta', 0.0), db.get('tb', 0.0)
ta_, tb_ = tr['ta'], tr['tb']
print(f'# fairness: window {$WINDOW_S} s, 24 L4 GPUs; attempts table ta {a:.0f} tb {b:.0f} GPU-s, ratio {a / b if b else 0:.3f}; '
      f'truth ta {ta_:.0f} tb {tb_:.0f} GPU-s, ratio {ta_ / tb_ if tb_ else 0:.3f}; pending at the end ta tb: $left')
json.dump({'db': [a, b], 'truth': [ta_, tb_]}, open('$tmp/fair.json', 'w'))"
fair() {      # source
    py "
import json, sys
a, b = json.load(open('$tmp/fair.json'))['$1']
sys.exit(not (a > 0 and b > 0 and abs(a - b) <= 0.10 * max(a, b)))"
}
fair db
ok "fair share: ta and tb received GPU-seconds within 10 % of each other over the window (attempts table)" $?
fair truth
ok "... and by the simulator's ground truth" $?
py "
import json, sys
d = json.load(open('$tmp/fair.json'))
(a, b), (x, y) = d['db'], d['truth']
# the L4s were busy: both tenants together used >= 85 % of 24 GPUs x the window
# (less the light tenant's 4 x ${RUN_S} s), and the two accounts agree
busy = (a + b) / (24 * $WINDOW_S - 4 * $RUN_S)
print(f'# busy {busy:.3f}, attempts table / truth {(a + b) / (x + y):.3f}')
sys.exit(not (busy >= 0.85 and abs((a + b) - (x + y)) <= 0.03 * (x + y)))"
ok "the L4s were kept busy over the window and the attempts table agrees with the truth" $?
echo "$left" | py "import sys; v = sys.stdin.read().split(); sys.exit(not (len(v) == 2 and min(map(int, v)) >= 24))"
ok "both tenants still had more than the L4s' worth of jobs pending at the end ($left)" $?

# ---- 2 (end). the victims' ground truth, and no cascade -------------------------------

for v in $victims; do echo "$v"; done >"$tmp/victims"
py "
import json, sys
vs = open('$tmp/victims').read().split()
run_ms, grace = 20000, $GRACE_MS
att = {}
ok = len(vs) == 2
for l in open('$D/truth.jsonl'):
    x = json.loads(l)
    if x['job_id'] in vs: att[(x['job_id'], x['attempt'])] = x
for v in vs:
    a1, a2 = att.get((v, 1)), att.get((v, 2))
    if not a1 or not a2: ok = False; print('# missing truth for', v); continue
    resume = a2['progress_ms'] - a2['held_ms']      # where attempt 2 started from
    print(f\"# resume: {v} attempt 1 held {a1['held_ms']} ms, progress {a1['progress_ms']} ms ({a1['end']}); \"
          f\"attempt 2 held {a2['held_ms']} ms from {resume} ms to {a2['progress_ms']} ms ({a2['end']} {a2['exit_code']}); \"
          f\"work done {resume + a2['held_ms']} of run {run_ms}, lost {a1['progress_ms'] - resume} ms\")
    ok = ok and a2['progress_ms'] == run_ms and a2['end'] == 'exited' and a2['exit_code'] == 0
    ok = ok and 0 < resume <= a1['progress_ms'] <= resume + grace + 1000
    ok = ok and abs(a2['held_ms'] - (run_ms - resume)) <= 500
    # all the GPU time it took: run= plus only what was lost after the checkpoint
    ok = ok and a1['held_ms'] + a2['held_ms'] <= run_ms + grace + 1500
sys.exit(not ok)"
ok "truth: each victim's attempt 2 ran only run - resume_ms and ended at progress run=20 s (nothing redone from zero)" $?
[ "$(sql "SELECT count(*) FROM attempts WHERE preempted_by IS NOT NULL")" = 2 ] &&
    [ "$(sql "SELECT string_agg(DISTINCT job_id, ',') FROM job_events WHERE event = 'preempting'")" = "$hi" ] &&
    [ "$(sql "SELECT count(*) FROM jobs WHERE preemptions > 0")" = 2 ]
ok "no cascade: only the high-priority job preempted, two victims, none preempted twice" $?

grep -q 'level=error' "$D/scheduler.log"
[ $? -ne 0 ]
ok "the scheduler logged no errors" $?
if [ "$failed" -ne 0 ]; then    # what to look at: the stack's folder goes with the stack
    sort "$tmp/gpctl.err" "$tmp/psql.err" 2>/dev/null | uniq -c | sort -rn | head -5 | sed 's/^/# /'
    keep=$(mktemp -d /tmp/sched-fair-failed.XXXXXX)
    cp "$D"/*.log "$D"/*.json "$D"/truth.jsonl "$keep"/ 2>/dev/null
    pg_dump "$GP_PG_CONNINFO" -t jobs -t attempts -t job_events -a >"$keep/db.sql" 2>/dev/null
    echo "# logs kept in $keep"
fi
echo "# duration $(($(date +%s) - t_start)) s"
echo "1..$n"
[ "$failed" -eq 0 ]
