/* The single-process model at --precision bf16 against torch.autocast("cpu", bfloat16) on the
 * same weights and batch (tests/fixtures/<case>/bf16.safetensors, tools/make_bf16_fixture.py):
 * loss, logits and every gradient. Needs no Python.
 *
 * Tolerances. The two round in different places: autocast rounds each matmul's inputs and its
 * output (and runs attention's products in bf16), we round the inputs only and keep fp32
 * outputs, so neither is the other's rounding and the distance is that of two bf16
 * computations: a bf16 rounding is 2^-9 relative (0.2%); over two layers the gradients of these
 * fixtures move by up to 1% of their largest entry (autocast against fp32: 0.8-1.0%, printed by
 * the script; ours against autocast 0.8%, logits 0.3%, loss 2e-5, printed here). BF16_GRAD_TOL
 * allows 3%, BF16_OUT_TOL 1.5% for the logits, BF16_LOSS_TOL 1e-3 relative for the loss (a mean
 * over all positions, whose roundings average out). fp32 itself is within those of autocast, so
 * one more check makes the test able to fail when bf16 is not in force: our bf16 gradients are
 * more than BF16_MOVES (0.1%) from our fp32 ones (measured 0.7-0.8%; summation order alone
 * moves fp32 by ~1e-6).  */
#include "io/data.h"
#include "io/io.h"
#include "io/safetensors.h"
#include "model/gpt.h"
#include "test.h"
#include "torch_fixture.h"
#include "util/pt.h"
#include <cjson/cJSON.h>
#include <string.h>

#define BF16_GRAD_TOL 3e-2
#define BF16_OUT_TOL 1.5e-2
#define BF16_LOSS_TOL 1e-3
#define BF16_MOVES 1e-3

static double compare(const st_file *e, const char *name, const float *ours, size_t n) {
    const st_tensor *t = st_find(e, name);
    if (!t || t->numel != n) return INFINITY;
    float *ref = pt_falloc(n);
    double err = st_tensor_f32(e, t, ref) < 0 ? INFINITY : test_tensor_relerr(ours, ref, n);
    free(ref);
    return err;
}

/* Worst gradient error of m against e's "grad/<name>" (or, e NULL, against ref's grads). */
static double worst_grad(const gpt_model *m, const st_file *e, const float *ref, char *which) {
    double worst = 0;
    for (int i = 0; i < gpt_param_count(m); i++) {
        const gpt_param_info *pi = gpt_param_info_at(m, i);
        char key[80];
        snprintf(key, sizeof key, "grad/%s", pi->name);
        double err = e ? compare(e, key, m->grads + pi->offset, pi->count)
                       : test_tensor_relerr(m->grads + pi->offset, ref + pi->offset, pi->count);
        if (err > worst || err != err) { worst = err != err ? INFINITY : err; snprintf(which, 64, "%s", pi->name); }
    }
    return worst;
}

static void run_case(const char *cname) {
    char dir[256], path[512], what[160], which[64] = "";
    gpt_config cfg;
    gpt_model m;
    data_set *d = NULL;
    st_file *e = NULL;
    int B = 0, T = 0;
    snprintf(dir, sizeof dir, "tests/fixtures/%s", cname);
    snprintf(path, sizeof path, "%s/config.json", dir);
    memset(&m, 0, sizeof m);
    int rc = config_load_json(&cfg, path) < 0 || read_case(dir, &B, &T) < 0 || gpt_init(&m, &cfg) < 0;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    rc = rc || load_weights(&m, path) < 0;
    snprintf(path, sizeof path, "%s/tokens.bin", dir);
    rc = rc || data_open(&d, path, cfg.vocab_size) < 0;
    snprintf(path, sizeof path, "%s/bf16.safetensors", dir);
    rc = rc || st_open(&e, path) < 0;
    snprintf(what, sizeof what, "bf16 %s: fixture and model load", cname);
    CHECK(what, !rc, "%s", pt_err());
    if (rc) goto free_all;
    size_t N = (size_t)B * T;
    int *tok = pt_malloc(N * sizeof *tok), *tgt = pt_malloc(N * sizeof *tgt);
    float *logits = pt_falloc(N * cfg.vocab_size), *g32 = pt_falloc(m.n_held), loss = 0;
    rc = data_batch(d, 0, B, T, tok, tgt) < 0 || gpt_forward_backward(&m, tok, tgt, B, T, &loss) < 0;
    memcpy(g32, m.grads, m.n_held * sizeof *g32);
    gpt_set_precision(&m, NN_BF16);
    gpt_zero_grad(&m);
    rc = rc || gpt_forward(&m, logits, tok, B, T) < 0 || gpt_forward_backward(&m, tok, tgt, B, T, &loss) < 0;
    snprintf(what, sizeof what, "bf16 %s: runs", cname);
    CHECK(what, !rc, "%s", pt_err());
    double el = compare(e, "logits", logits, N * cfg.vocab_size), eloss = compare(e, "loss", &loss, 1);
    double eg = worst_grad(&m, e, NULL, which), moved = worst_grad(&m, NULL, g32, (char[64]){ 0 });
    printf("# %s: against autocast: loss %.3g, logits %.3g, worst gradient %.3g (%s); bf16 moved "
           "the gradients %.3g from fp32's\n", cname, eloss, el, eg, which, moved);
    snprintf(what, sizeof what, "bf16 %s: loss and logits within bf16 rounding of autocast's", cname);
    CHECK(what, eloss < BF16_LOSS_TOL && el < BF16_OUT_TOL, "loss relerr %g, logits %g", eloss, el);
    snprintf(what, sizeof what, "bf16 %s: every gradient within bf16 rounding of autocast's", cname);
    CHECK(what, eg < BF16_GRAD_TOL, "relerr %g in grad/%s", eg, which);
    snprintf(what, sizeof what, "bf16 %s: the gradients are not fp32's", cname);
    CHECK(what, moved > BF16_MOVES, "moved only %g", moved);
    free(tok); free(tgt); free(logits); free(g32);
free_all:
    st_close(e);
    data_close(d);
    gpt_free(&m);
}

int main(void) {
    const char *cases[] = {"gpt-tiny", "gpt-odd"};
    for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(cases[i]);
    TEST_DONE();
}
