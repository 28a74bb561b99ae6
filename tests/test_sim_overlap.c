/* The simulator's overlapped gradient reduction (sim_costs.reduce_overlap, the runtime's default):
 * a stage's REDUCE_GRAD runs on the rank's communication stream from the stage's last W, STEP
 * waits for it, and busy time counts a reduction under compute once. Kept apart from
 * tests/test_sim.c (the simulator's own tests). */
#include "sched/sched.h"
#include "sim/sim.h"
#include "test.h"
#include "util/pt.h"
#include <string.h>

#define TOL_EXACT 1e-9   /* small integer costs: sums are exact in double */

static sched *gen(const char *name, int P, int M, int v) {
    sched_params p = { .ranks = P, .microbatches = M, .chunks = v, .cost_f = 1, .cost_b = 1, .cost_w = 1 };
    return sched_generate(name, &p);
}

/* f = b = w = 1, REDUCE_GRAD `red` per stage, STEP 1; reduce_overlap as given. */
static int run(const sched *s, double red, bool overlap, sim_result *r) {
    sim_costs c;
    sim_costs_init(&c, s->n_stages, 1, 1, 1);
    for (int g = 0; g < s->n_stages; g++) c.reduce[g] = red;
    c.step = 1;
    c.reduce_overlap = overlap;
    sim_opts o = { .iterations = 1 };
    int rc = sim_run(s, &c, &o, r);
    sim_costs_free(&c);
    return rc;
}

/* On every rank: each REDUCE_GRAD (communication stream) starts at its stage's last W or BW end,
 * or when the rank's previous reduction ended, whichever is later; STEP starts after all. */
static int placed_at_last_w(const sim_result *r, int P) {
    const timeline *tl = &r->tl;
    for (int rank = 0; rank < P; rank++) {
        double red_free = 0, step_start = -1, red_max = 0;
        for (int i = 0; i < tl->n; i++) {
            const tl_event *e = &tl->ev[i];
            if (e->rank != rank) continue;
            if (e->act.kind == ACT_STEP) step_start = e->start;
            if (e->act.kind != ACT_REDUCE_GRAD) continue;
            double w_end = 0;
            for (int k = 0; k < tl->n; k++) {
                const tl_event *w = &tl->ev[k];
                if (w->act.stage == e->act.stage && (w->act.kind == ACT_W || w->act.kind == ACT_BW) && w->end > w_end)
                    w_end = w->end;
            }
            double want = w_end > red_free ? w_end : red_free;
            if (e->stream != TL_SEND || fabs(e->start - want) > TOL_EXACT) return 0;
            red_free = e->end;
            red_max = e->end > red_max ? e->end : red_max;
        }
        if (step_start < red_max - TOL_EXACT) return 0;
    }
    return 1;
}

static void test_overlap(const char *name, int P, int M, int v) {
    char nm[160];
    sched *s = gen(name, P, M, v);
    sim_result a, b, z0, z1;
    int rc = !s || run(s, 3, false, &a) || run(s, 3, true, &b) || run(s, 0, false, &z0) || run(s, 0, true, &z1);
    snprintf(nm, sizeof nm, "sim overlap %s P=%d M=%d v=%d: each REDUCE_GRAD from its stage's last W, STEP after",
             name, P, M, v);
    CHECK(nm, !rc && placed_at_last_w(&b, P), "%s", rc ? pt_err() : "misplaced");
    snprintf(nm, sizeof nm, "sim overlap %s P=%d M=%d v=%d: %s than deferred (%g vs %g)", name, P, M, v,
             v > 1 ? "shorter" : "no longer", rc ? 0 : b.iteration_time, rc ? 0 : a.iteration_time);
    CHECK(nm, !rc && (v > 1 ? b.iteration_time < a.iteration_time - TOL_EXACT
                            : b.iteration_time <= a.iteration_time + TOL_EXACT), "not");
    snprintf(nm, sizeof nm, "sim overlap %s P=%d M=%d v=%d: free reductions change nothing", name, P, M, v);
    CHECK(nm, !rc && fabs(z0.iteration_time - z1.iteration_time) < TOL_EXACT &&
              fabs(z0.bubble_fraction - z1.bubble_fraction) < TOL_EXACT, "%g vs %g", z0.iteration_time,
          z1.iteration_time);
    int ok = !rc;
    for (int r = 0; r < P && ok; r++) ok = b.busy[r] <= b.makespan + TOL_EXACT && b.busy[r] >= a.busy[r] - 3 * v - TOL_EXACT;
    snprintf(nm, sizeof nm, "sim overlap %s P=%d M=%d v=%d: busy counts a reduction under compute once", name, P, M, v);
    CHECK(nm, ok, "busy above the makespan");
    if (!rc) { sim_result_free(&a); sim_result_free(&b); sim_result_free(&z0); sim_result_free(&z1); }
    sched_free(s);
}

/* One rank, two chunks (interleaved): stage 1's reduction runs while stage 0 still computes.
 * Hand-computed: the deferred reduction adds 2 x 3 after the last compute; overlapped, stage 1's
 * 3 hide under stage 0's remaining work, so the iteration is shorter by exactly that overlap. */
static void test_one_rank_two_chunks(void) {
    sched *s = gen("interleaved-1f1b", 1, 2, 2);
    sim_result a, b;
    int rc = !s || run(s, 3, false, &a) || run(s, 3, true, &b);
    double hidden = 0;
    if (!rc) {   /* how much of stage 1's reduction lies before stage 0's last W ends */
        double w0 = 0, r1s = 0, r1e = 0;
        for (int i = 0; i < b.tl.n; i++) {
            const tl_event *e = &b.tl.ev[i];
            if (e->act.stage == 0 && (e->act.kind == ACT_W || e->act.kind == ACT_BW) && e->end > w0) w0 = e->end;
            if (e->act.stage == 1 && e->act.kind == ACT_REDUCE_GRAD) { r1s = e->start; r1e = e->end; }
        }
        hidden = (w0 < r1e ? w0 : r1e) - r1s;
    }
    CHECK("sim overlap, one rank, two chunks: the iteration shrinks by the reduction hidden under compute",
          !rc && hidden > 0 && fabs(a.iteration_time - b.iteration_time - hidden) < TOL_EXACT,
          "deferred %g, overlapped %g, hidden %g", rc ? 0 : a.iteration_time, rc ? 0 : b.iteration_time, hidden);
    if (!rc) { sim_result_free(&a); sim_result_free(&b); }
    sched_free(s);
}

int main(void) {
    test_overlap("1f1b", 4, 8, 0);
    test_overlap("gpipe", 2, 4, 0);
    test_overlap("interleaved-1f1b", 2, 4, 2);
    test_overlap("zb-h1", 4, 8, 0);
    test_one_rank_two_chunks();
    TEST_DONE();
}
