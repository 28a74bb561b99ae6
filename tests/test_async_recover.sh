#!/usr/bin/env bash
# `pipetrain launch` recovery of asynchronous and --dp-sync runs (threads): the snapshots carry
# each rank's own state (src/run/exec_rankstate.c: 2bw's older version, pipemare's velocity,
# --dp-sync's outer state and the replicas' own weights and moments), so a run killed and
# restarted from them ends with the uninterrupted run's losses, bitwise. The kills fall inside an
# H-cycle (step 6 of H = 4) and right after a sync whose change is still in flight (step 9, after
# the sync at step 8). Without the state in the snapshots these runs would differ
# (tests/test_async_resume.sh checks that for checkpoints).
. "$(dirname "$0")/lib.sh"
P=$PIPETRAIN
D=$TEST_TMP/asyncrec
SNAP=/dev/shm/pt-test-asyncrec-$$
mkdir -p "$D"
trap 'rm -rf "$SNAP"*' EXIT
echo '{"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 256, "n_positions": 32}' > "$D/cfg.json"
for i in $(seq 1 200); do echo "the quick brown fox jumps over the lazy dog $((i % 7))"; done > "$D/text.txt"
base="--config $D/cfg.json --data $D/text.txt --batch 8 --seq 16 --lr 3e-3 --steps 12 --log-every 100"
loss() { sed 's/.*"loss":\([0-9.]*\).*/\1/' "$1" | tr '\n' ' '; }

# rec NAME KILLS LAYOUT...: the uninterrupted run against launch with the kills (--kill-at each)
rec() {
  local name=$1 kills=$2 k ka=(); shift 2
  for k in $kills; do ka+=(--kill-at "$k"); done
  rm -rf "$SNAP-$name"
  timeout 120 "$P" train $base "$@" --metrics "$D/$name-ref.jsonl" > "$D/$name-ref.out" 2>&1
  timeout 180 "$P" launch --snapshot-dir "$SNAP-$name" -- train $base "$@" --snapshot-every ${SE:-1} "${ka[@]}" \
    --metrics "$D/$name.jsonl" > "$D/$name.out" 2>&1
  local rc=$? n_rec
  n_rec=$(grep -c '"event":"recovered"' "$D/$name.events.jsonl" 2>/dev/null)
  if [ $rc = 0 ] && [ "$n_rec" = "$(echo $kills | wc -w)" ] && [ -s "$D/$name-ref.jsonl" ] &&
     [ "$(tail -1 "$D/$name.jsonl" | sed 's/.*"loss":\([0-9.]*\).*/\1/')" = "$(tail -1 "$D/$name-ref.jsonl" | sed 's/.*"loss":\([0-9.]*\).*/\1/')" ]; then
    ok "$name: launch recovers from kills at $kills, the final loss of the uninterrupted run bitwise"
  else
    fail "$name: launch recovery" "rc $rc, $n_rec recoveries; ref $(loss "$D/$name-ref.jsonl") | $(loss "$D/$name.jsonl") | $(grep -i 'note\|error' "$D/$name.out" | tail -2)"
  fi
  if [ $rc = 0 ] && grep -q '"event":"recovered"' "$D/$name.events.jsonl" && ! grep -q "is not in the checkpoint" "$D/$name.out"; then
    ok "$name: the restored checkpoint held every rank's state (no note)"
  else fail "$name: the state came back" "$(grep note "$D/$name.out" | head -1)"; fi
}

rec dp-sync-4 "1@6 2@9" --stages 2 --dp 2 --microbatches 2 --dp-sync 4
# the asynchronous runs two steps a pass (--async-window 2), a snapshot at each pass's end
SE=2 rec 2bw "1@5" --stages 2 --microbatches 4 --schedule 2bw --async-window 2
SE=2 rec pipemare "0@7:forward" --stages 2 --microbatches 4 --schedule pipedream --async-fix pipemare --async-window 2
done_tests
