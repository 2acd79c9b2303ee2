#!/usr/bin/env bash
# secrets_test.sh -- tenant secrets through gpctl and the real scheduler,
# registry and PostgreSQL (run by tests/run.sh through
# tests/harness/with-stack.sh: GP_BUILD, GP_STACK_DIR, GP_PG_CONNINFO set).
#
#   1. set (from a file, from stdin), replace, list, delete; a value is
#      never printed, never on the command line, never in a reply;
#   2. PostgreSQL holds ciphertext only: the value is not in the table in
#      clear, the right key decrypts it, a wrong one does not; a tenant's
#      role sees only its own rows and never the value column;
#   3. tenant beta cannot list, delete or use acme's secret (submit naming
#      it: NOTFOUND, as for a secret that does not exist); bad names,
#      empty values, a secret named by a job that has no image: refused;
#   4. no value in any log of the stack;
#   5. a scheduler without a key: set and submits naming a secret are
#      refused "secrets are not configured"; an unreadable or short key
#      file stops it at start.
# The values reach an agent in the RunAttempt of an attempt that names
# them: tests/integration/agent/registry_auth_test.sh.
# test-tags: pass=san (tests/run.sh)
set -u
B=$GP_BUILD
D=$GP_STACK_DIR
GPCTL=$B/bin/gpctl
G="$GPCTL --timeout 5000"
# shellcheck source=tests/lib/lib.sh
. "$(dirname "$0")/../../lib/lib.sh"
tap_on_fail=gpctl_on_fail

CANARY="robot:canary-$$-$RANDOM-pw"
CANARY2="ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAcanary$$$RANDOM tenant@laptop"
KEY="test-key-$$-0123456789abcdef"
printf '%s\n' "$KEY" >"$D/secret.key"
chmod 0600 "$D/secret.key"

spawn registry "$B/bin/gridpool-registry" --config "$D/gp.env" --http-port 0
for _ in $(seq 1 100); do $G health registry >/dev/null 2>&1 && break; sleep 0.1; done
$G create tenant op --kind operator >/dev/null &&
    $G create tenant acme --kind customer --parent op >/dev/null &&
    $G create tenant beta --kind customer --parent op >/dev/null
ok "tenants op, acme (customer) and beta (customer) are created" $?
MPORT=$(free_port)
spawn sched "$B/bin/gridpool-scheduler" --config "$D/gp.env" --http-port "$MPORT" \
    --secret-key-file "$D/secret.key" --log-level debug
spid=${pids[-1]}
for _ in $(seq 1 100); do $G health scheduler >/dev/null 2>&1 && break; sleep 0.1; done
grep -q 'secrets.*enabled=true' "$D/sched.log"
ok "the scheduler starts with secrets enabled (secret-key-file)" $?

# ---- 1. set, list, replace, delete ----------------------------------------------------

printf '%s\n' "$CANARY" >"$tmp/regcred"
expect "create secret --from-file" 0 '' create secret regcred --tenant acme --from-file "$tmp/regcred"
grep -Eq "^secret/regcred set \(${#CANARY} bytes\)" "$tmp/out" && ! grep -q canary "$tmp/out"
ok "it says set, ${#CANARY} bytes (the final newline dropped), and not the value" $?
run create secret sshkey --tenant acme --from-stdin -o json <<<"$CANARY2"
[ "$rc" -eq 0 ] && ! grep -q canary "$tmp/out" && ! grep -q '"value"' "$tmp/out"
ok "create secret --from-stdin -o json: the reply has no value" $?
expect "get secrets --tenant acme" 0 '' get secrets --tenant acme
grep -Eq '^NAME +BYTES +AGE +UPDATED' "$tmp/out" && grep -Eq "^regcred +${#CANARY} " "$tmp/out" &&
    grep -Eq '^sshkey ' "$tmp/out" && ! grep -q canary "$tmp/out"
ok "the list: names and sizes, no value" $?
expect "get secrets -o json" 0 '' get secrets --tenant acme -o json
json_check "its JSON has names, sizes and times, no value" \
    "sorted(i['name'] for i in d['items']) == ['regcred', 'sshkey'] and all('value' not in i and i['created_ms'] > 0 for i in d['items'])"
expect "get secret NAME" 0 '' get secret regcred --tenant acme
expect "get secret of a name it does not have: exit 1" 1 'NOTFOUND' get secret nope --tenant acme
printf 'robot:%s-v2\n' "$CANARY" >"$tmp/regcred2"
sleep 0.01
expect "create secret again replaces the value" 0 '' create secret regcred --tenant acme \
    --from-file "$tmp/regcred2" -o json
