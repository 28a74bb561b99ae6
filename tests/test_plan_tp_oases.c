/* Tests of the planner's and simulator's pricing of --tp-overlap and --tp-recompute: the
 * ping-pong's exposed time against its event order and against the closed form for a block at tp
 * 2 (a link quicker than half the compute, and one slower), a microbatch of one sequence without
 * overlap, GPT-2 124M's block memory at tp 2 under the three ways of keeping activations, the
 * recompute's FLOPs in B, the search choosing communication-free recomputation only when memory is
 * tight, and plan files with tp_overlap and tp_recompute. Run from the repo root. */
#include "plan/plan.h"
#include "plan_tp_util.h"
#include "test.h"
#include "util/pt.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- the ping-pong's event order --------------------------------------------------------------- */
/* The order of docs/tensor-parallel.md "Overlap", step by step: compute A0 B0 A1 B1 A2 B2 on one
 * stream (X0 takes c0, X1 c1, X2 nothing), the half-sums AR1(A) AR1(B) AR2(A) AR2(B) one after
 * another on one link, each starting when its half's stage is done and the link is free, each
 * stage after the sum it needs. Returns the phase's end minus its compute. */
static double pingpong_events(double half, double c0, double c1) {
    double t = 0, link = 0, ar1[2], ar2[2];
    for (int h = 0; h < 2; h++) {                    /* A0, B0: each starts its AR1 */
        t += c0;
        link = ar1[h] = fmax(t, link) + half;
    }
    for (int h = 0; h < 2; h++) {                    /* A1, B1: wait for AR1, start AR2 */
        t = fmax(t, ar1[h]) + c1;
        link = ar2[h] = fmax(t, link) + half;
    }
    for (int h = 0; h < 2; h++) t = fmax(t, ar2[h]);  /* A2, B2: wait for AR2 */
    return t - 2 * c0 - 2 * c1;
}

static void test_exposed_formula(void) {
    const double half[] = { 0.5, 1, 2, 3, 7 }, cov[] = { 0, 0.25, 1, 2.5, 4 };
    int bad = 0, n = 0;
    double worst = 0;
    for (int i = 0; i < 5; i++)
        for (int a = 0; a < 5; a++)
            for (int b = 0; b < 5; b++, n++) {
                double want = pingpong_events(half[i], cov[a], cov[b]), got = plan_tp_overlap_exposed(half[i], cov[a], cov[b]);
                if (fabs(got - want) > SAME_SUM * (1 + want)) { bad++; worst = got - want; }
            }
    CHECK("plan_tp_overlap_exposed_event_order", bad == 0, "%d of %d (half, c0, c1) differ from the event order (by %g)",
          bad, n, worst);
}

/* ---- a block at tp 2 with overlap: both regimes ------------------------------------------------ */
/* Chunk 1 of split 1,1,1 holds one block and nothing else: its TP time is the block's. */
static void block_costs(const gpt_config *cfg, double bw, int B, bool overlap, bool tp_rc, bool rc, sim_costs *c, int *ok) {
    plan_cluster k;
    *ok = 0;
    if (node_cluster(&k, 8, BIG_MEMORY, bw, 0) < 0) return;
    int split[3] = { 1, 1, 1 };
    plan_layout p = tp_layout(3, 2, 4, B, 32, split);
    p.tp_overlap = overlap; p.tp_recompute = tp_rc; p.recompute = rc;
    sched *s = NULL;
    if (plan_sim_costs(cfg, &k, NULL, &p, c, &s) == 0) { *ok = 1; sched_free(s); }
    else printf("# plan_sim_costs: %s\n", pt_err());
    plan_cluster_free(&k);
}

