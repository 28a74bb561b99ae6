/* Staleness corrections for asynchronous pipelines (train --async-fix; docs/async.md,
 * "Corrections"): what each correction computes, on flat float spans. Not here: when they run
 * (the executor's asynchronous modes, src/run/exec_async.c) and the update rules themselves
 * (optim.h, nadam.h). Legend: n floats of one stage's weights, tau the stage's delay (optimizer
 * updates of the stage between a microbatch's forward and its backward), u the update number. */
#ifndef PT_OPTIM_ASYNC_FIX_H
#define PT_OPTIM_ASYNC_FIX_H
#include "optim/optim.h"
#include <stddef.h>

typedef enum {
    ASYNC_FIX_NONE,        /* the schedule's own rule: pipedream stashes, 2bw two versions */
    ASYNC_FIX_NESTEROV,    /* arXiv 2505.01099: stashing + NAdamW with beta1 0.99 */
    ASYNC_FIX_PIPEMARE,    /* arXiv 1910.05124: lr rescaled by delay, weights extrapolated for B */
    ASYNC_FIX_PREDICT      /* SpecTrain / XPipe: the forward on weights predicted tau steps on */
} async_fix;

/* "none" | "nesterov" | "pipemare" | "predict" -> *out; -1 with an error naming --async-fix. */
int async_fix_parse(const char *name, async_fix *out);
const char *async_fix_name(async_fix f);

/* The Nesterov method as AsyncPP runs it: the update rule becomes NAdamW (torch 2's NAdam with
 * decoupled weight decay) with beta1 0.99, beta2 0.999, momentum decay 4e-3; lr, its schedule
 * and the weight decay stay the caller's. A field the user gave (c->given: --optim, --beta1,
 * --beta2, --momentum-decay) keeps its value. Other fixes leave c as it is. */
void async_fix_optim(optim_config *c, async_fix f);

/* The correction a schedule gets when --async-fix is not given: nesterov for "pipedream" (it
 * closes pipedream's staleness gap: docs/async.md), none for every other schedule (2bw, a
 * schedule file, the synchronous ones). schedule may be NULL (none). */
async_fix async_fix_default(const char *schedule);

/* One line for a run's header into buf (n bytes): the correction, whether it was the default,
 * and the update rule it leaves (kind, betas, momentum decay; the ones the user gave marked),
 * e.g. "--async-fix nesterov (pipedream's default; --async-fix none: plain stashing): nadamw,
 * beta1 0.99, beta2 0.99 (given), momentum decay 0.004". Returns buf. */
const char *async_fix_describe(char *buf, size_t n, async_fix f, bool by_default, const optim_config *c);

/* PipeMare's learning-rate rescaling (T1): the factor on stage lr at update u,
 * tau^-(1 - min(u / warm, 1)) (1 for tau <= 1 or warm <= 0): 1/tau at the start, 1 after warm
 * updates. */
double async_fix_pipemare_lr(int tau, int u, int warm);
/* PipeMare's velocity decay for delay tau (T2): gamma = D^(1/tau) with D = 0.1, so a step
 * tau updates old weighs 0.1 in the estimate (0 for tau <= 0). */
double async_fix_pipemare_gamma(int tau);

/* dst[i] = w[i] + s * d[i]: weights extrapolated s steps along a step or velocity d (predict:
 * s = tau ahead along the last update; PipeMare T2: s = -tau back along the velocity). dst may
 * be w. */
void async_fix_extrapolate(float *dst, const float *w, const float *d, size_t n, double s);
/* After an update from w_old to w_new: vel <- gamma vel + (1 - gamma) (w_new - w_old) (gamma 0:
 * the last step itself, predict's d). */
void async_fix_velocity(float *vel, const float *w_new, const float *w_old, size_t n, double gamma);

#endif
