/* Sequence chunks (--seq-chunks, gpt.h "sequence chunks") in the model: the chunk attention
 * kernels against the whole-sequence ones, the chunked model's loss and gradients against the
 * unchunked model's, and against PyTorch on random shapes (tests/fixtures/seqchunk, written by
 * tools/make_seqchunk_fixture.py; no Python needed here); the refusals. */
#include "io/safetensors.h"
#include "model/gpt.h"
#include "nn/nn.h"
#include "test.h"
#include "torch_fixture.h"
#include "util/pt.h"
#include <string.h>

#define KERNEL_TOL 1e-5  /* fp32, the same sums in another tile order: ~1e-7 expected */
#define CHUNK_TOL 2e-5   /* chunked against whole model, fp32: attention sums in another order */
#define TORCH_TOL 1e-4   /* as test_gpt_torch.c: fp32 both sides, ~1e-6 expected */

static void fill(float *a, size_t n, pt_rng *r) {
    for (size_t i = 0; i < n; i++) a[i] = (float)(pt_rng_uniform(r) * 2 - 1);
}

/* attention_forward_kv / _backward_kv over K chunks equal attention_forward / _backward_input on
 * the whole (B,T): outputs, and q, k, v gradients. */
static void test_kernel(int B, int T, int K, int C, int NH) {
    pt_rng r;
    pt_rng_seed(&r, 7);
    int Tc = T / K;
    size_t N = (size_t)B * T, C3 = 3 * (size_t)C;
    float *qkv = pt_falloc(N * C3), *out = pt_falloc(N * C), *att = pt_falloc(N * NH * T);
    float *dout = pt_falloc(N * C), *dqkv = pt_falloc(N * C3), *scr = pt_falloc((size_t)T * T);
    float *kv = pt_falloc(N * 2 * C), *dkv = pt_falloc(N * 2 * C), *cq = pt_falloc(N / K * C3);
    float *cout = pt_falloc(N * C), *catt = pt_falloc(2 * (size_t)Tc * T), *cdo = pt_falloc(N / K * C);
    float *cdq = pt_falloc(N * C3);
    fill(qkv, N * C3, &r);
    fill(dout, N * C, &r);
    attention_forward(out, att, qkv, B, T, C, NH);
    attention_backward_input(dqkv, scr, dout, qkv, att, B, T, C, NH);
    for (size_t i = 0; i < N; i++) memcpy(kv + i * 2 * C, qkv + i * C3 + C, 2 * C * sizeof *kv);
    for (int c = 0; c < K; c++) {   /* forward in order, each chunk's rows gathered (B,Tc) */
        for (int b = 0; b < B; b++)
            memcpy(cq + (size_t)b * Tc * C3, qkv + ((size_t)b * T + c * Tc) * C3, Tc * C3 * sizeof *cq);
        attention_forward_kv(cout + (size_t)c * B * Tc * C, catt, cq, 3 * C, kv, (size_t)T * 2 * C,
                             B, Tc, (c + 1) * Tc, C, NH);
    }
    double eo = 0;
    for (int c = 0; c < K; c++)
        for (int b = 0; b < B; b++) {
            double e = test_tensor_relerr(cout + ((size_t)c * B + b) * Tc * C,
                                          out + ((size_t)b * T + c * Tc) * C, (size_t)Tc * C);
            if (e > eo) eo = e;
        }
    for (int c = K - 1; c >= 0; c--) {   /* backward in reverse */
        for (int b = 0; b < B; b++) {
            memcpy(cq + (size_t)b * Tc * C3, qkv + ((size_t)b * T + c * Tc) * C3, Tc * C3 * sizeof *cq);
            memcpy(cdo + (size_t)b * Tc * C, dout + ((size_t)b * T + c * Tc) * C, Tc * C * sizeof *cdo);
        }
        attention_backward_kv(cdq + (size_t)c * B * Tc * C3, 3 * C, dkv, catt, cdo, cq, 3 * C, kv,
                              (size_t)T * 2 * C, B, Tc, (c + 1) * Tc, C, NH);
    }
    double eg = 0;
    for (int c = 0; c < K; c++)
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Tc; t++) {
                size_t whole = ((size_t)b * T + c * Tc + t) * C3, mine = (((size_t)c * B + b) * Tc + t) * C3;
                memcpy(cdq + mine + C, dkv + ((size_t)b * T + c * Tc + t) * 2 * C, 2 * C * sizeof *cdq);
                double e = test_tensor_relerr(cdq + mine, dqkv + whole, C3);
                if (e > eg) eg = e;
            }
    char name[96];
    snprintf(name, sizeof name, "kernel_B%d_T%d_K%d_C%d_NH%d", B, T, K, C, NH);
    CHECK(name, eo < KERNEL_TOL && eg < KERNEL_TOL, "output relerr %g, gradient relerr %g", eo, eg);
    free(qkv); free(out); free(att); free(dout); free(dqkv); free(scr); free(kv); free(dkv);
    free(cq); free(cout); free(catt); free(cdo); free(cdq);
}

