/* One rank's executor: the walk over its lowered action list, one action at a time (compute,
 * sends and receives, reduction, the optimizer step), each recorded in the rank's timeline.
 * What an action does lives in the exec_*.c file of its concern (run/exec_int.h lists them);
 * what its mode (sync, overlap, async) adds, in the hooks of exec_mode.c, chosen once per job.
 * Not here: thread or process start-up, data, logging (run_job.c and the trainer). */
#include "run/exec_int.h"
#include "util/killat.h"
#include "util/pt.h"
#include <stdlib.h>
#include <string.h>

int run_exec_init(run_exec **out, const run_exec_cfg *cfg) {
    run_exec *e = pt_calloc(1, sizeof *e);
    *out = e;
    e->c = *cfg;
    run_layout_coords(cfg->lo, cfg->world_rank, &e->d, &e->p, &e->t);
    e->tp = cfg->lo->tp;
    e->M = cfg->s->n_mb;
    e->async = cfg->s->async;
    e->fix = cfg->async_fix;
    e->win = cfg->window > 1 && e->async ? cfg->window : 1;
    e->stashing = e->async && !exec_async_mode(e);
    e->mode = exec_mode_of(e);   /* reads async and c.overlap, fixed for the job */
    e->K = cfg->s->seq_chunks;
    e->N = cfg->mb_rows * (cfg->T / e->K);   /* the rows of a unit: a microbatch, or a chunk */
    e->Ns = e->N;   /* the stages' models say otherwise under --sp (exec_tp_set) */
    e->C = cfg->src->cfg.n_embd;
    int rc = exec_state_init(e) < 0 || exec_groups_init(e) < 0 || exec_async_init(e) < 0 ||
             exec_tie_lag_init(e) < 0 || exec_tie_owner_init(e) < 0 || exec_outer_init(e) < 0 ||
             exec_rankstate_load(e) < 0 ? pt_adderr("rank %d: ", cfg->world_rank) : 0;
    if (rc == 0 && e->async && (e->n_step_acts < e->win || e->n_step_acts % e->win != 0))
        rc = pt_seterr("rank %d: %d updates in a pass of %d steps: not a whole number a step (the schedule's "
                       "microbatches must make whole updates at every step)", cfg->world_rank, e->n_step_acts, e->win);
    e->c.src = NULL;   /* read during init only */
    return rc;
}

void run_exec_free(run_exec *e) {
    if (!e) return;
    exec_outer_free(e);
    exec_tie_lag_free(e);
    exec_tie_owner_free(e);
    exec_groups_free(e);
    exec_async_free(e);
    exec_wire_free(e);
    exec_state_free(e);
    free(e);
}

const timeline *run_exec_timeline(const run_exec *e) { return &e->tl; }

/* ---- the walk ----------------------------------------------------------------------------- */

/* One action: its compute or message here, what its mode adds through the mode's hooks. */
static int exec_action(run_exec *e, int i, const int *tok, const int *tgt, const optim_config *oc,
                       int t, run_exec_stats *rs) {
    const exec_mode *md = e->mode;
    sched_action a = e->c.s->acts[e->p][i];
    run_stage *st = a.stage >= 0 ? &e->st[e->loc[a.stage]] : NULL;
    double t0 = pt_now();
    int peer = -1, rc = 0;
    tl_stream sm = TL_COMPUTE;
    if (a.kind == ACT_F || a.kind == ACT_REDUCE_GRAD)   /* --kill-at (util/killat.h) */
        pt_killat_point(e->c.world_rank, t, a.kind == ACT_F ? PT_KILL_FORWARD : PT_KILL_REDUCE);
    switch (a.kind) {
    case ACT_F:
        if (md->before_f) md->before_f(e, st, a.mb);
        rc = exec_forward_action(e, st, a.mb, tok, tgt);
        if (md->after_f) md->after_f(e, st, a.mb);
        if (rc == 0) rc = exec_lend_after(e, st, a.kind, a.mb);
        break;
    case ACT_B: case ACT_W: case ACT_BW:
        if (md->before_b) md->before_b(e, st, a.mb);
        rc = exec_backward(e, st, a.mb, a.kind != ACT_W, a.kind != ACT_B, tok, tgt);
        if (rc == 0) rc = exec_lend_after(e, st, a.kind, a.mb);   /* before the mode records it */
        if (rc == 0) rc = md->after_b(e, i, a, st, t0);
        break;
    case ACT_SEND_F: case ACT_SEND_B: sm = TL_SEND; rc = exec_send(e, i, a, &peer); break;
    case ACT_RECV_F: case ACT_RECV_B: sm = TL_RECV; rc = exec_recv(e, i, a, &peer); break;
    case ACT_REDUCE_GRAD: rc = exec_lend_drain(e) < 0 ? -1 : md->reduce(e, i, a, st, t0); break;
    case ACT_STEP: rc = exec_lend_drain(e) < 0 ? -1 : md->step(e, oc, t, rs); break;
    default: break;
    }
    if (rc < 0) {
        char buf[32];
        return pt_adderr("rank %d, action %d (%s): ", e->c.world_rank, i,
                         sched_action_str(&a, buf, sizeof buf));
    }
    if (rc == 0) exec_record(e, a, sm, peer, t0, t0);   /* 1: the mode recorded it */
    return 0;
}

