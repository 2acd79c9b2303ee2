#!/usr/bin/env bash
# updown_test.sh -- `make up`, the demo (a small fleet) and `make down`
# through the same scripts the Makefile runs, in a private run folder:
# every service answers health, gpctl sees the fleet, and after down no
# process of the stack is left and its ports are closed.
# test-tags: pass=normal (tests/run.sh)
set -u
B=$GP_BUILD
top=$(cd "$(dirname "$0")/../../.." && pwd)
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
# 20 simulated sites, and demo-local where the container demo could run
sites=20
grep -q 'containers ready' "$GP_RUN_DIR/demo.out" && sites=21
check "the demo shows healthy services and the fleet ($sites sites)" sh -c "
    grep -q '^registry .* ok' '$GP_RUN_DIR/demo.out' &&
    grep -q '^sim: registered' '$GP_RUN_DIR/demo.out' &&
    grep -q '^Sites:  $sites\$' '$GP_RUN_DIR/demo.out'"
# The seeded workload of a 20-site fleet may fill the real node before the
# container job comes (its GPUs are anyone's): then the job waits, and says
# so; container_test.sh checks a container job's output on its own node.
if ! grep -q 'containers ready' "$GP_RUN_DIR/demo.out" ||
    grep -q '| hello from a container: uid 0 in its own user namespace' "$GP_RUN_DIR/demo.out"; then
    ok "the container demo's job ran on the real node and its output came back"
elif grep -q 'job j-[0-9a-f]*: pending' "$GP_RUN_DIR/demo.out" &&
    grep -q 'Why It Waits: .* 1 reserved by other jobs' "$GP_RUN_DIR/demo.out"; then
    ok "the container demo's job was accepted and waits for the real node, which the seeded workload filled"
else
    nok "the container demo's job ran on the real node and its output came back"
    sed -n '/a real node beside/,/the fleet as one pool/p' "$GP_RUN_DIR/demo.out" | sed 's/^/#   /'
fi
if ! grep -q 'containers ready' "$GP_RUN_DIR/demo.out" ||
    grep -q '| curl http://[0-9.]*:[0-9]*/index.html: hello from instance j-[0-9a-f]*, attempt 1' "$GP_RUN_DIR/demo.out"; then
    ok "the demo's GPU instance answered on its endpoint"
elif grep -q 'instance j-[0-9a-f]*: not running yet' "$GP_RUN_DIR/demo.out" &&
    grep -q 'Why It Waits: ' "$GP_RUN_DIR/demo.out"; then
    ok "the demo's GPU instance was accepted and waits for the real node, which the seeded workload filled"
else
    nok "the demo's GPU instance answered on its endpoint"
    grep -A3 'instance j-' "$GP_RUN_DIR/demo.out" | sed 's/^/#   /'
fi
check "up again says it is already up" sh -c "'$top/deploy/up.sh' '$B' | grep -q 'already up'"

# ---- NATS authorization (deploy/nats-auth): on, no anonymous user, one
# identity per service, the operator's in gp.env, one per tenant.  Every
# refusal below is nats-server's own: its log names the user and subject.
R=$GP_RUN_DIR
G="$B/bin/gpctl --timeout 3000"
# the harness' own stack is in the environment; these checks are of up's
unset GP_NATS_URL GP_REDIS_HOST GP_REDIS_PORT GP_PG_CONNINFO
nlog=$R/nats.log
check "nats-server runs with an authorization block (users: $(grep -c 'user:' "$R/auth/auth.conf"))" \
    grep -q '^include "auth/auth.conf"' "$R/nats.conf"
env -u GP_ENV_FILE $G --nats-url "nats://127.0.0.1:$NATS_PORT" get sites >/dev/null 2>"$R/anon.err"
st_=$?
check "an anonymous client is refused (exit $st_, server: authentication error)" \
    sh -c "test $st_ -ne 0 && grep -q 'authentication error - User \"\"' '$nlog'"
GP_ENV_FILE=$R/gp.env $G health registry scheduler recovery metering billing alerting >"$R/health.out" 2>&1
st_=$?
check "each service runs under its own identity and answers health ($(grep -c ' ok$' "$R/health.out") ok)" \
    sh -c "test $st_ -eq 0 && test \$(grep -c ' ok\$' '$R/health.out') -eq 6"
