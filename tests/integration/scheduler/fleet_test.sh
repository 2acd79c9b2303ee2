#!/usr/bin/env bash
# fleet_test.sh -- the scheduler at fleet scale (issue 7): registry,
# scheduler and a simulated 1,000-site fleet (gridpool-sim, about 3,000
# nodes), run under tests/harness/with-stack.sh.
#
# Phase 1: a workload of 5,000 jobs from 20 tenants (gridpool-sim
# --no-fleet --workload: short sim: jobs, a mix of sizes and models,
# origins with latency bounds, rare multi-node jobs, some failing, some
# that cannot be placed: 16 GPUs a node, which no node has, or a latency
# bound of 5 ms or less, under every site's tier penalty) goes through one scheduler.
# Every accepted job exists; once the fleet is quiet every job ended or is
# pending with reasons; every attempt row sits on nodes that satisfy its
# job (model, GPU count and distinct indexes on the node, one site, the
# latency bound: the scheduler's estimate and an independent lower bound
# from the sites' coordinates and tiers); the invariant checker
# (tests/harness/invariants.sh) finds nothing over the history, Redis and
# the simulator's truth.  "# workload: N s" is submission start to quiet.
#
# Phase 2, same fleet and stack: a second workload of the same size (5,000
# jobs, 20 tenants, another seed) through TWO scheduler
# instances; one is killed with kill -9 halfway through the submissions.
# Resubmitting the whole workload (idempotent client ids) returns the same
# job for every id, so nothing was lost or doubled; every job ends or waits
# with reasons once the dead instance's claims expired; the checker finds
# no double booking and no job with two live attempts, and Redis equals the
# live attempts after the reconcile (the dead instance's half-made
# reservations removed).
#
# The sanitizer build (GP_BUILD ending in /san) runs a smaller fleet and
# workloads to stay in the time budget (said in a TAP comment).  CI runs
# this test once, there (pass=san): under the sanitizers is where it has
# found real bugs; the scheduler's speed at 1,000 sites and beyond is
# make bench's (place).  With 1,500 jobs it took 360 s in CI's lanes, its
# first phase 259 s of the 300 it may: 1,000 + 300 jobs keep it inside (a
# smaller fleet than 300 sites leaves too many jobs waiting for capacity:
# the mix check below fails).
# test-tags: heavy pass=san (tests/run.sh)
set -u
B=$GP_BUILD
D=$GP_STACK_DIR
export GP_ENV_FILE=$D/gp.env
INV="$GP_HARNESS/invariants.sh"
G="$B/bin/gpctl --timeout 60000"
PY=/usr/bin/python3
SEED=7
if [ "${B%/san}" != "$B" ]; then
    SITES=${GP_FLEET_SITES:-300}; JOBS1=${GP_FLEET_JOBS:-600}; JOBS2=${GP_FLEET_JOBS2:-300}
    RATE=60; SETTLE1=300; SETTLE2=240
    echo "# sanitizer build: scaled down to $SITES sites, $JOBS1 + $JOBS2 jobs"
else
    SITES=${GP_FLEET_SITES:-1000}; JOBS1=${GP_FLEET_JOBS:-5000}; JOBS2=${GP_FLEET_JOBS2:-5000}
    RATE=400; SETTLE1=300; SETTLE2=240
