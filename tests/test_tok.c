/* The tokenizer (src/tok): GPT-2's pre-tokenizer rule piece by piece on awkward text (written out
 * by hand from the regex), ids of known strings, decode(encode(x)) == x on the corpus in
 * tests/tok/ and on random bytes, the two BPE forms against each other, many threads against
 * one, documents joined by <|endoftext|>, a small tokenizer.json, and bad files' errors. The ids
 * against the npm encoder itself: tests/test_tok.sh. Needs build/npm (make installs it). */
#include "test.h"
#include "test_tmpdir.h"
#include "tok/tok.h"
#include "tok/tok_unicode.h"
#include "util/pt.h"
#include <stdint.h>
#include <string.h>

static const char *corpus[] = {"code", "contractions", "emoji", "letters", "long", "numbers", "spaces"};
#define NCORPUS (int)(sizeof corpus / sizeof *corpus)

/* The pieces of s joined by '|'. */
static const char *pieces(const char *s, size_t n) {
    static char buf[4096];
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t end = tok_split_next((const uint8_t *)s, n, i);
        if (i) buf[k++] = '|';
        memcpy(buf + k, s + i, end - i);
        k += end - i;
        i = end;
    }
    buf[k] = 0;
    return buf;
}

/* s with control and non-ASCII bytes as \xNN, for a check's name. */
static const char *shown(const char *s) {
    static char buf[400];
    size_t k = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && k < sizeof buf - 5; p++)
        k += (size_t)(*p >= ' ' && *p < 0x7f ? sprintf(buf + k, "%c", *p) : sprintf(buf + k, "\\x%02x", *p));
    buf[k] = 0;
    return buf;
}

static void check_split(const char *s, const char *want) {
    char name[460];
    snprintf(name, sizeof name, "split \"%s\"", shown(s));
    const char *got = pieces(s, strlen(s));
    CHECK(name, !strcmp(got, want), "got \"%s\", want \"%s\"", got, want);
}

static void test_split(void) {
    check_split("Hello world", "Hello| world");
    check_split("it's IT'S 'sand", "it|'s| IT|'|S| '|sand");
    check_split("we're you'll I'd they've I'm", "we|'re| you|'ll| I|'d| they|'ve| I|'m");
    check_split("'s", "'s");
    check_split("x!'s", "x|!'|s");
    check_split("a  b", "a| | b");
    check_split("a   \n", "a|   \n");
    check_split("a\n\nb", "a|\n|\n|b");
    check_split("x \t y", "x| \t| y");
    check_split("\t\tx", "\t|\t|x");
    check_split("123abc 456 !!! ?x", "123|abc| 456| !!!| ?|x");
    check_split("a\xff" "b", "a|\xff|b");
    check_split(" \xff\xfe!x", " \xff\xfe!|x");
    check_split("ab\xe2\x82", "ab|\xe2\x82");
    check_split("q\xc0\xaf\xed\xa0\x80z", "q|\xc0\xaf\xed\xa0\x80|z");
    check_split("e\xcc\x81" "cole", "e|\xcc\x81|cole");                  /* U+0301 is a mark: other */
    check_split(" \xc2\x85" "b", " |\xc2\x85|b");                        /* U+0085 is White_Space */
    check_split("\xef\xbb\xbf" "ab", "\xef\xbb\xbf|ab");                 /* U+FEFF is not */
    check_split("\xe6\x97\xa5\xe6\x9c\xac \xef\xbc\x91\xef\xbc\x92", "\xe6\x97\xa5\xe6\x9c\xac| \xef\xbc\x91\xef\xbc\x92");
    check_split("x\xe3\x80\x80\xe3\x80\x80y", "x|\xe3\x80\x80|\xe3\x80\x80|y");   /* U+3000 */
    CHECK("unicode classes", tok_uclass(0x1F600) == TOK_UO && tok_uclass(0x0660) == TOK_UN &&
          tok_uclass(0x2167) == TOK_UN && tok_uclass(0x3042) == TOK_UL && tok_uclass(0x2028) == TOK_US &&
          tok_uclass(0x00A0) == TOK_US && tok_uclass(0x1D7CF) == TOK_UN, "a class is wrong (Unicode %s)",
          tok_unicode_version);
}

static int ids_are(tok_enc *e, const char *s, const int *want, size_t n) {
    int got[256];
    size_t k = tok_encode(e, s, strlen(s), got);
    return k == n && (n == 0 || !memcmp(got, want, n * sizeof *got));
}

