/* Tests of tensor parallelism and ZeRO-1 in the planner: a block's cost at tp 2 against the closed
 * form (half the compute, plus the ring all-reduces), the TP group's link (inside a node or over
 * the network), the search choosing tp > 1 when nothing fits at tp 1 and tp 1 when the TP link is
 * slow, plan files with tp and zero (round trip, and errors that name the numbers), and the AdamW
 * moments divided by D under zero 1. Run from the repo root. */
#include "plan/plan.h"
#include "plan_tp_util.h"
#include "test.h"
#include "util/pt.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* n_nodes nodes of `per` devices of 1 TFLOP/s (efficiency 1) and `mem` bytes; links as given. */
static int make_cluster(plan_cluster *k, int n_nodes, int per, double mem, double intra_bw, double intra_lat,
                        double net_bw, double net_lat) {
    char text[768];
    snprintf(text, sizeof text,
             "{\"nodes\":[{\"repeat\":%d,\"devices\":{\"count\":%d,\"flops\":1e12,\"efficiency\":1,\"memory\":%.17g},"
             "\"link\":{\"bandwidth\":%.17g,\"latency\":%.17g}}],\"network\":{\"bandwidth\":%.17g,\"latency\":%.17g}}",
             n_nodes, per, mem, intra_bw, intra_lat, net_bw, net_lat);
    if (plan_cluster_parse(k, text, "tp-cluster") == 0) return 0;
    printf("# cluster: %s\n", pt_err());
    return -1;
}

static plan_layout layout(int P, int D, int tp, int M, int B, int T, int *split) {
    plan_layout p = { .P = P, .D = D, .tp = tp, .M = M, .mb_size = B, .T = T, .chunks = 1, .K = P, .split = split };
    snprintf(p.schedule, sizeof p.schedule, "1f1b");
    return p;
}

/* ---- a block at tp 2: the closed form ---------------------------------------------------------- */
static void test_block_closed_form(void) {
    const int C = 64, T = 32, B = 2, N = B * T;
    const double rate = 1e12, bw = 1e11, lat = 1e-6;
    gpt_config cfg = small_cfg(3, C, 4, 128, T);
    plan_cluster k;
    if (make_cluster(&k, 1, 8, BIG_MEMORY, bw, lat, bw, lat) < 0) { CHECK("plan_tp_block_closed_form", 0, "cluster"); return; }
    int split[3] = { 1, 1, 1 };   /* chunk 1 holds one block and nothing else */
    plan_layout p = layout(3, 1, 2, 4, B, T, split);
    sim_costs c;
    sched *s = NULL;
    int rc = plan_sim_costs(&cfg, &k, NULL, &p, &c, &s);
    /* F and B: two all-reduces of an (N,C) fp32 tensor each, ring over 2 ranks; W none */
    double mm = 2.0 * 12 * C * C * N, att = 2.0 * N * T * C;
    double ar = 2.0 * (2 - 1) / 2 * (2 * 4.0 * N * C) / bw + 2 * 2.0 * (2 - 1) * lat;
    double f = (mm + att) / 2 / rate + ar, b = (mm + 2 * att) / 2 / rate + ar, w = mm / 2 / rate;
    CHECK("plan_tp_block_closed_form", rc == 0 && test_relerr(c.f[1], f, 1e-30) < SAME_SUM &&
          test_relerr(c.b[1], b, 1e-30) < SAME_SUM && test_relerr(c.w[1], w, 1e-30) < SAME_SUM &&
          test_relerr(c.tp_f[1], ar, 1e-30) < SAME_SUM && c.tp == 2,
          "rc %d: f %.9g (want %.9g), b %.9g (want %.9g), w %.9g (want %.9g), tp_f %.9g (want %.9g)", rc,
          rc ? 0 : c.f[1], f, rc ? 0 : c.b[1], b, rc ? 0 : c.w[1], w, rc ? 0 : c.tp_f[1], ar);
    plan_layer_cost one, two;
    plan_layer_model(&cfg, PLAN_BLOCK, B, T, 1, &one);
    plan_layer_model(&cfg, PLAN_BLOCK, B, T, 2, &two);
    int half = 1;
    for (int ph = 0; ph < PLAN_N_PHASES; ph++) half &= two.flops[ph] == one.flops[ph] / 2;
    CHECK("plan_tp_block_half_the_flops", half && plan_tp_time(&two, PLAN_W, 2, bw, lat) == 0 &&
          plan_tp_time(&one, PLAN_F, 1, bw, lat) == 0, "per-rank FLOPs at tp 2 are not half of tp 1's, or W / tp 1 has TP time");
    if (rc == 0) { sim_costs_free(&c); sched_free(s); }
    plan_cluster_free(&k);
}

