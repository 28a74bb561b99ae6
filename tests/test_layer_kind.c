/* A layer kind added from the tests folder through model/'s registry (gpt_kind_register) and
 * placed between blocks by the config (gpt_config.insert_*), with no file of src/ changed: a
 * parameter-free scaling layer, out = a * x. Checks: at a = 1 the model equals the one without
 * it bitwise (loss, every gradient); at a = 0.5 the gradients equal finite differences of the
 * loss; the layer sequence (kinds, blocks, chunks) as model/ reports it; a pipelined job (2
 * stages, the scaling layer at the end of stage 0) equals the single-process run; AdamW steps
 * through that job lower the loss. */
#include "model/gpt.h"
#include "run/run.h"
#include "optim/optim.h"
#include "util/pt.h"
#include "test.h"
#include <math.h>
#include <string.h>

#define FD_STEP 1e-2f    /* float forward: keeps float rounding of the loss small against dL */
#define FD_TOL 5e-3      /* per tensor, |fd - g| over max|g| (tests/test_gpt.c's bound) */
/* microbatches against the whole batch: the same sums, reassociated (tests/test_run.c's) */
#define FULL_TOL 1e-4

enum { B = 4, T = 8 };
static const gpt_config BASE = { .n_layer = 4, .n_head = 2, .n_embd = 16, .vocab_size = 32,
                                 .n_positions = 8 };
static float g_scale = 1;        /* the scaling layer's a */

/* ---- the toy kind: out = a * x, dx = a * dout, no parameters, nothing kept ---------------- */
static size_t scale_act(const gpt_model *m, int b, int t) { return 0; }
static int scale_forward(const gpt_model *m, int layer, const gpt_tied *tied, float *act, float *scratch,
                         float *out, const float *x, const int *tokens, int b, int t) {
    size_t n = gpt_stream_rows(m, b, t) * (size_t)m->cfg.n_embd;
    for (size_t i = 0; i < n; i++) out[i] = g_scale * x[i];
    return 0;
}
static int scale_backward_input(const gpt_model *m, int layer, const gpt_tied *tied, float *act,
                                float *scratch, float *dx, const float *dout, int b, int t) {
    return scale_forward(m, layer, tied, act, scratch, dx, dout, NULL, b, t);
}
static int scale_backward_weight(const gpt_model *m, int layer, const gpt_tied *tied, const float *act,
                                 float *scratch, int b, int t) { return 0; }
static void scale_cost(const gpt_config *cfg, int b, int t, int tp, gpt_layer_cost *out) {
    memset(out, 0, sizeof *out);
    out->flops[0] = out->flops[1] = (double)b * t * cfg->n_embd;
}
static int scale_recompute(const gpt_model *m, int layer, const gpt_tied *tied, float *act,
                           float *scratch, int b, int t) { return 0; }

static const gpt_layer_ops scale_row = {
    .name = "scale", .io = 0, .act_floats = scale_act, .forward = scale_forward,
    .backward_input = scale_backward_input, .backward_weight = scale_backward_weight,
    .cost = scale_cost, .cost_sp = scale_cost, .keep_floats = scale_act,
    .recompute = scale_recompute, .saved_floats = scale_act,
};

static int tok[B * T], tgt[B * T];

static void make_batch(void) {
    pt_rng r;
    pt_rng_seed(&r, 11);
    for (int i = 0; i < B * T; i++) tok[i] = (int)(pt_rng_next(&r) % BASE.vocab_size);
    for (int i = 0; i < B * T; i++) tgt[i] = (int)(pt_rng_next(&r) % BASE.vocab_size);
}

/* BASE with the scaling layer after block `after` (-1: after the embedding). */
static gpt_config with_scale(int kind, int after) {
    gpt_config c = BASE;
    c.n_insert = 1;
    c.insert_after[0] = after;
    c.insert_kind[0] = kind;
    return c;
}

