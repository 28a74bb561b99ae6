#!/usr/bin/env bash
# train --dp-sync H end to end (the arithmetic and the job: tests/test_dpsync.c): --dp-sync 1 is
# today's data parallelism (losses bitwise the run without the flag); H > 1 over MPI gives the
# threads run's losses (both sum in rank order); a 30 ms link between replicas delays the outer
# all-reduce but changes no number; what it cannot run is refused with the flag named.
. "$(dirname "$0")/lib.sh"
mpi_env 120
D=$TEST_TMP/dpsync
mkdir -p "$D"
echo '{"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 256, "n_positions": 32}' > "$D/cfg.json"
for i in $(seq 1 200); do echo "the quick brown fox jumps over the lazy dog $((i % 7))"; done > "$D/text.txt"
targs="train --config $D/cfg.json --data $D/text.txt --batch 8 --seq 16 --lr 3e-3 --steps 7 --stages 2 --dp 2 --microbatches 2 --log-every 100"
loss() { sed 's/.*"loss":\([0-9.]*\).*/\1/' "$1" | tr '\n' ' '; }

"$P" $targs --metrics "$D/plain.jsonl" > /dev/null 2>&1
"$P" $targs --dp-sync 1 --metrics "$D/one.jsonl" > /dev/null 2>&1
[ -s "$D/plain.jsonl" ] && [ "$(loss "$D/plain.jsonl")" = "$(loss "$D/one.jsonl")" ] \
  && ok "--dp-sync 1: losses bitwise plain data parallelism" \
  || fail "--dp-sync 1: losses bitwise plain data parallelism" "$(loss "$D/one.jsonl") vs $(loss "$D/plain.jsonl")"

"$P" $targs --dp-sync 3 --metrics "$D/thr.jsonl" > "$D/thr.out" 2>&1
[ -s "$D/thr.jsonl" ] && [ "$(loss "$D/thr.jsonl")" != "$(loss "$D/plain.jsonl")" ] \
  && ok "--dp-sync 3 runs and differs from every-step averaging" \
  || fail "--dp-sync 3 runs and differs" "$(tail -3 "$D/thr.out")"
if mpi 4 $targs --dp-sync 3 --transport mpi --metrics "$D/mpi.jsonl" > "$D/mpi.out" 2>&1; then
  ok "--dp-sync 3 over MPI runs"; else fail "--dp-sync 3 over MPI runs" "$(tail -3 "$D/mpi.out")"; fi
[ -s "$D/mpi.jsonl" ] && [ "$(loss "$D/mpi.jsonl")" = "$(loss "$D/thr.jsonl")" ] \
  && ok "--dp-sync 3: MPI losses equal threads" \
  || fail "--dp-sync 3: MPI losses equal threads" "$(loss "$D/mpi.jsonl") vs $(loss "$D/thr.jsonl")"
"$P" $targs --dp-sync 3 --slow-link 0-2:0.03 --slow-link 1-3:0.03 --metrics "$D/slow.jsonl" > /dev/null 2>&1
[ -s "$D/slow.jsonl" ] && [ "$(loss "$D/slow.jsonl")" = "$(loss "$D/thr.jsonl")" ] \
  && ok "--dp-sync 3 with 30 ms links between replicas: the same losses" \
  || fail "--dp-sync 3 with slow links: the same losses" "$(loss "$D/slow.jsonl") vs $(loss "$D/thr.jsonl")"
"$P" $targs --dp-sync 3 --no-overlap --metrics "$D/blk.jsonl" > /dev/null 2>&1
[ -s "$D/blk.jsonl" ] && [ "$(loss "$D/blk.jsonl")" != "$(loss "$D/thr.jsonl")" ] \
  && ok "--dp-sync 3 --no-overlap (the sync applied at once) runs, differs from overlapped" \
  || fail "--dp-sync 3 --no-overlap" "$(loss "$D/blk.jsonl")"

# the report's loss against wall time, the runs overlaid (a standalone SVG, and on the page)
if "$P" report "$D/plain.jsonl" "$D/thr.jsonl" --out "$D/r.html" --svg "$D/r.svg" > "$D/rep.out" 2>&1 &&
   xmllint --noout "$D/r.svg" "$D/r.html" 2>/dev/null && grep -q 'loss against wall time' "$D/r.svg" &&
   [ "$(grep -c 'class="ln"' "$D/r.svg")" = 2 ] && grep -q 'loss against wall time' "$D/r.html"; then
  ok "report --svg: loss against wall time, two runs overlaid"
else fail "report --svg: loss against wall time" "$(tail -2 "$D/rep.out")"; fi
expect_error "report --svg-series bad refused" "--svg-series 'x': give loss or eval_loss" \
  "$P" report "$D/plain.jsonl" --out "$D/r2.html" --svg "$D/r2.svg" --svg-series x

expect_error "--dp-sync with --adapt refused" "--adapt with --dp-sync 3 is not supported: the outer step's state" \
  "$P" $targs --dp-sync 3 --adapt
expect_error "--dp-sync with pipedream refused" "--dp-sync 3 needs a synchronous schedule" \
  "$P" $targs --dp-sync 3 --schedule pipedream
expect_error "--outer-lr 0 refused" "--outer-lr must be a positive number" "$P" $targs --dp-sync 3 --outer-lr 0
done_tests
