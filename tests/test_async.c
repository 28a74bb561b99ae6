/* Asynchronous pipelines against references computed here, step by step, in one process:
 *  - 2bw (threads, P=2 and 4, one and two batches per step, AdamW and the Nesterov method's
 *    NAdamW) against PipeDream-2BW's rule W(k+1) = W(k) - step(grad f_k(W(k-1))), and not equal
 *    to the same run without the delay (so the test can tell);
 *  - pipedream with --async-fix none | nesterov | pipemare | predict (threads, P=2 and 4)
 *    against a replay of the schedule: microbatch j's forward and backward on each stage use
 *    the weights the correction prescribes (stash; PipeMare's extrapolation back along its
 *    velocity with its lr factor; prediction along the last step), from the versions each
 *    stage had at those actions (counted from the rank's action list), every tensor updated
 *    after each microbatch with that microbatch's gradient;
 *  - --async-window W: W steps as one stream of W x M microbatches (one iteration), against the
 *    same references over the continuous order: each update its step's lr and number, 2bw's
 *    batches and the tie's lag (P updates, not the step's M) running on across the steps;
 *  - the correction math of optim/async_fix.h and NAdamW (torch 2's NAdam with decoupled decay;
 *    the installed torch 1.13 has none) against their formulas evaluated in double.
 * MPI: tests/test_async_mpi.sh. Legend: P stages, M microbatches, b rows per microbatch. */
#include "model/gpt.h"
#include "optim/async_fix.h"
#include "optim/nadam.h"
#include "optim/optim.h"
#include "run/run.h"
#include "train/train.h"
#include "util/pt.h"
#include "test.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* float32 pipeline vs float32 reference after a few Adam steps: the tied gradient is summed in
 * another order, and m/sqrt(v) turns ulp differences of near-zero entries into visible ones */
#define RUN_TOL 2e-4
/* NAdamW in float32 against its formula in double over 8 steps */
#define NADAMW_TOL 1e-5

enum { BATCH = 8, SEQ = 8, ITERS = 3 };
static const gpt_config CFG = { .n_layer = 4, .n_head = 4, .n_embd = 32, .vocab_size = 64, .n_positions = 8 };
static int g_tok[BATCH * SEQ], g_tgt[BATCH * SEQ];
static gpt_model g_init;
static int g_depth;          /* --async-depth of the pipelined runs (0: the 1f1b order) */
static int g_defer;          /* --defer-tie of the pipelined runs and the replay */
static int g_window = 1;     /* --async-window: steps an iteration holds (the pass: BATCH rows,
                              * each step BATCH / g_window of them; ITERS passes) */

static void make_data(void) {
    pt_rng r;
    pt_rng_seed(&r, 11);
    for (int i = 0; i < BATCH * SEQ; i++) g_tok[i] = (int)(pt_rng_next(&r) % 64);
    for (int i = 0; i < BATCH * SEQ; i++) g_tgt[i] = (int)(pt_rng_next(&r) % 64);
}

/* ---- one microbatch, forward on fw, backward on bw ------------------------------------------ */

/* F of every layer on fw's weights (the head reads wte_f), then B and W on bw's (the head
 * reads wte_b and adds its wte gradient into dwte); bw->grads += the rest. */
static void ref_microbatch(const gpt_model *fw, gpt_model *bw, const float *wte_f, const float *wte_b, float *dwte,
                           const int *tok, const int *tgt, int b) {
    int nl = gpt_num_layers(fw), C = fw->cfg.n_embd;
    size_t nc = (size_t)b * SEQ * C;
    float **act = pt_malloc(sizeof(float *) * (size_t)nl), *sc = pt_falloc(gpt_scratch_floats(fw, b, SEQ));
    float *x = pt_falloc(nc), *y = pt_falloc(nc), loss = 0, one = 1.0f;
    gpt_tied tf = { (float *)wte_f, NULL }, tb = { (float *)wte_b, dwte };
    for (int l = 0; l < nl; l++) act[l] = pt_falloc(gpt_layer_act_floats(fw, l, b, SEQ));
    for (int l = 0; l < nl; l++) {
        gpt_layer_kind k = gpt_layer_kind_of(fw, l);
        gpt_layer_forward(fw, l, &tf, act[l], sc, k == GPT_LAYER_HEAD ? &loss : y, k == GPT_LAYER_EMBED ? NULL : x,
                          k == GPT_LAYER_EMBED ? tok : k == GPT_LAYER_HEAD ? tgt : NULL, b, SEQ);
        float *t = x; x = y; y = t;
    }
    const float *dy = &one;
    for (int l = nl - 1; l >= 0; l--) {
        gpt_layer_backward_input(bw, l, &tb, act[l], sc, l ? y : NULL, dy, b, SEQ);
        dy = y;
        float *t = x; x = y; y = t;
    }
    for (int l = nl - 1; l >= 0; l--) gpt_layer_backward_weight(bw, l, &tb, act[l], sc, b, SEQ);
    for (int l = 0; l < nl; l++) free(act[l]);
    free(act); free(sc); free(x); free(y);
}

