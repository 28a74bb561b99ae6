/* The main job first (src/harvest/harvest_backoff.c): the harvester fed made-up step timelines
 * of a two-rank schedule (no threads, no clock: the numbers are the test's), in which steps
 * with side work have the ranks' compute (a) 10% longer than steps without: it backs off to
 * side work in about 2% / 10% of the steps and says the cost; (b) no longer, both with the same
 * +-10% noise: it keeps side work in every step but the baseline's one in HV_BO_CONTROL + 1;
 * (c) paused steps serve as the baseline (no resting steps of its own); (e) a cost that goes
 * away after 100 steps is forgotten within 25 (side work back in every step but the
 * baseline's); (d) the fixed policy
 * never rests, also when set for a step the default one had decided to rest. Deterministic: a seeded generator makes the noise. */
#include "harvest/harvest.h"
#include "util/pt.h"
#include "test.h"

#include <math.h>
#include <string.h>

/* rank 0: 0F0, 0RECV_B0, 0B0; rank 1: 1RECV_F0, 1F0, 1B0 */
static sched *two_ranks(void) {
    sched *s = sched_new(2, 2, 1, 1);
    sched_push(s, 0, ACT_F, 0, 0);
    sched_push(s, 0, ACT_RECV_B, 0, 0);
    sched_push(s, 0, ACT_B, 0, 0);
    sched_push(s, 1, ACT_RECV_F, 1, 0);
    sched_push(s, 1, ACT_F, 1, 0);
    sched_push(s, 1, ACT_B, 1, 0);
    return s;
}

static void push(timeline *tl, int rank, sched_kind k, int stage, tl_stream sm, double t0, double t1, int side) {
    tl_event e = { .act = { .stage = stage, .kind = k, .mb = 0 }, .rank = rank, .stream = sm, .peer = -1,
                   .link = -1, .ready = t0, .start = t0, .end = t1 };
    if (side) e.act = (sched_action){ .stage = -1, .kind = ACT_N_KINDS, .mb = 0 }, e.cpu = t1 - t0;
    timeline_push(tl, &e);
}

/* One step's timeline: compute units of length d (ms), a side step in rank 0's wait when side. */
static void step_timeline(timeline *tl, const sched *s, double d, int side) {
    timeline_init(tl, s, NULL, 1);
    push(tl, 0, ACT_F, 0, TL_COMPUTE, 0, d, 0);
    if (side) push(tl, 0, ACT_N_KINDS, 0, TL_SIDE, d, 2 * d, 1);
    push(tl, 0, ACT_RECV_B, 0, TL_RECV, d, 3 * d, 0);
    push(tl, 0, ACT_B, 0, TL_COMPUTE, 3 * d, 4 * d, 0);
    push(tl, 1, ACT_RECV_F, 1, TL_RECV, 0, d, 0);
    push(tl, 1, ACT_F, 1, TL_COMPUTE, d, 2 * d, 0);
    push(tl, 1, ACT_B, 1, TL_COMPUTE, 2 * d, 3 * d, 0);
}

typedef struct { int rested, late_rested, after_rested; double slow; } outcome;

/* n steps; a step with side work (not resting, not paused) takes `cost` longer up to step
 * cost_until (0: throughout), then nothing; noise +-jitter; every `pause_every`-th step paused by
 * the caller (0: never). Rested counts over the last half. */
static outcome drive_until(const harvest_policy *pol, double cost, int cost_until, double jitter, int pause_every,
                           int n) {
    sched *s = two_ranks();
    harvest *h;
    harvest_create(&h);
    harvest_set_policy(h, pol);
    harvest_start(h, 2, 0, 2);
    harvest_bind(h, s, 2);
    pt_rng rng;
    pt_rng_seed(&rng, 11);
    outcome o = { 0, 0, 0, NAN };
    for (int t = 1; t <= n; t++) {
        int paused = pause_every > 0 && t % pause_every == 0;
        harvest_pause(h, paused);
        int side = !paused && !harvest_resting(h);
        double c = cost_until == 0 || t <= cost_until ? cost : 0;
        double d = 1e-3 * (1 + jitter * (2 * pt_rng_uniform(&rng) - 1)) * (side ? 1 + c : 1);
        timeline tl;
        harvest_stats st;
        step_timeline(&tl, s, d, side);
        harvest_after_step(h, &tl, NULL, &st);
        timeline_free(&tl);
        o.rested += st.rested;
        if (t > n / 2) o.late_rested += st.rested;
        if (cost_until > 0 && t > cost_until + 25 && t <= cost_until + 85) o.after_rested += st.rested;
        o.slow = st.slow;
    }
    harvest_free(h);
    sched_free(s);
    return o;
}

