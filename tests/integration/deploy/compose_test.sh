#!/usr/bin/env bash
# compose_test.sh -- docker-compose.yml, validated and run (under podman:
# these machines have no Docker daemon and reach no image registry):
#
#   1. `docker-compose config` passes (and fails on a planted bad key), and
#      every published port is bound to 127.0.0.1;
#   2. the images the file names are assembled from the built programs and
#      this machine's engines (deploy/compose/images.sh);
#   3. deploy/compose/podman-compose.py runs the file with the profile demo:
#      NATS with JetStream and authorization on, Redis, PostgreSQL on a
#      volume, the six services, the 10-site simulated fleet with its
#      workload; every container healthy by its own health check; each
#      service with tables migrated by its one-shot and logged in to
#      PostgreSQL as its own role, with its password (scram);
#   4. a job submitted through the stack (gpctl, the operator's identity)
#      is placed, runs on the simulated fleet and is billed (its usage in
#      PostgreSQL with a charge, and its ledger transfers);
#   5. a service that crashes is started again by its restart policy;
#   6. down -v leaves no container, network or volume.
# Needs root, podman, runc and docker-compose (make deps); it does not use
# the private stack with-stack.sh starts.
# test-tags: pass=normal (tests/run.sh)
set -u
B=$GP_BUILD
TOP=$(cd "$(dirname "$0")/../../.." && pwd)
# shellcheck source=tests/lib/lib.sh
. "$(dirname "$0")/../../lib/lib.sh"

if [ "$(id -u)" != 0 ] || ! command -v podman >/dev/null || ! command -v docker-compose >/dev/null ||
    ! command -v runc >/dev/null; then
    echo "1..0 # SKIP needs root, podman, runc and docker-compose (make deps)"
    exit 0
fi
cd "$TOP" || exit 1
P=gpct$$                                    # the compose project
export CONTAINERS_CONF=$TOP/deploy/compose/podman.conf
export CONTAINERS_STORAGE_CONF=$tmp/storage.conf
mkdir -p "$B/podman"
cat >"$CONTAINERS_STORAGE_CONF" <<CONF
[storage]
driver = "overlay"
graphroot = "$B/podman/root"
runroot = "$tmp/runroot"
CONF
PC="python3 $TOP/deploy/compose/podman-compose.py -p $P"
cleanup() {
    $PC down -v >/dev/null 2>&1
}
on_fail() {
    $PC ps 2>&1 | sed 's/^/#   /'
    for c in registry scheduler billing sim; do
        echo "# $c:"; podman logs --tail 6 "${P}_${c}_1" 2>&1 | cut -c1-250 | sed 's/^/#   /'
    done
}
tap_on_fail=on_fail
testlib_at_exit cleanup

# ---- 1. the file ------------------------------------------------------------------------
bash deploy/compose/init.sh >/dev/null
docker-compose --profile demo config -q
rc_=$?; ok "docker-compose config: the file is valid ($(docker-compose --profile demo config --services | wc -l) services)" $rc_
sed 's/^    restart: unless-stopped$/    restart: unless-stopped\n    bogus_key: 1/' docker-compose.yml >"$tmp/bad.yml"
docker-compose --project-directory . -f "$tmp/bad.yml" config -q >"$tmp/bad.out" 2>&1
st_=$?
[ $st_ -ne 0 ] && grep -q "bogus_key" "$tmp/bad.out"
rc_=$?; ok "... and a planted bad key fails it ($(head -n 1 "$tmp/bad.out" | cut -c1-100))" $rc_
# Every published port is bound to the host's loopback only (issue 26): NATS,
# its monitor and the services' /metrics are not for the host's networks.
docker-compose --profile demo config 2>/dev/null | python3 -c '
import sys, yaml
bad, n = [], 0
for name, svc in (yaml.safe_load(sys.stdin).get("services") or {}).items():
    for p in svc.get("ports") or []:
        n += 1
        ip = p.get("host_ip") if isinstance(p, dict) else (p.split(":")[0] if p.count(":") == 2 else "")
        if ip != "127.0.0.1":
            bad.append("%s %s" % (name, p))
print("%d ports, not on 127.0.0.1: %s" % (n, ", ".join(bad) or "none"))
sys.exit(1 if bad or n == 0 else 0)' >"$tmp/ports.out"
rc_=$?; ok "published ports on 127.0.0.1 only ($(cat "$tmp/ports.out"))" $rc_

# ---- 2. the images ------------------------------------------------------------------------
imgs=$(bash deploy/compose/images.sh "$B" 2>"$tmp/images.err" | tr '\n' ' ')
st_=$?
ok "images assembled: $imgs" $st_

# ---- 3. up --------------------------------------------------------------------------------
t0=$(date +%s)
$PC --profile demo up --no-publish >"$tmp/up.out" 2>&1
st_=$?
[ $st_ -eq 0 ] || sed 's/^/#   /' "$tmp/up.out"
ok "podman-compose up --profile demo: $(grep -c '^started' "$tmp/up.out") containers started in $(( $(date +%s) - t0 )) s" $st_
$PC ps >"$tmp/ps.out" 2>&1
st_=$?
sed 's/^/#   /' "$tmp/ps.out"
# podman-compose ps: "NAME  Up  healthy" (podman's own ps says running);
# its exit status is not the check (it printed and counted ten healthy)
n_=$(grep -cE '[[:space:]](running|Up)[[:space:]]+healthy$' "$tmp/ps.out")
[ "$n_" -eq 10 ]
ok "every container running and healthy by its own check ($n_ of 10; ps exited $st_)" $?
pgq() { PGPASSWORD=gridpool psql -h 172.28.0.12 -U postgres -d gridpool -Atc "$1" 2>/dev/null; }
n_=$(grep -cE -- '-migrate_1 +completed' "$tmp/ps.out")
logins=$(pgq "SELECT string_agg(DISTINCT a.usename || CASE WHEN r.rolsuper THEN '(superuser)' ELSE ''
              END, ' ' ORDER BY a.usename || CASE WHEN r.rolsuper THEN '(superuser)' ELSE '' END)
              FROM pg_stat_activity a JOIN pg_roles r ON r.rolname = a.usename
              WHERE a.application_name LIKE 'gridpool-%'")
