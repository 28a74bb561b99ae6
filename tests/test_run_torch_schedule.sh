#!/usr/bin/env bash
# Schedule files in torch.distributed.pipelining's own notation (no REDUCE_GRAD or STEP cells,
# blank cells for idle steps, several stages per rank, I for the input-gradient backward, with or
# without SEND/RECV cells): `grad` and `train` add the synchronous tail and give the single-process
# gradients and losses; a file with part of a tail, or one that fails validation, is still refused.
# The layout and numerics of generated schedules: tests/test_run_cli.sh, tests/test_run.c.
. tests/lib.sh
BUILD=${BUILD:-build}
P=$PIPETRAIN
CMP="$BUILD/tests/aux_run_cmp"
D=$TEST_TMP/run_torch
mkdir -p "$D"
cat > "$D/cfg.json" <<'J'
{"n_layer": 4, "n_head": 2, "n_embd": 32, "vocab_size": 256, "n_positions": 32}
J
for i in $(seq 1 200); do echo "the quick brown fox jumps over the lazy dog $((i % 7))"; done > "$D/text.txt"
export OPENBLAS_NUM_THREADS=1    # one summation order for the single-process reference
grad() { "$P" grad --config "$D/cfg.json" --tokens "$D/text.txt" --batch 8 --seq 16 "$@"; }
train() { "$P" train --config "$D/cfg.json" --data "$D/text.txt" --batch 8 --seq 16 --lr 3e-3 "$@"; }
# float32 sums of the same terms in another order (microbatches, the tied wte copies)
TOL=1e-4

# 2 ranks, 4 stages interleaved (0, 2 on rank 0; 1, 3 on rank 1), B and W split as torch writes
# them (I, W), blank cells where a rank idles.
printf '0F0,0F1,2F0,2F1,,,2I0,2I1,2W0,0I0,0I1,2W1,0W0,0W1\n,1F0,1F1,,3F0,3F1,3I0,3I1,1I0,3W0,1I1,1W0,3W1,1W1\n' > "$D/torch.csv"
# the same kind of file with its SEND/RECV cells: zb-v (a V, two stages per rank) lowered, tail cut
"$P" schedule --schedule zb-v --stages 2 --microbatches 2 --lower --csv |
  sed -e 's/,[0-9]*REDUCE_GRAD//g' -e 's/,STEP//' > "$D/torch_lowered.csv"

check "torch csv: simulate takes it as it is" bash -c "'$P' simulate --schedule-file '$D/torch.csv' | grep -Eq '^iteration time +14$'"
check "grad: single process" grad --out "$D/g1.st"
check "grad: a torch-notation csv (no REDUCE_GRAD, no STEP) runs" grad --out "$D/g2.st" --stages 2 --schedule-file "$D/torch.csv"
check "grad: the torch-notation csv equals one process" "$CMP" "$D/g2.st" "$D/g1.st" $TOL
check "grad: a torch-notation csv with SEND/RECV cells runs" grad --out "$D/g3.st" --stages 2 --schedule-file "$D/torch_lowered.csv"
check "grad: the csv with SEND/RECV cells equals one process" "$CMP" "$D/g3.st" "$D/g1.st" $TOL

rm -f "$D/m1.jsonl" "$D/m2.jsonl"     # --metrics appends
train --steps 3 --metrics "$D/m1.jsonl" >/dev/null 2>&1
if train --steps 3 --metrics "$D/m2.jsonl" --stages 2 --schedule-file "$D/torch.csv" > "$D/train.out" 2>&1; then
  ok "train: a torch-notation csv trains"
else fail "train: a torch-notation csv trains" "$(tail -3 "$D/train.out")"; fi
loss() { sed 's/.*"loss":\([0-9.]*\).*/\1/' "$1"; }
if paste <(loss "$D/m1.jsonl") <(loss "$D/m2.jsonl") | awk -v t=$TOL '
     { d = $1 - $2; if (d < 0) d = -d; if (d > t * $1) bad = 1; n++ } END { exit bad || n != 3 }'; then
  ok "train: the torch-notation csv gives the single-process losses (the weights update)"
else fail "train: the torch-notation csv gives the single-process losses" "$(paste <(loss "$D/m1.jsonl") <(loss "$D/m2.jsonl") | tr '\n' ' ')"; fi

# part of a tail is the file's to fix: no cell is added, the rank that lacks one is named
printf '0F0,0F1,2F0,2F1,,,2I0,2I1,2W0,0I0,0I1,2W1,0W0,0W1\n,1F0,1F1,,3F0,3F1,3I0,3I1,1I0,3W0,1I1,1W0,3W1,1W1,1REDUCE_GRAD,3REDUCE_GRAD,STEP\n' > "$D/partial.csv"
expect_error "torch csv: a partial tail is still refused, naming the rank" "partial.csv: rank 0 has no STEP" \
  grad --out "$D/x.st" --stages 2 --schedule-file "$D/partial.csv"
printf '0F0,0F1,2F0,2F1,,,2I0,2I1,2W0,0I0,0I1,2W1,0W0,0W1,0REDUCE_GRAD,2REDUCE_GRAD,STEP\n,1F0,1F1,,3F0,3F1,3I0,3I1,1I0,3W0,1I1,1W0,3W1,1W1,1REDUCE_GRAD,STEP\n' > "$D/noreduce3.csv"
expect_error "torch csv: a stage without REDUCE_GRAD next to others is refused" "noreduce3.csv: rank 1 has no 3REDUCE_GRAD" \
  train --steps 1 --stages 2 --schedule-file "$D/noreduce3.csv"
# torch's full backward is B; here B is the input gradient alone, so the file lacks its W's
printf '0F0,0F1,2F0,2F1,,,2B0,2B1,0B0,0B1\n,1F0,1F1,,3F0,3F1,3B0,3B1,1B0,1B1\n' > "$D/torch_full_b.csv"
expect_error "torch csv: a file that fails validation still fails" "torch_full_b.csv: missing 0W0" \
  grad --out "$D/x.st" --stages 2 --schedule-file "$D/torch_full_b.csv"
done_tests
