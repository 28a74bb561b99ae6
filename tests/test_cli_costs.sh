#!/usr/bin/env bash
# The two JSON costs files and their names: a profile's (`pipetrain profile` writes it, format
# "pipetrain-costs/1", for `plan --costs`) and the simulator's (hand-written, optional format
# "pipetrain-sim-costs/1", for `simulate --costs`). Each reader, handed the other's file, says
# which file it is and what it wants instead. The fields of each: test_cli_sched.sh, test_plan_cli.sh.
cd "$(dirname "$0")/.." || exit 1
. tests/lib.sh
P=$PIPETRAIN
T=$TEST_TMP/cli_costs.$$
mkdir -p "$T"
CFG=tests/fixtures/gpt-tiny/config.json
it() { "$@" --json | grep -o '"iteration_time":[0-9.e+-]*' | cut -d: -f2; }

$P profile --config $CFG --batch 1 --seq 4 --repeats 1 --out "$T/profile.json" >/dev/null
grep -Eq '"format":[[:space:]]*"pipetrain-costs/1"' "$T/profile.json" && ok cli_costs_profile_format \
  || fail cli_costs_profile_format "$(head -c 200 "$T/profile.json")"
expect_error cli_costs_simulate_refuses_a_profile_file \
  'profile.json is a profile costs file \(pipetrain-costs/1\) for `plan --costs`; simulate --costs takes a simulator costs file \(format "pipetrain-sim-costs/1"' \
  $P simulate --schedule gpipe --stages 2 --microbatches 2 --costs "$T/profile.json"

echo '{"format": "pipetrain-sim-costs/1", "f": [1, 3], "b": 1, "w": 1}' >"$T/sim.json"
[ "$(it $P simulate --schedule gpipe --stages 2 --microbatches 2 --costs "$T/sim.json")" = 13 ] \
  && ok cli_costs_simulate_takes_its_format || fail cli_costs_simulate_takes_its_format "want 13"
echo '{"f": [1, 3], "b": 1, "w": 1}' >"$T/sim_noformat.json"
[ "$(it $P simulate --schedule gpipe --stages 2 --microbatches 2 --costs "$T/sim_noformat.json")" = 13 ] \
  && ok cli_costs_simulate_format_optional || fail cli_costs_simulate_format_optional "want 13"
echo '{"format": "pipetrain-sim-costs/9", "f": 1}' >"$T/sim_other.json"
expect_error cli_costs_simulate_unknown_format 'sim_other.json: format is "pipetrain-sim-costs/9", not "pipetrain-sim-costs/1"' \
  $P simulate --schedule gpipe --stages 2 --microbatches 2 --costs "$T/sim_other.json"
expect_error cli_costs_plan_refuses_a_simulator_file \
  'sim.json is a simulator costs file \(pipetrain-sim-costs/1\) for `simulate --costs`; plan --costs takes a profile costs file \(format "pipetrain-costs/1", written by pipetrain profile\)' \
  $P plan --config $CFG --cluster examples/cluster-local.json --global-batch 8 --seq 4 --costs "$T/sim.json"
check cli_costs_plan_takes_a_profile_file \
  $P plan --config $CFG --cluster examples/cluster-local.json --global-batch 8 --seq 4 --costs "$T/profile.json"
rm -rf "$T"
done_tests