json_check "same name, new size, updated after created" \
    "d['size'] == ${#CANARY} + 9 and d['updated_ms'] >= d['created_ms']"
[ "$(sql "SELECT count(*) FROM secrets WHERE tenant = 'acme'")" = 2 ]
ok "still two secrets for acme" $?

# refusals of the tool (exit 2: nothing sent)
expect "a value on the command line is refused" 2 'from-file' create secret x --tenant acme --value pw
expect "neither --from-file nor --from-stdin" 2 'from-file' create secret x --tenant acme
expect "both" 2 'one of' create secret x --tenant acme --from-file "$tmp/regcred" --from-stdin
: >"$tmp/empty"
expect "an empty value" 2 'empty' create secret x --tenant acme --from-file "$tmp/empty"
head -c 17000 /dev/zero | tr '\0' a >"$tmp/big"
expect "a value over 16 KiB" 2 'longer' create secret x --tenant acme --from-file "$tmp/big"
expect "a bad name" 2 'NAME' create secret bad.name --tenant acme --from-file "$tmp/regcred"
expect "a missing file" 1 'nope' create secret x --tenant acme --from-file "$tmp/nope"
[ "$(sql "SELECT count(*) FROM secrets")" = 2 ]
ok "no refused create stored anything" $?

# ---- 2. PostgreSQL holds ciphertext only --------------------------------------------------

sql "SELECT encode(value, 'escape') FROM secrets" >"$tmp/rows"
[ -s "$tmp/rows" ] && ! grep -q canary "$tmp/rows"
ok "the table does not hold a value in clear" $?
sql "SELECT name, size, encode(value, 'hex') FROM secrets" | grep -qi "$(printf canary | od -An -tx1 | tr -d ' \n')"
[ $? -ne 0 ]
ok "nor in hex" $?
printf "SELECT convert_from(pgp_sym_decrypt_bytea(value, :'k'), 'UTF8') FROM secrets WHERE tenant = 'acme' AND name = 'sshkey'\n" |
    psql "$GP_PG_CONNINFO" -XAtq -v k="$KEY" >"$tmp/dec" 2>>"$tmp/psql.err"
[ "$(cat "$tmp/dec")" = "$CANARY2" ]
ok "the key decrypts it (pgcrypto, the key from the scheduler's file)" $?
psql "$GP_PG_CONNINFO" -XAtq -c "SELECT pgp_sym_decrypt_bytea(value, 'wrong-key-0123456789') FROM secrets" \
    >/dev/null 2>"$tmp/wrong"
grep -qi 'wrong key' "$tmp/wrong"
ok "a wrong key does not" $?
as_role() {    # tenant, query: under the tenant's role, as the scheduler's API does
    printf "BEGIN;\nSELECT set_config('role', gp_tenant_role('%s'), true) \\g /dev/null\n%s;\nCOMMIT;\n" "$1" "$2" |
        psql "$GP_PG_CONNINFO" -XAtq 2>>"$tmp/psql.err"
}
[ "$(as_role beta "SELECT count(*) FROM secrets")" = 0 ]
ok "under beta's role no row of acme's is seen" $?
[ "$(as_role op "SELECT count(*) FROM secrets")" = 0 ]
ok "nor under the parent operator's (a secret is not inventory)" $?
as_role acme "SELECT value FROM secrets" >/dev/null
grep -q 'permission denied' "$tmp/psql.err"
ok "acme's own role cannot read the value column" $?
[ "$(as_role acme "SELECT string_agg(name, ',' ORDER BY name) FROM secrets")" = "regcred,sshkey" ]
ok "acme's role reads its names" $?

# ---- 3. another tenant, refusals at submit -------------------------------------------------

expect "beta's list" 0 '' get secrets --tenant beta
grep -q 'No secrets' "$tmp/err" && [ ! -s "$tmp/out" ]
ok "beta sees none of acme's" $?
expect "beta cannot delete acme's secret: NOTFOUND" 1 'NOTFOUND' delete secret regcred --tenant beta
[ "$(sql "SELECT count(*) FROM secrets WHERE tenant = 'acme'")" = 2 ]
ok "acme's secrets are all still there" $?
IMG=127.0.0.1:5999/test/busybox:1
expect "beta submits a job naming acme's secret: NOTFOUND, naming the field" 1 \
    'NOTFOUND: registry_auth: .*regcred' submit --tenant beta --image "$IMG" --gpus 1 \
    --registry-auth regcred
