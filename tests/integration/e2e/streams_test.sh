#!/usr/bin/env bash
# streams_test.sh -- JetStream streams that survive a server, against real
# services on a 3-server NATS cluster (run under tests/harness/with-stack.sh,
# which starts the cluster for the test-stack line below): registry,
# scheduler, recovery, metering, billing and alerting with stream-replicas
# 3, a 3-site simulated fleet, two testsvc instances saying they are there.
#
#   1. every stream the services declare (JOBS, ATTEMPTS, USAGE, FLEET,
#      ALERTS, DLQ) has 3 replicas and a byte limit; all but FLEET refuse
#      new messages when full (discard new);
#   2. under a workload (jobs running, metered and billed; an instance hung
#      meanwhile, so an alert fires and resolves) the server leading USAGE
#      is killed with kill -9 and started again once the alert fired (some
#      4 s later);
#   3. a stream filled to its byte limit (a publish refused: "maximum bytes
#      exceeded") raises StreamFull (stream=FILLME); purged, it resolves;
#      then every stream holds exactly what its writers committed, each
#      message once: ALERTS = alerting's published alert_events, JOBS = the
#      scheduler's job_events, ATTEMPTS = the simulator's truth (each
#      attempt's started and end), USAGE = the ledger (gridpool-audit: 0
#      lost, 0 doubled, billed = delivered); the scheduler's invariants
#      hold; the restarted server is a current replica of every stream;
#   4. an operator raises USAGE's byte limit and age with the JetStream API,
#      then billing restarts with a stale configuration (stream-replicas
#      1): USAGE keeps 3 replicas, the operator's limit and age (and billing
#      says so: stream_kept).
# Not in the sanitizer pass: the workload's timing is sized for the normal
# build (as billing/fault_test).
# Authorization on (GP_STACK_NATS_AUTH=1, the same on all three servers):
# each service runs as its own deploy/nats-auth identity, the simulator as
# sim, gpctl as the operator (admin); the test's own inspection (the
# JetStream API, the audit's durable, the testsvc stand-ins) as the
# harness' gptest (tests/harness/stack.sh).
# test-stack: GP_STACK_NATS_CLUSTER=3 GP_STACK_NATS_AUTH=1 GP_STACK_NATS_TESTER=1
# test-tags: pass=normal timeout=300 (tests/run.sh)
set -u
case "$GP_BUILD" in
*/san*) echo "1..0 # SKIP the workload's timing is sized for the normal build"; exit 0 ;;
esac
B=$GP_BUILD
G="$B/bin/gpctl --timeout 10000"
D=$GP_STACK_DIR
TENANT=op
PY=/usr/bin/python3
STACK="$GP_HARNESS/stack.sh"
# the test's inspector (gptest) and each identity's credentials as env(1)
# arguments (spawn records env's pid, which is the program's: env execs it)
TESTER="GP_NATS_USER=gptest GP_NATS_PASSWORD=$(cat "$GP_STACK_DIR/gptest.pw")"
creds() { echo "GP_NATS_USER=$1 GP_NATS_PASSWORD=$(sed -n 's/^GP_NATS_PASSWORD=//p' "$GP_STACK_DIR/auth/$1.env")"; }
# shellcheck disable=SC2086
JS="env $TESTER $PY $(dirname "$0")/../../lib/jsapi.py $GP_NATS_URL"
# shellcheck source=tests/lib/lib.sh
. "$(dirname "$0")/../../lib/lib.sh"
# shellcheck disable=SC1091
. "$D/ports"

on_fail() {
    for f in sched meter bill alerting; do
        echo "# $f warnings:"; grep 'level=warn\|level=error' "$D/$f.log" | tail -n 5 | sed 's/^/#   /'
    done
    echo "# alerts: $(sql "SELECT string_agg(alertname || ':' || state || ':' || labels, ' ') FROM alerts")"
    echo "# jobs: $(sql "SELECT string_agg(state || ':' || n, ' ') FROM
        (SELECT state, count(*) n FROM jobs GROUP BY state) s")"
}
tap_on_fail=on_fail

