#!/usr/bin/env bash
# tests/bench/run.sh BUILD_DIR -- the benchmarks (make bench).
#
# Each figure is printed next to its reference, measured in the same run
# on the same machine, as a ratio, with the aim beside it.  Benchmarks are
# not tests: nothing passes or fails on a figure; the exit status is 0
# unless a benchmark could not run at all.
#
#   codec    tests/bench/codec_bench    gp_msg_encode/decode of a heartbeat
#                                       (8 GPUs, 2 attempts) vs msgpack-c
#   chassis  tests/bench/chassis_bench  round trips through testsvc's
#                                       gp.test.echo vs a raw cnats responder
#   hb       tests/bench/hb_bench       gridpool-registry absorbing 100,000
#                                       nodes' heartbeats vs redis-benchmark
#                                       running the registry's own EVALSHA
#   pub      tests/bench/pub_bench      time the loop spends in one gp_bus_pub:
#                                       idle connection vs a server that stops
#                                       reading (an in-process fake server)
#   place    tests/bench/place_bench    gridpool-scheduler placing 1-GPU jobs on
#                                       ~100,000 simulated nodes (gridpool-sim),
#                                       one and two instances, submit->placed
#                                       p50/p99 at full and half rate, vs
#                                       redis-benchmark running the book script
#   reg      tests/bench/reg_bench.sh   100,000 simulated nodes registering from
#                                       cold through one gridpool-registry, vs one
#                                       INSERT of as many rows
#   recover  tests/bench/recover_bench.sh  last heartbeat -> replacement running
#                                       over 1,000 node crashes on the 1,000-site
#                                       fleet (registry, scheduler, recovery, sim)
#   alert    tests/bench/alert_bench.sh  fault injected -> alert published (XID 79,
#                                       node crash, site power cut) on the 1,000-site
#                                       fleet, and alerting's CPU per heartbeat vs
#                                       the registry's
#   ledger   tests/bench/ledger_bench   gridpool-billing draining a backlog of
#                                       100,000 usage records from USAGE, rated
#                                       and posted double-entry with durable
#                                       commits, vs COPY of the same rows and
#                                       one-row-per-commit INSERTs (PostgreSQL
#                                       restarted with fsync and synchronous
#                                       commit on for it)
#   ctr      tests/bench/ctr_bench.sh   container start to exit of `true`, image
#                                       cached, through gridpool-agent (RunAttempt
#                                       -> exited), vs `runc run` by hand of the
#                                       same image and config
#   detect   tests/bench/detect_bench   the node failure detector (gp/detect.h)
#                                       replayed over 10,000 node-days of lossy,
#                                       jittered beats and renewals, vs a fixed
#                                       3-missed-beats deadline (no stack)
#
# One private stack (tests/harness/stack.sh: nats-server, redis-server,
# PostgreSQL on free loopback ports in a temp folder) serves the run and is
# torn down on any exit.  Figures also go to BUILD_DIR/bench.txt as
# key=value lines; each benchmark's notes go to BUILD_DIR/bench-logs/.
# Every loop in the benchmarks is bounded in count and time; each program
# also runs under a timeout.  Expect about 1-2 minutes without place, at
# most ~4; place alone takes ~3-5 minutes (most of it the fleet's
# registration).  GP_BENCH_ONLY=name[,name] runs only those.
set -u
[ $# -ge 1 ] || { echo "usage: tests/bench/run.sh BUILD_DIR" >&2; exit 2; }
build=$(cd "$1" && pwd) || exit 2
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
harness=$root/tests/harness
out=$build/bench.txt
logs=$build/bench-logs

for f in test/bench/codec_bench test/bench/chassis_bench test/bench/hb_bench test/bench/pub_bench \
         test/bench/place_bench test/bench/detect_bench bin/gridpool-registry bin/gridpool-scheduler bin/gridpool-sim \
         bin/gridpool-recovery bin/gridpool-billing bin/gridpool-alerting test/bench/ledger_bench \
         test/bin/testsvc; do
    [ -x "$build/$f" ] || { echo "bench: $build/$f missing (build it first)" >&2; exit 2; }
done
command -v redis-benchmark >/dev/null || { echo "bench: redis-benchmark missing (make deps)" >&2; exit 2; }

dir=$(mktemp -d /tmp/gp-bench.XXXXXX)
cleanup() {
    "$harness/stack.sh" stop "$dir" >/dev/null 2>&1
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir -p "$logs"
kv=$dir/bench.kv
{
    echo "bench_date=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "bench_commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "bench_cpus=$(nproc)"
    echo "bench_loadavg_start=$(cut -d' ' -f1 /proc/loadavg)"
} >"$kv"

status=0
run_bench() {     # name, seconds
    local name=$1 limit=$2 start=$SECONDS rc
    if [ -n "${GP_BENCH_ONLY:-}" ] && [[ ",$GP_BENCH_ONLY," != *",$name,"* ]]; then
        return
    fi
    printf 'bench: %-8s ...' "$name" >&2
    if [ -f "$here/${name}_bench.sh" ]; then       # a script: services driven from the shell
        timeout -k 5 "$limit" bash "$here/${name}_bench.sh" >>"$kv" 2>"$logs/$name.log"
    else
        timeout -k 5 "$limit" "$build/test/bench/${name}_bench" >>"$kv" 2>"$logs/$name.log"
    fi
    rc=$?
    printf ' %3ds%s\n' $((SECONDS - start)) "$([ $rc -eq 0 ] || echo "  (exit $rc; see $logs/$name.log)")" >&2
    [ $rc -eq 0 ] || status=1
}

run_bench codec 60
run_bench pub 30
run_bench detect 300

export GP_PG_TEMPLATE=$build/pg-template
GP_STACK_PG_STATS=1 "$harness/stack.sh" start "$dir" >&2 || { echo "bench: the private stack did not start" >&2; exit 1; }
set -a
# shellcheck disable=SC1091
. "$dir/gp.env"
set +a
export GP_BUILD=$build GP_HARNESS=$harness

run_bench chassis 120
run_bench ctr 300
run_bench hb 220
run_bench reg 300
run_bench place 600
run_bench recover 900
run_bench alert 600
# last: PostgreSQL restarted with fsync and synchronous_commit on (durable
# commits), as the ledger's figure must be
if [ -z "${GP_BENCH_ONLY:-}" ] || [[ ",$GP_BENCH_ONLY," == *",ledger,"* ]]; then
    "$harness/stack.sh" stop-pg "$dir" >&2 &&
        GP_STACK_PG_DURABLE=1 GP_STACK_PG_STATS=1 "$harness/stack.sh" start-pg "$dir" >&2
fi
run_bench ledger 900
echo "bench_loadavg_end=$(cut -d' ' -f1 /proc/loadavg)" >>"$kv"
cp "$kv" "$out"

# ---- the table ------------------------------------------------------------------
get() { sed -n "s/^$1=//p" "$kv" | tail -n 1; }
num() {           # key [decimals]: the value, or "-" when missing
    local v
    v=$(get "$1")
    if [ -z "$v" ]; then echo "-"; else LC_ALL=C printf "%.${2:-0}f" "$v"; fi
}
row() { printf '%-30s %14s   %-28s %14s   %6s   %s\n' "$@"; }

echo
printf 'gridpool benchmarks  %s  commit %s  %s CPUs  load %s -> %s\n' "$(get bench_date)" \
    "$(get bench_commit)" "$(get bench_cpus)" "$(get bench_loadavg_start)" "$(get bench_loadavg_end)"
echo
row "figure" "value" "reference (same run)" "value" "ratio" "aim"
row "------" "-----" "--------------------" "-----" "-----" "---"
row "chassis echo, W=1 (req/s)" "$(num chassis_w1_rps)" "raw cnats responder (asap)" \
    "$(num chassis_w1_raw_rps)" "$(num chassis_w1_ratio 2)" ">= 0.80"
row "chassis echo, W=32 (req/s)" "$(num chassis_w32_rps)" "raw cnats responder (asap)" \
    "$(num chassis_w32_raw_rps)" "$(num chassis_w32_ratio 2)" ">= 0.80"
row "codec encode (msg/s)" "$(num codec_encode_msgs_s)" "msgpack_pack by hand" \
    "$(num codec_encode_ref_msgs_s)" "$(num codec_encode_ratio 2)" ">= 0.80"
row "codec decode (msg/s)" "$(num codec_decode_msgs_s)" "msgpack_unpack_next" \
    "$(num codec_decode_ref_msgs_s)" "$(num codec_decode_ratio 2)" ">= 0.80"
row "registry heartbeats (hb/s)" "$(num hb_steady_per_s)" "redis-benchmark EVALSHA" \
    "$(num hb_redis_ref_per_s)" "$(num hb_ratio 2)" ">= 50000 hb/s"
row "registry RSS (bytes/node)" "$(num hb_rss_bytes_per_node)" "-" "-" "-" "< 2048"
row "placements 1 instance (/s)" "$(num place_one_per_s)" "redis-benchmark EVALSHA book" \
    "$(num place_redis_ref_per_s)" "$(num place_one_ratio 3)" ">= 5000/s"
row "placements 2 instances (/s)" "$(num place_two_per_s)" "redis-benchmark EVALSHA book" \
    "$(num place_redis_ref_per_s)" "$(num place_two_ratio 3)" ">= 5000/s"
row "submit->placed p99, half (ms)" "$(num place_half_p99_ms 1)" "p50 (ms)" \
    "$(num place_half_p50_ms 1)" "-" "< 10 ms"
row "false node-lost /10k node-days" "$(num detect_false_lost_per_10k_node_days 2)" \
    "fixed 3 missed beats, same traces" "$(num detect_false_lost_fixed_per_10k_node_days 2)" "-" "<= 1"
row "last heartbeat -> lost p99 (ms)" "$(num detect_lost_p99_ms)" "fixed 3 missed beats" \
    "$(num detect_lost_fixed_ms)" "-" "(<= 17 s to running)"
row "heartbeat -> running elsewhere p99" "$(num recover_p99_ms)" "p50 (ms)" \
    "$(num recover_p50_ms)" "-" "<= 17000 ms"
row "nodes registered from cold (s)" "$(num reg_seconds 1)" "one INSERT of the rows (s)" \
    "$(num reg_insert_ref_seconds 2)" "-" "< 60 s, 0 refused"
row "  of them refused, nodes" "$(num reg_refused)" "transactions" "$(num reg_batches)" "-" \
    "$(num reg_nodes) nodes"
row "node msgs / interval, busy" "$(num recover_msgs_per_node_interval_busy 3)" "idle fleet" \
    "$(num recover_msgs_per_node_interval_idle 3)" "-" "1.0 both"
row "XID 79 -> alert published p99 (ms)" "$(num alert_gpu_p99_ms)" "-> condition known p99" \
    "$(num alert_gpu_detect_p99_ms)" "-" "(measured)"
row "alerting CPU per heartbeat (us)" "$(num alert_cpu_us_per_beat 1)" "registry CPU per beat (us)" \
    "$(num alert_registry_cpu_us_per_beat 1)" "$(num alert_cost_ratio 3)" "(measured)"
row "usage records posted (/s)" "$(num ledger_per_s)" "COPY of the same rows (/s)" \
    "$(num ledger_copy_rows_per_s)" "$(num ledger_copy_ratio 3)" ">= 20000/s"
row "usage records posted (/s)" "$(num ledger_per_s)" "one row per commit (/s)" \
    "$(num ledger_row_commit_per_s)" "$(num ledger_row_ratio 2)" "(measured)"
row "container start+exit p50 (ms)" "$(num ctr_p50_ms 1)" "runc run by hand p50 (ms)" \
    "$(num ctr_runc_p50_ms 1)" "$(num ctr_ratio 2)" "(measured)"
row "container start+exit p99 (ms)" "$(num ctr_p99_ms 1)" "runc run by hand p99 (ms)" \
    "$(num ctr_runc_p99_ms 1)" "-" "(measured)"
row "publish, server not reading (ms)" "$(num pub_stalled_worst_ms 1)" "publish, idle (us, p50)" \
    "$(num pub_idle_us_p50 2)" "-" "(measured)"
echo
echo "  codec: heartbeat of $(num codec_msg_bytes) bytes; encode $(num codec_encode_mb_s) MB/s" \
     "(ref $(num codec_encode_ref_mb_s)), decode $(num codec_decode_mb_s) MB/s (ref $(num codec_decode_ref_mb_s))"
echo "  chassis: Echo body $(num chassis_body_bytes) bytes, errors $(num chassis_errors); testsvc's echo handler moves its input to its reply (no codec work of its own);" \
     "both sides publish with SendAsap; a raw responder with cnats' default buffering" \
     "does $(num chassis_w1_raw_buffered_rps) req/s at W=1 (each publish waits ~1 ms for its flusher)"
echo "  registry: $(num hb_nodes) nodes, $(num hb_payload_bytes)-byte heartbeats; round 1 (all new)" \
     "$(num hb_round1_per_s) hb/s; steady over $(num hb_steady_seconds 1) s;" \
     "recorded $(num hb_recorded) of $(num hb_sent) sent"
echo "            dropped $(num hb_dropped), failed $(num hb_failed), Redis write failures" \
     "$(num hb_write_failures), shed $(num hb_shed), stranded in the bus $(num hb_stranded)," \
     "live in gp:seen $(num hb_live_nodes)"
echo "            RSS $(num hb_rss_before_bytes) -> $(num hb_rss_live_bytes) bytes (all live)" \
     "-> $(num hb_rss_end_bytes) (end); Redis $(num hb_redis_bytes_per_node) bytes/node;" \
     "hb script same as the copy: $(num hb_script_match)"
echo "            (the registry keeps no per-node state in memory: its RSS growth is the"
echo "            high-water mark of buffers for the <= 20,000 beats in flight)"
echo "            CPU us per beat: registry $(num hb_cpu_us_per_beat_registry 1)," \
     "redis $(num hb_cpu_us_per_beat_redis 1), nats-server $(num hb_cpu_us_per_beat_nats 1)," \
     "publisher $(num hb_cpu_us_per_beat_publisher 1)"
echo "  publish: $(num pub_msg_bytes)-byte messages on the loop thread; idle p50 $(num pub_idle_us_p50 2) us," \
     "p99 $(num pub_idle_us_p99 2) us, max $(num pub_idle_us_max 0) us; server not reading: first publish" \
     "stalls after $(num pub_stalled_first_stall_s 3) s, worst $(num pub_stalled_worst_ms 0) ms," \
     "$(num pub_stalled_over_10ms) publishes over 10 ms, loop inside publish $(num pub_stalled_loop_share 2)" \
     "of the phase (write deadline $(num pub_write_deadline_ms) ms, connect timeout $(num pub_connect_timeout_ms) ms)"
echo "  detect: $(num detect_node_days) node-days replayed; false node-lost $(num detect_false_lost)" \
     "(adaptive on beats alone $(num detect_false_lost_beats), fixed 3 missed beats $(num detect_false_lost_fixed))," \
     "false suspect $(num detect_false_suspect); last heartbeat -> lost p50 $(num detect_lost_p50_ms) ms;" \
     "agents' own leases ran out $(num detect_lease_lapses) times (see $logs/detect.log)"
echo "  place: $(num place_nodes) nodes ($(num place_gpus) GPUs) registered in $(num place_register_s) s," \
     "snapshots $(num place_snapshot_nodes_a)/$(num place_snapshot_nodes_b) nodes; 1-GPU jobs, tenant op"
echo "         two instances: $(num place_two_per_s)/s, p50 $(num place_two_p50_ms 1) ms p99" \
     "$(num place_two_p99_ms 1) ms ($(num place_two_submitted) submitted at $(num place_two_submit_per_s)/s)"
echo "         one instance:  $(num place_one_per_s)/s, p50 $(num place_one_p50_ms 1) ms p99" \
     "$(num place_one_p99_ms 1) ms ($(num place_one_submitted) submitted at $(num place_one_submit_per_s)/s)"
echo "         half rate ($(num place_half_rate)/s): p50 $(num place_half_p50_ms 1) ms p99" \
     "$(num place_half_p99_ms 1) ms; failed starts $(num place_failed_starts), placed twice" \
     "$(num place_placed_twice), book script same as the copy: $(num place_script_match)"
echo "         CPU us per placement, one instance (its submit, placement, dispatch, start event):"
echo "           scheduler $(num place_one_cpu_us_scheduler) postgres $(num place_one_cpu_us_postgres)" \
     "nats $(num place_one_cpu_us_nats) redis $(num place_one_cpu_us_redis)" \
     "registry $(num place_one_cpu_us_registry) sim $(num place_one_cpu_us_sim)" \
     "bench $(num place_one_cpu_us_bench)"
for k in gpu node site; do
    case $k in gpu) what="XID 79 (GpuFallenOffBus, for 0 s)" ;; node) what="node crash (NodeDown, for 20 s)" ;;
               site) what="site power cut (SiteUnreachable, for 30 s)" ;; esac
    echo "  alert: $what: $(num alert_${k}_alerted) of $(num alert_${k}_faults) alerted;" \
         "fault -> alert received p50 $(num alert_${k}_p50_ms) ms, p99 $(num alert_${k}_p99_ms) ms;" \
         "fault -> condition known (starts_ms) p50 $(num alert_${k}_detect_p50_ms), p99 $(num alert_${k}_detect_p99_ms);" \
         "alerting's own share (minus the for) p50 $(num alert_${k}_own_p50_ms), p99 $(num alert_${k}_own_p99_ms)"
