/* io module, good input: safetensors round trips (every dtype, scalar, empty, metadata, atomic
 * overwrite), a file laid out as Hugging Face writes GPT-2, F16/BF16/F64 conversion, JSON configs,
 * token files, text fallback, batches with wrap-around, the seeded batch order, the checked JSON
 * getters (good and bad values). Bad input is tests/test_io_bad.c. Files go to a fresh temporary folder that is removed at the end. */
#include "io/data.h"
#include "io/io.h"
#include "io/json.h"
#include "model/config.h"
#include "io/safetensors.h"
#include "util/pt.h"
#include "test.h"
#include "test_tmpdir.h"
#include <dirent.h>
#include <float.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

/* Files whose name says they are a writer's temporary. */
static int count_temporaries(void) {
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d))) n += strstr(e->d_name, ".tmp.") != NULL;
    if (d) closedir(d);
    return n;
}

/* ------------------------------------------------------------------ safetensors */

static void test_st_roundtrip(void) {
    float m[6] = {1, -2, 3.5f, 0, 1e-30f, 3e38f}, scalar = 42.5f;
    uint16_t h[4] = {0x3c00, 0xc000, 0x7bff, 0x0001};
    uint16_t bf[4] = {0x3f80, 0xc040, 0x3eaa, 0x0000};
    int64_t i64[3] = {-1, INT64_MAX, 7};
    double f64[2] = {0.1, -1e300};
    uint8_t u8[5] = {0, 1, 2, 254, 255}, bo[3] = {1, 0, 1};
    int64_t s23[2] = {2, 3}, s4[1] = {4}, s22[2] = {2, 2}, s3[1] = {3}, s5[1] = {5}, s04[2] = {0, 4},
            s2[1] = {2};
    st_writer *w = st_writer_new();
    int rc = 0;
    rc |= st_writer_add(w, "u8", ST_U8, 1, s5, u8);             /* size 1 first: layout reorders */
    rc |= st_writer_add(w, "m", ST_F32, 2, s23, m);
    rc |= st_writer_add(w, "half", ST_F16, 1, s4, h);
    rc |= st_writer_add(w, "bf", ST_BF16, 2, s22, bf);
    rc |= st_writer_add(w, "i64", ST_I64, 1, s3, i64);
    rc |= st_writer_add(w, "scalar", ST_F32, 0, NULL, &scalar);
    rc |= st_writer_add(w, "empty", ST_F32, 2, s04, NULL);
    rc |= st_writer_add(w, "bool", ST_BOOL, 1, s3, bo);
    rc |= st_writer_add(w, "f64", ST_F64, 1, s2, f64);
    rc |= st_writer_add(w, "we\"ird\\name\n", ST_F32, 0, NULL, &scalar);
    rc |= st_writer_meta(w, "format", "pt");
    rc |= st_writer_meta(w, "step", "1");
    rc |= st_writer_meta(w, "step", "12");                    /* replaces */
    CHECK("st_writer_add", rc == 0, "%s", pt_err());
    const char *path = tpath("rt.safetensors");
    rc = st_write(w, path);
    CHECK("st_write", rc == 0, "%s", pt_err());
    st_writer_free(w);

    st_file *f = NULL;
    rc = st_open(&f, path);
    CHECK("st_open roundtrip", rc == 0, "%s", pt_err());
    if (rc) return;
    const char *order[] = {"u8", "m", "half", "bf", "i64", "scalar", "empty", "bool", "f64", "we\"ird\\name\n"};
    int names_ok = st_count(f) == 10;
    for (int i = 0; names_ok && i < 10; i++) names_ok = strcmp(st_at(f, i)->name, order[i]) == 0;
    CHECK("st roundtrip names in insertion order", names_ok, "count %d", st_count(f));
    const st_tensor *t = st_find(f, "m");
    CHECK("st roundtrip f32", t && t->dtype == ST_F32 && t->ndim == 2 && t->shape[0] == 2 &&
          t->shape[1] == 3 && t->numel == 6 && memcmp(t->data, m, sizeof m) == 0, "m");
    t = st_find(f, "i64");
    CHECK("st roundtrip i64 bytes", t && t->dtype == ST_I64 && memcmp(t->data, i64, sizeof i64) == 0, "i64");
    t = st_find(f, "u8");
    CHECK("st roundtrip u8", t && t->dtype == ST_U8 && t->nbytes == 5 && memcmp(t->data, u8, 5) == 0, "u8");
    t = st_find(f, "bool");
    CHECK("st roundtrip bool", t && t->dtype == ST_BOOL && memcmp(t->data, bo, 3) == 0, "bool");
    t = st_find(f, "scalar");
    CHECK("st roundtrip scalar", t && t->ndim == 0 && t->numel == 1 && memcmp(t->data, &scalar, 4) == 0, "scalar");
    t = st_find(f, "empty");
    CHECK("st roundtrip empty tensor", t && t->ndim == 2 && t->shape[0] == 0 && t->numel == 0 &&
          t->nbytes == 0, "empty");
    CHECK("st roundtrip odd name", st_find(f, "we\"ird\\name\n") != NULL, "escaped name lost");
    CHECK("st_find missing", st_find(f, "nope") == NULL, "found a ghost");
    CHECK("st roundtrip metadata", st_meta_count(f) == 2 && strcmp(st_meta(f, "format"), "pt") == 0 &&
          strcmp(st_meta(f, "step"), "12") == 0 && st_meta(f, "x") == NULL, "metadata");
    int aligned = 1;
    for (int i = 0; i < st_count(f); i++)
        aligned &= (uintptr_t)st_at(f, i)->data % st_dtype_size(st_at(f, i)->dtype) == 0;
    CHECK("st data naturally aligned", aligned, "a tensor is misaligned");
    float got[6];
    rc = st_tensor_f32(f, st_find(f, "f64"), got);
    CHECK("st f64 to float", rc == 0 && got[0] == 0.1f && got[1] == -INFINITY, "%g %g", got[0], got[1]);
    st_close(f);

    FILE *fp = fopen(path, "rb");
    uint64_t hlen = 0;
    CHECK("st header padded to 8", fp && fread(&hlen, 8, 1, fp) == 1 && hlen % 8 == 0, "hlen %llu",
          (unsigned long long)hlen);
    if (fp) fclose(fp);
}

