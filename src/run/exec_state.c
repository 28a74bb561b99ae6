/* An executor's state: its stages (each with its own partial model of its layers, filled from
 * the job's source), per (stage, layer, microbatch) activation sets, boundary buffers, private
 * copies of tied tensors, and the sub-communicators for gradient reduction. Not here: reduction
 * groups and moments (exec_group.c), running actions (the other exec_*.c files), threads. */
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

/* World rank of stage g's rank in this replica and TP rank (each TP rank is its own lane). */
static int exec_rank_of(const run_exec *e, int g) {
    return run_layout_world_rank(e->c.lo, e->d, e->c.s->stage_rank[g], e->t);
}

size_t exec_weights_n(const run_stage *st, int n_ties) {
    size_t n = st->span_n;
    for (int t = 0; t < n_ties; t++) n += st->copy[t].w ? st->copy[t].count : 0;
    return n;
}

int exec_owns_tie(const run_exec *e, const run_stage *st, int t) {
    int owner = gpt_tie_at(&st->m, t)->owner;
    return owner >= st->first && owner < st->end;
}

/* The stage of st's pipe that holds `layer`, if it is on this rank: its index in e->st, else -1. */
static int exec_local_stage_of(const run_exec *e, const run_stage *st, int layer) {
    const sched *s = e->c.s;
    for (int c = 0; c < s->stages_per_pipe; c++) {
        int g = st->pipe * s->stages_per_pipe + c, first, end;
        run_layout_stage_layers(e->c.lo, g, &first, &end);
        if (layer >= first && layer < end) return e->loc[g];
    }
    return -1;
}

/* What st's user layers read for each tie they use without the owner layer: the owner stage's
 * tensor when that stage is on this rank (its W adds to the owner's gradient, as one process
 * does), else a private copy, read from the source (equal to the owner's). */
static int exec_stage_ties(run_exec *e, run_stage *st) {
    for (int t = 0; t < e->n_ties; t++) {
        const gpt_tie *tie = gpt_tie_at(&st->m, t);
        if (tie->user < st->first || tie->user >= st->end || exec_owns_tie(e, st, t)) continue;
        const gpt_param_info *pi = gpt_param_info_at(&st->m, tie->param);
        int own = exec_local_stage_of(e, st, tie->owner);
        st->has_tied = 1;
        if (own >= 0) {
            gpt_model *om = &e->st[own].m;
            size_t off = gpt_param_info_at(om, tie->param)->offset;   /* in the owner's buffers */
            st->tied[t] = (gpt_tied){ om->params + off, om->grads + off };
            continue;
        }
        exec_tie_copy *cp = &st->copy[t];
        cp->count = pi->count;
        cp->w = pt_falloc(cp->count);
        cp->dw = pt_falloc(cp->count);
        if (e->c.src->read(e->c.src, &st->m, tie->param, 0, cp->count, cp->w, NULL, NULL) < 0)
            return pt_adderr("stage %d, tied copy of %s: ", st->g, pi->name);
        st->tied[t] = (gpt_tied){ cp->w, cp->dw };
    }
    return 0;
}

/* Which microbatch holds each of n sets: of[M] all -1 (none), mbs[n] all -1 (free). */
static void exec_slots_init(int **of, int **mbs, int M, int n) {
    *of = pt_malloc(sizeof(int) * (size_t)M);
    *mbs = pt_malloc(sizeof(int) * (size_t)(n + 1));
    for (int j = 0; j < M; j++) (*of)[j] = -1;
    for (int k = 0; k < n; k++) (*mbs)[k] = -1;
}

/* Stage g has a B apart from its W (a zero-bubble split), so a microbatch may wait between them. */
static int exec_has_lone_b(const run_exec *e, int g) {
    for (int i = 0; i < e->c.s->len[e->p]; i++)
        if (e->c.s->acts[e->p][i].stage == g && e->c.s->acts[e->p][i].kind == ACT_B) return 1;
    return 0;
}

