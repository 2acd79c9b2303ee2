#!/usr/bin/env bash
# secrets_test.sh -- credentials given to gridpool-registry never come out:
# `--check-config` with passwords in its environment (NATS password and
# token, a password inside the NATS URL, PostgreSQL's password in both
# conninfo forms) prints them masked, and a running registry whose NATS URL
# holds a password logs that URL masked while it cannot connect.  With the
# harness' PostgreSQL (trust auth ignores the password) a keyword-form
# conninfo with a password is used for real: the registry gets healthy.
# Prints TAP.
# test-tags: pass=san (tests/run.sh)
set -u
B=$GP_BUILD
D=$GP_STACK_DIR
REG=$B/bin/gridpool-registry
n=0
failed=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
nok() { n=$((n + 1)); failed=$((failed + 1)); echo "not ok $n - $*"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else nok "$what"; fi; }
has() { grep -qF -- "$2" "$1"; }
lacks() { [ -s "$1" ] && ! grep -qF -- "$2" "$1"; }   # the file has content, and not that
mkdir -p "$D/pids"

# ---- --check-config ---------------------------------------------------------------
env GP_NATS_USER=gpuser GP_NATS_PASSWORD=natsPW111 GP_NATS_TOKEN=tokNATS222 \
    GP_NATS_URL="nats://urluser:urlPW333@127.0.0.1:4222,nats://tok444secret@127.0.0.2:4222" \
    GP_PG_CONNINFO="host=127.0.0.1 port=5432 user=postgres password=pgPW555 dbname=gridpool" \
    "$REG" --check-config >"$D/check1.out" 2>&1
check "--check-config exits 0 (status $?)" test $? -eq 0
cat "$D/check1.out" | grep -E '^(nats|pg)-' | sed 's/^/#   /'
for s in natsPW111 tokNATS222 urlPW333 tok444secret pgPW555; do
    check "--check-config does not print $s" lacks "$D/check1.out" "$s"
done
check "nats-password and nats-token print as ****" \
    sh -c "grep -qx 'nats-password=\*\*\*\*' '$D/check1.out' && grep -qx 'nats-token=\*\*\*\*' '$D/check1.out'"
check "the NATS URLs print with password and token masked" \
    has "$D/check1.out" "nats-url=nats://urluser:****@127.0.0.1:4222,nats://****@127.0.0.2:4222"
check "the keyword conninfo prints with password=****" \
    has "$D/check1.out" "pg-conninfo=host=127.0.0.1 port=5432 user=postgres password=**** dbname=gridpool"
check "what is not secret prints as it is (nats-user=gpuser)" grep -qx 'nats-user=gpuser' "$D/check1.out"

env GP_PG_CONNINFO="postgresql://postgres:pgURI666@127.0.0.1:5432/gridpool?sslmode=disable" \
    "$REG" --check-config >"$D/check2.out" 2>&1
check "URI conninfo: --check-config exits 0" test $? -eq 0
check "URI conninfo: the password is not printed" lacks "$D/check2.out" pgURI666
check "URI conninfo: printed as postgresql://postgres:****@..." \
    has "$D/check2.out" "pg-conninfo=postgresql://postgres:****@127.0.0.1:5432/gridpool?sslmode=disable"

# ---- a running registry's log ---------------------------------------------------------
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$REG" --config "$D/gp.env" --nats-url "nats://urluser:logPW777@127.0.0.1:$port" \
    --pg-conninfo "$GP_PG_CONNINFO&password=logPW888" --http-port -1 \
    >"$D/reg1.log" 2>&1 </dev/null &
pid=$!
echo "$pid" >"$D/pids/registry.pid"
for _ in $(seq 1 100); do grep -q 'event=nats_not_yet_connected' "$D/reg1.log" && break; sleep 0.1; done
sleep 0.5
kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
sed 's/^/#   /' "$D/reg1.log" | grep 'nats_not_yet\|pg_' | head -3
check "a registry that cannot reach NATS logs the URL with the password masked" \
    has "$D/reg1.log" "url=nats://urluser:****@127.0.0.1:$port"
check "and its log never holds the NATS or PostgreSQL password" \
    sh -c "lacks() { [ -s \"\$1\" ] && ! grep -qF -- \"\$2\" \"\$1\"; }; lacks '$D/reg1.log' logPW777 && lacks '$D/reg1.log' logPW888"

# the password in a keyword conninfo is really used (trust auth lets it in)
pgport=$(echo "$GP_PG_CONNINFO" | sed -E 's|.*@127\.0\.0\.1:([0-9]+)/.*|\1|')
"$REG" --config "$D/gp.env" --http-port 0 \
    --pg-conninfo "host=127.0.0.1 port=$pgport user=postgres dbname=gridpool password=logPW999" \
    >"$D/reg2.log" 2>&1 </dev/null &
pid=$!
echo "$pid" >"$D/pids/registry.pid"
healthy=1
for _ in $(seq 1 100); do
    "$B/bin/gpctl" --timeout 1000 health >"$D/health.out" 2>&1 && grep -q '^registry .* ok$' "$D/health.out" &&
        { healthy=0; break; }
    sleep 0.2
done
check "a registry with password=... in its conninfo reaches PostgreSQL (health ok)" test "$healthy" -eq 0
kill "$pid" 2>/dev/null; wait "$pid"
check "and exits 0 on SIGTERM" test $? -eq 0
rm -f "$D/pids/registry.pid"

echo "1..$n"
[ "$failed" -eq 0 ]
