#!/usr/bin/env bash
# Whole training steps (forward, backward, clipping, AdamW) on all of this machine's cores:
# `pipetrain train` with no layout flag (the layout the trainer picks), the old default (one
# process, OpenBLAS on every core: --threads N) and one thread, against PyTorch
# (bench/torch_train.py --adamw) on 1 thread and on every core, in alternating rounds so the
# machine's noise hits all alike. Prints each round's tokens/s (median of the steps after two
# warm-ups), the medians over rounds and the ratio of the default layout to PyTorch's best thread
# count. Not a test.
# Usage: bench/bench_layout.sh [ref|gpt2] [rounds] [steps]    (default: ref 3 8)
set -u
cd "$(dirname "$0")/.."
SHAPE=${1:-ref}; ROUNDS=${2:-3}; STEPS=${3:-8}
P=${PIPETRAIN:-build/pipetrain}
PY=/usr/bin/python3
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
CORES=$(nproc)
case "$SHAPE" in
  ref)  cfg='{"n_layer": 4, "n_head": 4, "n_embd": 256, "vocab_size": 256, "n_positions": 256}'; B=8; T=256 ;;
  gpt2) cfg='{"n_layer": 12, "n_head": 12, "n_embd": 768, "vocab_size": 50257, "n_positions": 1024}'; B=4; T=256 ;;
  *) echo "bench_layout: no shape '$SHAPE' (ref, gpt2)" >&2; exit 2 ;;
esac
echo "$cfg" > "$D/cfg.json"
# Random tokens as an llm.c token file (magic 20240520, version 1, count; uint16 tokens).
V=$(echo "$cfg" | sed 's/.*"vocab_size": \([0-9]*\).*/\1/')
awk -v n=$((B * T * (STEPS + 2) + 1)) -v v="$V" 'BEGIN { srand(7); for (i = 0; i < n; i++) print int(rand() * v) }' |
  "${PY}" -c '
import struct, sys
toks = [int(x) for x in sys.stdin]
hdr = [20240520, 1, len(toks)] + [0] * 253
sys.stdout.buffer.write(struct.pack("<256i", *hdr) + struct.pack("<%dH" % len(toks), *toks))' > "$D/tok.bin"

echo "bench_layout: shape $SHAPE ($cfg), batch $B x $T, $STEPS steps with AdamW, $ROUNDS rounds"
echo "  machine: $("$(dirname "$P")/bench/bench_train" --machine 2>/dev/null || echo "$(nproc) cores")"

# Median tokens/s of steps 3.. from a metrics file.
med_metrics() { sed -n '3,$p' "$1" | sed 's/.*"tokens_per_s":\([0-9.]*\).*/\1/' | sort -g |
                awk '{ a[NR] = $1 } END { print (NR ? (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) : 0) }'; }
ours() {   # name, flags...
  local name=$1; shift
  rm -f "$D/$name.jsonl"
  "$P" train --config "$D/cfg.json" --data "$D/tok.bin" --batch $B --seq $T --steps $STEPS --lr 1e-4 \
    --metrics "$D/$name.jsonl" "$@" > "$D/$name.out" 2>&1 || { echo 0; return; }
  med_metrics "$D/$name.jsonl"
}
theirs() { # threads
  "$PY" bench/torch_train.py --shape "$SHAPE" --threads "$1" --repeats $((STEPS - 2)) --adamw 2>/dev/null |
    awk '/tokens\/s/ { print $2 }' | grep . || echo 0
}
have_torch=1
"$PY" -c 'import torch' 2>/dev/null || have_torch=0

declare -A R
names="default onethread allcores"; [ $have_torch = 1 ] && names="$names torch1 torchN"
for r in $(seq "$ROUNDS"); do
  R[default,$r]=$(ours default)
  R[allcores,$r]=$(ours allcores --threads "$CORES")
  R[onethread,$r]=$(ours onethread --threads 1)
  if [ $have_torch = 1 ]; then
    R[torch1,$r]=$(theirs 1)
    R[torchN,$r]=$(theirs "$CORES")
  fi
  line="  round $r tokens/s:"
  for n in $names; do line="$line $n ${R[$n,$r]}"; done
  echo "$line"
done
grep -m1 '^layout:' "$D/default.out" | sed 's/^/  default /'
median() { tr ' ' '\n' | grep . | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) }'; }
declare -A M
for n in $names; do
  M[$n]=$(for r in $(seq "$ROUNDS"); do printf '%s ' "${R[$n,$r]}"; done | median)
done
printf '  medians tokens/s: pipetrain default layout %.0f | one process on %d OpenBLAS threads %.0f | one thread %.0f\n' \
  "${M[default]}" "$CORES" "${M[allcores]}" "${M[onethread]}"
if [ $have_torch = 1 ]; then
  best=$(echo "${M[torch1]} ${M[torchN]}" | awk '{ print ($1 > $2 ? $1 : $2) }')
  bestn=$(echo "${M[torch1]} ${M[torchN]}" | awk -v n="$CORES" '{ print ($1 > $2 ? 1 : n) }')
  printf '  PyTorch %s: 1 thread %.0f | %d threads %.0f tokens/s\n' "$("$PY" -c 'import torch; print(torch.__version__)')" \
    "${M[torch1]}" "$CORES" "${M[torchN]}"
  awk -v a="${M[default]}" -v b="$best" -v n="$bestn" -v c="${M[onethread]}" -v d="${M[torch1]}" 'BEGIN {
    printf "  ratio pipetrain default layout / PyTorch best (%d thread%s): %.2fx; one thread vs one thread: %.2fx\n",
           n, (n == 1 ? "" : "s"), (b > 0 ? a / b : 0), (d > 0 ? c / d : 0) }'
else
  echo "  PyTorch: skipped (/usr/bin/python3 cannot import torch)"
fi
