#!/usr/bin/env bash
# ctr_bench.sh -- container start latency, image cached (make bench, run by
# tests/bench/run.sh inside its private stack; key=value lines on stdout,
# notes on stderr).
#
# One gridpool-agent (simulated GPUs, real runc, skopeo, umoci) and a test
# image (busybox-static) in a real registry (docker-registry).  A first
# attempt pulls the image by its tag; then N attempts of `true` by the
# digest it pulled (as the scheduler sends every later attempt of a job:
# the cache answers, no registry is asked), each sent as a
# RunAttempt straight to the agent's cmd.run (no scheduler) by a client on
# the same host, one at a time.  Measured per attempt, on the client's
# monotonic clock: send -> the agent's `exited` event (pull check, bundle,
# config.json, `runc run`, the container's `true`, its delete, the event).
# The reference, in the same run on the same machine, by hand with the same
# tools: a network namespace and the CNI ptp plugin's ADD, `runc run` of a
# bundle like the agent's (same image rootfs, user namespace, seccomp,
# limits), the plugin's DEL and the namespace's delete, N times.  The ratio is gridpool's p50 over runc's p50.
set -u
B=$GP_BUILD
D=$(mktemp -d /tmp/gp-ctr.XXXXXX)
N=${GP_BENCH_CTR_N:-40}
PY=/usr/bin/python3
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$D"
}
trap cleanup EXIT
# shellcheck source=tests/lib/lib.sh
HARNESS_NAME=ctr_bench . "$(dirname "$0")/../lib/lib.sh"
# shellcheck source=tests/lib/oci.sh
. "$(dirname "$0")/../lib/oci.sh"
for t in runc skopeo umoci docker-registry; do
    command -v "$t" >/dev/null || { echo "ctr_bench: $t missing (make deps)" >&2; exit 1; }
done
chmod 0711 "$D"
GP_STACK_DIR=$D
spawn() { local n=$1; shift; "$@" >"$D/$n.log" 2>&1 </dev/null & pids+=($!); }
oci_image "$B/test-image" && oci_registry && oci_push "$B/test-image" bench/busybox:1 ||
    { echo "ctr_bench: no test image or registry" >&2; exit 1; }
