#!/usr/bin/env bash
# CLI tests of `pipetrain schedule` and `pipetrain simulate`: output shapes, --json keys and
# values for a case with known answers (1f1b P=4 M=8: iteration 33, bubble 9/33), files written,
# and errors that name the bad flag, field or CSV cell. Needs only bash and grep.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
P=$PIPETRAIN
T=$TEST_TMP/cli_sched.$$
mkdir -p "$T"

# ---- schedule
out=$($P schedule --schedule 1f1b --stages 4 --microbatches 8)
[ "$(echo "$out" | grep -c '^rank ')" = 4 ] && echo "$out" | grep -q '0F0' && ok cli_schedule_grid \
  || fail cli_schedule_grid "expected 4 rank lines: $out"
$P schedule --schedule gpipe --stages 3 --microbatches 4 --csv >"$T/g.csv"
[ "$(wc -l <"$T/g.csv")" = 3 ] && head -c 4 "$T/g.csv" | grep -q '^0F0,' && ok cli_schedule_csv \
  || fail cli_schedule_csv "expected 3 CSV rows starting 0F0: $(head -2 "$T/g.csv")"
check cli_schedule_lower_has_sends bash -c "$P schedule --schedule 1f1b --stages 2 --microbatches 2 --lower | grep -q SEND_F"
check cli_schedule_interleaved_chunks bash -c "$P schedule --schedule interleaved-1f1b --stages 2 --microbatches 4 --chunks 2 | grep -q '3F0'"
check cli_schedule_help bash -c "$P schedule --help | grep -q -- --microbatches"

# ---- simulate: human, json, csv
out=$($P simulate --schedule 1f1b --stages 4 --microbatches 8)
echo "$out" | grep -Eq '^iteration time +33$' && echo "$out" | grep -Eq '^bubble fraction +0\.2727' \
  && echo "$out" | grep -Eq '^  stage 0 +4 ' && ok cli_simulate_human || fail cli_simulate_human "$out"
js=$($P simulate --schedule 1f1b --stages 4 --microbatches 8 --json)
for k in iteration_time bubble_fraction ideal_time peak_activations per_rank makespan critical_path; do
  echo "$js" | grep -q "\"$k\":" || fail cli_simulate_json_keys "missing $k"
done
echo "$js" | grep -q '"iteration_time":33,' && echo "$js" | grep -q '"ideal_time":24,' \
  && echo "$js" | grep -q '"peak_activations":\[4,3,2,1\]' && echo "$js" | grep -q '"per_rank":\[{"busy":24,"idle":9}' \
  && ok cli_simulate_json_values || fail cli_simulate_json_values "$(echo "$js" | head -c 300)"
[ "$(echo "$js" | wc -l)" = 1 ] && ok cli_simulate_json_one_line || fail cli_simulate_json_one_line "more than one line"
n=$($P simulate --schedule gpipe --stages 2 --microbatches 2 --csv | grep -c ',compute,')
[ "$n" = 12 ] && ok cli_simulate_csv_events || fail cli_simulate_csv_events "$n compute rows, want 2x(2F+2BW+REDUCE+STEP)"

# ---- simulate: cost model flags (gpipe P=4 M=8, F=1 BW=2: 33; slow link +2X; latency+transfer 6(L+T))
it() { "$@" --json | grep -o '"iteration_time":[0-9.e+-]*' | cut -d: -f2; }
[ "$(it $P simulate --schedule gpipe --stages 4 --microbatches 8 --slow-link 1-2:0.5)" = 34 ] \
  && ok cli_simulate_slow_link || fail cli_simulate_slow_link "want 34"
[ "$(it $P simulate --schedule gpipe --stages 4 --microbatches 8 --slow-link=1-2:0.5 --slow-link 2-3:0.25)" = 34.5 ] \
  && ok cli_simulate_slow_link_repeated || fail cli_simulate_slow_link_repeated "want 34.5"
[ "$(it $P simulate --schedule gpipe --stages 4 --microbatches 8 --latency 0.25 --bandwidth 4 --act-bytes 1)" = 36 ] \
  && ok cli_simulate_latency_bandwidth || fail cli_simulate_latency_bandwidth "want 33 + 6 x 0.5"
