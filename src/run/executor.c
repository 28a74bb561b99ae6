/* One rank's executor: the walk over its lowered action list, one action at a time (compute,
 * sends and receives, reduction, the optimizer step), each recorded in the rank's timeline.
 * What an action does lives in the exec_*.c file of its concern (run/exec_int.h lists them).
 * Not here: thread or process start-up, data, logging (run_job.c and the trainer). */
#include "run/exec_int.h"
#include "util/pt.h"
#include <stdlib.h>
#include <string.h>

int run_exec_init(run_exec **out, const run_exec_cfg *cfg) {
    run_exec *e = pt_calloc(1, sizeof *e);
    *out = e;
    e->c = *cfg;
    run_layout_coords(cfg->lo, cfg->world_rank, &e->d, &e->p);
    e->M = cfg->s->n_mb;
    e->async = cfg->s->async;
    e->N = cfg->mb_rows * cfg->T;
    e->C = cfg->models[0]->cfg.n_embd;
    e->n_ties = gpt_tie_count(cfg->models[0]);
    if (exec_state_init(e) < 0) return pt_adderr("rank %d: ", cfg->world_rank);
    return 0;
}

void run_exec_free(run_exec *e) {
    if (!e) return;
    exec_state_free(e);
    free(e);
}

const timeline *run_exec_timeline(const run_exec *e) { return &e->tl; }

/* ---- the walk ----------------------------------------------------------------------------- */

static void exec_record(run_exec *e, sched_action a, tl_stream sm, int peer, double ready, double t0) {
    tl_event ev = { .act = a, .rank = e->c.world_rank, .iter = 0, .stream = sm, .peer = peer,
                    .link = -1, .ready = ready, .start = t0, .end = pt_now() };
    timeline_push(&e->tl, &ev);
}

/* One action. ready: when the rank reached it. */
static int exec_action(run_exec *e, int i, const int *tok, const int *tgt, const optim_config *oc,
                       int t, run_exec_stats *rs) {
    sched_action a = e->c.s->acts[e->p][i];
    run_stage *st = a.stage >= 0 ? &e->st[e->loc[a.stage]] : NULL;
    double t0 = pt_now();
    int peer = -1, rc = 0;
    tl_stream sm = TL_COMPUTE;
    switch (a.kind) {
    case ACT_F:
        if (e->async) exec_stash(e, st, a.mb);
        rc = exec_forward_action(e, st, a.mb, tok, tgt);
        break;
    case ACT_B: case ACT_W: case ACT_BW:
        if (e->async) exec_unstash(e, st, a.mb);   /* on the weights its F used */
        exec_backward(e, st, a.mb, a.kind != ACT_W, a.kind != ACT_B, tok, tgt);
        if (e->async) exec_restash(e, st);
        break;
    case ACT_SEND_F: case ACT_SEND_B: sm = TL_SEND; rc = exec_send(e, i, a, &peer); break;
    case ACT_RECV_F: case ACT_RECV_B: sm = TL_RECV; rc = exec_recv(e, i, a, &peer); break;
    case ACT_REDUCE_GRAD:
        if (e->async) rc = exec_reduce_stage(e, st);
        else if (i == e->last_reduce) rc = exec_reduce_all(e);
        break;
    case ACT_STEP:
        if (e->async) {
            if (oc) {
                rs->lr = optim_lr_at(oc, t);
                /* update number from the step alone, so a resumed run counts the same */
                exec_adamw(e, oc, (t - 1) * e->n_step_acts + ++e->step_idx, rs->lr, 1.0);
            }
            exec_zero_grads(e);
            break;
        }
        if (e->n_reduce == 0) rc = exec_reduce_all(e);
        if (rc == 0) rc = exec_reduce_world(e, rs);
        if (rc == 0 && oc) {
            rs->clip_scale = optim_clip_scale(rs->grad_norm, oc->grad_clip);
            rs->lr = optim_lr_at(oc, t);
            exec_adamw(e, oc, t, rs->lr, rs->clip_scale);
        }
        e->stepped = 1;
        break;
    default: break;
    }
    if (rc < 0) {
        char buf[32];
        return pt_adderr("rank %d, action %d (%s): ", e->c.world_rank, i,
                         sched_action_str(&a, buf, sizeof buf));
    }
    exec_record(e, a, sm, peer, t0, t0);
    return 0;
}

static int exec_walk(run_exec *e, const int *tokens, const int *targets, const optim_config *oc,
                     int t, run_exec_stats *st) {
    if (exec_post_recvs(e) < 0) return -1;
    int len = e->c.s->len[e->p];
    for (int i = 0; i < len; i++) {
        if (exec_action(e, i, tokens, targets, oc, t, st) < 0) return -1;
        if (e->send_req[i]) e->pend[e->n_pend++] = i;
        if (e->n_pend && exec_poll_sends(e) < 0) return pt_adderr("rank %d: ", e->c.world_rank);
    }
    if (!e->stepped) {
        if (!e->async && e->n_reduce == 0 && exec_reduce_all(e) < 0) return -1;
        if (exec_reduce_world(e, st) < 0) return -1;
    }
    return exec_finish_sends(e);
}

int run_exec_iteration(run_exec *e, const int *tokens, const int *targets, const optim_config *oc,
                       int t, run_exec_stats *st) {
    memset(st, 0, sizeof *st);
    e->tl.n = 0;
    e->loss_sum = 0;
    e->sumsq = 0;
    e->stepped = 0;
    e->step_idx = 0;
    e->n_pend = 0;
    exec_zero_grads(e);
    if (exec_walk(e, tokens, targets, oc, t, st) < 0) return exec_drop_requests(e);
    return 0;
}

void run_exec_stash_stats(const run_exec *e, int out[3]) {
    out[0] = e->stash_checked;
    out[1] = e->stash_bad;
    out[2] = e->stash_stale;
}

size_t run_exec_act_bytes(const run_exec *e) {
    size_t n = 0;
    for (int i = 0; i < e->n_stages; i++) {
        const run_stage *st = &e->st[i];
        for (int l = st->first; l < st->end; l++)
            n += (size_t)(st->n_slots + 1) * gpt_layer_act_floats(st->m, l, e->c.mb_rows, e->c.T);
    }
    return n * sizeof(float);
}
