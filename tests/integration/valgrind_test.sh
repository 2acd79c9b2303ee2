#!/usr/bin/env bash
# valgrind_test.sh -- one service's start, serve and stop under valgrind:
# the chassis test (quick mode) drives testsvc run by valgrind, which must
# exit 0: no memory error, no definite or indirect leak.  Skipped in the
# sanitizer build (ASan and valgrind do not mix).
set -u
case "$GP_BUILD" in
*/san*) echo "# skipped under sanitizers"; exit 0 ;;
esac
log=$(mktemp)
export GP_QUICK=1
export GP_SVC_WRAP="valgrind --quiet --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect --show-leak-kinds=definite,indirect --log-file=$log"
"$GP_BUILD/test/integration/chassis_test"
rc=$?
if [ -s "$log" ]; then
    echo "# valgrind said:"; sed 's/^/# /' "$log" | head -60
fi
if grep -q 'ERROR SUMMARY: [1-9]\|definitely lost: [1-9]\|indirectly lost: [1-9]' "$log"; then
    echo "not ok - valgrind reported errors or leaks"
else
    echo "ok - valgrind clean: no errors, no definite or indirect leaks"
fi
rm -f "$log"
exit $rc
