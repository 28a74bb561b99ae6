/* Tests of the planner's and simulator's pricing of sequence parallelism (--sp, docs/tensor-parallel.md
 * "Sequence parallelism in the cost model"): a block's memory at tp 2 with and without sp in
 * closed form and against the model's act floats, the link time of a block's reduce-scatters and
 * all-gathers equal to its all-reduces' in F (in B 1.5 times: two more all-gathers, of ln1 and
 * ln2 for the weight gradients B computes under sp), a stage's TP time, messages and layer-norm
 * sum, the
 * search choosing sp when memory is tight, plan files with "sp", and the layouts the runtime
 * refuses. Run from the repo root. */
#include "plan/plan.h"
#include "plan_tp_util.h"
#include "test.h"
#include "util/pt.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- a block's memory at tp 2 -------------------------------------------------------------------- */
static int no_call(void *ctx, float *buf, size_t n) { (void)ctx; (void)buf; (void)n; return -1; }

/* The model's act floats of block layer 1 on TP rank 0 of 2, with or without sp. */
static size_t model_act_floats(const gpt_config *cfg, int sp, int B, int T) {
    gpt_model m;
    memset(&m, 0, sizeof m);
    if (gpt_init_layers_tp(&m, cfg, 1, 2, 0, 2) < 0) { printf("# model: %s\n", pt_err()); return 0; }
    gpt_tp tp = { .rank = 0, .size = 2, .allreduce = no_call, .reduce_scatter = no_call, .allgather = no_call };
    gpt_set_tp(&m, &tp);
    size_t n = gpt_set_tp_sp(&m, sp) == 0 ? gpt_layer_act_floats(&m, 1, B, T) : 0;
    gpt_free(&m);
    return n;
}

static void test_block_memory(void) {
    gpt_config cfg = small_cfg(4, 64, 4, 128, 32);
    const int B = 2, T = 32, t = 2;
    double N = (double)B * T, C = cfg.n_embd, NH = cfg.n_head;
    plan_layer_cost plain, sp;
    plan_layer_model_sp(&cfg, PLAN_BLOCK, B, T, t, false, &plain);
    plan_layer_model_sp(&cfg, PLAN_BLOCK, B, T, t, true, &sp);
    double want_plain = 4 * N * (8 * C + 19 * C / t + 4 + NH / t * T);        /* gpt.h's per-token floats */
    double want_sp = 4 * N * (27 * C / t + 4.0 / t + NH / t * T);          /* every region 1/t of tp 1's */
    size_t m0 = model_act_floats(&cfg, 0, B, T), m1 = model_act_floats(&cfg, 1, B, T);
    CHECK("plan_sp_block_memory_closed_form", plain.act_bytes == want_plain && sp.act_bytes == want_sp &&
          plain.act_bytes == 4.0 * m0 && sp.act_bytes == 4.0 * m1 && sp.act_bytes < plain.act_bytes,
          "act without sp %.0f (closed form %.0f, model %zu floats), with sp %.0f (closed form %.0f, model %zu floats)",
          plain.act_bytes, want_plain, m0, sp.act_bytes, want_sp, m1);
    CHECK("plan_sp_block_keeps_rows", sp.input_bytes == 4 * N / t * C && sp.keep_bytes == 8 * N / t * C &&
          plain.input_bytes == 4 * N * C, "input %.0f, keep %.0f", sp.input_bytes, sp.keep_bytes);

    /* a stage of the 4 blocks (and the embedding and head, whose act sp leaves alone) holding one
     * microbatch: exactly 4 blocks' difference; its messages carry N/tp rows */
    plan_cluster k;
    if (node_cluster(&k, 4, BIG_MEMORY, 1e11, 1e-6) < 0) return;
    double mem[2] = { 0, 0 }, msg[2] = { 0, 0 };
    for (int s = 0; s < 2; s++) {
        int split[1] = { 4 };
        plan_layout p = tp_layout(1, t, 1, B, T, split);
        p.sp = s == 1;
        if (plan_evaluate(&cfg, &k, NULL, &p) == 0) mem[s] = p.stage_mem[0];
        else printf("# evaluate: %s\n", pt_err());
        p.split = NULL;
        plan_layout_free(&p);
        int split2[2] = { 2, 2 };
        plan_layout q = tp_layout(2, t, 2, B, T, split2);
        q.sp = s == 1;
        sim_costs c;
        sched *sc = NULL;
        if (plan_sim_costs(&cfg, &k, NULL, &q, &c, &sc) == 0) { msg[s] = c.act_bytes[0]; sim_costs_free(&c); sched_free(sc); }
        else printf("# sim costs: %s\n", pt_err());
    }
    CHECK("plan_sp_stage_memory", mem[0] > 0 && test_relerr(mem[0] - mem[1], 4 * (want_plain - want_sp), 1e-30) < SAME_SUM,
          "stage without sp %.0f, with %.0f: saves %.0f, want 4 x %.0f", mem[0], mem[1], mem[0] - mem[1],
          want_plain - want_sp);
    CHECK("plan_sp_messages_divide_by_tp", msg[0] == 4 * N * C && msg[1] == 4 * N * C / t,
          "messages %.0f and %.0f bytes", msg[0], msg[1]);
    plan_cluster_free(&k);
}

