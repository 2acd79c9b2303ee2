#!/usr/bin/env bash
# run_sh_test.sh -- tests/run.sh holds each program to its TAP plan: fake
# test programs in a temp build folder (a complete one, one that stops
# early with status 0, one without a plan, one with two plans, one whose
# plan is too small, a skipped one, one that fails with status 0 and a
# "not ok", one with a "not ok" after its plan) are run through it and its
# verdict and counts are checked.
# Prints TAP.
# test-tags: pass=normal (tests/run.sh)
set -u
here=$(cd "$(dirname "$0")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
fail=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
nok() { n=$((n + 1)); fail=1; echo "not ok $n - $1"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else nok "$what"; fi; }

# The fakes are in a folder of their own, as tests are (unit/<area>/), so
# run.sh must find them below unit/ and name them by that path.
mkdir -p "$tmp/b/test/unit/area" "$tmp/src/unit" "$tmp/src/integration"
fake() {   # name, body (a shell script)
    printf '#!/bin/sh\n%s\n' "$2" >"$tmp/b/test/unit/area/$1_test"
    chmod +x "$tmp/b/test/unit/area/$1_test"
}
verdict() {  # name -> "OK FAILED" from run.sh's line for it
    grep "^unit/area/$1_test " "$tmp/out" | awk '{print $2, $4}'
}
runit() {    # runs tests/run.sh over the fakes present now; sets rc, writes $tmp/out
    GP_TEST_SRC=$tmp/src "$here/run.sh" "$tmp/b" unit >"$tmp/out" 2>&1
    rc=$?
}

fake good 'echo "ok 1 - a"; echo "ok 2 - b"; echo "1..2"'
fake leading 'echo "1..2"; echo "ok 1 - a"; echo "ok 2 - b"'
fake skip 'echo "1..0 # SKIP nothing to do here"'
runit
check "complete programs pass (trailing plan, leading plan, 1..0 # SKIP)" \
    test "$rc" -eq 0 -a "$(verdict good)" = "2 0" -a "$(verdict leading)" = "2 0" -a "$(verdict skip)" = "0 0"
check "the summary counts them: 4 passed, 0 failed" grep -q '^4 passed, 0 failed$' "$tmp/out"

rm -f "$tmp/b/test/unit/area/"*
fake truncated 'echo "ok 1 - a"; echo "ok 2 - b"; exit 0; echo "ok 3 - c"; echo "1..3"'
runit
check "a test that stops early with status 0 (2 oks, no plan) fails" \
    test "$rc" -ne 0 -a "$(verdict truncated)" = "2 1"
fake truncated 'echo "1..3"; echo "ok 1 - a"; echo "ok 2 - b"; exit 0'
runit
check "a test that stops early after a leading plan 1..3 fails" \
    test "$rc" -ne 0 -a "$(verdict truncated)" = "2 1"
check "run.sh says planned 3, printed 2" grep -q 'planned 3 results but printed 2' "$tmp/out"

rm -f "$tmp/b/test/unit/area/"*
fake noplan 'echo "ok 1 - a"'
runit
check "a test without a plan fails" test "$rc" -ne 0 -a "$(verdict noplan)" = "1 1"
fake noplan 'echo "1..1"; echo "ok 1 - a"; echo "1..1"'
runit
check "a test with two plans fails" test "$rc" -ne 0 -a "$(verdict noplan)" = "1 1"
fake noplan 'echo "ok 1 - a"; echo "ok 2 - b"; echo "1..1"'
runit
check "a test with more results than planned fails" test "$rc" -ne 0 -a "$(verdict noplan)" = "2 1"

rm -f "$tmp/b/test/unit/area/"*
fake notok 'echo "ok 1 - a"; echo "not ok 2 - b"; echo "1..2"'
runit
check "a not ok with status 0 and a right plan counts once" \
    test "$rc" -ne 0 -a "$(verdict notok)" = "1 1"
fake notok 'echo "ok 1 - a"; echo "1..1"; exit 3'
runit
check "a non-zero status with a complete plan fails" test "$rc" -ne 0 -a "$(verdict notok)" = "1 1"
fake notok 'echo "ok 1 - a"; echo "1..1"; echo "not ok - sanitizer reports"; exit 1'
runit
check "a not ok after the plan (with-stack.sh's sanitizer line) fails once, and says why" \
    test "$rc" -ne 0 -a "$(verdict notok)" = "1 1"
check "the log says the count differs from the plan" grep -q 'planned 1 results but printed 2' "$tmp/out"

echo "1..$n"
exit $fail
