#!/usr/bin/env bash
# tests/harness/with-stack.sh BUILD_DIR CMD... -- runs CMD with a fresh
# private stack; the stack's settings are in the environment (GP_* from
# gp.env, plus GP_STACK_DIR and GP_BUILD).  The stack is torn down on any
# exit, also when CMD fails or the script is interrupted.
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
"$here/stack.sh" start "$dir" || { echo "not ok - stack did not start"; exit 1; }
set -a
# shellcheck disable=SC1091
. "$dir/gp.env"
set +a
export GP_BUILD=$build GP_HARNESS=$here
"$@"
