/* Sequence chunks priced (--seq-chunks in simulate and plan): the simulator runs a chunk
 * schedule's extra dependencies, gives chunk c of K the attention time (2c+1)/K of a unit's mean
 * and counts each microbatch's kept keys and values in a rank's memory; the planner's items are
 * a unit's (1/K of a microbatch's work, an act without attention probabilities) and its
 * evaluation of a long sequence holds less and runs no slower than 1f1b without chunks; plan
 * files keep seq_chunks; the search with --seq-chunks keeps to the schedules that run chunks. */
#include "model/gpt.h"
#include "plan/plan.h"
#include "sched/sched.h"
#include "sim/sim.h"
#include "test.h"
#include "test_tmpdir.h"
#include "util/pt.h"
#include <string.h>

#define TIME_TOL 1e-9    /* sums of a few doubles */

/* One rank, one microbatch of K chunks, F 1 a unit of which att attention: chunk c's F takes
 * 1 - att + att (2c+1)/K, their sum K; the peak holds K units and one microbatch's kv. */
static void test_sim_position_and_kv(void) {
    int K = 4;
    sched_params p = { .ranks = 1, .microbatches = 1, .seq_chunks = K };
    sched *s = sched_generate("1f1b", &p);
    sim_costs c;
    sim_costs_init(&c, 1, 1, 2, 0);
    sim_costs_seq_chunks(&c);
    c.att_f[0] = 0.5, c.att_b[0] = 1.0, c.act_bytes[0] = 10, c.kv_bytes[0] = 7;
    sim_result r;
    sim_opts o = { .iterations = 1 };
    int rc = s ? sim_run(s, &c, &o, &r) : -1;
    int bad = rc < 0;
    double sum = 0;
    for (int i = 0; !bad && i < r.tl.n; i++) {
        const tl_event *e = &r.tl.ev[i];
        if (e->act.kind != ACT_F) continue;
        double want = 1 - 0.5 + 0.5 * (2.0 * e->act.mb + 1) / K;
        bad |= fabs(e->end - e->start - want) > TIME_TOL;
        sum += e->end - e->start;
    }
    CHECK("sim_chunk_f_grows_with_position", !bad && fabs(sum - K) < TIME_TOL, "%s; F sum %g", rc ? pt_err() : "ran", sum);
    CHECK("sim_peak_counts_units_and_kv", !rc && r.peak_mb[0] == K && fabs(r.rank_peak_bytes[0] - (K * 10 + 7)) < TIME_TOL,
          "peak %d units, %g bytes (want %d, %d)", rc ? -1 : r.peak_mb[0], rc ? -1 : r.rank_peak_bytes[0], K, K * 10 + 7);
    CHECK("sim_iteration_is_every_unit", !rc && fabs(r.iteration_time - (K * 1 + K * 2)) < TIME_TOL,
          "iteration %g, want %d", rc ? -1 : r.iteration_time, 3 * K);
    if (!rc) sim_result_free(&r);
    sim_costs_free(&c);
    sched_free(s);
}

/* Two ranks, uniform units of 1/K a microbatch: seq1F1B's smaller units leave a smaller bubble
 * than 1F1B's (P - 1 units of warm-up and cool-down instead of P - 1 microbatches). */
static double sim_time(int K) {
    sched_params p = { .ranks = 2, .microbatches = 2, .seq_chunks = K };
    sched *s = sched_generate("1f1b", &p);
    sim_costs c;
    sim_costs_init(&c, 2, 1.0 / K, 2.0 / K, 0);
    sim_result r;
    sim_opts o = { .iterations = 1 };
    double t = s && sim_run(s, &c, &o, &r) == 0 ? r.iteration_time : -1;
    if (t >= 0) sim_result_free(&r);
    sim_costs_free(&c);
    sched_free(s);
    return t;
}

static void test_sim_bubble(void) {
    double t1 = sim_time(1), t4 = sim_time(4);
    printf("# 1f1b P 2 M 2, F 1 B 2 a microbatch: %g; in 4 chunks %g (ideal 6)\n", t1, t4);
    CHECK("sim_seq1f1b_smaller_bubble", t1 > 0 && t4 > 0 && t4 < t1 && t4 >= 6 - TIME_TOL, "%g vs %g: %s", t4, t1, pt_err());
}

static const gpt_config BENCH = { .n_layer = 4, .n_head = 4, .n_embd = 256, .vocab_size = 256, .n_positions = 4096 };
static const char *CLUSTER = "{\"nodes\": [{\"devices\": {\"count\": 2, \"speed\": 1.0, \"memory\": 8e9},"
                             " \"link\": {\"bandwidth\": 5e9, \"latency\": 5e-6}}], \"reference_flops\": 3e10}";

static int evaluate(plan_cluster *k, int K, plan_layout *p) {
    memset(p, 0, sizeof *p);
    *p = (plan_layout){ .P = 2, .D = 1, .M = 2, .mb_size = 1, .tp = 1, .T = 4096, .chunks = 1, .seq_chunks = K };
    snprintf(p->schedule, sizeof p->schedule, "1f1b");
    snprintf(p->placement, sizeof p->placement, "node");
    plan_layout_even_split(p, BENCH.n_layer);
    return plan_evaluate(&BENCH, k, NULL, p);
}