svcs=$(grep -o 'user: "service-[a-z]*"' "$R/auth/auth.conf" | wc -l)
check "one identity per service ($svcs)" test "$svcs" -eq 6
tenants=$(ls "$R"/auth/tenant-*.env 2>/dev/null | sed 's/.*tenant-\(.*\)\.env/\1/')
check "the demo made one identity per tenant ($(echo $tenants | wc -w): $(echo $tenants))" \
    test "$(echo $tenants | wc -w)" -ge 3
first=$(echo $tenants | awk '{print $1}')
bad=""
for t in $tenants; do
    T="$G --env-file $R/auth/tenant-$t.env"
    $T get jobs --tenant "$t" -o json >"$R/jobs-$t.json" 2>"$R/jobs-$t.err" || bad="$bad $t:jobs"
    grep -v "\"tenant\":\"$t\"" "$R/jobs-$t.json" | grep -q '"tenant"' && bad="$bad $t:foreign-job"
    $T get balances --tenant "$t" >/dev/null 2>&1 || bad="$bad $t:balances"
    other=$first; [ "$other" = "$t" ] && other=$(echo $tenants | awk '{print $2}')
    $T get jobs --tenant "$other" >/dev/null 2>"$R/cross-$t.err" && bad="$bad $t:cross-ok"
    grep -q "^gpctl: DENIED: .*Publish to \"gp.api.$other.job.list\"" "$R/cross-$t.err" || bad="$bad $t:cross-msg"
    grep -q "Publish Violation - User \"tenant-$t\", Subject \"gp.api.$other.job.list\"" "$nlog" ||
        bad="$bad $t:cross-log"
done
check "every tenant reads its own jobs and balances, and its request as another tenant is refused by nats-server ($bad)" \
    test -n "$first" -a -z "$bad"
T="$G --env-file $R/auth/tenant-$first.env"
$T get sites >/dev/null 2>"$R/admin.err"
st_=$?
check "a tenant may not use gp.admin.* (exit $st_: $(head -c 150 "$R/admin.err"))" \
    sh -c "test $st_ -eq 1 && grep -q 'Publish Violation - User \"tenant-$first\", Subject \"gp.admin.site.list\"' '$nlog'"
$T watch jobs --tenant "$(echo $tenants | awk '{print $2}')" >/dev/null 2>"$R/watch.err"
st_=$?
check "nor watch another tenant's job events (exit $st_)" \
    sh -c "test $st_ -eq 1 && grep -q 'Subscription Violation - User \"tenant-$first\"' '$nlog'"
# A forged usage record or heartbeat under a tenant's identity (raw NATS):
# the server refuses both, so nothing reaches metering or billing.
/usr/bin/python3 - "$NATS_PORT" "$R/auth/tenant-$first.env" <<'PY' >"$R/forge.out" 2>&1
import socket, sys, time
env = dict(l.strip().split('=', 1) for l in open(sys.argv[2]) if '=' in l)
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
c.recv(4096)
c.sendall(('CONNECT {"user":"%s","pass":"%s","verbose":false}\r\n' % (env['GP_NATS_USER'], env['GP_NATS_PASSWORD'])).encode()
          + b"PUB gp.int.usage.s0001 2\r\nxx\r\nPUB gp.node.s0001.s0001-n01.hb 2\r\nxx\r\nPING\r\n")
buf, end = b"", time.time() + 5
while buf.count(b"Permissions Violation") < 2 and time.time() < end:
    buf += c.recv(4096)
print(buf.decode(errors="replace"))
PY
check "a tenant cannot publish usage records or heartbeats ($(grep -c 'Permissions Violation' "$R/forge.out") refusals)" \
    test "$(grep -c 'Permissions Violation' "$R/forge.out")" -eq 2
viol=$(grep -E 'Violation - User "(service-|sim|admin)' "$nlog" | head -3)
check "no violation by a service, the simulator or the operator ($viol)" test -z "$viol"
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
# a zombie has exited: it only waits for PID 1 to reap it, which on some
# machines takes a second or two
for p in $pids $pgpid; do
    kill -0 "$p" 2>/dev/null && [ "$(awk '{print $3}' "/proc/$p/stat" 2>/dev/null)" != Z ] &&
        left="$left $p"
done
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