static void test_known(const tok *t, tok_enc *e) {
    CHECK("gpt2 vocabulary", tok_vocab_size(t) == 50257 && tok_eot(t) == TOK_GPT2_EOT, "vocab %d eot %d",
          tok_vocab_size(t), tok_eot(t));
    CHECK("ids of Hello world", ids_are(e, "Hello world", (int[]){15496, 995}, 2), "wrong ids");
    CHECK("ids of a special token", ids_are(e, "a<|endoftext|>b", (int[]){64, 50256, 65}, 3), "wrong ids");
    CHECK("ids of two special tokens", ids_are(e, "<|endoftext|><|endoftext|>", (int[]){50256, 50256}, 2),
          "wrong ids");
    CHECK("ids of an empty text", ids_are(e, "", NULL, 0), "not empty");
    /* where the npm package differs (JavaScript's \s has U+FEFF, not U+0085): encoder.py's ids,
     * from tools/tok_reference.py */
    CHECK("ids of U+0085 after a space (encoder.py's)", ids_are(e, " \xc2\x85" "b", (int[]){220, 126, 227, 65}, 4),
          "wrong ids");
    CHECK("ids of U+FEFF after a space (encoder.py's)", ids_are(e, " \xef\xbb\xbf" "a", (int[]){27332, 119, 123, 64}, 4),
          "wrong ids");
}

static char *slurp(const char *path, size_t *n) {
    char *s = pt_read_file(path, n);
    if (!s) { printf("FAIL read %s: %s\n", path, pt_err()); exit(1); }
    return s;
}

/* decode(encode(x)) == x, and the heap form of BPE gives the rescanning form's ids. */
static void check_text(const tok *t, tok_enc *e, tok_enc *heap, const char *name, const char *s, size_t n) {
    int *a = pt_malloc((n + 1) * sizeof *a), *b = pt_malloc((n + 1) * sizeof *b);
    char *back = pt_malloc(n + 1), nm[200];
    size_t k = tok_encode(e, s, n, a), kh = tok_encode(heap, s, n, b);
    long len = tok_decode(t, a, k, back, n + 1);
    snprintf(nm, sizeof nm, "round trip %s (%zu bytes, %zu ids)", name, n, k);
    CHECK(nm, len == (long)n && !memcmp(back, s, n), "decoded %ld bytes, differ", len);
    snprintf(nm, sizeof nm, "heap BPE equals rescanning BPE on %s", name);
    CHECK(nm, k == kh && !memcmp(a, b, k * sizeof *a), "%zu vs %zu ids", k, kh);
    free(a); free(b); free(back);
}

static void test_round_trips(const tok *t, tok_enc *e, tok_enc *heap) {
    char path[256];
    for (int i = 0; i < NCORPUS; i++) {
        size_t n;
        snprintf(path, sizeof path, "tests/tok/%s.txt", corpus[i]);
        char *s = slurp(path, &n);
        check_text(t, e, heap, path, s, n);
        free(s);
    }
    pt_rng r;
    pt_rng_seed(&r, 24);
    size_t n = 1 << 16;
    char *s = pt_malloc(n);
    for (size_t i = 0; i < n; i++) s[i] = (char)(pt_rng_next(&r) & 0xff);
    check_text(t, e, heap, "random bytes", s, n);
    const char alphabet[] = "ab c'\n\t 1\xc3\xa9\xe6\x97\xa5\xff.,";   /* text-like bytes, broken UTF-8 too */
    for (size_t i = 0; i < n; i++) s[i] = alphabet[pt_rng_next(&r) % (sizeof alphabet - 1)];
    check_text(t, e, heap, "random text-like bytes", s, n);
    free(s);
}

/* A text over 3 chunks long: the corpus again and again, each copy numbered. */
static char *big_text(size_t want, size_t *n) {
    char *s = pt_malloc(want + 65536), path[256];
    size_t k = 0;
    for (int copy = 0; k < want; copy++) {
        k += (size_t)sprintf(s + k, "copy %d\n", copy);
        size_t m;
        snprintf(path, sizeof path, "tests/tok/%s.txt", corpus[copy % NCORPUS]);
        char *c = slurp(path, &m);
        memcpy(s + k, c, m);
        k += m;
        free(c);
    }
    *n = k;
    return s;
}

