#!/usr/bin/env bash
# end_test.sh -- the one retry rule on every path that ends an
# attempt (services/scheduler/end.h), against real services (run under
# tests/harness/with-stack.sh): gridpool-registry, gridpool-scheduler,
# gridpool-recovery and gridpool-agent processes on the simulated backend.
#
# Jobs ask max_attempts 1 (2 for the first), so a charged end fails the
# job and one that is not charged puts it back to pending.  The paths run
# at once on their own nodes (six L4s, an A100, an H100), then each is
# checked:
#   1. the job's own failure (exit 3, max_attempts 2): charged, failed after 2;
#   2. a failed start of the job's own (sim:start_fail): charged, failed;
#   3. a failed start of the platform's (a node that never answers): not
#      charged, pending again, then run on that node once it answers;
#   4. a stale attempt (never dispatched): not charged, pending again; a
#      second one past max-platform-retries 1 fails the job;
#   5. a cancel: the job ends cancelled, nothing charged;
#   6. a node lost (kill -9 of its agent): not charged, run elsewhere;
#   7. a preempted attempt (a higher-priority job): not charged, pending again;
#   8. the max run time: the job fails, no retry.
# test-tags: pass=san (tests/run.sh)
set -u
B=$GP_BUILD
G="$B/bin/gpctl --timeout 5000"
D=$GP_STACK_DIR
TENANT=op
# shellcheck source=tests/lib/lib.sh
. "$(dirname "$0")/../../lib/lib.sh"

on_fail() {
    echo "# scheduler warnings:"; grep -h 'level=warn' "$D/sched.log" | tail -n 8 | sed 's/^/#   /'
}
tap_on_fail=on_fail

# "state failures platform_faults" of a job
counts() { sql "SELECT state || ' ' || failures || ' ' || platform_faults FROM jobs WHERE id = '$1'"; }
events() { sql "SELECT string_agg(event, ',' ORDER BY seq) FROM job_events WHERE job_id = '$1'"; }
agent() {     # node, model
    spawn "agent-$1" "$B/bin/gridpool-agent" --config "$D/gp.env" --site s1 --node "$1" \
        --gpu-backend sim --sim-gpus 1 --sim-model "$2" --http-port 0 --heartbeat-ms 500
}

# ---- the stack: a 3 s lease, so fences open within seconds ------------------

spawn registry "$B/bin/gridpool-registry" --config "$D/gp.env" --http-port 0 --heartbeat-ms 500 \
    --lease-ms 3000 --sweep-ms 200
for _ in $(seq 1 100); do $G health registry >/dev/null 2>&1 && break; sleep 0.1; done
$G create tenant op --kind operator >/dev/null &&
    $G create site s1 --tenant op --region r1 --lat 52.5 --lon 13.4 >/dev/null &&
    $G create pool p-all --tenant op --scope global >/dev/null
ok "tenant, site and a global pool are created" $?
for i in 1 2 3 6 7 8; do agent "n$i" L4; done
agent n4 A100-80G
n4pid=${pids[-1]}
agent n5 H100
for _ in $(seq 1 100); do
    [ "$($G get nodes -o json 2>/dev/null | grep -o '"state":"healthy"' | wc -l)" -ge 8 ] && break
    sleep 0.1
done
spawn sched "$B/bin/gridpool-scheduler" --config "$D/gp.env" --http-port 0 --instance sched \
    --heartbeat-ms 500 --lease-ms 3000 --fence-margin-ms 300 --place-ms 200 \
    --dispatch-timeout-ms 1500 --claim-ms 2000 --preempt-grace-ms 500 --maxrun-ms 300 \
    --reconcile-ms 500 --reconcile-grace-ms 500 --max-platform-retries 1 \
    --checkpoint-root "$tmp/ckpt" --log-level debug
spawn recovery "$B/bin/gridpool-recovery" --config "$D/gp.env" --http-port 0 --replace-ms 100
for _ in $(seq 1 100); do grep -q 'feed_ready.*nodes=8' "$D/sched.log" && break; sleep 0.1; done
grep -q 'feed_ready.*nodes=8' "$D/sched.log"
ok "the scheduler loaded the fleet (8 nodes)" $?

# ---- every path at once (the L4s take 1, 2, 5, 6 and 8; n4 3, n5 7) --------------

