#!/usr/bin/env bash
# train --mem-limit SIZE (docs/seq-chunks.md "Under a memory limit"): a per-rank byte limit. At a
# T where 1f1b's busiest rank is predicted over the limit, 1f1b is refused before the first step
# (naming the rank, its bytes and what would fit) and --seq-chunks 4 trains under the same limit,
# on threads and over MPI (Open MPI starting under a data rlimit too); the limit is the OS's
# (RLIMIT_DATA: an allocation of the whole cap fails, "out of memory ... under --mem-limit"); bad
# SIZEs are refused with a message; a bare integer keeps --adapt's meaning (microbatches).
. "$(dirname "$0")/lib.sh"
mpi_env 120        # a hang is a failure; a healthy run takes a second or two
D=$TEST_TMP/mem_limit
mkdir -p "$D"
echo '{"n_layer": 2, "n_head": 2, "n_embd": 64, "vocab_size": 256, "n_positions": 1024}' > "$D/cfg.json"
for i in $(seq 1 400); do echo "the quick brown fox jumps over the lazy dog $((i % 7))"; done > "$D/text.txt"
# T 1024, P 2: 1f1b's rank 0 is priced at about 39 MiB, --seq-chunks 4's busiest at about 19 MiB
targs="train --config $D/cfg.json --data $D/text.txt --batch 2 --seq 1024 --steps 2 --lr 1e-3 --stages 2 --microbatches 2"
LIM=28MiB
san=0; case "$BUILD" in *san*) san=1 ;; esac   # sanitizers' shadow memory is over any small data rlimit

expect_error "mem-limit threads: 1f1b refused before the first step, naming rank, bytes and what fits" \
  "--mem-limit 28MiB: rank 0 is predicted to hold [0-9.]+ MiB at its peak .*over the limit; try --seq-chunks 4 or --balance-memory" \
  "$P" $targs --mem-limit $LIM
if [ $san = 1 ]; then ok "mem-limit: runs under RLIMIT_DATA skipped (sanitizer build)"; else
  if "$P" $targs --seq-chunks 4 --mem-limit $LIM > "$D/t.out" 2>&1 && grep -q "^step     2/2" "$D/t.out" &&
     grep -Eq "^memory limit: --mem-limit 28 MiB per rank; the busiest rank is predicted at [0-9.]+ MiB; this process's RLIMIT_DATA 2 x 28 MiB" "$D/t.out"; then
    ok "mem-limit threads: --seq-chunks 4 trains under the limit that refuses 1f1b (RLIMIT_DATA for 2 ranks)"
  else fail "mem-limit threads: --seq-chunks 4 under $LIM" "$(tail -3 "$D/t.out")"; fi
  # the OS's limit: one allocation of the whole cap after setrlimit must fail (abort, the message)
  (PIPETRAIN_MEMLIMIT_PROBE=1 "$P" $targs --seq-chunks 4 --mem-limit $LIM > "$D/p.out" 2>&1; echo $? > "$D/p.rc") 2> /dev/null
  rc=$(cat "$D/p.rc")
  if [ $rc -ne 0 ] && grep -q "out of memory allocating [0-9]* bytes under --mem-limit" "$D/p.out"; then
    ok "mem-limit: RLIMIT_DATA refuses an allocation past the cap, said 'out of memory ... under --mem-limit'"
  else fail "mem-limit: RLIMIT_DATA enforced" "rc $rc: $(tail -2 "$D/p.out")"; fi
  if command -v mpirun > /dev/null 2>&1; then
    if mpi 2 $targs --transport mpi --mem-limit $LIM > "$D/m1.out" 2>&1; then
      fail "mem-limit mpi: 1f1b refused" "exited 0"
    elif grep -q "rank 0 is predicted to hold .* over the limit; try --seq-chunks 4" "$D/m1.out"; then
      ok "mem-limit mpi: 1f1b refused before the first step"
    else fail "mem-limit mpi: 1f1b refused" "$(tail -3 "$D/m1.out")"; fi
    # mpirun itself under a data rlimit (1 GiB), each rank then lowering it to 28 MiB + the allowance
    if (ulimit -d 1048576 && mpi 2 $targs --transport mpi --seq-chunks 4 --mem-limit $LIM) > "$D/m4.out" 2>&1 &&
       grep -q "^step     2/2" "$D/m4.out" && grep -q "RLIMIT_DATA 1 x 28 MiB" "$D/m4.out"; then
      ok "mem-limit mpi: --seq-chunks 4 trains under the limit (Open MPI starts and runs under RLIMIT_DATA)"
    else fail "mem-limit mpi: --seq-chunks 4 under $LIM" "$(tail -3 "$D/m4.out")"; fi
  else ok "mem-limit mpi: skipped (no mpirun)"; fi
fi

