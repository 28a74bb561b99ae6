/* Simulator tests: closed-form bubbles and memory of the classic schedules with equal costs and
 * free communication, hand-computed link and stage delays, faults over windows of iterations
 * (their specs and errors), iterations, deadlock errors, the costs file, and the trace/SVG
 * writers' structure. Not the generators' orders (test_sched), not the straggler policy
 * (test_sim_adapt). */
#include "trace/svg.h"
#include "trace/trace.h"
#include "sched/sched.h"
#include "sim/sim.h"
#include "test.h"
#include "util/pt.h"
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

/* Costs here are small integers, halves and quarters: sums are exact in double. */
#define TOL_EXACT 1e-9
/* Costs with decimal fractions (0.1 s latency) round in the last bits at each addition. */
#define TOL_ROUND 1e-9

static char nbuf[256];
#define NAME(...) (snprintf(nbuf, sizeof nbuf, __VA_ARGS__), nbuf)

/* Generates; NULL when it fails. *missing: the generator says "not implemented" (not landed). */
static sched *gen(const char *name, int P, int M, int v, bool *missing) {
    sched_params p = { .ranks = P, .microbatches = M, .chunks = v, .cost_f = 1, .cost_b = 1, .cost_w = 1 };
    sched *s = sched_generate(name, &p);
    bool miss = !s && strstr(pt_err(), "not implemented");
    if (missing) *missing = miss;
    if (!s && !miss) printf("# generate %s P=%d M=%d v=%d: %s\n", name, P, M, v, pt_err());
    return s;
}

/* Simulates with per-stage costs f, b, w and free communication. Returns 0 on success. */
static int run_unit(const sched *s, double f, double b, double w, int iters, bool pv, sim_result *r) {
    sim_costs c;
    sim_costs_init(&c, s->n_stages, f, b, w);
    sim_opts o = { iters, pv };
    int rc = sim_run(s, &c, &o, r);
    if (rc) printf("# sim_run %s: %s\n", s->name, pt_err());
    sim_costs_free(&c);
    return rc;
}

/* gpipe, 1f1b: bubble (p-1)/(m+p-1) of the iteration, with F=1 and fused BW = B+W = 3. */
static void test_gpipe_1f1b_bubble(void) {
    const char *names[] = { "gpipe", "1f1b" };
    for (int k = 0; k < 2; k++) {
        int bad = 0, n = 0;
        for (int P = 1; P <= 6; P++)
            for (int M = 1; M <= 12; M++, n++) {
                sched *s = gen(names[k], P, M, 0, NULL);
                sim_result r;
                if (!s || run_unit(s, 1, 2, 1, 1, false, &r)) { bad++; sched_free(s); continue; }
                double want = (double)(P - 1) / (M + P - 1);
                if (fabs(r.bubble_fraction - want) > TOL_EXACT && bad++ < 3)
                    printf("# %s P=%d M=%d bubble %g want %g\n", names[k], P, M, r.bubble_fraction, want);
                sim_result_free(&r);
                sched_free(s);
            }
        CHECK(NAME("sim_bubble_closed_form_%s", names[k]), bad == 0, "%d of %d cases off", bad, n);
    }
}

/* Peak activations: 1f1b holds p on stage 0, gpipe m. */
static void test_peak_memory_classic(void) {
    int bad = 0;
    for (int P = 1; P <= 5; P++)
        for (int M = P; M <= P + 6; M++) {
            sched *a = gen("1f1b", P, M, 0, NULL), *b = gen("gpipe", P, M, 0, NULL);
            sim_result ra, rb;
            if (!a || !b || run_unit(a, 1, 1, 1, 1, false, &ra) || run_unit(b, 1, 1, 1, 1, false, &rb)) {
                bad++; sched_free(a); sched_free(b); continue;
            }
            if (ra.peak_mb[0] != P || rb.peak_mb[0] != M) bad++;
            sim_result_free(&ra); sim_result_free(&rb);
            sched_free(a); sched_free(b);
        }
    CHECK("sim_peak_1f1b_p_gpipe_m", bad == 0, "%d cases off", bad);
}

/* The rank's idle / ideal time furthest from want. */
static double worst_ratio(const sim_result *r, double want) {
    double worst = r->idle[0] / r->ideal_time;
    for (int i = 1; i < r->n_ranks; i++)
        if (fabs(r->idle[i] / r->ideal_time - want) > fabs(worst - want)) worst = r->idle[i] / r->ideal_time;
    return worst;
}

/* Interleaved: every rank's idle time / ideal time = (p-1)/(v*m), m divisible by p. */
static void test_interleaved_bubble(void) {
    int bad = 0, n = 0;
    for (int P = 2; P <= 4; P++)
        for (int v = 2; v <= 3; v++)
            for (int M = P; M <= 3 * P; M += P, n++) {
                sched *s = gen("interleaved-1f1b", P, M, v, NULL);
                sim_result r;
                if (!s || run_unit(s, 1, 2, 1, 1, false, &r)) { bad++; sched_free(s); continue; }
                double want = (double)(P - 1) / (v * M), worst = worst_ratio(&r, want);
                if (fabs(worst - want) > TOL_EXACT && bad++ < 3)
                    printf("# interleaved P=%d v=%d M=%d idle/ideal %g want %g\n", P, v, M, worst, want);
                sim_result_free(&r);
                sched_free(s);
            }
    CHECK("sim_bubble_closed_form_interleaved", bad == 0, "%d of %d cases off", bad, n);
}