j1=$(submit --command 'sim:run=200ms exit=3' --gpus 1 --model L4 --max-attempts 2)
j2=$(submit --command 'sim:start_fail' --gpus 1 --model L4 --max-attempts 1)
j5=$(submit --command 'sim:run=600s' --gpus 1 --model L4 --max-attempts 1)
j6=$(submit --command 'sim:run=600s' --gpus 1 --model L4 --max-attempts 1)
j8=$(submit --command 'sim:run=600s' --gpus 1 --model L4 --max-attempts 3 --max-run 1)
j4=$(submit --command 'sim:run=600s' --gpus 1 --model 'RTX 4090' --max-attempts 1)
kill -STOP "$n4pid"
j3=$(submit --command 'sim:run=500ms exit=0' --gpus 1 --model A100-80G --max-attempts 1)
j7=$(submit --command 'sim:run=600s ckpt=200ms' --gpus 1 --model H100 --max-attempts 1 \
     --priority 10 --interruptible)
# 4: an attempt reserved on n1 a minute ago and never sent (its placer died)
plant() {     # attempt
    sql "UPDATE jobs SET state = 'starting', attempts_made = $1, claimed_by = NULL,
           claim_until = NULL, waiting = NULL WHERE id = '$j4' AND state = 'pending';
         INSERT INTO attempts (job_id, attempt, rank, site, node, gpus, state, created_ms)
           VALUES ('$j4', $1, 0, 's1', 'n1', '{0}', 'reserved',
                   (extract(epoch FROM now()) * 1000)::bigint - 60000)" >/dev/null
}
wait_sql "SELECT waiting IS NOT NULL FROM jobs WHERE id = '$j4'" t 50
plant 1
# 7: a higher-priority job for n5 once the interruptible one runs there
wait_sql "SELECT state FROM jobs WHERE id = '$j7'" running 100
j7h=$(submit --command 'sim:run=600s' --gpus 1 --model H100 --priority 500)
# 5: cancelled once it runs; 6: its node killed once it runs
wait_sql "SELECT state FROM jobs WHERE id = '$j5'" running 100
$G cancel job "$j5" --tenant "$TENANT" >/dev/null 2>&1
wait_sql "SELECT state FROM jobs WHERE id = '$j6'" running 100
node6=$(sql "SELECT node FROM attempts WHERE job_id = '$j6' AND attempt = 1")
kill -9 "$(cat "$D/pids/agent-$node6.pid")"

# ---- 1. the job's own failure: charged ---------------------------------------

wait_sql "SELECT state FROM jobs WHERE id = '$j1'" failed 100
ok "1. exit 3 twice with max_attempts 2: the job failed" $?
[ "$(counts "$j1")" = 'failed 2 0' ] &&
    [ "$(events "$j1")" = 'submitted,placed,started,attempt_failed,requeued,placed,started,attempt_failed,failed' ] &&
    sql "SELECT reason FROM jobs WHERE id = '$j1'" | grep -q 'no attempts left'
rc_=$?; ok "... each failure charged (failures 2, platform_faults 0; $(events "$j1"))" $rc_

# ---- 2. a failed start of the job's own: charged ------------------------------

wait_sql "SELECT state FROM jobs WHERE id = '$j2'" failed 100
ok "2. a command that cannot start, max_attempts 1: the job failed" $?
[ "$(counts "$j2")" = 'failed 1 0' ] &&
    [ "$(sql "SELECT count(*) || ' ' || min(state) FROM attempts WHERE job_id = '$j2'")" = '1 failed_to_start' ]
rc_=$?; ok "... charged: one attempt, failed_to_start, failures 1 ($(counts "$j2"))" $rc_

# ---- 3. a failed start of the platform's: not charged ---------------------------

# whichever ends it first: the dispatch's fence (failed_to_start) or the
# registry declaring the stopped n4 lost (recovery's replace: lost)
wait_sql "SELECT (a.state IN ('failed_to_start','lost')) || ' ' || j.failures || ' ' ||
          j.platform_faults FROM attempts a JOIN jobs j ON j.id = a.job_id
          WHERE a.job_id = '$j3' AND a.attempt = 1" 'true 0 1' 100
rc_=$?; ok "3. n4 never answers the dispatch: attempt 1 $(sql "SELECT state FROM attempts WHERE job_id = '$j3' AND attempt = 1"), not charged (failures 0, platform_faults 1)" $rc_
[ "$(sql "SELECT state FROM jobs WHERE id = '$j3'")" = pending ] &&
    events "$j3" | grep -q '^submitted,placed,attempt_failed,requeued'
rc_=$?; ok "... the job is pending again ($(events "$j3"))" $rc_
kill -CONT "$n4pid"
wait_sql "SELECT state FROM jobs WHERE id = '$j3'" succeeded 150
rc_=$?; ok "... and succeeds on its next attempt once n4 answers ($(counts "$j3"), attempts $(sql "SELECT max(attempt) FROM attempts WHERE job_id = '$j3'"))" $rc_
$G describe job "$j3" --tenant "$TENANT" >"$tmp/j3.txt" 2>&1
grep -Eq '^Failures: +0 of 1 allowed' "$tmp/j3.txt" && grep -Eq '^Platform Faults: +1 \(not charged\)' "$tmp/j3.txt"
rc_=$?; ok "... gpctl describe job says so ($(grep -E '^(Failures|Platform Faults):' "$tmp/j3.txt" | tr -s ' ' | paste -sd ';' -))" $rc_

