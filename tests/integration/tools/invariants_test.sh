#!/usr/bin/env bash
# invariants_test.sh -- tests/harness/invariants.sh can fail: against the
# real PostgreSQL and Redis of its stack (run under with-stack.sh), with the
# scheduler's own tables (one gridpool-scheduler start applies its
# migrations, then it is stopped so its reconcile does not repair what we
# plant), it passes a clean history and reports each planted violation:
# a double booking that has ended since, two live attempts of one job, a
# live attempt of an ended job, an orphan Redis reservation, a live
# attempt without its reservation, an unindexed reservation, and in a
# simulator truth file two attempts of one job and one GPU running at once;
# it cannot check (exit 2) without a database.
# test-tags: pass=san (tests/run.sh)
set -u
B=$GP_BUILD
D=$GP_STACK_DIR
INV="$GP_HARNESS/invariants.sh"
n=0
failed=0
ok() { n=$((n + 1)); if [ "$2" -eq 0 ]; then echo "ok $n - $1"; else echo "not ok $n - $1"; failed=$((failed + 1)); fi; }
sql() { psql "$GP_PG_CONNINFO" -XAtq -v ON_ERROR_STOP=1 -c "$1"; }
rc() { redis-cli -h "$GP_REDIS_HOST" -p "$GP_REDIS_PORT" "$@" >/dev/null; }
inv() {       # args... -> $out (its output), $st (its exit status)
    out=$("$INV" "$@" 2>&1)
    st=$?
    echo "$out" | sed 's/^/# /'
}
want() {      # exit status wanted, description, patterns its output must hold...
    local w=$1 d=$2 r=0
    shift 2
    [ "$st" = "$w" ] || r=1
    for p in "$@"; do echo "$out" | grep -q -- "$p" || r=1; done
    ok "$d (exit $st)" $r
}

"$B/bin/gridpool-scheduler" --config "$D/gp.env" --http-port 0 --instance inv-migrate \
    >"$D/scheduler.log" 2>&1 </dev/null &
spid=$!
echo $spid >"$D/pids/scheduler.pid"
for _ in $(seq 1 100); do
    [ "$(sql "SELECT to_regclass('attempts') IS NOT NULL AND to_regclass('jobs') IS NOT NULL" 2>/dev/null)" = t ] &&
        [ "$(sql "SELECT count(*) FROM gp_migrations WHERE service = 'scheduler'" 2>/dev/null)" -ge 3 ] && break
    sleep 0.1
done
kill "$spid"; wait "$spid" 2>/dev/null
[ "$(sql "SELECT count(*) FROM gp_migrations WHERE service = 'scheduler'")" -ge 3 ]
ok "the scheduler's migrations made jobs and attempts (then it stopped)" $?
rc FLUSHALL

inv
want 0 "an empty history is clean"

job() {       # id, state
    sql "INSERT INTO jobs (id, tenant, state, spec, priority, gpus_per_node, nodes, max_attempts,
         created_ms, updated_ms) VALUES ('$1', 't1', '$2', '\\x80', 100, 1, 1, 3, 1000, 1000)"
}
att() {       # job, attempt, rank, node, gpus, state, created, ended|NULL
    sql "INSERT INTO attempts (job_id, attempt, rank, site, node, gpus, state, created_ms, ended_ms)
         VALUES ('$1', $2, $3, 's1', '$4', '{$5}', '$6', $7, $8)"
}
res() {       # node, gpu, job:attempt -- a reservation as reserve.c writes it (shard 7)
    rc HSET "gp:{7}:res:$1" "$2" "$3:1000" && rc SADD "gp:{7}:resnodes" "$1"
}

# a clean history: a retry on the same GPU right after the first attempt
# ended (half-open intervals: the same ms is no overlap), another job on
# the next GPU, a two-node attempt, an ended job; Redis holds exactly the
# live attempts
job ja running; att ja 1 0 n1 0 failed 1000 2000; att ja 2 0 n1 0 running 2000 NULL
job jb running; att jb 1 0 n1 1 running 1500 NULL
job jc running; att jc 1 0 n2 0,1 running 1200 NULL; att jc 1 1 n3 0,1 running 1200 NULL
job jd succeeded; att jd 1 0 n4 0 succeeded 1000 3000
res n1 0 ja:2; res n1 1 jb:1; res n2 0 jc:1; res n2 1 jc:1; res n3 0 jc:1; res n3 1 jc:1
inv --redis --confirm-ms 0
want 0 "a clean history and matching reservations pass"

# (a) a double booking that has ended since: still found in the history
job je succeeded; att je 1 0 n1 0 succeeded 2500 2600
inv
want 1 "an ended attempt that booked a GPU a running one held is a double booking" \
    '^violation: double_booking: node n1 GPU 0: ja:2/running .* overlaps je:1/succeeded \[2500,2600)'
sql "DELETE FROM jobs WHERE id = 'je'"
# GPU 0 of n4 again, from the ms its last holder ended: clean
job jf succeeded; att jf 1 0 n4 0 succeeded 3000 4000
inv
want 0 "the next attempt on a GPU from the ms the last one ended is clean"

# (b) two live attempts of one job
job jg running; att jg 1 0 n5 0 running 5000 NULL; att jg 2 0 n6 0 running 6000 NULL
res n5 0 jg:1; res n6 0 jg:2
inv --redis --confirm-ms 0
want 1 "two live attempts of one job are reported" \
    '^violation: two_live_attempts: job jg: attempt 1 \[5000,[0-9]*) overlaps attempt 2 \[6000,'
