/* Simulator speed: actions simulated per second for 1f1b and interleaved-1f1b at growing sizes,
 * up to 64 ranks x 1024 microbatches, compute-only and lowered, side by side in one run (a ratio
 * to the smallest case shows scaling, linear means the ratio of actions). Not a test. */
#include "sched/sched.h"
#include "sim/sim.h"
#include "bench_util.h"
#include "util/pt.h"
#include <stdio.h>

/* Best of `reps` runs: seconds per simulation of s (free links, unit costs). */
static double time_sim(const sched *s, int reps) {
    sim_costs c;
    sim_costs_init(&c, s->n_stages, 1, 1, 1);
    c.latency = 1e-3; c.bandwidth = 1e9;
    double best = 1e30;
    for (int i = 0; i < reps; i++) {
        sim_result r;
        double t0 = pt_now();
        if (sim_run(s, &c, NULL, &r)) { fprintf(stderr, "bench_sim: %s\n", pt_err()); break; }
        double t = pt_now() - t0;
        if (t < best) best = t;
        sim_result_free(&r);
    }
    sim_costs_free(&c);
    return best;
}

/* Returns seconds per compute-only action (0 on failure), for the scaling ratio. */
static double bench_one(const char *name, int P, int M, int v) {
    sched_params p = { .ranks = P, .microbatches = M, .chunks = v };
    sched *s = sched_generate(name, &p);
    if (!s) { fprintf(stderr, "bench_sim: %s\n", pt_err()); return 0; }
    sched *l = sched_lower(s);
    long n = sched_total_actions(s), nl = l ? sched_total_actions(l) : 0;
    double t = time_sim(s, 3), tl = l ? time_sim(l, 3) : 0;
    printf("%-18s P=%-3d M=%-5d %9ld actions %8.1f ms %7.2f M actions/s | lowered %9ld actions %8.1f ms %7.2f M/s\n",
           name, P, M, n, 1e3 * t, n / t / 1e6, nl, 1e3 * tl, tl > 0 ? nl / tl / 1e6 : 0);
    sched_free(l);
    sched_free(s);
    return t / (double)n;
}

int main(void) {
    bench_print_machine();
    printf("simulator throughput (best of 3; unit costs, latency and bandwidth set)\n");
    double small = bench_one("1f1b", 8, 64, 0);
    bench_one("1f1b", 16, 256, 0);
    double big = bench_one("1f1b", 64, 1024, 0);
    bench_one("interleaved-1f1b", 16, 256, 2);
    bench_one("interleaved-1f1b", 64, 1024, 2);
    bench_one("zb-h2", 64, 1024, 0);
    if (small > 0 && big > 0)
        printf("time per action, 1f1b 64x1024 over 8x64: %.2f (1.0 = linear in actions; cache misses and page\n"
               "faults on the larger arrays push it above 1)\n", big / small);
    return 0;
}
