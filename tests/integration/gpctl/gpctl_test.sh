#!/usr/bin/env bash
# gpctl_test.sh -- gpctl against a private stack (run by tests/run.sh through
# tests/harness/with-stack.sh: GP_BUILD, GP_NATS_URL, GP_STACK_DIR set).
#
# Always: usage errors exit 2, an unreachable control plane exits 3 with a
# message naming the problem, the stack is found through --env-file /
# $GP_ENV_FILE, and gpctl exits valgrind-clean (skipped, and said so, in the
# sanitizer build).  With the registry (which must be built): create / get
# (table and JSON) / update / describe / delete of tenant, site, pool and
# product, and typed remote errors with exit code 1.
# test-tags: pass=san (tests/run.sh)
set -u
GPCTL=$GP_BUILD/bin/gpctl
REGISTRY=$GP_BUILD/bin/gridpool-registry
# shellcheck source=tests/lib/lib.sh
. "$(dirname "$0")/../../lib/lib.sh"
tap_on_fail=gpctl_on_fail

# ---- without the registry ------------------------------------------------------

[ -x "$GPCTL" ]
ok "gpctl is built" $?
run --help
[ "$rc" -eq 0 ] && grep -q 'Usage: gpctl' "$tmp/out"
ok "gpctl --help exits 0 with the usage" $?
run get --help
[ "$rc" -eq 0 ] && grep -q 'Usage: gpctl get' "$tmp/out"
ok "gpctl get --help shows the usage of get" $?
expect "no command: usage error 2" 2 'missing command'
expect "unknown command: exit 2" 2 'unknown command "frob"' frob
expect "unknown kind: exit 2" 2 'unknown KIND "widgets"' get widgets
expect "bad -o: exit 2" 2 'expected table, wide or json' get sites -o yaml
expect "bad --timeout: exit 2" 2 'expected milliseconds' --timeout abc get sites
expect "bad --state: exit 2" 2 'expected unknown, healthy' get nodes --state bogus
expect "unknown filter: exit 2" 2 'unknown option' get sites --colour red
expect "create with an unknown field: exit 2" 2 'site has no field --colour' \
    create site s1 --tenant op --region r --colour red
expect "create with an out-of-range value: exit 2" 2 'lat' \
    create site s1 --tenant op --region r --lat 100
expect "create of a read-only field: exit 2" 2 'read only' \
    create site s1 --tenant op --region r --nodes 3
expect "create with too many list items: exit 2" 2 'more than 8 items' \
    create pool p1 --tenant op --scope global --models a,b,c,d,e,f,g,h,i
expect "update without fields: exit 2" 2 'nothing to change' update site s1
expect "describe of a pool: exit 2" 2 'cannot describe' describe pool p1
expect "create of a node: exit 2" 2 'cannot create' create node n1
expect "missing --env-file: exit 2" 2 'cannot read env file' --env-file "$tmp/none.env" get sites

# the registry is not started yet (nor ever, when it is not built)
{
    expect "get sites without a registry: exit 3, names the problem" 3 \
        'no responders on gp\.admin\.site\.list: is gridpool-registry running' get sites
    expect "health without a registry: exit 3" 3 '' health
    grep -q 'registry.*not running' "$tmp/out"
    ok "health shows the registry as not running" $?
    expect "describe without a registry: exit 3" 3 'no responders' describe node n1
    printf 'GP_OTHER=1\nGP_NATS_URL=%s\n' "$GP_NATS_URL" >"$tmp/gp.env"
    rc=0; env -u GP_NATS_URL "$GPCTL" --env-file "$tmp/gp.env" get sites >"$tmp/out" 2>"$tmp/err" || rc=$?
    [ "$rc" -eq 3 ] && grep -q 'no responders' "$tmp/err"
    ok "--env-file finds NATS (then no responders)" $?
    rc=0; env -u GP_NATS_URL GP_ENV_FILE="$tmp/gp.env" "$GPCTL" get tenants >"$tmp/out" 2>"$tmp/err" || rc=$?
    [ "$rc" -eq 3 ] && grep -q 'no responders' "$tmp/err"
    ok "\$GP_ENV_FILE finds NATS" $?
}

port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
expect "NATS down: exit 3 with 'cannot connect'" 3 "cannot connect to NATS at nats://127.0.0.1:$port" \
    --nats-url "nats://127.0.0.1:$port" --timeout 500 get sites
rc=0; (cd "$tmp" && env -u GP_NATS_URL -u GP_ENV_FILE "$GPCTL" get sites) >"$tmp/out" 2>"$tmp/err" || rc=$?
[ "$rc" -eq 3 ] && grep -q 'no control plane address' "$tmp/err"
ok "no address configured: exit 3, says how to configure" $?

if ldd "$GPCTL" | grep -q libasan; then
    n=$((n + 1))
    echo "ok $n - # SKIP gpctl under valgrind: sanitizer build"
else
    # No registry yet: gpctl's own exit 3 must come through, and valgrind's
    # summary must be there (valgrind really ran) and say 0 errors.
    valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect \
        --show-leak-kinds=definite,indirect "$GPCTL" --timeout 1000 get sites >"$tmp/out" 2>"$tmp/err"
    rc=$?
    [ "$rc" -eq 3 ] && grep -q 'ERROR SUMMARY: 0 errors' "$tmp/err" &&
        ! grep -q 'definitely lost: [1-9]\|indirectly lost: [1-9]\|Invalid' "$tmp/err"
    ok "gpctl exits valgrind-clean (its own exit 3, valgrind's summary: 0 errors)" $?
