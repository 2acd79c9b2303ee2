#!/usr/bin/env bash
# nats_perms_test.sh -- NATS least privilege (issue 26, item 4): every
# service runs under its own identity with the permissions deploy/nats-auth
# derives from the contract, and those are enough and no more.
#
# The stack's nats-server is restarted with authorization on (stack.sh
# auth-nats: nats-auth's identities, bcrypt hashes); the six services, the
# simulator (3 sites) and gpctl each connect as their own identity.
#
#   1. the derived permissions suffice: every service answers health; a
#      tenant's job is placed on the simulated fleet, runs and succeeds;
#      the operator reads it through a durable consumer of its own
#      (watch jobs --durable) and makes one on ALERTS (watch alerts
#      --durable); nats-server logged no violation by a service, the
#      simulator or the operator;
#   2. each service identity is refused by nats-server what its contract
#      operations do not give it: publishing an operator's request
#      (gp.admin.node.delete), subscribing an agent's commands
#      (gp.node.<s>.<n>.cmd.run), deleting a stream ($JS.API.STREAM.DELETE.JOBS),
#      all of which the former '>' allowed (tests/lib/natsc.py: the
#      server's own -ERR, and its log naming the user);
#   3. Kubernetes' placeholder authorization (deploy/k8s/base/secrets.yaml)
#      admits no one: anonymous and its one user are refused.
# test-tags: pass=normal (tests/run.sh)
set -u
# shellcheck source=tests/lib/lib.sh
. "$(dirname "$0")/../../lib/lib.sh"
TOP=$(cd "$(dirname "$0")/../../.." && pwd)
B=$GP_BUILD
D=$GP_STACK_DIR
A=$D/auth
NC="/usr/bin/python3 $TOP/tests/lib/natsc.py"
SERVICES="registry scheduler recovery metering billing alerting"

GP_STACK_SERVICES=$SERVICES "$GP_HARNESS/stack.sh" auth-nats "$D" >"$tmp/auth.out" 2>&1
ok "nats-server runs with authorization on ($(grep -c 'user:' "$A/auth.conf") identities)" $?
. "$D/ports"
HUB=127.0.0.1:$NATS_PORT
envv() { sed -n "s/^$2=//p" "$A/$1.env"; }                   # IDENTITY KEY
# creds IDENTITY: its NATS user and password as env(1) arguments (spawn
# records env's pid, which is the program's: env execs it)
creds() { echo "GP_NATS_USER=$(envv "$1" GP_NATS_USER) GP_NATS_PASSWORD=$(envv "$1" GP_NATS_PASSWORD)"; }
G="$B/bin/gpctl --timeout 5000 --env-file $D/gp.env"         # the operator (gp.env: admin)

# shellcheck disable=SC2046
for s in $SERVICES; do
    spawn "$s" env $(creds "service-$s") "$B/bin/gridpool-$s" --config "$D/gp.env" --http-port 0
done
# shellcheck disable=SC2046
spawn sim env $(creds sim) "$B/bin/gridpool-sim" --config "$D/gp.env" --http-port 0 --sites 3 \
    --seed 7 --inventory-out "$tmp/inv.json"
for _ in $(seq 1 150); do
    grep -q '^sim: registered' "$D/sim.log" &&
        $G health $SERVICES >"$tmp/health.out" 2>&1 && break
    sleep 0.2
done
# shellcheck disable=SC2086
$G health $SERVICES >"$tmp/health.out" 2>&1
st_=$?
[ $st_ -eq 0 ] && [ "$(grep -c ' ok$' "$tmp/health.out")" -eq 6 ]
ok "each service runs under its own identity and answers health ($(grep -c ' ok$' "$tmp/health.out") ok)" $?

# ---- 1. enough: a tenant's job, end to end --------------------------------------------
$G create tenant acme --kind customer --parent op >/dev/null 2>"$tmp/tenant.err"
"$TOP/deploy/nats-auth" tenant "$A" acme >/dev/null && "$GP_HARNESS/stack.sh" reload-nats "$D"
sleep 0.5
T="$B/bin/gpctl --timeout 5000 --env-file $A/tenant-acme.env"
$T submit --tenant acme --command 'sim:run=1s exit=0' --gpus 1 -o json >"$tmp/job.json" 2>"$tmp/job.err"
job=$(/usr/bin/python3 -c "import json; print(json.load(open('$tmp/job.json'))['id'])" 2>/dev/null)
state=""
for _ in $(seq 1 100); do
    state=$($T get jobs "$job" --tenant acme -o json 2>/dev/null |
        /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["state"])' 2>/dev/null)
    [ "$state" = succeeded ] && break
    sleep 0.2
done
[ -n "$job" ] && [ "$state" = succeeded ]
ok "a tenant's job is placed on the simulated fleet, runs and succeeds ($job: $state$(head -c 200 "$tmp/job.err"))" $?