static void test_st_overwrite(void) {
    const char *path = tpath("over.safetensors");
    float a = 1, b = 2;
    for (int pass = 0; pass < 2; pass++) {
        st_writer *w = st_writer_new();
        st_writer_add(w, pass ? "b" : "a", ST_F32, 0, NULL, pass ? &b : &a);
        st_write(w, path);
        st_writer_free(w);
    }
    st_file *f = NULL;
    int rc = st_open(&f, path);
    CHECK("st_write replaces an existing file", rc == 0 && st_count(f) == 1 && st_find(f, "b"), "%s", pt_err());
    st_close(f);
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    CHECK("st_write leaves no temporary", access(tmp, F_OK) != 0, "%s exists", tmp);
    st_writer *w = st_writer_new();
    CHECK("st_write into a missing folder fails", st_write(w, "/nonexistent-dir/x.safetensors") == -1 &&
          strstr(pt_err(), "/nonexistent-dir/x.safetensors"), "%s", pt_err());
    st_writer_free(w);
}

/* A tiny GPT-2 state dict laid out byte for byte as Hugging Face's safetensors writes it:
 * "__metadata__" {"format":"pt"} first, tensors sorted by name, compact JSON, space padding,
 * no "transformer." prefix, attn.bias / attn.masked_bias buffers present, no lm_head. */
