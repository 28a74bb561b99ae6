/* The single-process model against PyTorch (Hugging Face GPT2LMHeadModel) fixtures written by
 * tools/make_fixtures.py: for each case, batch 0's logits, loss and every parameter gradient.
 * Needs no Python. Weights load through torch_fixture.h (the product loader is gpt_io.c). */
#include "io/data.h"
#include "io/io.h"
#include "io/safetensors.h"
#include "model/gpt.h"
#include "test.h"
#include "torch_fixture.h"
#include "util/pt.h"
#include <cjson/cJSON.h>
#include <string.h>

#define TORCH_TOL 1e-4   /* fp32 both sides, different summation orders: ~1e-6 expected */

/* Normalised error of our tensor against expected tensor `name`; -1 if missing or wrong size. */
static double compare(const st_file *e, const char *name, const float *ours, size_t n) {
    const st_tensor *t = st_find(e, name);
    if (!t || t->numel != n) return -1;
    float *ref = pt_falloc(n);
    double err = st_tensor_f32(e, t, ref) < 0 ? -1 : test_tensor_relerr(ours, ref, n);
    free(ref);
    return err;
}

static void check_grads(const char *cname, const gpt_model *m, const st_file *e) {
    double worst = 0;
    char worst_name[64] = "", key[80], check[128];
    for (int i = 0; i < gpt_param_count(m); i++) {
        const gpt_param_info *pi = gpt_param_info_at(m, i);
        snprintf(key, sizeof key, "grad/%s", pi->name);
        double err = compare(e, key, m->grads + pi->offset, pi->count);
        if (err < 0 || err > worst) { worst = err < 0 ? INFINITY : err; snprintf(worst_name, sizeof worst_name, "%s", pi->name); }
    }
    snprintf(check, sizeof check, "torch_%s_all_grads", cname);
    printf("# %s: worst gradient relerr %.3g (%s)\n", cname, worst, worst_name);
    CHECK(check, worst < TORCH_TOL, "relerr %g in grad/%s", worst, worst_name);
}

static void run_case(const char *cname) {
    char dir[256], path[512], check[128];
    gpt_config cfg;
    gpt_model m;
    data_set *d = NULL;
    st_file *e = NULL;
    int B = 0, T = 0;
    snprintf(dir, sizeof dir, "tests/fixtures/%s", cname);
    snprintf(path, sizeof path, "%s/config.json", dir);
    snprintf(check, sizeof check, "torch_%s_load", cname);
    memset(&m, 0, sizeof m);
    int rc = config_load_json(&cfg, path) < 0 || read_case(dir, &B, &T) < 0 || gpt_init(&m, &cfg) < 0;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    rc = rc || load_weights(&m, path) < 0;
    snprintf(path, sizeof path, "%s/tokens.bin", dir);
    rc = rc || data_open(&d, path, cfg.vocab_size) < 0;
    snprintf(path, sizeof path, "%s/expected.safetensors", dir);
    rc = rc || st_open(&e, path) < 0;
    CHECK(check, !rc, "%s", pt_err());
    if (rc) goto free_all;
    int *tok = pt_malloc((size_t)B * T * sizeof *tok), *tgt = pt_malloc((size_t)B * T * sizeof *tgt);
    float *logits = pt_falloc((size_t)B * T * cfg.vocab_size), loss = 0;
    rc = data_batch(d, 0, B, T, tok, tgt) < 0 || gpt_forward(&m, logits, tok, B, T) < 0 ||
         gpt_forward_backward(&m, tok, tgt, B, T, &loss) < 0;
    snprintf(check, sizeof check, "torch_%s_runs", cname);
    CHECK(check, !rc, "%s", pt_err());
    double el = compare(e, "logits", logits, (size_t)B * T * cfg.vocab_size);
    snprintf(check, sizeof check, "torch_%s_logits", cname);
    CHECK(check, el >= 0 && el < TORCH_TOL, "relerr %g", el);
    double eloss = compare(e, "loss", &loss, 1);
    snprintf(check, sizeof check, "torch_%s_loss", cname);
    CHECK(check, eloss >= 0 && eloss < TORCH_TOL, "relerr %g (loss %.7f)", eloss, loss);
    check_grads(cname, &m, e);
    free(tok); free(tgt); free(logits);
free_all:
    st_close(e);
    data_close(d);
    gpt_free(&m);
}

int main(void) {
    const char *cases[] = {"gpt-tiny", "gpt-odd", "gpt-hf"};
    for (unsigned i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(cases[i]);
    TEST_DONE();
}