/* The pipelined run: ITERS steps of schedule `name` with the fix, from g_init; final weights
 * into out (whole model). 0, or -1. */
static int run_pipe(const char *name, int P, int M, async_fix fix, const optim_config *oc, gpt_model *out, int stash[3]) {
    run_opts o = { .P = P, .D = 1, .schedule = name, .M = M, .async_fix = fix, .async_depth = g_depth,
                   .defer_tie = g_defer, .async_window = g_window };
    run_plan pl;
    if (run_plan_init(&pl, &o, &CFG, BATCH / g_window, SEQ) < 0) return -1;
    run_job *j = NULL;
    run_stats st;
    int rc = run_job_init(&j, &pl, &g_init, NULL, NULL);
    for (int t = 1; rc == 0 && t <= ITERS; t++) rc = run_job_iteration(j, g_tok, g_tgt, oc, (t - 1) * g_window + 1, &st);
    if (rc == 0) rc = run_job_gather(j, out);
    if (j && stash) run_job_stash_stats(j, stash);
    run_job_free(j);
    run_plan_free(&pl);
    return rc;
}

/* AdamW (or oc's rule) update u on every tensor of m with m's grads, lr per tensor from
 * lr_of (NULL: lr), gradients scaled per tensor by scale_of (NULL: 1). */
static void ref_update(gpt_model *m, float *mm, float *vv, const optim_config *oc, int u, double lr,
                       const double *lr_of, const double *scale_of) {
    for (int i = 0; i < gpt_param_count(m); i++) {
        const gpt_param_info *pi = gpt_param_info_at(m, i);
        adamw_update(m->params + pi->offset, mm + pi->offset, vv + pi->offset, m->grads + pi->offset, pi->count,
                     lr_of ? lr * lr_of[i] : lr, scale_of ? scale_of[i] : 1.0, pi->decay != 0, u, oc);
    }
}

/* With a window each step's updates take that step's lr: a schedule that moves every step (warm-up,
 * then cosine), so an update given another step's lr shows. */
static void window_lr(optim_config *oc) {
    if (g_window <= 1) return;
    oc->schedule = LR_COSINE;
    oc->warmup = 2;
}

/* ---- 2bw -------------------------------------------------------------------------------------- */

/* W(k+1) = W(k) - step(grad of batch k's mean loss at W(k-1)), W(-1) = W(0); delay 0: at W(k).
 * Steps of BATCH / g_window rows, g_window of them a pass (the same tokens every pass). */
static void ref_2bw(int P, int M, const optim_config *oc, int delay, gpt_model *cur) {
    gpt_model old;
    gpt_init(&old, &CFG);
    memcpy(old.params, g_init.params, old.num_params * sizeof(float));
    memcpy(cur->params, g_init.params, cur->num_params * sizeof(float));
    size_t n = cur->num_params, V = (size_t)CFG.vocab_size * CFG.n_embd;
    float *mm = pt_falloc(n), *vv = pt_falloc(n), *dwte = pt_falloc(V);
    int b = BATCH / (M * g_window), u = 0;
    for (int t = 1; t <= ITERS * g_window; t++)
        for (int j = 0; j < M / P; j++) {
            gpt_model *at = delay ? &old : cur;
            gpt_zero_grad(at);
            memset(dwte, 0, V * sizeof(float));
            for (int k = 0; k < P; k++) {
                size_t row = (size_t)(((t - 1) % g_window) * M + j * P + k) * b;
                ref_microbatch(at, at, at->params, at->params, dwte, g_tok + row * SEQ, g_tgt + row * SEQ, b);
            }
            for (size_t i = 0; i < n; i++) cur->grads[i] = at->grads[i] / (float)P;
            for (size_t i = 0; i < V; i++) cur->grads[i] += dwte[i] / (float)P;
            memcpy(old.params, cur->params, n * sizeof(float));   /* W(k) becomes the older one */
            double f = optim_clip_scale(sqrt(optim_sumsq(cur->grads, n)), oc->grad_clip);
            for (size_t i = 0; i < n; i++) cur->grads[i] = (float)(cur->grads[i] * f);
            ref_update(cur, mm, vv, oc, ++u, optim_lr_at(oc, t), NULL, NULL);
        }
    free(mm); free(vv); free(dwte);
    gpt_free(&old);
}