/* ---- the TP group's link ----------------------------------------------------------------------- */
static void test_link_choice(void) {
    const double intra_bw = 1e11, intra_lat = 1e-6, net_bw = 1e9, net_lat = 1e-5;
    gpt_config cfg = small_cfg(2, 64, 4, 128, 16);
    plan_cluster k;
    if (make_cluster(&k, 2, 4, BIG_MEMORY, intra_bw, intra_lat, net_bw, net_lat) < 0) { CHECK("plan_tp_link", 0, "cluster"); return; }
    int inside[4] = { 4, 5, 6, 7 }, across[4] = { 2, 3, 4, 5 };
    double bw[2], lat[2];
    plan_cluster_group_link(&k, inside, 4, &bw[0], &lat[0]);
    plan_cluster_group_link(&k, across, 4, &bw[1], &lat[1]);
    CHECK("plan_tp_link_intra_vs_inter", bw[0] == intra_bw && lat[0] == intra_lat && bw[1] == net_bw && lat[1] == net_lat,
          "inside a node %g B/s %g s, across %g B/s %g s", bw[0], lat[0], bw[1], lat[1]);
    CHECK("plan_tp_fits_nodes", plan_cluster_tp_fits_nodes(&k, 4) && plan_cluster_tp_fits_nodes(&k, 2) &&
          !plan_cluster_tp_fits_nodes(&k, 8) && !plan_cluster_tp_fits_nodes(&k, 3), "4 and 2 fit nodes of 4, 8 and 3 do not");
    /* the same one-rank layout on either group: the TP time is the formula on that link */
    int split[1] = { 2 };
    double t[2];
    for (int i = 0; i < 2; i++) {
        plan_layout p = layout(1, 1, 4, 1, 1, 16, split);
        p.devices = i ? across : inside;
        sim_costs c;
        sched *s = NULL;
        t[i] = plan_sim_costs(&cfg, &k, NULL, &p, &c, &s) == 0 ? c.tp_b[0] : -1;
        if (t[i] >= 0) { sim_costs_free(&c); sched_free(s); }
    }
    /* B: two all-reduces of (N,C) per block, two blocks, and the embedding's none, the head's one */
    double n = 16.0 * 64, bytes = 2 * 2 * 4.0 * n + 4.0 * n, coll = 2 * 2 + 1;
    double want[2] = { 2.0 * 3 / 4 * bytes / intra_bw + coll * 2 * 3 * intra_lat,
                       2.0 * 3 / 4 * bytes / net_bw + coll * 2 * 3 * net_lat };
    CHECK("plan_tp_link_in_the_costs", test_relerr(t[0], want[0], 1e-30) < SAME_SUM &&
          test_relerr(t[1], want[1], 1e-30) < SAME_SUM, "TP time in B: inside %.9g (want %.9g), across %.9g (want %.9g)",
          t[0], want[0], t[1], want[1]);
    plan_cluster_free(&k);
}

/* ---- the search -------------------------------------------------------------------------------- */
/* A large vocabulary: the embedding's wte and the head's copy sit whole on one pipeline stage each
 * (pipelining cannot split them), TP splits their rows. */
static gpt_config big_vocab(void) { return small_cfg(4, 64, 4, 8192, 16); }

static int search(const gpt_config *cfg, const plan_cluster *k, long G, int tp, int zero, plan_result *r) {
    plan_opts o = { .global_batch = G, .T = 16, .top = 1, .tp = tp, .zero = zero, .no_recompute = true };
    return plan_search(cfg, k, &o, r);
}

static void test_search_memory(void) {
    gpt_config cfg = big_vocab();
    double wte = 4.0 * cfg.vocab_size * cfg.n_embd;   /* bytes of one fp32 copy */
    plan_cluster k;
    /* the embedding's stage holds wte, its gradient and its moments: 4 copies; half that at tp 2 */
    if (make_cluster(&k, 1, 4, 2.6 * wte, 1e11, 1e-6, 1e11, 1e-6) < 0) { CHECK("plan_tp_when_too_big", 0, "cluster"); return; }
    plan_result r;
    int rc = search(&cfg, &k, 4, 1, 0, &r);
    CHECK("plan_tp1_does_not_fit", rc == 0 && r.n_best == 0, "rc %d, %d layouts at tp 1 within %g bytes", rc, r.n_best,
          2.6 * wte);
    if (rc == 0) plan_result_free(&r);
    rc = search(&cfg, &k, 4, 0, 0, &r);
    CHECK("plan_tp_when_too_big", rc == 0 && r.n_best == 1 && r.best[0].tp > 1,
          "rc %d, %d layouts, tp %d (want > 1: nothing fits at tp 1)", rc, r.n_best, r.n_best ? r.best[0].tp : 0);
    if (rc == 0) plan_result_free(&r);
    plan_cluster_free(&k);
}

