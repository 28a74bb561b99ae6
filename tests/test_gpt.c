/* The whole GPT model: gradients against finite differences on a tiny odd config; per-microbatch
 * activation storage independent (F0 F1 B1 B0 W0 W1 equals two sequential forward_backward calls,
 * bitwise); the tied head's separate wte gradient; parameter spans tiling the buffer; the tensor
 * table; partial models; GPT-2 init statistics; errors for bad tokens and lengths. */
#include "model/gpt.h"
#include "test.h"
#include "util/pt.h"
#include <pthread.h>
#include <string.h>

#define FD_STEP 1e-2f    /* float forward: keeps float rounding of the loss small against dL */
#define FD_TOL 5e-3      /* per tensor, |fd - g| over max|g|: O(h^2) curvature + float loss rounding */
#define SUM_TOL 1e-6     /* the same float sums in another order */
#define INIT_TOL 0.05    /* sample std within 5% (thousands of samples: a few % standard error) */

static const gpt_config tiny = {.n_layer = 2, .n_head = 3, .n_embd = 12, .vocab_size = 11, .n_positions = 8};
enum { B = 2, T = 5, N = B * T };

static void make_batch(int *tok, int *tgt, int n, int V, uint64_t seed) {
    pt_rng r;
    pt_rng_seed(&r, seed);
    for (int i = 0; i < n; i++) { tok[i] = (int)(pt_rng_next(&r) % V); tgt[i] = (int)(pt_rng_next(&r) % V); }
}

/* Mean cross-entropy from gpt_forward's logits, in double. */
static double loss_double(gpt_model *m, const int *tok, const int *tgt) {
    int V = m->cfg.vocab_size;
    float *lg = pt_falloc((size_t)N * V);
    double L = 0;
    if (gpt_forward(m, lg, tok, B, T) < 0) { free(lg); return NAN; }
    for (int n = 0; n < N; n++) {
        double mx = lg[n * V], s = 0;
        for (int v = 1; v < V; v++) if (lg[n * V + v] > mx) mx = lg[n * V + v];
        for (int v = 0; v < V; v++) s += exp(lg[n * V + v] - mx);
        L += mx + log(s) - lg[n * V + tgt[n]];
    }
    free(lg);
    return L / N;
}

/* Larger-than-GPT-2 random weights, so gradients stand well above float rounding. */
static void perturb_params(gpt_model *m, uint64_t seed) {
    pt_rng r;
    pt_rng_seed(&r, seed);
    for (size_t i = 0; i < m->num_params; i++) m->params[i] += (float)(0.3 * pt_rng_normal(&r));
}

static void test_gradients_fd(void) {
    gpt_model m;
    int tok[N], tgt[N];
    float loss;
    gpt_init(&m, &tiny);
    gpt_init_random(&m, 7);
    perturb_params(&m, 8);
    make_batch(tok, tgt, N, tiny.vocab_size, 9);
    gpt_zero_grad(&m);
    gpt_forward_backward(&m, tok, tgt, B, T, &loss);
    double ld = loss_double(&m, tok, tgt);
    CHECK("gpt_loss_matches_logits", fabs(loss - ld) < 1e-5 * ld, "loss %.7f, from logits %.7f", loss, ld);
    int V = tiny.vocab_size;
    float *all = pt_falloc((size_t)N * V), *last = pt_falloc((size_t)B * V);
    int ok = gpt_forward(&m, all, tok, B, T) == 0 && gpt_forward_last(&m, last, tok, B, T) == 0;
    double e = 0;   /* sgemm of B rows instead of B*T may round differently */
    for (int b = 0; b < B; b++) {
        double eb = test_tensor_relerr(last + b * V, all + ((size_t)b * T + T - 1) * V, V);
        if (eb > e) e = eb;
    }
    CHECK("gpt_forward_last_equals_last_row", ok && e < SUM_TOL, "relerr %g", e);
    free(all);
    free(last);
    double worst = 0;
    const char *worst_name = "";
    for (int k = 0; k < gpt_param_count(&m); k++) {
        const gpt_param_info *pi = gpt_param_info_at(&m, k);
        double num = 0, den = 0;
        for (size_t i = 0; i < pi->count; i++) {
            float *p = m.params + pi->offset + i, save = *p, xp = save + FD_STEP, xm = save - FD_STEP;
            *p = xp; double lp = loss_double(&m, tok, tgt);
            *p = xm; double lm = loss_double(&m, tok, tgt);
            *p = save;
            double fd = (lp - lm) / ((double)xp - xm), g = m.grads[pi->offset + i];
            if (fabs(fd - g) > num) num = fabs(fd - g);
            if (fabs(g) > den) den = fabs(g);
        }
        double te = den > 0 ? num / den : num;
        if (te > worst) { worst = te; worst_name = pi->name; }
    }
    printf("# worst fd relerr %.3g in %s\n", worst, worst_name);
    CHECK("gpt_gradients_match_finite_differences", worst < FD_TOL, "relerr %g in %s", worst, worst_name);
    gpt_free(&m);
}

