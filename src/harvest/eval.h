/* Held-out evaluation of a whole model: the mean cross-entropy over N batches of (B,T) tokens of
 * a data file, computed one layer of one sequence at a time so that a piece fits in a bubble.
 * Batch k's rows are the sequences k*B .. k*B+B-1 of T tokens (data_batch with B = 1: the rows
 * data_batch(k, B, T) reads). Each sequence (a unit) is claimed by one worker, its loss kept in
 * its slot, and the mean taken over the slots in order: `pipetrain eval` (one worker) and
 * train --eval-data (a worker per rank, in bubbles) do the same arithmetic and agree bitwise.
 * Not here: when it runs (task_eval.c), the weights' source (the trainer).
 *
 * Legend: N batches, B sequences per batch, T tokens per sequence, C channels, L blocks. */
#ifndef PT_HARVEST_EVAL_H
#define PT_HARVEST_EVAL_H
#include "io/data.h"
#include "model/gpt.h"
#include <stdatomic.h>

typedef struct eval_set eval_set;

/* Opens path (data_open: every token checked against vocab) for N batches of (B,T); batches <= 0:
 * every whole batch in the file (at least one). Errors start with flag ("--eval-data") and name
 * the file. */
int eval_set_open(eval_set **out, const char *path, int vocab, int B, int T, int batches,
                  const char *flag);
/* The same over a data set already open (tok_data_open: text through a tokenizer); takes d, and
 * closes it on failure too. */
int eval_set_from(eval_set **out, data_set *d, int B, int T, int batches, const char *flag);
void eval_set_close(eval_set *s);
int eval_set_batches(const eval_set *s);
int eval_set_units(const eval_set *s);        /* N*B sequences */

/* One pass over a set with one model's weights: units claimed in order by any number of workers
 * (threads), losses in slots. */
typedef struct {
    const eval_set *set;
    const gpt_model *m;       /* the weights (a whole model), borrowed, read only */
    atomic_int next;          /* next unit to claim */
    atomic_int done;          /* units finished */
    float *loss;              /* [N*B] each unit's mean loss over its T positions */
    int n;                    /* N*B */
} eval_pass;

void eval_pass_init(eval_pass *p, const eval_set *s);
/* A new pass over m (no worker may hold a unit of the last one: begin after it completed). */
void eval_pass_begin(eval_pass *p, const gpt_model *m);
int eval_pass_complete(const eval_pass *p);
/* The mean of the units' losses, in unit order (double); the pass must be complete. */
double eval_pass_loss(const eval_pass *p);
void eval_pass_free(eval_pass *p);

/* A thread's share: buffers for one sequence and the unit in hand. */
typedef struct eval_worker eval_worker;
/* Buffers for a model of m's config (its tables; any model of that config) at length T. */
void eval_worker_create(eval_worker **out, const gpt_model *m, int T);
/* One piece: the next layer of the unit in hand, claiming a unit of p when it holds none.
 * 1 did work, 0 nothing left to claim, -1 error (a bad token: cannot happen after the set's
 * checks). */
int eval_worker_step(eval_worker *w, eval_pass *p);
/* The kind of the next piece (gpt_layer_kind: embedding, block, head). */
int eval_worker_next_kind(const eval_worker *w);
/* Bytes of its buffers. */
double eval_worker_bytes(const eval_worker *w);
void eval_worker_free(eval_worker *w);

/* The whole evaluation of m over s on this thread (`pipetrain eval`): *loss. -1 with the error. */
int eval_model(const gpt_model *m, const eval_set *s, double *loss);

#endif