/* --tp-recompute: whole sets only for microbatches between a lone B and its W (a fused BW
 * rebuilds each layer in the rank's work buffer); kept sets for those between F and B. A stage
 * whose kept and whole sets, with a work buffer of its own, would not be fewer bytes than whole
 * sets from F to W (W long after B: zero-bubble schedules) keeps whole sets (the same numbers). */
static void exec_stage_keeps(run_exec *e, run_stage *st) {
    int nl = st->end - st->first, fw = sched_stage_peak_slots(e->c.s, st->g, false);
    int bw = exec_has_lone_b(e, st->g) ? sched_stage_peak_slots(e->c.s, st->g, true) : 0;
    double act = 0, keep = 0, mx = 0;
    for (int l = st->first; l < st->end; l++) {
        double a = (double)gpt_layer_act_floats(&st->m, l, e->c.mb_rows, e->c.T);
        act += a;
        keep += (double)gpt_layer_keep_floats(&st->m, l, e->c.mb_rows, e->c.T);
        mx = a > mx ? a : mx;
    }
    st->rebuild = fw * keep + bw * act + mx < fw * act;
    st->n_slots = st->rebuild ? bw : fw;
    st->n_keep = st->rebuild ? fw : 0;
    exec_slots_init(&st->keep_of, &st->keep_mb, e->M, st->n_keep);
    st->keep = pt_calloc((size_t)nl, sizeof *st->keep);
    for (int l = 0; l < nl; l++)
        st->keep[l] = exec_bufs(st->n_keep, gpt_layer_keep_floats(&st->m, st->first + l, e->c.mb_rows, e->c.T));
}

size_t exec_act_floats(const run_exec *e, const run_stage *st, int l) {
    if (e->K > 1) return gpt_layer_chunk_act_floats(&st->m, l, e->c.mb_rows, e->c.T, 0, e->K);
    return gpt_layer_act_floats(&st->m, l, e->c.mb_rows, e->c.T);
}

/* --seq-chunks: the kept keys and values of the microbatches in flight (sched_stage_peak_kv). */
static void exec_stage_kv(run_exec *e, run_stage *st) {
    int nl = st->end - st->first;
    st->n_kv = sched_stage_peak_kv(e->c.s, st->g);
    exec_slots_init(&st->kv_of, &st->kv_mb, e->M / e->K, st->n_kv);
    st->kv = pt_calloc((size_t)nl, sizeof *st->kv);
    st->dkv = pt_calloc((size_t)nl, sizeof *st->dkv);
    for (int l = 0; l < nl; l++) {
        size_t n = gpt_layer_kv_floats(&st->m, st->first + l, e->c.mb_rows, e->c.T);
        if (!n) continue;
        st->kv[l] = exec_bufs(st->n_kv, n);
        st->dkv[l] = exec_bufs(st->n_kv, n);
    }
}

static void exec_stage_kv_free(run_stage *st) {
    for (int l = 0; st->kv && l < st->end - st->first; l++) {
        exec_free_bufs(st->kv[l], st->n_kv);
        exec_free_bufs(st->dkv[l], st->n_kv);
    }
    free(st->kv);
    free(st->dkv);
    free(st->kv_of);
    free(st->kv_mb);
    st->kv = st->dkv = NULL;
    st->kv_of = st->kv_mb = NULL;
    st->n_kv = 0;
}

