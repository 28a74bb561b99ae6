#!/usr/bin/env bash
# train --wire: activations and gradients cross stage boundaries in 16 bits (bf16, fp16) while
# compute stays fp32. The loss stays close to fp32's (a small model, 30 steps), the wire is really
# 16 bits (the losses are not fp32's bitwise), threads and MPI give the same losses bitwise (the
# conversion is a pure function of the bits), bad values are refused.
. tests/lib.sh
mpi_env 120
D=$TEST_TMP/wire
mkdir -p "$D"
echo '{"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 256, "n_positions": 32}' > "$D/c.json"
for i in $(seq 1 300); do echo "the quick brown fox jumps over the lazy dog $((i % 13)) times"; done > "$D/t.txt"
targs="train --config $D/c.json --data $D/t.txt --batch 8 --seq 16 --stages 2 --microbatches 4 --schedule zb-h1 --lr 3e-3 --steps 30"
# 16-bit messages perturb each step by a relative 2^-9 (bf16) or 2^-12 (fp16) of the stream; over
# 30 steps of this model the last loss moved by < 0.2% in trials: 1% is a wide margin that a
# broken conversion (garbage, zeros, a wrong exponent) does not meet.
TOL_REL=0.01
losses() { sed -E 's/.*"loss":([^,]*),.*/\1/' "$1"; }
last() { losses "$1" | tail -1; }

OPENBLAS_NUM_THREADS=1 "$P" $targs --metrics "$D/f32.jsonl" > /dev/null 2>&1
for w in bf16 fp16; do
  OPENBLAS_NUM_THREADS=1 "$P" $targs --wire $w --metrics "$D/$w.jsonl" > "$D/$w.log" 2>&1
  a=$(last "$D/f32.jsonl"); b=$(last "$D/$w.jsonl")
  if [ -n "$a" ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" -v t=$TOL_REL 'BEGIN{d=(a>b?a-b:b-a)/a; exit !(d<t)}'; then
    ok "wire: --wire $w's loss after 30 steps within 1% of fp32's ($b vs $a)"
  else fail "wire: --wire $w's loss close to fp32's" "$b vs $a: $(tail -2 "$D/$w.log")"; fi
  [ "$(losses "$D/f32.jsonl")" != "$(losses "$D/$w.jsonl")" ] \
    && ok "wire: --wire $w really sends 16 bits (its losses are not fp32's bitwise)" \
    || fail "wire: --wire $w changes the messages" "the same losses as fp32"
  grep -q "wire $w (messages between stages in 16 bits: lossy)" "$D/$w.log" \
    && ok "wire: the run's header says --wire $w and that it is lossy" || fail "wire: header names $w" "$(grep ^pipeline "$D/$w.log")"
done
if mpi 2 $targs --wire bf16 --metrics "$D/bf16_mpi.jsonl" > "$D/mpi.log" 2>&1 &&
   [ "$(losses "$D/bf16.jsonl")" = "$(losses "$D/bf16_mpi.jsonl")" ]; then
  ok "wire: --wire bf16 gives bitwise the same losses on threads and MPI"
else fail "wire: bf16 threads == MPI" "$(losses "$D/bf16_mpi.jsonl" | tail -2 | tr '\n' ' ') vs $(losses "$D/bf16.jsonl" | tail -2 | tr '\n' ' '); $(tail -2 "$D/mpi.log")"; fi
expect_error "wire: --wire fp8 is refused, naming the values" "--wire 'fp8': give fp32.*bf16 or fp16" "$P" $targs --wire fp8
expect_error "wire: --wire with no value is refused" "--wire" "$P" $targs --wire
done_tests
