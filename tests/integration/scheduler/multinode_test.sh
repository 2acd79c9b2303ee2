#!/usr/bin/env bash
# multinode_test.sh -- multi-node jobs and the anti-starvation hold of
# gridpool-scheduler against real services (run under
# tests/harness/with-stack.sh): gridpool-registry, one scheduler and
# gridpool-agent processes on the simulated GPU backend.
#
# Fleet: site hub with h1, h2 (2 x L4 each); site edge with e1 (2 x L4).
#   1. a 2-node job (2 GPUs each) is placed all on one site, both nodes
#      under one attempt number, both dispatched, both booked in Redis;
#   2. a second 2-node job waits while the hub is full: the lone edge node
#      is not enough, and nothing is booked for it (all-or-nothing);
#   3. when the first ends (cancel) the second is placed on the hub;
#   4. hold: a big job (2 x 2 GPUs) waiting behind a stream of small jobs
#      that keep backfilling the hub is held after hold-after-ms: its nodes
#      are claimed, no small job starts there any more, and it is placed
#      once the small work on them ends;
#   5. preempting a 2-node victim for a job that needs one of its nodes:
#      the victim is checkpointed and stopped on BOTH nodes (not only the
#      node the plan named), each node's GPUs are released only once that
#      node's attempt ended, its job goes back to pending once both ended,
#      and it is placed again on two nodes when the preemptor goes; the
#      agents' own logs show no node ran two attempts at once.
# test-tags: pass=san (tests/run.sh)
set -u
B=$GP_BUILD
G="$B/bin/gpctl --timeout 5000"
D=$GP_STACK_DIR
TENANT=op
# shellcheck source=tests/lib/lib.sh
. "$(dirname "$0")/../../lib/lib.sh"


agent() {     # site, node
    spawn "agent-$2" "$B/bin/gridpool-agent" --config "$D/gp.env" --site "$1" --node "$2" \
        --gpu-backend sim --sim-gpus 2 --sim-model L4 --http-port 0 --heartbeat-ms 500
}

# GPUs of a node booked in Redis, as "<job>:<attempt>" sorted, comma-joined
booked() {    # node
    local key
    key=$(redis-cli -p "$GP_REDIS_PORT" --scan --pattern "gp:*:res:$1" | head -n 1)
    [ -n "$key" ] || return 0
    redis-cli -p "$GP_REDIS_PORT" hvals "$key" | sed -E 's/:[0-9]+$//' | sort | paste -sd, -
}

live() {      # job -> its live attempt rows as node:attempt:state, sorted
    sql "SELECT string_agg(node || ':' || attempt || ':' ||
                (CASE WHEN state IN ('starting','running') THEN 'up' ELSE state END), ','
                ORDER BY node)
         FROM attempts WHERE job_id = '$1' AND state IN ('reserved','starting','running')"
}

# ---- the stack --------------------------------------------------------------

spawn registry "$B/bin/gridpool-registry" --config "$D/gp.env" --http-port 0 --heartbeat-ms 500
for _ in $(seq 1 100); do $G health registry >/dev/null 2>&1 && break; sleep 0.1; done
$G create tenant op --kind operator >/dev/null &&
    $G create site hub --tenant op --region r1 --lat 52.5 --lon 13.4 >/dev/null &&
    $G create site edge --tenant op --region r1 --lat 48.1 --lon 11.6 >/dev/null &&
    $G create pool p-all --tenant op --scope global >/dev/null
ok "tenant, two sites and a global pool are created" $?
agent hub h1
agent hub h2
agent edge e1
for _ in $(seq 1 100); do
    [ "$($G get nodes -o json 2>/dev/null | grep -o '"state":"healthy"' | wc -l)" -ge 3 ] && break
    sleep 0.1
done
# hold after 3 s for jobs of >= 4 GPUs (the default is 30 min for 8)
spawn sched "$B/bin/gridpool-scheduler" --config "$D/gp.env" --http-port 0 --instance sched \
    --place-ms 200 --dispatch-timeout-ms 3000 --hold-after-ms 3000 --hold-gpus 4 \
    --preempt-grace-ms 1000 \
    --checkpoint-root "$tmp/ckpt" --log-level debug
