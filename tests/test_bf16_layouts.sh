#!/usr/bin/env bash
# --precision bf16 from the command line: grad at bf16 differs from fp32 (the format is in
# force) by bf16 rounding only; every layout (stages, dp, tp, zero, MPI) writes the bf16
# single-process gradients, bitwise where the summation order is the same (a bf16 product's
# row sums do not depend on how many rows a microbatch has); activations are stored in about
# half the bytes; train's stages exchange bf16 unless --wire says otherwise; train at bf16 saves fp32
# checkpoints and resumes to the uninterrupted run's losses; bad values are errors. The
# kernels themselves: tests/test_bf16.c; against torch.autocast: tests/test_bf16_torch.c.
. "$(dirname "$0")/lib.sh"
mpi_env 120        # a hang is a failure; a healthy run takes a second or two
export OPENBLAS_NUM_THREADS=1
D=$TEST_TMP/bf16
tp_case "$D"       # lib.sh: config (n_head 4, vocab 257), text, gargs, targs, TOL
CMP="$BUILD/tests/aux_run_cmp"
# bf16 against fp32: inputs rounded to 8 significant bits (2^-9 relative each) through a few
# layers; the gradients stay within 2% of the largest entry (measured 0.4%), and never equal.
BF_TOL=2e-2

"$P" grad $gargs --out "$D/f.st" > /dev/null 2>&1
check "grad --precision bf16: single process" "$P" grad $gargs --precision bf16 --out "$D/b.st"
check "grad bf16: within bf16 rounding of fp32" "$CMP" "$D/b.st" "$D/f.st" $BF_TOL
if "$CMP" "$D/b.st" "$D/f.st" 0 > /dev/null 2>&1; then fail "grad bf16: not fp32's numbers" "bitwise equal: bf16 not in force"
else ok "grad bf16: not fp32's numbers"; fi
"$P" grad $gargs --precision bf16 --out "$D/b.st" 2>&1 >/dev/null | grep -q '^precision: bf16 matmuls' \
  && ok "grad bf16: says its kernel" || fail "grad bf16: says its kernel" "no 'precision: bf16' line"

# the emulation (what a CPU without AVX512_BF16 runs) sums as vdpbf16ps does: the same file
if PIPETRAIN_BF16_EMULATE=1 "$P" grad $gargs --precision bf16 --out "$D/e.st" 2> "$D/err" > /dev/null &&
   grep -q 'kernel: emulated' "$D/err"; then
  check "grad bf16 emulated: the AVX512_BF16 file bitwise" "$CMP" "$D/e.st" "$D/b.st" 0
else fail "grad bf16 emulated" "$(tail -2 "$D/err")"; fi

layout() {   # name, tolerance against the single-process bf16 file, flags
  local n=$1 tol=$2; shift 2
  if ! "$P" grad $gargs --precision bf16 --out "$D/l.st" "$@" > "$D/out" 2>&1; then
    fail "grad bf16 $n" "$(tail -2 "$D/out")"; return; fi
  check "grad bf16 $n: equals one process (tol $tol)" "$CMP" "$D/l.st" "$D/b.st" $tol
}
# one microbatch over two stages: every layer sums as one process, bitwise; wte adds the head's
# and the embedding's gradients on two ranks (test_run_cli.sh's fp32 check, the same)
layout "gpipe P=2 M=1 (bitwise but wte)" "1e-5 wte.weight" --stages 2 --schedule gpipe --microbatches 1
layout "1f1b P=2 M=4" $TOL --stages 2 --schedule 1f1b --microbatches 4
layout "zb-h1 P=2 D=2 M=2" $TOL --stages 2 --dp 2 --schedule zb-h1 --microbatches 2
layout "tp 2" $TOL --tp 2
# under --sp B computes the weight gradients from its fp32 output gradients, where W elsewhere
# reads them from bf16 storage: the bias sums differ by those roundings (measured 8e-4)
layout "tp 2 --sp, stages 2" 5e-3 --tp 2 --sp --stages 2
layout "tp 2 --tp-overlap" $TOL --tp 2 --tp-overlap
layout "dp 2 --zero 1" $TOL --dp 2 --zero 1
layout "--recompute P=2" $TOL --stages 2 --recompute
if mpi 2 grad $gargs --precision bf16 --stages 2 --schedule gpipe --microbatches 1 --transport mpi \
     --out "$D/m.st" > "$D/out" 2>&1; then
  "$P" grad $gargs --precision bf16 --stages 2 --schedule gpipe --microbatches 1 --out "$D/t.st" > /dev/null 2>&1
  check "grad bf16 mpi -np 2: the threads file bitwise" "$CMP" "$D/m.st" "$D/t.st" 0
else fail "grad bf16 mpi -np 2" "$(tail -2 "$D/out")"; fi

