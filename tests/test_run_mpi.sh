#!/usr/bin/env bash
# The pipelined runtime over MPI (mpirun as root, oversubscribed on this machine): `grad` and
# `train` with --transport mpi give bitwise the results of the threads transport (both sum in
# rank order), so the threads equivalence tests (tests/test_run.c) carry over; --zero 1 and the
# overlapped reduction equal --zero 0 deferred bitwise; each process holds only its stages; a
# world size that does not match dp x stages is an error on every rank, and nothing hangs.
. "$(dirname "$0")/lib.sh"
mpi_env 120        # a hang is a failure; a healthy run takes a second or two
D=$TEST_TMP/run_mpi
mkdir -p "$D"
cat > "$D/cfg.json" <<'J'
{"n_layer": 4, "n_head": 2, "n_embd": 32, "vocab_size": 256, "n_positions": 32}
J
for i in $(seq 1 200); do echo "the quick brown fox jumps over the lazy dog $((i % 7))"; done > "$D/text.txt"
gargs="--config $D/cfg.json --tokens $D/text.txt --batch 8 --seq 16"

# grad: schedules, rank counts and a split on 2 or 4 processes, against threads, bitwise.
while read -r np name flags; do
  n="grad mpi -np $np $name $flags"
  if ! mpi "$np" grad $gargs --out "$D/mpi.st" --schedule "$name" $flags --transport mpi > "$D/out" 2>&1; then
    fail "$n" "$(tail -3 "$D/out")"; continue; fi
  "$P" grad $gargs --out "$D/thr.st" --schedule "$name" $flags > /dev/null 2>&1
  check "$n equals threads bitwise" "$CMP" "$D/mpi.st" "$D/thr.st" 0
done <<'L'
4 gpipe --stages 4 --microbatches 4
2 gpipe --stages 1 --dp 2 --microbatches 2
4 1f1b --stages 2 --dp 2 --microbatches 2
4 interleaved-1f1b --stages 2 --dp 2 --chunks 2 --microbatches 2
4 zb-h1 --stages 4 --microbatches 4
4 zb-h2 --stages 4 --microbatches 4
8 zb-h1 --stages 4 --dp 2 --microbatches 2
4 zb-v --stages 2 --dp 2 --microbatches 2
4 chimera --stages 2 --dp 2 --microbatches 2
4 greedy --stages 2 --dp 2 --microbatches 2 --split 1,3
L

# train: 5 steps over MPI give the threads run's losses.
targs="train --config $D/cfg.json --data $D/text.txt --batch 8 --seq 16 --lr 3e-3 --steps 5 --stages 2 --dp 2 --schedule zb-h2 --microbatches 2"
if mpi 4 $targs --transport mpi --metrics "$D/m_mpi.jsonl" > "$D/out" 2>&1; then ok "train mpi zb-h2 P=2 D=2 runs"
else fail "train mpi zb-h2 P=2 D=2 runs" "$(tail -3 "$D/out")"; fi
"$P" $targs --metrics "$D/m_thr.jsonl" > /dev/null 2>&1
loss() { sed 's/.*"loss":\([0-9.]*\).*/\1/' "$1"; }
[ -s "$D/m_mpi.jsonl" ] && [ "$(loss "$D/m_mpi.jsonl")" = "$(loss "$D/m_thr.jsonl")" ] \
  && ok "train mpi: losses equal threads" \
  || fail "train mpi: losses equal threads" "$(loss "$D/m_mpi.jsonl" | tr '\n' ' ') vs $(loss "$D/m_thr.jsonl" | tr '\n' ' ')"
grep -q '^simulated: iteration' "$D/out" && ok "train mpi: measured vs simulated on rank 0" \
  || fail "train mpi: measured vs simulated on rank 0" "$(tail -3 "$D/out")"
pargs="train --config $D/cfg.json --data $D/text.txt --batch 8 --seq 16 --lr 3e-3 --steps 5 --stages 2 --dp 2 --schedule pipedream --microbatches 2"
mpi 4 $pargs --transport mpi --metrics "$D/p_mpi.jsonl" > "$D/out" 2>&1
"$P" $pargs --metrics "$D/p_thr.jsonl" > /dev/null 2>&1
[ -s "$D/p_mpi.jsonl" ] && [ "$(loss "$D/p_mpi.jsonl")" = "$(loss "$D/p_thr.jsonl")" ] \
  && ok "train mpi pipedream: losses equal threads" \
  || fail "train mpi pipedream: losses equal threads" "$(tail -3 "$D/out")"

