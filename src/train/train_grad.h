/* One batch's loss and every parameter gradient, written as safetensors with the input's tensor
 * names plus a scalar "loss" (what `pipetrain grad` writes: how anyone checks our numerics
 * against theirs), in one process or through the pipelined runtime (threads or MPI: the same
 * mean loss split into microbatches; each rank reads only its layers, the root gathers the
 * whole gradient). Not here: the flags (cli/cli_grad.c), training (trainer.h). */
#ifndef PT_TRAIN_TRAIN_GRAD_H
#define PT_TRAIN_TRAIN_GRAD_H
#include "comm/comm.h"
#include "run/run.h"

typedef struct {
    const char *config;     /* model config JSON (required) */
    const char *init;       /* weights (safetensors, HF names), or NULL: the seeded GPT-2 init */
    long seed;
    const char *tokens;     /* token file or raw text: batch 0 is used */
    int batch, seq;         /* B, T (> 0) */
    const char *out;        /* the safetensors written */
    run_opts ro;            /* ro.P == 0: one process; else the pipelined job's layout */
} train_grad_opts;

typedef struct {
    float loss;
    int n_grads;            /* tensors written */
    int wrote;              /* 1 on the rank that wrote out (one process, or the job's root) */
    /* the pipelined job's layout (ro.P > 0) */
    char schedule[32];
    int P, D, tp, n_mb;
} train_grad_result;

/* Loss and gradients of batch 0 of o->tokens under the model of o->config (and o->init), into
 * o->out; world: the MPI endpoint of a pipelined run, or NULL. A non-finite loss writes nothing
 * and is an error. 0, or -1 naming the flag, file or rank. */
int train_grad(const train_grad_opts *o, comm *world, train_grad_result *res);

#endif