[ "$n_" -eq 6 ] &&
    [ "$logins" = "gridpool_alerting gridpool_billing gridpool_metering gridpool_recovery gridpool_registry gridpool_scheduler" ]
ok "6 migrate one-shots completed; the services log in to PostgreSQL as their own roles, with passwords: $logins" $?

# ---- 4. a job placed, run and billed --------------------------------------------------------
sed "s|^GP_NATS_URL=.*|GP_NATS_URL=nats://172.28.0.10:4222|" build/compose/gpctl.env >"$tmp/gpctl.env"
G="$B/bin/gpctl --env-file $tmp/gpctl.env --timeout 10000"
for _ in $(seq 1 100); do
    [ "$($G summary 2>/dev/null | awk '/^Nodes:/ { print $2 }')" = 25 ] && break
    sleep 0.3
done
$G summary >"$tmp/summary.out" 2>&1
grep -q '^Sites: *10$' "$tmp/summary.out" && grep -q '^Nodes: *25 *(healthy 25' "$tmp/summary.out"
ok "gpctl through the stack: 10 sites, 25 nodes healthy (the fleet registered)" $?
sed 's/^/#   /' "$tmp/summary.out"
job=$($G submit --tenant acme --name compose-check --command 'sim:run=3s exit=0' --gpus 1 \
      --product global-rtx4090 --priority 1000 -o json 2>"$tmp/submit.err" |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
for _ in $(seq 1 150); do
    [ "$($G describe job "$job" -o json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])' 2>/dev/null)" = succeeded ] && break
    sleep 0.4
done
state=$($G describe job "$job" -o json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])' 2>/dev/null)
where=$($G get attempts "$job" -o json 2>/dev/null | python3 -c '
import json, sys
a = json.load(sys.stdin)
a = a.get("items", a) if isinstance(a, dict) else a
print(" ".join("attempt %s on %s %s" % (x["attempt"], x["node"], x["state"]) for x in a))' 2>/dev/null)
[ "$state" = succeeded ]
ok "job $job (tenant acme, 1 RTX 4090 for 3 s, through gp.api) placed, run: $state ($where)" $?
for _ in $(seq 1 100); do
    [ "$(pgq "SELECT count(*) FROM usage_records WHERE job_id = '$job' AND final")" = 1 ] && break
    sleep 0.5
done
bill=$(pgq "SELECT sum(gpu_ms) || ' GPU-ms at ' || min(price_micros_per_gpu_hour) || ' micro-' ||
            min(currency) || '/GPU-h: ' || sum(charge_minor) || ' minor units + ' ||
            sum(charge_residue_nanos) || ' nano-units carried' ||
            ', ' || (SELECT count(*) FROM ledger_transfers t WHERE t.record_id IN
                     (SELECT id FROM usage_records WHERE job_id = '$job')) || ' ledger transfers'
            FROM usage_records WHERE job_id = '$job'")
gms=$(pgq "SELECT coalesce(sum(gpu_ms), 0) FROM usage_records WHERE job_id = '$job'")
tr=$(pgq "SELECT count(*) FROM ledger_transfers WHERE record_id IN (SELECT id FROM usage_records WHERE job_id = '$job')")
[ "${gms:-0}" -ge 2500 ] && [ "${tr:-0}" -ge 1 ]
ok "... and billed: $bill" $?

# ---- 5. the restart policy ---------------------------------------------------------------------
kill -9 "$(podman inspect -f '{{.State.Pid}}' "${P}_registry_1")"     # a crash
for _ in $(seq 1 60); do
    [ "$(podman inspect -f '{{.State.Running}} {{.RestartCount}}' "${P}_registry_1" 2>/dev/null)" = "true 1" ] &&
        podman healthcheck run "${P}_registry_1" >/dev/null 2>&1 && break
    sleep 0.5
done
st=$(podman inspect -f '{{.State.Running}} {{.RestartCount}}' "${P}_registry_1" 2>/dev/null)
podman healthcheck run "${P}_registry_1" >/dev/null 2>&1
st_=$?
[ $st_ -eq 0 ] && [ "$st" = "true 1" ]
ok "the registry crashes (kill -9): restart: unless-stopped starts it again, healthy (running, restarts: $st)" $?

# ---- 6. down ------------------------------------------------------------------------------------
$PC down -v >/dev/null 2>&1
left="$(podman ps -aq --filter "label=gridpool.compose.project=$P" | wc -l) containers,"
left="$left $(podman network ls -q --filter "label=gridpool.compose.project=$P" | wc -l) networks,"
left="$left $(podman volume ls -q --filter "label=gridpool.compose.project=$P" | wc -l) volumes"
[ "$left" = "0 containers, 0 networks, 0 volumes" ]
ok "down -v: $left left" $?
tap_end
