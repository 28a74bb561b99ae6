/* The optimizer side of training: learning-rate schedule, global-norm gradient clipping and AdamW,
 * with torch.optim.AdamW / torch.nn.utils.clip_grad_norm_ semantics. Works on flat float buffers
 * and spans of them, so a pipeline stage can update just its own parameters. Knows nothing of the
 * model beyond "this span decays, that one does not". */
#ifndef PT_TRAIN_OPTIM_H
#define PT_TRAIN_OPTIM_H
#include <stdbool.h>
#include <stddef.h>

typedef enum { LR_CONSTANT, LR_COSINE } lr_schedule;
/* --optim: the update rule (optim/nadam.h for NAdam). Both keep moments m, v and a step count. */
/* OPTIM_NADAMW: torch >= 2.0's NAdam(decoupled_weight_decay=True) (nadam.h), the optimizer of the
 * Nesterov method for asynchronous pipelines (optim/async_fix.h). */
typedef enum { OPTIM_ADAMW, OPTIM_NADAM, OPTIM_NADAMW } optim_kind;

typedef struct {
    double lr;            /* peak learning rate */
    double lr_min;        /* cosine floor */
    int warmup;           /* linear warm-up steps (0: none) */
    int total_steps;      /* K, the cosine's length */
    lr_schedule schedule;
    double beta1, beta2, eps, weight_decay;
    double grad_clip;     /* max global L2 norm; <= 0 disables clipping */
    optim_kind kind;      /* AdamW (decoupled decay), NAdam (L2 decay, torch 1.13) or NAdamW */
    double momentum_decay;   /* NAdam's psi (torch's default 4e-3); unused by AdamW */
    unsigned given;       /* OPTIM_GIVEN_* bits: the fields the user set explicitly (a default
                           * that a correction brings, async_fix_optim, leaves them as given) */
} optim_config;

/* optim_config.given: which of --optim, --beta1, --beta2, --momentum-decay the user gave. */
enum { OPTIM_GIVEN_KIND = 1u, OPTIM_GIVEN_BETA1 = 2u, OPTIM_GIVEN_BETA2 = 4u, OPTIM_GIVEN_MOMENTUM_DECAY = 8u };

/* Defaults: lr 3e-4, lr_min lr/10, no warm-up, constant, betas (0.9, 0.95), eps 1e-8,
 * weight decay 0.1, clip 1.0, AdamW (NAdam's momentum decay 4e-3). */
optim_config optim_config_default(void);
/* "adamw" | "nadam" | "nadamw" -> kind; -1 with an error naming --optim otherwise. */
int optim_kind_parse(const char *name, optim_kind *out);
const char *optim_kind_name(optim_kind k);
/* Checks ranges; error names the flag ("--beta1 must be in [0, 1), got 1.5"). */
int optim_config_validate(const optim_config *c);

/* Learning rate for step t (1-based) of c->total_steps: linear warm-up lr*t/warmup for t <= warmup,
 * then constant lr, or cosine from lr to lr_min over the remaining steps. */
double optim_lr_at(const optim_config *c, int t);

/* Sum of squares of g[0..n) in double (for a global norm: add the partial sums of all spans,
 * stages and replicas, then sqrt). */
double optim_sumsq(const float *g, size_t n);
/* clip_grad_norm_'s factor: max_norm / (norm + 1e-6) when that is below 1, else 1 (also 1 when
 * clipping is off). Multiply every gradient by it. */
double optim_clip_scale(double norm, double max_norm);

/* AdamW state for n parameters: first and second moments, step count. */
typedef struct {
    size_t n;
    float *m;   /* (n) */
    float *v;   /* (n) */
    int t;      /* updates done so far */
} adamw_state;

void adamw_init(adamw_state *s, size_t n);
void adamw_free(adamw_state *s);
/* One AdamW update of params[off, off+count) with grads at the same offsets, scaled by
 * grad_scale first (the clipping factor). `t` is the 1-based step (for bias correction), `decay`
 * whether weight decay applies to this span. Exactly torch.optim.AdamW's single-tensor update. */
void adamw_update_span(adamw_state *s, float *params, const float *grads, size_t off, size_t count,
                       double lr, double grad_scale, bool decay, int t, const optim_config *c);
/* The same update on n parameters p with gradients g and moments m, v wherever they live (a
 * shard of the moments: ZeRO), element by element: the numbers do not depend on how a buffer
 * is cut into calls. */
void adamw_update(float *p, float *m, float *v, const float *g, size_t n, double lr,
                  double grad_scale, bool decay, int t, const optim_config *c);
/* Both of the above apply c->kind's rule: with OPTIM_NADAM they are nadam_update, with
 * OPTIM_NADAMW nadamw_update (so every
 * caller -- one process, pipeline stages, ZeRO shards -- gets NAdam from --optim alone). */

#endif