/* Per-(layer, microbatch) act buffers for the layer-API runs; one scratch per stage thread. */
typedef struct { float *act[2][8]; float *x[2][8]; float *scratch[2]; } mb_state;

static void mb_alloc(const gpt_model *m, mb_state *s) {
    for (int mb = 0; mb < 2; mb++)
        for (int l = 0; l < gpt_num_layers(m); l++) {
            s->act[mb][l] = pt_falloc(gpt_layer_act_floats(m, l, B, T));
            s->x[mb][l] = pt_falloc((size_t)N * m->cfg.n_embd);   /* output of layer l / its dx */
        }
    for (int i = 0; i < 2; i++) s->scratch[i] = pt_falloc(gpt_scratch_floats(m, B, T));
}

static void mb_free(const gpt_model *m, mb_state *s) {
    for (int mb = 0; mb < 2; mb++)
        for (int l = 0; l < gpt_num_layers(m); l++) { free(s->act[mb][l]); free(s->x[mb][l]); }
    for (int i = 0; i < 2; i++) free(s->scratch[i]);
}

/* One stage's work on one microbatch: layers [lo, hi), scratch sc. */
typedef struct {
    const gpt_model *m; mb_state *s; int mb, lo, hi, sc;
    const int *tok, *tgt; float *loss; const gpt_tied *tied;
} stage_job;

static void job_F(const stage_job *j) {
    int nl = gpt_num_layers(j->m), mb = j->mb;
    for (int l = j->lo; l < j->hi; l++)
        gpt_layer_forward(j->m, l, j->tied, j->s->act[mb][l], j->s->scratch[j->sc],
                          l == nl - 1 ? j->loss : j->s->x[mb][l], l ? j->s->x[mb][l - 1] : NULL,
                          l == 0 ? j->tok : l == nl - 1 ? j->tgt : NULL, B, T);
}

/* B top down; dx of layer l lands in x[mb][l-1] (its forward input is not needed again). */
static void job_B(const stage_job *j) {
    int nl = gpt_num_layers(j->m), mb = j->mb;
    for (int l = j->hi - 1; l >= j->lo; l--)
        gpt_layer_backward_input(j->m, l, j->tied, j->s->act[mb][l], j->s->scratch[j->sc],
                                 l ? j->s->x[mb][l - 1] : NULL, l == nl - 1 ? NULL : j->s->x[mb][l], B, T);
}

static void job_W(const stage_job *j) {
    for (int l = j->hi - 1; l >= j->lo; l--)
        gpt_layer_backward_weight(j->m, l, j->tied, j->s->act[j->mb][l], j->s->scratch[j->sc], B, T);
}

static stage_job whole(const gpt_model *m, mb_state *s, int mb, const int *tok, const int *tgt,
                       float *loss, const gpt_tied *tied) {
    return (stage_job){m, s, mb, 0, gpt_num_layers(m), 0, tok, tgt, loss, tied};
}

