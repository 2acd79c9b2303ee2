#!/usr/bin/env bash
# tools/durations.sh -- refreshes tests/durations.tsv (the expected seconds
# tests/run.sh orders its lanes by) from the last run of each pass:
# build/test-logs/timings.tsv (the normal build) and
# build/san/test-logs/timings.tsv (ASan and UBSan).  A test missing from a
# pass's file keeps the seconds it had.
set -eu
cd "$(dirname "$0")/.."
out=tests/durations.tsv
awk -F'\t' -v OFS='\t' '
    FILENAME == ARGV[1] && FNR > 1 { n[$1] = $2; s[$1] = $3; next }
    FILENAME == ARGV[2] && FNR > 1 { n[$1] = $2; if (!($1 in s)) s[$1] = $2 * 1.5; next }
    FILENAME == ARGV[3] && FNR > 1 { s[$1] = $2; if (!($1 in n)) n[$1] = 0; next }
    END {
        print "test", "seconds", "seconds_san"
        for (t in n) printf "%s\t%.1f\t%.1f\n", t, n[t], s[t] | "sort -t\"\t\" -k2,2nr"
    }' "$out" build/test-logs/timings.tsv build/san/test-logs/timings.tsv >"$out.new" 2>/dev/null ||
    { echo "durations.sh: run both passes first (make test, make SANITIZE=address,undefined test)" >&2
      rm -f "$out.new"; exit 1; }
mv "$out.new" "$out"
echo "durations.sh: $(($(wc -l <"$out") - 1)) tests in $out"