[ "$(it $P simulate --schedule gpipe --stages 2 --microbatches 2 --slow-stage 1:2)" = 15 ] \
  && ok cli_simulate_slow_stage || fail cli_simulate_slow_stage "want 15"
[ "$(it $P simulate --schedule gpipe --stages 2 --microbatches 2 --cost f=2,b=1,w=1)" = 12 ] \
  && ok cli_simulate_cost_spec || fail cli_simulate_cost_spec "want (2+2)(2+1)"
echo '{"f": [1, 3], "b": 1, "w": 1, "act_bytes": 10, "bandwidth": 0}' >"$T/costs.json"
[ "$(it $P simulate --schedule gpipe --stages 2 --microbatches 2 --costs "$T/costs.json")" = 13 ] \
  && ok cli_simulate_costs_file || fail cli_simulate_costs_file "want 1 + 3+3 (rank 1 F) + 2+2 (rank 1 BW) + 2 (rank 0 BW1) = 13"
[ "$(it $P simulate --schedule 1f1b --stages 4 --microbatches 8 --iterations 3)" = 33 ] \
  && ok cli_simulate_iterations || fail cli_simulate_iterations "want 33 per iteration"
check cli_simulate_post_validation bash -c "$P simulate --schedule 1f1b --stages 2 --microbatches 4 --iterations 2 --post-validation | grep -q post-validation"

# ---- files
$P simulate --schedule interleaved-1f1b --stages 2 --microbatches 4 --chunks 2 --trace "$T/t.json" --svg "$T/t.svg" >/dev/null
head -c 40 "$T/t.json" | grep -q traceEvents\\\|displayTimeUnit && grep -q '"ph":"X"' "$T/t.json" && grep -q '"ph":"s"' "$T/t.json" \
  && ok cli_simulate_trace_file || fail cli_simulate_trace_file "no trace events"
head -c 4 "$T/t.svg" | grep -q '<svg' && grep -q 'interleaved-1f1b' "$T/t.svg" && grep -q 'bubble' "$T/t.svg" \
  && ok cli_simulate_svg_file || fail cli_simulate_svg_file "not an SVG with a title"

# ---- schedule files: a CSV from `schedule --csv` simulates to the generator's numbers
$P schedule --schedule 1f1b --stages 4 --microbatches 8 --csv >"$T/1f1b.csv"
[ "$(it $P simulate --schedule-file "$T/1f1b.csv")" = 33 ] && ok cli_simulate_schedule_file \
  || fail cli_simulate_schedule_file "want 33"
# chimera's CSV (two pipes) round-trips with --pipes 2: the same simulation as the generator's
$P schedule --schedule chimera --stages 4 --microbatches 4 --csv >"$T/chimera.csv"
sim_cmp() { "$@" --cost f=1,b=2,w=1 --latency 0.1 --json | sed 's/"schedule":"[a-z0-9-]*"//g'; }
a=$(sim_cmp $P simulate --schedule-file "$T/chimera.csv" --pipes 2)
b=$(sim_cmp $P simulate --schedule chimera --stages 4 --microbatches 4)
[ -n "$a" ] && [ "$a" = "$b" ] && ok cli_simulate_chimera_csv_round_trip \
  || fail cli_simulate_chimera_csv_round_trip "$(echo "$a" | head -c 200) vs $(echo "$b" | head -c 200)"
expect_error cli_simulate_chimera_csv_hints_pipes 'chimera.csv: valid as 2 pipes: a chimera CSV needs --pipes 2' \
  $P simulate --schedule-file "$T/chimera.csv"
expect_error cli_err_pipes '--pipes must be >= 1' $P simulate --schedule-file "$T/chimera.csv" --pipes -1

