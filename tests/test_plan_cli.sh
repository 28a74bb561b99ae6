#!/usr/bin/env bash
# CLI tests of `pipetrain profile` and `pipetrain plan`: the costs file and the plan file written,
# the human and --json outputs, the example clusters, and errors that name the flag or the field
# (bad cluster file, bad costs file, nothing fits). Needs only bash and grep.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
P=$PIPETRAIN
T=$TEST_TMP/plan_cli.$$
mkdir -p "$T"
CFG=tests/fixtures/gpt-tiny/config.json

# ---- profile
out=$($P profile --config $CFG --batch 1,2 --seq 8 --repeats 2 --out "$T/costs.json")
echo "$out" | grep -Eq '^ +2 +block ' && grep -q '"batches"' "$T/costs.json" && grep -q '"p2p_bytes"' "$T/costs.json" \
  && ok cli_profile_out || fail cli_profile_out "$out"
check cli_profile_stdout_json bash -c "$P profile --config $CFG --batch 1 --seq 4 --repeats 1 | grep -q '\"act_bytes\"'"
check cli_profile_help bash -c "$P profile --help | grep -q -- --repeats"
expect_error cli_profile_no_seq '--seq is required' $P profile --config $CFG --batch 1
expect_error cli_profile_bad_batch "--batch '1,x'" $P profile --config $CFG --batch 1,x --seq 8
expect_error cli_profile_seq_too_long 'n_positions' $P profile --config $CFG --batch 1 --seq 999

# ---- plan: human, --out, --json, --costs, examples
out=$($P plan --config $CFG --cluster examples/cluster-local.json --global-batch 8 --seq 16 --top 2 --out "$T/plan.json")
echo "$out" | grep -q '^#1  step ' && echo "$out" | grep -q '^#2  step ' && echo "$out" | grep -q 'split ' \
  && ok cli_plan_human || fail cli_plan_human "$out"
grep -q '"split":' "$T/plan.json" && grep -q '"predicted":' "$T/plan.json" && grep -q '"schedule":' "$T/plan.json" \
  && ok cli_plan_out || fail cli_plan_out "$(head -5 "$T/plan.json")"
js=$($P plan --config $CFG --cluster examples/cluster-local.json --global-batch 8 --seq 16 --json)
for k in plans step_time tokens_per_s bubble stage_memory split schedule dp stages; do
  echo "$js" | grep -q "\"$k\":" || fail cli_plan_json_keys "missing $k"
done
ok cli_plan_json_keys
check cli_plan_costs bash -c "$P plan --config $CFG --cluster examples/cluster-local.json --global-batch 8 --seq 8 --costs $T/costs.json | grep -q '^#1'"
check cli_plan_8gpu bash -c "$P plan --config examples/char-gpt.json --cluster examples/cluster-8gpu.json --global-batch 64 | grep -q '^#1'"
printf '{"n_layer": 96, "n_head": 64, "n_embd": 8192, "vocab_size": 50257, "n_positions": 2048}\n' >"$T/gpt96.json"
out=$($P plan --config "$T/gpt96.json" --cluster examples/cluster-hetero-1024.json --global-batch 1024 --top 1 --tp 1)
echo "$out" | grep -q '^#1  step ' && echo "$out" | grep -q '1024 devices' && ok cli_plan_hetero_1024 \
  || fail cli_plan_hetero_1024 "$out"
check cli_plan_schedules bash -c "$P plan --config $CFG --cluster examples/cluster-local.json --global-batch 8 --seq 16 --schedules gpipe --top 1 | grep -Eq 'gpipe|1 x'"

# ---- errors name the flag or the field
expect_error cli_plan_no_cluster '--cluster is required' $P plan --config $CFG --global-batch 8
expect_error cli_plan_no_batch '--global-batch is required' $P plan --config $CFG --cluster examples/cluster-local.json
expect_error cli_plan_bad_schedule "schedule 'chimera' is not one" \
  $P plan --config $CFG --cluster examples/cluster-local.json --global-batch 8 --schedules chimera
