#!/usr/bin/env bash
# make bench: runs every benchmark binary (build/bench/bench_*) and script (bench/bench_*.sh).
# Each prints the machine (CPU, its vector ISA, the ISA the kernels were built for, OpenBLAS's
# kernels) and ratios measured side by side in one run; bench_train and bench_layout.sh run
# PyTorch (Debian's python3-torch under /usr/bin/python3) interleaved with their own steps and
# say so when it is missing; bench_tp.sh puts --tp 2 next to one rank and --dp 2 (tokens/s, CPU
# seconds, memory, the simulator's prediction, --tp-overlap, --tp-recompute). The machine is
# shared and noisy: read medians, not single runs.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export PIPETRAIN="$BUILD/pipetrain"
status=0
for b in "$BUILD"/bench/bench_*; do
  case "$b" in *.o|*.d) continue;; esac
  [ -x "$b" ] || continue
  echo "== $(basename "$b")"
  "$b" || status=1
done
for s in bench/bench_*.sh; do
  [ -f "$s" ] || continue
  echo "== $(basename "$s")"
  bash "$s" || status=1
done
exit $status
