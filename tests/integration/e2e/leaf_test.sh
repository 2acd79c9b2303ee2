#!/usr/bin/env bash
# leaf_test.sh -- three sites behind real NATS leaf nodes (run under
# tests/harness/with-stack.sh, whose Redis and PostgreSQL it uses): a hub
# of three clustered nats-servers with JetStream and one leaf nats-server
# per site, all from deploy/nats/hub.conf and leaf.conf on loopback ports;
# the control plane (registry, scheduler, recovery) on the hub, one
# gridpool-agent per site on its site's leaf, each leaf linked to another
# hub server.  Authorization on everywhere, as deployed: the identities of
# deploy/nats-auth (every service its own, gpctl the operator's, each agent
# its node's, each leaf its site's with its certificate, over TLS the
# hubs verify), each leaf admitting only its site's nodes; the configs are
# the shipped files themselves (linked into a folder per server, beside
# the authorization file they include).  leaf_auth_test.sh checks the
# refusals; this one that everything the control plane does across leaf
# links passes them.
#
#   1. the agents register, beat and run jobs through their leaf (attempt
#      events reach the hub's stream ATTEMPTS across the link), no server
#      logs a permissions violation;
#   2. cutting one site's uplink (its leaf server killed): the hub sees the
#      leaf link drop (/leafz), the node is lost, one site event, its job
#      runs at another site once the fence opens;
#   3. the leaf back: the agent reconnects by itself, its heartbeats resume
#      without a registration, and the site returns with cause uplink;
#   4. another site's node dies with its leaf link up (recovery reads the
#      hubs' /leafz): one site event, cause power, and power on return.
# test-tags: pass=san (tests/run.sh)
set -u
B=$GP_BUILD
D=$GP_STACK_DIR
PY=/usr/bin/python3
TENANT=op
NATS_SERVER=${NATS_SERVER:-$(command -v nats-server || echo /usr/sbin/nats-server)}
# shellcheck source=tests/lib/lib.sh
. "$(dirname "$0")/../../lib/lib.sh"
CONF=$(cd "$(dirname "$0")/../../../deploy/nats" && pwd)
NATS_AUTH=$(cd "$(dirname "$0")/../../../deploy" && pwd)/nats-auth