static int exec_walk(run_exec *e, const int *tokens, const int *targets, const optim_config *oc,
                     int t, run_exec_stats *st) {
    if (exec_post_recvs(e) < 0) return -1;
    exec_lend_begin(e);
    if (e->lend && exec_lend_poll(e) < 0) return -1;   /* the pools' first receives */
    int len = e->c.s->len[e->p];
    for (int i = 0; i < len; i++) {
        if (exec_action(e, i, tokens, targets, oc, t, st) < 0) return -1;
        if (e->lend && exec_lend_poll(e) < 0) return -1;
        if (e->send_req[i]) e->pend[e->n_pend++] = i;
        if (e->n_pend && exec_poll_sends(e) < 0) return pt_adderr("rank %d: ", e->c.world_rank);
        if (e->mode->poll && !e->stepped && e->mode->poll(e) < 0) return -1;
    }
    if (exec_lend_drain(e) < 0) return -1;
    if (!e->stepped && e->mode->finish(e, st) < 0) return -1;
    return exec_finish_sends(e);
}

/* A new iteration: nothing posted, every group waiting for its writers; whole sums unless the
 * step updates slices (--zero 1). */
static void exec_reset_groups(run_exec *e, const optim_config *oc) {
    e->all = !(e->c.zero && oc && !e->async);
    for (int k = 0; k < e->n_grp; k++) {
        exec_group *gr = &e->grp[k];
        gr->n_left = gr->n_writers;
        gr->posted = 0;
        gr->post_t = gr->done_t = 0;
    }
    for (int i = 0; i < e->n_stages; i++) e->st[i].w_end = 0;
}

int run_exec_iteration(run_exec *e, const int *tokens, const int *targets, const optim_config *oc,
                       int t, run_exec_stats *st) {
    memset(st, 0, sizeof *st);
    e->tl.n = 0;
    e->loss_sum = 0;
    memset(e->win_loss, 0, sizeof e->win_loss);
    e->sumsq = 0;
    e->stepped = 0;
    e->step_idx = 0;
    e->n_pend = 0;
    exec_zero_grads(e);
    exec_reset_groups(e, oc);
    if (exec_walk(e, tokens, targets, oc, t, st) < 0) return exec_drop_requests(e);
    return 0;
}

void run_exec_stash_stats(const run_exec *e, int out[3]) {
    out[0] = e->stash_checked;
    out[1] = e->stash_bad;
    out[2] = e->stash_stale;
}

size_t run_exec_act_bytes(const run_exec *e) {
    double lent, borrowed;
    exec_lend_mem(e, &lent, &borrowed);
    size_t n = e->work_n + (size_t)(borrowed / sizeof(float));
    for (int i = 0; i < e->n_stages; i++) {
        const run_stage *st = &e->st[i];
        for (int l = st->first; l < st->end; l++) {
            int cap = exec_lend_cap(st, l);   /* --balance-memory: a lending layer's buffers */
            n += (size_t)(cap >= 0 ? cap : st->n_sets) * exec_act_floats(e, st, l);
            n += exec_lend_head_floats(st, l);   /* and what stays of those it lends in part */
            n += (size_t)st->n_kv * 2 * gpt_layer_kv_floats(&st->m, l, e->c.mb_rows, e->c.T);
            if (st->keep) n += (size_t)st->n_keep * gpt_layer_keep_floats(&st->m, l, e->c.mb_rows, e->c.T);
        }
    }
    return n * sizeof(float);
}

/* Floats a stage keeps per microbatch of the schedule (all e->M of them): boundary buffers, its
 * loss, pipedream's stash. */
