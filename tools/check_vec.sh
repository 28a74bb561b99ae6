#!/usr/bin/env bash
# The hot loops of the kernels vectorise, on every x86-64 ISA we ship for, and stay so.
# A hot loop is a `for` line in src/nn/*.c or src/nn/*.h with the comment /* vec */ (or
# /* vec: why */). Each src/nn/*.c is compiled as the build does, once per ISA (x86-64-v3 = AVX2
# and x86-64-v4 = AVX-512 on x86-64 hosts; -march=native elsewhere), with gcc's vectoriser
# report (-fopt-info-vec-all); a marked loop passes when gcc reports it vectorised and never
# reports it not vectorised (a loop in a header counts in every file that inlines it).
# Output: "ok vec NAME: ..." per ISA, or "FAIL vec NAME: FILE:LINE: gcc's reason" per loop;
# -v also lists every loop of src/nn that gcc did not vectorise, marked or not.
# Usage: tools/check_vec.sh [-v]     (CC and NN_CFLAGS may override the compiler and flags)
set -u
cd "$(dirname "$0")/.."
verbose=0; [ "${1:-}" = "-v" ] && verbose=1
CC=${CC:-gcc}
NN_CFLAGS=${NN_CFLAGS:--std=c11 -O3 -D_GNU_SOURCE -Isrc}

if ! "$CC" -v 2>&1 | grep -q '^gcc version'; then
  echo "ok vec: skipped ($CC is not gcc: the report needs gcc's -fopt-info)"
  exit 0
fi
case "$(uname -m)" in
  x86_64) isas="AVX2:x86-64-v3 AVX-512:x86-64-v4" ;;
  *)      isas="native:native" ;;
esac

# gcc places a loop at its condition's comparison (`i < n`: the column of `<`), or at the `for`
# itself under a `#pragma GCC unroll`; messages at other columns of the line are about statements
# or an enclosing loop. Prints the two columns as a regex alternative.
loop_col() {
  awk -v L="${1#*:}" 'NR == L { f = index($0, "for ("); s = f + index(substr($0, f), ";") - 1
                                if (match(substr($0, s + 1), /[<>!]/)) print "(" s + RSTART "|" f ")"; exit }' "${1%%:*}"
}

# "file:line" of every marked loop.
marked=$(grep -nE 'for \(.*/\* vec( \*/|:)' src/nn/*.c src/nn/*.h | cut -d: -f1,2)
if [ -z "$marked" ]; then echo "FAIL vec: no loop in src/nn is marked /* vec */"; exit 1; fi
nmarked=$(echo "$marked" | wc -l)

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bad=0
for pair in $isas; do
  name=${pair%%:*}; march=${pair#*:}
  if ! echo 'int x;' | "$CC" -march="$march" -x c -c -o /dev/null - 2>/dev/null; then
    echo "ok vec $name: skipped ($CC does not know -march=$march)"
    continue
  fi
  rep="$tmp/$march.txt"
  for f in src/nn/*.c; do
    "$CC" $NN_CFLAGS -march="$march" -fopt-info-vec-all -c "$f" -o /dev/null 2>&1
  done | grep -E '^src/nn/[^:]*:[0-9]+:[0-9]+: (optimized|missed)' > "$rep"
  fails=0
  for loc in $marked; do
    hits=$(grep -E "^$loc:$(loop_col "$loc"): " "$rep")
    if ! echo "$hits" | grep -q 'optimized: loop vectorized'; then
      why=$(echo "$hits" | grep -E 'missed: (not vectorized|couldn.t vectorize)' | sed -E 's/^[^ ]* missed: //' | sort -u | head -2 | paste -sd';' -)
      echo "FAIL vec $name: $loc is marked /* vec */ and did not vectorise: ${why:-gcc reported nothing for it (inlined nowhere, or not a loop?)}"
      fails=$((fails + 1))
    elif echo "$hits" | grep -qE 'missed: (not vectorized|couldn.t vectorize loop)'; then
      why=$(echo "$hits" | grep -E 'missed: ' | sed -E 's/^[^ ]* missed: //' | sort -u | head -2 | paste -sd';' -)
      echo "FAIL vec $name: $loc vectorised in one place and not in another: $why"
      fails=$((fails + 1))
    fi
  done
  if [ $verbose = 1 ]; then
    echo "# $name: loops gcc did not vectorise (marked or not):"
    grep -E 'missed: (not vectorized|couldn.t vectorize loop)' "$rep" | sort -u | sed 's/^/#   /'
  fi
  if [ $fails = 0 ]; then
    echo "ok vec $name: all $nmarked marked hot loops of src/nn vectorise (-march=$march)"
  else
    bad=1
  fi
done
exit $bad
