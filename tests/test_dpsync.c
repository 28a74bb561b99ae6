/* --dp-sync H (DiLoCo's outer step, run/exec_outer.c, optim/outer.c):
 *  - the outer step against torch.optim.SGD(nesterov=True) on the mean change (tests/fixtures/
 *    outer, tools/make_outer_fixture.py): 5 steps, 3 replicas, three (lr, momentum) cases;
 *  - a 2-stage, 2-replica job (threads): the inner steps are each replica's own (bitwise a job
 *    that never syncs); at step H every replica holds outer(theta_0, mean change), bitwise, with
 *    --no-overlap at once, and overlapped one step late with the step taken meanwhile kept:
 *    theta_start' + (theta_{H+1} - theta_H); the last step syncs (replicas equal at the end);
 *  - --dp-sync 1 is plain data parallelism (losses and weights bitwise the run without it);
 *  - refusals: an asynchronous schedule, --zero 1, bad numbers. */
#include "io/safetensors.h"
#include "model/gpt.h"
#include "optim/optim.h"
#include "optim/outer.h"
#include "run/run.h"
#include "util/pt.h"
#include "test.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* float32 on both sides in the same operation order; torch's vector kernels may fuse a
 * multiply-add: a few ulps per step, 5 steps */
#define TOL_OUTER 1e-6
#define FIXTURE "tests/fixtures/outer/outer.safetensors"
#define MAXN 64

/* ---- the outer step against torch -------------------------------------------------------- */

static int tensor(const st_file *f, const char *name, float *dst) {
    const st_tensor *t = st_find(f, name);
    return t ? st_tensor_f32(f, t, dst) : -1;
}

static void outer_case(const st_file *f, const char *cname, int n, int steps, int D) {
    double lr, mu;
    const char *hp = st_meta(f, cname);
    char name[96];
    CHECK("outer case metadata", hp && sscanf(hp, "%lf,%lf", &lr, &mu) == 2, "%s: '%s'", cname, hp);
    float start[MAXN], buf[MAXN] = { 0 }, sum[MAXN], delta[MAXN], theta[MAXN], ref[MAXN];
    tensor(f, "s0", start);
    double worst = 0;
    for (int k = 1; k <= steps; k++) {
        for (int r = 0; r < D; r++) {   /* the change of each replica, summed in replica order */
            snprintf(name, sizeof name, "d%d/r%d", k, r);
            tensor(f, name, theta);
            outer_delta(r ? delta : sum, start, theta, (size_t)n);
            for (int i = 0; r && i < n; i++) sum[i] += delta[i];
        }
        outer_nesterov(start, buf, sum, (size_t)n, D, lr, mu);
        snprintf(name, sizeof name, "%s/s%d", cname, k);
        int ok = tensor(f, name, ref) == 0;
        double w = ok ? test_tensor_relerr(start, ref, (size_t)n) : INFINITY;
        if (w > worst) worst = w;
    }
    snprintf(name, sizeof name, "outer %s vs torch SGD nesterov: %d steps", cname, steps);
    CHECK(name, worst <= TOL_OUTER, "worst rel err %.3g", worst);
    printf("# %s: worst rel err %.3g\n", cname, worst);
    if (mu > 0) {
        snprintf(name, sizeof name, "%s/buf", cname);
        double wb = tensor(f, name, ref) == 0 ? test_tensor_relerr(buf, ref, (size_t)n) : INFINITY;
        snprintf(name, sizeof name, "outer %s: momentum buffer", cname);
        CHECK(name, wb <= TOL_OUTER, "worst rel err %.3g", wb);
    }
}