static void run_F(const gpt_model *m, mb_state *s, int mb, const int *tok, const int *tgt, float *loss) {
    stage_job j = whole(m, s, mb, tok, tgt, loss, NULL);
    job_F(&j);
}
static void run_B(const gpt_model *m, mb_state *s, int mb, const gpt_tied *tied) {
    stage_job j = whole(m, s, mb, NULL, NULL, NULL, tied);
    job_B(&j);
}
static void run_W(const gpt_model *m, mb_state *s, int mb, const gpt_tied *tied) {
    stage_job j = whole(m, s, mb, NULL, NULL, NULL, tied);
    job_W(&j);
}

static void test_microbatch_interleaving(void) {
    gpt_model m;
    int tok[2][N], tgt[2][N];
    float l0, l1, k0, k1;
    gpt_init(&m, &tiny);
    gpt_init_random(&m, 11);
    perturb_params(&m, 12);
    make_batch(tok[0], tgt[0], N, tiny.vocab_size, 13);
    make_batch(tok[1], tgt[1], N, tiny.vocab_size, 14);
    gpt_zero_grad(&m);
    gpt_forward_backward(&m, tok[0], tgt[0], B, T, &l0);
    gpt_forward_backward(&m, tok[1], tgt[1], B, T, &l1);
    float *ref = pt_falloc(m.num_params);
    memcpy(ref, m.grads, m.num_params * sizeof *ref);

    mb_state s;
    mb_alloc(&m, &s);
    gpt_zero_grad(&m);
    run_F(&m, &s, 0, tok[0], tgt[0], &k0);
    run_F(&m, &s, 1, tok[1], tgt[1], &k1);
    run_B(&m, &s, 1, NULL);
    run_B(&m, &s, 0, NULL);
    run_W(&m, &s, 0, NULL);
    run_W(&m, &s, 1, NULL);
    CHECK("gpt_interleaved_losses_bitwise", k0 == l0 && k1 == l1, "%g %g vs %g %g", k0, k1, l0, l1);
    CHECK("gpt_interleaved_F0F1B1B0W0W1_grads_bitwise",
          memcmp(ref, m.grads, m.num_params * sizeof *ref) == 0, "gradients differ");

    /* tied head with its own wte gradient: embedding's + head's = the single buffer's */
    float *dwte = pt_falloc((size_t)tiny.vocab_size * tiny.n_embd);
    gpt_tied tied = {.w = m.w.wte, .dw = dwte};   /* tie 0: wte */
    gpt_zero_grad(&m);
    run_F(&m, &s, 0, tok[0], tgt[0], &k0);
    run_B(&m, &s, 0, &tied);
    run_W(&m, &s, 0, &tied);
    run_F(&m, &s, 1, tok[1], tgt[1], &k1);
    run_B(&m, &s, 1, &tied);
    run_W(&m, &s, 1, &tied);
    for (int i = 0; i < tiny.vocab_size * tiny.n_embd; i++) m.g.wte[i] += dwte[i];
    double e = test_tensor_relerr(m.grads, ref, m.num_params);
    CHECK("gpt_tied_head_separate_dwte_sums_to_same", e < SUM_TOL, "relerr %g", e);
    free(dwte);
    mb_free(&m, &s);
    free(ref);
    gpt_free(&m);
}

/* A stage thread: runs its ops ("F", "BW", "FBW") on one microbatch. */
typedef struct { stage_job job; const char *ops; } stage_task;

static void *stage_thread(void *arg) {
    const stage_task *t = arg;
    for (const char *op = t->ops; *op; op++)
        *op == 'F' ? job_F(&t->job) : *op == 'B' ? job_B(&t->job) : job_W(&t->job);
    return NULL;
}

/* Runs two stage tasks at once, in two threads. */
static void run_pair(stage_task *a, stage_task *b) {
    pthread_t ta, tb;
    pthread_create(&ta, NULL, stage_thread, a);
    pthread_create(&tb, NULL, stage_thread, b);
    pthread_join(ta, NULL);
    pthread_join(tb, NULL);
}

