#!/usr/bin/env bash
# Recovery over MPI (docs/recovery.md): `pipetrain launch --np 4` of 2 stages x 2 replicas with a
# rank killed at each phase (forward, reduce, save; two kills a run) reaches its last step by
# itself, repeats at most one step per failure, names the rank that died, and ends with the loss
# of an uninterrupted MPI run, bitwise (the same layout); a hang (a rank stopped with SIGSTOP) is
# noticed by --timeout and recovered from too (under launch's default: no dead process, no going
# on in place). The kills run with --no-recycle: this is the restart's test (in place, where the
# default goes by itself: tests/test_recover_recycle.sh). Every run is bounded.
# "At most one step" is counted against the newest step any rank's heartbeat showed (the job's
# progress, not the slowest rank's), and holds whatever the load: the step boundary makes every
# rank's previous generation written before any rank beats the step. The last case makes the
# load's worst order certain: the writers of stage 1 (ranks 1 and 3) sleep 300 ms per generation
# (PIPETRAIN_TEST_SNAP_SLOW), so when rank 2 (stage 0, which starts its forwards without waiting
# for anyone) dies at the forward of step 9, stage 1's generation 7 is still in its writers;
# without that boundary rank 2 had beaten step 8 and the restore found step 6: 2 steps lost.
. "$(dirname "$0")/lib.sh"
mpi_env 120
D=$TEST_TMP/recover_mpi
SNAP=/dev/shm/pt-test-recover-mpi-$$
mkdir -p "$D"
trap 'rm -rf "$SNAP"' EXIT
cat > "$D/cfg.json" <<'J'
{"n_layer": 4, "n_head": 2, "n_embd": 32, "vocab_size": 256, "n_positions": 32}
J
for i in $(seq 1 200); do echo "the quick brown fox jumps over the lazy dog $((i % 7))"; done > "$D/text.txt"
args="--config $D/cfg.json --data $D/text.txt --batch 8 --seq 16 --lr 3e-3 --grad-clip 0.5 --steps 12 --stages 2 --dp 2 --microbatches 2"
max_lost() { grep '"recovered"' "$1" | sed 's/.*"steps_lost":\([0-9]*\).*/\1/' | sort -n | tail -1 | grep . || echo -1; }

mpi 4 train $args --metrics "$D/ref.jsonl" > "$D/ref.out" 2>&1 || fail "reference MPI run" "$(tail -3 "$D/ref.out")"
ref=$(last_loss "$D/ref.jsonl")
for case in forward reduce save forward:slow; do
  ph=${case%%:*}
  slow=""; [ "$case" = forward:slow ] && slow="300:1,3"
  rm -f "$D/l.jsonl" "$D/l.events.jsonl"
  PIPETRAIN_TEST_SNAP_SLOW=$slow timeout "$JOB_LIMIT_S" "$P" launch --np 4 --no-recycle -x ASAN_OPTIONS -x PIPETRAIN_TEST_SNAP_SLOW \
    --snapshot-dir "$SNAP" -- train $args --snapshot-every 1 \
    --kill-at "1@5:$ph" --kill-at "2@9:$ph" --metrics "$D/l.jsonl" > "$D/l.out" 2>&1 < /dev/null
  rc=$?
  [ -n "$slow" ] && ph="forward (stage 1's writers slow)"
  n_rec=$(grep -c '"event":"recovered"' "$D/l.events.jsonl" 2>/dev/null)
  lost=$(max_lost "$D/l.events.jsonl")
  if [ $rc = 0 ] && [ "$n_rec" = 2 ] && [ "$lost" -ge 0 ] && [ "$lost" -le 1 ] && grep -q '"who":"rank 1"' "$D/l.events.jsonl" \
     && grep -q '"who":"rank 2"' "$D/l.events.jsonl"; then
    ok "mpi launch, ranks 1 and 2 killed at $ph: 2 recoveries by itself, <= 1 step repeated each, the dead ranks named"
  else
    fail "mpi launch, ranks 1 and 2 killed at $ph" "rc $rc, $n_rec recoveries, lost $lost: $(grep '^launch' "$D/l.out" | tail -3)"
  fi
  [ "$(last_loss "$D/l.jsonl")" = "$ref" ] && ok "mpi launch, kills at $ph: the final loss equals the uninterrupted run bitwise" \
    || fail "mpi launch, kills at $ph: the final loss equals the uninterrupted run bitwise" "$(last_loss "$D/l.jsonl") vs $ref"
done

# --- a hang: rank 3 stopped (SIGSTOP) at step >= 4; --timeout 3 notices it, the job goes on
rm -rf "$D/h.jsonl" "$D/h.events.jsonl" "$SNAP"
timeout "$JOB_LIMIT_S" "$P" launch --np 4 --timeout 3 --snapshot-dir "$SNAP" -- train $args --steps 300 --snapshot-every 1 \
  --metrics "$D/h.jsonl" > "$D/h.out" 2>&1 < /dev/null &
lp=$!
stopped=""
for _ in $(seq 1 600); do   # up to 60 s for step 4
  s=""; [ -f "$SNAP/rank-3/heartbeat" ] && read -r s pid _ < "$SNAP/rank-3/heartbeat"
  if [ -n "${s:-}" ] && [ "$s" -ge 4 ]; then kill -STOP "$pid"; stopped=$pid; break; fi
  sleep 0.1
done
wait $lp
rc=$?
[ -n "$stopped" ] && kill -CONT "$stopped" 2>/dev/null
if [ $rc = 0 ] && grep -q '"noticed":"\(timeout\|heartbeat\)"' "$D/h.events.jsonl" && [ "$(tail -1 "$D/h.jsonl" | sed 's/{"step":\([0-9]*\).*/\1/')" = 300 ]; then
  ok "mpi launch, a rank stopped: the hang noticed past --timeout, the job ends at step 300"
else
  fail "mpi launch, a rank stopped" "rc $rc: $(grep '^launch' "$D/h.out" | tail -3)"
fi
done_tests
