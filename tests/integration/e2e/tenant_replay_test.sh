#!/usr/bin/env bash
# tenant_replay_test.sh -- a tenant replays its own job events, as the
# contract promises (issue 26, item 5), with authorization on.
#
# The stack's nats-server is restarted with authorization on (stack.sh
# auth-nats); the registry, the scheduler and the simulator (3 sites) run
# under their own identities; tenants acme and beta under theirs, acme's
# watcher is gpctl watch jobs --durable tenant-acme -o json, bound to the
# consumer the scheduler made for acme:
#
#   1. acme's watcher sees its first job's events, then is stopped (its
#      connection gone) for GAP seconds (GP_REPLAY_GAP_S, default 10, so the
#      test stays short; the issue's figure is 60: GP_REPLAY_GAP_S=60 runs
#      it so), while acme's second and third jobs (one
#      succeeds, one fails) and beta's job live their whole lifecycles;
#   2. started again with acme's credentials it prints exactly acme's events
#      it missed: its two runs together are the scheduler's record
#      (job_events of acme's jobs, in PostgreSQL), each event once, in
#      order, nothing of beta;
#   3. acme is refused beta's consumer, and making a consumer of its own
#      (any filter), by nats-server (gpctl: DENIED; the server's log names
#      acme and the JetStream API subject); beta replays its own job.
# test-tags: pass=normal (tests/run.sh)
set -u
# shellcheck source=tests/lib/lib.sh
. "$(dirname "$0")/../../lib/lib.sh"
TOP=$(cd "$(dirname "$0")/../../.." && pwd)
B=$GP_BUILD
D=$GP_STACK_DIR
A=$D/auth
GAP=${GP_REPLAY_GAP_S:-10}
NC="/usr/bin/python3 $TOP/tests/lib/natsc.py"

GP_STACK_SERVICES="registry scheduler" "$GP_HARNESS/stack.sh" auth-nats "$D" >"$tmp/auth.out" 2>&1
ok "nats-server runs with authorization on" $?
. "$D/ports"
envv() { sed -n "s/^$2=//p" "$A/$1.env"; }
creds() { echo "GP_NATS_USER=$(envv "$1" GP_NATS_USER) GP_NATS_PASSWORD=$(envv "$1" GP_NATS_PASSWORD)"; }
G="$B/bin/gpctl --timeout 5000 --env-file $D/gp.env"         # the operator
# shellcheck disable=SC2046
{
    spawn registry env $(creds service-registry) "$B/bin/gridpool-registry" --config "$D/gp.env" --http-port 0
    spawn scheduler env $(creds service-scheduler) "$B/bin/gridpool-scheduler" --config "$D/gp.env" \
        --http-port 0
    spawn sim env $(creds sim) "$B/bin/gridpool-sim" --config "$D/gp.env" --http-port 0 --sites 3 \
        --seed 7 --inventory-out "$tmp/inv.json"
}
for _ in $(seq 1 150); do
    grep -q '^sim: registered' "$D/sim.log" && $G health scheduler registry >/dev/null 2>&1 && break
    sleep 0.2
done
$G create tenant acme --kind customer --parent op >/dev/null 2>&1 &&
    $G create tenant beta --kind customer --parent op >/dev/null 2>&1 &&
    "$TOP/deploy/nats-auth" tenant "$A" acme beta >/dev/null && "$GP_HARNESS/stack.sh" reload-nats "$D"
ok "the fleet registered; tenants acme and beta exist, each with its own NATS identity" $?
sleep 0.5
TA="$B/bin/gpctl --timeout 5000 --env-file $A/tenant-acme.env"
TB="$B/bin/gpctl --timeout 5000 --env-file $A/tenant-beta.env"