static size_t exec_stage_mb_floats(const run_exec *e, const run_stage *st) {
    size_t nc = (size_t)e->Ns * e->C, n = 0;
    float **bufs[4] = { st->out, st->xin, st->dxo, st->dyin };
    for (int k = 0; k < 4; k++) n += bufs[k] ? nc : 0;
    if (st->loss) n += 1;
    if (st->stash) n += exec_weights_n(st, e->n_ties);
    return n;
}

/* Floats of a stage's buffers besides the activation sets: boundary buffers and stashes. */
static size_t exec_stage_buffer_floats(const run_exec *e, const run_stage *st) {
    size_t n = (size_t)e->M * exec_stage_mb_floats(e, st);
    n += exec_async_floats(e, st);   /* 2bw's second version, a velocity or last step */
    if (st == &e->st[0]) n += exec_tie_lag_floats(e) + exec_tie_owner_floats(e);   /* --defer-tie's sums in flight */
    return n;
}

void run_exec_mem(const run_exec *e, run_mem *out) {
    double f = sizeof(float), opt = 0, w = 0, bufs = 0;
    for (int i = 0; i < e->n_stages; i++) {
        const run_stage *st = &e->st[i];
        w += (double)st->m.n_held;
        opt += 2.0 * (double)st->opt.n * (st->opt.m != NULL);
        for (int t = 0; t < e->n_ties; t++) {
            w += st->copy[t].w ? (double)st->copy[t].count : 0;
            opt += st->copy[t].opt.m ? 2.0 * (double)st->copy[t].opt.n : 0;
        }
        bufs += (double)exec_stage_buffer_floats(e, st);
    }
    for (int k = 0; k < e->n_grp; k++)
        for (int b = 0; b < e->grp[k].n_bk; b++)
            if (e->grp[k].bk[b].owned) opt += 2.0 * (double)(e->grp[k].bk[b].hi - e->grp[k].bk[b].lo);
    bufs += (double)gpt_scratch_floats_chunks(&e->st[0].m, e->c.mb_rows, e->c.T, e->K) + 2.0 * e->Ns * e->C;
    out->params = out->grads = w * f;
    out->optim = opt * f;
    out->acts = (double)run_exec_act_bytes(e) + bufs * f;
    exec_lend_mem(e, &out->lent, &out->borrowed);
    out->parts = exec_lend_parts(e);
    out->act_sets = (double)(run_exec_act_bytes(e) - e->work_n * sizeof(float)) - out->borrowed;
    out->act_mb = out->pass_mb = 0;
    for (int i = 0; i < e->n_stages; i++) out->pass_mb += (double)exec_stage_mb_floats(e, &e->st[i]) * f;
    for (int i = 0; i < e->n_stages; i++)
        for (int l = e->st[i].first; l < e->st[i].end; l++)
            out->act_mb += (double)exec_act_floats(e, &e->st[i], l) * f;
}

int run_exec_replan(run_exec *e, const sched *s) { return exec_state_replan(e, s); }

double run_exec_lend_wait(const run_exec *e) { return exec_lend_wait_s(e); }

void run_exec_coords(const run_exec *e, int *d, int *p, int *t) {
    *d = e->d;
    *p = e->p;
    *t = e->t;
}

void run_exec_set_slowdown(run_exec *e, int g, double k) {
    if (g >= 0 && g < e->c.s->n_stages && e->loc[g] >= 0) e->st[e->loc[g]].slow = k > 1 ? k : 1;
}

const gpt_model *run_exec_stage_model(const run_exec *e, int g) {
    return g >= 0 && g < e->c.s->n_stages && e->loc[g] >= 0 ? &e->st[e->loc[g]].m : NULL;
}

const gpt_model *run_exec_first_model(const run_exec *e) { return &e->st[0].m; }

int run_exec_set_step_gate(run_exec *e, int (*gate)(void *, int), void *user) {
    if (e->async) return -1;
    e->step_gate = gate;
    e->gate_user = user;
    return 0;
}

int run_exec_world_rank(const run_exec *e) { return e->c.world_rank; }

int run_exec_stage_state(const run_exec *e, int g, const gpt_model **m, const adamw_state **opt,
                         int *chunk, int *first, int *end) {
    if (g < 0 || g >= e->c.s->n_stages || e->loc[g] < 0) return -1;
    const run_stage *st = &e->st[e->loc[g]];
    *m = &st->m;
    *opt = st->opt.m ? &st->opt : NULL;
    *chunk = st->chunk;
    *first = st->first;
    *end = st->end;
    return 0;
}