static void test_outer_torch(void) {
    st_file *f = NULL;
    if (st_open(&f, FIXTURE) < 0) { CHECK("outer fixture", 0, "%s", pt_err()); return; }
    const char *sn = st_meta(f, "steps"), *nn = st_meta(f, "n"), *dn = st_meta(f, "replicas");
    int steps = sn ? atoi(sn) : 0, n = nn ? atoi(nn) : 0, D = dn ? atoi(dn) : 0;
    CHECK("outer fixture sizes", steps > 0 && n > 0 && n <= MAXN && D > 0, "steps %d n %d D %d", steps, n, D);
    if (steps > 0 && n > 0 && n <= MAXN && D > 0)
        for (const char *const *c = (const char *const[]){ "diloco", "average", "slow", NULL }; *c; c++)
            outer_case(f, *c, n, steps, D);
    st_close(f);
    CHECK("outer: bad numbers refused", outer_config_validate(0, 0.7, 0.9) == 0 &&
          outer_config_validate(-1, 0.7, 0.9) < 0 && outer_config_validate(8, 0, 0.9) < 0 &&
          outer_config_validate(8, 0.7, 1.0) < 0 && outer_config_validate(8, NAN, 0.5) < 0, "%s", pt_err());
}

/* ---- the job ----------------------------------------------------------------------------- */

enum { BATCH = 8, SEQ = 8, P = 2, D = 2, H = 3, STEPS = 5 };
static const gpt_config CFG = { .n_layer = 4, .n_head = 2, .n_embd = 16, .vocab_size = 64, .n_positions = 8 };
static int g_tok[BATCH * SEQ], g_tgt[BATCH * SEQ];
static gpt_model g_init;

/* Step t's batch (B,T): replica d's rows are d*B/D ... */
static void make_batch(int t) {
    pt_rng r;
    pt_rng_seed(&r, (uint64_t)(100 + t));
    for (int i = 0; i < BATCH * SEQ; i++) g_tok[i] = (int)(pt_rng_next(&r) % 64);
    for (int i = 0; i < BATCH * SEQ; i++) g_tgt[i] = (g_tok[i] * 7 + 3) % 64;
}

/* What a job's ranks hold: stage p's span on rank d*P + p, per replica, end to end by stage. */
typedef struct { float *w[D]; size_t n; } weights;

static void grab(run_job *j, weights *out) {
    size_t n = 0;
    for (int p = 0; p < P; p++) n += run_exec_stage_model(run_job_local_exec(j, p), p)->n_held;
    out->n = n;
    for (int d = 0; d < D; d++) {
        out->w[d] = pt_falloc(n);
        size_t at = 0;
        for (int p = 0; p < P; p++) {
            const gpt_model *m = run_exec_stage_model(run_job_local_exec(j, d * P + p), p);
            memcpy(out->w[d] + at, m->params, m->n_held * sizeof(float));
            at += m->n_held;
        }
    }
}

static void weights_free(weights *w) {
    for (int d = 0; d < D; d++) free(w->w[d]);
}

/* A job of dp_sync h (overlap unless no_overlap) run for `steps` steps of a run of `total`;
 * weights after step `at` into *w_at (when at > 0) and at the end into *w_end, losses into
 * loss[]. 0 or -1. */
static int job_run(int h, int no_overlap, int total, int steps, int at, weights *w_at, weights *w_end,
                   float *loss) {
    run_opts o = { .P = P, .D = D, .schedule = "1f1b", .M = 2, .dp_sync = h, .no_overlap = no_overlap,
                   .outer_lr = OUTER_LR_DEFAULT, .outer_momentum = OUTER_MOMENTUM_DEFAULT };
    run_plan pl;
    if (run_plan_init(&pl, &o, &CFG, BATCH, SEQ) < 0) return -1;
    optim_config oc = optim_config_default();
    oc.lr = 1e-2;
    oc.grad_clip = 0.05;   /* below the norms seen: every step clips (each replica by its own norm) */
    oc.total_steps = total;
    run_job *j = NULL;
    run_stats st;
    int rc = run_job_init(&j, &pl, &g_init, NULL, NULL);
    for (int t = 1; rc == 0 && t <= steps; t++) {
        make_batch(t);
        rc = run_job_iteration(j, g_tok, g_tgt, &oc, t, &st);
        loss[t - 1] = st.loss;
        if (rc == 0 && t == at) grab(j, w_at);
    }
    if (rc == 0 && w_end) grab(j, w_end);
    run_job_free(j);
    run_plan_free(&pl);
    return rc;
}

static int same(const float *a, const float *b, size_t n) { return !memcmp(a, b, n * sizeof(float)); }

