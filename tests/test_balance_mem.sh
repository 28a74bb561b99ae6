#!/usr/bin/env bash
# train/grad --balance-memory (docs/longseq.md "Balanced stage memory"): the gradients (and the
# loss inside the gradient file) are bitwise those without it, on threads and over MPI, for 1f1b
# and gpipe at P=2..4 (each lends at this shape), zb-h1 (already even: lends nothing) and with dp 2
# (lent activations come back bit for bit); train's
# memory line says what moved (stage 0 lends, the last stage borrows, stage 0 holds less) and the
# losses of 3 steps are equal; the layouts it cannot lend in are refused with a reason.
. "$(dirname "$0")/lib.sh"
mpi_env 120        # a hang is a failure; a healthy run takes a second or two
D=$TEST_TMP/balance_mem
mkdir -p "$D"
cat > "$D/cfg.json" <<'J'
{"n_layer": 8, "n_head": 2, "n_embd": 32, "vocab_size": 256, "n_positions": 32}
J
for i in $(seq 1 200); do echo "the quick brown fox jumps over the lazy dog $((i % 7))"; done > "$D/text.txt"
gargs="--config $D/cfg.json --tokens $D/text.txt --batch 8 --seq 32"   # blocks outweigh the head: stages lend

# grad on threads: with and without, bitwise.
while read -r name flags; do
  n="balance-memory grad threads $name $flags"
  "$P" grad $gargs --out "$D/plain.st" --schedule "$name" $flags > /dev/null 2>&1
  if ! "$P" grad $gargs --out "$D/bal.st" --schedule "$name" $flags --balance-memory > "$D/out" 2>&1; then
    fail "$n" "$(tail -3 "$D/out")"; continue; fi
  check "$n equals without bitwise" "$CMP" "$D/bal.st" "$D/plain.st" 0
done <<'L'
1f1b --stages 4 --microbatches 8
1f1b --stages 3 --microbatches 4
1f1b --stages 2 --microbatches 4
gpipe --stages 4 --microbatches 4
zb-h1 --stages 4 --microbatches 8
1f1b --stages 4 --dp 2 --microbatches 4
L

# grad over MPI: with --balance-memory equals threads without, bitwise.
if command -v mpirun > /dev/null 2>&1; then
  while read -r np name flags; do
    n="balance-memory grad mpi -np $np $name $flags"
    "$P" grad $gargs --out "$D/plain.st" --schedule "$name" $flags > /dev/null 2>&1
    if ! mpi "$np" grad $gargs --out "$D/mpi.st" --schedule "$name" $flags --balance-memory --transport mpi > "$D/out" 2>&1; then
      fail "$n" "$(tail -3 "$D/out")"; continue; fi
    check "$n equals threads without bitwise" "$CMP" "$D/mpi.st" "$D/plain.st" 0
  done <<'L'
4 1f1b --stages 4 --microbatches 8
2 1f1b --stages 2 --microbatches 4
8 1f1b --stages 4 --dp 2 --microbatches 4
4 gpipe --stages 4 --microbatches 4
L
else
  ok "balance-memory mpi: skipped (no mpirun)"
fi

# train: the same losses, and the memory line says what moved.
targs="train --config $D/cfg.json --data $D/text.txt --batch 8 --seq 32 --lr 3e-3 --steps 3 --stages 4 --microbatches 8"
"$P" $targs --metrics "$D/m_plain.jsonl" > /dev/null 2>&1
"$P" $targs --metrics "$D/m_bal.jsonl" --balance-memory > "$D/out" 2>&1
loss() { sed 's/.*"loss":\([0-9.]*\).*/\1/' "$1"; }
[ -s "$D/m_bal.jsonl" ] && [ "$(loss "$D/m_bal.jsonl")" = "$(loss "$D/m_plain.jsonl")" ] \
  && ok "balance-memory train: losses equal without" \
  || fail "balance-memory train: losses equal without" "$(tail -3 "$D/out")"
