#!/usr/bin/env bash
# leaf_auth_test.sh -- a site's NATS leaf admits only its own nodes, and the
# hub's leaf port only the network's sites, each bounded to its own subjects
# (issue 25, item 5).  Real nats-servers from the shipped deploy/nats/hub.conf
# and leaf.conf (linked into a folder per server, beside the authorization
# file each includes), identities, CA and certificates from deploy/nats-auth;
# tests/lib/natsc.py speaks the protocol, so every refusal seen is the
# server's own.  Run under tests/harness/with-stack.sh (for $tmp and the
# harness' conventions; it uses none of the stack's engines).
#
#   1. nats-auth: keys 0600, certificates of the network's CA, a site's leaf
#      file lists its own nodes only;
#   2. on a leaf: no anonymous client, another site's node refused, a node
#      cannot publish another node's subjects; its own traffic crosses to the
#      hub, the control plane's wildcard subscriptions and its commands'
#      replies included;
#   3. on the hub: a leaf logged in as site la (with la's certificate) passes
#      only gp.node.la.> up and down, whatever its own clients do;
#   4. the hub's leaf port refuses a leaf with a certificate of another CA,
#      with none, or with a wrong password;
#   5. the leaf listens on LEAF_HOST only; a site without nodes admits no one.
# test-tags: heavy pass=normal (tests/run.sh)
set -u
NATS_SERVER=${NATS_SERVER:-$(command -v nats-server || echo /usr/sbin/nats-server)}
# shellcheck source=tests/lib/lib.sh
. "$(dirname "$0")/../../lib/lib.sh"
TOP=$(cd "$(dirname "$0")/../../.." && pwd)
CONF=$TOP/deploy/nats
NC="/usr/bin/python3 $TOP/tests/lib/natsc.py"
D=$GP_STACK_DIR