info() {      # STREAM EXPR: the python expression on its info d
    $JS info "$1" | $PY -c "import json,sys; d=json.load(sys.stdin); print($2)" 2>/dev/null
}
ids() {       # STREAM -> FILE: every message's Nats-Msg-Id
    $JS ids "$1" >"$2" 2>"$tmp/ids.err"
}
same_set() {  # FILE FILE: the same lines, each once in the first
    [ "$(sort "$1" | uniq -d | wc -l)" = 0 ] && [ "$(sort -u "$1")" = "$(sort -u "$2")" ]
}
diff_sets() { # FILE FILE: what differs, for the message
    echo "$(sort "$1" | uniq -d | wc -l) doubled; only in stream: $(comm -23 <(sort -u "$1") \
        <(sort -u "$2") | head -n 3 | tr '\n' ' '); missing: $(comm -13 <(sort -u "$1") \
        <(sort -u "$2") | head -n 3 | tr '\n' ' ')"
}
svc() {       # NAME PROG ARGS...: as service-PROG
    local name=$1 prog=$2
    shift 2
    # shellcheck disable=SC2046
    spawn "$name" env $(creds "service-$prog") "$B/bin/gridpool-$prog" --config "$D/gp.env" --http-port 0 --instance "$name" \
        --stream-replicas 3 "$@"
}
# shellcheck disable=SC2086
tsvc() { spawn "$1" env $TESTER "$B/test/bin/testsvc" --config "$D/gp.env" --http-port -1 --instance "$1" \
    --presence-ms 500; }

# ---- 1. the services declare their streams, 3 replicas each ----------------------------
svc registry registry --heartbeat-ms 200 --detect-floor-ms 8000 --detect-ceiling-ms 12000 \
    --lost-ms 10000 --lease-ms 12000 --sweep-ms 200
svc sched scheduler --heartbeat-ms 200 --lease-ms 12000 --fence-margin-ms 500 --place-ms 200
svc rec recovery --replace-ms 100 --sites-ms 2000
svc meter metering --window-ms 2000 --grace-ms 300 --silent-ms 3000 --sweep-ms 200 \
    --claim-ms 3000
svc bill billing --book-ms 500
svc alerting alerting --presence-check-ms 200 --streams-ms 500
tsvc tsa
tsvc tsb
for _ in $(seq 1 150); do
    n_=$(grep -h 'event=stream_ready' "$D"/sched.log "$D"/meter.log "$D"/bill.log "$D"/alerting.log \
        2>/dev/null | grep -o 'stream=[A-Z]*' | sort -u | wc -l)
    [ "$n_" -ge 6 ] && break
    sleep 0.2
done
bad=
for s in JOBS ATTEMPTS USAGE FLEET ALERTS DLQ; do
    got=$(info $s "d['config']['num_replicas'], d['config']['max_bytes'] > 0, d['config']['discard'], d['config']['max_age'] > 0")
    want="3 True new True"
    [ "$s" = FLEET ] && want="3 True old True"
    [ "$got" = "$want" ] || bad="$bad $s=($got)"
done
ok "JOBS ATTEMPTS USAGE FLEET ALERTS DLQ: 3 replicas, a byte and an age limit, discard new (FLEET old)${bad:+:$bad}" \
    "$([ -z "$bad" ]; echo $?)"
# authorization is on, on every server: no anonymous client, and the
# services' own identities cannot touch a stream outside their contract
bad=
for p_ in $NATS_PORTS; do
    $PY "$(dirname "$0")/../../lib/natsc.py" "127.0.0.1:$p_" >"$tmp/anon.out" 2>&1 &&
        bad="$bad $p_"
    grep -q '^refused Authorization Violation' "$tmp/anon.out" || bad="$bad $p_"
done
# shellcheck disable=SC2046
env $(creds service-alerting) $PY "$(dirname "$0")/../../lib/jsapi.py" "$GP_NATS_URL" purge USAGE \
    >"$tmp/alerting-purge.out" 2>&1
st_=$?
[ -z "$bad" ] && [ $st_ -ne 0 ] && grep -q "Permissions Violation" "$tmp/alerting-purge.out" &&
    [ "$(info USAGE "d['config']['num_replicas']")" = 3 ]
ok "every server refuses an anonymous client${bad:+ (admitted on:$bad)}; alerting's identity may not purge USAGE ($(head -c 120 "$tmp/alerting-purge.out"))" $?

# ---- 2. a server killed under a workload ---------------------------------------------------
# shellcheck disable=SC2046
spawn sim env $(creds sim) "$B/bin/gridpool-sim" --config "$D/gp.env" --http-port 0 --sites 3 --seed 7 \
    --spread-ms 300 --truth "$D/truth.jsonl"
for _ in $(seq 1 300); do grep -q '^sim: registered' "$D/sim.log" && break; sleep 0.1; done
for _ in $(seq 1 100); do grep -q feed_ready "$D/sched.log" && break; sleep 0.1; done
gpus=$(sql "SELECT count(*) FROM gpus")
njobs=$(( gpus < 12 ? gpus : 12 ))
for i in $(seq 1 "$njobs"); do
    submit --command 'sim:run=6s' --gpus 1 --max-attempts 3 >/dev/null
