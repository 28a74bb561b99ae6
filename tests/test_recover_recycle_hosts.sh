#!/usr/bin/env bash
# Going on in place across hosts (tools/hosts.sh: network namespaces; docs/recovery.md "In
# place"): `pipetrain launch --recycle` of 2 stages x 2 replicas on 2 hosts of 2 slots, rank 3 (host
# 1) killed with kill -9 from outside at step 10: replica 1 is dropped, replica 0's processes on
# host 0 go on (the same pids) with its microbatches, the run reaches step 40 with the loss of the
# uninterrupted run within 1e-3 relative, and mpirun (which under --enable-recovery does not end
# by itself across hosts) is ended by the supervisor. Then rank 0 (host 0) killed: replica 0
# dropped, replica 1 goes on on host 1. Bounded (each run 120 s); cleans up its hosts; skips where
# namespaces cannot be made.
. tests/lib.sh
H=tools/hosts.sh
export PT_HOSTS="ry$(($$ % 10000))" PT_HOSTS_TIMEOUT=120
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
if ! why=$($H check 2>&1); then ok "recycle hosts: skipped: $why"; done_tests; fi
D=$TEST_TMP/recycle_hosts
SNAP=/dev/shm/pt-test-ryhosts-$$
trap '$H down >/dev/null 2>&1; rm -rf "$SNAP"' EXIT
recover_hosts_case "$D" --stages 2 --dp 2 --microbatches 2
check "recycle hosts: 2 hosts up" $H up 2
printf "10.77.0.1 slots=2\n10.77.0.2 slots=2\n" > "$D/hf"
OPENBLAS_NUM_THREADS=1 "$PIPETRAIN" train $args --metrics "$D/ref.jsonl" > /dev/null 2>&1
ref=$(last_loss "$D/ref.jsonl")
close() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "") { print 0; exit } d = (a - b) / b; if (d < 0) d = -d; print (d <= 1e-3) ? 1 : 0 }'; }

for w in 3 0; do
  rm -rf "$SNAP" "$D/k.jsonl" "$D/k.events.jsonl"
  timeout 120 $H exec 0 env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PT_HOSTS="$PT_HOSTS" \
    ASAN_OPTIONS="$ASAN_OPTIONS" "$P" launch --np 4 --recycle --hostfile "$D/hf" $mpiargs --snapshot-dir "$SNAP" \
    -- train $args --snapshot-every 1 --metrics "$D/k.jsonl" > "$D/k$w.out" 2>&1 < /dev/null &
  lp=$!
  pids=""
  for _ in $(seq 1 600); do   # rank w's heartbeat at step 10 (60 s bound): every pid, then kill -9
    s=""; [ -f "$SNAP/rank-$w/heartbeat" ] && read -r s pid _ < "$SNAP/rank-$w/heartbeat"
    if [ -n "$s" ] && [ "$s" -ge 10 ]; then
      for r in 0 1 2 3; do pids="$pids $(cut -d' ' -f2 "$SNAP/rank-$r/heartbeat")"; done
      kill -9 "$pid"; break
    fi
    sleep 0.1
  done
  wait $lp; rc=$?
  keep=$(echo $pids | awk -v w=$w '{ o = 1 - int(w / 2); print $(2 * o + 1), $(2 * o + 2) }')
  now=$(for r in 0 1; do cut -d' ' -f2 "$SNAP/rank-$r/heartbeat" 2>/dev/null; done | tr '\n' ' ' | sed 's/ $//')
  got=$(last_loss "$D/k.jsonl")
  if [ $rc = 0 ] && [ -n "$pids" ] && grep -q '"event":"recovered".*"in_place":true' "$D/k.events.jsonl" && [ "$now" = "$keep" ] \
     && [ "$(tail -1 "$D/k.jsonl" | sed 's/{"step":\([0-9]*\).*/\1/')" = 40 ] && [ "$(close "$got" "$ref")" = 1 ]; then
    ok "recycle hosts: rank $w killed on host $((w / 2)): the other replica's processes ($now) go on in place to step 40, loss within 1e-3"
  else
    fail "recycle hosts: rank $w killed" "rc $rc, pids '$pids', going on '$now' (want '$keep'), loss $got vs $ref: $(grep '^launch' "$D/k$w.out" | tail -4)"
  fi
done
$H down > /dev/null 2>&1
ip netns list 2>/dev/null | grep -q "^${PT_HOSTS}" && fail "recycle hosts: nothing left behind" "namespaces remain" \
  || ok "recycle hosts: nothing left behind"
done_tests
