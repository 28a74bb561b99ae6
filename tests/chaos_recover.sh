#!/usr/bin/env bash
# Chaos loop (threads transport): ROUNDS runs (default 10) of a 2 stages x 2 replicas job under
# `pipetrain launch`, each killed with kill -9 from outside at two random moments (the training
# process, found by its heartbeat's pid, once its step passes a random one); each run must reach
# its last step by itself with the final loss of an uninterrupted run, bitwise (the same layout).
# Bounded: each run has 120 s. Prints one line per run and exits 1 on the first that fails.
# Usage: tests/chaos_recover.sh [ROUNDS]   (tests/test_recover.sh runs 2 rounds)
set -u
cd "$(dirname "$0")/.."
ROUNDS=${1:-10}
P=${PIPETRAIN:-build/pipetrain}
W=$(mktemp -d)
SNAP=/dev/shm/pt-chaos-$$
trap 'rm -rf "$W" "$SNAP"' EXIT
echo '{"n_layer": 4, "n_head": 2, "n_embd": 32, "vocab_size": 256, "n_positions": 32}' > "$W/cfg.json"
for i in $(seq 1 200); do echo "the quick brown fox jumps over the lazy dog $((i % 7))"; done > "$W/text.txt"
STEPS=40
args="--config $W/cfg.json --data $W/text.txt --batch 8 --seq 16 --lr 3e-3 --grad-clip 0.5 --steps $STEPS --stages 2 --dp 2 --microbatches 2"
loss() { tail -1 "$1" | sed 's/.*"loss":\([0-9.]*\).*/\1/'; }
# beat: the step and pid in rank 0's heartbeat ("" when none yet)
beat() { cat "$SNAP/rank-0/heartbeat" 2>/dev/null | awk '{print $1, $2}'; }
timeout 120 "$P" train $args --metrics "$W/ref.jsonl" > /dev/null 2>&1 || { echo "chaos: the reference run failed"; exit 1; }
ref=$(loss "$W/ref.jsonl")
for ((r = 1; r <= ROUNDS; r++)); do
  rm -f "$W/m.jsonl" "$W/m.events.jsonl"
  k1=$((3 + RANDOM % 15)); k2=$((k1 + 5 + RANDOM % 15))
  timeout 120 "$P" launch --snapshot-dir "$SNAP" -- train $args --snapshot-every 1 --metrics "$W/m.jsonl" > "$W/run.out" 2>&1 &
  lp=$!
  for k in $k1 $k2; do   # kill -9 the training process once its step reaches k (bounded by the run)
    while kill -0 $lp 2>/dev/null; do
      read -r s pid <<< "$(beat)"
      if [ -n "${s:-}" ] && [ "$s" -ge "$k" ] && [ "$s" -lt "$STEPS" ]; then kill -9 "$pid" 2>/dev/null; break; fi
      sleep 0.01
    done
    sleep 0.3
  done
  wait $lp
  rc=$?
  n=$(grep -c '"event":"recovered"' "$W/m.events.jsonl" 2>/dev/null)
  got=$(loss "$W/m.jsonl")
  echo "chaos round $r: kills at steps >= $k1, $k2; exit $rc, $n recoveries, final loss $got (uninterrupted $ref)"
  if [ $rc != 0 ] || [ "$got" != "$ref" ]; then tail -5 "$W/run.out"; exit 1; fi
done
echo "chaos: $ROUNDS rounds recovered"
