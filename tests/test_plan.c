/* Tests of the planner: the exact split against dynamic programming, the cost model against the
 * model's own act sizes, the search against brute force over every layout, a twice-as-fast
 * device, memory caps under 1f1b (uneven split, recomputation, advice), cluster / costs / plan
 * files (good and bad), and profiling on a tiny model. Run from the repo root. */
#include "model/gpt.h"
#include "plan/plan.h"
#include "test.h"
#include "util/pt.h"
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define SAME_TIME 1e-9      /* two simulated times of one layout differ only by float rounding */
#define BIG_MEMORY 1e15     /* a cap nothing reaches */
#define JSON_DIGITS 1e-14   /* cJSON prints 15 significant digits when they read back within an epsilon */
#define SUM_ORDER 1e-12     /* sums of the same terms in another order (prefix sums vs a loop) */

static gpt_config small_cfg(int L, int C, int NH, int V, int maxT) {
    return (gpt_config){ .n_layer = L, .n_head = NH, .n_embd = C, .vocab_size = V, .n_positions = maxT };
}

/* ---- exact split ------------------------------------------------------------------------------ */
/* Recomputes the largest stage time of a split and checks its memory; -1 when it breaks a cap. */
static double split_cost(const plan_chain *c, const int *first) {
    double worst = 0;
    for (int k = 0; k < c->K; k++) {
        double w = 0, mf = 0, ma = 0;
        if (first[k + 1] <= first[k]) return -1;
        for (int i = first[k]; i < first[k + 1]; i++) { w += c->work[i]; mf += c->mem_fixed[i]; ma += c->mem_act[i]; }
        if (c->cap[k] > 0 && mf + c->inflight[k] * ma > c->cap[k] * (1 + SUM_ORDER)) return -1;
        double x = 0;
        for (int i = first[k]; c->extra && i < first[k + 1]; i++) x += c->extra[k * c->n + i];
        worst = fmax(worst, w / c->speed[k] + x);
    }
    return worst;
}

static void test_split_vs_dp(void) {
    pt_rng rng;
    pt_rng_seed(&rng, 7);
    int agree = 0, feasible = 0, valid = 0, cases = 300;
    for (int t = 0; t < cases; t++) {
        int K = 1 + (int)(pt_rng_next(&rng) % 5), n = K + (int)(pt_rng_next(&rng) % 9);
        double work[16], mf[16], ma[16], speed[8], cap[8], held[8], extra[8 * 16];
        for (int i = 0; i < n; i++) { work[i] = pt_rng_uniform(&rng); mf[i] = pt_rng_uniform(&rng); ma[i] = pt_rng_uniform(&rng); }
        for (int k = 0; k < K; k++) {
            speed[k] = 0.5 + 2 * pt_rng_uniform(&rng);
            held[k] = K - k;
            cap[k] = t % 3 == 0 ? 0 : 1 + 6 * pt_rng_uniform(&rng);
        }
        for (int i = 0; i < K * n; i++) extra[i] = 0.3 * pt_rng_uniform(&rng);   /* per-stage TP time */
        plan_chain c = { n, K, work, mf, ma, speed, cap, held, NULL, t % 2 ? extra : NULL };
        int f1[9], f2[9];
        double b1 = -1, b2 = -1;
        int r1 = plan_split(&c, f1, &b1), r2 = plan_split_dp(&c, f2, &b2);
        agree += r1 == r2 && (r1 < 0 || b1 == b2);
        if (r1 == 0) { feasible++; valid += test_relerr(split_cost(&c, f1), b1, 1e-30) < SUM_ORDER; }
    }
    CHECK("plan_split_equals_dp", agree == cases, "%d of %d random chains agree", agree, cases);
    CHECK("plan_split_result_valid", valid == feasible && feasible > cases / 4,
          "%d of %d feasible splits achieve their bottleneck within caps", valid, feasible);
}

