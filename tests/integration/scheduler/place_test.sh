#!/usr/bin/env bash
# place_test.sh -- placement, dispatch and preemption of
# gridpool-scheduler against real services (run under
# tests/harness/with-stack.sh): gridpool-registry, TWO scheduler instances,
# and a small fleet of gridpool-agent processes on the simulated GPU
# backend ("sim:" commands run in the agent's loop).
#
# Fleet: site s1 with n1..n3 (1 x L4 each); n4 (1 x H100) joins later.
#   1. a job is placed on a node that satisfies it and dispatched; its
#      attempt row has the score breakdown and the latency estimate;
#   2. an H100 job waits with reason counts (model = 3 of 3 nodes), one
#      'pending' event however many passes; placed on n4 once n4 registers;
#   3. a refused dispatch (sim:start_fail, max_attempts 2) -> two attempts
#      failed_to_start on two different nodes, GPUs released, job failed;
#   3b. a node that does not answer (its agent SIGSTOPped): the attempt is
#      retired, its GPU booked, its job 'starting' until the fence opens, then
#      failed_to_start with TIMEOUT, GPU released, the job requeued without
#      using up its one attempt (a platform fault); resumed, the node does
#      not go on running it;
#   4. two instances racing on a batch of jobs never place one job twice;
#   5. with the fleet full of interruptible low-priority work, a
#      high-priority job preempts one victim (checkpoint then stop), the
#      victim's job goes back to pending, the job is placed, no cascade.
# test-tags: pass=san (tests/run.sh)
set -u
B=$GP_BUILD
G="$B/bin/gpctl --timeout 5000"
D=$GP_STACK_DIR
TENANT=op
# shellcheck source=tests/lib/lib.sh
. "$(dirname "$0")/../../lib/lib.sh"

state() { sql "SELECT state FROM jobs WHERE id = '$1'"; }

agent() {     # node, model
    spawn "agent-$1" "$B/bin/gridpool-agent" --config "$D/gp.env" --site s1 --node "$1" \
        --gpu-backend sim --sim-gpus 1 --sim-model "$2" --http-port 0 --heartbeat-ms 500
}

sched() {     # name
    spawn "$1" "$B/bin/gridpool-scheduler" --config "$D/gp.env" --http-port 0 --instance "$1" \
        --place-ms 200 --dispatch-timeout-ms 2000 --preempt-grace-ms 1000 \
        --checkpoint-root "$tmp/ckpt" --log-level debug
}

# ---- the stack --------------------------------------------------------------

spawn registry "$B/bin/gridpool-registry" --config "$D/gp.env" --http-port 0 --heartbeat-ms 500
for _ in $(seq 1 100); do $G health registry >/dev/null 2>&1 && break; sleep 0.1; done
$G create tenant op --kind operator >/dev/null &&
    $G create site s1 --tenant op --region r1 --lat 52.5 --lon 13.4 >/dev/null &&
    $G create pool p-all --tenant op --scope global >/dev/null
ok "tenant, site and a global pool are created" $?
for i in 1 2 3; do agent "n$i" L4; done
for _ in $(seq 1 100); do
    [ "$($G get nodes -o json 2>/dev/null | grep -o '"state":"healthy"' | wc -l)" -ge 3 ] && break
    sleep 0.1
done
sched sched-a
sched sched-b
for _ in $(seq 1 100); do
    grep -q feed_ready "$D/sched-a.log" && grep -q feed_ready "$D/sched-b.log" && break
    sleep 0.1
done
grep -q 'feed_ready.*nodes=3' "$D/sched-a.log" && grep -q 'feed_ready.*nodes=3' "$D/sched-b.log"
ok "both scheduler instances loaded the fleet from the registry (3 nodes)" $?

# ---- 1. placed and dispatched --------------------------------------------------

