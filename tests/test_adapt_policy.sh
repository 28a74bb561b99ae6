#!/usr/bin/env bash
# train --adapt's policy (docs/stragglers.md "The memory limit", "Switches that pay"): with no
# --mem-limit the limit comes from the memory the ranks can hold (said, with where it came from,
# and the same arithmetic as the planner's memory model), so the switch happens with default flags
# and the numbers stay bitwise; --mem-limit schedule keeps the starting schedule's peak; a switch
# that does not pay is undone (a line, an adapt_revert event, the report) and not tried again
# during a hold-off; bad --mem-limit values are errors that say what the flag takes. Behaviour
# only: PIPETRAIN_MEMINFO (a meminfo file) and PIPETRAIN_TEST_PREDICT (a factor on the predicted
# step: a gain the run cannot deliver) make the memory and the misjudged switch the same on any
# machine, however loaded (the links' delays, not the compute, make the steps).
. tests/lib.sh
P=$PIPETRAIN
D=$TEST_TMP/adapt_policy
mkdir -p "$D"
cat > "$D/cfg.json" <<'J'
{"n_layer": 4, "n_head": 2, "n_embd": 32, "vocab_size": 256, "n_positions": 32}
J
for i in $(seq 1 200); do echo "the quick brown fox jumps over the lazy dog $((i % 7))"; done > "$D/text.txt"
export OPENBLAS_NUM_THREADS=1
train() { timeout 120 "$P" train --config "$D/cfg.json" --data "$D/text.txt" --batch 8 --seq 16 --lr 3e-3 "$@"; }
pipe="--steps 14 --stages 2 --schedule zb-h1 --microbatches 4"
# A link slow by 50 ms a message from step 3 to 12: the step is the delays' (the model's compute
# is a few ms), so a loaded machine moves it little.
slow="--slow-link 0-1:0.05@3-12"
numbers() { sed -E 's/.*"loss":([^,]*),"lr":[^,]*,"grad_norm":([^,]*),.*/\1 \2/' "$1"; }
schedules() { grep -o '"schedule":"[a-z0-9-]*"' "$1" | sed 's/.*:"\(.*\)"/\1/' | tr '\n' ' '; }
lines() { grep -E '^step [0-9]+:' "$1"; }
meminfo() { printf 'MemTotal:       %d kB\nMemAvailable:   %d kB\n' "$1" "$1" > "$2"; }
train $pipe --metrics "$D/m0.jsonl" > /dev/null 2>&1

# --- the default limit: this machine's memory, said; the switch happens; the same numbers
if train $pipe $slow --adapt --metrics "$D/a.jsonl" > "$D/a.out" 2>&1 &&
   [[ "$(schedules "$D/a.jsonl")" == *adaptive* ]] &&
   grep -Eq '^step [0-9]+: link 0-1 \+[0-9]+ ms per message; (stage [0-9] x[0-9.]+; )?adaptive warm-up [0-9,]+ \(peak [0-9]+ of limit [0-9]+ microbatches; memory: [0-9.]+ GiB available / 1 host x 2 ranks' "$D/a.out"; then
  ok "adapt policy: no --mem-limit: the limit from this machine's memory, said; the switch happens"
else fail "adapt policy: default limit" "$(schedules "$D/a.jsonl"); $(lines "$D/a.out"; tail -2 "$D/a.out")"; fi
if [ -s "$D/a.jsonl" ] && [ "$(numbers "$D/m0.jsonl")" = "$(numbers "$D/a.jsonl")" ]; then
  ok "adapt policy: ... losses and norms bitwise those without faults or adaptation"
else fail "adapt policy: default limit, the same numbers" "$(numbers "$D/a.jsonl" | head -3 | tr '\n' ' ')"; fi

# plenty of memory: at most M (4) microbatches, and it says so
meminfo 67108864 "$D/big"
if PIPETRAIN_MEMINFO="$D/big" train $pipe $slow --adapt --metrics "$D/b.jsonl" > "$D/b.out" 2>&1 &&
   grep -Eq 'adaptive warm-up [0-9,]+ \(peak [0-9] of limit 4 microbatches; memory: 64.0 GiB available / 1 host x 2 ranks, capped at M = 4\)' "$D/b.out" &&
   grep -q '"event":"adapt".*"mem_limit":4,"mem_limit_from":"memory: 64.0 GiB available / 1 host x 2 ranks, capped at M = 4"' "$D/b.events.jsonl"; then
  ok "adapt policy: 64 GiB: limit M = 4, said in the switch line and the adapt event"
else fail "adapt policy: 64 GiB" "$(lines "$D/b.out"; grep -o '"mem_limit[^,]*,"mem_limit_from":"[^"]*"' "$D/b.events.jsonl" | head -1)"; fi

