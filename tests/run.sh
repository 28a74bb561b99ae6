#!/usr/bin/env bash
# Runs every test binary in $BUILD/tests and every tests/test_*.sh script, counts "ok"/"FAIL"
# lines, and prints "N passed, N failed" last. A binary or script that exits non-zero without
# printing a FAIL line (a crash, a sanitizer report) counts as one failure. Exit status: 1 on any failure.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export PIPETRAIN="$BUILD/pipetrain"
export TEST_TMP=$(mktemp -d)
trap 'rm -rf "$TEST_TMP"' EXIT
pass=0; fail=0
run_one() {
  local name=$1; shift
  local log="$TEST_TMP/$(basename "$name").log"
  local start=$(date +%s.%N)
  timeout 600 "$@" >"$log" 2>&1
  local rc=$?
  local p f
  p=$(grep -c '^ok ' "$log"); f=$(grep -c '^FAIL ' "$log")
  grep '^FAIL ' "$log"
  if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "FAIL $name: exited $rc without a FAIL line; last output:"; tail -20 "$log" | sed 's/^/    /'
    f=1
  fi
  pass=$((pass + p)); fail=$((fail + f))
  printf '%-40s %4d ok %3d failed  %5.1fs\n' "$(basename "$name")" "$p" "$f" \
    "$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{print b-a}')"
}
for t in "$BUILD"/tests/test_*; do
  case "$t" in *.o|*.d) continue;; esac
  [ -x "$t" ] && run_one "$t" "$t"
done
for s in tests/test_*.sh; do
  [ -f "$s" ] && run_one "$s" bash "$s"
done
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
