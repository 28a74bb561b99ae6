/* io module, bad input: truncated and corrupted safetensors (every prefix length, every header
 * byte), each malformed header field, bad JSON configs, bad token files and batch requests.
 * Every failure must be a clean -1 whose message names the file and the field or tensor; a crash
 * or a sanitizer report fails the run. Good input is tests/test_io.c. */
#include "io/data.h"
#include "io/io.h"
#include "model/config.h"
#include "io/safetensors.h"
#include "util/pt.h"
#include "test.h"
#include "test_tmpdir.h"
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* The error is set and mentions both strings (b may be NULL). */
static int err_has(const char *a, const char *b) {
    return strstr(pt_err(), a) != NULL && (!b || strstr(pt_err(), b) != NULL);
}

/* ------------------------------------------------------------------ safetensors */

/* A file with the given header JSON (unpadded) and `data_len` bytes of data. */
static void write_st(const char *path, const char *json, size_t data_len) {
    size_t hl = strlen(json);
    unsigned char *buf = pt_calloc(8 + hl + data_len, 1);
    uint64_t n = hl;
    memcpy(buf, &n, 8);
    memcpy(buf + 8, json, hl);
    write_bytes(path, buf, 8 + hl + data_len);
    free(buf);
}

static void test_st_fields(void) {
    struct { const char *name, *json; size_t data; const char *want1, *want2; } cases[] = {
        {"st offsets past the data", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, "'a'", "run past the end"},
        {"st begin > end", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, "'a'", "begin > end"},
        {"st size vs shape", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, "'a'", "need 12"},
        {"st duplicate names", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                               "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}", 2, "'a'", "twice"},
        {"st overlap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                       "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "'b'", "overlap"},
        {"st gap", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                   "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12, "'b'", "unused"},
        {"st trailing data", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "after the last tensor", NULL},
        {"st unknown dtype", "{\"a\":{\"dtype\":\"F33\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "'a'", "F33"},
        {"st dtype not a string", "{\"a\":{\"dtype\":4,\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "'a'", "dtype"},
        {"st dtype missing", "{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "'a'", "dtype"},
        {"st shape not an array", "{\"a\":{\"dtype\":\"F32\",\"shape\":4,\"data_offsets\":[0,4]}}", 4, "'a'", "shape"},
        {"st shape negative", "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 4, "'a'", "shape"},
        {"st shape fractional", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,4]}}", 4, "'a'", "shape"},
        {"st shape string", "{\"a\":{\"dtype\":\"F32\",\"shape\":[\"1\"],\"data_offsets\":[0,4]}}", 4, "'a'", "shape"},
        {"st shape overflow", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],"
                              "\"data_offsets\":[0,4]}}", 4, "'a'", "overflow"},
        {"st shape byte overflow", "{\"a\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],"
                                   "\"data_offsets\":[0,4]}}", 4, "'a'", "overflow"},
        {"st shape too many dims", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                                   "\"data_offsets\":[0,4]}}", 4, "'a'", "dimensions"},
        {"st offsets three numbers", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4,8]}}", 4, "'a'", "data_offsets"},
        {"st offsets strings", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[\"0\",\"4\"]}}", 4, "'a'", "data_offsets"},
        {"st offsets huge", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[1e300,1e301]}}", 4, "'a'", "data_offsets"},
        {"st offsets missing", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", 4, "'a'", "data_offsets"},
        {"st entry not an object", "{\"a\":5}", 0, "'a'", "not a JSON object"},
        {"st metadata value not a string", "{\"__metadata__\":{\"format\":1}}", 0, "__metadata__", "format"},
        {"st metadata not an object", "{\"__metadata__\":[1]}", 0, "__metadata__", NULL},
        {"st metadata key twice", "{\"__metadata__\":{\"a\":\"1\",\"b\":\"2\",\"a\":\"3\"}}", 0, "__metadata__", "\"a\" appears twice"},
        {"st metadata twice", "{\"__metadata__\":{},\"__metadata__\":{}}", 0, "__metadata__", "twice"},
        {"st header an array", "[{\"a\":1}]", 0, "header", NULL},
        {"st header parse error", "{\"a\":{\"dtype\":\"F32\",}", 0, "parse error", NULL},
        {"st header stray bytes", "{}  x", 0, "stray bytes", NULL},
    };
    int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        const char *path = tpath("bad.safetensors");
        write_st(path, cases[i].json, cases[i].data);
        st_file *f = NULL;
        int rc = st_open(&f, path);
        CHECK(cases[i].name, rc == -1 && f == NULL && err_has(path, cases[i].want1) &&
              (!cases[i].want2 || err_has(cases[i].want2, NULL)), "rc %d: %s", rc, pt_err());
        st_close(f);
    }
}

