#!/usr/bin/env bash
# Recovery on the threads transport (docs/recovery.md): --kill-at kills the process at the step and
# phase asked; `pipetrain launch` restarts it from the ranks' snapshots by itself and the run ends
# with the losses of an uninterrupted run, bitwise (the same layout), having repeated at most one
# step per failure, with failure and recovered events in the events file; one process too; a few
# rounds of the chaos loop (and --zero 1: moment shards snapshotted per rank) (kill -9 from outside at random times); bad flags get clear errors.
# MPI: tests/test_recover_mpi.sh; a lost host: tests/test_recover_hosts.sh.
. tests/lib.sh
P=$PIPETRAIN
D=$TEST_TMP/recover
SNAP=/dev/shm/pt-test-recover-$$
mkdir -p "$D"
trap 'rm -rf "$SNAP"*' EXIT
cat > "$D/cfg.json" <<'J'
{"n_layer": 4, "n_head": 2, "n_embd": 32, "vocab_size": 256, "n_positions": 32}
J
for i in $(seq 1 200); do echo "the quick brown fox jumps over the lazy dog $((i % 7))"; done > "$D/text.txt"
base="--config $D/cfg.json --data $D/text.txt --batch 8 --seq 16 --lr 3e-3 --grad-clip 0.5 --steps 12"
lay="--stages 2 --dp 2 --microbatches 2"
# max_lost EVENTS: the most steps any recovery repeated (-1: no recovered event)
max_lost() { grep '"recovered"' "$1" | sed 's/.*"steps_lost":\([0-9]*\).*/\1/' | sort -n | tail -1 | grep . || echo -1; }

# --- --kill-at alone: the process dies by SIGKILL at that step and phase, saying so
rc=$( (timeout 60 "$P" train $base $lay --kill-at 1@3:reduce > "$D/k.out" 2>&1; echo $?) 2>/dev/null )
[ $rc = 137 ] && grep -q "kill-at: rank 1, step 3, reduce: SIGKILL" "$D/k.out" && ok "--kill-at 1@3:reduce: SIGKILL at step 3" \
  || fail "--kill-at 1@3:reduce: SIGKILL at step 3" "rc $rc: $(tail -2 "$D/k.out")"

# --- the reference: no failure
timeout 120 "$P" train $base $lay --metrics "$D/ref.jsonl" > /dev/null 2>&1 || fail "reference run" "exited $?"
ref=$(last_loss "$D/ref.jsonl")

# --- launch: a kill at each phase (two in one run), the same final loss bitwise
for ph in forward reduce save; do
  rm -f "$D/l.jsonl" "$D/l.events.jsonl"
  timeout 120 "$P" launch --snapshot-dir "$SNAP" -- train $base $lay --snapshot-every 1 \
    --kill-at "0@7:$ph" --kill-at 3@10 --metrics "$D/l.jsonl" > "$D/l.out" 2>&1
  rc=$?
  n_fail=$(grep -c '"event":"failure"' "$D/l.events.jsonl" 2>/dev/null)
  n_rec=$(grep -c '"event":"recovered"' "$D/l.events.jsonl" 2>/dev/null)
  lost=$(max_lost "$D/l.events.jsonl")
  if [ $rc = 0 ] && [ "$(tail -1 "$D/l.jsonl" | sed 's/{"step":\([0-9]*\).*/\1/')" = 12 ] && [ "$n_fail" = 2 ] && [ "$n_rec" = 2 ] \
     && [ "$lost" -ge 0 ] && [ "$lost" -le 1 ]; then
    ok "launch, kills at 0@7:$ph and 3@10: reaches step 12 by itself, 2 failures, 2 recoveries, <= 1 step repeated each"
  else
    fail "launch, kills at 0@7:$ph and 3@10" "rc $rc, $n_fail failures, $n_rec recoveries, lost $lost: $(grep launch "$D/l.out" | tail -3)"
  fi
  [ "$(last_loss "$D/l.jsonl")" = "$ref" ] && ok "launch, kills at $ph: the final loss equals the uninterrupted run bitwise" \
    || fail "launch, kills at $ph: the final loss equals the uninterrupted run bitwise" "$(last_loss "$D/l.jsonl") vs $ref"
done

