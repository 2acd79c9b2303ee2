#!/usr/bin/env bash
# deploy/up.sh BUILD -- a private gridpool in the background: nats-server
# (JetStream), redis-server and PostgreSQL on free loopback ports, plus
# every service built so far, all under build/run/.  Writes
# build/run/gp.env, which gpctl and the services read.  `make down` stops
# it all.
set -eu
build=$1
top=$(cd "$(dirname "$0")/.." && pwd)
case "$build" in /*) ;; *) build=$top/$build ;; esac
run=${GP_RUN_DIR:-$top/build/run}
stack=$top/tests/harness/stack.sh

if [ -f "$run/gp.env" ] && [ -f "$run/nats.pid" ] && kill -0 "$(cat "$run/nats.pid")" 2>/dev/null; then
    echo "gridpool is already up (build/run/gp.env); 'make down' stops it"
    exit 0
fi
rm -rf "$run"
mkdir -p "$run/pids" "$run/logs"
GP_PG_TEMPLATE=$build/pg-template "$stack" start "$run"

# Services: every gridpool-* binary except the per-node agent and the simulator.
for bin in "$build"/bin/gridpool-*; do
    name=${bin##*/gridpool-}
    case "$name" in agent|sim) continue ;; esac
    "$bin" --config "$run/gp.env" --http-port 0 >"$run/logs/$name.log" 2>&1 </dev/null &
    echo $! >"$run/pids/$name.pid"
    echo "up: $name (pid $!, log build/run/logs/$name.log)"
done
echo "up: nats, redis and postgres settings in build/run/gp.env"
