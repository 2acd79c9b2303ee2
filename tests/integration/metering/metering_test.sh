#!/usr/bin/env bash
# metering_test.sh -- usage records from a simulated fleet, against real
# services (run under tests/harness/with-stack.sh): gridpool-registry,
# -scheduler, -recovery, two gridpool-metering instances (2 s windows) and
# a 6-site fleet (the agents' own code) whose ground truth is the check,
# and gridpool-billing taking the records.
#
#   1. jobs of fixed length run and exit; metering-a is killed with
#      kill -9 in the middle and started again;
#   2. a site's power is cut under running checkpointing jobs: they are
#      lost and replaced elsewhere; metering closes the lost attempts at
#      their last reading once the scheduler ended them, as platform faults
#      with their last checkpoint;
#   3. the stream USAGE, read from the start: no record id twice, per-site
#      sequence numbers without a gap, one final record per attempt and
#      node; per attempt the GPU-ms metered never exceed the ground truth
#      and, for attempts that exited, equal the agent's own final counter;
#      in all at least 97% of what the fleet delivered (what is not: the
#      last half second of each attempt a power cut killed);
#   4. billing took every record once: as many usage rows as records, none
#      refused, the same GPU-ms in all, and a trial balance of zero per
#      currency; the power cut's attempts credited (failed_cost);
#   5. gpctl: get usage, close period, get statements, describe statement,
#      get balances for one customer, checked against the database;
#   6. deploy/gridpool-audit: clean over the run (with the ground truth and
#      the stream), then it finds a statement edited behind its trigger, a
#      record missing from a site's numbers and a billed > delivered.
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
    for f in meter-a meter-b; do
        echo "# $f log tail:"; grep -v 'level=debug' "$D/$f.log" | tail -n 8 | sed 's/^/#   /'
    done
    if [ -n "${GP_KEEP:-}" ]; then rm -rf "$GP_KEEP"; cp -r "$D" "$GP_KEEP"; fi
}
tap_on_fail=on_fail
meter() {  # name
    spawn "$1" "$B/bin/gridpool-metering" --config "$D/gp.env" --http-port 0 --instance "$1" \
        --window-ms 2000 --grace-ms 300 --silent-ms 3000 --sweep-ms 200 --claim-ms 3000
}

spawn registry "$B/bin/gridpool-registry" --config "$D/gp.env" --http-port 0 --heartbeat-ms 500 \
    --lease-ms 6000 --sweep-ms 200
for _ in $(seq 1 100); do $G health registry >/dev/null 2>&1 && break; sleep 0.1; done
spawn sched "$B/bin/gridpool-scheduler" --config "$D/gp.env" --http-port 0 --heartbeat-ms 500 \
    --lease-ms 6000 --fence-margin-ms 500 --place-ms 200 --checkpoint-root "$tmp/ckpt" \
    --feed-ms 1000
spawn rec "$B/bin/gridpool-recovery" --config "$D/gp.env" --http-port 0 --replace-ms 100 \
    --sites-ms 2000
meter meter-a
meter meter-b
spawn billing "$B/bin/gridpool-billing" --config "$D/gp.env" --http-port 0 --book-ms 500
spawn sim "$B/bin/gridpool-sim" --config "$D/gp.env" --http-port 0 --sites 6 --seed 11 \
    --spread-ms 300 --truth "$D/truth.jsonl"
for _ in $(seq 1 300); do grep -q '^sim: registered' "$D/sim.log" && break; sleep 0.1; done
grep -q '^sim: registered' "$D/sim.log"
ok "the 6-site fleet registered" $?
for _ in $(seq 1 100); do grep -q feed_ready "$D/sched.log" && break; sleep 0.1; done
# Two of the six sites go to a franchise partner (the seeded fleet gave
# them all to the operator), for the revenue share and the partner's view
# under row-level security (5b).
$G update site s0002 --tenant fr-voltis >/dev/null 2>>"$tmp/gpctl.err" &&
    $G update site s0005 --tenant fr-voltis >/dev/null 2>>"$tmp/gpctl.err"
ok "sites s0002 and s0005 now belong to the partner fr-voltis" $?
sleep 2                                  # the scheduler's next inventory load (feed-ms)

# ---- 1. jobs that exit; kill -9 of a metering instance ------------------------------