j1=$(submit --command 'sim:run=600s exit=0' --gpus 1 --model L4)
# the agent's 'started' event (stream ATTEMPTS) may already have made it running
wait_sql "SELECT state IN ('starting','running') FROM attempts WHERE job_id = '$j1' AND attempt = 1" t 50
ok "a job is placed and dispatched (its attempt acked: starting)" $?
row=$(sql "SELECT node, array_to_string(gpus, ','), latency_est_ms IS NOT NULL,
           score IS NOT NULL AND score_latency IS NOT NULL AND score_price IS NOT NULL AND
           score_packing IS NOT NULL AND score_reliability IS NOT NULL AND score_thermal IS NOT NULL,
           score = score_latency + score_price + score_packing + score_reliability + score_thermal
           AND score_latency <= 4000 AND score_price <= 2000 AND score_packing <= 3000
           AND score_reliability <= 3000 AND score_thermal <= 1000 AND score > 0
           FROM attempts WHERE job_id = '$j1'")
echo "$row" | grep -Eq '^n[123]\|0\|t\|t\|t$'
ok "the attempt row: an L4 node, GPU 0, latency estimate, score and its weighted parts ($row)" $?
evs=$(sql "SELECT string_agg(event, ',' ORDER BY seq) FROM job_events WHERE job_id = '$j1'")
echo "$evs" | grep -Eq '^submitted,placed(,started)?$'
ok "events: submitted, placed (and started once its agent reported it): $evs" $?
[ "$(state "$j1")" = starting ] || [ "$(state "$j1")" = running ]
ok "the job is starting" $?

# ---- 2. pending with reasons, then placed when capacity registers -----------------

j2=$(submit --command 'sim:run=600s exit=0' --gpus 1 --model H100)
wait_sql "SELECT waiting FROM jobs WHERE id = '$j2'" 'model=3' 50
ok "an H100 job waits: reason model on 3 nodes" $?
sleep 1.5                                   # several passes of both instances
[ "$(sql "SELECT nodes_considered, state FROM jobs WHERE id = '$j2'")" = '3|pending' ]
ok "... over 3 nodes considered, still pending" $?
[ "$(sql "SELECT count(*) FROM job_events WHERE job_id = '$j2' AND event = 'pending'")" = 1 ]
ok "... one 'pending' event, not one per pass" $?
$G get jobs "$j2" --tenant "$TENANT" -o json >"$tmp/j2.json" 2>/dev/null
/usr/bin/python3 -c "
import json,sys; d=json.load(open('$tmp/j2.json')); d=d[0] if isinstance(d,list) else d
sys.exit(0 if d.get('waiting')==[{'reason':'model','nodes':3}] and d.get('nodes_considered')==3 else 1)"
ok "job get shows waiting [{model, 3}] and nodes_considered 3" $?
agent n4 H100
wait_sql "SELECT node || ':' || (state IN ('starting','running')) FROM attempts WHERE job_id = '$j2'" 'n4:true' 100
ok "the H100 job is placed on n4 once n4 registers" $?

# ---- 3. refused dispatch: failed to start, released, retried, bounded ------------

j3=$(submit --command 'sim:start_fail' --gpus 1 --model L4 --max-attempts 2)
wait_sql "SELECT state FROM jobs WHERE id = '$j3'" failed 100
ok "a job whose start is refused fails after max_attempts" $?
[ "$(sql "SELECT count(*), count(DISTINCT node), bool_and(state = 'failed_to_start')
          FROM attempts WHERE job_id = '$j3'")" = '2|2|t' ]
ok "... two attempts, failed_to_start, on two different nodes (the retry went elsewhere)" $?
[ "$(sql "SELECT string_agg(event, ',' ORDER BY seq) FROM job_events WHERE job_id = '$j3'")" = \
  'submitted,placed,attempt_failed,requeued,placed,attempt_failed,failed' ]
ok "... events placed, attempt_failed, requeued, placed, attempt_failed, failed" $?
held=0
for k in $(redis-cli -p "$GP_REDIS_PORT" --scan --pattern 'gp:*:res:*'); do
    redis-cli -p "$GP_REDIS_PORT" hgetall "$k" | grep -q "^$j3:" && held=1
done
[ "$held" -eq 0 ]
ok "... its GPUs are released in Redis" $?

# ---- 3b. a node that does not answer: retired, then failed past its fence ----------
# No answer does not say the agent did not start it (the RunAttempt waits in
# n5's socket): its GPU stays booked and its job waits until its lease has
# surely run out on n5 (dispatch.c, fence.c), and n5 runs none of it after.

agent n5 A100-80G
n5pid=${pids[-1]}
for _ in $(seq 1 100); do
    $G get nodes n5 -o json 2>/dev/null | grep -q '"state":"healthy"' && break
    sleep 0.1
done
sleep 0.5                                   # the NodeState event reached both instances
kill -STOP "$n5pid"
t0=$(date +%s%N)
j5=$(submit --command 'sim:run=600s' --gpus 1 --model A100-80G --max-attempts 1)
held5() {
    for k in $(redis-cli -p "$GP_REDIS_PORT" --scan --pattern 'gp:*:res:*'); do
        redis-cli -p "$GP_REDIS_PORT" hgetall "$k" | grep -q "^$j5:" && return 0
    done
    return 1
}
retired5() {
    for k in $(redis-cli -p "$GP_REDIS_PORT" --scan --pattern 'gp:*:retired:n5'); do
        [ "$(redis-cli -p "$GP_REDIS_PORT" hexists "$k" "$j5:1")" = 1 ] && return 0
    done
    return 1
}
wait_sql "SELECT count(*) FROM attempts WHERE job_id = '$j5'" 1 50
sleep 4                                     # the 2 s deadline has passed
[ "$(sql "SELECT j.state || ':' || a.node || ':' || a.state FROM jobs j JOIN attempts a
          ON a.job_id = j.id WHERE j.id = '$j5'")" = 'starting:n5:reserved' ] && held5 && retired5
st_=$?
ok "no answer by the deadline: the job still waits 'starting', its GPU stays booked, the attempt is retired on n5" $st_
# no answer is the platform's fault, not the job's (end.h): the job goes
# back to pending with its one attempt not used up
wait_sql "SELECT a.state || ':' || j.failures || ':' || j.platform_faults FROM attempts a
          JOIN jobs j ON j.id = a.job_id WHERE a.job_id = '$j5' AND a.attempt = 1" \
    'failed_to_start:0:1' 60
ok "a dispatch to a node that does not answer ends the attempt as a platform fault: not charged (max_attempts 1, failures 0, platform_faults 1)" $?
t1=$(date +%s%N)
sql "SELECT string_agg(event, ',' ORDER BY seq) FROM job_events WHERE job_id = '$j5'" |
    grep -q '^submitted,placed,attempt_failed,requeued'
ok "... events placed, attempt_failed, requeued: the job waits for a node again" $?
# the fence: 2 s deadline + lease 9 s + margin 1.5 s
[ "$(sql "SELECT node || ':' || state FROM attempts WHERE job_id = '$j5' AND attempt = 1")" = 'n5:failed_to_start' ] &&
    sql "SELECT reason FROM attempts WHERE job_id = '$j5' AND attempt = 1" | grep -q TIMEOUT &&
    [ $(( (t1 - t0) / 1000000 )) -ge 12000 ]
st_=$?
ok "... on n5, failed_to_start with TIMEOUT once the fence opened ($(( (t1 - t0) / 1000000 )) ms, the deadline 2 s + lease 9 s + margin 1.5 s)" $st_
! held5 && ! retired5
ok "... its GPU is released and its retired mark gone" $?
kill -CONT "$n5pid"
# what waited in n5's socket now runs: a start of the attempt is stopped
# (the stop signal, or its first renewal's kill list)
ran5() {
    [ "$(grep -c "attempt_started.*job=$j5 attempt=1 " "$GP_STACK_DIR/agent-n5.log")" = \
      "$(grep -c "attempt_ended.*job=$j5 attempt=1 " "$GP_STACK_DIR/agent-n5.log")" ]
}
sleep 3
for _ in $(seq 1 50); do ran5 && break; sleep 0.2; done
ran5
st_=$?
ok "... n5, resumed, does not go on running attempt 1 ($(grep -c "attempt_started.*job=$j5 attempt=1 " "$GP_STACK_DIR/agent-n5.log") started, $(grep -c "attempt_ended.*job=$j5 attempt=1 " "$GP_STACK_DIR/agent-n5.log") ended)" $st_
$G cancel job "$j5" --tenant "$TENANT" >/dev/null 2>&1     # its next attempt would hold n5

# ---- 4. two instances, a batch of jobs: never placed twice ------------------------

lows=()
for i in 1 2 3 4 5 6; do
    lows+=("$(submit --command 'sim:run=600s' --gpus 1 --model L4 --priority 10 --interruptible)")
done
wait_sql "SELECT count(*) FROM attempts a JOIN jobs j ON j.id = a.job_id
          WHERE j.priority = 10 AND a.state IN ('reserved','starting','running')" 2 100
ok "two low-priority jobs take the two free L4 nodes" $?
sleep 2                                     # both instances keep passing over the rest
[ "$(sql "SELECT count(*) FROM (SELECT job_id FROM job_events WHERE event = 'placed'
          GROUP BY job_id, attempt HAVING count(*) > 1) x")" = 0 ] &&
[ "$(sql "SELECT count(*) FROM (SELECT job_id FROM attempts
          WHERE state IN ('reserved','starting','running') GROUP BY job_id HAVING count(*) > 1) x")" = 0 ] &&
[ "$(sql "SELECT count(*) FROM (SELECT node FROM attempts
          WHERE state IN ('reserved','starting','running') GROUP BY node HAVING count(*) > 1) x")" = 0 ]
ok "no job placed twice, no node holding two attempts for its one GPU" $?
grep -q place_pass "$D/sched-a.log" && grep -q place_pass "$D/sched-b.log"
ok "both instances claimed and placed batches meanwhile (place_pass in both logs)" $?
conflicts=0
for x in sched-a sched-b; do
    port=$(grep -o 'http_port=[0-9]*' "$D/$x.log" | head -1 | cut -d= -f2)
    c=$(curl -s "http://127.0.0.1:$port/metrics" | sed -n 's/^gp_scheduler_placement_conflicts_total //p')
    conflicts=$((conflicts + ${c:-1}))
done
[ "$conflicts" -eq 0 ]
ok "no placement was given back for a lost claim (the claim rule kept the instances apart)" $?

# ---- 5. preemption -----------------------------------------------------------

hi=$(submit --command 'sim:run=600s' --gpus 1 --model L4 --priority 500)
wait_sql "SELECT count(*) FROM job_events WHERE job_id = '$hi' AND event = 'preempting'" 1 50
ok "the high-priority job starts a preemption (event preempting)" $?
victim=$(sql "SELECT job_id || ':' || attempt FROM attempts WHERE preempted_by = '$hi'")
vj=${victim%%:*}
[ -n "$vj" ] && [ "$(sql "SELECT priority, interruptible FROM jobs WHERE id = '$vj'")" = '10|t' ]
ok "the victim ($victim) is an interruptible low-priority attempt" $?
wait_sql "SELECT state FROM jobs WHERE id = '$vj'" pending 60
ok "the victim's job goes back to pending" $?
logs="$D/sched-a.log $D/sched-b.log"
cat $logs | grep "preempt_signal.*job=$vj " | sed -E 's/.*action=([a-z]+).*result=([A-Z]+).*/\1:\2/' \
    >"$tmp/sig"
[ "$(tr '\n' ' ' <"$tmp/sig")" = 'checkpoint:OK stop:OK ' ]
ok "the victim got checkpoint, then stop (both acked by its agent)" $?
vrec="$(sql "SELECT preemptions, attempts_made FROM jobs WHERE id = '$vj'") $(sql "SELECT state FROM attempts WHERE job_id = '$vj'") $(sql "SELECT string_agg(event, ',' ORDER BY seq) FROM job_events WHERE job_id = '$vj'")"
echo "$vrec" | grep -Eq '^1\|1 preempted submitted,(pending,)?placed,(started,)?preempted,(checkpointed,)?requeued(,pending)?$'
ok "the preemption ($vrec) is recorded (preemptions 1, attempt preempted, events preempted, requeued)" $?
wait_sql "SELECT state IN ('starting','running') FROM attempts WHERE job_id = '$hi'" t 60
ok "the high-priority job is placed on the freed GPU" $?
sleep 2
[ "$(sql "SELECT count(*) FROM attempts WHERE preempted_by IS NOT NULL")" = 1 ]
ok "no cascade: one victim only" $?

# ---- 6. a tenant created after the schedulers loaded the inventory -------------

$G cancel job "$j1" --tenant "$TENANT" >/dev/null 2>&1
for j in "$hi" "${lows[@]}"; do $G cancel job "$j" --tenant "$TENANT" >/dev/null 2>&1; done
wait_sql "SELECT count(*) FROM attempts WHERE node IN ('n1','n2','n3')
          AND state IN ('reserved','starting','running')" 0 100
ok "the L4 nodes are free again" $?
$G create tenant late --kind customer --parent op >/dev/null
t0=$(date +%s%N)
jl=$(TENANT=late submit --command 'sim:run=600s' --gpus 1 --model L4)
# the inventory reloads every feed-ms (60 s): the tenant must be learnt sooner
wait_sql "SELECT state IN ('starting','running') FROM attempts WHERE job_id = '$jl'" t 75
st=$?
ok "a job of a tenant created after the inventory load is placed in $(( ($(date +%s%N) - t0) / 1000000 )) ms, not after the next load" $st
$G cancel job "$jl" --tenant late >/dev/null 2>&1
tap_end