static void test_st_file_level(void) {
    st_file *f = NULL;
    const char *path = tpath("nothere.safetensors");
    CHECK("st missing file", st_open(&f, path) == -1 && err_has(path, "cannot open"), "%s", pt_err());
    CHECK("st a folder", st_open(&f, tmpdir) == -1 && err_has(tmpdir, "regular"), "%s", pt_err());
    path = tpath("short.safetensors");
    write_bytes(path, "\x02\0\0", 3);
    CHECK("st shorter than 8 bytes", st_open(&f, path) == -1 && err_has(path, "too short"), "%s", pt_err());
    unsigned char huge[64] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, '{', '}'};
    write_bytes(path, huge, sizeof huge);
    CHECK("st huge header length", st_open(&f, path) == -1 && err_has(path, "header length"), "%s", pt_err());
    unsigned char not_json[16] = {8, 0, 0, 0, 0, 0, 0, 0, 'P', 'K', 3, 4};
    write_bytes(path, not_json, sizeof not_json);
    CHECK("st not a safetensors file", st_open(&f, path) == -1 && err_has(path, "JSON object"), "%s", pt_err());
}

/* A valid small file (metadata, three dtypes, a scalar) as bytes; *n gets its length. */
static unsigned char *small_valid_file(size_t *n) {
    float a[6] = {1, 2, 3, 4, 5, 6}, s = 7;
    uint16_t h[3] = {0x3c00, 1, 2};
    int64_t s23[2] = {2, 3}, s3[1] = {3};
    st_writer *w = st_writer_new();
    st_writer_add(w, "h.0.attn.c_attn.weight", ST_F32, 2, s23, a);
    st_writer_add(w, "half", ST_F16, 1, s3, h);
    st_writer_add(w, "loss", ST_F32, 0, NULL, &s);
    st_writer_meta(w, "format", "pt");
    const char *path = tpath("valid.safetensors");
    st_write(w, path);
    st_writer_free(w);
    return (unsigned char *)pt_read_file(path, n);
}

/* Every proper prefix of a valid file must fail cleanly, naming the file. The file is cut
 * shorter in place (ftruncate), longest first. */
static void test_st_truncated(void) {
    size_t n;
    unsigned char *full = small_valid_file(&n);
    const char *path = tpath("trunc.safetensors");
    write_bytes(path, full, n);
    st_file *f = NULL;
    CHECK("st untruncated control opens", st_open(&f, path) == 0, "%s", pt_err());
    st_close(f);
    int fd = open(path, O_WRONLY), bad = -1;
    for (size_t len = n; len-- > 0 && bad < 0;) {
        if (ftruncate(fd, (off_t)len) != 0) { perror("ftruncate"); exit(2); }
        f = NULL;
        if (st_open(&f, path) == 0 || !err_has(path, NULL)) bad = (int)len;
        st_close(f);
    }
    close(fd);
    CHECK("st truncated at every byte fails cleanly", bad < 0, "length %d of %zu: %s", bad, n, pt_err());
    free(full);
}

/* Sum of tensor bytes equals the data section: the invariant a successful open promises. */
static int tiles_data(const st_file *f, size_t file_len) {
    uint64_t hl;
    size_t sum = 0;
    FILE *fp = fopen(st_path(f), "rb");
    if (!fp || fread(&hl, 8, 1, fp) != 1) { if (fp) fclose(fp); return 0; }
    fclose(fp);
    for (int i = 0; i < st_count(f); i++) sum += st_at(f, i)->nbytes;
    return sum == file_len - 8 - hl;
}

/* Opens path after writing `b` at byte pos (in place), checks the outcome, restores the byte.
 * Returns 1 when the outcome is clean: a failure naming the file, or a self-consistent file. */
static int try_damage(int fd, const char *path, size_t file_len, size_t pos, unsigned char b,
                      unsigned char orig, int *opened) {
    if (pwrite(fd, &b, 1, (off_t)pos) != 1) { perror("pwrite"); exit(2); }
    st_file *f = NULL;
    int rc = st_open(&f, path);
    int clean = rc == 0 ? tiles_data(f, file_len) : err_has(path, NULL);
    *opened += rc == 0;
    st_close(f);
    if (pwrite(fd, &orig, 1, (off_t)pos) != 1) { perror("pwrite"); exit(2); }
    return clean;
}

/* Each header byte (and the length bytes) replaced by characters that matter to JSON; then
 * random multi-byte damage. Opening may succeed (a changed digit can still be valid) but then
 * the file must be self-consistent; failing must name the file. */