static void test_sequence(int kind) {
    gpt_config c = with_scale(kind, 1);
    int first[3];
    gpt_config_chunk_layers(&c, 2, (int[]){ 2, 2 }, first);
    CHECK("sequence: 7 layers, the scale layer 3rd after the embedding",
          gpt_config_num_layers(&c) == 7 && gpt_config_layer_kind(&c, 3) == (gpt_layer_kind)kind &&
          gpt_config_block_of(&c, 3) == -1 && gpt_config_block_layer(&c, 2) == 4 &&
          gpt_config_head_layer(&c) == 6 && gpt_config_layer_item(&c, 3) == 1,
          "layers %d, kind of 3 %d, block layer 2 = %d", gpt_config_num_layers(&c),
          gpt_config_layer_kind(&c, 3), gpt_config_block_layer(&c, 2));
    CHECK("sequence: the scale layer travels with its block (chunk 0 ends after it)",
          first[0] == 0 && first[1] == 4 && first[2] == 7, "first %d %d %d", first[0], first[1], first[2]);
    gpt_config bad = with_scale(kind, 4);
    CHECK("sequence: an insert after a block that does not exist is refused",
          gpt_config_validate(&bad, NULL) < 0, "accepted");
    gpt_config beyond = with_scale(GPT_MAX_KINDS, 1), builtin = with_scale(GPT_LAYER_BLOCK, 1);
    CHECK("sequence: an insert of a kind id past the registry's table, or of a built-in kind, is refused",
          gpt_config_validate(&beyond, NULL) < 0 && strstr(pt_err(), "not a registered kind") &&
          gpt_config_validate(&builtin, NULL) < 0, "accepted");
}

/* a = 1: the model with the layer is the model without it, bit for bit. */
static void test_identity(int kind) {
    gpt_config c = with_scale(kind, 1);
    gpt_model a, b;
    float la = 0, lb = 0;
    int ok = gpt_init(&a, &BASE) == 0 && gpt_init(&b, &c) == 0;
    CHECK("identity: both models build", ok, "%s", pt_err());
    if (!ok) return;
    gpt_init_random(&a, 5);
    gpt_init_random(&b, 5);
    g_scale = 1;
    ok = a.num_params == b.num_params && !memcmp(a.params, b.params, a.num_params * sizeof(float)) &&
         gpt_forward_backward(&a, tok, tgt, B, T, &la) == 0 && gpt_forward_backward(&b, tok, tgt, B, T, &lb) == 0;
    CHECK("identity: loss bitwise", ok && la == lb && isfinite(la), "%.9g vs %.9g", la, lb);
    CHECK("identity: every gradient bitwise", ok && !memcmp(a.grads, b.grads, a.num_params * sizeof(float)),
          "gradients differ");
    gpt_free(&a);
    gpt_free(&b);
}

/* a = 0.5 after the embedding and after block 2: the gradients are the loss's derivatives. */
static void test_finite_differences(int kind) {
    gpt_config c = with_scale(kind, -1);
    c.n_insert = 2;
    c.insert_after[1] = 2;
    c.insert_kind[1] = kind;
    gpt_model m;
    float loss = 0, lp, lm;
    if (gpt_init(&m, &c) < 0) { CHECK("fd: model builds", 0, "%s", pt_err()); return; }
    gpt_init_random(&m, 7);
    pt_rng r;
    pt_rng_seed(&r, 8);
    for (size_t i = 0; i < m.num_params; i++) m.params[i] += (float)(0.3 * pt_rng_normal(&r));
    g_scale = 0.5f;
    gpt_zero_grad(&m);
    int ok = gpt_forward_backward(&m, tok, tgt, B, T, &loss) == 0 && isfinite(loss);
    float *g = pt_falloc(m.num_params);
    memcpy(g, m.grads, m.num_params * sizeof(float));
    double worst = 0;
    const char *worst_name = "";
    for (int k = 0; k < gpt_param_count(&m) && ok; k++) {
        const gpt_param_info *pi = gpt_param_info_at(&m, k);
        double num = 0, den = 0;
        for (size_t i = 0; i < pi->count; i += 7) {   /* every 7th element: enough, and fast */
            float *p = m.params + pi->offset + i, save = *p;
            *p = save + FD_STEP; ok &= gpt_forward_backward(&m, tok, tgt, B, T, &lp) == 0;
            *p = save - FD_STEP; ok &= gpt_forward_backward(&m, tok, tgt, B, T, &lm) == 0;
            *p = save;
            double fd = ((double)lp - lm) / (2.0 * FD_STEP), gi = g[pi->offset + i];
            if (fabs(fd - gi) > num) num = fabs(fd - gi);
            if (fabs(gi) > den) den = fabs(gi);
        }
        double te = den > 0 ? num / den : num;
        if (te > worst) { worst = te; worst_name = pi->name; }
    }
    CHECK("fd: gradients through two scale layers match finite differences", ok && worst < FD_TOL,
          "relerr %g in %s (loss %g)", worst, worst_name, loss);
    free(g);
    gpt_free(&m);
}

