#!/usr/bin/env bash
# The cost of --snapshot-every 1 (docs/recovery.md; issue 22 item 1: <= 2% at K = 1): the demo
# model (examples/char-gpt.json, batch 32 x 64 tokens) trained with and without a snapshot every
# step, in alternating rounds (ABBA: odd rounds run without first, even rounds with first, so a
# load that drifts during a round weighs on both sides alike). Each run's median step period:
# the time between consecutive progress lines (--log-every 1), which holds the step and its
# hooks, the snapshot's take on the compute path included (copy, sums, snap.json, rename); the
# first two periods left out (the first generation makes the files). Per layout the median over
# rounds of the with/without ratio, next to the snapshots' own account of the last round (the
# take per step after the first, the writer's and the peer copy's CPU per generation) and the
# load before and after. On a loaded machine the rounds swing by more than the cost: read the
# ratio from a quiet run (load average below 1), the account from any.
# Layouts: one process (--threads 2), 2 stages x 2 replicas on rank threads, and (as root, where
# network namespaces can be made: tools/hosts.sh) 2 stages x 1 replica over Open MPI on two
# hosts, where each rank's generations also go to the other host (the peer copy): by default
# each one whose share of the copy's CPU budget (1% of the time) has come, each one
# (--snapshot-peer-every 1), and every 4th (--snapshot-peer-every 4); and 2 stages x 2 replicas over the two hosts (2 ranks a
# host, a replica on each), where each rank sends only its generation's sums to the same stage's
# rank of the other replica, which holds the same bytes (sums only).
# Usage: bench/bench_snapshot.sh [ROUNDS] [STEPS]   (default 8 rounds of 40 steps); ONLY=REGEX runs
# only the layouts whose name matches it (bash's =~; e.g. ONLY='peer copy' for the three whole-copy rows).
set -u
cd "$(dirname "$0")/.."
P=${PIPETRAIN:-build/pipetrain}
ROUNDS=${1:-8}; STEPS=${2:-40}
D=$(mktemp -d)
SNAP=/dev/shm/pt-bench-snapshot-$$
H=tools/hosts.sh
export PT_HOSTS=${PT_HOSTS:-rcvbs}
trap 'rm -rf "$D" "$SNAP"; [ -n "${hosts:-}" ] && $H down > /dev/null 2>&1' EXIT
layouts=("one process:--threads 2" "2 stages x 2 replicas:--stages 2 --dp 2 --microbatches 4")
if $H check > /dev/null 2>&1 && $H up 2 > /dev/null 2>&1; then
  hosts=1
  layouts+=("2 stages over 2 hosts (MPI, peer copy within its CPU budget, the default):--stages 2 --microbatches 4"
            "2 stages over 2 hosts (MPI, peer copy of each):--stages 2 --microbatches 4 --snapshot-peer-every 1"
            "2 stages over 2 hosts (MPI, peer copy of every 4th):--stages 2 --microbatches 4 --snapshot-peer-every 4"
            "2 stages x 2 replicas over 2 hosts (MPI, sums only to the replica):--stages 2 --dp 2 --microbatches 4")
fi
for i in $(seq 1 3000); do echo "the quick brown fox jumps over the lazy dog, line $i of the bench corpus"; done > "$D/t.txt"
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
isa=$(grep -qw avx512f /proc/cpuinfo && echo AVX-512 || (grep -qw avx2 /proc/cpuinfo && echo AVX2 || echo other))
echo "machine: $cpu, $isa, $(nproc) cores; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
base="--config examples/char-gpt.json --data $D/t.txt --batch 32 --seq 64 --lr 1e-3 --steps $STEPS"
median() { sort -g | awk '{v[NR]=$1} END {print NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
# stamp: each progress line's arrival time (bash's EPOCHREALTIME), one a line; the rest to $1
stamp() { while IFS= read -r l; do case $l in step*) echo "$EPOCHREALTIME";; *) echo "$l" >> "$1";; esac; done; }
# period FILE: the median of the periods between stamps, the first two left out, in ms
period() { awk 'NR > 1 { d[NR] = ($1 - p) * 1e3 } { p = $1 } END { for (i = 4; i <= NR; i++) print d[i] }' "$1" | median; }
# run FLAGS...: train (over the hosts for the MPI layouts: one rank a host, two with replicas; one
# BLAS thread each)
run() {
  case "$name" in
    *replicas*MPI*) PT_HOSTS_SLOTS=2 $H mpirun -np 4 -x OPENBLAS_NUM_THREADS=1 "$(realpath "$P")" train $base "$@" ;;
    *MPI*) $H mpirun -np 2 -x OPENBLAS_NUM_THREADS=1 "$(realpath "$P")" train $base "$@" ;;
    *) "$P" train $base "$@" ;;
  esac
}
plain() { rm -f "$D/a.out"; run $1 --log-every 1 2>&1 | stamp "$D/a.out" > "$D/a.ts"; }
snap() {
  rm -f "$D/b.out"; rm -rf "$SNAP"
  run $1 --log-every 1 --snapshot-every 1 --snapshot-dir "$SNAP" 2>&1 | stamp "$D/b.out" > "$D/b.ts"
}
for lay in "${layouts[@]}"; do
  name=${lay%%:*}; flags=${lay#*:}
  [[ -n "${ONLY:-}" && ! "$name" =~ $ONLY ]] && continue
  : > "$D/ratio"; : > "$D/plain"; : > "$D/snap"
  for ((r = 1; r <= ROUNDS; r++)); do
    if ((r % 2)); then plain "$flags"; snap "$flags"; else snap "$flags"; plain "$flags"; fi
    a=$(period "$D/a.ts"); b=$(period "$D/b.ts")
    echo "$a" >> "$D/plain"; echo "$b" >> "$D/snap"
    awk -v a="$a" -v b="$b" 'BEGIN {print b / a}' >> "$D/ratio"
  done
  echo "$name: step period $(median < "$D/plain") ms without, $(median < "$D/snap") ms with a snapshot every step" \
       "(medians of $ROUNDS alternating rounds); with/without $(median < "$D/ratio")" \
       "(rounds: $(tr '\n' ' ' < "$D/ratio" | xargs printf '%.3f '))"
  grep '^snapshot' "$D/b.out" | sed 's/^/  last round: /'
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
