# tests/lib/lib.sh -- the shell library of the tests and of the harness;
# sourced, never run.
#
# Sourced by a test (a *_test.sh run by tests/harness/with-stack.sh:
# GP_BUILD, GP_STACK_DIR, GP_PG_CONNINFO, GP_REDIS_PORT set):
#
#   ok DESC STATUS        one TAP result: "ok N - DESC" when STATUS is 0; a
#                         failure also calls the function named by
#                         $tap_on_fail, if set (to print what it saw); the
#                         first also prints the JetStream consumers' state
#                         (js_consumers), and with GP_KEEP=DIR copies
#                         $GP_STACK_DIR to DIR
#   tap_end               the plan "1..N"; returns non-zero if any failed
#   spawn NAME PROG ARGS  starts a process in the background, its output in
#                         $GP_STACK_DIR/NAME.log; stopped at exit (and by
#                         stack.sh stop, through $GP_STACK_DIR/pids/NAME.pid)
#   sql QUERY             PostgreSQL, unaligned tuples only (errors to
#                         $tmp/psql.err)
#   wait_sql QUERY WANT TRIES   polls every 0.2 s until QUERY gives WANT
#   submit ARGS           $G submit --tenant $TENANT -o json ARGS; prints the
#                         job id ($G: the gpctl command line)
#   run ARGS              runs $GPCTL ARGS: sets rc, writes $tmp/out, $tmp/err
#   expect DESC CODE RE ARGS    run ARGS; ok when it exits CODE and its
#                         stderr matches the regex RE (if not "")
#   json_check DESC EXPR  ok when the python expression EXPR on d (the last
#                         run's stdout, parsed as JSON) is true
#   gpctl_on_fail         prints the last run's exit, stdout and stderr
#                         (a gpctl test sets tap_on_fail=gpctl_on_fail)
#
# $tmp is a private folder removed at exit.  A test's own cleanup can be
# chained with `testlib_at_exit FUNCTION`.
#
# Capture a status before building a message with $(...): in
# `ok "x ($(cmd))" $?` the $? is cmd's, not the check's.
#
# Ports and processes, for tests and harness scripts alike:
#
#   free_port             a free loopback TCP port, below the ephemeral range
#   free_ports N          N distinct ones
#   wait_port PORT SECS   waits until something listens on PORT (1 if not)
#   stop_pidfile FILE     TERM the process of a pid file, up to 5 s, then KILL;
#                         returns once it is gone
#   wait_gone PID TENTHS  waits until PID exited (or is a zombie)
#
# A harness script (tests/harness/stack.sh, redis_cluster.sh) sets
# HARNESS_NAME, which prefixes its messages, before sourcing this: it gets
# the functions only, without the test's counters, $tmp and exit trap.

# Below the kernel's ephemeral range (ip_local_port_range, 32768.. here):
# a port the kernel handed out by bind(0) is also one it hands to the
# next outgoing connection of any test beside this one, which took a
# cluster server's port between its choice and its start (CI, stop 34).
free_port() {
    free_ports 1
}

free_ports() {      # N -> N distinct free ports, space separated
    /usr/bin/python3 - "$1" <<'PY'
import random, socket, sys
lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
want, held, out = int(sys.argv[1]), [], []
while len(out) < want:
    p = random.randint(min(20000, lo - 1000), lo - 1)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
    except OSError:
        s.close()
        continue
    held.append(s)
    out.append(str(p))
print(" ".join(out))
PY
}

