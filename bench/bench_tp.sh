#!/usr/bin/env bash
# Tensor parallelism on this machine's cores: `pipetrain train --tp 2` against one rank (--tp 1)
# and against data parallelism (--dp 2), on the reference shape (4 layers, 256 channels, 4 heads,
# vocab 256, batch 8 x 256), in alternating rounds so the machine's noise hits all alike. Prints
# each round's tokens/s (median of the steps after two warm-ups) and CPU seconds of the whole
# run (user + sys: what the run computed, whatever else the machine ran meanwhile), the medians
# over rounds and the ratios; the memory each rank holds and the peak RSS; the time the ranks
# spent inside their TP all-reduces; and the simulator's prediction of each layout
# (`simulate --config --cluster examples/cluster-local.json`) next to it. Then --tp-overlap on and
# off, without and with each TP all-reduce held back DELAY seconds (--slow-link 0-1: the two TP
# ranks' link), in the same rounds; and the activation bytes per rank of whole activations,
# --sp, --tp-recompute (with and without --sp) and --recompute at M=1 and with gpipe over 4
# microbatches. Not a test.
# Usage: bench/bench_tp.sh [rounds] [steps] [delay]    (default 3 8 0.008)
set -u
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}; STEPS=${2:-8}; DELAY=${3:-0.008}
P=${PIPETRAIN:-build/pipetrain}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
cfg='{"n_layer": 4, "n_head": 4, "n_embd": 256, "vocab_size": 256, "n_positions": 256}'
B=8; T=256; V=256
echo "$cfg" > "$D/cfg.json"
# Random tokens as an llm.c token file (magic 20240520, version 1, count; uint16 tokens).
awk -v n=$((B * T * (STEPS + 2) + 1)) -v v="$V" 'BEGIN { srand(7); for (i = 0; i < n; i++) print int(rand() * v) }' |
  /usr/bin/python3 -c '
import struct, sys
toks = [int(x) for x in sys.stdin]
hdr = [20240520, 1, len(toks)] + [0] * 253
sys.stdout.buffer.write(struct.pack("<256i", *hdr) + struct.pack("<%dH" % len(toks), *toks))' > "$D/tok.bin"

echo "bench_tp: reference shape ($cfg), batch $B x $T, $STEPS steps with AdamW, $ROUNDS rounds, threads transport"
echo "  machine: $("$(dirname "$P")/bench/bench_train" --machine 2>/dev/null || echo "$(nproc) cores")"
echo "  load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"

median() { tr ' ' '\n' | grep . | sort -g | awk '{ a[NR] = $1 } END { print (NR ? (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2) : 0) }'; }
# Median tokens/s of steps 3.. from a metrics file.
med_metrics() { sed -n '3,$p' "$1" | sed 's/.*"tokens_per_s":\([0-9.]*\).*/\1/' | median; }
# Milliseconds per rank and step inside the TP all-reduces, from a run's output.
tp_ms() { sed -n 's/^tensor parallel.* \([0-9.]*\) ms inside.*/\1/p' "$1"; }
# name, flags...: sets TOK[name,round], CPU[name,round] and WAIT[name,round] (ms in the TP
# all-reduces); the output stays in $D/name.out.
run() {
  local name=$1 r=$2; shift 2
  rm -f "$D/$name.jsonl"
  if /usr/bin/time -f '%U %S' -o "$D/$name.time" "$P" train --config "$D/cfg.json" --data "$D/tok.bin" \
       --batch $B --seq $T --steps "$STEPS" --lr 1e-4 --metrics "$D/$name.jsonl" "$@" > "$D/$name.out" 2>&1; then
    TOK[$name,$r]=$(med_metrics "$D/$name.jsonl")
    CPU[$name,$r]=$(awk '{ print $1 + $2 }' "$D/$name.time")
    WAIT[$name,$r]=$(tp_ms "$D/$name.out")
  else
    echo "  $name failed: $(tail -1 "$D/$name.out")"
    TOK[$name,$r]=0; CPU[$name,$r]=0; WAIT[$name,$r]=0
  fi
}
declare -A TOK CPU WAIT M MC MW
names="tp1 tp2 dp2 tp2o tp2d tp2do"
declare -A FLAGS=([tp1]="--tp 1" [tp2]="--tp 2" [dp2]="--dp 2" [tp2o]="--tp 2 --tp-overlap"
                  [tp2d]="--tp 2 --slow-link 0-1:$DELAY" [tp2do]="--tp 2 --slow-link 0-1:$DELAY --tp-overlap")
