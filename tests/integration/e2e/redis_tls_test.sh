#!/usr/bin/env bash
# redis_tls_test.sh -- Redis over TLS (issue 26, part 2): redis-server with
# TLS only and client certificates required (deploy/redis-tls's
# redis-tls.conf), the services reaching it through a stunnel4 client
# tunnel (deploy/redis-tls's stunnel.conf; stack.sh runs one for the
# stack, GP_REDIS_PORT is its port) and logging in over it as their own
# ACL users (deploy/redis-acl).
#
#   1. refused, each shown by redis-server's own log: a plaintext client on
#      the TLS port, a TLS client without a certificate, one with a
#      certificate of another CA, one offering TLSv1.1 only; admitted: the
#      network's certificate (TLSv1.3 negotiated);
#   2. the tunnel checks the server: a tunnel that trusts another CA, and
#      one that expects another name (checkHost), refuse our Redis
#      (stunnel's log), so nothing goes through them;
#   3. registry, scheduler and metering with a 2-site simulated fleet run
#      through the tunnel: a job runs and succeeds; Redis holds their keys
#      (read as the test user over the tunnel: the scheduler's and
#      metering's shard epochs, the registry's node hashes, metering's
#      closed mark of the job's attempt and its site sequences); CLIENT LIST
#      shows them as
#      gridpool_registry, gridpool_scheduler and gridpool_metering, with no
#      ACL refusal; redis-server has no plaintext port (CONFIG GET port 0).
# test-tags: pass=normal (tests/run.sh)
# test-stack: GP_STACK_REDIS_TLS=1
set -u
# shellcheck source=tests/lib/lib.sh
. "$(dirname "$0")/../../lib/lib.sh"
TOP=$(cd "$(dirname "$0")/../../.." && pwd)
B=$GP_BUILD
D=$GP_STACK_DIR
T=$D/redis-tls
G="$B/bin/gpctl --timeout 5000"
TENANT=op
# shellcheck disable=SC1091
. "$D/ports"
[ -n "${REDIS_TLS_PORT:-}" ] || { echo "not ok 1 - the stack has no TLS port (GP_STACK_REDIS_TLS=1)"; exit 1; }

on_fail() {
    echo "# redis.log:"; tail -n 6 "$D/redis.log" | sed 's/^/#   /'
    echo "# stunnel.log:"; tail -n 6 "$D/stunnel.log" | sed 's/^/#   /'
    for f in registry sched meter; do
        [ -f "$D/$f.log" ] || continue
        echo "# $f:"; grep -E 'level=(warn|error)' "$D/$f.log" | tail -n 3 | cut -c1-200 | sed 's/^/#   /'
    done
}
tap_on_fail=on_fail
# tcli ARGS: redis-cli over the tunnel as the test user (its keys, nothing
# @dangerous); acli ARGS: as the stack's open default user (redis-acl
# --test), for CONFIG, CLIENT and ACL
tcli() {
    redis-cli --no-auth-warning -h 127.0.0.1 -p "$GP_REDIS_PORT" --user gridpool_testsvc \
        --pass "$(cat "$D/redis-acl/testsvc.pw")" "$@" 2>&1
}
acli() { redis-cli -h 127.0.0.1 -p "$GP_REDIS_PORT" "$@" 2>&1; }
# direct ARGS: redis-cli straight to the TLS port (ARGS: its TLS options, then the command)
direct() {
    timeout 10 redis-cli -h 127.0.0.1 -p "$REDIS_TLS_PORT" "$@" 2>&1
}
# logged N RE: one of redis.log's lines after the first N matches RE
# (waits up to 2 s); $hit: that line, from its message on
logged() {
    hit=
    for _ in $(seq 1 20); do
        hit=$(tail -n +"$(($1 + 1))" "$D/redis.log" | grep -m 1 "$2" | cut -d' ' -f6- | cut -c1-110)
        [ -n "$hit" ] && return 0
        sleep 0.1
    done
    return 1
}
mark() { n0=$(wc -l <"$D/redis.log"); hit=; }   # before a probe: logged "$n0" looks after it

# ---- 1. Redis refuses what is not the network's certificate ------------------------------
out=$(tcli PING)
[ "$out" = PONG ] && [ "$(acli CONFIG GET port | tail -n 1)" = 0 ] &&
    [ "$(acli CONFIG GET tls-port | tail -n 1)" = "$REDIS_TLS_PORT" ]
ok "through the tunnel Redis answers ($out); it has no plaintext port, TLS on $REDIS_TLS_PORT" $?