/* Two pipeline stages as threads over one shared model (1F1B-like overlap: stage 0 runs mb1's F
 * while stage 1 runs mb0's F,B,W, ...): every gradient but the tied wte equals the sequential run
 * bitwise; wte (embedding's + head's separate dwte) to rounding. Run under TSAN to catch races. */
static void test_two_stage_threads(void) {
    gpt_model m;
    int tok[2][N], tgt[2][N];
    float l[2], k[2];
    gpt_init(&m, &tiny);
    gpt_init_random(&m, 21);
    perturb_params(&m, 22);
    make_batch(tok[0], tgt[0], N, tiny.vocab_size, 23);
    make_batch(tok[1], tgt[1], N, tiny.vocab_size, 24);
    gpt_zero_grad(&m);
    gpt_forward_backward(&m, tok[0], tgt[0], B, T, &l[0]);
    gpt_forward_backward(&m, tok[1], tgt[1], B, T, &l[1]);
    float *ref = pt_falloc(m.num_params);
    memcpy(ref, m.grads, m.num_params * sizeof *ref);
    gpt_zero_grad(&m);

    mb_state s;
    mb_alloc(&m, &s);
    size_t nwte = (size_t)tiny.vocab_size * tiny.n_embd;
    float *dwte = pt_falloc(nwte);
    gpt_tied tied = {.w = m.w.wte, .dw = dwte};   /* tie 0: wte */
    int split = 2, nl = gpt_num_layers(&m);
    stage_job s0[2], s1[2];
    for (int mb = 0; mb < 2; mb++) {
        s0[mb] = (stage_job){&m, &s, mb, 0, split, 0, tok[mb], tgt[mb], &k[mb], NULL};
        s1[mb] = (stage_job){&m, &s, mb, split, nl, 1, tok[mb], tgt[mb], &k[mb], &tied};
    }
    job_F(&s0[0]);
    stage_task a1 = {s0[1], "F"}, b1 = {s1[0], "FBW"};
    run_pair(&a1, &b1);
    stage_task a2 = {s0[0], "BW"}, b2 = {s1[1], "FBW"};
    run_pair(&a2, &b2);
    job_B(&s0[1]);
    job_W(&s0[1]);

    CHECK("gpt_two_stage_threads_losses_bitwise", k[0] == l[0] && k[1] == l[1], "%g %g vs %g %g", k[0], k[1], l[0], l[1]);
    size_t o = nwte;   /* everything after wte */
    CHECK("gpt_two_stage_threads_grads_bitwise", memcmp(ref + o, m.grads + o, (m.num_params - o) * sizeof *ref) == 0,
          "gradients differ");
    for (size_t i = 0; i < nwte; i++) m.g.wte[i] += dwte[i];
    double e = test_tensor_relerr(m.g.wte, ref, nwte);
    CHECK("gpt_two_stage_threads_tied_wte", e < SUM_TOL, "relerr %g", e);
    free(dwte);
    mb_free(&m, &s);
    free(ref);
    gpt_free(&m);
}