/* Worst normalised error of a's gradients against b's, tensor by tensor. */
static double grads_relerr(const gpt_model *a, const gpt_model *b, char *worst_name, size_t n) {
    double worst = 0;
    for (int i = 0; i < gpt_param_count(a); i++) {
        const gpt_param_info *pi = gpt_param_info_at(a, i);
        double e = test_tensor_relerr(a->grads + pi->offset, b->grads + pi->offset, pi->count);
        if (e > worst) { worst = e; snprintf(worst_name, n, "%s", pi->name); }
    }
    return worst;
}

/* gpt_forward_backward_chunks against gpt_forward_backward on a random model and batch. */
static void test_model(int B, int T, int K) {
    gpt_config cfg = { .n_layer = 2, .n_head = 4, .n_embd = 32, .vocab_size = 53, .n_positions = 40 };
    gpt_model whole, chunked;
    memset(&whole, 0, sizeof whole);
    memset(&chunked, 0, sizeof chunked);
    int ok = gpt_init(&whole, &cfg) == 0 && gpt_init(&chunked, &cfg) == 0;
    gpt_init_random(&whole, 5);
    gpt_init_random(&chunked, 5);
    int *tok = pt_malloc((size_t)2 * B * T * sizeof *tok), *tgt = tok + B * T;
    pt_rng r;
    pt_rng_seed(&r, 9);
    for (int i = 0; i < 2 * B * T; i++) tok[i] = (int)(pt_rng_next(&r) % cfg.vocab_size);
    float lw = 0, lc = 0;
    ok = ok && gpt_forward_backward(&whole, tok, tgt, B, T, &lw) == 0 &&
         gpt_forward_backward_chunks(&chunked, tok, tgt, B, T, K, &lc) == 0;
    char name[64], worst[64] = "";
    snprintf(name, sizeof name, "model_B%d_T%d_K%d", B, T, K);
    double e = ok ? grads_relerr(&chunked, &whole, worst, sizeof worst) : 1;
    CHECK(name, ok && fabs(lc - lw) < CHUNK_TOL * fabs(lw) && e < CHUNK_TOL,
          "%s; loss %.7f vs %.7f, grad relerr %g (%s)", ok ? "ran" : pt_err(), lc, lw, e, worst);
    free(tok);
    gpt_free(&whole);
    gpt_free(&chunked);
}

#define BF16_TOL 2e-2   /* bf16 storage and products against fp32 (as test_bf16_layouts.sh) */
/* --precision bf16 with chunks: a chunk's act is stored in bf16 (a block's chunk act about half
 * its fp32 floats), and the gradients stay within bf16 rounding of the fp32 chunked ones and of
 * the bf16 whole-sequence ones (not bitwise fp32's: bf16 is in force). */
