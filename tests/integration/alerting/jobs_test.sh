#!/usr/bin/env bash
# jobs_test.sh -- what gridpool-alerting reads from the scheduler's
# JOBS stream, against real services (run under tests/harness/with-stack.sh):
# gridpool-registry, gridpool-scheduler, gridpool-alerting and four
# gridpool-agent processes at one site on the simulated GPU backend.
#
#   1. job failure rates: customer "bad" runs 16 attempts that exit 3,
#      customer "good" 4 that succeed: one JobsFailingForTenant alert for
#      bad (label tenant=bad, nobody dispatched: the customer is told), none
#      for good; no JobsFailingAtSite (the site's share is 80%, under the
#      90% of this test's rule); a JobsFailingOnNode alert exactly on the nodes
#      where at least 4 attempts ended and 80% failed (cross-checked
#      against the scheduler's own attempt rows; n1, the only L40S node,
#      where 8 of bad's jobs must run, always among them); resolved once the window
#      (40 s here) holds no failures;
#   2. the jobs and customers an alert concerns: a node running two jobs of
#      good stops (SIGSTOP): its NodeDown alert names them ("2 job(s) of 1
#      customer(s): good 2 (...)") in gpctl describe alert; a heat alert
#      pending on it is dropped unseen when it is lost (no beat can confirm
#      it), so it neither fires on old data nor mutes the NodeDown.
# test-tags: pass=san (tests/run.sh)
set -u
B=$GP_BUILD
G="$B/bin/gpctl --timeout 10000"
D=$GP_STACK_DIR
PY=/usr/bin/python3
TENANT=op
# shellcheck source=tests/lib/lib.sh
. "$(dirname "$0")/../../lib/lib.sh"

on_fail() {
    echo "# alerts:"; sql "SELECT alertname, state, site, node, labels, evidence, affected FROM alerts" |
        cut -c1-250 | sed 's/^/#   /'
    echo "# alerting log:"; grep -E 'warn|error|job' "$D/alerting.log" | tail -n 10 | sed 's/^/#   /'
    echo "# attempt ends alerting took from JOBS: $(sql "SELECT count(*) FROM alert_job_runs")," \
        "ended: $(sql "SELECT count(*) FROM alert_job_runs WHERE ended_ms IS NOT NULL")"
}
tap_on_fail=on_fail

cat >"$tmp/rules.conf" <<'RULES'
NodeDown              node.state          ==  lost  3s  ticket  -  "Node {node} at {site} lost: {reason}"
JobsFailingOnNode     node.job_fail_pct   >=  80    0s  ticket  -  "Jobs fail on {node} at {site}"
JobsFailingAtSite     site.job_fail_pct   >=  90    0s  ticket  -  "Jobs fail at {site} ({region})"
JobsFailingForTenant  tenant.job_fail_pct >=  80    0s  ticket  -  "Jobs of customer {tenant} fail wherever they run"
RULES

agent() {     # node [model]
    spawn "agent-$1" "$B/bin/gridpool-agent" --config "$D/gp.env" --site s1 --node "$1" \
        --gpu-backend sim --sim-gpus 2 --sim-model "${2:-L4}" --http-port 0 --heartbeat-ms 500
}
spawn registry "$B/bin/gridpool-registry" --config "$D/gp.env" --http-port 0 --heartbeat-ms 500
for _ in $(seq 1 100); do $G health registry >/dev/null 2>&1 && break; sleep 0.1; done
$G create tenant op --kind operator >/dev/null &&
    $G create tenant bad --kind customer --parent op >/dev/null &&
    $G create tenant good --kind customer --parent op >/dev/null &&
    $G create site s1 --tenant op --region r1 --lat 52.5 --lon 13.4 >/dev/null &&
    $G create pool p-all --tenant op --scope global >/dev/null
ok "tenants op, bad and good, a site and a global pool are created" $?
agent n1 L40S             # the one L40S node: half of bad's jobs go there, so it always fails
for i in 2 3 4; do agent "n$i"; done
spawn scheduler "$B/bin/gridpool-scheduler" --config "$D/gp.env" --http-port 0 --place-ms 200 \
    --checkpoint-root "$tmp/ckpt"
spawn alerting "$B/bin/gridpool-alerting" --config "$D/gp.env" --http-port 0 \
    --rules "$tmp/rules.conf" --jobs-ms 1000 --jobs-window-ms 40000 --jobs-min-ended 4
for _ in $(seq 1 150); do grep -q 'feed_ready nodes=4 ' "$D/scheduler.log" && break; sleep 0.2; done
grep -q 'feed_ready nodes=4 ' "$D/scheduler.log"
ok "the scheduler loaded the 4 nodes" $?

# ---- 1. failure rates ------------------------------------------------------------------

# 8 of bad's jobs can only run on n1 (L40S), the rest share n2-n4 (L4) with
# good's: which nodes cross 80% there depends on placement, n1 always does
for i in $(seq 1 16); do
    model=L4; [ "$i" -le 8 ] && model=L40S
    TENANT=bad submit --command 'sim:run=500ms exit=3' --gpus 1 --max-attempts 1 --model $model \
        >>"$tmp/bad.ids"
    [ "$i" -le 4 ] && TENANT=good submit --command 'sim:run=500ms' --gpus 1 --model L4 >>"$tmp/good.ids"
