/* A side task failing inside a bubble (src/harvest/harvest.c), without threads or timing: the
 * harvester is fed made-up step timelines of a two-rank schedule whose rank-0 wait lasts 100 s,
 * so the conditional rule always lets a step start in it, and the test itself calls the wait
 * hook as the executor does (a run_wait whose message never arrives). A busy task with fail=2
 * runs its first step at a step boundary (measured there: harvest_after_step) and its second in
 * the bubble, where it fails: the hook still returns 0 (the training goes on), the failing step
 * is not recorded as side work, the next boundary reports it as a "failed" note with its error,
 * and later waits run no step of it. test_harvest.c covers the trainer's side (the numbers of
 * the run unchanged, the event); its failing task fails at the boundary, this one in a wait. */
#include "harvest/harvest.h"
#include "harvest/harvest_tasks.h"
#include "util/pt.h"
#include "test.h"
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

static void push(timeline *tl, int rank, sched_kind k, int stage, tl_stream sm, double t0, double t1) {
    tl_event e = { .act = { .stage = stage, .kind = k, .mb = 0 }, .rank = rank, .stream = sm, .peer = -1,
                   .link = -1, .ready = t0, .start = t0, .end = t1 };
    timeline_push(tl, &e);
}

/* One step: rank 0 waits 100 s at its RECV_B (no side work in the timeline). */
static void step_timeline(timeline *tl, const sched *s) {
    timeline_init(tl, s, NULL, 1);
    push(tl, 0, ACT_F, 0, TL_COMPUTE, 0, 1);
    push(tl, 0, ACT_RECV_B, 0, TL_RECV, 1, 101);
    push(tl, 0, ACT_B, 0, TL_COMPUTE, 101, 102);
    push(tl, 1, ACT_RECV_F, 1, TL_RECV, 0, 1);
    push(tl, 1, ACT_F, 1, TL_COMPUTE, 1, 2);
    push(tl, 1, ACT_B, 1, TL_COMPUTE, 2, 101);
}

/* The fake executor's side: the message never arrives; side steps are counted. */
static int n_recorded;
static int never(run_wait *w) { (void)w; return 0; }
static int never_block(run_wait *w, double deadline) { (void)w; (void)deadline; return 0; }
static void count_record(run_wait *w, int task, double t0, double t1, double cpu, double woke) {
    (void)w; (void)task; (void)t0; (void)t1; (void)cpu; (void)woke;
    n_recorded++;
}

/* The hook called for rank 0's RECV_B, as exec_offer_wait does. */
static int offer(harvest *h, const sched *s) {
    run_wait w = { .world_rank = 0, .action = 1, .act = s->acts[0][1], .since = pt_now(), .arrived = never,
                   .block = never_block, .record = count_record };
    return harvest_on_wait(h, &w);
}

static int after_step(harvest *h, const sched *s, harvest_stats *st) {
    timeline tl;
    step_timeline(&tl, s);
    int rc = harvest_after_step(h, &tl, NULL, st);
    timeline_free(&tl);
    return rc;
}

/* The notes queued so far: whether one says "failed" with the task's error. */
static int failed_noted(harvest *h, char *text, size_t n) {
    harvest_note note;
    int found = 0;
    while (harvest_next_note(h, &note))
        if (!strcmp(note.what, "failed")) {
            found = 1;
            snprintf(text, n, "%s", note.text);
        }
    return found;
}

int main(void) {
    sched *s = two_ranks();
    harvest *h;
    harvest_task *t;
    harvest_env env = { .R = 2, .flag = "--side-task" };
    harvest_create(&h);
    CHECK("fail: a busy task failing at its second step is made", harvest_busy_create(&t, "40,fail=2,rank=0", &env) == 0,
          "%s", pt_err());
    harvest_add(h, t);
    CHECK("fail: the harvester starts", harvest_start(h, 2, 0, 2) == 0, "%s", pt_err());
    harvest_bind(h, s, 2);
    harvest_stats st;
    char text[400] = "";
    /* three steps: the waits measured (100 s each), the task's first step run at a boundary */
    int rc = 0;
    for (int k = 0; k < 3 && rc == 0; k++) rc = after_step(h, s, &st);
    CHECK("fail: steps without side work measure the waits", rc == 0 && st.idle_s > 99, "rc %d, idle %.3f s", rc, st.idle_s);
    CHECK("fail: the first step ran at a boundary, and nothing failed yet", !failed_noted(h, text, sizeof text),
          "noted: %s", text);
    n_recorded = 0;
    rc = offer(h, s);
    CHECK("fail: the hook returns 0 when a side step fails in the wait (the training goes on)", rc == 0,
          "rc %d: %s", rc, pt_err());
    CHECK("fail: the failed step is not recorded as side work", n_recorded == 0, "%d recorded", n_recorded);
    rc = after_step(h, s, &st);
    int noted = failed_noted(h, text, sizeof text);
    CHECK("fail: the next boundary reports it failed, with its error",
          rc == 0 && noted && strstr(text, "failing at step 2") && strstr(text, "training goes on"), "rc %d, note '%s'",
          rc, text);
    rc = offer(h, s);
    CHECK("fail: later waits run no step of the failed task", rc == 0 && n_recorded == 0, "rc %d, %d recorded",
          rc, n_recorded);
    rc = after_step(h, s, &st);
    CHECK("fail: ... and it is reported once", rc == 0 && !failed_noted(h, text, sizeof text) && st.steps == 0,
          "rc %d, steps %d, note '%s'", rc, st.steps, text);
    harvest_free(h);
    sched_free(s);
    TEST_DONE();
}
