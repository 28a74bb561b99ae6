#!/usr/bin/env bash
# train --adapt on the links it reads (docs/stragglers.md): a link slow in bandwidth carrying
# small messages nearly back to back is read as a queue at every step it is reported, and the
# time the run predicts for the schedule it runs next stays within a generous factor of what it
# then measures (read as a pure delay it predicted half); a slow link between replicas is
# reported once at onset and once at recovery, the schedule kept, the numbers unchanged.
. tests/lib.sh
P=$PIPETRAIN
D=$TEST_TMP/adapt_links
mkdir -p "$D"
echo '{"n_layer": 4, "n_head": 2, "n_embd": 32, "vocab_size": 256, "n_positions": 32}' > "$D/cfg.json"
for i in $(seq 1 200); do echo "the quick brown fox jumps over the lazy dog $((i % 7))"; done > "$D/text.txt"
export OPENBLAS_NUM_THREADS=1
train() { "$P" train --config "$D/cfg.json" --data "$D/text.txt" --batch 8 --seq 16 --lr 3e-3 "$@"; }
numbers() { sed -E 's/.*"loss":([^,]*),"lr":[^,]*,"grad_norm":([^,]*),.*/\1 \2/' "$1"; }
schedules() { grep -o '"schedule":"[a-z0-9-]*"' "$1" | sed 's/.*:"\(.*\)"/\1/' | tr '\n' ' '; }
# On a loaded 2-core machine, and under TSAN=1, steps run 2-20x slower at random and a thread
# wakes milliseconds late: a noisy step 2 can make the switch come at step 3 (from a noise-sized
# delay), and a reduction's wait may stay above the recovery threshold to the last step. So the
# checks want the events that read two slow steps (from step 4), the onset said at any step, the
# recovery where it was said (TIMING=0; the step-exact policy is tests/test_sim_adapt.c's).
TIMING=0
# A prediction is honest within this factor of the measured median: the step is 16 link times of
# 51 ms (sleeps, not compute), so load on the shared cores moves it a few percent; a schedule
# built for a pure delay where the link queues predicts 0.5x.
HONEST=1.5

# --- a link slow in bandwidth, small messages: 2 KB (1 x 16 x 32 floats) at 40 kB/s, 51 ms each,
# 0.2 ms of compute between them (the gradients' direction never queues: only the first forwards do)
train --steps 10 --stages 2 --microbatches 8 --schedule zb-h1 --adapt --mem-limit 4 --slow-link 0-1:40kB/s@3- \
  --metrics "$D/q.jsonl" > "$D/q.out" 2>&1 || fail "adapt links: the run at 40 kB/s" "$(tail -3 "$D/q.out")"
# the adapt events as "step action delay queue next", next: the predicted seconds per step of the
# schedule that runs after the event (a switch's predicted, a keep's was)
events() { grep '"event":"adapt"' "$1" | sed -E 's/.*"step":([0-9]+),"action":"([a-z_]+)".*"link_delay_s":\[([^],]*)\].*"link_queue_s":\[([^],]*)\].*/\1 \2 \3 \4 &/' |
  awk '{ p = -1; if (match($0, /"predicted_s":[0-9.e-]+/)) pr = substr($0, RSTART + 14, RLENGTH - 14);
         if (match($0, /"was_s":[0-9.e-]+/)) wa = substr($0, RSTART + 8, RLENGTH - 8);
         if ($2 == "adapt") p = pr; if ($2 == "keep") p = wa; print $1, $2, $3, $4, p }'; }
# each prediction against the median step_ms of the steps it predicted (up to the next event)
honest() {
  awk -v f="$HONEST" 'NR == FNR { if ($5 > 0) { s[++n] = $1; p[n] = $5 } next }
    { if (match($0, /"step":[0-9]+/)) st = substr($0, RSTART + 7, RLENGTH - 7) + 0
      if (match($0, /"step_ms":[0-9.]+/)) ms[st] = substr($0, RSTART + 10, RLENGTH - 10) / 1e3; last = st }
    END { if (!n) exit 1
      for (i = 1; i <= n; i++) { k = 0; to = i < n ? s[i + 1] : last
        for (j = s[i] + 1; j <= to; j++) v[++k] = ms[j]
        if (!k) continue
        for (a = 2; a <= k; a++) for (b = a; b > 1 && v[b - 1] > v[b]; b--) { t = v[b]; v[b] = v[b - 1]; v[b - 1] = t }
        med = k % 2 ? v[(k + 1) / 2] : (v[k / 2] + v[k / 2 + 1]) / 2
        printf "step %d: predicted %.3f, measured %.3f; ", s[i], p[i], med
        if (p[i] > f * med || med > f * p[i]) bad = 1 }
      exit bad }' "$1" "$2"
}
events "$D/q.events.jsonl" | awk '$1 >= 4' > "$D/q.ev"   # the link slow from step 3: two slow steps read from 4
lines=$(grep '^step [0-9]*:' "$D/q.out" | tr '\n' ';')
if [ $TIMING = 0 ] && [ ! -s "$D/q.ev" ]; then   # switched at 3 on a noisy step, kept quietly since
  ok "adapt links: 40 kB/s: under TSan no event after step 3's, from a noisy step ($lines)"
