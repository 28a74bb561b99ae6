/* The planner and the asynchronous schedules (plan --async; docs/async.md "Schedules"):
 *  - a layout's memory prices the weight copies: 2bw one copy of each chunk's weights over the
 *    same layout under 1f1b, pipedream one per microbatch in flight (the simulator's rule);
 *  - the search takes pipedream and 2bw only when asked (o.async), says so when named without
 *    it, and never with zero 1 (train refuses that pair). */
#include "model/gpt.h"
#include "plan/plan.h"
#include "test.h"
#include "util/pt.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

#define SUM_TOL 1e-9   /* relative: the same byte counts summed in another order */

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
        /* chunks 1 and 2 hold two blocks each, so one copy of their weights is the same size */
        double copy = b.stage_mem[1] - a.stage_mem[1];
        int ok = copy > 0 && fabs((b.stage_mem[2] - a.stage_mem[2]) - copy) <= SUM_TOL * copy;
        for (int g = 0; g < 4; g++) ok = ok && b.stage_inflight[g] == a.stage_inflight[g] &&
                                        c.stage_inflight[g] == a.stage_inflight[g];
        CHECK("plan_async_2bw_one_copy", ok, "2bw - 1f1b chunk 1: %g bytes, chunk 2: %g; in flight %d/%d/%d", copy,
              b.stage_mem[2] - a.stage_mem[2], a.stage_inflight[1], b.stage_inflight[1], c.stage_inflight[1]);
        for (int g = 1; g < 3; g++) {
            double want = c.stage_inflight[g] * copy, got = c.stage_mem[g] - a.stage_mem[g];
            CHECK("plan_async_pipedream_copy_per_inflight", want > 0 && fabs(got - want) <= SUM_TOL * want,
                  "chunk %d: pipedream - 1f1b %g bytes, want %d copies = %g", g, got, c.stage_inflight[g], want);
        }
    }
    a.split = b.split = c.split = NULL;   /* the stack arrays above */
    plan_layout_free(&a); plan_layout_free(&b); plan_layout_free(&c);
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
    test_search_opt_in();
    TEST_DONE();
}