/* zb-h1 with F=B=W: bubble / ideal = (p-1)/(3m) on every rank. Skips while not implemented. */
static void test_zb_h1_bubble(void) {
    bool missing = false;
    int bad = 0, n = 0;
    for (int P = 2; P <= 5 && !missing; P++)
        for (int M = P; M <= 3 * P && !missing; M += 2, n++) {
            sched *s = gen("zb-h1", P, M, 0, &missing);
            sim_result r;
            if (missing) break;
            if (!s || run_unit(s, 1, 1, 1, 1, false, &r)) { bad++; sched_free(s); continue; }
            double want = (double)(P - 1) / (3 * M), worst = worst_ratio(&r, want);
            if (fabs(worst - want) > TOL_EXACT && bad++ < 3)
                printf("# zb-h1 P=%d M=%d idle/ideal %g want %g\n", P, M, worst, want);
            sim_result_free(&r);
            sched_free(s);
        }
    if (missing) { printf("# skip sim_bubble_closed_form_zb_h1: zb-h1 not implemented yet\n"); return; }
    CHECK("sim_bubble_closed_form_zb_h1", bad == 0, "%d of %d cases off", bad, n);
}

/* Largest gap between consecutive compute events of rank r, from its first start to its last end. */
static double max_internal_idle(const sim_result *r, int rank) {
    double prev_end = -1, gap = 0;
    for (int i = 0; i < r->tl.n; i++) {
        const tl_event *e = &r->tl.ev[i];
        if (e->rank != rank || e->stream != TL_COMPUTE || e->end == e->start) continue;
        if (prev_end >= 0 && e->start - prev_end > gap) gap = e->start - prev_end;
        prev_end = e->end;
    }
    return gap;
}

/* zb-h2 and zb-v (F=B=W): no rank idles between its first and last compute action once
 * m >= 2p-1 (below that the warm-up cannot fill the pipe; measured for p <= 4, tested here for
 * m in {2p-1, 2p, 3p}); with 4 iterations and post-validation the steady-state bubble is then
 * zero. Peak memory of zb-h2: 2p-1 on stage 0. */
static void test_zb_parallelogram(const char *name) {
    bool missing = false;
    int bad_idle = 0, bad_steady = 0, bad_mem = 0, n = 0;
    for (int P = 2; P <= 4 && !missing; P++)
        for (int k = 0, M = 2 * P - 1; k < 3 && !missing; k++, M = (k + 1) * P, n++) {
            sched *s = gen(name, P, M, 0, &missing);
            sim_result r, r4;
            if (missing) break;
            if (!s || run_unit(s, 1, 1, 1, 1, false, &r)) { bad_idle++; sched_free(s); continue; }
            for (int i = 0; i < P; i++)
                if (max_internal_idle(&r, i) > TOL_EXACT && bad_idle++ < 3)
                    printf("# %s P=%d M=%d rank %d idles %g inside\n", name, P, M, i, max_internal_idle(&r, i));
            if (!strcmp(name, "zb-h2") && r.peak_mb[0] != 2 * P - 1 && bad_mem++ < 3)
                printf("# zb-h2 P=%d M=%d peak %d want %d\n", P, M, r.peak_mb[0], 2 * P - 1);
            if (!run_unit(s, 1, 1, 1, 4, true, &r4)) {
                if (r4.steady_bubble > TOL_EXACT && bad_steady++ < 3)
                    printf("# %s P=%d M=%d steady bubble %g\n", name, P, M, r4.steady_bubble);
                sim_result_free(&r4);
            } else bad_steady++;
            sim_result_free(&r);
            sched_free(s);
        }
    if (missing) { printf("# skip sim_%s_*: %s not implemented yet\n", name, name); return; }
    CHECK(NAME("sim_%s_no_internal_idle", name), bad_idle == 0, "%d of %d cases idle inside", bad_idle, n);
    CHECK(NAME("sim_%s_steady_bubble_zero", name), bad_steady == 0, "%d of %d cases", bad_steady, n);
    if (!strcmp(name, "zb-h2")) CHECK("sim_peak_zb_h2_2p_minus_1", bad_mem == 0, "%d of %d cases", bad_mem, n);
}

/* gpipe P=4 M=8, F=1, BW=2: 33 with free links. A slow link 1-2 (+X per message) delays the first
 * forward into rank 2 and the first gradient back into rank 1 (every later message is hidden
 * behind compute): +2X. Uniform latency L and transfer T = bytes/bandwidth: each of the 2(P-1)
 * hops on the critical path costs L + T: 33 + 6 (L + T). */
static void test_link_delays(void) {
    sched *s = gen("gpipe", 4, 8, 0, NULL);
    if (!s) { CHECK("sim_slow_link_adds_predicted_delay", 0, "no gpipe"); return; }
    sim_costs c;
    sim_result r;
    sim_costs_init(&c, 4, 1, 1, 1);
    sim_opts o = { 1, false };
    int rc = sim_run(s, &c, &o, &r);
    double base = rc ? -1 : r.makespan;
    if (!rc) sim_result_free(&r);
    CHECK("sim_gpipe_free_links_33", base == 33, "makespan %g", base);
    rc = sim_costs_add_slow_link(&c, "1-2:0.75", 4) || sim_run(s, &c, &o, &r);
    CHECK("sim_slow_link_adds_predicted_delay", !rc && fabs(r.makespan - (33 + 2 * 0.75)) < TOL_EXACT,
          "makespan %g want %g (%s)", rc ? -1 : r.makespan, 33 + 1.5, rc ? pt_err() : "");
    if (!rc) sim_result_free(&r);
    sim_costs_free(&c);
    sim_costs_init(&c, 4, 1, 1, 1);
    c.latency = 0.1; c.bandwidth = 1e6;
    for (int g = 0; g < 4; g++) c.act_bytes[g] = 2.5e5;           /* T = 0.25 */
    rc = sim_run(s, &c, &o, &r);
    CHECK("sim_latency_bandwidth_per_hop", !rc && fabs(r.makespan - (33 + 6 * 0.35)) < TOL_ROUND,
          "makespan %g want %g", rc ? -1 : r.makespan, 33 + 6 * 0.35);
    if (!rc) {
        CHECK("sim_peak_bytes", r.peak_bytes[0] == 8 * 2.5e5 && r.rank_peak_bytes[3] == 8 * 2.5e5,
              "peak bytes %g %g", r.peak_bytes[0], r.rank_peak_bytes[3]);
        sim_result_free(&r);
    }
    sim_costs_free(&c);
    sched_free(s);
}

