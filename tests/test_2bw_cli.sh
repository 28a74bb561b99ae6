# --schedule 2bw from the command line: `schedule` prints it, `simulate` prices its second weight
# version (--cost params=BYTES: one copy per stage, in text and JSON, next to pipedream's
# per-microbatch stashes), a bad M is refused with the rule, train runs it (the loss falls) and
# --async-fix, --async-depth and --defer-tie are checked against the schedule.
. tests/lib.sh
P=$PIPETRAIN
D=$TEST_TMP/2bw_cli
mkdir -p "$D"
out=$("$P" schedule --schedule 2bw --stages 2 --microbatches 4 2>&1)
[ "$out" = "$(cat tests/golden/2bw-p2-m4.txt)" ] && ok "schedule prints 2bw (its golden)" || fail "schedule prints 2bw" "$out"
"$P" simulate --schedule 2bw --stages 4 --microbatches 8 --cost f=1,b=2,w=0,act=10,params=1000 --json > "$D/s.json" 2>&1
grep -q '"weight_stash_bytes":[[:space:]]*\[1000,[[:space:]]*1000,[[:space:]]*1000,[[:space:]]*1000\]' "$D/s.json" \
  && ok "simulate --json: 2bw keeps one extra weight copy per stage" || fail "simulate 2bw json" "$(grep -A2 stash "$D/s.json")"
grep -q '"rank_peak_bytes":[[:space:]]*\[1040,' "$D/s.json" && ok "simulate: rank peak = activations + stash" \
  || fail "simulate: rank peak" "$(grep -A1 rank_peak "$D/s.json")"
"$P" simulate --schedule pipedream --stages 4 --microbatches 8 --cost f=1,b=2,w=0,params=1000 > "$D/p.txt" 2>&1
grep -A1 "weight versions" "$D/p.txt" | grep -q "stage 0 *4000" && ok "simulate: pipedream stashes one copy per microbatch in flight" \
  || fail "simulate pipedream stash" "$(tail -6 "$D/p.txt")"
for d in 0 4; do "$P" simulate --schedule pipedream --stages 4 --microbatches 4 --async-depth $d \
  --cost f=1,b=2,w=0,params=1000 --slow-link 0-1:30 --slow-link 1-2:30 --slow-link 2-3:30 > "$D/pd$d.txt" 2>&1; done
grep -A2 "weight versions" "$D/pd4.txt" | grep -q "stage 1 *4000" && grep -A2 "weight versions" "$D/pd0.txt" | grep -q "stage 1 *3000" \
  && ok "simulate --async-depth 4: pipedream's stage 1 stashes 4 copies (3 without)" || fail "simulate depth stash" "$(cat "$D/pd4.txt")"
t0=$(awk '/^iteration time/ { print $3 }' "$D/pd0.txt"); t4=$(awk '/^iteration time/ { print $3 }' "$D/pd4.txt")
awk -v a="$t0" -v b="$t4" 'BEGIN { exit !(b > 0 && b < 0.75 * a) }' \
  && ok "simulate: 30-unit links, --async-depth 4 hides a round trip ($t0 -> $t4)" || fail "simulate depth time" "$t0 -> $t4"
expect_error "2bw: M not a multiple of P" "divisible by ranks" "$P" simulate --schedule 2bw --stages 4 --microbatches 6
TINY="--config tests/fixtures/gpt-tiny/config.json --data tests/fixtures/gpt-tiny/tokens.bin --batch 8 --seq 8"
"$P" train $TINY --steps 12 --lr 1e-2 --stages 2 --microbatches 4 --schedule 2bw --metrics "$D/m.jsonl" > "$D/t.txt" 2>&1
first=$(head -1 "$D/m.jsonl" | grep -o '"loss":[0-9.]*' | cut -d: -f2)
last=$(tail -1 "$D/m.jsonl" | grep -o '"loss":[0-9.]*' | cut -d: -f2)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < 0.95 * a) }' && ok "train runs 2bw, the loss falls ($first -> $last)" \
  || fail "train 2bw" "$first -> $last $(tail -3 "$D/t.txt")"
