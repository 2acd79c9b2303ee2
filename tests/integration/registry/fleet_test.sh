#!/usr/bin/env bash
# fleet_test.sh -- a simulated 1,000-site fleet against the registry, seen
# through gpctl: it registers completely, every node is healthy, counts
# per site and per pool match the simulator's own inventory, describe
# shows telemetry, FLUSHALL heals within two heartbeat intervals, and a
# stopped node goes stale after the configured missed beats and healthy
# again when it resumes; a node an operator deletes is refused when its
# agent comes back (lease NOTFOUND, re-registration DENIED) and its agent
# stops, until the operator readmits it (the lease is the scheduler's).  Run by tests/run.sh through with-stack.sh.
# test-tags: heavy pass=normal (tests/run.sh)
set -u
B=$GP_BUILD
D=$GP_STACK_DIR
HB_MS=2000
SITES=${GP_FLEET_SITES:-1000}
export GP_ENV_FILE=$D/gp.env
G="$B/bin/gpctl --timeout 20000"
n=0
failed=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
nok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $*"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else nok "$what"; fi; }
now() { date +%s.%N; }
py() { /usr/bin/python3 -c "$@"; }

"$B/bin/gridpool-registry" --config "$D/gp.env" --heartbeat-ms $HB_MS --detect-floor-ms $((HB_MS * 3)) --lost-ms $((HB_MS * 3)) \
    --lease-ms 6000 --sweep-ms 250 --http-port 0 >"$D/registry.log" 2>&1 </dev/null &
echo $! >"$D/pids/registry.pid"
for _ in $(seq 1 100); do $G health >/dev/null 2>&1 && break; sleep 0.1; done
check "registry healthy" $G health
# the scheduler answers the agents' leases (NOTFOUND for a node the
# inventory lost, which makes its agent register again)
"$B/bin/gridpool-scheduler" --config "$D/gp.env" --heartbeat-ms $HB_MS --lease-ms 6000 \
    --http-port 0 >"$D/scheduler.log" 2>&1 </dev/null &
echo $! >"$D/pids/scheduler.pid"

t0=$(now)
"$B/bin/gridpool-sim" --config "$D/gp.env" --http-port 0 --sites "$SITES" --seed 7 \
    --inventory-out "$D/inv.json" >"$D/sim.log" 2>&1 </dev/null &
echo $! >"$D/pids/sim.pid"
for _ in $(seq 1 2400); do
    grep -q '^sim: registered' "$D/sim.log" && break
    kill -0 "$(cat "$D/pids/sim.pid")" 2>/dev/null || break
    sleep 0.1
done
line=$(grep '^sim: registered' "$D/sim.log")
check "the fleet registered: ${line:-no} (wall $(py "print(round($(now) - $t0, 1))") s)" test -n "$line"
nodes=$(py "import json; print(json.load(open('$D/inv.json'))['nodes'])")
check "about 3 nodes per site ($nodes nodes at $SITES sites)" \
    py "import sys; sys.exit(not (2.0 * $SITES <= $nodes <= 4.5 * $SITES))"

sleep $((HB_MS / 1000 + 1))
$G get nodes -o json >"$D/nodes.json"
check "gpctl get nodes -o json lists every node as healthy, with id, site, state, gpus, last_seen" py "
import json, sys
inv = json.load(open('$D/inv.json')); nodes = json.load(open('$D/nodes.json'))
bad = [x['id'] for x in nodes if x['state'] != 'healthy']
keys = all(all(k in x for k in ('id', 'site', 'state', 'gpus', 'last_seen')) for x in nodes)
print('# nodes', len(nodes), 'inventory', inv['nodes'], 'not healthy', bad[:5])
sys.exit(not (len(nodes) == inv['nodes'] and not bad and keys))"
check "nodes and GPUs per site match the simulator's inventory" py "
import json, sys, collections
inv = json.load(open('$D/inv.json')); nodes = json.load(open('$D/nodes.json'))
n = collections.Counter(x['site'] for x in nodes); g = collections.Counter()
for x in nodes: g[x['site']] += len(x['gpus'])
bad = [s['id'] for s in inv['sites'] if n[s['id']] != s['nodes'] or g[s['id']] != s['gpus']]
print('# sites', len(inv['sites']), 'mismatched', bad[:5])
sys.exit(bool(bad) or len(inv['sites']) != $SITES)"
$G get pools -o json >"$D/pools.json"
check "GPUs per pool match the simulator's inventory" py "
import json, sys
inv = {p['id']: p['gpus'] for p in json.load(open('$D/inv.json'))['pools']}
got = {p['id']: (p['gpus_total'], p['gpus_healthy']) for p in json.load(open('$D/pools.json'))}
bad = [k for k in inv if got.get(k, (-1, -1)) != (inv[k], inv[k])]
print('# pools', len(inv), 'mismatched', bad[:5])
sys.exit(bool(bad) or not inv)"
first=$(py "import json; print(json.load(open('$D/nodes.json'))[0]['id'])")
$G describe node "$first" >"$D/describe.txt" 2>&1
check "gpctl describe node $first shows its GPUs and latest telemetry" py "
import sys; t = open('$D/describe.txt').read().lower()
sys.exit(not all(k in t for k in ('telemetry', 'temp', 'power', 'util', 'uuid', 'gpu-')))"

