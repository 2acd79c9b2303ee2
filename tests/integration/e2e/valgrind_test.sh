#!/usr/bin/env bash
# valgrind_test.sh -- services start, serve and stop under valgrind
# (memcheck): each must exit 0 on SIGTERM, and its valgrind log must say
# "ERROR SUMMARY: 0 errors" (memory errors and definite or indirect leaks
# are errors here, --error-exitcode makes them an exit status too).
#
#   1. testsvc, driven by the chassis test in quick mode (requests of every
#      kind, bad input, a slow PostgreSQL query);
#   2. gridpool-registry and gridpool-agent (sim backend) together: the
#      agent registers, heartbeats, and runs one attempt (a cmd.run request
#      sent by a few lines of Python speaking NATS and msgpack) to its exit
#      event; then both get SIGTERM.
#
# Skipped in the sanitizer build (ASan and valgrind do not mix).  Prints TAP.
# test-tags: pass=normal (tests/run.sh)
set -u
case "$GP_BUILD" in
*/san*) echo "1..0 # SKIP valgrind does not run under sanitizers"; exit 0 ;;
esac
B=$GP_BUILD
D=$GP_STACK_DIR
V=$D/vg
mkdir -p "$V" "$D/pids"
n=0
failed=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
nok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $*"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else nok "$what"; fi; }
py() { /usr/bin/python3 "$@"; }
VG="valgrind --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect
    --show-leak-kinds=definite,indirect --child-silent-after-fork=yes"
G="$B/bin/gpctl --timeout 5000"

# A valgrind log is clean when it exists, is valgrind's (its summary line
# is there) and reports no error; prints the log's head otherwise.
vg_clean() {  # log
    if [ -f "$1" ] && grep -q 'ERROR SUMMARY: 0 errors from 0 contexts' "$1" &&
        ! grep -q 'definitely lost: [1-9]\|indirectly lost: [1-9]\|Invalid \(read\|write\|free\)' "$1"; then
        return 0
    fi
    echo "# $1:"; sed 's/^/#   /' "$1" 2>/dev/null | head -60
    return 1
}

# Waits up to $2 s for the pid $1 to exit; its status is in $st (empty:
# still running, then killed hard).
stop_wait() {   # pid, seconds
    local i
    st=
    kill -TERM "$1" 2>/dev/null
    for ((i = 0; i < $2 * 10; i++)); do
        kill -0 "$1" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$1" 2>/dev/null; then
        kill -KILL "$1" 2>/dev/null
        wait "$1" 2>/dev/null
        return 1
    fi
    wait "$1"
    st=$?
    [ "$st" -eq 0 ]
}

command -v valgrind >/dev/null
check "valgrind is installed" test $? -eq 0

# ---- 1. testsvc through the chassis test ------------------------------------------
GP_QUICK=1 GP_SVC_WRAP="$(echo $VG) --log-file=$V/testsvc.%p.log" \
    "$B/test/integration/shared/chassis_test" >"$D/chassis.tap" 2>"$D/chassis.err"
rc=$?
sed 's/^/#   /' "$D/chassis.tap" | grep -v '^#   ok ' | head -40
planned=$(sed -n 's/^1\.\.\([0-9]*\)$/\1/p' "$D/chassis.tap")
passed=$(grep -c '^ok ' "$D/chassis.tap")
check "chassis_test (quick) passes against testsvc under valgrind ($passed of ${planned:-?} ok, status $rc)" \
    test "$rc" -eq 0 -a -n "$planned" -a "$passed" = "${planned:-x}"
logs=("$V"/testsvc.*.log)
check "one valgrind log of testsvc (${#logs[@]})" test "${#logs[@]}" -eq 1 -a -f "${logs[0]}"
check "testsvc valgrind-clean: no memory error, no definite or indirect leak" vg_clean "${logs[0]}"

# ---- 2. registry and agent -----------------------------------------------------------
export GP_ENV_FILE=$D/gp.env
# shellcheck disable=SC2086
$VG --log-file="$V/registry.%p.log" "$B/bin/gridpool-registry" --config "$D/gp.env" \
    --heartbeat-ms 1000 --http-port 0 >"$D/registry.log" 2>&1 </dev/null &
