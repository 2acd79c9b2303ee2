#!/usr/bin/env bash
# tests/run.sh -- runs every test program and prints "N passed, N failed".
#
#   tests/run.sh BUILD_DIR [unit|integration|all]
#
# Tests are found in every folder below BUILD_DIR/test/{unit,integration}/
# (the C programs) and tests/{unit,integration}/ (the *_test.sh), and named
# by their path there: unit/scheduler/place_test, its log in
# BUILD_DIR/test-logs/unit/scheduler/place_test.log.
#
# Unit tests run as they are.  Each integration test gets a fresh private
# stack (nats-server, redis-server, PostgreSQL on free loopback ports, in a
# temp folder) from tests/harness/stack.sh, which is torn down afterwards
# whatever the test did.  A test passes an assertion per "ok" line.  Each
# program must print exactly one TAP plan ("1..N", before or after its
# results; "1..0 # SKIP why" for a program that has nothing to run here)
# and exactly N "ok"/"not ok" lines: a missing plan, or a count that
# differs from it (a program that stopped early, even with status 0),
# fails the program (one failure if it has no "not ok" line of its own),
# and so does a non-zero exit status without a "not ok" line.
#
# Lanes.  GP_TEST_JOBS programs run at once (default 3: most integration
# tests wait on timers, not on the CPU), longest first by the durations in
# tests/durations.tsv (the normal build's column, or the sanitizer build's
# for BUILD_DIR .../san; a test not listed counts as 30 s).  A test whose
# source says "test-tags: heavy" (the 1,000-site fleets) runs in a lane of
# its own: never two at once, and that lane takes other work when none is
# left.  One tagged "alone" (it saturates the machine on purpose: a flood)
# runs first, with nothing beside it.  A program gets GP_TEST_TIMEOUT seconds (default 900; the tag
# "timeout=N" sets its own); past it, it is stopped and fails.
#
# Passes.  .ci/run builds the suite twice, the second time with ASan and
# UBSan, and says which pass it is in GP_TEST_PASS (normal or san).  C
# tests run in both.  A test tagged "pass=normal" or "pass=san" runs only in
# that pass: a long end-to-end test runs once per CI run, and a test that
# does not depend on the build (k8s, schemas, the deb's and compose's
# checks) runs in the normal pass.  Without GP_TEST_PASS every test runs.
# Tags are read from the test's source: a line "test-tags: ..." in its
# first 60 lines (a shell comment or a C comment).
#
# Every program's wall time goes to BUILD_DIR/test-logs/timings.tsv (test,
# seconds, ok, failed, lane), and the ten slowest are printed at the end.
set -u
shopt -s globstar      # **/ : any depth of folders, none included
build=${1:-build}
which=${2:-all}
here=$(cd "$(dirname "$0")" && pwd)
src=${GP_TEST_SRC:-$here}      # where the *_test.sh live (tests/unit/tools/run_sh_test.sh points it elsewhere)
top=$(cd "$here/.." && pwd)
logdir=$build/test-logs
jobs=${GP_TEST_JOBS:-3}
pass=${GP_TEST_PASS:-}
timeout_s=${GP_TEST_TIMEOUT:-900}
durations=${GP_TEST_DURATIONS:-$here/durations.tsv}
dcol=2                         # durations.tsv: test, seconds normal, seconds under the sanitizers
[ "${build%/san}" != "$build" ] || [ "$pass" = san ] && dcol=3
mkdir -p "$logdir"
rm -rf "$logdir/.results"
mkdir -p "$logdir/.results"
timings=$logdir/timings.tsv
printf 'test\tseconds\tok\tfailed\tlane\n' >"$timings"

# ---- one program -----------------------------------------------------------------

