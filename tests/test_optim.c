/* LR schedule, clipping factor and AdamW update against closed forms computed here in double.
 * The 5-step end-to-end check against torch.optim.AdamW lives in test_train_torch.c. */
#include "test.h"
#include "optim/async_fix.h"
#include "optim/optim.h"
#include <string.h>
#include <math.h>

#define TOL_LR 1e-12      /* pure double arithmetic */
#define TOL_ADAM 2e-6     /* float32 update vs double reference, relative to |p| ~ 1 */

static void test_lr(void) {
    optim_config c = optim_config_default();
    c.lr = 1.0; c.lr_min = 0.1; c.warmup = 2; c.total_steps = 6; c.schedule = LR_COSINE;
    CHECK("lr warmup step 1", fabs(optim_lr_at(&c, 1) - 0.5) < TOL_LR, "%g", optim_lr_at(&c, 1));
    CHECK("lr warmup end", fabs(optim_lr_at(&c, 2) - 1.0) < TOL_LR, "%g", optim_lr_at(&c, 2));
    double mid = 0.1 + 0.45 * (1 + cos(M_PI * 0.5));
    CHECK("lr cosine middle", fabs(optim_lr_at(&c, 4) - mid) < TOL_LR, "%g vs %g", optim_lr_at(&c, 4), mid);
    CHECK("lr cosine floor at last step", fabs(optim_lr_at(&c, 6) - 0.1) < TOL_LR, "%g", optim_lr_at(&c, 6));
    c.schedule = LR_CONSTANT;
    CHECK("lr constant after warmup", optim_lr_at(&c, 5) == 1.0, "%g", optim_lr_at(&c, 5));
    c.warmup = 0;
    CHECK("lr constant", optim_lr_at(&c, 1) == 1.0, "%g", optim_lr_at(&c, 1));
}

static void test_clip(void) {
    float g[4] = {3, 4, 0, 0};
    double norm = sqrt(optim_sumsq(g, 4));
    CHECK("global norm", fabs(norm - 5) < 1e-12, "%g", norm);
    CHECK("clip active", fabs(optim_clip_scale(norm, 1.0) - 1.0 / (5 + 1e-6)) < 1e-15, "%g",
          optim_clip_scale(norm, 1.0));
    CHECK("clip inactive", optim_clip_scale(norm, 10.0) == 1.0, "%g", optim_clip_scale(norm, 10.0));
    CHECK("clip off", optim_clip_scale(norm, 0) == 1.0, "%g", optim_clip_scale(norm, 0));
}

/* Double-precision AdamW (torch semantics) for one scalar over several steps. */
static void test_adamw(void) {
    optim_config c = optim_config_default();
    c.weight_decay = 0.1;
    float p[3] = {1.0f, -0.5f, 0.25f}, g[3] = {0.3f, -0.2f, 0.05f};
    double pd[3] = {1.0, -0.5, 0.25}, md[3] = {0}, vd[3] = {0};
    adamw_state s;
    adamw_init(&s, 3);
    for (int t = 1; t <= 4; t++) {
        double lr = 1e-2 * t;
        adamw_update_span(&s, p, g, 0, 2, lr, 0.5, true, t, &c);   /* span 0..1 decays */
        adamw_update_span(&s, p, g, 2, 1, lr, 0.5, false, t, &c);  /* span 2 does not */
        for (int i = 0; i < 3; i++) {
            double gi = g[i] * 0.5, wd = i < 2 ? c.weight_decay : 0;
            pd[i] *= 1 - lr * wd;
            md[i] = c.beta1 * md[i] + (1 - c.beta1) * gi;
            vd[i] = c.beta2 * vd[i] + (1 - c.beta2) * gi * gi;
            double mh = md[i] / (1 - pow(c.beta1, t)), vh = vd[i] / (1 - pow(c.beta2, t));
            pd[i] -= lr * mh / (sqrt(vh) + c.eps);
        }
    }
    double err = 0;
    for (int i = 0; i < 3; i++) err = fmax(err, fabs(p[i] - pd[i]));
    CHECK("adamw matches double reference", err < TOL_ADAM, "max err %g", err);
    adamw_free(&s);
}

static void test_validate(void) {
    optim_config c = optim_config_default();
    CHECK("default config valid", optim_config_validate(&c) == 0, "rejected");
    c.beta1 = 1.5;
    CHECK("beta1 out of range rejected", optim_config_validate(&c) != 0, "accepted");
}

/* --async-fix nesterov's optimizer fills only the fields the user did not give (optim_config.given);
 * the default correction is nesterov for pipedream only. */
static void test_fix_given(void) {
    optim_config c = optim_config_default();
    c.beta2 = 0.98;
    c.given = OPTIM_GIVEN_BETA2;
    async_fix_optim(&c, ASYNC_FIX_NESTEROV);
    CHECK("nesterov: given beta2 kept, the rest set", c.kind == OPTIM_NADAMW && c.beta1 == 0.99 && c.beta2 == 0.98 &&
          c.momentum_decay == 4e-3, "kind %d beta1 %g beta2 %g", (int)c.kind, c.beta1, c.beta2);
    optim_config d = optim_config_default();
    d.given = OPTIM_GIVEN_KIND | OPTIM_GIVEN_BETA1 | OPTIM_GIVEN_BETA2 | OPTIM_GIVEN_MOMENTUM_DECAY;
    optim_config e = d;
    async_fix_optim(&d, ASYNC_FIX_NESTEROV);
    CHECK("nesterov: everything given, nothing changed", !memcmp(&d, &e, sizeof d), "kind %d beta1 %g", (int)d.kind, d.beta1);
    CHECK("default fix: pipedream nesterov, 2bw/1f1b/none none",
          async_fix_default("pipedream") == ASYNC_FIX_NESTEROV && async_fix_default("2bw") == ASYNC_FIX_NONE &&
          async_fix_default("1f1b") == ASYNC_FIX_NONE && async_fix_default(NULL) == ASYNC_FIX_NONE, "%s", "");
}

int main(void) {
    test_lr();
    test_fix_given();
    test_clip();
    test_adamw();
    test_validate();
    TEST_DONE();
}
