#!/usr/bin/env bash
# redis_tls_test.sh -- deploy/redis-tls's files, without a server
# (tests/integration/e2e/redis_tls_test.sh runs them in redis-server and
# stunnel4).
#
#   - init makes a client certificate for each of deploy/redis-acl's
#     services (and testsvc with --test), signed by the CA for clientAuth,
#     CN gridpool_<service>; the server's for serverAuth with its SANs;
#   - keys and configurations are 0600, certificates 0644;
#   - redis-tls.conf: no plaintext port, client certificates required,
#     TLSv1.2 and TLSv1.3 only; each stunnel.conf a loopback-only client
#     tunnel that verifies the chain and the server's name or address;
#   - init run again changes no file; a new --dns reissues the server's
#     certificate only, with the name, and the tunnels check it; `client`
#     adds one; --connect and --files-at reach the configurations.
# test-tags: pass=normal (tests/run.sh)
set -u
here=$(cd "$(dirname "$0")/../../.." && pwd)
RT=$here/deploy/redis-tls
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
fails=0
ok() {       # status message
    n=$((n + 1))
    if [ "$1" -eq 0 ]; then echo "ok $n - $2"; else echo "not ok $n - $2"; fails=$((fails + 1)); fi
}
sums() { (cd "$D" && find . -type f | sort | xargs sha256sum); }
D=$tmp/tls
SERVICES=$(python3 -B -c "import runpy; print(' '.join(runpy.run_path('$here/deploy/redis-acl')['KEYS']))")

"$RT" init "$D" --test --port 6390 --local-port 6391 >"$tmp/init.out" 2>&1
ok $? "init runs ($(head -c 200 "$tmp/init.out"))"

st=0
for s in $SERVICES testsvc; do
    if ! openssl verify -CAfile "$D/ca.crt" -purpose sslclient "$D/$s/client.crt" >/dev/null 2>&1 ||
        ! openssl x509 -noout -subject -in "$D/$s/client.crt" | grep -q "CN = gridpool_$s\$" ||
        ! cmp -s "$D/ca.crt" "$D/$s/ca.crt"; then
        st=1
        echo "# $s"
    fi
done
[ -n "$SERVICES" ]
ok $((st + $?)) "a client certificate per service of redis-acl ($SERVICES) and testsvc: the CA's, clientAuth, CN gridpool_<service>"
openssl verify -CAfile "$D/ca.crt" -purpose sslserver "$D/server/server.crt" >/dev/null 2>&1 &&
    ! openssl verify -CAfile "$D/ca.crt" -purpose sslserver "$D/registry/client.crt" >/dev/null 2>&1 &&
    openssl x509 -noout -ext subjectAltName -in "$D/server/server.crt" |
    grep -q 'DNS:localhost, IP Address:127.0.0.1$'
ok $? "the server's certificate is for serverAuth (a client's is not), SAN localhost and 127.0.0.1"

bad=$(find "$D" -type f \( -name '*.key' -o -name '*.conf' -o -name '*.json' \) ! -perm 600)
bad+=$(find "$D" -type f -name '*.crt' ! -perm 644)
[ -z "$bad" ]
ok $? "keys, configurations and the settings are 0600, certificates 0644 (${bad:-all})"

c=$D/redis-tls.conf
grep -qx 'port 0' "$c" && grep -qx 'tls-port 6390' "$c" && grep -qx 'tls-auth-clients yes' "$c" &&
    grep -qx 'tls-protocols "TLSv1.2 TLSv1.3"' "$c" &&
    grep -qx "tls-cert-file $D/server/server.crt" "$c" && grep -qx "tls-ca-cert-file $D/server/ca.crt" "$c"
ok $? "redis-tls.conf: no plaintext port, TLS on 6390, client certificates required, TLSv1.2+"

s=$D/scheduler/stunnel.conf
grep -qx 'client = yes' "$s" && grep -qx 'accept = 127.0.0.1:6391' "$s" &&
    grep -qx 'connect = 127.0.0.1:6390' "$s" && grep -qx 'verifyChain = yes' "$s" &&
    grep -qx 'checkIP = 127.0.0.1' "$s" && grep -qx "cert = $D/scheduler/client.crt" "$s" &&
    grep -qx "key = $D/scheduler/client.key" "$s" && grep -qx "CAfile = $D/scheduler/ca.crt" "$s" &&
    grep -qx 'sslVersionMin = TLSv1.2' "$s"
ok $? "scheduler's stunnel.conf: a client tunnel on loopback only, its own certificate, the chain and the address checked"

before=$(sums)
"$RT" init "$D" --test >/dev/null 2>&1
[ "$(sums)" = "$before" ]
ok $? "init run again changes no file"

srv=$(sha256sum <"$D/server/server.crt"); reg=$(sha256sum <"$D/registry/client.crt")
"$RT" init "$D" --test --dns redis.gp.internal --ip 10.1.2.3 >/dev/null 2>&1
[ "$(sha256sum <"$D/server/server.crt")" != "$srv" ] &&
    [ "$(sha256sum <"$D/registry/client.crt")" = "$reg" ] &&
    openssl x509 -noout -ext subjectAltName -in "$D/server/server.crt" | grep -q 'DNS:redis.gp.internal' &&
    grep -qx 'connect = redis.gp.internal:6390' "$D/registry/stunnel.conf" &&
    grep -qx 'checkHost = redis.gp.internal' "$D/registry/stunnel.conf" &&
    grep -qx 'tls-port 6390' "$c" && [ -f "$D/testsvc/stunnel.conf" ]
ok $? "a new --dns reissues the server's certificate only; the tunnels connect to and check that name; the rest is kept"

"$RT" init "$D" --test --connect 10.1.2.3:6390 --files-at /etc/gridpool/redis-tls >/dev/null 2>&1 &&
    "$RT" client "$D" operator >/dev/null 2>&1
grep -qx 'checkIP = 10.1.2.3' "$D/registry/stunnel.conf" &&
    grep -qx 'cert = /etc/gridpool/redis-tls/client.crt' "$D/registry/stunnel.conf" &&
    grep -qx 'tls-key-file /etc/gridpool/redis-tls/server.key' "$c" &&
    openssl verify -CAfile "$D/ca.crt" "$D/operator/client.crt" >/dev/null 2>&1 &&
    grep -qx 'connect = 10.1.2.3:6390' "$D/operator/stunnel.conf"
ok $? "--connect to an address: checkIP; --files-at names the mounted folder; client adds a tunnel (operator)"

"$RT" init "$D" --ip nope >"$tmp/bad.out" 2>&1
st=$?
"$RT" client "$D" server >>"$tmp/bad.out" 2>&1
st2=$?
[ "$st" = 2 ] && [ "$st2" = 2 ] && grep -q "not an address" "$tmp/bad.out"
ok $? "a bad address, and a client named 'server', are refused ($(head -n 1 "$tmp/bad.out"))"
[ -z "$(ls -A "$here/deploy/__pycache__" 2>/dev/null)" ]
ok $? "no __pycache__ left in deploy/"

echo "1..$n"
[ "$fails" -eq 0 ]
