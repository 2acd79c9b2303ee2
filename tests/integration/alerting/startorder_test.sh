#!/usr/bin/env bash
# startorder_test.sh -- services started in any order follow the registry's
# inventory (shared gp/inventory.h), against real services (run under
# tests/harness/with-stack.sh).  Alerting, recovery, billing, the
# scheduler and a 6-site simulated fleet start first; the registry last.
#
#   1. before the registry is up every follower's load fails (NOROUTE) and
#      is retried with backoff, not after a whole reload period;
#   2. once it is up, each loads within seconds; the scheduler's snapshot
#      has every node the fleet registered;
#   3. a site's power cut within the first seconds: the first
#      SiteUnreachable alert carries the site's region in its subject (an
#      operator watching only that region gets it) and in its summary (not
#      "_" and "(?)", what a service that had loaded the inventory before
#      the sites existed said until its next reload);
#   4. a site created later is known to all four services within a second
#      (their gp_inventory_sites gauge), from the registry's SiteChange.
# test-tags: pass=normal (tests/run.sh)
set -u
B=$GP_BUILD
G="$B/bin/gpctl --timeout 10000"
D=$GP_STACK_DIR
PY=/usr/bin/python3
# shellcheck source=tests/lib/lib.sh
. "$(dirname "$0")/../../lib/lib.sh"

SVCS="alerting recovery billing sched"
on_fail() {
    echo "# alerts seen:"; cut -c1-300 "$D/alerts.jsonl" | tail -n 5 | sed 's/^/#   /'
    for s in $SVCS; do
        echo "# $s:"; grep -E 'inventory_|sites_loaded|feed_ready|level=error' "$D/$s.log" |
            head -n 6 | cut -c1-250 | sed 's/^/#   /'
    done
    echo "# recovery:"; grep -E 'site_event' "$D/recovery.log" | tail -n 3 | sed 's/^/#   /'
}
tap_on_fail=on_fail

cat >"$tmp/rules.conf" <<'RULES'
SiteUnreachable       site.state       ==  unreachable  2s   page     -             "Site {site} ({region}) unreachable: {cause}"
NodeDown              node.state       ==  lost         30s  ticket   -             "Node {node} at {site} lost: {reason}"
RULES

# metric PORT NAME: its value on that /metrics (empty when none)
metric() {
    curl -s "http://127.0.0.1:$1/metrics" | awk -v n="$2" '$1 == n {print $2; exit}'
}

declare -A port
for s in $SVCS; do port[$s]=$(free_port); done
spawn alerting "$B/bin/gridpool-alerting" --config "$D/gp.env" --http-port "${port[alerting]}" \
    --rules "$tmp/rules.conf" --eval-ms 200 --publish-ms 100
spawn recovery "$B/bin/gridpool-recovery" --config "$D/gp.env" --http-port "${port[recovery]}" \
    --replace-ms 200 --site-window-ms 10000
spawn billing "$B/bin/gridpool-billing" --config "$D/gp.env" --http-port "${port[billing]}"
spawn sched "$B/bin/gridpool-scheduler" --config "$D/gp.env" --http-port "${port[sched]}" \
    --heartbeat-ms 500 --lease-ms 6000
for s in $SVCS; do wait_port "${port[$s]}" 20 || break; done
# an operator of region eu-north (s0004's, seed 7), and one of every alert
$G watch alerts --region eu-north -o json >"$D/region.jsonl" 2>"$D/region.err" &
pids+=("$!")
$G watch alerts -o json >"$D/alerts.jsonl" 2>"$D/watch.err" &
pids+=("$!")

# ---- 1. no registry yet ------------------------------------------------------------

for _ in $(seq 1 50); do
    got=0
    for s in $SVCS; do grep -q 'inventory_load_failed code=NOROUTE' "$D/$s.log" && got=$((got + 1)); done
    [ "$got" -eq 4 ] && break
    sleep 0.1
done
[ "$got" -eq 4 ]
ok "before the registry, every follower's load fails NOROUTE ($got of 4) and is retried" $?
sleep 1

# ---- 2. the registry, last -------------------------------------------------------------

t_reg=$(date +%s%N)
spawn registry "$B/bin/gridpool-registry" --config "$D/gp.env" --http-port 0 --heartbeat-ms 500 \
    --lease-ms 6000 --sweep-ms 200
# recovery has loaded the (empty) site list: it says so whichever way it
# follows the inventory
for _ in $(seq 1 150); do grep -q 'sites_loaded' "$D/recovery.log" && break; sleep 0.1; done
for _ in $(seq 1 30); do
    got=0
    for s in $SVCS; do grep -q 'inventory_loaded' "$D/$s.log" && got=$((got + 1)); done
    [ "$got" -eq 4 ] && break
    sleep 0.1