echo "  names: tp1 --tp 1 | tp2 --tp 2 | dp2 --dp 2 | tp2o --tp 2 --tp-overlap | tp2d and tp2do: the same with each TP all-reduce $DELAY s late"
for r in $(seq "$ROUNDS"); do
  line="  round $r tokens/s (CPU s):"
  for n in $names; do
    run "$n" "$r" ${FLAGS[$n]}
    line="$line $n ${TOK[$n,$r]} (${CPU[$n,$r]})"
  done
  echo "$line"
done
for n in $names; do
  M[$n]=$(for r in $(seq "$ROUNDS"); do printf '%s ' "${TOK[$n,$r]}"; done | median)
  MC[$n]=$(for r in $(seq "$ROUNDS"); do printf '%s ' "${CPU[$n,$r]}"; done | median)
  MW[$n]=$(for r in $(seq "$ROUNDS"); do printf '%s ' "${WAIT[$n,$r]:-0}"; done | median)
done
echo "  load average after the rounds: $(cut -d' ' -f1-3 /proc/loadavg)"
awk -v a="${M[tp1]}" -v b="${M[tp2]}" -v c="${M[dp2]}" 'BEGIN {
  printf "  medians tokens/s: tp 1 %.0f | tp 2 %.0f | dp 2 %.0f\n", a, b, c
  printf "  ratio tp 2 / tp 1: %.2fx (the goal: >= 1.6x) | dp 2 / tp 1: %.2fx | tp 2 / dp 2: %.2fx\n",
         (a > 0 ? b / a : 0), (a > 0 ? c / a : 0), (c > 0 ? b / c : 0) }'
# Ratios within each round (its runs a few seconds apart, under much the same load), and their median.
paired() {  # a b
  local list="" r
  for r in $(seq "$ROUNDS"); do list="$list $(awk -v x="${TOK[$1,$r]}" -v y="${TOK[$2,$r]}" 'BEGIN { printf "%.2f", (y > 0 ? x / y : 0) }')"; done
  echo "$list | median $(echo "$list" | median)"
}
echo "  ratios within each round: tp 2 / tp 1:$(paired tp2 tp1); dp 2 / tp 1:$(paired dp2 tp1)"
echo "    --tp-overlap on / off:$(paired tp2o tp2); with the delayed sums:$(paired tp2do tp2d)"
best() { for r in $(seq "$ROUNDS"); do printf '%s\n' "${TOK[$1,$r]}"; done | sort -g | tail -1; }
awk -v a="$(best tp1)" -v b="$(best tp2)" -v c="$(best dp2)" 'BEGIN {
  printf "  best round of each (the least disturbed by other jobs): tp 1 %.0f | tp 2 %.0f | dp 2 %.0f; tp 2 / tp 1 %.2fx\n",
         a, b, c, (a > 0 ? b / a : 0) }'
# CPU seconds per step: the rounds' median run less a run of 2 steps (start-up, warm-up), over
# the steps between. What the ranks computed, whatever else ran: two idle cores would give at
# most 2 x tp 1's / tp 2's per step.
declare -A PS
for n in tp1 tp2 dp2; do
  /usr/bin/time -f '%U %S' -o "$D/short.time" "$P" train --config "$D/cfg.json" --data "$D/tok.bin" --batch $B --seq $T \
    --steps 2 --lr 1e-4 ${FLAGS[$n]} > /dev/null 2>&1
  PS[$n]=$(awk -v all="${MC[$n]}" -v s="$STEPS" '{ print (all - $1 - $2) / (s - 2) }' "$D/short.time")
done
awk -v a="${PS[tp1]}" -v b="${PS[tp2]}" -v c="${PS[dp2]}" 'BEGIN {
  printf "  CPU s per step (all ranks): tp 1 %.3f | tp 2 %.3f | dp 2 %.3f: on two idle cores tp 2 would run at most\n", a, b, c
  printf "    %.2fx tp 1 (2 x CPU tp 1 / CPU tp 2), dp 2 at most %.2fx\n", (b > 0 ? 2 * a / b : 0), (c > 0 ? 2 * a / c : 0) }'
grep -h '^tensor parallel' "$D/tp2.out" | sed 's/^/  tp 2 (last round): /'
for n in tp1 tp2; do
  grep -h '^memory per rank' "$D/$n.out" | sed "s/^/  $n /"
  grep -h '^peak RSS' "$D/$n.out" | sed "s/^/  $n (threads) /"
