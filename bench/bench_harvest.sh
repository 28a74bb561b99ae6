#!/usr/bin/env bash
# Side work in the pipeline's bubbles (docs/harvesting.md), P=2 rank threads on this machine
# (make bench): a bubble-heavy layout (1f1b, 2 microbatches) and a zero-bubble one (zb-h2, 4
# microbatches), each run alone and with (a) a CPU-bound side program (sh's busy loop, nice 19,
# SIGSTOP/SIGCONT), (b) a second model trained in the bubbles (--side-train), (c) held-out
# evaluation every 5 steps (--eval-data). Variants alternate within each round, so a slow spell
# of the shared machine hits all of them; each number is the median over rounds of a run's
# median step time (steps after the first 5) and of its sums.
# Columns: slowdown = median step with side work / median step alone - 1; harvested = side_cpu_s /
# wait_idle_s (the CPU seconds side work received over the idle seconds of the waits offered to
# it: RECV, REDUCE_GRAD and STEP, to the rank's wake-up; docs/harvesting.md); slots = (side_s -
# side_overrun_s) / wait_idle_s (the side seconds inside the ranks' waits over those waits' idle
# seconds: the time side work was allowed, not what it got); overrun = side_overrun_s / step time; side
# rate against the task alone (a: the CPU
# the program got per second of run, alone 1 core; b: side steps per second against the side
# model trained alone; c: evaluations done per second against pipetrain eval alone).
# Goal (issue 10): slowdown <= 2%, >= 60% of the bubble used, overrun <= 1% of step time.
# Usage: bench/bench_harvest.sh   (PIPETRAIN: the binary; BENCH_STEPS: steps per run, default 60;
# BENCH_ROUNDS: rounds, default 3)
set -u
cd "$(dirname "$0")/.."
P=${PIPETRAIN:-build/pipetrain}
STEPS=${BENCH_STEPS:-60}
ROUNDS=${BENCH_ROUNDS:-3}
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
for i in $(seq 1 40); do cat README.md docs/*.md; done > "$T/text.txt"
head -c 200000 docs/runtime.md docs/simulator.md > "$T/val.txt"
cat > "$T/main.json" <<'J'
{"n_layer": 4, "n_head": 4, "n_embd": 128, "vocab_size": 256, "n_positions": 64}
J
cat > "$T/side.json" <<'J'
{"n_layer": 2, "n_head": 2, "n_embd": 64, "vocab_size": 256, "n_positions": 64}
J
export OPENBLAS_NUM_THREADS=1
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
echo "machine: ${cpu:-unknown CPU}, $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
load() { cut -d' ' -f1 /proc/loadavg; }
echo "main: 4 x 128, vocab 256, batch 16 x 64, P=2 threads; side model 2 x 64 on the same batch;" \
     "$STEPS steps per run, $ROUNDS rounds"

B=16; SEQ=64
# run NAME LAYOUT-FLAGS SIDE-FLAGS: one training run; its metrics in $T/NAME.jsonl, output $T/NAME.out
run() {
  local name=$1 layout=$2; shift 2
  rm -f "$T/$name.jsonl" "$T/$name".*.jsonl
  "$P" train --config "$T/main.json" --data "$T/text.txt" --batch $B --seq $SEQ --steps "$STEPS" \
    --log-every 1000 --metrics "$T/$name.jsonl" $layout "$@" > "$T/$name.out" 2>&1 \
    || { echo "bench_harvest: run failed: $name $layout $*"; tail -3 "$T/$name.out"; exit 1; }
}
# field FILE KEY: the key's values, one per line
field() { grep -o "\"$2\":[-0-9.e+]*" "$1" | cut -d: -f2; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
# stats NAME: "median_step_ms sum_wait_idle_s sum_side_s sum_overrun_s sum_step_s sum_side_cpu_s
# sum_bubble_s" over steps > 5 (a run without side work has no wait_idle_s: bubble_fraction x 2
# ranks x step time instead)
stats() {
  local f="$T/$1.jsonl"
  if grep -q '"wait_idle_s"' "$f"; then
    paste -d' ' <(field "$f" step) <(field "$f" step_ms) <(field "$f" wait_idle_s) <(field "$f" side_s) \
      <(field "$f" side_overrun_s) <(field "$f" side_cpu_s) <(field "$f" bubble_s)
  else
    paste -d' ' <(field "$f" step) <(field "$f" step_ms) <(field "$f" bubble_fraction) |
      awk '{ print $1, $2, $3 * 2 * $2 / 1e3, 0, 0, 0, $3 * 2 * $2 / 1e3 }'
  fi | awk '$1 > 5 { print }' > "$T/$1.cols"
  local med; med=$(awk '{ print $2 }' "$T/$1.cols" | median)
  awk -v m="$med" '{ b += $3; s += $4; o += $5; t += $2 / 1e3; c += $6; u += $7 } END { printf "%s %.6f %.6f %.6f %.6f %.6f %.6f\n", m, b, s, o, t, c, u }' "$T/$1.cols"
}
# the side rate of a run against the task alone (see the header), or "-"
rate() {
  local name=$1 kind=$2 wall
  wall=$(awk '{ t += $2 / 1e3 } END { print t }' <(paste -d' ' <(field "$T/$name.jsonl" step) <(field "$T/$name.jsonl" step_ms)))
  case $kind in
    cmd) grep -o '[0-9.]*% of a core over' "$T/$name.out" | awk '{ sub("%", "", $1); printf "%.3f", $1 / 100 }' ;;
    train) local n=0; [ -f "$T/$name.side.jsonl" ] && n=$(wc -l < "$T/$name.side.jsonl")
           awk -v n="$n" -v w="$wall" -v a="$ALONE_TRAIN" 'BEGIN { printf "%.3f", n / w / a }' ;;
    eval) local n; n=$(grep -c '"eval_loss"' "$T/$name.jsonl")
          awk -v n="$n" -v w="$wall" -v a="$ALONE_EVAL" 'BEGIN { printf "%.3f", n * a / w }' ;;
    *) echo "-" ;;
  esac
}

# the side tasks alone: steps/s of the side model, seconds of one evaluation
"$P" train --config "$T/side.json" --data "$T/val.txt" --batch $B --seq $SEQ --steps 30 --threads 1 \
  --log-every 1000 --metrics "$T/alone_train.jsonl" > /dev/null 2>&1
ALONE_TRAIN=$(field "$T/alone_train.jsonl" step_ms | tail -n +3 | median | awk '{ printf "%.3f", 1000 / $1 }')
rm -rf "$T/ck"
"$P" train --config "$T/main.json" --data "$T/text.txt" --batch $B --seq $SEQ --steps 1 --save "$T/ck" > /dev/null 2>&1
t0=$(date +%s.%N)
"$P" eval --checkpoint "$T/ck" --data "$T/val.txt" --batch $B --seq $SEQ --batches 2 > /dev/null 2>&1
ALONE_EVAL=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.4f", b - a }')
echo "alone: the side model trains at $ALONE_TRAIN steps/s; one evaluation (2 batches) takes $ALONE_EVAL s (one thread)"

VARIANTS="alone cmd train eval"
side_flags() {
  case $1 in
    alone) ;;
    cmd) echo "--side-command" "while :; do :; done" ;;
    train) echo "--side-train $T/side.json --side-data $T/val.txt" ;;
    eval) echo "--eval-data $T/val.txt --eval-every 5 --eval-batches 2" ;;
  esac
}
for layout in "1f1b:--stages 2 --schedule 1f1b --microbatches 2" "zb-h2:--stages 2 --schedule zb-h2 --microbatches 4"; do
  lname=${layout%%:*}; lflags=${layout#*:}
  for r in $(seq 1 "$ROUNDS"); do
    for v in $VARIANTS; do
      if [ "$v" = cmd ]; then run "$lname-$v-$r" "$lflags" --side-command "while :; do :; done"
      else run "$lname-$v-$r" "$lflags" $(side_flags "$v"); fi
      echo "$(stats "$lname-$v-$r") $(rate "$lname-$v-$r" "$v")" > "$T/$lname-$v-$r.res"
    done
  done
  echo "$lname (P=2, load average now $(load)): variant   slowdown  harvested  slots  overrun/step  side rate vs alone   (median step alone, bubble)"
  for v in $VARIANTS; do
    for r in $(seq 1 "$ROUNDS"); do
      read -r m b s o t c u rt < "$T/$lname-$v-$r.res"
      read -r m0 b0 _ < "$T/$lname-alone-$r.res"
      awk -v m="$m" -v m0="$m0" -v b="$b" -v s="$s" -v o="$o" -v t="$t" -v rt="$rt" -v b0="$b0" -v c="$c" -v u="$u" \
        'BEGIN { printf "%.4f %.4f %.5f %s %.3f %.4f %.4f\n", m / m0 - 1, (b > 0 ? (s - o) / b : 0), (t > 0 ? o / t : 0), rt, m0, b0, (b > 0 ? c / b : 0) }'
    done > "$T/$lname-$v.rows"
    col() { awk -v k="$1" '{ print $k }' "$T/$lname-$v.rows" | median; }
    printf "  %-8s %+8.1f%%  %8.1f%%  %5.1f%%  %11.2f%%  %12s   (%.2f ms, %.3f s of bubble per run)\n" "$v" \
      "$(col 1 | awk '{ print 100 * $1 }')" "$(col 7 | awk '{ print 100 * $1 }')" "$(col 2 | awk '{ print 100 * $1 }')" \
      "$(col 3 | awk '{ print 100 * $1 }')" "$(col 4)" "$(col 5)" "$(col 6)"
  done
done
echo "rounds scatter on a shared machine (see the load average above): read the medians, not one run"