# ---- errors name the parameter, field or cell
expect_error cli_err_no_schedule '--schedule' $P simulate --stages 2 --microbatches 2
expect_error cli_err_stages '--stages' $P simulate --schedule 1f1b --stages 0 --microbatches 2
expect_error cli_err_stages_schedule '--stages' $P schedule --schedule 1f1b --stages -1 --microbatches 2
expect_error cli_err_microbatches_number '--microbatches' $P simulate --schedule 1f1b --stages 2 --microbatches x
expect_error cli_err_unknown_schedule "unknown schedule 'nope'" $P simulate --schedule nope --stages 2 --microbatches 2
expect_error cli_err_unknown_flag "unknown flag '--bogus'" $P simulate --schedule 1f1b --stages 2 --microbatches 2 --bogus
expect_error cli_err_interleaved_divisible 'divisible' $P schedule --schedule interleaved-1f1b --stages 4 --microbatches 6
echo '{"links": [{"a": 1, "b": 9}]}' >"$T/badlink.json"
expect_error cli_err_costs_link_rank 'badlink.json: links\[0\].b = 9 is not a rank \(ranks 0..3\)' \
  $P simulate --schedule 1f1b --stages 4 --microbatches 4 --costs "$T/badlink.json"
echo '{"f": 1e999}' >"$T/inf.json"
expect_error cli_err_costs_infinite "inf.json: field 'f' = inf" $P simulate --schedule 1f1b --stages 2 --microbatches 2 --costs "$T/inf.json"
echo '{"act_byte": 10}' >"$T/typo.json"
expect_error cli_err_costs_unknown_key "typo.json: unknown field 'act_byte'.*act_bytes" \
  $P simulate --schedule 1f1b --stages 2 --microbatches 2 --costs "$T/typo.json"
expect_error cli_err_latency_infinite '--latency must be in 0' $P simulate --schedule 1f1b --stages 2 --microbatches 2 --latency inf
printf '0F0,0BW0\n' >"$T/one.csv"
# a huge schedule is refused before it is built (it used to exhaust memory): timeout keeps a
# regression from hanging the suite
expect_error cli_err_too_large 'too large to simulate: --stages 100000 x --microbatches 100000 .*the limit is' \
  timeout 20 $P simulate --schedule 1f1b --stages 100000 --microbatches 100000
expect_error cli_err_too_large_iterations 'too large to simulate: .* x 1000000 iterations = ' \
  timeout 20 $P simulate --schedule 1f1b --stages 4 --microbatches 8 --iterations 1000000
expect_error cli_err_too_large_file_iterations 'too large to simulate: --iterations 19000000 x 2 actions' \
  timeout 20 $P simulate --schedule-file "$T/one.csv" --iterations 19000000
expect_error cli_err_iterations '--iterations' $P simulate --schedule 1f1b --stages 2 --microbatches 2 --iterations 0
expect_error cli_err_bandwidth '--bandwidth' $P simulate --schedule 1f1b --stages 2 --microbatches 2 --bandwidth -3
expect_error cli_err_slow_link "--slow-link '1x2'" $P simulate --schedule 1f1b --stages 2 --microbatches 2 --slow-link 1x2
expect_error cli_err_slow_link_rank 'rank 7 is not in the pipeline .ranks must be in 0..1.' $P simulate --schedule 1f1b --stages 2 --microbatches 2 --slow-link 0-7:1
expect_error cli_err_slow_stage "--slow-stage '9:2'" $P simulate --schedule 1f1b --stages 2 --microbatches 2 --slow-stage 9:2
expect_error cli_err_cost_key "--cost: unknown key in 'z=1'" $P simulate --schedule 1f1b --stages 2 --microbatches 2 --cost f=1,z=1
echo '{"f": [1, 2, 3]}' >"$T/bad_costs.json"
expect_error cli_err_costs_field "bad_costs.json: field 'f'" $P simulate --schedule 1f1b --stages 2 --microbatches 2 --costs "$T/bad_costs.json"
expect_error cli_err_costs_missing 'nothere.json' $P simulate --schedule 1f1b --stages 2 --microbatches 2 --costs "$T/nothere.json"
printf '0F0,0XX1\n1F0\n' >"$T/bad.csv"
expect_error cli_err_csv_cell "bad.csv:1:2" $P simulate --schedule-file "$T/bad.csv"
printf '0F0,0BW0\n1BW0,1F0\n' >"$T/order.csv"
expect_error cli_err_csv_order 'rank 1' $P simulate --schedule-file "$T/order.csv"
expect_error cli_err_csv_stages_mismatch '--stages 3' $P simulate --schedule-file "$T/1f1b.csv" --stages 3
expect_error cli_err_json_and_csv 'exclude' $P simulate --schedule 1f1b --stages 2 --microbatches 2 --json --csv
expect_error cli_err_trace_path 'nodir/t.json' $P simulate --schedule 1f1b --stages 2 --microbatches 2 --trace "$T/nodir/t.json"
# greedy takes --mem-limit and the simulated costs (here a stage twice as slow)
js=$($P simulate --schedule greedy --stages 4 --microbatches 8 --mem-limit 2 --json 2>&1)
echo "$js" | grep -q '"peak_activations":\[2,2,' && ok cli_greedy_mem_limit_respected \
  || fail cli_greedy_mem_limit_respected "$(echo "$js" | grep -o '"peak_activations":[^]]*]')"
