/* NAdam against torch.optim.NAdam of the installed torch 1.13 (tests/fixtures/nadam, written by
 * tools/make_nadam_fixture.py): 8 steps on 37 parameters with a per-step learning rate, one case
 * without weight decay (betas 0.9/0.999) and one with L2 decay 0.1 (betas 0.99/0.95). After every
 * step the parameters must agree to TOL_P relative to max(|p|, 1e-3), the final m and v to
 * TOL_MV, the mu product to TOL_MU. Why these: both sides compute in float32 with the scalar
 * factors in double and the same operation order, so the expected difference is a few ulps
 * (1.2e-7 each) per step from fused/unfused multiply-adds in torch's vector kernels; 8 steps of
 * that stay under 1e-6 (measured: 1e-7 and 0). A wrong formula is far off: torch 2's mu product
 * denominator gives 2.8e-3 and 3.8e-4 here; the test prints the worst error to show the margin.
 * Also: grad_scale s on g equals scale 1 on s*g, decay=false equals weight decay 0, the mu
 * product's cache, and that adamw_update dispatches to NAdam when kind is OPTIM_NADAM. */
#include "io/safetensors.h"
#include "optim/nadam.h"
#include "optim/optim.h"
#include "test.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TOL_P 1e-6
#define TOL_MV 1e-5
#define TOL_MU 1e-7
#define FIXTURE "tests/fixtures/nadam/nadam.safetensors"
#define MAXN 64
#define MAXSTEPS 16

static int tensor(const st_file *f, const char *name, float *dst) {
    const st_tensor *t = st_find(f, name);
    return t ? st_tensor_f32(f, t, dst) : -1;
}

static double worst(const float *a, const float *b, int n) {
    double w = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / fmax(fabs((double)b[i]), 1e-3);
        if (d > w) w = d;
    }
    return w;
}

/* One case of the fixture: its hyper-parameters from metadata, the run, the comparisons. */
static void run_case(const st_file *f, const char *cname, int n, int steps, const double *lrs) {
    optim_config c = optim_config_default();
    c.kind = OPTIM_NADAM;
    const char *hp = st_meta(f, cname);
    CHECK("case metadata", hp && sscanf(hp, "%lf,%lf,%lf,%lf,%lf", &c.beta1, &c.beta2, &c.eps,
                                         &c.weight_decay, &c.momentum_decay) == 5, "%s: '%s'", cname, hp);
    float p[MAXN], m[MAXN] = { 0 }, v[MAXN] = { 0 }, g[MAXN], ref[MAXN];
    char name[64];
    tensor(f, "p0", p);
    double wp = 0;
    for (int k = 1; k <= steps; k++) {
        snprintf(name, sizeof name, "g%d", k);
        tensor(f, name, g);
        adamw_update(p, m, v, g, (size_t)n, lrs[k - 1], 1.0, true, k, &c);   /* dispatches */
        snprintf(name, sizeof name, "%s/p%d", cname, k);
        int ok = tensor(f, name, ref) == 0;
        double w = ok ? worst(p, ref, n) : INFINITY;
        if (w > wp) wp = w;
        CHECK("params after step", w < TOL_P, "%s step %d: worst rel err %.3g", cname, k, w);
    }
    printf("# %s: worst params rel err over %d steps %.3g (tol %g)\n", cname, steps, wp, TOL_P);
    snprintf(name, sizeof name, "%s/m", cname);
    CHECK("exp_avg", tensor(f, name, ref) == 0 && worst(m, ref, n) < TOL_MV, "%s: %.3g", cname, worst(m, ref, n));
    snprintf(name, sizeof name, "%s/v", cname);
    CHECK("exp_avg_sq", tensor(f, name, ref) == 0 && worst(v, ref, n) < TOL_MV, "%s: %.3g", cname, worst(v, ref, n));
    snprintf(name, sizeof name, "%s/mu_product", cname);
    const char *mus = st_meta(f, name);
    double mu_ref = mus ? atof(mus) : NAN, mu = nadam_mu_product(c.beta1, c.momentum_decay, steps);
    CHECK("mu product", fabs(mu - mu_ref) <= TOL_MU * mu_ref, "%s: %.10g vs torch %.10g", cname, mu, mu_ref);
}

/* grad_scale multiplies the gradient before the decay term; decay=false is weight decay 0. */
static void test_scale_and_decay(void) {
    optim_config c = optim_config_default(), c0;
    c.kind = OPTIM_NADAM;
    c0 = c;
    c0.weight_decay = 0;
    float p1[3] = { 1, -2, 0.5f }, p2[3] = { 1, -2, 0.5f }, m1[3] = { 0 }, v1[3] = { 0 }, m2[3] = { 0 },
          v2[3] = { 0 }, g[3] = { 0.2f, -0.4f, 0.8f }, gh[3] = { 0.1f, -0.2f, 0.4f };
    nadam_update(p1, m1, v1, g, 3, 1e-2, 0.5, false, 1, &c);
    nadam_update(p2, m2, v2, gh, 3, 1e-2, 1.0, true, 1, &c0);
    CHECK("grad_scale, decay=false", !memcmp(p1, p2, sizeof p1), "%g vs %g", p1[0], p2[0]);
    CHECK("the step moved", p1[0] != 1.0f, "%g", p1[0]);
    CHECK("mu product of 0 steps", nadam_mu_product(0.9, 4e-3, 0) == 1.0, "%g", nadam_mu_product(0.9, 4e-3, 0));
    double a = nadam_mu_product(0.9, 4e-3, 5), b = nadam_mu_product(0.9, 4e-3, 3);   /* cache rewinds */
    CHECK("mu product rewinds", b > a && nadam_mu_product(0.9, 4e-3, 5) == a, "%g %g", a, b);
    optim_kind k;
    CHECK("--optim names", optim_kind_parse("nadam", &k) == 0 && k == OPTIM_NADAM &&
          optim_kind_parse("adamw", &k) == 0 && k == OPTIM_ADAMW && optim_kind_parse("sgd", &k) < 0, "parse");
}

int main(void) {
    st_file *f = NULL;
    if (st_open(&f, FIXTURE) < 0) {
        CHECK("fixture", 0, "%s missing: /usr/bin/python3 tools/make_nadam_fixture.py", FIXTURE);
        TEST_DONE();
    }
    int n = atoi(st_meta(f, "n") ? st_meta(f, "n") : "0"), steps = atoi(st_meta(f, "steps") ? st_meta(f, "steps") : "0");
    double lrs[MAXSTEPS];
    const char *l = st_meta(f, "lr");
    char *e = (char *)l;
    for (int k = 0; l && k < steps && k < MAXSTEPS; k++, e++) lrs[k] = strtod(e, &e);
    CHECK("fixture sizes", n > 0 && n <= MAXN && steps > 0 && steps <= MAXSTEPS && l, "n %d steps %d", n, steps);
    if (n > 0 && n <= MAXN && steps > 0 && steps <= MAXSTEPS && l) {
        run_case(f, "plain", n, steps, lrs);
        run_case(f, "decay", n, steps, lrs);
    }
    st_close(f);
    test_scale_and_decay();
    TEST_DONE();
}
