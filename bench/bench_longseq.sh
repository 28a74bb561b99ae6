#!/usr/bin/env bash
# Long sequences through the pipeline (docs/longseq.md): the bench model (4 layers, 2 heads, 64
# channels, vocab 256, n_positions 8192) at T in {1024, 4096, 8192}, P=2 and P=4, M=P microbatches
# of one sequence, over MPI (each rank a process) when mpirun is there, else threads. Per (T, P):
# plain 1f1b, --balance-memory, and --seq-chunks 2, 4, 8 when the binary has them (it says so when
# not), in that order within a round and reversed in the next, so the machine's noise hits all alike.
# Each row: tokens/s (median of the steps after the first, over rounds) and its ratio to 1f1b,
# activation MB per rank as the run reports them (the memory line's activations column), and the
# peak RSS per process (MPI) with the largest over the mean. A (T, P) whose activations would not
# fit the memory available now is skipped with a line that says so. Not a test.
# Usage: bench/bench_longseq.sh [--quick] [rounds] [steps]   (default 2 rounds, the second in
#        reverse order, one at T=8192; 3 steps; --quick: T=1024 and 4096 only, 2 steps)   BENCH_LONGSEQ_T="1024 4096" overrides the T list,
#        BENCH_LONGSEQ_P="4" the P list, BENCH_LONGSEQ_VARIANTS="1f1b balance" the variants (1f1b first: the ratios' base).
set -u
cd "$(dirname "$0")/.."
QUICK=0
[ "${1:-}" = "--quick" ] && { QUICK=1; shift; }
ROUNDS=${1:-2}; STEPS=${2:-$([ $QUICK = 1 ] && echo 2 || echo 3)}
TS=${BENCH_LONGSEQ_T:-$([ $QUICK = 1 ] && echo "1024 4096" || echo "1024 4096 8192")}
P=${PIPETRAIN:-build/pipetrain}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
NL=4; NH=2; C=64
cfg="{\"n_layer\": $NL, \"n_head\": $NH, \"n_embd\": $C, \"vocab_size\": 256, \"n_positions\": 8192}"
echo "$cfg" > "$D/cfg.json"
for i in $(seq 1 30); do cat README.md docs/*.md; done > "$D/text.txt"   # bytes: vocab 256

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
isa=$(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx2|avx512f|avx512_bf16|amx_tile)$' | tr '\n' ' ')
machine=$("$(dirname "$P")/bench/bench_train" --machine 2>/dev/null || echo "${cpu:-unknown CPU}, $(nproc) cores, ISA ${isa:-none listed}")
MPI=0; command -v mpirun > /dev/null 2>&1 && MPI=1
CHUNKS=0; "$P" train --help 2>&1 | grep -q -- '--seq-chunks' && CHUNKS=1
echo "bench_longseq: the bench model ($cfg), M=P microbatches of 1 sequence, $STEPS steps, $ROUNDS round(s), $([ $MPI = 1 ] && echo "MPI (a process per rank)" || echo "threads (no mpirun: RSS is the whole process)")"
echo "  machine: $machine"
echo "  load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
[ $CHUNKS = 1 ] || echo "  --seq-chunks: not in this binary (issue 25 item 1 not merged): rows for 1f1b and --balance-memory only"

VARIANTS="1f1b balance"
[ $CHUNKS = 1 ] && VARIANTS="$VARIANTS sc2 sc4 sc8"
VARIANTS=${BENCH_LONGSEQ_VARIANTS:-$VARIANTS}
PS=${BENCH_LONGSEQ_P:-2 4}
flags_of() { case $1 in 1f1b) echo "";; balance) echo "--balance-memory";; sc*) echo "--seq-chunks ${1#sc}";; esac; }

# run NAME T P FLAGS...: one training run; its output in $D/NAME.out, its metrics in $D/NAME.jsonl
run() {
  local name=$1 t=$2 np=$3; shift 3
  rm -f "$D/$name.jsonl" "$D/$name.events.jsonl" "$D/$name.html" "$D/$name.timeline.svg"   # --metrics appends
  local args=(train --config "$D/cfg.json" --data "$D/text.txt" --batch "$np" --seq "$t" --stages "$np"
              --microbatches "$np" --steps "$STEPS" --lr 1e-3 --metrics "$D/$name.jsonl" "$@")
  if [ $MPI = 1 ]; then
    mpirun --allow-run-as-root --oversubscribe -np "$np" "$P" "${args[@]}" --transport mpi > "$D/$name.out" 2>&1
  else
    "$P" "${args[@]}" > "$D/$name.out" 2>&1
  fi
}
median() { tr ' ' '\n' | grep . | sort -g | awk '{ a[NR] = $1 } END { print (NR ? (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) : 0) }'; }
# tokens/s of the steps after the first, from a metrics file
toks() { sed -n '2,$p' "$1" | sed 's/.*"tokens_per_s":\([0-9.]*\).*/\1/'; }
# activation MB per rank (the memory line's 4th column), and peak RSS MB per process
acts() { grep '^memory per rank' "$1" | sed 's/.*): //' | tr ',' '\n' | awk '{ split($2, v, "/"); printf "%s ", v[4] }'; }
# the memory line's total per rank (params + grads + optimizer + activations: the prediction the
# lend plan balances), and each process's peak RSS less it (the process's own: runtime, libraries)
total() { grep '^memory per rank' "$1" | sed 's/.*): //' | tr ',' '\n' | awk '{ split($2, v, "/"); printf "%.1f ", v[1] + v[2] + v[3] + v[4] }'; }
rest() { paste -d' ' <(rss "$1" | tr ' ' '\n' | grep .) <(total "$1" | tr ' ' '\n' | grep .) | awk '{ printf "%.1f ", $1 - $2 }'; }
rss() { grep -E '^peak RSS' "$1" | sed -E 's/.*: //; s/ MB.*//; s/r[0-9]+ //g; s/,//g'; }
spread() { awk '{ m = 0; s = 0; for (i = 1; i <= NF; i++) { s += $i; if ($i > m) m = $i } printf "%.2f", NF && s ? m / (s / NF) : 0 }'; }
# GB the plain 1f1b activations need at (T, P): sum of the stages' peaks (P..1) x blocks per stage
# x (attention probabilities 4 NH T^2 + about 80 T C bytes per block), and what is available now
need_gb() { awk -v t="$1" -v p="$2" -v nl=$NL -v nh=$NH -v c=$C 'BEGIN { printf "%.1f", p * (p + 1) / 2 * (nl / p) * (4 * nh * t * t + 80 * t * c) / 1e9 }'; }
avail_gb() { awk '/^MemAvailable/ { printf "%.1f", $2 / 1048576 }' /proc/meminfo; }

