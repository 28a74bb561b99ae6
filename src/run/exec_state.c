/* An executor's state: its stages (layer ranges of the model instances it is given), per
 * (stage, layer, microbatch) activation sets, boundary buffers, private copies of tied tensors,
 * and the sub-communicators for gradient reduction. Not here: running actions (the other
 * exec_*.c files), threads. */
#include "run/exec_int.h"
#include "util/pt.h"
#include <stdlib.h>
#include <string.h>

static float **exec_bufs(int M, size_t n) {
    float **b = pt_calloc((size_t)M, sizeof *b);
    for (int j = 0; j < M; j++) b[j] = pt_falloc(n);
    return b;
}

static void exec_free_bufs(float **b, int M) {
    if (!b) return;
    for (int j = 0; j < M; j++) free(b[j]);
    free(b);
}

/* World rank of stage g's rank in this replica. */
static int exec_rank_of(const run_exec *e, int g) {
    return run_layout_world_rank(e->c.lo, e->d, e->c.s->stage_rank[g]);
}

size_t exec_weights_n(const run_stage *st, int n_ties) {
    size_t n = st->span_n;
    for (int t = 0; t < n_ties; t++) n += st->copy[t].w ? st->copy[t].count : 0;
    return n;
}

int exec_owns_tie(const run_exec *e, const run_stage *st, int t) {
    int owner = gpt_tie_at(st->m, t)->owner;
    return owner >= st->first && owner < st->end;
}

/* The stage of st's pipe that holds `layer` is on this rank? */
static int exec_layer_is_local(const run_exec *e, const run_stage *st, int layer) {
    const sched *s = e->c.s;
    for (int c = 0; c < s->stages_per_pipe; c++) {
        int g = st->pipe * s->stages_per_pipe + c, first, end;
        run_layout_stage_layers(e->c.lo, g, &first, &end);
        if (layer >= first && layer < end) return s->stage_rank[g] == e->p;
    }
    return 0;
}

/* Private copies of the tied tensors whose user layer st holds while the owner's stage is on
 * another rank (copied from the instance, so equal to the owner's; moments too when resuming). */
static void exec_stage_ties(run_exec *e, run_stage *st) {
    for (int t = 0; t < e->n_ties; t++) {
        const gpt_tie *tie = gpt_tie_at(st->m, t);
        if (tie->user < st->first || tie->user >= st->end || exec_owns_tie(e, st, t) ||
            exec_layer_is_local(e, st, tie->owner))
            continue;
        const gpt_param_info *pi = gpt_param_info_at(st->m, tie->param);
        exec_tie_copy *cp = &st->copy[t];
        cp->count = pi->count;
        cp->w = pt_falloc(cp->count);
        cp->dw = pt_falloc(cp->count);
        memcpy(cp->w, st->m->params + pi->offset, cp->count * sizeof(float));
        if (st->opt) {
            adamw_init(&cp->opt, cp->count);
            memcpy(cp->opt.m, st->opt->m + pi->offset, cp->count * sizeof(float));
            memcpy(cp->opt.v, st->opt->v + pi->offset, cp->count * sizeof(float));
        }
        st->tied[t] = (gpt_tied){ cp->w, cp->dw };
        st->has_copy = 1;
    }
}

/* Activation sets and the boundary buffers of each microbatch. */
static void exec_stage_buffers(run_exec *e, run_stage *st) {
    int nl = st->end - st->first;
    size_t nc = (size_t)e->N * e->C;
    st->n_slots = sched_stage_peak_slots(e->c.s, st->g, e->c.recompute != 0);   /* the one rule */
    st->slot_of = pt_malloc(sizeof(int) * (size_t)e->M);
    st->slot_mb = pt_malloc(sizeof(int) * (size_t)st->n_slots);
    for (int j = 0; j < e->M; j++) st->slot_of[j] = -1;
    for (int k = 0; k < st->n_slots; k++) st->slot_mb[k] = -1;
    st->act = pt_calloc((size_t)nl, sizeof *st->act);
    for (int l = 0; l < nl; l++)   /* one more set: the forward's when recomputing */
        st->act[l] = exec_bufs(st->n_slots + 1, gpt_layer_act_floats(st->m, st->first + l, e->c.mb_rows, e->c.T));
    if (st->next >= 0) st->out = exec_bufs(e->M, nc);
    else st->loss = pt_calloc((size_t)e->M, sizeof *st->loss);
    if (st->prev_rank >= 0) st->xin = exec_bufs(e->M, nc);
    if (st->prev >= 0) st->dxo = exec_bufs(e->M, nc);
    if (st->next_rank >= 0) st->dyin = exec_bufs(e->M, nc);
}

