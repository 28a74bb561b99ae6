#!/usr/bin/env bash
# Going on in place (docs/recovery.md "In place"; issue 22 item 3): `pipetrain launch --np 4
# --recycle` of 2 stages x 2 replicas over Open MPI (mpirun --enable-recovery), a rank killed with
# kill -9 from outside: the replica that lost it is dropped, the other replica's two processes go
# on (the same pids: no restart) from the newest snapshot with the dead replica's microbatches
# (bitwise a --dp 1 --microbatches 4 job resumed from that snapshot), and reach the last step with the loss of the uninterrupted run within 1e-3 relative (a --dp 1
# summation order), each of the four ranks killed in turn; the kills at a reduction and in a
# snapshot's writer too (--kill-at). A second kill, with one replica left, is restarted with the
# whole layout. The transport's recovery mode on its own: tests/aux_mpi_recover.c. Where it cannot work, train --recycle refuses: --dp 1, --zero 1, --tp 2, threads,
# no snapshots; launch --recycle without --np. In place is launch's default (no flag): the kills
# above run without --recycle (rank 0's with it), a restart priced at 1000 s
# (PIPETRAIN_TEST_RESTART_S: the default's rule then always goes on in place); priced at 0 the
# default restarts; --no-recycle restarts (mpirun without --enable-recovery); where the flags do
# not allow it (--dp 1, --tp 2) the default runs the job as before. Every run is bounded.
. "$(dirname "$0")/lib.sh"
mpi_env 120
D=$TEST_TMP/recover_recycle
SNAP=/dev/shm/pt-test-recycle-$$
mkdir -p "$D"
trap 'rm -rf "$SNAP"' EXIT
cat > "$D/cfg.json" <<'J'
{"n_layer": 4, "n_head": 2, "n_embd": 32, "vocab_size": 256, "n_positions": 32}
J
for i in $(seq 1 200); do echo "the quick brown fox jumps over the lazy dog $((i % 7))"; done > "$D/text.txt"
STEPS=200
args="--config $D/cfg.json --data $D/text.txt --batch 8 --seq 16 --lr 3e-3 --grad-clip 0.5 --steps $STEPS --stages 2 --dp 2 --microbatches 2"
close() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "") { print 0; exit } d = (a - b) / b; if (d < 0) d = -d; print (d <= 1e-3) ? 1 : 0 }'; }
last_step() { tail -1 "$1" | sed 's/{"step":\([0-9]*\).*/\1/'; }
ev() { grep "\"event\":\"$2\"" "$1" | sed -n "${3}p"; }
field() { echo "$1" | sed -n "s/.*\"$2\":\([0-9.e+-]*\).*/\1/p"; }
# sup OUT FLAGS...: launch (MODE: its in-place flag, none: the default) in the background (lp),
# metrics $D/l.jsonl; a restart priced at PRICE s (1000: the default goes on in place)
MODE=""; PRICE=1000
sup() {
  local out=$1; shift
  rm -rf "$SNAP" "$D/l.jsonl" "$D/l.events.jsonl"
  PIPETRAIN_TEST_RESTART_S=$PRICE timeout "$JOB_LIMIT_S" "$P" launch --np 4 $MODE -x ASAN_OPTIONS --snapshot-dir "$SNAP" -- train $args \
    --snapshot-every 1 --metrics "$D/l.jsonl" "$@" > "$out" 2>&1 < /dev/null &
  lp=$!
}
# kill_at_step W K: kill -9 rank W's process once its heartbeat reaches step K (60 s bound);
# pids gets every rank's pid at that moment ("" when the job ended first)
kill_at_step() {
  local w=$1 k=$2 s pid; pids=""
  for _ in $(seq 1 6000); do
    s=""; [ -f "$SNAP/rank-$w/heartbeat" ] && read -r s pid _ < "$SNAP/rank-$w/heartbeat"
    if [ -n "$s" ] && [ "$s" -ge "$k" ]; then
      for r in 0 1 2 3; do pids="$pids $(cut -d' ' -f2 "$SNAP/rank-$r/heartbeat" 2>/dev/null)"; done
      kill -9 "$pid"; return
    fi
    kill -0 $lp 2>/dev/null || return
    sleep 0.01
  done
}