static void test_block_overlap(void) {
    const int C = 64, T = 32, B = 2;
    const double N = (double)B * T, rate = 1e12, t = 2;
    gpt_config cfg = small_cfg(3, C, 4, 128, T);
    /* one rank's halves at tp 2: F's pieces [qkv, attention, attn.c_proj] then [c_fc, mlp.c_proj] */
    double mm = 2.0 * 12 * C * C * N / t, att = 2.0 * N * T * C / t;
    double f0 = (mm / 3 + att) / 2 / rate, f1 = (2 * mm / 3) / 2 / rate;       /* F: c0, c1 */
    double b0 = (2 * mm / 3) / 2 / rate, b1 = (mm / 3 + 2 * att) / 2 / rate;   /* B: c0, c1 */
    const double bws[2] = { 1e11, 1e9 };   /* a half-sum well inside its cover; and longer than all of it */
    const char *name[2] = { "plan_tp_overlap_comm_shorter", "plan_tp_overlap_comm_longer" };
    for (int i = 0; i < 2; i++) {
        double half = 2.0 * (t - 1) / t * (4.0 * N * C / 2) / bws[i];   /* ring, (N/2, C) fp32, latency 0 */
        double ef = i == 0 ? half : 4 * half - f0 - 2 * f1, eb = i == 0 ? half : 4 * half - b0 - 2 * b1;
        sim_costs c;
        int ok;
        block_costs(&cfg, bws[i], B, true, false, false, &c, &ok);
        bool regime = i == 0 ? half < fmin(fmin(f0, f1), fmin(b0, b1)) : half > fmax(fmax(f0, f1), fmax(b0, b1));
        CHECK(name[i], ok && regime && test_relerr(c.tp_f[1], ef, 1e-30) < SAME_SUM &&
              test_relerr(c.tp_b[1], eb, 1e-30) < SAME_SUM &&
              test_relerr(c.f[1], 2 * f0 + 2 * f1 + ef, 1e-30) < SAME_SUM,
              "half-sum %.6g s, F halves %.6g %.6g, B halves %.6g %.6g: tp_f %.9g (want %.9g), tp_b %.9g (want %.9g)",
              half, f0, f1, b0, b1, ok ? c.tp_f[1] : 0, ef, ok ? c.tp_b[1] : 0, eb);
        if (ok) sim_costs_free(&c);
    }
    /* one sequence per microbatch: the blocking all-reduces, as without the flag */
    sim_costs on, off;
    int ok1, ok2;
    block_costs(&cfg, 1e9, 1, true, false, false, &on, &ok1);
    block_costs(&cfg, 1e9, 1, false, false, false, &off, &ok2);
    CHECK("plan_tp_overlap_not_at_one_sequence", ok1 && ok2 && on.tp_f[1] == off.tp_f[1] && on.tp_b[1] == off.tp_b[1] &&
          on.tp_f[1] > 0, "tp_f %g vs %g", ok1 ? on.tp_f[1] : 0, ok2 ? off.tp_f[1] : 0);
    if (ok1) sim_costs_free(&on);
    if (ok2) sim_costs_free(&off);
}

/* ---- recomputation's time ---------------------------------------------------------------------- */
static void test_recompute_time(void) {
    const int C = 64, T = 32, B = 2;
    const double N = (double)B * T, rate = 1e12, t = 2;
    gpt_config cfg = small_cfg(3, C, 4, 128, T);
    sim_costs base, trc, rc;
    int ok0, ok1, ok2;
    block_costs(&cfg, 1e9, B, false, false, false, &base, &ok0);
    block_costs(&cfg, 1e9, B, false, true, false, &trc, &ok1);
    block_costs(&cfg, 1e9, B, false, false, true, &rc, &ok2);
    if (!(ok0 && ok1 && ok2)) { CHECK("plan_tp_recompute_time", 0, "costs"); return; }
    /* communication-free: ln_1, c_attn (3C^2), attention, c_fc (4C^2) again; no all-reduce */
    double again = (2.0 * 7 * C * C * N + 2.0 * N * T * C) / t / rate;
    CHECK("plan_tp_recompute_time", test_relerr(trc.b[1] - base.b[1], again, 1e-30) < 1e-9 &&
          trc.tp_b[1] == base.tp_b[1] && trc.f[1] == base.f[1] && trc.w[1] == base.w[1],
          "B gains %.9g s (want %.9g), TP in B %g vs %g", trc.b[1] - base.b[1], again, trc.tp_b[1], base.tp_b[1]);
    /* whole-stage: all of F again, its two all-reduces included */
    CHECK("plan_recompute_time_with_tp", test_relerr(rc.b[1] - base.b[1], base.f[1], 1e-30) < 1e-9 &&
          test_relerr(rc.tp_b[1], base.tp_b[1] + base.tp_f[1], 1e-30) < SAME_SUM,
          "B gains %.9g s (want F %.9g)", rc.b[1] - base.b[1], base.f[1]);
    sim_costs_free(&base); sim_costs_free(&trc); sim_costs_free(&rc);
}