static void test_bf16_acts(int B, int T, int K) {
    gpt_config cfg = { .n_layer = 2, .n_head = 4, .n_embd = 32, .vocab_size = 53, .n_positions = 40 };
    gpt_model f32, b16, whole;
    memset(&f32, 0, sizeof f32), memset(&b16, 0, sizeof b16), memset(&whole, 0, sizeof whole);
    int ok = gpt_init(&f32, &cfg) == 0 && gpt_init(&b16, &cfg) == 0 && gpt_init(&whole, &cfg) == 0;
    if (!ok) { CHECK("bf16 chunk acts: init", 0, "%s", pt_err()); return; }
    gpt_init_random(&f32, 5), gpt_init_random(&b16, 5), gpt_init_random(&whole, 5);
    gpt_set_precision(&b16, NN_BF16);
    gpt_set_precision(&whole, NN_BF16);
    size_t n32 = gpt_layer_chunk_act_floats(&f32, 1, B, T, 0, K), n16 = gpt_layer_chunk_act_floats(&b16, 1, B, T, 0, K);
    CHECK("bf16 chunk acts: a block's chunk act stored in about half the floats", n16 < 0.6 * n32 && n16 > 0.4 * n32,
          "fp32 %zu floats, bf16 %zu", n32, n16);
    int *tok = pt_malloc((size_t)2 * B * T * sizeof *tok), *tgt = tok + B * T;
    pt_rng r;
    pt_rng_seed(&r, 9);
    for (int i = 0; i < 2 * B * T; i++) tok[i] = (int)(pt_rng_next(&r) % cfg.vocab_size);
    float l32 = 0, l16 = 0, lw = 0;
    ok = gpt_forward_backward_chunks(&f32, tok, tgt, B, T, K, &l32) == 0 &&
         gpt_forward_backward_chunks(&b16, tok, tgt, B, T, K, &l16) == 0 &&
         gpt_forward_backward(&whole, tok, tgt, B, T, &lw) == 0;
    char w1[64] = "", w2[64] = "";
    double e32 = ok ? grads_relerr(&b16, &f32, w1, sizeof w1) : 1, ew = ok ? grads_relerr(&b16, &whole, w2, sizeof w2) : 1;
    CHECK("bf16 chunk acts: gradients within bf16 rounding of fp32 chunks and of bf16 whole sequences, not fp32's",
          ok && e32 < BF16_TOL && e32 > 0 && ew < BF16_TOL, "%s; relerr %g vs fp32 chunks (%s), %g vs bf16 whole (%s)",
          ok ? "ran" : pt_err(), e32, w1, ew, w2);
    free(tok);
    gpt_free(&f32), gpt_free(&b16), gpt_free(&whole);
}

/* A (B,T) int tensor stored as F32 in the fixture. */
static int read_ints(const st_file *e, const char *name, int *out, size_t n) {
    const st_tensor *t = st_find(e, name);
    if (!t || t->numel != n) return pt_seterr("fixture: tensor %s missing or not %zu values", name, n);
    float *f = pt_falloc(n);
    int rc = st_tensor_f32(e, t, f);
    for (size_t i = 0; i < n; i++) out[i] = (int)f[i];
    free(f);
    return rc;
}

static double fixture_relerr(const st_file *e, const char *name, const float *ours, size_t n) {
    const st_tensor *t = st_find(e, name);
    if (!t || t->numel != n) return INFINITY;
    float *ref = pt_falloc(n);
    double err = st_tensor_f32(e, t, ref) < 0 ? INFINITY : test_tensor_relerr(ours, ref, n);
    free(ref);
    return err;
}