/* ---- cost model ------------------------------------------------------------------------------- */
static void test_cost_model_matches_model(void) {
    gpt_config cfg = small_cfg(2, 32, 4, 64, 16);
    gpt_model m;
    memset(&m, 0, sizeof m);
    if (gpt_init(&m, &cfg) < 0) { CHECK("plan_cost_act_bytes", 0, "gpt_init: %s", pt_err()); return; }
    const int layer[PLAN_N_KINDS] = { 0, 1, 3 };
    int ok_act = 1, ok_par = 1;
    for (int k = 0; k < PLAN_N_KINDS; k++) {
        plan_layer_cost c;
        plan_layer_model(&cfg, k, 3, 11, 1, &c);
        size_t off, cnt;
        gpt_layer_param_span(&m, layer[k], &off, &cnt);
        double want_par = 4.0 * cnt + (k == PLAN_HEAD ? 4.0 * cfg.vocab_size * cfg.n_embd : 0);
        if (c.act_bytes != 4.0 * gpt_layer_act_floats(&m, layer[k], 3, 11)) ok_act = 0;
        if (c.param_bytes != want_par) ok_par = 0;
    }
    CHECK("plan_cost_act_bytes", ok_act, "act_bytes differ from gpt_layer_act_floats * 4");
    CHECK("plan_cost_param_bytes", ok_par, "param_bytes differ from gpt_layer_param_span (head: + wte copy)");
    plan_layer_cost b;
    plan_layer_model(&cfg, PLAN_BLOCK, 2, 16, 1, &b);
    double per_step = 0;
    for (int ph = 0; ph < PLAN_N_PHASES; ph++) per_step += b.flops[ph];
    double want = 6.0 * (12.0 * 32 * 32) * 32 + 6.0 * 2 * 16 * 16 * 32;   /* 6*params*N + 6*B*T*T*C */
    CHECK("plan_cost_block_flops", fabs(per_step - want) < 1e-6 * want, "F+B+W %g, want %g", per_step, want);
    gpt_free(&m);
}

/* ---- brute force ------------------------------------------------------------------------------ */
typedef struct { const char *name; int v; } bf_sched;
static const bf_sched BF_SCHEDS[] = { {"gpipe", 1}, {"1f1b", 1}, {"interleaved-1f1b", 2}, {"interleaved-1f1b", 4},
                                      {"zb-h1", 1}, {"zb-h2", 1}, {"zb-v", 2} };

/* Every split of L blocks into K >= 1-block chunks, scored by plan_evaluate; keeps the minimum. */
static void bf_splits(const gpt_config *cfg, const plan_cluster *k, plan_layout *p, int at, int left, double *best) {
    if (at == p->K - 1) {
        p->split[at] = left;
        if (plan_evaluate(cfg, k, NULL, p) == 0 && p->step_time < *best) {
            *best = p->step_time;
            if (getenv("BF_DEBUG")) {
                char s[64];
                printf("# bf best %.9g: tp=%d D=%d P=%d B=%d M=%d %s v=%d rc=%d split %s dev0 %d\n", p->step_time, p->tp, p->D, p->P,
                       p->mb_size, p->M, p->schedule, p->chunks, p->recompute, plan_layout_split_str(p, s, sizeof s), p->devices[1]);
            }
        }
        return;
    }
    for (int b = 1; b <= left - (p->K - 1 - at); b++) {
        p->split[at] = b;
        bf_splits(cfg, k, p, at + 1, left - b, best);
    }
}

/* Every layout of one (tp, D): placement (node; mixed = one device of each class per pipeline
 * when given, at tp 1 and D = 2), microbatch size, schedule, recomputation (none, whole-stage,
 * communication-free at tp >= 2), TP overlap (tp >= 2, B >= 2) and split. */
static void bf_layouts(const gpt_config *cfg, const plan_cluster *k, long G, int T, const int *mixed2, int tp, int D,
                       double *best) {
    int P = k->n_devices / tp / D;
    for (int pl = 0; pl < (mixed2 && D == 2 && tp == 1 ? 2 : 1); pl++)
        for (int B = 1; B <= G / D; B *= 2) {
            if ((G / D) % B) continue;
            for (size_t s = 0; s < sizeof BF_SCHEDS / sizeof BF_SCHEDS[0]; s++)
                for (int mode = 0; mode < 6; mode++) {
                    int K = P * BF_SCHEDS[s].v, rc = mode % 3;
                    bool ov = mode >= 3;
                    if (K > cfg->n_layer || (tp == 1 && (rc == 2 || ov)) || (ov && B == 1)) continue;
                    int split[64], dev[64];
                    for (int i = 0; i < k->n_devices; i++) dev[i] = pl ? mixed2[i] : i;
                    plan_layout p = { .P = P, .D = D, .tp = tp, .M = (int)(G / D / B), .mb_size = B, .T = T,
                                      .chunks = BF_SCHEDS[s].v, .K = K, .recompute = rc == 1, .tp_recompute = rc == 2,
                                      .tp_overlap = ov, .split = split, .devices = dev };
                    snprintf(p.schedule, sizeof p.schedule, "%s", BF_SCHEDS[s].name);
                    bf_splits(cfg, k, &p, 0, cfg->n_layer, best);
                    p.split = NULL; p.devices = NULL;
                    plan_layout_free(&p);
                }
        }
}

