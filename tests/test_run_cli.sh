#!/usr/bin/env bash
# Command-line contract of the pipelined runtime (threads transport): `grad` with pipeline flags
# writes the single-process gradients (bitwise where the summation order is the same), `train`
# gives the same losses, reports bubble and measured-vs-simulated time, writes the measured
# trace and picture, saves and resumes chunked checkpoints, and bad layouts give clear errors.
# MPI: tests/test_run_mpi.sh. Numerics of every schedule: tests/test_run.c.
. tests/lib.sh
BUILD=${BUILD:-build}
P=$PIPETRAIN
CMP="$BUILD/tests/aux_run_cmp"
D=$TEST_TMP/run_cli
mkdir -p "$D"
cat > "$D/cfg.json" <<'J'
{"n_layer": 4, "n_head": 2, "n_embd": 32, "vocab_size": 256, "n_positions": 32}
J
for i in $(seq 1 200); do echo "the quick brown fox jumps over the lazy dog $((i % 7))"; done > "$D/text.txt"
# One OpenBLAS thread for the single-process reference: a threaded sgemm sums in another order.
export OPENBLAS_NUM_THREADS=1
grad() { "$P" grad --config "$D/cfg.json" --tokens "$D/text.txt" --batch 8 --seq 16 "$@"; }
train() { "$P" train --config "$D/cfg.json" --data "$D/text.txt" --batch 8 --seq 16 --lr 3e-3 "$@"; }
# float32 sums of the same terms in another order (microbatches, replicas, the tied wte copies)
TOL=1e-4

check "grad: single process" grad --out "$D/g1.st"
check "grad: gpipe P=2 M=1 runs" grad --out "$D/g2.st" --stages 2 --schedule gpipe --microbatches 1
# Same batch in one microbatch: every layer sums as one process does; only wte adds the head's
# and the embedding's gradients in another order (two ranks).
check "grad: gpipe P=2 M=1 bitwise but wte" "$CMP" "$D/g2.st" "$D/g1.st" 1e-5 wte.weight
check "grad: zb-h1 P=4 D=2 M=2 runs" grad --out "$D/g3.st" --stages 4 --dp 2 --schedule zb-h1 --microbatches 2
check "grad: zb-h1 P=4 D=2 M=2 equals one process" "$CMP" "$D/g3.st" "$D/g1.st" $TOL
check "grad: --split 1,3 interleaved" grad --out "$D/g4.st" --stages 1 --schedule interleaved-1f1b --chunks 2 --microbatches 2 --split 1,3
check "grad: --split 1,3 equals one process" "$CMP" "$D/g4.st" "$D/g1.st" $TOL
printf '0F0,0F1,0BW0,0BW1,0REDUCE_GRAD,STEP\n1F0,1BW0,1F1,1BW1,1REDUCE_GRAD,STEP\n' > "$D/s.csv"
check "grad: --schedule-file" grad --out "$D/g5.st" --stages 2 --schedule-file "$D/s.csv"
check "grad: --schedule-file equals one process" "$CMP" "$D/g5.st" "$D/g1.st" $TOL
"$P" schedule --schedule chimera --stages 2 --microbatches 2 --csv > "$D/chimera.csv"
check "grad: a chimera CSV (--pipes 2)" grad --out "$D/g6.st" --stages 2 --schedule-file "$D/chimera.csv" --pipes 2
check "grad: the chimera CSV equals one process" "$CMP" "$D/g6.st" "$D/g1.st" $TOL

# --- train: same losses as one process, bubble per step, measured vs simulated, trace, picture
train --steps 5 --metrics "$D/m1.jsonl" >/dev/null 2>&1
if train --steps 5 --metrics "$D/m2.jsonl" --stages 2 --dp 2 --schedule 1f1b --microbatches 2 \
     --trace "$D/t.json" --svg "$D/t.svg" > "$D/train.out" 2>&1; then ok "train: 1f1b P=2 D=2 runs"
else fail "train: 1f1b P=2 D=2 runs" "$(tail -3 "$D/train.out")"; fi
loss() { sed 's/.*"loss":\([0-9.]*\).*/\1/' "$1"; }
if paste <(loss "$D/m1.jsonl") <(loss "$D/m2.jsonl") | awk -v t=$TOL '
     { d = $1 - $2; if (d < 0) d = -d; if (d > t * $1) bad = 1; n++ } END { exit bad || n != 5 }'; then
  ok "train: 5 losses equal one process"