static void test_st_hf_gpt2(void) {
    struct { const char *name; int nd; int64_t s[4]; } ts[] = {
        {"h.0.attn.bias", 4, {1, 1, 4, 4}}, {"h.0.attn.c_attn.bias", 1, {24}},
        {"h.0.attn.c_attn.weight", 2, {8, 24}}, {"h.0.attn.c_proj.bias", 1, {8}},
        {"h.0.attn.c_proj.weight", 2, {8, 8}}, {"h.0.attn.masked_bias", 0, {0}},
        {"h.0.ln_1.bias", 1, {8}}, {"h.0.ln_1.weight", 1, {8}}, {"h.0.ln_2.bias", 1, {8}},
        {"h.0.ln_2.weight", 1, {8}}, {"h.0.mlp.c_fc.bias", 1, {32}}, {"h.0.mlp.c_fc.weight", 2, {8, 32}},
        {"h.0.mlp.c_proj.bias", 1, {8}}, {"h.0.mlp.c_proj.weight", 2, {32, 8}},
        {"ln_f.bias", 1, {8}}, {"ln_f.weight", 1, {8}}, {"wpe.weight", 2, {4, 8}}, {"wte.weight", 2, {10, 8}},
    };
    int nt = (int)(sizeof ts / sizeof ts[0]);
    char *hdr = pt_malloc(8192);
    float *data = pt_malloc(64 * 1024);
    size_t hl = (size_t)sprintf(hdr, "{\"__metadata__\":{\"format\":\"pt\"}"), at = 0;
    for (int i = 0; i < nt; i++) {
        size_t numel = 1;
        hl += (size_t)sprintf(hdr + hl, ",\"%s\":{\"dtype\":\"F32\",\"shape\":[", ts[i].name);
        for (int d = 0; d < ts[i].nd; d++) {
            numel *= (size_t)ts[i].s[d];
            hl += (size_t)sprintf(hdr + hl, "%s%lld", d ? "," : "", (long long)ts[i].s[d]);
        }
        hl += (size_t)sprintf(hdr + hl, "],\"data_offsets\":[%zu,%zu]}", at * 4, (at + numel) * 4);
        for (size_t j = 0; j < numel; j++) data[at + j] = (float)(i * 1000 + (int)j);
        at += numel;
    }
    hl += (size_t)sprintf(hdr + hl, "}");
    while (hl % 8) hdr[hl++] = ' ';
    const char *path = tpath("model.safetensors");
    FILE *fp = fopen(path, "wb");
    uint64_t n = hl;
    fwrite(&n, 8, 1, fp);
    fwrite(hdr, 1, hl, fp);
    fwrite(data, 4, at, fp);
    fclose(fp);

    st_file *f = NULL;
    int rc = st_open(&f, path);
    CHECK("st hf gpt2 opens", rc == 0, "%s", pt_err());
    if (rc) goto free_bufs;
    CHECK("st hf gpt2 metadata format pt", st_meta(f, "format") && !strcmp(st_meta(f, "format"), "pt"), "meta");
    CHECK("st hf gpt2 tensor count", st_count(f) == nt, "%d", st_count(f));
    float w[8 * 32];   /* the largest tensor read here */
    int64_t wte[2] = {10, 8}, qkv[2] = {8, 24};
    rc = st_read_f32(f, "wte.weight", w, 2, wte);
    CHECK("st hf gpt2 wte values", rc == 0 && w[0] == 17000 && w[79] == 17079, "%s", pt_err());
    rc = st_read_f32(f, "h.0.attn.c_attn.weight", w, 2, qkv);
    CHECK("st hf gpt2 c_attn (in, out)", rc == 0 && w[0] == 2000 && w[191] == 2191, "%s", pt_err());
    const st_tensor *mb = st_find(f, "h.0.attn.masked_bias"), *ab = st_find(f, "h.0.attn.bias");
    CHECK("st hf gpt2 buffers", mb && mb->ndim == 0 && ab && ab->ndim == 4 && ab->numel == 16, "buffers");
    CHECK("st hf gpt2 no lm_head", st_find(f, "lm_head.weight") == NULL, "lm_head");
    st_close(f);
free_bufs:
    free(hdr);
    free(data);
}

