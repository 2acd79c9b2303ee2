#!/usr/bin/env bash
# tests/harness/stack.sh -- a private nats-server (JetStream), redis-server
# and PostgreSQL cluster on free loopback ports, in one folder.
#
#   stack.sh start DIR        start all three; writes DIR/gp.env
#   stack.sh stop DIR         stop everything started in DIR (also services
#                             whose pid files are in DIR/pids/)
#   stack.sh stop-nats|start-nats|stop-redis|start-redis|stop-pg|start-pg DIR
#                             stop or restart one server on the same port
#   stack.sh reload-nats DIR  nats-server reads its configuration again
#                             (after deploy/nats-auth added identities)
#   stack.sh auth-nats DIR    restarts nats-server (same port and store) with
#                             authorization on, as GP_STACK_NATS_AUTH=1 would
#                             have started it: for a test under with-stack.sh
#
# GP_STACK_NATS_CLUSTER=N (2..5) at start: N clustered nats-servers with
# JetStream instead of one (DIR/nats-I.conf, I = 1..N, routes between them
# all, max_file_store 16G each), gp.env's GP_NATS_URL lists them all, and
# start returns once JetStream has a meta leader.  Then
#   stack.sh kill-nats DIR I  kill -9 server I (a crash)
#   stack.sh stop-nats DIR [I] / start-nats DIR [I]   one server, or all
# (with GP_STACK_NATS_AUTH=1, each server has the same authorization).
#
# GP_STACK_REDIS_TLS=1 at start: redis-server speaks TLS only (port 0, its
# tls-port on a free loopback port: REDIS_TLS_PORT in DIR/ports), with the
# files of deploy/redis-tls (DIR/redis-tls/), and one stunnel4 client
# tunnel for the whole stack (DIR/stunnel.conf, .pid, .log; certificate
# testsvc) on a free loopback port, which gp.env's GP_REDIS_PORT names.
# stop-redis/start-redis restart redis-server only; the tunnel stays.
#
# PostgreSQL refuses to run as root, so its commands go through
# `runuser -u postgres` when we are root.  A template cluster made once is
# copied for each stack (BUILD_DIR/pg-template, see make_template).
set -eu
cmd=$1
dir=$2
PGBIN=${PGBIN:-$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)}
NATS_SERVER=${NATS_SERVER:-$(command -v nats-server || echo /usr/sbin/nats-server)}
TEMPLATE=${GP_PG_TEMPLATE:-}
HARNESS_NAME=stack
# shellcheck source=tests/lib/lib.sh
. "$(dirname "$0")/../lib/lib.sh"