static void exec_stage_init(run_exec *e, run_stage *st, int g) {
    const sched *s = e->c.s;
    st->g = g;
    st->chunk = run_layout_chunk_of(e->c.lo, g);
    st->pipe = g / s->stages_per_pipe;
    run_layout_stage_layers(e->c.lo, g, &st->first, &st->end);
    st->prev = sched_stage_prev(s, g);
    st->next = sched_stage_next(s, g);
    st->prev_rank = st->prev >= 0 && s->stage_rank[st->prev] != e->p ? exec_rank_of(e, st->prev) : -1;
    st->next_rank = st->next >= 0 && s->stage_rank[st->next] != e->p ? exec_rank_of(e, st->next) : -1;
    st->m = e->c.models[st->pipe];
    st->opt = e->c.opts[st->pipe];
    exec_stage_buffers(e, st);
    gpt_layers_param_span(st->m, st->first, st->end, &st->span_off, &st->span_n);
    exec_stage_ties(e, st);
    if (e->async) {
        st->stash = exec_bufs(e->M, exec_weights_n(st, e->n_ties));
        st->stash_sum = pt_calloc((size_t)e->M, sizeof *st->stash_sum);
    }
}

static void exec_stage_free(run_exec *e, run_stage *st) {
    if (st->act)
        for (int l = 0; l < st->end - st->first; l++) exec_free_bufs(st->act[l], st->n_slots + 1);
    free(st->act);
    free(st->slot_of);
    free(st->slot_mb);
    exec_free_bufs(st->out, e->M);
    exec_free_bufs(st->xin, e->M);
    exec_free_bufs(st->dxo, e->M);
    exec_free_bufs(st->dyin, e->M);
    free(st->loss);
    for (int t = 0; t < GPT_MAX_TIES; t++) {
        free(st->copy[t].w);
        free(st->copy[t].dw);
        if (st->copy[t].opt.m) adamw_free(&st->copy[t].opt);
    }
    exec_free_bufs(st->stash, e->M);
    free(st->stash_sum);
}

/* Sub-communicators: one per chunk (its holders), one per tied tensor (the ranks holding its
 * owner layer or a copy). Collective over world, in that order on every rank. */
static int exec_split_comms(run_exec *e) {
    int K = e->c.s->stages_per_pipe;
    e->chunk_comm = pt_calloc((size_t)K, sizeof *e->chunk_comm);
    for (int c = 0; c < K; c++) {
        int holds = 0;
        for (int i = 0; i < e->n_stages; i++) holds |= e->st[i].chunk == c;
        if (comm_split(e->c.world, holds ? 0 : -1, &e->chunk_comm[c]) < 0) return -1;
    }
    for (int t = 0; t < e->n_ties; t++) {
        int member = 0;
        for (int i = 0; i < e->n_stages; i++)
            member |= exec_owns_tie(e, &e->st[i], t) || e->st[i].copy[t].w != NULL;
        if (comm_split(e->c.world, member ? 0 : -1, &e->tie_comm[t]) < 0) return -1;
    }
    return 0;
}

/* The largest stage weights (span + copies): the size of the async "live" buffer. */
static size_t exec_max_weights(const run_exec *e) {
    size_t mx = 0;
    for (int i = 0; i < e->n_stages; i++) {
        size_t n = exec_weights_n(&e->st[i], e->n_ties);
        if (n > mx) mx = n;
    }
    return mx;
}

int exec_state_init(run_exec *e) {
    const sched *s = e->c.s;
    e->loc = pt_malloc(sizeof(int) * (size_t)s->n_stages);
    for (int g = 0; g < s->n_stages; g++) e->loc[g] = s->stage_rank[g] == e->p ? e->n_stages++ : -1;
    e->st = pt_calloc((size_t)e->n_stages, sizeof *e->st);
    for (int g = 0; g < s->n_stages; g++)
        if (e->loc[g] >= 0) exec_stage_init(e, &e->st[e->loc[g]], g);
    e->scratch = pt_falloc(gpt_scratch_floats(e->c.models[0], e->c.mb_rows, e->c.T));
    if (e->async) e->live = pt_falloc(exec_max_weights(e));
    for (int k = 0; k < 2; k++) e->tmp[k] = pt_falloc((size_t)e->N * e->C);
    int len = s->len[e->p];
    e->recv_req = pt_calloc((size_t)len + 1, sizeof *e->recv_req);
    e->send_req = pt_calloc((size_t)len + 1, sizeof *e->send_req);
    e->pend = pt_calloc((size_t)len + 1, sizeof *e->pend);
    e->last_reduce = -1;
    for (int i = 0; i < len; i++) {
        if (s->acts[e->p][i].kind == ACT_REDUCE_GRAD) { e->n_reduce++; e->last_reduce = i; }
        e->n_step_acts += s->acts[e->p][i].kind == ACT_STEP;
    }
    timeline_init(&e->tl, s, NULL, 1);
    return exec_split_comms(e);
}

void exec_state_free(run_exec *e) {
    for (int i = 0; e->st && i < e->n_stages; i++) exec_stage_free(e, &e->st[i]);
    if (e->chunk_comm)
        for (int c = 0; c < e->c.s->stages_per_pipe; c++) comm_free(e->chunk_comm[c]);
    free(e->chunk_comm);
    for (int t = 0; t < GPT_MAX_TIES; t++) comm_free(e->tie_comm[t]);
    free(e->st);
    free(e->loc);
    free(e->scratch);
    free(e->live);
    free(e->tmp[0]);
    free(e->tmp[1]);
    free(e->recv_req);
    free(e->send_req);
    free(e->pend);
    timeline_free(&e->tl);
}
