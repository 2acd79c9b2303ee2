#!/usr/bin/env bash
# tests/harness/with-stack.sh BUILD_DIR CMD... -- runs CMD with a fresh
# private stack; the stack's settings are in the environment (GP_* from
# gp.env, plus GP_STACK_DIR, GP_BUILD and GP_HARNESS).  The stack is torn
# down on any exit, also when CMD fails or the script is interrupted.
#
# Sanitizer reports of every process started under it (the test and the
# services it starts) go to files in the stack folder; any such report
# fails the test, so a leak found when a service exits after the test has
# returned is not lost.
#
# A shell test may ask for another kind of stack with a line
# "# test-stack: NAME=VALUE ..." in its first 60 lines: stack.sh's
# GP_STACK_* settings only (GP_STACK_NATS_CLUSTER=3: three clustered
# nats-servers).
set -u
build=$(cd "$1" && pwd); shift
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d /tmp/gp-stack.XXXXXX)
cleanup() {
    "$here/stack.sh" stop "$dir" >/dev/null 2>&1
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
export GP_PG_TEMPLATE=$build/pg-template
for a in "$@"; do
    case "$a" in *_test.sh) ;; *) continue ;; esac
    for kv in $(head -n 60 "$a" 2>/dev/null | sed -n 's/^# test-stack: //p'); do
        case "$kv" in GP_STACK_[A-Z_]*=[A-Za-z0-9_]*) export "${kv?}" ;; esac
    done
done
# deploy/nats-auth's bcrypt hashes at the cheapest cost: nats-server checks
# one at every connection, and a test's many short ones share two cores
export NATS_AUTH_BCRYPT_COST=${NATS_AUTH_BCRYPT_COST:-4}
# A second try on fresh ports: a port found free can still be taken by a
# test beside this one before its server binds it.
started=0
for try in 1 2 3; do
    if "$here/stack.sh" start "$dir"; then started=1; break; fi
    echo "# stack: start $try failed, trying again on other ports" >&2
    "$here/stack.sh" stop "$dir" >/dev/null 2>&1
    rm -rf "$dir" && mkdir -p "$dir"
done
[ "$started" = 1 ] || { echo "not ok - stack did not start"; exit 1; }
set -a
# shellcheck disable=SC1091
. "$dir/gp.env"
set +a
mkdir -p "$dir/san"
export ASAN_OPTIONS="log_path=$dir/san/asan:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="log_path=$dir/san/ubsan:print_stacktrace=1:${UBSAN_OPTIONS:-}"
export GP_BUILD=$build GP_HARNESS=$here
"$@"
rc=$?
"$here/stack.sh" stop "$dir" >/dev/null 2>&1     # services exit: their leak checks run now
if [ -n "$(ls -A "$dir/san")" ]; then
    echo "not ok - sanitizer reports from processes of this test:"
    cat "$dir"/san/* | head -80 | sed 's/^/#   /'
    rc=1
fi
exit $rc
