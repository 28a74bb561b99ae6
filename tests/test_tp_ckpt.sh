#!/usr/bin/env bash
# Tensor-parallel checkpoints without a gather: a state saved at --tp 2 (threads and MPI, stages
# 1 and 2, dp 1 and 2, zero 0 and 1) has chunk files bitwise those of the same state saved at
# --tp 1, and moves tp 2 -> tp 1 -> tp 2 with the same bytes; every data byte is written once,
# by the rank that holds it, each rank less than its chunk and no buffer beyond a header.
# tests/aux_tp_ckpt re-saves a checkpoint under a layout without a step (the same state).
# The format-level checks and a kill -9 amid the writers: tests/test_checkpoint.c.
. "$(dirname "$0")/lib.sh"
mpi_env 60         # a hang is a failure; a save of this model takes milliseconds
AUX="$BUILD/tests/aux_tp_ckpt"
D=$TEST_TMP/tpck
mkdir -p "$D"
# vocab 257: tp 2 pads wte to 258 rows, and the padding row must be in no file
cat > "$D/cfg.json" <<'J'
{"n_layer": 2, "n_head": 4, "n_embd": 32, "vocab_size": 257, "n_positions": 32}
J
for i in $(seq 1 100); do echo "the quick brown fox jumps over the lazy dog $((i % 7))"; done > "$D/text.txt"
MPI_X=PT_CKPT_DEBUG
mpi() { local n=$1; shift; mpi_run "$n" "$AUX" "$@" mpi; }   # aux_tp_ckpt's MPI mode
thr() { timeout "$JOB_LIMIT_S" "$AUX" "$@"; }
# same_chunks A B: every chunk file of A equals B's, byte for byte (and there are some)
same_chunks() { local f n=0; for f in "$1"/chunk-*.safetensors; do cmp -s "$f" "$2/$(basename "$f")" || return 1; n=$((n + 1)); done; [ $n -gt 0 ]; }
# data bytes of a safetensors file: its size less the 8-byte length and the header
data_bytes() { echo $(( $(stat -c %s "$1") - 8 - $(od -An -t u8 -N8 "$1") )); }

# two steps at tp 1, so the moments are not zero; its state re-saved at tp 1 is the reference
"$P" train --config "$D/cfg.json" --data "$D/text.txt" --batch 8 --seq 16 --lr 3e-3 --steps 2 --save "$D/s" > /dev/null 2>&1
S=$D/s/ckpt-2
for st in 1 2; do thr "$S" "$D/ref$st" $st 1 1 0 > "$D/out" 2>&1 || fail "tp 1 re-save, stages $st" "$(tail -2 "$D/out")"; done
same_chunks "$D/ref1" "$S" && ok "tp 1 re-save without a step: the trained run's chunk file, bitwise" \
  || fail "tp 1 re-save: the trained run's file" "$(ls "$D/ref1")"

for mode in threads mpi; do for st in 1 2; do for dp in 1 2; do for zero in 0 1; do
  n="tp 2, $mode, stages $st, dp $dp, zero $zero"
  out=$D/t-$mode-$st-$dp-$zero
  if [ $mode = threads ]; then thr "$S" "$out" $st $dp 2 $zero > "$D/out" 2>&1; else mpi $((st * dp * 2)) "$S" "$out" $st $dp 2 $zero > "$D/out" 2>&1; fi \
    || { fail "$n: saved" "$(tail -2 "$D/out")"; continue; }
  if same_chunks "$out" "$D/ref$st" && grep -q '"tp":[[:space:]]*2' "$out/manifest.json" && ! ls "$out" | grep -q optim-; then
    ok "$n: chunk files bitwise tp 1's (whole tensors, moments in them, layout.tp 2)"
  else fail "$n: chunk files bitwise tp 1's" "$(ls "$out"; cmp "$out/chunk-0.safetensors" "$D/ref$st/chunk-0.safetensors")"; fi
done; done; done; done

# round trips: tp 2 (mpi, stages 2, dp 2, zero 1) -> tp 1 one stage; tp 1 -> tp 2 (threads) -> tp 1
thr "$D/t-mpi-2-2-1" "$D/back1" 1 1 1 0 > "$D/out" 2>&1 && same_chunks "$D/back1" "$D/ref1" \
  && ok "tp 2 -> tp 1: the bytes the state had at tp 1" || fail "tp 2 -> tp 1" "$(tail -2 "$D/out")"
thr "$D/ref2" "$D/rt2" 2 1 2 1 > "$D/out" 2>&1 && thr "$D/rt2" "$D/rt1" 2 1 1 0 >> "$D/out" 2>&1 &&
  same_chunks "$D/rt1" "$D/ref2" && ok "tp 1 -> tp 2 -> tp 1: the same bytes" || fail "tp 1 -> tp 2 -> tp 1" "$(tail -2 "$D/out")"

# what each rank wrote (PT_CKPT_DEBUG): tp 2, stages 2, dp 2, zero 1 (8 ranks): the ranks' bytes
# add up to the files' data bytes (each written once: the padding row in none), no rank writes
# 0.6 of its largest chunk (a gather would write all of it), no buffer beyond a header.
export PT_CKPT_DEBUG=1
mpi 8 "$S" "$D/dbg" 2 2 2 1 > "$D/dbg.out" 2>&1 || fail "tp 2 save with PT_CKPT_DEBUG" "$(tail -2 "$D/dbg.out")"
unset PT_CKPT_DEBUG
total=0; big=0; small=
for f in "$D/dbg"/chunk-*.safetensors; do b=$(data_bytes "$f"); total=$((total + b))
  [ $b -gt $big ] && big=$b; [ -z "$small" ] || [ $b -lt $small ] && small=$b; done
if awk -v total=$total -v big=$big -v small="$small" '/^ckpt: rank/ { n++; s += $5; if ($5 > m) m = $5; if ($(NF - 1) > a) a = $(NF - 1) }
     END { printf "%d ranks, %d of %d bytes, busiest %d (largest chunk %d), largest buffer %d\n", n, s, total, m, big, a > "/dev/stderr";
           exit !(n == 8 && s == total && m < 0.6 * big && a < small / 8) }' "$D/dbg.out" 2> "$D/dbg.sum"; then
  ok "each rank writes its own elements once: $(cat "$D/dbg.sum")"
else fail "each rank writes its own elements once" "$(cat "$D/dbg.sum"; grep '^ckpt' "$D/dbg.out" | head -8)"; fi
done_tests
