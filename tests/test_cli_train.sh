# Command-line contract of train, grad and sample (single process): a short training run whose
# loss falls, metrics lines, checkpoint + exact resume, sampling, and bad input that must give a
# clear error naming the file and field (non-zero exit, no crash).
. tests/lib.sh
P=$PIPETRAIN
D=$TEST_TMP/cli_train
mkdir -p "$D"
FX=tests/fixtures/gpt-tiny
cat > "$D/cfg.json" <<'J'
{"n_layer": 2, "n_head": 2, "n_embd": 32, "vocab_size": 256, "n_positions": 32}
J
# A small repetitive text corpus: a model learns it quickly.
for i in $(seq 1 200); do echo "the quick brown fox jumps over the lazy dog $((i % 7))"; done > "$D/text.txt"

train() { "$P" train --config "$D/cfg.json" --data "$D/text.txt" --batch 4 --seq 16 --lr 3e-3 --threads 1 "$@"; }

# --- a run whose loss falls, with metrics and checkpoints
if train --steps 40 --metrics "$D/m.jsonl" --save "$D/run" --save-every 20 > "$D/train.out" 2>&1; then
  ok "train runs"
else
  fail "train runs" "$(tail -3 "$D/train.out")"
fi
n=$(wc -l < "$D/m.jsonl")
[ "$n" -eq 40 ] && ok "metrics: one line per step" || fail "metrics: one line per step" "got $n lines"
head -1 "$D/m.jsonl" | grep -q '"step":1,"loss":' && ok "metrics: step starts at 1 with loss" \
  || fail "metrics: step starts at 1 with loss" "$(head -1 "$D/m.jsonl")"
first=$(head -1 "$D/m.jsonl" | sed 's/.*"loss":\([0-9.]*\).*/\1/')
last=$(tail -5 "$D/m.jsonl" | sed 's/.*"loss":\([0-9.]*\).*/\1/' | sort -g | tail -1)
awk -v a="$first" -v b="$last" 'BEGIN{exit !(b < a - 1.0)}' && ok "loss falls (from $first to <= $last)" \
  || fail "loss falls" "first $first, worst of last five $last"
grep -q 'tok/s' "$D/train.out" && grep -q 'left' "$D/train.out" && ok "progress line: tokens/s and time left" \
  || fail "progress line" "$(head -3 "$D/train.out")"
[ -f "$D/run/ckpt-20/manifest.json" ] && [ -f "$D/run/ckpt-40/manifest.json" ] && ok "checkpoints every 20 steps" \
  || fail "checkpoints every 20 steps" "$(ls "$D/run")"
ls "$D/run" | grep -q tmp && fail "no temporary folders left" "$(ls "$D/run")" || ok "no temporary folders left"

# --- resume from step 20 continues exactly: same losses for steps 21..40
if train --steps 40 --resume "$D/run/ckpt-20" --metrics "$D/m2.jsonl" > "$D/resume.out" 2>&1; then
  a=$(sed -n '21,40p' "$D/m.jsonl" | sed 's/.*"loss":\([0-9.]*\).*/\1/' | tr '\n' ' ')
  b=$(sed 's/.*"loss":\([0-9.]*\).*/\1/' "$D/m2.jsonl" | tr '\n' ' ')
  [ "$a" = "$b" ] && ok "resume: losses equal the uninterrupted run" || fail "resume: losses equal" "$a vs $b"
else
  fail "resume runs" "$(tail -3 "$D/resume.out")"
fi

train --steps 1 --metrics "$D/new/sub/m.jsonl" > /dev/null 2>&1
[ -s "$D/new/sub/m.jsonl" ] && ok "metrics: its folder is created" || fail "metrics: its folder is created" "no file"