cat >"$T/bad.json" <<'EOF'
{"nodes": [{"devices": {"count": 2, "speed": 1, "memory": 0}, "link": {"bandwidth": 1e9, "latency": 0}}]}
EOF
expect_error cli_plan_bad_cluster_field 'bad.json: nodes\[0\]\.devices\.memory must be a positive number' \
  $P plan --config $CFG --cluster "$T/bad.json" --global-batch 8
printf '{"nodes": [' >"$T/trunc.json"
expect_error cli_plan_cluster_parse 'trunc.json: JSON parse error' $P plan --config $CFG --cluster "$T/trunc.json" --global-batch 8
sed 's/"f":[^,]*,/"f": "slow",/' "$T/costs.json" >"$T/badcosts.json"
# a costs file that is not a profile, repeats a size, or times a block at 0 (which used to fall
# back to the analytic model in silence) is an error naming the file and field
sed 's#pipetrain-costs/1#pipetrain-plan/1#' "$T/costs.json" >"$T/fmtcosts.json"
expect_error cli_plan_costs_wrong_format 'fmtcosts.json: format is "pipetrain-plan/1", not "pipetrain-costs/1"' \
  $P plan --config $CFG --cluster examples/cluster-local.json --global-batch 8 --seq 8 --costs "$T/fmtcosts.json"
echo '{"f": 1, "b": 1, "w": 1}' >"$T/simcosts.json"
expect_error cli_plan_costs_simulator_file "simcosts.json: config must be an object.*not the simulator's costs file" \
  $P plan --config $CFG --cluster examples/cluster-local.json --global-batch 8 --seq 8 --costs "$T/simcosts.json"
sed 's/"batch":\t2,/"batch":\t1,/' "$T/costs.json" >"$T/dupcosts.json"
expect_error cli_plan_costs_duplicate_batch 'dupcosts.json: batches\[1\]\.batch = 1 repeats batches\[0\]\.batch' \
  $P plan --config $CFG --cluster examples/cluster-local.json --global-batch 8 --seq 8 --costs "$T/dupcosts.json"
sed '/"block":/,/}/ s/"\([fbw]\)":\t[^,]*,/"\1":\t0,/' "$T/costs.json" >"$T/zerocosts.json"
expect_error cli_plan_costs_zero_block 'zerocosts.json: batches\[0\]\.layers\.block\.f is 0: a measured time is > 0' \
  $P plan --config $CFG --cluster examples/cluster-local.json --global-batch 8 --seq 8 --costs "$T/zerocosts.json"
expect_error cli_plan_bad_costs_field 'badcosts.json: batches\[0\]\.layers\.embedding\.f must be a number' \
  $P plan --config $CFG --cluster examples/cluster-local.json --global-batch 8 --costs "$T/badcosts.json"
cat >"$T/tiny-mem.json" <<'EOF'
{"nodes": [{"devices": {"count": 2, "speed": 1, "memory": 1000}, "link": {"bandwidth": 1e9, "latency": 0}}]}
EOF
expect_error cli_plan_nothing_fits 'nothing fits in memory.*Would fit' \
  $P plan --config $CFG --cluster "$T/tiny-mem.json" --global-batch 8 --seq 16

# ---- tensor parallelism and ZeRO-1: plan files, plan and simulate (docs/tensor-parallel.md)
CFG4=examples/char-gpt.json   # 4 heads
grep -q '"tp":' "$T/plan.json" && grep -q '"zero":' "$T/plan.json" && echo "$js" | grep -q '"tp":' \
  && ok cli_plan_tp_keys || fail cli_plan_tp_keys "$(head -8 "$T/plan.json")"
out=$($P plan --config $CFG4 --cluster examples/cluster-8gpu.json --global-batch 8 --seq 16 --tp 2 --zero 1 --top 1 --out "$T/tp2.json")
echo "$out" | grep -q 'tp 2 x dp' && grep -q '"tp":\s*2' "$T/tp2.json" && grep -q '"zero":\s*1' "$T/tp2.json" \
  && ok cli_plan_tp_fixed || fail cli_plan_tp_fixed "$out"
expect_error cli_plan_tp_heads 'tp 3 does not divide n_head 4' \
  $P plan --config $CFG4 --cluster examples/cluster-8gpu.json --global-batch 8 --seq 16 --tp 3