/* Brute force over tp (dividing n_head and the devices, its groups inside nodes) and D, then
 * bf_layouts; memory unlimited. */
static double brute_force(const gpt_config *cfg, const plan_cluster *k, long G, int T, const int *mixed2) {
    double best = INFINITY;
    for (int tp = 1; tp <= k->n_devices; tp++) {
        if (cfg->n_head % tp || k->n_devices % tp || !plan_cluster_tp_fits_nodes(k, tp)) continue;
        for (int D = 1; D <= k->n_devices / tp; D++)
            if ((k->n_devices / tp) % D == 0 && G % D == 0) bf_layouts(cfg, k, G, T, mixed2, tp, D, &best);
    }
    return best;
}

static double planner_best(const gpt_config *cfg, const plan_cluster *k, long G, int T, const char *const *scheds,
                           plan_layout *copy) {
    plan_opts o = { .global_batch = G, .T = T, .top = 1, .max_sims = 1000000, .schedules = scheds };
    plan_result r;
    if (plan_search(cfg, k, &o, &r) < 0 || r.n_best < 1) { plan_result_free(&r); return -1; }
    double t = r.best[0].step_time;
    if (copy) { *copy = r.best[0]; r.n_best = 0; }
    plan_result_free(&r);
    return t;
}

static const char *HOMO4 =
    "{\"nodes\":[{\"devices\":{\"count\":4,\"speed\":1,\"memory\":1e15},\"link\":{\"bandwidth\":1e9,\"latency\":1e-5}}],"
    "\"reference_flops\":1e9}";
static const char *HETERO4 =
    "{\"nodes\":[{\"devices\":{\"count\":2,\"name\":\"fast\",\"speed\":2,\"memory\":1e15},\"link\":{\"bandwidth\":1e9,\"latency\":1e-5}},"
    "{\"devices\":{\"count\":2,\"name\":\"slow\",\"speed\":1,\"memory\":1e15},\"link\":{\"bandwidth\":1e9,\"latency\":1e-5}}],"
    "\"network\":{\"bandwidth\":1e8,\"latency\":1e-4},\"reference_flops\":1e9}";

static void test_brute_force(const char *name, const char *cluster, const int *mixed2) {
    gpt_config cfg = small_cfg(6, 64, 4, 128, 32);
    plan_cluster k;
    if (plan_cluster_parse(&k, cluster, name) < 0) { CHECK(name, 0, "cluster: %s", pt_err()); return; }
    double bf = brute_force(&cfg, &k, 8, 16, mixed2), pl = planner_best(&cfg, &k, 8, 16, NULL, NULL);
    CHECK(name, pl > 0 && test_relerr(pl, bf, 1e-30) < SAME_TIME, "planner %.9g s, brute force %.9g s", pl, bf);
    plan_cluster_free(&k);
}

/* ---- one device twice as fast ----------------------------------------------------------------- */
static const char *FAST_SLOW =
    "{\"nodes\":[{\"devices\":{\"count\":1,\"name\":\"fast\",\"speed\":2,\"memory\":1e15},\"link\":{\"bandwidth\":1e10,\"latency\":1e-6}},"
    "{\"devices\":{\"count\":1,\"name\":\"slow\",\"speed\":1,\"memory\":1e15},\"link\":{\"bandwidth\":1e10,\"latency\":1e-6}}],"
    "\"network\":{\"bandwidth\":1e10,\"latency\":1e-6},\"reference_flops\":1e9}";