static void test_threads_and_docs(const tok *t, tok_enc *e) {
    size_t n;
    char *s = big_text(3500000, &n);
    write_bytes(tpath("big.txt"), s, n);
    write_bytes(tpath("small.txt"), "it's a doc", 10);
    write_bytes(tpath("empty.txt"), "", 0);
    int *one = pt_malloc(n * sizeof *one), *many = NULL, *single = NULL, *docs = NULL;
    size_t k1 = tok_encode(e, s, n, one), km = 0, ks = 0, kd = 0;
    const char *big[] = {tpath("big.txt")};
    int rc = tok_encode_docs(t, big, 1, 4, NULL, NULL, &many, &km);
    int rc1 = tok_encode_docs(t, big, 1, 1, NULL, NULL, &single, &ks);
    CHECK("4 threads give one call's ids", rc == 0 && km == k1 && !memcmp(many, one, k1 * sizeof *one),
          "rc %d, %zu vs %zu ids (%s)", rc, km, k1, pt_err());
    CHECK("1 thread gives one call's ids", rc1 == 0 && ks == k1 && !memcmp(single, one, k1 * sizeof *one),
          "rc %d, %zu vs %zu ids", rc1, ks, k1);
    const char *three[] = {tpath("small.txt"), tpath("empty.txt"), tpath("small.txt")};
    rc = tok_encode_docs(t, three, 3, 2, NULL, NULL, &docs, &kd);
    int want[] = {270, 338, 257, 2205, 50256, 50256, 270, 338, 257, 2205};
    CHECK("documents joined by <|endoftext|>", rc == 0 && kd == 10 && !memcmp(docs, want, sizeof want),
          "rc %d, %zu ids", rc, kd);
    const char *missing[] = {tpath("no-such.txt")};
    free(docs);
    rc = tok_encode_docs(t, missing, 1, 1, NULL, NULL, &docs, &kd);
    CHECK("a missing input file is named", rc < 0 && strstr(pt_err(), "no-such.txt"), "rc %d: %s", rc, pt_err());
    free(s); free(one); free(many); free(single); free(docs);
}

/* GPT-2's stand-in character for byte b (bytes_to_unicode), as UTF-8 into out. */
static void byte_char(int b, char *out) {
    static int map[256];
    if (!map['!']) {
        int k = 0;
        for (int c = 0; c < 256; c++)
            map[c] = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE ? c : 256 + k++;
    }
    int cp = map[b];
    if (cp < 0x80) { out[0] = (char)cp; out[1] = 0; }
    else { out[0] = (char)(0xC0 | cp >> 6); out[1] = (char)(0x80 | (cp & 0x3F)); out[2] = 0; }
}

static void write_hf(const char *name, const char *pre) {
    char path[300], c[4];
    snprintf(path, sizeof path, "%s", tpath(name));
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"normalizer\": null, \"pre_tokenizer\": %s,\n \"added_tokens\": [{\"id\": 258, \"content\": "
               "\"<|x|>\", \"special\": true}],\n \"model\": {\"type\": \"BPE\", \"vocab\": {", pre);
    for (int b = 0; b < 256; b++) {
        byte_char(b, c);
        fprintf(f, "%s\"%s%s\": %d", b ? ", " : "", c[0] == '"' || c[0] == '\\' ? "\\" : "", c, b);
    }
    fprintf(f, ", \"ab\": 256, \"abc\": 257}, \"merges\": [\"a b\", [\"ab\", \"c\"]]}}\n");
    fclose(f);
}

static void test_hf_json(void) {
    write_hf("tokenizer.json", "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}");
    tok *t = NULL;
    int rc = tok_load(&t, tpath("tokenizer.json"));
    CHECK("a small tokenizer.json loads", rc == 0, "%s", pt_err());
    if (rc < 0) return;
    tok_enc *e = tok_enc_new(t);
    CHECK("its merges, added token and bytes", ids_are(e, "abcab<|x|> abc", (int[]){257, 256, 258, 32, 257}, 5) &&
          tok_vocab_size(t) == 259, "wrong ids");
    tok_enc_free(e);
    tok_free(t);
    write_hf("tokenizer-ws.json", "{\"type\": \"Whitespace\"}");
    rc = tok_load(&t, tpath("tokenizer-ws.json"));
    CHECK("a tokenizer.json of another kind is refused", rc < 0 && strstr(pt_err(), "ByteLevel"), "%s", pt_err());
}

