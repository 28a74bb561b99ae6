#!/usr/bin/env bash
# Side work in the bubbles from the command line (docs/harvesting.md): eval_loss in the metrics
# equals `pipetrain eval` on the same checkpoint (pipelined and one process); side programs are
# gone after the run, after a rank dies, and after SIGTERM; bad input (a command that cannot
# start, an eval file with tokens outside the vocabulary, unknown kinds, flags without their
# partner) is refused before training, naming the flag and the file. The library's side (the
# timeline, stops, memory cap, failing tasks): tests/test_harvest.c.
. tests/lib.sh
BUILD=${BUILD:-build}
P=$PIPETRAIN
FX=tests/fixtures/gpt-tiny
D=$TEST_TMP/harvest_cli
mkdir -p "$D"
cat > "$D/cfg.json" <<'J'
{"n_layer": 4, "n_head": 4, "n_embd": 64, "vocab_size": 256, "n_positions": 32}
J
for i in $(seq 1 300); do echo "the quick brown fox jumps over the lazy dog $((i % 7))"; done > "$D/text.txt"
for i in $(seq 1 40); do echo "pack my box with five dozen liquor jugs $((i % 5))"; done > "$D/val.txt"
export OPENBLAS_NUM_THREADS=1
train() { "$P" train --config "$D/cfg.json" --data "$D/text.txt" --batch 8 --seq 32 --lr 3e-3 "$@"; }
# runs with side programs: a wider model, bubbles of milliseconds, room for a program's slot
cat > "$D/big.json" <<'J'
{"n_layer": 4, "n_head": 4, "n_embd": 128, "vocab_size": 256, "n_positions": 32}
J
big() { "$P" train --config "$D/big.json" --data "$D/text.txt" --batch 32 --seq 32 --lr 3e-3 "$@"; }
# the pid a side program wrote, "" until it has run
pid_of() { cat "$1" 2>/dev/null; }
# 0 when pid is gone or a zombie (killed, not reaped by whoever inherited it), within 10 s (a
# loaded machine)
dead() {
  local s i
  for i in $(seq 1 100); do
    s=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null); { [ -z "$s" ] || [ "$s" = Z ]; } && return 0; sleep 0.1
  done; return 1
}

# --- eval_loss against pipetrain eval, on the checkpoints of the same steps (every step saved;
# an evaluation due while the last one still runs in the bubbles is skipped, so the steps
# evaluated are read from the metrics line and, for two finished at the last step, the events)
eval_of() { "$P" eval --checkpoint "$1" --data "$D/val.txt" --batch 8 --seq 32 --batches 3 | awk '{print $2}'; }
# evals FILE...: "STEP LOSS" of every evaluation reported, the loss as %.9g
evals() { cat "$@" 2>/dev/null | grep -o '"eval_loss":[^,}]*,"eval_step":[0-9]*' | sed 's/"eval_loss":\([^,]*\),"eval_step":\(.*\)/\2 \1/' |
          awk '{ printf "%d %.9g\n", $1, $2 }' | sort -n -u; }
for layout in "pipe --stages 2 --microbatches 2" "single --threads 1"; do
  name=${layout%% *}; flags=${layout#"$name"}
  rm -rf "$D/run_$name"
  train --steps 7 $flags --eval-data "$D/val.txt" --eval-every 2 --eval-batches 3 \
    --save "$D/run_$name" --save-every 1 > "$D/out_$name" 2>&1
  evals "$D/run_$name/metrics.jsonl" "$D/run_$name/metrics.events.jsonl" > "$D/evals_$name"
  n=0; bad=""
  while read -r k loss; do
    n=$((n + 1)); b=$(eval_of "$D/run_$name/ckpt-$k")
    [ "$loss" = "$b" ] || bad="$bad step $k: $loss vs $b;"
  done < "$D/evals_$name"
  [ $n -ge 1 ] && [ -z "$bad" ] && grep -q '"eval_loss"' "$D/run_$name/metrics.jsonl" \
    && ok "eval ($name): every eval_loss reported ($n) equals pipetrain eval on that step's checkpoint" \
    || fail "eval ($name): every eval_loss reported equals pipetrain eval" "$n evaluations;$bad $(tail -3 "$D/out_$name")"
done
grep -q '"eval_loss":[^,]*,"eval_step":6' "$D/run_single/metrics.jsonl" && ok "eval (single): every due step is evaluated" \
  || fail "eval (single): every due step is evaluated" "$(cat "$D/evals_single")"
grep -q '"side_task"' "$D/run_pipe/metrics.events.jsonl" && ok "eval: its tasks are side_task events" \
  || fail "eval: its tasks are side_task events" "none in $D/run_pipe/metrics.events.jsonl"
# the two trainings differ in the last bits (wte's gradient is summed in another order: runtime.md)
a=$(awk '$1 == 2 { print $2 }' "$D/evals_pipe"); b=$(awk '$1 == 2 { print $2 }' "$D/evals_single")
awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; exit !(a != "" && (d < 0 ? -d : d) <= 1e-5 * b) }' \
  && ok "eval: pipelined and one process agree within 1e-5" || fail "eval: pipelined and one process agree within 1e-5" "'$a' vs '$b'"