/* Two pipeline stages (the scale layer closes stage 0) against the single-process model, then
 * five AdamW steps of the job. */
static void test_pipelined(int kind) {
    gpt_config c = with_scale(kind, 1);
    gpt_model init, got, full;
    gpt_init(&init, &c); gpt_init(&got, &c); gpt_init(&full, &c);
    gpt_init_random(&init, 9);
    memcpy(full.params, init.params, init.num_params * sizeof(float));
    g_scale = 0.5f;
    run_opts o = { .P = 2, .D = 1, .schedule = "1f1b", .M = 4 };
    run_plan pl = { 0 };
    run_job *j = NULL;
    run_stats st = { 0 };
    float full_loss = 0;
    int rc = run_plan_init(&pl, &o, &c, B, T);
    if (rc == 0) rc = run_job_init(&j, &pl, &init, NULL, NULL);
    if (rc == 0) rc = run_job_iteration(j, tok, tgt, NULL, 1, &st);
    if (rc == 0) rc = run_job_gather(j, &got);
    CHECK("pipelined: a job of 2 stages runs the model with a scale layer", rc == 0, "%s", pt_err());
    gpt_zero_grad(&full);
    gpt_forward_backward(&full, tok, tgt, B, T, &full_loss);
    double e = test_tensor_relerr(got.grads, full.grads, full.num_params);
    CHECK("pipelined: loss and gradients equal the single process (microbatched sums)",
          rc == 0 && test_relerr(st.loss, full_loss, 1e-6) <= FULL_TOL && e <= FULL_TOL,
          "loss %.7g vs %.7g, gradients off by %.3g", st.loss, full_loss, e);
    optim_config oc = optim_config_default();
    oc.lr = 1e-2;
    float first = st.loss, last = st.loss;
    for (int t = 1; rc == 0 && t <= 5; t++) {
        rc = run_job_iteration(j, tok, tgt, &oc, t, &st);
        if (t == 1) first = st.loss;
        last = st.loss;
    }
    CHECK("pipelined: five AdamW steps lower the loss", rc == 0 && isfinite(last) && last < first,
          "loss %.6g -> %.6g (%s)", first, last, rc ? pt_err() : "");
    run_job_free(j);
    if (pl.s) run_plan_free(&pl);
    gpt_free(&init); gpt_free(&got); gpt_free(&full);
}

int main(void) {
    int kind = gpt_kind_register(&scale_row);
    CHECK("register: a new kind gets the id after the built-ins", kind == GPT_N_LAYER_KINDS &&
          gpt_kind_ops(kind) == &scale_row && gpt_kind_count() == GPT_N_LAYER_KINDS + 1, "kind %d", kind);
    make_batch();
    test_sequence(kind);
    test_identity(kind);
    test_finite_differences(kind);
    test_pipelined(kind);
    TEST_DONE();
}
