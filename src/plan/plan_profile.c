/* Profiling on this machine: times F, B and W of the embedding, one transformer block (blocks are
 * identical) and the head on real layers (model/gpt.h), and the optimizer step per parameter,
 * medians over repeats after a warm-up, one BLAS thread. Like a pipeline stage, each repeat runs F
 * on several microbatches' activation buffers, then their B, then their W, so caches see what they
 * see in a pipeline rather than one buffer hot. Like a pipeline with a rank on every core, every
 * other core runs the same layer meanwhile (its own copy), so the shared cache, memory bandwidth
 * and clock are what a rank gets with its neighbours busy rather than a quiet machine's. Not the
 * costs file format (plan_cost.c) nor any use of the numbers. */
#include "plan/plan.h"
#include "model/gpt.h"
#include "optim/optim.h"
#include "util/pt.h"
#include <cblas.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define IN_FLIGHT 4               /* microbatches whose activations cycle per repeat */
#define IN_FLIGHT_BYTES (1L << 30)  /* ... fewer when their activations pass this */
#define MAX_CORES 64              /* cores kept busy at most: each holds a one-block model */

/* Buffers for one layer on n_act (B, T) microbatches. */
typedef struct {
    float *act[IN_FLIGHT];                        /* act per gpt.h, one per microbatch */
    int n_act;
    float *scratch, *x, *out, *dx, *dout;         /* x, out, dx, dout (B,T,C) */
    int *tokens;                                  /* (B,T) */
} prof_bufs;

static void bufs_init(prof_bufs *b, const gpt_model *m, int layer, int B, int T, pt_rng *rng) {
    size_t N = (size_t)B * T, C = (size_t)m->cfg.n_embd;
    size_t act = gpt_layer_act_floats(m, layer, B, T);
    b->n_act = (int)(IN_FLIGHT_BYTES / (long)(act * sizeof(float) + 1));
    b->n_act = b->n_act < 1 ? 1 : b->n_act > IN_FLIGHT ? IN_FLIGHT : b->n_act;
    for (int i = 0; i < b->n_act; i++) b->act[i] = pt_falloc(act);
    b->scratch = pt_falloc(gpt_scratch_floats(m, B, T));
    b->x = pt_falloc(N * C); b->out = pt_falloc(N * C); b->dx = pt_falloc(N * C); b->dout = pt_falloc(N * C);
    b->tokens = pt_malloc(sizeof(int) * N);
    for (size_t i = 0; i < N; i++) b->tokens[i] = (int)(pt_rng_next(rng) % (uint64_t)m->cfg.vocab_size);
    for (size_t i = 0; i < N * C; i++) { b->x[i] = (float)pt_rng_normal(rng); b->dout[i] = (float)pt_rng_normal(rng) * 1e-2f; }
}

static void bufs_free(prof_bufs *b) {
    for (int i = 0; i < b->n_act; i++) free(b->act[i]);
    free(b->scratch); free(b->x); free(b->out); free(b->dx); free(b->dout); free(b->tokens);
}

/* F on every act buffer, then B on each, then W on each; t[ph * n_act + i] gets the seconds. */
static int run_once(const gpt_model *m, int layer, prof_bufs *b, int B, int T, double *t) {
    unsigned io = gpt_layer_ops_of(m, layer)->io;   /* what the kind reads besides x */
    const int *tok = io & (GPT_IO_TOKENS | GPT_IO_TARGETS) ? b->tokens : NULL;
    const float *x = io & GPT_IO_TOKENS ? NULL : b->x, *dout = io & GPT_IO_TARGETS ? NULL : b->dout;
    float *dx = io & GPT_IO_TOKENS ? NULL : b->dx;
    int n = b->n_act;
    for (int i = 0; i < n; i++) {
        double t0 = pt_now();
        if (gpt_layer_forward(m, layer, NULL, b->act[i], b->scratch, b->out, x, tok, B, T) < 0) return -1;
        t[PLAN_F * n + i] = pt_now() - t0;
    }
    for (int i = 0; i < n; i++) {
        double t0 = pt_now();
        if (gpt_layer_backward_input(m, layer, NULL, b->act[i], b->scratch, dx, dout, B, T) < 0) return -1;
        t[PLAN_B * n + i] = pt_now() - t0;
    }
    for (int i = 0; i < n; i++) {
        double t0 = pt_now();
        if (gpt_layer_backward_weight(m, layer, NULL, b->act[i], b->scratch, B, T) < 0) return -1;
        t[PLAN_W * n + i] = pt_now() - t0;
    }
    return 0;
}

