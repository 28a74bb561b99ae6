#!/usr/bin/env bash
# Throughput of the asynchronous schedules under link delay (docs/async.md, "Throughput under link
# delay"): bench/bench_async.sh's model, data and settings (the 4-layer 128-channel char GPT of
# examples/char-gpt.json on the fortunes, P=4, batch 16 x 64, M=4, AdamW 1e-3 cosine, 20 warm-up
# steps; CONFIG=64: the 64-channel model of the earlier tables), narrowed to the rows that matter
# here, with and without --async-window / --async-depth / --defer-tie (rows without "window" run
# --async-window 1, a flush every step: the earlier tables' order; "window" rows the default, 4
# steps a pass):
#   tokens/s: ROUNDS alternating rounds, each running every row once with the 30 ms delay on every
#   pipeline link (DSTEPS steps) and once without (NSTEPS steps); the median per row, and its ratio
#   to 1f1b's;
#   convergence: SEEDS x STEPS steps without delay (the delay changes no number), the held-out loss
#   (mean of seeds) and, as the bench does, the wall time at which the row's seed-mean loss
#   (trailing mean of 10 steps) reaches 1f1b's final one, on the row's delayed step time.
# Usage: dev/async_delay.sh [ROW[@LR]...]   (default: every row below; 1f1b is always run, at LR;
# ROW@LR runs that row at its own peak learning rate)
# Environment: CONFIG (examples/char-gpt.json; 64: the 64-channel model), TABLE_ONLY=1 (the table of OUT's runs again, nothing run), ROUNDS (3), DSTEPS (16), NSTEPS (32), SEEDS (3), STEPS (150), LR (1e-3), OUT
# (build/async_delay), PIPETRAIN (build/pipetrain). Quick smoke: ROUNDS=1 DSTEPS=3 NSTEPS=3 SEEDS=1 STEPS=5.
set -u
cd "$(dirname "$0")/.."
P=$(realpath "${PIPETRAIN:-build/pipetrain}")
ROUNDS=${ROUNDS:-3}; DSTEPS=${DSTEPS:-16}; NSTEPS=${NSTEPS:-32}; SEEDS=${SEEDS:-3}; STEPS=${STEPS:-150}
LR=${LR:-1e-3}; OUT=$(realpath -m "${OUT:-build/async_delay}")
B=16; T=64; W=10
mkdir -p "$OUT/runs"; [ "${TABLE_ONLY:-0}" = 1 ] || rm -f "$OUT"/runs/*
declare -A F
F[1f1b]="--schedule 1f1b"
F[gpipe]="--schedule gpipe"
w1="--async-window 1"
F[pipedream]="--schedule pipedream --async-fix none $w1"
F[pipedream-nesterov]="--schedule pipedream --async-fix nesterov $w1"
F[pipedream-defer]="--schedule pipedream --async-fix none --defer-tie $w1"
F[pipedream-defer-d4]="--schedule pipedream --async-fix none --defer-tie --async-depth 4 $w1"
F[pipedream-nesterov-defer-d4]="--schedule pipedream --async-fix nesterov --defer-tie --async-depth 4 $w1"
F[pipedream-predict-defer-d4]="--schedule pipedream --async-fix predict --defer-tie --async-depth 4 $w1"
F[2bw]="--schedule 2bw $w1"
F[2bw-d4]="--schedule 2bw --async-depth 4 $w1"
# the continuous stream: the default window (4 steps a pass), with and without the deferred tie
F[pipedream-window]="--schedule pipedream --async-fix none"
F[pipedream-nesterov-window]="--schedule pipedream --async-fix nesterov"
F[pipedream-window-defer]="--schedule pipedream --async-fix none --defer-tie"
F[pipedream-nesterov-window-defer]="--schedule pipedream --async-fix nesterov --defer-tie"
F[pipedream-window-owner]="--schedule pipedream --async-fix none --tie-owner"
F[pipedream-nesterov-window-owner]="--schedule pipedream --async-fix nesterov --tie-owner"
F[2bw-window]="--schedule 2bw"
order=(1f1b gpipe pipedream pipedream-nesterov pipedream-defer pipedream-defer-d4 pipedream-nesterov-defer-d4
       pipedream-predict-defer-d4 2bw 2bw-d4 pipedream-window pipedream-nesterov-window pipedream-window-defer
       pipedream-nesterov-window-defer pipedream-window-owner pipedream-nesterov-window-owner 2bw-window)
if [ $# -gt 0 ]; then order=(1f1b); for r in "$@"; do [ "$r" != 1f1b ] && order+=("$r"); done; fi
for r in "${order[@]}"; do [ -n "${F[${r%@*}]:-}" ] || { echo "async_delay: unknown row $r (rows: ${!F[*]})"; exit 2; }; done

cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
isa=$(grep -qw avx512f /proc/cpuinfo && echo AVX-512 || (grep -qw avx2 /proc/cpuinfo && echo AVX2 || echo other))
echo "machine: $cpu, $isa, $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg); $(date -u +%FT%TZ)"
src=/usr/share/games/fortunes
if [ -d "$src" ]; then find "$src" -maxdepth 1 -type f ! -name '*.*' -print0 | sort -z | xargs -0 cat > "$OUT/text.txt"
else for i in $(seq 1 30000); do echo "the quick brown fox jumps over the lazy dog, line $i"; done > "$OUT/text.txt"; fi
n=$(wc -c < "$OUT/text.txt")
head -c $((n * 9 / 10)) "$OUT/text.txt" > "$OUT/train.txt"
tail -c $((n / 10)) "$OUT/text.txt" > "$OUT/held.txt"
if [ "${CONFIG:-}" = 64 ]; then
  echo '{"n_layer": 4, "n_head": 4, "n_embd": 64, "vocab_size": 256, "n_positions": 64, "model_type": "gpt2"}' > "$OUT/gpt.json"
else cp "${CONFIG:-examples/char-gpt.json}" "$OUT/gpt.json"; fi
common="--config $OUT/gpt.json --data $OUT/train.txt --batch $B --seq $T --lr $LR --beta2 0.99 --warmup 20
  --lr-schedule cosine --shuffle 1 --log-every 100000 --stages 4 --microbatches 4"
delay="--slow-link 0-1:0.03 --slow-link 1-2:0.03 --slow-link 2-3:0.03"

# run ROW TAG STEPS SEED EXTRA... -> $OUT/runs/ROW.TAG.jsonl
run() {
  local r=$1 tag=$2 steps=$3 seed=$4 lr=""; shift 4
  [ "${r%@*}" != "$r" ] && lr="--lr ${r#*@}"
  # shellcheck disable=SC2086
  "$P" train $common ${F[${r%@*}]} $lr "$@" --steps "$steps" --seed "$seed" --metrics "$OUT/runs/$r.$tag.jsonl" \
    > "$OUT/runs/$r.$tag.out" 2>&1 || echo "async_delay: $r $tag failed: $(tail -1 "$OUT/runs/$r.$tag.out")"
}
# tokens/s of a metrics file: B*T*steps / summed step_ms, step 1 left out
tok() { awk -v bt=$((B * T)) '{ if (match($0, /"step_ms":[-0-9.eE+]+/)) { ms = substr($0, RSTART + 10, RLENGTH - 10)
  if (NR > 1) { s += ms; k++ } } } END { printf "%.0f\n", (s > 0 ? bt * k / s * 1e3 : 0) }' "$1"; }
med() { sort -n | awk '{v[NR]=$1} END {print NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
evl() { grep -o '"eval_loss":[-0-9.eE+]*' "$1" | tail -1 | cut -d: -f2; }
curve() {   # seed-mean loss per step, trailing mean over W steps
  awk -v w=$W '{ if (match($0, /"step":[0-9]+/)) st = substr($0, RSTART + 7, RLENGTH - 7) + 0
    if (match($0, /"loss":[-0-9.eE+]+/)) { l[st] += substr($0, RSTART + 7, RLENGTH - 7); c[st]++; if (st > mx) mx = st } }
    END { for (s = 1; s <= mx; s++) { v[s] = c[s] ? l[s] / c[s] : v[s - 1]; acc += v[s]; if (s > w) acc -= v[s - w]
          printf "%d %.6f\n", s, acc / (s < w ? s : w) } }' "$OUT"/runs/"$1".s*.jsonl
}

t0=$(date +%s)
[ "${TABLE_ONLY:-0}" = 1 ] && ROUNDS_RUN=0 || ROUNDS_RUN=$ROUNDS
for k in $(seq 1 "$ROUNDS_RUN"); do
  for r in "${order[@]}"; do run "$r" "d$k" "$DSTEPS" 1 $delay; run "$r" "n$k" "$NSTEPS" 1; done
done
[ "${TABLE_ONLY:-0}" = 1 ] || for s in $(seq 1 "$SEEDS"); do for r in "${order[@]}"; do run "$r" "s$s" "$STEPS" "$s" --eval-data "$OUT/held.txt" --eval-batches 16; done; done
echo "async_delay: runs took $(( $(date +%s) - t0 )) s; load $(cut -d' ' -f1-3 /proc/loadavg); $ROUNDS rounds, delayed $DSTEPS steps, undelayed $NSTEPS; $SEEDS seeds x $STEPS steps"

target=$(curve 1f1b | tail -1 | cut -d' ' -f2)
printf "%-28s %9s %6s %11s %6s %10s %9s %12s %6s\n" row tokens/s x1f1b "tok/s 30ms" x1f1b held-out "vs 1f1b" "to 1f1b 30ms" x1f1b
for r in "${order[@]}"; do
  nt=$(for k in $(seq 1 "$ROUNDS"); do tok "$OUT/runs/$r.n$k.jsonl"; done | med)
  dt=$(for k in $(seq 1 "$ROUNDS"); do tok "$OUT/runs/$r.d$k.jsonl"; done | med)
  ev=$(for s in $(seq 1 "$SEEDS"); do evl "$OUT/runs/$r.s$s.jsonl"; done | awk '{ s += $1 } END { printf "%.4f", s / NR }')
  ttt=$(curve "$r" | awk -v tg="$target" -v bt=$((B * T)) -v tk="$dt" '$2 <= tg + 1e-12 && !f { f = $1 }
    END { if (f && tk > 0) printf "%.1f", f * bt / tk; else print "-" }')
  [ "$r" = 1f1b ] && { rn=$nt; rd=$dt; re=$ev; rt=$ttt; }
  awk -v r="$r" -v nt="$nt" -v dt="$dt" -v ev="$ev" -v tt="$ttt" -v rn="$rn" -v rd="$rd" -v re="$re" -v rt="$rt" 'BEGIN {
    printf "%-28s %9.0f %6.2f %11.0f %6.2f %10.4f %+8.2f%% %10s s %6s\n", r, nt, nt / rn, dt, dt / rd, ev,
      (ev - re) / re * 100, tt, (tt != "-" && rt != "-" && tt > 0 ? sprintf("%.2f", rt / tt) : "-") }'
done