fi
n=0
failed=0
ok() { n=$((n + 1)); if [ "$2" -eq 0 ]; then echo "ok $n - $1"; else echo "not ok $n - $1"; failed=$((failed + 1)); fi; }
now() { date +%s.%N; }
since() { $PY -c "print(round($(now) - $1, 1))"; }
sql() { psql "$GP_PG_CONNINFO" -XAtq -c "$1" 2>>"$D/psql.err"; }
start() {     # name, program, args... (pid file: stack.sh stop ends it whatever happens)
    local name=$1
    shift
    "$@" >"$D/$name.log" 2>&1 </dev/null &
    echo $! >"$D/pids/$name.pid"
}
pid_of() { cat "$D/pids/$1.pid"; }
wait_for() {  # seconds, command...: polls every 0.2 s until the command succeeds
    local end=$(( $(date +%s) + $1 ))
    shift
    while [ "$(date +%s)" -lt "$end" ]; do
        "$@" && return 0
        sleep 0.2
    done
    "$@"
}
# dispatch-timeout 15 s: on a loaded 2-core machine an agent's RunAttempt
# answer can take more than the default 5 s, and a dispatch that times out
# after the agent started it runs on until its node's next lease renewal
# (the fencing gap the lease bounds), which --truth would report
# Reconcile every 5 s (grace 5 s), not faster: a pass may book again an
# attempt that ended after it read PostgreSQL; an instance that then meets
# that booking (BUSY) books it into its snapshot, and nothing takes it out
# of the snapshot before the next inventory load (feed-ms, 60 s) -- with a
# 1 s period the placements came in bursts a minute apart (open, see the
# issue 7 report).
# The 20 s request and PostgreSQL deadlines are for a loaded 2-core machine:
# at 5 s the first inventory load (1,000 sites a page) timed out for minutes.
sched() {     # instance name
    start "$1" "$B/bin/gridpool-scheduler" --config "$D/gp.env" --http-port 0 --instance "$1" \
        --lease-ms 30000 --place-ms 200 --place-batch 128 --claim-ms 3000 \
        --reconcile-ms 5000 --reconcile-grace-ms 5000 --preempt-grace-ms 1000 --maxrun-ms 1000 \
        --checkpoint-root "$D/ckpt" --dispatch-timeout-ms 15000 \
        --request-timeout-ms 20000 --pg-timeout-ms 20000
}
metric() {    # instance, metric line prefix -> the summed value
    local port
    port=$(grep -o 'http_port=[0-9]*' "$D/$1.log" | head -1 | cut -d= -f2)
    curl -s "http://127.0.0.1:$port/metrics" | awk -v p="$2" 'index($0, p) == 1 { s += $NF } END { print s + 0 }'
}

# ---- the fleet ---------------------------------------------------------------
t0=$(now)
start registry "$B/bin/gridpool-registry" --config "$D/gp.env" --lease-ms 30000 --http-port 0 \
    --pg-timeout-ms 20000
wait_for 10 $G health >/dev/null 2>&1
start sim "$B/bin/gridpool-sim" --config "$D/gp.env" --http-port 0 --sites "$SITES" --seed $SEED \
    --inventory-out "$D/inv.json" --truth "$D/truth.jsonl"
registered() { grep -q '^sim: registered' "$D/sim.log" || ! kill -0 "$(pid_of sim)" 2>/dev/null; }
wait_for 120 registered
nodes=$($PY -c "import json; print(json.load(open('$D/inv.json'))['nodes'])")
grep -q '^sim: registered' "$D/sim.log"
rc=$?
ok "the fleet registered: $SITES sites, $nodes nodes ($(since "$t0") s)" $rc
all_healthy() {
    [ "$($G get nodes --state healthy -o json 2>/dev/null | $PY -c 'import json,sys; print(len(json.load(sys.stdin)))' 2>/dev/null)" = "$nodes" ]
}
wait_for 60 all_healthy
ok "every node is healthy in the registry" $?
# The workload's 20 customer tenants exist before the scheduler starts (the
# generator's own create then finds them: EXISTS).  The placement snapshot
# learns tenants only from its inventory loads (feed-ms, 60 s): jobs of a
# tenant created after a load wait with no_rights until the next one (open,
# see the issue 7 report), which would only add a minute here.
for i in $(seq -w 1 20); do
    $G create tenant "cust-$i" --parent op --kind customer >/dev/null 2>&1 ||
        $G get tenants "cust-$i" >/dev/null 2>&1
done
[ "$($G get tenants -o json | $PY -c 'import json,sys; print(sum(t["id"].startswith("cust-") for t in json.load(sys.stdin)))')" = 20 ]
ok "the 20 customer tenants exist" $?
# The scheduler starts on the whole fleet: its first feed load sees every node.
sched sched-a
wait_for 120 grep -q "feed_ready nodes=$nodes " "$D/sched-a.log"
rc=$?
ok "the scheduler loaded the fleet ($(grep -o 'feed_ready nodes=[0-9]*' "$D/sched-a.log"))" $rc
for _ in 1 2 3; do $G get nodes -o json >"$D/nodes.json" && break; done
for _ in 1 2 3; do $G get sites -o json >"$D/sites.json" && break; done