# ---- 4. a stale attempt (never dispatched): not charged; the platform bound ------

wait_sql "SELECT a.state || ' ' || j.state || ' ' || j.failures || ' ' || j.platform_faults
          FROM attempts a JOIN jobs j ON j.id = a.job_id WHERE a.job_id = '$j4' AND a.attempt = 1" \
    'failed_to_start pending 0 1' 150
ok "4. a never-dispatched attempt ends failed_to_start; the job is pending again, not charged" $?
sql "SELECT reason FROM attempts WHERE job_id = '$j4' AND attempt = 1" | grep -q '^never dispatched'
rc_=$?; ok "... its reason: $(sql "SELECT reason FROM attempts WHERE job_id = '$j4' AND attempt = 1")" $rc_
plant 2
wait_sql "SELECT state || ' ' || failures || ' ' || platform_faults FROM jobs WHERE id = '$j4'" \
    'failed 0 2' 150
ok "... a second platform fault, past max-platform-retries 1, fails it (failures 0)" $?
sql "SELECT reason FROM jobs WHERE id = '$j4'" | grep -q 'more than max-platform-retries 1'
rc_=$?; ok "... and says why: $(sql "SELECT reason FROM jobs WHERE id = '$j4'")" $rc_

# ---- 5. a cancel: the job ends, nothing charged ----------------------------------

wait_sql "SELECT j.state || ' ' || a.state || ' ' || j.failures || ' ' || j.platform_faults
          FROM jobs j JOIN attempts a ON a.job_id = j.id WHERE j.id = '$j5'" \
    'cancelled cancelled 0 0' 50
ok "5. a cancel ends the job and its attempt, nothing charged" $?
node5=$(sql "SELECT node FROM attempts WHERE job_id = '$j5'")
for _ in $(seq 1 50); do grep -q "attempt_ended.*job=$j5 " "$D/agent-$node5.log" && break; sleep 0.1; done
grep -q "attempt_ended.*job=$j5 attempt=1 event=killed" "$D/agent-$node5.log"
ok "... its node was told to stop it ($node5)" $?

# ---- 6. a node lost: not charged, run elsewhere ----------------------------------

wait_sql "SELECT a.state || ' ' || j.failures || ' ' || j.platform_faults FROM attempts a
          JOIN jobs j ON j.id = a.job_id WHERE a.job_id = '$j6' AND a.attempt = 1" 'lost 0 1' 150
ok "6. $node6 killed: attempt 1 lost, not charged (failures 0, platform_faults 1)" $?
wait_sql "SELECT state || ' ' || (node <> '$node6')::text FROM attempts WHERE job_id = '$j6' AND attempt = 2" \
    'running true' 100
rc_=$?; ok "... the job runs again on another node ($(sql "SELECT node FROM attempts WHERE job_id = '$j6' AND attempt = 2"))" $rc_

# ---- 7. a preempted attempt: not charged ------------------------------------------

wait_sql "SELECT state FROM attempts WHERE job_id = '$j7h' AND attempt = 1" running 100
ok "7. a higher-priority job takes n5 from the interruptible one" $?
[ "$(sql "SELECT a.state || ' ' || j.state || ' ' || j.failures || ' ' || j.platform_faults
          || ' ' || j.preemptions FROM attempts a JOIN jobs j ON j.id = a.job_id
          WHERE a.job_id = '$j7' AND a.attempt = 1")" = 'preempted pending 0 0 1' ]
rc_=$?; ok "... the victim's attempt ended preempted, its job pending, nothing charged ($(counts "$j7"))" $rc_

# ---- 8. the max run time: the job fails, no retry ---------------------------------

wait_sql "SELECT state FROM jobs WHERE id = '$j8'" failed 100
ok "8. max run time 1 s: the job failed" $?
[ "$(sql "SELECT count(*) || ' ' || min(state) FROM attempts WHERE job_id = '$j8'")" = '1 timed_out' ] &&
    [ "$(counts "$j8")" = 'failed 0 0' ] && events "$j8" | grep -q 'timed_out$'
rc_=$?; ok "... one attempt, timed_out, not retried though 2 attempts were left ($(events "$j8"))" $rc_

# ---- the invariants after all of it ----------------------------------------------

[ "$(sql "SELECT count(*) FROM (SELECT job_id FROM attempts WHERE state IN
          ('reserved','starting','running') GROUP BY job_id HAVING count(DISTINCT attempt) > 1) x")" = 0 ]
ok "at most one live attempt per job" $?
tap_end