/* Loading dir/encoder.json + dir/vocab.bpe made of text: the error, or "" when it loaded. */
static const char *load_pair(const char *enc, size_t enc_len, const char *bpe) {
    write_bytes(tpath("encoder.json"), enc, enc_len);
    write_bytes(tpath("vocab.bpe"), bpe, strlen(bpe));
    tok *t = NULL;
    if (tok_load(&t, tmpdir) == 0) { tok_free(t); return ""; }
    return pt_err();
}

static void test_bad_files(const tok *gpt2) {
    tok *t = NULL;
    int rc = tok_load(&t, tpath("nothing"));
    CHECK("a missing tokenizer is named", rc < 0 && strstr(pt_err(), "nothing") && strstr(pt_err(), "no such"),
          "%s", pt_err());
    char path[1200];
    size_t n;
    snprintf(path, sizeof path, "%s/encoder.json", tok_source(gpt2));
    char *enc = slurp(path, &n);
    const char *err = load_pair(enc, 5000, "#version: 0.2\n");
    CHECK("a truncated encoder.json", strstr(err, "encoder.json line 1: not valid JSON"), "%s", err);
    err = load_pair(enc, n, "#version: 0.2\n\xc4\xa0 t\nzzzq qqqz\n");
    CHECK("a merge of unknown tokens names its line", strstr(err, "vocab.bpe line 3") && strstr(err, "zzzq"), "%s", err);
    err = load_pair(enc, n, "#version: 0.2\n\xc4\xa0 t x\n");
    CHECK("a malformed merge line", strstr(err, "vocab.bpe line 2") && strstr(err, "not a merge"), "%s", err);
    err = load_pair("{\"a\": 0, \"b\": 1}", 16, "#version: 0.2\na b\n");
    CHECK("a vocabulary without every byte", strstr(err, "fewer than the 256 single bytes"), "%s", err);
    char bytes[4096], c[4];
    size_t k = (size_t)sprintf(bytes, "{\"\\u4e00\": 256");
    for (int b = 0; b < 256; b++) {
        byte_char(b, c);
        k += (size_t)sprintf(bytes + k, ", \"%s%s\": %d", c[0] == '"' || c[0] == '\\' ? "\\" : "", c, b);
    }
    k += (size_t)sprintf(bytes + k, "}");
    err = load_pair(bytes, k, "#version: 0.2\na b\n");
    CHECK("a token outside the byte alphabet", strstr(err, "U+4E00") && strstr(err, "byte alphabet"), "%s", err);
    free(enc);
    setenv(TOK_GPT2_ENV, tpath("nowhere"), 1);
    rc = tok_load(&t, "gpt2");
    CHECK("$PIPETRAIN_GPT2_DIR without the files is named", rc < 0 && strstr(pt_err(), "nowhere") &&
          strstr(pt_err(), TOK_GPT2_ENV), "%s", pt_err());
    unsetenv(TOK_GPT2_ENV);
    data_set *d = NULL;
    rc = data_from_ids(&d, "x.txt", (int[]){1}, 0, 50257);
    CHECK("no tokens is an error", rc < 0 && strstr(pt_err(), "x.txt: no tokens"), "%s", pt_err());
}

int main(void) {
    test_split();
    tmpdir_make("pt_tok_");
    tok *t = NULL;
    if (tok_load(&t, "gpt2") < 0) {
        char why[512] = "";
        FILE *f = fopen("build/npm/.gpt2-vocab", "r");   /* the Makefile's record of the npm install */
        int failed = f && fgets(why, sizeof why, f) && !strncmp(why, "failed", 6);
        if (f) fclose(f);
        tmpdir_remove();
        if (failed) {
            printf("skip tests/test_tok.c: GPT-2's files are not installed: %s", why);
            return 0;
        }
        printf("FAIL gpt2 files: %s\n", pt_err());
        return 1;
    }
    tok_enc *e = tok_enc_new(t), *heap = tok_enc_new(t);
    tok_enc_set_heap_min(heap, 2);
    test_known(t, e);
    test_round_trips(t, e, heap);
    test_threads_and_docs(t, e);
    test_hf_json();
    test_bad_files(t);
    tok_enc_free(e);
    tok_enc_free(heap);
    tok_free(t);
    tmpdir_remove();
    TEST_DONE();
}