/* Every safetensors file in the PyTorch fixtures opens and validates. */
static void test_st_fixtures(void) {
    const char *cases[] = {"gpt-tiny", "gpt-odd", "gpt-hf"}, *files[] = {"model", "expected"};
    for (int c = 0; c < 3; c++)
        for (int k = 0; k < 2; k++) {
            char path[256], name[128];
            snprintf(path, sizeof path, "tests/fixtures/%s/%s.safetensors", cases[c], files[k]);
            if (access(path, R_OK) != 0) continue;
            st_file *f = NULL;
            int rc = st_open(&f, path);
            snprintf(name, sizeof name, "st fixture %s/%s opens", cases[c], files[k]);
            CHECK(name, rc == 0 && st_count(f) > 0, "%s", pt_err());
            st_close(f);
        }
}

/* Reference value of an IEEE half, built from its fields in double (exact). */
static float f16_reference(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
    return (float)(s ? -v : v);
}

static void test_st_half_conversion(void) {
    static uint16_t all[65536];
    static float got[65536];
    for (int i = 0; i < 65536; i++) all[i] = (uint16_t)i;
    int64_t shape[1] = {65536};
    st_writer *w = st_writer_new();
    st_writer_add(w, "h", ST_F16, 1, shape, all);
    st_writer_add(w, "b", ST_BF16, 1, shape, all);
    const char *path = tpath("half.safetensors");
    st_write(w, path);
    st_writer_free(w);
    st_file *f = NULL;
    if (st_open(&f, path) != 0) { CHECK("st half open", 0, "%s", pt_err()); return; }
    int bad = -1;
    st_read_f32(f, "h", got, 1, shape);
    for (int i = 0; i < 65536 && bad < 0; i++) {
        float r = f16_reference((uint16_t)i);
        if (isnan(r) ? !isnan(got[i]) : (got[i] != r || signbit(got[i]) != signbit(r))) bad = i;
    }
    CHECK("st F16 to float, all 65536 values", bad < 0, "0x%04x -> %g", bad, bad >= 0 ? got[bad] : 0);
    CHECK("st F16 known values", got[0x3c00] == 1.0f && got[0xc000] == -2.0f && got[0x7bff] == 65504.0f &&
          got[0x0001] == 0x1p-24f && got[0x7c00] == INFINITY, "known");
    bad = -1;
    st_read_f32(f, "b", got, 1, shape);
    for (int i = 0; i < 65536 && bad < 0; i++) {
        uint32_t bits = (uint32_t)i << 16;
        float r;
        memcpy(&r, &bits, 4);
        if (isnan(r) ? !isnan(got[i]) : memcmp(&r, &got[i], 4) != 0) bad = i;
    }
    CHECK("st BF16 to float, all 65536 values", bad < 0, "0x%04x", bad);
    CHECK("st BF16 known values", got[0x3f80] == 1.0f && got[0xc040] == -3.0f && got[0x3eaa] == 0.33203125f,
          "known");
    st_close(f);
}