done
# Peak RSS per rank: tp 2 as two MPI processes (threads share one process's RSS).
if command -v mpirun > /dev/null; then
  mpirun --allow-run-as-root --oversubscribe -np 2 "$P" train --config "$D/cfg.json" --data "$D/tok.bin" --batch $B \
    --seq $T --steps 2 --lr 1e-4 --tp 2 --transport mpi < /dev/null > "$D/mpi.out" 2>&1
  grep -h '^peak RSS' "$D/mpi.out" | sed 's/^/  tp2 (mpi -np 2) /'
fi

# The simulator's prediction of each layout on examples/cluster-local.json (2 cores as devices).
sim() {  # microbatch size, flags...
  local mbs=$1; shift
  "$P" simulate --config "$D/cfg.json" --cluster examples/cluster-local.json --schedule 1f1b --stages 1 \
    --microbatches 1 --microbatch-size "$mbs" --seq $T "$@" 2>&1
}
declare -A SIT SMEM
for n in $names; do
  case $n in dp2) out=$(sim 4 --dp 2) ;; tp2) out=$(sim $B --tp 2) ;; *) out=$(sim $B --tp 1) ;; esac
  SIT[$n]=$(echo "$out" | awk '/^iteration time/ { print $3 }')
  SMEM[$n]=$(echo "$out" | awk '/^memory per device/ { m = 1 } m && /^  rank 0 / { print $3; exit }')
done
awk -v a="${SIT[tp1]}" -v b="${SIT[tp2]}" -v c="${SIT[dp2]}" -v n=$((B * T)) -v ma="${M[tp1]}" -v mb="${M[tp2]}" -v mc="${M[dp2]}" 'BEGIN {
  printf "  simulated tokens/s (cluster-local.json, its reference FLOP/s): tp 1 %.0f | tp 2 %.0f | dp 2 %.0f;", n / a, n / b, n / c
  printf " ratio tp 2 / tp 1 %.2fx (measured %.2fx), dp 2 / tp 1 %.2fx (measured %.2fx)\n",
         a / b, (ma > 0 ? mb / ma : 0), a / c, (ma > 0 ? mc / ma : 0) }'
echo "  simulated memory per device (GiB): tp 1 ${SMEM[tp1]} | tp 2 ${SMEM[tp2]} | dp 2 ${SMEM[dp2]}"

# --tp-overlap: tokens/s and the ms per rank and step spent waiting in the TP all-reduces.
awk -v a="${M[tp2]}" -v b="${M[tp2o]}" -v c="${M[tp2d]}" -v d="${M[tp2do]}" -v wa="${MW[tp2]}" -v wb="${MW[tp2o]}" \
    -v wc="${MW[tp2d]}" -v wd="${MW[tp2do]}" -v dl="$DELAY" 'BEGIN {
  printf "  --tp-overlap, medians tokens/s (ms per rank and step inside the TP all-reduces):\n"
  printf "    no delay:        off %.0f (%.1f) | on %.0f (%.1f) | on / off %.2fx\n", a, wa, b, wb, (a > 0 ? b / a : 0)
  printf "    %g s per sum: off %.0f (%.1f) | on %.0f (%.1f) | on / off %.2fx\n", dl, c, wc, d, wd, (c > 0 ? d / c : 0) }'

# Activation bytes per rank (the trainer's memory line, rank 0) and the all-reduces per step.
echo "  activations per rank (MB, rank 0's memory line) | TP collectives per rank and step | tokens/s of one short run:"
for layout in "1f1b M=1:--microbatches 1" "gpipe M=4:--schedule gpipe --microbatches 4"; do
  lname=${layout%%:*}; lflags=${layout#*:}
  line="    tp 2 $lname:"
  for mode in "whole:" "--sp:--sp" "--tp-recompute:--tp-recompute" "--tp-recompute --sp:--tp-recompute --sp" "--recompute:--recompute"; do
    mname=${mode%%:*}; mflag=${mode#*:}
    rm -f "$D/mem.jsonl"
    "$P" train --config "$D/cfg.json" --data "$D/tok.bin" --batch $B --seq $T --steps 3 --lr 1e-4 \
      --metrics "$D/mem.jsonl" --tp 2 $lflags $mflag > "$D/mem.out" 2>&1
    acts=$(sed -n 's/^memory per rank.* r0 [0-9.]*\/[0-9.]*\/[0-9.]*\/\([0-9.]*\).*/\1/p' "$D/mem.out")
    calls=$(sed -n 's/^tensor parallel, per rank and step: \([0-9]*\) \(all-reduces\|collectives\).*/\1/p' "$D/mem.out")
    line="$line $mname ${acts:-?} | ${calls:-?} | $(med_metrics "$D/mem.jsonl");"
  done
  echo "$line"
done
echo "  load average at the end of the bench: $(cut -d' ' -f1-3 /proc/loadavg)"
