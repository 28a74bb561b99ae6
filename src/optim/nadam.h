/* NAdam (Dozat 2016, "Incorporating Nesterov Momentum into Adam") exactly as the installed
 * torch 1.13's torch.optim.NAdam computes it, on flat float buffers like AdamW:
 *   g  <- g * grad_scale + weight_decay * p          (L2 on the gradient: torch 1.13 has no
 *                                                      decoupled variant; only decaying spans)
 *   mu_t = beta1 (1 - 0.5 * 0.96^(t * momentum_decay)),   mu_{t+1} likewise
 *   P_t  = P_{t-1} * mu_t (float32, P_0 = 1)          the "mu product"
 *   m <- beta1 m + (1 - beta1) g;   v <- beta2 v + (1 - beta2) g^2
 *   d  = sqrt(v / (1 - beta2^t)) + eps
 *   p <- p - lr (1 - mu_t) / (1 - P_t) * g / d - lr mu_{t+1} / (1 - P_t mu_t mu_{t+1}) * m / d
 * The last denominator is torch 1.13's own (mu_t counted twice; later torch has P_t mu_{t+1}).
 * The mu product depends on beta1, momentum_decay and t only, so the state is m, v (AdamW's
 * buffers) and the step count; checkpoints carry the product to check it on resume. */
#ifndef PT_OPTIM_NADAM_H
#define PT_OPTIM_NADAM_H
#include "optim/optim.h"

/* P_t after t >= 0 steps, multiplied in float32 in step order as torch's state tensor is.
 * Cached per thread: consecutive t cost one multiplication. */
double nadam_mu_product(double beta1, double momentum_decay, int t);
/* One NAdam update of n parameters (t the 1-based step): the formula above, in float32 with the
 * scalar factors in double, as torch's single-tensor path. */
void nadam_update(float *p, float *m, float *v, const float *g, size_t n, double lr,
                  double grad_scale, bool decay, int t, const optim_config *c);

/* NAdamW: torch >= 2.0's NAdam with decoupled_weight_decay=True (what PluralisResearch/AsyncPP
 * runs for the Nesterov method of arXiv 2505.01099), on the same buffers:
 *   p <- p (1 - lr weight_decay)                      (decoupled, only decaying spans)
 *   m, v, d, mu_t, mu_{t+1}, P_t as above, with g the unmodified gradient
 *   p <- p - lr (1 - mu_t) / (1 - P_t) * g / d - lr mu_{t+1} / (1 - P_t mu_{t+1}) * m / d
 * (torch 2's denominator; the installed torch 1.13 has no such variant: tests/test_async_fix.c
 * checks it against the formula evaluated in double.) */
void nadamw_update(float *p, float *m, float *v, const float *g, size_t n, double lr,
                   double grad_scale, bool decay, int t, const optim_config *c);

#endif
