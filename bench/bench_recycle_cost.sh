#!/usr/bin/env bash
# What going on in place costs while nothing fails (docs/recovery.md "In place"): launch's
# default (mpirun --enable-recovery, train --recycle: the MPI transport's recovery mode, its
# collectives polled) against --no-recycle's job (plain mpirun, train without it): 2 stages x 2
# replicas over Open MPI on this machine, --snapshot-every 1, in alternating rounds; each run's
# median step_ms (the metrics' engine step, the first 5 steps left out), the with/without ratio
# per round and its median, the machine, its vector ISA and its load.
# Usage: bench/bench_recycle_cost.sh [ROUNDS] [tiny|demo] [after] (3, tiny: the 4-layer 32-channel
# test model, 300 steps of 8 x 16; demo: examples/char-gpt.json, 40 steps of 32 x 64). With
# `after`: the step of the replica left after going on in place (2 stages x 1 replica, twice the
# microbatches) as it runs now, zb-h1, against a fresh 1f1b (the ratio zb-h1 / 1f1b).
set -u
cd "$(dirname "$0")/.."
P=$(realpath "${PIPETRAIN:-build/pipetrain}")
ROUNDS=${1:-3}
MODEL=${2:-tiny}
AFTER=${3:-}
D=$(mktemp -d)
SNAP=/dev/shm/pt-bench-recycle-cost-$$
trap 'rm -rf "$D" "$SNAP"' EXIT
root=(); [ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
if [ "$MODEL" = demo ]; then
  for i in $(seq 1 3000); do echo "the quick brown fox jumps over the lazy dog, line $i of the bench corpus"; done > "$D/t.txt"
  args="--config $(realpath examples/char-gpt.json) --data $D/t.txt --batch 32 --seq 64 --lr 1e-3 --steps 40"
else
  echo '{"n_layer": 4, "n_head": 2, "n_embd": 32, "vocab_size": 256, "n_positions": 32}' > "$D/cfg.json"
  for i in $(seq 1 200); do echo "the quick brown fox jumps over the lazy dog $((i % 7))"; done > "$D/t.txt"
  args="--config $D/cfg.json --data $D/t.txt --batch 8 --seq 16 --lr 3e-3 --steps 300"
fi
args="$args --transport mpi --snapshot-every 1"
if [ "$AFTER" = after ]; then args="$args --stages 2 --dp 1 --microbatches 4"; NP=2; else args="$args --stages 2 --dp 2 --microbatches 2"; NP=4; fi
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
isa=$(grep -qw avx512f /proc/cpuinfo && echo AVX-512 || (grep -qw avx2 /proc/cpuinfo && echo AVX2 || echo other))
echo "machine: $cpu, $isa, $(nproc) cores; model $MODEL; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
median() { sort -g | awk '{v[NR]=$1} END {print NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
run() {   # run [--recycle]: the median step_ms of one run (with --recycle: under --enable-recovery)
  rm -rf "$SNAP" "$D/m.jsonl"
  local rec=(); [ "${1:-}" = --recycle ] && rec=(--enable-recovery --mca odls_base_sigkill_timeout 0)
  timeout 300 mpirun "${root[@]}" --oversubscribe "${rec[@]}" -np $NP "$P" train $args --snapshot-dir "$SNAP" "$@" \
    --metrics "$D/m.jsonl" > "$D/out" 2>&1 < /dev/null || { echo "bench_recycle_cost: a run failed: $(tail -2 "$D/out")" >&2; exit 1; }
  sed 's/.*"step_ms":\([0-9.]*\).*/\1/' "$D/m.jsonl" | tail -n +6 | median
}
: > "$D/ratios"
for ((r = 1; r <= ROUNDS; r++)); do
  if [ "$AFTER" = after ]; then A=(--schedule 1f1b); B=(--schedule zb-h1); na="a fresh 1f1b"; nb="zb-h1"
  else A=(); B=(--recycle); na="without"; nb="with --recycle"; fi
  if [ $((r % 2)) = 1 ]; then a=$(run "${A[@]}"); b=$(run "${B[@]}"); else b=$(run "${B[@]}"); a=$(run "${A[@]}"); fi
  ratio=$(awk -v a="$a" -v b="$b" 'BEGIN {printf "%.3f", b / a}')
  echo "$ratio" >> "$D/ratios"
  echo "round $r: $na $a ms, $nb $b ms per step: $ratio"
done
echo "median $([ "$AFTER" = after ] && echo zb-h1/1f1b || echo with/without): $(median < "$D/ratios") over $ROUNDS rounds; load after: $(cut -d' ' -f1-3 /proc/loadavg)"
