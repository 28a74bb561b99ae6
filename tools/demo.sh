#!/usr/bin/env bash
# make demo: trains a small character-level GPT on the fortunes corpus (Debian's `fortunes`
# package, installed by the Makefile), shows the loss falling, saves a checkpoint and prints a
# sample from it. A few minutes on 2 cores. Usage: tools/demo.sh [path/to/pipetrain]
# Environment: DEMO_STEPS (default 300), DEMO_DATA (a text or token file of your own).
set -euo pipefail
bin=${1:-build/pipetrain}
out=build/demo
mkdir -p "$out"
data=${DEMO_DATA:-$out/fortunes.txt}
if [ -z "${DEMO_DATA:-}" ] && [ ! -s "$data" ]; then
  src=/usr/share/games/fortunes
  [ -d "$src" ] || { echo "demo: $src not found (apt-get install fortunes)" >&2; exit 1; }
  # The plain-text fortune files (not the .dat indexes or .u8 links), about 1.5 MB of English.
  find "$src" -maxdepth 1 -type f ! -name '*.*' -print0 | sort -z | xargs -0 cat > "$data"
fi
steps=${DEMO_STEPS:-300}
echo "== training a 4-layer, 128-channel character-level GPT on $data ($(wc -c < "$data") bytes), $steps steps"
rm -rf "$out/run"
"$bin" train --config examples/char-gpt.json --data "$data" --batch 32 --seq 128 \
  --steps "$steps" --lr 2e-3 --beta2 0.99 --warmup 30 --lr-schedule cosine --shuffle 7 \
  --metrics "$out/metrics.jsonl" --save "$out/run" --log-every 10
echo "== metrics: $out/metrics.jsonl; checkpoint: $out/run/ckpt-$steps"
echo "== sample (temperature 0.8):"
"$bin" sample --checkpoint "$out/run" --prompt "The " --length 300 --temperature 0.8 --seed 3