# one rank holding the same chunk in both pipes (a 2-pipe schedule file on 1 rank): MPI keeps a
# model per pipe, like threads (it used to add both pipes' gradients into one buffer, doubling them)
echo "0F0,0BW0,1F1,1BW1,0REDUCE_GRAD,1REDUCE_GRAD,STEP" > "$D/p2.csv"
p2args="grad --config $D/cfg.json --tokens $D/text.txt --batch 8 --seq 16 --stages 1 --schedule-file $D/p2.csv --pipes 2"
"$P" $p2args --out "$D/p2_thr.st" > /dev/null 2>&1
mpi 1 $p2args --transport mpi --out "$D/p2_mpi.st" > "$D/out" 2>&1
cmp -s "$D/p2_thr.st" "$D/p2_mpi.st" && ok "mpi: one rank, one chunk in both pipes equals threads bitwise" \
  || fail "mpi: one rank, one chunk in both pipes equals threads bitwise" "$(tail -2 "$D/out")"

# under mpirun the MPI transport is the default: no --transport flag needed
mpi 4 $targs --metrics "$D/m_auto.jsonl" > "$D/out" 2>&1
[ -s "$D/m_auto.jsonl" ] && [ "$(loss "$D/m_auto.jsonl")" = "$(loss "$D/m_thr.jsonl")" ] \
  && ok "train under mpirun without --transport uses MPI" \
  || fail "train under mpirun without --transport uses MPI" "$(tail -3 "$D/out")"

# checkpoints: saved over MPI (each chunk by its holder), resumed with threads, same losses.
sargs="train --config $D/cfg.json --data $D/text.txt --batch 8 --seq 16 --lr 3e-3 --stages 2 --dp 2 --schedule 1f1b --microbatches 2"
mpi 4 $sargs --steps 3 --save "$D/ck" --transport mpi > "$D/out" 2>&1
"$P" $sargs --steps 6 --metrics "$D/full.jsonl" > /dev/null 2>&1
"$P" $sargs --steps 6 --resume "$D/ck/ckpt-3" --metrics "$D/res.jsonl" > /dev/null 2>&1
[ -s "$D/res.jsonl" ] && [ "$(tail -3 "$D/full.jsonl" | loss /dev/stdin)" = "$(loss "$D/res.jsonl")" ] \
  && ok "mpi: checkpoint saved over MPI resumes with threads, same losses" \
  || fail "mpi: checkpoint saved over MPI resumes with threads, same losses" "$(tail -3 "$D/out")"

# --zero 1 and the overlapped reduction over MPI: bitwise the parameters of --zero 0 deferred
# (and of the threads transport); a --zero 1 checkpoint (a moments file per rank) resumes.
zargs="train --config $D/cfg.json --data $D/text.txt --batch 8 --seq 16 --lr 3e-3 --grad-clip 0.5 --steps 3 --stages 2 --dp 2 --schedule interleaved-1f1b --chunks 2 --microbatches 2"
mpi 4 $zargs --zero 0 --no-overlap --save "$D/zr0" > "$D/out" 2>&1 || fail "mpi --zero 0 deferred runs" "$(tail -3 "$D/out")"
mpi 4 $zargs --zero 1 --save "$D/zr1" > "$D/out" 2>&1 || fail "mpi --zero 1 overlapped runs" "$(tail -3 "$D/out")"
"$P" $zargs --zero 1 --save "$D/zr1t" > /dev/null 2>&1
same=1
for c in 0 1 2 3; do
  "$CMP" "$D/zr0/ckpt-3/chunk-$c.safetensors" "$D/zr1/ckpt-3/chunk-$c.safetensors" 0 > /dev/null || same=0
  "$CMP" "$D/zr1t/ckpt-3/chunk-$c.safetensors" "$D/zr1/ckpt-3/chunk-$c.safetensors" 0 > /dev/null || same=0
done
[ $same = 1 ] && ok "mpi: --zero 1 overlapped equals --zero 0 deferred and threads, bitwise" \
  || fail "mpi: --zero 1 overlapped equals --zero 0 deferred and threads, bitwise" "chunk files differ"
