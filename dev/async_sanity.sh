#!/usr/bin/env bash
# A quick convergence sanity check of the asynchronous schedules and --async-fix (not the bench:
# bench/bench_async.sh is): the 4-layer char GPT of examples/char-gpt.json on the fortunes text
# (90% train, the last 10% held out), P=4, 4 microbatches of 4 sequences x 64, 600 steps, the
# same tokens for every variant; prints the held-out loss (16 batches) at the end of each run.
# One seed. Usage: dev/async_sanity.sh [pipetrain] [variant ...] (default: all below); STEPS=N.
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
# name lr flags
variants="1f1b 2e-3 --stages 4 --schedule 1f1b
pd1-none 2e-3 --stages 1 --schedule pipedream
pd-none 2e-3 --stages 4 --schedule pipedream
pd-nesterov 2e-3 --stages 4 --schedule pipedream --async-fix nesterov
pd-pipemare 2e-3 --stages 4 --schedule pipedream --async-fix pipemare
pd-predict 2e-3 --stages 4 --schedule pipedream --async-fix predict
2bw-none 2e-3 --stages 4 --schedule 2bw
2bw-nesterov 2e-3 --stages 4 --schedule 2bw --async-fix nesterov
pd-none-lo 5e-4 --stages 4 --schedule pipedream
pd-nesterov-lo 5e-4 --stages 4 --schedule pipedream --async-fix nesterov
pd-predict-lo 5e-4 --stages 4 --schedule pipedream --async-fix predict
pd-pipemare-lo 5e-4 --stages 4 --schedule pipedream --async-fix pipemare
pd-none-mid 1e-3 --stages 4 --schedule pipedream
pd-predict-mid 1e-3 --stages 4 --schedule pipedream --async-fix predict
2bw-none-lo 1e-3 --stages 4 --schedule 2bw
2bw-nesterov-lo 1e-3 --stages 4 --schedule 2bw --async-fix nesterov"
echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$variants" | while read -r name lr flags; do
  [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qx "$name" && continue
  rm -f "$out/$name.jsonl"
  "$bin" train --config examples/char-gpt.json --data "$out/train.txt" --eval-data "$out/eval.txt" --eval-batches 16 \
    --batch 16 --seq 64 --steps "${STEPS:-600}" --lr "$lr" --beta2 0.99 --warmup 30 --lr-schedule cosine --shuffle 7 \
    --microbatches 4 --metrics "$out/$name.jsonl" $flags > "$out/$name.log" 2>&1
  printf '%-16s lr %-5s held-out %s  train %s\n' "$name" "$lr" \
    "$(grep -o '"eval_loss":[0-9.]*' "$out/$name.jsonl" | tail -1 | cut -d: -f2)" \
    "$(tail -1 "$out/$name.jsonl" | grep -o '"loss":[0-9.]*' | cut -d: -f2)"
done
