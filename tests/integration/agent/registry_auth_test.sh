#!/usr/bin/env bash
# registry_auth_test.sh -- a job's tenant secrets reach its container and
# nothing else: a real registry with authentication (Debian's
# docker-registry, htpasswd with bcrypt), the real scheduler with a
# secret-key, a real gridpool-agent (runc, skopeo, umoci).
#
#   1. the registry refuses a pull without credentials (the test's own
#      skopeo), and a job without registry_auth fails to start with the
#      registry's reason; one with a wrong password too;
#   2. a job naming the right secret ("user:password") pulls and runs; the
#      same as a docker config JSON; no authfile is left after the pull;
#   3. its SSH key and checkpoint credentials are in /run/gridpool, the
#      container root's only (0600), with GP_SSH_AUTHORIZED_KEYS and
#      GP_CHECKPOINT_CREDENTIALS; gone from the node after the end;
#   4. a secret deleted while a job that names it waits: the job fails to
#      start, its own failure, with a reason naming the secret;
#   5. no secret in any log of the control plane or the agent.
# test-tags: pass=san timeout=300 (tests/run.sh)
set -u
B=$GP_BUILD
G="$B/bin/gpctl --timeout 5000"
D=$GP_STACK_DIR
TENANT=acme
# shellcheck source=tests/lib/lib.sh
. "$(dirname "$0")/../../lib/lib.sh"
# shellcheck source=tests/lib/oci.sh
. "$(dirname "$0")/../../lib/oci.sh"

for t in runc skopeo umoci docker-registry; do
    command -v "$t" >/dev/null || { echo "1..0 # SKIP $t not installed (make deps)"; exit 0; }
done
[ "$(id -u)" = 0 ] || { echo "1..0 # SKIP containers need root (the agent maps id ranges)"; exit 0; }

on_fail() {
    echo "# gpctl errors:"; tail -n 3 "$tmp/gpctl.err" 2>/dev/null | sed 's/^/#   /'
    echo "# jobs:"; sql "SELECT id, state, reason FROM jobs ORDER BY created_ms" | sed 's/^/#   /'
    echo "# agent warnings:"; grep -h 'level=warn' "$D"/agent-*.log | tail -n 5 | sed 's/^/#   /'
}
tap_on_fail=on_fail
chmod 0711 "$D"
ST=$D/agent-state
PW="pw-canary-$$-$RANDOM"
SSHKEY="ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIsshcanary$$ tenant@laptop"
CKPT="aws_secret_access_key=ckptcanary$$$RANDOM"
jstate() { sql "SELECT state FROM jobs WHERE id = '$1'"; }
out_of() { cat "$ST/logs/$1/1/output" 2>/dev/null; }

# ---- a registry that wants a password ------------------------------------------------

# bcrypt (the only hash docker-registry's htpasswd takes) by PostgreSQL's
# pgcrypto: neither htpasswd nor python's bcrypt is needed
psql "$GP_PG_CONNINFO" -XAtq -c "CREATE EXTENSION IF NOT EXISTS pgcrypto" 2>>"$tmp/psql.err"
printf 'robot:%s\n' "$(sql "SELECT crypt('$PW', gen_salt('bf', 8))")" >"$D/htpasswd"
grep -q '^robot:\$2[aby]\$' "$D/htpasswd"
ok "a bcrypt htpasswd entry for robot" $?
RPORT=$(free_port)
mkdir -p "$D/registry"
cat >"$D/registry.yml" <<CONF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $D/registry
http:
  addr: 127.0.0.1:$RPORT
auth:
  htpasswd:
    realm: gridpool-test
    path: $D/htpasswd
CONF
spawn registry-oci docker-registry serve "$D/registry.yml"
wait_port "$RPORT" 10
ok "docker-registry with htpasswd auth listens on $RPORT" $?
OCI_REG=127.0.0.1:$RPORT
oci_image "$B/test-image" &&
    skopeo copy --quiet --dest-tls-verify=false --dest-creds "robot:$PW" "oci:$B/test-image:t" \
        "docker://$OCI_REG/private/busybox:1" >/dev/null
ok "the test image is pushed with the password" $?
IMG=$OCI_REG/private/busybox:1
skopeo inspect --tls-verify=false "docker://$IMG" >/dev/null 2>"$tmp/anon.err"
[ $? -ne 0 ] && grep -qi 'unauthorized\|authentication required' "$tmp/anon.err"
rc_=$?; ok "1. without credentials the registry refuses the pull ($(grep -oi 'unauthorized[^"]*' "$tmp/anon.err" | head -1))" $rc_