/* G = 1: no data parallelism. A fast TP link: TP splits the work of one microbatch, where a
 * pipeline of one microbatch runs its stages one after another; a slow one: tp 1. */
static void test_search_link_cost(void) {
    gpt_config cfg = big_vocab();
    const double fast[2] = { 1e15, 0 }, slow[2] = { 1e4, 1e-2 };
    int chosen[2] = { 0, 0 };
    for (int i = 0; i < 2; i++) {
        const double *l = i ? slow : fast;
        plan_cluster k;
        if (make_cluster(&k, 1, 4, BIG_MEMORY, l[0], l[1], l[0], l[1]) < 0) continue;
        plan_result r;
        if (search(&cfg, &k, 1, 0, 0, &r) == 0 && r.n_best) chosen[i] = r.best[0].tp;
        plan_result_free(&r);
        plan_cluster_free(&k);
    }
    CHECK("plan_tp_with_a_fast_link", chosen[0] == 4, "tp %d on a fast link (want 4: one microbatch, no pipeline overlap)",
          chosen[0]);
    CHECK("plan_tp1_with_a_slow_link", chosen[1] == 1, "tp %d on a slow link (want 1)", chosen[1]);
}

static void test_search_errors(void) {
    gpt_config cfg = big_vocab();
    plan_cluster k;
    if (make_cluster(&k, 1, 4, BIG_MEMORY, 1e11, 1e-6, 1e11, 1e-6) < 0) return;
    plan_result r;
    int rc = search(&cfg, &k, 4, 3, 0, &r);
    CHECK("plan_tp_must_divide_heads", rc < 0 && strstr(pt_err(), "--tp 3 does not divide n_head 4"), "rc %d, '%s'", rc, pt_err());
    cfg.n_head = 8;
    rc = search(&cfg, &k, 4, 8, 0, &r);
    CHECK("plan_tp_must_divide_devices", rc < 0 && strstr(pt_err(), "--tp 8 does not divide the cluster's 4 devices"),
          "rc %d, '%s'", rc, pt_err());
    rc = search(&cfg, &k, 4, 0, 2, &r);
    CHECK("plan_zero_0_or_1", rc < 0 && strstr(pt_err(), "--zero 2"), "rc %d, '%s'", rc, pt_err());
    plan_cluster_free(&k);
}

/* ---- ZeRO-1 ------------------------------------------------------------------------------------ */
/* One block on 4 devices: P = 1, so D = 4 at tp 1; only the moments can shrink. */
static void test_zero(void) {
    gpt_config cfg = small_cfg(1, 64, 4, 256, 16);
    plan_cluster k;
    if (make_cluster(&k, 1, 4, BIG_MEMORY, 1e11, 1e-6, 1e11, 1e-6) < 0) { CHECK("plan_zero1_memory", 0, "cluster"); return; }
    int split[1] = { 1 };
    double mem[2] = { 0, 0 };
    for (int z = 0; z < 2; z++) {
        plan_layout p = layout(1, 4, 1, 1, 1, 16, split);
        p.zero = z;
        if (plan_evaluate(&cfg, &k, NULL, &p) == 0) mem[z] = p.stage_mem[0];
        p.split = NULL;
        plan_layout_free(&p);
    }
    double optim = 0;   /* AdamW bytes of the one chunk: embedding, blocks, head's ln_f */
    for (int kind = 0; kind < PLAN_N_KINDS; kind++) {
        plan_layer_cost c;
        plan_layer_model(&cfg, kind, 1, 16, 1, &c);
        optim += c.optim_bytes * (kind == PLAN_BLOCK ? cfg.n_layer : 1);
    }
    CHECK("plan_zero1_memory", mem[0] > 0 && test_relerr(mem[0] - mem[1], optim * 3 / 4, 1e-30) < SAME_SUM,
          "zero 0 %.17g, zero 1 %.17g bytes: saved %.17g, want 3/4 of %.17g (moments over D = 4)", mem[0], mem[1],
          mem[0] - mem[1], optim);
    plan_cluster_free(&k);
    /* a cap between the two: only zero 1 fits */
    if (make_cluster(&k, 1, 4, (mem[0] + mem[1]) / 2, 1e11, 1e-6, 1e11, 1e-6) < 0) return;
    plan_result r0, r1;
    int rc = search(&cfg, &k, 4, 1, 0, &r0) | search(&cfg, &k, 4, 1, 1, &r1);
    CHECK("plan_zero1_fits_where_zero0_does_not", rc == 0 && r1.n_best == 1 && r1.best[0].zero == 1 &&
          r1.best[0].D == 4 && r1.best[0].stage_mem[0] <= (mem[0] + mem[1]) / 2 && r0.n_best == 0,
          "rc %d; zero 0: %d layouts; zero 1: %d layouts (D %d)", rc, r0.n_best, r1.n_best, r1.n_best ? r1.best[0].D : 0);
    if (rc == 0) { plan_result_free(&r0); plan_result_free(&r1); }
    plan_cluster_free(&k);
}