else
  [ -s "$D/q.ev" ] && awk '$3 > 0 && $4 < 0.5 * $3 { bad = 1 } END { exit bad }' "$D/q.ev" \
    && ok "adapt links: 40 kB/s, 2 KB messages: every event reads link 0-1 as a queue ($(awk '{ printf "step %s %s: %.0f of %.0f ms; ", $1, $2, $4 * 1e3, $3 * 1e3 }' "$D/q.ev"))" \
    || fail "adapt links: 40 kB/s read as a queue" "$(tr '\n' ';' < "$D/q.ev") $lines"
  if why=$(honest "$D/q.ev" "$D/q.jsonl"); then ok "adapt links: 40 kB/s: predictions within ${HONEST}x of the steps they predict ($why)"
  else fail "adapt links: 40 kB/s predictions honest" "$why $lines"; fi
fi

# --- a slow link between replicas: --dp 2, ranks 0 and 2 (pipeline rank 0 of replicas 0 and 1)
# 20 ms per reduction in steps 3..5: seen two steps running (4), healthy again at 6 (a loaded
# machine may shift either); the tied embedding's reduction joins pipeline ranks 0 and 1, so
# ranks 1-3 are named too; the schedule stays, every loss and norm bitwise.
dp="--steps 8 --stages 2 --dp 2 --microbatches 2 --schedule zb-h1"
train $dp --metrics "$D/d0.jsonl" > /dev/null 2>&1
if train $dp --adapt --mem-limit 2 --slow-link 0-2:0.02@3-5 --metrics "$D/d1.jsonl" > "$D/d1.out" 2>&1 &&
   grep -Eq "^step $([ $TIMING = 1 ] && echo '[3-7]' || echo '[0-9]+'): link between replicas 0-1 \(ranks 0-2\) \+[0-9]+ ms per reduction; .*no schedule change helps a gradient reduction: keeping zb-h1$" "$D/d1.out" &&
   { [ $TIMING = 0 ] || [ "$(grep -c 'ranks 0-2) +' "$D/d1.out")" = 1 ]; }; then
  ok "adapt links: a slow link between replicas is said once at onset ($(grep -o '^step [0-9]*: link between replicas 0-1 (ranks 0-2) +[0-9]* ms' "$D/d1.out"))"
else fail "adapt links: a slow link between replicas is said" "$(grep '^step [0-9]*:' "$D/d1.out"; tail -2 "$D/d1.out")"; fi
back=1; [ $TIMING = 0 ] && ! grep -q 'ranks 0-2) healthy again' "$D/d1.out" && back=0
{ [ $back = 0 ] || grep -Eq '^step ([5-8]): link between replicas 0-1 \(ranks 0-2\) healthy again' "$D/d1.out"; } \
  && ok "adapt links: ... and once at recovery$([ $back = 0 ] && echo ' (not by step 8 under TSan)')" \
  || fail "adapt links: recovery said" "$(grep '^step [0-9]*:' "$D/d1.out")"
grep -q '"action":"replica_slow","schedule":"zb-h1".*"replica_links":\[{"pipeline_rank":0,"replicas":\[0,1\],"ranks":\[0,2\],"wait_s":0\.0' \
  "$D/d1.events.jsonl" && { [ $back = 0 ] || grep -q '"action":"replica_healthy"' "$D/d1.events.jsonl"; } \
  && ok "adapt links: replica_slow and replica_healthy events" || fail "adapt links: replica events" "$(grep adapt "$D/d1.events.jsonl")"
# a noisy stage on two shared cores may switch the schedule meanwhile (test_straggler.sh): then
# the replica link must not be what switched it
if [ "$(schedules "$D/d1.jsonl")" = "$(schedules "$D/d0.jsonl")" ] ||
   ! grep '"action":"adapt"' "$D/d1.events.jsonl" | grep -q replica; then
  ok "adapt links: the schedule is kept for the replica link ($(schedules "$D/d1.jsonl"))"
else fail "adapt links: the schedule is kept" "$(schedules "$D/d1.jsonl")"; fi
[ -s "$D/d1.jsonl" ] && [ "$(numbers "$D/d0.jsonl")" = "$(numbers "$D/d1.jsonl")" ] \
  && ok "adapt links: every loss and norm bitwise those without the slow link" \
  || fail "adapt links: the same numbers" "$(numbers "$D/d1.jsonl" | tr '\n' ' ')"
# --- the same at --tp 2: world ranks are (replica x P + pipeline rank) x tp + TP rank, so
# pipeline rank 0's TP rank 0 is rank 0 in replica 0 and rank 4 in replica 1; the line names them
if train --steps 8 --stages 2 --dp 2 --tp 2 --microbatches 2 --schedule zb-h1 --adapt --mem-limit 2 \
     --slow-link 0-4:0.02@3-5 --metrics "$D/t1.jsonl" > "$D/t1.out" 2>&1 &&
   grep -Eq '^step [0-9]+: link between replicas 0-1 \(ranks 0-4\) \+[0-9]+ ms per reduction' "$D/t1.out"; then
  ok "adapt links: --tp 2: the slow replica link named by its world ranks ($(grep -o '^step [0-9]*: link between replicas 0-1 (ranks 0-4) +[0-9]* ms' "$D/t1.out"))"
else fail "adapt links: --tp 2 replica link named" "$(grep '^step [0-9]*:' "$D/t1.out"; tail -2 "$D/t1.out")"; fi
rm -rf "$D"
done_tests