static void test_twice_as_fast(void) {
    gpt_config cfg = small_cfg(12, 64, 4, 128, 32);
    plan_cluster k;
    plan_layout best;
    if (plan_cluster_parse(&k, FAST_SLOW, "fast-slow") < 0) { CHECK("plan_fast_device", 0, "%s", pt_err()); return; }
    const char *only_1f1b[] = { "1f1b", NULL };
    if (planner_best(&cfg, &k, 16, 16, only_1f1b, &best) < 0) { CHECK("plan_fast_device", 0, "no plan: %s", pt_err()); return; }
    double ratio = best.P == 2 ? (double)best.split[0] / best.split[1] : 0;
    CHECK("plan_fast_device_gets_twice_the_work", best.P == 2 && ratio >= 1.5 && ratio <= 2.5,
          "P=%d split %d,%d (want about 2:1 on the fast device first)", best.P, best.split[0], best.P == 2 ? best.split[1] : 0);
    double predicted = best.step_time;
    int even[2] = { 6, 6 }, *kept = best.split;
    best.split = even;
    int rc = plan_evaluate(&cfg, &k, NULL, &best);
    double t_even = best.step_time;
    best.split = kept;
    rc |= plan_evaluate(&cfg, &k, NULL, &best);
    CHECK("plan_fast_device_prediction_is_the_simulators", rc == 0 && test_relerr(best.step_time, predicted, 1e-30) < SAME_TIME,
          "planner said %.9g, plan_evaluate says %.9g", predicted, best.step_time);
    /* the even split's slow stage takes 6 blocks + head where the planned one takes 4 + head */
    CHECK("plan_fast_device_beats_even_split", rc == 0 && t_even > 1.25 * predicted,
          "even split %.6g s vs planned %.6g s (simulated)", t_even, predicted);
    printf("# twice-as-fast: planned split %d,%d %.6g s, even 6,6 %.6g s (%.2fx)\n", best.split[0], best.split[1],
           predicted, t_even, t_even / predicted);
    plan_layout_free(&best);
    plan_cluster_free(&k);
}

/* ---- memory ----------------------------------------------------------------------------------- */
static int cluster_with_memory(plan_cluster *k, double mem) {
    char text[512];
    snprintf(text, sizeof text, "{\"nodes\":[{\"devices\":{\"count\":4,\"speed\":1,\"memory\":%.17g},"
             "\"link\":{\"bandwidth\":1e10,\"latency\":1e-6}}],\"reference_flops\":1e9}", mem);
    return plan_cluster_parse(k, text, "mem-cluster");
}

static double max_stage_mem(const plan_layout *p) {
    double m = 0;
    for (int i = 0; i < p->K; i++) m = fmax(m, p->stage_mem[i]);
    return m;
}

