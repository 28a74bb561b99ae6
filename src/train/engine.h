/* The step interface the trainer's loop runs over: one small vtable, one file per way of
 * computing an optimizer step: engine_single.c (one process: train_step on the whole batch, on
 * as many OpenBLAS threads as set) and engine_pipe.c (the pipelined job of run/run.h: P stages x
 * D replicas as threads of this process or as MPI ranks). Not here: the loop, data, hooks and
 * checkpoint policy (trainer.h), the math of a step (train.h, run/).
 *
 * Legend: B sequences per step, T tokens per sequence. */
#ifndef PT_TRAIN_ENGINE_H
#define PT_TRAIN_ENGINE_H
#include "ckpt/checkpoint.h"
#include "comm/comm.h"
#include "model/gpt.h"
#include "optim/optim.h"
#include "run/run.h"
#include "train/train.h"
#include <cjson/cJSON.h>
#include <stddef.h>

/* What one step did; the same on every rank. */
typedef struct {
    train_stats opt;    /* loss (before the update), global grad norm, lr, clip scale */
    double step_time;   /* seconds the engine's step call took, measured by the trainer's loop */
    double iter_time;   /* seconds the engine measured for the iteration (pipelined: the first
                         * rank's start to the last rank's end) */
    double bubble;      /* measured bubble fraction (run_stats.bubble); -1: not measured */
    size_t act_bytes;   /* activation storage of the busiest rank, bytes; 0: not measured */
    char schedule[32];  /* pipelined: the schedule that ran the step ("" elsewhere) */
    char split[64];     /* pipelined: transformer blocks per chunk, "2,2" ("" elsewhere) */
    float win_loss[RUN_MAX_WINDOW];   /* --async-window W > 1: each step's loss of the pass */
} train_step_stats;

typedef struct train_engine train_engine;

typedef struct {
    const char *name;   /* "single", "pipelined" */
    /* Optimizer step t (1-based) on tokens, targets (B,T) (every rank passes the whole batch):
     * gradients, clipping, AdamW with oc's LR schedule. Fills st except step_time. Returns 0, or
     * -1 with the error set (the model may be left half-updated: stop the run). Collective under
     * MPI. */
    int (*step)(train_engine *e, const int *tokens, const int *targets, const optim_config *oc,
                long t, train_step_stats *st);
    /* Writes the checkpoint folder dir (ckpt/checkpoint.h): man gives the config, step, data
     * position and seeds; the engine adds AdamW's step count and the layout. Collective under
     * MPI; returns 0, or -1 naming the file (an older checkpoint is never touched). */
    int (*save)(train_engine *e, const char *dir, const ckpt_manifest *man);
    /* Root, before the first step: the engine's line of the run's header, on stdout. NULL:
     * nothing to say. */
    void (*describe)(const train_engine *e);
    /* Root, after the last step: what the engine measured over the run (and its pictures).
     * Called at most once, last. NULL: nothing. Returns 0, or -1 naming the file it could not
     * write. */
    int (*report)(train_engine *e);
    /* The layout as JSON for the run report ({"engine","stages","dp","tp","schedule",
     * "microbatches","split",...}); a new object the caller frees. NULL: not given. */
    cJSON *(*layout)(const train_engine *e);
    /* After report: what it measured as JSON ({"measured_ms","simulated_ms","bubble",
     * "simulated_bubble","svg"}); a new object the caller frees. NULL: nothing measured. */
    cJSON *(*summary)(const train_engine *e);
    /* For an ADAPT hook (trainer.h); NULL in an engine that cannot change its plan. timeline: the
     * last step's events of every rank, merged, on every rank (when started with adapt on);
     * schedule: the one in force; replan: another schedule of the same shape from the next step
     * on, parameters and optimizer state kept (run_job_replan: collective under MPI, 0 or -1). */
    const timeline *(*timeline)(train_engine *e);
    const sched *(*schedule)(const train_engine *e);
    int (*replan)(train_engine *e, const sched *s);
    /* Another layer split (blocks per chunk, split[n]) from the next step on, with the schedule
     * in force: parameters and AdamW moments move to the stages that hold their layers now.
     * Collective under MPI. 0, or -1 with the error: the engine may then be unusable (stop the
     * run). */
    int (*resplit)(train_engine *e, const int *split, int n);
    void (*free)(train_engine *e);
    /* The pipelined job and its plan (for side work in its bubbles: src/harvest). NULL: the
     * engine has no job (one process). */
    run_job *(*job)(train_engine *e);
    const run_plan *(*plan)(const train_engine *e);
} train_engine_vt;

struct train_engine {
    const train_engine_vt *vt;
    int root;           /* 1 on the rank that prints and writes files (threads: always) */
};

/* Convenience wrappers (same contracts as the vtable); free and report take NULL. */
static inline int train_engine_step(train_engine *e, const int *tokens, const int *targets,
                                    const optim_config *oc, long t, train_step_stats *st) {
    return e->vt->step(e, tokens, targets, oc, t, st);
}
static inline int train_engine_save(train_engine *e, const char *dir, const ckpt_manifest *man) {
    return e->vt->save(e, dir, man);
}
static inline void train_engine_describe(const train_engine *e) { if (e->vt->describe) e->vt->describe(e); }
static inline int train_engine_report(train_engine *e) { return e && e->vt->report ? e->vt->report(e) : 0; }
static inline cJSON *train_engine_layout(const train_engine *e) { return e->vt->layout ? e->vt->layout(e) : NULL; }
static inline cJSON *train_engine_summary(const train_engine *e) { return e->vt->summary ? e->vt->summary(e) : NULL; }
static inline void train_engine_free(train_engine *e) { if (e) e->vt->free(e); }
static inline run_job *train_engine_job(train_engine *e) { return e->vt->job ? e->vt->job(e) : NULL; }
static inline const run_plan *train_engine_plan(const train_engine *e) { return e->vt->plan ? e->vt->plan(e) : NULL; }

/* One process: steps m and opt in place with train_step on the whole (B,T) batch. Borrows m and
 * opt (they must outlive the engine). threads: OpenBLAS threads (for the layout). Never fails;
 * returns 0. */
int train_engine_single_init(train_engine **out, gpt_model *m, adamw_state *opt, int B, int T,
                             int threads);

/* What the pipelined engine needs besides the model. */
typedef struct {
    run_opts ro;            /* the layout (ro.P >= 1); ro.split is read during init only */
    comm *world;            /* this process's MPI endpoint (borrowed), or NULL: threads */
    int threads;            /* MPI: OpenBLAS threads per process after the job starts (0: 1) */
    const char *trace;      /* report: the last step's measured Chrome trace here, or NULL */
    const char *svg;        /* report: the last step's measured timeline picture, or NULL */
    long last_step;         /* the run's last step: a fault window starting after it is an error
                             * (0: not checked) */
    bool adapt;             /* share each step's timeline with every rank (the ADAPT hook reads it) */
} train_pipe_opts;

/* The pipelined job (run_plan_init + run_job_init_src) over the starting parameters and AdamW
 * moments of src (each rank reads its share during this call), for (B,T) batches. Collective
 * under MPI. Returns 0, or -1 naming the flag, file or rank at fault (nothing left allocated). */
int train_engine_pipe_init(train_engine **out, const train_pipe_opts *o, const run_source *src,
                           int B, int T);

#endif
