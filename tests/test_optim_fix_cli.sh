# train's --async-fix default (docs/async.md "Corrections"): pipedream without the flag runs the
# Nesterov method (losses bitwise --async-fix nesterov), an explicit --async-fix none gives plain
# weight stashing with AdamW, an optimizer flag the user gives survives the default (--beta2,
# --optim), 2bw and schedule files default to none; the run's header says what was chosen.
. tests/lib.sh
P=$PIPETRAIN
D=$TEST_TMP/optim_fix_cli
mkdir -p "$D"
echo '{"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 256, "n_positions": 32}' > "$D/cfg.json"
for i in $(seq 1 200); do echo "the quick brown fox jumps over the lazy dog $((i % 7))"; done > "$D/text.txt"
# run NAME FLAGS...: a 2-stage pipedream-family run of 5 steps; its header in NAME.out, losses in NAME.jsonl
run() {
  local n=$1; shift
  "$P" train --config "$D/cfg.json" --data "$D/text.txt" --batch 8 --seq 16 --lr 3e-3 --steps 5 --stages 2 \
    --microbatches 4 --log-every 100 --metrics "$D/$n.jsonl" "$@" > "$D/$n.out" 2>&1 || fail "$n runs" "$(tail -3 "$D/$n.out")"
}
losses() { sed 's/.*"loss":\([0-9.]*\).*/\1/' "$1" 2>/dev/null | tr '\n' ' '; }
same() {   # same NAME A B: A's losses bitwise B's
  [ -s "$D/$2.jsonl" ] && [ "$(losses "$D/$2.jsonl")" = "$(losses "$D/$3.jsonl")" ] && ok "$1" \
    || fail "$1" "$(losses "$D/$2.jsonl") vs $(losses "$D/$3.jsonl")"
}
differ() {
  [ -s "$D/$2.jsonl" ] && [ -s "$D/$3.jsonl" ] && [ "$(losses "$D/$2.jsonl")" != "$(losses "$D/$3.jsonl")" ] && ok "$1" \
    || fail "$1" "both $(losses "$D/$2.jsonl")"
}
header() {   # header NAME FILE PATTERN: the run's "asynchronous:" line matches PATTERN (grep -E)
  grep -E -- "^asynchronous: $3" "$D/$2.out" > /dev/null && ok "$1" || fail "$1" "$(grep -m1 '^asynchronous' "$D/$2.out")"
}

run pd --schedule pipedream
run pd_nest --schedule pipedream --async-fix nesterov
run pd_none --schedule pipedream --async-fix none
same "pipedream's default is --async-fix nesterov (losses bitwise)" pd pd_nest
differ "an explicit --async-fix none is plain stashing, not the default" pd_none pd
header "header: the default said, with the way back" pd "--async-fix nesterov \(pipedream's default; --async-fix none: plain weight stashing\): nadamw, beta1 0.99, beta2 0.999, momentum decay 0.004"
header "header: explicit none, AdamW's betas" pd_none "--async-fix none: adamw, beta1 0.9, beta2 0.95 "
header "header: an explicit nesterov is not called the default" pd_nest "--async-fix nesterov: nadamw"

# a flag the user gives is kept: the default changes only what was not given
run pd_b2 --schedule pipedream --beta2 0.99
run pd_nest_b2 --schedule pipedream --async-fix nesterov --beta2 0.99
same "default nesterov keeps an explicit --beta2 (= --async-fix nesterov --beta2 0.99)" pd_b2 pd_nest_b2
differ "the explicit --beta2 changes the run" pd_b2 pd
header "header: --beta2 marked as given" pd_b2 "--async-fix nesterov \(pipedream's default.*beta2 0.99 \(given\)"
run pd_adam --schedule pipedream --optim adamw --beta1 0.9 --beta2 0.95
same "--optim adamw --beta1 --beta2 given: the default changes nothing left (= --async-fix none)" pd_adam pd_none
header "header: --optim adamw marked as given" pd_adam "--async-fix nesterov \(pipedream's default.*adamw \(given\), beta1 0.9 \(given\)"
run pd_md --schedule pipedream --momentum-decay 0.01
differ "an explicit --momentum-decay is kept" pd_md pd

# 2bw and schedule files: none by default
run bw --schedule 2bw
run bw_none --schedule 2bw --async-fix none
same "2bw's default is none (losses bitwise --async-fix none)" bw bw_none
header "header: 2bw's default said" bw "--async-fix none \(the default\): adamw"
"$P" schedule --schedule pipedream --stages 2 --microbatches 4 --csv > "$D/pd.csv"
run csv --schedule-file "$D/pd.csv"
same "a pipedream schedule file defaults to none" csv pd_none
run sync --schedule 1f1b
grep -q '^asynchronous' "$D/sync.out" && fail "1f1b: no asynchronous line" "$(grep -m1 '^asynchronous' "$D/sync.out")" \
  || ok "1f1b: no asynchronous line, no correction"
expect_error "--async-fix on 1f1b is still refused" "needs an asynchronous schedule" \
  "$P" train --config "$D/cfg.json" --data "$D/text.txt" --batch 8 --seq 16 --steps 1 --stages 2 --async-fix nesterov
done_tests
