#!/usr/bin/env bash
# alerting_test.sh -- one actionable alert per real problem, against real
# services (run under tests/harness/with-stack.sh): gridpool-registry,
# gridpool-recovery, two gridpool-alerting instances and a 6-site
# simulated fleet (the agents' own code) whose faults are injected
# through it.  Heartbeats every 500 ms; the test's rules file gives
# NodeDown a for-duration of 4 s and SiteUnreachable 5 s.  The alerts are
# read the way an operator reads them: gpctl watch alerts -o json (a core
# subscription to gp.alerts.>, so a copy published by both instances
# would show twice).
#
#   1. the rules are data: --check-config prints them; a bad rules file
#      stops the service (exit 78) with its line;
#   2. a node stopped at a site that is up: one NodeDown (remote hands),
#      resolved when it comes back; no site alert;
#   3. a site power cut: exactly one SiteUnreachable with cause, evidence,
#      action and whom to send, its node alerts muted (none published);
#      resolved when the power returns, the cause then known (power);
#   4. control-plane isolation (3 of 6 sites cut at once): one
#      ControlPlaneIsolation alert (platform on-call), no site or node
#      alert; resolved when contact returns;
#   5. an XID 79 (a GPU fallen off the bus) and an ECC double-bit burst on
#      one node: one alert each (GpuFallenOffBus, GpuEccUncorrectable) with
#      the catalog's action and the node's quarantine in the diagnosis;
#      the NodeQuarantined alert itself is muted by them;
#   6. gpctl get alerts / describe alert / ack alert; a silence mutes what
#      it matches (a node down at one site) and nothing else (a node down
#      at another), and ends at its expiry (the muted alert is published
#      then);
#   7. two instances: every event id published once; an operator reading
#      ALERTS through a durable consumer (gpctl watch alerts --durable),
#      away for the site power cut and the isolation (and their resolves),
#      gets every firing and resolve of that time when it comes back, and
#      none twice;
#   8. a real Prometheus Alertmanager (Debian's prometheus-alertmanager)
#      on a loopback port, fed by both instances: it holds the site alert
#      once, with its labels and diagnosis, and its webhook (a small
#      receiver here) is notified of the firing and of the resolve.
# test-tags: pass=normal (tests/run.sh)
set -u
B=$GP_BUILD
G="$B/bin/gpctl --timeout 10000"
D=$GP_STACK_DIR
PY=/usr/bin/python3
# shellcheck source=tests/lib/lib.sh
. "$(dirname "$0")/../../lib/lib.sh"

on_fail() {
    echo "# alerts seen:"; sed 's/^/#   /' "$D/alerts.jsonl" | cut -c1-300 | tail -n 20
    echo "# alerting-a log:"; grep -E 'alert_|warn|error' "$D/alerting-a.log" | tail -n 12 | sed 's/^/#   /'
    for f in "$D"/alerting-*.log "$D/recovery.log"; do     # the first warnings, where a stall starts
        echo "# $(basename "$f"): $(grep -c 'level=warn\|level=error' "$f") warnings, the first:"
        grep -E 'level=(warn|error)' "$f" | head -n 6 | cut -c1-300 | sed 's/^/#   /'
    done
    echo "# recovery:"; grep -E 'site_event|isolation' "$D/recovery.log" | tail -n 6 | sed 's/^/#   /'
    if [ -n "${GP_KEEP:-}" ]; then rm -rf "$GP_KEEP"; cp -r "$D" "$GP_KEEP"; fi
}
tap_on_fail=on_fail

