#!/usr/bin/env bash
# pgroles_test.sh -- PostgreSQL least privilege with the real services
# (gp/dbrole.h; run by tests/run.sh through tests/harness/with-stack.sh,
# whose gp.env has GP_PG_MIGRATE_CONNINFO, the superuser, and
# GP_PG_USER=gridpool_{service}):
#
#   0. the database as the services left it before this: migrated by the
#      superuser they logged in as (--migrate-only without the migrator);
#   1. --migrate-only: each service with tables migrates and exits 0 (the
#      roles made, every table handed to the owner); again, it changes nothing; a
#      superuser as the service's role is refused (exit 1, the reason
#      logged); a service without PostgreSQL has nothing to do; the
#      password of a service's conninfo is set on its role (SCRAM);
#   2. the six services run; what they really log in as (usename of their
#      connections in pg_stat_activity, by application_name) is their own
#      role, and none of those roles is a superuser (nor CREATEROLE,
#      CREATEDB, BYPASSRLS, or inherits);
#   3. each role is refused by PostgreSQL a table of another service, DDL
#      (CREATE TABLE, DROP of its own table) and the owner role; billing
#      may not UPDATE, DELETE or TRUNCATE its ledger; a scheduler that has
#      served a tenant (a member of the tenant's role) still may not read
#      billing's tables: membership lends it nothing;
#   4. every table and view in public is granted to exactly one service's
#      role (gp_migrations to all): a table added without its dbgrants.c
#      line fails here, by name;
#   5. the scheduler's own work sees every row under row-level security;
#      no service logged "permission denied";
#   6. a service started check-only (no migrator, pg-migrate off: how a
#      Kubernetes Deployment's container runs) logs in as its role and is
#      healthy.
# test-tags: pass=normal (tests/run.sh)
set -u
B=$GP_BUILD
D=$GP_STACK_DIR
GPCTL=$B/bin/gpctl
G="$GPCTL --timeout 5000"
# shellcheck source=tests/lib/lib.sh
. "$(dirname "$0")/../../lib/lib.sh"
tap_on_fail=gpctl_on_fail
SERVICES="registry scheduler recovery metering billing alerting"
PG_PORT=$(sed -n 's/^PG_PORT=//p' "$D/ports")

# one value as ROLE (trust auth: the harness' PostgreSQL); errors on stdout
as() {
    psql "postgresql://$1@127.0.0.1:$PG_PORT/gridpool" -XAtq -c "$2" 2>&1
}
# ROLE is refused SQL by PostgreSQL with a message matching RE
refused() {
    local out
    out=$(as "$1" "$2")
    echo "$out" | grep -Eq "ERROR: +$3" && return 0
    echo "#   $1: $2 -> $out"
    return 1
}

# all six at once (their migrations queue on one advisory lock): 0 when
# every one exited 0; NAME's log in $tmp/NAME-SERVICE.log
migrate_all() {
    local name=$1 s st=0
    shift
    for s in $SERVICES; do
        ( "$B/bin/gridpool-$s" --config "$D/gp.env" --migrate-only "$@" >"$tmp/$name-$s.log" 2>&1
          echo $? >"$tmp/$name-$s.rc" ) &
    done
    wait
    for s in $SERVICES; do
        [ "$(cat "$tmp/$name-$s.rc")" = 0 ] || { st=1; echo "# $s: $(tail -n 2 "$tmp/$name-$s.log")"; }
    done
    return $st
}

# ---- 0. an older database ----------------------------------------------------------------------
migrate_all old --pg-migrate-conninfo "" --pg-user ""
[ $? -eq 0 ] && [ "$(sql "SELECT relowner::regrole FROM pg_class WHERE relname = 'jobs'")" = postgres ] &&
    [ "$(sql "SELECT count(*) FROM pg_roles WHERE rolname LIKE 'gridpool%'")" = 0 ]
ok "an older database: every service migrated by the superuser it logged in as (jobs is postgres's, no gridpool role)" $?

# ---- 1. --migrate-only ----------------------------------------------------------------------
t0=$(date +%s%N)
migrate_all mig
st=$?
ms=$((($(date +%s%N) - t0) / 1000000))
ok "--migrate-only: the six services migrate and exit 0 ($ms ms for all, at once)" $st
[ "$(sql "SELECT count(*) FROM pg_roles WHERE rolname IN ('gridpool_owner', 'gridpool_registry',
    'gridpool_scheduler', 'gridpool_recovery', 'gridpool_metering', 'gridpool_billing',
    'gridpool_alerting')")" = 7 ]