/* ---- plan files -------------------------------------------------------------------------------- */
static void test_plan_file(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/plan.json", dir);
    int split[2] = { 1, 3 }, dev[8] = { 0, 1, 2, 3, 4, 5, 6, 7 };
    plan_layout p = layout(2, 2, 2, 4, 1, 16, split), q;
    p.zero = 1;
    p.devices = dev;
    snprintf(p.placement, sizeof p.placement, "node");
    int rc = plan_write(&p, path) | plan_read(path, &q);
    CHECK("plan_file_tp_round_trip", rc == 0 && q.tp == 2 && q.zero == 1 && q.P == 2 && q.D == 2 && q.devices &&
          q.devices[7] == 7, "rc %d (%s), tp %d, zero %d", rc, pt_err(), rc ? 0 : q.tp, rc ? 0 : q.zero);
    if (rc == 0) plan_layout_free(&q);
    write_text(path, "{\"stages\":2,\"dp\":1,\"microbatches\":4,\"microbatch_size\":1,\"seq\":16,\"chunks\":1,"
                     "\"schedule\":\"1f1b\",\"split\":[2,2]}");
    rc = plan_read(path, &q);
    CHECK("plan_file_without_tp_is_tp1", rc == 0 && q.tp == 1 && q.zero == 0, "rc %d (%s)", rc, pt_err());
    if (rc == 0) plan_layout_free(&q);
    write_text(path, "{\"stages\":2,\"dp\":1,\"tp\":0,\"microbatches\":4,\"microbatch_size\":1,\"seq\":16,\"chunks\":1,"
                     "\"schedule\":\"1f1b\",\"split\":[2,2]}");
    rc = plan_read(path, &q);
    CHECK("plan_file_bad_tp", rc < 0 && strstr(pt_err(), "tp must be a whole number >= 1"), "'%s'", pt_err());
    /* a tp the cluster cannot hold, one that does not divide n_head: plan_evaluate names the numbers */
    gpt_config cfg = big_vocab();
    plan_cluster k;
    if (make_cluster(&k, 1, 4, BIG_MEMORY, 1e11, 1e-6, 1e11, 1e-6) < 0) return;
    int s2[2] = { 2, 2 };
    plan_layout big = layout(2, 1, 4, 4, 1, 16, s2), odd = layout(1, 1, 3, 4, 1, 16, s2);
    odd.split[0] = 4;
    rc = plan_evaluate(&cfg, &k, NULL, &big);
    CHECK("plan_tp_cluster_cannot_hold", rc < 0 && strstr(pt_err(), "tp 4 x dp 1 x stages 2 = 8 devices, the cluster has 4"),
          "rc %d, '%s'", rc, pt_err());
    rc = plan_evaluate(&cfg, &k, NULL, &odd);
    CHECK("plan_tp_not_dividing_heads", rc < 0 && strstr(pt_err(), "tp 3 does not divide n_head 4"), "rc %d, '%s'", rc, pt_err());
    plan_cluster_free(&k);
}

int main(void) {
    char dir[] = "/tmp/test_plan_tp.XXXXXX";
    if (!mkdtemp(dir)) { printf("FAIL plan_tp_tmpdir: mkdtemp\n"); return 1; }
    CHECK("sim_allreduce_ring", sim_allreduce_time(4, 1000, 2, 100, 0.5) == 2.0 * 3 / 4 * 1000 / 100 + 2 * 2 * 3 * 0.5 &&
          sim_allreduce_time(1, 1000, 2, 100, 0.5) == 0, "ring formula");
    test_block_closed_form();
    test_link_choice();
    test_search_memory();
    test_search_link_cost();
    test_search_errors();
    test_zero();
    test_plan_file(dir);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("# could not remove %s\n", dir);
    TEST_DONE();
}