/* A shape mismatch names file, tensor, both shapes; a non-float dtype is refused by name. */
static void test_st_read_errors(void) {
    static float z[24 * 96];
    int64_t got[2] = {24, 72}, want[2] = {24, 96}, one[1] = {3};
    int64_t idx[3] = {1, 2, 3};
    st_writer *w = st_writer_new();
    st_writer_add(w, "h.0.attn.c_attn.weight", ST_F32, 2, got, z);
    st_writer_add(w, "idx", ST_I64, 1, one, idx);
    const char *path = tpath("model.safetensors");
    st_write(w, path);
    st_writer_free(w);
    st_file *f = NULL;
    if (st_open(&f, path) != 0) { CHECK("st read errors open", 0, "%s", pt_err()); return; }
    int rc = st_read_f32(f, "h.0.attn.c_attn.weight", z, 2, want);
    CHECK("st shape mismatch message", rc == -1 && strstr(pt_err(), path) &&
          strstr(pt_err(), "tensor 'h.0.attn.c_attn.weight' has shape (24, 72), expected (24, 96)"),
          "%s", pt_err());
    rc = st_read_f32(f, "h.0.attn.c_attn.weight", z, 1, want);
    CHECK("st rank mismatch message", rc == -1 && strstr(pt_err(), "expected (24)"), "%s", pt_err());
    rc = st_read_f32(f, "idx", z, 1, one);
    CHECK("st non-float dtype refused", rc == -1 && strstr(pt_err(), "'idx'") && strstr(pt_err(), "I64"),
          "%s", pt_err());
    rc = st_read_f32(f, "wte.weight", z, 1, one);
    CHECK("st missing tensor message", rc == -1 && strstr(pt_err(), path) && strstr(pt_err(), "'wte.weight'"),
          "%s", pt_err());
    st_close(f);
}

static void test_st_writer_errors(void) {
    st_writer *w = st_writer_new();
    float x = 0;
    int64_t neg[1] = {-1}, big[2] = {INT64_C(1) << 40, INT64_C(1) << 40};
    st_writer_add(w, "a", ST_F32, 0, NULL, &x);
    CHECK("st_writer_add duplicate", st_writer_add(w, "a", ST_F32, 0, NULL, &x) == -1 &&
          strstr(pt_err(), "'a'"), "%s", pt_err());
    CHECK("st_writer_add reserved name", st_writer_add(w, "__metadata__", ST_F32, 0, NULL, &x) == -1, "ok?");
    CHECK("st_writer_add negative dim", st_writer_add(w, "n", ST_F32, 1, neg, &x) == -1 &&
          strstr(pt_err(), "'n'"), "%s", pt_err());
    CHECK("st_writer_add overflow", st_writer_add(w, "o", ST_F32, 2, big, &x) == -1, "accepted 2^80 elements");
    CHECK("st_writer_add too many dims", st_writer_add(w, "d", ST_F32, ST_MAX_DIMS + 1, big, &x) == -1, "ok?");
    st_writer_free(w);
}

/* A few MB of F32 survive the trip exactly (the path real checkpoints take). */
static void test_st_large(void) {
    size_t n = 1 << 20;
    float *a = pt_falloc(n), *b = pt_falloc(n);
    for (size_t i = 0; i < n; i++) a[i] = (float)i * 0.5f - 7.0f;
    int64_t shape[2] = {1024, 1024};
    st_writer *w = st_writer_new();
    st_writer_add(w, "big", ST_F32, 2, shape, a);
    const char *path = tpath("big.safetensors");
    int rc = st_write(w, path);
    st_writer_free(w);
    st_file *f = NULL;
    if (rc == 0) rc = st_open(&f, path);
    if (rc == 0) rc = st_read_f32(f, "big", b, 2, shape);
    CHECK("st 4 MB round trip", rc == 0 && memcmp(a, b, n * 4) == 0, "%s", pt_err());
    st_close(f);
    unlink(path);
    free(a);
    free(b);
}

/* ------------------------------------------------------------------ config */