else fail "train: 5 losses equal one process" "$(paste <(loss "$D/m1.jsonl") <(loss "$D/m2.jsonl") | tr '\n' ' ')"; fi
grep -q '"bubble_fraction":0\.[0-9]*,"act_bytes_max_rank":[0-9]*}' "$D/m2.jsonl" && ok "train: metrics carry bubble_fraction" \
  || fail "train: metrics carry bubble_fraction" "$(head -1 "$D/m2.jsonl")"
grep -q '^measured:  iteration' "$D/train.out" && grep -q '^simulated: iteration' "$D/train.out" \
  && ok "train: measured and simulated iteration time" || fail "train: measured and simulated iteration time" "$(tail -3 "$D/train.out")"
grep -q '"traceEvents"' "$D/t.json" && grep -q '"name":"0F1"' "$D/t.json" && grep -q '"ph":"s"' "$D/t.json" \
  && ok "train: --trace writes the measured step with send arrows" || fail "train: --trace" "$(head -c 300 "$D/t.json")"
grep -q '<svg' "$D/t.svg" && ok "train: --svg" || fail "train: --svg" "no <svg> in $D/t.svg"

# --- checkpoints: resume equals an uninterrupted run; a checkpoint resumes under another layout
pipe="--stages 2 --schedule zb-h1 --microbatches 2"
train --steps 6 $pipe --metrics "$D/full.jsonl" >/dev/null 2>&1
if train --steps 3 $pipe --save "$D/ck" > "$D/save.out" 2>&1 && [ -f "$D/ck/ckpt-3/manifest.json" ]; then
  ok "train: pipelined save"; else fail "train: pipelined save" "$(tail -3 "$D/save.out")"; fi
ls "$D/ck/ckpt-3"/chunk-1.safetensors >/dev/null 2>&1 && ok "train: one file per chunk" \
  || fail "train: one file per chunk" "$(ls "$D/ck/ckpt-3")"
train --steps 6 $pipe --resume "$D/ck/ckpt-3" --metrics "$D/res.jsonl" >/dev/null 2>&1
if [ "$(tail -3 "$D/full.jsonl" | loss /dev/stdin)" = "$(loss "$D/res.jsonl")" ]; then
  ok "train: resume gives the same losses (to the printed 6 decimals)"
else fail "train: resume gives the same losses" "$(tail -3 "$D/full.jsonl" | loss /dev/stdin | tr '\n' ' ') vs $(loss "$D/res.jsonl" | tr '\n' ' ')"; fi
train --steps 6 --stages 4 --dp 2 --schedule 1f1b --microbatches 1 --resume "$D/ck/ckpt-3" \
  --metrics "$D/res2.jsonl" >/dev/null 2>&1
if paste <(tail -3 "$D/full.jsonl" | loss /dev/stdin) <(loss "$D/res2.jsonl") | awk -v t=$TOL '
     { d = $1 - $2; if (d < 0) d = -d; if (d > t * $1) bad = 1; n++ } END { exit bad || n != 3 }'; then
  ok "train: resume under P=4 D=2 continues the P=2 run"
else fail "train: resume under P=4 D=2 continues the P=2 run" "$(loss "$D/res2.jsonl" | tr '\n' ' ')"; fi

pd="--stages 2 --schedule pipedream --microbatches 4"
train --steps 6 $pd --metrics "$D/pfull.jsonl" >/dev/null 2>&1
train --steps 3 $pd --save "$D/pck" >/dev/null 2>&1
train --steps 6 $pd --resume "$D/pck/ckpt-3" --metrics "$D/pres.jsonl" >/dev/null 2>&1
[ -s "$D/pres.jsonl" ] && [ "$(tail -3 "$D/pfull.jsonl" | loss /dev/stdin)" = "$(loss "$D/pres.jsonl")" ] \
  && ok "train: pipedream resumes exactly" \
  || fail "train: pipedream resumes exactly" "$(loss "$D/pres.jsonl" | tr '\n' ' ')"