/* ---- link time ------------------------------------------------------------------------------------ */
static void test_link_time(void) {
    gpt_config cfg = small_cfg(4, 64, 4, 128, 32);
    const double bw = 3e9, lat = 7e-6;
    int bad = 0;
    double worst = 0;
    for (int t = 2; t <= 4; t += 2)
        for (int ph = PLAN_F; ph <= PLAN_B; ph++) {
            plan_layer_cost plain;
            plan_layer_model(&cfg, PLAN_BLOCK, 2, 32, t, &plain);
            plan_tp_parts pt;
            plan_tp_parts_of(&cfg, PLAN_BLOCK, 2, 32, t, true, ph, &pt);
            double ar = plan_tp_time(&plain, ph, t, bw, lat), sg = plan_tp_parts_time(&pt, t, bw, lat);
            /* the ring by hand: 4 collectives of an (N,C) buffer in F, 6 in B (B all-gathers ln1 and
             * ln2 again for the weight gradients it computes under sp), each (t-1)/t x 4NC / bw +
             * (t-1) lat: F's the all-reduces' time, B's 1.5 times it */
            int n = ph == PLAN_F ? 4 : 6;
            double ring = n * ((t - 1.0) / t * 4 * 64.0 * 64 / bw + (t - 1) * lat);
            if (pt.ar_coll != 0 || pt.sg_coll != n || test_relerr(sg, ar * n / 4, 1e-30) > SAME_SUM ||
                test_relerr(sg, ring, 1e-30) > SAME_SUM) { bad++; worst = sg - ar * n / 4; }
        }
    CHECK("plan_sp_block_link_time_is_the_all_reduce", bad == 0, "%d of 4 (tp, phase) differ (by %g s)", bad, worst);
    CHECK("sim_rsag_half_an_allreduce", test_relerr(2 * sim_rsag_time(4, 1e6, 1, bw, lat),
                                                    sim_allreduce_time(4, 1e6, 1, bw, lat), 1e-30) < SAME_SUM &&
          sim_rsag_time(1, 1e6, 3, bw, lat) == 0, "rs %g, ar %g", sim_rsag_time(4, 1e6, 1, bw, lat),
          sim_allreduce_time(4, 1e6, 1, bw, lat));
    plan_tp_parts hf;
    plan_layer_cost head;
    plan_layer_model(&cfg, PLAN_HEAD, 2, 32, 2, &head);
    plan_tp_parts_of(&cfg, PLAN_HEAD, 2, 32, 2, true, PLAN_F, &hf);
    CHECK("plan_sp_head_keeps_its_all_reduces", hf.ar_bytes == head.tp_bytes[PLAN_F] && hf.ar_coll == 2 &&
          hf.sg_bytes == 4.0 * 64 * 64 && hf.sg_coll == 1, "ar %.0f x %d, sg %.0f x %d", hf.ar_bytes, hf.ar_coll,
          hf.sg_bytes, hf.sg_coll);

    /* one stage of everything: the embedding's all-reduce becomes a reduce-scatter and the head's
     * input an all-gather, so F takes what it took and B that plus each block's two all-gathers
     * of ln1 and ln2; the step adds one all-reduce of the 4 blocks' layer-norm gradients (16C
     * bytes each) */
    plan_cluster k;
    if (node_cluster(&k, 2, BIG_MEMORY, bw, lat) < 0) return;
    sim_costs c[2];
    int ok = 0;
    for (int s = 0; s < 2; s++) {
        int split[1] = { 4 };
        plan_layout p = tp_layout(1, 2, 1, 2, 32, split);
        p.sp = s == 1;
        sched *sc = NULL;
        if (plan_sim_costs(&cfg, &k, NULL, &p, &c[s], &sc) == 0) { ok++; sched_free(sc); }
    }
    if (ok == 2) {
        double ln = sim_allreduce_time(2, 4 * 16.0 * 64, 1, bw, lat);
        double ag = 4 * 2 * sim_rsag_time(2, 4 * 64.0 * 64, 1, bw, lat);   /* N = 2*32 rows, C 64 */
        CHECK("plan_sp_stage_tp_time_and_ln_sum", test_relerr(c[1].tp_f[0], c[0].tp_f[0], 1e-30) < SAME_SUM &&
              test_relerr(c[1].tp_b[0], c[0].tp_b[0] + ag, 1e-30) < SAME_SUM && c[0].tp_f[0] > 0 &&
              test_relerr(c[1].reduce[0] - c[0].reduce[0], ln, 1e-30) < SAME_SUM,
              "F %g vs %g, B %g vs %g (+%g wanted), reduce %g vs %g (+%g wanted)", c[1].tp_f[0], c[0].tp_f[0],
              c[1].tp_b[0], c[0].tp_b[0], ag, c[1].reduce[0], c[0].reduce[0], ln);
    } else {
        CHECK("plan_sp_stage_tp_time_and_ln_sum", 0, "plan_sim_costs: %s", pt_err());
    }
    for (int s = 0; s < ok; s++) sim_costs_free(&c[s]);
    plan_cluster_free(&k);
}