ok "the owner role and the six login roles exist" $?
others=$(sql "SELECT string_agg(x, ' ') FROM (
                SELECT c.relname || '=' || c.relowner::regrole::text AS x FROM pg_class c
                WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r','v','S')
                  AND c.relowner <> 'gridpool_owner'::regrole
                UNION ALL SELECT p.proname || '=' || p.proowner::regrole::text FROM pg_proc p
                WHERE p.pronamespace = 'public'::regnamespace AND p.proowner <> 'gridpool_owner'::regrole
                  AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = p.oid AND d.deptype = 'e')) o")
nfn=$(sql "SELECT count(*) FROM pg_proc WHERE proowner = 'gridpool_owner'::regrole")
[ -z "$others" ] && [ "${nfn:-0}" -ge 20 ]
ok "every table, view, sequence and function ($nfn) is handed to gridpool_owner (${others:-none other})" $?
before=$(sql "SELECT string_agg(service || version, ',' ORDER BY service, version) FROM gp_migrations")
"$B/bin/gridpool-billing" --config "$D/gp.env" --migrate-only >"$tmp/mig-again.log" 2>&1
st=$?
[ $st -eq 0 ] && grep -q 'event=pg_schema service=billing .*applied=0' "$tmp/mig-again.log" &&
    [ "$(sql "SELECT string_agg(service || version, ',' ORDER BY service, version) FROM gp_migrations")" = "$before" ]
ok "again: exit 0, no step applied" $?
"$B/bin/gridpool-recovery" --config "$D/gp.env" --migrate-only --pg-user postgres \
    >"$tmp/mig-super.log" 2>&1
st=$?
[ $st -eq 1 ] && grep -q 'role postgres may do more than its grants' "$tmp/mig-super.log"
ok "a superuser as the service's role: --migrate-only exits 1 ($st) saying why" $?
"$B/bin/gridpool-recovery" --config "$D/gp.env" --pg-user postgres --http-port -1 \
    >"$tmp/start-super.log" 2>&1 </dev/null
st=$?
[ $st -eq 1 ] && grep -q 'role postgres may do more than its grants' "$tmp/start-super.log" &&
    grep -q 'event=start_refused' "$tmp/start-super.log"
ok "... and a service started so stops at once (exit $st, start_refused), never logging in as it" $?
# the password of the service's conninfo is set on its role (a SCRAM
# verifier: the harness' trust auth cannot show it is checked)
pw="pw-$$-$RANDOM"
"$B/bin/gridpool-alerting" --config "$D/gp.env" --migrate-only \
    --pg-conninfo "postgresql://gridpool_alerting:$pw@127.0.0.1:$PG_PORT/gridpool" >"$tmp/mig-pw.log" 2>&1
st=$?
[ $st -eq 0 ] && grep -q 'scram=set' "$tmp/mig-pw.log" && ! grep -q "$pw" "$tmp/mig-pw.log" &&
    [ "$(sql "SELECT left(rolpassword, 14) FROM pg_authid WHERE rolname = 'gridpool_alerting'")" = 'SCRAM-SHA-256$' ] &&
    [ "$(sql "SELECT count(*) FROM pg_authid WHERE rolpassword LIKE '%$pw%'")" = 0 ]
ok "the password in the service's conninfo is set on its role as a SCRAM verifier, logged nowhere" $?

# ---- 2. what the services log in as --------------------------------------------------------
for s in $SERVICES; do
    spawn "$s" "$B/bin/gridpool-$s" --config "$D/gp.env" --http-port 0
done
up=0
for _ in $(seq 1 150); do
    $G health $SERVICES >"$tmp/health" 2>&1 && [ "$(grep -c ' ok$' "$tmp/health")" -eq 6 ] &&
        { up=1; break; }
    sleep 0.2
done
[ $up -eq 1 ]
ok "the six services are healthy (PostgreSQL up)" $?
[ $up -eq 1 ] || sed 's/^/#   /' "$tmp/health"
logins=$(sql "SELECT string_agg(DISTINCT application_name || '=' || usename, ' ' ORDER BY
              application_name || '=' || usename) FROM pg_stat_activity
              WHERE application_name LIKE 'gridpool-%'")