done
[ "$got" -eq 4 ]
st_=$?
ok "each of the four loads the inventory $(( ($(date +%s%N) - t_reg) / 1000000 )) ms after the registry started ($got of 4)" $st_
# the sites are created now, after those first loads
spawn sim "$B/bin/gridpool-sim" --config "$D/gp.env" --http-port 0 --sites 6 --seed 7 \
    --spread-ms 300
for _ in $(seq 1 150); do grep -q '^sim: registered' "$D/sim.log" && break; sleep 0.1; done
grep -q '^sim: registered' "$D/sim.log"
st_=$?
ok "the fleet registered: $(grep -o 'registered [0-9]* nodes at [0-9]* sites' "$D/sim.log")" $st_
nodes=$(grep -o 'registered [0-9]* nodes' "$D/sim.log" | grep -o '[0-9]*')

# ---- 3. a power cut in the first seconds --------------------------------------------------

$G fault site_power_cut --site s0004 --duration-ms 30000 >/dev/null
cut_ms=$(( ($(date +%s%N) - t_reg) / 1000000 ))
for _ in $(seq 1 250); do grep -q '"SiteUnreachable"' "$D/alerts.jsonl" && break; sleep 0.1; done
first=$(grep '"SiteUnreachable"' "$D/alerts.jsonl" | head -n 1)
echo "# power cut ${cut_ms} ms after the registry started; first alert: $(echo "$first" | cut -c1-300)"
echo "$first" | $PY -c '
import json, sys
a = json.loads(sys.stdin.read())
sys.exit(0 if a["site"] == "s0004" and a["status"] == "firing" and a["region"] == "eu-north" else 1)'
ok "the first SiteUnreachable (s0004) carries its region eu-north" $?
summary=$(echo "$first" | $PY -c 'import json, sys; print(json.loads(sys.stdin.read())["summary"])')
case $summary in "Site s0004 (eu-north) unreachable"*) st_=0 ;; *) st_=1 ;; esac
ok "... its summary names it: $summary" $st_
for _ in $(seq 1 30); do grep -q '"SiteUnreachable"' "$D/region.jsonl" && break; sleep 0.1; done
grep -q '"SiteUnreachable".*"s0004"\|"s0004".*"SiteUnreachable"' "$D/region.jsonl"
ok "... and an operator watching gp.alerts.*.eu-north.> got it" $?
# registered after the scheduler's first load: each came as a NodeChange
have=$(metric "${port[sched]}" gp_inventory_nodes)
[ "$have" = "$nodes" ] && ! grep -q feed_upsert_failed "$D/sched.log"
st_=$?
ok "the scheduler follows every node (${have:-none} of $nodes), each into its snapshot" $st_

# ---- 4. a new site, within a second ------------------------------------------------------

# gpctl creates it; from its answer (the site exists) each service's
# gp_inventory_sites is read every 20 ms until it counts it
$PY - "${port[alerting]}" "${port[recovery]}" "${port[billing]}" "${port[sched]}" \
    "$B/bin/gpctl" "$D/gp.env" >"$tmp/seen.txt" <<'PY'
import os, subprocess, sys, time, urllib.request
ports, gpctl, env = sys.argv[1:5], sys.argv[5], sys.argv[6]
def sites(p):
    try:
        body = urllib.request.urlopen('http://127.0.0.1:%s/metrics' % p, timeout=1).read().decode()
    except OSError:
        return None
    return next((l.split()[1] for l in body.splitlines() if l.startswith('gp_inventory_sites ')), None)
before = [sites(p) for p in ports]
e = dict(os.environ, GP_ENV_FILE=env)
rc = subprocess.call([gpctl, '--timeout', '10000', 'create', 'site', 's0099', '--tenant', 'op',
                      '--region', 'ap-test', '--lat', '1.3', '--lon', '103.8'], env=e,
                     stdout=subprocess.DEVNULL)
t0, seen = time.monotonic(), {}
while len(seen) < len(ports) and time.monotonic() - t0 < 3:
    for p in ports:
        if p not in seen and sites(p) == '7':
            seen[p] = int((time.monotonic() - t0) * 1000)
    time.sleep(0.02)
print(rc, ' '.join(str(x) for x in before), ' '.join(str(seen.get(p, -1)) for p in ports))
PY
read -r rc_ b1 b2 b3 b4 ms1 ms2 ms3 ms4 <"$tmp/seen.txt"
worst=$(printf '%s\n' "$ms1" "$ms2" "$ms3" "$ms4" | sort -n | tail -n 1)
[ "$rc_" = 0 ] && [ "$b1 $b2 $b3 $b4" = "6 6 6 6" ] && [ "$(printf '%s\n' "$ms1" "$ms2" "$ms3" "$ms4" | sort -n | head -n 1)" -ge 0 ] &&
    [ "$worst" -lt 1000 ]
st_=$?
ok "a new site is known to alerting, recovery, billing, the scheduler $ms1, $ms2, $ms3, $ms4 ms after the registry created it (6 sites before; their reloads are 60 s apart)" $st_

tap_end
