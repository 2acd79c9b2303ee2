#!/usr/bin/env bash
# cluster_test.sh -- the registry and a simulated 1,000-site fleet
# against a real 3-master Redis Cluster (tests/harness/redis_cluster.sh, in
# the stack folder so the stack's teardown stops it too), with hash slots
# moved by hand while the fleet registers and heartbeats flow: every node
# registers and is healthy, gpctl get nodes lists them all, the keys are
# spread over the three masters, a stopped node still goes stale (the sweep
# over every shard) and the registry logs no errors.
# Needs the registry's hash-tagged keys (every key of a script in one slot).
# Run by tests/run.sh through with-stack.sh.
# test-tags: heavy pass=normal (tests/run.sh)
set -u
B=$GP_BUILD
D=$GP_STACK_DIR
H=$GP_HARNESS
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

"$H/redis_cluster.sh" start "$D" >/dev/null
rc=$?
check "a 3-master Redis Cluster started" test $rc = 0
[ $rc = 0 ] || { echo "1..$n"; exit 1; }
# the cluster settings override gp.env's single Redis (environment > file)
set -a
# shellcheck disable=SC1091
. "$D/cluster.env"
set +a
read -r P1 P2 P3 <<<"$GP_CLUSTER_PORTS"

"$B/bin/gridpool-registry" --config "$D/gp.env" --heartbeat-ms $HB_MS --detect-floor-ms $((HB_MS * 3)) --lost-ms $((HB_MS * 3)) \
    --sweep-ms 250 --http-port 0 >"$D/registry.log" 2>&1 </dev/null &
echo $! >"$D/pids/registry.pid"
for _ in $(seq 1 100); do $G health >/dev/null 2>&1 && break; sleep 0.1; done
check "registry healthy on the cluster" $G health

# Moves one slot that holds registry keys, chosen once keys exist: the first
# while the fleet registers, the second while heartbeats flow.
move_one() {    # log
    local slot="" key p i
    for ((i = 0; i < 600; i++)); do
        for p in $P1 $P2 $P3; do
            key=$(redis-cli -p "$p" randomkey 2>/dev/null)
            # a node's key (hash-tagged shard) rather than a lone key, for the
            # first few seconds of trying
            case $key in *"{"*) ;; *) [ "$i" -lt 100 ] && continue ;; esac
            if [ -n "$key" ]; then
                slot=$(redis-cli -p "$p" cluster keyslot "$key")
                break 2
            fi
        done
        sleep 0.05
    done
    [ -n "$slot" ] || return 1
    echo "slot $slot key $key" >>"$1"
    "$H/redis_cluster.sh" move-slot "$D" "$slot" 2 0.05 >>"$1" 2>&1
}
t0=$(now)
"$B/bin/gridpool-sim" --config "$D/gp.env" --http-port 0 --sites "$SITES" --seed 7 \
    --inventory-out "$D/inv.json" >"$D/sim.log" 2>&1 </dev/null &
echo $! >"$D/pids/sim.pid"
move_one "$D/move1.log" &
mover=$!
for _ in $(seq 1 2400); do
    grep -q '^sim: registered' "$D/sim.log" && break
    kill -0 "$(cat "$D/pids/sim.pid")" 2>/dev/null || break
    sleep 0.1
done
line=$(grep '^sim: registered' "$D/sim.log")
check "the fleet registered: ${line:-no} (wall $(py "print(round($(now) - $t0, 1))") s)" test -n "$line"
check "a slot moved while the fleet registered ($(tr '\n' ' ' <"$D/move1.log"))" wait $mover
moved_ok() {    # log: "slot S key K" then "SRC_PORT DST_PORT"; keys now on DST only
    local slot src dst
    slot=$(awk 'NR == 1 {print $2}' "$1")
    read -r src dst < <(sed -n 2p "$1")
    [ -n "$slot" ] && [ -n "$dst" ] &&
        [ "$(redis-cli -p "$dst" cluster countkeysinslot "$slot")" -gt 0 ] &&
        [ "$(redis-cli -p "$src" cluster countkeysinslot "$slot")" = 0 ]
}
check "... its keys are on the new owner only" moved_ok "$D/move1.log"
move_one "$D/move2.log"
check "a slot moved while heartbeats flow ($(tr '\n' ' ' <"$D/move2.log"))" test $? = 0
check "... its keys are on the new owner only" moved_ok "$D/move2.log"
nodes=$(py "import json; print(json.load(open('$D/inv.json'))['nodes'])")
check "about 3 nodes per site ($nodes nodes at $SITES sites)" \
    py "import sys; sys.exit(not (2.0 * $SITES <= $nodes <= 4.5 * $SITES))"

moved=$(py "import time; print(int(time.time() * 1000))")
sleep $((2 * HB_MS / 1000))
$G get nodes -o json >"$D/nodes.json"
check "gpctl get nodes lists every node as healthy, beating after the moves" py "
import json, sys
inv = json.load(open('$D/inv.json')); nodes = json.load(open('$D/nodes.json'))
bad = [x['id'] for x in nodes if x['state'] != 'healthy']
late = [x['id'] for x in nodes if x.get('last_seen_ms', 0) < $moved]
print('# nodes', len(nodes), 'inventory', inv['nodes'], 'not healthy', len(bad), bad[:5], 'no beat since the moves', len(late), late[:5])
sys.exit(not (len(nodes) == inv['nodes'] and not bad and not late))"
k1=$(redis-cli -p "$P1" dbsize); k2=$(redis-cli -p "$P2" dbsize); k3=$(redis-cli -p "$P3" dbsize)
check "the live view is spread over the three masters ($k1 $k2 $k3 keys)" \
    py "import sys; sys.exit(not min($k1, $k2, $k3) > 0)"

first=$(py "import json; print(json.load(open('$D/nodes.json'))[0]['id'])")
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
for _ in $(seq 1 100); do
    $G get nodes "$first" -o json 2>/dev/null | grep -q '"state":"healthy"' && break
    sleep 0.1
done
check "healthy again after it resumes" sh -c "$G get nodes $first -o json | grep -q '\"state\":\"healthy\"'"
check "registry logged no errors" \
    py "import sys; sys.exit('level=error' in open('$D/registry.log').read())"
check "registry kept its cluster connections (no redis_cluster_degraded)" \
    py "import sys; sys.exit('redis_cluster_degraded' in open('$D/registry.log').read())"

echo "1..$n"
[ "$failed" -eq 0 ]
