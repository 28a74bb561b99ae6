#!/usr/bin/env bash
# Tensor parallelism from the command line, threads and MPI: `grad --tp T` for T in {1,2,4} x
# stages {1,2} x dp {1,2} writes the single-process gradient file (within grad's tolerance), and
# MPI writes the threads file bitwise at each layout; `train --tp 2` gives tp 1's losses and
# norms; checkpoints move from tp 2 to tp 1 and back; a rank's bytes follow its shards; the
# layout line and metrics name tp; --tp-overlap and --tp-recompute write the same gradient file
# (overlap within the halves' rounding, recomputation bitwise) on threads and MPI, recomputation
# with fewer activation bytes and overlap with all-reduces held back by a slow TP link; bad inputs
# are errors naming their numbers.
# The API-level numerics: tests/test_tp_run.c.
. "$(dirname "$0")/lib.sh"
mpi_env 120        # a hang is a failure; a healthy run takes a second or two
export OPENBLAS_NUM_THREADS=1   # the single-process reference sums as one thread does
MPI_X=OPENBLAS_NUM_THREADS
D=$TEST_TMP/tp
tp_case "$D"   # lib.sh: config, text, gargs, targs, TOL

"$P" grad $gargs --out "$D/g1.st" > /dev/null 2>&1
for tp in 1 2 4; do for st in 1 2; do for dp in 1 2; do
  n="grad tp $tp, stages $st, dp $dp"
  if ! "$P" grad $gargs --out "$D/t.st" --stages $st --dp $dp --tp $tp > "$D/out" 2>&1; then
    fail "$n (threads)" "$(tail -2 "$D/out")"; continue; fi
  check "$n: threads equals one process" "$CMP" "$D/t.st" "$D/g1.st" $TOL
  if ! mpi $((tp * st * dp)) grad $gargs --out "$D/m.st" --stages $st --dp $dp --tp $tp --transport mpi > "$D/out" 2>&1; then
    fail "$n (mpi -np $((tp * st * dp)))" "$(tail -2 "$D/out")"; continue; fi
  check "$n: mpi -np $((tp * st * dp)) equals threads bitwise" "$CMP" "$D/m.st" "$D/t.st" 0
done; done; done