# --- the transport's recovery mode (tests/aux_mpi_recover.c prints its own ok/FAIL lines)
timeout "$JOB_LIMIT_S" mpirun --allow-run-as-root --oversubscribe --enable-recovery -x ASAN_OPTIONS -np 4 \
  "$BUILD/tests/aux_mpi_recover" > "$D/aux.out" 2> "$D/aux.err" < /dev/null
rc=$?
grep -E '^(ok|FAIL) ' "$D/aux.out"
[ $rc = 0 ] && [ "$(grep -c '^ok ' "$D/aux.out")" = 8 ] && ok "recover: the recovery-mode program ran every check" \
  || fail "recover: the recovery-mode program" "rc $rc: $(grep -v '^ok' "$D/aux.out" "$D/aux.err" | head -3)"

mpi 4 train $args --metrics "$D/ref.jsonl" > "$D/ref.out" 2>&1 || fail "reference MPI run" "$(tail -3 "$D/ref.out")"
ref=$(last_loss "$D/ref.jsonl")

# --- each rank killed from outside: its replica dropped, the other goes on in the same processes
for w in 0 1 2 3; do
  MODE=""; [ $w = 0 ] && MODE=--recycle
  sup "$D/k$w.out"
  kill_at_step $w 20
  wait $lp; rc=$?
  keep=$(echo $pids | awk -v w=$w '{ d = int(w / 2); o = 1 - d; print $(2 * o + 1), $(2 * o + 2) }')
  now=$(for r in 0 1; do cut -d' ' -f2 "$SNAP/rank-$r/heartbeat" 2>/dev/null; done | tr '\n' ' ' | sed 's/ $//')
  rec=$(ev "$D/l.events.jsonl" recovered 1)
  lost=$(field "$rec" steps_lost)
  if [ $rc = 0 ] && [ -n "$pids" ] && grep -q "\"who\":\"rank $w\",\"noticed\":\"exit\",\"attempt\":1,\"in_place\":true" "$D/l.events.jsonl" \
     && echo "$rec" | grep -q '"in_place":true' && [ "${lost:-9}" -le 1 ] && [ "$now" = "$keep" ] \
     && [ "$(last_step "$D/l.jsonl")" = $STEPS ] && ! grep -q "restart 1" "$D/k$w.out"; then
    ok "recycle: rank $w killed (${MODE:-the default}): its replica dropped in place, the same processes ($now) reach step $STEPS, $lost step(s) repeated, $(field "$rec" seconds_lost | cut -c1-5) s from noticing to the next step"
  else
    fail "recycle: rank $w killed" "rc $rc, pids before '$pids', going on '$now' (want '$keep'), lost '$lost', last $(last_step "$D/l.jsonl"): $(grep '^launch' "$D/k$w.out" | tail -3)"
  fi
  [ "$(close "$(last_loss "$D/l.jsonl")" "$ref")" = 1 ] && ok "recycle: rank $w killed: the final loss within 1e-3 of the uninterrupted run" \
    || fail "recycle: rank $w killed: the final loss" "$(last_loss "$D/l.jsonl") vs $ref"
  if [ $w = 0 ]; then   # the same math as a --dp 1 job restarted from that snapshot with the lost replica's microbatches
    mpi 2 train ${args/--dp 2 --microbatches 2/--dp 1 --microbatches 4 --schedule zb-h1} --resume "$SNAP/recycle-restore-1" \
      --metrics "$D/r1.jsonl" > "$D/r1.out" 2>&1
    [ -n "$(last_loss "$D/r1.jsonl")" ] && [ "$(last_loss "$D/r1.jsonl")" = "$(last_loss "$D/l.jsonl")" ] \
      && grep -q "(4 microbatches each, zb-h1)" "$D/k0.out" \
      && ok "recycle: rank 0 killed: the final loss bitwise a --dp 1 --microbatches 4 --schedule zb-h1 run resumed from the same snapshot" \
      || fail "recycle: rank 0 killed: bitwise a --dp 1 run resumed" "$(last_loss "$D/r1.jsonl") vs $(last_loss "$D/l.jsonl"): $(tail -2 "$D/r1.out")"
  fi
