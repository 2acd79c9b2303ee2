#!/usr/bin/env bash
# auth_test.sh -- an agent's NATS identity covers only its own
# gp.node.<site>.<node>.> subjects (deploy/nats-agent-permissions.md):
# with that authorization the agent registers, heartbeats, answers
# health and gets its attempt events acknowledged by the stream ATTEMPTS; the same credentials used for another node are refused by
# nats-server itself.  Uses its own nats-server with authorization, and
# the harness' Redis and PostgreSQL.
# test-tags: pass=san (tests/run.sh)
set -u
B=$GP_BUILD
D=$GP_STACK_DIR
n=0
failed=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
nok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $*"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else nok "$what"; fi; }

port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$D/auth.conf" <<CONF
listen: 127.0.0.1:$port
jetstream { store_dir: "$D/auth-js" }
authorization {
  users = [
    { user: control, password: cpw }
    { user: node-s1-n1, password: npw,
      permissions: {
        publish:   { allow: ["gp.node.s1.n1.>"] }
        subscribe: { allow: ["gp.node.s1.n1.>"] }
        allow_responses: { max: 1, expires: "1m" }
      } }
  ]
}
CONF
nats-server -c "$D/auth.conf" -l "$D/auth-nats.log" -P "$D/pids/auth-nats.pid" </dev/null >/dev/null 2>&1 &
for _ in $(seq 1 50); do (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done

ctl="nats://control:cpw@127.0.0.1:$port"
G="$B/bin/gpctl --nats-url $ctl --timeout 10000"
"$B/bin/gridpool-registry" --config "$D/gp.env" --nats-url "$ctl" --heartbeat-ms 500 \
    --http-port 0 >"$D/registry.log" 2>&1 </dev/null &
echo $! >"$D/pids/registry.pid"
for _ in $(seq 1 100); do $G health >/dev/null 2>&1 && break; sleep 0.1; done
check "the registry answers health as the control user" sh -c "$G health >/dev/null"
$G create tenant op --kind operator >/dev/null && $G create site s1 --tenant op --region r1 >/dev/null
check "a tenant and a site are created" test $? -eq 0

agent() {   # node-id log
    "$B/bin/gridpool-agent" --site s1 --node "$1" --gpu-backend sim --sim-gpus 1 \
        --nats-url "nats://127.0.0.1:$port" --nats-user node-s1-n1 --nats-password npw \
        --http-port 0 >"$D/$2" 2>&1 </dev/null &
    echo $! >"$D/pids/agent-$1.pid"
}
agent n1 agent-n1.log
for _ in $(seq 1 100); do
    $G get nodes n1 -o json 2>/dev/null | grep -q '"state":"healthy"' && break
    sleep 0.1
done
check "the agent registers and heartbeats with a node-only identity" \
    sh -c "$G get nodes n1 -o json | grep -q '\"state\":\"healthy\"'"

# Attempt events: the agent sends each to the stream ATTEMPTS and waits
# for the stream's acknowledgement in its own reply inbox; the scheduler
# (control identity) takes them from the stream.
"$B/bin/gridpool-scheduler" --config "$D/gp.env" --nats-url "$ctl" --http-port 0 \
    >"$D/scheduler.log" 2>&1 </dev/null &
echo $! >"$D/pids/scheduler.pid"
for _ in $(seq 1 100); do grep -q 'event=js_stream_ready.*ATTEMPTS\|stream=ATTEMPTS' "$D/scheduler.log" 2>/dev/null && break; sleep 0.1; done
sleep 1
/usr/bin/python3 - "$port" <<'PY' >"$D/run.out" 2>&1
import socket, sys
# RunAttempt {job_id, attempt, command} as msgpack, by hand (fixmap, fixstr)
def s(x): b = x.encode(); return bytes([0xa0 | len(b)]) + b
body = bytes([0x83]) + s("job_id") + s("j-auth") + s("attempt") + b"\x01" + s("command") + s("sim:run=300ms")
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
c.recv(4096)
c.sendall(b'CONNECT {"user":"control","pass":"cpw","verbose":false,"pedantic":false}\r\n'
          b"SUB _INBOX.authtest 1\r\n" +
          b"PUB gp.node.s1.n1.cmd.run _INBOX.authtest %d\r\n" % len(body) + body + b"\r\nPING\r\n")
buf = b""
while b"MSG _INBOX.authtest" not in buf:
    buf += c.recv(4096)
print("acked")
PY
check "RunAttempt reached the agent" grep -q acked "$D/run.out"
events=0
for _ in $(seq 1 100); do
    events=$(grep -c 'event=attempt_event job=j-auth' "$D/scheduler.log")
    [ "$events" -ge 2 ] && break
    sleep 0.1
done
check "its started and exited events reached the scheduler through the stream ATTEMPTS ($events)" \
    test "$events" -ge 2
sleep 2
check "each was acknowledged at once: taken once, not sent again ($(grep -c 'event=attempt_event job=j-auth' "$D/scheduler.log"))" \
    test "$(grep -c 'event=attempt_event job=j-auth' "$D/scheduler.log")" -eq 2

# The server's log must be there and be the server's (it says it is ready)
# for "no violation in it" to mean anything.
check "no permission violation for the agent's own traffic (in the server's log)" \
    sh -c "grep -q 'Server is ready' '$D/auth-nats.log' && ! grep -i 'violation' '$D/auth-nats.log'"
check "the agent's /healthz says NATS is up (its health route is in its own subtree)" /usr/bin/python3 -c "
import re, sys, urllib.request
port = re.search(r'http_port=(\d+)', open('$D/agent-n1.log').read()).group(1)
body = urllib.request.urlopen('http://127.0.0.1:%s/healthz' % port, timeout=5).read().decode()
sys.exit('\"nats\":\"up\"' not in body)"

agent n2 agent-n2.log           # n1's credentials, pretending to be n2
sleep 2
check "the same credentials cannot register another node (nats-server refuses)" \
    grep -q 'Violation.*gp.node.s1.n2' "$D/auth-nats.log"
$G get nodes n2 >"$D/n2.out" 2>"$D/n2.err"
rc=$?
sed 's/^/#   /' "$D/n2.err"
check "and that node never appears (exit 1, NOTFOUND; got $rc)" \
    sh -c "test $rc -eq 1 && grep -q '^gpctl: NOTFOUND: ' '$D/n2.err'"
$G get nodes n1 >/dev/null 2>&1
check "while n1 is still found with the same command" test $? -eq 0
$B/bin/gpctl --nats-url "nats://control:wrong@127.0.0.1:$port" --timeout 1500 get sites \
    >"$D/wrong.out" 2>"$D/wrong.err"
rc=$?
sed 's/^/#   /' "$D/wrong.err"
check "a wrong password is refused (exit 3, cannot connect; got $rc)" \
    sh -c "test $rc -eq 3 && grep -q 'cannot connect to NATS at nats://control:\*\*\*\*@127' '$D/wrong.err'"
check "and gpctl's message does not show that password" sh -c "! grep -q 'control:wrong' '$D/wrong.err' && test -s '$D/wrong.err'"
check "and nats-server says why (authentication error for user control)" grep -q 'authentication error - User "control"' "$D/auth-nats.log"

echo "1..$n"
[ "$failed" -eq 0 ]