expect "acme names a secret it does not have: NOTFOUND" 1 'NOTFOUND: ssh_key: .*nokey' \
    submit --tenant acme --image "$IMG" --gpus 1 --ssh-key nokey
expect "a checkpoint secret without an object store: INVAL" 1 'INVAL: checkpoint_secret' \
    submit --tenant acme --image "$IMG" --gpus 1 --checkpoint-secret regcred
expect "registry_auth on a sim: job (no image): INVAL" 1 'INVAL: registry_auth' \
    submit --tenant acme --command 'sim:run=1s' --gpus 1 --registry-auth regcred
expect "a bad secret name in a spec: INVAL" 1 'INVAL: registry_auth' \
    submit --tenant acme --image "$IMG" --gpus 1 --registry-auth 'a b'
[ "$(sql "SELECT count(*) FROM jobs")" = 0 ]
ok "no refused submit made a job" $?
expect "acme submits a job naming its own secrets" 0 '' submit --tenant acme --image "$IMG" \
    --gpus 1 --registry-auth regcred --ssh-key sshkey --checkpoint-uri s3://b/p \
    --checkpoint-secret regcred -o json
json_check "the job keeps the names, no value" \
    "d['spec']['registry_auth'] == 'regcred' and d['spec']['ssh_key'] == 'sshkey' and d['state'] == 'pending'"
! grep -q canary "$tmp/out"
ok "and its reply holds no value" $?
expect "delete secret" 0 '' delete secret sshkey --tenant acme
grep -q '^secret/sshkey deleted' "$tmp/out"
ok "it says deleted" $?
expect "deleting it again: NOTFOUND" 1 'NOTFOUND' delete secret sshkey --tenant acme
expect "a job naming it now: NOTFOUND at submit" 1 'NOTFOUND: ssh_key' \
    submit --tenant acme --image "$IMG" --gpus 1 --ssh-key sshkey

# ---- 4. no value in any log ------------------------------------------------------------------

curl -s "http://127.0.0.1:$MPORT/metrics" >"$tmp/metrics"
grep -q '^gp_scheduler_secret_requests_total{outcome="set"} 3$' "$tmp/metrics" &&
    grep -q '^gp_scheduler_secret_requests_total{outcome="refused"} [1-9]' "$tmp/metrics"
ok "the scheduler counts secret requests by outcome" $?
! grep -rq "canary\|$KEY" "$D"/*.log "$D"/pg/pg.log 2>/dev/null
ok "no secret and no key in any log of the stack (scheduler at debug)" $?

# ---- 5. without a key ------------------------------------------------------------------------

kill "$spid"; wait_gone "$spid" 50
spawn sched2 "$B/bin/gridpool-scheduler" --config "$D/gp.env" --http-port 0
spid=${pids[-1]}
for _ in $(seq 1 100); do $G health scheduler >/dev/null 2>&1 && break; sleep 0.1; done
expect "no key: create secret is refused, typed" 1 'UNAVAIL: secrets are not configured' \
    create secret y --tenant acme --from-file "$tmp/regcred"
expect "no key: a job naming a secret is refused" 1 'UNAVAIL: secrets: secrets are not configured' \
    submit --tenant acme --image "$IMG" --gpus 1 --registry-auth regcred
expect "no key: the list still answers (names only)" 0 '' get secrets --tenant acme
grep -q '^regcred ' "$tmp/out"
ok "and shows acme's secret" $?
kill "$spid"; wait_gone "$spid" 50
"$B/bin/gridpool-scheduler" --config "$D/gp.env" --http-port 0 --secret-key-file "$D/nope" \
    >"$tmp/s3.log" 2>&1 &
pid3=$!
wait_gone "$pid3" 100 && grep -q 'secret_key_unreadable' "$tmp/s3.log"
ok "an unreadable secret-key-file stops the scheduler at start" $?
printf 'shrtKEYx\n' >"$D/short.key"
"$B/bin/gridpool-scheduler" --config "$D/gp.env" --http-port 0 --secret-key-file "$D/short.key" \
    >"$tmp/s4.log" 2>&1 &
pid4=$!
wait_gone "$pid4" 100 && grep -q 'secret_key_short' "$tmp/s4.log" && ! grep -q shrtKEYx "$tmp/s4.log"
ok "a key under 16 bytes too (and it is not printed)" $?

tap_end