reg=$!
echo "$reg" >"$D/pids/registry.pid"
for _ in $(seq 1 240); do $G health >/dev/null 2>&1 && break; sleep 0.25; done
check "the registry under valgrind answers health" sh -c "$G health >/dev/null"
$G create tenant op --kind operator >/dev/null &&
    $G create site s1 --tenant op --region r1 >/dev/null
check "a tenant and a site are created through it" test $? -eq 0

# shellcheck disable=SC2086
$VG --log-file="$V/agent.%p.log" "$B/bin/gridpool-agent" --config "$D/gp.env" --site s1 \
    --node n1 --gpu-backend sim --sim-gpus 1 --stop-grace-ms 1000 --host-commands=true --http-port 0 \
    >"$D/agent.log" 2>&1 </dev/null &
agent=$!
echo "$agent" >"$D/pids/agent.pid"
seen1=
for _ in $(seq 1 240); do
    seen1=$($G get nodes n1 -o json 2>/dev/null |
        py -c 'import json,sys; d=json.load(sys.stdin); print(d[0]["last_seen_ms"] if d and d[0]["state"] == "healthy" else "")' 2>/dev/null)
    [ -n "$seen1" ] && break
    sleep 0.25
done
check "the agent under valgrind registers: n1 is healthy" test -n "$seen1"
sleep 3
seen2=$($G get nodes n1 -o json 2>/dev/null | py -c 'import json,sys; print(json.load(sys.stdin)[0]["last_seen_ms"])' 2>/dev/null)
check "and heartbeats: last_seen moved on over 3 s (${seen1:-none} -> ${seen2:-none})" \
    py -c "import sys; sys.exit(not ('$seen1' and '$seen2' and int('$seen2') > int('$seen1')))"

# One attempt: cmd.run -> AttemptAck, then the attempt's "exited" event.
py - "$GP_NATS_URL" >"$D/attempt.out" 2>&1 <<'PY'
import socket, sys, time, msgpack
host, port = sys.argv[1].split('//')[-1].split(',')[0].rsplit('@', 1)[-1].split(':')
s = socket.create_connection((host, int(port)), timeout=60)
f = s.makefile('rb')
f.readline()                                             # INFO
run = msgpack.packb({'job_id': 'vg1', 'attempt': 1, 'command': 'sleep 0.2', 'gpus': [0]})
s.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\n'
          b'SUB gp.node.s1.n1.attempt 1\r\nSUB _INBOX.vg 2\r\nPING\r\n')
while f.readline().strip() != b'PONG':
    pass
s.sendall(b'PUB gp.node.s1.n1.cmd.run _INBOX.vg %d\r\n%s\r\n' % (len(run), run))
acked = exited = False
end = time.time() + 60
while time.time() < end and not (acked and exited):
    line = f.readline()
    if line.startswith(b'PING'):
        s.sendall(b'PONG\r\n')
    if not line.startswith(b'MSG '):
        continue
    parts = line.split()
    body = msgpack.unpackb(f.read(int(parts[-1]) + 2)[:-2], raw=False)
    print(parts[1].decode(), body)
    if len(parts) == 5 and parts[2] == b'1':   # acked as the stream ATTEMPTS does (a PubAck)
        ack = b'{"stream":"ATTEMPTS","seq":1}'
        s.sendall(b'PUB %s %d\r\n%s\r\n' % (parts[3], len(ack), ack))
    if parts[2] == b'2':
        acked = body.get('job_id') == 'vg1' and body.get('pid', 0) > 0
    elif body.get('job_id') == 'vg1' and body.get('event') == 'exited':
        exited = body.get('exit_code') == 0
sys.exit(0 if acked and exited else 1)
PY
rc=$?
sed 's/^/#   /' "$D/attempt.out" | head -10
check "the agent runs an attempt: acked with a pid, then an exited event with code 0" test "$rc" -eq 0

stop_wait "$agent" 60
check "the agent exits 0 on SIGTERM (status ${st:-still running after 60 s})" test "${st:-1}" -eq 0
stop_wait "$reg" 60
check "the registry exits 0 on SIGTERM (status ${st:-still running after 60 s})" test "${st:-1}" -eq 0
rm -f "$D/pids/agent.pid" "$D/pids/registry.pid"
check "registry valgrind-clean: no memory error, no definite or indirect leak" \
    vg_clean "$V/registry.$reg.log"
check "agent valgrind-clean: no memory error, no definite or indirect leak" \
    vg_clean "$V/agent.$agent.log"

echo "1..$n"
[ "$failed" -eq 0 ]