done
# every job started (a job runs 6 s: on a loaded machine the first ones
# may end before the last is placed), and some still run for the kill
wait_sql "SELECT count(DISTINCT job_id) FROM attempts" "$njobs" 300
st_=$?
wait_sql "SELECT count(*) > 0 FROM attempts WHERE state = 'running'" t 50 || st_=1
ok "$njobs jobs run on the 3-site fleet ($gpus GPUs; $(sql "SELECT count(*) FROM attempts WHERE state = 'running'") running now)" $st_
sleep 1
kill -STOP "$(cat "$D/pids/tsa.pid")"            # an alert to be published across the kill
leader=$(info USAGE "d['cluster']['leader']")
i=${leader#n}
t0=$(date +%s%N)
"$STACK" kill-nats "$D" "$i"
st_=$?
ok "kill -9 of $leader, the leader of USAGE" $st_
wait_sql "SELECT state FROM alerts WHERE alertname = 'ServiceInstanceSilent'
          AND labels = 'team=platform,service=testsvc,instance=tsa'" firing 100
ok "meanwhile tsa, hung, raises ServiceInstanceSilent" $?
sleep 1
"$STACK" start-nats "$D" "$i"
st_=$?
ok "$leader started again after $(( ($(date +%s%N) - t0) / 1000000 )) ms" $st_
kill -CONT "$(cat "$D/pids/tsa.pid")"
wait_sql "SELECT count(*) FROM jobs WHERE state NOT IN ('succeeded', 'failed', 'cancelled')" 0 300
st_=$?; ok "every job ended ($(sql "SELECT string_agg(state || ':' || n, ' ') FROM
    (SELECT state, count(*) n FROM jobs GROUP BY state) s"))" $st_
wait_sql "SELECT state FROM alerts WHERE alertname = 'ServiceInstanceSilent'
          AND labels = 'team=platform,service=testsvc,instance=tsa'" resolved 100
ok "tsa speaks again: its alert resolves" $?
# ---- 3. a full stream is an alert ------------------------------------------------------------------
# Up to three tries: the API request can go unanswered for its 10 s while
# the restarted server rejoins the meta group (seen once in 3 runs); a
# second create of the same configuration is answered like the first.
for _ in 1 2 3; do
    $JS create '{"name": "FILLME", "subjects": ["fillme.>"], "storage": "file", "num_replicas": 3,
        "max_bytes": 65536, "discard": "new"}' >"$tmp/create.out" && break
