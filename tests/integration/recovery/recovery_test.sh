#!/usr/bin/env bash
# recovery_test.sh -- nodes and sites dying, against real services (run
# under tests/harness/with-stack.sh): gridpool-registry, -scheduler and
# -recovery, and a 12-site simulated fleet (the agents' own code) whose
# faults are injected through it.  Heartbeats every 500 ms (a node is lost
# about 2 s after its last contact), leases of 6 s, fence margin 0.5 s.
#
# Two scheduler and two recovery instances run throughout.
#
#   1. power cut at a site with running jobs, and in the middle of it
#      kill -9 of one recovery and one scheduler instance: ONE site event
#      (unreachable, power or uplink) published; its jobs run again on
#      other sites, from their checkpoints (resume > 0), after the fence;
#      when the power returns the nodes register anew and the site event
#      'returned' says power;
#   2. uplink cut shorter than the lease (3 s: the nodes are lost, but the
#      fence holds and they come back first): nothing is replaced, the jobs
#      keep their attempts (the agents' counters go on);
#   3. uplink cut longer than the lease (12 s): replaced once the fence
#      opens; the returning nodes resume heartbeats without registering
#      ('returned', cause uplink);
#   4. control-plane isolation: 8 of 12 sites cut at once (6 uplinks for
#      3.5 s, 2 powered off for 60 s): the freeze engages (one event),
#      no attempt is created while it lasts; contact back, the thaw
#      replaces the powered-off sites' nodes at thaw-rate (no storm), and
#      the jobs of the sites cut for 3.5 s keep their attempts (no newer
#      attempt, the old one still running);
#   5. drain: a drained node's interruptible jobs are checkpointed and move
#      elsewhere; a hung agent's jobs end at their deadline (the lease
#      guard) and run elsewhere; quarantine: an XID 79 on a busy node and a node flapping
#      (lost and back twice) are quarantined, get no new work, and the
#      first one's interruptible jobs move off from a checkpoint;
#   6. the invariant checker over the attempts table and the simulator's
#      ground truth: no GPU booked twice, never two attempts of a job at
#      once, really (the agents' run intervals).
# test-tags: pass=san (tests/run.sh)
set -u
B=$GP_BUILD
G="$B/bin/gpctl --timeout 10000"
D=$GP_STACK_DIR
TENANT=op
PY=/usr/bin/python3
# shellcheck source=tests/lib/lib.sh
. "$(dirname "$0")/../../lib/lib.sh"

on_fail() {
    echo "# recovery (rec-b) log tail:"; tail -n 15 "$D/rec-b.log" | sed 's/^/#   /'
    echo "# scheduler log (replace):"; grep -hE 'attempt_replaced|replace' "$D"/sched-*.log | tail -n 8 | sed 's/^/#   /'
    echo "# scheduler log (evacuation):"; grep -hE 'evacuat' "$D"/sched-*.log | tail -n 8 | sed 's/^/#   /'
    if [ -n "${GP_KEEP:-}" ]; then rm -rf "$GP_KEEP"; cp -r "$D" "$GP_KEEP"; fi
    [ -n "${told_once:-}" ] && return  # the rest once: where a stall starts
    told_once=1
    echo "# attempts by state: $(sql "SELECT string_agg(state || ':' || n, ' ') FROM
                                      (SELECT state, count(*) n FROM attempts GROUP BY 1) x")"
    for f in "$D"/sched-*.log "$D/sim.log"; do
        echo "# $(basename "$f"): $(grep -c 'level=warn\|level=error' "$f") warnings, the first:"
        grep -E 'level=(warn|error)' "$f" | head -n 5 | cut -c1-250 | sed 's/^/#   /'
    done
}
sched() {     # name
    spawn "$1" "$B/bin/gridpool-scheduler" --config "$D/gp.env" --http-port 0 --instance "$1" \
        --heartbeat-ms 500 --lease-ms 6000 --fence-margin-ms 500 --place-ms 200 \
        --dispatch-timeout-ms 3000 --claim-ms 3000 --checkpoint-root "$tmp/ckpt" \
        --preempt-grace-ms 1500
}
recovery() {  # name
    spawn "$1" "$B/bin/gridpool-recovery" --config "$D/gp.env" --http-port 0 --instance "$1" \
        --replace-ms 100 --sites-ms 2000 --site-window-ms 10000 --isolation-window-ms 20000 \
        --thaw-ms 30000 --thaw-rate 6
}
published() { cat "$D"/rec-*.log | grep -c "event=event_published $1"; }
tap_on_fail=on_fail