static void test_2bw(int P, int M, int nesterov) {
    char nm[160];
    optim_config oc = optim_config_default();
    oc.lr = 1e-2;
    oc.total_steps = ITERS * g_window;
    oc.eps = 1e-6;             /* as in test_pipedream_fix: the key bias's noise gradient */
    window_lr(&oc);
    oc.grad_clip = 0;          /* the rule itself; clipping: test_clip */
    async_fix fix = nesterov ? ASYNC_FIX_NESTEROV : ASYNC_FIX_NONE;
    async_fix_optim(&oc, fix);
    gpt_model got, want, fresh;
    gpt_init(&got, &CFG); gpt_init(&want, &CFG); gpt_init(&fresh, &CFG);
    int stash[3] = { 0 };
    int rc = run_pipe("2bw", P, M, fix, &oc, &got, stash);
    ref_2bw(P, M, &oc, 1, &want);
    ref_2bw(P, M, &oc, 0, &fresh);
    double err = test_tensor_relerr(got.params, want.params, want.num_params);
    double gap = test_tensor_relerr(fresh.params, want.params, want.num_params);
    snprintf(nm, sizeof nm, "2bw P=%d M=%d %s --async-window %d: equals W(k+1) = W(k) - step(grad(W(k-1)))", P, M,
             nesterov ? "nesterov" : "adamw", g_window);
    CHECK(nm, rc == 0 && err < RUN_TOL, "rc %d %s, rel err %.3g (tol %g)", rc, rc ? pt_err() : "", err, RUN_TOL);
    snprintf(nm, sizeof nm, "2bw P=%d M=%d: the delay matters (undelayed reference %.3g away, > 20x tol)", P, M, gap);
    CHECK(nm, gap > 20 * RUN_TOL, "undelayed reference only %.3g away", gap);
    snprintf(nm, sizeof nm, "2bw P=%d M=%d window %d: every F/B on version j-1, the older one used", P, M, g_window);
    CHECK(nm, stash[0] == 2 * P * M * ITERS * g_window && stash[1] == 0 && stash[2] > 0, "%d checked, %d bad, %d older",
          stash[0], stash[1], stash[2]);
    gpt_free(&got); gpt_free(&want); gpt_free(&fresh);
}

/* 2bw with --async-depth D: more forwards in flight, the same versions for every action, so the
 * same weights as the 1f1b order, bitwise, and its rule. */
static void test_2bw_depth(int P, int M, int D) {
    char nm[160];
    optim_config oc = optim_config_default();
    oc.lr = 1e-2;
    oc.total_steps = ITERS;
    oc.eps = 1e-6;
    oc.grad_clip = 0.05;       /* clipping on: its collectives run in the new order too */
    gpt_model got, base;
    gpt_init(&got, &CFG); gpt_init(&base, &CFG);
    int stash[3] = { 0 };
    int rc = run_pipe("2bw", P, M, ASYNC_FIX_NONE, &oc, &base, NULL);
    g_depth = D;
    if (rc == 0) rc = run_pipe("2bw", P, M, ASYNC_FIX_NONE, &oc, &got, stash);
    g_depth = 0;
    snprintf(nm, sizeof nm, "2bw P=%d M=%d --async-depth %d: the weights of the 1f1b order, bitwise", P, M, D);
    CHECK(nm, rc == 0 && !memcmp(got.params, base.params, got.num_params * sizeof(float)), "rc %d %s, rel err %.3g",
          rc, rc ? pt_err() : "", rc ? 0 : test_tensor_relerr(got.params, base.params, base.num_params));
    snprintf(nm, sizeof nm, "2bw P=%d M=%d --async-depth %d: every F/B on version j-1", P, M, D);
    CHECK(nm, stash[0] == 2 * P * M * ITERS && stash[1] == 0 && stash[2] > 0, "%d checked, %d bad, %d older",
          stash[0], stash[1], stash[2]);
    gpt_free(&got); gpt_free(&base);
}

/* ---- clipping ------------------------------------------------------------------------------- */

/* Asynchronous updates clip each stage's gradient at --grad-clip / sqrt(P): at P = 1 that is the
 * synchronous clip, so pipedream (M = 1: one update a step, no delay) equals 1f1b, and 2bw
 * equals its rule with the whole gradient clipped; with clipping off they must differ. */
static void test_clip(void) {
    char nm[160];
    optim_config oc = optim_config_default();
    oc.lr = 1e-2;
    oc.total_steps = ITERS;
    oc.eps = 1e-6;
    oc.grad_clip = 0.05;       /* below every step's norm here: each update is clipped */
    optim_config off = oc;
    off.grad_clip = 0;
    gpt_model pd, sync, pd_off, bw, want;
    gpt_init(&pd, &CFG); gpt_init(&sync, &CFG); gpt_init(&pd_off, &CFG); gpt_init(&bw, &CFG); gpt_init(&want, &CFG);
    int rc = run_pipe("pipedream", 1, 1, ASYNC_FIX_NONE, &oc, &pd, NULL);
    if (rc == 0) rc = run_pipe("1f1b", 1, 1, ASYNC_FIX_NONE, &oc, &sync, NULL);
    if (rc == 0) rc = run_pipe("pipedream", 1, 1, ASYNC_FIX_NONE, &off, &pd_off, NULL);
    if (rc == 0) rc = run_pipe("2bw", 1, 2, ASYNC_FIX_NONE, &oc, &bw, NULL);
    ref_2bw(1, 2, &oc, 1, &want);
    double err = rc ? INFINITY : test_tensor_relerr(pd.params, sync.params, sync.num_params);
    double gap = test_tensor_relerr(pd_off.params, sync.params, sync.num_params);
    double err2 = rc ? INFINITY : test_tensor_relerr(bw.params, want.params, want.num_params);
    CHECK("pipedream P=1 M=1 clips like 1f1b (--grad-clip 0.05)", rc == 0 && err < RUN_TOL,
          "rc %d %s, rel err %.3g (tol %g)", rc, rc ? pt_err() : "", err, RUN_TOL);
    snprintf(nm, sizeof nm, "pipedream P=1 without clipping differs (%.3g away, > 20x tol)", gap);
    CHECK(nm, gap > 20 * RUN_TOL, "only %.3g away", gap);
    CHECK("2bw P=1 M=2 equals its rule with the gradient clipped", rc == 0 && err2 < RUN_TOL,
          "rc %d, rel err %.3g (tol %g)", rc, err2, RUN_TOL);
    gpt_free(&pd); gpt_free(&sync); gpt_free(&pd_off); gpt_free(&bw); gpt_free(&want);
}