as_pg() {
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# With DIR/nats.conf (GP_STACK_NATS_AUTH=1 at start) the server runs with
# authorization on: the identities of deploy/nats-auth, no anonymous user.
start_nats() {
    mkdir -p "$dir/nats"
    if [ -f "$dir/nats.conf" ]; then
        "$NATS_SERVER" -c "$dir/nats.conf" -P "$dir/nats.pid" -l "$dir/nats.log" \
            </dev/null >/dev/null 2>&1 &
    else
        "$NATS_SERVER" -js -a 127.0.0.1 -p "$NATS_PORT" -m "$NATS_MON_PORT" -sd "$dir/nats" \
            -P "$dir/nats.pid" -l "$dir/nats.log" </dev/null >/dev/null 2>&1 &
    fi
    wait_port "$NATS_PORT" 10 || { tail -n 5 "$dir/nats.log" >&2; return 1; }
}

# GP_STACK_NATS_AUTH=1: identities for the services (GP_STACK_SERVICES, or
# deploy/nats-auth's list), the operator (admin, written into gp.env, so
# gpctl uses it) and the simulator, in DIR/auth/; tenants are added later
# with `deploy/nats-auth tenant DIR/auth T` and `stack.sh reload-nats DIR`.
auth_nats() {
    local gen top
    top=$(cd "$(dirname "$0")/../.." && pwd)
    gen=$top/deploy/nats-auth
    # the cheapest bcrypt: nats-server checks it at every connection, and a
    # test's many short connections share two cores (a real network: 11)
    export NATS_AUTH_BCRYPT_COST=${NATS_AUTH_BCRYPT_COST:-4}
    # shellcheck disable=SC2086
    "$gen" init "$dir/auth" --url "nats://127.0.0.1:$NATS_PORT" ${GP_STACK_SERVICES:-} >/dev/null
    "$gen" sim "$dir/auth" >/dev/null
    [ "${GP_STACK_NATS_TESTER:-0}" = 1 ] && test_auth
    [ "$NATS_CLUSTER" -gt 1 ] && return 0      # cluster_conf includes it
    cat >"$dir/nats.conf" <<CONF
listen: 127.0.0.1:$NATS_PORT
http: 127.0.0.1:$NATS_MON_PORT
jetstream { store_dir: "$dir/nats" }
include "$(auth_file)"
CONF
}

# The authorization a server includes: nats-auth's, or with the tester
# nats-auth's plus gptest (below).
auth_file() {
    if [ -f "$dir/auth-test.conf" ]; then echo auth-test.conf; else echo auth/auth.conf; fi
}

# GP_STACK_NATS_TESTER=1 (a test's stack only, never make up's):
# DIR/auth-test.conf, nats-auth's authorization (DIR/auth/auth.conf) plus
# the tests' own inspector, user "gptest" (password in DIR/gptest.pw), who
# may publish and subscribe anything: a test's checks (tests/lib/jsapi.py
# creating, filling and reading streams; usage_dump's durable) look at the
# servers as an operator with a break-glass account would.  No service,
# agent or tenant runs as it.  Made again at each reload-nats, after
# `nats-auth tenant` rendered auth.conf anew.
test_auth() {
    [ -f "$dir/gptest.pw" ] || { openssl rand -hex 16 >"$dir/gptest.pw"; chmod 600 "$dir/gptest.pw"; }
    sed "s/^  users = \[\$/&\n    { user: \"gptest\", password: \"$(cat "$dir/gptest.pw")\" }/" \
        "$dir/auth/auth.conf" >"$dir/auth-test.conf"
    chmod 600 "$dir/auth-test.conf"
    grep -q '"gptest"' "$dir/auth-test.conf"
}

# Redis's ACL users (deploy/redis-acl): each service logs in as its own
# user (gp.env: GP_REDIS_USER, GP_REDIS_PASSWORD_FILE), so a command
# outside its key families fails the suite.  The default user stays open
# for the tests' own checks (--test), unless GP_STACK_REDIS_STRICT=1
# (make up): then a connection without a user is refused.
acl_redis() {
    local test=--test
    [ "${GP_STACK_REDIS_STRICT:-0}" = 1 ] && test=
    # shellcheck disable=SC2086
    "$(cd "$(dirname "$0")/../.." && pwd)/deploy/redis-acl" init "$dir/redis-acl" $test
}

start_redis() {
    mkdir -p "$dir/redis"
    if [ -f "$dir/redis-tls/redis-tls.conf" ]; then      # GP_STACK_REDIS_TLS=1
        redis-server "$dir/redis-tls/redis-tls.conf" --bind 127.0.0.1 --save '' \
            --appendonly no --aclfile "$dir/redis-acl/users.acl" \
            --daemonize yes --pidfile "$dir/redis.pid" --dir "$dir/redis" \
            --logfile "$dir/redis.log" >/dev/null
        wait_port "$REDIS_TLS_PORT" 10
        return
    fi
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
        --aclfile "$dir/redis-acl/users.acl" \
        --daemonize yes --pidfile "$dir/redis.pid" --dir "$dir/redis" \
        --logfile "$dir/redis.log" >/dev/null
    wait_port "$REDIS_PORT" 10
}

# GP_STACK_REDIS_TLS=1: deploy/redis-tls's CA and certificates, Redis's
# TLS port REDIS_TLS_PORT, the tunnel's port REDIS_PORT (what gp.env names).
tls_redis() {
    "$(cd "$(dirname "$0")/../.." && pwd)/deploy/redis-tls" init "$dir/redis-tls" --test \
        --port "$REDIS_TLS_PORT" --local-port "$REDIS_PORT"
}

# The stack's one tunnel: redis-tls's client configuration of testsvc, as a
# daemon with a pid file and a log in DIR instead of a foreground process.
# Every service of the stack connects through it and logs in as its own
# ACL user over it (a deployment runs one tunnel beside each service).
start_stunnel() {
    command -v stunnel >/dev/null || { echo "stack: no stunnel (stunnel4: make deps)" >&2; return 1; }
    { printf 'foreground = no\npid = %s\noutput = %s\n' "$dir/stunnel.pid" "$dir/stunnel.log"
      grep -v '^foreground\|^pid\|^output' "$dir/redis-tls/testsvc/stunnel.conf"
    } >"$dir/stunnel.conf"
    stunnel "$dir/stunnel.conf" </dev/null >"$dir/stunnel.out" 2>&1 ||
        { tail -n 5 "$dir/stunnel.out" >&2; return 1; }
    wait_port "$REDIS_PORT" 10
}

# GP_STACK_PG_STATS=1 (the benchmarks): pg_stat_statements loaded, with
# planning time, so a bench can say which statements cost PostgreSQL most.
# GP_STACK_PG_DURABLE=1: fsync, synchronous_commit and full page writes on
# (PostgreSQL's defaults; the tests run without them, for speed), for a
# benchmark of durable commits (make bench: ledger restarts PostgreSQL so).
start_pg() {
    local stats= durable="-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    [ "${GP_STACK_PG_STATS:-0}" = 1 ] &&
        stats="-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track_planning=on"
    [ "${GP_STACK_PG_DURABLE:-0}" = 1 ] &&
        durable="-c fsync=on -c synchronous_commit=on -c full_page_writes=on"
    as_pg "$PGBIN/pg_ctl" -D "$dir/pg/data" -l "$dir/pg/pg.log" -w -t 30 \
        -o "-k $dir/pg -p $PG_PORT -c listen_addresses=127.0.0.1 $durable -c max_connections=200 $stats" \
        start >/dev/null
}

# The template: a cluster made by initdb once (1 MB WAL segments, so a copy
# is small) with the database gridpool already in it, since initdb and
# CREATE DATABASE are the slow parts of a stack's start.  Stacks started at
# once (tests/run.sh's lanes) wait on one lock while the first makes it.
make_template() {
    local tmpl=$TEMPLATE/data.new port
    rm -rf "$tmpl"
    mkdir -p "$TEMPLATE"
    chown postgres: "$TEMPLATE" 2>/dev/null || true
    as_pg "$PGBIN/initdb" -D "$tmpl" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 \
        --no-sync --wal-segsize=1 >/dev/null
    port=$(free_port)
    as_pg "$PGBIN/pg_ctl" -D "$tmpl" -l "$TEMPLATE/init.log" -w -t 30 \
        -o "-k $TEMPLATE -p $port -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null
    as_pg "$PGBIN/psql" -q -h 127.0.0.1 -p "$port" -U postgres -d postgres \
        -c "CREATE DATABASE gridpool" >/dev/null
    as_pg "$PGBIN/pg_ctl" -D "$tmpl" -m fast -w -t 30 stop >/dev/null
    mv "$tmpl" "$TEMPLATE/data"
}

init_pg() {
    mkdir -p "$dir/pg"
    if [ -n "$TEMPLATE" ]; then
        mkdir -p "$TEMPLATE"
        (   # "made": this kind of template (an older one lacks the database)
            flock 9
            [ -f "$TEMPLATE/made" ] || { rm -rf "$TEMPLATE/data" && make_template &&
                                         touch "$TEMPLATE/made"; }
        ) 9>"$TEMPLATE.lock"
        cp -a "$TEMPLATE/data" "$dir/pg/data"
    else
        chown postgres: "$dir/pg" 2>/dev/null || true
        as_pg "$PGBIN/initdb" -D "$dir/pg/data" -U postgres --auth=trust -E UTF8 \
            --locale=C.UTF-8 --no-sync >/dev/null
    fi
    chown -R postgres: "$dir/pg" 2>/dev/null || true
}

# pg_ctl -w returns once the postmaster removed its pid file, which it does
# just before it exits: wait for the process itself too, so a caller that
# stopped everything finds nothing running.
stop_pg() {
    local pid
    [ -f "$dir/pg/data/postmaster.pid" ] || return 0
    pid=$(head -n 1 "$dir/pg/data/postmaster.pid" 2>/dev/null)
    as_pg "$PGBIN/pg_ctl" -D "$dir/pg/data" -m immediate -w -t 20 stop >/dev/null 2>&1 || true
    [ -n "$pid" ] || return 0
    wait_gone "$pid" 50 || { kill -KILL "$pid" 2>/dev/null; wait_gone "$pid" 50; }
}

# ---- a cluster: DIR/nats-I.conf, pid DIR/nats-I.pid, store DIR/nats-I/ ----

cluster_conf() {    # I: server I's configuration, routes to all the others
    local i=$1 j routes=
    for ((j = 1; j <= NATS_CLUSTER; j++)); do
        [ "$j" = "$i" ] || routes="$routes${routes:+,} nats-route://127.0.0.1:$(port_of "$NATS_ROUTE_PORTS" "$j")"
    done
    cat >"$dir/nats-$i.conf" <<CONF
server_name: n$i
listen: 127.0.0.1:$(port_of "$NATS_PORTS" "$i")
http: 127.0.0.1:$(port_of "$NATS_MON_PORTS" "$i")
jetstream { store_dir: "$dir/nats-$i", max_file_store: 16G }
cluster {
  name: gp-test
  listen: 127.0.0.1:$(port_of "$NATS_ROUTE_PORTS" "$i")
  routes: [$routes ]
}
CONF
    [ -f "$dir/auth/auth.conf" ] && echo "include \"$(auth_file)\"" >>"$dir/nats-$i.conf"
    return 0
}

port_of() {         # "p1 p2 p3" I -> pI
    echo "$1" | cut -d' ' -f"$2"
}

start_cluster_one() {   # I
    mkdir -p "$dir/nats-$1"
    "$NATS_SERVER" -c "$dir/nats-$1.conf" -P "$dir/nats-$1.pid" -l "$dir/nats-$1.log" \
        </dev/null >/dev/null 2>&1 &
    wait_port "$(port_of "$NATS_PORTS" "$1")" 10 || { tail -n 5 "$dir/nats-$1.log" >&2; return 1; }
}

# JetStream answers stream requests once the servers elected a meta leader.
wait_meta_leader() {
    local i mon
    mon=$(port_of "$NATS_MON_PORTS" 1)
    for ((i = 0; i < 300; i++)); do
        /usr/bin/python3 -c "
import json, sys, urllib.request
d = json.load(urllib.request.urlopen('http://127.0.0.1:$mon/jsz', timeout=2))
sys.exit(0 if (d.get('meta_cluster') or {}).get('leader') else 1)" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "stack: no JetStream meta leader after 30 s" >&2
    return 1
}

start_cluster() {
    local i
    for ((i = 1; i <= NATS_CLUSTER; i++)); do cluster_conf "$i"; done
    for ((i = 1; i <= NATS_CLUSTER; i++)); do start_cluster_one "$i" || return 1; done
}


load_env() {
    # shellcheck disable=SC1091
    . "$dir/ports"
}

case "$cmd" in
start)
    mkdir -p "$dir/pids"
    chmod 755 "$dir"
    NATS_CLUSTER=${GP_STACK_NATS_CLUSTER:-1}
    case "$NATS_CLUSTER" in [1-5]) ;; *) echo "stack: GP_STACK_NATS_CLUSTER is 1..5" >&2; exit 2 ;; esac
    # every port of the stack from one call: distinct
    read -r REDIS_PORT PG_PORT NATS_ALL <<<"$(free_ports $((2 + 3 * NATS_CLUSTER)))"
    NATS_PORTS=$(echo "$NATS_ALL" | cut -d' ' -f"1-$NATS_CLUSTER")
    NATS_MON_PORTS=$(echo "$NATS_ALL" | cut -d' ' -f"$((NATS_CLUSTER + 1))-$((2 * NATS_CLUSTER))")
    NATS_ROUTE_PORTS=$(echo "$NATS_ALL" | cut -d' ' -f"$((2 * NATS_CLUSTER + 1))-")
    NATS_PORT=$(port_of "$NATS_PORTS" 1)
    NATS_MON_PORT=$(port_of "$NATS_MON_PORTS" 1)  # monitoring: a failing test shows its consumers
    printf 'NATS_PORT=%s\nREDIS_PORT=%s\nPG_PORT=%s\nNATS_MON_PORT=%s\n' "$NATS_PORT" "$REDIS_PORT" \
        "$PG_PORT" "$NATS_MON_PORT" >"$dir/ports"
    printf 'NATS_CLUSTER=%s\nNATS_PORTS="%s"\nNATS_MON_PORTS="%s"\nNATS_ROUTE_PORTS="%s"\n' \
        "$NATS_CLUSTER" "$NATS_PORTS" "$NATS_MON_PORTS" "$NATS_ROUTE_PORTS" >>"$dir/ports"
    init_pg
    acl_redis
    if [ "${GP_STACK_REDIS_TLS:-0}" = 1 ]; then
        REDIS_TLS_PORT=$(free_port)
        echo "REDIS_TLS_PORT=$REDIS_TLS_PORT" >>"$dir/ports"
        tls_redis
    fi
    if [ "$NATS_CLUSTER" -gt 1 ]; then
        [ "${GP_STACK_NATS_AUTH:-0}" = 1 ] && auth_nats
        start_cluster
    else
        [ "${GP_STACK_NATS_AUTH:-0}" = 1 ] && auth_nats
        start_nats
    fi
    start_redis
    [ "${GP_STACK_REDIS_TLS:-0}" = 1 ] && start_stunnel
    start_pg
    [ -n "$TEMPLATE" ] ||       # the template has it
        as_pg "$PGBIN/psql" -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres \
            -c "CREATE DATABASE gridpool" >/dev/null
    [ "$NATS_CLUSTER" -gt 1 ] && wait_meta_leader
    urls=$(for p in $NATS_PORTS; do printf 'nats://127.0.0.1:%s,' "$p"; done)
    # PostgreSQL: the tests' own checks (psql, gridpool-audit) use
    # GP_PG_CONNINFO, the superuser; a service migrates on
    # GP_PG_MIGRATE_CONNINFO (the superuser too) and then logs in on
    # GP_PG_CONNINFO as its own role, gridpool_<service> (gp/dbrole.h).
    # Redis: with GP_STACK_REDIS_TLS=1, GP_REDIS_PORT is the stunnel
    # tunnel's, so the services and the tests' own redis-cli checks all go
    # through it (TLS to redis-server, which has no plaintext port then).
    cat >"$dir/gp.env" <<ENV
