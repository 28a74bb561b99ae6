/* LR schedule, clipping and AdamW. Arithmetic follows torch 1.13's single-tensor AdamW in float32
 * (bias corrections and step size computed in double, as Python floats are). */
#include "optim/optim.h"
#include "optim/nadam.h"
#include "util/pt.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

optim_config optim_config_default(void) {
    return (optim_config){.lr = 3e-4, .lr_min = 3e-5, .warmup = 0, .total_steps = 1,
                          .schedule = LR_CONSTANT, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                          .weight_decay = 0.1, .grad_clip = 1.0, .kind = OPTIM_ADAMW,
                          .momentum_decay = 4e-3};
}

int optim_kind_parse(const char *name, optim_kind *out) {
    if (!strcmp(name, "adamw")) *out = OPTIM_ADAMW;
    else if (!strcmp(name, "nadam")) *out = OPTIM_NADAM;
    else if (!strcmp(name, "nadamw")) *out = OPTIM_NADAMW;
    else return pt_seterr("--optim must be adamw or nadam or nadamw, got '%s'", name);
    return 0;
}

const char *optim_kind_name(optim_kind k) {
    return k == OPTIM_NADAM ? "nadam" : k == OPTIM_NADAMW ? "nadamw" : "adamw";
}

int optim_config_validate(const optim_config *c) {
    if (!(c->lr > 0) || !isfinite(c->lr)) return pt_seterr("--lr must be a positive number, got %g", c->lr);
    if (!(c->lr_min >= 0) || c->lr_min > c->lr)
        return pt_seterr("--lr-min must be in [0, lr=%g], got %g", c->lr, c->lr_min);
    if (!(c->beta1 >= 0 && c->beta1 < 1)) return pt_seterr("--beta1 must be in [0, 1), got %g", c->beta1);
    if (!(c->beta2 >= 0 && c->beta2 < 1)) return pt_seterr("--beta2 must be in [0, 1), got %g", c->beta2);
    if (!(c->eps > 0)) return pt_seterr("--eps must be positive, got %g", c->eps);
    if (!(c->weight_decay >= 0)) return pt_seterr("--weight-decay must be >= 0, got %g", c->weight_decay);
    if (c->warmup < 0) return pt_seterr("--warmup must be >= 0, got %d", c->warmup);
    if (!(c->grad_clip >= 0)) return pt_seterr("--grad-clip must be >= 0 (0 turns clipping off), got %g", c->grad_clip);
    if (c->kind != OPTIM_ADAMW && c->kind != OPTIM_NADAM && c->kind != OPTIM_NADAMW) return pt_seterr("--optim: unknown kind %d", (int)c->kind);
    if (!(c->momentum_decay >= 0) || !isfinite(c->momentum_decay))
        return pt_seterr("--momentum-decay must be >= 0, got %g", c->momentum_decay);
    if (c->total_steps < 1) return pt_seterr("--steps must be >= 1, got %d", c->total_steps);
    return 0;
}

double optim_lr_at(const optim_config *c, int t) {
    if (c->warmup > 0 && t <= c->warmup) return c->lr * t / c->warmup;
    if (c->schedule == LR_CONSTANT) return c->lr;
    int span = c->total_steps - c->warmup;
    double progress = (double)(t - c->warmup) / (span > 1 ? span : 1);
    if (progress > 1) progress = 1;
    return c->lr_min + 0.5 * (c->lr - c->lr_min) * (1 + cos(M_PI * progress));
}

double optim_sumsq(const float *g, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)g[i] * g[i];
    return s;
}

double optim_clip_scale(double norm, double max_norm) {
    if (max_norm <= 0) return 1.0;
    double coef = max_norm / (norm + 1e-6);
    return coef < 1.0 ? coef : 1.0;
}

void adamw_init(adamw_state *s, size_t n) {
    s->n = n;
    s->m = pt_falloc(n);
    s->v = pt_falloc(n);
    s->t = 0;
}

void adamw_free(adamw_state *s) {
    free(s->m);
    free(s->v);
    s->m = s->v = NULL;
}

void adamw_update_span(adamw_state *s, float *params, const float *grads, size_t off, size_t count,
                       double lr, double grad_scale, bool decay, int t, const optim_config *c) {
    adamw_update(params + off, s->m + off, s->v + off, grads + off, count, lr, grad_scale, decay, t, c);
}

void adamw_update(float *p, float *m, float *v, const float *g, size_t count, double lr,
                  double grad_scale, bool decay, int t, const optim_config *c) {
    if (c->kind != OPTIM_ADAMW) {
        (c->kind == OPTIM_NADAM ? nadam_update : nadamw_update)(p, m, v, g, count, lr, grad_scale, decay, t, c);
        return;
    }
    const float b1 = (float)c->beta1, b2 = (float)c->beta2, eps = (float)c->eps;
    const float shrink = decay ? (float)(1.0 - lr * c->weight_decay) : 1.0f;
    const float step_size = (float)(lr / (1.0 - pow(c->beta1, t)));
    const float bc2_sqrt = (float)sqrt(1.0 - pow(c->beta2, t));
    const float scale = (float)grad_scale;
    for (size_t i = 0; i < count; i++) {
        float gi = scale == 1.0f ? g[i] : g[i] * scale;
        p[i] *= shrink;
        m[i] = m[i] * b1 + (1.0f - b1) * gi;
        v[i] = v[i] * b2 + (1.0f - b2) * gi * gi;
        float denom = sqrtf(v[i]) / bc2_sqrt + eps;
        p[i] -= step_size * (m[i] / denom);
    }
}
