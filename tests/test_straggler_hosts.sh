#!/usr/bin/env bash
# train --adapt finds a link that is slow by itself, not by --slow-link: two hosts as network
# namespaces (tools/hosts.sh), Open MPI over TCP, host 1's link shaped with tc tbf (slow in
# bandwidth, one way: host 1's egress) from the first step: the runs switch to the adaptive
# schedule, and train to the same losses as the unshaped run. Skips with a reason where
# namespaces cannot be made.
. tests/lib.sh
H=tools/hosts.sh
# Under SAN=1/TSAN=1: Open MPI's own leaks and races are not ours (as tests/test_hosts.sh)
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS:}suppressions=$PWD/tests/openmpi.tsan.supp"
export PT_HOSTS="ps$(($$ % 10000))" PT_HOSTS_TIMEOUT=90
if ! why=$($H check 2>&1); then ok "straggler hosts: skipped: $why"; done_tests; fi
trap '$H down >/dev/null 2>&1' EXIT
D=$TEST_TMP/straggler_hosts
mkdir -p "$D"
P=$(realpath "$PIPETRAIN")
echo '{"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 256, "n_positions": 32}' > "$D/c.json"
for i in $(seq 1 200); do echo "the quick brown fox jumps over the lazy dog $i"; done > "$D/t.txt"
# (no clipping: a re-split by a noisy stage reorders only the gradient norm's sum)
targs="train --config $D/c.json --data $D/t.txt --batch 8 --seq 16 --stages 2 --microbatches 4 --schedule zb-h1 --steps 6 --grad-clip 0"
losses() { sed -E 's/.*"loss":([^,]*),.*/\1/' "$1"; }

check "straggler hosts: 2 hosts up" $H up 2
$H shape 1 2mbit 16kbit 400ms     # host 1's egress: every gradient message 1 -> 0 waits its turn
# Found, and judged from the measured costs: a link slow in bandwidth gives every message its
# turn, so a deeper warm-up may gain nothing (then the run says so and keeps its schedule); a
# switch must be the adaptive schedule in the metrics.
if $H mpirun -x ASAN_OPTIONS -x TSAN_OPTIONS -np 2 "$P" $targs --adapt --mem-limit 4 --metrics "$D/m.jsonl" > "$D/run.log" 2>&1 &&
   grep -Eq '^step [0-9]+: link 0-1 (slow in bandwidth|\+[0-9]+ ms per message)' "$D/run.log" &&
   { grep -Eq '^step [0-9]+: link 0-1 \+[0-9]+ ms per message; no schedule within --mem-limit 4 is faster' "$D/run.log" ||
     { grep -Eq '^step [0-9]+: link 0-1 \+[0-9]+ ms per message; adaptive' "$D/run.log" &&
       grep -q '"schedule":"adaptive"' "$D/m.jsonl"; }; }; then
  ok "straggler hosts: a link shaped by tc (2 Mbit/s, one way) is found and judged ($(grep -Eo 'slow in bandwidth|adaptive warm-up|is faster' "$D/run.log" | sort -u | tr '\n' ' '))"
else fail "straggler hosts: a shaped link is found" "$(grep -E '^step [0-9]+:|rror|Sanitizer' "$D/run.log" | head -5)"; fi
$H shape 1 off
OPENBLAS_NUM_THREADS=1 "$P" $targs --metrics "$D/m_thr.jsonl" > /dev/null 2>&1
[ -s "$D/m.jsonl" ] && [ "$(losses "$D/m.jsonl")" = "$(losses "$D/m_thr.jsonl")" ] \
  && ok "straggler hosts: the same losses as a threads run without adaptation" \
  || fail "straggler hosts: the same losses" "$(losses "$D/m.jsonl" | tr '\n' ' ') vs $(losses "$D/m_thr.jsonl" | tr '\n' ' ')"
check "straggler hosts: down" $H down
done_tests