submit_as() {     # GPCTL TENANT COMMAND: prints the job id
    $1 submit --tenant "$2" --command "$3" --gpus 1 --max-attempts 1 -o json 2>>"$tmp/submit.err" |
        /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])' 2>>"$tmp/submit.err"
}
state_of() {      # GPCTL TENANT JOB
    $1 get jobs "$3" --tenant "$2" -o json 2>/dev/null |
        /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["state"])' 2>/dev/null
}
wait_end() {      # GPCTL TENANT JOB...: until each is succeeded or failed (20 s)
    local g=$1 t=$2 j
    shift 2
    for j in "$@"; do
        for _ in $(seq 1 100); do
            case "$(state_of "$g" "$t" "$j")" in succeeded|failed) continue 2 ;; esac
            sleep 0.2
        done
        return 1
    done
}
# the events of TENANT's jobs as the scheduler recorded them: "<job> <seq> <event>"
record() {
    sql "SELECT e.job_id || ' ' || e.seq || ' ' || e.event FROM job_events e JOIN jobs j
         ON j.id = e.job_id WHERE j.tenant = '$1' ORDER BY e.job_id, e.seq"
}
# the events a watcher printed (-o json), in its order: "<job> <seq> <event>"
printed() {
    /usr/bin/python3 -c '
import json, sys
for l in open(sys.argv[1]):
    e = json.loads(l)
    print(e["job_id"], e["seq"], e["event"], e["tenant"])' "$1" 2>/dev/null
}
watcher_pid=""
watch_start() {   # GPCTL NAME OUT
    $1 watch jobs --durable "$2" -o json >"$3" 2>"$3.err" &
    watcher_pid=$!
}
watch_stop() {    # as Ctrl-C: gpctl acks what it printed, then exits 0
    kill -INT "$watcher_pid" 2>/dev/null
    wait "$watcher_pid"
}
wait_lines() {    # FILE N: until FILE has N lines (15 s)
    for _ in $(seq 1 75); do [ "$(wc -l <"$1")" -ge "$2" ] && return 0; sleep 0.2; done
    return 1
}

# ---- 1. watching, then disconnected over three jobs' lifecycles ------------------------
j1=$(submit_as "$TA" acme 'sim:run=1s exit=0')
wait_end "$TA" acme "$j1"
watch_start "$TA" tenant-acme "$tmp/run1.jsonl"
n1=$(record acme | wc -l)
wait_lines "$tmp/run1.jsonl" "$n1"
watch_stop
st_=$?
printed "$tmp/run1.jsonl" >"$tmp/run1.txt"
[ $st_ -eq 0 ] && [ -n "$j1" ] && [ "$n1" -ge 4 ] &&
    [ "$(cut -d' ' -f1-3 "$tmp/run1.txt")" = "$(record acme)" ]
ok "acme's watcher (its credentials, its consumer tenant-acme) printed its first job's $n1 events, then stopped (exit $st_)" $?

t0=$(date +%s)
j2=$(submit_as "$TA" acme 'sim:run=2s exit=0')
j3=$(submit_as "$TA" acme 'sim:run=1s exit=3')
jb=$(submit_as "$TB" beta 'sim:run=1s exit=0')
wait_end "$TA" acme "$j2" "$j3" && wait_end "$TB" beta "$jb"
st_=$?
s2=$(state_of "$TA" acme "$j2")
s3=$(state_of "$TA" acme "$j3")
left=$((GAP - ($(date +%s) - t0)))
[ "$left" -gt 0 ] && sleep "$left"
[ $st_ -eq 0 ] && [ "$s2" = succeeded ] && [ "$s3" = failed ]
ok "while it was away ($GAP s): acme's $j2 succeeded, $j3 failed, beta's $jb ended" $?