# ---- the stack ---------------------------------------------------------------------

printf 'key-%s-0123456789abcdef\n' "$$" >"$D/secret.key"
chmod 0600 "$D/secret.key"
spawn registry "$B/bin/gridpool-registry" --config "$D/gp.env" --http-port 0 --heartbeat-ms 500 \
    --lease-ms 3000 --sweep-ms 200
for _ in $(seq 1 100); do $G health registry >/dev/null 2>&1 && break; sleep 0.1; done
$G create tenant op --kind operator >/dev/null &&
    $G create tenant acme --kind customer --parent op >/dev/null &&
    $G create site s1 --tenant op --region r1 --lat 52.5 --lon 13.4 >/dev/null &&
    $G create pool p-all --tenant op --scope global >/dev/null
ok "a tenant, a site and a global pool are created" $?
spawn agent-n1 "$B/bin/gridpool-agent" --config "$D/gp.env" \
    --site s1 --node n1 --gpu-backend sim --sim-gpus 2 --sim-model L4 --http-port 0 \
    --heartbeat-ms 500 --stop-grace-ms 1000 --state-dir "$ST" --runtime-root "$D/runtime" \
    --seccomp-profile "$B/seccomp.json" --insecure-registries "$OCI_REG" --id-base 1879048192 \
    --default-memory-mb 256 --default-scratch-mb 16 --log-level debug
for _ in $(seq 1 100); do $G get nodes n1 -o json 2>/dev/null | grep -q '"state":"healthy"' && break; sleep 0.1; done
spawn sched "$B/bin/gridpool-scheduler" --config "$D/gp.env" --http-port 0 --instance sched \
    --heartbeat-ms 500 --lease-ms 3000 --fence-margin-ms 300 --place-ms 200 \
    --dispatch-timeout-ms 5000 --claim-ms 2000 --checkpoint-root "$D/ckpt" \
    --secret-key-file "$D/secret.key" --log-level debug
for _ in $(seq 1 100); do grep -q 'feed_ready.*nodes=1' "$D/sched.log" && break; sleep 0.1; done
ok "the agent and the scheduler (with a secret-key) are up" $?
printf 'robot:%s\n' "$PW" | $G create secret reg --tenant acme --from-stdin >/dev/null &&
    printf 'robot:wrong-%s\n' "$PW" | $G create secret reg-bad --tenant acme --from-stdin >/dev/null &&
    printf '{"auths":{"%s":{"auth":"%s"}}}' "$OCI_REG" "$(printf 'robot:%s' "$PW" | base64 -w0)" |
        $G create secret reg-json --tenant acme --from-stdin >/dev/null &&
    printf '%s\n' "$SSHKEY" | $G create secret ssh --tenant acme --from-stdin >/dev/null &&
    printf '%s\n' "$CKPT" | $G create secret ckpt --tenant acme --from-stdin >/dev/null &&
    printf 'robot:%s\n' "$PW" | $G create secret reg-doomed --tenant acme --from-stdin >/dev/null
ok "acme's secrets are set (two credentials, a JSON one, an SSH key, checkpoint credentials)" $?

# ---- 1. refusals by the registry ---------------------------------------------------------

j0=$(submit --image "$IMG" --command true --gpus 1 --max-attempts 1)
j1=$(submit --image "$IMG" --command true --gpus 1 --max-attempts 1 --registry-auth reg-bad)
wait_sql "SELECT count(*) FROM jobs WHERE id IN ('$j0','$j1') AND state = 'failed'" 2 150
ok "1. without registry_auth, and with a wrong password: both jobs fail" $?
r0=$(sql "SELECT reason FROM attempts WHERE job_id = '$j0'")
r1=$(sql "SELECT reason FROM attempts WHERE job_id = '$j1'")
echo "$r0" | grep -qi 'pull failed.*\(unauthorized\|authentication required\)'
rc_=$?; ok "1. no credential: the registry's reason ($(echo "$r0" | cut -c1-150))" $rc_
echo "$r1" | grep -qi 'pull failed.*\(unauthorized\|authentication required\)'
rc_=$?; ok "1. a wrong password: the registry's reason ($(echo "$r1" | cut -c1-150))" $rc_

# ---- 2., 3. the right secret -----------------------------------------------------------------