/* ---- pipedream and its corrections: the replay ------------------------------------------------- */

/* STEPs of stage g's rank before F(g, j) and before its backward, for every j. */
static void stage_versions(const sched *s, int g, int *vf, int *vb) {
    int r = s->stage_rank[g], steps = 0;
    for (int i = 0; i < s->len[r]; i++) {
        sched_action a = s->acts[r][i];
        if (a.kind == ACT_STEP) steps++;
        if (a.stage != g) continue;
        if (a.kind == ACT_F) vf[a.mb] = steps;
        if (a.kind == ACT_BW || a.kind == ACT_B) vb[a.mb] = steps;
    }
}

typedef struct {
    int P, M, nv;            /* versions kept: W[0..nv) (global update count) */
    float **W;               /* [nv] whole-model weights after u updates */
    double **vel;            /* [P][n] PipeMare velocity of each stage's copy, after the last update */
    double ***velh;          /* [P][nv] its history (velh[g][u]: after update u) */
    int *stage_of;           /* [n_param] stage of each tensor (wte: 0) */
    int *tau;                /* [P] */
    int **vf, **vb;          /* [P][M] */
    int lag;                 /* --defer-tie: wte's sum of microbatch k applied at update k + lag (0: at k) */
    float *tie_hist;         /* [nv][V] wte's summed gradient of each microbatch */
    double *span_hist;       /* [nv][P] each stage's sum of squares without wte, per microbatch */
} replay;

/* Stage g's weights for an action at version u: the correction applied to W[u] (floats of
 * stage g's tensors only; others copied as they are). kind: 0 stash/none, 1 predict forward
 * (s steps ahead along W[u] - W[u-1]), 2 pipemare backward (d steps back along velh[g][u]). */
static void stage_weights(const replay *R, int g, int u, int kind, int s, float *dst, size_t n) {
    memcpy(dst, R->W[u], n * sizeof(float));
    if (kind == 1 && u > 0 && s > 0)
        for (size_t i = 0; i < n; i++) dst[i] = (float)(R->W[u][i] + (double)s * (R->W[u][i] - R->W[u - 1][i]));
    if (kind == 2 && s > 0)
        for (size_t i = 0; i < n; i++) dst[i] = (float)(R->W[u][i] - (double)s * R->velh[g][u][i]);
}

/* The model whose tensors of stage g come from per-stage buffers w[g]; the head's wte from
 * w[P-1] (its copy) into wte_head. */
static void assemble(const replay *R, gpt_model *m, float **w, float *wte_head) {
    for (int i = 0; i < gpt_param_count(m); i++) {
        const gpt_param_info *pi = gpt_param_info_at(m, i);
        memcpy(m->params + pi->offset, w[R->stage_of[i]] + pi->offset, pi->count * sizeof(float));
    }
    memcpy(wte_head, w[R->P - 1], (size_t)CFG.vocab_size * CFG.n_embd * sizeof(float));
}

/* Microbatch u's gradient (bw's, wte summed over its holders) into what update u + 1 applies:
 * with a lag, wte's sum of microbatch u - lag (zeros before); then the per-stage clip at
 * grad_clip / sqrt(P): a stage's factor from its span and the wte sum it applies (holders:
 * stages 0 and P-1), wte's the smallest of its holders' factors for the microbatch it comes
 * from, into scale_of (per tensor; tensor 0 is wte). */
static void ref_tie_clip(replay *R, gpt_model *bw, int u, const optim_config *oc, double *scale_of) {
    int P = R->P, np = gpt_param_count(bw);
    size_t V = (size_t)CFG.vocab_size * CFG.n_embd;
    double *S = R->span_hist + (size_t)u * P, cap = oc->grad_clip / sqrt((double)P);
    for (int g = 0; g < P; g++) S[g] = 0;
    for (int i = 1; i < np; i++) {
        const gpt_param_info *pi = gpt_param_info_at(bw, i);
        S[R->stage_of[i]] += optim_sumsq(bw->grads + pi->offset, pi->count);
    }
    memcpy(R->tie_hist + (size_t)u * V, bw->grads, V * sizeof(float));
    if (R->lag && u >= R->lag) memcpy(bw->grads, R->tie_hist + (size_t)(u - R->lag) * V, V * sizeof(float));
    else if (R->lag) memset(bw->grads, 0, V * sizeof(float));
    double T = optim_sumsq(bw->grads, V), ft = 1, fs[8];
    const double *Sx = R->lag ? (u >= R->lag ? R->span_hist + (size_t)(u - R->lag) * P : NULL) : S;
    for (int g = 0; g < P; g++) fs[g] = optim_clip_scale(sqrt(S[g] + (g == 0 || g == P - 1 ? T : 0)), cap);
    for (int g = 0; Sx && g < P; g += P - 1 > 0 ? P - 1 : 1) {
        double f = optim_clip_scale(sqrt(Sx[g] + T), cap);
        if (f < ft) ft = f;
    }
    for (int i = 0; i < np; i++) scale_of[i] = i == 0 ? ft : fs[R->stage_of[i]];
}

