#!/usr/bin/env bash
# Sequence parallelism from the command line (--sp with --tp), threads and MPI: `grad --tp 2 --sp`
# at stages {1,2} x dp {1,2} writes the single-process gradient file (within grad's tolerance)
# and MPI writes the threads file bitwise; --tp-recompute under --sp writes the same file,
# bitwise; `train --tp 2 --sp` gives --tp 2's losses and norms with fewer activation bytes on
# every rank, and the layout line, start event and collective count say so; bad inputs are
# errors naming the flags.
# The model's numerics: tests/test_tp_sp_model.c.
. "$(dirname "$0")/lib.sh"
mpi_env 120        # a hang is a failure; a healthy run takes well under a second
export OPENBLAS_NUM_THREADS=1   # the single-process reference sums as one thread does
MPI_X=OPENBLAS_NUM_THREADS
D=$TEST_TMP/tp_sp
tp_case "$D"   # lib.sh: config, text, gargs, targs, TOL

"$P" grad $gargs --out "$D/g1.st" > /dev/null 2>&1
for st in 1 2; do for dp in 1 2; do
  n="grad --tp 2 --sp, stages $st, dp $dp"
  if ! "$P" grad $gargs --out "$D/t.st" --stages $st --dp $dp --tp 2 --sp > "$D/out" 2>&1; then
    fail "$n (threads)" "$(tail -2 "$D/out")"; continue; fi
  check "$n: threads equals one process" "$CMP" "$D/t.st" "$D/g1.st" $TOL
  if ! mpi $((2 * st * dp)) grad $gargs --out "$D/m.st" --stages $st --dp $dp --tp 2 --sp --transport mpi > "$D/out" 2>&1; then
    fail "$n (mpi -np $((2 * st * dp)))" "$(tail -2 "$D/out")"; continue; fi
  check "$n: mpi -np $((2 * st * dp)) equals threads bitwise" "$CMP" "$D/m.st" "$D/t.st" 0
done; done
# --tp-recompute under --sp: blocks keep their rows of x and res2 and rebuild the rest (with two
# all-gathers): the same file, bitwise
"$P" grad $gargs --out "$D/s.st" --stages 2 --tp 2 --sp > /dev/null 2>&1
if "$P" grad $gargs --out "$D/r.st" --stages 2 --tp 2 --sp --tp-recompute > "$D/out" 2>&1; then
  check "grad --tp 2 --sp --tp-recompute: the file without --tp-recompute, bitwise" "$CMP" "$D/r.st" "$D/s.st" 0
else fail "grad --tp 2 --sp --tp-recompute" "$(tail -2 "$D/out")"; fi

# train: --sp gives --tp 2's losses and norms (3 steps, clipping on)
numbers() { sed 's/.*"loss":\([0-9.e-]*\).*"grad_norm":\([0-9.e-]*\).*/\1 \2/' "$1"; }
close() { paste -d' ' <(numbers "$1") <(numbers "$2") | awk -v t=$TOL '
  { for (k = 1; k <= 2; k++) { d = $k - $(k + 2); if (d < 0) d = -d; if (d > t * $(k + 2)) bad = 1 } n++ }
  END { exit bad || n != '"$3"' }'; }
"$P" train $targs --steps 3 --grad-clip 0.5 --stages 2 --tp 2 --metrics "$D/a.jsonl" > "$D/a.out" 2>&1
if "$P" train $targs --steps 3 --grad-clip 0.5 --stages 2 --tp 2 --sp --metrics "$D/b.jsonl" > "$D/b.out" 2>&1 &&
   close "$D/b.jsonl" "$D/a.jsonl" 3; then ok "train --tp 2 --sp: --tp 2's losses and norms, clipped"
else fail "train --tp 2 --sp: --tp 2's losses and norms" "$(numbers "$D/b.jsonl" | tr '\n' ' ') vs $(numbers "$D/a.jsonl" | tr '\n' ' ') $(tail -2 "$D/b.out")"; fi
# activation bytes (sets, boundary buffers, scratch) per rank, from the run's start event
acts() { grep -o '"activations":\[[^]]*' "$1" | head -1 | sed 's/.*\[//'; }
a=$(acts "$D/a.events.jsonl"); b=$(acts "$D/b.events.jsonl")
if awk -v a="$a" -v b="$b" 'BEGIN { n = split(a, x, ","); m = split(b, y, ",");
     if (n != 4 || m != 4) exit 1; for (i = 1; i <= n; i++) if (!(y[i] > 0 && y[i] < x[i])) exit 1 }'; then
  ok "train --tp 2 --sp: fewer activation bytes on every rank ($b against $a)"
else fail "train --tp 2 --sp: fewer activation bytes on every rank" "'$b' against '$a'"; fi
grep -q '; sequence parallel' "$D/b.out" && grep -q '"sp":true' "$D/b.events.jsonl" \
  && ok "train --sp: the layout line and the start event say so" || fail "train --sp: says so" "$(grep pipeline "$D/b.out")"
# the collectives a rank makes: the cost rows' (one stage, one microbatch: the embedding 1 + 1,
# two blocks 4 + 6 each (B's two more all-gathers, of ln1 and ln2, for the weight gradients it
# computes under sp), the head 3 + 1)
"$P" train $targs --steps 1 --stages 1 --tp 2 --sp --microbatches 1 > "$D/out" 2>&1
line=$(grep '^tensor parallel, per rank and step' "$D/out")
echo "$line" | grep -q 'step: 26 collectives' && ok "train --sp: 26 TP collectives a step on one stage ($line)" \
  || fail "train --sp: 26 TP collectives a step" "'$line' $(tail -2 "$D/out")"

# bad inputs
expect_error "--sp without --tp names both flags" "--sp needs --tp 2 or more.*--tp is 1" \
  "$P" grad $gargs --out "$D/x.st" --stages 2 --sp
expect_error "--sp with --tp-overlap is refused" "--sp and --tp-overlap: give one" \
  "$P" grad $gargs --out "$D/x.st" --tp 2 --sp --tp-overlap
expect_error "--sp with B*T not divisible by tp names the numbers" "--sp with --batch 1 .*--seq 15: .*N = B\*T = 1\*15 = 15 .*tp 2" \
  "$P" grad --config "$D/cfg.json" --tokens "$D/text.txt" --batch 1 --seq 15 --out "$D/x.st" --tp 2 --sp
done_tests