# --- side programs: gone after the run, after a rank dies, after SIGTERM (on rank 1: its wait for
# rank 0's last gradients at the end of each step is long enough to run a program in)
rm -f "$D"/p*.pid
big --steps 30 --stages 2 --microbatches 2 --side-command "1:echo \$\$ > $D/p0.pid; while :; do :; done" \
  --side-command "1:sleep 1000 & echo \$! > $D/p1.pid; wait" --side-task busy:50,rank=0 --metrics "$D/m_cmd.jsonl" \
  --trace "$D/side.json" --svg "$D/side.svg" > "$D/out_cmd" 2>&1
rc=$?
p0=$(pid_of "$D/p0.pid"); p1=$(pid_of "$D/p1.pid")
[ $rc -eq 0 ] && [ -n "$p0" ] && [ -n "$p1" ] && dead "$p0" && dead "$p1" \
  && ok "side programs (and what they started) are gone after the run" \
  || fail "side programs (and what they started) are gone after the run" "rc $rc, pids '$p0' '$p1'; $(tail -3 "$D/out_cmd")"
grep -q 'side work: .* harvested; unused' "$D/out_cmd" && grep -q '"side_steps":[1-9]' "$D/m_cmd.jsonl" \
  && ok "side programs: the run reports the bubble harvested" || fail "side programs: the run reports the bubble harvested" "$(tail -4 "$D/out_cmd")"
# (the trace and the SVG draw the last step: drawn where it ran side steps, as it does unless a
# loaded machine left it no bubble long enough; then both are well-formed, with no side row)
if tail -1 "$D/m_cmd.jsonl" | grep -q '"side_steps":[1-9]'; then
  grep -q '"cat":"side"' "$D/side.json" && grep -q '"name":"thread_name","ph":"M","pid":0,"tid":3,"args":{"name":"side"}' "$D/side.json" \
    && ok "trace: side steps on their own track" || fail "trace: side steps on their own track" "no side spans in $D/side.json"
  xmllint --noout "$D/side.svg" 2>/dev/null && grep -q 'side task (in a bubble)' "$D/side.svg" \
    && ok "svg: side steps on their own row, well-formed" || fail "svg: side steps on their own row, well-formed" "$D/side.svg"
else
  grep -q '"traceEvents"' "$D/side.json" && ! grep -q '"cat":"side"' "$D/side.json" && xmllint --noout "$D/side.svg" 2>/dev/null \
    && ok "trace, svg: the last step ran no side step on this loaded machine: none drawn, both well-formed" \
    || fail "trace, svg: a last step without side steps" "$D/side.json, $D/side.svg"
fi
rm -f "$D"/p*.pid
# (the rank dies after 80 sends, 4 a step: at step 21, twice the room there was for the programs
# to start on a loaded machine)
big --steps 60 --stages 2 --microbatches 2 --timeout 5 --fail-rank 1 --fail-after 80 \
  --side-command "1:echo \$\$ > $D/p0.pid; while :; do :; done" \
  --side-command "1:sleep 1000 & echo \$! > $D/p1.pid; wait" > "$D/out_die" 2>&1
rc=$?
p0=$(pid_of "$D/p0.pid"); p1=$(pid_of "$D/p1.pid")
[ $rc -ne 0 ] && [ -n "$p0" ] && [ -n "$p1" ] && dead "$p0" && dead "$p1" \
  && ok "side programs are gone after a rank died" \
  || fail "side programs are gone after a rank died" "rc $rc, pids '$p0' '$p1' (empty: not started before the death); $(tail -3 "$D/out_die")"
rm -f "$D"/p*.pid
"$P" train --config "$D/big.json" --data "$D/text.txt" --batch 32 --seq 32 --steps 5000 --stages 2 \
  --microbatches 2 --side-command "1:echo \$\$ > $D/p0.pid; while :; do :; done" > "$D/out_term" 2>&1 &
