/* DiLoCo's outer Nesterov step on flat spans (optim/outer.h). Float32 throughout, in the order of
 * torch 1.13's single-tensor SGD: buf.mul_(mu).add_(g); d = g.add(buf, alpha=mu);
 * p.add_(d, alpha=-lr); the mean as torch's sum / D. */
#include "optim/outer.h"
#include "util/pt.h"
#include <math.h>

int outer_config_validate(int h, double lr, double momentum) {
    if (h < 0) return pt_seterr("--dp-sync %d: give H >= 1 (replicas average their change every H steps; 1: every step)", h);
    if (!(lr > 0) || !isfinite(lr)) return pt_seterr("--outer-lr must be a positive number, got %g", lr);
    if (!(momentum >= 0 && momentum < 1)) return pt_seterr("--outer-momentum must be in [0, 1), got %g", momentum);
    return 0;
}

void outer_delta(float *delta, const float *start, const float *theta, size_t n) {
    for (size_t i = 0; i < n; i++) delta[i] = start[i] - theta[i];
}

void outer_nesterov(float *start, float *buf, const float *sum, size_t n, int replicas, double lr,
                    double momentum) {
    const float mu = (float)momentum, neg_lr = (float)-lr, d = (float)replicas;
    for (size_t i = 0; i < n; i++) {
        float g = sum[i] / d;
        float b = buf[i] * mu + g;
        buf[i] = b;
        start[i] = start[i] + (g + b * mu) * neg_lr;
    }
}