# ---- the stack ------------------------------------------------------------------

spawn registry "$B/bin/gridpool-registry" --config "$D/gp.env" --http-port 0 --heartbeat-ms 500 \
    --lease-ms 6000 --sweep-ms 200 --quarantine-flaps 2
for _ in $(seq 1 100); do $G health registry >/dev/null 2>&1 && break; sleep 0.1; done
sched sched-a
sched sched-b
recovery rec-a
recovery rec-b
spawn sim "$B/bin/gridpool-sim" --config "$D/gp.env" --http-port 0 --sites 12 --seed 7 \
    --spread-ms 500 --inventory-out "$tmp/inv.json" --truth "$D/truth.jsonl"
for _ in $(seq 1 300); do grep -q '^sim: registered' "$D/sim.log" && break; sleep 0.1; done
grep -q '^sim: registered' "$D/sim.log"
st_=$?; ok "the 12-site fleet registered ($(grep -o 'registered [0-9]* nodes' "$D/sim.log" | head -n 1))" $st_
for _ in $(seq 1 100); do grep -q feed_ready "$D/sched-b.log" && break; sleep 0.1; done
for _ in $(seq 1 200); do  # each instance reloads on its own 2 s timer
    grep -q 'sites_loaded sites=12' "$D/rec-a.log" && grep -q 'sites_loaded sites=12' "$D/rec-b.log" &&
        break
    sleep 0.1
done
grep -q 'sites_loaded sites=12' "$D/rec-a.log" && grep -q 'sites_loaded sites=12' "$D/rec-b.log"
ok "both recovery instances loaded the 12 sites" $?