static void test_st_corrupted(void) {
    size_t n;
    unsigned char *full = small_valid_file(&n);
    uint64_t hl;
    memcpy(&hl, full, 8);
    const char *path = tpath("corrupt.safetensors");
    write_bytes(path, full, n);
    int fd = open(path, O_WRONLY);
    const unsigned char subs[] = {'x', '"', '{', '}', '[', ']', ',', ':', '0', '9', '-', '.', 'e', ' ', 0, 0xff, '\\'};
    int bad = -1, opened = 0, tried = 0;
    for (size_t pos = 0; pos < 8 + hl && bad < 0; pos++)
        for (size_t k = 0; k < sizeof subs && bad < 0; k++) {
            if (full[pos] == subs[k]) continue;
            tried++;
            if (!try_damage(fd, path, n, pos, subs[k], full[pos], &opened)) bad = (int)pos;
        }
    CHECK("st every header byte corrupted: clean result", bad < 0, "byte %d: %s", bad, pt_err());
    CHECK("st corruption mostly detected", opened < tried / 2, "%d of %d opened", opened, tried);
    close(fd);
    pt_rng r;
    pt_rng_seed(&r, 7);
    bad = -1;
    unsigned char *buf = pt_malloc(n);
    for (int trial = 0; trial < 500 && bad < 0; trial++) {
        memcpy(buf, full, n);
        for (int j = 0; j < 3; j++) buf[pt_rng_next(&r) % (8 + hl)] = (unsigned char)pt_rng_next(&r);
        write_bytes(path, buf, n);
        st_file *f = NULL;
        int rc = st_open(&f, path);
        if (rc == 0 ? !tiles_data(f, n) : !err_has(path, NULL)) bad = trial;
        st_close(f);
    }
    CHECK("st random header damage: clean result", bad < 0, "trial %d: %s", bad, pt_err());
    free(buf);
    free(full);
}

/* A write that fails half way (file size limit) reports the path and leaves the old file whole. */
static void test_st_write_failure(void) {
    float small = 1, big[2048] = {0};
    int64_t shape[1] = {2048};
    const char *path = tpath("keep.safetensors");
    st_writer *w = st_writer_new();
    st_writer_add(w, "old", ST_F32, 0, NULL, &small);
    st_write(w, path);
    st_writer_free(w);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 4096;                      /* the new file needs 8 KiB */
    signal(SIGXFSZ, SIG_IGN);                 /* then write() fails with EFBIG instead */
    setrlimit(RLIMIT_FSIZE, &lim);
    w = st_writer_new();
    st_writer_add(w, "new", ST_F32, 1, shape, big);
    int rc = st_write(w, path);
    st_writer_free(w);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, SIG_DFL);
    CHECK("st_write failure names the file", rc == -1 && err_has(path, "write failed"), "rc %d: %s", rc, pt_err());
    st_file *f = NULL;
    rc = st_open(&f, path);
    CHECK("st_write failure keeps the old file", rc == 0 && st_find(f, "old") && !st_find(f, "new"), "%s", pt_err());
    st_close(f);
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    CHECK("st_write failure removes its temporary", access(tmp, F_OK) != 0, "%s left", tmp);
}

/* ------------------------------------------------------------------ config */