/* ---- GPT-2 124M's block at tp 2: memory -------------------------------------------------------- */
static void test_memory_124m(void) {
    gpt_config cfg;
    if (config_load_json(&cfg, "examples/gpt2-124m.json") < 0) { CHECK("plan_tp2_memory_124m", 0, "%s", pt_err()); return; }
    const int B = 4, T = 256;
    plan_layer_cost blk;
    plan_layer_model(&cfg, PLAN_BLOCK, B, T, 2, &blk);
    /* measured by the model engineer (docs/tensor-parallel.md): 15,339,520 and 1,572,864 floats */
    CHECK("plan_tp2_block_bytes_124m", blk.act_bytes == 4.0 * 15339520 && blk.keep_bytes == 4.0 * 1572864 &&
          blk.input_bytes == 4.0 * 786432, "act %.0f (61.36 MB), keep %.0f (6.29 MB), input %.0f bytes", blk.act_bytes,
          blk.keep_bytes, blk.input_bytes);
    /* 1f1b on 3 ranks, split 1,10,1: rank 1 holds 2 microbatches of 10 blocks */
    plan_cluster k;
    if (node_cluster(&k, 8, BIG_MEMORY, 1e11, 1e-6) < 0) return;
    double mem[3] = { 0, 0, 0 };
    int held[3] = { 0, 0, 0 };
    for (int m = 0; m < 3; m++) {
        int split[3] = { 1, 10, 1 };
        plan_layout p = tp_layout(3, 2, 4, B, T, split);
        p.tp_recompute = m == 1; p.recompute = m == 2;
        if (plan_evaluate(&cfg, &k, NULL, &p) == 0) { mem[m] = p.stage_mem[1]; held[m] = p.stage_inflight[1]; }
        p.split = NULL;
        plan_layout_free(&p);
    }
    double fixed = mem[0] - 2 * 10 * blk.act_bytes;   /* parameters, gradients, moments */
    CHECK("plan_tp2_memory_124m_comm_free", held[0] == 2 && held[1] == 2 &&
          test_relerr(mem[1], fixed + 2 * 10 * blk.keep_bytes + blk.act_bytes, 1e-30) < SAME_SUM,
          "held %d, %d; comm-free %.0f bytes, want %.0f (2 x 10 keeps + one working act)", held[0], held[1], mem[1],
          fixed + 2 * 10 * blk.keep_bytes + blk.act_bytes);
    CHECK("plan_tp2_memory_124m_recompute", held[2] == 2 &&
          test_relerr(mem[2], fixed + 2 * 10 * blk.input_bytes + blk.act_bytes, 1e-30) < SAME_SUM,
          "--recompute %.0f bytes, want %.0f (2 x 10 inputs + one act)", mem[2], fixed + 2 * 10 * blk.input_bytes + blk.act_bytes);
    plan_cluster_free(&k);
}

/* ---- the search -------------------------------------------------------------------------------- */
/* tp 2 on 2 devices: one rank, 4 sequences. The memory a layout of microbatch size 1 needs with
 * full activations and with the keeps decide the caps. */
static double need_b1(const gpt_config *cfg, bool tp_rc) {
    plan_cluster k;
    if (node_cluster(&k, 2, BIG_MEMORY, 1e11, 1e-6) < 0) return 0;
    int split[1] = { cfg->n_layer };
    plan_layout p = tp_layout(1, 2, 4, 1, 16, split);
    p.tp_recompute = tp_rc;
    double m = plan_evaluate(cfg, &k, NULL, &p) == 0 ? p.stage_mem[0] : 0;
    p.split = NULL;
    plan_layout_free(&p);
    plan_cluster_free(&k);
    return m;
}

static int search_at(const gpt_config *cfg, double mem, plan_result *r) {
    plan_cluster k;
    if (node_cluster(&k, 2, mem, 1e11, 1e-6) < 0) return -1;
    plan_opts o = { .global_batch = 4, .T = 16, .top = 1, .tp = 2 };
    int rc = plan_search(cfg, &k, &o, r);
    plan_cluster_free(&k);
    return rc;
}