/* Medians of one layer at one size into sec[3], over repeats x in-flight samples. */
static int profile_layer(const gpt_model *m, int layer, int B, int T, int repeats, double *sec) {
    pt_rng rng;
    pt_rng_seed(&rng, 1234 + (uint64_t)layer);
    prof_bufs b;
    bufs_init(&b, m, layer, B, T, &rng);
    int n = b.n_act, per = repeats * n;
    double *t = pt_malloc(sizeof(double) * PLAN_N_PHASES * (size_t)per), one[PLAN_N_PHASES * IN_FLIGHT];
    int rc = run_once(m, layer, &b, B, T, one);   /* warm-up: page faults, caches */
    for (int r = 0; r < repeats && rc == 0; r++) {
        rc = run_once(m, layer, &b, B, T, one);
        for (int ph = 0; ph < PLAN_N_PHASES; ph++)
            for (int i = 0; i < n; i++) t[ph * per + r * n + i] = one[ph * n + i];
    }
    for (int ph = 0; ph < PLAN_N_PHASES && rc == 0; ph++) sec[ph] = pt_median(t + ph * per, per);
    free(t);
    bufs_free(&b);
    return rc;
}

/* ---- the other cores: the same layer, each on its own model and buffers --------------------- */
typedef struct {
    pthread_mutex_t mu;
    int layer, B, T;              /* what the busy cores run; layer -1: stop */
    const gpt_config *cfg;        /* the one-block config */
} busy_ctl;

static void busy_get(busy_ctl *c, int *layer, int *B, int *T) {
    pthread_mutex_lock(&c->mu);
    *layer = c->layer, *B = c->B, *T = c->T;
    pthread_mutex_unlock(&c->mu);
}

static void busy_set(busy_ctl *c, int layer, int B, int T) {
    pthread_mutex_lock(&c->mu);
    c->layer = layer, c->B = B, c->T = T;
    pthread_mutex_unlock(&c->mu);
}

/* One busy core: runs what ctl says, F, B, W over and over, until told to stop. Errors only end
 * the load early (the timed core reports its own). */
static void *busy_main(void *arg) {
    busy_ctl *c = arg;
    gpt_model m;
    memset(&m, 0, sizeof m);
    if (gpt_init(&m, c->cfg) < 0) return NULL;
    gpt_init_random(&m, 43);
    prof_bufs b;
    pt_rng rng;
    pt_rng_seed(&rng, 99);
    double t[PLAN_N_PHASES * IN_FLIGHT];
    int layer, B, T, have = -1, hB = 0, hT = 0;
    for (busy_get(c, &layer, &B, &T); layer >= 0; busy_get(c, &layer, &B, &T)) {
        if (layer != have || B != hB || T != hT) {
            if (have >= 0) bufs_free(&b);
            bufs_init(&b, &m, layer, B, T, &rng);
            have = layer, hB = B, hT = T;
        }
        if (run_once(&m, layer, &b, B, T, t) < 0) break;
    }
    if (have >= 0) bufs_free(&b);
    gpt_free(&m);
    return NULL;
}

/* The cores to keep busy besides the timed one: every other online core, MAX_CORES in all at most. */
static int busy_count(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n < 2 ? 0 : n > MAX_CORES ? MAX_CORES - 1 : (int)n - 1;
}