port=${GP_NATS_URL##*:}
spawn agent "$B/bin/gridpool-agent" --site cb --node n1 --gpu-backend sim --sim-gpus 1 \
    --nats-url "$GP_NATS_URL" --http-port 0 --state-dir "$D/state" --runtime-root "$D/runtime" \
    --seccomp-profile "$B/seccomp.json" --insecure-registries "$OCI_REG" --default-memory-mb 256
for _ in $(seq 1 100); do grep -q containers_ready "$D/agent.log" && break; sleep 0.1; done
grep -q containers_ready "$D/agent.log" || { echo "ctr_bench: agent not ready" >&2; cat "$D/agent.log" >&2; exit 1; }

# The client: raw NATS protocol, msgpack bodies.  Prints one latency (ms)
# per attempt after the first (the pull), then the bundle it kept.
$PY - "$port" "$OCI_REG/bench/busybox:1" "$N" >"$D/lat.txt" 2>"$D/client.err" <<'PY'
import msgpack, socket, sys, time
port, image, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
c = socket.create_connection(("127.0.0.1", port), timeout=60)
c.recv(4096)
c.sendall(b'CONNECT {"verbose":false,"pedantic":false}\r\nSUB gp.node.cb.n1.attempt 1\r\nSUB _INBOX.ctr.> 2\r\nPING\r\n')
buf = b""
def frames():
    global buf
    while True:
        while b"\r\n" not in buf:
            buf += c.recv(65536)
        line, rest = buf.split(b"\r\n", 1)
        if line.startswith(b"MSG"):
            parts = line.split()
            size = int(parts[-1])
            while len(rest) < size + 2:
                rest += c.recv(65536)
            body, buf = rest[:size], rest[size + 2:]
            yield parts[1].decode(), parts[3].decode() if len(parts) == 5 else None, body
        else:
            buf = rest
            if line == b"PING":
                c.sendall(b"PONG\r\n")
it = frames()
seq = 0
digest = None
def run(job, ref):
    global digest
    body = msgpack.packb({"job_id": job, "attempt": 1, "command": "true", "image": ref,
                          "gpus": [0], "lease_ms": 60000})
    t0 = time.monotonic()
    c.sendall(b"PUB gp.node.cb.n1.cmd.run _INBOX.ctr.%s %d\r\n" % (job.encode(), len(body)) + body + b"\r\n")
    for subj, reply, b in it:
        if subj != "gp.node.cb.n1.attempt":
            continue
        ev = msgpack.unpackb(b, raw=False)
        if reply:   # the agent waits for the stream's PubAck: answer as JetStream would
            global seq
            seq += 1
            ack = b'{"stream":"ATTEMPTS","seq":%d}' % seq
            c.sendall(b"PUB %s %d\r\n%s\r\n" % (reply.encode(), len(ack), ack))
        if ev.get("job_id") == job and ev.get("event") == "started":
            digest = ev.get("image_digest")
        if ev.get("job_id") == job and ev.get("event") in ("exited", "failed_to_start"):
            if ev["event"] != "exited" or ev.get("exit_code", 0) != 0:
                sys.exit("attempt %s: %s" % (job, ev))
            return (time.monotonic() - t0) * 1000
run("cb-pull", image)
# pinned, as the scheduler sends every attempt after a job's first: no registry
pinned = image.rsplit(":", 1)[0] + "@" + digest
for i in range(n):
    print("%.3f" % run("cb-%d" % i, pinned), flush=True)
PY
rc=$?
[ $rc -eq 0 ] || { echo "ctr_bench: client failed: $(tail -3 "$D/client.err")" >&2; exit 1; }

# The reference: the agent's own config of the same image, run by hand.
cfgdir=$D/ref
mkdir -p "$cfgdir"
img=$(ls -d "$D"/state/images/*/ | head -n 1)
$PY - "$img" "$cfgdir/config.json" "$B/seccomp.json" "$$" <<'PY'
import json, sys
img, out, sec = sys.argv[1:4]
# what the agent writes (ocispec.c), for `true`, without the GPU and the checkpoint folder
c = {"ociVersion": "1.0.2",
     "process": {"terminal": False, "user": {"uid": 0, "gid": 0}, "args": ["true"],
                 "env": ["PATH=/bin"], "cwd": "/", "noNewPrivileges": True,
                 "capabilities": {k: [] for k in ("bounding", "effective", "inheritable", "permitted", "ambient")}},
     "root": {"path": img.rstrip("/") + "/rootfs", "readonly": True}, "hostname": "ref",
     "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"},
                {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "mode=755", "size=65536k"]},
                {"destination": "/sys", "type": "bind", "source": "/sys", "options": ["rbind", "ro", "nosuid", "noexec", "nodev"]},
                {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["size=16384k"]},
                {"destination": "/scratch", "type": "tmpfs", "source": "tmpfs", "options": ["size=16384k"]}],
     "linux": {"uidMappings": [{"containerID": 0, "hostID": 1879048192 + 63 * 65536, "size": 65536}],
               "gidMappings": [{"containerID": 0, "hostID": 1879048192 + 63 * 65536, "size": 65536}],
               "namespaces": [{"type": t} for t in ("pid", "ipc", "uts", "mount", "user", "cgroup")] +
                             [{"type": "network", "path": "/run/netns/ctrref" + sys.argv[4]}],
               "cgroupsPath": "/gridpool-bench/ref",
               "resources": {"memory": {"limit": 268435456}, "pids": {"limit": 4096},
                             "devices": [{"allow": False, "access": "rwm"}]},
               "seccomp": json.load(open(sec))}}
json.dump(c, open(out, "w"))
PY
# the same network by hand: a namespace, the ptp plugin's ADD and DEL
cat >"$D/ref-cni.json" <<CNI
{"cniVersion":"1.0.0","name":"gridpool-ref","type":"ptp","ipMasq":true,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.88.0.0/16"}]],"routes":[{"dst":"0.0.0.0/0"}],"dataDir":"$D/ref-ipam"}}
CNI
cni() { CNI_COMMAND=$1 CNI_CONTAINERID=$2 CNI_NETNS=/run/netns/$2 CNI_IFNAME=eth0 CNI_PATH=/usr/lib/cni \
        /usr/lib/cni/ptp <"$D/ref-cni.json" >/dev/null; }
for i in $(seq 1 "$N"); do
    s=$(date +%s%N)
    ip netns add "ctrref$$" && cni ADD "ctrref$$" &&
        runc --root "$D/runtime-ref" run --bundle "$cfgdir" "ref-$i" >/dev/null 2>>"$D/ref.err" ||
        { echo "ctr_bench: runc run by hand failed: $(tail -2 "$D/ref.err")" >&2; exit 1; }
    e=$(date +%s%N)            # the agent's exited event also comes before its teardown
    cni DEL "ctrref$$" && ip netns delete "ctrref$$"
    awk -v a="$s" -v b="$e" 'BEGIN { printf "%.3f\n", (b - a) / 1e6 }'
done >"$D/ref.txt"

pct() { sort -n "$1" | awk -v p="$2" '{ v[NR] = $1 } END { i = int((NR - 1) * p + 0.5) + 1; print v[i] }'; }
echo "ctr_n=$N"
echo "ctr_p50_ms=$(pct "$D/lat.txt" 0.50)"
echo "ctr_p99_ms=$(pct "$D/lat.txt" 0.99)"
echo "ctr_runc_p50_ms=$(pct "$D/ref.txt" 0.50)"
echo "ctr_runc_p99_ms=$(pct "$D/ref.txt" 0.99)"
echo "ctr_ratio=$(awk -v a="$(pct "$D/lat.txt" 0.50)" -v b="$(pct "$D/ref.txt" 0.50)" 'BEGIN { printf "%.3f", a / b }')"
echo "ctr_bench: $N attempts; agent lat (ms): $(sort -n "$D/lat.txt" | tr '\n' ' ')" >&2
echo "ctr_bench: runc by hand (ms): $(sort -n "$D/ref.txt" | tr '\n' ' ')" >&2