# --- takes overlapped with the next step: each rank's STEP waits for its take. Ranks 1 and 3's
# takes start 200 ms late (PIPETRAIN_TEST_SNAP_SLOW, before they copy anything), so without that
# wait their next update would land before the copy and the restored step would hold it: the
# final loss would differ. The STEPs must have waited, and the loss stays bitwise.
rm -f "$D/ls.jsonl" "$D/ls.events.jsonl"
PIPETRAIN_TEST_SNAP_SLOW=200:1,3 timeout 120 "$P" launch --snapshot-dir "$SNAP" -- train $base $lay --snapshot-every 1 \
  --kill-at 0@7 --metrics "$D/ls.jsonl" > "$D/ls.out" 2>&1
rc=$?
lost=$(max_lost "$D/ls.events.jsonl")
waited=$(sed -n 's/^snapshot takes overlapped.*: \([0-9]*\) of [0-9]* STEPs waited.*/\1/p' "$D/ls.out" | tail -1)
[ $rc = 0 ] && [ "$lost" -ge 0 ] && [ "$lost" -le 1 ] && [ "${waited:-0}" -gt 0 ] \
  && ok "overlapped takes, slowed: the STEPs waited for them ($waited), <= 1 step repeated" \
  || fail "overlapped takes, slowed" "rc $rc, lost $lost, waited '${waited}': $(grep -E 'launch|snapshot' "$D/ls.out" | tail -3)"
[ "$(last_loss "$D/ls.jsonl")" = "$ref" ] && ok "overlapped takes, slowed: the final loss equals the uninterrupted run bitwise" \
  || fail "overlapped takes, slowed: the final loss equals the uninterrupted run bitwise" "$(last_loss "$D/ls.jsonl") vs $ref"

# --- takes split at the boundary (--adapt: a re-split moves layers there, so no overlap): the
# trainer's thread takes local ranks 0 and 1, the worker 2 and 3 (rank 3's slowed: the boundary
# waits for it); kills in a take and at a forward, the loss bitwise --adapt's uninterrupted run
timeout 120 "$P" train $base $lay --adapt --metrics "$D/aref.jsonl" > /dev/null 2>&1 || fail "--adapt reference run" "exited $?"
rm -f "$D/la.jsonl" "$D/la.events.jsonl"
PIPETRAIN_TEST_SNAP_SLOW=200:1,3 timeout 120 "$P" launch --snapshot-dir "$SNAP" -- train $base $lay --adapt --snapshot-every 1 \
  --kill-at 0@7:save --kill-at 3@10 --metrics "$D/la.jsonl" > "$D/la.out" 2>&1
rc=$?
lost=$(max_lost "$D/la.events.jsonl")
[ $rc = 0 ] && [ "$(grep -c '"event":"recovered"' "$D/la.events.jsonl")" = 2 ] && [ "$lost" -ge 0 ] && [ "$lost" -le 1 ] \
  && ! grep -q "^snapshot takes overlapped" "$D/la.out" && [ -n "$(last_loss "$D/aref.jsonl")" ] \
  && [ "$(last_loss "$D/la.jsonl")" = "$(last_loss "$D/aref.jsonl")" ] \
  && ok "takes split at the boundary (--adapt), slowed, kills in a take and at a forward: 2 recoveries, the final loss bitwise" \
  || fail "takes split at the boundary (--adapt)" "rc $rc, lost $lost, $(last_loss "$D/la.jsonl") vs $(last_loss "$D/aref.jsonl"): $(grep -E 'launch|snapshot' "$D/la.out" | tail -3)"

# --- --zero 1: each rank snapshots its parameters and its moment slices (a shard file); the
# restore puts every rank's shard back: the same final loss bitwise
timeout 120 "$P" train $base $lay --zero 1 --metrics "$D/refz.jsonl" > /dev/null 2>&1 || fail "reference run, --zero 1" "exited $?"
rm -f "$D/lz.jsonl" "$D/lz.events.jsonl"
timeout 120 "$P" launch --snapshot-dir "$SNAP" -- train $base $lay --zero 1 --snapshot-every 1 \
  --kill-at 0@7 --kill-at 3@10:save --metrics "$D/lz.jsonl" > "$D/lz.out" 2>&1
