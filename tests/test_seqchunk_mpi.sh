#!/usr/bin/env bash
# --seq-chunks over MPI and with tensor parallelism, through the CLI: `grad` with K chunks on 2
# and 4 processes gives bitwise the threads run's gradients (each rank computes the same sums in
# the same order), and equals the unchunked single process (float tolerance: attention's sums in
# another order); `train` with chunks over MPI gives the threads run's losses; at --precision
# bf16 (chunk acts stored in bf16) MPI gives the threads run's gradients.
. "$(dirname "$0")/lib.sh"
mpi_env 120        # a hang is a failure; a healthy run takes a few seconds
D=$TEST_TMP/seqchunk_mpi
tp_case "$D"       # n_head 4, vocab 257, batch 8 x seq 16; TOL 1e-4

"$P" grad $gargs --out "$D/whole.st" > /dev/null 2>&1 || fail "grad single process" "no reference"
while read -r np flags; do
  n="grad mpi -np $np $flags"
  if ! mpi "$np" grad $gargs --out "$D/mpi.st" $flags --transport mpi > "$D/out" 2>&1; then
    fail "$n" "$(tail -3 "$D/out")"; continue; fi
  "$P" grad $gargs --out "$D/thr.st" $flags > /dev/null 2>&1
  check "$n equals threads bitwise" "$CMP" "$D/mpi.st" "$D/thr.st" 0
  check "$n equals the unchunked single process" "$CMP" "$D/mpi.st" "$D/whole.st" "$TOL"
done <<'L'
2 --stages 2 --schedule 1f1b --microbatches 2 --seq-chunks 4
2 --stages 2 --schedule zb-h1 --microbatches 4 --seq-chunks 2
4 --stages 2 --tp 2 --schedule 1f1b --microbatches 2 --seq-chunks 2
4 --stages 2 --dp 2 --schedule zb-h1 --microbatches 1 --seq-chunks 4
L

# --precision bf16: a chunk's act stored in bf16 (tests/test_seqchunk.c checks the numbers);
# over MPI the threads run's gradients bitwise, within bf16 rounding of the fp32 chunked ones
bflags="--stages 2 --schedule 1f1b --microbatches 2 --seq-chunks 4"
"$P" grad $gargs --out "$D/f32.st" $bflags > /dev/null 2>&1
"$P" grad $gargs --out "$D/b16.st" $bflags --precision bf16 > "$D/out" 2>&1 || fail "grad bf16 --seq-chunks 4" "$(tail -3 "$D/out")"
check "grad bf16 --seq-chunks 4: within bf16 rounding of fp32" "$CMP" "$D/b16.st" "$D/f32.st" 2e-2
mpi 2 grad $gargs --out "$D/b16m.st" $bflags --precision bf16 --transport mpi > "$D/out" 2>&1 \
  && check "grad mpi -np 2 bf16 --seq-chunks 4 equals threads bitwise" "$CMP" "$D/b16m.st" "$D/b16.st" 0 \
  || fail "grad mpi -np 2 bf16 --seq-chunks 4" "$(tail -3 "$D/out")"

# the same flags over threads alone (no mpirun): --tp 2 with chunks against the single process
"$P" grad $gargs --out "$D/tp.st" --stages 2 --tp 2 --microbatches 2 --seq-chunks 4 > "$D/out" 2>&1 \
  || fail "grad threads --tp 2 --seq-chunks 4" "$(tail -3 "$D/out")"
check "grad threads --tp 2 --seq-chunks 4 equals the single process" "$CMP" "$D/tp.st" "$D/whole.st" "$TOL"

# train: 3 steps over MPI give the threads run's losses (bitwise)
targs2="train $targs --steps 3 --stages 2 --schedule 1f1b --microbatches 2 --seq-chunks 4"
mpi 2 $targs2 --transport mpi --metrics "$D/m_mpi.jsonl" > "$D/out" 2>&1 || fail "train mpi --seq-chunks 4" "$(tail -3 "$D/out")"
"$P" $targs2 --metrics "$D/m_thr.jsonl" > /dev/null 2>&1
loss() { sed 's/.*"loss":\([0-9.]*\).*/\1/' "$1"; }
[ -s "$D/m_mpi.jsonl" ] && [ "$(loss "$D/m_mpi.jsonl")" = "$(loss "$D/m_thr.jsonl")" ] \
  && ok "train mpi --seq-chunks 4: losses equal threads" \
  || fail "train mpi --seq-chunks 4: losses equal threads" "$(loss "$D/m_mpi.jsonl" | tr '\n' ' ') vs $(loss "$D/m_thr.jsonl" | tr '\n' ' ')"

expect_error "grad --seq-chunks 3 not dividing --seq 16" "must divide --seq 16" \
  "$P" grad $gargs --out "$D/x.st" --stages 2 --seq-chunks 3
done_tests