/* outer(theta_0, mean over replicas of theta_0 - theta_d) for the first sync: momentum 0 before */
static float *expect_first(const float *start0, const weights *th) {
    float *s = pt_falloc(th->n), *sum = pt_falloc(th->n), *dl = pt_falloc(th->n), *buf = pt_falloc(th->n);
    memcpy(s, start0, th->n * sizeof(float));
    memset(buf, 0, th->n * sizeof(float));
    outer_delta(sum, s, th->w[0], th->n);
    for (int d = 1; d < D; d++) {
        outer_delta(dl, s, th->w[d], th->n);
        for (size_t i = 0; i < th->n; i++) sum[i] += dl[i];
    }
    outer_nesterov(s, buf, sum, th->n, D, OUTER_LR_DEFAULT, OUTER_MOMENTUM_DEFAULT);
    free(sum); free(dl); free(buf);
    return s;
}

/* Replica 0 between syncs is a run of its own: a one-replica job (plain, no --dp-sync) on its
 * rows (the first B/D of each batch, the same microbatches), clipping by its own norm included:
 * weights bitwise after H steps. */
static void test_replica_alone(const weights *free_h) {
    run_opts o = { .P = P, .D = 1, .schedule = "1f1b", .M = 2 };
    run_plan pl;
    optim_config oc = optim_config_default();
    oc.lr = 1e-2;
    oc.total_steps = 1000;
    oc.grad_clip = 0.05;   /* below the norms seen: every step clips */
    int rc = run_plan_init(&pl, &o, &CFG, BATCH / D, SEQ);
    run_job *j = NULL;
    run_stats st;
    if (rc == 0) rc = run_job_init(&j, &pl, &g_init, NULL, NULL);
    for (int t = 1; rc == 0 && t <= H; t++) {
        make_batch(t);
        rc = run_job_iteration(j, g_tok, g_tgt, &oc, t, &st);
    }
    int ok = rc == 0;
    size_t at = 0;
    for (int p = 0; ok && p < P; p++) {
        const gpt_model *m = run_exec_stage_model(run_job_local_exec(j, p), p);
        ok &= same(free_h->w[0] + at, m->params, m->n_held);
        at += m->n_held;
    }
    CHECK("dp-sync: a replica between syncs is a one-replica run on its rows, clipped by its own norm (bitwise)",
          ok, "%s", rc ? pt_err() : "weights differ");
    run_job_free(j);
    if (rc == 0 || j) run_plan_free(&pl);
}