read -r -a P < <($PY -c "
import socket
ss = [socket.socket() for _ in range(18)]
for s in ss: s.bind(('127.0.0.1', 0))
print(' '.join(str(s.getsockname()[1]) for s in ss))")
# per hub i (0..2): client P[i], cluster P[3+i], leaf P[6+i], http P[9+i]; leaf j: P[12+j]
hubs="nats://127.0.0.1:${P[0]},nats://127.0.0.1:${P[1]},nats://127.0.0.1:${P[2]}"
sites=(la lb lc)

# The network's identities, CA and certificates; the operator's for gpctl
A=$tmp/auth
{ "$NATS_AUTH" init "$A" && "$NATS_AUTH" hub "$A" &&
    for s in "${sites[@]}"; do "$NATS_AUTH" site "$A" "$s" && "$NATS_AUTH" node "$A" "$s" "$s-n1"; done
} >"$tmp/nats-auth.out" 2>&1 || { echo "not ok - deploy/nats-auth: $(cat "$tmp/nats-auth.out")"; exit 1; }
envv() { sed -n "s/^$2=//p" "$A/$1"; }        # FILE KEY: a value of one of its env files
G="env GP_NATS_USER=admin GP_NATS_PASSWORD=$(envv admin.env GP_NATS_PASSWORD) $B/bin/gpctl --timeout 10000 --nats-url $hubs"

on_fail() {
    echo "# recovery log:"; grep -vE 'level=debug' "$D/recovery.log" | tail -n 12 | sed 's/^/#   /'
    echo "# scheduler log:"; grep -E 'replace|fence|lease_kill|warn' "$D/sched.log" | tail -n 8 | sed 's/^/#   /'
    echo "# recovery_nodes: $(sql "SELECT string_agg(node || ':' || state || ':' || tries || ':' || next_ms, ' ') FROM recovery_nodes")"
    echo "# agent ${cs:-lb}:"; tail -n 5 "$D/agent-${cs:-lb}.log" 2>/dev/null | sed 's/^/#   /'
}
tap_on_fail=on_fail

hub() {       # i: hub.conf in its folder, auth/ beside it (its include)
    local i=$1 a=$(( ($1 + 1) % 3 )) b=$(( ($1 + 2) % 3 ))
    mkdir -p "$tmp/hub-$i"
    ln -sfn "$CONF/hub.conf" "$tmp/hub-$i/hub.conf"
    ln -sfn "$A" "$tmp/hub-$i/auth"
    HUB_LEAF_TLS_CA=$A/tls/ca.crt HUB_LEAF_TLS_CERT=$A/tls/hub.crt HUB_LEAF_TLS_KEY=$A/tls/hub.key \
    HUB_NAME=hub-$i HUB_HOST=127.0.0.1 HUB_PORT=${P[$i]} HUB_CLUSTER_PORT=${P[$((3 + i))]} \
    HUB_LEAF_PORT=${P[$((6 + i))]} HUB_HTTP_PORT=${P[$((9 + i))]} HUB_STORE=$tmp/js$i \
    HUB_ROUTES="nats-route://127.0.0.1:${P[$((3 + a))]}, nats-route://127.0.0.1:${P[$((3 + b))]}" \
        spawn "hub-$i" "$NATS_SERVER" -c "$tmp/hub-$i/hub.conf"
}
leaf() {      # j: site j's leaf, linked to hub j as the site, its nodes' authorization beside it
    local j=$1 s=${sites[$1]}
    mkdir -p "$tmp/leaf-$s"
    ln -sfn "$CONF/leaf.conf" "$tmp/leaf-$s/leaf.conf"
    ln -sfn "$A/site-$s/auth.conf" "$tmp/leaf-$s/leaf-auth.conf"
    SITE=$s LEAF_HOST=127.0.0.1 LEAF_PORT=${P[$((12 + j))]} \
    HUB_LEAF_URL="nats-leaf://site-$s:$(envv "site-$s/leaf.env" SITE_PASSWORD)@127.0.0.1:${P[$((6 + j))]}" \
    LEAF_TLS_CA=$A/site-$s/ca.crt LEAF_TLS_CERT=$A/site-$s/site.crt LEAF_TLS_KEY=$A/site-$s/site.key \
        spawn "leaf-$s" "$NATS_SERVER" -c "$tmp/leaf-$s/leaf.conf"
}
leafs_on_hubs() {   # leaf links the hub servers hold
    local n=0 i c
    for i in 0 1 2; do
        c=$(curl -s "http://127.0.0.1:${P[$((9 + i))]}/leafz" | $PY -c "import json,sys; print(json.load(sys.stdin)['leafnodes'])" 2>/dev/null)
        n=$((n + ${c:-0}))
    done
    echo $n
}

for i in 0 1 2; do hub "$i"; done
for _ in $(seq 1 100); do grep -q 'JetStream cluster new metadata leader\|Self is new JetStream cluster metadata leader' "$D"/hub-*.log && break; sleep 0.1; done
routes_up() {      # every hub server routed to the two others (interest crosses them)
    local i c
    for i in 0 1 2; do
        c=$(curl -s "http://127.0.0.1:${P[$((9 + i))]}/routez" | $PY -c "import json,sys; print(json.load(sys.stdin)['num_routes'])" 2>/dev/null)
        [ "${c:-0}" -ge 2 ] || return 1
    done
}
for _ in $(seq 1 100); do routes_up && break; sleep 0.1; done
for j in 0 1 2; do leaf "$j"; done
for _ in $(seq 1 100); do [ "$(leafs_on_hubs)" = 3 ] && break; sleep 0.1; done
[ "$(leafs_on_hubs)" = 3 ]
ok "a 3-server hub cluster with JetStream; three site leaf nodes linked to it" $?

svc() {       # name, program, args...: as its service identity
    local name=$1 prog=$2 id
    id=service-${2#gridpool-}
    shift 2
    spawn "$name" "$B/bin/$prog" --config "$D/gp.env" --nats-url "$hubs" --http-port 0 \
        --nats-user "$id" --nats-password "$(envv "$id.env" GP_NATS_PASSWORD)" "$@"
}
svc registry gridpool-registry --heartbeat-ms 500 --lease-ms 6000 --sweep-ms 200
# through every hub server: the registry's interest has crossed the routes
for _ in $(seq 1 100); do
    $G health registry >/dev/null 2>&1 && $G health registry >/dev/null 2>&1 &&
        $G health registry >/dev/null 2>&1 && break
    sleep 0.1
done
svc sched gridpool-scheduler --heartbeat-ms 500 --lease-ms 6000 --fence-margin-ms 500 \
    --place-ms 200 --dispatch-timeout-ms 3000 --checkpoint-root "$tmp/ckpt"
svc recovery gridpool-recovery --replace-ms 100 --sites-ms 1000 --leafz-ms 500 \
    --leaf-dead-ms 3000 --leafz-urls "http://127.0.0.1:${P[9]},http://127.0.0.1:${P[10]},http://127.0.0.1:${P[11]}"
# each tried up to 5 times (a cluster just formed may answer "no responders"
# on one server for a moment); one that exists already was made by a try
# whose answer was lost
create() {
    local k out
    for k in 1 2 3 4 5; do
        out=$($G create "$@" 2>&1) && return 0
        echo "# try $k: gpctl create $*: $out" >>"$tmp/create.out"
        echo "$out" | grep -qi 'exists' && return 0
        sleep 0.5
    done
    return 1
}
: >"$tmp/create.out"
create tenant op --kind operator &&
    create site la --tenant op --region r1 --lat 52.5 --lon 13.4 &&
    create site lb --tenant op --region r1 --lat 48.1 --lon 11.6 &&
    create site lc --tenant op --region r1 --lat 50.1 --lon 8.7 &&
    create pool p-all --tenant op --scope global
rc=$?
ok "tenant, three sites and a pool created through the hub" $rc
cat "$tmp/create.out"
agent() {     # j [args...]: site j's agent on its leaf, as its node
    local j=$1 s=${sites[$1]}
    shift
    spawn "agent-$s" "$B/bin/gridpool-agent" --config "$D/gp.env" \
        --nats-url "nats://127.0.0.1:${P[$((12 + j))]}" --site "$s" --node "$s-n1" \
        --nats-user "node-$s-$s-n1" --nats-password "$(envv "node-$s-$s-n1.env" GP_NATS_PASSWORD)" \
        --gpu-backend sim --sim-gpus 4 --sim-model L4 --http-port 0 "$@"
}
for j in 0 1 2; do agent "$j"; done
for _ in $(seq 1 150); do
    [ "$($G get nodes -o json 2>/dev/null | grep -o '"state":"healthy"' | wc -l)" -ge 3 ] && break
    sleep 0.1
done
[ "$($G get nodes -o json 2>/dev/null | grep -o '"state":"healthy"' | wc -l)" = 3 ]
ok "the three agents registered and beat through their leaf nodes" $?
for _ in $(seq 1 100); do grep -q feed_ready "$D/sched.log" && break; sleep 0.1; done

jobs=()
for i in 1 2 3; do jobs+=("$(submit --command 'sim:run=600s ckpt=1s' --gpus 2)"); done
wait_sql "SELECT count(*) FROM attempts WHERE state = 'running'" 3 300
ok "three jobs run (their started events crossed the leaf links into ATTEMPTS)" $?
# the servers' logs exist and say they started, so "no violation" means something
v=$(grep -l 'Server is ready' "$D"/hub-*.log "$D"/leaf-*.log | wc -l)
viol=$(cat "$D"/hub-*.log "$D"/leaf-*.log | grep -i 'violation' | head -n 3)
[ "$v" = 6 ] && [ -z "$viol" ]
ok "no permissions violation on the hubs or the leaves for the control plane's traffic ($v logs${viol:+: $viol})" $?
cs=$(sql "SELECT site FROM attempts WHERE state = 'running' GROUP BY site ORDER BY count(*) DESC, site LIMIT 1")
for cj in 0 1 2; do [ "${sites[$cj]}" = "$cs" ] && break; done
jb=$(sql "SELECT job_id FROM attempts WHERE state = 'running' AND site = '$cs' LIMIT 1")
[ -n "$jb" ]
ok "site $cs runs one of them ($jb)" $?

# ---- 2. the site's uplink cut: its leaf server killed ------------------------------
kill -9 "$(cat "$D/pids/leaf-$cs.pid")"
for _ in $(seq 1 50); do [ "$(leafs_on_hubs)" = 2 ] && break; sleep 0.1; done
[ "$(leafs_on_hubs)" = 2 ]
ok "the hub sees $cs's leaf link drop (2 leaf links left)" $?
for _ in $(seq 1 150); do grep -q "event=site_event site=$cs .*kind=unreachable" "$D/recovery.log" && break; sleep 0.1; done
grep -q "event=site_event site=$cs .*kind=unreachable" "$D/recovery.log"
st_=$?; ok "$cs-n1 lost: one site event for $cs ($(grep -o "event=site_event site=$cs [^\"]*" "$D/recovery.log" | head -n 1 | grep -o 'cause=[a-z_]*'))" $st_
grep "event=site_event site=$cs .*kind=unreachable" "$D/recovery.log" | grep 'cause=power_or_uplink' |
    grep -q 'leaf link dropped'
ok "... cause power or uplink, the evidence says its leaf link dropped (recovery read /leafz)" $?
moved=
for _ in $(seq 1 150); do
    moved=$(sql "SELECT site FROM attempts WHERE job_id = '$jb' AND state = 'running' AND site <> '$cs'")
    [ -n "$moved" ] && break
    sleep 0.2
done
[ -n "$moved" ]
ok "its job runs at $moved once the fence opened" $?

# ---- 3. the leaf back -------------------------------------------------------------
sleep 2
leaf "$cj"
for _ in $(seq 1 100); do [ "$(leafs_on_hubs)" = 3 ] && break; sleep 0.1; done
for _ in $(seq 1 200); do grep -q "event=site_event site=$cs .*kind=returned" "$D/recovery.log" && break; sleep 0.1; done
grep "event=site_event site=$cs .*kind=returned" "$D/recovery.log" | grep -q 'cause=uplink'
ok "leaf back: the agent reconnected by itself, $cs returned with cause uplink" $?
grep "event=site_event site=$cs" "$D/recovery.log" | sed 's/^.*event=site_event/# site_event/'
[ "$(grep -c 'event=agent_registered' "$D/agent-$cs.log")" = 1 ]
ok "... without registering again (one registration in its log)" $?

# ---- 4. a site's node dies, its leaf link stays up: the nodes' power, not the network
ps=${sites[$(( (cj + 1) % 3 ))]}
sleep 1
kill -9 "$(cat "$D/pids/agent-$ps.pid")"
for _ in $(seq 1 200); do grep -q "event=site_event site=$ps .*kind=unreachable" "$D/recovery.log" && break; sleep 0.1; done
grep "event=site_event site=$ps .*kind=unreachable" "$D/recovery.log" | grep 'cause=power ' |
    grep -q 'leaf link is still up'
ok "agent of $ps killed, its leaf up: one site event, cause power (the leaf link stayed up)" $?
grep "event=site_event site=$ps .*kind=unreachable" "$D/recovery.log" | sed 's/^.*event=site_event/# site_event/'
agent "$(( (cj + 1) % 3 ))" --boot-id "rebooted-$ps"
for _ in $(seq 1 200); do grep -q "event=site_event site=$ps .*kind=returned" "$D/recovery.log" && break; sleep 0.1; done
grep "event=site_event site=$ps .*kind=returned" "$D/recovery.log" | grep -q 'cause=power '
ok "... the node back (registered anew): returned, cause power" $?
[ "$(grep -c "event=site_event site=$ps .*kind=unreachable" "$D/recovery.log")" = 1 ]
ok "... one unreachable event for it, no more" $?

bash "$GP_HARNESS/invariants.sh" >"$tmp/inv.out" 2>&1
st=$?
tail -n 1 "$tmp/inv.out" | sed 's/^/# /'
ok "invariants: no GPU booked twice, never two attempts of a job at once" $st

tap_end
