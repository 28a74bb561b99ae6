#!/usr/bin/env bash
# make demo: trains a small character-level GPT on the fortunes corpus (Debian's `fortunes`
# package, installed by the Makefile) as a 2-stage pipeline in one process (one thread per stage,
# zero-bubble ZB-H1 schedule, 8 microbatches), shows the loss falling and the measured iteration
# next to the simulator's prediction, draws the last step's timeline, saves a checkpoint and
# prints a sample from it. About two minutes on 2 cores. Usage: tools/demo.sh [path/to/pipetrain]
# Environment: DEMO_STEPS (default 600), DEMO_DATA (a text or token file of your own).
set -euo pipefail
bin=${1:-build/pipetrain}
out=build/demo
mkdir -p "$out"
data=${DEMO_DATA:-$out/fortunes.txt}
if [ -z "${DEMO_DATA:-}" ] && [ ! -s "$data" ]; then
  src=/usr/share/games/fortunes
  [ -d "$src" ] || { echo "demo: $src not found (apt-get install fortunes)" >&2; exit 1; }
  # The plain-text fortune files (not the .dat indexes or .u8 links), about 2.5 MB of English.
  find "$src" -maxdepth 1 -type f ! -name '*.*' -print0 | sort -z | xargs -0 cat > "$data"
fi
steps=${DEMO_STEPS:-600}
echo "== a 4-layer, 128-channel character-level GPT on $data ($(wc -c < "$data") bytes), $steps steps,"
echo "   as 2 pipeline stages (threads) on the zb-h1 schedule with 8 microbatches"
rm -rf "$out/run"
"$bin" train --config examples/char-gpt.json --data "$data" --batch 32 --seq 128 \
  --steps "$steps" --lr 2e-3 --beta2 0.99 --warmup 30 --lr-schedule cosine --shuffle 7 \
  --stages 2 --schedule zb-h1 --microbatches 8 \
  --metrics "$out/metrics.jsonl" --save "$out/run" --log-every 25 \
  --svg "$out/timeline.svg" --trace "$out/trace.json"
echo "== metrics: $out/metrics.jsonl; checkpoint: $out/run/ckpt-$steps"
echo "== the last step as measured: $out/timeline.svg (open in a browser), $out/trace.json (ui.perfetto.dev)"
echo "== the run report (curves, events, layout, timeline): $out/metrics.html (open in a browser)"
echo "== sample (temperature 0.8):"
"$bin" sample --checkpoint "$out/run" --prompt "The " --length 300 --temperature 0.8 --seed 3