line=$(grep '^activation sets balanced' "$D/out")
# r0 lends (its lent > 0), r3 borrows (its borrowed > 0)
echo "$line" | awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^r[0-9]$/) { split($(i+1), v, "/"); gsub(",", "", v[3]); h[$i] = v[1]; l[$i] = v[2]; b[$i] = v[3] } }
                    END { exit !(l["r0"] > 0 && b["r3"] > 0 && l["r3"] == 0) }' \
  && ok "balance-memory train: memory line shows r0 lending, r3 borrowing" \
  || fail "balance-memory train: memory line shows r0 lending, r3 borrowing" "'$line'"

# the run's page draws memory per rank with what was lent and what is kept for others
grep -q '<h2>Memory per rank</h2>' "$D/m_bal.html" && grep -q 'lent out' "$D/m_bal.html" && grep -q 'stroke-dasharray="4,3"' "$D/m_bal.html" \
  && ok "balance-memory report: memory per rank with the lent outline" \
  || fail "balance-memory report: memory per rank with the lent outline" "$(ls "$D"/m_bal* 2>&1 | tr '\n' ' ')"

# simulate: 1f1b P=4 M=8 holds 4 microbatches on stage 0, balanced 3 on every rank but one:
# --mem-limit 3 fits with --balance-memory and not without.
"$P" simulate --schedule 1f1b --stages 4 --microbatches 8 --mem-limit 3 --balance-memory --json > "$D/sim.json" 2>&1
grep -q '"fits":[[:space:]]*true' "$D/sim.json" && grep -q '"fits_without":[[:space:]]*false' "$D/sim.json" \
  && ok "balance-memory simulate: --mem-limit 3 fits balanced, not plain" \
  || fail "balance-memory simulate: --mem-limit 3 fits balanced, not plain" "$(head -c 300 "$D/sim.json")"
# the planner's memory model (simulate --config --cluster): a device of 170 MB misses rank 0's
# 1f1b activations at T=2048 without, and holds every rank's with --balance-memory
cat > "$D/long.json" <<'J'
{"n_layer": 4, "n_head": 2, "n_embd": 64, "vocab_size": 256, "n_positions": 2048}
J
cat > "$D/cl.json" <<'J'
{"name": "4 small devices", "nodes": [{"devices": {"count": 4, "name": "small", "speed": 1.0, "memory": 1.7e8},
 "link": {"bandwidth": 5e9, "latency": 5e-6}}], "reference_flops": 3e10}
J
sargs="simulate --config $D/long.json --cluster $D/cl.json --schedule 1f1b --stages 4 --microbatches 4 --seq 2048"
"$P" $sargs > "$D/plain.txt" 2>&1
"$P" $sargs --balance-memory > "$D/bal.txt" 2>&1
grep -q "does not fit" "$D/plain.txt" && ! grep -q "does not fit" "$D/bal.txt" \
  && ok "balance-memory planner model: 170 MB devices fit balanced, not plain" \
  || fail "balance-memory planner model: 170 MB devices fit balanced, not plain" "$(grep -A5 'memory per device' "$D/bal.txt" | tr '\n' ' ')"
# the bench model at T=2048, P=4 (one block per stage): the largest rank's total (the memory
# line's params + grads + optimizer + activations: what the plan balances) goes from 1.4x of the
# mean to within 10% of it (accounting, not timing)
"$P" train --config "$D/long.json" --data "$D/text.txt" --batch 4 --seq 2048 --stages 4 --microbatches 4 --steps 1 \
  --balance-memory > "$D/out" 2>&1
acts=$(grep '^memory per rank' "$D/out" | sed 's/.*): //' | tr ',' '\n' | awk '{ split($2, v, "/"); printf "%s ", v[1] + v[2] + v[3] + v[4] }')
echo "$acts" | awk '{ m = 0; s = 0; for (i = 1; i <= NF; i++) { s += $i; if ($i > m) m = $i } exit !(NF == 4 && m <= 1.10 * s / NF) }' \
  && ok "balance-memory P=4 T=2048: the largest rank's total within 10% of the mean" \
  || fail "balance-memory P=4 T=2048: the largest rank's total within 10% of the mean" "MB per rank: $acts"