static void test_memory(void) {
    gpt_config cfg = small_cfg(8, 64, 4, 128, 128);
    const char *only_1f1b[] = { "1f1b", NULL };
    plan_cluster k;
    cluster_with_memory(&k, BIG_MEMORY);
    int split[4] = { 2, 2, 2, 2 };
    plan_layout even = { .P = 4, .D = 1, .M = 7, .mb_size = 1, .T = 128, .chunks = 1, .K = 4, .split = split };
    snprintf(even.schedule, sizeof even.schedule, "1f1b");
    int rc = plan_evaluate(&cfg, &k, NULL, &even);
    double m0 = rc == 0 ? even.stage_mem[0] : 0;
    CHECK("plan_memory_stage0_holds_most", rc == 0 && even.stage_inflight[0] == 4 && m0 > even.stage_mem[3],
          "1f1b P=4: stage 0 holds %d microbatches, %g bytes (stage 3 %g)", rc ? -1 : even.stage_inflight[0], m0,
          rc ? 0 : even.stage_mem[3]);
    plan_cluster_free(&k);
    double cap = 0.9 * m0;   /* the even split's stage 0 overflows */
    cluster_with_memory(&k, cap);
    /* G = 7: D = 1, so P = 4 and 7 microbatches of 1 (as the even layout above) */
    plan_opts o = { .global_batch = 7, .T = 128, .top = 3, .schedules = only_1f1b, .no_recompute = true, .tp = 1 };
    plan_result r;
    rc = plan_search(&cfg, &k, &o, &r);
    int fits = rc == 0 && r.n_best > 0;
    for (int i = 0; fits && i < r.n_best; i++) fits = max_stage_mem(&r.best[i]) <= cap;
    CHECK("plan_memory_uneven_split_fits", fits && r.best[0].P == 4 && r.best[0].split[0] < 2,
          "every layout within %g bytes, stage 0 lighter (got %d layouts, P=%d, split[0]=%d)", cap, r.n_best,
          r.n_best ? r.best[0].P : 0, r.n_best ? r.best[0].split[0] : 0);
    plan_result_free(&r);
    plan_cluster_free(&k);
    cap = 0.45 * m0;         /* nothing fits without recomputation */
    cluster_with_memory(&k, cap);
    rc = plan_search(&cfg, &k, &o, &r);
    CHECK("plan_memory_infeasible_advice", rc == 0 && r.n_best == 0 && strstr(r.advice, "recomputation"),
          "n_best %d, advice '%s'", r.n_best, r.advice);
    plan_result_free(&r);
    o.no_recompute = false;
    rc = plan_search(&cfg, &k, &o, &r);
    CHECK("plan_memory_recompute_fits", rc == 0 && r.n_best > 0 && r.best[0].recompute && max_stage_mem(&r.best[0]) <= cap,
          "n_best %d, recompute %d, advice '%s'", r.n_best, r.n_best ? r.best[0].recompute : -1, r.advice);
    plan_result_free(&r);
    plan_cluster_free(&k);
    even.split = NULL;   /* the stack array above */
    plan_layout_free(&even);
}

/* ---- files ------------------------------------------------------------------------------------ */
static void expect_cluster_error(const char *name, const char *text, const char *want) {
    plan_cluster k;
    int rc = plan_cluster_parse(&k, text, "k.json");
    CHECK(name, rc < 0 && strstr(pt_err(), want), "rc %d, error '%s', want '%s'", rc, pt_err(), want);
    if (rc == 0) plan_cluster_free(&k);
}

#define LINK "\"link\":{\"bandwidth\":1e9,\"latency\":1e-6}"
static void test_cluster_errors(void) {
    expect_cluster_error("plan_cluster_bad_memory",
        "{\"nodes\":[{\"devices\":{\"count\":1,\"speed\":1,\"memory\":1},"LINK"},{\"devices\":{\"count\":1,\"speed\":1,\"memory\":1},"LINK"},"
        "{\"devices\":{\"count\":1,\"speed\":1,\"memory\":1},"LINK"},{\"devices\":{\"count\":1,\"speed\":1,\"memory\":-5},"LINK"}]}",
        "k.json: nodes[3].devices.memory must be a positive number");
    expect_cluster_error("plan_cluster_no_nodes", "{\"nodes\":[]}", "k.json: nodes must be a non-empty array");
    expect_cluster_error("plan_cluster_flops_and_speed",
        "{\"nodes\":[{\"devices\":{\"count\":1,\"speed\":1,\"flops\":1e12,\"memory\":1},"LINK"}]}",
        "nodes[0].devices needs exactly one of flops");
    expect_cluster_error("plan_cluster_bad_count",
        "{\"nodes\":[{\"devices\":{\"count\":2.5,\"speed\":1,\"memory\":1},"LINK"}]}", "nodes[0].devices.count must be a whole number");
    expect_cluster_error("plan_cluster_no_link", "{\"nodes\":[{\"devices\":{\"count\":1,\"speed\":1,\"memory\":1}}]}",
        "nodes[0].link must be an object");
    expect_cluster_error("plan_cluster_no_network",
        "{\"nodes\":[{\"repeat\":2,\"devices\":{\"count\":1,\"speed\":1,\"memory\":1},"LINK"}]}", "k.json: network must be an object");
    expect_cluster_error("plan_cluster_bad_efficiency",
        "{\"nodes\":[{\"devices\":{\"count\":1,\"flops\":1e12,\"efficiency\":2,\"memory\":1},"LINK"}]}",
        "nodes[0].devices.efficiency must be in (0, 1]");
    expect_cluster_error("plan_cluster_bad_latency",
        "{\"nodes\":[{\"devices\":{\"count\":1,\"speed\":1,\"memory\":1},\"link\":{\"bandwidth\":1e9,\"latency\":\"x\"}}]}",
        "nodes[0].link.latency must be a non-negative number");
    expect_cluster_error("plan_cluster_parse_error", "{\"nodes\": [", "k.json: JSON parse error");
}