# watch_until FILE REGEX CMD...: runs CMD (output in FILE) until FILE
# matches REGEX (10 s at most), then stops it as Ctrl-C does
watch_until() {
    local f=$1 re=$2 pid
    shift 2
    "$@" >"$f" 2>"$f.err" &
    pid=$!
    for _ in $(seq 1 50); do grep -Eq "$re" "$f" "$f.err" && break; sleep 0.2; done
    kill -INT "$pid" 2>/dev/null
    wait "$pid"
}
watch_until "$tmp/ops.jsonl" "\"job_id\":\"$job\".*\"event\":\"succeeded\"" \
    $G watch jobs --durable ops --tenant acme -o json
n_ops=$(grep -c "\"job_id\":\"$job\"" "$tmp/ops.jsonl")
grep -q "\"job_id\":\"$job\".*\"event\":\"succeeded\"" "$tmp/ops.jsonl"
ok "the operator reads the job's events through its own durable consumer on JOBS ($n_ops events)" $?
watch_until "$tmp/alerts.out" 'Watching gp.alerts' $G watch alerts --durable ops
cp "$tmp/alerts.out.err" "$tmp/alerts.err"
curl -s "http://127.0.0.1:$NATS_MON_PORT/jsz?consumers=true" | /usr/bin/python3 -c '
import json, sys
for a in json.load(sys.stdin)["account_details"]:
    for s in a["stream_detail"]:
        for c in s.get("consumer_detail") or []:
            print("%s/%s" % (s["name"], c["name"]))' >"$tmp/consumers"
grep -qx 'ALERTS/ops' "$tmp/consumers" && grep -q 'Watching gp.alerts' "$tmp/alerts.err" &&
    ! grep -q DENIED "$tmp/alerts.err"
ok "the operator makes its durable consumer on ALERTS (watch alerts --durable)" $?
grep -qx 'JOBS/tenant-acme' "$tmp/consumers"
ok "the scheduler made the tenant's consumer tenant-acme on JOBS (with its own identity)" $?
viol=$(grep -E 'Violation - User "(service-|sim|admin)' "$D/nats.log" | head -3)
[ -z "$viol" ]
ok "no violation by a service, the simulator or the operator (${viol:0:300})" $?

# ---- 2. no more: each service refused outside its contract -----------------------------
bad=""
# one at a time (under a second each): six at once on a loaded machine
# left one probe without a single answer in its window (twice: metering,
# the scheduler), and its output now goes with the failure
for s in $SERVICES; do
    $NC "$HUB" --user "service-$s" --password "$(envv "service-$s" GP_NATS_PASSWORD)" \
        --sub 'gp.node.s0001.s0001-n01.cmd.run' --pub gp.admin.node.delete \
        --pub '$JS.API.STREAM.DELETE.JOBS' --delay 0.1 --for 1.0 >"$tmp/nc-$s.out" 2>&1
done
for s in $SERVICES; do
    [ "$(grep -c '^err Permissions Violation' "$tmp/nc-$s.out")" -eq 3 ] || bad="$bad $s:$(grep -c '^err' "$tmp/nc-$s.out")"
    for subj in 'Subscription Violation - User "service-'$s'", Subject "gp.node.s0001.s0001-n01.cmd.run"' \
        'Publish Violation - User "service-'$s'", Subject "gp.admin.node.delete"' \
        'Publish Violation - User "service-'$s'", Subject "$JS.API.STREAM.DELETE.JOBS"'; do
        grep -qF "$subj" "$D/nats.log" || bad="$bad $s:log"
    done
done
[ -z "$bad" ]
ok "nats-server refuses each service an operator's request, an agent's commands and a stream's deletion ($bad)" $?
[ -n "$bad" ] && for s in $SERVICES; do sed "s/^/#   $s: /" "$tmp/nc-$s.out"; done
st_=0
grep -q '^connected' "$tmp/nc-registry.out" || st_=1
ok "... to connections it admitted (the identities are valid)" $st_

# ---- 3. the Kubernetes placeholder admits no one ------------------------------------------
mkdir -p "$tmp/k8s"
/usr/bin/python3 - "$TOP/deploy/k8s/base/secrets.yaml" >"$tmp/k8s/auth.conf" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
block = text.split('auth.conf: |\n', 1)[1]
lines = []
for l in block.split('\n'):
    if l.strip() and not l.startswith('    '):
        break
    lines.append(l[4:])
print('\n'.join(lines))
PY
KP=$(free_port)
printf 'listen: 127.0.0.1:%s\ninclude "auth.conf"\n' "$KP" >"$tmp/k8s/nats.conf"
spawn k8s-nats "${NATS_SERVER:-$(command -v nats-server || echo /usr/sbin/nats-server)}" -c "$tmp/k8s/nats.conf"
wait_port "$KP" 10
$NC "127.0.0.1:$KP" >"$tmp/k8s/anon.out" 2>&1
st1=$?
$NC "127.0.0.1:$KP" --user locked --password locked >"$tmp/k8s/locked.out" 2>&1
st2=$?
[ $st1 -ne 0 ] && [ $st2 -ne 0 ] && grep -q '^refused Authorization Violation' "$tmp/k8s/anon.out" &&
    grep -q '^refused Authorization Violation' "$tmp/k8s/locked.out"
ok "the k8s placeholder authorization refuses anonymous and its own user ($(head -1 "$tmp/k8s/anon.out"))" $?

tap_end