static void test_spans_and_table(void) {
    gpt_model m;
    gpt_init(&m, &tiny);
    int nl = gpt_num_layers(&m), ok = nl == tiny.n_layer + 2;
    size_t expect = 0, off, cnt;
    for (int l = 0; l < nl; l++) {
        gpt_layer_param_span(&m, l, &off, &cnt);
        ok &= off == expect && cnt > 0;
        expect = off + cnt;
    }
    CHECK("gpt_layer_spans_tile_buffer", ok && expect == m.num_params, "end %zu vs %zu", expect, m.num_params);
    size_t C = 12, V = 11, P = 8, L = 2;
    CHECK("gpt_num_params", m.num_params == V * C + P * C + L * (12 * C * C + 13 * C) + 2 * C, "%zu", m.num_params);
    /* tensors tile the buffer in order, each inside its layer's span */
    ok = gpt_param_count(&m) == 4 + 12 * (int)L;
    expect = 0;
    for (int k = 0; k < gpt_param_count(&m); k++) {
        const gpt_param_info *pi = gpt_param_info_at(&m, k);
        gpt_layer_param_span(&m, pi->layer, &off, &cnt);
        ok &= pi->offset == expect && pi->offset >= off && pi->offset + pi->count <= off + cnt;
        ok &= pi->count == (size_t)pi->shape[0] * (pi->ndim == 2 ? pi->shape[1] : 1);
        ok &= pi->decay == (pi->ndim == 2);
        expect += pi->count;
    }
    CHECK("gpt_param_table_tiles_buffer", ok && expect == m.num_params, "table inconsistent");
    int qi = gpt_param_find(&m, "transformer.h.1.attn.c_attn.weight");
    const gpt_param_info *q = gpt_param_info_at(&m, qi);
    CHECK("gpt_param_find_hf_name", q && q->layer == 2 && q->shape[0] == 12 && q->shape[1] == 36 &&
          m.params + q->offset == m.w.h[1].qkvw && m.grads + q->offset == m.g.h[1].qkvw, "index %d", qi);
    CHECK("gpt_param_names", strcmp(gpt_param_info_at(&m, 0)->name, "wte.weight") == 0 &&
          strcmp(gpt_param_info_at(&m, 13)->name, "h.0.mlp.c_proj.bias") == 0 &&
          strcmp(gpt_param_info_at(&m, gpt_param_count(&m) - 1)->name, "ln_f.bias") == 0 &&
          gpt_param_find(&m, "lm_head.weight") < 0, "names differ");
    double flops = 6.0 * (m.num_params - P * C) * 4 * 8 + 6.0 * L * 4 * 8 * 8 * C;
    CHECK("gpt_flops_per_step", gpt_flops_per_step(&m, 4, 8) == flops, "%g vs %g", gpt_flops_per_step(&m, 4, 8), flops);
    CHECK("gpt_act_bytes_per_token", gpt_layer_act_bytes_per_token(&m, 1, 8) * 8 ==
          gpt_layer_act_floats(&m, 1, 1, 8) * sizeof(float) &&
          gpt_layer_act_floats(&m, 1, 3, 8) == 3 * gpt_layer_act_floats(&m, 1, 1, 8), "not linear in B");
    size_t n = 3 * 8;   /* B=3, T=8 tokens */
    CHECK("gpt_act_floats_documented", gpt_layer_act_floats(&m, 0, 3, 8) == n * (1 + C) &&
          gpt_layer_act_floats(&m, 1, 3, 8) == n * (27 * C + 4 + 3 * 8) &&
          gpt_layer_act_floats(&m, 3, 3, 8) == n * (3 * C + 3 + V), "sizes differ from gpt.h");
    CHECK("gpt_act_saved_floats_documented", gpt_layer_act_saved_floats(&m, 0, 3, 8) == n &&
          gpt_layer_act_saved_floats(&m, 1, 3, 8) == n * (16 * C + 4 + 3 * 8) &&
          gpt_layer_act_saved_floats(&m, 3, 3, 8) == n * (2 * C + 3 + V), "F parts differ from gpt.h");
    gpt_free(&m);
}

/* Sample std of a tensor; mean returned through *mean. */
static double tensor_std(const float *p, size_t n, double *mean) {
    double s = 0, s2 = 0;
    for (size_t i = 0; i < n; i++) { s += p[i]; s2 += (double)p[i] * p[i]; }
    *mean = s / n;
    return sqrt(s2 / n - *mean * *mean);
}