# train: fp32 checkpoints, resumed at bf16 to the same losses; --zero 1 bitwise --zero 0
loss() { sed 's/.*"loss":\([0-9.e-]*\).*/\1/' "$1"; }
pipe="--stages 2 --schedule 1f1b --microbatches 2 --precision bf16"
"$P" train $targs --steps 6 $pipe --metrics "$D/full.jsonl" > /dev/null 2>&1
if "$P" train $targs --steps 3 $pipe --save "$D/ck" > "$D/save.out" 2>&1 &&
   "$P" train $targs --steps 6 $pipe --resume "$D/ck/ckpt-3" --metrics "$D/res.jsonl" > /dev/null 2>&1 &&
   [ "$(tail -3 "$D/full.jsonl" | loss /dev/stdin)" = "$(loss "$D/res.jsonl")" ]; then
  ok "train bf16: resume gives the uninterrupted losses"
else fail "train bf16: resume" "$(tail -3 "$D/full.jsonl" | loss /dev/stdin | tr '\n' ' ') vs $(loss "$D/res.jsonl" | tr '\n' ' ')"; fi
grep -q 'wire bf16' "$D/save.out" && ok "train bf16: stages exchange bf16 (--wire bf16 by default)" \
  || fail "train bf16: --wire bf16 by default" "$(grep pipeline "$D/save.out")"
"$P" train $targs --steps 1 $pipe --wire fp32 > "$D/w.out" 2>&1
grep -q '^pipeline:' "$D/w.out" && ! grep -q 'wire bf16' "$D/w.out" && ok "train bf16 --wire fp32: fp32 messages" \
  || fail "train bf16 --wire fp32" "$(grep pipeline "$D/w.out")"
if grep -q '"dtype":"F32"' "$D"/ck/ckpt-3/*.safetensors && ! grep -q '"dtype":"BF16"' "$D"/ck/ckpt-3/*.safetensors; then
  ok "train bf16: checkpoints are fp32"; else fail "train bf16: checkpoints are fp32" "a BF16 tensor or no F32 one"; fi
"$P" train $targs --steps 4 --dp 2 --precision bf16 --metrics "$D/z0.jsonl" > /dev/null 2>&1
"$P" train $targs --steps 4 --dp 2 --zero 1 --precision bf16 --metrics "$D/z1.jsonl" > /dev/null 2>&1
[ -s "$D/z1.jsonl" ] && [ "$(loss "$D/z0.jsonl")" = "$(loss "$D/z1.jsonl")" ] \
  && ok "train bf16: --zero 1 gives --zero 0's losses" || fail "train bf16: --zero 1" "$(loss "$D/z1.jsonl" | tr '\n' ' ')"

# activations in bf16 but the residual stream, statistics, token ids and probabilities: the
# busiest rank's activation bytes (the run header's figure) about half of fp32's (here 0.54)
for p in fp32 bf16; do
  "$P" train $targs --steps 1 --stages 2 --microbatches 4 --precision $p --metrics "$D/act_$p.jsonl" > "$D/act_$p.out" 2>&1
done
# the memory line says what bf16 holds: one fp32 copy of the parameters, the fp32 work area
grep '^memory per rank' "$D/act_bf16.out" | grep -q 'params are the one fp32 copy.*fp32 work area' \
  && ! grep '^memory per rank' "$D/act_fp32.out" | grep -q 'bf16' \
  && ok "train bf16: the memory line names the one fp32 copy of the parameters and the work area" \
  || fail "train bf16: the memory line" "$(grep '^memory per rank' "$D"/act_*.out)"
act() { sed -n 's/.*"act_bytes_max_rank":\([0-9]*\).*/\1/p' "$1" | head -1; }
a32=$(act "$D/act_fp32.jsonl"); a16=$(act "$D/act_bf16.jsonl")
if [ -n "$a32" ] && [ -n "$a16" ] && awk -v a="$a16" -v b="$a32" 'BEGIN { exit !(a <= 0.6 * b) }'; then
  ok "train bf16: activations per rank <= 0.6x fp32's ($a16 vs $a32 bytes)"
else fail "train bf16: activations per rank <= 0.6x fp32's" "bf16 $a16, fp32 $a32 bytes"; fi

# one process on 2 OpenBLAS threads splits the bf16 products (c_fc here: 256 rows x 256 x 1024,
# 134 MFLOP, past the 16 MFLOP a part needs): the gradients of one thread, bitwise
echo '{"n_layer": 1, "n_head": 4, "n_embd": 256, "vocab_size": 257, "n_positions": 32}' > "$D/wide.json"
wargs="--config $D/wide.json --tokens $D/text.txt --batch 8 --seq 32 --precision bf16"
if OPENBLAS_NUM_THREADS=1 "$P" grad $wargs --out "$D/w1.st" > /dev/null 2>&1 &&
   OPENBLAS_NUM_THREADS=2 "$P" grad $wargs --out "$D/w2.st" > /dev/null 2>&1; then
  check "grad bf16 on 2 threads: one thread's gradients bitwise" "$CMP" "$D/w2.st" "$D/w1.st" 0
else fail "grad bf16 on 2 threads" "grad failed"; fi

expect_error "--precision: a bad value" "--precision 'fp16': expected fp32 or bf16" "$P" grad $gargs --out "$D/x.st" --precision fp16
done_tests