/* gpipe P=2 M=2 with stage 1 twice as slow: rank 1 F at 1-3, 3-5, BW 5-9, 9-13; rank 0 BW0 9-11,
 * BW1 13-15. */
static void test_slow_stage(void) {
    sched *s = gen("gpipe", 2, 2, 0, NULL);
    sim_costs c;
    sim_result r;
    sim_costs_init(&c, 2, 1, 1, 1);
    int rc = !s || sim_costs_add_slow_stage(&c, "1:2") || sim_run(s, &c, &(sim_opts){ 1, false }, &r);
    CHECK("sim_slow_stage_hand_computed", !rc && r.makespan == 15, "makespan %g", rc ? -1 : r.makespan);
    if (!rc) sim_result_free(&r);
    CHECK("sim_slow_stage_bad_spec", sim_costs_add_slow_stage(&c, "1:0") && strstr(pt_err(), "--slow-stage"),
          "accepted 1:0 (%s)", pt_err());
    CHECK("sim_slow_link_bad_spec", sim_costs_add_slow_link(&c, "0-5:1", 2) && strstr(pt_err(), "0-5:1"),
          "accepted 0-5:1 (%s)", pt_err());
    sim_costs_free(&c);
    sched_free(s);
}

/* ---- faults over windows of iterations (--slow-link/--slow-stage I..@FROM-TO) ---- */

static void expect_spec_error(const char *tname, bool link, const char *spec, const char *want) {
    sim_costs c;
    sim_costs_init(&c, 4, 1, 1, 1);
    int rc = link ? sim_costs_add_slow_link(&c, spec, 4) : sim_costs_add_slow_stage(&c, spec);
    const char *flag = link ? "--slow-link" : "--slow-stage";
    CHECK(tname, rc < 0 && strstr(pt_err(), flag) && strstr(pt_err(), spec) && strstr(pt_err(), want),
          "rc %d, error '%s', want the flag, '%s' and '%s'", rc, pt_err(), spec, want);
    sim_costs_free(&c);
}

static void test_specs(void) {
    sim_costs c;
    sim_costs_init(&c, 4, 1, 1, 1);
    int rc = sim_costs_add_slow_link(&c, "1-2:0.5@3-5", 4) || sim_costs_add_slow_link(&c, "2-3:1@2-", 4) ||
         sim_costs_add_slow_stage(&c, "0:2@4-4") || sim_costs_add_slow_link(&c, "0-1:0.25", 4);
    const sim_fault *f = c.faults;
    CHECK("spec_windows_parsed", !rc && c.n_faults == 4 && f[0].link && f[0].a == 1 && f[0].b == 2 &&
          f[0].amount == 0.5 && f[0].from == 3 && f[0].to == 5 && f[1].from == 2 && f[1].to == 0 && !f[2].link &&
          f[2].a == 0 && f[2].amount == 2 && f[2].from == 4 && f[2].to == 4 && f[3].from == 1 && f[3].to == 0,
          "rc %d, %d faults: %s", rc, c.n_faults, pt_err());
    CHECK("spec_keeps_costs_unchanged", c.f[0] == 1 && c.n_links == 0, "f[0] %g, %d links", c.f[0], c.n_links);
    sim_costs at;
    sim_costs_at(&c, 4, &at);
    CHECK("costs_at_iteration_applies_active_faults", at.n_faults == 0 && at.f[0] == 2 && at.b[0] == 2 &&
          sim_costs_message_time(&at, 1, 2, 0) == 0.5 && sim_costs_message_time(&at, 3, 2, 0) == 1 &&
          sim_costs_message_time(&at, 0, 1, 0) == 0.25, "f[0] %g, 1-2 %g", at.f[0], sim_costs_message_time(&at, 1, 2, 0));
    sim_costs_free(&at);
    sim_costs_at(&c, 6, &at);
    CHECK("costs_at_iteration_after_window", at.f[0] == 1 && sim_costs_message_time(&at, 1, 2, 0) == 0 &&
          sim_costs_message_time(&at, 2, 3, 0) == 1, "f[0] %g", at.f[0]);
    sim_costs_free(&at);
    sim_costs_free(&c);
    expect_spec_error("spec_err_rank_not_in_pipeline", true, "1-7:1", "rank 7 is not in the pipeline");
    expect_spec_error("spec_err_same_rank", true, "2-2:1", "two different ranks");
    expect_spec_error("spec_err_negative_seconds", true, "1-2:-1", "SECONDS must be in 0..");
    expect_spec_error("spec_err_from_after_to", true, "1-2:1@5-3", "FROM 5 is after TO 3");
    expect_spec_error("spec_err_from_zero", true, "1-2:1@0-3", "count from 1");
    expect_spec_error("spec_err_bad_window", true, "1-2:1@x", "FROM-TO or FROM-");
    expect_spec_error("spec_err_malformed_link", true, "1x2:1", "expected I-J:SECONDS[@FROM-TO]");
    expect_spec_error("spec_err_factor_below_1", false, "1:0.5", "FACTOR must be in 1..");
    expect_spec_error("spec_err_stage_out_of_range", false, "9:2", "stage 9 out of range 0..3");
    expect_spec_error("spec_err_stage_from_after_to", false, "1:2@4-2", "FROM 4 is after TO 2");
}

/* A link no message crosses, and a window after the last iteration, are errors against a schedule. */
static void test_check_faults(void) {
    sched *s = gen("zb-h1", 4, 8, 0, NULL);
    sim_costs c;
    sim_costs_init(&c, 4, 1, 1, 1);
    sim_costs_add_slow_link(&c, "0-2:1", 4);
    int rc = sim_costs_check_faults(&c, s, 1);
    CHECK("check_err_not_neighbours", rc < 0 && strstr(pt_err(), "--slow-link '0-2:1'") &&
          strstr(pt_err(), "exchange no messages in zb-h1"), "%s", pt_err());
    sim_costs_free(&c);
    sim_costs_init(&c, 4, 1, 1, 1);
    sim_costs_add_slow_stage(&c, "1:2@5-");
    rc = sim_costs_check_faults(&c, s, 4);
    CHECK("check_err_window_after_last_iteration", rc < 0 && strstr(pt_err(), "--slow-stage '1:2@5-'") &&
          strstr(pt_err(), "--iterations 4"), "%s", pt_err());
    sim_costs_add_slow_link(&c, "2-3:1", 4);
    CHECK("check_ok_neighbours_in_window", sim_costs_check_faults(&c, s, 5) == 0, "%s", pt_err());
    sim_costs_free(&c);
    sched_free(s);
}