# the arithmetic: MemAvailable set so that the tightest rank holds 3.5 microbatches beyond its own
# state (from the event's per-rank numbers): the limit is 3, as the planner's model says
read -r fx ac <<< "$(grep -m1 '"event":"adapt"' "$D/b.events.jsonl" | sed -E 's/.*"mem_rank_fixed_bytes":\[([^]]*)\],"mem_rank_act_bytes":\[([^]]*)\].*/\1 \2/' | tr ',' ' ' |
  awk '{ n = NF / 2; m = 0; for (i = 1; i <= n; i++) { v = $i + 3.5 * $(i + n); if (v > m) m = v }; print m, n }')"
kb=$(awk -v m="$fx" 'BEGIN { printf "%d", 2 * m / 1024 }')
meminfo "$kb" "$D/mid"
if [ "${ac:-0}" = 2 ] && PIPETRAIN_MEMINFO="$D/mid" train $pipe $slow --adapt --metrics "$D/c.jsonl" > "$D/c.out" 2>&1 &&
   grep -q '"event":"adapt".*"mem_limit":3,"mem_limit_from":"memory: ' "$D/c.events.jsonl" &&
   { ! grep -q '"action":"adapt"' "$D/c.events.jsonl" || grep -Eq '\(peak [1-3] of limit 3 microbatches; memory: ' "$D/c.out"; }; then
  ok "adapt policy: MemAvailable for 3.5 microbatches on the tightest rank: limit 3 (plan_mem_held_max)"
else fail "adapt policy: limit 3 from memory" "kb=$kb ranks=$ac $(lines "$D/c.out"; grep -o '"mem_limit[^,]*,"mem_limit_from":"[^"]*"' "$D/c.events.jsonl" | head -1)"; fi

# MPI: the ranks of one host found by hostname (one all-reduce); every rank computes the same
# limit (a switch needs every rank's same schedule, or the run stops with an error)
mpi_env 120
if MPI_X="PIPETRAIN_MEMINFO=$D/big OPENBLAS_NUM_THREADS=1" mpi 2 train --config "$D/cfg.json" --data "$D/text.txt" --batch 8 \
     --seq 16 --lr 3e-3 $pipe $slow --adapt --transport mpi --metrics "$D/mp.jsonl" > "$D/mp.out" 2>&1 &&
   grep -q '"event":"adapt".*"mem_limit":4,"mem_limit_from":"memory: 64.0 GiB available / 1 host x 2 ranks, capped at M = 4"' "$D/mp.events.jsonl" &&
   [ "$(numbers "$D/m0.jsonl")" = "$(numbers "$D/mp.jsonl")" ]; then
  ok "adapt policy: MPI: 2 ranks on 1 host (by hostname), the same limit on every rank; the same numbers"
else fail "adapt policy: MPI default limit" "$(lines "$D/mp.out"; tail -2 "$D/mp.out")"; fi

# --cluster: each rank's device memory instead (a device each: not shared), the same arithmetic
cluster() { printf '{"name": "t", "nodes": [{"devices": {"count": 2, "name": "d", "speed": 1.0, "memory": %s},
  "link": {"bandwidth": 5e9, "latency": 5e-6}}], "reference_flops": 3e10}\n' "$1" > "$2"; }
cluster "$(awk -v m="$fx" 'BEGIN { printf "%d", m }')" "$D/k3.json"
if [ "${ac:-0}" = 2 ] && train $pipe $slow --adapt --cluster "$D/k3.json" --metrics "$D/k.jsonl" > "$D/k.out" 2>&1 &&
   grep -q '"event":"adapt".*"mem_limit":3,"mem_limit_from":"cluster [^"]*k3.json: [0-9.]* MiB device memory / 1 node x 2 ranks, a device each"' "$D/k.events.jsonl"; then
  ok "adapt policy: --cluster: device memory for 3.5 microbatches on the tightest rank: limit 3, said"
else fail "adapt policy: --cluster" "$(lines "$D/k.out"; tail -1 "$D/k.out"; grep -o '"mem_limit[^,]*,"mem_limit_from":"[^"]*"' "$D/k.events.jsonl" | head -1)"; fi
expect_error "adapt policy: --cluster with fewer devices than ranks" "--cluster .*k3.json: 2 devices for the run's 4 ranks" \
  train --steps 2 --stages 4 --adapt --cluster "$D/k3.json"
expect_error "adapt policy: --cluster without --adapt" "--cluster .* gives --adapt's memory limit: give --adapt and no --mem-limit" \
  train --steps 2 --stages 2 --cluster "$D/k3.json"

