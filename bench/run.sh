#!/usr/bin/env bash
# make bench: runs every benchmark binary (build/bench/bench_*) and script (bench/bench_*.sh),
# then the PyTorch side of the training comparison when Debian's python3-torch is importable.
# Benchmarks print ratios measured side by side in one run; the machine is shared and noisy.
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
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "== PyTorch on the same training shape (bench/torch_train.py, one thread)"
  /usr/bin/python3 bench/torch_train.py || status=1
else
  echo "== PyTorch comparison skipped: /usr/bin/python3 cannot import torch (apt-get install python3-torch)"
fi
exit $status