# ---- workloads ---------------------------------------------------------------
workload() {  # name, seed, jobs -> $D/<name>.conf
    cat >"$D/$1.conf" <<EOF
name=$1
seed=$2
jobs=$3
rate=$RATE
inflight=64
timeout_ms=20000
wait_ms=30000
tenants=20
# 16 GPUs a node: no node has that many (pending: gpus)
gpus=1:50,2:25,4:14,8:9,16:2
nodes=1:95,2:4,4:1
models=any:40,L4:20,L40S:15,RTX 4090:10,A100-80G:10,H100:5
origin=0.7
latency=0.8
# 5 ms or less no site can answer (every site's tier adds >= 5 ms, its RTT more)
latency_ms=1-80
# no interruptible jobs, so no preemption: a preempted multi-node attempt
# frees all its nodes' GPUs while some still run it (preempt_run.c signals
# only the nodes the plan chose, and the first stop or end releases every
# node), which --truth catches (truth_gpu_shared, truth_two_attempts);
# open, see the issue 7 report
interruptible=0
priority=50:20,100:60,500:20
# short jobs, so the fleet goes quiet soon after the last placement
run_s=5-12
fail=0.03
exit_nonzero=0.02
# no forever jobs but short max_run_s ones (timed out)
forever=0.01
forever_max_run_s=5-8
ckpt=0.3
ckpt_s=3-6
load=60-100
hang=0
start_fail=0.01
max_price=0.1
max_price_micros=500000-5000000
currency=EUR
max_attempts=2
ids_out=$D/$1.ids
EOF
}
submit() {    # name, log name: the generator alone, on the fleet's shape (origins)
    start "$2" "$B/bin/gridpool-sim" --config "$D/gp.env" --http-port 0 --sites "$SITES" --seed $SEED \
        --no-fleet --workload "$D/$1.conf"
}
# Quiet: no job of the workload starting or running, every pending one with
# reasons, and the same over 2 s (10 placement passes), so a pending job
# that free capacity would place is not taken for a waiting one.
quiet_row() { sql "SELECT count(*) FILTER (WHERE state IN ('starting','running')),
    count(*) FILTER (WHERE state = 'pending' AND coalesce(waiting, '') = ''),
    count(*) FILTER (WHERE state = 'pending'), count(*)
    FROM jobs WHERE client_request_id LIKE '$1-%'"; }
quiet() {     # name, expected jobs at least
    local a b
    a=$(quiet_row "$1")
    case "$a" in 0\|0\|*) ;; *) return 1 ;; esac
    [ "$(echo "$a" | cut -d'|' -f4)" -ge "$2" ] || return 1
    sleep 2
    b=$(quiet_row "$1")
    [ "$a" = "$b" ]
}
dump() {      # name -> $D/<name>.jobs.json (the admin list: spec, state, waiting), attempts.tsv
    for _ in 1 2 3; do     # a listing that times out on a loaded machine is asked again
        $G get jobs -o json >"$D/all-jobs.json" 2>"$D/gpctl-jobs.err" && break
    done
    sql "COPY (SELECT a.job_id, a.attempt, a.rank, a.site, a.node, array_to_string(a.gpus, ','),
         a.state, coalesce(a.latency_est_ms, -1) FROM attempts a JOIN jobs j ON j.id = a.job_id
         WHERE j.client_request_id LIKE '$1-%') TO STDOUT" >"$D/$1.attempts.tsv"
}

# dump at a quiet moment: a job waiting for GPUs in use ('reserved') may be
# placed after the quiet check and before the listing (which takes seconds
# on a loaded machine): then wait for quiet again and list again
dump_quiet() {  # name, expected jobs at least
    local i
    for i in 1 2 3; do
        dump "$1"
        $PY - "$D" "$1" <<'PY' && return 0
import json, sys
D, name = sys.argv[1:3]
live = [j["id"] for j in json.load(open(D + "/all-jobs.json"))
        if j.get("spec", {}).get("client_request_id", "").startswith(name + "-")
        and j["state"] in ("starting", "running")]
if live:
    print("# listed while %d job(s) ran (%s): again once quiet" % (len(live), " ".join(live[:3])))
sys.exit(1 if live else 0)
PY
        [ "$i" = 3 ] || wait_for 60 quiet "$1" "$2"
    done
}

