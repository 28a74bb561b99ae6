#!/usr/bin/env bash
# train --async-window (pipedream, 2bw: W steps a pass, one stream of W x M microbatches) from the
# command line: at P = 1 (no delay, so the order of updates is the same whatever the window) a
# window gives the per-step run's losses and held-out losses bitwise, one metrics line per step,
# with replicas too (each step's rows reach the same replica and microbatch as without it); the
# header says the window and why; the default shrinks to divide --steps and the eval/save
# boundaries; a step that fails inside a pass is the step its error event names; bad values are
# refused with the rule. The continuous order at P > 1 against its
# replay: tests/test_async.c; over MPI: tests/test_async_mpi.sh.
. "$(dirname "$0")/lib.sh"
P=$PIPETRAIN
D=$TEST_TMP/async_window
mkdir -p "$D"
echo '{"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 256, "n_positions": 32}' > "$D/cfg.json"
for i in $(seq 1 300); do echo "the quick brown fox jumps over the lazy dog $((i % 7)) $((i % 13))"; done > "$D/text.txt"
base="train --config $D/cfg.json --data $D/text.txt --batch 8 --seq 16 --lr 3e-3 --lr-schedule cosine --warmup 2
  --shuffle 3 --schedule pipedream"
# each step's loss, and the last step's held-out loss (the ones before run in the bubbles, each when
# the one before is done: which steps get one depends on timing)
losses() { grep -o '"\(step\|loss\)":[0-9.e+-]*' "$1" | tr '\n' ' '; tail -1 "$1" | grep -o '"eval_loss":[0-9.e+-]*'; }

# same_as_flush NAME FLAGS...: the default window (said in the header) against --async-window 1
same_as_flush() {
  local n=$1; shift
  rm -f "$D/w.jsonl" "$D/one.jsonl"
  # shellcheck disable=SC2086
  "$P" $base "$@" --metrics "$D/w.jsonl" > "$D/w.out" 2>&1 || { fail "$n" "$(tail -3 "$D/w.out")"; return; }
  # shellcheck disable=SC2086
  "$P" $base "$@" --async-window 1 --metrics "$D/one.jsonl" > "$D/one.out" 2>&1 || { fail "$n" "$(tail -3 "$D/one.out")"; return; }
  local a b
  a=$(losses "$D/w.jsonl"); b=$(losses "$D/one.jsonl")
  [ -n "$a" ] && [ "$a" = "$b" ] && ok "$n: the per-step losses of --async-window 1, bitwise" || fail "$n" "$a vs $b"
}

same_as_flush "P=1 M=2, 8 steps (window 4)" --stages 1 --microbatches 2 --steps 8
grep -q "asynchronous window: 4 steps a pass (the default 4;" "$D/w.out" && ok "header: the default window, 4 steps a pass" \
  || fail "header: default window" "$(grep -i window "$D/w.out")"
[ "$(grep -c '"step"' "$D/w.jsonl")" = 8 ] && ok "one metrics line per step" || fail "metrics lines" "$(wc -l < "$D/w.jsonl")"
same_as_flush "P=1 --dp 2 M=2 (each replica's rows)" --stages 1 --dp 2 --microbatches 2 --steps 8
same_as_flush "P=1 with --eval-every 2 (window 2)" --stages 1 --microbatches 2 --steps 8 --eval-data "$D/text.txt" \
  --eval-every 2 --eval-batches 2
grep -q "asynchronous window: 2 steps a pass (the default 4, the largest" "$D/w.out" \
  && ok "--eval-every 2: the default window shrinks to 2" || fail "eval window" "$(grep -i window "$D/w.out")"
tail -1 "$D/w.jsonl" | grep -q eval_loss && ok "--eval-every 2: the last step's held-out loss" || fail "eval" "$(tail -1 "$D/w.jsonl")"
"$P" $base --stages 2 --microbatches 2 --steps 6 > "$D/six.out" 2>&1 \
  && grep -q "asynchronous window: 3 steps a pass" "$D/six.out" && ok "--steps 6: the default window is 3" \
  || fail "steps 6 window" "$(grep -i window "$D/six.out"; tail -2 "$D/six.out")"
"$P" $base --stages 2 --microbatches 2 --steps 4 --schedule 2bw > "$D/bw.out" 2>&1 \
  && grep -q "asynchronous window: 4 steps a pass" "$D/bw.out" && ok "2bw: the window is on by default" \
  || fail "2bw window" "$(grep -i window "$D/bw.out"; tail -2 "$D/bw.out")"

# a step inside a pass fails (lr 1e10: step 1's loss is finite, step 2's not): the error event
# names step 2, the step that failed, not the pass's first
rm -f "$D/div.jsonl" "$D/div.events.jsonl"
"$P" $base --stages 1 --microbatches 1 --steps 4 --async-window 4 --lr 1e10 --grad-clip 0 \
  --metrics "$D/div.jsonl" > "$D/div.out" 2>&1
grep -q '"event":"error","step":2,"message":"step 2: the loss is' "$D/div.events.jsonl" \
  && ok "a step inside a pass fails: its error event names that step (2), not the pass's first" \
  || fail "window error step" "$(grep error "$D/div.events.jsonl"; tail -2 "$D/div.out")"

expect_error "--async-window 0 refused" "async-window must be >= 1" "$P" $base --stages 2 --microbatches 2 --steps 4 --async-window 0
expect_error "--async-window 65 refused" "async-window must be in 1..64" "$P" $base --stages 2 --microbatches 2 --steps 64 --async-window 65
expect_error "--async-window with 1f1b refused" "only for a generated asynchronous schedule" \
  "$P" $base --stages 2 --microbatches 2 --steps 4 --schedule 1f1b --async-window 2
expect_error "--async-window not dividing --steps refused" "async-window 4 must divide --steps \(6\)" \
  "$P" $base --stages 2 --microbatches 2 --steps 6 --async-window 4
expect_error "--async-window not dividing --save-every refused" "must divide --save-every \(3\)" \
  "$P" $base --stages 2 --microbatches 2 --steps 12 --async-window 2 --save "$D/ck" --save-every 3
expect_error "2bw under the default window: a step's M not divisible by P refused (not a pass's W x M)" \
  "each step of --async-window 4.*2bw needs microbatches divisible by ranks" \
  "$P" ${base/pipedream/2bw} --stages 4 --microbatches 2 --steps 4
expect_error "2bw --async-window 2 with M=6, P=4 refused" "each step of --async-window 2.*divisible by ranks" \
  "$P" ${base/pipedream/2bw} --batch 12 --stages 4 --microbatches 6 --steps 4 --async-window 2
expect_error "--tie-owner with --defer-tie refused" "tie-owner works on pipedream.*--defer-tie" \
  "$P" $base --stages 2 --microbatches 2 --steps 4 --tie-owner --defer-tie
expect_error "--tie-owner with --dp 2 refused" "tie-owner works on pipedream.*--dp > 1" \
  "$P" $base --stages 2 --dp 2 --microbatches 2 --steps 4 --tie-owner
expect_error "--tie-owner with predict refused" "tie-owner works on pipedream.*drops the stash" \
  "$P" $base --stages 2 --microbatches 2 --steps 4 --tie-owner --async-fix predict
done_tests
