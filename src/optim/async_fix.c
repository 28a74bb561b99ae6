/* Staleness corrections (async_fix.h): names, the Nesterov method's optimizer, PipeMare's
 * factors, extrapolation and the velocity estimate. */
#include "optim/async_fix.h"
#include "util/pt.h"
#include <math.h>
#include <string.h>

static const char *const FIX_NAMES[] = { "none", "nesterov", "pipemare", "predict" };

int async_fix_parse(const char *name, async_fix *out) {
    for (int i = 0; i < 4; i++)
        if (!strcmp(name, FIX_NAMES[i])) { *out = (async_fix)i; return 0; }
    return pt_seterr("--async-fix must be none, nesterov, pipemare or predict, got '%s'", name);
}

const char *async_fix_name(async_fix f) { return f >= 0 && f < 4 ? FIX_NAMES[f] : "?"; }

void async_fix_optim(optim_config *c, async_fix f) {
    if (f != ASYNC_FIX_NESTEROV) return;
    c->kind = OPTIM_NADAMW;
    c->beta1 = 0.99;
    c->beta2 = 0.999;
    c->momentum_decay = 4e-3;
}

double async_fix_pipemare_lr(int tau, int u, int warm) {
    if (tau <= 1 || warm <= 0) return 1.0;
    double p = 1.0 - fmin((double)u / warm, 1.0);
    return pow((double)tau, -p);
}

double async_fix_pipemare_gamma(int tau) { return tau > 0 ? pow(0.1, 1.0 / tau) : 0.0; }

void async_fix_extrapolate(float *dst, const float *w, const float *d, size_t n, double s) {
    const float k = (float)s;
    for (size_t i = 0; i < n; i++) dst[i] = w[i] + k * d[i];
}

void async_fix_velocity(float *vel, const float *w_new, const float *w_old, size_t n, double gamma) {
    const float a = (float)gamma, b = (float)(1.0 - gamma);
    for (size_t i = 0; i < n; i++) vel[i] = a * vel[i] + b * (w_new[i] - w_old[i]);
}