/* Starts n busy cores on layer 0 (the embedding) at B, T; returns how many started. */
static int busy_start(busy_ctl *c, pthread_t *th, int n, const gpt_config *cfg, int B, int T) {
    pthread_mutex_init(&c->mu, NULL);
    c->cfg = cfg;
    busy_set(c, 0, B, T);
    int k = 0;
    while (k < n && pthread_create(&th[k], NULL, busy_main, c) == 0) k++;
    return k;
}

static void busy_stop(busy_ctl *c, pthread_t *th, int n) {
    busy_set(c, -1, 0, 0);
    for (int i = 0; i < n; i++) pthread_join(th[i], NULL);
    pthread_mutex_destroy(&c->mu);
}

/* Seconds per parameter of the optimizer step as the runtime's STEP runs it on a rank's span:
 * the gradient norm's sum of squares, the AdamW update, the gradients zeroed. Median over repeats. */
static double profile_step(gpt_model *m, int repeats) {
    optim_config oc = optim_config_default();
    size_t n = m->n_held;
    float *mo = pt_falloc(n), *v = pt_falloc(n);
    double *t = pt_malloc(sizeof(double) * (size_t)repeats);
    for (int r = -1; r < repeats; r++) {   /* r = -1: warm-up */
        double t0 = pt_now();
        (void)optim_sumsq(m->grads, n);   /* another file's function: the call is kept */
        adamw_update(m->params, mo, v, m->grads, n, oc.lr, 1.0, true, r + 2, &oc);
        memset(m->grads, 0, n * sizeof(float));
        if (r >= 0) t[r] = (pt_now() - t0) / (double)n;
    }
    double sec = pt_median(t, repeats);
    free(mo); free(v); free(t);
    return sec;
}

int plan_profile_run(plan_costs *out, const gpt_config *cfg, const int *batch, int n_batch, int T, int repeats) {
    if (n_batch < 1 || n_batch > PLAN_MAX_BATCHES) return pt_seterr("profile: 1 to %d microbatch sizes", PLAN_MAX_BATCHES);
    if (repeats < 1) return pt_seterr("profile: --repeats must be >= 1 (got %d)", repeats);
    if (T < 1 || T > cfg->n_positions) return pt_seterr("profile: --seq %d must be in 1..%d (n_positions)", T, cfg->n_positions);
    for (int i = 0; i < n_batch; i++)
        if (batch[i] < 1) return pt_seterr("profile: --batch sizes must be >= 1 (got %d)", batch[i]);
    gpt_model m;
    gpt_config one = *cfg;
    one.n_layer = 1;   /* blocks are identical: the embedding, one block and the head are enough */
    one.n_insert = 0;  /* the built-in kinds only: the costs file has a row of each */
    memset(&m, 0, sizeof m);
    if (gpt_init(&m, &one) < 0) return -1;
    gpt_init_random(&m, 42);
    memset(out, 0, sizeof *out);
    out->cfg = *cfg; out->T = T; out->repeats = repeats; out->n_batch = n_batch;
    int threads = openblas_get_num_threads(), rc = 0;
    openblas_set_num_threads(1);   /* one device = one core; restored below */
    busy_ctl ctl;
    pthread_t th[MAX_CORES];
    int busy = busy_start(&ctl, th, busy_count(), &one, batch[0], T);
    for (int i = 0; i < n_batch && rc == 0; i++) {
        out->batch[i] = batch[i];
        for (int l = 0; l < gpt_num_layers(&m) && rc == 0; l++) {   /* one layer of each kind */
            busy_set(&ctl, l, batch[i], T);
            rc = profile_layer(&m, l, batch[i], T, repeats, out->sec[i][gpt_layer_kind_of(&m, l)]);
        }
    }
    busy_set(&ctl, gpt_config_block_layer(&one, 0), batch[0], T);   /* the step's neighbours: ranks still computing */
    if (rc == 0) out->step_per_param = profile_step(&m, repeats);
    busy_stop(&ctl, th, busy);
    out->busy_cores = busy;
    openblas_set_num_threads(threads);
    gpt_free(&m);
    return rc;
}