g=$($P simulate --schedule greedy --stages 4 --microbatches 8 --mem-limit 4 --cost f=1,b=2,w=1 --slow-stage 2:2 --json | grep -o '"iteration_time":[0-9.]*' | cut -d: -f2)
z=$($P simulate --schedule zb-h1 --stages 4 --microbatches 8 --cost f=1,b=2,w=1 --slow-stage 2:2 --json | grep -o '"iteration_time":[0-9.]*' | cut -d: -f2)
awk -v g="$g" -v z="$z" 'BEGIN{exit !(g != "" && g <= z)}' && ok cli_greedy_costs_not_worse_than_zb_h1 \
  || fail cli_greedy_costs_not_worse_than_zb_h1 "greedy $g, zb-h1 $z"
expect_error cli_err_mem_limit_negative 'mem-limit' $P simulate --schedule greedy --stages 2 --microbatches 2 --mem-limit -1

# ---- stragglers (docs/stragglers.md): the adaptive schedule, faults by iteration, --adapt
check cli_schedule_help_lists_adaptive bash -c "$P schedule --help | grep -q '^  adaptive '"
# unit costs, judged by the simulator: as fast as zb-h1 (27) and zb-h2, in zb-h1's memory (the tie goes to less)
check cli_schedule_adaptive_grid bash -c "$P schedule --schedule adaptive --stages 4 --microbatches 8 | grep -q '^rank 0: 0F0 0F1 0F2 0F3 0B0 0W0 0F4'"
# the worked example of issue 9: 109 (healthy 103 + 6) within 2P = 16; greedy now sees the delay too
[ "$(it $P simulate --schedule adaptive --stages 8 --microbatches 32 --slow-link 3-4:6 --mem-limit 16)" = 109 ] \
  && ok cli_adaptive_worked_example || fail cli_adaptive_worked_example "want 109"
[ "$(it $P simulate --schedule greedy --stages 8 --microbatches 32 --slow-link 3-4:6 --mem-limit 16)" = 109 ] \
  && ok cli_greedy_sees_link_delay || fail cli_greedy_sees_link_delay "want 109"
js=$($P simulate --schedule adaptive --stages 8 --microbatches 32 --slow-link 3-4:6 --mem-limit 8 --json)
echo "$js" | grep -q '"iteration_time":145,' && echo "$js" | grep -q '"adaptive":{"winner":"list ' \
  && echo "$js" | grep -q '"mem_needed":13,' && ok cli_adaptive_json_mem_needed \
  || fail cli_adaptive_json_mem_needed "$(echo "$js" | grep -o '"adaptive":{[^}]*}')"
err=$($P simulate --schedule adaptive --stages 8 --microbatches 32 --slow-link 3-4:6 --mem-limit 8 2>&1 >/dev/null)
echo "$err" | grep -q 'it needs --mem-limit 13 to come within 5%' && ok cli_adaptive_says_limit_needed \
  || fail cli_adaptive_says_limit_needed "$err"
