#!/usr/bin/env bash
# deploy/down.sh -- stops what `make up` started; no process or port is
# left behind.  The stack folder (logs included) is removed.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
run=${GP_RUN_DIR:-$top/build/run}
[ -d "$run" ] || { echo "down: nothing is up"; exit 0; }
"$top/tests/harness/stack.sh" stop "$run"
rm -rf "$run"
echo "down: stopped"