rc=$?
n_rec=$(grep -c '"event":"recovered"' "$D/lz.events.jsonl" 2>/dev/null)
lost=$(max_lost "$D/lz.events.jsonl")
[ $rc = 0 ] && [ "$n_rec" = 2 ] && [ "$lost" -ge 0 ] && [ "$lost" -le 1 ] && grep -q '"from":"snapshot"' "$D/lz.events.jsonl" \
  && [ "$(last_loss "$D/lz.jsonl")" = "$(last_loss "$D/refz.jsonl")" ] \
  && ok "launch --zero 1, kills at 0@7 and 3@10:save: 2 recoveries from snapshots, the same final loss bitwise" \
  || fail "launch --zero 1, kills at 0@7 and 3@10:save" "rc $rc, $n_rec recoveries, lost $lost, loss $(last_loss "$D/lz.jsonl") vs $(last_loss "$D/refz.jsonl"): $(grep launch "$D/lz.out" | tail -3)"

# --- --tp 2: each TP rank snapshots its shard in the whole tensors' layout (the rest zero); the
# restore joins the TP ranks' files: the same final loss bitwise
tpl="--stages 2 --tp 2 --microbatches 2"
timeout 120 "$P" train $base $tpl --metrics "$D/reft.jsonl" > /dev/null 2>&1 || fail "reference run, --tp 2" "exited $?"
rm -f "$D/lt.jsonl" "$D/lt.events.jsonl"
timeout 120 "$P" launch --snapshot-dir "$SNAP" -- train $base $tpl --snapshot-every 1 \
  --kill-at 1@7 --kill-at 2@10:save --metrics "$D/lt.jsonl" > "$D/lt.out" 2>&1
rc=$?
n_rec=$(grep -c '"from":"snapshot"' "$D/lt.events.jsonl" 2>/dev/null)
lost=$(max_lost "$D/lt.events.jsonl")
[ $rc = 0 ] && [ "$n_rec" = 2 ] && [ "$lost" -ge 0 ] && [ "$lost" -le 1 ] \
  && [ "$(last_loss "$D/lt.jsonl")" = "$(last_loss "$D/reft.jsonl")" ] \
  && ok "launch --tp 2, kills at 1@7 and 2@10:save: 2 recoveries from snapshots, the same final loss bitwise" \
  || fail "launch --tp 2, kills at 1@7 and 2@10:save" "rc $rc, $n_rec from snapshots, lost $lost, loss $(last_loss "$D/lt.jsonl") vs $(last_loss "$D/reft.jsonl"): $(grep launch "$D/lt.out" | tail -3)"

# --- --tp 2 --dp 2 --zero 1: the moments in the chunk files (the checkpoint's way under TP), each
# rank's slices in their places of its files (a tied tensor's slices in another stage's chunk);
# the restore needs every rank and joins all files of a chunk: the same final loss bitwise
tzl="--stages 2 --tp 2 --dp 2 --zero 1 --microbatches 2"
timeout 120 "$P" train $base $tzl --metrics "$D/reftz.jsonl" > /dev/null 2>&1 || fail "reference run, --tp 2 --zero 1" "exited $?"
rm -f "$D/ltz.jsonl" "$D/ltz.events.jsonl"
timeout 120 "$P" launch --snapshot-dir "$SNAP" -- train $base $tzl --snapshot-every 1 \
  --kill-at 1@7 --kill-at 6@10:save --metrics "$D/ltz.jsonl" > "$D/ltz.out" 2>&1
rc=$?
n_rec=$(grep -c '"from":"snapshot"' "$D/ltz.events.jsonl" 2>/dev/null)
lost=$(max_lost "$D/ltz.events.jsonl")
[ $rc = 0 ] && [ "$n_rec" = 2 ] && [ "$lost" -ge 0 ] && [ "$lost" -le 1 ] \
  && [ "$(last_loss "$D/ltz.jsonl")" = "$(last_loss "$D/reftz.jsonl")" ] \
  && ok "launch --tp 2 --dp 2 --zero 1, kills at 1@7 and 6@10:save: 2 recoveries from snapshots, the same final loss bitwise" \
  || fail "launch --tp 2 --dp 2 --zero 1" "rc $rc, $n_rec from snapshots, lost $lost, loss $(last_loss "$D/ltz.jsonl") vs $(last_loss "$D/reftz.jsonl"): $(grep launch "$D/ltz.out" | tail -3)"

# --- one process (no pipeline): the same
timeout 60 "$P" train $base --threads 1 --metrics "$D/ref1.jsonl" > /dev/null 2>&1
rm -f "$D/l1.jsonl" "$D/l1.events.jsonl"
timeout 60 "$P" launch --snapshot-dir "$SNAP" -- train $base --threads 1 --snapshot-every 1 --kill-at 0@5 \
  --metrics "$D/l1.jsonl" > "$D/l1.out" 2>&1
