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
set -u
shopt -s globstar      # **/ : any depth of folders, none included
build=${1:-build}
which=${2:-all}
here=$(cd "$(dirname "$0")" && pwd)
src=${GP_TEST_SRC:-$here}      # where the *_test.sh live (tests/unit/tools/run_sh_test.sh points it elsewhere)
logdir=$build/test-logs
mkdir -p "$logdir"
passed=0
failed=0
failures=()

run_one() {       # name, command...
    local name=$1; shift
    local log=$logdir/$name.log
    mkdir -p "$(dirname "$log")"
    local start=$SECONDS
    "$@" >"$log" 2>&1
    local rc=$?
    local ok nok
    ok=$(grep -c '^ok ' "$log")
    nok=$(grep -c '^not ok ' "$log")
    local plans plan
    plans=$(grep -cE '^1\.\.[0-9]+( *#.*)?$' "$log")
    plan=$(grep -E '^1\.\.[0-9]+( *#.*)?$' "$log" | head -n 1 | sed -E 's/^1\.\.([0-9]+).*/\1/')
    # A plan problem is one more failure, unless the program already has one
    # (e.g. with-stack.sh's "not ok - sanitizer reports" after the plan).
    local why=""
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
    passed=$((passed + ok))
    failed=$((failed + nok))
    printf '%-44s %4d ok %4d failed  %3ds\n' "$name" "$ok" "$nok" $((SECONDS - start))
    if [ "$nok" -ne 0 ]; then
        failures+=("$name")
        grep '^not ok' "$log" | head -20 | sed 's/^/    /'
        tail -n 15 "$log" | sed 's/^/    | /'
    fi
}

if [ "$which" = unit ] || [ "$which" = all ]; then
    for t in "$build"/test/unit/**/*_test; do
        [ -x "$t" ] || continue
        run_one "unit/${t#"$build"/test/unit/}" "$t"
    done
    for t in "$src"/unit/**/*_test.sh; do
        [ -f "$t" ] || continue
        t_=${t#"$src"/unit/}
        run_one "unit/${t_%.sh}" env BUILD="$build" bash "$t"
    done
fi
if [ "$which" = integration ] || [ "$which" = all ]; then
    for t in "$build"/test/integration/**/*_test; do
        [ -x "$t" ] || continue
        run_one "integration/${t#"$build"/test/integration/}" "$here/harness/with-stack.sh" "$build" "$t"
    done
    for t in "$src"/integration/**/*_test.sh; do
        [ -f "$t" ] || continue
        t_=${t#"$src"/integration/}
        run_one "integration/${t_%.sh}" \
            "$here/harness/with-stack.sh" "$build" bash "$t"
    done
fi
[ ${#failures[@]} -eq 0 ] || echo "failed: ${failures[*]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