# Runs one test into its log and writes "ok nok seconds" into its result
# file; prints nothing (the parent prints when it is collected).
run_one() {       # name, timeout, command...
    local name=$1 limit=$2; shift 2
    local log=$logdir/$name.log res=$logdir/.results/${name//\//%}
    mkdir -p "$(dirname "$log")"
    local start
    start=$(date +%s%N)
    timeout --kill-after=15 "$limit" "$@" >"$log" 2>&1
    local rc=$?
    [ "$rc" -eq 124 ] && echo "not ok - $name stopped after its ${limit} s" >>"$log"
    local ok nok plans plan why=""
    ok=$(grep -c '^ok ' "$log")
    nok=$(grep -c '^not ok ' "$log")
    plans=$(grep -cE '^1\.\.[0-9]+( *#.*)?$' "$log")
    plan=$(grep -E '^1\.\.[0-9]+( *#.*)?$' "$log" | head -n 1 | sed -E 's/^1\.\.([0-9]+).*/\1/')
    # A plan problem is one more failure, unless the program already has one
    # (e.g. with-stack.sh's "not ok - sanitizer reports" after the plan).
    if [ "$plans" -ne 1 ]; then
        why="printed $plans TAP plans (1..N), expected one"
    elif [ $((ok + nok)) -ne "$plan" ]; then
        why="planned $plan results but printed $((ok + nok))"
    fi
    if [ -n "$why" ]; then
        echo "not ok - $name $why" >>"$log"
        [ "$nok" -eq 0 ] && nok=1
    fi
    if [ "$rc" -ne 0 ] && [ "$nok" -eq 0 ]; then
        nok=1
        echo "not ok - $name exited with status $rc" >>"$log"
    fi
    echo "$ok $nok $(( ($(date +%s%N) - start) / 1000000 ))" >"$res"
}

# ---- what there is to run --------------------------------------------------------

# The tags of a test: its source's "test-tags:" line.
tags_of() {       # source file
    [ -f "$1" ] && head -n 60 "$1" | sed -n 's/.*test-tags:\(.*\)/\1/p' | head -n 1
}

# Whether a test with these tags runs in this pass.
in_pass() {       # tags
    case " $1 " in
    *" pass=normal "*) [ -z "$pass" ] || [ "$pass" = normal ] ;;
    *" pass=san "*)    [ -z "$pass" ] || [ "$pass" = san ] ;;
    *) return 0 ;;
    esac
}

names=() cmds=() heavy=() limits=() expect=() alone=()
add() {           # name, source, command...
    local name=$1 source=$2 tags lim=$timeout_s est
    shift 2
    tags=$(tags_of "$source")
    in_pass "$tags" || return 0
    case " $tags " in *" timeout="*) lim=$(echo " $tags " | sed -E 's/.* timeout=([0-9]+) .*/\1/') ;; esac
    est=$(awk -F'\t' -v n="$name" -v c="$dcol" '$1 == n { print int($c + 0.5); exit }' \
          "$durations" 2>/dev/null)
    names+=("$name")
    cmds+=("$(printf '%q ' "$@")")
    limits+=("$lim")
    expect+=("${est:-30}")
    case " $tags " in *" heavy "*) heavy+=(1) ;; *) heavy+=(0) ;; esac
    case " $tags " in *" alone "*) alone+=(1) ;; *) alone+=(0) ;; esac
}