mark
out=$(direct PING)
[ "$out" != PONG ] && logged "$n0" 'Error accepting a client connection.*wrong version number'
ok "a plaintext client on the TLS port is refused (${out:0:60}; redis.log: $hit)" $?

mark
out=$(direct --tls --cacert "$T/ca.crt" PING)
[ "$out" != PONG ] && logged "$n0" 'Error accepting a client connection.*peer did not return a certificate'
ok "a TLS client without a certificate is refused at the handshake (${out:0:50}; redis.log: $hit)" $?

"$TOP/deploy/redis-tls" init "$tmp/other" --test --port "$REDIS_TLS_PORT" \
    --local-port "$(free_port)" >/dev/null
mark
out=$(direct --tls --cacert "$T/ca.crt" --cert "$tmp/other/testsvc/client.crt" \
    --key "$tmp/other/testsvc/client.key" PING)
[ "$out" != PONG ] && logged "$n0" 'Error accepting a client connection.*certificate verify failed'
ok "a certificate of another CA is refused (${out:0:50}; redis.log: $hit)" $?

mark
out=$(timeout 10 openssl s_client -brief -tls1_1 -cipher 'DEFAULT@SECLEVEL=0' \
    -connect "127.0.0.1:$REDIS_TLS_PORT" -CAfile "$T/ca.crt" -cert "$T/registry/client.crt" \
    -key "$T/registry/client.key" </dev/null 2>&1)
st=$?
[ "$st" != 0 ] && logged "$n0" 'Error accepting a client connection.*unsupported protocol'
ok "a client offering TLSv1.1 only is refused (redis.log: $hit)" $?

out=$(direct --tls --cacert "$T/ca.crt" --cert "$T/registry/client.crt" \
    --key "$T/registry/client.key" PING)
proto=$(timeout 10 openssl s_client -brief -connect "127.0.0.1:$REDIS_TLS_PORT" -CAfile "$T/ca.crt" \
    -cert "$T/registry/client.crt" -key "$T/registry/client.key" </dev/null 2>&1 |
    sed -n 's/^Protocol version: //p')
[ "$out" = PONG ] && case "$proto" in TLSv1.2 | TLSv1.3) true ;; *) false ;; esac
ok "the network's certificate (registry's) is admitted ($out), over $proto" $?

# ---- 2. the tunnel verifies the server -----------------------------------------------------
# One stunnel with two tunnels to our Redis: [other-ca] trusts the other
# network's CA only; [wrong-name] ours, but expects the name redis.elsewhere.
p_ca=$(free_port); p_name=$(free_port)
{
    printf 'foreground = no\npid = %s\noutput = %s\n' "$D/pids/stunnel-bad.pid" "$D/stunnel-bad.log"
    sed -n '/^\[redis\]/,$p' "$tmp/other/testsvc/stunnel.conf" |
        sed "s/^\[redis\]/[other-ca]/; s/^accept = .*/accept = 127.0.0.1:$p_ca/"
    sed -n '/^\[redis\]/,$p' "$T/testsvc/stunnel.conf" |
        sed "s/^\[redis\]/[wrong-name]/; s/^accept = .*/accept = 127.0.0.1:$p_name/;
             s/^checkIP = .*/checkHost = redis.elsewhere/"
} >"$tmp/bad.conf"
stunnel "$tmp/bad.conf" </dev/null >/dev/null 2>&1
wait_port "$p_name" 10
# conn SECTION: stunnel-bad.log's lines of the section's connection (its thread)
conn() {
    local id
    id=$(grep -o "LOG5\[[0-9]*\]: Service \[$1\] accepted" "$D/stunnel-bad.log" | head -n 1 |
         grep -o '\[[0-9]*\]' | head -n 1)
    [ -n "$id" ] && grep -F "$id: " "$D/stunnel-bad.log"
}
o1=$(timeout 10 redis-cli -h 127.0.0.1 -p "$p_ca" PING 2>&1)
o2=$(timeout 10 redis-cli -h 127.0.0.1 -p "$p_name" PING 2>&1)
for _ in $(seq 1 20); do
    [ "$(grep -c 'certificate verify failed' "$D/stunnel-bad.log")" -ge 2 ] && break
    sleep 0.1
done
[ "$o1" != PONG ] && conn other-ca | grep -q 'self-signed certificate in certificate chain' &&
    conn other-ca | grep -q 'SSL_connect:.*certificate verify failed'