static void ref_pipedream(const run_plan *pl, async_fix fix, const optim_config *oc, gpt_model *out) {
    const sched *s = pl->s;
    int P = s->n_stages, M = s->n_mb, b = pl->mb_rows;
    size_t n = g_init.num_params, V = (size_t)CFG.vocab_size * CFG.n_embd;
    /* the tie's lag: the forwards stage 0 admits, max(P, --async-depth), whatever M or the window */
    replay R = { .P = P, .M = M, .nv = ITERS * M + 1, .lag = g_defer ? (g_depth > P ? g_depth : P) : 0 };
    R.tie_hist = pt_falloc((size_t)R.nv * V);
    R.span_hist = pt_calloc((size_t)R.nv * (size_t)P, sizeof(double));
    R.W = pt_calloc((size_t)R.nv, sizeof *R.W);
    R.W[0] = pt_falloc(n);
    memcpy(R.W[0], g_init.params, n * sizeof(float));
    R.tau = pt_calloc((size_t)P, sizeof(int));
    R.vf = pt_calloc((size_t)P, sizeof(int *));
    R.vb = pt_calloc((size_t)P, sizeof(int *));
    R.velh = pt_calloc((size_t)P, sizeof(double **));
    for (int g = 0; g < P; g++) {
        R.vf[g] = pt_calloc((size_t)M, sizeof(int));
        R.vb[g] = pt_calloc((size_t)M, sizeof(int));
        stage_versions(s, g, R.vf[g], R.vb[g]);
        for (int j = 0; j < M; j++) if (R.vb[g][j] - R.vf[g][j] > R.tau[g]) R.tau[g] = R.vb[g][j] - R.vf[g][j];
        R.velh[g] = pt_calloc((size_t)R.nv, sizeof(double *));
        R.velh[g][0] = pt_calloc(n, sizeof(double));
    }
    int tau_max = 0;
    for (int g = 0; g < P; g++) if (R.tau[g] > tau_max) tau_max = R.tau[g];
    gpt_model fw, bw;
    gpt_init(&fw, &CFG); gpt_init(&bw, &CFG);
    R.stage_of = pt_calloc((size_t)gpt_param_count(&fw), sizeof(int));
    double *lr_of = pt_calloc((size_t)gpt_param_count(&fw), sizeof(double));
    double *scale_of = pt_calloc((size_t)gpt_param_count(&fw), sizeof(double));
    for (int i = 0; i < gpt_param_count(&fw); i++) {
        int l = gpt_param_info_at(&fw, i)->layer;
        for (int g = 0; g < P; g++) if (l >= pl->lo.chunk_first[g] && l < pl->lo.chunk_first[g + 1]) R.stage_of[i] = g;
    }
    float **wf = pt_calloc((size_t)P, sizeof(float *)), **wb = pt_calloc((size_t)P, sizeof(float *));
    for (int g = 0; g < P; g++) { wf[g] = pt_falloc(n); wb[g] = pt_falloc(n); }
    float *wte_f = pt_falloc(V), *wte_b = pt_falloc(V), *dwte = pt_falloc(V), *mm = pt_falloc(n), *vv = pt_falloc(n);
    int per = M / g_window;                                  /* microbatches (updates) a step */
    int warm = (oc->total_steps / 10 > 1 ? oc->total_steps / 10 : 1) * per;
    for (int t = 1; t <= ITERS; t++)
        for (int j = 0; j < M; j++) {
            int base = (t - 1) * M, u = base + j;          /* updates before this microbatch's */
            int step = (t - 1) * g_window + j / per + 1;   /* its step: its lr */
            for (int g = 0; g < P; g++) {
                int uf = base + R.vf[g][j], ub = base + R.vb[g][j], d = ub - uf;
                stage_weights(&R, g, uf, fix == ASYNC_FIX_PREDICT ? 1 : 0, d, wf[g], n);
                if (fix == ASYNC_FIX_PIPEMARE) stage_weights(&R, g, ub, 2, d, wb[g], n);
                else if (fix == ASYNC_FIX_PREDICT) stage_weights(&R, g, ub, 0, 0, wb[g], n);
                else memcpy(wb[g], wf[g], n * sizeof(float));
            }
            assemble(&R, &fw, wf, wte_f);
            assemble(&R, &bw, wb, wte_b);
            gpt_zero_grad(&bw);
            memset(dwte, 0, V * sizeof(float));
            size_t row = (size_t)j * b;
            ref_microbatch(&fw, &bw, wte_f, wte_b, dwte, g_tok + row * SEQ, g_tgt + row * SEQ, b);
            for (size_t i = 0; i < V; i++) bw.grads[i] += dwte[i];
            ref_tie_clip(&R, &bw, u, oc, scale_of);
            R.W[u + 1] = pt_falloc(n);
            memcpy(bw.params, R.W[u], n * sizeof(float));
            for (int i = 0; i < gpt_param_count(&bw); i++) {
                int tau = i == 0 ? tau_max : R.tau[R.stage_of[i]];   /* tensor 0: wte, tied */
                lr_of[i] = fix == ASYNC_FIX_PIPEMARE ? async_fix_pipemare_lr(tau, u + 1, warm) : 1.0;
            }
            ref_update(&bw, mm, vv, oc, u + 1, optim_lr_at(oc, step), lr_of, scale_of);
            memcpy(R.W[u + 1], bw.params, n * sizeof(float));
            for (int g = 0; g < P; g++) {      /* PipeMare's velocity of each stage's copy */
                double gm = pow(0.1, 1.0 / (R.tau[g] > 0 ? R.tau[g] : 1));
                if (R.tau[g] <= 0) gm = 0;
                R.velh[g][u + 1] = pt_calloc(n, sizeof(double));
                for (size_t i = 0; i < n; i++)
                    R.velh[g][u + 1][i] = gm * R.velh[g][u][i] + (1 - gm) * ((double)R.W[u + 1][i] - R.W[u][i]);
            }
        }
    memcpy(out->params, R.W[R.nv - 1], n * sizeof(float));
    for (int u = 0; u < R.nv; u++) free(R.W[u]);
    for (int g = 0; g < P; g++) {
        for (int u = 0; u < R.nv; u++) free(R.velh[g][u]);
        free(R.velh[g]); free(R.vf[g]); free(R.vb[g]); free(wf[g]); free(wb[g]);
    }
    free(R.W); free(R.velh); free(R.vf); free(R.vb); free(R.tau); free(R.stage_of); free(lr_of);
    free(scale_of); free(R.tie_hist); free(R.span_hist);
    free(wf); free(wb); free(wte_f); free(wte_b); free(dwte); free(mm); free(vv);
    gpt_free(&fw); gpt_free(&bw);
}