# a fault over a window: only iteration 2 of 3 is slower (gpipe P=4 M=8: 33, +2 x 0.5)
js=$($P simulate --schedule gpipe --stages 4 --microbatches 8 --slow-link 1-2:0.5@2-2 --iterations 3 --json)
echo "$js" | grep -q '"per_iteration":\[{"time":33,"schedule":"gpipe"},{"time":34,"schedule":"gpipe"},{"time":33,' \
  && ok cli_simulate_fault_window_per_iteration || fail cli_simulate_fault_window_per_iteration "$(echo "$js" | grep -o '"per_iteration":[^]]*]')"
# --adapt: slow in iterations 3..6 of 10; switch for 4, back for 8
js=$($P simulate --schedule zb-h1 --stages 8 --microbatches 32 --slow-link 3-4:6@3-6 --iterations 10 --adapt --json)
names=$(echo "$js" | grep -o '"schedule":"[a-z0-9-]*"' | tail -n 10 | cut -d'"' -f4 | tr '\n' ' ')
[ "$names" = "zb-h1 zb-h1 zb-h1 adaptive adaptive adaptive adaptive zb-h1 zb-h1 zb-h1 " ] \
  && echo "$js" | grep -q '"mem_limit":8,' && ok cli_adapt_switches_after_onset_and_recovery \
  || fail cli_adapt_switches_after_onset_and_recovery "$names"
out=$($P simulate --schedule zb-h1 --stages 8 --microbatches 32 --slow-link 3-4:6@3- --iterations 4 --adapt --mem-limit 16)
echo "$out" | grep -Eq '^  4 +109 +adaptive' && echo "$out" | grep -q 'link 3-4 +6 per message' \
  && ok cli_adapt_human || fail cli_adapt_human "$out"
check cli_adapt_svg bash -c "$P simulate --schedule 1f1b --stages 2 --microbatches 4 --slow-stage 1:2@2 --iterations 3 --adapt --svg $T/a.svg 2>/dev/null; true"
expect_error cli_err_window_syntax "--slow-stage '1:2@2': the window after '@' must be FROM-TO or FROM-" \
  $P simulate --schedule 1f1b --stages 2 --microbatches 4 --slow-stage 1:2@2
expect_error cli_err_window_from_after_to "--slow-link '0-1:2@5-3': FROM 5 is after TO 3" \
  $P simulate --schedule 1f1b --stages 2 --microbatches 4 --slow-link 0-1:2@5-3
expect_error cli_err_slow_link_negative "--slow-link '0-1:-2': SECONDS must be in 0" \
  $P simulate --schedule 1f1b --stages 2 --microbatches 4 --slow-link 0-1:-2
expect_error cli_err_slow_stage_factor "--slow-stage '1:0.5': FACTOR must be in 1" \
  $P simulate --schedule 1f1b --stages 2 --microbatches 4 --slow-stage 1:0.5
expect_error cli_err_slow_link_not_neighbours "--slow-link '0-2:1': ranks 0 and 2 exchange no messages in zb-h1" \
  $P simulate --schedule zb-h1 --stages 4 --microbatches 4 --slow-link 0-2:1
expect_error cli_err_slow_link_after_last "--slow-link '0-1:1@3-': starts at iteration 3, after the last .--iterations 2." \
  $P simulate --schedule zb-h1 --stages 2 --microbatches 4 --slow-link 0-1:1@3- --iterations 2
expect_error cli_err_adapt_not_neighbours "--slow-link '0-2:1@2-': ranks 0 and 2 exchange no messages in zb-h1" \
  $P simulate --schedule zb-h1 --stages 4 --microbatches 4 --slow-link 0-2:1@2- --iterations 3 --adapt
expect_error cli_err_adapt_file '--adapt needs --schedule NAME' \
  $P simulate --schedule-file "$T/one.csv" --adapt
expect_error cli_err_adapt_post_validation 'drop --post-validation' \
  $P simulate --schedule zb-h1 --stages 2 --microbatches 4 --adapt --post-validation
expect_error cli_err_adapt_chunks 'one stage per rank; zb-v has several stages per rank' \
  $P simulate --schedule zb-v --stages 2 --microbatches 4 --adapt
rm -rf "$T"
done_tests
