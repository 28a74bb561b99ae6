#!/usr/bin/env bash
# Scaling out on the command line (threads transport; MPI: tests/test_run_mpi.sh): --zero 1 and
# the overlapped reduction give bitwise the parameters of --zero 0 and the deferred reduction;
# memory per rank in the header and the start event; --resume DIR takes the save root and,
# after a kill -9 in the middle of a save, resumes its newest complete checkpoint (the next
# save removes the cut one); --keep N; bad input (--keep 0, --zero 2, --zero 1 with --dp 1).
. tests/lib.sh
BUILD=${BUILD:-build}
P=$PIPETRAIN
CMP="$BUILD/tests/aux_run_cmp"
D=$TEST_TMP/scaleout
mkdir -p "$D"
cat > "$D/cfg.json" <<'J'
{"n_layer": 4, "n_head": 2, "n_embd": 32, "vocab_size": 256, "n_positions": 32}
J
for i in $(seq 1 200); do echo "the quick brown fox jumps over the lazy dog $((i % 7))"; done > "$D/text.txt"
train() { "$P" train --config "$D/cfg.json" --data "$D/text.txt" --batch 8 --seq 16 --lr 3e-3 --grad-clip 0.5 "$@"; }
loss() { sed 's/.*"loss":\([0-9.]*\).*/\1/' "$1"; }

