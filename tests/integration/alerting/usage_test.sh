#!/usr/bin/env bash
# usage_test.sh -- gaps in metering, against real services (run
# under tests/harness/with-stack.sh): two gridpool-alerting instances read
# the stream USAGE (records published as metering does, by the test
# helper usage_pub, so that a number can be left out) with a 2 s grace for
# records that come out of order (the default is 10 minutes).
#
#   1. records 1..3 and 5..6 of s0001 (4 lost): one MeteringGap for
#      s0001, with how many and which are missing, for our own on-call;
#      none for s0002, whose 1..3 all came;
#   2. a record that comes late but within the grace (s0002's 5 before
#      its 4): no alert;
#   3. the lost record arrives after all: the alert resolves;
#   4. every record redelivered or published twice counts once.
# test-tags: pass=san (tests/run.sh)
set -u
B=$GP_BUILD
G="$B/bin/gpctl --timeout 10000"
D=$GP_STACK_DIR
# shellcheck source=tests/lib/lib.sh
. "$(dirname "$0")/../../lib/lib.sh"

on_fail() {
    echo "# alerts:"; sql "SELECT alertname, site, state, evidence FROM alerts" | sed 's/^/#   /'
    echo "# sites:"; sql "SELECT * FROM alert_usage_sites" | sed 's/^/#   /'
    echo "# ahead:"; sql "SELECT * FROM alert_usage_ahead" | sed 's/^/#   /'
    grep -hE 'level=(warn|error)' "$D"/alerting-*.log | head -n 10 | sed 's/^/#   /'
}
tap_on_fail=on_fail

pub() {       # site seq...
    "$B/test/bin/usage_pub" "$GP_NATS_URL" "$@"
}
gap() {       # site -> state of its MeteringGap alert
    sql "SELECT state FROM alerts WHERE alertname = 'MeteringGap' AND site = '$1'"
}
for i in a b; do
    spawn "alerting-$i" "$B/bin/gridpool-alerting" --config "$D/gp.env" --http-port 0 \
        --instance "alerting-$i" --usage-gap-ms 200 --usage-grace-ms 2000 --eval-ms 200
done
for _ in $(seq 1 100); do $G health alerting >/dev/null 2>&1 && break; sleep 0.1; done

# ---- 1. a record lost ---------------------------------------------------------------------
pub s0001 1 2 3 5 6 && pub s0002 1 2 3
st_=$?
wait_sql "SELECT upto || '/' || last || '/' || records FROM alert_usage_sites WHERE site = 's0001'" \
    3/6/5 100 &&
    wait_sql "SELECT upto || '/' || last || '/' || records FROM alert_usage_sites WHERE site = 's0002'" \
        3/3/3 100
ok "records 1-3, 5, 6 of s0001 and 1-3 of s0002 read from USAGE: s0001 complete up to 3, s0002 up to 3" \
    $(( st_ | $? ))
t0=$(date +%s%N)
wait_sql "SELECT state FROM alerts WHERE alertname = 'MeteringGap' AND site = 's0001'" firing 100
st_=$?
ok "record 4 of s0001 missing: MeteringGap fires in $(( ($(date +%s%N) - t0) / 1000000 )) ms (2 s grace)" $st_
row=$(sql "SELECT severity || '|' || dispatch || '|' || cause || '|' || labels || '|' || node
           FROM alerts WHERE alertname = 'MeteringGap'")
ev=$(sql "SELECT evidence FROM alerts WHERE alertname = 'MeteringGap'")
[ "$row" = 'ticket|platform_oncall|metering_gap|team=platform|' ] &&
    echo "$ev" | grep -q '^1 usage record(s) missing from the USAGE stream, the first number 4 (the highest seen 6'
st_=$?
ok "... a ticket for our own on-call, cause metering_gap ($row): $ev" $st_
[ -z "$(gap s0002)" ]
ok "... none for s0002, whose records all came" $?

# ---- 2. late within the grace ------------------------------------------------------------------
pub s0002 5
sleep 1
pub s0002 4
wait_sql "SELECT upto FROM alert_usage_sites WHERE site = 's0002'" 5 100
st_=$?
sleep 2.5                                   # past the grace
[ $st_ -eq 0 ] && [ -z "$(gap s0002)" ]
ok "s0002's record 5 came 1 s before its 4: no alert (the grace is 2 s)" $?

# ---- 3. the lost record arrives -----------------------------------------------------------------
pub s0001 4 7
wait_sql "SELECT state FROM alerts WHERE alertname = 'MeteringGap' AND site = 's0001'" resolved 100
st_=$?
ok "s0001's record 4 arrives after all: MeteringGap resolves" $st_
[ "$(sql "SELECT upto || '/' || (SELECT count(*) FROM alert_usage_ahead) FROM alert_usage_sites
          WHERE site = 's0001'")" = 7/0 ]
ok "... s0001 complete up to 7, nothing held above it" $?

# ---- 4. duplicates -----------------------------------------------------------------------------------
# the same ids again: the stream's duplicate window drops them; and the
# same numbers under new ids (a republish the window missed) count once
pub s0001 1 2 3 4 5 6 7
USAGE_PUB_JOB=j-again pub s0001 6 7
sleep 1
[ "$(sql "SELECT upto || '/' || records FROM alert_usage_sites WHERE site = 's0001'")" = 7/7 ]
ok "records published again count once (s0001: 7 numbers, 7 records)" $?
cnt=$(sql "SELECT count(*) FROM alerts WHERE alertname = 'MeteringGap'")
[ "$cnt" = 1 ]
ok "one MeteringGap alert in all, from two instances ($cnt)" $?
tap_end
