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
# The private stack's own settings come from its files; settings of some
# other stack in the environment (which would win over a file) must not.
unset GP_NATS_URL GP_NATS_USER GP_NATS_PASSWORD GP_NATS_TOKEN GP_TENANT \
    GP_REDIS_HOST GP_REDIS_PORT GP_REDIS_USER GP_REDIS_PASSWORD GP_REDIS_PASSWORD_FILE \
    GP_PG_CONNINFO GP_PG_MIGRATE_CONNINFO GP_PG_USER GP_PG_MIGRATE GP_CONFIG
stack=$top/tests/harness/stack.sh

if [ -f "$run/gp.env" ] && [ -f "$run/nats.pid" ] && kill -0 "$(cat "$run/nats.pid")" 2>/dev/null; then
    echo "gridpool is already up (build/run/gp.env); 'make down' stops it"
    exit 0
fi
rm -rf "$run"
mkdir -p "$run/pids" "$run/logs"
# Services: every gridpool-* binary except the per-node agent and the simulator.
services=""
for bin in "$build"/bin/gridpool-*; do
    name=${bin##*/gridpool-}
    case "$name" in agent|sim) ;; *) services="$services $name" ;; esac
done

# NATS runs with authorization on and no anonymous user (deploy/nats-auth):
# one identity per service, the operator's (admin, in gp.env, which gpctl
# reads), the simulator's; demo.sh adds one per tenant.
# Redis likewise: a user per service (deploy/redis-acl), no default user.
GP_STACK_NATS_AUTH=1 GP_STACK_REDIS_STRICT=1 GP_STACK_SERVICES="$services" \
    GP_PG_TEMPLATE=$build/pg-template "$stack" start "$run"

# The key tenant secrets are encrypted under (the scheduler's alone, in a
# file only root reads; never in gp.env, which every program reads).
( umask 077 && head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$run/secret-key" )

# PostgreSQL least privilege (shared/include/gp/dbrole.h): each service's
# migrations run first, as the owner role, on the stack's superuser
# (gp.env's GP_PG_MIGRATE_CONNINFO), which makes the service's role
# gridpool_<name> and grants it what it uses; then the services start
# without the migrator, log in as their roles and only check the schema.
for name in $services; do
    "$build/bin/gridpool-$name" --config "$run/gp.env" --migrate-only \
        >"$run/logs/$name-migrate.log" 2>&1 ||
        { echo "up: $name's migrations failed (build/run/logs/$name-migrate.log):" >&2
          tail -n 3 "$run/logs/$name-migrate.log" >&2; exit 1; }
done

# A service's own identity comes in its environment, which wins over the
# file (gp.env holds the operator's).
for name in $services; do
    bin=$build/bin/gridpool-$name
    extra=
    [ "$name" = scheduler ] && extra="--secret-key-file $run/secret-key"
    (
        set -a
        # shellcheck disable=SC1090
        . "$run/auth/service-$name.env"
        set +a
        # shellcheck disable=SC2086
        exec "$bin" --config "$run/gp.env" --http-port 0 --pg-migrate-conninfo "" \
            --pg-migrate false $extra >"$run/logs/$name.log" 2>&1 </dev/null
    ) &
    echo $! >"$run/pids/$name.pid"
    echo "up: $name (pid $!, log build/run/logs/$name.log)"
done
echo "up: nats, redis and postgres settings in build/run/gp.env (the operator's NATS identity)"
echo "up: each service logs in to PostgreSQL as its own role, gridpool_<service>"
echo "up: NATS authorization on: identities in build/run/auth/ (deploy/nats-auth)"
echo "up: Redis ACL users in build/run/redis-acl/ (deploy/redis-acl)"