/* The activation sets stage st needs under the schedule in force (its peak in flight). */
static void exec_stage_acts(run_exec *e, run_stage *st) {
    int nl = st->end - st->first;
    if (e->K > 1) exec_stage_kv(e, st);
    if (e->c.tp_recompute) exec_stage_keeps(e, st);
    else st->n_slots = sched_stage_peak_slots(e->c.s, st->g, e->c.recompute != 0);   /* the one rule */
    exec_slots_init(&st->slot_of, &st->slot_mb, e->M, st->n_slots);
    st->act = pt_calloc((size_t)nl, sizeof *st->act);
    st->n_sets = st->n_slots + (e->c.recompute != 0);   /* one more: the forward's when recomputing */
    for (int l = 0; l < nl; l++) {
        int cap = exec_lend_cap(st, st->first + l);   /* a lending layer: fewer buffers */
        size_t n = exec_act_floats(e, st, st->first + l);
        st->act[l] = pt_calloc((size_t)st->n_sets, sizeof *st->act[l]);
        for (int k = 0; k < (cap >= 0 ? cap : st->n_sets); k++) st->act[l][k] = pt_falloc(n);
        exec_lend_bind(st, st->first + l, st->act[l], n);
    }
}

static void exec_stage_acts_free(run_stage *st) {
    exec_stage_kv_free(st);
    for (int l = 0; l < st->end - st->first; l++) {
        if (st->act) exec_free_bufs(st->act[l], st->n_sets);
        if (st->keep) exec_free_bufs(st->keep[l], st->n_keep);
    }
    free(st->act);
    free(st->keep);
    free(st->slot_of);
    free(st->slot_mb);
    free(st->keep_of);
    free(st->keep_mb);
    st->act = st->keep = NULL;
    st->rebuild = 0;
    st->slot_of = st->slot_mb = st->keep_of = st->keep_mb = NULL;
}

/* Activation sets and the boundary buffers of each microbatch. */
static void exec_stage_buffers(run_exec *e, run_stage *st) {
    size_t nc = (size_t)e->Ns * e->C;
    exec_stage_acts(e, st);
    if (st->next >= 0) st->out = exec_bufs(e->M, nc);
    else st->loss = pt_calloc((size_t)e->M, sizeof *st->loss);
    if (st->prev_rank >= 0) st->xin = exec_bufs(e->M, nc);
    if (st->prev >= 0) st->dxo = exec_bufs(e->M, nc);
    if (st->next_rank >= 0) st->dyin = exec_bufs(e->M, nc);
}

/* Index of stage g's last W or BW in the rank's list, -1. */
static int exec_last_w(const run_exec *e, int g) {
    int last = -1;
    for (int i = 0; i < e->c.s->len[e->p]; i++) {
        sched_action a = e->c.s->acts[e->p][i];
        if (a.stage == g && (a.kind == ACT_W || a.kind == ACT_BW)) last = i;
    }
    return last;
}

/* Stage g: its place, its own model (its layers, from the source), its buffers. */
static int exec_stage_init(run_exec *e, run_stage *st, int g) {
    const sched *s = e->c.s;
    st->g = g;
    st->chunk = run_layout_chunk_of(e->c.lo, g);
    st->pipe = g / s->stages_per_pipe;
    run_layout_stage_layers(e->c.lo, g, &st->first, &st->end);
    st->prev = sched_stage_prev(s, g);
    st->next = sched_stage_next(s, g);
    st->prev_rank = st->prev >= 0 && s->stage_rank[st->prev] != e->p ? exec_rank_of(e, st->prev) : -1;
    st->next_rank = st->next >= 0 && s->stage_rank[st->next] != e->p ? exec_rank_of(e, st->next) : -1;
    st->last_w = exec_last_w(e, g);
    st->slow = 1;
    if (gpt_init_layers_tp(&st->m, &e->c.src->cfg, st->first, st->end, e->t, e->tp) < 0 ||
        e->c.src->fill(e->c.src, &st->m) < 0)
        return pt_adderr("stage %d (layers %d..%d): ", g, st->first, st->end - 1);
    if (exec_tp_set(e, st) < 0) return pt_adderr("stage %d: ", g);
    if (exec_lend_prepare(e, st) < 0) return pt_adderr("stage %d: ", g);
    exec_stage_buffers(e, st);
    gpt_layers_param_span(&st->m, st->first, st->end, &st->span_off, &st->span_n);
    return 0;
}