done
echo "  alert: $(num alert_sites) sites, $(num alert_beats_per_s) beats/s evaluated, alerting at $(num alert_cpu_pct 1)% of a core;" \
     "other firing alerts (muted ones must not fire) $(num alert_other_firing)"
echo "  recover: $(num recover_losses) node losses on $(num recover_sites) sites (9 s lease, 5 s beats):" \
     "last heartbeat -> every job of the node running elsewhere p50 $(num recover_p50_ms) ms," \
     "p99 $(num recover_p99_ms) ms, max $(num recover_max_ms) ms, over 17 s $(num recover_over_17s);" \
     "site events $(num recover_site_events), freezes $(num recover_frozen)," \
     "invariant violations $(num recover_invariant_violations)"
echo "  ledger: $(num ledger_records) records drained from USAGE (fsync and synchronous_commit on:" \
     "$(num ledger_fsync_on)), $(num ledger_records_per_batch 1) records a transaction ($(num ledger_batches) batches);" \
     "$(num ledger_transfers_per_record 2) transfers and $(num ledger_entries_per_record 2) entries a record;" \
     "$(num ledger_bytes_per_record) bytes a record (records, transfers, entries with indexes);" \
     "WAL $(num ledger_wal_bytes_per_record) bytes and $(num ledger_wal_syncs_per_record 4) fsyncs a record;" \
     "trial balance non-zero in $(num ledger_trial_balance_nonzero) currencies; published at" \
     "$(num ledger_publish_per_s)/s before; CPU us a record: billing $(num ledger_cpu_us_billing 1)," \
     "postgres $(num ledger_cpu_us_postgres 1), nats $(num ledger_cpu_us_nats 1)"
echo
echo "figures: $out   notes: $logs/"
exit $status
