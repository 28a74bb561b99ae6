/* Pipelined runtime speed, side by side in one run (threads transport): (1) P=2 on 2 threads
 * versus P=1 on 1 thread, same model and global batch, 1f1b and zb-h1 with M=16: tokens/s ratio
 * (ideal about 1.9 on two free cores), median of repeated steps; (2) measured iteration time
 * versus the simulator's from F/B/W costs profiled in the same run; (3) runtime overhead: rank
 * time spent neither in an action nor waiting in one, per action. Not a test: nothing asserted.
 * Usage: bench_pipeline [steps] (default 6; the first is a warm-up and not counted). */
#include "model/gpt.h"
#include "run/run.h"
#include "sim/sim.h"
#include "bench_util.h"
#include "util/pt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BATCH = 32, SEQ = 64, M = 16 };
static const gpt_config CFG = { .n_layer = 4, .n_head = 4, .n_embd = 128, .vocab_size = 256,
                                .n_positions = 64 };

typedef struct { double tok_s, iter, sim_iter, bubble, sim_bubble, overhead_us; } bench_res;

/* Per action, the time between a rank's actions (its bookkeeping), over the last step. */
static double overhead_per_action(const timeline *tl, int R) {
    double total = 0;
    long n = 0;
    for (int r = 0; r < R; r++) {
        double t0 = 1e300, t1 = -1e300, inside = 0;
        long k = 0;
        for (int i = 0; i < tl->n; i++) {
            const tl_event *e = &tl->ev[i];
            if (e->rank != r) continue;
            if (e->ready < t0) t0 = e->ready;
            if (e->end > t1) t1 = e->end;
            inside += e->end - e->ready;
            k++;
        }
        if (k) { total += (t1 - t0) - inside; n += k; }
    }
    return n ? total / n : 0;
}

static int bench_one(const char *name, int P, const gpt_model *init, const int *tok, int steps,
                     bench_res *out) {
    run_opts o = { .P = P, .D = 1, .schedule = name, .M = M };
    run_plan pl;
    run_job *j = NULL;
    optim_config oc = optim_config_default();
    double *it = pt_calloc((size_t)steps, sizeof *it), *bub = pt_calloc((size_t)steps, sizeof *bub);
    int rc = run_plan_init(&pl, &o, &CFG, BATCH, SEQ);
    if (rc == 0) rc = run_job_init(&j, &pl, init, NULL, NULL);
    for (int t = 1; rc == 0 && t <= steps; t++) {
        run_stats st;
        double t0 = pt_now();
        rc = run_job_iteration(j, tok, tok + 1, &oc, t, &st);
        it[t - 1] = pt_now() - t0;
        bub[t - 1] = st.bubble;
    }
    if (rc == 0) {
        out->iter = pt_median(it + 1, steps - 1);
        out->bubble = pt_median(bub + 1, steps - 1);
        out->tok_s = BATCH * SEQ / out->iter;
        out->overhead_us = overhead_per_action(run_job_timeline(j), P) * 1e6;
        sim_costs c;
        sim_result r;
        sim_costs_init(&c, pl.s->n_stages, 0, 0, 0);
        run_job_profile(j, &c);
        sim_opts so = { .iterations = 1 };
        if (sim_run(pl.s, &c, &so, &r) == 0) {
            out->sim_iter = r.iteration_time;
            out->sim_bubble = r.bubble_fraction;
            sim_result_free(&r);
        }
        sim_costs_free(&c);
    }
    run_job_free(j);
    if (pl.s) run_plan_free(&pl);
    free(it);
    free(bub);
    return rc;
}

int main(int argc, char **argv) {
    int steps = argc > 1 ? atoi(argv[1]) : 6;
    if (steps < 2) steps = 2;
    gpt_model m;
    if (gpt_init(&m, &CFG) < 0) { fprintf(stderr, "bench_pipeline: %s\n", pt_err()); return 1; }
    gpt_init_random(&m, 1);
    int *tok = pt_malloc(sizeof(int) * (BATCH * SEQ + 1));
    pt_rng rng;
    pt_rng_seed(&rng, 3);
    for (int i = 0; i < BATCH * SEQ + 1; i++) tok[i] = (int)(pt_rng_next(&rng) % CFG.vocab_size);
    bench_print_machine();
    printf("model: %d layers, C=%d, vocab %d; batch %d x %d, M=%d; median of %d steps after a warm-up\n",
           CFG.n_layer, CFG.n_embd, CFG.vocab_size, BATCH, SEQ, M, steps - 1);
    const char *names[] = { "1f1b", "zb-h1" };
    enum { ROUNDS = 3 };     /* P=1 and P=2 alternate, so slow spells of the machine hit both */
    int status = 0;
    for (int k = 0; k < 2; k++) {
        bench_res one[ROUNDS], two[ROUNDS];
        double ratio[ROUNDS];
        int ok = 1;
        for (int i = 0; i < ROUNDS && ok; i++) {
            memset(&one[i], 0, sizeof one[i]);
            memset(&two[i], 0, sizeof two[i]);
            ok = bench_one(names[k], 1, &m, tok, steps, &one[i]) == 0 &&
                 bench_one(names[k], 2, &m, tok, steps, &two[i]) == 0;
            ratio[i] = ok ? two[i].tok_s / one[i].tok_s : 0;
        }
        if (!ok) { fprintf(stderr, "bench_pipeline: %s\n", pt_err()); status = 1; continue; }
        printf("%-6s P=2 vs P=1 tokens/s:", names[k]);
        for (int i = 0; i < ROUNDS; i++) printf(" %.2f", ratio[i]);
        printf(" | median %.2f (ideal ~1.9; P=1 %.0f tok/s)\n", pt_median(ratio, ROUNDS), one[0].tok_s);
        for (int i = 0; i < ROUNDS; i++)
            printf("%-6s P=2: measured %.1f ms bubble %.1f%% | simulated %.1f ms bubble %.1f%% | "
                   "measured/simulated %.2f | overhead %.1f us/action\n", names[k], two[i].iter * 1e3,
                   two[i].bubble * 100, two[i].sim_iter * 1e3, two[i].sim_bubble * 100,
                   two[i].sim_iter > 0 ? two[i].iter / two[i].sim_iter : 0, two[i].overhead_us);
    }
    free(tok);
    gpt_free(&m);
    return status;
}
