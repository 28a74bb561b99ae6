/* The single-process engine: each step is train_step (train.c) on the whole batch, on the
 * OpenBLAS threads the process has; checkpoints are one chunk. Not the pipelined executor: one
 * process never pays for a schedule, a plan or a timeline. */
#include "train/engine.h"
#include "util/killat.h"
#include "util/pt.h"
#include <cblas.h>
#include <stdlib.h>

typedef struct {
    train_engine base;
    gpt_model *m;          /* borrowed: trained in place */
    adamw_state *opt;      /* borrowed */
    int B, T, threads;
} single_engine;

/* train_step on the whole batch; the engine's own time is the step's (no bubble to measure). */
static int single_step(train_engine *e, const int *tokens, const int *targets,
                       const optim_config *oc, long t, train_step_stats *st) {
    single_engine *s = (single_engine *)e;
    double t0 = pt_now();
    pt_killat_point(0, t, PT_KILL_FORWARD);   /* --kill-at: the one rank's forward */
    if (train_step(s->m, s->opt, oc, (int)t, tokens, targets, s->B, s->T, &st->opt) < 0) return -1;
    st->iter_time = pt_now() - t0;
    st->bubble = -1;
    st->act_bytes = 0;
    return 0;
}

/* One file with every layer; AdamW's step count is the optimizer's own. */
static int single_save(train_engine *e, const char *dir, const ckpt_manifest *man) {
    single_engine *s = (single_engine *)e;
    ckpt_manifest full = *man;
    full.adam_t = s->opt->t;
    return ckpt_save(dir, s->m, s->opt, &full, 1);
}

/* One stage, one replica, on the process's OpenBLAS threads. */
static cJSON *single_layout(const train_engine *e) {
    const single_engine *s = (const single_engine *)e;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "engine", "single process");
    cJSON_AddNumberToObject(o, "stages", 1);
    cJSON_AddNumberToObject(o, "dp", 1);
    cJSON_AddNumberToObject(o, "tp", 1);
    cJSON_AddNumberToObject(o, "threads", s->threads > 0 ? s->threads : openblas_get_num_threads());
    return o;
}

/* The engine only: the model and moments are the caller's. */
static void single_free(train_engine *e) { free(e); }

static const train_engine_vt single_vt = {
    .name = "single", .step = single_step, .save = single_save, .layout = single_layout,
    .free = single_free,
};

int train_engine_single_init(train_engine **out, gpt_model *m, adamw_state *opt, int B, int T,
                             int threads) {
    single_engine *s = pt_calloc(1, sizeof *s);
    s->base.vt = &single_vt;
    s->base.root = 1;
    s->m = m;
    s->opt = opt;
    s->B = B;
    s->T = T;
    s->threads = threads;
    *out = &s->base;
    return 0;
}