done

# --- killed inside a reduction and inside a snapshot's writer (--kill-at)
for ph in reduce save; do
  sup "$D/p$ph.out" --kill-at "1@8:$ph"
  wait $lp; rc=$?
  if [ $rc = 0 ] && grep -q '"in_place":true' "$D/l.events.jsonl" && [ "$(grep -c '"event":"recovered"' "$D/l.events.jsonl")" = 1 ] \
     && [ "$(close "$(last_loss "$D/l.jsonl")" "$ref")" = 1 ] && [ "$(last_step "$D/l.jsonl")" = $STEPS ] \
     && [ -f "$SNAP/rank-0/finished" ] && [ -f "$SNAP/rank-1/finished" ]; then
    ok "recycle: rank 1 killed at its $ph of step 8: gone on in place, the final loss within 1e-3, the ranks left marked finished"
  else
    fail "recycle: rank 1 killed at its $ph" "rc $rc, loss $(last_loss "$D/l.jsonl") vs $ref: $(grep '^launch' "$D/p$ph.out" | tail -3)"
  fi
done

# --- two kills: the first in place, the second (one replica left) restarted with the whole layout
sup "$D/two.out"
kill_at_step 3 20
first=$pids
kill_at_step 0 60
wait $lp; rc=$?
r2=$(ev "$D/l.events.jsonl" recovered 2)
if [ $rc = 0 ] && [ -n "$first" ] && [ -n "$pids" ] && echo "$(ev "$D/l.events.jsonl" recovered 1)" | grep -q '"in_place":true' \
   && echo "$r2" | grep -q '"layout":"4 ranks (2 stages x 2 replicas)"' && ! echo "$r2" | grep -q in_place \
   && [ "$(last_step "$D/l.jsonl")" = $STEPS ] && [ "$(close "$(last_loss "$D/l.jsonl")" "$ref")" = 1 ]; then
  ok "recycle: a second kill with one replica left: restarted with 2 stages x 2 replicas, the final loss within 1e-3"
else
  fail "recycle: a second kill" "rc $rc, loss $(last_loss "$D/l.jsonl") vs $ref: $(grep '^launch' "$D/two.out" | tail -4)"
fi

# --- injected: rank 3 at step 8 (in place), then old rank 0, now rank 0 of the world left, at step 20
sup "$D/ka.out" --kill-at 3@8 --kill-at 0@20
wait $lp; rc=$?
if [ $rc = 0 ] && echo "$(ev "$D/l.events.jsonl" recovered 1)" | grep -q '"in_place":true' \
   && echo "$(ev "$D/l.events.jsonl" recovered 2)" | grep -q '"layout":"4 ranks (2 stages x 2 replicas)"' \
   && grep -q '"who":"rank 0","noticed":"exit","attempt":1,"message"' "$D/l.events.jsonl" && [ "$(last_step "$D/l.jsonl")" = $STEPS ] \
   && [ "$(close "$(last_loss "$D/l.jsonl")" "$ref")" = 1 ]; then
  ok "recycle: --kill-at 3@8 --kill-at 0@20: in place, then the renumbered kill fires and is restarted, loss within 1e-3"
else
  fail "recycle: --kill-at 3@8 --kill-at 0@20" "rc $rc: $(grep '^launch' "$D/ka.out" | tail -4)"
fi