st=$?
ok "a tunnel that trusts another CA refuses our Redis (${o1:0:40}; stunnel: $(conn other-ca |
    grep -o 'CERT: .*' | head -n 1))" $st
[ "$o2" != PONG ] && conn wrong-name | grep -q 'CERT: Subject checks failed' &&
    conn wrong-name | grep -q 'SSL_connect:.*certificate verify failed'
st=$?
ok "a tunnel that expects another name (checkHost redis.elsewhere) refuses it (${o2:0:40}; stunnel: $(
    conn wrong-name | grep -o 'CERT: .*' | head -n 1))" $st
stop_pidfile "$D/pids/stunnel-bad.pid"

# ---- 3. the services through the tunnel ----------------------------------------------------
acli ACL LOG RESET >/dev/null
spawn registry "$B/bin/gridpool-registry" --config "$D/gp.env" --http-port 0 --heartbeat-ms 500 \
    --lease-ms 6000 --sweep-ms 200
for _ in $(seq 1 100); do $G health registry >/dev/null 2>&1 && break; sleep 0.1; done
spawn sched "$B/bin/gridpool-scheduler" --config "$D/gp.env" --http-port 0 --heartbeat-ms 500 \
    --lease-ms 6000 --fence-margin-ms 500 --place-ms 200 --checkpoint-root "$tmp/ckpt" \
    --feed-ms 1000 --dispatch-timeout-ms 2000
spawn meter "$B/bin/gridpool-metering" --config "$D/gp.env" --http-port 0 --window-ms 1000 \
    --grace-ms 300 --silent-ms 3000 --sweep-ms 200 --pg-timeout-ms 2000
spawn sim "$B/bin/gridpool-sim" --config "$D/gp.env" --http-port 0 --sites 2 --seed 5 \
    --spread-ms 200
for _ in $(seq 1 300); do grep -q '^sim: registered' "$D/sim.log" && break; sleep 0.1; done
for _ in $(seq 1 150); do grep -q feed_ready "$D/sched.log" && break; sleep 0.1; done
count() { tcli --scan --pattern "$1" | grep -c .; }
epochs() { echo "$(count 'gp:*:sched:epoch')/$(count 'gp:*:m:epoch')"; }
for _ in $(seq 1 100); do [ "$(epochs)" = 256/256 ] && break; sleep 0.1; done
grep -q '^sim: registered' "$D/sim.log" && grep -q feed_ready "$D/sched.log" &&
    [ "$(epochs)" = 256/256 ]
st=$?
ok "the 2-site fleet registered; the scheduler loaded it; it and metering sealed every shard in Redis, read over the tunnel as the test user ($(grep -o '^sim: registered [0-9]* nodes' "$D/sim.log"), $(epochs))" $st

job=$(submit --command 'sim:run=2s exit=0' --gpus 1)
wait_sql "SELECT state FROM jobs WHERE id = '$job'" succeeded 200
st_=$?
ok "a job runs and succeeds ($job: $(sql "SELECT state FROM jobs WHERE id = '$job'"))" $st_

# the registry's node hashes (heartbeats), metering's closed mark of the
# job's attempt (its readings were taken) and site sequences (its records)
nnodes=$(grep -o '^sim: registered [0-9]*' "$D/sim.log" | grep -o '[0-9]*$')
nodes=$(count 'gp:*:node:*'); closed=$(count "gp:*:m:d:$job:*"); seqs=$(count 'gp:*:m:seq')
[ "$nodes" = "$nnodes" ] && [ "$closed" -ge 1 ] && [ "$seqs" -ge 1 ]
st=$?
ok "Redis holds the services' keys (node hashes $nodes of $nnodes nodes, the scheduler's grants $(
    count 'gp:*:grant:*'), metering's closed parts of the job $closed and site sequences $seqs)" $st

users=$(acli CLIENT LIST | grep -o 'user=[a-z_]*' | sort -u | tr '\n' ' ')
case "$users" in *gridpool_metering*gridpool_registry*gridpool_scheduler*) st=0 ;; *) st=1 ;; esac
ok "the services are connected as their own ACL users ($users)" $st
log=$(acli ACL LOG)
denied=$(echo "$log" | grep -A1 '^username$' | grep -v '^username$\|^--' | sort -u | tr '\n' ' ')
[ -z "$denied" ] && case "$log" in *ERR* | *NOPERM*) false ;; esac
ok "their work over the tunnel met no ACL refusal (refused: ${denied:-nobody})" $?
tap_end