same=1
for r in 0 1 2 3; do cmp -s "$D/zr1/ckpt-3/optim-$r.safetensors" "$D/zr1t/ckpt-3/optim-$r.safetensors" || same=0; done
[ $same = 1 ] && ok "mpi: every rank wrote its moments file, equal to threads'" \
  || fail "mpi: every rank wrote its moments file, equal to threads'" "$(ls "$D/zr1/ckpt-3")"
"$P" ${zargs/--steps 3/--steps 5} --metrics "$D/zfull.jsonl" > /dev/null 2>&1
mpi 2 ${zargs/--steps 3/--steps 5} --stages 1 --dp 2 --chunks 1 --schedule 1f1b --zero 1 --resume "$D/zr1" \
  --metrics "$D/zres.jsonl" > "$D/out" 2>&1
[ -s "$D/zres.jsonl" ] && [ "$(tail -2 "$D/zfull.jsonl" | loss /dev/stdin)" = "$(loss "$D/zres.jsonl")" ] \
  && ok "mpi: a --zero 1 checkpoint resumes from the save root under P=1, D=2" \
  || fail "mpi: a --zero 1 checkpoint resumes from the save root under P=1, D=2" "$(tail -3 "$D/out")"

# memory per rank over MPI: each process holds its stages only (bytes each reports at start)
mpi 4 train --config $D/cfg.json --data $D/text.txt --batch 8 --seq 16 --steps 1 --stages 4 --microbatches 4 \
  --metrics "$D/mem.jsonl" > "$D/out" 2>&1
whole=$(( 4 * (256*32 + 32*32 + 4*(12*32*32 + 13*32) + 2*32) ))
params=$(grep -o '"params":\[[^]]*\]' "$D/mem.events.jsonl" | head -1 | tr -dc '0-9,.' )
if [ -n "$params" ] && echo "$params" | tr ',' '\n' | awk -v w=$whole 'NF { n++; s += $1; if ($1 >= w) bad = 1 } END { exit bad || n != 4 }'; then
  ok "mpi P=4: every rank's parameters are its stages' (each < the whole model's $whole bytes)"
else fail "mpi P=4: every rank's parameters are its stages'" "params $params, whole $whole: $(grep memory "$D/out")"; fi
grep -Eq '^peak RSS per process \(MB\): r0 [0-9.]+, r1 [0-9.]+, r2 [0-9.]+, r3 [0-9.]+' "$D/out" \
  && ok "mpi: peak RSS of every process at the end" || fail "mpi: peak RSS of every process at the end" "$(tail -4 "$D/out")"

# bad layout: the world does not match dp x stages; every rank says so and exits.
mpi 3 grad $gargs --out "$D/x.st" --stages 2 --dp 2 --transport mpi > "$D/out" 2>&1; rc=$?
nerr=$(grep -c 'MPI world has 3 processes' "$D/out")
if [ $rc -eq 124 ]; then fail "mpi: world size mismatch" "hang"
elif [ $rc -ne 0 ] && [ "$nerr" -eq 3 ]; then ok "mpi: world size mismatch is an error on every rank"
else fail "mpi: world size mismatch is an error on every rank" "rc $rc, $nerr ranks said it: $(head -3 "$D/out")"; fi
mpi 2 grad $gargs --out "$D/x.st" --stages 2 --microbatches 3 --transport mpi > "$D/out" 2>&1; rc=$?
nerr=$(grep -c 'not divisible' "$D/out")
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$nerr" -eq 2 ] && ok "mpi: bad batch split is an error on every rank" \
  || fail "mpi: bad batch split is an error on every rank" "rc $rc: $(head -3 "$D/out")"
# a rank that dies mid-step (fault injection): the job ends with an error naming it, no hang.
t0=$(date +%s)
mpi 4 $targs --transport mpi --fail-rank 2 --fail-after 3 > "$D/out" 2>&1; rc=$?
if [ $rc -eq 124 ]; then fail "mpi: a dying rank ends the job naming it" "hang"
elif [ $rc -ne 0 ] && grep -q 'rank 2 failed: died after 3 sends' "$D/out"; then
  ok "mpi: a dying rank ends the job naming it ($(( $(date +%s) - t0 ))s)"
else fail "mpi: a dying rank ends the job naming it" "rc $rc: $(head -5 "$D/out")"; fi
done_tests