static void test_init_statistics(void) {
    gpt_config c = {.n_layer = 3, .n_head = 4, .n_embd = 64, .vocab_size = 256, .n_positions = 64};
    gpt_model m;
    gpt_init(&m, &c);
    gpt_init_random(&m, 42);
    double mean, rs = 0.02 / sqrt(2.0 * c.n_layer);
    double s_wte = tensor_std(m.w.wte, 256 * 64, &mean);
    CHECK("gpt_init_wte_std", fabs(s_wte / 0.02 - 1) < INIT_TOL && fabs(mean) < 0.001, "std %g mean %g", s_wte, mean);
    double s_qkv = tensor_std(m.w.h[1].qkvw, 64 * 192, &mean);
    CHECK("gpt_init_c_attn_std", fabs(s_qkv / 0.02 - 1) < INIT_TOL, "std %g", s_qkv);
    double s_proj = tensor_std(m.w.h[2].fcprojw, 256 * 64, &mean);
    CHECK("gpt_init_residual_proj_std", fabs(s_proj / rs - 1) < INIT_TOL, "std %g, want %g", s_proj, rs);
    double s_ap = tensor_std(m.w.h[0].attprojw, 64 * 64, &mean);
    CHECK("gpt_init_attn_proj_std", fabs(s_ap / rs - 1) < 2 * INIT_TOL, "std %g, want %g", s_ap, rs);
    int ok = 1;
    for (int i = 0; i < 64; i++)
        ok &= m.w.h[0].ln1w[i] == 1 && m.w.h[0].ln1b[i] == 0 && m.w.lnfw[i] == 1 && m.w.h[2].fcprojb[i] == 0;
    for (int i = 0; i < 192; i++) ok &= m.w.h[1].qkvb[i] == 0;
    CHECK("gpt_init_biases_zero_ln_one", ok, "a bias or layernorm weight is off");
    gpt_model m2;
    gpt_init(&m2, &c);
    gpt_init_random(&m2, 42);
    CHECK("gpt_init_deterministic", memcmp(m.params, m2.params, m.num_params * sizeof(float)) == 0, "differs");
    gpt_free(&m);
    gpt_free(&m2);
}

static void test_errors(void) {
    gpt_model m;
    int tok[N], tgt[N];
    float loss;
    gpt_init(&m, &tiny);
    gpt_init_random(&m, 1);
    make_batch(tok, tgt, N, tiny.vocab_size, 2);
    tok[7] = 11;
    int rc = gpt_forward_backward(&m, tok, tgt, B, T, &loss);
    CHECK("gpt_bad_token_error", rc < 0 && strstr(pt_err(), "token 11 at (b=1, t=2)") && strstr(pt_err(), "layer 0"),
          "rc %d: %s", rc, pt_err());
    tok[7] = 0;
    tgt[0] = -1;
    rc = gpt_forward_backward(&m, tok, tgt, B, T, &loss);
    CHECK("gpt_bad_target_error", rc < 0 && strstr(pt_err(), "target -1 at (b=0, t=0)"), "rc %d: %s", rc, pt_err());
    tgt[0] = 0;
    rc = gpt_forward_backward(&m, tok, tgt, 1, 9, &loss);
    CHECK("gpt_too_long_error", rc < 0 && strstr(pt_err(), "n_positions=8"), "rc %d: %s", rc, pt_err());
    gpt_config bad = tiny;
    bad.n_embd = 10;
    gpt_model mb;
    CHECK("gpt_init_bad_config", gpt_init(&mb, &bad) < 0 && strstr(pt_err(), "n_embd"), "%s", pt_err());
    gpt_free(&mb);
    gpt_free(&m);
}

/* Partial models (a pipeline stage's share): spans, pointers, seeded init equal to the whole
 * model's layers bitwise, a slice of any tensor, and layer F/B/W giving the whole model's numbers. */
