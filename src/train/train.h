/* One optimizer step of single-process training: gradients of a batch, global-norm clipping,
 * AdamW with the LR schedule, decay only where the parameter table says so. The pipelined
 * engine reuses the same pieces per stage. Not here: the loop, data, logging, checkpoints
 * (trainer.h). */
#ifndef PT_TRAIN_TRAIN_H
#define PT_TRAIN_TRAIN_H
#include "model/gpt.h"
#include "optim/optim.h"
#include "run/run.h"
#include <stddef.h>

typedef struct {
    float loss;         /* mean cross-entropy of the batch, before the update */
    double grad_norm;   /* global L2 norm before clipping */
    double lr;          /* learning rate used */
    double clip_scale;  /* factor the gradients were multiplied by (1: no clipping) */
} train_stats;

/* Applies AdamW step t (1-based) to every parameter of m from m->grads, scaled by grad_scale. */
void train_apply_adamw(gpt_model *m, adamw_state *opt, const optim_config *oc, int t, double lr,
                       double grad_scale);
/* Zeroes grads, runs forward+backward on (inputs, targets) (B,T), clips, updates with AdamW step
 * t. Returns 0, or -1 (bad token, T too long) with the model unchanged. */
int train_step(gpt_model *m, adamw_state *opt, const optim_config *oc, int t, const int *inputs,
               const int *targets, int B, int T, train_stats *st);

/* The layout for a run that gave no layout flag (train_layout.c): data parallelism over threads
 * (ro: P 1, D = the largest divisor of batch in [2, cores], M 1, 1f1b) when the machine has more
 * than one core, some such D exists and D replicas' state plus the batch's activations fit in
 * half of mem_bytes (<= 0: unknown, not checked); else one process (ro->P = 0) on every core's
 * OpenBLAS thread. One line saying what and why goes into why (n bytes). Pure. */
void train_layout_choose(run_opts *ro, const gpt_model *m, int batch, int seq, int cores,
                         double mem_bytes, char *why, size_t n);

#endif