# train: tp 2 gives tp 1's losses and norms (5 steps, clipping on); MPI the threads numbers.
numbers() { sed 's/.*"loss":\([0-9.e-]*\).*"grad_norm":\([0-9.e-]*\).*/\1 \2/' "$1"; }
close() { paste -d' ' <(numbers "$1") <(numbers "$2") | awk -v t=$TOL '
  { for (k = 1; k <= 2; k++) { d = $k - $(k + 2); if (d < 0) d = -d; if (d > t * $(k + 2)) bad = 1 } n++ }
  END { exit bad || n != '"$3"' }'; }
"$P" train $targs --steps 5 --grad-clip 0.5 --stages 2 --metrics "$D/m1.jsonl" > /dev/null 2>&1
if "$P" train $targs --steps 5 --grad-clip 0.5 --stages 2 --tp 2 --metrics "$D/m2.jsonl" > "$D/train.out" 2>&1 &&
   close "$D/m2.jsonl" "$D/m1.jsonl" 5; then ok "train tp 2: tp 1's losses and norms, clipped"
else fail "train tp 2: tp 1's losses and norms" "$(numbers "$D/m2.jsonl" | tr '\n' ' ') vs $(numbers "$D/m1.jsonl" | tr '\n' ' ') $(tail -2 "$D/train.out")"; fi
grep -q '^pipeline: 1f1b, 2 stages x 1 replicas x tp 2,' "$D/train.out" && grep -q '"tp":2' "$D/m2.events.jsonl" \
  && ok "train: the layout line and the run's start event name tp" || fail "train: layout names tp" "$(grep pipeline "$D/train.out")"
mpi 4 train $targs --steps 5 --grad-clip 0.5 --stages 2 --tp 2 --transport mpi --metrics "$D/mm.jsonl" > "$D/out" 2>&1
[ -s "$D/mm.jsonl" ] && [ "$(numbers "$D/mm.jsonl")" = "$(numbers "$D/m2.jsonl")" ] && ok "train tp 2: mpi equals threads bitwise" \
  || fail "train tp 2: mpi equals threads bitwise" "$(tail -2 "$D/out")"

# bytes per rank: a rank's parameters at tp 2 are about half of tp 1's (layer norms, biases and
# wpe are replicated); rank 0 holds the embedding and a block either way.
params0() { grep -o '"params":\[[0-9.e+]*' "$1" | head -1 | sed 's/.*\[//'; }
r=$(awk -v a="$(params0 "$D/m2.events.jsonl")" -v b="$(params0 "$D/m1.events.jsonl")" 'BEGIN { if (b > 0) printf "%.3f", a / b }')
awk -v r="$r" 'BEGIN { exit !(r > 0.5 && r < 0.6) }' && ok "memory: rank 0's parameters at tp 2 are $r of tp 1's" \
  || fail "memory: rank 0's parameters at tp 2 about half of tp 1's" "ratio '$r'"

# checkpoints hold whole tensors: tp 2 -> tp 1 and tp 1 -> tp 2 continue the uninterrupted runs.
"$P" train $targs --steps 6 --stages 2 --metrics "$D/full1.jsonl" > /dev/null 2>&1
"$P" train $targs --steps 6 --stages 2 --tp 2 --metrics "$D/full2.jsonl" > /dev/null 2>&1
"$P" train $targs --steps 3 --stages 2 --tp 2 --dp 2 --microbatches 1 --zero 1 --save "$D/s2" > /dev/null 2>&1
if "$P" train $targs --steps 6 --stages 2 --resume "$D/s2" --metrics "$D/r1.jsonl" > "$D/out" 2>&1 &&
   close "$D/r1.jsonl" <(tail -3 "$D/full1.jsonl") 3; then
  ok "checkpoint tp 2 (dp 2, zero 1) -> tp 1: the uninterrupted run's losses"
else fail "checkpoint tp 2 -> tp 1" "$(numbers "$D/r1.jsonl" | tr '\n' ' ') $(tail -2 "$D/out")"; fi
grep -q '"tp":[[:space:]]*2' "$D/s2/ckpt-3/manifest.json" && ! ls "$D/s2/ckpt-3" | grep -q optim- \
  && ok "checkpoint at tp 2: whole tensors in the chunk files, layout.tp 2" || fail "checkpoint at tp 2: files" "$(ls "$D/s2/ckpt-3")"
"$P" train $targs --steps 3 --stages 1 --save "$D/s1" > /dev/null 2>&1
if mpi 4 train $targs --steps 6 --stages 2 --tp 2 --transport mpi --resume "$D/s1" --metrics "$D/r2.jsonl" > "$D/out" 2>&1 &&
   close "$D/r2.jsonl" <(tail -3 "$D/full2.jsonl") 3; then
  ok "checkpoint tp 1 -> tp 2 (mpi): the uninterrupted run's losses"
else fail "checkpoint tp 1 -> tp 2 (mpi)" "$(numbers "$D/r2.jsonl" | tr '\n' ' ') $(tail -2 "$D/out")"; fi

# --tp-overlap: each block's all-reduces on two halves, the other in flight (OpenBLAS rounds a
# product of half the rows differently: within OTOL); MPI writes the threads file bitwise.
# --tp-recompute: blocks keep x and res2 and rebuild the rest before B, no all-reduce: bitwise.
OTOL=1e-5
for mode in overlap recompute; do
  tol=$([ $mode = overlap ] && echo $OTOL || echo 0)
  for st in 1 2; do
    n="grad tp 2, stages $st, --tp-$mode"
    "$P" grad $gargs --out "$D/p.st" --stages $st --tp 2 > /dev/null 2>&1
    if ! "$P" grad $gargs --out "$D/t.st" --stages $st --tp 2 --tp-$mode > "$D/out" 2>&1; then
      fail "$n (threads)" "$(tail -2 "$D/out")"; continue; fi
    check "$n: threads equals the file without it$([ $tol = 0 ] && echo ', bitwise' || echo " (within $tol)")" "$CMP" "$D/t.st" "$D/p.st" $tol
    if ! mpi $((2 * st)) grad $gargs --out "$D/m.st" --stages $st --tp 2 --tp-$mode --transport mpi > "$D/out" 2>&1; then
      fail "$n (mpi -np $((2 * st)))" "$(tail -2 "$D/out")"; continue; fi
    check "$n: mpi -np $((2 * st)) equals threads bitwise" "$CMP" "$D/m.st" "$D/t.st" 0
  done
done
acts0() { grep -o '"activations":\[[0-9.e+]*' "$1" | head -1 | sed 's/.*\[//'; }
"$P" train $targs --steps 2 --stages 1 --tp 2 --microbatches 2 --metrics "$D/a1.jsonl" > /dev/null 2>&1
"$P" train $targs --steps 2 --stages 1 --tp 2 --microbatches 2 --tp-recompute --metrics "$D/a2.jsonl" > "$D/out" 2>&1
if [ "$(numbers "$D/a2.jsonl")" = "$(numbers "$D/a1.jsonl")" ] &&
   awk -v a="$(acts0 "$D/a2.events.jsonl")" -v b="$(acts0 "$D/a1.events.jsonl")" 'BEGIN { exit !(a > 0 && a < b) }'; then
  ok "train --tp-recompute: the same losses and norms, fewer activation bytes ($(acts0 "$D/a2.events.jsonl") < $(acts0 "$D/a1.events.jsonl"))"
else fail "train --tp-recompute: same numbers, fewer bytes" "$(acts0 "$D/a2.events.jsonl") vs $(acts0 "$D/a1.events.jsonl"); $(tail -2 "$D/out")"; fi
grep -q 'blocks keep x and res2' "$D/out" && grep -q '"tp_recompute":true' "$D/a2.events.jsonl" \
  && ok "train --tp-recompute: the layout line and the start event say so" || fail "train --tp-recompute: says so" "$(grep pipeline "$D/out")"
# a slow link within a TP group holds each all-reduce back 20 ms: a rank spends at least that
# long in each (behaviour, not speed: none can complete sooner); with --tp-overlap too.
for f in "" --tp-overlap; do
  "$P" train $targs --steps 2 --stages 1 --tp 2 --microbatches 1 --slow-link 0-1:0.02 $f > "$D/out" 2>&1
  line=$(grep '^tensor parallel, per rank and step' "$D/out")
  calls=$(echo "$line" | sed 's/.*step: \([0-9]*\) all-reduces.*/\1/'); ms=$(echo "$line" | sed 's/.* \([0-9.]*\) ms inside.*/\1/')
  if [ -n "$line" ] && awk -v c="$calls" -v m="$ms" -v o="$f" 'BEGIN { exit !(c > 0 && m >= (o == "" ? c : 1) * 20 * 0.95) }'; then
    ok "--slow-link 0-1 within a TP group holds its all-reduces back ${f:+($f) }($line)"
  else fail "--slow-link within a TP group${f:+ $f}" "'$line' $(tail -2 "$D/out")"; fi
done

"$P" train $targs --steps 1 --tp 2 --microbatches 8 --tp-overlap > "$D/out" 2>&1 &&
  grep -q '^note: --tp-overlap splits a microbatch into two halves of sequences; microbatches of 1 sequence run without it' "$D/out" \
  && ok "--tp-overlap with microbatches of one sequence: a note says they run without it" \
  || fail "--tp-overlap with one-sequence microbatches: the note" "$(head -5 "$D/out")"

# bad inputs
expect_error "--tp-overlap needs --tp > 1" "--tp-overlap needs --tp 2 or more" "$P" grad $gargs --out "$D/x.st" --stages 2 --tp-overlap
expect_error "--tp-recompute with --recompute is refused" "--tp-recompute and --recompute: give one" \
  "$P" grad $gargs --out "$D/x.st" --tp 2 --tp-recompute --recompute
expect_error "--tp 0 is an error" "--tp must be >= 1 \(got 0\)" "$P" grad $gargs --out "$D/x.st" --tp 0
expect_error "--tp 3 does not divide n_head 4" "--tp 3: .*3.*4|--tp 3: .*4.*3" "$P" grad $gargs --out "$D/x.st" --tp 3
expect_error "--tp with --eval-data is refused" "--eval-data with --tp 2 is not supported" \
  "$P" train $targs --steps 1 --tp 2 --eval-data "$D/text.txt"
expect_error "--tp with a side task is refused" "--side-task with --tp 2 is not supported" \
  "$P" train $targs --steps 1 --stages 2 --tp 2 --side-task busy:100
expect_error "--slow-link between two TP ranks is refused, naming them" "ranks 0 and 5 are TP ranks 0 and 1.*e\.g\. 0-4" \
  "$P" grad $gargs --out "$D/x.st" --stages 2 --dp 2 --tp 2 --slow-link 0-5:0.01
mpi 6 grad $gargs --out "$D/x.st" --stages 2 --tp 2 --transport mpi > "$D/out" 2>&1; rc=$?
nerr=$(grep -c 'the MPI world has 6 processes, but --dp 1 x --stages 2 x --tp 2 needs 4' "$D/out")
if [ $rc -eq 124 ]; then fail "mpi: world size not dp x stages x tp" "hang"
elif [ $rc -ne 0 ] && [ "$nerr" -eq 6 ]; then ok "mpi: world size not dp x stages x tp is an error on every rank, naming the numbers"
else fail "mpi: world size not dp x stages x tp" "rc $rc, $nerr ranks said it: $(head -3 "$D/out")"; fi
# PyTorch's own gradients (tools/make_fixtures.py): tp 3 of gpt-tiny (3 heads, vocab 67) and tp 5
# of gpt-odd (5 heads, vocab 97), over 2 stages, against the fixture's "grad/..." tensors
for fx in gpt-tiny:3 gpt-odd:5; do
  F=tests/fixtures/${fx%%:*}; t=${fx#*:}
  B=$(grep '"B"' "$F/case.json" | tr -dc 0-9); T=$(grep '"T"' "$F/case.json" | tr -dc 0-9)
  if "$P" grad --config "$F/config.json" --init "$F/model.safetensors" --tokens "$F/tokens.bin" --batch "$B" \
       --seq "$T" --tp "$t" --stages 2 --out "$D/torch-$t.st" > "$D/torch-$t.out" 2>&1 &&
     r=$("$CMP" --prefix grad/ "$D/torch-$t.st" "$F/expected.safetensors" 1e-4); then
    ok "grad --tp $t --stages 2 equals PyTorch's gradients on ${fx%%:*} ($r)"
  else fail "grad --tp $t equals PyTorch's gradients on ${fx%%:*}" "${r:-$(tail -2 "$D/torch-$t.out")}"; fi
done
done_tests
