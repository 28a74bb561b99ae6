#!/usr/bin/env bash
# The snapshots' peer copy (docs/recovery.md): 2 stages x 1 replica over Open MPI on two namespace
# hosts (tools/hosts.sh) and a spare: no replica holds rank 1's stage elsewhere, so each rank sends
# its generations to a rank on the other host (SNAP/rank-0/peer-1/ holds rank 1's). Host 1 lost
# (its link down, its processes killed, its memory gone: its rank's snapshot folder removed): the
# supervisor takes the spare and restores from the peer copy at host 0, not from the start, and the
# run ends with the loss of an uninterrupted run bitwise (the same layout). The same with 2 stages
# x 2 replicas and --zero 1 on 2 hosts of 2 slots: the moment slices of host 1's ranks have no
# other holder but their peer copies at host 0. Both with the copy priced 1000 times its cost
# (PIPETRAIN_TEST_PEER_COST: a large model's copy), so the budget sends only the forced even steps,
# the same on every rank: the restore still finds a step every piece is at. Bounded (each run 120 s), cleans up its hosts;
# skips where namespaces cannot be made.
. tests/lib.sh
H=tools/hosts.sh
export PT_HOSTS="rcv$(($$ % 1000))" PT_HOSTS_TIMEOUT=120
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
if ! why=$($H check 2>&1); then ok "recover peer: skipped: $why"; done_tests; fi
D=$TEST_TMP/recover_peer
SNAP=/dev/shm/pt-test-rpeer-$$
trap '$H down >/dev/null 2>&1; rm -rf "$SNAP"' EXIT
recover_hosts_case "$D" --stages 2 --microbatches 2
at_step() {   # at_step K CMD...: once rank 0's heartbeat reaches step K (within 60 s), CMD
  local k=$1 s; shift
  for _ in $(seq 1 600); do
    s=""; [ -f "$SNAP/rank-0/heartbeat" ] && read -r s _ < "$SNAP/rank-0/heartbeat"
    [ -n "$s" ] && [ "$s" -ge "$k" ] && { "$@"; return; }
    sleep 0.1
  done
}
host_dies() {   # the peer copies of rank 1 at host 0 must exist by now (a few generations sent)
  ls -d "$SNAP"/rank-0/peer-1/gen-* > "$D/peer_gens" 2>/dev/null
  ip -n "${PT_HOSTS}h$1" link set eth0 down; $H kill "$1"; rm -rf "$SNAP/rank-1"
}

check "recover peer: 3 hosts up" $H up 3
printf "10.77.0.1 slots=1\n10.77.0.2 slots=1\n10.77.0.3 slots=1\n" > "$D/hf3"
OPENBLAS_NUM_THREADS=1 "$PIPETRAIN" train $args --metrics "$D/ref.jsonl" > /dev/null 2>&1
ref=$(last_loss "$D/ref.jsonl")

rm -rf "$SNAP"
timeout 120 $H exec 0 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PT_HOSTS="$PT_HOSTS" \
  ASAN_OPTIONS="$ASAN_OPTIONS" PIPETRAIN_TEST_PEER_COST=1000 "$P" launch --np 2 --hostfile "$D/hf3" --spares 1 \
  $mpiargs -x PIPETRAIN_TEST_PEER_COST --snapshot-dir "$SNAP" \
  -- train $args --snapshot-every 1 --metrics "$D/p.jsonl" > "$D/p.out" 2>&1 < /dev/null &
lp=$!
at_step 10 host_dies 1
wait $lp
rc=$?
got=$(last_loss "$D/p.jsonl")
[ -s "$D/peer_gens" ] && ok "recover peer: rank 1's generations copied to host 0 ($(wc -l < "$D/peer_gens") kept there at step 10)" \
  || fail "recover peer: rank 1's generations copied to host 0" "no $SNAP/rank-0/peer-1/gen-*"
thinned=$(grep -o "[0-9]* left out (the copy's CPU budget" "$D/p.out" | tail -1 | cut -d' ' -f1)
if [ $rc = 0 ] && grep -q "spare host 10.77.0.3 takes its place" "$D/p.out" && grep -q '"from":"snapshot"' "$D/p.events.jsonl" \
   && [ "$got" = "$ref" ] && [ "$(tail -1 "$D/p.jsonl" | sed 's/{"step":\([0-9]*\).*/\1/')" = 40 ] && [ "${thinned:-0}" -gt 0 ]; then
  ok "recover peer: host 1 lost (--dp 1), the copy thinned to its forced even steps ($thinned left out): restored from the peer copy at host 0, step 40, the final loss bitwise ($(grep -o '"steps_lost":[0-9]*' "$D/p.events.jsonl" | tail -1))"
else
  fail "recover peer: host 1 lost (--dp 1)" "rc $rc, left out ${thinned:-none}, loss $got vs $ref, last step $(tail -1 "$D/p.jsonl" | sed 's/{"step":\([0-9]*\).*/\1/'), restored $(grep -o '"from":"[a-z]*","from_step":[0-9]*' "$D/p.events.jsonl" | tr '\n' ' '): $(grep '^launch' "$D/p.out" | tail -4)"
fi
# --- --zero 1, 2 x 2 on hosts of 2 slots: ranks 2 and 3 (host 1) send to rank 0 (host 0)
host_dies2() { ls -d "$SNAP"/rank-0/peer-2/gen-* "$SNAP"/rank-0/peer-3/gen-* > "$D/peer_gens2" 2>/dev/null
               ip -n "${PT_HOSTS}h$1" link set eth0 down; $H kill "$1"; rm -rf "$SNAP/rank-2" "$SNAP/rank-3"; }
ip -n "${PT_HOSTS}h1" link set eth0 up
printf "10.77.0.1 slots=2\n10.77.0.2 slots=2\n10.77.0.3 slots=2\n" > "$D/hf3z"
zargs="$args --dp 2 --zero 1"
OPENBLAS_NUM_THREADS=1 "$PIPETRAIN" train $zargs --metrics "$D/refz.jsonl" > /dev/null 2>&1
rm -rf "$SNAP"
timeout 120 $H exec 0 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PT_HOSTS="$PT_HOSTS" \
  ASAN_OPTIONS="$ASAN_OPTIONS" PIPETRAIN_TEST_PEER_COST=1000 "$P" launch --np 4 --hostfile "$D/hf3z" --spares 1 \
  $mpiargs -x PIPETRAIN_TEST_PEER_COST --snapshot-dir "$SNAP" \
  -- train $zargs --snapshot-every 1 --metrics "$D/z.jsonl" > "$D/z.out" 2>&1 < /dev/null &
lp=$!
at_step 10 host_dies2 1
wait $lp
rc=$?
got=$(last_loss "$D/z.jsonl")
if [ $rc = 0 ] && [ -s "$D/peer_gens2" ] && grep -q "spare host 10.77.0.3 takes its place" "$D/z.out" \
   && grep -q '"from":"snapshot"' "$D/z.events.jsonl" && [ "$got" = "$(last_loss "$D/refz.jsonl")" ]; then
  ok "recover peer: --zero 1, host 1 lost: its ranks' moment slices restored from their peer copies at host 0, the final loss bitwise"
else
  fail "recover peer: --zero 1, host 1 lost" "rc $rc, loss $got vs $(last_loss "$D/refz.jsonl"): $(grep '^launch' "$D/z.out" | tail -4)"
fi
$H down > /dev/null 2>&1
ip netns list 2>/dev/null | grep -q "^${PT_HOSTS}" && fail "recover peer: nothing left behind" "namespaces remain" \
  || ok "recover peer: nothing left behind"
done_tests