/* ---- faults inside sim_run ---- */

/* gpipe, P = 4, M = 8, unit costs: 33 per iteration; a 0.5 delay on 1-2 adds 2 x 0.5 (one
 * forward and one backward crossing on the critical path); only in iteration 2 of 3. */
static void test_sim_windows(void) {
    sched *s = gen("gpipe", 4, 8, 0, NULL);
    sim_costs c;
    sim_costs_init(&c, 4, 1, 1, 1);
    sim_costs_add_slow_link(&c, "1-2:0.5@2-2", 4);
    sim_costs_add_slow_stage(&c, "3:2@3-");
    sim_result r;
    int rc = sim_run(s, &c, &(sim_opts){ 3, false }, &r);
    double t1 = rc ? -1 : r.iter_end[0], t2 = rc ? -1 : r.iter_end[1] - r.iter_end[0];
    double t3 = rc ? -1 : r.iter_end[2] - r.iter_end[1];
    CHECK("sim_fault_window_only_in_its_iterations", !rc && t1 == 33 && t2 == 34, "iterations %g %g", t1, t2);
    /* stage 3 twice as slow: F and BW of the last stage on the critical path, 8 x 1 + 8 x 2 more */
    CHECK("sim_slow_stage_window_from_3", !rc && t3 == 33 + 8 + 16, "iteration 3 took %g", t3);
    if (!rc) sim_result_free(&r);
    sim_costs_free(&c);
    sched_free(s);
}

/* Iterations: synchronised ones repeat the single iteration exactly; post-validation may overlap
 * them (steady time never above the synchronised one, never below the ideal; for 1f1b rank 0
 * starts first and ends last, so nothing overlaps). */
static void test_iterations(void) {
    sched *s = gen("1f1b", 4, 8, 0, NULL);
    sim_result r, q;
    if (!s || run_unit(s, 1, 1, 1, 3, false, &r)) { CHECK("sim_iterations_sync", 0, "no run"); sched_free(s); return; }
    CHECK("sim_iterations_sync", r.makespan == 99 && r.iteration_time == 33 && r.iter_end[1] == 66,
          "makespan %g iteration %g", r.makespan, r.iteration_time);
    if (!run_unit(s, 1, 1, 1, 3, true, &q)) {
        CHECK("sim_iterations_post_validation_overlap", q.iteration_time <= 33 + TOL_EXACT &&
              q.iteration_time >= q.ideal_time - TOL_EXACT, "steady %g ideal %g", q.iteration_time, q.ideal_time);
        sim_result_free(&q);
    }
    sim_result_free(&r);
    sched_free(s);
}

/* The simulator's peak activations agree with the IR's count (sched_peak_activations). */
static bool same_peaks(const sched *s, const sim_result *r, const char *name) {
    int *want = pt_calloc((size_t)s->n_stages, sizeof(int)), ok = 1;
    sched_peak_activations(s, want);
    for (int g = 0; g < s->n_stages && ok; g++)
        if (want[g] != r->peak_mb[g]) {
            printf("# %s stage %d: sim peak %d, sched_peak_activations %d\n", name, g, r->peak_mb[g], want[g]);
            ok = 0;
        }
    free(want);
    return ok;
}

/* Compute-only and lowered schedules give the same times (implicit sends sit where sched_lower
 * puts SEND/RECV), for every generator that exists, with latency and bandwidth. */
static void test_lowered_equals_compute_only(void) {
    int bad = 0, bad_peak = 0, n = 0;
    for (int i = 0; sched_generator_names[i]; i++) {
        const char *name = sched_generator_names[i];
        int v = !strcmp(name, "interleaved-1f1b") ? 2 : 0;
        sched *s = gen(name, 4, 8, v, NULL);
        if (!s) continue;
        sched *l = sched_lower(s);
        sim_costs c;
        sim_result a, b;
        sim_costs_init(&c, s->n_stages, 1, 1.5, 0.5);
        c.latency = 0.125; c.bandwidth = 4;
        for (int g = 0; g < s->n_stages; g++) c.act_bytes[g] = 1;
        n++;
        if (!l || sim_run(s, &c, NULL, &a)) { bad++; printf("# %s: %s\n", name, pt_err()); }
        else {
            if (sim_run(l, &c, NULL, &b)) { bad++; printf("# %s lowered: %s\n", name, pt_err()); }
            else {
                if (fabs(a.makespan - b.makespan) > TOL_EXACT && bad++ < 3)
                    printf("# %s: compute-only %g lowered %g\n", name, a.makespan, b.makespan);
                bad_peak += !same_peaks(s, &a, name);
                sim_result_free(&b);
            }
            sim_result_free(&a);
        }
        sim_costs_free(&c);
        sched_free(l);
        sched_free(s);
    }
    CHECK("sim_lowered_equals_compute_only", bad == 0 && n >= 4, "%d of %d generators differ", bad, n);
    CHECK("sim_peaks_equal_sched_peak_activations", bad_peak == 0 && n >= 4, "%d of %d generators differ", bad_peak, n);
}

/* Two ranks each waiting for the other: a compute-only B before its own F, and a lowered cyclic
 * wait (each RECV before the SEND the other needs). The error names both ranks and actions. */