for i in $(seq 1 6); do submit --command 'sim:run=7s' --gpus $((1 + i % 2)) >/dev/null; done
for i in $(seq 1 6); do
    submit --command 'sim:run=25s ckpt=1s' --gpus 1 --interruptible --max-attempts 5 >/dev/null
done
# every one started (the 7 s ones may have ended before the last started
# on a loaded machine)
wait_sql "SELECT count(DISTINCT job_id) FROM attempts WHERE started_ms IS NOT NULL" 12 150
ok "12 jobs run" $?
sleep 3
kill -9 "$(cat "$D/pids/meter-a.pid")"
ok "kill -9 of meter-a while attempts run" $?
sleep 2
meter meter-a

# ---- 2. a power cut under checkpointing jobs ------------------------------------------

victim=$(sql "SELECT a.site FROM attempts a JOIN jobs j ON j.id = a.job_id
              WHERE a.state = 'running' AND j.interruptible GROUP BY a.site
              ORDER BY count(*) DESC, a.site LIMIT 1")
nlost=$(sql "SELECT count(*) FROM attempts a JOIN jobs j ON j.id = a.job_id
             WHERE a.state = 'running' AND j.interruptible AND a.site = '$victim'")
$G fault site_power_cut --site "$victim" --duration-ms 60000 >/dev/null
ok "power cut at $victim under $nlost checkpointing attempts" $?
wait_sql "SELECT count(*) FROM jobs WHERE state NOT IN ('succeeded', 'failed')" 0 400
st_=$?; ok "every job ended ($(sql "SELECT string_agg(state || ':' || n, ' ') FROM
    (SELECT state, count(*) n FROM jobs GROUP BY state) s"))" $st_
lostn=$(sql "SELECT count(*) FROM attempts WHERE site = '$victim' AND state IN ('lost','superseded')")
# the lost attempts' silence (3 s) and a window's grace, then the outbox
sleep 6
kill -TERM "$(cat "$D/pids/sim.pid")" 2>/dev/null
for _ in $(seq 1 50); do kill -0 "$(cat "$D/pids/sim.pid")" 2>/dev/null || break; sleep 0.2; done

# ---- 3. the stream against the ground truth -------------------------------------------

"$B/test/bin/usage_dump" "$GP_NATS_URL" "check1" 2000 >"$tmp/usage.jsonl" 2>"$tmp/dump.err"
st_=$?; ok "USAGE read ($(tail -n 1 "$tmp/dump.err"))" $st_
$PY - "$tmp/usage.jsonl" "$D/truth.jsonl" "$victim" "$lostn" >"$tmp/check.out" 2>&1 <<'PYEOF'
import json, sys, collections
recs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
truth = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
victim, lostn = sys.argv[3], int(sys.argv[4])
def out(ok, what):
    print(("ok " if ok else "not ok ") + what)
ids = collections.Counter(r["id"] for r in recs)
out(all(c == 1 for c in ids.values()), "no record id twice (%d records)" % len(recs))
seqs = collections.defaultdict(list)
for r in recs: seqs[r["site"]].append(r["site_seq"])
gaps = {s: sorted(v) for s, v in seqs.items() if sorted(v) != list(range(1, len(v) + 1))}
out(not gaps, "per-site sequence numbers 1..n without a gap (%d sites)%s" % (len(seqs), " " + str(gaps)[:300] if gaps else ""))
per = collections.defaultdict(lambda: [0, 0, 0])    # gpu_ms, energy, finals
final = {}
for r in recs:
    k = (r["job_id"], r["attempt"], r["node"])
    per[k][0] += r["gpu_ms"]; per[k][1] += r["energy_mj"]
    if r["final"]: per[k][2] += 1; final[k] = r
tk = {(t["job_id"], t["attempt"], t["node"]): t for t in truth if t["end"] != "sim_stop"}
nofinal = [k for k in tk if per[k][2] != 1]
out(not nofinal, "one final record for each of the %d ended attempts%s" % (len(tk), " missing: " + str(nofinal[:5]) if nofinal else ""))
over = [(k, per[k][0], t["gpu_ms"]) for k, t in tk.items() if per[k][0] > t["gpu_ms"]]
out(not over, "metered GPU-ms never above the ground truth%s" % (" " + str(over[:5]) if over else ""))
exited = [k for k, t in tk.items() if t["end"] == "exited"]
neq = [(k, per[k][0], tk[k]["agent_gpu_ms"]) for k in exited if per[k][0] != tk[k]["agent_gpu_ms"]]
out(exited and not neq, "exited attempts (%d): metered = the agent's final counter%s" % (len(exited), " " + str(neq[:5]) if neq else ""))
eneq = [k for k in exited if per[k][1] != tk[k]["agent_energy_mj"]]
out(exited and not eneq, "... and energy = the agent's final energy counter")
tg = sum(t["gpu_ms"] for t in tk.values()); mg = sum(per[k][0] for k in tk)
out(tg > 0 and mg >= 0.97 * tg, "metered %d of %d GPU-ms delivered (%.2f%%)" % (mg, tg, 100.0 * mg / max(tg, 1)))
down = [k for k, t in tk.items() if t["end"] == "node_down"]
faults = [k for k in down if k in final and final[k]["fault"] and final[k].get("end") in ("lost", "superseded")]
out(len(down) == lostn and len(faults) == len(down),
    "%d attempts killed by the power cut at %s (scheduler: %d lost): each closed as a platform fault" % (len(down), victim, lostn))
ck = [k for k in down if k in final and 0 < final[k].get("ckpt_gpu_ms", 0) <= final[k]["to_gpu_ms"]]
out(len(ck) == len(down), "... each with its last checkpoint (%d)" % len(ck))
okx = [k for k in exited if k in final and not final[k]["fault"]]
out(len(okx) == len(exited), "exited attempts are not faults")
notenant = [r["id"] for r in recs if not r.get("tenant")]
out(not notenant, "every record names its tenant")
open(sys.argv[1] + ".sum", "w").write("%d %d\n" % (len(recs), sum(r["gpu_ms"] for r in recs)))
PYEOF
while read -r line; do
    case $line in
        "ok "*) ok "${line#ok }" 0 ;;
        "not ok "*) ok "${line#not ok }" 1 ;;
        *) echo "# $line" ;;
    esac