static void test_pipedream_fix(int P, int M, async_fix fix) {
    char nm[160];
    optim_config oc = optim_config_default();
    oc.lr = 1e-2;
    oc.total_steps = 20;       /* PipeMare's lr factor still rising over these 3 steps */
    window_lr(&oc);
    oc.eps = 1e-6;             /* the key bias's gradient is 0 up to float noise (softmax ignores it):
                                * with eps 1e-8 Adam turns that noise into whole steps */
    oc.grad_clip = 0;          /* the replay does not clip; clipping: test_clip */
    async_fix_optim(&oc, fix);
    run_opts o = { .P = P, .D = 1, .schedule = "pipedream", .M = M, .async_fix = fix, .async_depth = g_depth,
                   .defer_tie = g_defer, .async_window = g_window };
    run_plan pl;
    gpt_model got, want, plain;
    gpt_init(&got, &CFG); gpt_init(&want, &CFG); gpt_init(&plain, &CFG);
    int rc = run_plan_init(&pl, &o, &CFG, BATCH / g_window, SEQ);
    if (rc == 0) rc = run_pipe("pipedream", P, M, fix, &oc, &got, NULL);
    if (rc == 0) {
        ref_pipedream(&pl, fix, &oc, &want);
        ref_pipedream(&pl, ASYNC_FIX_NONE, &oc, &plain);
        run_plan_free(&pl);
    }
    double err = rc ? INFINITY : test_tensor_relerr(got.params, want.params, want.num_params);
    snprintf(nm, sizeof nm, "pipedream P=%d M=%d --async-fix %s --async-depth %d --async-window %d%s: equals the "
             "step-by-step replay", P, M, async_fix_name(fix), g_depth, g_window, g_defer ? " --defer-tie" : "");
    CHECK(nm, rc == 0 && err < RUN_TOL, "rc %d %s, rel err %.3g (tol %g)", rc, rc ? pt_err() : "", err, RUN_TOL);
    if (fix == ASYNC_FIX_PIPEMARE || fix == ASYNC_FIX_PREDICT) {
        double gap = test_tensor_relerr(plain.params, want.params, want.num_params);
        snprintf(nm, sizeof nm, "pipedream P=%d M=%d %s: the correction changes the run (%.3g from stashing)", P, M,
                 async_fix_name(fix), gap);
        CHECK(nm, gap > 20 * RUN_TOL, "only %.3g from plain stashing", gap);
    }
    gpt_free(&got); gpt_free(&want); gpt_free(&plain);
}