for _ in $(seq 1 100); do grep -q feed_ready "$D/sched.log" && break; sleep 0.1; done
grep -q 'feed_ready.*nodes=3' "$D/sched.log"
ok "the scheduler loaded the fleet (3 nodes)" $?

# ---- 1. a 2-node job: one site, one attempt, both nodes booked and dispatched ----

a=$(submit --command 'sim:run=600s' --gpus 2 --nodes 2 --model L4)
wait_sql "SELECT count(*) FILTER (WHERE state IN ('starting','running')) FROM attempts
          WHERE job_id = '$a'" 2 100
ok "a 2-node job gets two attempt rows, both acked by their agents" $?
got=$(live "$a")
[ "$got" = "h1:1:up,h2:1:up" ]
ok "... on h1 and h2 of the hub, under one attempt number ($got)" $?
[ "$(sql "SELECT string_agg(rank::text, ',' ORDER BY rank) || '|' || bool_and(cardinality(gpus) = 2)
          FROM attempts WHERE job_id = '$a'")" = '0,1|true' ]
ok "... ranks 0 and 1, two GPUs each" $?
[ "$(booked h1)" = "$a:1,$a:1" ] && [ "$(booked h2)" = "$a:1,$a:1" ] && [ -z "$(booked e1)" ]
ok "... both nodes' GPUs booked in Redis for it, nothing on e1" $?

# ---- 2. all-or-nothing: the lone edge node is not enough -------------------------

b=$(submit --command 'sim:run=600s' --gpus 1 --nodes 2 --model L4)
wait_sql "SELECT waiting <> '' AND state = 'pending' FROM jobs WHERE id = '$b'" t 50
st=$?
ok "a second 2-node job waits with reasons ($(sql "SELECT waiting FROM jobs WHERE id = '$b'"))" $st
sleep 1                                     # several passes
[ "$(sql "SELECT count(*) FROM attempts WHERE job_id = '$b'")" = 0 ] && [ -z "$(booked e1)" ]
ok "... no attempt and no booking on e1, the one site with free GPUs (all-or-nothing)" $?

# ---- 3. capacity returns: placed on the hub -------------------------------------

$G cancel job "$a" --tenant "$TENANT" >/dev/null 2>&1
wait_sql "SELECT count(*) FILTER (WHERE state IN ('starting','running')) FROM attempts
          WHERE job_id = '$b'" 2 100
ok "once the first is cancelled the second is placed on two nodes" $?
got=$(live "$b")
[ "$got" = "h1:1:up,h2:1:up" ]
ok "... h1 and h2 of the hub ($got)" $?
$G cancel job "$b" --tenant "$TENANT" >/dev/null 2>&1
wait_sql "SELECT count(*) FROM attempts WHERE state IN ('reserved','starting','running')" 0 100
ok "cancelled: no live attempt left" $?

# ---- 4. the hold: a big job is not starved by backfilling small ones -------------

