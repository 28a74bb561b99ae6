/* Planner speed: plans a 96-layer GPT (n_embd 8192) on examples/cluster-hetero-1024.json (1024
 * devices, 128 nodes, two generations) and on examples/cluster-8gpu.json, and times the exact
 * split (reachability + bisection) against the dynamic program on a 96-block, 64-stage chain,
 * side by side in one run. The goal is the 1024-device plan under 10 s. Not a test. Run from the
 * repo root. */
#include "plan/plan.h"
#include "util/pt.h"
#include <stdio.h>
#include <stdlib.h>

#define GOAL_S 10.0   /* issue 5: planning 96 layers on 1024 devices */

static double plan_once(const gpt_config *cfg, const char *cluster, long G, int T, plan_result *r) {
    plan_cluster k;
    if (plan_cluster_load(&k, cluster) < 0) { fprintf(stderr, "bench_plan: %s\n", pt_err()); return -1; }
    plan_opts o = { .global_batch = G, .T = T, .top = 3 };
    double t0 = pt_now();
    int rc = plan_search(cfg, &k, &o, r);
    double t = pt_now() - t0;
    plan_cluster_free(&k);
    if (rc < 0) { fprintf(stderr, "bench_plan: %s\n", pt_err()); return -1; }
    return t;
}

static void report(const char *what, double t, const plan_result *r) {
    if (t < 0) return;
    printf("%-34s %8.3f s  %6ld layouts, %5ld do not fit, %5ld candidates simulated (%ld runs)\n", what, t,
           r->considered, r->infeasible, r->candidates_simulated, r->simulated);
    if (r->n_best > 0) {
        const plan_layout *p = &r->best[0];
        printf("    best: dp %d x stages %d %s v=%d, %d x %d microbatches, recompute %s, %s placement: "
               "step %.4g s, %.4g tokens/s, bubble %.1f%%\n", p->D, p->P, p->schedule, p->chunks, p->M, p->mb_size,
               p->recompute ? "yes" : "no", p->placement, p->step_time, p->tokens_per_s, 100 * p->bubble);
    } else {
        printf("    nothing fits: %s\n", r->advice);
    }
}

/* Seconds per call of the fast split and of the DP on one chain (best of reps). */
static void bench_split(int n, int K) {
    double *buf = pt_malloc(sizeof(double) * (size_t)(3 * n + 3 * K));
    double *work = buf, *mf = buf + n, *ma = buf + 2 * n, *speed = buf + 3 * n, *cap = speed + K, *held = cap + K;
    pt_rng rng;
    pt_rng_seed(&rng, 3);
    for (int i = 0; i < n; i++) { work[i] = 1 + 0.1 * pt_rng_uniform(&rng); mf[i] = 1; ma[i] = 0.1; }
    for (int k = 0; k < K; k++) { speed[k] = k < K / 2 ? 2 : 1; cap[k] = 4 + 0.1 * (K - k); held[k] = K - k; }
    plan_chain c = { n, K, work, mf, ma, speed, cap, held, NULL };
    int *first = pt_malloc(sizeof(int) * (size_t)(K + 1));
    double b1 = 0, b2 = 0, t_fast = 1e30, t_dp = 1e30;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = pt_now();
        plan_split(&c, first, &b1);
        double t1 = pt_now();
        plan_split_dp(&c, first, &b2);
        double t2 = pt_now();
        if (t1 - t0 < t_fast) t_fast = t1 - t0;
        if (t2 - t1 < t_dp) t_dp = t2 - t1;
    }
    printf("split %d blocks on %d stages: fast %.3f ms, DP %.3f ms (DP / fast = %.1fx), bottlenecks %s\n", n, K,
           1e3 * t_fast, 1e3 * t_dp, t_dp / t_fast, b1 == b2 ? "equal" : "DIFFER");
    free(buf);
    free(first);
}

int main(void) {
    gpt_config big = { .n_layer = 96, .n_head = 64, .n_embd = 8192, .vocab_size = 50257, .n_positions = 2048 };
    gpt_config mid = { .n_layer = 24, .n_head = 16, .n_embd = 2048, .vocab_size = 50257, .n_positions = 2048 };
    plan_result r1, r2;
    double t1 = plan_once(&big, "examples/cluster-hetero-1024.json", 1024, 2048, &r1);
    report("96 layers, 1024 hetero devices", t1, &r1);
    double t2 = plan_once(&mid, "examples/cluster-8gpu.json", 256, 2048, &r2);
    report("24 layers, 8 GPUs", t2, &r2);
    if (t1 >= 0 && t2 > 0)
        printf("1024-device plan / 8-GPU plan = %.1fx; goal: 1024 devices under %.0f s: %s\n", t1 / t2, GOAL_S,
               t1 < GOAL_S ? "met" : "NOT met");
    bench_split(96, 64);
    if (t1 >= 0) plan_result_free(&r1);
    if (t2 >= 0) plan_result_free(&r2);
    return t1 >= 0 && t2 >= 0 ? 0 : 1;
}