static void test_deadlock(void) {
    sched *s = sched_new(2, 2, 1, 1);
    sched_push(s, 0, ACT_F, 0, 0); sched_push(s, 0, ACT_BW, 0, 0);
    sched_push(s, 1, ACT_BW, 1, 0); sched_push(s, 1, ACT_F, 1, 0);
    sim_result r;
    sim_costs c;
    sim_costs_init(&c, 2, 1, 1, 1);
    int rc = sim_run(s, &c, NULL, &r);
    CHECK("sim_deadlock_compute_only", rc == -1 && strstr(pt_err(), "deadlock") && strstr(pt_err(), "rank 0") &&
          strstr(pt_err(), "rank 1") && strstr(pt_err(), "1BW0"), "rc %d: %s", rc, pt_err());
    sched_free(s);
    s = sched_new(2, 2, 1, 1);
    sched_push(s, 0, ACT_F, 0, 0); sched_push(s, 0, ACT_RECV_B, 0, 0); sched_push(s, 0, ACT_SEND_F, 0, 0);
    sched_push(s, 0, ACT_BW, 0, 0);
    sched_push(s, 1, ACT_RECV_F, 1, 0); sched_push(s, 1, ACT_F, 1, 0); sched_push(s, 1, ACT_BW, 1, 0);
    sched_push(s, 1, ACT_SEND_B, 1, 0);
    rc = sim_run(s, &c, NULL, &r);
    CHECK("sim_deadlock_cyclic_recv", rc == -1 && strstr(pt_err(), "0RECV_B0") && strstr(pt_err(), "1RECV_F0") &&
          strstr(pt_err(), "2 of 2 ranks"), "rc %d: %s", rc, pt_err());
    sched_free(s);
    s = sched_new(2, 2, 1, 1);                       /* stage 1 pushed on rank 0 */
    sched_push(s, 0, ACT_F, 1, 0);
    rc = sim_run(s, &c, NULL, &r);
    CHECK("sim_rejects_stage_on_wrong_rank", rc == -1 && strstr(pt_err(), "rank 0 step 0"), "%s", pt_err());
    sim_costs_free(&c);
    sched_free(s);
}

/* The critical path runs from time 0 to the makespan with no gap when links are free. */
static void test_critical_path(void) {
    sched *s = gen("1f1b", 4, 8, 0, NULL);
    sim_result r;
    if (!s || run_unit(s, 1, 1, 1, 1, false, &r)) { CHECK("sim_critical_path_contiguous", 0, "no run"); sched_free(s); return; }
    int gaps = 0;
    const tl_event *first = &r.tl.ev[r.crit[0].ev], *last = &r.tl.ev[r.crit[r.n_crit - 1].ev];
    for (int i = 1; i < r.n_crit; i++)
        gaps += fabs(r.tl.ev[r.crit[i].ev].start - r.tl.ev[r.crit[i - 1].ev].end) > TOL_EXACT;
    CHECK("sim_critical_path_contiguous", r.n_crit > 1 && first->start == 0 && last->end == r.makespan && gaps == 0,
          "%d links, first start %g, last end %g, %d gaps", r.n_crit, first->start, last->end, gaps);
    sim_result_free(&r);
    sched_free(s);
}

/* Every rank's compute events follow each other without overlap, start no earlier than ready. */
static void test_timeline_sane(void) {
    sched *s = gen("interleaved-1f1b", 3, 6, 2, NULL);
    sim_result r;
    if (!s || run_unit(s, 1, 2, 1, 2, false, &r)) { CHECK("sim_timeline_no_overlap", 0, "no run"); sched_free(s); return; }
    double *prev = pt_calloc(3, sizeof(double));
    int bad = 0;
    for (int i = 0; i < r.tl.n; i++) {
        const tl_event *e = &r.tl.ev[i];
        if (e->start < e->ready - TOL_EXACT || e->end < e->start) bad++;
        if (e->stream != TL_COMPUTE) continue;
        if (e->start < prev[e->rank] - TOL_EXACT) bad++;
        prev[e->rank] = e->end;
    }
    CHECK("sim_timeline_no_overlap", bad == 0, "%d bad events", bad);
    free(prev);
    sim_result_free(&r);
    sched_free(s);
}

static const char *write_tmp(const char *name, const char *text) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", getenv("TEST_TMP") ? getenv("TEST_TMP") : "/tmp", name);
    FILE *f = fopen(path, "w");
    if (f) { fputs(text, f); fclose(f); }
    return path;
}