# live attempt of a job as site/node/attempt
where() { sql "SELECT site || '/' || node || '/' || attempt FROM attempts WHERE job_id = '$1'
               AND state IN ('starting','running') ORDER BY attempt DESC, rank LIMIT 1"; }
site_events() { grep -c "event=site_event site=$1 .*kind=$2" "$D/rec-b.log"; }

jobs=()
for i in $(seq 1 16); do
    jobs+=("$(submit --command 'sim:run=900s ckpt=1s' --gpus 1 --interruptible --max-attempts 10)")
done
wait_sql "SELECT count(*) FROM attempts WHERE state = 'running'" 16 150
ok "16 checkpointing jobs run" $?
sleep 2.5                                          # a checkpoint or two each

# the site running the most jobs (at least 2 nodes)
victim=$(sql "SELECT a.site FROM attempts a WHERE a.state = 'running' GROUP BY a.site
              ORDER BY count(DISTINCT a.node) DESC, count(*) DESC, a.site LIMIT 1")
victim_jobs=$(sql "SELECT string_agg(job_id, ' ' ORDER BY job_id) FROM attempts
                   WHERE state = 'running' AND site = '$victim'")
nvj=$(echo "$victim_jobs" | wc -w)
[ "$nvj" -ge 1 ]
ok "site $victim runs $nvj of them" $?

# ---- 1. power cut ---------------------------------------------------------------

t0=$(date +%s.%N)
$G fault site_power_cut --site "$victim" --duration-ms 25000 >/dev/null
sleep 3                                            # lost (~2 s), the fence not yet open
kill -9 "$(cat "$D/pids/rec-a.pid")" "$(cat "$D/pids/sched-a.pid")"
ok "kill -9 of rec-a and sched-a in the middle of the outage" $?
moved=0
for _ in $(seq 1 150); do
    moved=0
    for j in $victim_jobs; do
        w=$(where "$j")
        [ -n "$w" ] && [ "${w%%/*}" != "$victim" ] && moved=$((moved + 1))
    done
    [ "$moved" -eq "$nvj" ] && break
    sleep 0.2
done
took=$($PY -c "print(round($(date +%s.%N) - $t0, 1))")
[ "$moved" -eq "$nvj" ]
ok "power cut: all $nvj jobs of $victim run on other sites ($took s after the cut)" $?
$PY -c "import sys; sys.exit(0 if 4.5 <= $took <= 20.0 else 1)"
ok "... not before the fence could open (last grant, at most 2 s before the cut, + 6 s lease + 0.5 s) and within 20 s ($took s)" $?
[ "$(site_events "$victim" unreachable)" = 1 ]
st_=$?; ok "one site event: $(grep "event=site_event site=$victim .*kind=unreachable" "$D/rec-b.log" | grep -o 'cause=[a-z_]*' | head -n 1)" $st_
n_lost=$(grep -c "event=node_state site=$victim .*to=lost" "$D/registry.log")
n_pub=$(published "kind=site site=$victim event=unreachable")
[ "$n_pub" = 1 ]
ok "... published once by the two instances, for $n_lost lost nodes" $?
resumed=0
for j in $victim_jobs; do
    grep "event=attempt_started .*job=$j attempt=[2-9]" "$D/sim.log" | grep -q 'resume_ms=[1-9]' &&
        resumed=$((resumed + 1))
done
[ "$resumed" = "$nvj" ]
ok "... from their checkpoints ($resumed of $nvj new attempts started with resume_ms > 0)" $?
grep "event=site_event site=$victim " "$D/rec-b.log" | sed 's/^/# /' | head -n 2
[ "$(sql "SELECT count(*) FROM recovery_nodes WHERE site = '$victim' AND state = 'replaced'")" -ge 1 ]
ok "... recorded as replaced in recovery_nodes" $?
for _ in $(seq 1 200); do [ "$(site_events "$victim" returned)" -ge 1 ] && break; sleep 0.2; done
grep "event=site_event site=$victim .*kind=returned" "$D/rec-b.log" | grep -q 'cause=power'
ok "power back: the site 'returned', cause power (the nodes registered anew)" $?
grep "event=site_event site=$victim .*kind=returned" "$D/rec-b.log" | sed 's/^/# /' | head -n 1
recovery rec-a2                                    # back: the lost nodes from PostgreSQL
sched sched-a2

# ---- 2. uplink cut shorter than the lease ----------------------------------------

site2=$(sql "SELECT site FROM attempts WHERE state = 'running' AND site <> '$victim'
             GROUP BY site ORDER BY count(*) DESC, site LIMIT 1")
before=$(sql "SELECT string_agg(job_id || ':' || attempt, ',' ORDER BY job_id) FROM attempts
              WHERE state = 'running' AND site = '$site2'")
injobs2=$(echo "$before" | sed "s/:[0-9]*//g; s/\([^,]*\)/'\1'/g")
prog0=$(sql "SELECT string_agg(id || ':' || progress_ms, ' ' ORDER BY id) FROM jobs WHERE id IN ($injobs2)")
c0=$(date +%s%N)
$G fault uplink_cut --site "$site2" --duration-ms 3000 >/dev/null
sleep 9                                            # past the fence it would have had to wait for
kept=0
for ja in ${before//,/ }; do           # each still runs that attempt, and no newer one exists
    [ "$(sql "SELECT count(*) FILTER (WHERE attempt = ${ja##*:} AND state = 'running')
                || '/' || count(*) FILTER (WHERE attempt > ${ja##*:})
              FROM attempts WHERE job_id = '${ja%%:*}'")" = 1/0 ] && kept=$((kept + 1))
done
[ -n "$before" ] && [ "$kept" -eq "$(echo "${before//,/ }" | wc -w)" ]
ok "uplink cut of 3 s at $site2 (< the 6 s lease): its jobs keep their attempts ($kept: $before)" $?
# no gap in their counters: the work at their last checkpoint (1 s apart)
# went on through the cut, by the time that passed less 3 s at most
el=$(( ($(date +%s%N) - c0) / 1000000 ))
gaps=0
for jp in $prog0; do
    p1=$(sql "SELECT progress_ms FROM jobs WHERE id = '${jp%%:*}'")
    [ "$((p1 - ${jp##*:}))" -ge "$((el - 3000))" ] || gaps=$((gaps + 1))
done
[ -n "$prog0" ] && [ "$gaps" = 0 ]
st_=$?; ok "... and their work went on through the cut: progress grew by at least $((el - 3000)) ms in $el ms, for all ($(echo "$prog0" | wc -w))" $st_
rows2=$(sql "SELECT string_agg(node || ':' || state || ':' || replaced, ',' ORDER BY node)
             FROM recovery_nodes WHERE site = '$site2'")
[ "$(sql "SELECT coalesce(sum(replaced), 0) FROM recovery_nodes WHERE site = '$site2'")" = 0 ]
ok "... no attempt replaced (node:state:attempts $rows2)" $?

# ---- 3. uplink cut longer than the lease ------------------------------------------

site3=$(sql "SELECT site FROM attempts WHERE state = 'running' AND site NOT IN ('$victim', '$site2')
             GROUP BY site ORDER BY count(*) DESC, site LIMIT 1")
jobs3=$(sql "SELECT string_agg(job_id, ' ' ORDER BY job_id) FROM attempts
             WHERE state = 'running' AND site = '$site3'")
$G fault uplink_cut --site "$site3" --duration-ms 12000 >/dev/null
sleep 10
moved=0
for j in $jobs3; do w=$(where "$j"); [ -n "$w" ] && [ "${w%%/*}" != "$site3" ] && moved=$((moved + 1)); done
[ "$moved" -eq "$(echo "$jobs3" | wc -w)" ]
st_=$?; ok "uplink cut of 12 s at $site3: its $(echo "$jobs3" | wc -w) job(s) run elsewhere within 10 s" $st_
for _ in $(seq 1 100); do [ "$(site_events "$site3" returned)" -ge 1 ] && break; sleep 0.2; done
grep "event=site_event site=$site3 .*kind=returned" "$D/rec-b.log" | grep -q 'cause=uplink'
ok "uplink back: 'returned', cause uplink (heartbeats resumed, no registration)" $?
grep "event=site_event site=$site3 .*kind=returned" "$D/rec-b.log" | sed 's/^/# /' | head -n 1
ended=0
for j in $jobs3; do
    grep -E "event=attempt_(lease_expired|revoked|guard_killed) node=$site3-[^ ]* job=$j " "$D/sim.log" >/dev/null &&
        ended=$((ended + 1))
done
[ "$ended" -eq "$(echo "$jobs3" | wc -w)" ]
ok "... the cut-off nodes ended the superseded attempts themselves ($ended: lease expired, by the agent or its guard, or revoked)" $?

# ---- 4. isolation ----------------------------------------------------------------

cut=$($PY -c "
import json; d = json.load(open('$tmp/inv.json'))
ids = sorted(s['id'] for s in d['sites'])
print(' '.join(ids[:8]))")                         # 8 of 12 sites: 67 %
# two of them lose power (they stay down: their work waits for the thaw),
# the other six their uplink for 3.5 s: well inside what the agent's
# hedged renewals ride out (a cut shorter than about 2/3 of the lease, 4 s
# here; a CI run at 4 s lost one lease on the boundary)
incut=$(echo "$cut" | sed "s/\([^ ]*\)/'\1'/g; s/ /,/g")
pcut=$(sql "SELECT string_agg(site, ' ' ORDER BY site) FROM (SELECT site FROM attempts
            WHERE state = 'running' AND site IN ($incut) GROUP BY site
            ORDER BY count(DISTINCT node) DESC, site LIMIT 2) x")
inp=$(echo "$pcut" | sed "s/\([^ ]*\)/'\1'/g; s/ /,/g")
pjobs=$(sql "SELECT string_agg(job_id, ' ' ORDER BY job_id) FROM attempts
             WHERE state = 'running' AND site IN ($inp)")
# the attempts on the sites cut for 3.5 s only (not the powered-off two)
inu=$(for s in $cut; do case " $pcut " in *" $s "*) ;; *) printf "'%s'," "$s" ;; esac; done)
inu=${inu%,}
usnap=$(sql "SELECT string_agg(job_id || ':' || attempt, ' ' ORDER BY job_id) FROM attempts
             WHERE state IN ('starting','running') AND site IN ($inu)")
fpids=()
for s in $cut; do
    case " $pcut " in
    *" $s "*) $G fault site_power_cut --site "$s" --duration-ms 60000 >/dev/null & fpids+=($!) ;;
    *) $G fault uplink_cut --site "$s" --duration-ms 3500 >/dev/null & fpids+=($!) ;;
    esac
done
wait "${fpids[@]}"
for _ in $(seq 1 100); do grep -q 'control_plane_isolation state=frozen' "$D/rec-b.log" && break; sleep 0.1; done
sleep 1
[ "$(published 'kind=isolation state=frozen')" = 1 ] &&
    grep -q 'control_plane_isolation state=frozen' "$D/rec-a2.log"
ok "8 of 12 sites cut at once: both instances freeze, one event published" $?
grep 'control_plane_isolation state=frozen' "$D/rec-b.log" | sed 's/^/# /'
for _ in $(seq 1 20); do grep -q 'event=lost_marking state=frozen' "$D/registry.log" && break; sleep 0.1; done
grep -q 'event=lost_marking state=frozen' "$D/registry.log"
ok "... and the registry stops marking nodes lost while it lasts (gp:recovery:frozen)" $?
for _ in $(seq 1 150); do grep -q 'control_plane_isolation state=thawing' "$D/rec-b.log" && break; sleep 0.1; done
grep -q 'control_plane_isolation state=thawing' "$D/rec-b.log"
ok "contact back: thawing" $?
for _ in $(seq 1 300); do
    nm=0
    for j in $pjobs; do w=$(where "$j"); case " $pcut " in *" ${w%%/*} "*|"  ") ;; *) [ -n "$w" ] && nm=$((nm + 1)) ;; esac; done
    [ "$nm" -eq "$(echo "$pjobs" | wc -w)" ] && break
    sleep 0.2
done
[ -n "$pjobs" ] && [ "$nm" -eq "$(echo "$pjobs" | wc -w)" ]
ok "after the thaw the jobs of the powered-off sites $pcut run elsewhere ($nm), nothing lost" $?
# the thaw's rate (its 30 s): 6 a minute per instance, a bucket of 1
# token: in any 9 s at most one replacement per instance, two in all
# (each instance thaws on its own: the window both are in)
thaw_at=$(for f in "$D/rec-b.log" "$D/rec-a2.log"; do
    grep -h 'control_plane_isolation state=thawing' "$f" | head -n 1 | sed 's/^ts=\([^ ]*\) .*/\1/'
done | paste -sd' ')
# Each replacement at the time its tokens were taken (allowed_ms), which
# is what the rates bound: the log line comes when the scheduler answers,
# up to seconds later in the sanitizer build (a CI run counted 3 answers
# in 9 s by the log lines' times).
burst=$(grep -h "event=node_replaced" "$D"/rec-*.log | sed -n 's/.* allowed_ms=\([0-9]*\).*/\1/p' | $PY -c "
import sys, datetime as dt
p = lambda s: dt.datetime.strptime(s.rstrip('Z'), '%Y-%m-%dT%H:%M:%S.%f').replace(tzinfo=dt.timezone.utc).timestamp()
th = [p(x) for x in '$thaw_at'.split()]
t0, t1 = max(th), min(th) + 30
ts = sorted(int(l) / 1000.0 for l in sys.stdin if l.strip() and t0 <= int(l) / 1000.0 < t1)
print(max([sum(1 for u in ts if t <= u < t + 9) for t in ts] or [0]), len(ts))")
[ "${burst%% *}" -le 2 ] && [ "${burst##* }" -ge 1 ]
ok "... at the thaw's rate: at most 2 node replacements in any 9 s (${burst%% *}, of ${burst##* } in the thaw's 30 s)" $?
# No job is rescheduled while the freeze lasts: no attempt is created
# between the first instance's freeze and the first thaw (a
# replacement is a new attempt row, its created_ms the scheduler's clock).
win=$(for f in "$D/rec-b.log" "$D/rec-a2.log"; do
    grep -h 'control_plane_isolation state=frozen' "$f" | head -n 1 | sed 's/^ts=\([^ ]*\) .*/\1/'
done | paste -sd' ')
win=$($PY -c "
import datetime as dt
p = lambda s: int(dt.datetime.strptime(s.rstrip('Z'), '%Y-%m-%dT%H:%M:%S.%f').replace(tzinfo=dt.timezone.utc).timestamp() * 1000)
f = [p(x) for x in '$win'.split()]; t = [p(x) for x in '$thaw_at'.split()]
print(min(f), min(t))")
during=$(sql "SELECT count(*) FROM attempts WHERE attempt > 1 AND created_ms BETWEEN ${win% *} AND ${win#* }")
[ -n "$during" ] && [ "$during" -eq 0 ]
st_=$?; ok "no job rescheduled while frozen: $during attempt(s) created in the freeze's $(( (${win#* } - ${win% *}) / 1000 )) s" $st_
# The jobs of the sites cut for 3.5 s keep their attempts through the
# freeze and the thaw: none replaced as lost (its attempt ended lost or
# superseded, a newer one elsewhere).  The scheduler may still preempt
# one to place the thaw's replacements (a CI run: 4 of 6 preempted,
# each by a placement): that is not a reschedule of the cut, so it is
# printed, not counted.
moved=""
preempted=""
for ja in $usnap; do
    j=${ja%%:*}; a=${ja#*:}
    newer=$(sql "SELECT count(*) FROM attempts WHERE job_id = '$j' AND attempt > $a")
    st=$(sql "SELECT state FROM attempts WHERE job_id = '$j' AND attempt = $a AND rank = 0")
    case "$st" in
    running) [ "$newer" = 0 ] || moved="$moved $j:$a($st,$newer newer)" ;;
    preempted) preempted="$preempted $j:$a($(sql "SELECT reason FROM attempts WHERE job_id = '$j' AND attempt = $a AND rank = 0"))" ;;
    *) moved="$moved $j:$a($st,$newer newer: $(sql "SELECT reason FROM attempts WHERE job_id = '$j' AND attempt = $a AND rank = 0"))" ;;
    esac
done
[ -n "$usnap" ] && [ -z "$moved" ]
st_=$?; ok "the jobs of the sites cut for 3.5 s kept their attempts, none replaced as lost ($(echo "$usnap" | wc -w) jobs${moved:+, moved:$moved})" $st_
[ -n "$preempted" ] && echo "# preempted meanwhile by the scheduler:$preempted"

# ---- 5. quarantine -------------------------------------------------------------------

nstate() { $G get nodes "$1" -o json 2>/dev/null | $PY -c "import json,sys; d=json.load(sys.stdin); d=d[0] if isinstance(d,list) else d; print(d['state'])"; }
# moved: every job of the list runs a newer attempt off node $1, resumed from a checkpoint
moved_off() {  # node jobs...
    local n=$1 k=0 j; shift
    for j in "$@"; do
        w=$(where "$j")
        [ -n "$w" ] && [ "$(echo "$w" | cut -d/ -f2)" != "$n" ] &&
            grep "event=attempt_started .*job=$j attempt=$(echo "$w" | cut -d/ -f3) " "$D/sim.log" |
                grep -q 'resume_ms=[1-9]' && k=$((k + 1))
    done
    echo "$k"
}
# waits up to 20 s for moved_off to count every job of the list; true then
wait_moved_off() {  # node jobs...
    local n=$1 want
    shift
    want=$(echo "$*" | wc -w)
    for _ in $(seq 1 100); do
        [ "$(moved_off "$n" "$@")" = "$want" ] && return 0
        sleep 0.2
    done
    [ "$want" -gt 0 ] && [ "$(moved_off "$n" "$@")" = "$want" ]
}
busy_node() { sql "SELECT a.node FROM attempts a JOIN nodes n ON n.id = a.node
                   WHERE a.state = 'running' AND n.state = 'healthy' $1
                   GROUP BY a.node ORDER BY count(*) DESC, a.node LIMIT 1"; }

# ---- 5a. drain: interruptible work moves off, from a checkpoint
dnode=$(busy_node "")
djobs=$(sql "SELECT string_agg(job_id, ' ' ORDER BY job_id) FROM attempts WHERE node = '$dnode'
             AND state = 'running'")
$G drain node "$dnode" >/dev/null
[ -n "$djobs" ] && wait_moved_off "$dnode" $djobs
ok "drain of $dnode: its interruptible jobs ($djobs) run elsewhere, resumed from a checkpoint" $?
sql "SELECT reason FROM attempts WHERE node = '$dnode' AND state = 'preempted' LIMIT 1" | grep -q 'evacuation of'
ok "... their attempts there ended 'preempted by evacuation of $dnode (draining)'" $?
$G uncordon node "$dnode" >/dev/null

# ---- 5b. a hung agent (its process stopped, its jobs running): the jobs'
# lease guards end them at the deadline though the agent does nothing, so
# their replacements (the fence open) never overlap them (the invariants
# below check it against the ground truth)
hnode=$(busy_node "AND a.node <> '$dnode'")
hjobs=$(sql "SELECT string_agg(job_id, ' ' ORDER BY job_id) FROM attempts WHERE node = '$hnode'
             AND state = 'running'")
$G fault node_stop --node "$hnode" >/dev/null
[ -n "$hjobs" ] && wait_moved_off "$hnode" $hjobs
ok "hung agent on $hnode: its jobs ($hjobs) run elsewhere, resumed from a checkpoint" $?
nk=0
for j in $hjobs; do
    grep -q "event=attempt_guard_killed node=$hnode job=$j " "$D/sim.log" && nk=$((nk + 1))
done
[ "$nk" -eq "$(echo "$hjobs" | wc -w)" ]
ok "... each ended at its deadline by its lease guard, the agent hung ($nk)" $?
$G fault node_resume --node "$hnode" >/dev/null
for _ in $(seq 1 100); do [ "$(nstate "$hnode")" = healthy ] && break; sleep 0.2; done

# ---- 5c. quarantine by XID 79 and by flapping
xnode=$(busy_node "AND a.node NOT IN ('$dnode', '$hnode')")
fnode=$(sql "SELECT id FROM nodes WHERE state = 'healthy' AND id NOT IN ('$xnode', '$dnode', '$hnode')
             ORDER BY id LIMIT 1")
xjobs=$(sql "SELECT string_agg(job_id, ' ' ORDER BY job_id) FROM attempts WHERE node = '$xnode'
             AND state = 'running'")
$G fault gpu_xid --node "$xnode" --gpu 0 --code 79 >/dev/null
# down 5 s, up 5 s: a node is lost ~2 s after its last beat, and a loaded
# machine (the sanitizer pass beside a heavy test) stretches that; 3 s
# windows left a flapping node suspect only (2 of 2 CI runs, 2026-12-07)
$G fault node_flap --node "$fnode" --period-ms 10000 --duration-ms 21000 >/dev/null
for _ in $(seq 1 150); do [ "$(nstate "$xnode")" = quarantined ] && break; sleep 0.2; done
[ "$(nstate "$xnode")" = quarantined ]
st_=$?; ok "XID 79 on $xnode: quarantined ($(sql "SELECT reason FROM node_transitions WHERE node = '$xnode' ORDER BY id DESC LIMIT 1"))" $st_
[ -n "$xjobs" ] && wait_moved_off "$xnode" $xjobs
ok "... its interruptible jobs ($xjobs) moved off, resumed from a checkpoint" $?
for _ in $(seq 1 225); do [ "$(nstate "$fnode")" = quarantined ] && break; sleep 0.2; done
[ "$(nstate "$fnode")" = quarantined ]
st_=$?; ok "$fnode flapping: quarantined ($(sql "SELECT reason FROM node_transitions WHERE node = '$fnode' ORDER BY id DESC LIMIT 1"))" $st_
qt=$(sql "SELECT (extract(epoch FROM now()) * 1000)::bigint")
for i in $(seq 1 12); do submit --command 'sim:run=20s' --gpus 1 >/dev/null; done
wait_sql "SELECT count(*) FROM jobs WHERE state = 'pending'" 0 100
[ "$(sql "SELECT count(*) FROM attempts WHERE node IN ('$xnode', '$fnode') AND created_ms > $qt")" = 0 ]
ok "12 new jobs placed, none on the quarantined nodes" $?

# ---- 6. invariants ------------------------------------------------------------------

kill -TERM "$(cat "$D/pids/sim.pid")" 2>/dev/null
for _ in $(seq 1 50); do kill -0 "$(cat "$D/pids/sim.pid")" 2>/dev/null || break; sleep 0.2; done
bash "$GP_HARNESS/invariants.sh" --truth "$D/truth.jsonl" >"$tmp/inv.out" 2>&1
st=$?
tail -n 3 "$tmp/inv.out" | sed 's/^/# /'
ok "invariants: no GPU booked twice, never two attempts of a job at once (attempts and ground truth)" $st

tap_end
