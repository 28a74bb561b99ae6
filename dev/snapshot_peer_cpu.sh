#!/usr/bin/env bash
# The snapshot peer copy's CPU per generation, two builds compared (docs/recovery.md, "What each
# failure costs"): the demo model (examples/char-gpt.json, batch 32 x 64 tokens) as 2 stages x 1
# replica over Open MPI on two network-namespace hosts (tools/hosts.sh, one rank a host, one BLAS
# thread), --snapshot-every 1, so each rank's generation goes whole to the other host; alternating
# rounds of build A and build B, each run's own account of the sender's and the receivers' CPU
# per generation (thread CPU time: a loaded machine moves it far less than step times). Needs
# root. Usage: dev/snapshot_peer_cpu.sh PIPETRAIN_A PIPETRAIN_B [ROUNDS (4)] [STEPS (40)]
set -u
cd "$(dirname "$0")/.."
[ $# -ge 2 ] || { echo "usage: dev/snapshot_peer_cpu.sh PIPETRAIN_A PIPETRAIN_B [ROUNDS] [STEPS]"; exit 2; }
A=$(realpath "$1"); B=$(realpath "$2"); ROUNDS=${3:-4}; STEPS=${4:-40}
H=tools/hosts.sh
export PT_HOSTS=${PT_HOSTS:-spcpu}
D=$(mktemp -d)
SNAP=/dev/shm/pt-peer-cpu-$$
trap 'rm -rf "$D" "$SNAP"; $H down > /dev/null 2>&1' EXIT
if ! why=$($H check 2>&1); then echo "snapshot_peer_cpu: skipped: $why"; exit 0; fi
$H up 2 > /dev/null || exit 1
for i in $(seq 1 3000); do echo "the quick brown fox jumps over the lazy dog, line $i of the bench corpus"; done > "$D/t.txt"
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), $(nproc) cores; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
# one BIN: "send RECV" (ms of CPU per generation, rank 0's sender and its receivers)
one() {
  rm -rf "$SNAP"
  $H mpirun -np 2 -x OPENBLAS_NUM_THREADS=1 "$1" train --config examples/char-gpt.json --data "$D/t.txt" --batch 32 \
    --seq 64 --lr 1e-3 --steps "$STEPS" --stages 2 --microbatches 4 --snapshot-every 1 --snapshot-dir "$SNAP" 2>&1 |
    sed -n 's/.*failed, [0-9.]* ms and \([0-9.]*\) ms of CPU each; held here for others: [0-9]*, [0-9]* dropped, \([0-9.]*\) ms of CPU each.*/\1 \2/p'
}
: > "$D/a"; : > "$D/b"
for ((r = 1; r <= ROUNDS; r++)); do
  if ((r % 2)); then one "$A" >> "$D/a"; one "$B" >> "$D/b"; else one "$B" >> "$D/b"; one "$A" >> "$D/a"; fi
done
median() { sort -g | awk '{v[NR]=$1} END {print NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
for x in a b; do
  bin=$([ $x = a ] && echo "$A" || echo "$B")
  echo "$bin: send+receive CPU per generation (ms), rounds: $(awk '{printf "%.2f+%.2f ", $1, $2}' "$D/$x");" \
       "median total $(awk '{print $1 + $2}' "$D/$x" | median)"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