# Run times are staggered so the hub's GPUs never all come free at once: if
# they did, the big job (older, first in order) would simply fit there and
# the hold would never be needed (seen on a quiet machine with equal runs).
small() { submit --command "sim:run=${1:-4}s" --gpus 1 --model L4 --priority 100 >/dev/null; }
# (6 to 11 s: all six must run at once though their placements take a while
# on a loaded machine)
for r in 6 7 8 9 10 11; do small $r; done   # fill the fleet's 6 GPUs
wait_sql "SELECT count(*) FROM attempts WHERE state IN ('starting','running')" 6 100
ok "six small jobs fill the fleet" $?
big=$(submit --command 'sim:run=600s' --gpus 2 --nodes 2 --model L4 --priority 100)
held_at=
for _ in $(seq 1 150); do                   # keep 3 small jobs waiting, up to 30 s
    waiting=$(sql "SELECT count(*) FROM jobs WHERE state = 'pending' AND id <> '$big'")
    for _ in $(seq "$waiting" 2); do small; done
    [ -z "$held_at" ] && grep -q "job_held job=$big" "$D/sched.log" && held_at=$(sql "SELECT
        (extract(epoch FROM clock_timestamp()) * 1000)::bigint")
    [ "$(sql "SELECT count(*) FROM attempts WHERE job_id = '$big'
              AND state IN ('starting','running')")" = 2 ] && break
    sleep 0.2
done
line=$(grep -o "job_held job=$big.*" "$D/sched.log" | head -n 1)
[ -n "$held_at" ]
ok "the big job is held after waiting hold-after-ms (${line:-no job_held line})" $?
[ "$(sql "SELECT count(*) FROM attempts WHERE job_id = '$big' AND state IN ('starting','running')")" = 2 ]
ok "... and placed on two nodes while small jobs kept arriving" $?
site=$(sql "SELECT string_agg(DISTINCT node, ',') FROM attempts WHERE job_id = '$big'")
# a small job that started on the held nodes after the hold began would
# be the starvation the hold exists to prevent (1 s margin: a placement
# already in flight when the claim was made)
[ -n "$held_at" ] && [ "$(sql "SELECT count(*) FROM attempts a JOIN jobs j ON j.id = a.job_id
    WHERE j.id <> '$big' AND a.node = ANY(string_to_array('$site', ','))
    AND a.created_ms > ${held_at:-0} + 1000")" = 0 ]
ok "... no small job started on its nodes ($site) once they were held" $?
[ "$(sql "SELECT count(*) FROM jobs WHERE state = 'pending' AND id <> '$big'")" -ge 1 ]
ok "... small jobs were still waiting when it was placed (it did not just find an empty fleet)" $?

# ---- 5. a multi-node victim is preempted whole, released node by node -------------

for j in $(sql "SELECT id FROM jobs WHERE state IN ('pending','starting','running')"); do
    $G cancel job "$j" --tenant "$TENANT" >/dev/null 2>&1
done
wait_sql "SELECT count(*) FROM attempts WHERE state IN ('reserved','starting','running')" 0 100
st=$?
for _ in $(seq 1 50); do
    [ -z "$(booked h1)$(booked h2)$(booked e1)" ] && break
    sleep 0.2
done
[ "$st" -eq 0 ] && [ -z "$(booked h1)$(booked h2)$(booked e1)" ]
ok "5: the fleet is empty again (no live attempt, nothing booked)" $?
v=$(submit --command 'sim:run=600s ckpt=1s' --gpus 2 --nodes 2 --model L4 --interruptible \
    --priority 10)
wait_sql "SELECT count(*) FROM attempts WHERE job_id = '$v' AND state = 'running'" 2 100
got=$(live "$v")
[ "$got" = "h1:1:up,h2:1:up" ]
ok "an interruptible low-priority 2-node victim runs on h1 and h2 ($got)" $?
fill=$(submit --command 'sim:run=600s' --gpus 2 --model L4 --priority 100)
wait_sql "SELECT count(*) FROM attempts WHERE job_id = '$fill' AND state = 'running'" 1 100
got=$(live "$fill")
[ "$got" = "e1:1:up" ]
ok "a non-interruptible job fills e1 ($got)" $?
hi=$(submit --command 'sim:run=600s' --gpus 2 --model L4 --priority 500)
wait_sql "SELECT count(*) FROM job_events WHERE job_id = '$hi' AND event = 'preempting'" 1 50
ok "a high-priority job needing one hub node's GPUs starts a preemption" $?
wait_sql "SELECT state FROM jobs WHERE id = '$v'" pending 100
ok "the victim's job goes back to pending" $?
# the plan names the victim on the one node it evicts it from; the whole
# attempt must be told, every node answering for itself
sigs=$(grep -o "preempt_signal action=[a-z]* job=$v attempt=1 node=[a-z0-9]* result=[A-Z]*" \
    "$D/sched.log" | sed -E 's/.*action=([a-z]+).*node=([a-z0-9]+) result=([A-Z]+)/\2:\1:\3/' |
    sort | paste -sd, -)
[ "$sigs" = "h1:checkpoint:OK,h1:stop:OK,h2:checkpoint:OK,h2:stop:OK" ]
ok "... after checkpoint and stop on BOTH of its nodes, each acked (${sigs:-none})" $?
# each node's attempt ended (its stop acked, or its end taken: whichever
# came first) before the job went back: the scheduler's log, in order
# (timestamps of two nodes' ends taken by concurrent transactions may be
# a millisecond apart either way, the log's order may not)
rq=$(grep -n "job_requeued_after_preemption job=$v attempt=1" "$D/sched.log" | head -n 1 | cut -d: -f1)
early=
for nd in h1 h2; do
    e=$(grep -nE "(preempt_signal action=stop job=$v attempt=1 node=$nd result=OK|preempted_attempt_ended job=$v attempt=1 node=$nd)" \
        "$D/sched.log" | head -n 1 | cut -d: -f1)
    [ -n "$e" ] && [ -n "$rq" ] && [ "$e" -lt "$rq" ] || early="$early $nd"
done
[ -z "$early" ] && [ "$(sql "SELECT count(*) FROM attempts WHERE job_id = '$v' AND attempt = 1
                            AND state = 'preempted' AND ended_ms IS NOT NULL")" = 2 ]
ok "... requeued only after both nodes' attempts ended, both rows 'preempted'${early:+ (requeued before:$early)}" $?
wait_sql "SELECT count(*) FROM attempts WHERE job_id = '$hi' AND state = 'running'" 1 100
hrow=$(sql "SELECT node || ':' || attempt FROM attempts WHERE job_id = '$hi' AND state = 'running'")
hn=${hrow%%:*}
other=h1
[ "$hn" = h1 ] && other=h2
sleep 1                                     # several passes
hub="$hn=$(booked "$hn") $other=$(booked "$other") victim=$(sql "SELECT state FROM jobs WHERE id = '$v'")"
[ -n "$hn" ] && [ "$hub" = "$hn=$hi:${hrow#*:},$hi:${hrow#*:} $other= victim=pending" ]
ok "the preemptor runs on $hn, $other is free, the victim waits (one hub node is not enough: $hub)" $?
$G cancel job "$hi" --tenant "$TENANT" >/dev/null 2>&1
wait_sql "SELECT count(*) FROM attempts WHERE job_id = '$v' AND attempt = 2
          AND state IN ('starting','running')" 2 100
got=$(live "$v")
[ "$got" = "h1:2:up,h2:2:up" ]
ok "once the preemptor is cancelled the victim is placed again on two nodes ($got)" $?
# the agents' own record: on each node the victim's first attempt ended
# before anything else started there
bad=
for nd in h1 h2; do
    end1=$(grep -n "attempt_ended node=$nd job=$v attempt=1 " "$D/agent-$nd.log" | head -n 1 | cut -d: -f1)
    for who in "$hi attempt=1" "$v attempt=2"; do
        st=$(grep -n "attempt_started node=$nd job=$who " "$D/agent-$nd.log" | head -n 1 | cut -d: -f1)
        [ -z "$st" ] && continue
        [ -n "$end1" ] && [ "$end1" -lt "$st" ] || bad="$bad $nd:${who% *}"
    done
done
[ -z "$bad" ]
ok "on each agent the victim's attempt 1 ended before the next attempt started there${bad:+ (not on$bad)}" $?
# a node the preemption did not stop keeps running the victim after its
# GPUs were given back, until its lease's kill list finds it (revoked)
rev=$(cat "$D/agent-h1.log" "$D/agent-h2.log" | grep -o "attempt_revoked node=[a-z0-9]* job=$v attempt=1" |
    sed 's/ job.*//; s/.*=//' | paste -sd, -)
[ -z "$rev" ]
ok "the victim was stopped by the preemption on both nodes, none left to its lease (revoked: ${rev:-none})" $?
"$GP_HARNESS/invariants.sh" --redis >"$tmp/inv.out" 2>&1
st=$?
[ "$st" -eq 0 ] || cat "$tmp/inv.out" >&2
ok "invariants over the whole history: no double booking, no two live attempts, Redis matches" $st
$G cancel job "$v" --tenant "$TENANT" >/dev/null 2>&1
$G cancel job "$fill" --tenant "$TENANT" >/dev/null 2>&1

tap_end
