#!/usr/bin/env bash
# depcheck_test.sh -- tools/depcheck.py finds files that call each other
# in a circle: tiny objects compiled into a temp build folder (two files
# that call each other, a one-way pair, a static function of the same
# name, a circle in shared/src, a stale object whose source is gone) are
# checked, and its verdict, exit status and report are checked.
# Prints TAP.
# test-tags: pass=normal (tests/run.sh)
set -u
here=$(cd "$(dirname "$0")/../../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
nok() { n=$((n + 1)); echo "not ok $n - $1"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else nok "$what"; fi; }

obj() {   # build folder, object path under obj/, C source
    mkdir -p "$(dirname "$1/obj/$2")"
    printf '%s\n' "$3" >"$tmp/src.c"
    cc -std=c11 -c -o "$1/obj/$2" "$tmp/src.c"
}
runit() { # build folder [--src dir]: sets rc, writes $tmp/out
    local b=$1; shift
    python3 "$here/tools/depcheck.py" "$@" "$b" >"$tmp/out" 2>&1
    rc=$?
}

# a.c and b.c call each other; c.c only calls a.c.
obj "$tmp/circle" services/x/a.o 'int b_fn(void); int a_fn(void) { return b_fn(); }'
obj "$tmp/circle" services/x/b.o 'int a_fn(void); int b_fn(void) { return a_fn() + 1; }'
obj "$tmp/circle" services/x/c.o 'int a_fn(void); int main(void) { return a_fn(); }'
runit "$tmp/circle"
check "a circle of two files: exit 1" test "$rc" -eq 1
check "it names the folder and both files" grep -q '^services/x: circle of 2 files: a.c b.c$' "$tmp/out"
check "it prints each edge with its symbols" \
    grep -q '^    a.c -> b.c: b_fn$' "$tmp/out"
check "... both ways" grep -q '^    b.c -> a.c: a_fn$' "$tmp/out"
check "a file that only calls into the circle is not in it" \
    test "$(grep -c 'c\.c' "$tmp/out")" -eq 0

# One way: a.c calls b.c; b.c calls a helper() that a.c has only as a
# static function (file-local: b.c's comes from elsewhere, not a call into a.c).
obj "$tmp/oneway" services/y/a.o 'int b_fn(void); static int helper(void) { return 1; }
int a_fn(void) { return b_fn() + helper(); }'
obj "$tmp/oneway" services/y/b.o 'int helper(void); int b_fn(void) { return 2; }
int b_use(void) { return helper(); }'
obj "$tmp/oneway" shared/src/lib.o 'int lib_fn(void) { return 3; }'
runit "$tmp/oneway"
check "a one-way pair, a static namesake: exit 0" test "$rc" -eq 0
check "it says there is no circle" grep -q '^depcheck: no circle in 2 folders$' "$tmp/out"

# shared/src is checked too.
obj "$tmp/shared" shared/src/p.o 'int q_fn(void); int p_fn(void) { return q_fn(); }'
obj "$tmp/shared" shared/src/q.o 'int p_fn(void); int q_fn(void) { return p_fn(); }'
runit "$tmp/shared"
check "a circle in shared/src: exit 1, named" \
    eval 'test "$rc" -eq 1 && grep -q "^shared/src: circle of 2 files: p.c q.c$" "$tmp/out"'

# --src: an object whose source is gone is left out (here b.o: only a.c is there).
mkdir -p "$tmp/tree/services/x"
: >"$tmp/tree/services/x/a.c"
: >"$tmp/tree/services/x/c.c"
runit "$tmp/circle" --src "$tmp/tree"
check "--src: a stale object (no b.c) is left out: exit 0" test "$rc" -eq 0
check "... and said so" grep -q 'left out .*services/x/b.o: no services/x/b.c' "$tmp/out"

runit "$tmp/nothing"
check "no objects: exit 2 (build first)" test "$rc" -eq 2

echo "1..$n"