# --- resume: appends to --metrics, refuses conflicting flags, says when there is nothing to do
cp "$D/m.jsonl" "$D/m3.jsonl"; head -20 "$D/m.jsonl" > "$D/m3.jsonl"
train --steps 40 --resume "$D/run/ckpt-20" --metrics "$D/m3.jsonl" > /dev/null 2>&1
[ "$(wc -l < "$D/m3.jsonl")" -eq 40 ] && ok "resume appends to the metrics file" \
  || fail "resume appends to the metrics file" "$(wc -l < "$D/m3.jsonl") lines"
expect_error "resume: --init conflicts" "--init and --resume" train --steps 40 --resume "$D/run/ckpt-20" --init "$FX/model.safetensors"
printf '{"n_layer": 3, "n_head": 2, "n_embd": 32, "vocab_size": 256, "n_positions": 32}' > "$D/other.json"
expect_error "resume: a --config of another model" "other.json describes another model" \
  "$P" train --config "$D/other.json" --data "$D/text.txt" --batch 4 --seq 16 --steps 40 --resume "$D/run/ckpt-20"
out=$(train --steps 10 --resume "$D/run/ckpt-20" 2>&1); rc=$?
[ $rc -eq 0 ] && echo "$out" | grep -q "nothing to do" && ok "resume past --steps says nothing to do" \
  || fail "resume past --steps says nothing to do" "rc $rc: $out"

# --- sample from the run folder (newest checkpoint) and from config + weights
"$P" sample --checkpoint "$D/run" --prompt "the " --length 40 --seed 2 > "$D/s.out" 2>&1 \
  && [ "$(wc -c < "$D/s.out")" -ge 44 ] && ok "sample from a run folder" || fail "sample" "$(cat "$D/s.out")"