want="gridpool-alerting=gridpool_alerting gridpool-billing=gridpool_billing"
want="$want gridpool-metering=gridpool_metering gridpool-recovery=gridpool_recovery"
want="$want gridpool-registry=gridpool_registry"
want="$want gridpool-scheduler=gridpool_scheduler"
[ "$logins" = "$want" ]
ok "each service's connections log in as its own role ($logins)" $?
bad=$(sql "SELECT string_agg(DISTINCT a.usename, ',') FROM pg_stat_activity a
           JOIN pg_roles r ON r.rolname = a.usename WHERE a.application_name LIKE 'gridpool-%'
             AND (r.rolsuper OR r.rolcreaterole OR r.rolcreatedb OR r.rolbypassrls OR r.rolinherit)")
n_=$(sql "SELECT count(DISTINCT usename) FROM pg_stat_activity WHERE application_name LIKE 'gridpool-%'")
[ -z "$bad" ] && [ "$n_" = 6 ]
ok "no role a service logs in as is a superuser, CREATEROLE, CREATEDB, BYPASSRLS or inherits (${bad:-none of $n_})" $?

# ---- 3. refused by PostgreSQL ----------------------------------------------------------------
# One session per role (each statement on its own: autocommit), its errors
# in $tmp/as-ROLE.out; denied ROLE RE: an error matching RE is there.
try_as() {
    local role=$1
    shift
    printf '%s;\n' "SELECT 'version of ' || service || ': ' || max(version) FROM gp_migrations
                     WHERE service = '${role#gridpool_}' GROUP BY service" "$@" | psql "postgresql://$role@127.0.0.1:$PG_PORT/gridpool" -XAtq \
        >"$tmp/as-$role.out" 2>&1
}
denied() {
    grep -Eq "ERROR: +$2" "$tmp/as-$1.out" && return 0
    echo "#   $1: no error '$2' in: $(tr '\n' ' ' <"$tmp/as-$1.out" | cut -c1-400)"
    return 1
}
ddl="CREATE TABLE gp_mine (i int)"
try_as gridpool_registry "SELECT count(*) FROM jobs" "$ddl" "SET ROLE gridpool_owner" "DROP TABLE nodes"
try_as gridpool_scheduler "SELECT count(*) FROM ledger_entries" "$ddl" "SET ROLE gridpool_owner" \
    "ALTER TABLE jobs ADD COLUMN x int"
try_as gridpool_recovery "SELECT count(*) FROM nodes" "$ddl" "SET ROLE gridpool_owner" \
    "DROP TABLE recovery_nodes"
try_as gridpool_metering "SELECT count(*) FROM usage_records" "$ddl" "SET ROLE gridpool_owner" \
    "DROP TABLE metering_records"
try_as gridpool_billing "SELECT count(*) FROM attempts" "$ddl" "SET ROLE gridpool_owner" \
    "DROP TABLE usage_records" "UPDATE ledger_entries SET amount = 0" "DELETE FROM ledger_transfers" \
    "TRUNCATE ledger_entries" "DELETE FROM usage_records" "UPDATE statements SET hash = ''"
try_as gridpool_alerting "SELECT count(*) FROM usage_records" "$ddl" "SET ROLE gridpool_owner" \
    "TRUNCATE alerts"
denied gridpool_registry "permission denied for table jobs"
ok "registry: another service's table (jobs) is refused" $?
denied gridpool_scheduler "permission denied for table ledger_entries"
ok "scheduler: another service's table (ledger_entries) is refused" $?
denied gridpool_recovery "permission denied for table nodes"
ok "recovery: another service's table (nodes) is refused" $?
denied gridpool_metering "permission denied for table usage_records"
ok "metering: another service's table (usage_records) is refused" $?
denied gridpool_billing "permission denied for table attempts"
ok "billing: another service's table (attempts) is refused" $?
denied gridpool_alerting "permission denied for table usage_records"
ok "alerting: another service's table (usage_records) is refused" $?
st=0
for s in $SERVICES; do
    denied "gridpool_$s" "permission denied for schema public" || st=1
    denied "gridpool_$s" "permission denied to set role" || st=1
done
ok "no service role may create a table or become the owner" $st
st=0
denied gridpool_registry "must be owner of table nodes" || st=1
denied gridpool_scheduler "must be owner of table jobs" || st=1
denied gridpool_recovery "must be owner of table recovery_nodes" || st=1
denied gridpool_metering "must be owner of table metering_records" || st=1
denied gridpool_billing "must be owner of table usage_records" || st=1
denied gridpool_alerting "permission denied for table alerts" || st=1
ok "no service role may drop, alter or truncate its own tables" $st
st=0
[ "$(grep -c 'permission denied for table \(ledger_entries\|ledger_transfers\|usage_records\|statements\)' \
     "$tmp/as-gridpool_billing.out")" -eq 5 ] || st=1
ok "billing's ledger, records and statements are append-only by privilege (UPDATE, DELETE, TRUNCATE refused)" $st
[ $st -eq 0 ] || sed 's/^/#   /' "$tmp/as-gridpool_billing.out"

# ---- 4. every table is some service's --------------------------------------------------------
orphans=$(sql "SELECT string_agg(c.relname, ' ' ORDER BY c.relname) FROM pg_class c
               WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r','p','v','m')
                 AND c.relname <> 'gp_migrations' AND (SELECT count(*) FROM pg_roles r
                   WHERE r.rolname IN ('gridpool_registry', 'gridpool_scheduler', 'gridpool_recovery',
                                       'gridpool_metering', 'gridpool_billing', 'gridpool_alerting')
                     AND has_table_privilege(r.oid, c.oid, 'SELECT, INSERT, UPDATE, DELETE')) <> 1")
ntab=$(sql "SELECT count(*) FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r','v')")
[ -z "$orphans" ] && [ "${ntab:-0}" -ge 30 ]
ok "each of the $ntab tables and views is granted to exactly one service (not so: ${orphans:-none}; add its line to services/<service>/dbgrants.c)" $?
st=0
for s in $SERVICES; do
    grep -q "^version of $s: [1-9]" "$tmp/as-gridpool_$s.out" || st=1
done
ok "every service role reads its schema version (gp_migrations)" $st

# ---- 5. the services' own work ----------------------------------------------------------------
$G create tenant op --kind operator >/dev/null 2>&1 &&
    $G create tenant acme --kind customer --parent op >/dev/null 2>&1
ok "the registry writes as its role (tenants op, acme created)" $?
TENANT=acme
job=$(submit --command 'sim:run=1s' --gpus 1 --model L4)
[ -n "$job" ]
ok "the scheduler writes as its role (job $job submitted)" $?
run get jobs --tenant acme -o json
[ "$rc" -eq 0 ] && [ -n "$job" ] && grep -q "$job" "$tmp/out"
ok "a tenant's query (under its role, made by gp_tenant_role as the owner) lists the job" $?
[ "$(as gridpool_scheduler "SELECT count(*) FROM jobs WHERE id = '$job' AND tenant = 'acme'")" = 1 ]
ok "the scheduler's role sees the job's row under row-level security (its policy)" $?
[ "$(sql "SELECT pg_has_role('gridpool_scheduler', 'gpt_acme', 'MEMBER')")" = t ]
ok "the scheduler's role is a member of gpt_acme (granted by gp_tenant_role)" $?
refused gridpool_scheduler "SELECT count(*) FROM usage_records" "permission denied for table usage_records"
ok "... which lends it nothing: billing's usage_records still refused (NOINHERIT)" $?
refused gridpool_alerting "SELECT gp_tenant_role('acme')" "permission denied for function gp_tenant_role"
ok "another service's role may not call gp_tenant_role (EXECUTE revoked from PUBLIC)" $?
sleep 1
denied=$(grep -l 'permission denied' "$D"/registry.log "$D"/scheduler.log "$D"/recovery.log \
         "$D"/metering.log "$D"/billing.log "$D"/alerting.log 2>/dev/null | tr '\n' ' ')
[ -z "$denied" ]
ok "no service logged 'permission denied' (${denied:-none})" $?
[ -n "$denied" ] && grep -h 'permission denied' "$D"/*.log | head -5 | cut -c1-300 | sed 's/^/#   /'

# ---- 6. check only: no migrator in the process ------------------------------------------------
stop_pidfile "$D/pids/recovery.pid"
spawn recovery2 env -u GP_PG_MIGRATE_CONNINFO "$B/bin/gridpool-recovery" --config "$D/gp.env" \
    --http-port 0 --pg-migrate-conninfo "" --pg-migrate false
up=1
for _ in $(seq 1 100); do
    $G health recovery >"$tmp/health" 2>&1 && grep -q '^recovery .* ok$' "$tmp/health" && { up=0; break; }
    sleep 0.2
done
grep -q 'event=pg_schema service=recovery .*checked=true' "$D/recovery2.log" &&
    ! grep -q 'event=pg_migrate_step' "$D/recovery2.log"
st=$?
[ $up -eq 0 ] && [ $st -eq 0 ]
ok "recovery started check-only (pg-migrate off, no migrator) is healthy, schema checked" $?
[ "$(sql "SELECT string_agg(DISTINCT usename, ',') FROM pg_stat_activity WHERE application_name = 'gridpool-recovery'")" = gridpool_recovery ]
ok "... logged in as gridpool_recovery" $?
tap_end
