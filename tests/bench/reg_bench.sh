#!/usr/bin/env bash
# reg_bench.sh -- a fleet registering from cold (after a control-plane
# outage): gridpool-sim's agents, GP_BENCH_REG_SITES sites of 3 nodes
# (default 33,334: 100,002 nodes), start within GP_BENCH_REG_SPREAD_MS
# (default 30 s, their own jitter) and register through one
# gridpool-registry (make bench, run by tests/bench/run.sh inside its
# private stack; figures as key=value lines on stdout, notes on stderr).
#
# Heartbeats are set to 10 minutes so that the figure is the registration's
# own (the inventory's transactions, the live view's marks, NodeChange).
# Figures: the time from the agents' start to the last registration (the
# sim's "registered" line), the nodes in the inventory, the registrations
# refused (the agents' register_failed lines: each waits for its backoff),
# and the registry's transactions (batches).  The reference: one INSERT of
# as many rows into a copy of the nodes table, in the same PostgreSQL (the
# floor a registration's write cannot beat).  Aim: under 60 s, 0 refused.
set -u
B=$GP_BUILD
D=$(mktemp -d /tmp/gp-reg.XXXXXX)
G="$B/bin/gpctl --timeout 60000 --env-file $GP_STACK_DIR/gp.env"
SITES=${GP_BENCH_REG_SITES:-33334}
SPREAD=${GP_BENCH_REG_SPREAD_MS:-30000}
CAP=${GP_BENCH_REG_MAX_S:-180}
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$D"
}
trap cleanup EXIT
note() { echo "reg: $*" >&2; }
sql() { psql "$GP_PG_CONNINFO" -XAtq -c "$1" 2>>"$D/psql.err"; }
start() { local name=$1; shift; "$@" >"$D/$name.log" 2>&1 </dev/null & pids+=($!); }
metric() {
    local port
    port=$(grep -o 'http_port=[0-9]*' "$D/registry.log" | head -1 | cut -d= -f2)
    curl -s "http://127.0.0.1:$port/metrics" | grep -F "$1" | awk '{s += $2} END {print s + 0}'
}

start registry "$B/bin/gridpool-registry" --config "$GP_STACK_DIR/gp.env" --http-port 0 \
    --heartbeat-ms 600000 --log-level info
for _ in $(seq 1 100); do $G health registry >/dev/null 2>&1 && break; sleep 0.1; done
"$B/bin/gridpool-sim" --config "$GP_STACK_DIR/gp.env" --sites "$SITES" --hub-pools 0 \
    --admin-only 1 --http-port 0 --log-level error >"$D/sim-admin.log" 2>&1 </dev/null
note "inventory: $(sql "SELECT count(*) FROM sites") sites"
b0=$(metric gp_registry_register_batches_total)
t0=$(date +%s.%N)
start sim "$B/bin/gridpool-sim" --config "$GP_STACK_DIR/gp.env" --sites "$SITES" --hub-pools 0 \
    --admin 0 --heartbeat-ms 600000 --spread-ms "$SPREAD" --http-port 0 --log-level warn
done_s=
for _ in $(seq 1 $((CAP * 5))); do
    if grep -q '^sim: registered' "$D/sim.log"; then
        done_s=$(echo "$(date +%s.%N) - $t0" | bc)
        break
    fi
    sleep 0.2
done
nodes=$(sql "SELECT count(*) FROM nodes")
refused=$(grep -c 'event=agent_register_failed' "$D/sim.log")
batches=$(( $(metric gp_registry_register_batches_total) - b0 ))
note "$(grep '^sim: registered' "$D/sim.log" || echo "not all registered within $CAP s")"
note "$nodes nodes in the inventory, $refused registrations refused, $batches transactions (batches), $(metric gp_registry_register_expired_total) expired waiting"
note "refused by code: $(grep -o 'event=agent_register_failed.*code=[A-Z_]*' "$D/sim.log" | sed 's/.*code=//' | sort | uniq -c | tr '\n' ' ')"
# the reference: one INSERT of as many rows, in a copy of the table
t1=$(date +%s.%N)
sql "CREATE TEMP TABLE n2 (LIKE nodes INCLUDING DEFAULTS);
     INSERT INTO n2 (id, site, hostname, agent_version, boot_id, cpu_cores, mem_mb, state,
                     state_since, registered_at)
     SELECT 'x' || i, site, hostname, agent_version, boot_id, cpu_cores, mem_mb, state,
            state_since, now() FROM nodes, generate_series(1, 1) i" >/dev/null
ref_s=$(echo "$(date +%s.%N) - $t1" | bc)
echo "reg_nodes=$nodes"
echo "reg_seconds=${done_s:--1}"
echo "reg_refused=$refused"
echo "reg_batches=$batches"
echo "reg_insert_ref_seconds=$ref_s"
echo "reg_spread_ms=$SPREAD"
