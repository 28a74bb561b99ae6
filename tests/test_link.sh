#!/usr/bin/env bash
# The links as measured (run/run_link.h): the start probe and the run's own messages find a link
# made slow by --slow-link (in bandwidth: 1 MB/s; in delay: 30 ms per message), on threads and
# over MPI, and the end-of-run prediction uses them ("and the links as measured"). Tolerances are
# wider for the run's messages (a receiver thread woken late on a loaded machine reads as a slower
# message) than for the probe's upper end (its best round counts, and a busy core only ever makes a
# round read low). The probe's lower end is the messages' too: over MPI each round passes through
# five threads (the sender's, its fault wrapper's delivery thread, both progress threads, the
# receiver's), and on a loaded machine every one of its 3 rounds can be held up (1 run in 30 read
# 0.73 MB/s at load 5, 1 in 30 read 0.75 at load 15 with up to 6 rounds until two agreed). They
# tell a measured link from an unmeasured one (a free link reads hundreds of MB/s and
# microseconds here), not the precision. The run's messages end where their receiver woke
# (the RECV's end), and their reading is a mean: at load 10-20 one MPI run read 0.50/0.46 MB/s
# (60 others 0.50-1.14), so their lower bound is 0.25. --adapt-wire without --adapt is refused.
. tests/lib.sh
mpi_env 120
D=$TEST_TMP/link
mkdir -p "$D"
echo '{"n_layer": 2, "n_head": 2, "n_embd": 64, "vocab_size": 256, "n_positions": 64}' > "$D/c.json"
for i in $(seq 1 300); do echo "the quick brown fox jumps over the lazy dog $((i % 13)) times"; done > "$D/t.txt"
# messages of 2 sequences x 64 x 64 x 4 = 32 kB: 32 ms each at 1 MB/s
targs="train --config $D/c.json --data $D/t.txt --batch 8 --seq 64 --stages 2 --microbatches 4 --schedule 1f1b --steps 4"
# "links: link 0-1: F/B MB/s, L ms (probe PF/PB MB/s; ...)" -> "F B L PF PB"
links() { sed -nE 's|^links: link 0-1: ([0-9.]+)/([0-9.]+) MB/s, ([0-9.]+) ms \(probe ([0-9.]+)/([0-9.]+) MB/s.*|\1 \2 \3 \4 \5|p' "$1"; }
within() { awk -v x="$1" -v lo="$2" -v hi="$3" 'BEGIN{exit !(x >= lo && x <= hi)}'; }

for tr in threads mpi; do
  run() { if [ $tr = mpi ]; then mpi 2 $targs "$@"; else OPENBLAS_NUM_THREADS=1 "$P" $targs "$@"; fi; }
  run --slow-link 0-1:1MB/s > "$D/rate_$tr.log" 2>&1
  read -r f b lat pf pb <<< "$(links "$D/rate_$tr.log")"
  if [ -n "${pb:-}" ] && within "$pf" 0.5 1.2 && within "$pb" 0.5 1.2 && within "$f" 0.25 1.2 && within "$b" 0.25 1.2; then
    ok "link: $tr: a link slow in bandwidth (--slow-link 0-1:1MB/s) is measured at 0.5-1.2 MB/s by the probe ($pf/$pb), 0.25-1.2 MB/s in the end ($f/$b; MPI: from the run's messages)"
  else fail "link: $tr: 1 MB/s measured" "$(grep -E '^links|rror' "$D/rate_$tr.log" | head -3)"; fi
  grep -q "^simulated: .*and the links as measured" "$D/rate_$tr.log" \
    && ok "link: $tr: the end-of-run prediction uses the measured links" \
    || fail "link: $tr: prediction from the measured links" "$(grep -E '^simulated' "$D/rate_$tr.log")"
  run --slow-link 0-1:0.03 > "$D/delay_$tr.log" 2>&1
  read -r f b lat pf pb <<< "$(links "$D/delay_$tr.log")"
  if [ -n "${lat:-}" ] && within "$lat" 25 60; then
    ok "link: $tr: a delay of 30 ms per message is measured by the probe (latency $lat ms)"
  else fail "link: $tr: 30 ms measured" "$(grep -E '^links|rror' "$D/delay_$tr.log" | head -3)"; fi
  run > "$D/free_$tr.log" 2>&1
  read -r f b lat pf pb <<< "$(links "$D/free_$tr.log")"
  if [ -n "${lat:-}" ] && within "$lat" 0 5 && within "$pf" 20 1e12; then
    ok "link: $tr: a free link reads fast ($pf MB/s, $lat ms)"
  else fail "link: $tr: a free link reads fast" "$(grep -E '^links|rror' "$D/free_$tr.log" | head -3)"; fi
done
# --adapt-wire: bf16 for a link slow in bandwidth (200 kB/s: 160 ms a message, compute a few ms:
# the simulator predicts about 2x), never for a free one (no 10% to gain however loaded the cores)
OPENBLAS_NUM_THREADS=1 "$P" $targs --steps 6 --adapt --adapt-wire --slow-link 0-1:200kB/s --metrics "$D/aw.jsonl" > "$D/aw.log" 2>&1
grep -Eq '^step [0-9]+: wire bf16 from the next step \(--adapt-wire\): the step is link-bound' "$D/aw.log" &&
  grep -q '"action":"wire"' "$D/aw.events.jsonl" \
  && ok "link: --adapt-wire turns bf16 on for a link slow in bandwidth, said and logged ($(grep -o '^step [0-9]*: wire bf16' "$D/aw.log"))" \
  || fail "link: --adapt-wire on a slow link" "$(grep -E '^step [0-9]+:|rror' "$D/aw.log" | head -3)"
OPENBLAS_NUM_THREADS=1 "$P" $targs --steps 6 --adapt --adapt-wire > "$D/aw_free.log" 2>&1
[ $? = 0 ] && ! grep -q 'wire bf16 from' "$D/aw_free.log" \
  && ok "link: --adapt-wire keeps fp32 on a free link" \
  || fail "link: --adapt-wire keeps fp32 on a free link" "$(grep -E '^step [0-9]+:|rror' "$D/aw_free.log" | head -3)"
expect_error "link: --adapt-wire needs --adapt" "--adapt-wire.*give --adapt" "$P" $targs --adapt-wire
done_tests
