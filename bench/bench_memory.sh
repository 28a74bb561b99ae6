#!/usr/bin/env bash
# Memory per process and the overlapped gradient reduction, over MPI on this machine (make bench):
#  1. peak RSS of each process at P=1 and P=4 (1f1b) for GPT-2 124M (examples/gpt2-124m.json:
#     12 x 768, vocab 50257) and a block-dominated model (examples/gpt2-blocks-16x768.json:
#     16 x 768, vocab 8192; goal: every P=4 rank <= 0.4x of P=1), next to the bytes each rank
#     reports for parameters, gradients, moments and activations;
#  2. --zero 1 against --zero 0 at dp 2 (P=2 x dp 2): optimizer bytes per rank, peak RSS;
#  3. step time with the overlapped reduction and with --no-overlap (P=2 x dp 2, interleaved),
#     alternated so slow spells of the shared machine hit both; median of the steps after the
#     first.
# A few steps of batch 4 (8 in part 3) x 32 tokens each: the memory is the model's, not the data's. Ratios are
# measured side by side in one run; absolute times on a shared machine mean little.
# Usage: bench/bench_memory.sh   (PIPETRAIN: the binary; BENCH_STEPS: steps per run, default 3)
set -u
cd "$(dirname "$0")/.."
P=${PIPETRAIN:-build/pipetrain}
STEPS=${BENCH_STEPS:-3}
if ! command -v mpirun >/dev/null 2>&1; then echo "bench_memory: skipped (no mpirun)"; exit 0; fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
for i in $(seq 1 100); do cat README.md docs/*.md; done > "$T/text.txt"   # bytes: any vocab >= 256

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
echo "machine: ${cpu:-unknown CPU}, $(nproc) cores, $(awk '/^MemTotal/ { printf "%.0f", $2 / 1048576 }' /proc/meminfo) GB,"\
     "load average $(cut -d' ' -f1 /proc/loadavg); Open MPI $(mpirun --version 2>/dev/null | head -1 | awk '{ print $NF }')"

# run NP ARGS...: an MPI training run (batch $B x 32 tokens); its output in $T/out
B=4
run() {
  local np=$1; shift
  mpirun --allow-run-as-root --oversubscribe -np "$np" "$P" train --data "$T/text.txt" --batch $B --seq 32 \
    --transport mpi "$@" > "$T/out" 2>&1 || { echo "bench_memory: run failed: $*"; tail -3 "$T/out"; exit 1; }
}
# The numbers of a run: peak RSS per process (MB), and a column of the memory line (MB per rank).
rss() { grep -E '^peak RSS' "$T/out" | sed -E 's/.*: //; s/ MB.*//; s/r[0-9]+ //g; s/,//g'; }
memcol() { grep '^memory per rank' "$T/out" | sed 's/.*): //' | tr ',' '\n' | awk -v k="$1" '{ split($2, v, "/"); printf "%s ", v[k] }'; }
ratios() { awk -v base="$1" '{ m = 0; for (i = 1; i <= NF; i++) { r = $i / base; printf "%.2f ", r; if (r > m) m = r }
                               printf "(largest %.2f)", m }'; }

# --- 1. P=1 versus P=4
for cfg in gpt2-124m gpt2-blocks-16x768; do
  c=examples/$cfg.json
  run 1 --config "$c" --steps 2 --stages 1 --microbatches 4
  one=$(rss)
  run 4 --config "$c" --steps 2 --stages 4 --microbatches 4
  four=$(rss)
  echo "$cfg: peak RSS P=1 $one MB | P=4 ranks $four MB | P=4 / P=1: $(echo "$four" | ratios "$one")"
  echo "  bytes per P=4 rank (MB): params $(memcol 1)| grads $(memcol 2)| optimizer $(memcol 3)| activations $(memcol 4)"
done

# --- 2. --zero 1 at dp 2
c=examples/gpt2-blocks-16x768.json
run 4 --config "$c" --steps 2 --stages 2 --dp 2 --microbatches 2 --zero 0
o0=$(memcol 3); r0=$(rss)
run 4 --config "$c" --steps 2 --stages 2 --dp 2 --microbatches 2 --zero 1
o1=$(memcol 3); r1=$(rss)
echo "--zero at P=2 x dp 2 (gpt2-blocks-16x768): optimizer MB per rank --zero 0: $o0| --zero 1: $o1"\
     "| ratio $(paste <(echo "$o1" | tr ' ' '\n') <(echo "$o0" | tr ' ' '\n') | awk 'NF == 2 && $2 > 0 { printf "%.2f ", $1 / $2 }')"
echo "  peak RSS MB --zero 0: $r0 | --zero 1: $r1"

# --- 3. overlapped versus deferred reduction, alternated
B=8
lay="--config $c --steps $STEPS --stages 2 --dp 2 --schedule interleaved-1f1b --chunks 2 --microbatches 4"
median() { sort -n | awk '{ v[NR] = $1 } END { print NR ? (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) : 0 }'; }
steps_ms() { sed -n 's/.*"step":\([0-9]*\),.*"step_ms":\([0-9.]*\).*/\1 \2/p' "$1" | awk '$1 > 1 { print $2 }'; }
: > "$T/ovl.ms"; : > "$T/def.ms"
for round in 1 2; do
  for mode in ovl def; do
    flag=""; [ $mode = def ] && flag=--no-overlap
    run 4 $lay $flag --metrics "$T/$mode.jsonl"
    steps_ms "$T/$mode.jsonl" >> "$T/$mode.ms"
    rm -f "$T/$mode.jsonl" "$T/$mode.events.jsonl" "$T/$mode.html" "$T/$mode.timeline.svg"
    [ $round = 2 ] && echo "  $mode: $(grep -E '^(measured|simulated):' "$T/out" | sed 's/ (from.*//; s/ (interleaved.*//' | tr '\n' ' ')"
  done
done
ovl=$(median < "$T/ovl.ms"); def=$(median < "$T/def.ms")
echo "reduction at P=2 x dp 2 (interleaved-1f1b, 2 chunks, M=4): step ms overlapped $ovl | deferred $def"\
     "| overlapped / deferred $(awk -v a="$ovl" -v b="$def" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }')"