# never from an incomplete checkpoint: a newer "ckpt-N" without manifest.json (a save cut short)
# and a crashed save's temporary folder are skipped for the newest complete one
newest=$(ls -d "$D"/run/ckpt-* | sort -t- -k2 -n | tail -1)
cp -r "$D/run" "$D/inc" && mkdir "$D/inc/ckpt-900" && cp "$newest"/*.safetensors "$D/inc/ckpt-900/" \
  && cp -r "$newest" "$D/inc/ckpt-950.tmp.99999"
"$P" sample --checkpoint "$newest" --prompt "the " --length 20 --seed 2 > "$D/s_newest.out" 2>&1
"$P" sample --checkpoint "$D/inc" --prompt "the " --length 20 --seed 2 > "$D/s_inc.out" 2>&1 \
  && cmp -s "$D/s_newest.out" "$D/s_inc.out" && ok "sample: a newer incomplete checkpoint (no manifest, temporary name) is skipped" \
  || fail "sample: a newer incomplete checkpoint is skipped" "$(head -3 "$D/s_inc.out")"
mkdir -p "$D/only_inc/ckpt-5" "$D/only_inc/ckpt-7.tmp.99999" && cp "$newest"/*.safetensors "$D/only_inc/ckpt-5/"
expect_error "sample: a run folder with only incomplete checkpoints" "only_inc: .*no complete checkpoint folder ckpt-<step>" \
  "$P" sample --checkpoint "$D/only_inc" --length 5
"$P" sample --config "$FX/config.json" --init "$FX/model.safetensors" --length 10 > /dev/null 2>&1 \
  && ok "sample from config + weights" || fail "sample from config + weights" "non-zero exit"

out=$("$P" sample --config "$FX/config.json" --init "$FX/model.safetensors" --length 5 --prompt-tokens 3,4 2>&1)
echo "$out" | grep -Eq '^3 4( [0-9]+){5} ?$' && ok "sample: a non-byte vocabulary prints token ids" \
  || fail "sample: a non-byte vocabulary prints token ids" "$out"
expect_error "sample: text prompt on a non-byte vocabulary" "prompt-tokens" \
  "$P" sample --config "$FX/config.json" --init "$FX/model.safetensors" --length 5 --prompt hi
expect_error "sample: token id out of range" "entry 1 is not a token id" \
  "$P" sample --config "$FX/config.json" --init "$FX/model.safetensors" --length 5 --prompt-tokens 3,99

# --- train --plan runs the layout the planner chose
if "$P" plan --config "$D/cfg.json" --cluster examples/cluster-local.json --global-batch 8 --seq 16 \
     --out "$D/plan.json" > "$D/plan.out" 2>&1; then
  ok "plan writes a plan file"
  if "$P" train --config "$D/cfg.json" --data "$D/text.txt" --plan "$D/plan.json" --steps 3 --lr 1e-3 > "$D/tp.out" 2>&1 \
     && grep -q "^plan .*stages x dp" "$D/tp.out" && grep -q "step *3/3" "$D/tp.out"; then
    ok "train --plan runs the planned layout"
  else
    fail "train --plan runs the planned layout" "$(tail -3 "$D/tp.out")"
  fi
  grep -q "^note: .*plan.json was planned for devices 0.* this run does not place ranks on devices" "$D/tp.out" \
    && ok "train --plan says which devices the plan assumed" \
    || fail "train --plan says which devices the plan assumed" "$(head -3 "$D/tp.out")"
  expect_error "train --plan with layout flags" "--plan sets the layout" \
    "$P" train --config "$D/cfg.json" --data "$D/text.txt" --plan "$D/plan.json" --stages 2 --steps 1
  expect_error "train --plan with another batch" "plan.json: the plan is for a global batch of 8" \
    "$P" train --config "$D/cfg.json" --data "$D/text.txt" --plan "$D/plan.json" --batch 6 --steps 1
else
  fail "plan writes a plan file" "$(tail -3 "$D/plan.out")"
fi
# a plan with tensor parallelism (and zero): train --plan runs tp and zero as planned
if "$P" plan --config "$D/cfg.json" --cluster examples/cluster-local.json --global-batch 8 --seq 16 \
     --tp 2 --zero 1 --out "$D/plan-tp.json" > "$D/plan-tp.out" 2>&1 \
   && grep -q '"tp":[[:space:]]*2' "$D/plan-tp.json"; then
  if "$P" train --config "$D/cfg.json" --data "$D/text.txt" --plan "$D/plan-tp.json" --steps 2 --lr 1e-3 > "$D/tp2.out" 2>&1 \
     && grep -q "^plan .* x tp 2, .*zero 1" "$D/tp2.out" && grep -q "^pipeline: .*tp 2" "$D/tp2.out" \
     && grep -q "step *2/2" "$D/tp2.out"; then
    ok "train --plan runs a plan's tp and zero"
  else
    fail "train --plan runs a plan's tp and zero" "$(head -4 "$D/tp2.out"; tail -2 "$D/tp2.out")"
  fi
  sed -E 's/"tp_overlap":([[:space:]]*)false/"tp_overlap":\1true/; s/"tp_recompute":([[:space:]]*)false/"tp_recompute":\1true/; s/"sp":([[:space:]]*)true/"sp":\1false/' \
    "$D/plan-tp.json" > "$D/plan-tp2.json"
  if "$P" train --config "$D/cfg.json" --data "$D/text.txt" --plan "$D/plan-tp2.json" --steps 2 --lr 1e-3 > "$D/tp3.out" 2>&1 \
     && grep -q "^plan .* x tp 2, .*tp-recompute, tp-overlap" "$D/tp3.out" && grep -q "step *2/2" "$D/tp3.out"; then
    ok "train --plan runs a plan's tp-recompute and tp-overlap"
  else
    fail "train --plan runs a plan's tp-recompute and tp-overlap" "$(grep -c tp_ "$D/plan-tp2.json"; head -3 "$D/tp3.out"; tail -2 "$D/tp3.out")"
  fi
  # a plan with sequence parallelism ("sp": true; tp_overlap off, which sp excludes): train runs --sp
  sed -E 's/"sp":([[:space:]]*)false/"sp":\1true/; s/"tp_overlap":([[:space:]]*)true/"tp_overlap":\1false/' \
    "$D/plan-tp.json" > "$D/plan-sp.json"
  if "$P" train --config "$D/cfg.json" --data "$D/text.txt" --plan "$D/plan-sp.json" --steps 2 --lr 1e-3 > "$D/tp4.out" 2>&1 \
     && grep -q "^plan .* x tp 2, .*, sp" "$D/tp4.out" && grep -q "sequence parallel" "$D/tp4.out" \
     && grep -q "step *2/2" "$D/tp4.out"; then
    ok "train --plan runs a plan's sp"
  else
    fail "train --plan runs a plan's sp" "$(grep -c '"sp"' "$D/plan-sp.json"; head -3 "$D/tp4.out"; tail -2 "$D/tp4.out")"
  fi
  expect_error "train --plan with --tp" "--plan sets the layout" \
    "$P" train --config "$D/cfg.json" --data "$D/text.txt" --plan "$D/plan-tp.json" --tp 2 --steps 1
else
  fail "plan --tp 2 writes tp into the plan file" "$(tail -3 "$D/plan-tp.out")"
fi
expect_error "train --plan: missing file" "nope-plan.json" train --plan "$D/nope-plan.json" --steps 1

# --- no layout flag: the trainer picks this machine's layout and says which; --threads keeps one
# process; the default's losses are one process's up to float summation order
"$P" train --config "$D/cfg.json" --data "$D/text.txt" --batch 4 --seq 16 --lr 3e-3 --steps 4 \
  --metrics "$D/auto.jsonl" > "$D/auto.out" 2>&1
if [ "$(nproc)" -ge 2 ]; then want='^layout: data parallel over [0-9]+ threads'; else want='^layout: one process'; fi
grep -Eq "$want" "$D/auto.out" && ok "train without layout flags says the layout it chose" \
  || fail "train without layout flags says the layout it chose" "$(head -3 "$D/auto.out")"
train --steps 4 --metrics "$D/one.jsonl" > "$D/one.out" 2>&1
grep -q '^layout:' "$D/one.out" && fail "train --threads 1: one process, no layout chosen" "$(head -2 "$D/one.out")" \
  || ok "train --threads 1: one process, no layout chosen"
lossof() { sed 's/.*"loss":\([0-9.]*\).*/\1/' "$1"; }
paste <(lossof "$D/auto.jsonl") <(lossof "$D/one.jsonl") | awk '
  { d = $1 - $2; if (d < 0) d = -d; if (d > 1e-4 * $2) bad = 1; n++ } END { exit bad || n != 4 }' \
  && ok "train's default layout gives one process's losses (float summation order aside)" \
  || fail "train's default layout gives one process's losses" "$(paste <(lossof "$D/auto.jsonl") <(lossof "$D/one.jsonl") | tr '\n' ' ')"