/* The bench model at T 4096 on 2 ranks: with 4 chunks stage 0 holds at most half the bytes of
 * 1f1b's activations (its fixed part aside) and the step is predicted no slower. */
static void test_plan_evaluate(void) {
    plan_cluster k;
    if (plan_cluster_parse(&k, CLUSTER, "test") < 0) { CHECK("plan_cluster", 0, "%s", pt_err()); return; }
    plan_layout a, b;
    int rc = evaluate(&k, 1, &a) < 0 || evaluate(&k, 4, &b) < 0;
    double fixed = 0;
    if (!rc) {   /* stage 0's memory without activations: the same in both */
        gpt_layer_cost c;
        gpt_kind_cost(GPT_LAYER_EMBED, &BENCH, 1, 4096, 1, 0, &c);
        fixed = c.param_bytes + c.grad_bytes + c.optim_bytes;
        gpt_kind_cost(GPT_LAYER_BLOCK, &BENCH, 1, 4096, 1, 0, &c);
        fixed += 2 * (c.param_bytes + c.grad_bytes + c.optim_bytes);
    }
    double ra = rc ? 0 : a.stage_mem[0] - fixed, rb = rc ? 0 : b.stage_mem[0] - fixed;
    printf("# plan, bench model T 4096 P 2 M 2: stage 0 activations %.3g -> %.3g bytes (%.2fx), step %.3g -> %.3g s\n",
           ra, rb, ra > 0 ? rb / ra : 0, rc ? 0 : a.step_time, rc ? 0 : b.step_time);
    CHECK("plan_chunks_half_the_activations", !rc && rb > 0 && rb <= 0.5 * ra, "%s; %g vs %g", rc ? pt_err() : "ran", rb, ra);
    CHECK("plan_chunks_no_slower", !rc && b.step_time <= a.step_time, "%g vs %g", rc ? 0 : b.step_time, rc ? 0 : a.step_time);
    CHECK("plan_chunks_units_in_flight", !rc && b.stage_inflight[0] == 2 + 4 - 1, "%d", rc ? -1 : b.stage_inflight[0]);
    /* a plan file keeps seq_chunks */
    tmpdir_make("seqchunk_plan");
    const char *path = tpath("plan.json");
    plan_layout back;
    memset(&back, 0, sizeof back);
    int io = rc ? -1 : plan_write(&b, path) < 0 || plan_read(path, &back) < 0 ? -1 : 0;
    CHECK("plan_file_keeps_seq_chunks", io == 0 && back.seq_chunks == 4, "%s; %d", io ? pt_err() : "ran", back.seq_chunks);
    plan_layout_free(&back);
    tmpdir_remove();
    /* the search with --seq-chunks: schedules that run chunks, every layout marked */
    plan_opts o = { .global_batch = 2, .T = 4096, .top = 3, .seq_chunks = 4, .max_sims = 40 };
    plan_result res;
    int sr = plan_search(&BENCH, &k, &o, &res);
    int ok = sr == 0 && res.n_best > 0;
    for (int i = 0; ok && i < res.n_best; i++)
        ok = res.best[i].seq_chunks == 4 && (!strcmp(res.best[i].schedule, "1f1b") || !strcmp(res.best[i].schedule, "zb-h1"));
    CHECK("plan_search_seq_chunks", ok, "%s; %d layouts, first %s", sr ? pt_err() : "ran", sr ? 0 : res.n_best,
          sr == 0 && res.n_best ? res.best[0].schedule : "-");
    if (sr == 0) plan_result_free(&res);
    plan_layout_free(&a);
    plan_layout_free(&b);
    plan_cluster_free(&k);
}

/* Two devices of 1 GB, no tensor parallelism or recomputation: the bench model at T 4096 does not
 * fit under 1f1b (P 2: stage 0 holds two microbatches' attention probabilities, about 1.5 GB;
 * P 1 x dp 2: one microbatch of all four blocks, as much), but does in 4 chunks. */
static void test_plan_fits_longer(void) {
    const char *small = "{\"nodes\": [{\"devices\": {\"count\": 2, \"speed\": 1.0, \"memory\": 1e9},"
                        " \"link\": {\"bandwidth\": 5e9, \"latency\": 5e-6}}], \"reference_flops\": 3e10}";
    plan_cluster k;
    if (plan_cluster_parse(&k, small, "test") < 0) { CHECK("plan_cluster_small", 0, "%s", pt_err()); return; }
    int n[2] = { -1, -1 };
    for (int i = 0; i < 2; i++) {
        const char *only[] = { "1f1b", NULL };
        plan_opts o = { .global_batch = 2, .T = 4096, .top = 1, .seq_chunks = i ? 4 : 0, .max_sims = 20,
                        .schedules = only, .no_recompute = true, .tp = 1 };
        plan_result r;
        if (plan_search(&BENCH, &k, &o, &r) == 0) { n[i] = r.n_best; plan_result_free(&r); }
    }
    CHECK("plan_chunks_fit_where_1f1b_does_not", n[0] == 0 && n[1] > 0, "1f1b %d layouts, --seq-chunks 4 %d: %s",
          n[0], n[1], pt_err());
    plan_cluster_free(&k);
}

int main(void) {
    (void)write_bytes;   /* test_tmpdir.h's, unused here */
    test_sim_position_and_kv();
    test_sim_bubble();
    test_plan_evaluate();
    test_plan_fits_longer();
    TEST_DONE();
}