[ "$(echo "$out" | grep -c '^violation:')" = 1 ]
ok "... and nothing else (the reservations match)" $?
# an ended one that overlapped the next attempt in the past is found too
sql "UPDATE attempts SET state = 'lost', ended_ms = 6500 WHERE job_id = 'jg' AND attempt = 1"
rc DEL "gp:{7}:res:n5"; rc SREM "gp:{7}:resnodes" n5
inv --redis --confirm-ms 0
want 1 "an attempt that ended 500 ms after the next one began is reported" \
    '^violation: two_live_attempts: job jg: attempt 1 \[5000,6500) overlaps attempt 2 \[6000,.* by 500 ms'
inv --slack-ms 500
want 0 "... and tolerated with --slack-ms 500"
sql "DELETE FROM jobs WHERE id = 'jg'"; rc DEL "gp:{7}:res:n6"; rc SREM "gp:{7}:resnodes" n6

# a live attempt of a job that ended
job jh cancelled; att jh 1 0 n7 0 running 7000 NULL; res n7 0 jh:1
inv --redis --confirm-ms 0
want 1 "a running attempt of a cancelled job is reported" \
    '^violation: live_attempt_of_ended_job: job jh is cancelled but attempt 1 on n7 is running'
sql "DELETE FROM jobs WHERE id = 'jh'"; rc DEL "gp:{7}:res:n7"; rc SREM "gp:{7}:resnodes" n7

# (c) Redis against the live attempts
res n8 3 j-ghost:1
inv
want 0 "an orphan reservation is not looked at without --redis"
inv --redis --confirm-ms 200
want 1 "an orphan reservation is reported with --redis, also after the confirm wait" \
    '^violation: orphan_reservation: node n8 GPU 3 is reserved for j-ghost:1, which has no live attempt there'
rc DEL "gp:{7}:res:n8"; rc SREM "gp:{7}:resnodes" n8
rc HSET "gp:{7}:res:n1" 0 "ja:1:1000"     # the GPU held by the job's earlier attempt
inv --redis --confirm-ms 0
want 1 "a GPU reserved for a superseded attempt: orphan and missing" \
    '^violation: orphan_reservation: node n1 GPU 0 is reserved for ja:1, .*(the live one is ja:2)' \
    '^violation: missing_reservation: live attempt ja:2 on node n1 GPU 0 has no reservation (Redis: ja:1)'
rc HSET "gp:{7}:res:n1" 0 "ja:2:1000"
rc HDEL "gp:{7}:res:n2" 1
inv --redis --confirm-ms 0
want 1 "a live attempt's GPU free in Redis is a missing reservation" \
    '^violation: missing_reservation: live attempt jc:1 on node n2 GPU 1 has no reservation (Redis: free)'
rc HSET "gp:{7}:res:n2" 1 "jc:1:1000"
rc SREM "gp:{7}:resnodes" n3
inv --redis --confirm-ms 0
want 1 "a reservation the reconcile's index lacks is reported" \
    '^violation: unindexed_reservation: node n3 holds reservations but is not in gp:{7}:resnodes'
rc SADD "gp:{7}:resnodes" n3
inv --redis --confirm-ms 0
want 0 "restored: clean again"

# (d) the simulator's truth
tr() {        # job, attempt, node, gpu_idx, start, end
    printf '{"site":"s1","node":"%s","model":"L4","job_id":"%s","attempt":%s,"gpus":1,"gpu_idx":[%s],"start_ms":%s,"end_ms":%s,"end":"exited"}\n' \
        "$3" "$1" "$2" "$4" "$5" "$6"
}
{ tr ja 1 n1 0 1000 2000; tr ja 2 n1 0 2000 3000; tr jb 1 n1 1 1500 4000
  tr jc 1 n2 0,1 1200 5000; tr jc 1 n3 0,1 1200 5000; } >"$D/truth-clean.jsonl"
printf '{"site":"s1","node":"n9"' >>"$D/truth-clean.jsonl"      # a line being written
inv --truth "$D/truth-clean.jsonl"
want 0 "a clean truth passes, a partly written last line is left for later"
{ tr ja 1 n1 0 1000 2000; tr ja 2 n2 3 1900 3000; tr jb 1 n1 1 1500 4000; tr jx 1 n1 1 3999 5000; } \
    >"$D/truth-bad.jsonl"
inv --truth "$D/truth-bad.jsonl"
want 1 "truth: two attempts of one job at once, and one GPU running two attempts, are reported" \
    '^violation: truth_two_attempts: job ja: attempt 1 \[1000,2000) and attempt 2 \[1900,3000) ran at once (100 ms)' \
    '^violation: truth_gpu_shared: node n1 GPU 1 ran jb:1 \[1500,4000) and jx:1 \[3999,5000) at once (1 ms)'
inv --truth "$D/no-such-file"
want 2 "a truth file that is not there: could not check"

# could not check at all
out=$(env GP_PG_CONNINFO="postgresql://postgres@127.0.0.1:1/gridpool?connect_timeout=2" "$INV" 2>&1)
st=$?
echo "$out" | sed 's/^/# /'
want 2 "no database: exit 2, could not check" \
    '^invariants: could not check: psql'
out=$(env -u GP_PG_CONNINFO -u GP_STACK_DIR -u GP_ENV_FILE "$INV" 2>&1)
st=$?
want 2 "no settings at all: could not check" 'could not check: no GP_PG_CONNINFO'
out=$(env -u GP_PG_CONNINFO -u GP_STACK_DIR GP_ENV_FILE="$D/gp.env" "$INV" 2>&1)
st=$?
want 0 "the settings from GP_ENV_FILE alone" '^invariants: attempt rows 7,'

echo "1..$n"
[ "$failed" -eq 0 ]