static void test_job(void) {
    float l_free[STEPS], l_blk[STEPS], l_ovl[STEPS], l_end[H + 1];
    weights w0, free_h, free_h1, blk_h, ovl_h1, end;
    /* the reference: replicas that never meet (H beyond the run, no last step inside it) */
    int rc = job_run(1000, 0, 1000, H + 1, H, &free_h, &free_h1, l_free);
    CHECK("dp-sync job: replicas alone run", rc == 0, "%s", pt_err());
    if (rc < 0) return;
    rc = job_run(1000, 0, 1000, 0, 0, NULL, &w0, l_end);   /* theta_0 as the ranks hold it */
    CHECK("dp-sync job: theta_0", rc == 0 && same(w0.w[0], w0.w[1], w0.n), "%s", rc ? pt_err() : "replicas differ");
    if (rc < 0) return;
    float *start0 = w0.w[0];
    CHECK("dp-sync job: replicas alone differ", !same(free_h.w[0], free_h.w[1], free_h.n), "equal");
    float *want = expect_first(start0, &free_h);
    test_replica_alone(&free_h);

    rc = job_run(H, 1, 1000, H, H, &blk_h, NULL, l_blk);
    CHECK("dp-sync --no-overlap: runs", rc == 0, "%s", pt_err());
    if (rc == 0) {
        int inner = 1;
        for (int t = 0; t < H; t++) inner &= l_blk[t] == l_free[t];
        CHECK("dp-sync: inner steps are each replica's own (losses bitwise)", inner, "step 1 %.7g vs %.7g",
              l_blk[0], l_free[0]);
        CHECK("dp-sync --no-overlap: replicas equal after the sync", same(blk_h.w[0], blk_h.w[1], blk_h.n), "differ");
        CHECK("dp-sync --no-overlap: outer(theta_0, mean change), bitwise", same(blk_h.w[0], want, blk_h.n),
              "off by %.3g", test_tensor_relerr(blk_h.w[0], want, blk_h.n));
        weights_free(&blk_h);
    }

    rc = job_run(H, 0, 1000, H + 1, H + 1, &ovl_h1, NULL, l_ovl);
    CHECK("dp-sync overlapped: runs", rc == 0, "%s", pt_err());
    if (rc == 0) {
        CHECK("dp-sync overlapped: step H+1's loss is the unsynced replicas'", l_ovl[H] == l_free[H],
              "%.7g vs %.7g", l_ovl[H], l_free[H]);
        int ok = 1;
        float *e = pt_falloc(free_h.n);
        for (int d = 0; d < D; d++) {
            for (size_t i = 0; i < free_h.n; i++) e[i] = want[i] + (free_h1.w[d][i] - free_h.w[d][i]);
            ok &= same(ovl_h1.w[d], e, free_h.n);
        }
        CHECK("dp-sync overlapped: applied one step late, the step meanwhile kept, bitwise", ok, "differs");
        free(e);
        weights_free(&ovl_h1);
    }

    /* the last step always syncs, blocking: the run ends with equal replicas */
    rc = job_run(H, 0, H + 1, H + 1, 0, NULL, &end, l_end);
    CHECK("dp-sync: the last step syncs (replicas equal at the end)", rc == 0 && same(end.w[0], end.w[1], end.n),
          "%s", rc ? pt_err() : "differ");
    if (rc == 0) weights_free(&end);
    free(want);
    weights_free(&w0);
    weights_free(&free_h);
    weights_free(&free_h1);
}

/* --dp-sync 1 changes nothing: losses and weights bitwise the run without the flag. */
static void test_sync_one(void) {
    float a[STEPS], b[STEPS];
    weights wa, wb;
    int rc = job_run(0, 0, STEPS, STEPS, 0, NULL, &wa, a);
    if (rc == 0) rc = job_run(1, 0, STEPS, STEPS, 0, NULL, &wb, b);
    CHECK("--dp-sync 1 runs", rc == 0, "%s", pt_err());
    if (rc < 0) return;
    CHECK("--dp-sync 1 is plain data parallelism: losses bitwise", !memcmp(a, b, sizeof a), "step %d: %.7g vs %.7g",
          STEPS, a[STEPS - 1], b[STEPS - 1]);
    CHECK("--dp-sync 1: weights bitwise", same(wa.w[0], wb.w[0], wa.n) && same(wa.w[1], wb.w[1], wa.n), "differ");
    weights_free(&wa);
    weights_free(&wb);
}

static void refused(const char *name, run_opts o, const char *pat) {
    run_plan pl;
    int rc = run_plan_init(&pl, &o, &CFG, BATCH, SEQ);
    if (rc == 0) run_plan_free(&pl);
    CHECK(name, rc < 0 && strstr(pt_err(), pat), "rc %d: '%s'", rc, rc < 0 ? pt_err() : "");
}

static void test_refusals(void) {
    run_opts o = { .P = P, .D = D, .schedule = "1f1b", .M = 2, .dp_sync = 4, .outer_lr = 0.7, .outer_momentum = 0.9 };
    run_opts a = o;
    a.schedule = "pipedream";
    refused("--dp-sync with an asynchronous schedule refused", a, "needs a synchronous schedule");
    a = o;
    a.zero = 1;
    refused("--dp-sync with --zero 1 refused", a, "drop --zero");
    a = o;
    a.outer_momentum = 1;
    refused("--outer-momentum 1 refused", a, "--outer-momentum must be in [0, 1)");
    a = o;
    a.dp_sync = -2;
    refused("--dp-sync -2 refused", a, "--dp-sync -2");
}

int main(void) {
    gpt_init(&g_init, &CFG);
    gpt_init_random(&g_init, 3);
    test_outer_torch();
    test_refusals();
    test_sync_one();
    test_job();
    gpt_free(&g_init);
    TEST_DONE();
}