# The checks on one workload's jobs and attempts, in Python; prints its
# findings as TAP comments and exits 1 on any.
check_jobs() {  # name, mode (all | attempts)
    $PY - "$D" "$1" "$2" <<'PY'
import collections, json, math, sys
D, name, mode = sys.argv[1:4]
jobs = {j["id"]: j for j in json.load(open(D + "/all-jobs.json"))
        if j.get("spec", {}).get("client_request_id", "").startswith(name + "-")}
ids = [l.split() for l in open(D + "/" + name + ".ids") if l.strip()]
nodes = {x["id"]: x for x in json.load(open(D + "/nodes.json"))}
sites = {x["id"]: x for x in json.load(open(D + "/sites.json"))}
bad = collections.Counter()
def say(kind, text):
    if bad[kind] < 3:
        print("# %s: %s" % (kind, text))
    bad[kind] += 1
def km(lat1, lon1, lat2, lon2):
    p1, p2 = math.radians(lat1), math.radians(lat2)
    a = math.sin((p2 - p1) / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(math.radians(lon2 - lon1) / 2) ** 2
    return 2 * 6371.0 * math.asin(math.sqrt(min(a, 1.0)))
TIER = {0: 0, 1: 5, 2: 15, 3: 40}
atts = collections.defaultdict(lambda: collections.defaultdict(list))
for l in open(D + "/" + name + ".attempts.tsv"):
    job, att, rank, site, node, gpus, state, lat = l.rstrip("\n").split("\t")
    atts[job][int(att)].append({"rank": int(rank), "site": site, "node": node, "state": state,
        "gpus": [int(g) for g in gpus.split(",") if g], "lat": float(lat)})
if mode == "all":
    for crid, tenant, jid in ids:
        j = jobs.get(jid)
        if j is None:
            say("accepted job missing", jid)
        elif j["tenant"] != tenant or j["spec"]["client_request_id"] != crid:
            say("accepted job differs", "%s %s %s" % (jid, j["tenant"], j["spec"]["client_request_id"]))
    for jid, j in jobs.items():
        st = j["state"]
        if st in ("starting", "running"):
            say("job still live", jid)
        elif st == "pending" and not j.get("waiting"):
            say("pending without reasons", jid)
        elif st == "pending" and {w["reason"] for w in j["waiting"]} == {"no_rights"}:
            say("pending for no_rights alone (every customer may use the operator's pools)", jid)
placed = multi = unplaceable = 0
reasons = collections.Counter()
for jid, j in jobs.items():
    s = j["spec"]
    bound = s.get("max_latency_ms", 0)
    never = s["gpus_per_node"] == 16 or (bound and bound <= 5)
    if j["state"] == "pending":
        for w in j.get("waiting", []):
            reasons[w["reason"]] += 1
    if never:
        unplaceable += 1
        if atts.get(jid):
            say("unplaceable job has attempts", jid)
        if mode == "all" and j["state"] != "pending":
            say("unplaceable job not pending", "%s %s" % (jid, j["state"]))
    for a, rows in atts.get(jid, {}).items():
        placed += 1
        multi += len(rows) > 1
        if len(rows) != s.get("nodes", 1) or sorted(r["rank"] for r in rows) != list(range(len(rows))):
            say("attempt node count", "%s:%d %d rows for %d nodes" % (jid, a, len(rows), s.get("nodes", 1)))
        if len({r["site"] for r in rows}) != 1 or len({r["node"] for r in rows}) != len(rows):
            say("attempt spans sites or repeats a node", "%s:%d" % (jid, a))
        for r in rows:
            nd = nodes.get(r["node"])
            if nd is None or nd["site"] != r["site"]:
                say("attempt on an unknown node", "%s:%d %s" % (jid, a, r["node"]))
                continue
            idx = {g["index"]: g for g in nd["gpus"]}
            if len(r["gpus"]) != s["gpus_per_node"] or len(set(r["gpus"])) != len(r["gpus"]) or \
                    any(g not in idx for g in r["gpus"]):
                say("attempt GPUs", "%s:%d %s on %s (%d GPUs) for %d" % (jid, a, r["gpus"], r["node"], len(idx), s["gpus_per_node"]))
                continue
            models = s.get("gpu_models") or []
            if models and any(idx[g]["model"] not in models for g in r["gpus"]):
                say("attempt model", "%s:%d %s wants %s" % (jid, a, r["node"], models))
            if s.get("min_vram_mb") and any(idx[g]["vram_mb"] < s["min_vram_mb"] for g in r["gpus"]):
                say("attempt VRAM", "%s:%d %s" % (jid, a, r["node"]))
            if bound:
                st = sites[r["site"]]
                floor = km(s["origin_lat"], s["origin_lon"], st["lat"], st["lon"]) / 100.0 + TIER.get(st.get("latency_tier", 0), 40)
                if not (0 <= r["lat"] <= bound):
                    say("latency estimate over the bound", "%s:%d %.1f > %d" % (jid, a, r["lat"], bound))
                if floor > bound + 0.001 or floor > r["lat"] + 0.001:
                    say("latency floor over the bound or the estimate", "%s:%d floor %.1f est %.1f bound %d" % (jid, a, floor, r["lat"], bound))
states = collections.Counter(j["state"] for j in jobs.values())
print("# %s: %d jobs, states %s; %d attempts (%d multi-node); %d unplaceable by spec; pending reasons %s"
      % (name, len(jobs), dict(states), placed, multi, unplaceable, dict(reasons)))
for k, v in bad.items():
    print("# FAILED %s: %d" % (k, v))
# the mix must be there, or the checks above checked little.  A quarter
# succeeded, not a half: under the sanitizers (300 sites) the nodes' RTTs
# grow with the load and more jobs wait on their latency bound (one CI run:
# 390 of 1,000 succeeded, 586 waiting with reasons)
if mode == "all" and not (states["succeeded"] >= len(jobs) // 4 and states["failed"] > 0 and
                          states["pending"] > 0 and unplaceable > 0 and multi > 0 and placed > 0):
    print("# FAILED the workload lacks its mix")
    sys.exit(1)
sys.exit(1 if bad else 0)
PY
}

# ---- phase 1: 5,000 jobs, one scheduler ------------------------------------------
workload fleet1 42 "$JOBS1"
t1=$(now)
submit fleet1 wl1
wl_done() { ! kill -0 "$(pid_of "$1")" 2>/dev/null; }
wait_for 120 wl_done wl1
line=$(grep '^sim: workload' "$D/wl1.log")
echo "# $line (submitted in $(since "$t1") s)"
accepted=$(echo "$line" | sed -n 's/.*: [0-9]* submitted, \([0-9]*\) accepted.*/\1/p')
[ "${accepted:-0}" = "$JOBS1" ] && [ "$(wc -l <"$D/fleet1.ids")" = "$JOBS1" ] &&
    [ "$(cut -d' ' -f2 "$D/fleet1.ids" | sort -u | wc -l)" = 20 ]
ok "every one of $JOBS1 jobs from 20 tenants was accepted (${accepted:-none}), ids_out lists each" $?
wait_for $SETTLE1 quiet fleet1 "$JOBS1"
rc=$?
took=$(since "$t1")
echo "# workload: $JOBS1 jobs on $nodes nodes, submission start to every job ended or pending with reasons: $took s"
ok "the workload went quiet within $SETTLE1 s: every job ended or pending with reasons ($took s; $(quiet_row fleet1))" $rc
# what arrives together is written together (submits, attempt events),
# and no batch needed its fallback (one by one) on a clean run.  How many
# arrive together depends on the machine's pace (the sanitizer build's
# slower generator sent every submit alone): some batch, of either kind.
sb=$(metric sched-a gp_scheduler_submit_batched_total)
eb=$(metric sched-a gp_scheduler_attempt_event_batches_total)
[ $(( ${sb%.*} + ${eb%.*} )) -gt 0 ] &&
    ! grep -qE "submit_batch_failed|attempt_event_batch_failed" "$D/sched-a.log"
ok "submits ($sb in batches) and attempt events ($eb batches) were written in batches, none fell back" $?
# the second instance loads the fleet while phase 1 is checked
sched sched-b
dump_quiet fleet1 "$JOBS1"
check_jobs fleet1 all
ok "every accepted job exists; none live; every pending one has reasons; every attempt fits its job (model, GPUs, one site, latency bound and floor)" $?
# a reconcile may have booked again an attempt that ended after it read
# PostgreSQL; the next pass past the grace removes it (reserve.h)
reconciled() { "$INV" --redis --confirm-ms 0 >/dev/null 2>&1; }
wait_for 30 reconciled
"$INV" --redis --truth "$D/truth.jsonl" >"$D/inv1.out" 2>&1
rc=$?
sed 's/^/# /' "$D/inv1.out" | tail -n 12
ok "invariants over the history, Redis and the simulator's truth: clean (exit $rc)" $rc
grep -q '"gpu_idx":\[' "$D/truth.jsonl"
rc=$?
ok "the truth has attempt lines with their GPU indexes ($(wc -l <"$D/truth.jsonl") lines)" $rc

# ---- phase 2: two schedulers, one killed -------------------------------------
wait_for 120 grep -q "feed_ready nodes=$nodes " "$D/sched-b.log"
ok "a second scheduler instance loaded the fleet" $?
workload fleet2 43 "$JOBS2"
t2=$(now)
submit fleet2 wl2
half() { [ "$(cat "$D/fleet2.ids" 2>/dev/null | wc -l)" -ge $((JOBS2 / 2)) ]; }
wait_for 60 half
kill -9 "$(pid_of sched-a)"
killed_at=$(wc -l <"$D/fleet2.ids")
ok "sched-a killed with kill -9 halfway through the submissions ($killed_at of $JOBS2 accepted)" $?
# What a kill -9 between a placement's commit and its RunAttempt leaves (it
# may or may not happen above), planted so it is always checked: a job
# 'starting' whose attempt is 'reserved' on a node that never heard of it,
# placed 12 s ago by sched-a, its GPU booked in Redis.  Only the live
# instance's reconcile can end it (reconcile.c); the job must run again.
live_sql="SELECT node FROM attempts WHERE coalesce(ended_ms, 9e15) > $(date +%s%3N) - 60000"
sql "$live_sql" | sort -u >"$D/busy-nodes"
tpl=$(sql "SELECT id FROM jobs WHERE client_request_id LIKE 'fleet1-%' AND state = 'succeeded'
           AND attempts_made = 1 AND nodes = 1 AND gpus_per_node = 1 AND max_run_s = 0 ORDER BY id LIMIT 1")
PJ=j-planted-never-dispatched
planted=""
for cand in $($PY -c "import json; print(' '.join('%s/%s' % (x['site'], x['id']) for x in json.load(open('$D/nodes.json'))))"); do
    site=${cand%%/*}; node=${cand#*/}
    grep -qx "$node" "$D/busy-nodes" && continue
    shard=$($PY -c "
h = 2166136261
for c in b'$site': h = ((h ^ c) * 16777619) & 0xffffffff
print(h % 256)")
    ago=$(( $(date +%s%3N) - 12000 ))
    [ "$(redis-cli -h "$GP_REDIS_HOST" -p "$GP_REDIS_PORT" HSETNX "gp:{$shard}:res:$node" 0 "$PJ:1:$ago")" = 1 ] || continue
    redis-cli -h "$GP_REDIS_HOST" -p "$GP_REDIS_PORT" SADD "gp:{$shard}:resnodes" "$node" >/dev/null
    sql "INSERT INTO jobs (id, tenant, state, spec, name, priority, gpus_per_node, nodes, interruptible,
           max_run_s, max_attempts, pool, product, max_price_micros_per_gpu_hour, currency, attempts_made,
           created_ms, updated_ms)
         SELECT '$PJ', tenant, 'starting', spec, name, priority, gpus_per_node, nodes, interruptible,
           max_run_s, 2, pool, product, max_price_micros_per_gpu_hour, currency, 1, $ago, $ago
         FROM jobs WHERE id = '$tpl';
         INSERT INTO attempts (job_id, attempt, rank, site, node, gpus, state, created_ms)
         VALUES ('$PJ', 1, 0, '$site', '$node', '{0}', 'reserved', $ago)" && planted="$node"
    break
done
[ -n "$tpl" ] && [ -n "$planted" ]
ok "planted: job $PJ starting, attempt 1 reserved on $planted 12 s ago, never dispatched (a copy of $tpl)" $?
wait_for 120 wl_done wl2
echo "# $(grep '^sim: workload' "$D/wl2.log") (submitted in $(since "$t2") s)"
# The same workload again: every client id maps to one job (the ones whose
# answer died with sched-a too), so none is lost or doubled.
cp "$D/fleet2.ids" "$D/fleet2.first.ids"
submit fleet2 wl2b
wait_for 120 wl_done wl2b
echo "# resubmitted: $(grep '^sim: workload' "$D/wl2b.log")"
$PY - "$D" "$JOBS2" <<'PY'
import sys
D, n = sys.argv[1], int(sys.argv[2])
first = {c: j for c, t, j in (l.split() for l in open(D + "/fleet2.first.ids"))}
again = {c: j for c, t, j in (l.split() for l in open(D + "/fleet2.ids"))}
diff = [c for c in first if again.get(c) != first[c]]
print("# first run accepted %d, the resubmission %d, ids that differ %d %s" % (len(first), len(again), len(diff), diff[:3]))
sys.exit(not (len(again) == n and not diff and len(set(again.values())) == n))
PY
ok "resubmitted: all $JOBS2 client ids accepted, each the same job as before, $JOBS2 distinct jobs" $?
[ "$(sql "SELECT count(*), count(DISTINCT client_request_id) FROM jobs WHERE client_request_id LIKE 'fleet2-%'")" = "$JOBS2|$JOBS2" ]
ok "the database holds exactly $JOBS2 jobs of the workload, one per client id" $?
wait_for $SETTLE2 quiet fleet2 "$JOBS2"
rc=$?
ok "after the dead instance's claims expired, every job ended or waits with reasons ($(since "$t2") s; $(quiet_row fleet2))" $rc
dump_quiet fleet2 "$JOBS2"
never_sent() { [ "$(sql "SELECT state || ':' || (reason LIKE 'never dispatched%') FROM attempts
    WHERE job_id = '$PJ' AND attempt = 1")" = "failed_to_start:true" ]; }
wait_for 30 never_sent
rc=$?
ok "the never-dispatched attempt ended: failed_to_start, never dispatched ($(sql "SELECT state FROM attempts WHERE job_id = '$PJ' AND attempt = 1"))" $rc
planted_ok() { [ "$(sql "SELECT state FROM jobs WHERE id = '$PJ'")" = succeeded ]; }
wait_for 60 planted_ok
rc=$?
ok "... and its job ran again elsewhere and succeeded ($(sql "SELECT state || ' attempts ' || attempts_made || ', events ' || (SELECT string_agg(e.event, ',' ORDER BY e.seq) FROM job_events e WHERE e.job_id = j.id) FROM jobs j WHERE j.id = '$PJ'"))" $rc
check_jobs fleet2 all
ok "phase 2: every job exists, none live, pending ones have reasons, every attempt fits its job" $?
# the reconcile (every 5 s, grace 5 s) removes what sched-a booked and never wrote
wait_for 30 reconciled
"$INV" --redis --truth "$D/truth.jsonl" >"$D/inv2.out" 2>&1
rc=$?
sed 's/^/# /' "$D/inv2.out" | tail -n 12
echo "# sched-b reconcile: removed $(metric sched-b gp_scheduler_reconcile_removed_total) rebuilt $(metric sched-b gp_scheduler_reconcile_rebuilt_total) conflicts $(metric sched-b gp_scheduler_reconcile_conflicts_total)"
ok "invariants after the kill: no double booking, one live attempt per job, Redis == live attempts, truth clean (exit $rc)" $rc
kill -0 "$(pid_of sched-b)" && ! grep -q 'level=error' "$D/sched-b.log"
ok "sched-b is alive and logged no errors" $?
echo "# whole test: $(since "$t0") s"
# GP_FLEET_KEEP=DIR keeps the logs and listings (the stack folder goes away)
[ -n "${GP_FLEET_KEEP:-}" ] && mkdir -p "$GP_FLEET_KEEP" && cp "$D"/*.log "$D"/*.ids "$D"/*.tsv "$D"/*.out "$D"/*.json "$GP_FLEET_KEEP"/ 2>/dev/null
echo "1..$n"
[ "$failed" -eq 0 ]
