/* Where a pipelined job's parameters and AdamW moments start: a whole model in memory, a weights
 * file or the seeded GPT-2 init, a checkpoint, or requests kept for later (a job moved from
 * another job's ranks: run_job_resplit). Each rank reads only what it holds: its stages'
 * layers (fill) and any slice of a tensor (read: a tied copy, a shard of the moments), so no rank
 * ever needs the whole model. Reads may run on several rank threads at once.
 * Not here: what a rank holds (the executor decides), writing checkpoints (ckpt/). */
#ifndef PT_RUN_SOURCE_H
#define PT_RUN_SOURCE_H
#include "ckpt/checkpoint.h"
#include "model/gpt.h"
#include "optim/optim.h"

typedef struct run_source run_source;

/* A read a deferred source (run_source_defer) kept instead of doing: n floats of tensor `param`
 * from element `start` (indices of the requesting model's TP shard), into w (parameters) or
 * into m and v (AdamW moments). The pointers are the job's own buffers. */
typedef struct {
    int param, moments;
    size_t start, n;
    float *w, *m, *v;
} run_source_req;
typedef struct { run_source_req *v; int n, cap; } run_source_reqs;

struct run_source {
    /* The parameters of every layer m holds (m: a model, whole or partial, of the source's
     * config). 0, or -1 naming the file and tensor. */
    int (*fill)(const run_source *s, gpt_model *m);
    /* Elements [start, start + n) of tensor `param` (m's table: any model of the config): its
     * parameters into w and its AdamW moments into mm, vv (each may be NULL; moments are zeros
     * when the source has none). 0, or -1 naming the file and tensor. */
    int (*read)(const run_source *s, const gpt_model *m, int param, size_t start, size_t n,
                float *w, float *mm, float *vv);
    gpt_config cfg;             /* the model's config */
    int has_moments;            /* the source holds AdamW moments */
    /* the source's own data (one of them) */
    const gpt_model *model;     /* run_source_model: a whole model */
    const adamw_state *opt;     /* its moments, or NULL */
    const char *init;           /* run_source_init: a weights file, or NULL: seeded */
    uint64_t seed;
    ckpt_reader *ckpt;          /* run_source_checkpoint: owned */
    const char *ckpt_dir;       /* run_source_checkpoint: its folder (borrowed), for the ranks'
                                 * own state files (ckpt/ckpt_state.h), n_states of them */
    int n_states;
    run_source_reqs *reqs;      /* run_source_defer: where the reads go (not owned) */
};

/* A whole model (and its moments, laid out like its params; NULL: zeros), borrowed. */
void run_source_model(run_source *s, const gpt_model *m, const adamw_state *opt);
/* The weights file init (safetensors, Hugging Face names), or the seeded GPT-2 init when init
 * is NULL (gpt_init_random: every layer gets the value the whole model would have). No moments.
 * The file is opened when read; its errors name it then. */
void run_source_init(run_source *s, const gpt_config *cfg, const char *init, uint64_t seed);
/* The checkpoint dir (its manifest read and checked by ckpt_read_manifest): weights and moments,
 * whatever layout it was saved under. -1 naming a file that cannot be opened. */
int run_source_checkpoint(run_source *s, const char *dir, const ckpt_manifest *man);
/* Reads that only record themselves into reqs (appended; the caller frees reqs->v), leaving
 * the buffers as allocated, to be filled by whoever holds the values (run/move.h). Has moments.
 * One rank's: fill and read are not safe from several threads at once. */
void run_source_defer(run_source *s, const gpt_config *cfg, run_source_reqs *reqs);
void run_source_free(run_source *s);

#endif
