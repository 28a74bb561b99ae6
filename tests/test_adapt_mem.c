/* The rank memory model that the planner and train --adapt share (plan/plan.h, plan_mem.c):
 * plan_mem_held_max is plan_mem_need's exact inverse (the limit --adapt derives is the most
 * microbatches whose need fits), it honours its cap and says -1 when not even the fixed part fits;
 * and the planner's split fits a stage exactly when plan_mem_need says so (the same function on
 * both sides, so the two never disagree by a rounding). */
#include "plan/plan.h"
#include "test.h"
#include "util/pt.h"

/* Every held in 0..cap read back from its own need, and one byte less holds one fewer. */
static int inverse_holds(const plan_mem_model *m, int cap) {
    for (int h = 0; h <= cap; h++) {
        double need = plan_mem_need(m, h);
        if (plan_mem_held_max(m, need, cap) != h) return 0;
        if (h > 0 && plan_mem_held_max(m, need - 1, cap) != h - 1) return 0;
    }
    return 1;
}

static void check_inverse(void) {
    plan_mem_model a = { .fixed = 26.8e6, .act = 16.3e6, .extra = 0 };   /* 4 x 256, a stage of 2 blocks */
    plan_mem_model b = { .fixed = 612352, .act = 234624, .extra = 4096 };   /* the tests' tiny model */
    plan_mem_model c = { .fixed = 1.0e9 / 3, .act = 1.0e8 / 7, .extra = 1.0e7 / 11 };   /* not exact in binary */
    CHECK("adapt mem: held_max inverts need (4 x 256 stage, M = 8)", inverse_holds(&a, 8), "no");
    CHECK("adapt mem: held_max inverts need (with extra)", inverse_holds(&b, 32), "no");
    CHECK("adapt mem: held_max inverts need (thirds and sevenths)", inverse_holds(&c, 64), "no");
    pt_rng r;
    pt_rng_seed(&r, 19);
    int bad = 0;
    for (int i = 0; i < 10000; i++) {   /* any memory: the result fits, one more does not (below the cap) */
        plan_mem_model m = { .fixed = 1e9 * pt_rng_uniform(&r), .act = 1 + 1e8 * pt_rng_uniform(&r),
                             .extra = 1e7 * pt_rng_uniform(&r) };
        double have = 3e9 * pt_rng_uniform(&r);
        int h = plan_mem_held_max(&m, have, 1000000);
        if (h < 0 ? plan_mem_need(&m, 0) <= have
                  : plan_mem_need(&m, h) > have || (h < 1000000 && plan_mem_need(&m, h + 1) <= have))
            bad++;
    }
    CHECK("adapt mem: 10000 random models and memories: the most that fits", bad == 0, "%d wrong", bad);
}

static void check_edges(void) {
    plan_mem_model m = { .fixed = 100, .act = 10, .extra = 5 };
    CHECK("adapt mem: capped at cap", plan_mem_held_max(&m, 1e12, 8) == 8, "%d", plan_mem_held_max(&m, 1e12, 8));
    CHECK("adapt mem: fixed + extra fit, no microbatch: 0", plan_mem_held_max(&m, 109, 8) == 0, "%d",
          plan_mem_held_max(&m, 109, 8));
    CHECK("adapt mem: not even fixed + extra: -1", plan_mem_held_max(&m, 104, 8) == -1, "%d",
          plan_mem_held_max(&m, 104, 8));
    plan_mem_model z = { .fixed = 100, .act = 0, .extra = 0 };
    CHECK("adapt mem: no activations: cap", plan_mem_held_max(&z, 100, 5) == 5, "%d", plan_mem_held_max(&z, 100, 5));
}

/* One item on one stage of cap bytes with `inflight` microbatches: the planner's fit. */
static int split_fits(double fixed, double act, double inflight, double cap) {
    double work = 1, speed = 1;
    plan_chain c = { .n = 1, .K = 1, .work = &work, .mem_fixed = &fixed, .mem_act = &act, .speed = &speed,
                     .cap = &cap, .inflight = &inflight };
    return plan_split_fits(&c);
}

static void check_planner_agrees(void) {
    int bad = 0;
    pt_rng r;
    pt_rng_seed(&r, 26);
    for (int i = 0; i < 2000; i++) {
        plan_mem_model m = { .fixed = 1e9 * pt_rng_uniform(&r), .act = 1 + 1e8 * pt_rng_uniform(&r) };
        double have = 2e9 * pt_rng_uniform(&r) + 1;
        int h = plan_mem_held_max(&m, have, 1000000);
        if (h < 0) continue;
        bad += !split_fits(m.fixed, m.act, h, have) || split_fits(m.fixed, m.act, h + 1, have);
    }
    CHECK("adapt mem: the planner's split fits exactly the microbatches held_max gives (2000 cases)", bad == 0,
          "%d disagree", bad);
}

int main(void) {
    check_inverse();
    check_edges();
    check_planner_agrees();
    TEST_DONE();
}
