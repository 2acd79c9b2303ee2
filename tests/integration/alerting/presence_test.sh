#!/usr/bin/env bash
# presence_test.sh -- silent service instances, against real
# services (run under tests/harness/with-stack.sh): gridpool-alerting and
# instances of the chassis' test service (testsvc), each saying it is there
# every 500 ms (--presence-ms; the default is 5 s).
#
#   1. an instance that hangs (SIGSTOP): one ServiceInstanceSilent alert
#      (labels service=testsvc, instance=tsa; our own on-call), none for the
#      instance next to it; resolved when it speaks again (SIGCONT);
#   2. an instance stopped cleanly (SIGTERM: it says "stopping"): no alert;
#   3. an instance killed (kill -9): the alert fires; a new instance of the
#      service (a restart policy's replacement) resolves it, "replaced by".
# test-tags: pass=san (tests/run.sh)
set -u
B=$GP_BUILD
G="$B/bin/gpctl --timeout 10000"
D=$GP_STACK_DIR
# shellcheck source=tests/lib/lib.sh
. "$(dirname "$0")/../../lib/lib.sh"

on_fail() {
    echo "# alerts:"; sql "SELECT alertname, state, labels, evidence FROM alerts" | sed 's/^/#   /'
    echo "# presence:"; sql "SELECT * FROM alert_presence" | sed 's/^/#   /'
}
tap_on_fail=on_fail

svc() {       # instance
    spawn "$1" "$B/test/bin/testsvc" --config "$D/gp.env" --http-port -1 --instance "$1" \
        --presence-ms 500
}
alert() {     # instance -> state of its ServiceInstanceSilent alert
    sql "SELECT state FROM alerts WHERE alertname = 'ServiceInstanceSilent'
         AND labels = 'team=platform,service=testsvc,instance=$1'"
}
spawn alerting "$B/bin/gridpool-alerting" --config "$D/gp.env" --http-port 0 --presence-check-ms 200
for _ in $(seq 1 100); do $G health alerting >/dev/null 2>&1 && break; sleep 0.1; done
svc tsa
svc tsb
wait_sql "SELECT count(*) FROM alert_presence WHERE service = 'testsvc' AND NOT stopping" 2 100
ok "two testsvc instances say they are there" $?

# ---- 1. a hung instance -------------------------------------------------------------------
# both have spoken for a while: an instance that started after another's
# last word is its replacement, so tsb must not look like tsa's
sleep 2
kill -STOP "$(cat "$D/pids/tsa.pid")"
t0=$(date +%s%N)
wait_sql "SELECT state FROM alerts WHERE alertname = 'ServiceInstanceSilent'
          AND labels = 'team=platform,service=testsvc,instance=tsa'" firing 100
st_=$?
ok "tsa hung: ServiceInstanceSilent fires in $(( ($(date +%s%N) - t0) / 1000000 )) ms (3 x 500 ms + 2 s of silence)" $st_
row=$(sql "SELECT severity || '|' || dispatch || '|' || cause || '|' || site || '|' || node FROM alerts
           WHERE alertname = 'ServiceInstanceSilent'")
[ "$row" = 'page|platform_oncall|service_silent|_|' ]
st_=$?
ok "... a page for our own on-call, cause service_silent ($row; $(sql "SELECT evidence FROM alerts WHERE alertname = 'ServiceInstanceSilent'"))" $st_
[ -z "$(alert tsb)" ]
ok "... and no alert for tsb, which still speaks" $?
kill -CONT "$(cat "$D/pids/tsa.pid")"
wait_sql "SELECT state FROM alerts WHERE alertname = 'ServiceInstanceSilent'
          AND labels = 'team=platform,service=testsvc,instance=tsa'" resolved 100
ok "tsa speaks again: the alert is resolved" $?

# ---- 2. a clean stop -----------------------------------------------------------------------
kill -TERM "$(cat "$D/pids/tsb.pid")"
wait_sql "SELECT stopping FROM alert_presence WHERE instance = 'tsb'" t 50
ok "tsb stopped cleanly and said so" $?
sleep 5                                      # well past 3 x 500 ms + 2 s
[ -z "$(alert tsb)" ]
ok "... no alert for it 5 s later" $?

# ---- 3. killed, then replaced ---------------------------------------------------------------------
kill -9 "$(cat "$D/pids/tsa.pid")"
wait_sql "SELECT state FROM alerts WHERE alertname = 'ServiceInstanceSilent'
          AND labels = 'team=platform,service=testsvc,instance=tsa'" firing 100
ok "tsa killed: the alert fires again" $?
svc tsc
wait_sql "SELECT state FROM alerts WHERE alertname = 'ServiceInstanceSilent'
          AND labels = 'team=platform,service=testsvc,instance=tsa'" resolved 100
ok "a new instance tsc starts: tsa's alert resolves" $?
sql "SELECT evidence FROM alerts WHERE labels = 'team=platform,service=testsvc,instance=tsa'" |
    grep -q 'replaced by instance tsc'
st_=$?
ok "... replaced by instance tsc ($(sql "SELECT evidence FROM alerts WHERE labels = 'team=platform,service=testsvc,instance=tsa'"))" $st_
[ "$(sql "SELECT count(*) FROM alert_presence WHERE instance = 'tsa'")" = 0 ]
ok "... and tsa is forgotten" $?
[ "$(sql "SELECT count(*) FROM alert_events WHERE alertname = 'ServiceInstanceSilent'")" = 4 ]
st_=$?
ok "told 4 times in all: 2 firings, 2 resolves ($(sql "SELECT string_agg(status, ',' ORDER BY updated_ms) FROM alert_events WHERE alertname = 'ServiceInstanceSilent'"))" $st_
tap_end