int run_exec_write_chunk(const run_exec *e, const char *tmpdir, int g) {
    const run_stage *st = &e->st[e->loc[g]];
    if (!e->c.zero && !st->opt.m)   /* the holder in pipe 0 is its chunk's home: a bug otherwise */
        return pt_seterr("rank %d: stage %d holds no moments of its chunk to save", e->c.world_rank, g);
    return ckpt_write_chunk(tmpdir, st->chunk, st->first, st->end, &st->m,
                            e->c.zero ? NULL : &st->opt);
}

/* Appends the moments of group gr this rank holds (bucket slice by tensor) to out. */
static int exec_group_pieces(const exec_group *gr, run_piece *out, int n) {
    for (int k = 0; k < gr->n_bk; k++) {
        const exec_bucket *b = &gr->bk[k];
        size_t lo = b->off + b->lo, hi = b->off + b->hi;
        for (int i = 0; i < gr->n_ts; i++) {
            const exec_span *ts = &gr->ts[i];
            size_t a = ts->off > lo ? ts->off : lo, z = ts->off + ts->n < hi ? ts->off + ts->n : hi;
            if (a < z)
                out[n++] = (run_piece){ ts->param, 1, a - ts->off, z - a, NULL, b->mm + (a - lo), b->vv + (a - lo) };
        }
    }
    return n;
}

/* Room for every group's moment pieces and `extra` more in *out; returns the moment pieces'
 * count (they come first). */
static int exec_moment_pieces(const run_exec *e, run_piece **out, int extra) {
    int cap = extra, n = 0;
    for (int k = 0; k < e->n_grp; k++) cap += e->grp[k].n_bk * (e->grp[k].n_ts + 1);
    *out = pt_malloc(sizeof **out * (size_t)(cap + 1));
    for (int k = 0; k < e->n_grp; k++) n = exec_group_pieces(&e->grp[k], *out, n);
    return n;
}

int run_exec_moment_slices(const run_exec *e, int g, ckpt_slice **out) {
    int n = 0;
    if (g >= 0) {   /* --zero 0: stage g's moments, laid out like its model */
        const run_stage *st = &e->st[e->loc[g]];
        if (!st->opt.m)
            return pt_seterr("rank %d: stage %d holds no moments of its chunk to save", e->c.world_rank, g);
        *out = pt_malloc(sizeof **out * (size_t)(gpt_param_count(&st->m) + 1));
        for (int i = 0; i < gpt_param_count(&st->m); i++) {
            const gpt_param_info *pi = gpt_param_info_at(&st->m, i);
            if (gpt_holds_layer(&st->m, pi->layer))
                (*out)[n++] = (ckpt_slice){ pi->name, 0, pi->count, st->opt.m + pi->offset, st->opt.v + pi->offset };
        }
        return n;
    }
    run_piece *pc;
    n = exec_moment_pieces(e, &pc, 0);
    *out = pt_malloc(sizeof **out * (size_t)(n + 1));
    for (int i = 0; i < n; i++)
        (*out)[i] = (ckpt_slice){ gpt_param_info_at(&e->st[0].m, pc[i].param)->name, pc[i].start, pc[i].n,
                                  pc[i].m, pc[i].v };
    free(pc);
    return n;
}

int run_exec_pieces(const run_exec *e, run_piece **out) {
    int extra = 0;
    for (int i = 0; i < e->n_stages; i++) extra += gpt_param_count(&e->st[i].m);
    int n = exec_moment_pieces(e, out, extra);
    for (int i = 0; i < e->n_stages; i++) {
        const gpt_model *m = &e->st[i].m;
        for (int k = 0; k < gpt_param_count(m); k++) {
            const gpt_param_info *pi = gpt_param_info_at(m, k);
            if (gpt_holds_layer(m, pi->layer))
                (*out)[n++] = (run_piece){ k, 0, 0, pi->count, m->params + pi->offset, NULL, NULL };
        }
    }
    return n;
}

int run_exec_write_shards(const run_exec *e, const char *tmpdir) {
    ckpt_slice *sl;
    int n = run_exec_moment_slices(e, -1, &sl);
    int rc = ckpt_write_shard(tmpdir, e->c.world_rank, sl, n);
    free(sl);
    return rc;
}