done <"$tmp/check.out"

# ---- 4. billing ----------------------------------------------------------------------

read -r nrec sumg <"$tmp/usage.jsonl.sum"
wait_sql "SELECT (SELECT count(*) FROM usage_records) + (SELECT count(*) FROM rejected_records)" \
    "$nrec" 150
st_=$?; ok "billing took all $nrec records ($(sql "SELECT count(*) FROM usage_records") posted, $(sql "SELECT count(*) FROM rejected_records") refused)" $st_
[ "$(sql "SELECT count(*) FROM rejected_records")" = 0 ]
st_=$?; ok "none refused ($(sql "SELECT string_agg(DISTINCT reason, '; ') FROM rejected_records"))" $st_
[ "$(sql "SELECT sum(gpu_ms) FROM usage_records")" = "$sumg" ]
ok "billed GPU-ms = metered GPU-ms ($sumg)" $?
[ "$(sql "SELECT count(*) FROM (SELECT currency FROM ledger_entries GROUP BY currency
           HAVING sum(amount) <> 0) x")" = 0 ] && [ "$(sql "SELECT count(*) FROM ledger_entries")" -gt 0 ]
st_=$?; ok "trial balance zero per currency ($(sql "SELECT count(*) FROM ledger_transfers") transfers)" $st_
fc=$(sql "SELECT count(DISTINCT final_id) FROM fault_credits")
ff=$(sql "SELECT count(*) FROM usage_records WHERE final AND fault")
[ "$ff" -gt 0 ] && [ "$fc" = "$ff" ] &&
    [ "$(sql "SELECT count(*) FROM ledger_transfers WHERE kind = 'failed_cost'")" -gt 0 ]
st_=$?; ok "every attempt lost to the power cut has its work after the checkpoint credited ($fc of $ff; $(sql "SELECT sum(uncharged_gpu_ms) FROM fault_credits") GPU-ms as failed_cost)" $st_

# ---- 5. gpctl ---------------------------------------------------------------------------