static void test_config(void) {
    const char *path = tpath("gpt.json");
    const char *hf = "{\n \"activation_function\": \"gelu_new\",\n \"architectures\": [\"GPT2LMHeadModel\"],\n"
                     " \"n_ctx\": 1024, \"n_embd\": 768, \"n_head\": 12, \"n_inner\": null, \"n_layer\": 12,\n"
                     " \"n_positions\": 1024, \"vocab_size\": 50257, \"layer_norm_epsilon\": 1e-05,\n"
                     " \"task_specific_params\": {\"text-generation\": {\"max_length\": 50}}\n}\n";
    write_bytes(path, hf, strlen(hf));
    gpt_config c = {0};
    int rc = config_load_json(&c, path);
    CHECK("config hf gpt2", rc == 0 && c.n_layer == 12 && c.n_head == 12 && c.n_embd == 768 &&
          c.vocab_size == 50257 && c.n_positions == 1024, "%s", pt_err());
    const char *alias = "{\"n_layer\": 2, \"n_head\": 3, \"n_embd\": 12.0, \"vocab_size\": 65, \"n_ctx\": 9}";
    write_bytes(path, alias, strlen(alias));
    rc = config_load_json(&c, path);
    CHECK("config n_ctx alias", rc == 0 && c.n_positions == 9 && c.n_embd == 12, "%s", pt_err());
    gpt_config s = {.n_layer = 3, .n_head = 2, .n_embd = 10, .vocab_size = 77, .n_positions = 33}, back = {0};
    const char *saved = tpath("saved.json");
    rc = config_save_json(&s, saved);
    if (rc == 0) rc = config_load_json(&back, saved);
    CHECK("config save/load round trip", rc == 0 && memcmp(&s, &back, sizeof s) == 0, "%s", pt_err());
    cJSON *o = config_to_cjson(&s);
    rc = config_from_cjson(&back, o, "manifest");
    CHECK("config cjson round trip", rc == 0 && memcmp(&s, &back, sizeof s) == 0, "%s", pt_err());
    cJSON_Delete(o);
}

/* ------------------------------------------------------------------ token data */

static void test_tokens_roundtrip(void) {
    int toks[1000];
    for (int i = 0; i < 1000; i++) toks[i] = (i * 7919) % 50257;
    toks[999] = 65535;
    const char *path = tpath("x.bin");
    int rc = data_write_tokens(path, toks, 1000);
    CHECK("data_write_tokens", rc == 0, "%s", pt_err());
    data_set *d = NULL;
    rc = data_open(&d, path, 65536);
    int same = rc == 0 && data_ntokens(d) == 1000 && !data_is_text(d);
    for (int i = 0; same && i < 1000; i++) same = data_token(d, (size_t)i) == toks[i];
    CHECK("token file round trip", same, "%s", pt_err());
    data_close(d);
    FILE *f = fopen(path, "rb");
    int32_t h[256];
    CHECK("token file header layout", f && fread(h, 4, 256, f) == 256 && h[0] == 20240520 && h[1] == 1 &&
          h[2] == 1000 && h[3] == 0 && h[255] == 0, "header");
    if (f) fclose(f);
}

static void test_text(void) {
    const char *txt = "Hello, world!\nsecond line \xc3\xa9";
    const char *path = tpath("corpus.txt");
    write_bytes(path, txt, strlen(txt));
    data_set *d = NULL;
    int rc = data_open(&d, path, 256);
    int same = rc == 0 && data_ntokens(d) == strlen(txt) && data_is_text(d);
    for (size_t i = 0; same && i < strlen(txt); i++) same = data_token(d, i) == (unsigned char)txt[i];
    CHECK("text file is byte tokens", same, "%s", pt_err());
    data_close(d);
}

