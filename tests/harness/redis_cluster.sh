#!/usr/bin/env bash
# tests/harness/redis_cluster.sh -- a private 3-master Redis Cluster (no
# replicas) on free loopback ports, in one folder.
#
#   redis_cluster.sh start DIR    start it; waits for cluster_state:ok on
#                                 every node; writes DIR/cluster.env and
#                                 prints it
#   redis_cluster.sh stop DIR     stop every node started in DIR
#   redis_cluster.sh run CMD...   start one in a temp folder, run CMD with
#                                 cluster.env exported, stop it on any exit
#   redis_cluster.sh move-slot DIR SLOT [BATCH] [PAUSE_S]
#                                 move one hash slot by hand, the way
#                                 redis-cli --cluster reshard does: SETSLOT
#                                 IMPORTING on the target (the next master),
#                                 MIGRATING on the owner, MIGRATE its keys
#                                 BATCH at a time with PAUSE_S between
#                                 batches (a window for ASK), then SETSLOT
#                                 NODE on every master (MOVED afterwards);
#                                 prints "SRC_PORT DST_PORT"
#   redis_cluster.sh stop-node DIR N | start-node DIR N
#                                 stop / restart node N (1..3) on its port
#                                 (it keeps its id and slots: nodes.conf)
#
# cluster.env: GP_REDIS_CLUSTER=true, GP_REDIS_SEEDS (every node,
# host:port comma separated), GP_REDIS_HOST/GP_REDIS_PORT (the first node),
# GP_CLUSTER_PORTS (space separated) and GP_CLUSTER_DIR.  The pid files
# are DIR/pids/redis-cluster-N.pid, so that a DIR inside a tests/harness
# stack folder (stack.sh stop kills every DIR/pids/*.pid) is torn down with
# the stack even if the test dies first.
set -eu
cmd=${1:-}
N=3
HARNESS_NAME=redis_cluster
# shellcheck source=tests/lib/lib.sh
. "$(dirname "$0")/../lib/lib.sh"

do_stop() {     # dir
    local f
    for f in "$1"/pids/redis-cluster-*.pid; do
        [ -e "$f" ] && stop_pidfile "$f"
    done
    return 0
}

start_node() {  # dir, n   (ports in dir/cluster/n/ports)
    local d=$1/cluster/$2 p bus
    read -r p bus <"$d/ports"
    # node timeout 15 s: a test that stops one master (no replicas) checks
    # the others still answer before the cluster would mark it failed
    # the stack's ACL users (stack.sh), so the services log in as themselves
    local acl=()
    [ -f "${GP_STACK_DIR:-/nonexistent}/redis-acl/users.acl" ] &&
        acl=(--aclfile "$GP_STACK_DIR/redis-acl/users.acl")
    redis-server --port "$p" --bind 127.0.0.1 --save '' --appendonly no "${acl[@]}" \
        --cluster-enabled yes --cluster-config-file nodes.conf \
        --cluster-port "$bus" --cluster-node-timeout 15000 \
        --daemonize yes --pidfile "$1/pids/redis-cluster-$2.pid" \
        --dir "$d" --logfile "$d/redis.log" >/dev/null
}

do_start() {    # dir
    local dir=$1 ports=() addrs=() seeds="" i p bus ok
    mkdir -p "$dir/pids"
    for ((i = 1; i <= N; i++)); do
        p=$(free_port)
        bus=$(free_port)             # the cluster bus; default port+10000 may be > 65535
        ports+=("$p")
        addrs+=("127.0.0.1:$p")
        seeds+="${seeds:+,}127.0.0.1:$p"
        mkdir -p "$dir/cluster/$i"
        echo "$p $bus" >"$dir/cluster/$i/ports"
        start_node "$dir" "$i"
    done
    for p in "${ports[@]}"; do wait_port "$p" 10; done
    redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes \
        >"$dir/cluster/create.log" 2>&1 || { cat "$dir/cluster/create.log" >&2; return 1; }
    for ((i = 0; i < 200; i++)); do
        ok=0
        for p in "${ports[@]}"; do
            redis-cli -p "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok' && ok=$((ok + 1))
        done
        [ "$ok" -eq "$N" ] && break
        sleep 0.05
    done
    if [ "$ok" -ne "$N" ]; then
        echo "redis_cluster: cluster_state not ok after 10 s" >&2
        return 1
    fi
    cat >"$dir/cluster.env" <<ENV
GP_REDIS_CLUSTER=true
GP_REDIS_SEEDS=$seeds
GP_REDIS_HOST=127.0.0.1
GP_REDIS_PORT=${ports[0]}
GP_CLUSTER_PORTS="${ports[*]}"
GP_CLUSTER_DIR=$dir
ENV
    cat "$dir/cluster.env"
}