done
ok "a stream FILLME of 64 KiB, 3 replicas, discard new" $?
$JS fill fillme.x 1024 200 >"$tmp/fill.out"
grep -q 'maximum bytes exceeded' "$tmp/fill.out"
st_=$?
ok "filled: $(head -n 1 "$tmp/fill.out"), then refused ($(grep -o '"description": "[^"]*"' "$tmp/fill.out"))" $st_
wait_sql "SELECT state FROM alerts WHERE alertname = 'StreamFull' AND labels = 'team=platform,stream=FILLME'" firing 100
st_=$?
ok "StreamFull fires for FILLME ($(sql "SELECT severity || ', ' || evidence FROM alerts WHERE alertname = 'StreamFull'"))" $st_
$JS purge FILLME >/dev/null
wait_sql "SELECT state FROM alerts WHERE alertname = 'StreamFull' AND labels = 'team=platform,stream=FILLME'" resolved 100
ok "purged: it resolves" $?
wait_sql "SELECT count(*) FROM alert_events WHERE NOT published" 0 100
sql "SELECT id || '.' || seq FROM alert_events WHERE published AND silenced_by = ''" >"$tmp/alerts.want"
ids ALERTS "$tmp/alerts.got"
same_set "$tmp/alerts.got" "$tmp/alerts.want" && [ "$(wc -l <"$tmp/alerts.want")" -ge 4 ]
st_=$?
ok "ALERTS holds each of the $(wc -l <"$tmp/alerts.want") alert events once: the silent instance's and StreamFull's, firing and resolved ($(diff_sets "$tmp/alerts.got" "$tmp/alerts.want"))" $st_

# ---- the streams hold exactly what was committed -----------------------------------------------
kill -TERM "$(cat "$D/pids/sim.pid")" 2>/dev/null    # its truth file is written at its stop
for _ in $(seq 1 50); do kill -0 "$(cat "$D/pids/sim.pid")" 2>/dev/null || break; sleep 0.2; done
wait_sql "SELECT count(*) FROM job_events WHERE NOT published" 0 100
sql "SELECT job_id || '.' || seq FROM job_events" >"$tmp/jobs.want"
ids JOBS "$tmp/jobs.got"
same_set "$tmp/jobs.got" "$tmp/jobs.want"
st_=$?
ok "JOBS holds each of the $(wc -l <"$tmp/jobs.want") job events once ($(diff_sets "$tmp/jobs.got" "$tmp/jobs.want"))" $st_
$PY - "$D/truth.jsonl" >"$tmp/att.want" <<'PY'
import json, sys
ends = {'exited', 'killed', 'lease_expired', 'failed_to_start'}
for line in open(sys.argv[1]):
    try:
        t = json.loads(line)
    except ValueError:
        continue
    print('%s.%s.%s.started' % (t['job_id'], t['attempt'], t['node']))
    if t.get('end') in ends:
        print('%s.%s.%s.%s' % (t['job_id'], t['attempt'], t['node'], t['end']))
PY
ids ATTEMPTS "$tmp/att.got"
same_set "$tmp/att.got" "$tmp/att.want" && [ -s "$tmp/att.want" ]
st_=$?
ok "ATTEMPTS holds each attempt's start and end once, as the simulator ran them ($(wc -l <"$tmp/att.got"); $(diff_sets "$tmp/att.got" "$tmp/att.want"))" $st_
# shellcheck disable=SC2086
env $TESTER "$B/test/bin/usage_dump" "$GP_NATS_URL" audit1 2000 >"$tmp/usage.jsonl" 2>"$tmp/dump.err"
n_stream=$(grep -c . "$tmp/usage.jsonl")
wait_sql "SELECT (SELECT count(*) FROM usage_records) + (SELECT count(*) FROM rejected_records)" \
    "$n_stream" 300
st_=$?; ok "billing took the $n_stream records of USAGE" $st_
ids USAGE "$tmp/usage.got"
[ "$(sort "$tmp/usage.got" | uniq -d | wc -l)" = 0 ] && [ "$(wc -l <"$tmp/usage.got")" = "$n_stream" ] &&
    [ "$n_stream" -gt 0 ]
ok "... each record once in the stream" $?
echo "# USAGE stores $(info USAGE "d['state']['bytes'] // max(1, d['state']['messages'])") bytes a record"
"$GP_HARNESS/../../deploy/gridpool-audit" --truth "$D/truth.jsonl" --stream "$tmp/usage.jsonl" \
    >"$tmp/audit.out" 2>&1
st=$?
sed 's/^/# /' "$tmp/audit.out"
[ "$st" = 0 ] && grep -q 'lost 0 (sequence gaps 0, stream ids missing 0 of' "$tmp/audit.out" &&
    grep -q 'doubled 0$' "$tmp/audit.out"
ok "gridpool-audit: clean: 0 lost, 0 doubled, trial balance 0, billed = delivered" $?
"$GP_HARNESS/invariants.sh" --redis >"$tmp/inv.out" 2>&1
st=$?
sed 's/^/# /' "$tmp/inv.out" | tail -n 5
ok "the scheduler's invariants hold (no double booking, no two live attempts)" "$st"
bad=
for s in JOBS ATTEMPTS USAGE FLEET ALERTS DLQ; do
    got=$(info $s "sorted([d['cluster']['leader']] + [r['name'] for r in d['cluster'].get('replicas', []) if r.get('current') and not r.get('offline')])")
    [ "$got" = "['n1', 'n2', 'n3']" ] || bad="$bad $s=$got"
done
ok "$leader is a current replica of every stream again${bad:+:$bad}" "$([ -z "$bad" ]; echo $?)"

# ---- 4. an operator's replicas and limits survive a restart -------------------------------------
big=$((6 * 1024 * 1024 * 1024)) age=$((90 * 86400 * 1000000000))
$JS set USAGE "{\"max_bytes\": $big, \"max_age\": $age}" >"$tmp/set.out"
st_=$?
ok "an operator raises USAGE's byte limit to 6 GiB and its age to 90 days$([ $st_ = 0 ] || echo ": $(head -c 300 "$tmp/set.out")")" $st_
stop_pidfile "$D/pids/bill.pid"
# shellcheck disable=SC2046
spawn bill2 env $(creds service-billing) "$B/bin/gridpool-billing" --config "$D/gp.env" --http-port 0 --instance bill2 \
    --book-ms 500 --stream-replicas 1
for _ in $(seq 1 100); do grep -q 'event=stream_ready.*stream=USAGE' "$D/bill2.log" && break; sleep 0.1; done
got=$(info USAGE "d['config']['num_replicas'], d['config']['max_bytes'], d['config']['max_age']")
[ "$got" = "3 $big $age" ] && grep -q 'event=stream_ready.*stream=USAGE' "$D/bill2.log"
ok "billing restarted with stream-replicas 1 declared USAGE: it keeps 3 replicas, 6 GiB, 90 days ($got)" $?
grep -q "event=stream_kept stream=USAGE replicas=3 (declared 1) max_bytes=$big (declared 4294967296) max_age_ns=$age" "$D/bill2.log"
ok "... and billing logged what it kept (stream_kept)" $?
tap_end