static void test_search(void) {
    gpt_config cfg = small_cfg(4, 64, 4, 128, 16);
    double full = need_b1(&cfg, false), keep = need_b1(&cfg, true);
    plan_result r;
    int rc = search_at(&cfg, BIG_MEMORY, &r);
    CHECK("plan_tp_recompute_not_when_memory_is_ample", rc == 0 && r.n_best == 1 && !r.best[0].tp_recompute &&
          !r.best[0].recompute, "rc %d, %d layouts, tp_recompute %d, recompute %d", rc, r.n_best,
          r.n_best ? r.best[0].tp_recompute : -1, r.n_best ? r.best[0].recompute : -1);
    if (rc == 0) plan_result_free(&r);
    rc = search_at(&cfg, (full + keep) / 2, &r);
    CHECK("plan_tp_recompute_when_memory_is_tight", keep > 0 && keep < full && rc == 0 && r.n_best == 1 &&
          r.best[0].tp_recompute && r.best[0].stage_mem[0] <= (full + keep) / 2,
          "needs %.0f (full) and %.0f (keeps) bytes; rc %d, %d layouts, tp_recompute %d, recompute %d", full, keep, rc,
          r.n_best, r.n_best ? r.best[0].tp_recompute : -1, r.n_best ? r.best[0].recompute : -1);
    if (rc == 0) plan_result_free(&r);
}

/* ---- plan files -------------------------------------------------------------------------------- */
static void test_plan_file(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/plan.json", dir);
    int split[2] = { 1, 3 };
    plan_layout p = tp_layout(2, 2, 4, 2, 16, split), q;
    p.tp_overlap = p.tp_recompute = true;
    snprintf(p.placement, sizeof p.placement, "node");
    int rc = plan_write(&p, path) | plan_read(path, &q);
    CHECK("plan_file_tp_overlap_recompute_round_trip", rc == 0 && q.tp_overlap && q.tp_recompute && !q.recompute &&
          q.tp == 2, "rc %d (%s)", rc, pt_err());
    if (rc == 0) plan_layout_free(&q);
    write_text(path, "{\"stages\":2,\"dp\":1,\"tp\":2,\"microbatches\":4,\"microbatch_size\":1,\"seq\":16,\"chunks\":1,"
                     "\"schedule\":\"1f1b\",\"split\":[2,2]}");
    rc = plan_read(path, &q);
    CHECK("plan_file_without_tp_flags_is_false", rc == 0 && !q.tp_overlap && !q.tp_recompute, "rc %d (%s)", rc, pt_err());
    if (rc == 0) plan_layout_free(&q);
    write_text(path, "{\"stages\":2,\"dp\":1,\"tp\":2,\"microbatches\":4,\"microbatch_size\":1,\"seq\":16,\"chunks\":1,"
                     "\"schedule\":\"1f1b\",\"split\":[2,2],\"tp_overlap\":1}");
    rc = plan_read(path, &q);
    CHECK("plan_file_bad_tp_overlap", rc < 0 && strstr(pt_err(), "tp_overlap must be true or false"), "'%s'", pt_err());
    /* the layouts the runtime refuses */
    gpt_config cfg = small_cfg(4, 64, 4, 128, 16);
    plan_cluster k;
    if (node_cluster(&k, 4, BIG_MEMORY, 1e11, 1e-6) < 0) return;
    int s2[2] = { 2, 2 };
    plan_layout one = tp_layout(2, 1, 4, 2, 16, s2), both = tp_layout(2, 2, 4, 2, 16, s2);
    one.tp_overlap = true;
    both.tp_recompute = both.recompute = true;
    rc = plan_evaluate(&cfg, &k, NULL, &one);
    CHECK("plan_tp_overlap_needs_tp2", rc < 0 && strstr(pt_err(), "tp_overlap needs tp >= 2"), "rc %d, '%s'", rc, pt_err());
    rc = plan_evaluate(&cfg, &k, NULL, &both);
    CHECK("plan_tp_recompute_not_with_recompute", rc < 0 && strstr(pt_err(), "keep one"), "rc %d, '%s'", rc, pt_err());
    plan_cluster_free(&k);
}

int main(void) {
    char dir[] = "/tmp/test_plan_tp_oases.XXXXXX";
    if (!mkdtemp(dir)) { printf("FAIL plan_tp_oases_tmpdir: mkdtemp\n"); return 1; }
    test_exposed_formula();
    test_block_overlap();
    test_recompute_time();
    test_memory_124m();
    test_search();
    test_plan_file(dir);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("# could not remove %s\n", dir);
    TEST_DONE();
}
