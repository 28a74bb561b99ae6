#!/usr/bin/env bash
# Recovery across hosts (tools/hosts.sh: network namespaces; docs/recovery.md): `pipetrain launch`
# of 2 stages x 2 replicas on 2 hosts of 2 slots. A rank killed: restarted on the same hosts, the
# loss of an uninterrupted run bitwise. A whole host lost (its link down, its processes killed, its
# memory gone: its ranks' snapshot folders removed): the supervisor finds it does not answer,
# re-plans to 2 stages x 1 replica on the host left (the same global batch), restores from the
# replica's snapshots on the surviving host, and ends the run with the loss of the uninterrupted
# one within 1e-3 relative (another summation order); with a spare host it keeps the layout.
# Bounded (each run 120 s), cleans up its hosts; skips where namespaces cannot be made.
. tests/lib.sh
H=tools/hosts.sh
export PT_HOSTS="rc$(($$ % 10000))" PT_HOSTS_TIMEOUT=120
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
if ! why=$($H check 2>&1); then ok "recover hosts: skipped: $why"; done_tests; fi
D=$TEST_TMP/recover_hosts
SNAP=/dev/shm/pt-test-rhosts-$$
trap '$H down >/dev/null 2>&1; rm -rf "$SNAP"' EXIT
recover_hosts_case "$D" --stages 2 --dp 2 --microbatches 2
# sup HOSTFILE NP OUT [LAUNCH FLAGS] -- TRAIN FLAGS: pipetrain launch from host 0, in the background
sup() {
  local hf=$1 np=$2 out=$3; shift 3
  timeout 120 $H exec 0 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PT_HOSTS="$PT_HOSTS" \
    ASAN_OPTIONS="$ASAN_OPTIONS" "$P" launch --np "$np" --hostfile "$hf" $mpiargs --snapshot-dir "$SNAP" "$@" \
    > "$out" 2>&1 < /dev/null
}
# at_step K CMD...: once rank 0's heartbeat reaches step K (within 60 s), CMD
at_step() {
  local k=$1 s; shift
  for _ in $(seq 1 600); do
    s=""; [ -f "$SNAP/rank-0/heartbeat" ] && read -r s _ < "$SNAP/rank-0/heartbeat"
    [ -n "$s" ] && [ "$s" -ge "$k" ] && { "$@"; return; }
    sleep 0.1
  done
}
# host_dies K: its link down first (it no longer answers), then its processes, then its memory
host_dies() { ip -n "${PT_HOSTS}h$1" link set eth0 down; $H kill "$1"; rm -rf "$SNAP/rank-2" "$SNAP/rank-3"; }

check "recover hosts: 3 hosts up" $H up 3
printf "10.77.0.1 slots=2\n10.77.0.2 slots=2\n" > "$D/hf2"
printf "10.77.0.1 slots=2\n10.77.0.2 slots=2\n10.77.0.3 slots=2\n" > "$D/hf3"
OPENBLAS_NUM_THREADS=1 "$PIPETRAIN" train $args --metrics "$D/ref.jsonl" > /dev/null 2>&1
ref=$(last_loss "$D/ref.jsonl")

# --- a rank killed on host 1: the same layout again, bitwise
rm -rf "$SNAP" "$D/k.jsonl" "$D/k.events.jsonl"
sup "$D/hf2" 4 "$D/k.out" -- train $args --snapshot-every 1 --kill-at 3@9 --metrics "$D/k.jsonl"
[ $? = 0 ] && [ "$(last_loss "$D/k.jsonl")" = "$ref" ] && grep -q '"who":"rank 3"' "$D/k.events.jsonl" \
  && ok "recover hosts: rank 3 killed on host 1: recovered on the same hosts, the final loss bitwise" \
  || fail "recover hosts: rank 3 killed on host 1" "$(last_loss "$D/k.jsonl") vs $ref: $(grep '^launch' "$D/k.out" | tail -3)"

# --- host 1 lost, no spare: 2 stages x 1 replica on host 0
rm -rf "$SNAP" "$D/h.jsonl" "$D/h.events.jsonl"
sup "$D/hf2" 4 "$D/h.out" -- train $args --snapshot-every 1 --metrics "$D/h.jsonl" &
lp=$!
at_step 10 host_dies 1
wait $lp
rc=$?
got=$(last_loss "$D/h.jsonl")
rel=$(awk -v a="$got" -v b="$ref" 'BEGIN { d = (a - b) / b; if (d < 0) d = -d; print (d <= 1e-3) ? 1 : 0 }')
if [ $rc = 0 ] && grep -q "re-planned: 2 stages x 1 replicas" "$D/h.out" && grep -q "from snapshot" "$D/h.out" && [ "$rel" = 1 ] \
   && grep -q '"who":"host 10.77.0.2' "$D/h.events.jsonl" \
   && [ "$(tail -1 "$D/h.jsonl" | sed 's/{"step":\([0-9]*\).*/\1/')" = 40 ]; then
  ok "recover hosts: host 1 lost: named, re-planned to 2 x 1 on host 0 from the replica's snapshots, step 40, loss within 1e-3"
else
  fail "recover hosts: host 1 lost" "rc $rc, loss $got vs $ref: $(grep '^launch' "$D/h.out" | tail -4)"
fi
ip -n "${PT_HOSTS}h1" link set eth0 up

# --- host 1 lost with a spare (host 2): the layout kept
rm -rf "$SNAP" "$D/s.jsonl" "$D/s.events.jsonl"
sup "$D/hf3" 4 "$D/s.out" --spares 1 -- train $args --snapshot-every 1 --metrics "$D/s.jsonl" &
lp=$!
at_step 10 host_dies 1
wait $lp
rc=$?
got=$(last_loss "$D/s.jsonl")
if [ $rc = 0 ] && grep -q "spare host 10.77.0.3 takes its place" "$D/s.out" && [ "$got" = "$ref" ]; then
  ok "recover hosts: host 1 lost with a spare: host 2 takes its place, the layout kept, the final loss bitwise"
else
  fail "recover hosts: host 1 lost with a spare" "rc $rc, loss $got vs $ref: $(grep '^launch' "$D/s.out" | tail -4)"
fi
$H down > /dev/null 2>&1
ip netns list 2>/dev/null | grep -q "^${PT_HOSTS}" && fail "recover hosts: nothing left behind" "namespaces remain" \
  || ok "recover hosts: nothing left behind"
done_tests
