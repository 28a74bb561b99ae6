#!/usr/bin/env bash
# A real slow link: two hosts on this machine (tools/hosts.sh: network namespaces, Open MPI over
# TCP), each host's link shaped with tc tbf (30 Mbit/s, burst 64 kB, latency 2 s); issue 19's case:
# 4 layers x 256 channels (examples/char-gpt-256.json), batch 16 x 128, 2 stages, 8 microbatches.
# Rows, in alternating rounds, all on the shaped link: fixed zb-h1, fixed zb-h1 with Open MPI's own
# TCP eager limit (64 kB; tools/hosts.sh raises it to 1 MB), fixed 1f1b, --adapt and --adapt
# --mem-limit 4 (and what they chose), --wire bf16, --adapt --adapt-wire; each the median step time
# (steps after the first), tokens/s, the end-of-run prediction (the simulator fed the run's own
# profiled compute and its measured links) and the loss after the last step. Skips where
# namespaces cannot be made. Usage: bench/bench_hosts.sh [ROUNDS [STEPS]]   (default 3 rounds, 14 steps)
set -u
cd "$(dirname "$0")/.."
P=$(realpath "${PIPETRAIN:-build/pipetrain}")
H=tools/hosts.sh
export PT_HOSTS=ptbh PT_HOSTS_TIMEOUT=300
rounds=${1:-3}
steps=${2:-14}
if ! why=$($H check 2>&1); then echo "bench_hosts: skipped: $why"; exit 0; fi
trap '$H down >/dev/null 2>&1; rm -rf "$D"' EXIT
D=$(mktemp -d)
src=/usr/share/games/fortunes
if [ -d "$src" ]; then find "$src" -maxdepth 1 -type f ! -name '*.*' -print0 | sort -z | xargs -0 cat > "$D/t.txt"
else for i in $(seq 1 30000); do echo "the quick brown fox jumps over the lazy dog, line $i of the bench corpus"; done > "$D/t.txt"; fi
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
isa=$(grep -qw avx512f /proc/cpuinfo && echo AVX-512 || (grep -qw avx2 /proc/cpuinfo && echo AVX2 || echo other))
echo "machine: $cpu, $isa, $(nproc) cores; 2 hosts as network namespaces on this machine; load $(cut -d' ' -f1-3 /proc/loadavg)"
$H up 2 > /dev/null || exit 1
targs="train --config examples/char-gpt-256.json --data $D/t.txt --batch 16 --seq 128 --stages 2 --microbatches 8 --steps $steps --seed 7"
shape() { for h in 0 1; do if [ "$1" = off ]; then $H shape $h off; else $H shape $h 30mbit 64kb 2s; fi; done; }
rows=(zb-h1 zb-h1-64k 1f1b adapt adapt-m4 bf16 adapt-wire)
flags() {
  case $1 in
    zb-h1|zb-h1-64k) echo "--schedule zb-h1" ;;
    1f1b) echo "--schedule 1f1b" ;;
    adapt) echo "--schedule zb-h1 --adapt" ;;
    adapt-m4) echo "--schedule zb-h1 --adapt --mem-limit 4" ;;
    bf16) echo "--schedule zb-h1 --wire bf16" ;;
    adapt-wire) echo "--schedule zb-h1 --adapt --adapt-wire" ;;
  esac
}
wire_step() {   # the step after which --adapt-wire turned bf16 on ("-": never; "all": --wire bf16)
  [ "$1" = bf16 ] && { echo all; return; }
  local w; w=$(sed -nE 's/^step ([0-9]+): wire bf16 from the next step.*/\1/p' "$D/out" | head -1)
  echo "${w:--}"
}
run() {   # run ROW -> "measured_ms simulated_ms tokens_per_s last_loss schedule_at_the_end bf16_from_step"
  shape on
  local e=1048576   # tools/hosts.sh's eager limit; zb-h1-64k: Open MPI's own (rendezvous above 64 kB)
  [ "$1" = zb-h1-64k ] && e=65536
  # shellcheck disable=SC2046
  if ! OMPI_MCA_btl_tcp_eager_limit=$e OMPI_MCA_btl_tcp_rndv_eager_limit=$e OMPI_MCA_btl_tcp_max_send_size=$((e > 131072 ? e : 131072)) \
       $H mpirun -np 2 "$P" $targs $(flags "$1") --metrics "$D/m.jsonl" > "$D/out" 2>&1; then
    echo "bench_hosts: $1 failed: $(grep -m2 -E 'rror|hosts:' "$D/out")" >&2; echo "0 0 0 0 - -"; rm -f "$D/m.jsonl"; return
  fi
  awk '/^measured:/ {m=$3} /^simulated:/ {s=$3} END {printf "%s %s ", m+0, s+0}' "$D/out"
  sed -E 's/.*"loss":([^,]*),.*"schedule":"([^"]*)".*/\1 \2/' "$D/m.jsonl" | tail -1 | \
    awk -v m="$(awk '/^measured:/ {print $3}' "$D/out")" -v tok=$((16 * 128)) -v w="$(wire_step "$1")" \
      '{printf "%.0f %s %s %s\n", (m > 0 ? tok / m * 1e3 : 0), $1, $2, w}'
  rm -f "$D/m.jsonl"
}
for r in $(seq 1 "$rounds"); do
  for row in "${rows[@]}"; do run "$row" >> "$D/$row"; done
done
shape off
median() { sort -n | awk '{v[NR]=$1} END {print NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
z=$(cut -d' ' -f1 "$D/zb-h1" | median); ztok=$(cut -d' ' -f3 "$D/zb-h1" | median); zloss=$(cut -d' ' -f4 "$D/zb-h1" | median)
printf "%-11s %10s %10s %9s %9s %10s %6s  %s\n" row "ms/step" simulated "meas/sim" tokens/s "loss@$steps" "x zb-h1" "schedule at the end; bf16 from step"
for row in "${rows[@]}"; do
  m=$(cut -d' ' -f1 "$D/$row" | median); s=$(cut -d' ' -f2 "$D/$row" | median); tok=$(cut -d' ' -f3 "$D/$row" | median)
  l=$(cut -d' ' -f4 "$D/$row" | median); sch=$(cut -d' ' -f5 "$D/$row" | sort | uniq -c | sort -rn | awk '{printf "%s%s(%d)", (NR > 1 ? "," : ""), $2, $1}')
  wf=$(cut -d' ' -f6 "$D/$row" | paste -sd, -)
  awk -v n="$row" -v m="$m" -v s="$s" -v t="$tok" -v l="$l" -v zt="$ztok" -v sch="$sch" -v wf="$wf" 'BEGIN {
    printf "%-11s %10.1f %10.1f %9.2f %9.0f %10.4f %6.2f  %s; %s\n", n, m, s, (s > 0 ? m / s : 0), t, l, (zt > 0 ? t / zt : 0), sch, wf }'
done
awk -v a="$zloss" -v b="$(cut -d' ' -f4 "$D/bf16" | median)" -v n="$steps" 'BEGIN {
  printf "loss of --wire bf16 after %d steps vs fp32 zb-h1 on the same link: %+.2f%%\n", n, (a > 0 ? (b - a) / a * 100 : 0) }'
echo "rows: on 30 Mbit/s each way; zb-h1-64k with Open MPI's 64 kB eager limit; medians of $rounds alternating rounds; load after $(cut -d' ' -f1-3 /proc/loadavg)"
