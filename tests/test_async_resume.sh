#!/usr/bin/env bash
# Asynchronous and --dp-sync runs survive --save/--resume exactly (src/run/exec_rankstate.c): for
# pipedream + nesterov, pipemare, predict, 2bw and --dp-sync 4 (threads; and over MPI a save and a resume), N steps
# saved at step k and resumed to N give the uninterrupted run's losses and final weights and state
# bitwise, --dp-sync 4 saved inside an H-cycle (step 3) and with a change in flight (step 4, the
# overlap applies it at step 5). A checkpoint without the rank state (an older pipetrain's: version
# 3, no state files) still resumes, with a note, and then differs (the state matters); a damaged
# state file is an error naming it. --adapt stays refused with --dp-sync.
. "$(dirname "$0")/lib.sh"
mpi_env 180
D=$TEST_TMP/asyncres
mkdir -p "$D"
echo '{"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 256, "n_positions": 32}' > "$D/cfg.json"
for i in $(seq 1 200); do echo "the quick brown fox jumps over the lazy dog $((i % 7))"; done > "$D/text.txt"
base="train --config $D/cfg.json --data $D/text.txt --batch 8 --seq 16 --lr 3e-3 --log-every 100"
loss() { sed 's/.*"loss":\([0-9.]*\).*/\1/' "$1" | tr '\n' ' '; }
tail_loss() { sed 's/.*"loss":\([0-9.]*\).*/\1/' "$1" | tail -n "+$(($2 + 1))" | tr '\n' ' '; }
# same_files A B: every .safetensors file of checkpoint A is in B with the same bytes (weights,
# moments, rank state), and B has no other
same_files() {
  local f n=0
  [ "$(ls "$1" | grep -c safetensors)" = "$(ls "$2" | grep -c safetensors)" ] || return 1
  for f in "$1"/*.safetensors; do cmp -s "$f" "$2/$(basename "$f")" || return 1; n=$((n + 1)); done
  [ $n -gt 0 ]
}

# case NAME N K FLAGS...: the uninterrupted N-step run (saved at N) against a run saved every K
# steps, resumed from step K to N
case_resume() {
  local name=$1 n=$2 k=$3; shift 3
  local c="$D/$name"
  rm -rf "$c"; mkdir -p "$c"
  "$P" $base "$@" --steps $n --save "$c/full" --metrics "$c/full.jsonl" > "$c/full.out" 2>&1
  "$P" $base "$@" --steps $n --save "$c/a" --save-every $k --metrics "$c/a.jsonl" > "$c/a.out" 2>&1
  "$P" $base "$@" --steps $n --resume "$c/a/ckpt-$k" --save "$c/b" --metrics "$c/b.jsonl" > "$c/b.out" 2>&1
  if [ -s "$c/full.jsonl" ] && [ "$(loss "$c/a.jsonl")" = "$(loss "$c/full.jsonl")" ] &&
     [ -s "$c/b.jsonl" ] && [ "$(loss "$c/b.jsonl")" = "$(tail_loss "$c/full.jsonl" $k)" ]; then
    ok "$name: saved at step $k, resumed to $n: the uninterrupted run's losses bitwise"
  else
    fail "$name: resumed losses" "full $(loss "$c/full.jsonl") | resumed $(loss "$c/b.jsonl") | $(tail -2 "$c/b.out")"
  fi
  same_files "$c/full/ckpt-$n" "$c/b/ckpt-$n" && ok "$name: final weights, moments and rank state bitwise" \
    || fail "$name: final weights bitwise" "$(ls "$c/full/ckpt-$n" "$c/b/ckpt-$n" 2>&1 | tr '\n' ' ')"
}

# the asynchronous runs two steps a pass (--async-window 2: the next step's forwards overlap this
# step's backwards; a pass ends at the save), the same in the runs compared
async="--stages 2 --microbatches 4 --async-window 2"
case_resume pipedream-nesterov 8 4 $async --schedule pipedream --async-fix nesterov
case_resume pipedream-pipemare 8 4 $async --schedule pipedream --async-fix pipemare
case_resume pipedream-predict 8 4 $async --schedule pipedream --async-fix predict
case_resume 2bw 8 4 $async --schedule 2bw
case_resume 2bw-one-step-a-pass 6 3 --stages 2 --microbatches 4 --async-window 1 --schedule 2bw
dps="--stages 2 --dp 2 --microbatches 2 --dp-sync 4"
case_resume dp-sync-4-mid-cycle 10 3 $dps
case_resume dp-sync-4-in-flight 10 4 $dps
case_resume dp-sync-4-no-overlap 10 6 $dps --no-overlap
[ -s "$D/2bw/a/ckpt-4/state-1.safetensors" ] && ok "2bw: each rank's state file in the checkpoint" \
  || fail "2bw: state files" "$(ls "$D/2bw/a/ckpt-4")"

# an older checkpoint: no state files, manifest version 3 without layout.states: it resumes with a
# note, and the run then differs from the exact one (the state is what made it exact)
old_ckpt() {
  cp -r "$1" "$2"
  rm -f "$2"/state-*.safetensors
  sed -i 's/"version":[[:space:]]*4/"version": 3/' "$2/manifest.json"
}
for c in 2bw dp-sync-4-in-flight; do
  n=8; k=4; flags="$async --schedule 2bw"
  [ $c = 2bw ] || { n=10; k=4; flags=$dps; }
  old_ckpt "$D/$c/a/ckpt-$k" "$D/$c/old"
  "$P" $base $flags --steps $n --resume "$D/$c/old" --metrics "$D/$c/old.jsonl" > "$D/$c/old.out" 2>&1
  if grep -q "is not in the checkpoint" "$D/$c/old.out" && [ -s "$D/$c/old.jsonl" ] &&
     [ "$(loss "$D/$c/old.jsonl")" != "$(tail_loss "$D/$c/full.jsonl" $k)" ]; then
    ok "$c: a checkpoint without rank state (version 3) resumes with a note, and differs"
  else
    fail "$c: version 3 checkpoint" "$(loss "$D/$c/old.jsonl") vs $(tail_loss "$D/$c/full.jsonl" $k): $(tail -2 "$D/$c/old.out")"
  fi
done
# resumed under another layout (the split): the state is not used, with a note
"$P" $base --stages 2 --dp 1 --microbatches 2 --dp-sync 4 --steps 10 --resume "$D/dp-sync-4-mid-cycle/a/ckpt-3" \
  > "$D/lay.out" 2>&1 && grep -q "saved under another layout" "$D/lay.out" \
  && ok "dp-sync: resumed under another layout, the state is left with a note" \
  || fail "dp-sync: another layout" "$(tail -2 "$D/lay.out")"

# damaged state: a flipped byte, a truncated file
cp -r "$D/2bw/a/ckpt-4" "$D/bad1"
printf '\x55' | dd of="$D/bad1/state-1.safetensors" bs=1 seek=200 conv=notrunc 2> /dev/null
expect_error "a corrupted state file: error naming it" "state-1.safetensors: checksum mismatch" \
  "$P" $base $async --schedule 2bw --steps 8 --resume "$D/bad1"
cp -r "$D/2bw/a/ckpt-4" "$D/bad2"
truncate -s 100 "$D/bad2/state-0.safetensors"
expect_error "a truncated state file: error naming it" "state-0.safetensors: 100 bytes, manifest says" \
  "$P" $base $async --schedule 2bw --steps 8 --resume "$D/bad2"
expect_error "--dp-sync with --adapt still refused" "--adapt with --dp-sync 4 is not supported" \
  "$P" $base $dps --steps 4 --adapt

# MPI: --dp-sync 4 saved with a change in flight, resumed over mpirun: the threads run's numbers
c="$D/dp-sync-4-in-flight"
if mpi 4 $base $dps --transport mpi --steps 10 --resume "$c/a/ckpt-4" --save "$c/m" --metrics "$c/m.jsonl" \
     > "$c/m.out" 2>&1 && [ "$(loss "$c/m.jsonl")" = "$(tail_loss "$c/full.jsonl" 4)" ] &&
   same_files "$c/full/ckpt-10" "$c/m/ckpt-10"; then
  ok "dp-sync 4 over MPI: resumed with a change in flight, the uninterrupted losses and weights bitwise"
else
  fail "dp-sync 4 over MPI resume" "$(loss "$c/m.jsonl") vs $(tail_loss "$c/full.jsonl" 4): $(tail -3 "$c/m.out")"
fi
if mpi 4 $base $dps --transport mpi --steps 5 --save "$c/ms" --save-every 4 > "$c/ms.out" 2>&1 &&
   same_files "$c/a/ckpt-4" "$c/ms/ckpt-4"; then
  ok "dp-sync 4 over MPI: the save with a change in flight holds the threads run's files bitwise"
else
  fail "dp-sync 4 over MPI save" "$(tail -3 "$c/ms.out")"
fi
done_tests