cat >"$tmp/rules.conf" <<'RULES'
# the shipped rules with short for-durations, for a test (NodeQuarantined
# waits for the GPU alert that explains it, as the shipped one does)
SiteUnreachable       site.state       ==  unreachable  5s   page     -             "Site {site} ({region}) unreachable: {cause}"
ControlPlaneIsolation isolation.state  ==  frozen       0s   page     team=platform "{sites_silent} of {sites} sites went silent at once"
NodeDown              node.state       ==  lost         4s   ticket   -             "Node {node} at {site} lost: {reason}"
NodeQuarantined       node.state       ==  quarantined  3s   ticket   -             "Node {node} at {site} quarantined: {reason}"
GpuFallenOffBus       gpu.state        ==  lost         0s   page     -             "A GPU of {node} at {site} fell off the bus: {reason}"
GpuEccUncorrectable   gpu.ecc_dbe      >   0            0s   page     -             "Uncorrectable ECC errors on {node} at {site}: {reason}"
GpuOverheating        gpu.temp_c       >=  90           2m   ticket   -             "A GPU of {node} at {site} runs hot: {reason}"
RULES

# ---- 1. rules as data --------------------------------------------------------------

out=$("$B/bin/gridpool-alerting" --config "$D/gp.env" --rules "$tmp/rules.conf" --check-config 2>&1)
st_=$?
[ $st_ -eq 0 ] && echo "$out" | grep -q '^# 7 rule(s)' && echo "$out" | grep -q '^NodeDown  *node.state  *==  *lost  *4s  *ticket' &&
    echo "$out" | grep -q '^GpuOverheating  *gpu.temp_c  *>=  *90  *120s  *ticket'
ok "--check-config prints the 7 rules in force" $?
printf 'NodeDown node.state == lost 4s ticket - "ok"\nSiteDown site.state == gone 5s page - "x"\n' >"$tmp/bad.conf"
"$B/bin/gridpool-alerting" --config "$D/gp.env" --rules "$tmp/bad.conf" --http-port -1 >/dev/null 2>"$tmp/bad.err"
st_=$?
[ $st_ -eq 78 ] && grep -q "line 2: site.state has no value 'gone'" "$tmp/bad.err"
st_=$?; ok "a bad rules file stops the service: exit 78, $(head -c 120 "$tmp/bad.err")" $st_

# ---- the stack ------------------------------------------------------------------

# Alertmanager, its notifications to a webhook that writes each body a line
AMP=$(free_port); HOOKP=$(free_port)
cat >"$tmp/hook.py" <<'HOOK'
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers['Content-Length']))
        with open(sys.argv[2], 'ab') as f:
            f.write(body.replace(b'\n', b' ') + b'\n')
        self.send_response(200); self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer(('127.0.0.1', int(sys.argv[1])), H).serve_forever()
HOOK
cat >"$tmp/am.yml" <<AMCONF
route:
  receiver: hook
  group_by: [alertname, site]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: hook
    webhook_configs:
      - url: http://127.0.0.1:$HOOKP/
        send_resolved: true
AMCONF
spawn hook $PY "$tmp/hook.py" "$HOOKP" "$D/hook.jsonl"
spawn alertmanager prometheus-alertmanager --config.file="$tmp/am.yml" --storage.path="$tmp/am" \
    --web.listen-address="127.0.0.1:$AMP" --cluster.listen-address=
wait_port "$AMP" 20 && wait_port "$HOOKP" 10
st_=$?; ok "Alertmanager $(prometheus-alertmanager --version 2>&1 | head -n 1 | cut -d' ' -f1-3) on port $AMP" $st_

spawn registry "$B/bin/gridpool-registry" --config "$D/gp.env" --http-port 0 --heartbeat-ms 500 \
    --lease-ms 6000 --sweep-ms 200
for _ in $(seq 1 100); do $G health registry >/dev/null 2>&1 && break; sleep 0.1; done
spawn recovery "$B/bin/gridpool-recovery" --config "$D/gp.env" --http-port 0 --replace-ms 200 \
    --sites-ms 2000 --site-window-ms 10000 --isolation-window-ms 8000 --thaw-ms 3000