# lending in parts (sched_lend.h LEND_PARTS): at this shape stage 0 sends only the tail of each
# act it lends and keeps the head (gpipe at batch 8: stages 1 and 3; tp 2: each TP rank its
# shard's); the numbers stay bitwise, on threads and over MPI
cat > "$D/part.json" <<'J'
{"n_layer": 4, "n_head": 2, "n_embd": 32, "vocab_size": 256, "n_positions": 256}
J
pargs="--config $D/part.json --tokens $D/text.txt --seq 64"
"$P" train --config "$D/part.json" --data "$D/text.txt" --batch 4 --seq 64 --stages 4 --microbatches 4 --steps 1 \
  --balance-memory > "$D/out" 2>&1
grep '^activation sets balanced' "$D/out" | grep -Eq 'r0 [0-9./]+ \(in parts: ([1-9]|1[0-5])/16 of each act\)' \
  && ok "balance-memory: stage 0 lends in parts at T=64 P=4" \
  || fail "balance-memory: stage 0 lends in parts at T=64 P=4" "$(grep -E '^activation sets|rror' "$D/out")"
while read -r np name flags; do
  n="balance-memory in parts grad $name $flags"
  "$P" grad $pargs --out "$D/plain.st" --schedule "$name" $flags > /dev/null 2>&1
  "$P" grad $pargs --out "$D/bal.st" --schedule "$name" $flags --balance-memory > "$D/out" 2>&1 \
    && check "$n threads equals without bitwise" "$CMP" "$D/bal.st" "$D/plain.st" 0 \
    || fail "$n threads" "$(tail -3 "$D/out")"
  if command -v mpirun > /dev/null 2>&1; then
    mpi "$np" grad $pargs --out "$D/mpi.st" --schedule "$name" $flags --balance-memory --transport mpi > "$D/out" 2>&1 \
      && check "$n mpi -np $np equals threads without bitwise" "$CMP" "$D/mpi.st" "$D/plain.st" 0 \
      || fail "$n mpi -np $np" "$(tail -3 "$D/out")"
  fi
done <<'L'
4 1f1b --stages 4 --microbatches 4 --batch 4
4 1f1b --stages 4 --microbatches 8 --batch 8
4 gpipe --stages 4 --microbatches 4 --batch 8
8 1f1b --stages 4 --microbatches 8 --batch 8 --tp 2
L

# a plan file with "balance_memory": true trains with it (train --plan)
cat > "$D/plan4.json" <<'J'
{"format": "pipetrain-plan/1", "stages": 4, "dp": 1, "tp": 1, "zero": 0, "microbatches": 8, "microbatch_size": 1,
 "seq": 32, "schedule": "1f1b", "chunks": 1, "balance_memory": true, "split": [2, 2, 2, 2]}
J
"$P" train --config "$D/cfg.json" --data "$D/text.txt" --plan "$D/plan4.json" --steps 1 > "$D/out" 2>&1
grep -q '^activation sets balanced' "$D/out" && ok "balance-memory: a plan file's balance_memory reaches train" \
  || fail "balance-memory: a plan file's balance_memory reaches train" "$(tail -3 "$D/out")"

# refused: two stages per rank, recomputation, sequence chunks, an asynchronous schedule
expect_error "balance-memory refuses interleaved" "one stage per pipeline rank" \
  "$P" grad $gargs --out "$D/x.st" --schedule interleaved-1f1b --stages 2 --chunks 2 --microbatches 4 --balance-memory
expect_error "balance-memory refuses --recompute" "does not go with --recompute" \
  "$P" grad $gargs --out "$D/x.st" --stages 2 --microbatches 4 --recompute --balance-memory
expect_error "balance-memory refuses --seq-chunks" "give one" \
  "$P" grad $gargs --out "$D/x.st" --stages 2 --microbatches 4 --seq-chunks 2 --balance-memory
expect_error "balance-memory refuses pipedream" "synchronous schedule" \
  "$P" train --config "$D/cfg.json" --data "$D/text.txt" --batch 8 --seq 16 --steps 1 --stages 2 --microbatches 4 \
  --schedule pipedream --balance-memory
done_tests
