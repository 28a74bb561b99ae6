/* Side work in a rank's waits: a wait offered to run_exec_cfg.on_wait (the harvester's, set by
 * the trainer) with the test that says whether what it waits for has come, the blocking wait
 * that sleeps until it comes (the transport's wait with a deadline: a condition variable on
 * threads, the progress thread's signal on MPI), and side steps recorded in the rank's
 * timeline. Used by receives (exec_comm.c), reductions and the step's arrivals
 * (exec_reduce.c, executor.c). Not here: what side work runs (src/harvest). */
#include "run/exec_int.h"
#include "util/pt.h"

static void exec_record_side(run_wait *w, int task, double t0, double t1, double cpu_s, double woke) {
    exec_waiting *x = w->priv;
    tl_event ev = { .act = { .stage = -1, .kind = ACT_N_KINDS, .mb = task }, .rank = w->world_rank,
                    .stream = TL_SIDE, .peer = -1, .link = -1, .ready = t0, .start = t0, .end = t1,
                    .cpu = cpu_s, .woke = woke };
    timeline_push(&x->e->tl, &ev);
}

int exec_req_test(comm *c, comm_req **req) {
    int done = 0;
    if (!*req) return 1;
    int rc = comm_test(c, *req, &done);
    if (done) *req = NULL;          /* freed by the test, even when it failed */
    return rc < 0 ? -1 : done;
}

int exec_reqs_arrived(run_wait *w) {
    exec_waiting *x = w->priv;
    int left = 0;
    for (int k = 0; k < x->n; k++) {
        if (exec_req_test(x->e->c.world, &x->req[k]) < 0) return -1;
        left += x->req[k] != NULL;
    }
    return left == 0;
}

int exec_req_block(comm *c, comm_req **req, double deadline) {
    double left = deadline - pt_now();
    if (!*req) return 1;
    if (left > 0 && comm_wait(c, *req, left) == 0) {
        *req = NULL;
        return 1;
    }
    return exec_req_test(c, req);   /* timed out or failed: a failed wait leaves it ours */
}

int exec_req_wait(comm *c, comm_req **req, double timeout) {
    if (!*req) return 0;
    if (comm_wait(c, *req, timeout) < 0) return -1;
    *req = NULL;
    return 0;
}

int exec_reqs_block(run_wait *w, double deadline) {
    exec_waiting *x = w->priv;
    for (int k = 0; k < x->n; k++) {
        int got = exec_req_block(x->e->c.world, &x->req[k], deadline);
        if (got <= 0) return got;
    }
    return 1;
}

int exec_offer_wait(run_exec *e, int i, int (*arrived)(run_wait *), int (*block)(run_wait *, double),
                    exec_waiting *x) {
    run_wait w = { .world_rank = e->c.world_rank, .action = i, .act = e->c.s->acts[e->p][i],
                   .since = pt_now(), .arrived = arrived, .block = block, .record = exec_record_side,
                   .priv = x };
    int got = arrived(&w);
    if (got != 0) return got < 0 ? -1 : 0;
    return e->c.on_wait(e->c.wait_user, &w);
}
