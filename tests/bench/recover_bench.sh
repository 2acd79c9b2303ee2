#!/usr/bin/env bash
# recover_bench.sh -- last heartbeat to replacement running, over 1,000
# injected node losses on the 1,000-site simulated fleet (make bench, run by
# tests/bench/run.sh inside its private stack; figures as key=value lines on
# stdout, notes on stderr).
#
# Services at their defaults except the lease: 5 s heartbeats, the
# adaptive detector (floor 11 s, lost 10.5 s), a 9 s lease and a 1.5 s
# fence margin (the defaults the recovery issue aims at: 3 heartbeat
# intervals + 2 s = 17 s).  1,500 one-GPU jobs that checkpoint every 30 s
# run on the fleet; nodes running a job crash (gridpool-sim node_crash; back
# after 60 s, rebooted) in waves of 100, one node per site and only on
# sites of 3 nodes or more with every node healthy, until 1,000 losses
# are measured.  For each
# lost node: from its last heartbeat (the registry's 'lb', Redis's clock)
# to the moment every job it ran is running on another node (the new
# attempt's started_ms, the agent's clock: one host here).  The reference
# is the detector alone (detect_bench: last heartbeat -> lost, the same
# arithmetic).
#
# Before the losses, messages per node per heartbeat interval: what the
# simulator's connection (every node's agent) published over 20 s (its
# in_msgs in nats-server's /connz), idle (the fleet registered, no job),
# then with the jobs running (aim 1.0 both: the beat is the lease).
set -u
B=$GP_BUILD
D=$(mktemp -d /tmp/gp-recover.XXXXXX)
G="$B/bin/gpctl --timeout 30000 --env-file $GP_STACK_DIR/gp.env"
PY=/usr/bin/python3
SITES=${GP_BENCH_RECOVER_SITES:-1000}
WAVES=${GP_BENCH_RECOVER_WAVES:-30}           # at most; it stops at LOSSES
LOSSES=${GP_BENCH_RECOVER_LOSSES:-1000}
PER_WAVE=${GP_BENCH_RECOVER_PER_WAVE:-100}
JOBS=${GP_BENCH_RECOVER_JOBS:-1500}
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
    rm -rf "$D"
}
trap cleanup EXIT
note() { echo "recover: $*" >&2; }
sql() { psql "$GP_PG_CONNINFO" -XAtq -c "$1" 2>>"$D/psql.err"; }
start() { local name=$1; shift; "$@" >"$D/$name.log" 2>&1 </dev/null & pids+=($!); }
fail() { note "$*"; for f in "$D"/*.log; do note "--- $f"; tail -n 5 "$f" >&2; done; exit 1; }

start registry "$B/bin/gridpool-registry" --config "$GP_STACK_DIR/gp.env" --http-port 0 \
    --lease-ms 9000
for _ in $(seq 1 100); do $G health registry >/dev/null 2>&1 && break; sleep 0.1; done
start sched "$B/bin/gridpool-scheduler" --config "$GP_STACK_DIR/gp.env" --http-port 0 \
    --lease-ms 9000 --fence-margin-ms 1500 --checkpoint-root "$D/ckpt"
start recovery "$B/bin/gridpool-recovery" --config "$GP_STACK_DIR/gp.env" --http-port 0 \
    --replace-ms 100 --site-rate 600 --region-rate 6000
start sim "$B/bin/gridpool-sim" --config "$GP_STACK_DIR/gp.env" --http-port 0 --sites "$SITES" \
    --seed 11 --spread-ms 10000 --instance benchsim
for _ in $(seq 1 1200); do grep -q '^sim: registered' "$D/sim.log" && break; sleep 0.1; done
grep -q '^sim: registered' "$D/sim.log" || fail "the fleet did not register"
note "$(grep '^sim: registered' "$D/sim.log")"
for _ in $(seq 1 600); do grep -q feed_ready "$D/sched.log" && break; sleep 0.1; done

# What the simulator's connection published so far (nats-server /connz).
sim_msgs() {
    . "$GP_STACK_DIR/ports"
    $PY -c "
import json, urllib.request
d = json.load(urllib.request.urlopen('http://127.0.0.1:$NATS_MON_PORT/connz?limit=4096', timeout=5))
print(sum(c.get('in_msgs', 0) for c in d.get('connections', []) if c.get('name') == 'benchsim'))"
}
# Messages per node per 5 s interval over 20 s: key label
msg_rate() {
    local a b n
    n=$(sql "SELECT count(*) FROM nodes")
    a=$(sim_msgs)
    sleep 20
    b=$(sim_msgs)
    $PY -c "print('%.3f' % (($b - $a) / ($n * 20 / 5.0)))" >"$D/rate"
    echo "$1=$(cat "$D/rate")"
    note "$2: $((b - a)) messages from $n nodes in 20 s: $(cat "$D/rate") a node per 5 s interval"
}
sleep 10                                   # the registrations' answers settled
msg_rate recover_msgs_per_node_interval_idle "idle fleet"

for i in $(seq 1 "$JOBS"); do
    echo "{\"command\": \"sim:run=7200s ckpt=30s\", \"gpus_per_node\": 1, \"interruptible\": true, \"max_attempts\": 20}"
done >"$D/jobs.ndjson"
submitted=0
while read -r spec; do
    echo "$spec" | $G submit --tenant op -f - >/dev/null 2>>"$D/submit.err" && submitted=$((submitted + 1))
done <"$D/jobs.ndjson"
note "submitted $submitted jobs"
for _ in $(seq 1 600); do
    [ "$(sql "SELECT count(*) FROM attempts WHERE state = 'running'")" -ge "$((submitted * 9 / 10))" ] && break
    sleep 0.5
done
note "running: $(sql "SELECT count(*) FROM attempts WHERE state = 'running'")"
msg_rate recover_msgs_per_node_interval_busy \
    "$(sql "SELECT count(DISTINCT node) FROM attempts WHERE state = 'running'") nodes running jobs"

: >"$D/lat.txt"
measured=0
for w in $(seq 1 "$WAVES"); do
    # one node per site, on sites of 3 nodes or more: node losses, not site
    # outages (a third of a site is not a site event, and 100 one-node
    # sites a wave would soon look like an isolation of the control plane)
    nodes=$(sql "SELECT node FROM (SELECT DISTINCT ON (a.site) a.site, a.node
                   FROM attempts a JOIN nodes n ON n.id = a.node
                  WHERE a.state = 'running' AND n.state = 'healthy'
                    AND (SELECT count(*) FROM nodes m WHERE m.site = a.site) >= 3
                    AND NOT EXISTS (SELECT 1 FROM nodes m WHERE m.site = a.site
                                    AND m.state <> 'healthy')
                  ORDER BY a.site, md5(a.node || '$w')) x
                 ORDER BY md5(node || '$w') LIMIT $PER_WAVE")
    [ -n "$nodes" ] || fail "no running node left to crash in wave $w"
    fpids=()
    for n in $nodes; do
        echo "$n $(sql "SELECT string_agg(job_id || ':' || attempt, ' ') FROM attempts
                        WHERE node = '$n' AND state = 'running'")" >>"$D/wave$w.txt"
        $G fault node_crash --node "$n" --duration-ms 60000 >/dev/null 2>>"$D/fault.err" &
        fpids+=($!)
    done
    wait "${fpids[@]}"
    # every job of the wave's nodes running elsewhere, or 120 s
    for _ in $(seq 1 240); do
        left=$(sql "SELECT count(*) FROM attempts a WHERE a.node IN ($(sed "s/ .*//; s/.*/'&'/" "$D/wave$w.txt" | paste -sd,))
                    AND NOT EXISTS (SELECT 1 FROM attempts b WHERE b.job_id = a.job_id
                    AND b.attempt > a.attempt AND b.state = 'running')
                    AND EXISTS (SELECT 1 FROM jobs j WHERE j.id = a.job_id AND j.state IN ('pending','starting','running'))")
        [ "$left" = 0 ] && break
        sleep 0.5
    done
    note "wave $w: $(wc -l <"$D/wave$w.txt") nodes crashed, $left job(s) not yet running elsewhere"
    # per node: last beat (Redis, read now: the node is still down) -> the
    # latest first start of its jobs' next attempts
    while read -r n atts; do
        shard=$($PY -c "
h = 2166136261
for c in '${n%-*}'.encode(): h = ((h ^ c) * 16777619) & 0xffffffff
print(h % 256)")
        lb=$(redis-cli -h "$GP_REDIS_HOST" -p "$GP_REDIS_PORT" HGET "gp:{$shard}:node:$n" lb)
        echo "${lb:-none} $n $atts"
    done <"$D/wave$w.txt" >"$D/wavelb$w.txt"
    measured=$((measured + $(grep -vc '^none ' "$D/wavelb$w.txt")))
    [ "$measured" -ge "$LOSSES" ] && break
done

unmeasured=0
for f in "$D"/wavelb*.txt; do
    while read -r lb n atts; do
        [ "$lb" != none ] && [ -n "$atts" ] || { unmeasured=$((unmeasured + 1)); continue; }
        worst=0
        for ja in $atts; do
            st=$(sql "SELECT min(started_ms) FROM attempts WHERE job_id = '${ja%%:*}'
                      AND attempt > ${ja##*:} AND started_ms IS NOT NULL")
            [ -n "$st" ] || { worst=-1; break; }
            [ "$st" -gt "$worst" ] && worst=$st
        done
        if [ "$worst" -gt 0 ]; then echo $((worst - lb)) >>"$D/lat.txt"; else unmeasured=$((unmeasured + 1)); fi
    done <"$f"
done
echo "recover_unmeasured=$unmeasured"

$PY - "$D/lat.txt" <<'EOF'
import sys
v = sorted(int(x) for x in open(sys.argv[1]) if x.strip())
def pct(p):
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))] if v else -1
print("recover_losses=%d" % len(v))
print("recover_p50_ms=%d" % pct(50))
print("recover_p99_ms=%d" % pct(99))
print("recover_max_ms=%d" % (v[-1] if v else -1))
print("recover_over_17s=%d" % sum(1 for x in v if x > 17000))
EOF
echo "recover_sites=$SITES"
echo "recover_nodes=$(sql "SELECT count(*) FROM recovery_nodes")"
echo "recover_replaced=$(sql "SELECT coalesce(sum(replaced), 0) FROM recovery_nodes")"
echo "recover_site_events=$(grep -c 'event=site_event .*kind=unreachable' "$D/recovery.log")"
echo "recover_frozen=$(grep -c 'control_plane_isolation state=frozen' "$D/recovery.log")"
bash "$GP_HARNESS/invariants.sh" >"$D/inv.out" 2>&1
echo "recover_invariant_violations=$(grep -c '^violation' "$D/inv.out")"
tail -n 1 "$D/inv.out" >&2