# --- --zero 1 and the overlapped reduction: the same parameters, bit for bit
lay="--stages 2 --dp 2 --schedule interleaved-1f1b --chunks 2 --microbatches 2"
for mode in "z0def:--zero 0 --no-overlap" "z0ovl:--zero 0" "z1def:--zero 1 --no-overlap" "z1ovl:--zero 1"; do
  name=${mode%%:*}; flags=${mode#*:}
  train --steps 4 $lay $flags --save "$D/$name" --metrics "$D/$name.jsonl" > "$D/$name.out" 2>&1 \
    || fail "train $flags runs" "$(tail -3 "$D/$name.out")"
done
for name in z0ovl z1def z1ovl; do
  same=1
  for c in 0 1 2 3; do "$CMP" "$D/z0def/ckpt-4/chunk-$c.safetensors" "$D/$name/ckpt-4/chunk-$c.safetensors" 0 >/dev/null || same=0; done
  [ $same = 1 ] && ok "$name: parameters after 4 steps equal --zero 0 deferred bitwise" \
    || fail "$name: parameters after 4 steps equal --zero 0 deferred bitwise" "chunk files differ"
done
[ "$(loss "$D/z1ovl.jsonl")" = "$(loss "$D/z0def.jsonl")" ] && ok "--zero 1 overlapped: the same losses" \
  || fail "--zero 1 overlapped: the same losses" "$(loss "$D/z1ovl.jsonl" | tr '\n' ' ')"
ls "$D/z1ovl/ckpt-4"/optim-3.safetensors >/dev/null 2>&1 && ! ls "$D/z0def/ckpt-4"/optim-* >/dev/null 2>&1 \
  && ok "--zero 1 checkpoints: a moments file per rank" || fail "--zero 1 checkpoints: a moments file per rank" "$(ls "$D/z1ovl/ckpt-4")"
train --steps 6 --stages 4 --microbatches 4 --resume "$D/z1ovl" --metrics "$D/r.jsonl" > "$D/r.out" 2>&1
train --steps 6 $lay --metrics "$D/full.jsonl" > /dev/null 2>&1
[ -s "$D/r.jsonl" ] && [ "$(tail -2 "$D/full.jsonl" | loss /dev/stdin)" = "$(loss "$D/r.jsonl")" ] \
  && ok "a --zero 1 checkpoint resumes under --zero 0, P=4, D=1: the same losses" \
  || fail "a --zero 1 checkpoint resumes under --zero 0, P=4, D=1" "$(tail -3 "$D/r.out")"
grep -q "^resume: $D/z1ovl/ckpt-4 (the newest complete checkpoint in $D/z1ovl)" "$D/r.out" \
  && ok "--resume DIR names the checkpoint it took" || fail "--resume DIR names the checkpoint it took" "$(head -2 "$D/r.out")"

# --- the overlapped reduction on the timeline: interleaved, rank 0's stage 2 reduces (on the
# communication stream, tid 1) while its stage 0 still computes; --no-overlap: after it all
# span FIELD: "pid tid start end" of each trace span whose name matches NAME
spans() { grep -E "\"name\":\"$1\"" "$2" | sed -E 's/.*"pid":([0-9]+),"tid":([0-9]+),"ts":([0-9.]+),"dur":([0-9.]+).*/\1 \2 \3 \4/' |
          awk '{ print $1, $2, $3, $3 + $4 }'; }
train --steps 2 $lay --trace "$D/ovl.json" > /dev/null 2>&1
train --steps 2 $lay --no-overlap --trace "$D/def.json" > /dev/null 2>&1
last_w=$(spans '[0-9]+(W|BW)[0-9]+' "$D/ovl.json" | awk '$1 == 0 && $4 > m { m = $4 } END { print m }')
red2=$(spans '2REDUCE_GRAD' "$D/ovl.json" | awk '$1 == 0 { print $2, $3 }')
[ "${red2%% *}" = 1 ] && awk -v a="${red2#* }" -v b="$last_w" 'BEGIN { exit !(a < b) }' \
  && ok "overlap: stage 2's reduction runs on the communication stream before rank 0's last W ends" \
  || fail "overlap: stage 2's reduction runs before rank 0's last W ends" "reduce (tid start) $red2, last W end $last_w"
last_w=$(spans '[0-9]+(W|BW)[0-9]+' "$D/def.json" | awk '$1 == 0 && $4 > m { m = $4 } END { print m }')
red=$(spans '[0-9]REDUCE_GRAD' "$D/def.json" | awk -v w="$last_w" '$1 == 0 && ($2 != 0 || $3 < w) { bad = 1 } END { print bad + 0 }')
[ "$red" = 0 ] && ok "--no-overlap: reductions on the compute stream after the rank's last W" \
  || fail "--no-overlap: reductions after the rank's last W" "$(spans '[0-9]REDUCE_GRAD' "$D/def.json" | head -2)"

# --- memory per rank: the header line and the start event
grep -Eq '^memory per rank \(MB, params/grads/optimizer/activations\): r0 [0-9.]+/[0-9.]+/[0-9.]+/[0-9.]+, r1' "$D/z1ovl.out" \
  && ok "header: memory per rank" || fail "header: memory per rank" "$(grep memory "$D/z1ovl.out")"
grep -q '"memory_bytes":{"params":\[' "$D/z1ovl.events.jsonl" \
  && ok "start event: memory_bytes per rank" || fail "start event: memory_bytes per rank" "$(head -c 300 "$D/z1ovl.events.jsonl")"
grep -Eq '^peak RSS: [0-9.]+ MB' "$D/z1ovl.out" && ok "end: peak RSS" || fail "end: peak RSS" "$(tail -4 "$D/z1ovl.out")"

# --- a kill -9 in the middle of a save; --resume DIR takes the newest complete checkpoint
cat > "$D/big.json" <<'J'
{"n_layer": 4, "n_head": 4, "n_embd": 128, "vocab_size": 256, "n_positions": 32}
J
bigargs=(train --config "$D/big.json" --data "$D/text.txt" --batch 8 --seq 16 --lr 1e-3 --stages 2 --microbatches 2)
big() { "$P" "${bigargs[@]}" "$@"; }
# complete DIR: the steps of its complete checkpoints (folders named ckpt-<step> exactly)
complete() { ls "$1" 2>/dev/null | grep -E '^ckpt-[0-9]+$' | sed 's/ckpt-//' | sort -n; }
cut=0
for try in 1 2 3; do
  rm -rf "$D/kill"
  "$P" "${bigargs[@]}" --steps 400 --save "$D/kill" --save-every 1 > "$D/kill.out" 2>&1 &
  pid=$!   # pipetrain itself (not a subshell): the kill must reach it
  trap 'kill -9 $pid 2>/dev/null' EXIT
  for i in $(seq 1 4000); do   # a save under way once one is complete: kill it there
    [ -n "$(complete "$D/kill")" ] && ls -d "$D/kill"/ckpt-*.tmp.* >/dev/null 2>&1 && break
    kill -0 $pid 2>/dev/null || break
  done
  kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
  ls -d "$D/kill"/ckpt-*.tmp.* >/dev/null 2>&1 && { cut=1; break; }
done
newest=$(complete "$D/kill" | tail -1)
[ $cut = 1 ] && ok "kill -9 in the middle of a save leaves a cut temporary folder (try $try)" \
  || fail "kill -9 in the middle of a save leaves a cut temporary folder" "none seen in 3 tries: $(ls "$D/kill" | head)"
if [ -n "$newest" ]; then
  next=$((newest + 2))
  big --steps $next --resume "$D/kill" --save "$D/kill" --metrics "$D/kres.jsonl" > "$D/kres.out" 2>&1
  big --steps $next --metrics "$D/kfull.jsonl" > /dev/null 2>&1
  grep -q "^resume: $D/kill/ckpt-$newest " "$D/kres.out" && [ "$(tail -2 "$D/kfull.jsonl" | loss /dev/stdin)" = "$(loss "$D/kres.jsonl")" ] \
    && ok "--resume DIR after the kill: the newest complete checkpoint (ckpt-$newest), the same losses" \
    || fail "--resume DIR after the kill" "$(head -3 "$D/kres.out") | $(loss "$D/kres.jsonl" | tr '\n' ' ')"
  ls -d "$D/kill"/ckpt-*.tmp.* >/dev/null 2>&1 && fail "the next save removes the cut folder" "$(ls "$D/kill")" \
    || ok "the next save removes the cut folder"
else fail "--resume DIR after the kill" "no complete checkpoint was saved"; fi

# --- --keep N
train --steps 6 --stages 2 --microbatches 2 --save "$D/keep" --save-every 1 --keep 2 > /dev/null 2>&1
[ "$(complete "$D/keep" | tr '\n' ' ')" = "5 6 " ] \
  && ok "--keep 2: the newest two checkpoints stay" || fail "--keep 2: the newest two checkpoints stay" "$(ls "$D/keep")"

# --- bad input
expect_error "--keep 0 is an error naming the flag" "--keep 0: keep at least the newest checkpoint" \
  train --steps 1 --stages 2 --save "$D/k0" --keep 0
expect_error "--keep without --save" "--keep 2 needs --save" train --steps 1 --keep 2
expect_error "--zero 2 says it is not supported" "--zero 2 \(sharded gradients\) is not supported" train --steps 1 --stages 2 --zero 2
expect_error "--zero 1 with pipedream" "--zero 1 needs a synchronous schedule" train --steps 1 --stages 2 --schedule pipedream --zero 1
out=$(train --steps 1 --stages 2 --zero 1 2>&1)
echo "$out" | grep -q "^note: --zero 1 with --dp 1 shards only what several ranks hold" \
  && ok "--zero 1 with --dp 1: a note, and it runs" || fail "--zero 1 with --dp 1: a note" "$out"
expect_error "--resume of a folder without checkpoints names it" "holds no complete checkpoint folder" \
  train --steps 1 --stages 2 --resume "$D"
done_tests