tp=$!
for i in $(seq 1 300); do [ -s "$D/p0.pid" ] && break; sleep 0.1; done   # within 30 s
kill -TERM $tp; wait $tp; rc=$?; kill -9 $tp 2>/dev/null
p0=$(pid_of "$D/p0.pid")
[ -n "$p0" ] && [ $rc -ne 0 ] && dead "$p0" && ok "a side program is gone after SIGTERM to the trainer" \
  || fail "a side program is gone after SIGTERM to the trainer" "rc $rc, pid '$p0'"
out=$(big --steps 20 --stages 2 --microbatches 2 --side-command "exit 3" 2>&1)
echo "$out" | grep -q "finished (exit status 3)" && ok "a side program's exit status is reported" \
  || fail "a side program's exit status is reported" "$(echo "$out" | grep side | tail -3)"

# --- side training: the second model's losses equal pipetrain train of it alone (one thread)
cat > "$D/side.json" <<'J'
{"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 256, "n_positions": 32}
J
rm -rf "$D/run_side"
# (how many side steps fit depends on the bubbles: one is asked for, and the lines written so far
# must be the alone run's first ones)
big --steps 60 --stages 2 --microbatches 2 --side-train "$D/side.json" --side-data "$D/val.txt" \
  --side-steps 1 --metrics "$D/run_side/m.jsonl" > "$D/out_side" 2>&1
"$P" train --config "$D/side.json" --data "$D/val.txt" --batch 32 --seq 32 --steps 2 --threads 1 \
  --metrics "$D/run_side/alone.jsonl" > /dev/null 2>&1
a=$(grep -o '"loss":[^,]*,"lr":[^,]*,"grad_norm":[^,]*' "$D/run_side/m.side.jsonl" 2>/dev/null)
b=$(grep -o '"loss":[^,]*,"lr":[^,]*,"grad_norm":[^,]*' "$D/run_side/alone.jsonl" | head -1)
[ -n "$a" ] && [ "$a" = "$b" ] && ok "side training: its loss and norm equal pipetrain train of it alone" \
  || fail "side training: its loss and norm equal pipetrain train of it alone" "'$a' vs '$b'; $(grep side "$D/out_side" | tail -2)"
grep -q "train (.*side.jso.*) finished (1 steps" "$D/out_side" && ok "side training: finished after --side-steps, reported" \
  || fail "side training: finished after --side-steps, reported" "$(grep side "$D/out_side" | tail -2)"

# --- MPI: each process runs its own rank's tasks; the root evaluates (it holds the snapshot).
# (sanitizer builds: Open MPI's own leaks and internals are not ours, as in test_run_mpi.sh)
if command -v mpirun > /dev/null 2>&1; then
  rm -rf "$D/run_mpi"
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
  TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS:}suppressions=$PWD/tests/openmpi.tsan.supp" \
  timeout 120 mpirun --allow-run-as-root --oversubscribe -x ASAN_OPTIONS -x TSAN_OPTIONS -np 2 "$P" train \
    --config "$D/big.json" --data "$D/text.txt" --batch 32 --seq 32 --steps 16 --stages 2 --transport mpi \
    --side-task busy:50,rank=1 --eval-data "$D/val.txt" --eval-every 4 --eval-batches 1 \
    --metrics "$D/run_mpi/m.jsonl" < /dev/null > "$D/out_mpi" 2>&1
  rc=$?
  [ $rc -eq 0 ] && grep -q '"side_steps":[1-9]' "$D/run_mpi/m.jsonl" && grep -q '"eval_loss"' "$D/run_mpi/m.jsonl" \
    && ok "mpi: side steps on the other process's rank, eval_loss from the root" \
    || fail "mpi: side steps on the other process's rank, eval_loss from the root" "rc $rc; $(tail -3 "$D/out_mpi")"
  # the busy task's CPU comes to the root with its events: gathered, and with --adapt shared
  # among the ranks (an exchange of doubles that once left a side event's CPU out)
  rm -rf "$D/run_mpi_adapt"
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
  TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS:}suppressions=$PWD/tests/openmpi.tsan.supp" \
  timeout 120 mpirun --allow-run-as-root --oversubscribe -x ASAN_OPTIONS -x TSAN_OPTIONS -np 2 "$P" train \
    --config "$D/big.json" --data "$D/text.txt" --batch 32 --seq 32 --steps 16 --stages 2 --transport mpi \
    --adapt --side-task busy:50,rank=1 --metrics "$D/run_mpi_adapt/m.jsonl" < /dev/null > "$D/out_mpi_adapt" 2>&1
  for run in run_mpi run_mpi_adapt; do
    mcpu=$(grep -o '"side_cpu_s":[-0-9.e+]*' "$D/$run/m.jsonl" 2>/dev/null | cut -d: -f2 | awk '{ s += $1 } END { printf "%.6f", s }')
    awk -v c="$mcpu" 'BEGIN { exit !(c > 0) }' && ok "mpi: side_cpu_s counts the other process's side steps ($run: $mcpu s)" \
      || fail "mpi: side_cpu_s counts the other process's side steps ($run)" "side_cpu_s $mcpu; $(tail -3 "$D/out_${run#run_}")"
  done
fi

# --- simulate --side-step: 1f1b P=4 M=4 with unit costs idles 9 of 21 on each rank, in whole units
side_json() { "$P" simulate --schedule 1f1b --stages 4 --microbatches 4 --side-step "$1" --json | grep -o '"step":[^}]*}}'; }
side_json 1 | grep -q '"idle":36,"usable":36,"usable_fraction":1' && ok "simulate --side-step 1: every unit of the bubble is usable" \
  || fail "simulate --side-step 1: every unit of the bubble is usable" "$(side_json 1)"
side_json 100 | grep -q '"usable":0,' && ok "simulate --side-step longer than any bubble: nothing fits" \
  || fail "simulate --side-step longer than any bubble: nothing fits" "$(side_json 100)"
"$P" simulate --schedule 1f1b --stages 4 --microbatches 4 --side-step 2 | grep -q "^  all .*36 .*%" \
  && ok "simulate --side-step: a table per rank" || fail "simulate --side-step: a table per rank" "no 'all' line"
expect_error "bad: simulate --side-step 0" "--side-step must be > 0" "$P" simulate --schedule 1f1b --stages 2 --microbatches 2 --side-step 0

# --- bad input: refused before training, naming the flag and the file
expect_error "bad: a side command that cannot start" "--side-command 'no_such_program_xyz --x': cannot start no_such_program_xyz" \
  train --steps 2 --stages 2 --side-command "no_such_program_xyz --x"
expect_error "bad: a side command's path that is not executable" "--side-command.*$D/val.txt.*no such executable" \
  train --steps 2 --stages 2 --side-command "$D/val.txt"
out=$(train --steps 2 --stages 2 --side-command "no_such_program_xyz" 2>&1)
echo "$out" | grep -q "^step" && fail "bad: nothing trains before the side command is checked" "$out" \
  || ok "bad: nothing trains before the side command is checked"
# a token file (llm.c format) holding token 100, over the tiny model's vocabulary of 67
{ printf '\x88\xd8\x34\x01\x01\x00\x00\x00\x28\x00\x00\x00'; head -c 1012 /dev/zero
  for i in $(seq 1 20); do printf '\x05\x00\x64\x00'; done; } > "$D/oov.bin"
expect_error "bad: an eval file with tokens outside the vocabulary" "--eval-data: .*oov.bin.*out of the vocabulary" \
  "$P" train --config "$FX/config.json" --data "$FX/tokens.bin" --batch 2 --seq 4 --steps 2 --stages 2 --eval-data "$D/oov.bin"
expect_error "bad: a missing eval file" "--eval-data: .*nope.bin" train --steps 2 --eval-data "$D/nope.bin"
expect_error "bad: an unknown side task kind" "--side-task 'juggle:3'.*unknown side task kind 'juggle' \(known: busy, command" \
  train --steps 2 --stages 2 --side-task juggle:3
expect_error "bad: busy without its microseconds" "--side-task busy:x" train --steps 2 --stages 2 --side-task busy:x
expect_error "bad: side work in one process (no bubbles)" "--side-command needs a pipelined run" \
  train --steps 2 --side-command "true"
expect_error "bad: --eval-every without --eval-data" "--eval-every and --eval-batches need --eval-data" \
  train --steps 2 --eval-every 2
expect_error "bad: --side-mem that is no size" "--side-mem 'lots'" train --steps 2 --stages 2 --side-command true --side-mem lots
expect_error "bad: a pinned rank outside the job" "rank 5 is not in the job" \
  train --steps 2 --stages 2 --side-command "5:true"
printf '{"n_layer": 2, "n_head": 2,, "n_embd": 32}' > "$D/broken.json"
expect_error "bad: a side config that does not parse" "--side-train: .*broken.json.*parse error" \
  train --steps 2 --stages 2 --side-train "$D/broken.json" --side-data "$D/val.txt"
expect_error "bad: side data outside the side model's vocabulary" "--side-data: .*oov.bin.*out of the vocabulary" \
  train --steps 2 --stages 2 --side-train "$FX/config.json" --side-data "$D/oov.bin"
expect_error "bad: --side-data without --side-train" "--side-data and --side-steps need --side-train" \
  train --steps 2 --stages 2 --side-data "$D/val.txt"
expect_error "bad: eval without a checkpoint" "give --checkpoint" "$P" eval --data "$D/val.txt" --batch 8 --seq 32
done_tests