"$P" train $TINY --steps 2 --stages 2 --microbatches 4 --schedule 2bw --async-fix nesterov > "$D/n.txt" 2>&1 \
  && ok "train 2bw --async-fix nesterov runs" || fail "2bw nesterov" "$(tail -3 "$D/n.txt")"
# the Nesterov method's NAdamW moments in a checkpoint: a resume continues them, another rule is refused
"$P" train $TINY --steps 2 --stages 2 --microbatches 4 --schedule 2bw --async-fix nesterov --save "$D/ck" > "$D/s.txt" 2>&1
grep -q '"optim":[[:space:]]*"nadamw"' "$D/ck/ckpt-2/manifest.json" 2>/dev/null && ok "2bw nesterov: the checkpoint says nadamw" \
  || fail "2bw nesterov checkpoint" "$(tail -2 "$D/s.txt")"
"$P" train $TINY --steps 3 --stages 2 --microbatches 4 --schedule 2bw --async-fix nesterov --resume "$D/ck" > "$D/r.txt" 2>&1 \
  && ok "2bw nesterov: resumes" || fail "2bw nesterov resume" "$(tail -2 "$D/r.txt")"
expect_error "resume without the fix's rule refused" "resume with --optim nadamw" "$P" train $TINY --steps 3 \
  --stages 2 --microbatches 4 --schedule 2bw --resume "$D/ck"
expect_error "--async-fix pipemare refused with 2bw" "fixed by its two weight versions" "$P" train $TINY --steps 1 \
  --stages 2 --microbatches 4 --schedule 2bw --async-fix pipemare
expect_error "--async-fix refused with 1f1b" "needs an asynchronous schedule" "$P" train $TINY --steps 1 \
  --stages 2 --microbatches 4 --schedule 1f1b --async-fix predict
expect_error "--async-fix: a bad name" "must be none, nesterov, pipemare or predict" "$P" train $TINY --steps 1 \
  --stages 2 --microbatches 4 --schedule pipedream --async-fix bogus
# --async-depth: the metrics of 2bw with every stage admitting P forwards equal the 1f1b order's
"$P" train $TINY --steps 4 --stages 2 --microbatches 4 --schedule 2bw --metrics "$D/d0.jsonl" > "$D/d0.txt" 2>&1
"$P" train $TINY --steps 4 --stages 2 --microbatches 4 --schedule 2bw --async-depth 2 --metrics "$D/d2.jsonl" > "$D/d2.txt" 2>&1
[ -s "$D/d2.jsonl" ] && [ "$(grep -o '"loss":[^,]*' "$D/d0.jsonl")" = "$(grep -o '"loss":[^,]*' "$D/d2.jsonl")" ] \
  && ok "2bw --async-depth 2: the same losses as the 1f1b order" || fail "2bw depth" "$(tail -2 "$D/d2.txt")"
expect_error "--async-depth refused with 1f1b" "only for the asynchronous schedules" "$P" train $TINY --steps 1 \
  --stages 2 --microbatches 4 --schedule 1f1b --async-depth 2
expect_error "2bw --async-depth above P refused" "async depth must be in 0..P=2" "$P" train $TINY --steps 1 \
  --stages 2 --microbatches 4 --schedule 2bw --async-depth 3
expect_error "--defer-tie refused with 2bw" "defer-tie works on pipedream" "$P" train $TINY --steps 1 \
  --stages 2 --microbatches 4 --schedule 2bw --defer-tie
expect_error "--defer-tie refused with 1f1b" "defer-tie works on pipedream" "$P" train $TINY --steps 1 \
  --stages 2 --microbatches 4 --schedule 1f1b --defer-tie
done_tests
