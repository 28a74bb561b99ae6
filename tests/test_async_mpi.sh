#!/usr/bin/env bash
# Asynchronous pipelines over MPI (mpirun as root, oversubscribed): train --schedule 2bw and
# pipedream with each --async-fix (and --async-depth, --defer-tie, --async-window: 4 steps a pass by
# default here, 1 and 2 given) give the threads transport's losses bitwise (both sum in rank
# order), so tests/test_async.c's references (threads) carry over to processes.
. "$(dirname "$0")/lib.sh"
mpi_env 120        # a hang is a failure; a healthy run takes a few seconds
D=$TEST_TMP/async_mpi
mkdir -p "$D"
cat > "$D/cfg.json" <<'J'
{"n_layer": 4, "n_head": 2, "n_embd": 32, "vocab_size": 256, "n_positions": 32}
J
for i in $(seq 1 200); do echo "the quick brown fox jumps over the lazy dog $((i % 7))"; done > "$D/text.txt"
loss() { grep -o '"loss":[0-9.e+-]*' "$1"; }
base="train --config $D/cfg.json --data $D/text.txt --batch 8 --seq 16 --lr 3e-3 --steps 4"
while read -r np name flags; do
  n="train mpi -np $np $name $flags"
  rm -f "$D/m_mpi.jsonl" "$D/m_thr.jsonl"
  if ! mpi "$np" $base --schedule "$name" $flags --transport mpi --metrics "$D/m_mpi.jsonl" > "$D/out" 2>&1; then
    fail "$n" "$(tail -3 "$D/out")"; continue; fi
  "$P" $base --schedule "$name" $flags --metrics "$D/m_thr.jsonl" > /dev/null 2>&1
  [ -s "$D/m_thr.jsonl" ] && [ "$(loss "$D/m_mpi.jsonl")" = "$(loss "$D/m_thr.jsonl")" ] \
    && ok "$n: losses equal threads bitwise" \
    || fail "$n: losses equal threads bitwise" "$(loss "$D/m_mpi.jsonl" | tr '\n' ' ') vs $(loss "$D/m_thr.jsonl" | tr '\n' ' ')"
done <<'L'
4 2bw --stages 4 --microbatches 4
4 2bw --stages 2 --dp 2 --microbatches 4 --async-fix nesterov
4 pipedream --stages 2 --dp 2 --microbatches 2 --async-fix pipemare
4 pipedream --stages 4 --microbatches 4 --async-fix predict
4 pipedream --stages 4 --microbatches 4 --async-depth 4 --defer-tie --async-fix nesterov
4 pipedream --stages 2 --dp 2 --microbatches 2 --defer-tie
4 2bw --stages 4 --microbatches 4 --async-depth 4
4 pipedream --stages 4 --microbatches 4 --async-window 1 --defer-tie
4 pipedream --stages 2 --dp 2 --microbatches 2 --async-window 2 --defer-tie
4 2bw --stages 2 --dp 2 --microbatches 2 --async-window 1
L
done_tests