cust=$(sql "SELECT tenant FROM usage_records GROUP BY tenant ORDER BY count(*) DESC LIMIT 1")
per=$(sql "SELECT period FROM usage_records WHERE tenant = '$cust' LIMIT 1")
nu=$($G get usage --tenant "$cust" -o json 2>"$tmp/err" | $PY -c 'import json,sys; print(len(json.load(sys.stdin)))')
[ "$nu" = "$(sql "SELECT count(*) FROM usage_records WHERE tenant = '$cust' OR site_owner = '$cust'")" ]
ok "gpctl get usage --tenant $cust: its $nu records" $?
$G close period "$per" --tenant "$cust" >"$tmp/close.out" 2>"$tmp/err"
h=$(sql "SELECT hash FROM statements WHERE tenant = '$cust' AND period = '$per'")
[ -n "$h" ] && grep -q "SHA256:  $h" "$tmp/close.out"
st_=$?; ok "gpctl close period $per --tenant $cust: statement issued ($(grep -c '^  ' "$tmp/close.out") lines)" $st_
$G get statements --tenant "$cust" 2>/dev/null | grep -q "^$per .*${h:0:16}"
ok "gpctl get statements lists it" $?
$G describe statement "$per" --tenant "$cust" -o json 2>"$tmp/err" |
    $PY -c "import json,sys; d=json.load(sys.stdin); sys.exit(0 if d['hash'] == '$h' and d['lines'] else 1)"
ok "gpctl describe statement: the same hash, with its lines" $?
want=$(sql "SELECT string_agg(account || '=' || s, ' ' ORDER BY account) FROM (SELECT account, sum(amount) s
            FROM ledger_entries e JOIN ledger_accounts a ON a.id = e.account WHERE a.tenant = '$cust'
            GROUP BY account) x")
$G get balances --tenant "$cust" -o json 2>"$tmp/err" | WANT="$want" $PY -c "
import json, os, sys
d = {b['account']: b['amount_nanos'] for b in json.load(sys.stdin)['balances']}
got = ' '.join('%s=%d' % (k, d[k]) for k in sorted(d))
sys.exit(0 if got and got == os.environ['WANT'] else 1)"
ok "gpctl get balances: the ledger's sums for $cust" $?

# ---- 5b. jobs under row-level security (scheduler migration 8) -------------------------
# A site partner sees the jobs that ran on its sites, of those the attempts
# at its sites, and nothing else; PostgreSQL itself filters, for the
# scheduler's tenant path and for the partner's own login alike.