# The asynchronous window (docs/async.md "The window's memory"): each microbatch of a pass keeps its
# stash and boundary buffers for the whole pass, so the prediction grows with W as the job allocates
# (each W's own job: the same numbers as the line of a run at that W); a limit between the W=2 and W=4
# predictions makes the default window 2 (said), an explicit --async-window 4 is refused naming
# rank, stage, bytes and the window that fits. Priced before the first step: no step runs.
aargs="train --config $D/cfg.json --data $D/text.txt --batch 4 --seq 256 --steps 4 --lr 1e-3 --stages 2 --microbatches 4 --schedule pipedream"
predicted() {   # W: the busiest rank's predicted MiB at --async-window W (a limit far above it)
  "$P" $aargs --async-window "$1" --mem-limit 100GiB 2>/dev/null |
    sed -n 's/^memory limit: .*the busiest rank is predicted at \([0-9.]*\) MiB.*/\1/p'
}
if [ $san = 1 ]; then ok "mem-limit window: skipped (sanitizer build: runs under RLIMIT_DATA)"; else
  w1=$(predicted 1); w2=$(predicted 2); w4=$(predicted 4)
  # the window's part per step: W=4 adds twice what W=2 adds over W=1 (0.2 MiB: the lines' rounding)
  if [ -n "$w1" ] && [ -n "$w2" ] && [ -n "$w4" ] &&
     awk -v a="$w1" -v b="$w2" -v c="$w4" 'BEGIN { d = b - a; exit !(d > 1 && c - a > 2.9 * d && c - a < 3.1 * d) }'; then
    ok "mem-limit window: the prediction grows with W by the pass's microbatches ($w1 / $w2 / $w4 MiB at W 1/2/4)"
  else fail "mem-limit window: prediction grows with W" "W 1/2/4: '$w1' '$w2' '$w4' MiB"; fi
  limn=$(awk -v b="$w2" -v c="$w4" 'BEGIN { printf "%d", (b + c) / 2 }'); lim=${limn}MiB
  if "$P" $aargs --mem-limit "$lim" > "$D/w.out" 2>&1 && grep -q "^step     4/4" "$D/w.out" &&
     grep -Eq "^asynchronous window: 2 steps a pass \(the default 4 shrunk to fit --mem-limit $limn MiB: 4 steps a pass were predicted at $w4 MiB, 2 at $w2 MiB" "$D/w.out" &&
     grep -q "the busiest rank is predicted at $w2 MiB" "$D/w.out"; then
    ok "mem-limit window: a limit between W=2 and W=4 makes the default window 2, said ($lim)"
  else fail "mem-limit window: default shrinks to 2 under $lim" "$(grep -E 'window|memory limit|rror' "$D/w.out" | head -3)"; fi
  expect_error "mem-limit window: an explicit --async-window 4 over the limit is refused with what, where, what to do" \
    "--mem-limit $lim: rank 0 is predicted to hold $w4 MiB at its peak \(stage 0: .*the asynchronous window's 4 steps x 4 microbatches keep [0-9.]+ MiB .*over the limit; give a smaller --async-window: 2 is predicted at $w2 MiB" \
    "$P" $aargs --mem-limit "$lim" --async-window 4
  # without --mem-limit the default stays 4
  if "$P" $aargs > "$D/w0.out" 2>&1 && grep -q "^asynchronous window: 4 steps a pass (the default 4;" "$D/w0.out"; then
    ok "mem-limit window: without a limit the default window stays 4"
  else fail "mem-limit window: default without a limit" "$(grep -E 'window|rror' "$D/w0.out" | head -2)"; fi
fi

# bad SIZEs
expect_error "mem-limit: unknown unit" "--mem-limit '12XB': unknown unit 'XB'" "$P" $targs --mem-limit 12XB
expect_error "mem-limit: negative size" "--mem-limit '-1GiB': a memory limit must be more than 0 bytes" "$P" $targs --mem-limit -1GiB
expect_error "mem-limit: zero size" "--mem-limit '0GiB': a memory limit must be more than 0 bytes" "$P" $targs --mem-limit 0GiB
expect_error "mem-limit: bare 0 is --adapt's, refused" "--mem-limit 0: a stage holds at least 1 microbatch" "$P" $targs --mem-limit 0
expect_error "mem-limit: SIZE needs a pipelined run" "--mem-limit 28MiB prices a pipelined job's ranks: give --stages P" \
  "$P" train --config "$D/cfg.json" --data "$D/text.txt" --batch 2 --seq 64 --steps 1 --lr 1e-3 --threads 1 --mem-limit $LIM

# a bare integer keeps its meaning: --adapt's microbatches, no byte limit, no rlimit
if "$P" train --config "$D/cfg.json" --data "$D/text.txt" --batch 4 --seq 64 --steps 2 --lr 1e-3 --stages 2 \
     --microbatches 4 --adapt --mem-limit 2 > "$D/a.out" 2>&1 && grep -q "^step     2/2" "$D/a.out" &&
   ! grep -q "^memory limit:" "$D/a.out"; then
  ok "mem-limit: a bare integer is --adapt's microbatch limit (trains, no byte limit set)"
else fail "mem-limit: bare integer with --adapt" "$(tail -3 "$D/a.out")"; fi
rm -rf "$D"
done_tests