# --- the default priced a restart at 0 s: restarts; --no-recycle: restarts without --enable-recovery
MODE=""; PRICE=0
sup "$D/d0.out" --kill-at 1@8
wait $lp; rc=$?
if [ $rc = 0 ] && grep -q "a restart instead of going on in place: the .* steps left" "$D/d0.out" && ! grep -q in_place "$D/l.events.jsonl" \
   && grep -q '"event":"recovered".*"layout":"4 ranks (2 stages x 2 replicas)"' "$D/l.events.jsonl" && [ "$(last_step "$D/l.jsonl")" = $STEPS ] \
   && [ "$(close "$(last_loss "$D/l.jsonl")" "$ref")" = 1 ]; then
  ok "recycle: the default with a restart cheaper than going on: restarted with the whole layout, the final loss within 1e-3"
else
  fail "recycle: the default priced a restart at 0" "rc $rc: $(grep '^launch' "$D/d0.out" | tail -4)"
fi
MODE=--no-recycle; PRICE=1000
sup "$D/no.out" --kill-at 2@8
wait $lp; rc=$?
if [ $rc = 0 ] && grep -q "no going on in place: --no-recycle" "$D/no.out" && ! grep -q in_place "$D/l.events.jsonl" \
   && grep -q '"event":"recovered".*"layout":"4 ranks (2 stages x 2 replicas)"' "$D/l.events.jsonl" && [ "$(last_step "$D/l.jsonl")" = $STEPS ]; then
  ok "recycle: --no-recycle: a lost rank restarts the whole layout"
else
  fail "recycle: --no-recycle" "rc $rc: $(grep '^launch' "$D/no.out" | tail -4)"
fi
MODE=""
for lay in "--stages 2 --dp 1:no replicas" "--stages 1 --dp 2 --tp 2:--tp > 1"; do
  rm -rf "$SNAP"
  PIPETRAIN_TEST_RESTART_S=1000 timeout "$JOB_LIMIT_S" "$P" launch --np $([ "${lay%%:*}" = "--stages 2 --dp 1" ] && echo 2 || echo 4) \
    -x ASAN_OPTIONS --snapshot-dir "$SNAP" -- train --config "$D/cfg.json" --data "$D/text.txt" --batch 8 --seq 16 --steps 3 \
    ${lay%%:*} --snapshot-every 1 > "$D/lay.out" 2>&1 < /dev/null
  rc=$?
  [ $rc = 0 ] && grep -q "no going on in place: ${lay#*:}" "$D/lay.out" && grep -q "the job ended at step 3" "$D/lay.out" \
    && ok "recycle: the default with ${lay%%:*}: the job runs as before, saying why not in place" \
    || fail "recycle: the default with ${lay%%:*}" "rc $rc: $(tail -3 "$D/lay.out")"
done
expect_error "recycle: launch --recycle --no-recycle refused" "--recycle and --no-recycle together" "$P" launch --np 4 --recycle --no-recycle -- train $args

# --- where it cannot work: refused before the first step
base="--config $D/cfg.json --data $D/text.txt --batch 8 --seq 16 --steps 2 --snapshot-every 1 --snapshot-dir $SNAP --recycle"
expect_error "recycle: --dp 1 refused" "--recycle needs data-parallel replicas" mpi 2 train $base --stages 2 --dp 1
expect_error "recycle: --zero 1 refused" "--recycle with --zero 1" mpi 4 train $base --stages 2 --dp 2 --zero 1
expect_error "recycle: --tp 2 refused" "--recycle with --tp 2" mpi 4 train $base --stages 1 --dp 2 --tp 2
expect_error "recycle: threads refused" "over MPI only" "$P" train $base --stages 2 --dp 2
expect_error "recycle: no snapshots refused" "give --snapshot-every" mpi 4 train --config "$D/cfg.json" --data "$D/text.txt" \
  --batch 8 --seq 16 --steps 2 --stages 2 --dp 2 --recycle
expect_error "recycle: launch --recycle without --np refused" "--recycle needs --np" "$P" launch --recycle -- train $args
done_tests
