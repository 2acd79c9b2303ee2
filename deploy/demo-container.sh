#!/usr/bin/env bash
# deploy/demo-container.sh BUILD RUN -- part of `make demo`: one real node
# agent beside the simulated fleet, on a site of its own (demo-local), that
# runs workloads as OCI containers (runc, skopeo, umoci), from an image built
# here from Debian's busybox-static and pushed to a local registry
# (docker-registry); then a container job of tenant acme on it, and its
# output through `gpctl logs`.  Everything it starts has a pid file under
# RUN/pids (make down stops it).  Skipped, with the reason, where a tool is
# missing or not root.
set -u
build=$1
run=$2
top=$(cd "$(dirname "$0")/.." && pwd)
gpctl=$build/bin/gpctl
for t in runc skopeo umoci docker-registry ip iptables; do
    command -v "$t" >/dev/null || { echo "(no $t: make deps installs it; the container demo is skipped)"; exit 0; }
done
[ -x /bin/busybox ] || { echo "(no busybox-static: the container demo is skipped)"; exit 0; }
[ "$(id -u)" = 0 ] || { echo "(not root: the agent maps id ranges; the container demo is skipped)"; exit 0; }
GP_STACK_DIR=$run
D=$run
HARNESS_NAME=demo
# shellcheck source=tests/lib/lib.sh
. "$top/tests/lib/lib.sh"
# shellcheck source=tests/lib/oci.sh
. "$top/tests/lib/oci.sh"
chmod 0711 "$run"
oci_image "$build/test-image" && oci_registry && oci_push "$build/test-image" demo/busybox:1 ||
    { echo "(the image or the registry did not come up: the container demo is skipped)"; exit 0; }
echo "   image $OCI_REG/demo/busybox:1 (busybox-static, built by umoci, pushed by skopeo)"
"$gpctl" create site demo-local --tenant op --region eu-central --lat 52.52 --lon 13.40 >/dev/null 2>&1
"$gpctl" create pool p-acme-local --tenant acme --scope site --site demo-local >/dev/null 2>&1
creds=
if [ -d "$run/auth" ]; then                      # its own NATS identity: gp.node.demo-local.gpu1.> only
    "$top/deploy/nats-auth" node "$run/auth" demo-local gpu1 >/dev/null &&
        "$top/tests/harness/stack.sh" reload-nats "$run" && creds=$run/auth/node-demo-local-gpu1.env
fi
# 8 simulated GPUs: the seeded workload places sim: jobs on any node with
# room, this one included, and the container job needs one GPU left
spawn agent-demo-local "$build/bin/gridpool-agent" --config "$run/gp.env" ${creds:+--credentials "$creds"} \
    --site demo-local --node gpu1 --gpu-backend sim --sim-gpus 8 --sim-model L4 --http-port 0 \
    --state-dir "$run/agent-state" --runtime-root "$run/agent-runtime" \
    --seccomp-profile "$build/seccomp.json" --insecure-registries "$OCI_REG" \
    --container-net 10.88.0.0/16
for _ in $(seq 1 100); do grep -q agent_registered "$run/agent-demo-local.log" && break; sleep 0.1; done
grep -q containers_ready "$run/agent-demo-local.log" &&
    echo "   node gpu1 at site demo-local: a real agent, containers ready ($run/agent-demo-local.log)"
# the scheduler learns the new pool from the registry's feed: a moment
job=
for _ in $(seq 1 50); do
    job=$("$gpctl" submit --tenant acme --pool p-acme-local --gpus 1 --image "$OCI_REG/demo/busybox:1" \
          --command 'echo "hello from a container: uid $(id -u) in its own user namespace, GPUs $GP_GPUS"; for i in 1 2 3; do echo "step $i"; sleep 1; done' \
          --memory 256 -o json 2>/dev/null | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])' 2>/dev/null) &&
        [ -n "$job" ] && break
    sleep 0.2
done
[ -n "$job" ] || { echo "(the container job was not accepted: see gpctl submit)"; exit 0; }
# placed once the scheduler sees the new node healthy, then pulled and run:
# seconds, more on a loaded machine
for _ in $(seq 1 120); do
    st=$("$gpctl" describe job "$job" --tenant acme -o json 2>/dev/null |
         /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["state"])' 2>/dev/null)
    case "$st" in succeeded|failed|cancelled) break ;; esac
    sleep 0.5
done
echo "   job $job: ${st:-?}; gpctl logs $job --tenant acme:"
[ "$st" = succeeded ] || "$gpctl" describe job "$job" --tenant acme 2>&1 | grep -i 'reason\|wait\|state' | head -4 | sed 's/^/     /'
"$gpctl" logs "$job" --tenant acme | sed 's/^/     | /'

# A GPU instance: runs until it is stopped, its port 8080 exposed on the
# node's address (the endpoint: a host port the agent picked).
inst=$("$gpctl" submit --tenant acme --pool p-acme-local --kind instance --gpus 1 \
       --image "$OCI_REG/demo/busybox:1" --port http:8080 --memory 256 \
       --command 'echo "hello from instance $GP_JOB_ID, attempt $GP_ATTEMPT" >/scratch/index.html; exec httpd -f -p 8080 -h /scratch' \
       -o json 2>/dev/null | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])' 2>/dev/null)
[ -n "$inst" ] || { echo "(the instance was not accepted: see gpctl submit)"; exit 0; }
ep=
for _ in $(seq 1 120); do
    ep=$("$gpctl" describe job "$inst" --tenant acme 2>/dev/null | sed -n 's/^Endpoints: *http=\([^ ]*\)\/tcp (attempt [0-9]*, running)$/\1/p')
    [ -n "$ep" ] && break
    sleep 0.5
done
if [ -n "$ep" ]; then
    echo "   instance $inst: running, endpoint http=$ep (gpctl describe job $inst --tenant acme)"
    for _ in $(seq 1 20); do out=$(curl -s --max-time 2 "http://$ep/index.html") && [ -n "$out" ] && break; sleep 0.3; done
    echo "     | curl http://$ep/index.html: ${out:-(no answer)}"
    echo "   stop it: gpctl cancel job $inst --tenant acme"
else
    echo "   instance $inst: not running yet:"
    "$gpctl" describe job "$inst" --tenant acme 2>&1 | grep -i 'reason\|wait\|state' | head -4 | sed 's/^/     /'
fi
