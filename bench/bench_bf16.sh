#!/usr/bin/env bash
# --precision bf16 against fp32 on this machine, side by side. (1) Activations: one step of the
# reference shape (n_layer 4, n_embd 256, n_head 4, vocab 256, B 8 x T 256) under the default
# layout and under 2 stages x 4 microbatches; the run header's activations per rank (the busiest
# rank's activation sets) and the memory line's (with the scratch, which holds bf16's fp32 work
# area), and the memory line's total per rank (parameters, gradients and AdamW moments stay fp32:
# the parameters are the one copy the matmuls read, rounded as they pack them). (2) Loss on real
# text: the demo's model and flags (examples/char-gpt.json on the fortunes corpus, B 32 x T 128,
# AdamW lr 2e-3 cosine with warm-up, shuffled batches) for STEPS steps (default 300) with --precision fp32 and with --precision bf16, one thread each, the two
# runs side by side (the same batches in the same order). Prints the machine line, both final
# losses, the mean of the last 10 steps' losses and bf16's relative difference. The step time:
# build/bench/bench_train --precision bf16. Not a test.
# Usage: bench/bench_bf16.sh [STEPS]     (BUILD: the build folder, default build)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
steps=${1:-300}
out=$BUILD/bench_bf16
mkdir -p "$out"
data=$out/fortunes.txt
if [ ! -s "$data" ]; then
  src=/usr/share/games/fortunes
  [ -d "$src" ] || { echo "bench_bf16: $src not found (apt-get install fortunes)" >&2; exit 1; }
  find "$src" -maxdepth 1 -type f ! -name '*.*' -print0 | sort -z | xargs -0 cat > "$data"
fi
echo "bench_bf16: activations per rank, reference shape, one step"
echo '{"n_layer": 4, "n_head": 4, "n_embd": 256, "vocab_size": 256, "n_positions": 256}' > "$out/ref.json"
for lay in "" "--stages 2 --microbatches 4"; do
  for p in fp32 bf16; do
    OPENBLAS_NUM_THREADS=1 "$BUILD"/pipetrain train --config "$out/ref.json" --data "$data" --batch 8 --seq 256 \
      --steps 1 --precision $p $lay > "$out/act_$p.out" 2>&1 || { tail -3 "$out/act_$p.out"; exit 1; }
  done
  a() { sed -n 's/.*activations \([0-9.]*\) MB on the busiest rank.*/\1/p' "$1"; }
  m() { sed -n 's/^memory per rank.*: r0 \([0-9.]*\)\/\([0-9.]*\)\/\([0-9.]*\)\/\([0-9.]*\).*/\1 \2 \3 \4/p' "$1"; }
  awk -v l="${lay:-default layout}" -v a="$(a "$out/act_fp32.out")" -v b="$(a "$out/act_bf16.out")" \
      -v c="$(m "$out/act_fp32.out")" -v d="$(m "$out/act_bf16.out")" 'BEGIN {
    split(c, f, " "); split(d, g, " "); tf = f[1] + f[2] + f[3] + f[4]; tg = g[1] + g[2] + g[3] + g[4]
    printf "  %s: header fp32 %.2f MB, bf16 %.2f MB (%.3fx); memory line r0 activations %.1f vs %.1f MB (%.3fx),\n" \
           "    params+grads+optimizer+activations %.1f vs %.1f MB (%.3fx; params, grads and AdamW fp32 in both)\n",
           l, a, b, b / a, f[4], g[4], g[4] / f[4], tf, tg, tg / tf }'
done
echo "bench_bf16: $steps steps of examples/char-gpt.json on the fortunes corpus, fp32 and bf16 side by side"
echo "  machine: $("$BUILD"/bench/bench_train --machine); load $(cut -d' ' -f1-3 /proc/loadavg)"
for p in fp32 bf16; do
  rm -f "$out/$p.jsonl"
  OPENBLAS_NUM_THREADS=1 "$BUILD"/pipetrain train --config examples/char-gpt.json --data "$data" \
    --batch 32 --seq 128 --steps "$steps" --lr 2e-3 --beta2 0.99 --warmup 30 --lr-schedule cosine \
    --shuffle 7 --threads 1 --precision $p --metrics "$out/$p.jsonl" --log-every 100 > "$out/$p.out" 2>&1 &
done
wait
loss() { sed 's/.*"loss":\([0-9.e-]*\).*/\1/' "$1"; }
paste <(loss "$out/fp32.jsonl") <(loss "$out/bf16.jsonl") | awk -v n="$steps" '
  { f[NR] = $1; b[NR] = $2 }
  END { if (NR != n) { print "  runs ended early: " NR " of " n " steps"; exit 1 }
        for (i = n - 9; i <= n; i++) { mf += f[i] / 10; mb += b[i] / 10 }
        printf "  final loss: fp32 %.4f, bf16 %.4f (%+.2f%%)\n", f[n], b[n], 100 * (b[n] - f[n]) / f[n]
        printf "  mean of the last 10 steps: fp32 %.4f, bf16 %.4f (%+.2f%%)\n", mf, mb, 100 * (mb - mf) / mf }'
echo "  load after: $(cut -d' ' -f1-3 /proc/loadavg)"