for i in a b; do
    spawn "alerting-$i" "$B/bin/gridpool-alerting" --config "$D/gp.env" --http-port 0 \
        --instance "alerting-$i" --rules "$tmp/rules.conf" --eval-ms 200 --publish-ms 100 \
        --sites-ms 2000 --alertmanager-url "http://127.0.0.1:$AMP" --alertmanager-ms 1000
done
for _ in $(seq 1 100); do $G health alerting >/dev/null 2>&1 && break; sleep 0.1; done
$G watch alerts -o json >"$D/alerts.jsonl" 2>"$D/watch.err" &
watcher=$!
pids+=("$watcher")
spawn sim "$B/bin/gridpool-sim" --config "$D/gp.env" --http-port 0 --sites 6 --seed 7 \
    --spread-ms 500
for _ in $(seq 1 300); do grep -q '^sim: registered' "$D/sim.log" && break; sleep 0.1; done
for _ in $(seq 1 100); do grep -q 'sites_loaded sites=6' "$D/recovery.log" && break; sleep 0.1; done
grep -q '^sim: registered' "$D/sim.log" && grep -q 'Watching gp.alerts' "$D/watch.err"
st_=$?; ok "the 6-site fleet registered ($(grep -o 'registered [0-9]* nodes' "$D/sim.log" | head -n 1)), an operator watches gp.alerts.>" $st_
sleep 2                          # the registrations' node states, evaluated
# an operator on a durable consumer of ALERTS
$G watch alerts --durable ops -o json >"$D/durable1.jsonl" 2>"$D/durable1.err" &
dw1=$!
pids+=("$dw1")

# count NAME STATUS [SITE [NODE]]: alerts seen with that name and status
count() {
    $PY - "$D/alerts.jsonl" "$@" <<'PY'
import json, sys
path, name, status = sys.argv[1:4]
site = sys.argv[4] if len(sys.argv) > 4 else None
node = sys.argv[5] if len(sys.argv) > 5 else None
n = 0
for l in open(path):
    a = json.loads(l)
    if a['alertname'] == name and a['status'] == status and (site is None or a['site'] == site) \
            and (node is None or node == '*' or a.get('node', '') == node):
        n += 1
print(n)
PY
}
# field NAME STATUS SITE KEY: KEY of the last such alert, from its event of
# the highest seq (two instances publish: an update may arrive before what
# it updates)
field() {
    $PY - "$D/alerts.jsonl" "$@" <<'PY'
import json, sys
path, name, status, site, key = sys.argv[1:6]
seen = [json.loads(l) for l in open(path)]
seen = [a for a in seen if a['alertname'] == name and a['status'] == status and a['site'] == site]
last = [a for a in seen if a['id'] == seen[-1]['id']] if seen else [{}]
print(max(last, key=lambda a: a.get('seq', 0)).get(key, ''))
PY
}
wait_for() {  # tenths NAME STATUS SITE [NODE]
    local t=$1; shift
    for _ in $(seq 1 "$t"); do [ "$(count "$@")" -ge 1 ] && return 0; sleep 0.1; done
    return 1
}
node_alerts() {  # site: NodeDown alerts of its nodes, firing or resolved
    echo $(( $(count NodeDown firing "$1") + $(count NodeDown resolved "$1") ))
}
before=$(wc -l <"$D/alerts.jsonl")
[ "$before" -eq 0 ]
ok "a healthy fleet: no alert ($before)" $?

# ---- 2. one node down at a site that is up ------------------------------------------

$G fault node_stop --node s0001-n01 >/dev/null
wait_for 200 NodeDown firing s0001 s0001-n01
ok "a node stopped: NodeDown fires for s0001-n01 after its 4 s" $?
echo "# $(grep '"NodeDown"' "$D/alerts.jsonl" | head -n 1 | cut -c1-400)"
[ "$(field NodeDown firing s0001 dispatch)" = remote_hands ] &&
    [ "$(field NodeDown firing s0001 cause)" = node_down ] &&
    [ -n "$(field NodeDown firing s0001 action)" ] && [ "$(field NodeDown firing s0001 severity)" = ticket ]