/* Costs JSON: numbers for every stage, arrays per stage, links; errors name the field. */
static void test_costs_json(void) {
    sim_costs c;
    sim_costs_init(&c, 3, 1, 1, 1);
    const char *p = write_tmp("costs_ok.json", "{\"f\": [1, 2, 3], \"b\": 2, \"w\": 0.5, \"act_bytes\": 100,"
                              " \"latency\": 0.01, \"bandwidth\": 1e9, \"step\": 0.5,"
                              " \"links\": [{\"a\": 0, \"b\": 1, \"extra\": 0.25}]}");
    int rc = sim_costs_load_json(&c, p, 0);
    CHECK("sim_costs_json_loads", rc == 0 && c.f[2] == 3 && c.b[1] == 2 && c.w[0] == 0.5 && c.act_bytes[2] == 100 &&
          c.latency == 0.01 && c.bandwidth == 1e9 && c.step == 0.5 && c.n_links == 1 && c.links[0].extra == 0.25,
          "rc %d: %s", rc, pt_err());
    p = write_tmp("costs_bad.json", "{\"f\": [1, 2]}");
    rc = sim_costs_load_json(&c, p, 0);
    CHECK("sim_costs_json_names_field", rc == -1 && strstr(pt_err(), "'f'") && strstr(pt_err(), "costs_bad.json"),
          "rc %d: %s", rc, pt_err());
    p = write_tmp("costs_neg.json", "{\"latency\": -1}");
    rc = sim_costs_load_json(&c, p, 0);
    CHECK("sim_costs_json_negative", rc == -1 && strstr(pt_err(), "'latency'"), "rc %d: %s", rc, pt_err());
    /* bad values are errors naming the file and field, never silently ignored or an inf time */
    static const struct { const char *nm, *text, *want; } bad[] = {
        { "sim_costs_json_link_rank_out_of_range", "{\"links\": [{\"a\": 1, \"b\": 9}]}",
          "costs_x.json: links[0].b = 9 is not a rank (ranks 0..3)" },
        { "sim_costs_json_link_to_itself", "{\"links\": [{\"a\": 1, \"b\": 1}]}", "links[0] joins rank 1 to itself" },
        { "sim_costs_json_link_rank_fraction", "{\"links\": [{\"a\": 0.5, \"b\": 1}]}", "links[0].a must be a rank" },
        { "sim_costs_json_infinite", "{\"f\": 1e999}", "field 'f' = inf must be a finite number" },
        { "sim_costs_json_huge", "{\"b\": [1, 1, 1e300]}", "field 'b'[2] must be a finite number" },
        { "sim_costs_json_huge_link", "{\"links\": [{\"a\": 0, \"b\": 1, \"extra\": 1e999}]}",
          "links[0].extra' must be a finite number" },
        { "sim_costs_json_unknown_key", "{\"act_byte\": 5}", "unknown field 'act_byte' (known: f, b, w, bw, act_bytes" },
        { "sim_costs_json_unknown_link_key", "{\"links\": [{\"a\": 0, \"b\": 1, \"extr\": 1}]}",
          "unknown field 'extr' in links[0] (known: a, b, latency, bandwidth, extra, rate)" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        p = write_tmp("costs_x.json", bad[i].text);
        rc = sim_costs_load_json(&c, p, 4);
        CHECK(bad[i].nm, rc == -1 && strstr(pt_err(), bad[i].want), "rc %d: '%s' lacks '%s'", rc, pt_err(), bad[i].want);
    }
    rc = sim_costs_parse_spec(&c, "f=2,bw=3,act=5");
    CHECK("sim_cost_spec", rc == 0 && c.f[1] == 2 && c.bw[2] == 3 && c.act_bytes[0] == 5, "%s", pt_err());
    rc = sim_costs_parse_spec(&c, "f=2,q=1");
    CHECK("sim_cost_spec_names_key", rc == -1 && strstr(pt_err(), "q=1"), "%s", pt_err());
    sim_costs_free(&c);
}

/* ---- links slow in bandwidth ---- */

/* --slow-link I-J:RATE: units to bytes per second, windows, the slower of two rates, errors; the
 * runtime's parser refuses a rate (it injects delays only). */
static void test_rate_specs(void) {
    sim_costs c;
    sim_costs_init(&c, 4, 1, 1, 1);
    int rc = sim_costs_add_slow_link(&c, "0-1:30Mbit", 4) || sim_costs_add_slow_link(&c, "1-2:4MB/s@2-3", 4) ||
             sim_costs_add_slow_link(&c, "2-3:8kbit/s", 4) || sim_costs_add_slow_link(&c, "2-3:1GB/s", 4) ||
             sim_costs_add_slow_link(&c, "0-1:2e3B/s", 4);
    const sim_fault *f = c.faults;
    CHECK("rate_spec_units_in_bytes_per_s", !rc && c.n_faults == 5 && f[0].link && f[0].rate == 3.75e6 &&
          f[0].amount == 0 && f[1].rate == 4e6 && f[1].from == 2 && f[1].to == 3 && f[2].rate == 1000 &&
          f[3].rate == 1e9 && f[4].rate == 2000, "rc %d %s; rates %g %g %g %g %g", rc, pt_err(), f[0].rate, f[1].rate,
          f[2].rate, f[3].rate, f[4].rate);
    sim_costs at;
    sim_costs_at(&c, 1, &at);     /* 1-2's window not open; 2-3: the slower of 1000 and 1e9; 0-1: of 3.75e6 and 2000 */
    CHECK("rate_costs_at_slower_of_two", sim_costs_link_busy(&at, 3, 2, 1000) == 1 &&
          sim_costs_link_busy(&at, 0, 1, 2000) == 1 && sim_costs_link_busy(&at, 1, 2, 1000) == 0 &&
          sim_costs_message_time(&at, 2, 3, 1000) == 1, "busy 2-3 %g, 0-1 %g, 1-2 %g",
          sim_costs_link_busy(&at, 3, 2, 1000), sim_costs_link_busy(&at, 0, 1, 2000), sim_costs_link_busy(&at, 1, 2, 1000));
    sim_costs_free(&at);
    sim_costs_at(&c, 2, &at);
    CHECK("rate_costs_at_in_window", sim_costs_link_busy(&at, 1, 2, 4e6) == 1, "%g", sim_costs_link_busy(&at, 1, 2, 4e6));
    sim_costs_free(&at);
    int nf = c.n_faults;
    rc = sim_costs_add_slow_link_in(&c, "0-1:30Mbit@2-", 4, "steps");
    CHECK("rate_spec_taken_by_the_runtime_parser", rc == 0 && c.n_faults == nf + 1 &&
          c.faults[nf].rate == 3.75e6 && c.faults[nf].amount == 0 && c.faults[nf].from == 2,
          "rc %d: %s", rc, pt_err());
    rc = sim_costs_add_slow_link_in(&c, "0-1:0MB/s@2-", 4, "steps");
    CHECK("rate_spec_zero_refused_by_the_runtime_parser", rc < 0 && strstr(pt_err(), "--slow-link '0-1:0MB/s@2-'") &&
          strstr(pt_err(), "RATE must be above 0"), "rc %d: %s", rc, pt_err());
    sim_costs_free(&c);
    expect_spec_error("rate_spec_err_unknown_unit", true, "0-1:30Mbps", "unknown unit in '30Mbps'");
    expect_spec_error("rate_spec_err_zero", true, "0-1:0Mbit", "RATE must be above 0");
    expect_spec_error("rate_spec_err_negative", true, "0-1:-3MB/s", "RATE must be above 0");
}

/* Costs of P = 2 with messages of 1e6 bytes on a link of 1e6 bytes/s (1 s each), f = 0.25. */
static void shaped_costs(sim_costs *c, double latency, double extra) {
    sim_costs_init(c, 2, 0.25, 0.25, 0.25);
    c->act_bytes[0] = c->act_bytes[1] = 1e6;
    c->latency = latency;
    sim_costs_add_slow_link(c, "0-1:1MB/s", 2);
    if (extra > 0) sim_costs_set_link(c, 0, 1, -1, -1, extra);
}

/* When the event of (rank, kind, stage, mb) of iteration 0 starts in r, or -1. */
static double start_of(const sim_result *r, int rank, sched_kind k, int g, int mb) {
    for (int i = 0; i < r->tl.n; i++) {
        const tl_event *e = &r->tl.ev[i];
        if (e->rank == rank && e->act.kind == k && e->act.stage == g && e->act.mb == mb && e->iter == 0) return e->start;
    }
    return -1;
}

/* Closed forms on a link of rate R with messages of `bytes` (s = bytes / R = 1): gpipe, P = 2, M = 4:
 * forwards end at 0.25 k (k = 1..4), back to back, so forward k arrives at 0.25 + k s (it waits
 * for the k-1 before it: the second of two back to back arrives 2 bytes / R after the first left);
 * a pure delay of s would have it at 0.25 k + s. The gradients go the other way in their own
 * queue; latency and extra come after the queue. */
static void test_rate_queue(void) {
    sched *s = gen("gpipe", 2, 4, 0, NULL);
    sim_costs c;
    sim_result r;
    shaped_costs(&c, 0, 0);
    int rc = sim_run(s, &c, &(sim_opts){ 1, false }, &r), ok = rc == 0;
    for (int k = 1; ok && k <= 4; k++) ok = fabs(start_of(&r, 1, ACT_F, 1, k - 1) - (0.25 + k)) < TOL_EXACT;
    CHECK("rate_forwards_queue_one_behind_another", ok, "rc %d; 1F1 at %g (want 2.25), 1F3 at %g (want 4.25)", rc,
          rc ? -1 : start_of(&r, 1, ACT_F, 1, 1), rc ? -1 : start_of(&r, 1, ACT_F, 1, 3));
    /* rank 1: F's end at 4.5, BW's (0.5 each) at 5, 5.5, 6, 6.5; the gradients queue from 5 on their own:
     * arrive 6, 7, 8, 9, so rank 0's BW of mb k starts at 6 + k */
    ok = rc == 0;
    for (int k = 0; ok && k < 4; k++) ok = fabs(start_of(&r, 0, ACT_BW, 0, k) - (6 + k)) < TOL_EXACT;
    CHECK("rate_gradients_queue_the_other_way_on_their_own", ok, "0BW0 at %g (want 6), 0BW3 at %g (want 9)",
          rc ? -1 : start_of(&r, 0, ACT_BW, 0, 0), rc ? -1 : start_of(&r, 0, ACT_BW, 0, 3));
    CHECK("rate_iteration_closed_form", rc == 0 && fabs(r.iteration_time - 9.5) < TOL_EXACT, "%g (want 9.5)",
          rc ? -1 : r.iteration_time);
    int via_queue = 0;     /* the critical path runs from one message to the one it queued behind */
    for (int i = 0; rc == 0 && i + 1 < r.n_crit; i++) {
        const tl_event *a = &r.tl.ev[r.crit[i].ev], *b = &r.tl.ev[r.crit[i + 1].ev];
        via_queue += a->stream == TL_SEND && b->stream == TL_SEND;
    }
    CHECK("rate_critical_path_through_the_queue", via_queue > 0, "no send -> send step in %d events", r.n_crit);
    if (rc == 0) sim_result_free(&r);
    sim_costs_free(&c);
    /* latency 0.5 and extra 0.25 after the queue: each arrival 0.75 later */
    shaped_costs(&c, 0.5, 0.25);
    rc = sim_run(s, &c, &(sim_opts){ 1, false }, &r);
    CHECK("rate_then_latency_and_extra", rc == 0 && fabs(start_of(&r, 1, ACT_F, 1, 1) - 3) < TOL_EXACT &&
          fabs(sim_costs_message_time(&c, 0, 1, 1e6) - 0.75) < TOL_EXACT, "1F1 at %g (want 3)",
          rc ? -1 : start_of(&r, 1, ACT_F, 1, 1));
    if (rc == 0) sim_result_free(&r);
    sim_costs_free(&c);
    /* the same from a costs file's links[].rate, with the lowered schedule */
    sched *low = sched_lower(s);
    sim_costs_init(&c, 2, 0.25, 0.25, 0.25);
    const char *p = write_tmp("costs_rate.json", "{\"act_bytes\": 1e6, \"links\": [{\"a\": 1, \"b\": 0, \"rate\": 1e6}]}");
    rc = sim_costs_load_json(&c, p, 2) || sim_run(low, &c, &(sim_opts){ 1, false }, &r);
    CHECK("rate_from_costs_file_lowered", rc == 0 && fabs(r.iteration_time - 9.5) < TOL_EXACT, "rc %d %s: %g", rc,
          pt_err(), rc ? -1 : r.iteration_time);
    if (rc == 0) sim_result_free(&r);
    sim_costs_free(&c);
    /* a rate on a link whose messages carry no bytes changes nothing: an error */
    sim_costs_init(&c, 2, 1, 1, 1);
    sim_costs_add_slow_link(&c, "0-1:1MB/s", 2);
    rc = sim_costs_check_faults(&c, s, 1);
    CHECK("rate_err_messages_of_0_bytes", rc < 0 && strstr(pt_err(), "carry 0 bytes") && strstr(pt_err(), "--act-bytes"),
          "%s", pt_err());
    sim_costs_free(&c);
    sched_free(low), sched_free(s);
}

/* Chrome trace: valid JSON, metadata per rank, one X span per event, flows paired, counters. */
static void test_trace(void) {
    sched *s = gen("1f1b", 3, 4, 0, NULL), *l = s ? sched_lower(s) : NULL;
    sim_result r;
    if (!l || run_unit(l, 1, 1, 1, 1, false, &r)) { CHECK("sim_trace_valid_json", 0, "no run"); sched_free(s); sched_free(l); return; }
    const char *path = write_tmp("t.json", "");
    int rc = trace_write(&r.tl, path);
    size_t len;
    char *text = rc ? NULL : pt_read_file(path, &len);
    cJSON *root = text ? cJSON_Parse(text) : NULL, *evs = cJSON_GetObjectItem(root, "traceEvents");
    CHECK("sim_trace_valid_json", cJSON_IsArray(evs), "rc %d, parse failed", rc);
    int n_x = 0, n_s = 0, n_f = 0, n_c = 0, n_pname = 0;
    long id_sum = 0;
    cJSON *e;
    cJSON_ArrayForEach(e, evs) {
        const char *ph = cJSON_GetStringValue(cJSON_GetObjectItem(e, "ph"));
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItem(e, "name"));
        int id = (int)cJSON_GetNumberValue(cJSON_GetObjectItem(e, "id"));
        if (!ph) continue;
        n_x += !strcmp(ph, "X");
        if (!strcmp(ph, "s")) { n_s++; id_sum += id; }
        if (!strcmp(ph, "f")) { n_f++; id_sum -= id; }
        n_c += !strcmp(ph, "C");
        n_pname += !strcmp(ph, "M") && name && !strcmp(name, "process_name");
    }
    int n_send = 0;
    for (int i = 0; i < r.tl.n; i++) n_send += r.tl.ev[i].stream == TL_SEND;
    CHECK("sim_trace_spans_and_metadata", n_x == r.tl.n && n_pname == 3, "%d X of %d events, %d process names", n_x, r.tl.n, n_pname);
    CHECK("sim_trace_flows_paired", n_s == n_send && n_f == n_s && id_sum == 0 && n_send > 0, "%d s, %d f, %d sends", n_s, n_f, n_send);
    CHECK("sim_trace_memory_counters", n_c == 2 * 3 * 4, "%d counters, want one per F and per BW", n_c);
    cJSON_Delete(root);
    free(text);
    sim_result_free(&r);
    sched_free(l);
    sched_free(s);
}