static void test_batches(void) {
    int toks[10];
    for (int i = 0; i < 10; i++) toks[i] = 100 + i;
    const char *path = tpath("ten.bin");
    data_write_tokens(path, toks, 10);
    data_set *d = NULL;
    if (data_open(&d, path, 256) != 0) { CHECK("batches open", 0, "%s", pt_err()); return; }
    int in[6], tg[6];
    int rc = data_batch(d, 0, 2, 3, in, tg);
    CHECK("batch 0", rc == 0 && in[0] == 100 && in[5] == 105 && tg[0] == 101 && tg[5] == 106, "%s", pt_err());
    rc = data_batch(d, 1, 2, 3, in, tg);   /* starts at 6: 106..109 then wraps to 100.. */
    int want_in[6] = {106, 107, 108, 109, 100, 101}, want_tg[6] = {107, 108, 109, 100, 101, 102};
    CHECK("batch 1 wraps around", rc == 0 && !memcmp(in, want_in, sizeof in) && !memcmp(tg, want_tg, sizeof tg),
          "in %d %d %d %d %d %d", in[0], in[1], in[2], in[3], in[4], in[5]);
    int ok = 1;
    int64_t ks[] = {2, 3, 7, 123456789, INT64_C(1) << 40, INT64_MAX};
    for (int j = 0; j < 6 && ok; j++) {
        unsigned __int128 start = ((unsigned __int128)ks[j] * 6) % 10;
        ok = data_batch(d, ks[j], 2, 3, in, tg) == 0;
        for (int i = 0; ok && i < 6; i++)
            ok = in[i] == 100 + (int)((start + (unsigned)i) % 10) && tg[i] == 100 + (int)((start + (unsigned)i + 1) % 10);
    }
    CHECK("batch k starts at k*B*T mod n (large k)", ok, "mismatch");
    CHECK("batch uses exactly B*T+1 tokens", data_check_batch(d, 3, 3) == 0 && data_check_batch(d, 2, 5) == -1,
          "9+1 fits 10, 10+1 does not");
    data_close(d);
}

/* io/json.h: 0 present and valid (*out set), 1 absent and optional (nothing set, no error), -1
 * with the caller's message when wrong, out of range, or absent and required (*out untouched). */
static void test_json_getters(void) {
    cJSON *o = cJSON_Parse("{\"n\": 3, \"half\": 2.5, \"neg\": -1, \"inf\": 1e999, \"s\": \"abc\", "
                           "\"t\": true, \"big\": 9007199254740992}");
    int i = -7;
    long l = 0;
    double d = -7;
    const char *s = NULL;
    bool b = false;
    CHECK("json int present", io_json_int(&i, o, "n", IO_JSON_REQUIRED, 1, 10, "x") == 0 && i == 3, "%d", i);
    pt_seterr("before");
    i = -7;
    CHECK("json int absent and optional", io_json_int(&i, o, "no", IO_JSON_OPTIONAL, 1, 10, "x") == 1 && i == -7 &&
          !strcmp(pt_err(), "before"), "%d '%s'", i, pt_err());
    int rc = io_json_int(&i, o, "no", IO_JSON_REQUIRED, 1, 10, "%s: %s must be a whole number >= %d", "f.json", "no", 1);
    CHECK("json int absent and required", rc == -1 && !strcmp(pt_err(), "f.json: no must be a whole number >= 1"),
          "%d '%s'", rc, pt_err());
    CHECK("json int refuses fraction, range, string", io_json_int(&i, o, "half", IO_JSON_OPTIONAL, 0, 10, "x") == -1 &&
          io_json_int(&i, o, "n", IO_JSON_OPTIONAL, 4, 10, "x") == -1 &&
          io_json_int(&i, o, "neg", IO_JSON_OPTIONAL, 0, 10, "x") == -1 &&
          io_json_int(&i, o, "s", IO_JSON_OPTIONAL, 0, 10, "x") == -1 && i == -7, "%d", i);
    CHECK("json long up to 2^53", io_json_long(&l, o, "big", IO_JSON_REQUIRED, 0, 9007199254740992L, "x") == 0 &&
          l == 9007199254740992L && io_json_long(&l, o, "big", IO_JSON_REQUIRED, 0, 1L << 52, "x") == -1, "%ld", l);
    CHECK("json num refuses inf", io_json_num(&d, o, "inf", IO_JSON_OPTIONAL, 0, DBL_MAX, "x") == -1 && d == -7,
          "%g", d);
    CHECK("json num > 0 as lo = DBL_TRUE_MIN", io_json_num(&d, o, "neg", IO_JSON_OPTIONAL, DBL_TRUE_MIN, DBL_MAX, "x") == -1 &&
          io_json_num(&d, o, "half", IO_JSON_OPTIONAL, DBL_TRUE_MIN, DBL_MAX, "x") == 0 && d == 2.5, "%g", d);
    CHECK("json str and its cap", io_json_str(&s, o, "s", IO_JSON_REQUIRED, 0, "x") == 0 && s && !strcmp(s, "abc") &&
          io_json_str(&s, o, "s", IO_JSON_REQUIRED, 4, "x") == 0 && io_json_str(&s, o, "s", IO_JSON_REQUIRED, 3, "x") == -1 &&
          io_json_str(&s, o, "n", IO_JSON_REQUIRED, 0, "x") == -1, "%s", s ? s : "(null)");
    CHECK("json bool", io_json_bool(&b, o, "t", IO_JSON_REQUIRED, "x") == 0 && b &&
          io_json_bool(&b, o, "n", IO_JSON_REQUIRED, "x") == -1, "%d", b);
    cJSON_Delete(o);
}

