/* Staleness corrections (async_fix.h): names, the Nesterov method's optimizer, PipeMare's
 * factors, extrapolation and the velocity estimate. */
#include "optim/async_fix.h"
#include "util/pt.h"
#include <math.h>
#include <stdio.h>
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
    if (!(c->given & OPTIM_GIVEN_KIND)) c->kind = OPTIM_NADAMW;
    if (!(c->given & OPTIM_GIVEN_BETA1)) c->beta1 = 0.99;
    if (!(c->given & OPTIM_GIVEN_BETA2)) c->beta2 = 0.999;
    if (!(c->given & OPTIM_GIVEN_MOMENTUM_DECAY)) c->momentum_decay = 4e-3;
}

async_fix async_fix_default(const char *schedule) {
    return schedule && !strcmp(schedule, "pipedream") ? ASYNC_FIX_NESTEROV : ASYNC_FIX_NONE;
}

const char *async_fix_describe(char *buf, size_t n, async_fix f, bool by_default, const optim_config *c) {
    const char *why = !by_default ? "" : f == ASYNC_FIX_NESTEROV
        ? " (pipedream's default; --async-fix none: plain weight stashing)" : " (the default)";
    bool nadam = c->kind != OPTIM_ADAMW;
    char md[48] = "";
    if (nadam) snprintf(md, sizeof md, ", momentum decay %g%s", c->momentum_decay,
                        c->given & OPTIM_GIVEN_MOMENTUM_DECAY ? " (given)" : "");
    snprintf(buf, n, "--async-fix %s%s: %s%s, beta1 %g%s, beta2 %g%s%s", async_fix_name(f), why,
             optim_kind_name(c->kind), c->given & OPTIM_GIVEN_KIND ? " (given)" : "", c->beta1,
             c->given & OPTIM_GIVEN_BETA1 ? " (given)" : "", c->beta2,
             c->given & OPTIM_GIVEN_BETA2 ? " (given)" : "", md);
    return buf;
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