static void test_config_bad(void) {
    struct { const char *name, *json, *want1, *want2; } cases[] = {
        {"config missing key", "{\"n_layer\":2,\"n_embd\":8,\"vocab_size\":10,\"n_positions\":4}", "missing key \"n_head\"", NULL},
        {"config missing n_positions and n_ctx", "{\"n_layer\":2,\"n_head\":2,\"n_embd\":8,\"vocab_size\":10}", "missing key \"n_positions\"", NULL},
        {"config fractional value", "{\"n_layer\":2,\"n_head\":2,\"n_embd\":2.5,\"vocab_size\":10,\"n_positions\":4}", "n_embd", "integer"},
        {"config string value", "{\"n_layer\":2,\"n_head\":2,\"n_embd\":\"12\",\"vocab_size\":10,\"n_positions\":4}", "n_embd", "string"},
        {"config boolean value", "{\"n_layer\":true,\"n_head\":2,\"n_embd\":8,\"vocab_size\":10,\"n_positions\":4}", "n_layer", "boolean"},
        {"config null value", "{\"n_layer\":2,\"n_head\":null,\"n_embd\":8,\"vocab_size\":10,\"n_positions\":4}", "n_head", NULL},
        {"config huge value", "{\"n_layer\":1e12,\"n_head\":2,\"n_embd\":8,\"vocab_size\":10,\"n_positions\":4}", "n_layer", NULL},
        {"config heads do not divide", "{\"n_layer\":2,\"n_head\":3,\"n_embd\":10,\"vocab_size\":10,\"n_positions\":4}",
         "n_embd (10) is not divisible by n_head (3)", NULL},
        {"config zero layers", "{\"n_layer\":0,\"n_head\":2,\"n_embd\":8,\"vocab_size\":10,\"n_positions\":4}", "n_layer", NULL},
        {"config negative vocab", "{\"n_layer\":1,\"n_head\":2,\"n_embd\":8,\"vocab_size\":-5,\"n_positions\":4}", "vocab_size", NULL},
        {"config n_inner unsupported", "{\"n_layer\":1,\"n_head\":2,\"n_embd\":8,\"vocab_size\":5,\"n_positions\":4,\"n_inner\":20}", "n_inner", NULL},
        {"config duplicate key", "{\"n_layer\":1,\"n_head\":2,\"n_head\":4,\"n_embd\":8,\"vocab_size\":5,\"n_positions\":4}", "n_head", "more than once"},
        {"config parse error line", "{\n \"n_layer\": 2,\n \"n_head\": 2,,\n \"n_embd\": 8\n}", "line 3", "parse error"},
        {"config not an object", "[1, 2]", "object", NULL},
        {"config empty file", "", "parse error", NULL},
        {"config trailing junk", "{\"n_layer\":1,\"n_head\":2,\"n_embd\":8,\"vocab_size\":5,\"n_positions\":4} x", "parse error", NULL},
    };
    const char *path = tpath("gpt.json");
    for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_bytes(path, cases[i].json, strlen(cases[i].json));
        gpt_config c = {.n_layer = 7, .n_head = 7, .n_embd = 7, .vocab_size = 7, .n_positions = 7};
        int rc = config_load_json(&c, path);
        CHECK(cases[i].name, rc == -1 && err_has(path, cases[i].want1) &&
              (!cases[i].want2 || err_has(cases[i].want2, NULL)) && c.n_layer == 7 && c.n_positions == 7,
              "rc %d: %s", rc, pt_err());
    }
    gpt_config c;
    const char *missing = tpath("nothere.json");
    CHECK("config missing file", config_load_json(&c, missing) == -1 && err_has(missing, NULL), "%s", pt_err());
    gpt_config bad = {.n_layer = 1, .n_head = 3, .n_embd = 10, .vocab_size = 5, .n_positions = 4};
    const char *out = tpath("out.json");
    CHECK("config save refuses invalid", config_save_json(&bad, out) == -1 && err_has(out, "n_embd") &&
          access(out, F_OK) != 0, "%s", pt_err());
}

/* ------------------------------------------------------------------ token data */

/* A token-file image: header (magic, version, count) then `ntok` uint16 tokens = i % 256. */
static unsigned char *token_image(int32_t magic, int32_t version, int32_t count, size_t ntok, size_t *len) {
    *len = 1024 + 2 * ntok;
    unsigned char *b = pt_calloc(*len, 1);
    int32_t h[3] = {magic, version, count};
    memcpy(b, h, sizeof h);
    for (size_t i = 0; i < ntok; i++) { uint16_t t = (uint16_t)(i % 256); memcpy(b + 1024 + 2 * i, &t, 2); }
    return b;
}

static void expect_data_error(const char *name, const char *path, int vocab, const char *want) {
    data_set *d = NULL;
    int rc = data_open(&d, path, vocab);
    CHECK(name, rc == -1 && d == NULL && err_has(path, want), "rc %d: %s", rc, pt_err());
    data_close(d);
}