ok "... a ticket, cause node_down, send remote hands, with an action" $?
$G fault node_resume --node s0001-n01 >/dev/null
wait_for 100 NodeDown resolved s0001 s0001-n01
ok "... resolved when it comes back" $?
[ "$(count SiteUnreachable firing s0001)" -eq 0 ]
ok "... and its site raised nothing" $?

# ---- 3. a site power cut --------------------------------------------------------------

kill -TERM "$dw1"; wait "$dw1"           # the durable operator goes away
away_at=$(date +%s)

$G fault site_power_cut --site s0004 --duration-ms 20000 >/dev/null
cut_at=$(date +%s)
wait_for 300 SiteUnreachable firing s0004
ok "power cut at s0004: SiteUnreachable fires" $?
echo "# $(grep '"SiteUnreachable"' "$D/alerts.jsonl" | head -n 1 | cut -c1-600)"
[ "$(field SiteUnreachable firing s0004 cause)" = power_or_uplink ] &&
    [ "$(field SiteUnreachable firing s0004 dispatch)" = site_partner ] &&
    [ "$(field SiteUnreachable firing s0004 severity)" = page ] &&
    [ "$(field SiteUnreachable firing s0004 region)" = eu-north ] &&
    field SiteUnreachable firing s0004 evidence | grep -q 'node(s) lost' &&
    [ -n "$(field SiteUnreachable firing s0004 action)" ]
ok "... a page for region eu-north, cause power_or_uplink, evidence, action, send the site partner" $?
muted=$(field SiteUnreachable firing s0004 muted)
[ "${muted:-0}" -ge 1 ]
ok "... it says it mutes its nodes' alerts (muted=$muted)" $?
# Alertmanager: the alert, once, from two instances posting every second
am_alerts() {
    curl -s "http://127.0.0.1:$AMP/api/v2/alerts?filter=alertname%3D%22$1%22&filter=site%3D%22$2%22"
}
for _ in $(seq 1 100); do [ "$(am_alerts SiteUnreachable s0004 | $PY -c 'import json,sys; print(len(json.load(sys.stdin)))')" -ge 1 ] && break; sleep 0.1; done
am_alerts SiteUnreachable s0004 >"$tmp/am1.json"
$PY - "$tmp/am1.json" <<'PY'
import json, sys
a = json.load(open(sys.argv[1]))
print('# alertmanager:', json.dumps(a)[:400])
ok = len(a) == 1 and a[0]['labels'].get('severity') == 'page' and a[0]['labels'].get('region') == 'eu-north' \
    and a[0]['annotations'].get('dispatch') == 'site_partner' and a[0]['annotations'].get('action') \
    and a[0]['status']['state'] == 'active'
sys.exit(0 if ok else 1)
PY
ok "Alertmanager holds it once (two instances post it), active, with labels and the diagnosis as annotations" $?
for _ in $(seq 1 100); do grep -q '"status":"firing".*"site":"s0004"' "$D/hook.jsonl" 2>/dev/null && break; sleep 0.1; done
grep '"status":"firing"' "$D/hook.jsonl" 2>/dev/null | grep -q '"alertname":"SiteUnreachable".*"site":"s0004"\|"site":"s0004".*"alertname":"SiteUnreachable"'
ok "... and notified its receiver: firing" $?
wait_for 400 SiteUnreachable resolved s0004
ok "power back: resolved" $?
for _ in $(seq 1 100); do grep '"status":"resolved"' "$D/hook.jsonl" 2>/dev/null | grep -q '"site":"s0004"' && break; sleep 0.1; done
grep '"status":"resolved"' "$D/hook.jsonl" 2>/dev/null | grep -q '"alertname":"SiteUnreachable".*"site":"s0004"\|"site":"s0004".*"alertname":"SiteUnreachable"'
st_=$?; ok "... Alertmanager got the resolve: its receiver notified resolved ($(grep -c . "$D/hook.jsonl") notifications)" $st_
[ "$(field SiteUnreachable resolved s0004 cause)" = power ] &&
    [ "$(field SiteUnreachable resolved s0004 dispatch)" = utility ]