/* --defer-tie: pipedream against the replay with wte's sum applied M updates late, clipping on
 * (tight, so that factors bind) or off; and the lag changes the run (against the replay of the
 * undeferred rule, which the undeferred run must match too). */
static void test_defer_tie(int P, int M, int D, double clip) {
    char nm[200];
    optim_config oc = optim_config_default();
    oc.lr = 1e-2;
    oc.total_steps = 20;
    oc.eps = 1e-6;
    oc.grad_clip = clip;
    window_lr(&oc);
    run_opts o = { .P = P, .D = 1, .schedule = "pipedream", .M = M, .async_depth = D, .async_window = g_window };
    run_plan pl;
    gpt_model got, want, now, now_run;
    gpt_init(&got, &CFG); gpt_init(&want, &CFG); gpt_init(&now, &CFG); gpt_init(&now_run, &CFG);
    g_depth = D;
    int rc = run_plan_init(&pl, &o, &CFG, BATCH / g_window, SEQ);
    if (rc == 0) rc = run_pipe("pipedream", P, M, ASYNC_FIX_NONE, &oc, &now_run, NULL);
    g_defer = 1;
    if (rc == 0) rc = run_pipe("pipedream", P, M, ASYNC_FIX_NONE, &oc, &got, NULL);
    if (rc == 0) {
        ref_pipedream(&pl, ASYNC_FIX_NONE, &oc, &want);
        g_defer = 0;
        ref_pipedream(&pl, ASYNC_FIX_NONE, &oc, &now);
        run_plan_free(&pl);
    }
    g_defer = g_depth = 0;
    double err = rc ? INFINITY : test_tensor_relerr(got.params, want.params, want.num_params);
    double err0 = rc ? INFINITY : test_tensor_relerr(now_run.params, now.params, now.num_params);
    double gap = rc ? 0 : test_tensor_relerr(now.params, want.params, want.num_params);
    snprintf(nm, sizeof nm, "pipedream P=%d M=%d --async-depth %d --grad-clip %g: undeferred equals the replay's clip rule",
             P, M, D, clip);
    CHECK(nm, rc == 0 && err0 < RUN_TOL, "rc %d %s, rel err %.3g (tol %g)", rc, rc ? pt_err() : "", err0, RUN_TOL);
    snprintf(nm, sizeof nm, "pipedream P=%d M=%d --async-depth %d --async-window %d --grad-clip %g --defer-tie: equals "
             "the replay (wte's sum max(P, D) updates late)", P, M, D, g_window, clip);
    CHECK(nm, rc == 0 && err < RUN_TOL, "rc %d %s, rel err %.3g (tol %g)", rc, rc ? pt_err() : "", err, RUN_TOL);
    snprintf(nm, sizeof nm, "pipedream P=%d M=%d --defer-tie: the lag changes the run (%.3g from undeferred)", P, M, gap);
    CHECK(nm, gap > 20 * RUN_TOL, "only %.3g from the undeferred replay", gap);
    gpt_free(&got); gpt_free(&want); gpt_free(&now); gpt_free(&now_run);
}

/* ---- the correction math ------------------------------------------------------------------------ */

static void test_math(void) {
    CHECK("pipemare lr: 1/tau at u=0", fabs(async_fix_pipemare_lr(4, 0, 100) - 0.25) < 1e-12, "%g",
          async_fix_pipemare_lr(4, 0, 100));
    CHECK("pipemare lr: tau^-(1/2) half way", fabs(async_fix_pipemare_lr(4, 50, 100) - 0.5) < 1e-12, "%g",
          async_fix_pipemare_lr(4, 50, 100));
    CHECK("pipemare lr: 1 after the warm-up and for tau <= 1",
          async_fix_pipemare_lr(4, 100, 100) == 1 && async_fix_pipemare_lr(4, 500, 100) == 1 &&
          async_fix_pipemare_lr(1, 0, 100) == 1, "%s", "wrong");
    CHECK("pipemare gamma: 0.1^(1/tau)", fabs(async_fix_pipemare_gamma(2) - sqrt(0.1)) < 1e-12 &&
          async_fix_pipemare_gamma(0) == 0, "%g", async_fix_pipemare_gamma(2));
    float w[3] = { 1, 2, 3 }, d[3] = { 0.5f, -1, 0 }, o[3], vel[3] = { 1, 1, 1 }, old[3] = { 0, 0, 0 };
    async_fix_extrapolate(o, w, d, 3, 2.0);
    CHECK("extrapolate: w + s d", o[0] == 2 && o[1] == 0 && o[2] == 3, "%g %g %g", o[0], o[1], o[2]);
    async_fix_velocity(vel, w, old, 3, 0.25);
    CHECK("velocity: gamma v + (1 - gamma)(new - old)", vel[0] == 1.0f && vel[1] == 1.75f && vel[2] == 2.5f,
          "%g %g %g", vel[0], vel[1], vel[2]);
    optim_config c = optim_config_default();
    async_fix_optim(&c, ASYNC_FIX_NESTEROV);
    CHECK("nesterov: NAdamW, betas (0.99, 0.999), psi 4e-3", c.kind == OPTIM_NADAMW && c.beta1 == 0.99 &&
          c.beta2 == 0.999 && c.momentum_decay == 4e-3, "kind %d beta1 %g", c.kind, c.beta1);
    async_fix f;
    CHECK("--async-fix names round-trip", async_fix_parse("predict", &f) == 0 && f == ASYNC_FIX_PREDICT &&
          !strcmp(async_fix_name(ASYNC_FIX_PIPEMARE), "pipemare") && async_fix_parse("x", &f) < 0, "%s", "wrong");
}

