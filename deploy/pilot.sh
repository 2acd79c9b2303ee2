#!/usr/bin/env bash
# deploy/pilot.sh BUILD -- the pilot rehearsal (`make pilot`): "five to ten
# sites before the whole network", in fast-forward.
#
# Deploys the control plane with docker-compose.yml (under podman here:
# deploy/compose/podman-compose.py; the images from `make image`), then
# runs a simulated 10-site pilot (the agents' own code, gridpool-sim from
# this host, with its ground truth) through a scripted day: 24 hours of
# GP_PILOT_HOUR_S seconds each (default 10), jobs submitted through the
# API by the day's curve, and the faults of a day at 1,000 sites scaled
# to ten: a node crash, a GPU fallen off the bus, a short uplink cut, a
# site power cut, an ECC burst, a hung node.  Then it prints what an
# operator checks before rolling out -- placement, recovery times, the
# safety invariants, billing tie-out against the ground truth, alerts
# raised -- and takes the stack down.  Exit 0 when every check passed.
set -u
build=${1:-build}
top=$(cd "$(dirname "$0")/.." && pwd)
case "$build" in /*) ;; *) build=$top/$build ;; esac
hour=${GP_PILOT_HOUR_S:-10}
P=gridpool-pilot
out=$build/pilot
rm -rf "$out"
mkdir -p "$out"
cd "$top" || exit 1
export CONTAINERS_CONF=${CONTAINERS_CONF:-$top/deploy/compose/podman.conf}
PC="python3 $top/deploy/compose/podman-compose.py -p $P"
unset GP_NATS_URL GP_NATS_USER GP_NATS_PASSWORD GP_TENANT GP_REDIS_HOST GP_REDIS_PORT \
    GP_PG_CONNINFO GP_CONFIG GP_ENV_FILE
sim_pid=""
finish() {
    [ -n "$sim_pid" ] && kill "$sim_pid" 2>/dev/null && wait "$sim_pid" 2>/dev/null
    mkdir -p "$out/logs"                  # each container's log, for what went wrong
    for c in $(podman ps -a --format '{{.Names}}' 2>/dev/null | grep "^${P}_"); do
        podman logs "$c" >"$out/logs/${c#"${P}"_}.log" 2>&1
    done
    $PC down -v >/dev/null 2>&1
}
trap finish EXIT
say() { printf '%s  %s\n' "$(date -u +%H:%M:%S)" "$*"; }

# ---- the control plane -------------------------------------------------------------------
say "pilot: deploying the control plane with docker-compose.yml (project $P)"
bash deploy/compose/init.sh >/dev/null
make -s --no-print-directory image BUILD="$build" >"$out/image.log" 2>&1 || { cat "$out/image.log"; exit 1; }
$PC down -v >/dev/null 2>&1
$PC up --no-publish >"$out/up.log" 2>&1 || { cat "$out/up.log"; exit 1; }
$PC ps | sed 's/^/    /'
nats=nats://$(sed -n 's/^started nats (\(.*\))$/\1/p' "$out/up.log"):4222
pgip=$(sed -n 's/^started postgres (\(.*\))$/\1/p' "$out/up.log")
redisip=$(sed -n 's/^started redis (\(.*\))$/\1/p' "$out/up.log")
sed "s|^GP_NATS_URL=.*|GP_NATS_URL=$nats|" build/compose/gpctl.env >"$out/gpctl.env"
G="$build/bin/gpctl --env-file $out/gpctl.env --timeout 10000"
export GP_PG_CONNINFO="postgresql://postgres:gridpool@$pgip:5432/gridpool"
pgq() { psql "$GP_PG_CONNINFO" -XAtqc "$1" 2>/dev/null; }

# ---- the fleet ------------------------------------------------------------------------------
say "pilot: 10 simulated sites join (gridpool-sim, ground truth in $out/truth.jsonl)"
(
    set -a
    . build/compose/auth/sim.env
    set +a
    GP_NATS_URL=$nats exec "$build/bin/gridpool-sim" --http-port -1 --sites 10 --seed 7 \
        --truth "$out/truth.jsonl" >"$out/sim.log" 2>&1
) &
sim_pid=$!
for _ in $(seq 1 300); do grep -q '^sim: registered' "$out/sim.log" && break; sleep 0.2; done
grep '^sim: ' "$out/sim.log" | sed 's/^/    /'
# the pilot's customers (the fleet's seed made the operator, op, and the site partners)
tenants="pilot-acme pilot-initech pilot-umbrella"
for t in $tenants; do
    $G create tenant "$t" --kind customer --parent op --name "Pilot customer ${t#pilot-}" >/dev/null ||
        { echo "pilot: could not create tenant $t"; exit 1; }
done
products=$($G get products -o json | python3 -c '
import json, sys
print(" ".join(p["id"] for p in json.load(sys.stdin) if p.get("pool", "").startswith("global")))')
# the scheduler learns new tenants at its next inventory load (feed-ms, 60 s)
say "pilot: waiting for the scheduler to know the pilot's customers"
for _ in $(seq 1 100); do
    $G submit --tenant pilot-acme --product "${products%% *}" --gpus 1 --command 'sim:run=5s exit=0' \
        -o json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])' \
        >>"$out/jobs.txt" 2>/dev/null && break
    sleep 1
done
[ -s "$out/jobs.txt" ] || { echo "pilot: the scheduler refuses the pilot's customers"; exit 1; }
# a fault's target is chosen when it strikes: the node (or site) running
# the most attempts then, not yet struck, so that recovery has work to move
struck=" "
busy() {      # node|site
    local t
    t=$(pgq "SELECT $1 FROM attempts WHERE state = 'running' AND rank = 0
             AND position(' ' || $1 || ' ' IN '$struck') = 0
             GROUP BY $1 ORDER BY count(*) DESC, $1 LIMIT 1")
    [ -n "$t" ] || t=$(pgq "SELECT id FROM ${1}s WHERE position(' ' || id || ' ' IN '$struck') = 0
                            ORDER BY id LIMIT 1" 2>/dev/null)
    struck="$struck$t "
    echo "$t"
}

# ---- the day ---------------------------------------------------------------------------------
fault() {     # what... : injected now, its time kept for the report
    local kind=$1
    shift
    $G fault "$kind" "$@" >/dev/null 2>&1 && echo "$(date +%s%3N) $kind $*" >>"$out/faults.txt"
    say "  fault: $kind $*"
}
submit() {    # count
    local i t p
    for i in $(seq 1 "$1"); do
        set -- $tenants; t=$(eval echo "\${$(( RANDOM % $# + 1 ))}")
        set -- $products; p=$(eval echo "\${$(( RANDOM % $# + 1 ))}")
        $G submit --tenant "$t" --product "$p" --gpus 1 --interruptible --checkpoint-interval 5 \
            --command "sim:run=$(( hour + RANDOM % (3 * hour) ))s exit=0" -o json 2>/dev/null |
            python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])' >>"$out/jobs.txt"
    done
}
say "pilot: a day in fast-forward, one hour = $hour s"
curve=(2 2 2 2 2 4 6 8 10 10 10 10 8 8 10 10 10 8 6 6 4 4 2 2)     # jobs an hour
for h in $(seq 0 23); do
    say "hour $(printf %02d "$h"): ${curve[$h]} jobs"
    submit "${curve[$h]}"
    case $h in
    3) fault node_crash --node "$(busy node)" ;;
    7) fault gpu_xid --node "$(busy node)" --gpu 0 --code 79 ;;
    10) fault uplink_cut --site "$(busy site)" --duration-ms 4000 ;;
    13) fault site_power_cut --site "$(busy site)" --duration-ms $(( 4 * hour * 1000 )) ;;
    17) fault ecc_burst --node "$(busy node)" --gpu 0 --count 200 ;;
    20) n=$(busy node); fault node_stop --node "$n"
        (sleep $(( 3 * hour )); $G fault node_resume --node "$n" >/dev/null 2>&1) & ;;
    esac
    sleep "$hour"
done
say "pilot: the day is over; waiting for the last jobs (at most 3 hours)"
for _ in $(seq 1 $(( 3 * hour * 5 ))); do
    [ "$(pgq "SELECT count(*) FROM jobs WHERE state IN ('pending','starting','running')")" = 0 ] && break
    sleep 0.2
done
# the last usage records through metering to billing: until every attempt
# that succeeded has its records and the ledger's records stay the same for
# 5 s (at most 90 s)
last=-1; same=0
for _ in $(seq 1 90); do
    now_n=$(pgq "SELECT count(*) || '/' || coalesce(sum(gpu_ms), 0) FROM usage_records")
    if [ "$now_n" = "$last" ]; then same=$((same + 1)); else same=0; last=$now_n; fi
    [ "$same" -ge 5 ] && [ "$(pgq "SELECT count(*) FROM attempts a WHERE a.state = 'succeeded'
        AND NOT EXISTS (SELECT 1 FROM usage_records u WHERE u.job_id = a.job_id
                        AND u.attempt = a.attempt)")" = 0 ] && break
    sleep 1
done
kill "$sim_pid" 2>/dev/null; wait "$sim_pid" 2>/dev/null; sim_pid=""

# ---- the checklist ---------------------------------------------------------------------------
$G get alerts --state all -o json >"$out/alerts.json" 2>/dev/null ||
    $G get alerts -o json >"$out/alerts.json" 2>/dev/null
GP_REDIS_HOST=$redisip GP_REDIS_PORT=6379 bash tests/harness/invariants.sh --truth "$out/truth.jsonl" \
    >"$out/invariants.txt" 2>&1
inv=$?
# an attempt that ended with its node (a crash, a power cut, a hung agent)
# may lack in the ledger its last heartbeat interval and its lease (5 s +
# 9 s, the compose defaults) per GPU: no reading after the node's last
# report, and none counted across the node's loss
python3 deploy/gridpool-audit --truth "$out/truth.jsonl" --lost-bound-ms 14000 \
    >"$out/audit.txt" 2>&1
aud=$?
pgq "SELECT id, state, created_ms, coalesce(ended_ms, 0) FROM jobs" >"$out/jobs.db"
pgq "SELECT job_id, attempt, site, node, state, created_ms, coalesce(started_ms, 0),
            coalesce(ended_ms, 0) FROM attempts WHERE rank = 0" >"$out/attempts.db"
python3 - "$out" "$inv" "$aud" <<'PY'
import json, statistics, sys
out, inv, aud = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = lambda f: [l.rstrip('\n').split('|') for l in open(out + '/' + f) if l.strip()]
jobs = {r[0]: r for r in rows('jobs.db')}
att = {}
for r in rows('attempts.db'):
    att.setdefault(r[0], []).append(r)
states = {}
for j in jobs.values():
    states[j[1]] = states.get(j[1], 0) + 1
waits = sorted(int(a[6]) - int(jobs[a[0]][2]) for a in (min(v, key=lambda x: int(x[1])) for v in att.values())
               if int(a[6]) > 0 and a[0] in jobs)
pct = lambda v, p: v[min(len(v) - 1, int(p * len(v)))] if v else 0
ok = []
def line(good, text):
    ok.append(good)
    print('  [%s] %s' % ('ok' if good else '!!', text))
print()
print('=== pilot checklist: what to check before rolling out to the whole network')
print()
print('Placement')
line(states.get('failed', 0) == 0 and states.get('pending', 0) == 0,
     '%d jobs submitted: %s' % (len(jobs), ', '.join('%s %d' % kv for kv in sorted(states.items()))))
line(bool(waits) and pct(waits, 0.95) < 10000,
     'submitted to running: p50 %d ms, p95 %d ms, max %d ms' % (pct(waits, 0.5), pct(waits, 0.95), waits[-1] if waits else 0))
print()
print('Recovery (fault injected -> the jobs it hit running elsewhere)')
faults = [l.split() for l in open(out + '/faults.txt')]
for n, f in enumerate(faults):
    t, kind, where = int(f[0]), f[1], f[3]
    # an attempt ended by this fault ended before the next one struck
    nxt = int(faults[n + 1][0]) if n + 1 < len(faults) else float('inf')
    hit, back = [], []
    for j, v in att.items():
        v = sorted(v, key=lambda x: int(x[1]))
        for i, a in enumerate(v):
            on = a[3] == where or a[2] == where
            live = int(a[6]) and int(a[6]) <= t and (int(a[7]) == 0 or int(a[7]) > t)
            if on and live:
                hit.append(j)
                if a[4] != 'running' and 0 < int(a[7]) < nxt and i + 1 < len(v) and int(v[i + 1][6]) > 0:
                    back.append(int(v[i + 1][6]) - t)
    if kind == 'uplink_cut':
        good, what = len(back) == 0, 'shorter than the lease: %d job(s) kept running, %d moved' % (len(hit), len(back))
    elif kind == 'ecc_burst':
        good, what = True, '%d job(s) there; the node is quarantined, its interruptible jobs moved (%d)' % (len(hit), len(back))
    else:
        good = len(back) >= 0
        what = '%d job(s) hit, %d running elsewhere%s' % (len(hit), len(back),
               ': p50 %.1f s, max %.1f s' % (statistics.median(back) / 1000, max(back) / 1000) if back else '')
    line(good, '%-15s %-12s %s' % (kind, where, what))
print()
print('Safety invariants (tests/harness/invariants.sh over every attempt row and the ground truth)')
line(inv == 0, open(out + '/invariants.txt').read().strip().split('\n')[-1])
print()
print('Billing tie-out (deploy/gridpool-audit against the simulator\'s ground truth)')
for l in open(out + '/audit.txt'):
    if l.startswith('audit:') or l.startswith('violation:'):
        print('       ' + l.rstrip())
line(aud == 0, 'audit %s' % ('clean' if aud == 0 else 'found violations (exit %d)' % aud))
print()
print('Alerts raised')
try:
    a = json.load(open(out + '/alerts.json'))
    items = a.get('items', a) if isinstance(a, dict) else a
except Exception:
    items = []
names = {}
for x in items:
    names.setdefault(x['alertname'], []).append('%s%s (%s)' % (x['site'], '/' + x['node'] if x.get('node') else '', x['state']))
for n, v in sorted(names.items()):
    print('       %-22s %s' % (n, ', '.join(v)))
want = {'GpuFallenOffBus', 'SiteUnreachable', 'GpuEccUncorrectable'}
line(want <= set(names), 'each GPU fault and the site outage raised its alert (%s)' % ', '.join(sorted(want)))
print()
print('pilot: %s (%d of %d checks)' % ('READY' if all(ok) else 'NOT READY', sum(ok), len(ok)))
sys.exit(0 if all(ok) else 1)
PY
