/* The outer step of DiLoCo (Douillard et al., arXiv 2311.08105, --dp-sync H): replicas that take
 * H inner optimizer steps each on their own data, then average their parameter change and move
 * the shared starting point by Nesterov momentum SGD on it, exactly torch.optim.SGD(momentum=mu,
 * nesterov=True, dampening=0, weight_decay=0) with the averaged change as the gradient:
 *   g     = (sum over replicas of (theta_start - theta_d)) / D      the outer gradient
 *   buf  <- mu * buf + g                                            (buf starts at 0: g first)
 *   theta_start <- theta_start - lr_o * (g + mu * buf)
 * On flat float spans, in float32 in torch's operation order. Not here: who sums the changes
 * (run/exec_outer.c, one all-reduce per sync), when it runs. */
#ifndef PT_OPTIM_OUTER_H
#define PT_OPTIM_OUTER_H
#include <stddef.h>

/* DiLoCo's defaults (the paper's outer optimizer: Nesterov, lr 0.7, momentum 0.9). */
#define OUTER_LR_DEFAULT 0.7
#define OUTER_MOMENTUM_DEFAULT 0.9

/* Ranges of the flags: H >= 0 (0 and 1: every step, plain data parallelism), outer lr > 0,
 * momentum in [0, 1). -1 naming the flag otherwise. */
int outer_config_validate(int h, double lr, double momentum);

/* delta[i] = start[i] - theta[i]: a replica's outer gradient before averaging. */
void outer_delta(float *delta, const float *start, const float *theta, size_t n);

/* One outer step on n floats: sum holds the replicas' changes summed (D of them); start and
 * buf are updated in place by the formula above. */
void outer_nesterov(float *start, float *buf, const float *sum, size_t n, int replicas, double lr,
                    double momentum);

#endif