ok "... the cause now known: power (the nodes came back rebooted), the utility to ask" $?
sleep 6                          # NodeDown's 4 s after the site's return: nodes that stayed down would fire
[ "$(count SiteUnreachable firing s0004)" -eq 1 ] && [ "$(count SiteUnreachable resolved s0004)" -eq 1 ] &&
    [ "$(node_alerts s0004)" -eq 0 ]
st_=$?; ok "exactly one site alert and its resolve, no node alert ($(node_alerts s0004)) for the $(( $(date +%s) - cut_at )) s" $st_

# ---- 4. control-plane isolation -------------------------------------------------------

sleep 8                          # s0004's outage out of the isolation window
mark=$(wc -l <"$D/alerts.jsonl")
fpids=()
for s in s0001 s0002 s0006; do
    $G fault uplink_cut --site "$s" --duration-ms 10000 >/dev/null & fpids+=($!)
done
wait "${fpids[@]}"
wait_for 300 ControlPlaneIsolation firing _
ok "3 of 6 sites cut at once: ControlPlaneIsolation fires" $?
echo "# $(grep '"ControlPlaneIsolation"' "$D/alerts.jsonl" | head -n 1 | cut -c1-500)"
[ "$(field ControlPlaneIsolation firing _ dispatch)" = platform_oncall ] &&
    [ "$(field ControlPlaneIsolation firing _ region)" = _ ] &&
    [ "$(field ControlPlaneIsolation firing _ labels)" = team=platform ]
ok "... fleet-wide (region and site _), team=platform, our own on-call to send" $?
wait_for 300 ControlPlaneIsolation resolved _
ok "contact back: resolved" $?
sleep 7
after=$(tail -n +"$((mark + 1))" "$D/alerts.jsonl" | grep -cv '"ControlPlaneIsolation"')
[ "$(count ControlPlaneIsolation firing _)" -eq 1 ] && [ "$after" -eq 0 ]
ok "one isolation alert and its resolve; no site or node alert meanwhile ($after)" $?

# back once the isolation resolved: the power cut and the isolation (and
# their resolves) all came while it was away
back_at=$(date +%s)
$G watch alerts --durable ops -o json >"$D/durable2.jsonl" 2>"$D/durable2.err" &
dw2=$!
pids+=("$dw2")
away=$(( $(date +%s) - away_at ))

# ---- 5. a GPU fallen off the bus, ECC errors ------------------------------------------