# --- bad input: clear errors naming what and where
expect_error "grad: a folder as the config" "not a regular file" \
  "$P" grad --config "$D" --tokens "$FX/tokens.bin" --batch 2 --seq 13 --out "$D/g.st"
printf '{"n_layer": 100000, "n_head": 2, "n_embd": 100000, "vocab_size": 256, "n_positions": 32}' > "$D/huge.json"
# (sanitizer allocators abort on such sizes unless told to return NULL like malloc does)
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}allocator_may_return_null=1" \
TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS:}allocator_may_return_null=1" \
expect_error "grad: a model too large for memory is an error, not a crash" "cannot be allocated" \
  "$P" grad --config "$D/huge.json" --tokens "$D/text.txt" --batch 1 --seq 4 --out "$D/g.st"
expect_error "train: missing config file" "nope.json" train --config nope.json --steps 1
printf '{"n_layer": 2, "n_head": 3, "n_embd": 32, "vocab_size": 256, "n_positions": 32}' > "$D/bad.json"
expect_error "train: n_embd not divisible by n_head" "bad.json.*n_embd.*n_head" \
  "$P" train --config "$D/bad.json" --data "$D/text.txt" --batch 2 --seq 8 --steps 1
printf '{"n_layer": 2, "n_embd": 32, "vocab_size": 256, "n_positions": 32}' > "$D/nohead.json"
expect_error "train: missing key" "nohead.json.*n_head" \
  "$P" train --config "$D/nohead.json" --data "$D/text.txt" --batch 2 --seq 8 --steps 1
