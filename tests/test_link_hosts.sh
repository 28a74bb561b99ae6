#!/usr/bin/env bash
# The links as measured across two hosts (tools/hosts.sh: network namespaces, Open MPI over TCP),
# each host's link shaped by tc tbf to 8 Mbit/s (1 MB/s): the start probe and the run's own
# messages read about 1 MB/s each way, the prediction uses them, and --wire bf16 runs across the
# hosts with the losses of a threads run with --wire bf16 (bitwise). Skips with a reason where
# namespaces cannot be made; every mpirun bounded; the hosts removed on any exit.
. tests/lib.sh
H=tools/hosts.sh
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS:}suppressions=$PWD/tests/openmpi.tsan.supp"
export PT_HOSTS="lk$(($$ % 10000))" PT_HOSTS_TIMEOUT=90
if ! why=$($H check 2>&1); then ok "link hosts: skipped: $why"; done_tests; fi
trap '$H down >/dev/null 2>&1' EXIT
D=$TEST_TMP/link_hosts
mkdir -p "$D"
P=$(realpath "$PIPETRAIN")
echo '{"n_layer": 2, "n_head": 2, "n_embd": 64, "vocab_size": 256, "n_positions": 64}' > "$D/c.json"
for i in $(seq 1 300); do echo "the quick brown fox jumps over the lazy dog $((i % 13)) times"; done > "$D/t.txt"
# messages of 2 x 64 x 64 x 4 = 32 kB: 33 ms each at 1 MB/s; a burst of 16 kB lets at most half of
# one through at line rate after an idle spell, so the run's messages read up to 1.5 MB/s, the probe
# (back-to-back pairs) about 1; a direction sharing the link with the other reads lower (TCP acks queue
# behind the other way's data: docs/comm.md)
targs="train --config $D/c.json --data $D/t.txt --batch 8 --seq 64 --stages 2 --microbatches 4 --schedule 1f1b --steps 4"
links() { sed -nE 's|^links: link 0-1: ([0-9.]+)/([0-9.]+) MB/s, ([0-9.]+) ms \(probe ([0-9.]+)/([0-9.]+) MB/s.*|\1 \2 \3 \4 \5|p' "$1"; }
within() { awk -v x="$1" -v lo="$2" -v hi="$3" 'BEGIN{exit !(x >= lo && x <= hi)}'; }
losses() { sed -E 's/.*"loss":([^,]*),.*/\1/' "$1"; }

check "link hosts: 2 hosts up" $H up 2
for h in 0 1; do $H shape $h 8mbit 16kb 2s; done
$H mpirun -x ASAN_OPTIONS -x TSAN_OPTIONS -np 2 "$P" $targs > "$D/run.log" 2>&1
read -r f b lat pf pb <<< "$(links "$D/run.log")"
if [ -n "${pb:-}" ] && within "$pf" 0.7 1.3 && within "$pb" 0.7 1.3 && within "$f" 0.5 1.6 && within "$b" 0.5 1.6; then
  ok "link hosts: a tc link of 1 MB/s each way reads $pf/$pb MB/s by the probe and $f/$b MB/s by the run's messages"
else fail "link hosts: 1 MB/s measured across the hosts" "$(grep -E '^links|rror|hosts:' "$D/run.log" | head -3)"; fi
grep -q "^simulated: .*and the links as measured" "$D/run.log" \
  && ok "link hosts: the prediction uses the measured links" \
  || fail "link hosts: the prediction uses the measured links" "$(grep -E '^simulated|rror' "$D/run.log" | head -2)"
$H mpirun -x ASAN_OPTIONS -x TSAN_OPTIONS -np 2 "$P" $targs --wire bf16 --metrics "$D/m.jsonl" > "$D/bf16.log" 2>&1
OPENBLAS_NUM_THREADS=1 "$P" $targs --wire bf16 --metrics "$D/m_thr.jsonl" > /dev/null 2>&1
[ -s "$D/m.jsonl" ] && [ "$(losses "$D/m.jsonl")" = "$(losses "$D/m_thr.jsonl")" ] \
  && ok "link hosts: --wire bf16 across the hosts: the losses of a threads run, bitwise" \
  || fail "link hosts: --wire bf16 across the hosts" "$(losses "$D/m.jsonl" | tr '\n' ' ') vs $(losses "$D/m_thr.jsonl" | tr '\n' ' '); $(tail -2 "$D/bf16.log")"
check "link hosts: down" $H down
[ -z "$(ip netns list 2>/dev/null | grep "^${PT_HOSTS}")" ] && ok "link hosts: nothing left behind" \
  || fail "link hosts: nothing left behind" "$(ip netns list | grep "^${PT_HOSTS}")"
done_tests