/* ---- the search ----------------------------------------------------------------------------------- */
/* tp 2 on 2 devices, one rank, 4 sequences of 16: what microbatch size 1 needs with and without sp. */
static double need_b1(const gpt_config *cfg, bool sp) {
    plan_cluster k;
    if (node_cluster(&k, 2, BIG_MEMORY, 1e13, 1e-9) < 0) return 0;
    int split[1] = { cfg->n_layer };
    plan_layout p = tp_layout(1, 2, 4, 1, 16, split);
    p.sp = sp;
    double m = plan_evaluate(cfg, &k, NULL, &p) == 0 ? p.stage_mem[0] : 0;
    p.split = NULL;
    plan_layout_free(&p);
    plan_cluster_free(&k);
    return m;
}

static int search_at(const gpt_config *cfg, double mem, bool no_sp, plan_result *r) {
    plan_cluster k;
    if (node_cluster(&k, 2, mem, 1e13, 1e-9) < 0) return -1;
    plan_opts o = { .global_batch = 4, .T = 16, .top = 1, .tp = 2, .no_sp = no_sp };
    int rc = plan_search(cfg, &k, &o, r);
    plan_cluster_free(&k);
    return rc;
}

static void test_search(void) {
    gpt_config cfg = small_cfg(4, 64, 4, 128, 16);
    double full = need_b1(&cfg, false), sp = need_b1(&cfg, true), cap = (full + sp) / 2;
    plan_result r;
    int rc = search_at(&cfg, BIG_MEMORY, false, &r);
    CHECK("plan_sp_not_when_memory_is_ample", rc == 0 && r.n_best == 1 && !r.best[0].sp,
          "rc %d, %d layouts, sp %d", rc, r.n_best, r.n_best ? r.best[0].sp : -1);
    if (rc == 0) plan_result_free(&r);
    rc = search_at(&cfg, cap, false, &r);
    CHECK("plan_sp_when_memory_is_tight", sp > 0 && sp < full && rc == 0 && r.n_best == 1 && r.best[0].sp &&
          !r.best[0].recompute && !r.best[0].tp_recompute && r.best[0].stage_mem[0] <= cap,
          "needs %.0f (full) and %.0f (sp) bytes; rc %d, %d layouts, sp %d, recompute %d, tp_recompute %d", full, sp,
          rc, r.n_best, r.n_best ? r.best[0].sp : -1, r.n_best ? r.best[0].recompute : -1,
          r.n_best ? r.best[0].tp_recompute : -1);
    if (rc == 0) plan_result_free(&r);
    rc = search_at(&cfg, cap, true, &r);
    CHECK("plan_no_sp_excludes_it", rc == 0 && (r.n_best == 0 || !r.best[0].sp), "rc %d, %d layouts, sp %d", rc,
          r.n_best, r.n_best ? r.best[0].sp : -1);
    if (rc == 0) plan_result_free(&r);
}