/* One fixture case: the chunked model's loss and gradients against torch's. */
static void test_torch_case(int i) {
    char dir[128], path[256], name[64], worst_name[64] = "";
    snprintf(dir, sizeof dir, "tests/fixtures/seqchunk/case-%d", i);
    snprintf(name, sizeof name, "torch_case%d", i);
    gpt_config cfg;
    gpt_model m;
    memset(&m, 0, sizeof m);
    st_file *e = NULL;
    int B = 0, T = 0, K = 0;
    snprintf(path, sizeof path, "%s/config.json", dir);
    int rc = config_load_json(&cfg, path) < 0 || read_case(dir, &B, &T) < 0 || gpt_init(&m, &cfg) < 0;
    snprintf(path, sizeof path, "%s/case.json", dir);
    char *txt = rc ? NULL : pt_read_file(path, NULL);
    cJSON *j = txt ? cJSON_Parse(txt) : NULL;
    K = cJSON_IsNumber(cJSON_GetObjectItem(j, "K")) ? cJSON_GetObjectItem(j, "K")->valueint : 0;
    cJSON_Delete(j);
    free(txt);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    rc = rc || K < 2 || load_weights(&m, path) < 0;
    snprintf(path, sizeof path, "%s/expected.safetensors", dir);
    rc = rc || st_open(&e, path) < 0;
    int *tok = pt_malloc((size_t)2 * (B > 0 ? B : 1) * (T > 0 ? T : 1) * sizeof *tok), *tgt = tok + B * T;
    float loss = 0;
    rc = rc || read_ints(e, "tokens", tok, (size_t)B * T) < 0 || read_ints(e, "targets", tgt, (size_t)B * T) < 0 ||
         gpt_forward_backward_chunks(&m, tok, tgt, B, T, K, &loss) < 0;
    double worst = rc ? INFINITY : fixture_relerr(e, "loss", &loss, 1);
    for (int p = 0; !rc && p < gpt_param_count(&m); p++) {
        const gpt_param_info *pi = gpt_param_info_at(&m, p);
        char key[80];
        snprintf(key, sizeof key, "grad/%s", pi->name);
        double err = fixture_relerr(e, key, m.grads + pi->offset, pi->count);
        if (err > worst) { worst = err; snprintf(worst_name, sizeof worst_name, "%s", pi->name); }
    }
    printf("# %s: B %d T %d K %d, worst relerr %.3g (%s)\n", dir, B, T, K, worst, worst_name);
    CHECK(name, !rc && worst < TORCH_TOL, "%s; relerr %g (%s)", rc ? pt_err() : "ran", worst, worst_name);
    free(tok);
    st_close(e);
    gpt_free(&m);
}

/* K must divide T; a chunk index out of range and missing kv are refused with a reason. */
static void test_refusals(void) {
    gpt_config cfg = { .n_layer = 1, .n_head = 2, .n_embd = 8, .vocab_size = 11, .n_positions = 16 };
    gpt_model m;
    memset(&m, 0, sizeof m);
    gpt_init(&m, &cfg);
    int tok[2 * 12] = { 0 };
    float loss;
    int rc = gpt_forward_backward_chunks(&m, tok, tok + 12, 1, 12, 5, &loss);
    CHECK("refuses_k_not_dividing_t", rc < 0 && strstr(pt_err(), "divide the sequence length 12"),
          "rc %d: %s", rc, pt_err());
    float act[4096], scr[4096], out[64], x[64] = { 0 };
    gpt_chunk ck = { 0, 2, NULL, NULL };
    rc = gpt_layer_forward_chunk(&m, 1, NULL, &ck, act, scr, out, x, NULL, 1, 12);
    CHECK("refuses_block_without_kv", rc < 0 && strstr(pt_err(), "kept keys"), "rc %d: %s", rc, pt_err());
    ck.c = 2;
    rc = gpt_layer_forward_chunk(&m, 0, NULL, &ck, act, scr, out, NULL, tok, 1, 12);
    CHECK("refuses_chunk_out_of_range", rc < 0 && strstr(pt_err(), "chunk 2 of 2"), "rc %d: %s", rc, pt_err());
    gpt_free(&m);
}

int main(void) {
    test_kernel(1, 12, 3, 8, 2);
    test_kernel(2, 64, 4, 32, 2);
    test_kernel(2, 100, 5, 48, 3);   /* no tile multiple anywhere */
    test_model(2, 12, 1);
    test_model(2, 12, 3);
    test_model(1, 36, 4);
    test_model(3, 8, 8);             /* one token a chunk */
    for (int i = 0; i < 3; i++) test_torch_case(i);
    test_bf16_acts(2, 36, 3);
    test_refusals();
    TEST_DONE();
}