[ $? = 0 ] && [ "$(last_loss "$D/l1.jsonl")" = "$(last_loss "$D/ref1.jsonl")" ] && [ "$(max_lost "$D/l1.events.jsonl")" -le 1 ] \
  && ok "launch, one process killed at step 5: recovers, the same final loss bitwise" \
  || fail "launch, one process killed at step 5" "$(last_loss "$D/l1.jsonl") vs $(last_loss "$D/ref1.jsonl"); $(tail -2 "$D/l1.out")"

# --- no snapshots: back to the newest --save checkpoint
rm -rf "$D/ck" "$D/l2.jsonl" "$D/l2.events.jsonl"
timeout 120 "$P" launch --snapshot-dir "$SNAP" -- train $base $lay --save "$D/ck" --save-every 3 --kill-at 1@8 \
  --metrics "$D/l2.jsonl" > "$D/l2.out" 2>&1
[ $? = 0 ] && [ "$(last_loss "$D/l2.jsonl")" = "$ref" ] && grep -q '"from":"checkpoint","from_step":6' "$D/l2.events.jsonl" \
  && ok "launch without snapshots: restarts from the --save checkpoint of step 6, the same final loss bitwise" \
  || fail "launch without snapshots: restarts from the --save checkpoint" "$(grep launch "$D/l2.out" | tail -3)"

# --- the report marks the events
"$P" report "$D/l.jsonl" --out "$D/l.html" > /dev/null 2>&1
grep -q "recovered" "$D/l.html" && grep -q "failure" "$D/l.html" && ok "the report marks failure and recovered events" \
  || fail "the report marks failure and recovered events" "not in $D/l.html"

# --- a few rounds of the chaos loop (kill -9 from outside at random steps)
bash tests/chaos_recover.sh 2 > "$D/chaos.out" 2>&1 && ok "chaos loop, 2 rounds: every run recovered with the uninterrupted loss" \
  || fail "chaos loop, 2 rounds" "$(tail -3 "$D/chaos.out")"

# --- bad flags
expect_error "--kill-at without @" "--kill-at 'x7': bad rank" "$P" train $base --kill-at x7
expect_error "--kill-at step 0" "bad step" "$P" train $base --kill-at 0@0
expect_error "--kill-at unknown phase" "unknown phase 'backward'" "$P" train $base --kill-at 0@3:backward
expect_error "--kill-at a rank the job lacks" "rank 7 does not exist: the job has 4 ranks" "$P" train $base $lay --kill-at 7@2
expect_error "--kill-at reduce in one process" "one process has no reduction" "$P" train $base --threads 1 --kill-at 0@2:reduce
expect_error "--snapshot-every without a folder" "--snapshot-every needs --snapshot-dir" "$P" train $base --snapshot-every 1
expect_error "--snapshot-every -1" "--snapshot-every -1: give K >= 1" "$P" train $base \
  --snapshot-every -1 --snapshot-dir "$SNAP.t"
expect_error "launch without --" "no \"--\"" "$P" launch --np 2 train $base
expect_error "launch: not train after --" "after \"--\" comes the job: train" "$P" launch -- sample
expect_error "launch: mpirun flags without --np" "'--bind-to' is not a launch flag" "$P" launch --bind-to none -- train $base
expect_error "launch: --spares without --hostfile" "--spares 1 needs --hostfile" "$P" launch --np 2 --spares 1 -- train $base
expect_error "launch: --np 0" "--np needs a whole number >= 1" "$P" launch --np 0 -- train $base
expect_error "launch: --timeout x" "--timeout needs seconds > 0" "$P" launch --timeout x -- train $base
expect_error "launch: a malformed --kill-at reaches train" "--kill-at 'bogus': bad rank" \
  timeout 60 "$P" launch --snapshot-dir "$SNAP" -- train $base --kill-at bogus
expect_error "launch: --kill-at 1@x reaches train" "--kill-at '1@x': bad step" \
  timeout 60 "$P" launch --snapshot-dir "$SNAP" -- train $base --kill-at=1@x
expect_error "launch: a job that refuses its flags is not restarted" "stopped before its first step" \
  "$P" launch --snapshot-dir "$SNAP" -- train $base --stages 0
done_tests