# --- bad layouts: a clear error, never a hang
expect_error "bad layout: more stages than blocks" "only 4 transformer blocks" grad --out "$D/x.st" --stages 8
expect_error "bad layout: batch not divisible" "not divisible by dp x microbatches" grad --out "$D/x.st" --stages 2 --dp 2 --microbatches 3
expect_error "bad layout: too few microbatches" "chimera.*microbatches" grad --out "$D/x.st" --stages 4 --schedule chimera --microbatches 1
expect_error "bad layout: split drops a block" "covers 3 blocks" grad --out "$D/x.st" --stages 2 --split 1,2
expect_error "bad layout: split with a trailing comma" "--split '1,3,': expected blocks per stage like 3,5,4,4" \
  grad --out "$D/x.st" --stages 2 --split 1,3,
expect_error "bad layout: split not a list of numbers" "--split '1;3': expected" grad --out "$D/x.st" --stages 2 --split "1;3"
expect_error "bad layout: split with an empty stage" "--split '4,0': stage 1 has 0 blocks; every stage needs at least 1" \
  train --steps 1 --stages 2 --split 4,0
expect_error "bad layout: split with too few stages" "--split '4' lists 1 stages, the layout has 2" \
  train --steps 1 --stages 2 --split 4
expect_error "bad layout: dp x microbatches beyond the batch (no overflow)" "not divisible by dp x microbatches" \
  grad --out "$D/x.st" --stages 1 --dp 65536 --schedule gpipe --microbatches 65536
printf '0F0,0F1,0BW0,0REDUCE_GRAD,STEP,0BW1,0REDUCE_GRAD,STEP\n1F0,1BW0,1F1,1BW1,1REDUCE_GRAD,STEP\n' > "$D/async_bad.csv"
expect_error "async schedule file: unequal REDUCE_GRAD/STEP pairs (would hang)" "one per microbatch" \
  timeout 60 "$P" train --config "$D/cfg.json" --data "$D/text.txt" --batch 8 --seq 16 --steps 1 --stages 2 --schedule-file "$D/async_bad.csv" --timeout 5
train --steps 1 --stages 2 --dp 2 --svg "$D/d2.svg" > /dev/null 2>&1
[ "$(grep -o '>rank [0-9]<' "$D/d2.svg" | sort -u | wc -l)" -eq 4 ] && ok "svg of a dp 2 x 2 stages run has a row per world rank" \
  || fail "svg of a dp 2 x 2 stages run has a row per world rank" "$(grep -o '>rank [0-9]<' "$D/d2.svg" | sort -u | tr '\n' ' ')"
expect_error "bad layout: schedule file rows" "has 2 ranks.*--stages is 4" grad --out "$D/x.st" --stages 4 --schedule-file "$D/s.csv"
# A CSV with part of the synchronous tail would train without updating and still exit 0. (One
# without any REDUCE_GRAD or STEP is torch's notation: it gets the tail, tests/test_run_torch_schedule.sh.)
printf '0F0,0F1,0BW0,0BW1,0REDUCE_GRAD\n1F0,1BW0,1F1,1BW1,1REDUCE_GRAD\n' > "$D/nostep.csv"
expect_error "schedule file: no STEP is an error" "nostep.csv: rank 0 has no STEP: the weights would never be updated" \
  train --steps 1 --stages 2 --schedule-file "$D/nostep.csv"
printf '0F0,0F1,0BW0,0BW1,STEP\n1F0,1BW0,1F1,1BW1,1REDUCE_GRAD,STEP\n' > "$D/noreduce.csv"
expect_error "schedule file: a stage without REDUCE_GRAD is an error" "noreduce.csv: rank 0 has no 0REDUCE_GRAD" \
  train --steps 1 --stages 2 --schedule-file "$D/noreduce.csv"
"$P" schedule --schedule pipedream --stages 2 --microbatches 2 --csv > "$D/pipedream.csv"
check "schedule file: a pipedream CSV (a STEP per microbatch) trains" \
  train --steps 2 --stages 2 --schedule-file "$D/pipedream.csv"
expect_error "bad layout: unknown transport" "--transport must be threads or mpi" train --steps 1 --stages 2 --transport tcp
expect_error "train: --trace needs a pipeline" "--trace and --svg" train --steps 1 --trace "$D/x.json"
expect_error "grad: pipedream has no batch gradient" "needs a synchronous schedule" grad --out "$D/x.st" --stages 2 --schedule pipedream
expect_error "a dying rank stops the job naming it" "rank 2.*died after 3 sends" \
  train --steps 3 --stages 2 --dp 2 --fail-rank 2 --fail-after 3 --timeout 10
done_tests
