#!/usr/bin/env bash
# updown_test.sh -- `make up`, the demo (a small fleet) and `make down`
# through the same scripts the Makefile runs, in a private run folder:
# every service answers health, gpctl sees the fleet, and after down no
# process of the stack is left and its ports are closed.
set -u
B=$GP_BUILD
top=$(cd "$(dirname "$0")/../.." && pwd)
export GP_RUN_DIR
GP_RUN_DIR=$(mktemp -d /tmp/gp-updown.XXXXXX)
n=0
failed=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
nok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $*"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else nok "$what"; fi; }
trap '"$top/deploy/down.sh" >/dev/null 2>&1; rm -rf "$GP_RUN_DIR"' EXIT

"$top/deploy/up.sh" "$B" >/dev/null; check "up starts the stack and the services" test -f "$GP_RUN_DIR/gp.env"
. "$GP_RUN_DIR/ports"
GP_DEMO_SITES=20 "$top/deploy/demo.sh" "$B" >"$GP_RUN_DIR/demo.out" 2>&1
check "the demo shows healthy services and the fleet" sh -c "
    grep -q '^registry .* ok' '$GP_RUN_DIR/demo.out' &&
    grep -q '^sim: registered' '$GP_RUN_DIR/demo.out' &&
    grep -q '^Sites:  20' '$GP_RUN_DIR/demo.out'"
check "up again says it is already up" sh -c "'$top/deploy/up.sh' '$B' | grep -q 'already up'"
# one file at a time: nats-server writes its pid file without a newline,
# so `cat` of all of them would glue two pids into one number
pids=""
for f in "$GP_RUN_DIR"/pids/*.pid "$GP_RUN_DIR"/nats.pid "$GP_RUN_DIR"/redis.pid; do
    pids="$pids $(cat "$f" 2>/dev/null)"
done
pgpid=$(head -1 "$GP_RUN_DIR/pg/data/postmaster.pid" 2>/dev/null)
# What is checked gone after down must be seen here first, or the checks
# below would pass on an empty list.
running=""
for p in $pids $pgpid; do kill -0 "$p" 2>/dev/null && running="$running $p"; done
check "before down: nats, redis, postgres and the services run (pids$running)" \
    test -n "$pgpid" -a "$(echo $running | wc -w)" -ge 5
named=$(pgrep -f -- "$GP_RUN_DIR" | wc -l)
check "before down: processes name the run folder ($named)" test "$named" -ge 1
open=""
for port in ${NATS_PORT:-} ${REDIS_PORT:-} ${PG_PORT:-}; do
    (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && open="$open $port"
done
check "before down: the three ports are open ($open)" test "$(echo $open | wc -w)" -eq 3
"$top/deploy/down.sh" >/dev/null; check "down stops everything" test ! -e "$GP_RUN_DIR/gp.env"
sleep 0.5
left=""
for p in $pids $pgpid; do kill -0 "$p" 2>/dev/null && left="$left $p"; done
check "no process of the stack is left ($left)" test -z "$left"
stray=$(pgrep -f -- "$GP_RUN_DIR" | tr '\n' ' ')
check "no process still names the run folder ($stray)" test -z "$stray"
open=""
for port in $NATS_PORT $REDIS_PORT $PG_PORT; do
    (exec 3<>/dev/tcp/127.0.0.1/"$port") 2>/dev/null && open="$open $port"
done
check "its ports are closed ($open)" test -z "$open"
echo "1..$n"
[ "$failed" -eq 0 ]