/* A compute-only timeline links every send to the action that consumed its data. */
static void test_compute_only_links(void) {
    sched *s = gen("1f1b", 3, 4, 0, NULL);
    sim_result r;
    if (!s || run_unit(s, 1, 1, 1, 1, false, &r)) { CHECK("sim_compute_only_sends_linked", 0, "no run"); sched_free(s); return; }
    int sends = 0, linked = 0;
    for (int i = 0; i < r.tl.n; i++) {
        const tl_event *e = &r.tl.ev[i];
        if (e->stream != TL_SEND) continue;
        sends++;
        if (e->link < 0) continue;
        const tl_event *d = &r.tl.ev[e->link];
        linked += d->rank == e->peer && d->stream == TL_COMPUTE && d->act.mb == e->act.mb && d->start >= e->end;
    }
    CHECK("sim_compute_only_sends_linked", sends == 2 * 2 * 4 && linked == sends, "%d of %d sends linked", linked, sends);
    sim_result_free(&r);
    sched_free(s);
}

/* SVG: well-formed enough to contain the title, legend, one rect per non-empty event. */
static void test_svg(void) {
    sched *s = gen("interleaved-1f1b", 2, 4, 2, NULL);
    sim_result r;
    if (!s || run_unit(s, 1, 1, 1, 1, false, &r)) { CHECK("sim_svg_written", 0, "no run"); sched_free(s); return; }
    const char *path = write_tmp("t.svg", "");
    svg_opts o = { "interleaved P=2", "bubble", 800 };
    int rc = svg_write(&r.tl, &o, path);
    size_t len;
    char *text = rc ? NULL : pt_read_file(path, &len);
    int rects = 0, drawn = 0;
    for (const char *p = text; p && (p = strstr(p, "<rect")); p++) rects++;
    for (int i = 0; i < r.tl.n; i++) drawn += r.tl.ev[i].end > r.tl.ev[i].start;
    CHECK("sim_svg_written", text && !strncmp(text, "<svg", 4) && strstr(text, "</svg>") &&
          strstr(text, "interleaved P=2") && strstr(text, "F forward") && rects >= drawn, "rc %d, %d rects for %d events", rc, rects, drawn);
    CHECK("sim_svg_bad_path", svg_write(&r.tl, &o, "/nonexistent/x.svg") == -1 && strstr(pt_err(), "/nonexistent/x.svg"),
          "%s", pt_err());
    free(text);
    sim_result_free(&r);
    sched_free(s);
}