expect_error cli_plan_zero_value 'zero 2: it must be 0 or 1' \
  $P plan --config $CFG4 --cluster examples/cluster-8gpu.json --global-batch 8 --seq 16 --zero 2
js=$($P simulate --config $CFG4 --cluster examples/cluster-8gpu.json --schedule zb-h1 --stages 2 --microbatches 4 --tp 2 \
     --dp 2 --zero 1 --seq 16 --json)
echo "$js" | grep -q '"tp":2' && echo "$js" | grep -q '"model":{"dp":2,"zero":1' && echo "$js" | grep -q '"fits":true' \
  && ok cli_simulate_model_tp_json || fail cli_simulate_model_tp_json "$js"
out=$($P simulate --config $CFG4 --cluster examples/cluster-8gpu.json --plan "$T/tp2.json")
echo "$out" | grep -q '^model  *tp 2 x' && echo "$out" | grep -q 'TP all-reduce per stage' \
  && ok cli_simulate_plan_file || fail cli_simulate_plan_file "$out"
echo '{"stages": 4, "dp": 1, "tp": 4, "microbatches": 4, "microbatch_size": 1, "seq": 16, "chunks": 1,
      "schedule": "1f1b", "split": [1, 1, 1, 1]}' >"$T/tp4.json"
expect_error cli_simulate_plan_tp_too_big 'tp 4 x dp 1 x stages 4 = 16 devices, the cluster has 8' \
  $P simulate --config $CFG4 --cluster examples/cluster-8gpu.json --plan "$T/tp4.json"
expect_error cli_simulate_tp_needs_model '--tp.*need --config and --cluster' \
  $P simulate --schedule 1f1b --stages 2 --microbatches 4 --tp 2
expect_error cli_simulate_model_no_costs 'drop --cost' \
  $P simulate --config $CFG4 --cluster examples/cluster-8gpu.json --schedule 1f1b --stages 2 --microbatches 4 --cost f=1
cat >"$T/small-mem.json" <<'EOF'
{"nodes": [{"devices": {"count": 4, "speed": 1, "memory": 30000}, "link": {"bandwidth": 1e9, "latency": 0}}]}
EOF
err=$($P simulate --config $CFG4 --cluster "$T/small-mem.json" --schedule 1f1b --stages 2 --microbatches 4 --seq 16 2>&1 >/dev/null)
echo "$err" | grep -q '2 of 2 ranks need more memory than their devices have' && ok cli_simulate_model_memory_note \
  || fail cli_simulate_model_memory_note "$err"

# --tp-overlap and --tp-recompute: the model line, the JSON keys, and the layouts refused
out=$($P simulate --config $CFG4 --cluster examples/cluster-8gpu.json --schedule 1f1b --stages 2 --microbatches 4 \
  --microbatch-size 2 --seq 16 --tp 2 --tp-overlap --tp-recompute --json)
echo "$out" | grep -q '"tp_overlap":true' && echo "$out" | grep -q '"tp_recompute":true' \
  && ok cli_simulate_tp_overlap_recompute_json || fail cli_simulate_tp_overlap_recompute_json "$out"
out=$($P simulate --config $CFG4 --cluster examples/cluster-8gpu.json --schedule 1f1b --stages 2 --microbatches 4 \
  --microbatch-size 2 --seq 16 --tp 2 --tp-overlap --tp-recompute)
echo "$out" | grep -q '^model .*recompute comm-free, tp-overlap,' && ok cli_simulate_tp_overlap_model_line \
  || fail cli_simulate_tp_overlap_model_line "$out"
expect_error cli_simulate_tp_overlap_needs_tp2 'tp_overlap needs tp >= 2' \
  $P simulate --config $CFG4 --cluster examples/cluster-8gpu.json --schedule 1f1b --stages 2 --microbatches 4 --tp-overlap
expect_error cli_simulate_tp_recompute_not_with_recompute 'keep one' \
  $P simulate --config $CFG4 --cluster examples/cluster-8gpu.json --schedule 1f1b --stages 2 --microbatches 4 --tp 2 \
  --tp-recompute --recompute
expect_error cli_simulate_tp_overlap_needs_model '--tp-overlap.*need --config and --cluster' \
  $P simulate --schedule 1f1b --stages 2 --microbatches 4 --tp-overlap

done_tests