$G get sites -o json >"$tmp/sites.json" 2>>"$tmp/gpctl.err"
reg=$($PY -c 'import json,sys; print(" ".join(sorted("%s:%s" % (s["id"], s["tenant"]) for s in json.load(open(sys.argv[1])))))' "$tmp/sites.json")
own=$(sql "SELECT string_agg(site || ':' || owner, ' ' ORDER BY site) FROM site_owners")
[ -n "$reg" ] && [ "$reg" = "$own" ]
ok "site_owners = the registry's sites and owners ($own)" $?
partner=$(sql "SELECT o.owner FROM attempts a JOIN site_owners o ON o.site = a.site
               WHERE o.owner <> '$TENANT' GROUP BY o.owner ORDER BY count(*) DESC LIMIT 1")
want_jobs=$(sql "SELECT count(*) FROM jobs j WHERE j.tenant = '$partner' OR EXISTS (SELECT 1
    FROM attempts a JOIN site_owners o ON o.site = a.site WHERE a.job_id = j.id AND o.owner = '$partner')")
want_atts=$(sql "SELECT count(*) FROM attempts a JOIN site_owners o ON o.site = a.site
    WHERE o.owner = '$partner'")
all_jobs=$(sql "SELECT count(*) FROM jobs")
sql "SELECT gp_tenant_role('$partner'); CREATE ROLE rls_partner LOGIN IN ROLE \"gpt_$partner\"" >/dev/null
pconn=$(echo "$GP_PG_CONNINFO" | sed 's|://postgres@|://rls_partner@|')
psql "$pconn" -XAtq -c "SELECT count(*) FROM jobs; SELECT count(*) FROM attempts;
    SELECT count(*) FROM attempts a WHERE NOT EXISTS (SELECT 1 FROM site_owners o
      WHERE o.site = a.site AND o.owner = '$partner')" >"$tmp/rls.out" 2>"$tmp/rls.err"
[ "$want_jobs" -gt 0 ] && [ "$want_jobs" -lt "$all_jobs" ] &&
    [ "$(sed -n 1p "$tmp/rls.out")" = "$want_jobs" ] && [ "$(sed -n 2p "$tmp/rls.out")" = "$want_atts" ] &&
    [ "$(sed -n 3p "$tmp/rls.out")" = 0 ]
st_=$?; ok "partner $partner's own login sees $(sed -n 1p "$tmp/rls.out" | tr -d '\n') of $all_jobs jobs (those on its sites: $want_jobs) and only the $want_atts attempts at its sites$(head -c 200 "$tmp/rls.err")" $st_
psql "$pconn" -XAtq -c "UPDATE jobs SET name = 'x'" >/dev/null 2>"$tmp/rls.err"
grep -q 'permission denied for table jobs' "$tmp/rls.err"
st_=$?; ok "and may change nothing (PostgreSQL: $(head -c 60 "$tmp/rls.err"))" $st_
njobs=$($G get jobs --tenant "$partner" --scope sites -o json 2>>"$tmp/gpctl.err" | $PY -c 'import json,sys; print(len(json.load(sys.stdin)))')
n0=$($G get jobs --tenant "$partner" -o json 2>>"$tmp/gpctl.err" | $PY -c 'import json,sys; print(len(json.load(sys.stdin)))')
[ "$njobs" = "$want_jobs" ] && [ "$n0" = "$(sql "SELECT count(*) FROM jobs WHERE tenant = '$partner'")" ]
ok "gpctl get jobs --tenant $partner --scope sites: the $njobs jobs on its sites; --scope own: its own $n0" $?
other=$(sql "SELECT j.id FROM jobs j WHERE j.tenant <> '$partner' AND NOT EXISTS (SELECT 1
    FROM attempts a JOIN site_owners o ON o.site = a.site WHERE a.job_id = j.id AND o.owner = '$partner') LIMIT 1")
mine=$(sql "SELECT a.job_id FROM attempts a JOIN site_owners o ON o.site = a.site
    WHERE o.owner = '$partner' LIMIT 1")
$G describe job "$other" --tenant "$partner" >/dev/null 2>"$tmp/desc.err"
st_=$?
$G describe job "$mine" --tenant "$partner" -o json >"$tmp/desc.json" 2>>"$tmp/gpctl.err"
st2_=$?
[ -n "$other" ] && [ "$st_" = 1 ] && grep -q NOTFOUND "$tmp/desc.err" && [ "$st2_" = 0 ] &&
    $PY -c 'import json,sys; j=json.load(open(sys.argv[1])); sys.exit(not j.get("attempts") or not all(a["site"] in sys.argv[2].split() for a in j["attempts"]))' \
        "$tmp/desc.json" "$(sql "SELECT string_agg(site, ' ') FROM site_owners WHERE owner = '$partner'")"
ok "as $partner, a job that never ran on its sites is NOTFOUND, one that did shows only its sites' attempts" $?

# ---- 5c. every tenant of the network sees its own rows --------------------------------
# For every tenant: its usage is exactly its records and its sites'
# records, and its balances are the ledger's sums of its own accounts (a
# partner's payable account: its revenue share), through gpctl and, for
# the partner, through its own PostgreSQL login as well.
bad=""
ntenants=0
for t in $($G get tenants -o json 2>>"$tmp/gpctl.err" | $PY -c 'import json,sys; print(" ".join(x["id"] for x in json.load(sys.stdin)))'); do
    ntenants=$((ntenants + 1))
    $G get usage --tenant "$t" -o json >"$tmp/u-$t.json" 2>>"$tmp/gpctl.err" || bad="$bad $t:usage"
    got=$($PY -c 'import json,sys; r=json.load(open(sys.argv[1])); t=sys.argv[2]
print(len(r) if all(x["tenant"] == t or x["site_owner"] == t for x in r) else "foreign")' "$tmp/u-$t.json" "$t")
    [ "$got" = "$(sql "SELECT count(*) FROM usage_records WHERE tenant = '$t' OR site_owner = '$t'")" ] ||
        bad="$bad $t:usage=$got"
    want=$(sql "SELECT string_agg(a.purpose || '/' || a.currency || '=' || s, ' ' ORDER BY a.purpose, a.currency)
                FROM (SELECT account, sum(amount) s FROM ledger_entries GROUP BY account) e
                JOIN ledger_accounts a ON a.id = e.account WHERE a.tenant = '$t'")
    got=$($G get balances --tenant "$t" -o json 2>>"$tmp/gpctl.err" | $PY -c '
import json, sys
b = json.load(sys.stdin)["balances"]
print(" ".join("%s/%s=%d" % (x["purpose"], x["currency"], x["amount_nanos"]) for x in sorted(b, key=lambda x: (x["purpose"], x["currency"]))))')
    [ "$got" = "$want" ] || bad="$bad $t:balances($got|$want)"
done
payable=$(sql "SELECT coalesce(sum(e.amount), 0) FROM ledger_entries e JOIN ledger_accounts a ON a.id = e.account
               WHERE a.tenant = 'fr-voltis' AND a.purpose = 'payable'")
seen=$(psql "$pconn" -XAtq -c "SELECT coalesce(sum(e.amount), 0) FROM ledger_entries e
    JOIN ledger_accounts a ON a.id = e.account WHERE a.purpose = 'payable';
    SELECT count(*) FROM ledger_accounts WHERE tenant <> 'fr-voltis'" 2>>"$tmp/rls.err" | tr '\n' ' ')
[ "$seen" = "$payable 0 " ] || bad="$bad fr-voltis-login:$seen"
[ "$ntenants" -ge 2 ] && [ "$payable" != 0 ] && [ -z "$bad" ]
st_=$?; ok "each of the $ntenants tenants sees only its usage and its own balances; fr-voltis's revenue share $payable nanos, its own login sees the same and no other account ($bad)" $st_

# ---- 6. the auditor ---------------------------------------------------------------------

AUDIT="$GP_HARNESS/../../deploy/gridpool-audit"
# 97%: the power cut's attempts lose what ran after their last beat (500 ms
# beats here, a few GPU-seconds of ~215); the fault run sizes it at 99.9%.
"$AUDIT" --truth "$D/truth.jsonl" --stream "$tmp/usage.jsonl" --min-share 0.97 \
    --save-hashes "$tmp/hashes" >"$tmp/audit.out" 2>&1
st=$?
sed 's/^/# /' "$tmp/audit.out"
[ "$st" = 0 ] && grep -q '^audit: clean' "$tmp/audit.out" &&
    grep -q 'lost 0 (sequence gaps 0, stream ids missing 0 of [1-9]' "$tmp/audit.out"
ok "gridpool-audit: clean (trial balance 0, nothing lost or doubled, billed <= delivered)" $?
# planted: a statement edited behind the trigger's back, a record that never
# arrived (a gap in its site's numbers), and less delivered than billed
site=$(sql "SELECT site FROM usage_records GROUP BY site ORDER BY count(*) DESC LIMIT 1")
psql "$GP_PG_CONNINFO" -Xq -c "ALTER TABLE statements DISABLE TRIGGER statements_immutable;
    UPDATE statements SET content = content || 'x';
    ALTER TABLE statements ENABLE TRIGGER statements_immutable;
    INSERT INTO rejected_records (id, subject, reason, body, at_ms, site, site_seq)
      SELECT 'planted', 'x', 'planted', ''::bytea, 0, '$site', max(site_seq) + 2
      FROM usage_records WHERE site = '$site'" 2>>"$tmp/psql.err"
head -n 1 "$D/truth.jsonl" | $PY -c "
import json, sys
t = json.loads(sys.stdin.read()); t['gpu_ms'] = 1; print(json.dumps(t))" >"$tmp/truth.bad"
tail -n +2 "$D/truth.jsonl" >>"$tmp/truth.bad"
"$AUDIT" --truth "$tmp/truth.bad" --hashes "$tmp/hashes" --min-share 0.5 >"$tmp/audit2.out" 2>&1
st=$?
[ "$st" = 1 ] && grep -q '^violation: statement_hash' "$tmp/audit2.out" &&
    grep -q '^violation: statement_changed' "$tmp/audit2.out" &&
    grep -q '^violation: sequence_gap: site '"$site" "$tmp/audit2.out" &&
    grep -q '^violation: billed_over_delivered' "$tmp/audit2.out"
st_=$?; ok "gridpool-audit finds each planted violation ($(tail -n 1 "$tmp/audit2.out"))" $st_
tap_end