/* After every stage has its model: tied tensors, then (async) the stash sized by them. */
static int exec_stage_finish(run_exec *e, run_stage *st) {
    if (exec_stage_ties(e, st) < 0) return -1;
    if (e->stashing) {   /* a stash per microbatch: pipedream's rule */
        st->stash = exec_bufs(e->M, exec_weights_n(st, e->n_ties));
        st->stash_sum = pt_calloc((size_t)e->M, sizeof *st->stash_sum);
    }
    return 0;
}

static void exec_stage_free(run_exec *e, run_stage *st) {
    exec_stage_acts_free(st);
    exec_lend_stage_free(st);
    exec_free_bufs(st->out, e->M);
    exec_free_bufs(st->xin, e->M);
    exec_free_bufs(st->dxo, e->M);
    exec_free_bufs(st->dyin, e->M);
    free(st->loss);
    for (int t = 0; t < GPT_MAX_TIES; t++) {
        free(st->copy[t].w);
        free(st->copy[t].dw);
        adamw_free(&st->copy[t].opt);
    }
    exec_free_bufs(st->stash, e->M);
    free(st->stash_sum);
    free(st->writes);
    adamw_free(&st->opt);
    gpt_free(&st->m);
}

/* Sub-communicators: one per chunk (its holders), one per tied tensor (the ranks holding its
 * owner layer or a copy), each of one TP rank (a shard is reduced with the same shard of the
 * other replicas). Collective over world, in that order on every rank. */
static int exec_split_comms(run_exec *e) {
    int K = e->c.s->stages_per_pipe;
    /* --dp-sync H > 1: each replica reduces alone (its tied tensors' copies still together);
     * the replicas meet in the outer step's all-reduce (exec_outer.c) */
    int col = e->c.dp_sync > 1 ? e->d * e->tp + e->t : e->t;
    e->chunk_comm = pt_calloc((size_t)K, sizeof *e->chunk_comm);
    for (int c = 0; c < K; c++) {
        int holds = 0;
        for (int i = 0; i < e->n_stages; i++) holds |= e->st[i].chunk == c;
        if (comm_split(e->c.world, holds ? col : -1, &e->chunk_comm[c]) < 0) return -1;
    }
    for (int t = 0; t < e->n_ties; t++) {
        int member = 0;
        for (int i = 0; i < e->n_stages; i++)
            member |= exec_owns_tie(e, &e->st[i], t) || e->st[i].copy[t].w != NULL;
        if (comm_split(e->c.world, member ? col : -1, &e->tie_comm[t]) < 0) return -1;
    }
    return 0;
}

/* --tp-recompute: the work buffer, one act of the largest layer of the stages that rebuild
 * (none: no buffer), sized again after a replan. */