static void test_examples(void) {
    plan_cluster k;
    int rc = plan_cluster_load(&k, "examples/cluster-hetero-1024.json");
    CHECK("plan_example_hetero_1024", rc == 0 && k.n_devices == 1024 && k.n_nodes == 128 && k.n_classes == 2,
          "rc %d (%s), %d devices, %d nodes, %d classes", rc, pt_err(), k.n_devices, k.n_nodes, k.n_classes);
    if (rc == 0) plan_cluster_free(&k);
    rc = plan_cluster_load(&k, "examples/cluster-8gpu.json");
    CHECK("plan_example_8gpu", rc == 0 && k.n_devices == 8 && k.n_nodes == 1, "rc %d (%s)", rc, pt_err());
    if (rc == 0) plan_cluster_free(&k);
    rc = plan_cluster_load(&k, "examples/cluster-local.json");
    CHECK("plan_example_local", rc == 0 && k.n_devices == 2, "rc %d (%s)", rc, pt_err());
    if (rc == 0) plan_cluster_free(&k);
}

static int write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

static void expect_costs_error(const char *name, const char *path, const char *text, const char *want) {
    plan_costs c;
    write_text(path, text);
    int rc = plan_costs_load(&c, path);
    CHECK(name, rc < 0 && strstr(pt_err(), want), "rc %d, error '%s', want '%s'", rc, pt_err(), want);
}

#define CFG "\"config\":{\"n_layer\":2,\"n_head\":2,\"n_embd\":8,\"vocab_size\":16,\"n_positions\":8}"
#define LAYER "{\"f\":1e-3,\"b\":1e-3,\"w\":1e-3}"
static void test_costs_errors(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/costs.json", dir);
    expect_costs_error("plan_costs_no_config", path, "{\"seq\":8,\"batches\":[]}", "config must be an object");
    expect_costs_error("plan_costs_bad_seq", path, "{"CFG",\"seq\":0,\"batches\":[]}", "seq must be a whole number >= 1");
    expect_costs_error("plan_costs_no_batches", path, "{"CFG",\"seq\":8}", "batches must be an array");
    expect_costs_error("plan_costs_bad_time", path,
        "{"CFG",\"seq\":8,\"batches\":[{\"batch\":1,\"layers\":{\"embedding\":"LAYER",\"block\":{\"f\":-1,\"b\":0,\"w\":0},\"head\":"LAYER"}}]}",
        "batches[0].layers.block.f must be a number of seconds >= 0");
    expect_costs_error("plan_costs_missing_head", path,
        "{"CFG",\"seq\":8,\"batches\":[{\"batch\":1,\"layers\":{\"embedding\":"LAYER",\"block\":"LAYER"}}]}",
        "batches[0].layers.head must be an object");
    expect_costs_error("plan_costs_bad_config", path,
        "{\"config\":{\"n_layer\":2},\"seq\":8,\"batches\":[]}", "config");
    expect_costs_error("plan_costs_bad_step", path,
        "{"CFG",\"seq\":8,\"step_per_param\":-1,\"batches\":[{\"batch\":1,\"layers\":{\"embedding\":"LAYER",\"block\":"LAYER",\"head\":"LAYER"}}]}",
        "step_per_param must be a number of seconds per parameter in [0, 1]");
    /* a file from before the step was profiled: no step term */
    plan_costs c;
    write_text(path, "{"CFG",\"seq\":8,\"batches\":[{\"batch\":1,\"layers\":{\"embedding\":"LAYER",\"block\":"LAYER",\"head\":"LAYER"}}]}");
    int rc = plan_costs_load(&c, path);
    CHECK("plan_costs_step_optional", rc == 0 && c.step_per_param == 0 && c.busy_cores == 0, "rc %d (%s), step %g, busy %d",
          rc, pt_err(), c.step_per_param, c.busy_cores);
}

/* ---- the optimizer step ----------------------------------------------------------------------- */
/* Costs of cfg at microbatch size B, sequence T: every layer's F, B, W 1 ms, the step per
 * parameter as given. */