# too little memory for even the starting schedule: its peak, and why
meminfo 1000 "$D/tiny"
if PIPETRAIN_MEMINFO="$D/tiny" train $pipe $slow --adapt --metrics "$D/d.jsonl" > "$D/d.out" 2>&1 &&
   grep -q '"mem_limit":2,"mem_limit_from":"memory: 1.0 MiB available / 1 host x 2 ranks, 0 microbatches: less than the starting schedule holds, so its peak"' "$D/d.events.jsonl"; then
  ok "adapt policy: less memory than the run holds already: the starting schedule's peak, said"
else fail "adapt policy: tiny memory" "$(lines "$D/d.out"; grep -o '"mem_limit_from":"[^"]*"' "$D/d.events.jsonl" | head -1)"; fi

# --- --mem-limit schedule: today's behaviour (zb-h1's peak, 2: no faster schedule, kept)
if train $pipe $slow --adapt --mem-limit schedule --metrics "$D/s.jsonl" > "$D/s.out" 2>&1 &&
   [[ "$(schedules "$D/s.jsonl")" != *adaptive* ]] &&
   grep -Eq "^step [0-9]+: link 0-1 \+[0-9]+ ms per message; (stage [0-9] x[0-9.]+; )?no schedule within the limit of 2 microbatches \(--mem-limit schedule: the starting schedule's peak\) is faster" "$D/s.out" &&
   [ "$(numbers "$D/m0.jsonl")" = "$(numbers "$D/s.jsonl")" ]; then
  ok "adapt policy: --mem-limit schedule: the starting schedule's peak (2), zb-h1 kept, said"
else fail "adapt policy: --mem-limit schedule" "$(schedules "$D/s.jsonl"); $(lines "$D/s.out")"; fi

# --- a switch that does not pay: the prediction told 5x faster than the simulator says (within
# zb-h1's peak no schedule is faster), so the switch gains nothing of its 80%: undone, said, held
# off for 8 steps (zb-h1 meanwhile, the link still slow), then tried once more, undone again and
# held off twice as long; the numbers bitwise throughout. 40 steps: a loaded machine's noisy
# estimates can restart a trial several times, so the first undo may come as late as step 19
# (seen), and the second must still fit.
long="--steps 40 --stages 2 --schedule zb-h1 --microbatches 4 --slow-link 0-1:0.05@3-38"
train $long --metrics "$D/m1.jsonl" > /dev/null 2>&1
if PIPETRAIN_TEST_PREDICT=0.2 train $long --adapt --mem-limit schedule --metrics "$D/u.jsonl" > "$D/u.out" 2>&1 &&
   grep -Eq '^step [0-9]+: link 0-1 \+[0-9]+ ms per message; (stage [0-9] x[0-9.]+; )?adaptive warm-up' "$D/u.out" &&
   grep -Eq '^step [0-9]+: the switch at step [0-9]+ did not pay: [0-9.e-]+ s/step measured against [0-9.e-]+ before \([-+][0-9]+%\), predicted [0-9.e-]+ from [0-9.e-]+ \(-80%\): [0-9]+% of its gain; back to zb-h1, no switch before step [0-9]+' "$D/u.out"; then
  ok "adapt policy: a switch that gains less than half its prediction is undone, with a line"
else fail "adapt policy: undone switch" "$(schedules "$D/u.jsonl"); $(lines "$D/u.out")"; fi
mapfile -t un < <(sed -nE 's/^step ([0-9]+): the switch at step [0-9]+ did not pay.*no switch before step ([0-9]+)$/\1 \2/p' "$D/u.out")
u=${un[0]%% *}; hold=${un[0]##* }
if [ -n "$u" ] && grep -q '"event":"adapt_revert","step":'"$u"',"action":"undo","schedule":"zb-h1"' "$D/u.events.jsonl" &&
   grep -q '"switched_at":[0-9]*,"before_s":[0-9.e-]*,"measured_s":[0-9.e-]*,"delivered":' "$D/u.events.jsonl"; then
  ok "adapt policy: ... an adapt_revert event (switched_at, before_s, measured_s, delivered)"
else fail "adapt policy: adapt_revert event" "$(grep adapt_revert "$D/u.events.jsonl")"; fi
# held off: zb-h1 from the step after the undo through the hold-off's last step (8 steps, whatever
# a noisy estimate says meanwhile); then one more try, undone again, held off 16 steps (a noisy
# estimate may rebuild the adaptive schedule while one is on trial: the trial starts again, the
# undo still comes). A third try fits in the slow window when the first switch came a step early
# (a noisy step 2 seen as the first slow one: undone at 7, 19 and 39, load 20): its hold-off is 32.
v=$(schedules "$D/u.jsonl")
doubled=1
for k in "${!un[@]}"; do [ "${un[k]##* }" = $((${un[k]%% *} + (8 << k))) ] || doubled=0; done
if [ -n "$u" ] && [ "$hold" = $((u + 8)) ] && [ "$(echo "$v" | cut -d' ' -f$((u + 1))-$hold)" = "$(printf 'zb-h1 %.0s' $(seq $((u + 1)) $hold) | sed 's/ $//')" ] &&
   [ "${#un[@]}" -ge 2 ] && [ "${#un[@]}" -le 3 ] && [ $doubled = 1 ] && [ "$(grep -c '"action":"adapt"' "$D/u.events.jsonl")" -ge 2 ]; then
  ok "adapt policy: ... not tried again during its hold-off (8 steps), then once more, undone, held off 16 (and a third 32)"
else fail "adapt policy: hold-off" "undone at ${un[*]}: $v; $(lines "$D/u.out")"; fi
if [ "$(numbers "$D/m1.jsonl")" = "$(numbers "$D/u.jsonl")" ]; then
  ok "adapt policy: ... losses and norms bitwise"
else fail "adapt policy: undone switch, the same numbers" "$(numbers "$D/u.jsonl" | head -3 | tr '\n' ' ')"; fi
if "$P" report "$D/u.jsonl" --out "$D/u.html" > /dev/null 2>&1 && grep -q 'adapt_revert: the switch at step' "$D/u.html"; then
  ok "adapt policy: ... the report lists the adapt_revert"
else fail "adapt policy: report" "$(grep -c adapt "$D/u.html" 2>/dev/null)"; fi

# MPI: every rank judges from the same measured steps, so every rank decides alike at the same
# step (a rank that undid alone would run another schedule: the switch's agreement check stops the
# run). The decision is checked against what the run measured, as it printed it: MPI ranks poll
# while they wait, and on 2 loaded cores one step in three takes 2-3x the link's 0.23 s, so the 2
# steps before a switch can measure the 80% gain it did not make (seen at load 22: "paid"). Every
# judgement must follow the rule from its numbers (undone below half the predicted gain); an undo
# (the usual case) has its adapt_revert event at its step.
# judged FILE: the judgement lines' "ok" (decision as the numbers say) or "bad: LINE", one a line
judged() {
  sed -nE 's/^step ([0-9]+): the switch at step [0-9]+ (paid|did not pay): ([0-9.e-]+) s\/step measured against ([0-9.e-]+) before \(([-+0-9]+)%(;|\)).* \(-([0-9]+)%\)(: .*)?$/\1 \2 \3 \4 \7/p;
          s/^step ([0-9]+): the switch at step [0-9]+ paid: ([0-9.e-]+) s\/step measured against ([0-9.e-]+) before \([-+0-9]+%; predicted -([0-9]+)%\)$/\1 paid \2 \3 \4/p' "$1" |
    sed -E 's/ did not pay / undone /' | awk '{ gm = 1 - $3 / $4; half = $5 / 200; d = gm - half
      if (d > -0.01 && d < 0.01) print "ok"            # the printed numbers are rounded: either way
      else if (($2 == "paid") == (d >= 0)) print "ok"; else print "bad: " $0 }'
}
mpi_undo_ok() {
  local v u
  v=$(judged "$D/mu.out")
  [ -n "$v" ] && ! grep -q '^bad' <<< "$v" || return 1
  for u in $(sed -nE 's/^step ([0-9]+): the switch at step [0-9]+ did not pay.*/\1/p' "$D/mu.out"); do
    grep -q '"event":"adapt_revert","step":'"$u"',"action":"undo"' "$D/mu.events.jsonl" || return 1
  done
}
if MPI_X="PIPETRAIN_TEST_PREDICT=0.2 OPENBLAS_NUM_THREADS=1" mpi 2 train --config "$D/cfg.json" --data "$D/text.txt" \
     --batch 8 --seq 16 --lr 3e-3 $pipe $slow --adapt --mem-limit schedule --transport mpi --metrics "$D/mu.jsonl" > "$D/mu.out" 2>&1 &&
   mpi_undo_ok && [ "$(numbers "$D/m0.jsonl")" = "$(numbers "$D/mu.jsonl")" ]; then
  ok "adapt policy: MPI: the switch judged on every rank alike at the same step ($(grep -c 'did not pay' "$D/mu.out") undone), as its measurements say; the same numbers"
else fail "adapt policy: MPI undo" "$(judged "$D/mu.out" | tr '\n' ' ') $(lines "$D/mu.out"; tail -2 "$D/mu.out")"; fi

# --- bad values
for v in 0 -1 x 4x 2.5 ''; do
  expect_error "adapt policy: --mem-limit '$v' is an error that says what it takes" \
    "--mem-limit (0: a stage holds at least 1 microbatch|'$v': give microbatches of activations a stage may hold \(N >= 1\), 'schedule')" \
    train --steps 2 --stages 2 --adapt --mem-limit "$v"
done
rm -rf "$D"
done_tests