static void test_partial(void) {
    gpt_config c = {.n_layer = 3, .n_head = 2, .n_embd = 8, .vocab_size = 13, .n_positions = 8};
    gpt_model whole, part, none;
    gpt_init(&whole, &c);
    gpt_init_random(&whole, 7);
    gpt_init_layers(&part, &c, 2, 5);      /* blocks 1, 2 and the head */
    gpt_init_random(&part, 7);
    size_t woff, wn, poff, pn;
    gpt_layers_param_span(&whole, 2, 5, &woff, &wn);
    gpt_layers_param_span(&part, 2, 5, &poff, &pn);
    CHECK("gpt partial: holds its layers' floats only, at offset 0", part.n_held == wn && poff == 0 &&
          pn == wn && part.num_params == whole.num_params && gpt_config_num_params(&c) == whole.num_params,
          "held %zu span %zu+%zu, whole span %zu", part.n_held, poff, pn, wn);
    CHECK("gpt partial: seeded init equals the whole model's layers bitwise",
          memcmp(part.params, whole.params + woff, wn * sizeof(float)) == 0, "differs");
    CHECK("gpt partial: tensors it does not hold have no pointers", !part.w.wte && !part.w.h[0].qkvw &&
          part.w.h[1].ln1w == part.params && part.w.lnfw && !gpt_holds_layer(&part, 1) &&
          gpt_holds_layer(&part, 4), "pointers wrong");
    float sl[20];
    int qi = gpt_param_find(&whole, "h.2.mlp.c_fc.weight");
    const gpt_param_info *q = gpt_param_info_at(&whole, qi);
    gpt_init_random_slice(&part, 7, 0, 5, 20, sl);
    int ok = memcmp(sl, whole.w.wte + 5, sizeof sl) == 0;
    gpt_init_random_slice(&part, 7, qi, 100, 20, sl);
    ok &= memcmp(sl, whole.params + q->offset + 100, sizeof sl) == 0;
    CHECK("gpt partial: gpt_init_random_slice gives any tensor's elements", ok, "differs");
    gpt_init_layers(&none, &c, 0, 0);
    CHECK("gpt partial: an empty range holds nothing", none.n_held == 0 && !none.params &&
          none.num_params == whole.num_params, "held %zu", none.n_held);
    /* block 2 (layer 3) forward and backward on the partial model equal the whole model's */
    int b = 2, t = 4;
    size_t nc = (size_t)b * t * c.n_embd, na = gpt_layer_act_floats(&whole, 3, b, t);
    float *x = pt_falloc(nc), *y1 = pt_falloc(nc), *y2 = pt_falloc(nc), *a1 = pt_falloc(na), *a2 = pt_falloc(na);
    float *sc = pt_falloc(gpt_scratch_floats(&whole, b, t)), *d1 = pt_falloc(nc), *d2 = pt_falloc(nc);
    for (size_t i = 0; i < nc; i++) x[i] = (float)sin(0.3 * i);
    gpt_layer_forward(&whole, 3, NULL, a1, sc, y1, x, NULL, b, t);
    gpt_layer_forward(&part, 3, NULL, a2, sc, y2, x, NULL, b, t);
    gpt_layer_backward_input(&whole, 3, NULL, a1, sc, d1, x, b, t);
    gpt_layer_backward_input(&part, 3, NULL, a2, sc, d2, x, b, t);
    gpt_layer_backward_weight(&whole, 3, NULL, a1, sc, b, t);
    gpt_layer_backward_weight(&part, 3, NULL, a2, sc, b, t);
    size_t l3off, l3n, p3off, p3n;
    gpt_layer_param_span(&whole, 3, &l3off, &l3n);
    gpt_layer_param_span(&part, 3, &p3off, &p3n);
    CHECK("gpt partial: a layer's F, B and W equal the whole model's bitwise",
          !memcmp(y1, y2, nc * 4) && !memcmp(d1, d2, nc * 4) &&
          !memcmp(whole.grads + l3off, part.grads + p3off, l3n * 4), "differs");
    free(x); free(y1); free(y2); free(a1); free(a2); free(sc); free(d1); free(d2);
    gpt_free(&whole);
    gpt_free(&part);
    gpt_free(&none);
}

int main(void) {
    test_partial();
    test_spans_and_table();
    test_init_statistics();
    test_errors();
    test_microbatch_interleaving();
    test_two_stage_threads();
    test_gradients_fd();
    TEST_DONE();
}