static plan_costs flat_costs(const gpt_config *cfg, int B, int T, double step_per_param) {
    plan_costs c;
    memset(&c, 0, sizeof c);
    c.cfg = *cfg, c.T = T, c.repeats = 1, c.n_batch = 1, c.batch[0] = B, c.step_per_param = step_per_param;
    for (int k = 0; k < PLAN_N_KINDS; k++)
        for (int ph = 0; ph < PLAN_N_PHASES; ph++) c.sec[0][k][ph] = 1e-3;
    return c;
}

/* The step adds each rank's parameters times the profiled seconds per parameter after its last
 * backward: on one rank, exactly all of them; and the pruned search still finds what the
 * exhaustive one does with the term in its bounds. */
static void test_step_term(void) {
    gpt_config cfg = small_cfg(6, 64, 4, 128, 32);
    plan_cluster k;
    if (plan_cluster_parse(&k, HOMO4, "homo4") < 0) { CHECK("plan_step_term", 0, "cluster: %s", pt_err()); return; }
    const double per = 1e-8;   /* seconds per parameter: a visible share of a 1 ms-per-layer step */
    plan_costs none = flat_costs(&cfg, 2, 16, 0), step = flat_costs(&cfg, 2, 16, per);
    plan_layout p = { .P = 1, .D = 1, .M = 4, .mb_size = 2, .T = 16, .chunks = 1 };
    int split[1] = { cfg.n_layer };
    p.split = split;
    snprintf(p.schedule, sizeof p.schedule, "1f1b");
    int rc = plan_evaluate(&cfg, &k, &none, &p);
    double t0 = p.step_time;
    rc |= plan_evaluate(&cfg, &k, &step, &p);
    double params = 0;
    for (int kind = 0; kind < PLAN_N_KINDS; kind++) {
        plan_layer_cost lc;
        plan_layer_model(&cfg, kind, 2, 16, 1, &lc);
        params += lc.param_bytes / 4 * (kind == PLAN_BLOCK ? cfg.n_layer : 1);
    }
    CHECK("plan_step_term_one_rank", rc == 0 && test_relerr(p.step_time - t0, params * per, 1e-30) < SAME_TIME,
          "rc %d: step %.9g s without, %.9g s with, want %.9g s more", rc, t0, p.step_time, params * per);
    p.split = NULL;
    plan_layout_free(&p);
    plan_result pr, ex;
    plan_opts o = { .global_batch = 8, .T = 16, .top = 3, .costs = &step };
    rc = plan_search(&cfg, &k, &o, &pr);
    o.exhaustive = true;
    rc |= plan_search(&cfg, &k, &o, &ex);
    bool same = rc == 0 && pr.n_best == ex.n_best;
    for (int i = 0; same && i < pr.n_best; i++) same = pr.best[i].step_time == ex.best[i].step_time;
    CHECK("plan_step_term_pruned_as_exhaustive", same, "rc %d, %d vs %d layouts, best %.9g vs %.9g s", rc, pr.n_best,
          ex.n_best, pr.n_best ? pr.best[0].step_time : 0, ex.n_best ? ex.best[0].step_time : 0);
    plan_result_free(&pr);
    plan_result_free(&ex);
    plan_cluster_free(&k);
}