wait_port() {   # port, seconds
    local i
    for ((i = 0; i < $2 * 20; i++)); do
        (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0
        sleep 0.05
    done
    echo "${HARNESS_NAME:-harness}: port $1 did not open" >&2
    return 1
}

# A process that exited but was not reaped yet (a zombie) has stopped: the
# servers the harness starts in the background are reparented to PID 1,
# which on some machines reaps them only a second or two later, and
# waiting for kill -0 to fail cost every stack ~3 s at its stop.
alive() {         # pid
    local st
    kill -0 "$1" 2>/dev/null || return 1
    st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
    [ -n "$st" ] && [ "$st" != Z ]
}

wait_gone() {       # pid tenths: until it exited (a zombie counts as gone)
    local i
    for ((i = 0; i < $2 * 5; i++)); do
        alive "$1" || return 0
        sleep 0.02
    done
    ! alive "$1"
}

stop_pidfile() {    # file: TERM, up to 5 s, then KILL; returns once it is gone
    local f=$1 pid
    [ -f "$f" ] || return 0
    pid=$(cat "$f" 2>/dev/null || true)
    if [ -n "$pid" ] && alive "$pid"; then
        kill -TERM "$pid" 2>/dev/null || true
        wait_gone "$pid" 50 || { kill -KILL "$pid" 2>/dev/null; wait_gone "$pid" 50; }
    fi
    rm -f "$f"
}


testlib_cleanup() {
    local f p
    for f in "${at_exit[@]}"; do "$f"; done
    for p in "${pids[@]}"; do
        kill "$p" 2>/dev/null && wait "$p" 2>/dev/null
    done
    rm -rf "$tmp"
}

testlib_at_exit() { at_exit+=("$1"); }

ok() {
    n=$((n + 1))
    if [ "$2" -eq 0 ]; then
        echo "ok $n - $1"
    else
        echo "not ok $n - $1"
        failed=$((failed + 1))
        if [ -n "${tap_on_fail:-}" ]; then "$tap_on_fail"; fi
        [ -z "${tap_told_js:-}" ] && { tap_told_js=1; js_consumers; }
        # GP_KEEP=DIR: the stack's folder (every process's log) copied
        # there at the first failure, for a post-mortem of a rare one
        if [ -n "${GP_KEEP:-}" ] && [ ! -e "$GP_KEEP" ] && [ -n "${GP_STACK_DIR:-}" ]; then
            cp -r "$GP_STACK_DIR" "$GP_KEEP" 2>/dev/null
        fi
    fi
}

# Every JetStream consumer's state, from nats-server's monitoring port (the
# stack's ports file): at a test's first failure, so a consumer that stopped
# delivering shows what it holds (pending, waiting pulls, acks pending).
js_consumers() {
    local port
    port=$(sed -n 's/^NATS_MON_PORT=//p' "${GP_STACK_DIR:-/nonexistent}/ports" 2>/dev/null)
    [ -n "$port" ] || return 0
    /usr/bin/python3 - "$port" <<'PY' 2>/dev/null
import json, sys, urllib.request
url = "http://127.0.0.1:%s/jsz?accounts=true&consumers=true" % sys.argv[1]
d = json.load(urllib.request.urlopen(url, timeout=3))
print("# JetStream consumers (stream/consumer: pending, ack pending, waiting pulls, delivered, ack floor):")
for acc in d.get("account_details") or []:
    for st in acc.get("stream_detail") or []:
        for c in st.get("consumer_detail") or []:
            print("#   %s/%s: %d, %d, %d, %d, %d" % (st["name"], c["name"], c.get("num_pending", 0),
                  c.get("num_ack_pending", 0), c.get("num_waiting", 0),
                  c.get("delivered", {}).get("stream_seq", 0), c.get("ack_floor", {}).get("stream_seq", 0)))
PY
}

tap_end() {
    echo "1..$n"
    [ "$failed" -eq 0 ]
}

spawn() {
    local name=$1
    shift
    mkdir -p "$GP_STACK_DIR/pids"
    "$@" >"$GP_STACK_DIR/$name.log" 2>&1 </dev/null &
    pids+=($!)
    echo $! >"$GP_STACK_DIR/pids/$name.pid"    # stack.sh stop kills it if we cannot
}

sql() {
    psql "$GP_PG_CONNINFO" -XAtq -c "$1" 2>>"$tmp/psql.err"
}

wait_sql() {
    local i
    for ((i = 0; i < $3; i++)); do
        [ "$(sql "$1")" = "$2" ] && return 0
        sleep 0.2
    done
    return 1
}

submit() {
    $G submit --tenant "$TENANT" -o json "$@" 2>>"$tmp/gpctl.err" |
        /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])'
}

run() {
    "$GPCTL" "$@" >"$tmp/out" 2>"$tmp/err"
    rc=$?
}

expect() {
    local what=$1 want=$2 re=$3 pass=1
    shift 3
    run "$@"
    if [ "$rc" -eq "$want" ] && { [ -z "$re" ] || grep -Eq "$re" "$tmp/err"; }; then
        pass=0
    fi
    ok "$what" $pass
}

json_check() {
    /usr/bin/python3 -c "import json,sys; d=json.load(open('$tmp/out')); sys.exit(0 if ($2) else 1)" \
        2>>"$tmp/err"
    ok "$1" $?
}

gpctl_on_fail() {
    echo "# exit ${rc:-?}; stdout: $(head -c 600 "$tmp/out" 2>/dev/null)"
    echo "# stderr: $(head -c 600 "$tmp/err" 2>/dev/null)"
}

if [ -z "${HARNESS_NAME:-}" ]; then     # a test: its TAP counters, $tmp, the exit trap
    n=0
    failed=0
    pids=()
    at_exit=()
    tmp=$(mktemp -d "/tmp/$(basename "$0" .sh).XXXXXX")
    trap testlib_cleanup EXIT
fi