/* ---- plan files and refusals ---------------------------------------------------------------------- */
static void test_plan_file(const char *dir) {
    char path[512];
    snprintf(path, sizeof path, "%s/plan.json", dir);
    int split[2] = { 1, 3 };
    plan_layout p = tp_layout(2, 2, 4, 2, 16, split), q;
    p.sp = p.tp_recompute = true;
    snprintf(p.placement, sizeof p.placement, "node");
    int rc = plan_write(&p, path) | plan_read(path, &q);
    CHECK("plan_file_sp_round_trip", rc == 0 && q.sp && q.tp_recompute && !q.tp_overlap && q.tp == 2,
          "rc %d (%s)", rc, pt_err());
    if (rc == 0) plan_layout_free(&q);
    p.sp = false;
    rc = plan_write(&p, path) | plan_read(path, &q);
    CHECK("plan_file_sp_false_round_trip", rc == 0 && !q.sp, "rc %d (%s)", rc, pt_err());
    if (rc == 0) plan_layout_free(&q);
    write_text(path, "{\"stages\":2,\"dp\":1,\"tp\":2,\"microbatches\":4,\"microbatch_size\":1,\"seq\":16,\"chunks\":1,"
                     "\"schedule\":\"1f1b\",\"split\":[2,2]}");
    rc = plan_read(path, &q);
    CHECK("plan_file_without_sp_is_false", rc == 0 && !q.sp, "rc %d (%s)", rc, pt_err());
    if (rc == 0) plan_layout_free(&q);
    write_text(path, "{\"stages\":2,\"dp\":1,\"tp\":2,\"microbatches\":4,\"microbatch_size\":1,\"seq\":16,\"chunks\":1,"
                     "\"schedule\":\"1f1b\",\"split\":[2,2],\"sp\":\"yes\"}");
    rc = plan_read(path, &q);
    CHECK("plan_file_bad_sp", rc < 0 && strstr(pt_err(), "sp must be true or false"), "'%s'", pt_err());

    gpt_config cfg = small_cfg(4, 64, 4, 128, 16);
    plan_cluster k;
    if (node_cluster(&k, 8, BIG_MEMORY, 1e11, 1e-6) < 0) return;
    int s2[2] = { 2, 2 };
    plan_layout one = tp_layout(2, 1, 4, 2, 16, s2), ov = tp_layout(2, 2, 4, 2, 16, s2), odd = tp_layout(2, 4, 4, 1, 15, s2);
    one.sp = ov.sp = odd.sp = true;
    ov.tp_overlap = true;
    rc = plan_evaluate(&cfg, &k, NULL, &one);
    CHECK("plan_sp_needs_tp2", rc < 0 && strstr(pt_err(), "sp needs tp >= 2"), "rc %d, '%s'", rc, pt_err());
    rc = plan_evaluate(&cfg, &k, NULL, &ov);
    CHECK("plan_sp_not_with_tp_overlap", rc < 0 && strstr(pt_err(), "sp and tp_overlap"), "rc %d, '%s'", rc, pt_err());
    rc = plan_evaluate(&cfg, &k, NULL, &odd);
    CHECK("plan_sp_rows_divisible", rc < 0 && strstr(pt_err(), "not divisible by tp 4"), "rc %d, '%s'", rc, pt_err());
    odd.mb_size = 4;   /* 60 rows: divisible */
    rc = plan_evaluate(&cfg, &k, NULL, &odd);
    CHECK("plan_sp_rows_divisible_ok", rc == 0, "rc %d, '%s'", rc, pt_err());
    if (rc == 0) { odd.split = NULL; plan_layout_free(&odd); }
    plan_cluster_free(&k);
}

int main(void) {
    char dir[] = "/tmp/test_plan_tp_sp.XXXXXX";
    if (!mkdtemp(dir)) { printf("FAIL plan_tp_sp_tmpdir: mkdtemp\n"); return 1; }
    test_block_memory();
    test_link_time();
    test_search();
    test_plan_file(dir);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) printf("# could not remove %s\n", dir);
    TEST_DONE();
}
