/* The planner and the asynchronous schedules (plan --async; docs/async.md "Schedules", "The
 * window's memory"):
 *  - a layout's memory prices what the executor keeps for a pass of W steps (--async-window, default
 *    4): per microbatch of the pass its boundary buffers and, for pipedream, a stash of the chunk's
 *    weights; 2bw its older version; both one copy aside (the live weights during a backward);
 *  - that price grows with W by exactly what a pipedream job's ranks allocate more (run_job_mem),
 *    and stays within MEM_TOL of what they hold at W = 1, 2, 4;
 *  - the search takes pipedream and 2bw only when asked (o.async), says so when named without
 *    it, and never with zero 1 (train refuses that pair). */
#include "model/gpt.h"
#include "plan/plan.h"
#include "run/run.h"
#include "test.h"
#include "util/pt.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

#define SUM_TOL 1e-9   /* relative: the same byte counts summed in another order */
#define MEM_TOL 0.12   /* relative: the planner's per-layer activation bytes against the executor's
                        * buffers, and the scratch and two message buffers it prices for no schedule
                        * (-4% to +4% here; the window's part itself is exact) */

static gpt_config small_cfg(void) {
    return (gpt_config){ .n_layer = 8, .n_head = 4, .n_embd = 64, .vocab_size = 128, .n_positions = 128 };
}

static int cluster(plan_cluster *k) {
    const char *text = "{\"nodes\":[{\"devices\":{\"count\":4,\"speed\":1,\"memory\":1e15},"
                       "\"link\":{\"bandwidth\":1e10,\"latency\":1e-6}}],\"reference_flops\":1e9}";
    return plan_cluster_parse(k, text, "async-cluster");
}

/* The layout P=4, M=8, split 2,2,2,2 under schedule name, evaluated into *p (caller frees). */
static int eval_layout(const gpt_config *cfg, const plan_cluster *k, const char *name, plan_layout *p, int *split) {
    *p = (plan_layout){ .P = 4, .D = 1, .M = 8, .mb_size = 1, .T = 128, .chunks = 1, .K = 4, .split = split };
    snprintf(p->schedule, sizeof p->schedule, "%s", name);
    return plan_evaluate(cfg, k, NULL, p);
}

static void test_memory_priced(void) {
    gpt_config cfg = small_cfg();
    plan_cluster k;
    if (cluster(&k) < 0) { CHECK("plan_async_cluster", 0, "%s", pt_err()); return; }
    int s1[4] = { 2, 2, 2, 2 }, s2[4] = { 2, 2, 2, 2 }, s3[4] = { 2, 2, 2, 2 };
    plan_layout a, b, c;
    int rc = eval_layout(&cfg, &k, "1f1b", &a, s1) | eval_layout(&cfg, &k, "2bw", &b, s2) |
             eval_layout(&cfg, &k, "pipedream", &c, s3);
    CHECK("plan_async_evaluates", rc == 0, "%s", pt_err());
    if (rc == 0) {
        /* chunks 1 and 2 hold two blocks each: a copy of their weights is two blocks' gradient bytes;
         * each of the pass's W x M microbatches keeps 4 boundary buffers there (train's default W 4) */
        plan_layer_cost blk;
        plan_layer_model(&cfg, PLAN_BLOCK, 1, 128, 1, &blk);
        double copy = 2 * blk.grad_bytes, n = PLAN_ASYNC_WINDOW_DEFAULT * 8.0, bufs = n * 4 * plan_p2p_bytes(&cfg, 1, 128);
        int ok = 1;
        for (int g = 0; g < 4; g++) ok = ok && b.stage_inflight[g] == a.stage_inflight[g] &&
                                        c.stage_inflight[g] == a.stage_inflight[g];
        CHECK("plan_async_inflight_as_1f1b", ok, "in flight %d/%d/%d", a.stage_inflight[1], b.stage_inflight[1],
              c.stage_inflight[1]);
        for (int g = 1; g < 3; g++) {
            double want = 2 * copy + bufs, got = b.stage_mem[g] - a.stage_mem[g];
            CHECK("plan_async_2bw_version_live_buffers", fabs(got - want) <= SUM_TOL * want,
                  "chunk %d: 2bw - 1f1b %g bytes, want 2 copies + %g x 4 buffers = %g", g, got, n, want);
            want = (n + 1) * copy + bufs, got = c.stage_mem[g] - a.stage_mem[g];
            CHECK("plan_async_pipedream_stash_per_pass_microbatch", fabs(got - want) <= SUM_TOL * want,
                  "chunk %d: pipedream - 1f1b %g bytes, want %g + 1 copies + buffers = %g", g, got, n, want);
        }
        CHECK("plan_async_window_said", c.async_window == PLAN_ASYNC_WINDOW_DEFAULT && b.async_window ==
              PLAN_ASYNC_WINDOW_DEFAULT && a.async_window == 0, "async_window %d/%d/%d (1f1b/2bw/pipedream)",
              a.async_window, b.async_window, c.async_window);
    }
    a.split = b.split = c.split = NULL;   /* the stack arrays above */
    plan_layout_free(&a); plan_layout_free(&b); plan_layout_free(&c);
    plan_cluster_free(&k);
}

/* Rank bytes of a pipedream job P=2, M=4 (one row each), T 128, at --async-window W: params +
 * grads + optimizer + acts per rank (run_job_mem) into out[2]. 0 or -1. */
static int job_bytes(const gpt_config *cfg, const gpt_model *init, int W, double *out) {
    run_opts o = { .P = 2, .D = 1, .schedule = "pipedream", .M = 4, .async_window = W };
    run_plan pl;
    if (run_plan_init(&pl, &o, cfg, 4, 128) < 0) return -1;
    run_job *j = NULL;
    int rc = run_job_init(&j, &pl, init, NULL, NULL);
    for (int w = 0; rc == 0 && w < 2; w++) {
        run_mem m;
        run_job_mem(j, w, &m);
        out[w] = m.params + m.grads + m.optim + m.acts;
    }
    run_job_free(j);
    run_plan_free(&pl);
    return rc;
}

/* The planner's price of the same layout (split 4,4) at --async-window W into out[2]. */
static int plan_bytes(const gpt_config *cfg, const plan_cluster *k, int W, double *out) {
    int split[2] = { 4, 4 };
    plan_layout p = { .P = 2, .D = 1, .M = 4, .mb_size = 1, .T = 128, .chunks = 1, .K = 2, .split = split,
                      .async_window = W };
    snprintf(p.schedule, sizeof p.schedule, "pipedream");
    int rc = plan_evaluate(cfg, k, NULL, &p);
    for (int g = 0; rc == 0 && g < 2; g++) out[g] = p.stage_mem[g];
    p.split = NULL;
    plan_layout_free(&p);
    return rc;
}

static void test_window_as_allocated(void) {
    gpt_config cfg = small_cfg();
    plan_cluster k;
    gpt_model init;
    if (cluster(&k) < 0) { CHECK("plan_async_cluster", 0, "%s", pt_err()); return; }
    gpt_init(&init, &cfg);
    double job[3][2], plan[3][2];
    int Ws[3] = { 1, 2, 4 }, rc = 0;
    for (int i = 0; i < 3 && rc == 0; i++)
        rc = job_bytes(&cfg, &init, Ws[i], job[i]) | plan_bytes(&cfg, &k, Ws[i], plan[i]);
    CHECK("plan_async_window_job_and_plan", rc == 0, "%s", pt_err());
    for (int i = 1; rc == 0 && i < 3; i++)
        for (int g = 0; g < 2; g++) {
            double grew = job[i][g] - job[0][g], priced = plan[i][g] - plan[0][g];
            CHECK("plan_async_window_grows_as_allocated", grew > 0 && fabs(priced - grew) <= SUM_TOL * grew,
                  "rank %d, W %d: the job holds %.0f bytes more than at W 1, the plan prices %.0f", g, Ws[i], grew,
                  priced);
        }
    for (int i = 0; rc == 0 && i < 3; i++)
        for (int g = 0; g < 2; g++)
            CHECK("plan_async_window_level", fabs(plan[i][g] - job[i][g]) <= MEM_TOL * job[i][g],
                  "rank %d, W %d: planned %.0f bytes, the job holds %.0f", g, Ws[i], plan[i][g], job[i][g]);
    gpt_free(&init);
    plan_cluster_free(&k);
}

static void test_search_opt_in(void) {
    gpt_config cfg = small_cfg();
    plan_cluster k;
    if (cluster(&k) < 0) { CHECK("plan_async_cluster", 0, "%s", pt_err()); return; }
    const char *async_only[] = { "pipedream", "2bw", NULL };
    plan_opts o = { .global_batch = 8, .T = 128, .top = 50, .schedules = async_only, .tp = 1 };
    plan_result r;
    int rc = plan_search(&cfg, &k, &o, &r);
    CHECK("plan_async_named_without_flag_refused", rc < 0 && strstr(pt_err(), "--async"), "rc %d: %s", rc, pt_err());
    if (rc == 0) plan_result_free(&r);
    o.async = true;
    rc = plan_search(&cfg, &k, &o, &r);
    int both = 0;
    for (int i = 0; rc == 0 && i < r.n_best; i++)
        both |= !strcmp(r.best[i].schedule, "pipedream") ? 1 : !strcmp(r.best[i].schedule, "2bw") ? 2 : 4;
    CHECK("plan_async_searches_both", rc == 0 && both == 3, "rc %d, kinds %d (1 pipedream, 2 2bw, 4 other): %s", rc,
          both, rc ? pt_err() : "");
    if (rc == 0) plan_result_free(&r);
    o.zero = 1;
    rc = plan_search(&cfg, &k, &o, &r);
    CHECK("plan_async_not_with_zero1", rc < 0 && strstr(pt_err(), "--zero 1"), "rc %d: %s", rc, pt_err());
    if (rc == 0) plan_result_free(&r);
    plan_opts d = { .global_batch = 8, .T = 128, .top = 1000, .tp = 1 };
    long plain = -1;
    if (plan_search(&cfg, &k, &d, &r) == 0) {
        plain = r.considered;
        for (int i = 0; i < r.n_best; i++)
            if (!strcmp(r.best[i].schedule, "pipedream") || !strcmp(r.best[i].schedule, "2bw")) plain = -2;
        plan_result_free(&r);
    }
    d.async = true;
    long with = -1;
    if (plan_search(&cfg, &k, &d, &r) == 0) { with = r.considered; plan_result_free(&r); }
    CHECK("plan_async_default_set_opt_in", plain > 0 && with > plain,
          "without --async: %ld layouts (-2: an asynchronous one among them), with: %ld", plain, with);
    plan_cluster_free(&k);
}

int main(void) {
    test_memory_priced();
    test_window_as_allocated();
    test_search_opt_in();
    TEST_DONE();
}
