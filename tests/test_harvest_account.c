/* The harvester's accounting of one step (src/harvest/harvest_predict.c) on made-up timelines,
 * no threads, no clock: rank 0 waits at its RECV_B from t=1 for a message sent at t=3.
 * (a) A program's slot [1, 3.5] that the arrival woke out of at t=3.4: the wait's idle counts
 *     to the wake-up (2.4 s: the denominator of the fraction harvested, which the program's CPU
 *     cannot pass), the overrun from it (0.1 s), its CPU as recorded.
 * (b) A C task's step [1, 3.5] (woke 0: ran on the rank's thread): the idle ends at the
 *     arrival (2 s), the overrun is what ran past it (0.5 s).
 * (c) The wake-up before the arrival (a slot that ended by its deadline): nothing changes. */
#include "harvest/harvest.h"
#include "util/pt.h"
#include "test.h"
#include <math.h>

/* rank 0: 0F0, 0RECV_B0, 0B0; rank 1: 1F0, 1B0, 1SEND_B0 (what the wait needs) */
static sched *two_ranks(void) {
    sched *s = sched_new(2, 2, 1, 1);
    sched_push(s, 0, ACT_F, 0, 0);
    sched_push(s, 0, ACT_RECV_B, 0, 0);
    sched_push(s, 0, ACT_B, 0, 0);
    sched_push(s, 1, ACT_F, 1, 0);
    sched_push(s, 1, ACT_B, 1, 0);
    sched_push(s, 1, ACT_SEND_B, 1, 0);
    return s;
}

static int push(timeline *tl, int rank, sched_kind k, int stage, tl_stream sm, double t0, double t1) {
    tl_event e = { .act = { .stage = stage, .kind = k, .mb = 0 }, .rank = rank, .stream = sm, .peer = -1,
                   .link = -1, .ready = t0, .start = t0, .end = t1 };
    timeline_push(tl, &e);
    return tl->n - 1;
}

/* One step with a side event [1, 3.5] of `cpu` seconds in rank 0's wait, woken at `woke`. */
static harvest_stats account(const sched *s, double woke, double cpu) {
    harvest *h;
    harvest_create(&h);
    harvest_start(h, 2, 0, 2);
    harvest_bind(h, s, 2);
    timeline tl;
    timeline_init(&tl, s, NULL, 1);
    push(&tl, 0, ACT_F, 0, TL_COMPUTE, 0, 1);
    tl_event side = { .act = { .stage = -1, .kind = ACT_N_KINDS, .mb = 0 }, .rank = 0, .stream = TL_SIDE,
                      .peer = -1, .link = -1, .ready = 1, .start = 1, .end = 3.5, .cpu = cpu, .woke = woke };
    timeline_push(&tl, &side);
    int recv = push(&tl, 0, ACT_RECV_B, 0, TL_RECV, 1, 3.6);
    push(&tl, 0, ACT_B, 0, TL_COMPUTE, 3.6, 4.6);
    push(&tl, 1, ACT_F, 1, TL_COMPUTE, 0.5, 1.5);
    push(&tl, 1, ACT_B, 1, TL_COMPUTE, 1.5, 3);
    int send = push(&tl, 1, ACT_SEND_B, 1, TL_SEND, 3, 3);
    tl.ev[send].link = recv;                      /* the message was there at the send's start */
    harvest_stats st;
    harvest_after_step(h, &tl, NULL, &st);
    timeline_free(&tl);
    harvest_free(h);
    return st;
}

static int near(double a, double b) { return fabs(a - b) < 1e-9; }

int main(void) {
    sched *s = two_ranks();
    harvest_stats a = account(s, 3.4, 2.2);
    CHECK("account: a program's wait counts to the rank's wake-up after the arrival", near(a.idle_s, 2.4),
          "idle %.6f s, expected 2.4", a.idle_s);
    CHECK("account: its overrun is from the wake-up to its stop", near(a.overrun_s, 0.1), "overrun %.6f s", a.overrun_s);
    CHECK("account: its CPU as recorded, within the wait's idle", near(a.side_cpu_s, 2.2) && a.side_cpu_s <= a.idle_s,
          "cpu %.6f s, idle %.6f s", a.side_cpu_s, a.idle_s);
    CHECK("account: the slot inside the wait is used", near(a.used_s, 2.4) && near(a.side_s, 2.5),
          "used %.6f s, side %.6f s", a.used_s, a.side_s);
    harvest_stats b = account(s, 0, 2.5);
    CHECK("account: a C task's wait ends at the arrival", near(b.idle_s, 2.0), "idle %.6f s", b.idle_s);
    CHECK("account: ... and what ran past it is overrun", near(b.overrun_s, 0.5), "overrun %.6f s", b.overrun_s);
    harvest_stats c = account(s, 2.0, 1.0);
    CHECK("account: a wake-up before the arrival changes nothing", near(c.idle_s, 2.0) && near(c.overrun_s, 0.5),
          "idle %.6f s, overrun %.6f s", c.idle_s, c.overrun_s);
    sched_free(s);
    TEST_DONE();
}