/* NAdamW (torch >= 2.0 NAdam, decoupled_weight_decay=True) against its formula in double. */
static void test_nadamw(void) {
    enum { N = 29, STEPS = 8 };
    optim_config c = optim_config_default();
    c.kind = OPTIM_NADAMW;
    c.beta1 = 0.99; c.beta2 = 0.999; c.weight_decay = 0.1; c.momentum_decay = 4e-3;
    float p[N], m[N] = { 0 }, v[N] = { 0 }, g[N];
    double P_[N], M_[N] = { 0 }, V_[N] = { 0 }, prod = 1, worst = 0;
    pt_rng r;
    pt_rng_seed(&r, 5);
    for (int i = 0; i < N; i++) P_[i] = p[i] = (float)((int)(pt_rng_next(&r) % 2001) - 1000) / 1000.0f;
    for (int t = 1; t <= STEPS; t++) {
        double lr = 1e-2 * t;
        for (int i = 0; i < N; i++) g[i] = (float)((int)(pt_rng_next(&r) % 2001) - 1000) / 500.0f;
        adamw_update(p, m, v, g, N, lr, 1.0, true, t, &c);
        double mu = 0.99 * (1 - 0.5 * pow(0.96, t * 4e-3)), mu1 = 0.99 * (1 - 0.5 * pow(0.96, (t + 1) * 4e-3));
        prod *= mu;
        for (int i = 0; i < N; i++) {
            P_[i] *= 1 - lr * 0.1;
            M_[i] = 0.99 * M_[i] + 0.01 * g[i];
            V_[i] = 0.999 * V_[i] + 0.001 * (double)g[i] * g[i];
            double d = sqrt(V_[i] / (1 - pow(0.999, t))) + 1e-8;
            P_[i] -= lr * (1 - mu) / (1 - prod) * g[i] / d + lr * mu1 / (1 - prod * mu1) * M_[i] / d;
            double e = fabs(p[i] - P_[i]) / fmax(fabs(P_[i]), 1e-3);
            if (e > worst) worst = e;
        }
    }
    CHECK("NAdamW equals torch 2's NAdam(decoupled_weight_decay) formula", worst < NADAMW_TOL,
          "worst rel err %.3g (tol %g)", worst, NADAMW_TOL);
}

int main(void) {
    make_data();
    gpt_init(&g_init, &CFG);
    gpt_init_random(&g_init, 3);
    test_math();
    test_nadamw();
    test_2bw(2, 2, 0);
    test_2bw(2, 4, 0);
    test_2bw(4, 4, 0);
    test_2bw(2, 4, 1);
    test_clip();
    for (async_fix f = ASYNC_FIX_NONE; f <= ASYNC_FIX_PREDICT; f++) test_pipedream_fix(2, 4, f);
    test_pipedream_fix(4, 4, ASYNC_FIX_PIPEMARE);
    test_pipedream_fix(4, 8, ASYNC_FIX_PREDICT);
    test_2bw_depth(4, 4, 4);
    test_2bw_depth(2, 4, 2);
    g_depth = 4;               /* every stage admits 4: stage g's delay grows from P-1-g to 3 */
    test_pipedream_fix(4, 4, ASYNC_FIX_NONE);
    test_pipedream_fix(4, 8, ASYNC_FIX_PREDICT);
    g_depth = 0;
    test_defer_tie(2, 4, 0, 0);
    test_defer_tie(4, 4, 4, 0.05);
    test_defer_tie(4, 8, 0, 0.05);
    g_defer = 1;               /* a correction with the lag: its replay too */
    test_pipedream_fix(4, 4, ASYNC_FIX_PIPEMARE);
    g_defer = 0;
    g_window = 2;              /* two steps a pass: the continuous order, per-step lr, the lag across */
    test_2bw(2, 2, 0);
    test_2bw(4, 4, 1);
    for (async_fix f = ASYNC_FIX_NONE; f <= ASYNC_FIX_PREDICT; f++) test_pipedream_fix(4, 4, f);
    test_defer_tie(4, 4, 0, 0.05);
    test_defer_tie(2, 2, 0, 0);
    g_defer = 1;
    test_pipedream_fix(4, 4, ASYNC_FIX_NESTEROV);
    g_defer = 0;
    g_window = 4;              /* four steps of two microbatches: the stream is longer than a step's pipe */
    test_pipedream_fix(4, 2, ASYNC_FIX_NESTEROV);
    test_defer_tie(4, 2, 0, 0.05);
    g_window = 1;
    gpt_free(&g_init);
    TEST_DONE();
}