done
[ "$(wc -l <"$tmp/bad.ids")" = 16 ] && [ "$(wc -l <"$tmp/good.ids")" = 4 ]
ok "16 failing jobs of bad and 4 succeeding jobs of good are submitted" $?
wait_sql "SELECT count(*) FROM jobs WHERE state IN ('succeeded','failed')" 20 300
st_=$?
ok "all 20 ended ($(sql "SELECT string_agg(tenant || ':' || state || ':' || n, ' ') FROM (SELECT tenant, state, count(*) n FROM jobs GROUP BY 1, 2) x"))" $st_
active() { sql "SELECT count(*) FROM alerts WHERE alertname = '$1' AND state = 'firing' ${2:-}"; }
wait_sql "SELECT count(*) FROM alerts WHERE alertname = 'JobsFailingForTenant' AND state = 'firing'" 1 50
ok "one JobsFailingForTenant alert fires" $?
row=$(sql "SELECT labels || '|' || site || '|' || node || '|' || dispatch || '|' || cause FROM alerts
           WHERE alertname = 'JobsFailingForTenant'")
[ "$row" = 'tenant=bad|_||none|jobs_failing' ]
ok "... for customer bad (labels tenant=bad), nobody dispatched, cause jobs_failing ($row)" $?
sql "SELECT evidence FROM alerts WHERE alertname = 'JobsFailingForTenant'" |
    grep -Eq '^([4-9]|1[0-6]) of \1 attempts that ended in the last 40 s failed'
st_=$?
ok "... its evidence counts the attempts, all failed ($(sql "SELECT evidence FROM alerts WHERE alertname = 'JobsFailingForTenant'"))" $st_
sleep 2                                      # two more passes
[ "$(active JobsFailingAtSite)" = 0 ] && [ "$(active JobsFailingForTenant "AND labels = 'tenant=good'")" = 0 ]
ok "no JobsFailingAtSite (16 of 20 failed at s1, under this test's 90%) and none for good" $?
# the nodes where >= 4 ended and >= 80% failed, from the scheduler's rows
want=$(sql "SELECT string_agg(node, ' ' ORDER BY node) FROM (SELECT node FROM attempts
            WHERE state IN ('succeeded','failed') GROUP BY node
            HAVING count(*) >= 4 AND count(*) FILTER (WHERE state = 'failed') * 100 >= 80 * count(*)) x")
got=$(sql "SELECT string_agg(node, ' ' ORDER BY node) FROM alerts WHERE alertname = 'JobsFailingOnNode'
           AND state = 'firing'")
[[ " $want " == *" n1 "* ]] && [ "$want" = "$got" ]
ok "JobsFailingOnNode fires exactly where 80% of at least 4 attempts failed (want '${want}', got '${got}')" $?
wait_sql "SELECT count(*) FROM alerts WHERE alertname LIKE 'JobsFailing%' AND state <> 'resolved'" 0 350
ok "once the 40 s window holds no failures, every job failure alert is resolved" $?
[ "$(sql "SELECT count(*) FROM alert_events WHERE alertname = 'JobsFailingForTenant'")" = 2 ]
ok "... the tenant alert told twice: firing once (its counts changing did not tell it again), resolved once" $?

# ---- 2. affected jobs and customers ---------------------------------------------------------

j1=$(TENANT=good submit --command 'sim:run=600s' --gpus 1)
j2=$(TENANT=good submit --command 'sim:run=600s' --gpus 1)
wait_sql "SELECT count(*) FROM attempts WHERE job_id IN ('$j1', '$j2') AND state = 'running'" 2 100
ok "two long jobs of good run" $?
# stop a node that runs one of them (both if they share it)
node=$(sql "SELECT node FROM attempts WHERE job_id = '$j1' AND state = 'running'")
on_node=$(sql "SELECT string_agg(job_id, ' ' ORDER BY job_id) FROM attempts WHERE node = '$node' AND state = 'running'")
n_on=$(echo "$on_node" | wc -w)
# a heat alert pending on the node, as a beat of a hot GPU raises it (a
# 2-minute for-duration): the node going silent must drop it, not let it
# fire on old data and mute the NodeDown that explains the silence
sql "SELECT alert_raise('GpuOverheating', 'ticket', 'node', 'r1', 's1', '$node', '', 120000,
     'A GPU of $node runs hot', 'heat', 'GPU 0 at 95 C', 'check cooling', 'site_partner',
     'telemetry')" >/dev/null
kill -STOP "$(cat "$D/pids/agent-$node.pid")"
wait_sql "SELECT state FROM alerts WHERE alertname = 'NodeDown' AND node = '$node'" firing 200
ok "NodeDown fires for $node (stopped), not muted by the heat alert pending there" $?
[ "$(sql "SELECT state || ':' || (SELECT count(*) FROM alert_events e WHERE e.id = a.id) FROM alerts a
          WHERE alertname = 'GpuOverheating' AND node = '$node'")" = 'resolved:0' ]
ok "... the pending heat alert was dropped unseen when the node was lost" $?
aff=$(sql "SELECT affected FROM alerts WHERE alertname = 'NodeDown' AND node = '$node'")
[[ "$aff" == "$n_on job(s) of 1 customer(s): good $n_on ("*")" ]] &&
    for j in $on_node; do [[ "$aff" == *"$j"* ]] || false; done
ok "... it names the jobs it concerns and their customer: $aff" $?
$G describe alert "$(sql "SELECT id FROM alerts WHERE alertname = 'NodeDown' AND node = '$node'")" >"$tmp/desc" 2>&1
grep -q "^Affected:   $n_on job(s) of 1 customer(s): good" "$tmp/desc"
st_=$?
ok "... and gpctl describe alert shows them ($(grep '^Affected' "$tmp/desc"))" $st_
kill -CONT "$(cat "$D/pids/agent-$node.pid")"
tap_end