/* Each epoch visits every batch index once; same seed, same order; seed 0 is sequential. */
static void test_shuffle(void) {
    static int toks[5000];
    const char *path = tpath("shuf.bin");
    data_write_tokens(path, toks, 5000);
    data_set *d = NULL;
    if (data_open(&d, path, 256) != 0) { CHECK("shuffle open", 0, "%s", pt_err()); return; }
    int Ts[] = {4999, 2500, 1666, 700, 77, 8, 1};   /* nb = 2, 2, 4, 8, 65, 625, 4999 (B = 1) */
    int perm_ok = 1, det_ok = 1, seq_ok = 1, differs = 0, epoch_differs = 0;
    static char seen[5000];
    for (int ti = 0; ti < 7; ti++) {
        int64_t nb = data_batches_per_epoch(d, 1, Ts[ti]);
        for (uint64_t seed = 1; seed < 4; seed++)
            for (int64_t e = 0; e < 3; e++) {
                memset(seen, 0, sizeof seen);
                for (int64_t j = 0; j < nb; j++) {
                    int64_t k = data_batch_index(d, 1, Ts[ti], seed, e * nb + j);
                    if (k < 0 || k >= nb || seen[k]++) perm_ok = 0;
                    det_ok &= k == data_batch_index(d, 1, Ts[ti], seed, e * nb + j);
                    if (nb >= 65) {
                        differs |= k != data_batch_index(d, 1, Ts[ti], seed + 10, e * nb + j);
                        epoch_differs |= k != data_batch_index(d, 1, Ts[ti], seed, (e + 1) * nb + j);
                    }
                }
            }
        for (int64_t s = 0; s < 3 * nb; s++) seq_ok &= data_batch_index(d, 1, Ts[ti], 0, s) == s;
    }
    CHECK("shuffle is a permutation per epoch", perm_ok, "repeat or out of range");
    CHECK("shuffle is deterministic", det_ok, "two calls differ");
    CHECK("shuffle seed 0 is sequential", seq_ok, "seed 0 reordered");
    CHECK("shuffle depends on seed and epoch", differs && epoch_differs, "seed %d epoch %d", differs, epoch_differs);
    data_close(d);
}

int main(void) {
    tmpdir_make("pt_test_io_");
    test_st_roundtrip();
    test_st_overwrite();
    test_st_hf_gpt2();
    test_st_fixtures();
    test_st_half_conversion();
    test_st_read_errors();
    test_st_writer_errors();
    test_st_large();
    test_config();
    test_tokens_roundtrip();
    test_text();
    test_batches();
    test_shuffle();
    test_json_getters();
    CHECK("writers leave no temporaries", count_temporaries() == 0, "%d left", count_temporaries());
    tmpdir_remove();
    TEST_DONE();
}
