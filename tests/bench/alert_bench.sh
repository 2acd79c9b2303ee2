#!/usr/bin/env bash
# alert_bench.sh -- fault injected -> alert published, and the cost of the
# telemetry rules per heartbeat, on the 1,000-site simulated fleet (make
# bench, run by tests/bench/run.sh inside its private stack; figures as
# key=value lines on stdout, notes on stderr).
#
# Services at their defaults (5 s heartbeats, the shipped rules), with
# registry, scheduler, recovery, alerting and the sim.
#
#   1. Cost: over a quiet minute, gridpool-alerting's CPU time (utime +
#      stime, /proc) per heartbeat it evaluated (gp_alerting_beats_total),
#      next to gridpool-registry's CPU time per heartbeat it recorded in the
#      same minute (the work every beat costs anyway).
#   2. Latency: faults injected through the sim, each on its own site:
#      GPU_FAULTS gpu_lost (XID 79: GpuFallenOffBus, 0 s for), NODE_FAULTS
#      node_crash (NodeDown, 20 s for), SITE_FAULTS site_power_cut
#      (SiteUnreachable, 30 s for).  For each: from the moment the bench
#      asked the sim (its clock) to the moment a `gpctl watch alerts`
#      subscriber received the firing alert (same host).  The reference,
#      from the alert itself: starts_ms, when alerting learned the
#      condition (the fleet's detection: the next heartbeat, the detector,
#      recovery's site window); the rest, minus the rule's for-duration, is
#      alerting's own share (evaluation, the outbox, the publish).
set -u
B=$GP_BUILD
D=$(mktemp -d /tmp/gp-alert.XXXXXX)
G="$B/bin/gpctl --timeout 30000 --env-file $GP_STACK_DIR/gp.env"
PY=/usr/bin/python3
SITES=${GP_BENCH_ALERT_SITES:-1000}
GPU_FAULTS=${GP_BENCH_ALERT_GPU:-200}
NODE_FAULTS=${GP_BENCH_ALERT_NODE:-100}
SITE_FAULTS=${GP_BENCH_ALERT_SITE:-20}
COST_S=${GP_BENCH_ALERT_COST_S:-60}
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    [ -n "${GP_BENCH_KEEP:-}" ] && cp -r "$D" "$GP_BENCH_KEEP"
    rm -rf "$D"
}
trap cleanup EXIT
note() { echo "alert: $*" >&2; }
sql() { psql "$GP_PG_CONNINFO" -XAtq -c "$1" 2>>"$D/psql.err"; }
start() { local name=$1; shift; "$@" >"$D/$name.log" 2>&1 </dev/null & pids+=($!); echo $! >"$D/$name.pid"; }
fail() { note "$*"; for f in "$D"/*.log; do note "--- $f"; tail -n 5 "$f" >&2; done; exit 1; }
now() { date +%s%3N; }
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$(cat "$D/$1.pid")/stat"; }
metric() {    # service, metric name
    local port
    port=$(grep -o 'http_port=[0-9]*' "$D/$1.log" | head -1 | cut -d= -f2)
    curl -s "http://127.0.0.1:$port/metrics" | awk -v p="$2" '$1 == p { s += $NF } END { print s + 0 }'
}

start registry "$B/bin/gridpool-registry" --config "$GP_STACK_DIR/gp.env" --http-port 0
for _ in $(seq 1 100); do $G health registry >/dev/null 2>&1 && break; sleep 0.1; done
start sched "$B/bin/gridpool-scheduler" --config "$GP_STACK_DIR/gp.env" --http-port 0 \
    --checkpoint-root "$D/ckpt"
start recovery "$B/bin/gridpool-recovery" --config "$GP_STACK_DIR/gp.env" --http-port 0
start alerting "$B/bin/gridpool-alerting" --config "$GP_STACK_DIR/gp.env" --http-port 0
start sim "$B/bin/gridpool-sim" --config "$GP_STACK_DIR/gp.env" --http-port 0 --sites "$SITES" \
    --seed 13 --spread-ms 10000
for _ in $(seq 1 1200); do grep -q '^sim: registered' "$D/sim.log" && break; sleep 0.1; done
grep -q '^sim: registered' "$D/sim.log" || fail "the fleet did not register"
note "$(grep '^sim: registered' "$D/sim.log")"
sleep 20                                    # registrations settle, every node beats

# ---- 1. the cost per heartbeat -----------------------------------------------------
hz=$(getconf CLK_TCK)
a0=$(cpu_ticks alerting) r0=$(cpu_ticks registry)
b0=$(metric alerting gp_alerting_beats_total) h0=$(metric registry gp_registry_heartbeats_total)
sleep "$COST_S"
a1=$(cpu_ticks alerting) r1=$(cpu_ticks registry)
b1=$(metric alerting gp_alerting_beats_total) h1=$(metric registry gp_registry_heartbeats_total)
$PY - "$hz" "$a0" "$a1" "$b0" "$b1" "$r0" "$r1" "$h0" "$h1" "$COST_S" <<'EOF'
import sys
hz, a0, a1, b0, b1, r0, r1, h0, h1, secs = (float(x) for x in sys.argv[1:])
beats, hbs = b1 - b0, h1 - h0
a_us = (a1 - a0) / hz * 1e6 / beats if beats > 0 else -1
r_us = (r1 - r0) / hz * 1e6 / hbs if hbs > 0 else -1
print("alert_beats_per_s=%.0f" % (beats / secs))
print("alert_cpu_us_per_beat=%.1f" % a_us)
print("alert_registry_cpu_us_per_beat=%.1f" % r_us)
print("alert_cost_ratio=%.3f" % (a_us / r_us if a_us > 0 and r_us > 0 else -1))
print("alert_cpu_pct=%.1f" % ((a1 - a0) / hz / secs * 100))
EOF

# ---- 2. fault -> alert published ------------------------------------------------------
# each line stamped as it arrives; $! is gpctl's (a pipe's last command
# would leave gpctl, which writes nothing after, running)
$G watch alerts -o json 2>"$D/watch.err" > >($PY -u -c '
import sys, time
for line in sys.stdin:
    sys.stdout.write("%d %s" % (int(time.time() * 1000), line))
    sys.stdout.flush()
' >"$D/alerts.txt") &
pids+=($!)
sleep 2
# each fault on a site of its own with every node healthy; node crashes on
# sites of 3 nodes or more (a node loss, not a site outage)
sql "SELECT site, min(id), count(*) FROM nodes GROUP BY site
     HAVING bool_and(state = 'healthy') ORDER BY md5(site)" | tr '|' ' ' >"$D/sites.txt"
$PY - "$D/sites.txt" "$GPU_FAULTS" "$NODE_FAULTS" "$SITE_FAULTS" >"$D/plan.txt" <<'EOF'
import sys
sites = [l.split() for l in open(sys.argv[1]) if l.strip()]
want = {"gpu": int(sys.argv[2]), "node": int(sys.argv[3]), "site": int(sys.argv[4])}
got = {k: 0 for k in want}
for site, node, n in sites:
    if got["gpu"] < want["gpu"]:
        kind, target = "gpu", node
    elif got["node"] < want["node"] and int(n) >= 3:
        kind, target = "node", node
    elif got["site"] < want["site"] and int(n) < 3:
        kind, target = "site", site
    else:
        continue
    got[kind] += 1
    print(kind, target)
EOF
note "plan: $(cut -d' ' -f1 "$D/plan.txt" | sort | uniq -c | tr '\n' ' ')"
: >"$D/injected.txt"
while read -r kind target; do
    t=$(now)
    case $kind in
    gpu)  $G fault gpu_lost --node "$target" --gpu 0 >/dev/null 2>>"$D/fault.err" ;;
    node) $G fault node_crash --node "$target" --duration-ms 300000 >/dev/null 2>>"$D/fault.err" ;;
    site) $G fault site_power_cut --site "$target" --duration-ms 300000 >/dev/null 2>>"$D/fault.err" ;;
    esac && echo "$kind $target $t" >>"$D/injected.txt"
done <"$D/plan.txt"
note "injected $(wc -l <"$D/injected.txt") faults in $(( ($(now) - $(head -1 "$D/injected.txt" | cut -d' ' -f3)) / 1000 )) s"
want=$(wc -l <"$D/injected.txt")
alerted() {     # distinct alerts firing (a firing alert told again counts once)
    grep '"status":"firing"' "$D/alerts.txt" | grep -o '"id":"[0-9a-f]*"' | sort -u | wc -l
}
for _ in $(seq 1 180); do                   # up to 90 s for the 30 s-for site alerts
    [ "$(alerted)" -ge "$want" ] && break
    sleep 0.5
done
sleep 5                                     # whatever else comes (muted node alerts must not)

$PY - "$D/injected.txt" "$D/alerts.txt" <<'EOF'
import json, sys
rule = {"gpu": ("GpuFallenOffBus", 0), "node": ("NodeDown", 20000), "site": ("SiteUnreachable", 30000)}
faults = {}
for line in open(sys.argv[1]):
    kind, target, t = line.split()
    faults[(kind, target)] = int(t)
seen, other = {}, 0
for line in open(sys.argv[2]):
    recv, js = line.split(" ", 1)
    a = json.loads(js)
    if a.get("status") != "firing":
        continue
    hit = None
    for kind, (name, _) in rule.items():
        key = (kind, a.get("node") if kind != "site" else a.get("site"))
        if a.get("alertname") == name and key in faults:
            hit = key
    if hit is None:
        other += 1
    elif hit not in seen:
        seen[hit] = (int(recv), int(a.get("starts_ms", 0)))
def pct(v, p):
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))] if v else -1
for kind, (name, for_ms) in rule.items():
    tot, det, own = [], [], []
    n = sum(1 for k in faults if k[0] == kind)
    for key, t in faults.items():
        if key[0] != kind or key not in seen:
            continue
        recv, starts = seen[key]
        tot.append(recv - t)
        det.append(starts - t)
        own.append(recv - starts - for_ms)
    tot.sort(); det.sort(); own.sort()
    print("alert_%s_faults=%d" % (kind, n))
    print("alert_%s_alerted=%d" % (kind, len(tot)))
    for p in (50, 99):
        print("alert_%s_p%d_ms=%d" % (kind, p, pct(tot, p)))
        print("alert_%s_detect_p%d_ms=%d" % (kind, p, pct(det, p)))
        print("alert_%s_own_p%d_ms=%d" % (kind, p, pct(own, p)))
print("alert_other_firing=%d" % other)
EOF
echo "alert_sites=$SITES"
note "alerting: $(grep -c 'level=error' "$D/alerting.log") error lines; published $(metric alerting gp_alerting_published_total)"