static outcome drive(const harvest_policy *pol, double cost, double jitter, int pause_every, int n) {
    return drive_until(pol, cost, 0, jitter, pause_every, n);
}

/* Backed off (most steps resting), then the fixed policy set for the next step: it runs with
 * side work (a policy without backoff never rests, whatever was decided before). */
static int fixed_after_backoff(void) {
    harvest_policy def = harvest_policy_default(), fixed = harvest_policy_fixed();
    sched *s = two_ranks();
    harvest *h;
    harvest_create(&h);
    harvest_set_policy(h, &def);
    harvest_start(h, 2, 0, 2);
    harvest_bind(h, s, 2);
    int rested_then_fixed = -1;
    for (int t = 1; t <= 80 && rested_then_fixed < 0; t++) {
        int side = !harvest_resting(h);
        timeline tl;
        harvest_stats st;
        step_timeline(&tl, s, 1e-3 * (side ? 1.1 : 1) * (1 + 0.001 * (t % 3)), side);
        harvest_after_step(h, &tl, NULL, &st);
        timeline_free(&tl);
        if (t > 40 && harvest_resting(h)) {
            harvest_set_policy(h, &fixed);
            rested_then_fixed = harvest_resting(h);
        }
    }
    harvest_free(h);
    sched_free(s);
    return rested_then_fixed;
}

int main(void) {
    harvest_policy def = harvest_policy_default(), fixed = harvest_policy_fixed();
    outcome a = drive(&def, 0.10, 0.01, 0, 120);
    CHECK("backoff: side work 10% slower: the cost estimated about 10%", a.slow > 0.07 && a.slow < 0.13,
          "%.4f", a.slow);
    CHECK("backoff: side work 10% slower: most steps rest (side work in about 2%/10% of them)",
          a.late_rested >= 40 && a.late_rested <= 55, "%d of the last 60 steps rested", a.late_rested);
    outcome b = drive(&def, 0.0, 0.10, 0, 120);
    CHECK("backoff: side work costs nothing (noise +-10% alike): only the baseline's steps rest",
          b.late_rested >= 3 && b.late_rested <= 8, "%d of the last 60 steps rested (cost %.4f)", b.late_rested, b.slow);
    outcome c = drive(&def, 0.0, 0.01, 4, 120);
    CHECK("backoff: with steps paused by the caller (the baseline), none rests", c.rested == 0, "%d rested", c.rested);
    outcome d = drive(&fixed, 0.10, 0.01, 0, 60);
    CHECK("backoff: the fixed policy never rests", d.rested == 0, "%d rested", d.rested);
    /* a cost that goes away (a slow spell, another tenant's burst) is forgotten: backed off to
     * 1 step in 8 (50% slower) until step 100, it rests only the baseline's steps (1 in 11) from
     * about 20 steps after (it keeps the last 64 steps; with its rings of 16 alone it rested up
     * to step 142 here, 18 of the 60 steps counted) */
    outcome e = drive_until(&def, 0.50, 100, 0.01, 0, 200);
    CHECK("backoff: a cost that went away: side work comes back (only the baseline's steps rest 25 steps on)",
          e.after_rested >= 4 && e.after_rested <= 7, "%d of steps 126..185 rested", e.after_rested);
    int f = fixed_after_backoff();
    CHECK("backoff: a step the default policy would rest runs with side work under the fixed one", f == 0,
          "%s", f < 0 ? "never backed off" : "it rests");
    printf("# rested: %d %d %d %d %d (late %d %d %d); cost %.4f %.4f\n", a.rested, b.rested, c.rested, d.rested, e.rested, a.late_rested, b.late_rested, e.after_rested, a.slow, b.slow);
    TEST_DONE();
}
