#!/usr/bin/env bash
# Sequence chunks (--seq-chunks, seq1F1B) against 1f1b on the bench model (4 x 256, vocab 256) at
# a long sequence, P=2 over MPI (one process per rank): the activation bytes the busiest rank
# holds (act_bytes_max_rank, what the executor allocates), each process's peak RSS, and
# tokens/s (median of the steps after the first), in alternating rounds so slow spells of the
# shared machine hit both; prints the ratios chunked / 1f1b per round and their medians.
# Usage: bench/bench_seqchunk.sh [ROUNDS [T [K]]]   (default 3 rounds, T 4096, K 4; PIPETRAIN: the
# binary; BENCH_STEPS: steps per run, default 3; batch 2 = 2 microbatches of one sequence)
set -u
cd "$(dirname "$0")/.."
P=${PIPETRAIN:-build/pipetrain}
ROUNDS=${1:-3} SEQ=${2:-4096} K=${3:-4} STEPS=${BENCH_STEPS:-3}
if ! command -v mpirun >/dev/null 2>&1; then echo "bench_seqchunk: skipped (no mpirun)"; exit 0; fi
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
echo "{\"n_layer\": 4, \"n_head\": 4, \"n_embd\": 256, \"vocab_size\": 256, \"n_positions\": $SEQ}" > "$D/cfg.json"
for i in $(seq 1 400); do cat README.md docs/*.md; done | head -c $((SEQ * 64)) > "$D/text.txt"
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
isa=$(grep -qw avx512f /proc/cpuinfo && echo AVX-512 || (grep -qw avx2 /proc/cpuinfo && echo AVX2 || echo SSE))
echo "machine: ${cpu:-unknown CPU}, $isa, $(nproc) cores; load average at start $(cut -d' ' -f1-3 /proc/loadavg)"
echo "bench model 4 x 256, T $SEQ, P 2 (MPI), batch 2, microbatches 2: 1f1b against --seq-chunks $K, $STEPS steps a run"

# run NAME FLAGS...: one training run; prints "act_bytes rss0 rss1 tokens_per_s" (MB, MB, MB, tok/s)
run() {
  local name=$1; shift
  mpirun --allow-run-as-root --oversubscribe -np 2 "$P" train --config "$D/cfg.json" --data "$D/text.txt" \
    --batch 2 --seq "$SEQ" --steps "$STEPS" --lr 1e-4 --stages 2 --microbatches 2 --transport mpi \
    --metrics "$D/$name.jsonl" "$@" > "$D/$name.out" 2>&1 || { echo "bench_seqchunk: $name failed"; tail -3 "$D/$name.out" >&2; exit 1; }
  local act tps rss
  act=$(tail -1 "$D/$name.jsonl" | sed 's/.*"act_bytes_max_rank":\([0-9]*\).*/\1/')
  tps=$(tail -n +2 "$D/$name.jsonl" | sed 's/.*"tokens_per_s":\([0-9.]*\).*/\1/' | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
  rss=$(grep -E '^peak RSS' "$D/$name.out" | sed -E 's/.*: //; s/ MB.*//; s/r[0-9]+ //g; s/,//g')
  echo "$((act / 1000000)) $rss $tps"
}
printf "%-6s %-22s %-22s %s\n" round "1f1b act/rss0/rss1 tok/s" "chunks act/rss0/rss1 tok/s" "ratios act rss0 rss1 tok/s"
for r in $(seq 1 "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then a=$(run base); b=$(run chunk --seq-chunks "$K"); else b=$(run chunk --seq-chunks "$K"); a=$(run base); fi
  ratio=$(echo "$a $b" | awk '{ printf "%.2f %.2f %.2f %.2f", $5 / $1, $6 / $2, $7 / $3, $8 / $4 }')
  printf "%-6s %-22s %-22s %s\n" "$r" "$a" "$b" "$ratio"
  echo "$ratio" >> "$D/ratios"
done
med() { sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo "medians chunked / 1f1b: act_bytes $(cut -d' ' -f1 "$D/ratios" | med), peak RSS rank 0 $(cut -d' ' -f2 "$D/ratios" | med)," \
     "rank 1 $(cut -d' ' -f3 "$D/ratios" | med), tokens/s $(cut -d' ' -f4 "$D/ratios" | med); load at end $(cut -d' ' -f1-3 /proc/loadavg)"