/* Pipedream (asynchronous: REDUCE_GRAD + STEP after every backward) simulates like 1f1b's order. */
static void test_pipedream(void) {
    sched *s = gen("pipedream", 4, 8, 0, NULL), *t = gen("1f1b", 4, 8, 0, NULL);
    sim_result a, b;
    if (!s || !t || run_unit(s, 1, 1, 1, 2, true, &a) || run_unit(t, 1, 1, 1, 2, true, &b)) {
        CHECK("sim_pipedream_runs", 0, "no run"); sched_free(s); sched_free(t); return;
    }
    CHECK("sim_pipedream_runs", a.makespan == b.makespan, "pipedream %g 1f1b %g", a.makespan, b.makespan);
    sim_result_free(&a); sim_result_free(&b);
    sched_free(s); sched_free(t);
}

int main(void) {
    test_gpipe_1f1b_bubble();
    test_peak_memory_classic();
    test_interleaved_bubble();
    test_zb_h1_bubble();
    test_zb_parallelogram("zb-h2");
    test_zb_parallelogram("zb-v");
    test_link_delays();
    test_slow_stage();
    test_specs();
    test_check_faults();
    test_sim_windows();
    test_iterations();
    test_lowered_equals_compute_only();
    test_deadlock();
    test_critical_path();
    test_timeline_sane();
    test_costs_json();
    test_rate_specs();
    test_rate_queue();
    test_trace();
    test_compute_only_links();
    test_svg();
    test_pipedream();
    TEST_DONE();
}