# ---- 2. back: exactly what it missed ------------------------------------------------------
record acme >"$tmp/record.txt"
n_all=$(wc -l <"$tmp/record.txt")
watch_start "$TA" tenant-acme "$tmp/run2.jsonl"
wait_lines "$tmp/run2.jsonl" $((n_all - n1))
sleep 1                                       # anything more would show up now
watch_stop
printed "$tmp/run2.jsonl" >"$tmp/run2.txt"
cat "$tmp/run1.txt" "$tmp/run2.txt" | cut -d' ' -f1-3 | sort -k1,1 -k2,2n >"$tmp/both.txt"
missed=$(grep -vxFf <(cut -d' ' -f1-3 "$tmp/run1.txt") "$tmp/record.txt" | wc -l)
[ "$(wc -l <"$tmp/run2.txt")" -eq "$missed" ] && [ "$missed" -ge 6 ] &&
    diff -q "$tmp/both.txt" "$tmp/record.txt" >/dev/null &&
    [ "$(cut -d' ' -f1-3 "$tmp/run2.txt" | sort -k1,1 -k2,2n)" = "$(grep -vxFf <(cut -d' ' -f1-3 "$tmp/run1.txt") "$tmp/record.txt")" ]
ok "back, it printed exactly the $missed events it missed: with the first run, the scheduler's record of acme's jobs, each once ($(wc -l <"$tmp/run2.txt") printed)" $?
/usr/bin/python3 - "$tmp/run2.txt" <<'PY'
import sys
last = {}
for l in open(sys.argv[1]):
    job, seq = l.split()[0], int(l.split()[1])
    if seq <= last.get(job, 0):
        sys.exit(1)
    last[job] = seq
PY
ok "... each job's events in order" $?
! grep -q " beta$" "$tmp/run2.txt" && ! grep -q "$jb" "$tmp/run1.txt" "$tmp/run2.txt" &&
    [ "$(cut -d' ' -f4 "$tmp/run2.txt" | sort -u)" = acme ]
ok "... and nothing of beta's" $?

# ---- 3. another tenant's, or its own choosing: refused ----------------------------------
$TA watch jobs --durable tenant-beta >"$tmp/cross.out" 2>"$tmp/cross.err" &
cross=$!
for _ in $(seq 1 50); do kill -0 "$cross" 2>/dev/null || break; sleep 0.2; done
kill -INT "$cross" 2>/dev/null
wait "$cross"
st_=$?
[ $st_ -eq 1 ] && grep -q '^gpctl: DENIED: .*Permissions Violation for Publish to "$JS.API.CONSUMER.INFO.JOBS.tenant-beta"' "$tmp/cross.err" &&
    grep -qF 'Publish Violation - User "tenant-acme", Subject "$JS.API.CONSUMER.INFO.JOBS.tenant-beta"' "$D/nats.log" &&
    [ ! -s "$tmp/cross.out" ]
ok "acme is refused beta's consumer by nats-server (exit $st_: $(grep -o 'Permissions Violation.*' "$tmp/cross.err" | head -1))" $?
$NC "127.0.0.1:$NATS_PORT" --user tenant-acme --password "$(envv tenant-acme GP_NATS_PASSWORD)" \
    --pub '$JS.API.CONSUMER.DURABLE.CREATE.JOBS.mine@gp.api.acme._reply.x' \
    --pub '$JS.API.CONSUMER.CREATE.JOBS@gp.api.acme._reply.y' --delay 0.1 --for 0.5 >"$tmp/create.out" 2>&1
[ "$(grep -c '^err Permissions Violation for Publish' "$tmp/create.out")" -eq 2 ] &&
    grep -qF 'Publish Violation - User "tenant-acme", Subject "$JS.API.CONSUMER.DURABLE.CREATE.JOBS.mine"' "$D/nats.log"
ok "acme may not make a consumer of its own (its filter would be its choice): refused" $?
watch_start "$TB" tenant-beta "$tmp/beta.jsonl"
nb=$(record beta | wc -l)
wait_lines "$tmp/beta.jsonl" "$nb"
watch_stop
[ "$nb" -ge 4 ] && [ "$(printed "$tmp/beta.jsonl" | cut -d' ' -f1-3)" = "$(record beta)" ]
ok "beta replays its own job's $nb events through tenant-beta" $?
viol=$(grep -E 'Violation - User "(service-|sim|admin)' "$D/nats.log" | head -3)
[ -z "$viol" ]
ok "no violation by the services, the simulator or the operator (${viol:0:300})" $?

tap_end
