#!/usr/bin/env bash
# tests/repeat.sh N: runs the suite (tests/run.sh) N times in a row, stopping at the first red
# run; prints one line per run, which run failed (with its FAIL lines), and the totals with the
# load average. Exit status 1 when a run failed. Each run has its own scratch folder (run.sh).
set -u
cd "$(dirname "$0")/.."
N=${1:-5}
[[ "$N" =~ ^[1-9][0-9]*$ ]] || { echo "test-repeat: N must be a whole number >= 1 (got '$N'): make test-repeat 5" >&2; exit 2; }
BUILD=${BUILD:-build}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
pass=0; fail=0; green=0; t0=$(date +%s)
for ((i = 1; i <= N; i++)); do
  start=$(date +%s)
  BUILD=$BUILD tests/run.sh > "$log" 2>&1
  rc=$?
  last=$(tail -1 "$log")
  p=$(sed -n 's/^\([0-9]*\) passed, [0-9]* failed$/\1/p' <<< "$last"); f=$(sed -n 's/^[0-9]* passed, \([0-9]*\) failed$/\1/p' <<< "$last")
  [ -n "$p" ] || { p=0; f=1; }
  pass=$((pass + p)); fail=$((fail + f))
  echo "run $i of $N: $p passed, $f failed ($(( $(date +%s) - start )) s, load average $(cut -d' ' -f1-3 /proc/loadavg))"
  if [ $rc -ne 0 ]; then
    echo "test-repeat: run $i of $N failed:"
    grep -A20 '^FAIL ' "$log" | grep -v '^test_.* ok .* failed ' | head -40 | sed 's/^/    /'
    break
  fi
  green=$((green + 1))
done
echo "test-repeat: $green of $N runs green in a row; $pass passed, $fail failed in all ($(( $(date +%s) - t0 )) s, load average $(cut -d' ' -f1-3 /proc/loadavg))"
[ $green -eq $N ]