# a node with two GPUs or more: GPU 0 falls off the bus, GPU 1 takes the ECC burst
gn=$($G get nodes -o json | $PY -c "
import json, sys
ns = [n for n in json.load(sys.stdin) if len(n.get('gpus', [])) >= 2 and n['site'] != 's0004']
print(sorted(ns, key=lambda n: n['id'])[0]['id'] if ns else '')")
gs=${gn%-n*}
mark=$(wc -l <"$D/alerts.jsonl")
$G fault gpu_xid --node "$gn" --gpu 0 --code 79 >/dev/null
wait_for 200 GpuFallenOffBus firing "$gs" "$gn"
ok "XID 79 on $gn: GpuFallenOffBus fires" $?
$G fault ecc_burst --node "$gn" --gpu 1 --count 500 >/dev/null
wait_for 200 GpuEccUncorrectable firing "$gs" "$gn"
ok "an ECC double-bit burst on its GPU 1: GpuEccUncorrectable fires" $?
# the quarantine in their diagnosis: at once, or as an update of the alert
for _ in $(seq 1 100); do
    [ "$(field GpuFallenOffBus firing "$gs" evidence | grep -c 'node quarantined')" = 1 ] &&
        [ "$(field GpuEccUncorrectable firing "$gs" evidence | grep -c 'node quarantined')" = 1 ] && break
    sleep 0.1
done
echo "# $(grep '"GpuFallenOffBus"' "$D/alerts.jsonl" | tail -n 1 | cut -c1-700)"
field GpuFallenOffBus firing "$gs" action | grep -q 'XID 79' &&
    [ "$(field GpuFallenOffBus firing "$gs" severity)" = page ] &&
    [ "$(field GpuFallenOffBus firing "$gs" dispatch)" = remote_hands ] &&
    field GpuFallenOffBus firing "$gs" evidence | grep -q 'node quarantined by the registry'
ok "... XID 79: the catalog's action (reboot, reseat or replace), remote hands, the quarantine in the evidence" $?
field GpuEccUncorrectable firing "$gs" action | grep -q 'RMA' &&
    [ "$(field GpuEccUncorrectable firing "$gs" dispatch)" = field_technician ] &&
    field GpuEccUncorrectable firing "$gs" evidence | grep -q 'uncorrectable' &&
    field GpuEccUncorrectable firing "$gs" evidence | grep -q 'node quarantined by the registry'
ok "... ECC: drain, reset, RMA if they return; a field technician; the quarantine in the evidence" $?
sleep 3
ids=$(tail -n +"$((mark + 1))" "$D/alerts.jsonl" | $PY -c "
import json, sys
a = [json.loads(l) for l in sys.stdin]
print(len({x['id'] for x in a}), ' '.join(sorted({x['alertname'] for x in a})))")
[ "$ids" = "2 GpuEccUncorrectable GpuFallenOffBus" ]
ok "one alert each, and nothing else: the node's NodeQuarantined is muted by them ($ids)" $?

# ---- 6. get, describe, ack; a silence ---------------------------------------------------

$G get alerts -o json >"$tmp/active.json" 2>&1
gid=$($PY -c "
import json
a = json.load(open('$tmp/active.json'))['items']
m = {(x['alertname'], x['node']): x for x in a}
g, e, q = m.get(('GpuFallenOffBus', '$gn')), m.get(('GpuEccUncorrectable', '$gn')), m.get(('NodeQuarantined', '$gn'))
ok = g and e and q and g['state'] == 'firing' and e['state'] == 'firing' and q['state'] == 'pending'
print(g['id'] if ok else '')")
[ -n "$gid" ]
ok "get alerts: the two GPU alerts firing, the node's NodeQuarantined pending (muted)" $?
$G ack alert "$gid" --by ops-anna --comment "remote hands rebooting it" >"$tmp/ack.out" 2>&1 &&
    $G get alerts --site "$gs" -o json | grep -q '"acked_by":"ops-anna"'
st_=$?; ok "ack alert: $(cat "$tmp/ack.out"); get alerts shows who" $st_
$G describe alert "$gid" >"$tmp/desc.out" 2>&1
grep -q '^Acked: *by ops-anna' "$tmp/desc.out" && grep -q '^Timeline:' "$tmp/desc.out" &&
    grep -q 'firing *seq 1 ' "$tmp/desc.out" && grep -q '^Dispatch: *remote_hands' "$tmp/desc.out"
ok "describe alert: diagnosis, ack and timeline" $?
sed 's/^/#   /' "$tmp/desc.out" | head -n 16
$G silence --match alertname=NodeDown,site=s0006 --for 20s --comment "planned work at s0006" \
    --by ops-anna -o json >"$tmp/sil.json" 2>&1
sid=$($PY -c "import json; print(json.load(open('$tmp/sil.json'))['id'])" 2>/dev/null)
sil_at=$(date +%s)
[ -n "$sid" ] && $G get silences | grep -q "^$sid *active"
ok "silence --match alertname=NodeDown,site=s0006 --for 20s: $sid, active" $?
mark=$(wc -l <"$D/alerts.jsonl")
$G fault node_stop --node s0006-n01 >/dev/null
$G fault node_stop --node s0002-n01 >/dev/null
wait_for 200 NodeDown firing s0002 s0002-n01
ok "a node down elsewhere (s0002-n01) is not matched: its NodeDown is published" $?
silenced_firing() {   # NodeDown of s0006-n01 firing, silenced by $sid
    $G get alerts --site s0006 -o json 2>/dev/null | $PY -c "
import json, sys
a = [x for x in json.load(sys.stdin)['items'] if x['alertname'] == 'NodeDown' and x['node'] == 's0006-n01']
sys.exit(not (a and a[0]['state'] == 'firing' and a[0]['silenced_by'] == '$sid'))"
}
for _ in $(seq 1 100); do silenced_firing && break; sleep 0.1; done
silenced_firing
st_=$?
early=$(tail -n +"$((mark + 1))" "$D/alerts.jsonl" | grep -c '"node":"s0006-n01"')
[ $st_ -eq 0 ] && [ "$early" -eq 0 ]
ok "the matched one (s0006-n01) fires but is not published while silenced ($early seen), get alerts shows the silence" $?
for _ in $(seq 1 300); do   # published after the mark
    tail -n +"$((mark + 1))" "$D/alerts.jsonl" | grep -q '"status":"firing".*"node":"s0006-n01"' && break
    sleep 0.1
done
tail -n +"$((mark + 1))" "$D/alerts.jsonl" | grep -q '"status":"firing".*"node":"s0006-n01"'
st_=$?
late=$(( $(date +%s) - sil_at ))
[ $st_ -eq 0 ] && [ "$late" -ge 19 ]
ok "the silence ends at its expiry: the alert is published then (${late} s after the silence began)" $?
$G fault node_resume --node s0006-n01 >/dev/null
$G fault node_resume --node s0002-n01 >/dev/null
wait_for 100 NodeDown resolved s0006 s0006-n01 && wait_for 100 NodeDown resolved s0002 s0002-n01
ok "both nodes back: both resolved" $?

# ---- 7. two instances, no duplicate ---------------------------------------------------

same() {
    $PY - "$D/alerts.jsonl" "$D/durable1.jsonl" "$D/durable2.jsonl" <<'PY'
import json, sys, collections
ids = lambda f: [json.loads(l)['event_id'] for l in open(f) if l.strip()]
core = set(ids(sys.argv[1]))
dur = ids(sys.argv[2]) + ids(sys.argv[3])
c = collections.Counter(dur)
print(len(core), len(dur), sum(1 for v in c.values() if v > 1), len(core - set(dur)))
sys.exit(0 if core == set(dur) and len(dur) == len(set(dur)) else 1)
PY
}
for _ in $(seq 1 50); do same >/dev/null && break; sleep 0.2; done
got=$(same)
st_=$?
[ "$away_at" -le "$cut_at" ] && [ "$back_at" -gt "$cut_at" ] || st_=1
ok "the durable operator, away ${away} s (the power cut, the isolation, their resolves), got every event once: (published, received, twice, missing) = ($got)" $st_

dups=$($PY -c "
import json, collections
c = collections.Counter(json.loads(l)['event_id'] for l in open('$D/alerts.jsonl'))
print(sum(1 for v in c.values() if v > 1), len(c))")
pubs=$(cat "$D"/alerting-*.log | grep -c 'event=alert_published')
[ "${dups%% *}" -eq 0 ] && [ "$pubs" -eq "${dups##* }" ]
ok "two instances: every event id seen once (${dups##* } events, ${dups%% *} twice; $pubs publications)" $?
echo "# publications by instance: a $(grep -c 'event=alert_published' "$D/alerting-a.log"), b $(grep -c 'event=alert_published' "$D/alerting-b.log")"

tap_end