read -r -a P < <(/usr/bin/python3 -c "
import socket
ss = [socket.socket() for _ in range(9)]
for s in ss: s.bind(('127.0.0.1', 0))
print(' '.join(str(s.getsockname()[1]) for s in ss))")
# hub: client P0, cluster P1, leaf P2, http P3; leaves la P4 (on 127.0.0.2), lb P5,
# lc P6, the rogue la P7, the refused ones P8
HUB=127.0.0.1:${P[0]}

# ---- 1. identities, CA and certificates -------------------------------------------------
A=$tmp/auth
O=$tmp/other                 # another network: its CA is not the hub's
{ "$TOP/deploy/nats-auth" init "$A" && "$TOP/deploy/nats-auth" hub "$A" --dns hub.example.net &&
    "$TOP/deploy/nats-auth" site "$A" la && "$TOP/deploy/nats-auth" site "$A" lb &&
    "$TOP/deploy/nats-auth" site "$A" lc &&
    "$TOP/deploy/nats-auth" node "$A" la la-n1 && "$TOP/deploy/nats-auth" node "$A" la la-n2 &&
    "$TOP/deploy/nats-auth" node "$A" lb lb-n1 &&
    "$TOP/deploy/nats-auth" hub "$O" && "$TOP/deploy/nats-auth" site "$O" la
} >"$tmp/nats-auth.out" 2>&1
ok "deploy/nats-auth: identities, the CA, the hub's and three sites' certificates" $?
envv() { sed -n "s/^$2=//p" "$1"; }        # FILE KEY
pw() { envv "$A/$1.env" GP_NATS_PASSWORD; }
modes=$(stat -c '%a %n' "$A"/tls/*.key "$A"/site-*/site.key "$A"/site-*/auth.conf "$A"/site-*/leaf.env |
    awk '$1 != "600"')
[ -z "$modes" ] && [ "$(stat -c %a "$A/tls/ca.crt")" = 644 ]
ok "every key, leaf authorization and leaf.env is 0600${modes:+ (not: $modes)}" $?
openssl verify -CAfile "$A/tls/ca.crt" "$A/tls/hub.crt" "$A/site-la/site.crt" >/dev/null 2>&1 &&
    ! openssl verify -CAfile "$A/tls/ca.crt" "$O/site-la/site.crt" >/dev/null 2>&1 &&
    openssl x509 -in "$A/tls/hub.crt" -noout -ext subjectAltName | grep -q 'IP Address:127.0.0.1' &&
    openssl x509 -in "$A/tls/hub.crt" -noout -ext subjectAltName | grep -q 'DNS:hub.example.net' &&
    openssl x509 -in "$A/site-la/site.crt" -noout -subject | grep -q 'CN *= *site-la'
ok "the hub's and la's certificates are the CA's (another network's are not); the hub's names 127.0.0.1 and hub.example.net" $?
grep -q '"node-la-la-n1"' "$A/site-la/auth.conf" && grep -q '"node-la-la-n2"' "$A/site-la/auth.conf" &&
    ! grep -q 'node-lb\|site-\|service-\|admin' "$A/site-la/auth.conf" &&
    grep -q '"locked"' "$A/site-lc/auth.conf" && ! grep -q 'node-' "$A/site-lc/auth.conf"
ok "la's leaf authorization lists la's two nodes and nothing else; lc (no node yet) a locked user only" $?

# ---- the hub and the leaves -------------------------------------------------------------
mkdir -p "$tmp/hub/auth"
ln -s "$CONF/hub.conf" "$tmp/hub/hub.conf"
# the hub's authorization: nats-auth's, plus a test-only spy that may
# subscribe to everything (none of nats-auth's identities may: each has
# the subjects of its own operations only)
SPY=$(openssl rand -hex 12)
sed "s/^  users = \[\$/&\n    { user: \"spy\", password: \"$SPY\", permissions: { publish: { deny: [\">\"] }, subscribe: { allow: [\">\"] } } }/" \
    "$A/auth.conf" >"$tmp/hub/auth/auth.conf"
HUB_NAME=hub-0 HUB_HOST=127.0.0.1 HUB_PORT=${P[0]} HUB_CLUSTER_PORT=${P[1]} HUB_LEAF_PORT=${P[2]} \
HUB_HTTP_PORT=${P[3]} HUB_STORE=$tmp/js HUB_ROUTES="nats-route://127.0.0.1:${P[1]}" \
HUB_LEAF_TLS_CA=$A/tls/ca.crt HUB_LEAF_TLS_CERT=$A/tls/hub.crt HUB_LEAF_TLS_KEY=$A/tls/hub.key \
    spawn hub "$NATS_SERVER" -c "$tmp/hub/hub.conf"
wait_port "${P[0]}" 10

# leaf NAME SITE HOST PORT PASSWORD TLS_DIR: the shipped leaf.conf, SITE's node
# authorization beside it, logged in on the hub as site-SITE with PASSWORD and
# the certificate in TLS_DIR
leaf() {
    mkdir -p "$tmp/$1"
    ln -sfn "$CONF/leaf.conf" "$tmp/$1/leaf.conf"
    ln -sfn "$A/site-$2/auth.conf" "$tmp/$1/leaf-auth.conf"
    SITE=$2 LEAF_HOST=$3 LEAF_PORT=$4 HUB_LEAF_URL="nats-leaf://site-$2:$5@127.0.0.1:${P[2]}" \
    LEAF_TLS_CA=$6/ca.crt LEAF_TLS_CERT=$6/site.crt LEAF_TLS_KEY=$6/site.key \
        spawn "$1" "$NATS_SERVER" -c "$tmp/$1/leaf.conf"
}
links() {
    curl -s "http://127.0.0.1:${P[3]}/leafz" |
        /usr/bin/python3 -c "import json,sys; print(json.load(sys.stdin)['leafnodes'])" 2>/dev/null
}
connected() {   # FILE...: until each natsc.py output says "connected" (5 s)
    local f
    for f in "$@"; do
        for _ in $(seq 1 50); do grep -qx connected "$f" 2>/dev/null && break; sleep 0.1; done
    done
}
wait_links() {   # N: until the hub holds N leaf links (5 s)
    for _ in $(seq 1 50); do [ "$(links)" = "$1" ] && return 0; sleep 0.1; done
    return 1
}
leaf leaf-la la 127.0.0.2 "${P[4]}" "$(envv "$A/site-la/leaf.env" SITE_PASSWORD)" "$A/site-la"
leaf leaf-lb lb 127.0.0.1 "${P[5]}" "$(envv "$A/site-lb/leaf.env" SITE_PASSWORD)" "$A/site-lb"
wait_links 2
ok "the hub (hub.conf, auth/ from nats-auth) holds the leaf links of la and lb, over verified TLS" $?
LA=127.0.0.2:${P[4]}
LB=127.0.0.1:${P[5]}

# ---- 2. on a leaf ---------------------------------------------------------------------------
$NC "$LA" >"$tmp/anon.out" 2>&1
grep -q '^refused Authorization Violation' "$tmp/anon.out" && grep -q 'authentication error' "$D/leaf-la.log"
ok "la's leaf refuses a client without an identity ($(head -n 1 "$tmp/anon.out"); its log: authentication error)" $?
$NC "$LA" --user node-lb-lb-n1 --password "$(pw node-lb-lb-n1)" >"$tmp/lb-on-la.out" 2>&1
st_=$?
$NC "$LB" --user node-lb-lb-n1 --password "$(pw node-lb-lb-n1)" >"$tmp/lb-on-lb.out" 2>&1
# the leaf writes its log line after the client heard the refusal: a
# moment to land (CI once read the log first)
for _ in $(seq 1 30); do
    grep -q 'authentication error - User "node-lb-lb-n1"' "$D/leaf-la.log" && break
    sleep 0.1
done
[ $st_ -ne 0 ] && grep -q '^refused Authorization Violation' "$tmp/lb-on-la.out" &&
    grep -q 'authentication error - User "node-lb-lb-n1"' "$D/leaf-la.log" &&
    grep -qx connected "$tmp/lb-on-lb.out"
st_=$?
[ $st_ -eq 0 ] || { echo "# on la: $(head -c 200 "$tmp/lb-on-la.out")"; echo "# on lb: $(head -c 200 "$tmp/lb-on-lb.out")";
                    echo "# la's log: $(grep -c 'node-lb-lb-n1' "$D/leaf-la.log") line(s) naming it"; }
ok "la's leaf refuses lb's node (not in its authorization); lb's leaf admits it" $st_

# the control plane's side: a service on the hub subscribed as the registry
# is (gp.node.*.*.hb, a wildcard), and the spy to everything of the nodes;
# tried up to 5 times, like the checks below: the subscribers' interest
# reaches the leaf across the link in its own time, longer on a loaded
# machine (CI once saw none of the heartbeats after a fixed 0.8 s)
for _ in 1 2 3 4 5; do
    $NC "$HUB" --user service-registry --password "$(pw service-registry)" --sub 'gp.node.*.*.hb' \
        --for 3 >"$tmp/hub-sub.out" 2>&1 &
    sub=$!
    $NC "$HUB" --user spy --password "$SPY" --sub 'gp.node.>' --for 3 >"$tmp/hub-spy.out" 2>&1 &
    spy=$!
    connected "$tmp/hub-sub.out" "$tmp/hub-spy.out"
    $NC "$LA" --user node-la-la-n1 --password "$(pw node-la-la-n1)" --pub gp.node.la.la-n2.hb \
        --pub gp.node.lb.lb-n1.hb --pub gp.node.la.la-n1.hb --delay 0.5 >"$tmp/la-n1.out" 2>&1
    wait "$sub" "$spy"
    cat "$tmp/hub-spy.out" >>"$tmp/hub-sub.out"
    [ "$(grep -c '^msg gp.node.la.la-n1.hb' "$tmp/hub-sub.out")" = 2 ] && break
done
grep -qx 'err Permissions Violation for Publish to "gp.node.la.la-n2.hb"' "$tmp/la-n1.out" &&
    grep -qx 'err Permissions Violation for Publish to "gp.node.lb.lb-n1.hb"' "$tmp/la-n1.out" &&
    grep -q 'Publish Violation - User "node-la-la-n1", Subject "gp.node.lb.lb-n1.hb"' "$D/leaf-la.log"
ok "la-n1 cannot publish la-n2's or lb-n1's heartbeat on its leaf (Permissions Violation, in the leaf's log)" $?
[ "$(grep -c '^msg gp.node.la.la-n1.hb' "$tmp/hub-sub.out")" = 2 ] && ! grep -q 'la-n2\|lb-n1' "$tmp/hub-sub.out"
ok "its own heartbeat reaches the hub, on the wildcard subscription too; the refused ones do not" $?

# a command from the control plane and the agent's answer on the scheduler's
# inbox (tried up to 5 times: the answerer's interest reaches the hub across
# the link in its own time, longer on a loaded machine)
for _ in 1 2 3 4 5; do
    $NC "$LA" --user node-la-la-n1 --password "$(pw node-la-la-n1)" --answer gp.node.la.la-n1.cmd.run \
        --for 3 >"$tmp/agent.out" 2>&1 &
    sub=$!
    sleep 0.8
    $NC "$HUB" --user service-scheduler --password "$(pw service-scheduler)" --sub '_INBOX.lt.>' \
        --pub 'gp.node.la.la-n1.cmd.run@_INBOX.lt.1' --delay 0.5 --for 1.5 >"$tmp/sched.out" 2>&1
    wait "$sub"
    grep -qx 'answered gp.node.la.la-n1.cmd.run' "$tmp/agent.out" && grep -q '^msg _INBOX.lt.1 ' "$tmp/sched.out" &&
        break
done
grep -qx 'answered gp.node.la.la-n1.cmd.run' "$tmp/agent.out" && grep -q '^msg _INBOX.lt.1 ' "$tmp/sched.out"
ok "a command crosses down to la-n1 and its answer comes back on the scheduler's inbox" $?

# ---- 3. on the hub: the site's identity bounds the link ----------------------------------------
# A leaf that logs in as site la with la's certificate and admits any client
# (la's gateway in someone else's hands): its clients publish and subscribe
# at will, the link passes only la's subjects.
cat >"$tmp/rogue.conf" <<CONF
server_name: rogue-la
listen: 127.0.0.1:${P[7]}
leafnodes { remotes: [ { urls: [ "nats-leaf://site-la:$(envv "$A/site-la/leaf.env" SITE_PASSWORD)@127.0.0.1:${P[2]}" ]
    tls { ca_file: "$A/site-la/ca.crt", cert_file: "$A/site-la/site.crt", key_file: "$A/site-la/site.key" } } ] }
CONF
spawn rogue "$NATS_SERVER" -c "$tmp/rogue.conf"
wait_links 3
ok "a leaf with la's identity and certificate, anonymous inside, is linked" $?
for _ in 1 2 3 4 5; do       # (the hub subscriber's interest crosses the link in its own time)
    $NC "$HUB" --user spy --password "$SPY" --sub '>' --for 2.5 >"$tmp/hub-all.out" 2>&1 &
    sub=$!
    sleep 0.8
    $NC "127.0.0.1:${P[7]}" --pub gp.node.lb.lb-n1.hb --pub gp.admin.sites.list \
        --pub gp.api.acme.jobs.submit --pub gp.node.la.la-n1.hb >/dev/null 2>&1
    wait "$sub"
    grep -q '^msg gp.node.la.la-n1.hb' "$tmp/hub-all.out" && break
done
grep -q '^msg gp.node.la.la-n1.hb' "$tmp/hub-all.out" && ! grep -q 'gp.node.lb\|gp.admin\|gp.api' "$tmp/hub-all.out"
ok "up: from it, la's heartbeat reaches a subscriber of everything on the hub; lb's, gp.admin and gp.api do not" $?
for _ in 1 2 3 4 5; do       # (the rogue's interest crosses the link in its own time)
    $NC "127.0.0.1:${P[7]}" --sub 'gp.node.>' --sub 'gp.events.>' --for 2.5 >"$tmp/rogue-sub.out" 2>&1 &
    sub=$!
    sleep 0.8
    $NC "$HUB" --user service-scheduler --password "$(pw service-scheduler)" \
        --pub gp.node.lb.lb-n1.cmd.run --pub gp.events.acme.job.j1.submitted --pub gp.node.la.la-n1.cmd.run >/dev/null 2>&1
    wait "$sub"
    grep -q '^msg gp.node.la.la-n1.cmd.run' "$tmp/rogue-sub.out" && break
done
grep -q '^msg gp.node.la.la-n1.cmd.run' "$tmp/rogue-sub.out" && ! grep -q 'lb-n1\|gp.events' "$tmp/rogue-sub.out"
ok "down: la's command reaches it; lb's commands and tenants' job events do not" $?
stop_pidfile "$D/pids/rogue.pid"
wait_links 2

# ---- 4. the hub's leaf port refuses ------------------------------------------------------------
# each: the shipped leaf.conf (or, without a certificate, the remote it would
# be without its cert and key), then the hub's log line and no third link
refused() {   # name, expected hub log line (regex)
    local i
    for i in $(seq 1 60); do grep -Eq "$2" "$D/hub.log" && break; sleep 0.1; done
    sleep 0.5
    grep -Eq "$2" "$D/hub.log" && [ "$(links)" = 2 ]
    local st=$?
    stop_pidfile "$D/pids/$1.pid"
    return $st
}
# it trusts the hub (the network's CA) but presents another network's certificate
mkdir -p "$tmp/bad-ca-tls"
cp "$A/site-la/ca.crt" "$O/site-la/site.crt" "$O/site-la/site.key" "$tmp/bad-ca-tls/"
leaf bad-ca la 127.0.0.1 "${P[8]}" "$(envv "$A/site-la/leaf.env" SITE_PASSWORD)" "$tmp/bad-ca-tls"
refused bad-ca 'TLS leafnode handshake error: tls: failed to verify client certificate: x509: certificate signed by unknown authority'
ok "a leaf with la's password and a certificate of another CA: no link (hub: failed to verify client certificate, unknown authority)" $?
cat >"$tmp/no-cert.conf" <<CONF
server_name: no-cert
listen: 127.0.0.1:${P[8]}
leafnodes { remotes: [ { urls: [ "nats-leaf://site-la:$(envv "$A/site-la/leaf.env" SITE_PASSWORD)@127.0.0.1:${P[2]}" ]
    tls { ca_file: "$A/site-la/ca.crt" } } ] }
CONF
spawn no-cert "$NATS_SERVER" -c "$tmp/no-cert.conf"
refused no-cert "TLS leafnode handshake error: tls: client didn't provide a certificate"
ok "a leaf with la's password and no certificate: no link (hub: client didn't provide a certificate)" $?
leaf bad-pw la 127.0.0.1 "${P[8]}" "not-$(envv "$A/site-la/leaf.env" SITE_PASSWORD)" "$A/site-la"
refused bad-pw 'authentication error - User "site-la"'
ok "a leaf with la's certificate and a wrong password: no link (hub: authentication error for site-la)" $?

# ---- 5. the leaf's address; a site without nodes ----------------------------------------------
listen=$(ss -Hltnp 2>/dev/null | grep "pid=$(cat "$D/pids/leaf-la.pid")," | awk '{ print $4 }' | sort | tr '\n' ' ')
(exec 3<>"/dev/tcp/127.0.0.1/${P[4]}") 2>/dev/null
st_=$?
[ "$listen" = "127.0.0.2:${P[4]} " ] && [ $st_ -ne 0 ]
ok "la's leaf listens on LEAF_HOST only ($listen; 127.0.0.1:${P[4]} refused)" $?
leaf leaf-lc lc 127.0.0.1 "${P[6]}" "$(envv "$A/site-lc/leaf.env" SITE_PASSWORD)" "$A/site-lc"
wait_port "${P[6]}" 10
$NC "127.0.0.1:${P[6]}" >"$tmp/lc.out" 2>&1
grep -q '^refused Authorization Violation' "$tmp/lc.out"
ok "lc's leaf (a site without nodes: its locked file) refuses a client without an identity" $?

tap_end
