#!/usr/bin/env bash
# prometheus_test.sh -- a real Prometheus (Debian's) scrapes every
# gridpool service, against real services (run under
# tests/harness/with-stack.sh): the six services start on free HTTP ports,
# deploy/prometheus/prometheus.yml and rules.yml are used as shipped (the
# scrape interval shortened for the test) with a file_sd target file per
# service, as a deployment writes them.
#
#   1. promtool accepts the configuration and the rules;
#   2. every service's /metrics is scraped: up == 1 for all six;
#   3. the recording and alert rules are loaded and evaluated
#      (gridpool:instances_up per service);
#   4. a service killed: its up goes to 0 (the check can fail).
# test-tags: pass=normal (tests/run.sh)
set -u
B=$GP_BUILD
D=$GP_STACK_DIR
PY=/usr/bin/python3
here=$(cd "$(dirname "$0")/../../.." && pwd)
# shellcheck source=tests/lib/lib.sh
. "$(dirname "$0")/../../lib/lib.sh"

on_fail() {
    echo "# prometheus log:"; tail -n 8 "$D/prometheus.log" | sed 's/^/#   /'
    echo "# targets:"; cat "$tmp/prom/targets"/*.json 2>/dev/null | sed 's/^/#   /'
}
tap_on_fail=on_fail

services="registry scheduler recovery metering billing alerting"
for s in $services; do
    spawn "$s" "$B/bin/gridpool-$s" --config "$D/gp.env" --http-port 0
done
mkdir -p "$tmp/prom/targets"
declare -A port
for s in $services; do
    for _ in $(seq 1 100); do
        port[$s]=$(sed -n 's/.*event=starting .*http_port=\([0-9]*\).*/\1/p' "$D/$s.log" | head -n 1)
        [ -n "${port[$s]}" ] && break
        sleep 0.1
    done
    printf '[{"targets": ["127.0.0.1:%s"], "labels": {"service": "%s"}}]\n' "${port[$s]:-0}" "$s" \
        >"$tmp/prom/targets/gridpool-$s.json"
done
echo '[]' >"$tmp/prom/targets/alertmanager.json"
sed 's/scrape_interval: 15s/scrape_interval: 1s/; s/evaluation_interval: 15s/evaluation_interval: 1s/' \
    "$here/deploy/prometheus/prometheus.yml" >"$tmp/prom/prometheus.yml"
sed -i 's/refresh_interval: 30s/refresh_interval: 1s/' "$tmp/prom/prometheus.yml"
cp "$here/deploy/prometheus/rules.yml" "$tmp/prom/rules.yml"

promtool check config "$tmp/prom/prometheus.yml" >"$tmp/check.out" 2>&1 &&
    promtool check rules "$here/deploy/prometheus/rules.yml" >>"$tmp/check.out" 2>&1
st_=$?; ok "promtool: the configuration and $(grep -o '[0-9]* rules found' "$tmp/check.out" | head -n 1) are valid" $st_

PP=$(free_port)
spawn prometheus prometheus --config.file="$tmp/prom/prometheus.yml" \
    --storage.tsdb.path="$tmp/prom/data" --web.listen-address="127.0.0.1:$PP"
wait_port "$PP" 30
st_=$?; ok "Prometheus $(prometheus --version 2>&1 | head -n 1 | cut -d' ' -f3) on port $PP" $st_

q() { curl -s --get "http://127.0.0.1:$PP/api/v1/query" --data-urlencode "query=$1"; }
ups() {   # service=value pairs of up, sorted
    q 'up{job="gridpool"}' | $PY -c "
import json, sys
r = json.load(sys.stdin)['data']['result']
print(' '.join(sorted('%s=%s' % (x['metric'].get('service'), x['value'][1]) for x in r)))"
}
want="alerting=1 billing=1 metering=1 recovery=1 registry=1 scheduler=1"
for _ in $(seq 1 150); do [ "$(ups 2>/dev/null)" = "$want" ] && break; sleep 0.2; done
got=$(ups)
[ "$got" = "$want" ]
ok "every service scraped, up: $got" $?
for _ in $(seq 1 100); do
    nup=$(q 'gridpool:instances_up' | $PY -c "import json,sys; print(len(json.load(sys.stdin)['data']['result']))" 2>/dev/null)
    [ "${nup:-0}" -eq 6 ] && break
    sleep 0.2
done
groups=$(curl -s "http://127.0.0.1:$PP/api/v1/rules" | $PY -c "
import json, sys
g = json.load(sys.stdin)['data']['groups']
print(len(g), sum(len(x['rules']) for x in g))")
[ "${nup:-0}" -eq 6 ] && [ "$groups" = "2 11" ]
ok "the rules loaded (groups, rules: $groups) and evaluated (gridpool:instances_up for ${nup:-0} services)" $?
kill "$(cat "$D/pids/metering.pid")"
for _ in $(seq 1 100); do ups | grep -q 'metering=0' && break; sleep 0.2; done
got=$(ups)
echo "$got" | grep -q 'metering=0'
ok "metering killed: its up is 0 ($got)" $?

tap_end