printf "\n%-6s %-3s %-9s %10s %7s  %-34s %-34s %s\n" T P variant "tokens/s" "x 1f1b" "activations MB per rank" "peak RSS MB per process" "RSS max/mean"
for t in $TS; do
  for np in $PS; do
    need=$(need_gb "$t" "$np"); have=$(avail_gb)
    if awk -v n="$need" -v h="$have" 'BEGIN { exit !(n > 0.7 * h) }'; then
      printf "%-6s %-3s skipped: plain 1f1b activations need about %s GB, %s GB available now\n" "$t" "$np" "$need" "$have"
      continue
    fi
    for v in $VARIANTS; do : > "$D/$v.tok"; done
    nr=$ROUNDS; [ "$t" -ge 8192 ] && nr=1   # T=8192: one round (each run is 4x T=4096's)
    for r in $(seq 1 "$nr"); do
      order=$VARIANTS
      [ $((r % 2)) = 0 ] && order=$(echo $VARIANTS | tr ' ' '\n' | tac | tr '\n' ' ')   # even rounds reversed
      for v in $order; do
        run "$v" "$t" "$np" $(flags_of "$v") || { echo "  $t $np $v: run failed: $(tail -2 "$D/$v.out" | tr '\n' ' ')"; continue; }
        toks "$D/$v.jsonl" >> "$D/$v.tok"
      done
    done
    base=$(median < "$D/1f1b.tok")
    for v in $VARIANTS; do
      [ -s "$D/$v.tok" ] || continue
      tk=$(median < "$D/$v.tok")
      printf "%-6s %-3s %-9s %10.0f %7.2f  %-34s %-34s %s\n" "$t" "$np" "$v" "$tk" \
        "$(awk -v a="$tk" -v b="$base" 'BEGIN { print (b > 0 ? a / b : 0) }')" "$(acts "$D/$v.out")" "$(rss "$D/$v.out")" \
        "$([ $MPI = 1 ] && rss "$D/$v.out" | spread || echo -)"
    done
    [ -s "$D/balance.out" ] && grep '^activation sets balanced' "$D/balance.out" | sed "s/^/  T=$t P=$np /"
    for v in $VARIANTS; do   # the prediction against the measure, per rank
      [ $MPI = 1 ] && [ -s "$D/$v.out" ] && echo "  T=$t P=$np $v: predicted MB per rank (memory line) $(total "$D/$v.out")| peak RSS less it $(rest "$D/$v.out")"
    done
  done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