probe='echo "ssh=$(cat $GP_SSH_AUTHORIZED_KEYS)"; echo "ckpt=$(cat $GP_CHECKPOINT_CREDENTIALS)";
ls -ln /run/gridpool | awk "/ssh_authorized_keys|checkpoint_credentials/ { print \"perm=\" \$1, \$3, \$9 }";
env | grep -c "robot\|pw-canary" | sed "s/^/regenv=/"; echo probe-done'
j2=$(submit --image "$IMG" --command "$probe" --gpus 1 --max-attempts 1 --registry-auth reg \
    --ssh-key ssh --checkpoint-uri s3://bucket/acme --checkpoint-secret ckpt)
wait_sql "SELECT state FROM jobs WHERE id = '$j2'" succeeded 150
ok "2. with registry_auth the image is pulled and the job runs to success" $?
out=$(out_of "$j2")
echo "$out" | grep -qxF "ssh=$SSHKEY"
ok "3. its SSH key is at \$GP_SSH_AUTHORIZED_KEYS" $?
echo "$out" | grep -qxF "ckpt=$CKPT"
ok "3. its checkpoint credentials at \$GP_CHECKPOINT_CREDENTIALS" $?
[ "$(echo "$out" | grep -c '^perm=-rw------- 0 ')" = 2 ]
rc_=$?; ok "3. both are the container root's only, 0600 ($(echo "$out" | grep '^perm=' | tr '\n' ' '))" $rc_
echo "$out" | grep -qx 'regenv=0'
ok "3. the registry credential is nowhere in its environment" $?
[ -z "$(find "$ST" -name auth.json 2>/dev/null)" ] && [ ! -e "$ST/pull/gp-$j2-1" ]
ok "2. no authfile is left in the agent's state after the pull" $?
[ -z "$(find "$ST/reports" -name ssh_authorized_keys -o -name checkpoint_credentials 2>/dev/null)" ]
ok "3. after the end neither file is left on the node" $?
! grep -qF -e "$PW" -e "$(printf 'robot:%s' "$PW" | base64 -w0)" "$D/agent-n1.log"
ok "2. the agent never logged the credential (nor its base64)" $?
j3=$(submit --image "$IMG" --command 'echo json-ok' --gpus 1 --max-attempts 1 --registry-auth reg-json)
wait_sql "SELECT state FROM jobs WHERE id = '$j3'" succeeded 150 && out_of "$j3" | grep -qx json-ok
ok "2. a docker config JSON secret pulls too" $?
# the node's cached copy of a private image (pulled with a credential) is
# not the next job's without one: by its digest, it runs only once the
# registry has let that job's own credential read the manifest
dig=$(sql "SELECT image_digest FROM jobs WHERE id = '$j2'")
IMGD="${IMG%:*}@$dig"
j5=$(submit --image "$IMGD" --command 'echo cached' --gpus 1 --max-attempts 1)
wait_sql "SELECT state FROM jobs WHERE id = '$j5'" failed 150
r5=$(sql "SELECT reason FROM attempts WHERE job_id = '$j5' AND attempt = 1")
echo "$r5" | grep -q "refused this attempt's credential for a private image"
rc_=$?; ok "2. the cached private image by digest without a credential: refused ($(echo "$r5" | cut -c1-160))" $rc_
j6=$(submit --image "$IMGD" --command 'echo cached-ok' --gpus 1 --max-attempts 1 --registry-auth reg)
wait_sql "SELECT state FROM jobs WHERE id = '$j6'" succeeded 150 && out_of "$j6" | grep -qx cached-ok
ok "2. ... with the credential it runs from the cache" $?

# ---- 4. a secret deleted while its job waits ------------------------------------------------

$G cordon node n1 >/dev/null
j4=$(submit --image "$IMG" --command true --gpus 1 --max-attempts 1 --registry-auth reg-doomed)
sleep 1
[ "$(jstate "$j4")" = pending ]
ok "4. a job naming reg-doomed waits (the node is cordoned)" $?
$G delete secret reg-doomed --tenant acme >/dev/null
ok "4. its secret is deleted meanwhile" $?
$G uncordon node n1 >/dev/null
wait_sql "SELECT state FROM jobs WHERE id = '$j4'" failed 150
ok "4. once placed, it fails to start (max_attempts 1: its own failure)" $?
r4=$(sql "SELECT reason FROM attempts WHERE job_id = '$j4'")
echo "$r4" | grep -q "registry_auth: the tenant's secret 'reg-doomed' no longer exists"
ok "4. the reason names the secret ($r4)" $?

# ---- 5. logs ---------------------------------------------------------------------------------

! grep -rqF -e "$PW" -e "sshcanary$$" -e "ckptcanary" -e "$(head -1 "$D/secret.key")" \
    "$D"/*.log "$D/pg/pg.log" 2>/dev/null
ok "5. no secret, no password and no key in any log (services at debug, PostgreSQL)" $?

tap_end