expect_error "train: seq longer than n_positions" "n_positions" train --seq 64 --steps 1
expect_error "train: too little data" "too few|at least" train --batch 512 --seq 32 --steps 1
expect_error "train: unknown flag" "unknown flag '--bogus'" train --bogus 1
expect_error "train: bad number" "--lr expects a number" train --lr abc
expect_error "train: bad lr schedule" "lr-schedule" train --lr-schedule linear --steps 1
expect_error "train: --stages 0" "--stages must be >= 1" train --stages 0 --steps 1
expect_error "train: --dp 0" "--dp must be >= 1" train --dp 0 --steps 1
expect_error "train: --microbatches 0" "--microbatches must be >= 1" train --stages 2 --microbatches 0 --steps 1
expect_error "train: negative --grad-clip" "--grad-clip must be >= 0" train --grad-clip -1 --steps 1
expect_error "train: negative --lr-min" "--lr-min" train --lr-schedule cosine --lr-min -1 --steps 1
expect_error "train: diverging run stops with an error" "diverged" train --lr 1e10 --grad-clip 0 --steps 8
mkdir -p "$D/adir"
out=$(train --stages 2 --steps 3 --svg "$D/adir" 2>&1); rc=$?
[ $rc -ne 0 ] && echo "$out" | grep -q "svg.*adir" && ! echo "$out" | grep -q "^step" \
  && ok "train: an unwritable --svg fails before training" || fail "train: an unwritable --svg fails before training" "rc $rc: $out"
head -c 100 "$FX/model.safetensors" > "$D/trunc.safetensors"
expect_error "grad: truncated safetensors names the file" "trunc.safetensors" \
  "$P" grad --config "$FX/config.json" --init "$D/trunc.safetensors" --tokens "$FX/tokens.bin" --batch 2 --seq 13 --out "$D/g.st"
expect_error "grad: weights of another shape name the tensor" "wte.weight.*shape|shape.*wte" \
  "$P" grad --config "$D/cfg.json" --init "$FX/model.safetensors" --tokens "$FX/tokens.bin" --batch 2 --seq 13 --out "$D/g.st"
cp "$FX/tokens.bin" "$D/badmagic.bin"; printf '\x01\x02\x03\x04' | dd of="$D/badmagic.bin" conv=notrunc 2>/dev/null
expect_error "grad: wrong token-file magic" "badmagic.bin.*magic" \
  "$P" grad --config "$FX/config.json" --init "$FX/model.safetensors" --tokens "$D/badmagic.bin" --batch 2 --seq 13 --out "$D/g.st"
printf '{"n_layer": 2, "n_head": 3, "n_embd": 24, "vocab_size": 10, "n_positions": 32}' > "$D/v10.json"
expect_error "grad: token out of the vocabulary" "tokens.bin.*out of the vocabulary" \
  "$P" grad --config "$D/v10.json" --tokens "$FX/tokens.bin" --batch 2 --seq 13 --out "$D/g.st"
expect_error "grad: missing token file" "missing.bin" \
  "$P" grad --config "$FX/config.json" --tokens "$D/missing.bin" --batch 2 --seq 13 --out "$D/g.st"
cp -r "$D/run/ckpt-40" "$D/corrupt"; printf 'XXXX' | dd of="$D/corrupt/chunk-0.safetensors" bs=1 seek=200 conv=notrunc 2>/dev/null
expect_error "sample: corrupt checkpoint names the file" "corrupt/chunk-0.safetensors.*(checksum|corrupt)" \
  "$P" sample --checkpoint "$D/corrupt" --length 5
expect_error "sample: not a checkpoint" "not a checkpoint|no such|neither" "$P" sample --checkpoint "$D" --length 5
done_tests
