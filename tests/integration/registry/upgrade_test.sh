#!/usr/bin/env bash
# upgrade_test.sh -- the registry's versioned schema, process level
# (run by tests/run.sh through tests/harness/with-stack.sh: GP_BUILD,
# GP_PG_CONNINFO, GP_STACK_DIR set).
#
# 1. A database as the registry before gp_migrations left it: its tables
#    (step 1 is that version's script, unchanged) with rows, and no
#    gp_migrations.  Made here by a first start, some admin writes and
#    dropping gp_migrations.
# 2. The registry adopts it: step 1 recorded once, the rows still there.
# 3. A restart applies nothing.
# 4. A database recorded at a newer version than the registry knows: the
#    registry refuses to start (exits non-zero, pg_schema_refused naming
#    both versions).
# test-tags: pass=san (tests/run.sh)
set -u
GPCTL=$GP_BUILD/bin/gpctl
REGISTRY=$GP_BUILD/bin/gridpool-registry
tmp=$(mktemp -d /tmp/reg-upgrade.XXXXXX)
n=0
failed=0
reg_pid=

cleanup() {
    [ -n "$reg_pid" ] && kill "$reg_pid" 2>/dev/null && wait "$reg_pid" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

ok() {        # description, condition result (0 = pass)
    n=$((n + 1))
    if [ "$2" -eq 0 ]; then
        echo "ok $n - $1"
    else
        echo "not ok $n - $1"
        failed=$((failed + 1))
        echo "# log: $(tail -c 800 "$tmp/reg.log" 2>/dev/null)"
    fi
}

sql() {       # one value
    psql -X -q -A -t -d "$GP_PG_CONNINFO" -c "$1" 2>&1
}

start() {     # starts the registry, logging to $tmp/reg.log
    "$REGISTRY" --config "$GP_STACK_DIR/gp.env" --http-port 0 >"$tmp/reg.log" 2>&1 &
    reg_pid=$!
    echo "$reg_pid" >"$GP_STACK_DIR/pids/registry.pid"
}

healthy() {   # waits until the registry answers with PostgreSQL up
    for _ in $(seq 1 150); do
        "$GPCTL" --timeout 500 health >"$tmp/health" 2>/dev/null &&
            grep -q '^registry .* ok$' "$tmp/health" && return 0
        sleep 0.2
    done
    return 1
}

stop() {
    kill "$reg_pid" 2>/dev/null
    wait "$reg_pid" 2>/dev/null
    reg_pid=
}

mkdir -p "$GP_STACK_DIR/pids"

# ---- 1. the previous version's database ------------------------------------------
start
healthy
ok "first start on an empty database" $?
"$GPCTL" create tenant op --kind operator --name "Net Op" >/dev/null 2>&1 &&
    "$GPCTL" create site s1 --tenant op --region eu-west --power-prices 0:180000,420:250000 \
        >/dev/null 2>&1
ok "rows written" $?
stop
[ "$(sql "DROP TABLE gp_migrations; DROP TABLE retired_nodes")" = "" ] &&
    [ "$(sql "SELECT to_regclass('gp_migrations') IS NULL AND to_regclass('sites') IS NOT NULL")" = t ]
ok "database as the unversioned registry left it: tables, rows, no gp_migrations" $?

# ---- 2. adopted --------------------------------------------------------------------
start
healthy
ok "registry starts on it" $?
grep -q 'event=pg_schema service=registry version=5 applied=5' "$tmp/reg.log"
ok "log: step 1 applied (adopted), steps 2 (retired nodes), 3 (fair-share weight), 4 (node modes) and 5 (inventory revisions) run" $?
[ "$(sql "SELECT string_agg(version || ' ' || name, ',' ORDER BY version) FROM gp_migrations WHERE service = 'registry'")" = "1 initial schema,2 retired nodes,3 fair-share weight of a tenant,4 node modes and transitions,5 inventory revisions" ]
ok "gp_migrations: steps 1 to 5 recorded once" $?
[ "$(sql "SELECT string_agg(DISTINCT fair_share_weight::text, ',') FROM tenants")" = 1 ]
ok "the tenants the old version left have weight 1" $?
"$GPCTL" get site s1 -o json >"$tmp/site.json" 2>&1 &&
    /usr/bin/python3 -c "import json,sys; d=json.load(open('$tmp/site.json')); d = d[0] if isinstance(d, list) else d; sys.exit(0 if d['tenant'] == 'op' and d['power_prices'][1]['price_micros_per_kwh'] == 250000 else 1)"
ok "the site is intact, read through the registry" $?
before=$(sql "SELECT applied_at FROM gp_migrations WHERE service = 'registry'")
stop

# ---- 3. a restart applies nothing ----------------------------------------------------
start
healthy
ok "restart" $?
grep -q 'event=pg_schema service=registry version=5 applied=0' "$tmp/reg.log" &&
    ! grep -q 'event=pg_migrate_step' "$tmp/reg.log"
ok "log: nothing applied" $?
# $before must be a timestamp: two equal error messages (or two empty
# answers) must not pass for an untouched record.
after=$(sql "SELECT applied_at FROM gp_migrations WHERE service = 'registry'")
echo "$before" | grep -Eq '^[0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:.]+' && [ "$after" = "$before" ]
ok "the record is untouched ($before)" $?
stop

# ---- 4. newer than known: refused ----------------------------------------------------
sql "INSERT INTO gp_migrations (service, version, name) VALUES ('registry', 6, 'from a newer build')" >/dev/null
start
rc=
for _ in $(seq 1 150); do
    if ! kill -0 "$reg_pid" 2>/dev/null; then
        wait "$reg_pid"
        rc=$?
        reg_pid=
        break
    fi
    sleep 0.2
done
[ -n "$rc" ] && [ "$rc" -ne 0 ]
ok "registry exits non-zero (rc=${rc:-still running})" $?
grep -q 'event=pg_schema_refused service=registry err=CONFLICT detail="database has registry schema version 6, this build knows up to version 5' "$tmp/reg.log"
ok "log: pg_schema_refused names both versions" $?
[ "$(sql "SELECT count(*) FROM gp_migrations WHERE service = 'registry'")" = 6 ]
ok "nothing recorded or removed" $?

echo "1..$n"
[ "$failed" -eq 0 ]
