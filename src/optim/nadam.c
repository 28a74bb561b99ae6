/* NAdam, torch 1.13 semantics (see nadam.h for the formula). */
#include "optim/nadam.h"
#include <math.h>

static double mu_at(double beta1, double momentum_decay, int t) {
    return beta1 * (1.0 - 0.5 * pow(0.96, t * momentum_decay));
}

double nadam_mu_product(double beta1, double momentum_decay, int t) {
    static _Thread_local double c_beta1 = -1, c_md = -1;
    static _Thread_local int c_t = 0;
    static _Thread_local float c_prod = 1.0f;
    if (beta1 != c_beta1 || momentum_decay != c_md || t < c_t) {
        c_beta1 = beta1; c_md = momentum_decay; c_t = 0; c_prod = 1.0f;
    }
    for (; c_t < t; c_t++) c_prod *= (float)mu_at(beta1, momentum_decay, c_t + 1);
    return c_prod;
}

void nadam_update(float *p, float *m, float *v, const float *g, size_t count, double lr,
                  double grad_scale, bool decay, int t, const optim_config *c) {
    const float b1 = (float)c->beta1, b2 = (float)c->beta2, eps = (float)c->eps;
    const float a1 = (float)(1.0 - c->beta1), a2 = (float)(1.0 - c->beta2);   /* torch's alphas */
    const float wd = decay ? (float)c->weight_decay : 0.0f, scale = (float)grad_scale;
    const double mu = mu_at(c->beta1, c->momentum_decay, t);
    const double mu_next = mu_at(c->beta1, c->momentum_decay, t + 1);
    const float prod = (float)nadam_mu_product(c->beta1, c->momentum_decay, t);
    const float prod_next = prod * (float)mu * (float)mu_next;
    const float bc2 = (float)(1.0 - pow(c->beta2, t));
    const float k_g = (float)(-lr * (1.0 - mu) / (1.0 - prod));
    const float k_m = (float)(-lr * mu_next / (1.0 - prod_next));
    for (size_t i = 0; i < count; i++) {
        float gi = scale == 1.0f ? g[i] : g[i] * scale;
        if (wd != 0.0f) gi += wd * p[i];
        m[i] = m[i] * b1 + a1 * gi;
        v[i] = v[i] * b2 + a2 * gi * gi;
        float denom = sqrtf(v[i] / bc2) + eps;
        p[i] += k_g * (gi / denom);
        p[i] += k_m * (m[i] / denom);
    }
}

void nadamw_update(float *p, float *m, float *v, const float *g, size_t count, double lr,
                   double grad_scale, bool decay, int t, const optim_config *c) {
    const float b1 = (float)c->beta1, b2 = (float)c->beta2, eps = (float)c->eps;
    const float a1 = (float)(1.0 - c->beta1), a2 = (float)(1.0 - c->beta2);
    const float shrink = decay ? (float)(1.0 - lr * c->weight_decay) : 1.0f, scale = (float)grad_scale;
    const double mu = mu_at(c->beta1, c->momentum_decay, t);
    const double mu_next = mu_at(c->beta1, c->momentum_decay, t + 1);
    const double prod = (float)nadam_mu_product(c->beta1, c->momentum_decay, t);
    const float bc2 = (float)(1.0 - pow(c->beta2, t));
    const float k_g = (float)(-lr * (1.0 - mu) / (1.0 - prod));
    const float k_m = (float)(-lr * mu_next / (1.0 - prod * mu_next));
    for (size_t i = 0; i < count; i++) {
        float gi = scale == 1.0f ? g[i] : g[i] * scale;
        p[i] *= shrink;
        m[i] = m[i] * b1 + a1 * gi;
        v[i] = v[i] * b2 + a2 * gi * gi;
        float denom = sqrtf(v[i] / bc2) + eps;
        p[i] += k_g * (gi / denom);
        p[i] += k_m * (m[i] / denom);
    }
}
