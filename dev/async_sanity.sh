#!/usr/bin/env bash
# A quick convergence sanity check of the asynchronous schedules and --async-fix (not the bench:
# bench/bench_async.sh is): the 4-layer char GPT of examples/char-gpt.json on the fortunes text
# (90% train, the last 10% held out), P=4, 4 microbatches of 4 sequences x 64, 600 steps, the
# same tokens for every variant; prints the held-out loss (16 batches) at the end of each run.
# Usage: dev/async_sanity.sh [pipetrain] [variant ...] (default: all below; a variant may be a
# regex, e.g. 'p1-.*'); STEPS=N (600), SEED=S
# (7: shuffle and init); JOBS=J runs at once (1).
set -euo pipefail
bin=${1:-build/pipetrain}; shift || true
out=build/async_sanity
mkdir -p "$out"
src=/usr/share/games/fortunes
if [ ! -s "$out/train.txt" ]; then
  find "$src" -maxdepth 1 -type f ! -name '*.*' -print0 | sort -z | xargs -0 cat > "$out/all.txt"
  n=$(wc -c < "$out/all.txt")
  head -c $((n * 9 / 10)) "$out/all.txt" > "$out/train.txt"
  tail -c $((n - n * 9 / 10)) "$out/all.txt" > "$out/eval.txt"
fi
# name lr batch microbatches flags: every run sees STEPS x 16 x 64 tokens (steps = STEPS*16/batch);
# 2bw takes 32 rows in 8 microbatches (M = 2P, so batches overlap inside a step), i.e. two updates
# of 16 rows a step: the same rows per update as 1f1b; pipedream updates after each microbatch.
variants=""
# nesterov runs AsyncPP's betas (0.99, 0.999): the --beta2 0.99 every run gets would be kept as given
nb() { [ "$1" = nesterov ] && echo " --beta2 0.999"; return 0; }
for lr in 1e-3 2e-3 4e-3 8e-3; do variants+="1f1b-$lr $lr 16 4 --stages 4 --schedule 1f1b
"; done
variants+="pd1-none-2e-3 2e-3 16 4 --stages 1 --schedule pipedream
"
# pd: a flush every step (--async-window 1: the table of docs/async.md "Corrections")
for lr in 5e-4 1e-3 2e-3; do
  for fix in none nesterov pipemare predict; do variants+="pd-$fix-$lr $lr 16 4 --stages 4 --schedule pipedream --async-fix $fix$(nb $fix) --async-window 1
"; done
done
# the continuous stream (docs/async.md "Throughput under link delay"): pdw the default window (4 steps
# a pass) with the tie's sum P updates late (--defer-tie), pdo with the tie owned by stage 0 and the
# head's copy refreshed P updates late (--tie-owner), pdn the window alone
for lr in 5e-4 1e-3 2e-3; do
  for fix in none nesterov; do variants+="pdw-$fix-$lr $lr 16 4 --stages 4 --schedule pipedream --async-fix $fix$(nb $fix) --defer-tie
pdo-$fix-$lr $lr 16 4 --stages 4 --schedule pipedream --async-fix $fix$(nb $fix) --tie-owner
pdn-$fix-$lr $lr 16 4 --stages 4 --schedule pipedream --async-fix $fix$(nb $fix)
"; done
done
# pipedream fast under link delay (docs/async.md "Throughput under link delay"): every stage admits
# 4 forwards, the tied embedding's sum a step late (pdf); each alone with nesterov (pdt: the tie, pdd: the depth)
for lr in 5e-4 1e-3; do
  for fix in none nesterov predict; do variants+="pdf-$fix-$lr $lr 16 4 --stages 4 --schedule pipedream --async-fix $fix$(nb $fix) --defer-tie --async-depth 4 --async-window 1
"; done
  variants+="pdt-nesterov-$lr $lr 16 4 --stages 4 --schedule pipedream --async-fix nesterov$(nb nesterov) --defer-tie --async-window 1
pdd-nesterov-$lr $lr 16 4 --stages 4 --schedule pipedream --async-fix nesterov$(nb nesterov) --async-depth 4 --async-window 1
"
done
for lr in 5e-4 1e-3 2e-3 4e-3; do
  for fix in none nesterov; do variants+="2bw-$fix-$lr $lr 32 8 --stages 4 --schedule 2bw --async-fix $fix$(nb $fix)
"; done
done
# the one-update delay alone (docs/async.md "2bw's gap"): P=1, one microbatch of 16 rows, 2bw (every
# gradient one update old) against 1f1b (none), with Adam's momentum (beta1 0.9), without it
# (beta1 0) and with the Nesterov method
for lr in 5e-4 1e-3 2e-3; do
  for b in 0.9 0; do
    variants+="p1-1f1b-b$b-$lr $lr 16 1 --stages 1 --schedule 1f1b --beta1 $b
p1-2bw-b$b-$lr $lr 16 1 --stages 1 --schedule 2bw --async-fix none --beta1 $b
"
  done
  variants+="p1-2bw-nesterov-$lr $lr 16 1 --stages 1 --schedule 2bw --async-fix nesterov --beta2 0.999
"
done
# the same delay on pipedream's updates (4 of 4 rows a step): 2bw at P=1 with 4 microbatches (each its
# own batch, one update old) against pipedream at P=1 (an update per microbatch, no delay)
for lr in 1e-3 2e-3; do
  variants+="p1m4-pd-$lr $lr 16 4 --stages 1 --schedule pipedream --async-fix none
p1m4-2bw-$lr $lr 16 4 --stages 1 --schedule 2bw --async-fix none
"
done
variants=${variants%$'\n'}
steps16=${STEPS:-600}
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
seed=${SEED:-7}
one() {   # name lr batch mb flags...: one run, its result line into $out/$name.s$seed.res
  local name=$1 lr=$2 batch=$3 mb=$4 f=$out/$1.s$seed; shift 4
  rm -f "$f.jsonl"
  "$bin" train --config examples/char-gpt.json --data "$out/train.txt" --eval-data "$out/eval.txt" --eval-batches 16 \
    --batch "$batch" --seq 64 --steps $((steps16 * 16 / batch)) --lr "$lr" --beta2 0.99 --warmup $((30 * 16 / batch)) \
    --lr-schedule cosine --shuffle "$seed" --seed "$seed" --microbatches "$mb" --metrics "$f.jsonl" "$@" > "$f.log" 2>&1 || true
  printf '%-18s seed %s lr %-5s held-out %s  train %s\n' "$name" "$seed" "$lr" \
    "$(grep -o '"eval_loss":[0-9.]*' "$f.jsonl" | tail -1 | cut -d: -f2)" \
    "$(tail -1 "$f.jsonl" | grep -o '"loss":[0-9.]*' | cut -d: -f2)" > "$f.res"
}
names=()
while read -r name lr batch mb flags; do
  [ $# -gt 0 ] && ! for v in "$@"; do [[ $name =~ ^($v)$ ]] && break; done && continue
  names+=("$name")
  while [ "$(jobs -rp | wc -l)" -ge "${JOBS:-1}" ]; do wait -n || true; done
  one "$name" "$lr" "$batch" "$mb" $flags &
done <<< "$variants"
wait
for n in "${names[@]}"; do cat "$out/$n.s$seed.res"; done
echo "# done, load $(cut -d' ' -f1-3 /proc/loadavg)"
