/* Held-out evaluation as a side task (task_eval.c): the trainer's handle on it. One task per world
 * rank is added to the harvester (owned by it); the shared state (the snapshot of the weights,
 * the pass) is this handle's, freed after the harvester. Main thread only, between steps. */
#ifndef PT_HARVEST_TASK_EVAL_H
#define PT_HARVEST_TASK_EVAL_H
#include "harvest/eval.h"
#include "harvest/harvest.h"
#include "model/config.h"

typedef struct harvest_eval harvest_eval;

typedef struct {
    const char *path;             /* --eval-data */
    int every, batches;           /* --eval-every K (>= 1), --eval-batches N (<= 0: the whole file) */
    const gpt_config *cfg;        /* the model's */
    int B, T;                     /* the run's batch and sequence */
    int R;                        /* world ranks (one task each) */
    const char *tokenizer;        /* NULL, or train --tokenizer: path is text tokenised by it */
} harvest_eval_opts;

/* Opens and checks the data (tokens in the vocabulary, enough for a batch), allocates the
 * snapshot, adds the tasks to h. -1 naming --eval-data (or --eval-every) and the file. */
int harvest_eval_create(harvest_eval **out, harvest *h, const harvest_eval_opts *o);
/* The whole model to copy step K's weights into before harvest_eval_begin. */
gpt_model *harvest_eval_weights(harvest_eval *ev);
int harvest_eval_every(const harvest_eval *ev);
int harvest_eval_batches(const harvest_eval *ev);
/* A pass over the weights as they are now, for step `step` (after any earlier pass completed). */
void harvest_eval_begin(harvest_eval *ev, long step);
/* A pass begun and not complete. */
int harvest_eval_busy(const harvest_eval *ev);
/* 1 with the step and loss of a complete pass not taken before; else 0. */
int harvest_eval_take(harvest_eval *ev, long *step, double *loss);
/* Computes what is left of the pass on this thread (the ranks' half-done units first). */
int harvest_eval_finish(harvest_eval *ev);
void harvest_eval_free(harvest_eval *ev);

#endif