# prints "ID PORT" of the master owning slot $2 (asks the node on port $1)
slot_owner() {
    redis-cli -p "$1" cluster nodes | awk -v s="$2" '
        $3 ~ /master/ {
            for (i = 9; i <= NF; i++) {
                if ($i ~ /^\[/) continue
                n = split($i, r, "-"); a = r[1] + 0; b = (n > 1 ? r[2] : r[1]) + 0
                if (s >= a && s <= b) { split($2, h, "[:@]"); print $1, h[2]; exit }
            }
        }'
}

move_slot() {   # dir, slot, batch, pause
    local dir=$1 slot=$2 batch=${3:-10} pause=${4:-0} src sport dst dport p keys
    # shellcheck disable=SC1091
    . "$dir/cluster.env"
    set -- $GP_CLUSTER_PORTS
    read -r src sport <<<"$(slot_owner "$1" "$slot")"
    [ -n "$src" ] || { echo "redis_cluster: no owner for slot $slot" >&2; return 1; }
    for p in $GP_CLUSTER_PORTS; do
        [ "$p" = "$sport" ] && continue
        dport=$p
        dst=$(redis-cli -p "$p" cluster myid)
        break
    done
    redis-cli -p "$dport" cluster setslot "$slot" importing "$src" >/dev/null
    redis-cli -p "$sport" cluster setslot "$slot" migrating "$dst" >/dev/null
    while :; do
        keys=$(redis-cli -p "$sport" cluster getkeysinslot "$slot" "$batch")
        [ -n "$keys" ] || break
        # shellcheck disable=SC2086
        redis-cli -p "$sport" migrate 127.0.0.1 "$dport" "" 0 5000 KEYS $keys >/dev/null
        [ "$pause" = 0 ] || sleep "$pause"
    done
    redis-cli -p "$dport" cluster setslot "$slot" node "$dst" >/dev/null
    redis-cli -p "$sport" cluster setslot "$slot" node "$dst" >/dev/null
    for p in $GP_CLUSTER_PORTS; do
        [ "$p" = "$sport" ] || [ "$p" = "$dport" ] ||
            redis-cli -p "$p" cluster setslot "$slot" node "$dst" >/dev/null
    done
    echo "$sport $dport"
}

case "$cmd" in
start) do_start "$2" ;;
move-slot) move_slot "$2" "$3" "${4:-10}" "${5:-0}" ;;
stop-node) stop_pidfile "$2/pids/redis-cluster-$3.pid" ;;
start-node)
    start_node "$2" "$3"
    read -r p _ <"$2/cluster/$3/ports"
    wait_port "$p" 10
    for ((i = 0; i < 400; i++)); do          # back in the cluster: it answers for its slots
        redis-cli -p "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok' && exit 0
        sleep 0.05
    done
    echo "redis_cluster: node $3 not ok after 20 s" >&2
    exit 1
    ;;
stop)  do_stop "$2" ;;
run)
    shift
    dir=$(mktemp -d /tmp/gp-cluster.XXXXXX)
    trap 'do_stop "$dir"; rm -rf "$dir"' EXIT
    trap 'exit 130' INT TERM
    do_start "$dir" >/dev/null || { echo "not ok - redis cluster did not start"; exit 1; }
    set -a
    # shellcheck disable=SC1091
    . "$dir/cluster.env"
    set +a
    "$@"
    ;;
*) echo "usage: redis_cluster.sh start DIR | stop DIR | run CMD..." >&2; exit 2 ;;
esac