static void test_tokens_bad(void) {
    size_t len;
    unsigned char *img;
    const char *path = tpath("x.bin");
    expect_data_error("data missing file", tpath("nothere.bin"), 256, "cannot open");
    expect_data_error("data a folder", tmpdir, 256, "not a regular file");
    img = token_image(20240520, 1, 100, 0, &len);
    write_bytes(path, img, 100);
    expect_data_error("data shorter than header", path, 256, "shorter than the 1024-byte header");
    free(img);
    img = token_image(12345, 1, 10, 10, &len);
    write_bytes(path, img, len);
    expect_data_error("data bad magic", path, 256, "x.bin: bad magic 12345 (expected 20240520, an llm.c token file)");
    write_bytes(tpath("x.dat"), img, len);   /* NUL bytes: not text either, whatever the name */
    expect_data_error("data bad magic, binary without .bin", tpath("x.dat"), 256, "bad magic 12345");
    free(img);
    img = token_image(20240520, 2, 10, 10, &len);
    write_bytes(path, img, len);
    expect_data_error("data wrong version", path, 256, "version 2");
    free(img);
    img = token_image(20240520, 1, 11, 10, &len);
    write_bytes(path, img, len);
    expect_data_error("data truncated", path, 256, "truncated");
    free(img);
    img = token_image(20240520, 1, 9, 10, &len);
    write_bytes(path, img, len);
    expect_data_error("data trailing bytes", path, 256, "trailing bytes");
    write_bytes(path, img, len - 1);
    expect_data_error("data odd trailing byte", path, 256, "header says 9 tokens");
    free(img);
    img = token_image(20240520, 1, -3, 0, &len);
    write_bytes(path, img, len);
    expect_data_error("data negative count", path, 256, "negative");
    free(img);
    write_bytes(path, "", 0);
    expect_data_error("data empty file", path, 256, "empty");
    expect_data_error("data vocab_size not positive", path, 0, "vocab_size");
}

static void test_tokens_vocab(void) {
    static int toks[2000];
    for (int i = 0; i < 2000; i++) toks[i] = i;
    toks[1234] = 60000;
    const char *path = tpath("x.bin");
    data_write_tokens(path, toks, 2000);
    expect_data_error("data token out of vocabulary", path, 50257,
                      "x.bin: token 60000 at position 1234 is out of the vocabulary (vocab_size 50257)");
    const char *txt = tpath("t.txt");
    write_bytes(txt, "plain text", 10);
    expect_data_error("data text needs vocab 256", txt, 100, "vocab_size");
    toks[3] = 70000;
    const char *w = tpath("w.bin");
    CHECK("data_write_tokens rejects 70000", data_write_tokens(w, toks, 10) == -1 &&
          err_has(w, "token 70000 at position 3") && access(w, F_OK) != 0, "%s", pt_err());
    toks[3] = -1;
    CHECK("data_write_tokens rejects -1", data_write_tokens(w, toks, 10) == -1 && err_has(w, "-1"), "%s", pt_err());
}

/* Every prefix of a token file fails cleanly (cut in place, longest first). */
static void test_tokens_truncated(void) {
    static int toks[20];
    for (int i = 0; i < 20; i++) toks[i] = i;
    const char *path = tpath("cut.bin");
    data_write_tokens(path, toks, 20);
    struct stat sb;
    stat(path, &sb);
    int fd = open(path, O_WRONLY), bad = -1;
    for (off_t len = sb.st_size; len-- > 0 && bad < 0;) {
        if (ftruncate(fd, len) != 0) { perror("ftruncate"); exit(2); }
        data_set *d = NULL;
        if (data_open(&d, path, 256) == 0 || !err_has(path, NULL)) bad = (int)len;
        data_close(d);
    }
    close(fd);
    CHECK("data truncated at every byte fails cleanly", bad < 0, "length %d: %s", bad, pt_err());
}

static void test_batch_bad(void) {
    static int toks[100];
    const char *path = tpath("hundred.bin");
    data_write_tokens(path, toks, 100);
    data_set *d = NULL;
    if (data_open(&d, path, 256) != 0) { CHECK("batch bad open", 0, "%s", pt_err()); return; }
    int in[128], tg[128];
    CHECK("data too few tokens", data_batch(d, 0, 4, 32, in, tg) == -1 &&
          err_has(path, "100 tokens are too few for batch 4 x seq 32 (needs at least 129)"), "%s", pt_err());
    CHECK("data zero batch size", data_batch(d, 0, 0, 32, in, tg) == -1 && err_has(path, "batch 0"), "%s", pt_err());
    CHECK("data negative batch index", data_batch(d, -1, 1, 8, in, tg) == -1 && err_has(path, "-1"), "%s", pt_err());
    CHECK("data shuffle too few tokens", data_batch_index(d, 4, 32, 1, 0) == -1 && err_has(path, "too few"),
          "%s", pt_err());
    CHECK("data shuffle negative step", data_batch_index(d, 1, 8, 1, -2) == -1 && err_has(path, "-2"), "%s", pt_err());
    data_close(d);
}

int main(void) {
    tmpdir_make("pt_test_io_bad_");
    test_st_fields();
    test_st_file_level();
    test_st_truncated();
    test_st_corrupted();
    test_st_write_failure();
    test_config_bad();
    test_tokens_bad();
    test_tokens_vocab();
    test_tokens_truncated();
    test_batch_bad();
    tmpdir_remove();
    TEST_DONE();
}