fi

# ---- with the registry -------------------------------------------------------------

[ -x "$REGISTRY" ]
ok "gridpool-registry is built" $?
{
    spawn registry "$REGISTRY" --config "$GP_STACK_DIR/gp.env" --http-port 0
    for _ in $(seq 1 100); do
        "$GPCTL" --timeout 500 health >/dev/null 2>&1 && break
        sleep 0.2
    done
    expect "registry answers health" 0 '' health
    grep -q '^registry .* ok$' "$tmp/out"
    ok "health table shows the registry ok" $?

    expect "get sites -o json of an empty registry" 0 '' get sites -o json
    json_check "empty answer is an empty JSON array" 'd == []'
    expect "get gpus -o json with no nodes" 0 '' get gpus -o json
    json_check "gpus: empty JSON array" 'd == []'

    expect "create tenant" 0 '' create tenant op --kind operator --name "Net Op"
    grep -q 'tenant/op created' "$tmp/out"
    ok "create says what it did" $?
    expect "create site" 0 '' create site s1 --tenant op --region eu-west --lat 48.1 --lon 11.5 \
        --currency EUR --power-prices 0:180000,420:250000
    expect "create pool" 0 '' create pool p1 --tenant op --scope region --region eu-west \
        --models L4,H100
    expect "create product" 0 '' create product l4-eu --pool p1 --gpu-model L4 \
        --price-micros-per-gpu-hour 650000 --currency EUR
    expect "create of an existing site: exit 1, typed" 1 '^gpctl: [A-Z]+: ' \
        create site s1 --tenant op --region eu-west

    expect "get sites (table)" 0 '' get sites
    head -1 "$tmp/out" | grep -q '^NAME  *TENANT  *REGION'
    ok "site table has its header" $?
    grep -q '^s1  *op  *eu-west' "$tmp/out"
    ok "site table has the site" $?
    expect "get sites -o json" 0 '' get sites -o json
    json_check "site JSON fields" \
        'len(d) == 1 and d[0]["id"] == "s1" and d[0]["tenant"] == "op" and d[0]["region"] == "eu-west" and abs(d[0]["lat"] - 48.1) < 1e-9 and d[0]["power_prices"][1] == {"start_min": 420, "price_micros_per_kwh": 250000}'
    expect "get sites -o wide" 0 '' get sites -o wide
    grep -q 'POWER/KWH' "$tmp/out"
    ok "wide site table has more columns" $?
    expect "get pools -o json" 0 '' get pools -o json
    json_check "pool JSON fields" 'd[0]["id"] == "p1" and d[0]["scope"] == "region" and d[0]["models"] == ["L4", "H100"]'
    expect "get products -o json" 0 '' get products -o json
    json_check "product JSON fields" 'd[0]["pool"] == "p1" and d[0]["price_micros_per_gpu_hour"] == 650000'
    expect "get tenants -o json" 0 '' get tenants -o json
    json_check "tenant JSON fields" 'd[0]["id"] == "op" and d[0]["kind"] == "operator"'
    expect "get nodes -o json (none yet)" 0 '' get nodes -o json
    json_check "nodes: JSON array" 'isinstance(d, list)'

    expect "update site" 0 '' update site s1 --lat 50 --notes "key at the kiosk"
    expect "get the updated site" 0 '' get site s1 -o json
    json_check "update changed only the given fields" \
        'd[0]["lat"] == 50 and d[0]["notes"] == "key at the kiosk" and d[0]["tenant"] == "op" and d[0]["region"] == "eu-west" and len(d[0]["power_prices"]) == 2'
    expect "update of an unknown site: exit 1 NOTFOUND" 1 '^gpctl: NOTFOUND: ' update site s9 --lat 1

    expect "describe site" 0 '' describe site s1
    grep -q '^Power Prices:' "$tmp/out" && grep -q '07:00' "$tmp/out"
    ok "describe site shows the price schedule" $?
    expect "pool on an unknown site: exit 1 with a typed error" 1 '^gpctl: [A-Z]+: ' \
        create pool p2 --tenant op --scope site --site nosuch
    expect "describe of an unknown node: exit 1 NOTFOUND" 1 '^gpctl: NOTFOUND: ' describe node nosuch
    expect "summary" 0 '' summary
    grep -q '^Sites: *1' "$tmp/out"
    ok "summary counts the site" $?
    expect "summary -o json" 0 '' summary -o json
    json_check "summary JSON" 'd["sites"] == 1 and d["pools"][0]["id"] == "p1"'

    expect "delete product" 0 '' delete product l4-eu
    expect "delete pool" 0 '' delete pool p1
    expect "delete site" 0 '' delete site s1
    grep -q 'site/s1 deleted' "$tmp/out"
    ok "delete says what it did" $?
    expect "get of a deleted site: exit 1 NOTFOUND" 1 '^gpctl: NOTFOUND: ' get site s1
    expect "delete of a deleted site: exit 1 NOTFOUND" 1 '^gpctl: NOTFOUND: ' delete site s1
}

tap_end
