#!/usr/bin/env bash
# Two hosts on this machine (tools/hosts.sh: network namespaces, Open MPI over TCP), P=2 stages of
# the demo model, 8 microbatches: step time on a free link and on host 1's link shaped to 30 Mbit/s
# (tc tbf), alternating rounds, medians; the simulator's prediction from the run's own profiled
# costs (which knows nothing of the shaped link) next to each. Skips where namespaces cannot be
# made. Usage: bench/bench_hosts.sh [ROUNDS]   (default 3)
set -u
cd "$(dirname "$0")/.."
P=$(realpath "${PIPETRAIN:-build/pipetrain}")
H=tools/hosts.sh
export PT_HOSTS=ptbh PT_HOSTS_TIMEOUT=300
rounds=${1:-3}
if ! why=$($H check 2>&1); then echo "bench_hosts: skipped: $why"; exit 0; fi
trap '$H down >/dev/null 2>&1' EXIT
D=$(mktemp -d)
for i in $(seq 1 3000); do echo "the quick brown fox jumps over the lazy dog, line $i of the bench corpus"; done > "$D/t.txt"
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
isa=$(grep -qw avx512f /proc/cpuinfo && echo AVX-512 || (grep -qw avx2 /proc/cpuinfo && echo AVX2 || echo other))
echo "machine: $cpu, $isa, $(nproc) cores; 2 hosts as network namespaces on this machine"
$H up 2 > /dev/null || exit 1
targs="train --config examples/char-gpt.json --data $D/t.txt --batch 32 --seq 64 --stages 2 --microbatches 8 --steps 8 --lr 1e-3"
run() {   # run SCHEDULE -> "measured_ms simulated_ms"
  $H mpirun -np 2 "$P" $targs --schedule "$1" > "$D/out" 2>&1 || { echo "0 0"; return; }
  awk '/^measured:/ {m=$3} /^simulated:/ {s=$3} END {print m+0, s+0}' "$D/out"
}
median() { sort -n | awk '{v[NR]=$1} END {print NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
for sch in 1f1b zb-h1; do
  : > "$D/free.m"; : > "$D/free.s"; : > "$D/slow.m"; : > "$D/slow.s"
  for r in $(seq 1 "$rounds"); do
    $H shape 1 off; read -r m s < <(run $sch); echo "$m" >> "$D/free.m"; echo "$s" >> "$D/free.s"
    $H shape 1 30mbit 32kbit 400ms; read -r m s < <(run $sch); echo "$m" >> "$D/slow.m"; echo "$s" >> "$D/slow.s"
  done
  $H shape 1 off
  fm=$(median < "$D/free.m"); fs=$(median < "$D/free.s"); sm=$(median < "$D/slow.m"); ss=$(median < "$D/slow.s")
  awk -v n="$sch" -v fm="$fm" -v fs="$fs" -v sm="$sm" -v ss="$ss" -v r="$rounds" 'BEGIN {
    printf "%-6s free link:  measured %7.1f ms/step  simulated %7.1f  (measured/simulated %.2f)\n", n, fm, fs, (fs > 0 ? fm / fs : 0)
    printf "%-6s 30 Mbit/s:  measured %7.1f ms/step  simulated %7.1f  (measured/simulated %.2f); slow/free %.2f  (median of %d)\n",
      n, sm, ss, (ss > 0 ? sm / ss : 0), (fm > 0 ? sm / fm : 0), r }'
done
rm -rf "$D"