static void exec_work_alloc(run_exec *e) {
    size_t mx = 0;
    for (int i = 0; i < e->n_stages; i++)
        for (int l = e->st[i].first; e->st[i].rebuild && l < e->st[i].end; l++) {
            size_t n = gpt_layer_act_floats(&e->st[i].m, l, e->c.mb_rows, e->c.T);
            if (n > mx) mx = n;
        }
    free(e->work);
    e->work = mx ? pt_falloc(mx) : NULL;
    e->work_n = mx;
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

static void exec_list_state(run_exec *e);

int exec_state_init(run_exec *e) {
    const sched *s = e->c.s;
    if (exec_tp_init(e) < 0) return -1;   /* first: collective, before a stage can fail */
    e->loc = pt_malloc(sizeof(int) * (size_t)s->n_stages);
    for (int g = 0; g < s->n_stages; g++) e->loc[g] = s->stage_rank[g] == e->p ? e->n_stages++ : -1;
    e->st = pt_calloc((size_t)e->n_stages, sizeof *e->st);
    for (int g = 0; g < s->n_stages; g++)
        if (e->loc[g] >= 0 && exec_stage_init(e, &e->st[e->loc[g]], g) < 0) return -1;
    e->n_ties = gpt_tie_count(&e->st[0].m);
    for (int i = 0; i < e->n_stages; i++)
        if (exec_stage_finish(e, &e->st[i]) < 0) return -1;
    e->scratch = pt_falloc(gpt_scratch_floats_chunks(&e->st[0].m, e->c.mb_rows, e->c.T, e->K));
    if (e->async) e->live = pt_falloc(exec_max_weights(e));
    exec_work_alloc(e);
    for (int k = 0; k < 2; k++) e->tmp[k] = pt_falloc((size_t)e->Ns * e->C);
    for (int k = 0; e->K > 1 && k < 2; k++) e->ctok[k] = pt_malloc((size_t)e->N * sizeof(int));
    exec_list_state(e);
    if (exec_lend_init(e) < 0) return -1;
    return exec_split_comms(e);
}

/* What follows from the rank's action list: request slots, the reduce and step actions, each
 * stage's last W, the timeline. */
static void exec_list_state(run_exec *e) {
    const sched *s = e->c.s;
    int len = s->len[e->p];
    e->recv_req = pt_calloc((size_t)len + 1, sizeof *e->recv_req);
    e->send_req = pt_calloc((size_t)len + 1, sizeof *e->send_req);
    e->pend = pt_calloc((size_t)len + 1, sizeof *e->pend);
    e->last_reduce = -1;
    e->n_reduce = e->n_step_acts = 0;
    for (int i = 0; i < len; i++) {
        if (s->acts[e->p][i].kind == ACT_REDUCE_GRAD) { e->n_reduce++; e->last_reduce = i; }
        e->n_step_acts += s->acts[e->p][i].kind == ACT_STEP;
    }
    for (int i = 0; i < e->n_stages; i++) e->st[i].last_w = exec_last_w(e, e->st[i].g);
    timeline_init(&e->tl, s, NULL, 1);
}

static void exec_list_state_free(run_exec *e) {
    free(e->recv_req);
    free(e->send_req);
    free(e->pend);
    e->recv_req = e->send_req = NULL;
    e->pend = NULL;
    timeline_free(&e->tl);
}

int exec_state_replan(run_exec *e, const sched *s) {
    if (e->lend)   /* the lend plan follows the schedule: a new one would move buffers mid-run */
        return pt_seterr("rank %d: --balance-memory keeps its schedule (no replan, no --adapt)", e->c.world_rank);
    exec_list_state_free(e);
    e->c.s = s;
    for (int i = 0; i < e->n_stages; i++) {
        run_stage *st = &e->st[i];
        /* a new peak: sets sized for it (none is in use between steps) */
        if (!e->c.tp_recompute && sched_stage_peak_slots(s, st->g, e->c.recompute != 0) == st->n_slots) continue;
        exec_stage_acts_free(st);
        exec_stage_acts(e, st);
    }
    exec_work_alloc(e);
    exec_list_state(e);
    return 0;
}

void exec_state_free(run_exec *e) {
    for (int i = 0; e->st && i < e->n_stages; i++) exec_stage_free(e, &e->st[i]);
    if (e->chunk_comm)
        for (int c = 0; c < e->c.s->stages_per_pipe; c++) comm_free(e->chunk_comm[c]);
    free(e->chunk_comm);
    for (int t = 0; t < GPT_MAX_TIES; t++) comm_free(e->tie_comm[t]);
    exec_tp_free(e);
    exec_lend_free(e);
    free(e->st);
    free(e->loc);
    free(e->scratch);
    free(e->live);
    free(e->work);
    free(e->tmp[0]);
    free(e->tmp[1]);
    free(e->ctok[0]);
    free(e->ctok[1]);
    exec_list_state_free(e);
}
