#!/usr/bin/env bash
# What 16 bits on the wire do to training: the demo's model and settings (4 layers x 128 channels,
# 2 stages, zb-h1, 8 microbatches, the fortunes corpus) for STEPS steps with --wire fp32, bf16 and
# fp16 (same seed, same batches, threads), the loss at a few steps and its difference from fp32's.
# The speed on a slow link is bench_hosts.sh's. Usage: bench/bench_wire.sh [STEPS]  (default 300)
set -u
cd "$(dirname "$0")/.."
P=${PIPETRAIN:-build/pipetrain}
steps=${1:-300}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
src=/usr/share/games/fortunes
[ -d "$src" ] || { echo "bench_wire: skipped: $src not found (apt-get install fortunes)"; exit 0; }
find "$src" -maxdepth 1 -type f ! -name '*.*' -print0 | sort -z | xargs -0 cat > "$D/fortunes.txt"
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
isa=$(grep -qw avx512f /proc/cpuinfo && echo AVX-512 || (grep -qw avx2 /proc/cpuinfo && echo AVX2 || echo other))
echo "machine: $cpu, $isa, $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
for w in fp32 bf16 fp16; do
  "$P" train --config examples/char-gpt.json --data "$D/fortunes.txt" --batch 32 --seq 128 --steps "$steps" \
    --lr 2e-3 --beta2 0.99 --warmup 30 --lr-schedule cosine --shuffle 7 --stages 2 --schedule zb-h1 \
    --microbatches 8 --wire $w --metrics "$D/$w.jsonl" > "$D/$w.log" 2>&1 || { echo "bench_wire: --wire $w failed: $(tail -2 "$D/$w.log")"; exit 1; }
done
loss() { sed -nE "s/.*\"step\":$2,.*\"loss\":([^,]*),.*/\1/p" "$D/$1.jsonl" | head -1; }
mean_tail() {   # the mean loss of the last 20 steps (one step's loss is one batch's)
  sed -E 's/.*"loss":([^,]*),.*/\1/' "$D/$1.jsonl" | tail -20 | awk '{s+=$1} END {printf "%.4f", s/NR}'
}
printf "%-8s %10s %10s %10s\n" step fp32 bf16 fp16
for s in 1 14 50 100 200 "$steps"; do
  [ "$s" -le "$steps" ] || continue
  a=$(loss fp32 "$s"); b=$(loss bf16 "$s"); c=$(loss fp16 "$s")
  awk -v s="$s" -v a="$a" -v b="$b" -v c="$c" 'BEGIN {printf "%-8s %10.4f %10.4f (%+.2f%%) %10.4f (%+.2f%%)\n", s, a, b, (b-a)/a*100, c, (c-a)/a*100}'
done
a=$(mean_tail fp32); b=$(mean_tail bf16); c=$(mean_tail fp16)
awk -v a="$a" -v b="$b" -v c="$c" 'BEGIN {printf "last 20   %10.4f %10.4f (%+.2f%%) %10.4f (%+.2f%%)  (mean loss of the last 20 steps)\n", a, b, (b-a)/a*100, c, (c-a)/a*100}'
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
