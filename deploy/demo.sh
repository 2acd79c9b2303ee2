#!/usr/bin/env bash
# deploy/demo.sh BUILD -- after `make up`: every service's health, then a
# simulated 1,000-site EV-charging network (about 3,000 nodes) registering
# and heartbeating, and a seeded workload of jobs (deploy/workload-example.conf,
# submitted through gp.api like an integrator's) placed and run on it, shown
# through gpctl.
set -eu
build=$1
top=$(cd "$(dirname "$0")/.." && pwd)
case "$build" in /*) ;; *) build=$top/$build ;; esac
run=${GP_RUN_DIR:-$top/build/run}
# The private stack's own settings come from its files; settings of some
# other stack in the environment (which would win over a file) must not.
unset GP_NATS_URL GP_NATS_USER GP_NATS_PASSWORD GP_NATS_TOKEN GP_TENANT \
    GP_REDIS_HOST GP_REDIS_PORT GP_PG_CONNINFO GP_CONFIG
gpctl=$build/bin/gpctl
sites=${GP_DEMO_SITES:-1000}
export GP_ENV_FILE=$run/gp.env

echo "== health"
for i in $(seq 1 50); do
    "$gpctl" health >/dev/null 2>&1 && break
    sleep 0.2
done
"$gpctl" health

echo
if [ -f "$run/pids/sim.pid" ] && kill -0 "$(cat "$run/pids/sim.pid")" 2>/dev/null; then
    echo "== the simulated fleet is already running (build/run/logs/sim.log)"
else
    echo "== starting the simulated fleet: $sites sites (build/run/logs/sim.log)"
    (
        # the simulator's own NATS identity (deploy/nats-auth), when up.sh made one
        set -a
        # shellcheck disable=SC1091
        [ -f "$run/auth/sim.env" ] && . "$run/auth/sim.env"
        set +a
        exec "$build/bin/gridpool-sim" --config "$run/gp.env" --http-port 0 --sites "$sites" --seed 42 \
            --inventory-out "$run/inventory.json" --workload "${GP_DEMO_WORKLOAD:-$top/deploy/workload-example.conf}" \
            --truth "$run/truth.jsonl" >"$run/logs/sim.log" 2>&1 </dev/null
    ) &
    echo $! >"$run/pids/sim.pid"
    for i in $(seq 1 600); do
        grep -q '^sim: registered' "$run/logs/sim.log" && break
        kill -0 "$(cat "$run/pids/sim.pid")" 2>/dev/null || { echo "the simulator stopped:"; tail "$run/logs/sim.log"; exit 1; }
        sleep 0.5
    done
fi
grep '^sim: registered' "$run/logs/sim.log" || echo "(the fleet is still registering)"

# One NATS identity per tenant the fleet was seeded with (deploy/nats-auth):
# each may use only gp.api.<tenant>.> and its own events.
if [ -d "$run/auth" ]; then
    tenants=$("$gpctl" get tenants -o json | sed -n 's/.*"id":"\([^"]*\)".*/\1/p' | tr '\n' ' ')
    if [ -n "$tenants" ]; then
        # shellcheck disable=SC2086
        "$top/deploy/nats-auth" tenant "$run/auth" $tenants
        "$top/tests/harness/stack.sh" reload-nats "$run"
        echo
        echo "== NATS identities: the operator (gp.env), every service, the simulator, and the tenants:"
        echo "   $tenants(build/run/auth/tenant-<id>.env)"
    fi
fi

echo
echo "== the workload: jobs submitted at 5/s, placed and run (a few seconds in)"
sleep 5
"$gpctl" get jobs --state running 2>/dev/null | head -8 || true

echo
echo "== a real node beside the fleet: jobs as OCI containers (deploy/demo-container.sh)"
"$top/deploy/demo-container.sh" "$build" "$run"

echo
echo "== the fleet as one pool"
"$gpctl" summary
cat <<TXT

gridpool is up; the fleet keeps heartbeating.  Try:
  export GP_ENV_FILE=$run/gp.env
  $build/bin/gpctl get sites --region eu-central
  $build/bin/gpctl get nodes --state healthy -o wide | head
  $build/bin/gpctl describe node \$($build/bin/gpctl get nodes -o json | head -2 | tail -1 | sed 's/.*"id":"\\([^"]*\\)".*/\\1/')
  $build/bin/gpctl get gpus --model H100
  $build/bin/gpctl get pools
  $build/bin/gpctl get jobs --state pending            # each with why it waits
  $build/bin/gpctl describe job \$($build/bin/gpctl get jobs -o json | head -2 | tail -1 | sed 's/.*"id":"\\([^"]*\\)".*/\\1/')
  $build/bin/gpctl watch jobs                          # live job events until Ctrl-C
  $build/bin/gpctl submit --tenant acme --command 'sim:run=60s' --gpus 2 --model L4
  $build/bin/gpctl submit --tenant acme --pool p-acme-local --gpus 1 --command 'uname -a; id' \\
      --image \$(grep -o '127.0.0.1:[0-9]*' $run/registry.yml)/demo/busybox:1   # a container on the real node
  $build/bin/gpctl logs JOB --tenant acme --follow      # a container job's output, from its node
  $build/bin/gpctl get usage --tenant acme             # metered GPU time, rated (after the first minute's window)
  $build/bin/gpctl get balances --tenant fr-voltis     # a site partner's revenue share, in its payable account
  $build/bin/gpctl close period \$(date -u +%Y-%m) --tenant acme   # an immutable statement
  $build/bin/gpctl get prices                          # the price book; gpctl set price adds a version
  $build/bin/gpctl watch alerts                        # alerts as they fire and resolve, until Ctrl-C; in another shell:
  $build/bin/gpctl fault site_power_cut --site s0001 --duration-ms 60000   # one SiteUnreachable (after 30 s), resolved as power
  $build/bin/gridpool-alerting --check-config | tail -6   # the alert rules in force
  $build/bin/gpctl --env-file $run/auth/tenant-<T>.env get usage --tenant <T>
                                                       # a tenant's own view; another's is refused
  curl -s http://127.0.0.1:\$(grep -o 'http_port=[0-9]*' build/run/logs/registry.log | head -1 | cut -d= -f2)/metrics | grep gp_registry
'make down' stops everything.
TXT
