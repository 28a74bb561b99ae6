/* The executor's modes, chosen once per job (exec_mode_of): what F, B/W/BW, REDUCE_GRAD and STEP
 * do besides their compute, and what ends an iteration without a STEP. The walk (executor.c)
 * calls these hooks and branches on no mode.
 *   sync      reductions at the rank's last REDUCE_GRAD (or the step), one update per STEP
 *             (--no-overlap)
 *   overlap   each group's reduction posted at its stages' last W, progressed after each
 *             action, waited for at each REDUCE_GRAD (the default)
 *   async     asynchronous schedules (pipedream): each microbatch's B and W on the weights its
 *             F used (stashed), each stage's reduction at its REDUCE_GRAD, an update per STEP
 *             (2bw and --async-fix pipemare | predict: exec_async.c's modes instead)
 * --tp with --sp: a stage's layer-norm gradients summed over the TP group after its last W
 * (sync, overlap) or before each reduction (async). */
#include "run/exec_int.h"
#include "util/pt.h"

/* After stage st's last W of the iteration: each group it adds to whose local writers are all
 * done starts its reduction now (overlapped with the rank's remaining work). */
static int exec_w_done(run_exec *e, run_stage *st) {
    st->w_end = pt_now();
    for (int j = 0; j < st->n_writes; j++) {
        exec_group *gr = &e->grp[st->writes[j]];
        if (--gr->n_left == 0 && exec_post_group(e, gr) < 0) return -1;
    }
    return 0;
}

/* An overlapped REDUCE_GRAD of stage st: its posted groups complete; the event spans the
 * reduction, from the stage's last W to when it was seen complete, on the communication stream
 * (the rank computed meanwhile). A group not yet posted (a schedule file with an early
 * REDUCE_GRAD) waits for the step. 1 (recorded here) or -1. */
static int exec_reduce_overlapped(run_exec *e, int i, sched_action a, run_stage *st, double t0) {
    exec_waiting x = { .e = e, .st = st };
    if (e->c.on_wait && exec_offer_wait(e, i, exec_groups_arrived, exec_groups_block, &x) < 0) return -1;
    double end = st->w_end > 0 ? st->w_end : t0;
    for (int j = 0; j < st->n_writes; j++) {
        exec_group *gr = &e->grp[st->writes[j]];
        if (!gr->posted) continue;
        if (exec_wait_group(e, gr) < 0) return -1;
        if (gr->done_t > end) end = gr->done_t;
    }
    double start = st->w_end > 0 ? st->w_end : t0;
    tl_event ev = { .act = a, .rank = e->c.world_rank, .iter = 0, .stream = TL_SEND, .peer = -1,
                    .link = -1, .ready = start, .start = start, .end = end > start ? end : start };
    timeline_push(&e->tl, &ev);
    return 1;
}

/* ---- sync and overlap ---------------------------------------------------------------------- */

static int sync_after_b(run_exec *e, int i, sched_action a, run_stage *st, double t0) {
    return a.kind != ACT_B && i == st->last_w ? exec_tp_sum_grads(e, st) : 0;
}

/* The stage's last W: recorded, then its groups' reductions posted (after the W's end). */
static int overlap_after_b(run_exec *e, int i, sched_action a, run_stage *st, double t0) {
    if (a.kind == ACT_B || i != st->last_w) return 0;
    if (exec_tp_sum_grads(e, st) < 0) return -1;
    exec_record(e, a, TL_COMPUTE, -1, t0, t0);
    return exec_w_done(e, st) < 0 ? -1 : 1;
}

static int sync_reduce(run_exec *e, int i, sched_action a, run_stage *st, double t0) {
    if (i != e->last_reduce) return 0;
    return exec_post_all(e) < 0 ? -1 : exec_wait_all(e);
}

static int overlap_reduce(run_exec *e, int i, sched_action a, run_stage *st, double t0) {
    return exec_reduce_overlapped(e, i, a, st, t0);
}

/* STEP: the gate (run_exec_set_step_gate), every reduction complete, the norm over the world,
 * clipping, AdamW (when oc). */
static int sync_step(run_exec *e, const optim_config *oc, int t, run_exec_stats *rs) {
    if (e->step_gate && e->step_gate(e->gate_user, e->c.world_rank) < 0) return -1;
    if (exec_post_all(e) < 0 || exec_wait_all(e) < 0 || exec_norm(e) < 0 || exec_reduce_world(e, rs) < 0)
        return -1;
    e->stepped = 1;
    if (!oc) return 0;
    rs->clip_scale = optim_clip_scale(rs->grad_norm, oc->grad_clip);
    rs->lr = optim_lr_at(oc, t);
    if (exec_update(e, oc, t, rs->lr, rs->clip_scale) < 0) return -1;
    return e->outer ? exec_outer_step(e, oc, t) : 0;
}

/* No STEP in the list (a gradient pass): every reduction complete, the norm, the world's sums. */
static int sync_finish(run_exec *e, run_exec_stats *rs) {
    if (exec_post_all(e) < 0 || exec_wait_all(e) < 0 || exec_norm(e) < 0) return -1;
    return exec_reduce_world(e, rs);
}

/* ---- async --------------------------------------------------------------------------------- */

static int async_after_b(run_exec *e, int i, sched_action a, run_stage *st, double t0) {
    exec_restash(e, st);
    return 0;
}

static int async_reduce(run_exec *e, int i, sched_action a, run_stage *st, double t0) {
    return exec_tp_sum_grads(e, st) < 0 ? -1 : exec_reduce_stage(e, st);
}

/* A STEP updates with what the reductions since the last one summed, clipped per stage. */
static int async_step(run_exec *e, const optim_config *oc, int t, run_exec_stats *rs) {
    int rc = 0;
    if (oc) {
        int step, u = exec_async_next(e, t, &step);   /* the update's number and its step */
        rs->lr = optim_lr_at(oc, step);
        rc = exec_async_update(e, oc, u, rs->lr, 1);
    }
    exec_zero_grads(e);
    return rc;
}

static int async_finish(run_exec *e, run_exec_stats *rs) { return exec_reduce_world(e, rs); }

static const exec_mode MODE_SYNC = { "sync", NULL, NULL, sync_after_b, sync_reduce, sync_step, sync_finish, NULL, NULL };
static const exec_mode MODE_OVERLAP = { "overlap", NULL, NULL, overlap_after_b, overlap_reduce, sync_step,
                                        sync_finish, exec_poll_groups, NULL };
static const exec_mode MODE_ASYNC = { "async", exec_stash, exec_unstash, async_after_b, async_reduce, async_step,
                                      async_finish, NULL, NULL };

const exec_mode *exec_mode_of(const run_exec *e) {
    if (e->async) return exec_async_mode(e) ? exec_async_mode(e) : &MODE_ASYNC;   /* 2bw, fixes */
    return e->async ? &MODE_ASYNC : e->c.overlap ? &MODE_OVERLAP : &MODE_SYNC;
}