static void test_plan_file(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/plan.json", dir);
    int split[4] = { 3, 5, 4, 4 }, dev[8] = { 0, 1, 2, 3, 4, 5, 6, 7 };
    plan_layout p = { .P = 2, .D = 2, .M = 8, .mb_size = 4, .T = 64, .chunks = 2, .K = 4, .recompute = true,
                      .split = split, .devices = dev, .step_time = 1.5, .tokens_per_s = 1000, .bubble = 0.25 };
    snprintf(p.schedule, sizeof p.schedule, "interleaved-1f1b");
    snprintf(p.placement, sizeof p.placement, "node");
    plan_layout q;
    int rc = plan_write(&p, path) | plan_read(path, &q);
    char s[64];
    CHECK("plan_file_round_trip", rc == 0 && q.P == 2 && q.D == 2 && q.M == 8 && q.mb_size == 4 && q.T == 64 &&
          q.chunks == 2 && q.K == 4 && q.recompute && !strcmp(q.schedule, "interleaved-1f1b") &&
          !strcmp(plan_layout_split_str(&q, s, sizeof s), "3,5,4,4") && q.devices && q.devices[3] == 3 &&
          q.step_time == 1.5, "rc %d (%s)", rc, pt_err());
    if (rc == 0) plan_layout_free(&q);
    write_text(path, "{\"stages\":2,\"dp\":1,\"microbatches\":4,\"microbatch_size\":1,\"seq\":8,\"chunks\":1,"
                     "\"schedule\":\"1f1b\",\"split\":[1,2,3]}");
    rc = plan_read(path, &q);
    CHECK("plan_file_bad_split", rc < 0 && strstr(pt_err(), "split must be an array of 2 whole numbers"), "'%s'", pt_err());
    write_text(path, "{\"stages\":0}");
    rc = plan_read(path, &q);
    CHECK("plan_file_bad_stages", rc < 0 && strstr(pt_err(), "stages must be a whole number >= 1"), "'%s'", pt_err());
}

static void test_profile(const char *dir) {
    gpt_config cfg = small_cfg(2, 32, 2, 64, 16);
    int batch[2] = { 1, 2 };
    plan_costs c, d;
    int rc = plan_profile_run(&c, &cfg, batch, 2, 8, 3), pos = 1;
    for (int i = 0; rc == 0 && i < 2; i++)
        for (int ph = 0; ph < PLAN_N_PHASES; ph++) pos &= c.sec[i][PLAN_BLOCK][ph] > 0 && c.sec[i][PLAN_HEAD][ph] > 0;
    CHECK("plan_profile_runs", rc == 0 && pos && c.n_batch == 2, "rc %d (%s)", rc, pt_err());
    char path[512];
    snprintf(path, sizeof path, "%s/prof.json", dir);
    rc = rc || plan_costs_save(&c, path) || plan_costs_load(&d, path);
    CHECK("plan_profile_file_round_trip", rc == 0 && d.n_batch == 2 && d.batch[1] == 2 && d.T == 8 &&
          test_relerr(d.sec[1][PLAN_BLOCK][PLAN_W], c.sec[1][PLAN_BLOCK][PLAN_W], 1e-30) < JSON_DIGITS && d.cfg.n_embd == 32,
          "rc %d, %d sizes, batch[1] %d, T %d, W %.17g vs %.17g, C %d", rc, d.n_batch, d.batch[1], d.T,
          d.sec[1][PLAN_BLOCK][PLAN_W], c.sec[1][PLAN_BLOCK][PLAN_W], d.cfg.n_embd);
    CHECK("plan_profile_rate", rc == 0 && plan_costs_rate(&d, PLAN_BLOCK, PLAN_F, 2) > 0, "no rate");
    CHECK("plan_profile_step", rc == 0 && c.step_per_param > 0 && test_relerr(d.step_per_param, c.step_per_param, 1e-30) < JSON_DIGITS &&
          d.busy_cores == c.busy_cores && (sysconf(_SC_NPROCESSORS_ONLN) < 2 || c.busy_cores >= 1),
          "step %g s per parameter (read back %g), %d busy cores (read back %d), %ld online", c.step_per_param,
          d.step_per_param, c.busy_cores, d.busy_cores, sysconf(_SC_NPROCESSORS_ONLN));
}

int main(void) {
    char dir[] = "/tmp/test_plan.XXXXXX";
    if (!mkdtemp(dir)) { printf("FAIL plan_tmpdir: mkdtemp\n"); return 1; }
    test_split_vs_dp();
    test_cost_model_matches_model();
    test_brute_force("plan_equals_brute_force_homogeneous", HOMO4, NULL);
    const int mixed2[4] = { 0, 2, 1, 3 };   /* D = 2: each pipeline one fast, one slow device */
    test_brute_force("plan_equals_brute_force_heterogeneous", HETERO4, mixed2);
    test_twice_as_fast();
    test_memory();
    test_cluster_errors();
    test_examples();
    test_costs_errors(dir);
    test_step_term();
    test_plan_file(dir);
    test_profile(dir);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("# could not remove %s\n", dir);
    TEST_DONE();
}