if [ "$which" = unit ] || [ "$which" = all ]; then
    for t in "$build"/test/unit/**/*_test; do
        [ -x "$t" ] || continue
        n=${t#"$build"/test/unit/}
        add "unit/$n" "$top/tests/unit/$n.c" "$t"
    done
    for t in "$src"/unit/**/*_test.sh; do
        [ -f "$t" ] || continue
        n=${t#"$src"/unit/}
        add "unit/${n%.sh}" "$t" env BUILD="$build" bash "$t"
    done
fi
if [ "$which" = integration ] || [ "$which" = all ]; then
    for t in "$build"/test/integration/**/*_test; do
        [ -x "$t" ] || continue
        n=${t#"$build"/test/integration/}
        add "integration/$n" "$top/tests/integration/$n.c" "$here/harness/with-stack.sh" "$build" "$t"
    done
    for t in "$src"/integration/**/*_test.sh; do
        [ -f "$t" ] || continue
        n=${t#"$src"/integration/}
        add "integration/${n%.sh}" "$t" "$here/harness/with-stack.sh" "$build" bash "$t"
    done
fi

# Longest first: the queue is the indexes sorted by expected seconds.
# Those that must run alone go first (the lanes then fill the machine).
mapfile -t queue < <(for i in "${!names[@]}"; do echo "${alone[$i]} ${expect[$i]} $i"; done |
                     sort -k1,1nr -k2,2nr -s | awk '{print $3}')

# ---- the lanes -------------------------------------------------------------------

passed=0
failed=0
failures=()
declare -A running=()   # pid -> index
declare -A lane_of=()   # pid -> lane number
heavy_pid=
alone_pid=
wall0=$(date +%s)

collect() {       # pid
    local pid=$1 i=${running[$1]} res ok nok ms name
    name=${names[$i]}
    res=$logdir/.results/${name//\//%}
    read -r ok nok ms <"$res" 2>/dev/null || { ok=0; nok=1; ms=0; }
    passed=$((passed + ok))
    failed=$((failed + nok))
    printf '%s\t%d.%03d\t%d\t%d\t%d\n' "$name" $((ms / 1000)) $((ms % 1000)) "$ok" "$nok" \
        "${lane_of[$pid]}" >>"$timings"
    printf '%-44s %4d ok %4d failed  %3ds\n' "$name" "$ok" "$nok" $(((ms + 500) / 1000))
    if [ "$nok" -ne 0 ]; then
        failures+=("$name")
        grep '^not ok' "$logdir/$name.log" | head -20 | sed 's/^/    /'
        tail -n 15 "$logdir/$name.log" | sed 's/^/    | /'
    fi
    [ "$pid" = "$heavy_pid" ] && heavy_pid=
    [ "$pid" = "$alone_pid" ] && alone_pid=
    unset "running[$pid]" "lane_of[$pid]"
}

# The next test to start: a heavy one only when no heavy one runs; one
# that must run alone only when nothing runs, and nothing beside it.
next() {
    local k i
    [ -n "$alone_pid" ] && return 1
    for k in "${!queue[@]}"; do
        i=${queue[$k]}
        if [ "${alone[$i]}" = 1 ]; then
            [ ${#running[@]} -eq 0 ] || continue
        elif [ "${heavy[$i]}" = 1 ] && [ -n "$heavy_pid" ]; then
            continue
        fi
        pick=$i
        unset "queue[$k]"
        queue=("${queue[@]}")
        return 0
    done
    return 1
}

lane=0
while [ ${#queue[@]} -gt 0 ] || [ ${#running[@]} -gt 0 ]; do
    while [ ${#running[@]} -lt "$jobs" ] && next; do
        eval "run_one \"\${names[$pick]}\" \"\${limits[$pick]}\" ${cmds[$pick]}" &
        running[$!]=$pick
        lane=$((lane + 1))
        lane_of[$!]=$lane
        [ "${heavy[$pick]}" = 1 ] && heavy_pid=$!
        [ "${alone[$pick]}" = 1 ] && alone_pid=$!
    done
    [ ${#running[@]} -gt 0 ] || break
    wait -n -p done_pid "${!running[@]}"
    collect "$done_pid"
done

echo "wall time: $(( $(date +%s) - wall0 )) s in $jobs lanes; the ten slowest (timings.tsv):"
tail -n +2 "$timings" | sort -t$'\t' -k2,2nr | head -n 10 |
    awk -F'\t' '{ printf "  %-44s %7.1f s\n", $1, $2 }'
[ ${#failures[@]} -eq 0 ] || echo "failed: ${failures[*]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
