#!/usr/bin/env bash
# NOT YET IN make test (named *_run.sh, not *_test.sh): it does not pass.
# Run: tests/harness/with-stack.sh build bash tests/integration/billing_fault_run.sh
# What two runs of it showed (session 20):
#   - the test stack's PostgreSQL runs with synchronous_commit and fsync off
#     and stack.sh stops it with -m immediate, so a restart loses the last
#     commits: a placement committed, dispatched and then gone, whose usage
#     metering sends to review as an unknown attempt (a sequence gap for the
#     auditor).  The run must restart PostgreSQL durable
#     (GP_STACK_PG_DURABLE=1), as production runs;
#   - with 500 ms beats nodes are lost ~2 s after their last contact, so a
#     3 s nats-server restart makes every node lost (and freezes the
#     control plane): what the agents ran meanwhile, up to their 6 s lease,
#     is delivered in the ground truth but not billable (89.9% in the
#     ledger).  The outage must stay under the detector's floor, as with
#     production timing, or the auditor must compare against billable time.
# billing_fault_run.sh -- usage billed exactly once through faults, against
# real services (run under tests/harness/with-stack.sh): registry,
# scheduler, recovery, two metering and two billing instances, an 8-site
# fleet (the agents' own code) running 24 checkpointing jobs of 45 s.
# During the run: kill -9 of a metering and of a billing instance (each
# started again), nats-server and PostgreSQL stopped and started, a site's
# power cut and another site's uplink cut.  Then gridpool-audit over the
# ledger, the stream USAGE and the simulator's ground truth: no record lost
# or doubled, trial balance zero, the revenue-share legs summing to their
# charges, billed GPU-seconds never more than delivered per attempt and at
# least 99.9% of them in all.
set -u
B=$GP_BUILD
G="$B/bin/gpctl --timeout 10000"
D=$GP_STACK_DIR
TENANT=op
PY=/usr/bin/python3
STACK="$GP_HARNESS/stack.sh"
# shellcheck source=tests/harness/testlib.sh
. "$(dirname "$0")/../harness/testlib.sh"

on_fail() {
    for f in meter-a bill-a bill-b; do
        echo "# $f log tail:"; grep -v 'level=debug' "$D/$f.log" | tail -n 6 | sed 's/^/#   /'
    done
    if [ -n "${GP_KEEP:-}" ]; then rm -rf "$GP_KEEP"; cp -r "$D" "$GP_KEEP"; fi
}
tap_on_fail=on_fail
meter() { spawn "$1" "$B/bin/gridpool-metering" --config "$D/gp.env" --http-port 0 --instance "$1" \
    --window-ms 5000 --grace-ms 300 --silent-ms 3000 --sweep-ms 200 --claim-ms 3000; }
bill() { spawn "$1" "$B/bin/gridpool-billing" --config "$D/gp.env" --http-port 0 --instance "$1" \
    --book-ms 500; }

spawn registry "$B/bin/gridpool-registry" --config "$D/gp.env" --http-port 0 --heartbeat-ms 500 \
    --lease-ms 6000 --sweep-ms 200
for _ in $(seq 1 100); do $G health registry >/dev/null 2>&1 && break; sleep 0.1; done
spawn sched "$B/bin/gridpool-scheduler" --config "$D/gp.env" --http-port 0 --heartbeat-ms 500 \
    --lease-ms 6000 --fence-margin-ms 500 --place-ms 200 --checkpoint-root "$tmp/ckpt"
spawn rec "$B/bin/gridpool-recovery" --config "$D/gp.env" --http-port 0 --replace-ms 100 \
    --sites-ms 2000
meter meter-a
meter meter-b
bill bill-a
bill bill-b
spawn sim "$B/bin/gridpool-sim" --config "$D/gp.env" --http-port 0 --sites 8 --seed 23 \
    --spread-ms 300 --truth "$D/truth.jsonl"
for _ in $(seq 1 300); do grep -q '^sim: registered' "$D/sim.log" && break; sleep 0.1; done
grep -q '^sim: registered' "$D/sim.log"
ok "the 8-site fleet registered" $?
for _ in $(seq 1 100); do grep -q feed_ready "$D/sched.log" && break; sleep 0.1; done

for i in $(seq 1 24); do
    submit --command 'sim:run=45s ckpt=2s' --gpus $((1 + i % 2)) --interruptible \
        --max-attempts 6 >/dev/null
done
wait_sql "SELECT count(*) FROM attempts WHERE state = 'running'" 24 200
ok "24 jobs run" $?

sleep 5
kill -9 "$(cat "$D/pids/meter-a.pid")"; sleep 2; meter meter-a
kill -9 "$(cat "$D/pids/bill-a.pid")"; sleep 2; bill bill-a
ok "kill -9 of a metering and a billing instance, each started again" 0
"$STACK" stop-nats "$D" >/dev/null 2>&1; sleep 3; "$STACK" start-nats "$D" >/dev/null 2>&1
ok "nats-server stopped for 3 s and started again" $?
sleep 3
"$STACK" stop-pg "$D" >/dev/null 2>&1; sleep 3; "$STACK" start-pg "$D" >/dev/null 2>&1
ok "PostgreSQL stopped for 3 s and started again" $?
sleep 2
cut=$(sql "SELECT site FROM attempts WHERE state = 'running' GROUP BY site ORDER BY count(*) DESC
           LIMIT 1")
up=$(sql "SELECT site FROM attempts WHERE state = 'running' AND site <> '$cut' GROUP BY site
          ORDER BY count(*) DESC LIMIT 1")
$G fault site_power_cut --site "$cut" --duration-ms 60000 >/dev/null &&
    $G fault uplink_cut --site "$up" --duration-ms 4000 >/dev/null
ok "power cut at $cut, uplink cut of 4 s at $up" $?
wait_sql "SELECT count(*) FROM jobs WHERE state NOT IN ('succeeded', 'failed')" 0 1200
st_=$?; ok "every job ended ($(sql "SELECT string_agg(state || ':' || n, ' ') FROM
    (SELECT state, count(*) n FROM jobs GROUP BY state) s"))" $st_
sleep 8                                   # silences, the last windows, the outboxes
kill -TERM "$(cat "$D/pids/sim.pid")" 2>/dev/null
for _ in $(seq 1 50); do kill -0 "$(cat "$D/pids/sim.pid")" 2>/dev/null || break; sleep 0.2; done

"$B/test/bin/usage_dump" "$GP_NATS_URL" "audit1" 2000 >"$tmp/usage.jsonl" 2>"$tmp/dump.err"
n_stream=$(grep -c . "$tmp/usage.jsonl")
wait_sql "SELECT (SELECT count(*) FROM usage_records) + (SELECT count(*) FROM rejected_records)" \
    "$n_stream" 300
st_=$?; ok "billing took the $n_stream records of the stream ($(sql "SELECT count(*) FROM usage_records") posted)" $st_
"$GP_HARNESS/../../deploy/gridpool-audit" --truth "$D/truth.jsonl" --stream "$tmp/usage.jsonl" \
    >"$tmp/audit.out" 2>&1
st=$?
sed 's/^/# /' "$tmp/audit.out"
[ "$st" = 0 ] && grep -q 'lost 0 (sequence gaps 0, stream ids missing 0 of' "$tmp/audit.out" &&
    grep -q 'doubled 0$' "$tmp/audit.out"
ok "gridpool-audit: clean: 0 lost, 0 doubled, trial balance 0, billed <= delivered and >= 99.9%" $?
tap_end