# metric NAME PATTERN: the registry's (reg) or scheduler's (sched) counter
# line matching PATTERN, its value (0 when absent)
metric() {
    local port
    port=$(grep -o 'event=starting .*http_port=[0-9]*' "$D/$1.log" | head -n 1 | sed 's/.*http_port=//')
    curl -s "http://127.0.0.1:$port/metrics" | grep -F "$2" | awk '{s += $2} END {print s + 0}'
}
regs0=$(metric registry 'gp_requests_total{route="gp.node.*.*.register"')
told0=$(metric registry 'gp_registry_register_again_total')
grant0=$(metric scheduler 'gp_scheduler_leases_total{outcome="granted"}')
redis-cli -h 127.0.0.1 -p "$GP_REDIS_PORT" FLUSHALL >/dev/null
flushed=$(py "import time; print(int(time.time() * 1000))")
sleep $((2 * HB_MS / 1000))
$G get nodes -o json >"$D/nodes2.json"
check "FLUSHALL: within two heartbeat intervals every node is back in the live view" py "
import json, sys
nodes = json.load(open('$D/nodes2.json'))
late = [x['id'] for x in nodes if x['last_seen_ms'] < $flushed or x['state'] != 'healthy']
print('# nodes', len(nodes), 'not back', len(late), late[:5])
sys.exit(bool(late) or len(nodes) != $nodes)"
# the registry restored every node's mark from PostgreSQL; a beat that came
# before it is dropped ("unseeded"), not answered "register again", and a
# lease that came before it is answered "renew again", so no agent
# registers again (each registration is a PostgreSQL transaction: 3,000 at
# once queued the operator's read above past its 20 s).  The fleet is idle:
# its nodes renew no lease, their beats are all they send.
regs=$(( $(metric registry 'gp_requests_total{route="gp.node.*.*.register"') - regs0 ))
told=$(( $(metric registry 'gp_registry_register_again_total') - told0 ))
grants=$(( $(metric scheduler 'gp_scheduler_leases_total{outcome="granted"}') - grant0 ))
check "... and no node had to register again ($regs registrations since the flush, $told nodes told to; $grants leases granted since: an idle node renews none)" \
    test "$regs" -le $((nodes / 100)) -a "$told" -le $((nodes / 100)) -a "$grants" = 0

$G fault node_stop --node "$first" >/dev/null
stopped=$(now)
for _ in $(seq 1 200); do
    $G get nodes "$first" -o json 2>/dev/null | grep -q '"state":"lost"' && break
    sleep 0.1
done
took=$(py "print(round($(now) - $stopped, 1))")
check "a stopped agent's node goes lost after 3 missed beats of ${HB_MS} ms (${took} s)" \
    py "import sys; sys.exit(not (4.0 <= $took <= 10.0))"
stale=$($G get nodes --state lost -o json | py "import json, sys; print(len(json.load(sys.stdin)))")
check "only that node is lost ($stale)" test "$stale" = 1
$G fault node_resume --node "$first" >/dev/null
resumed=$(now)
for _ in $(seq 1 100); do
    $G get nodes "$first" -o json 2>/dev/null | grep -q '"state":"healthy"' && break
    sleep 0.1
done
took=$(py "print(round($(now) - $resumed, 1))")
check "healthy again ${took} s after it resumes" py "import sys; sys.exit(not ($took <= 4.0))"
# An operator deletes a live node: its next beat is dropped and answered
# "register again" (cmd.register: an idle node renews no lease), it
# registers again and is refused DENIED, and its agent stops.
second=$(py "import json; print(json.load(open('$D/nodes.json'))[1]['id'])")
check "gpctl delete node $second" $G delete node "$second"
deleted=$(now)
for _ in $(seq 1 150); do
    grep -q "event=agent_stopped .*node=$second reason=register_DENIED" "$D/sim.log" && break
    sleep 0.1
done
took=$(py "print(round($(now) - $deleted, 1))")
check "the deleted node's agent re-registered, was refused DENIED and stopped (${took} s)" \
    grep -q "event=agent_stopped .*node=$second reason=register_DENIED" "$D/sim.log"
check "it re-registered because the registry told it to (cmd.register after its beat)" \
    grep -q "event=agent_reregister .*node=$second reason=registry" "$D/sim.log"
sleep $((HB_MS / 1000 + 1))
$G get nodes "$second" >"$D/deleted.out" 2>&1
rc=$?
check "and it stays deleted: gpctl get nodes $second exits 1 NOTFOUND (rc $rc)" \
    py "import sys; sys.exit(not ($rc == 1 and 'NOTFOUND' in open('$D/deleted.out').read()))"
check "gpctl readmit node $second" $G readmit node "$second"
$G readmit node "$second" >"$D/readmit2.out" 2>&1
rc=$?
check "a second readmit: exit 1 NOTFOUND, it is not deleted any more (rc $rc)" \
    py "import sys; sys.exit(not ($rc == 1 and 'NOTFOUND' in open('$D/readmit2.out').read()))"
$G readmit site "$second" >/dev/null 2>&1
rc=$?
check "readmit of anything but a node is a usage error (rc $rc)" test "$rc" = 2

check "registry logged no errors (and its log is there: it logged its start)" \
    py "import sys; t = open('$D/registry.log').read(); sys.exit('level=error' in t or 'event=starting' not in t)"

echo "1..$n"
[ "$failed" -eq 0 ]