GP_NATS_URL=${urls%,}
GP_REDIS_HOST=127.0.0.1
GP_REDIS_PORT=$REDIS_PORT
GP_REDIS_USER=gridpool_{service}
GP_REDIS_PASSWORD_FILE=$dir/redis-acl/{service}.pw
GP_PG_CONNINFO=postgresql://postgres@127.0.0.1:$PG_PORT/gridpool?connect_timeout=5
GP_PG_MIGRATE_CONNINFO=postgresql://postgres@127.0.0.1:$PG_PORT/gridpool?connect_timeout=5
GP_PG_USER=gridpool_{service}
GP_STACK_DIR=$dir
ENV
    [ -f "$dir/auth/admin.env" ] && grep -v '^GP_NATS_URL=' "$dir/auth/admin.env" >>"$dir/gp.env"
    chmod 600 "$dir/gp.env"
    ;;
stop)
    for f in "$dir"/pids/*.pid; do
        [ -e "$f" ] && stop_pidfile "$f"
    done
    [ -f "$dir/ports" ] && { load_env; stop_pg; }
    stop_pidfile "$dir/redis.pid"
    stop_pidfile "$dir/stunnel.pid"
    stop_pidfile "$dir/nats.pid"
    for f in "$dir"/nats-*.pid; do
        [ -e "$f" ] && stop_pidfile "$f"
    done
    ;;
stop-nats)
    load_env
    if [ "${NATS_CLUSTER:-1}" -gt 1 ]; then
        for ((i = 1; i <= NATS_CLUSTER; i++)); do
            if [ -z "${3:-}" ] || [ "$3" = "$i" ]; then stop_pidfile "$dir/nats-$i.pid"; fi
        done
    else
        stop_pidfile "$dir/nats.pid"
    fi
    ;;
start-nats)
    load_env
    if [ "${NATS_CLUSTER:-1}" -gt 1 ]; then
        for ((i = 1; i <= NATS_CLUSTER; i++)); do
            if [ -z "${3:-}" ] || [ "$3" = "$i" ]; then start_cluster_one "$i"; fi
        done
    else
        start_nats
    fi
    ;;
kill-nats)      # I: kill -9, a crash (its pid file stays, for start-nats to replace)
    load_env
    pid=$(cat "$dir/nats-$3.pid")
    kill -KILL "$pid"
    wait_gone "$pid" 50
    ;;
reload-nats)    # nats-server: SIGHUP reloads its config
    load_env
    if [ -f "$dir/auth-test.conf" ]; then test_auth; fi
    for f in "$dir"/nats.pid "$dir"/nats-*.pid; do
        if [ -e "$f" ]; then kill -HUP "$(cat "$f")"; fi
    done
    ;;
auth-nats)
    load_env; NATS_CLUSTER=${NATS_CLUSTER:-1}; auth_nats; stop_pidfile "$dir/nats.pid"; start_nats
    grep -v '^GP_NATS_URL=' "$dir/auth/admin.env" >>"$dir/gp.env"     # as start does
    ;;
stop-redis) stop_pidfile "$dir/redis.pid" ;;
start-redis) load_env; start_redis ;;
stop-pg)    load_env; stop_pg ;;
start-pg)   load_env; start_pg ;;
*) echo "usage: stack.sh start|stop|stop-X|start-X DIR" >&2; exit 2 ;;
esac
