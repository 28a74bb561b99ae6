/* One rank's executor: the rank's stages, their buffers, and the walk over its lowered action
 * list (compute on real layers, non-blocking sends and receives, gradient reduction, AdamW step).
 * Not here: thread or process start-up, data, logging (run_job.c and the CLI).
 *
 * Legend: S stages, K chunks per pipe, M microbatches, b rows per microbatch, T time, C channels,
 * N = b*T positions per microbatch. Activation gradients are written (=), parameter gradients
 * accumulate (+=) over microbatches. */
#include "run/executor.h"
#include "util/pt.h"
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int g, chunk, pipe, first, end;   /* layers [first, end) */
    int prev, next;                   /* neighbour stages in the pipe, -1 at the ends */
    int prev_rank, next_rank;         /* world ranks of the neighbours (-1: none or local) */
    gpt_model *m;
    adamw_state *opt;
    float *priv_wte, *priv_dwte;      /* (V,C) head stage whose embedding is on another rank */
    adamw_state priv_opt;
    gpt_tied tied;
    float ***act;                     /* [end-first][n_slots+1] activation sets of each layer */
    int n_slots;                      /* sets held at once (the schedule's peak for this stage) */
    int *slot_of;                     /* [M] set of each microbatch, -1: none */
    int *slot_mb;                     /* [n_slots] microbatch in each set, -1: free */
    float **out;                      /* [M] (N,C) forward output (NULL for the head's stage) */
    float **xin;                      /* [M] (N,C) received input (prev on another rank) */
    float **dxo;                      /* [M] (N,C) input gradient (NULL at the first stage) */
    float **dyin;                     /* [M] (N,C) received output gradient (next remote) */
    float *loss;                      /* [M] head stage: mean loss of each microbatch */
    /* asynchronous schedules (pipedream): the weights each microbatch's F used */
    size_t span_off, span_n;          /* the stage's parameter span (with wte for chunk 0) */
    float **stash;                    /* [M] (span_n) params at F; priv wte after them */
    double *stash_sum;                /* [M] checksum of the stashed weights */
} run_stage;

struct run_exec {
    run_exec_cfg c;
    int d, p, M, N, C, n_stages;      /* replica, pipeline rank, sizes */
    run_stage *st;                    /* [n_stages] stages of this rank, in stage order */
    int *loc;                         /* [S] index into st, or -1 */
    float *scratch, *tmp[2];          /* per-thread scratch, (N,C) ping-pong buffers */
    comm **chunk_comm;                /* [K] ranks holding chunk c (NULL: not a member) */
    comm *tied_comm;                  /* ranks holding a wte copy */
    comm_req **recv_req;              /* [len] request of each RECV action, posted early */
    comm_req **send_req;              /* [len] pending sends */
    int *pend, n_pend;                /* indices of the pending sends, oldest first */
    int n_reduce, last_reduce;        /* REDUCE_GRAD actions; index of the last */
    double loss_sum, sumsq;
    int stepped;
    int async;                        /* weights update per microbatch, with weight stashing */
    int n_step_acts, step_idx;        /* async: STEPs per iteration, STEPs done in this one */
    float *live;                      /* async: the current weights while stashed ones run */
    int stash_checked, stash_bad, stash_stale;   /* run_exec_stash_stats */
    timeline tl;
};

static int exec_tag(const run_exec *e, int g, int mb, int dir) { return (g * e->M + mb) * 2 + dir; }

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

/* The model instance's chunk-0 stage (same pipe) is on this rank? */
static int exec_holds_embedding(const run_exec *e, int pipe) {
    int g0 = pipe * e->c.s->stages_per_pipe;
    return e->c.s->stage_rank[g0] == e->p;
}

/* Activation sets stage g holds at once, following the rank's order: from F (or, recomputing,
 * from the backward's recompute) until W or BW. */
static int exec_count_slots(const run_exec *e, int g) {
    const sched *s = e->c.s;
    int n = 0, peak = 1;
    for (int i = 0; i < s->len[e->p]; i++) {
        sched_action a = s->acts[e->p][i];
        if (a.stage != g) continue;
        if (a.kind == (e->c.recompute ? ACT_B : ACT_F)) n++;
        if (a.kind == ACT_BW && e->c.recompute) n++;
        if (n > peak) peak = n;
        if (a.kind == ACT_W || a.kind == ACT_BW) n--;
    }
    return peak;
}

/* Floats of the weights a stage reads: its span, then its private wte when it has one. */
static size_t exec_weights_n(const run_stage *st) {
    return st->span_n + (st->priv_wte ? (size_t)st->m->cfg.vocab_size * st->m->cfg.n_embd : 0);
}

/* Activation sets and the boundary buffers of each microbatch. */
static void exec_stage_buffers(run_exec *e, run_stage *st) {
    int nl = st->end - st->first;
    size_t nc = (size_t)e->N * e->C;
    st->n_slots = exec_count_slots(e, st->g);
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

/* The head's own wte, dwte and moments (copied from the instance: equal to the embedding's). */
static void exec_stage_tied(run_stage *st) {
    size_t n = (size_t)st->m->cfg.vocab_size * st->m->cfg.n_embd;
    st->priv_wte = pt_falloc(n);
    st->priv_dwte = pt_falloc(n);
    memcpy(st->priv_wte, st->m->w.wte, n * sizeof(float));
    if (st->opt) {   /* non-zero when resuming */
        adamw_init(&st->priv_opt, n);
        memcpy(st->priv_opt.m, st->opt->m, n * sizeof(float));
        memcpy(st->priv_opt.v, st->opt->v, n * sizeof(float));
    }
    st->tied.wte = st->priv_wte;
    st->tied.dwte = st->priv_dwte;
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
    size_t o1, c1;
    gpt_layer_param_span(st->m, st->first, &st->span_off, &c1);
    gpt_layer_param_span(st->m, st->end - 1, &o1, &c1);
    st->span_n = o1 + c1 - st->span_off;
    if (st->next < 0 && st->chunk != 0 && !exec_holds_embedding(e, st->pipe)) exec_stage_tied(st);
    if (e->async) {
        st->stash = exec_bufs(e->M, exec_weights_n(st));
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
    free(st->priv_wte);
    free(st->priv_dwte);
    if (st->priv_opt.m) adamw_free(&st->priv_opt);
    exec_free_bufs(st->stash, e->M);
    free(st->stash_sum);
}

static const gpt_tied *exec_tied(const run_stage *st) { return st->priv_wte ? &st->tied : NULL; }

/* Sub-communicators: one per chunk (its holders), one for the wte copies. Collective. */
static int exec_split_comms(run_exec *e) {
    int K = e->c.s->stages_per_pipe;
    e->chunk_comm = pt_calloc((size_t)K, sizeof *e->chunk_comm);
    for (int c = 0; c < K; c++) {
        int holds = 0;
        for (int i = 0; i < e->n_stages; i++) holds |= e->st[i].chunk == c;
        if (comm_split(e->c.world, holds ? 0 : -1, &e->chunk_comm[c]) < 0) return -1;
    }
    int wte = 0;
    for (int i = 0; i < e->n_stages; i++) wte |= e->st[i].chunk == 0 || e->st[i].priv_wte;
    return comm_split(e->c.world, wte ? 0 : -1, &e->tied_comm);
}

int run_exec_init(run_exec **out, const run_exec_cfg *cfg) {
    run_exec *e = pt_calloc(1, sizeof *e);
    const sched *s = cfg->s;
    e->c = *cfg;
    run_layout_coords(cfg->lo, cfg->world_rank, &e->d, &e->p);
    e->M = s->n_mb;
    e->async = s->async;
    e->N = cfg->mb_rows * cfg->T;
    e->C = cfg->models[0]->cfg.n_embd;
    e->loc = pt_malloc(sizeof(int) * (size_t)s->n_stages);
    for (int g = 0; g < s->n_stages; g++) e->loc[g] = s->stage_rank[g] == e->p ? e->n_stages++ : -1;
    e->st = pt_calloc((size_t)e->n_stages, sizeof *e->st);
    for (int g = 0; g < s->n_stages; g++)
        if (e->loc[g] >= 0) exec_stage_init(e, &e->st[e->loc[g]], g);
    e->scratch = pt_falloc(gpt_scratch_floats(cfg->models[0], cfg->mb_rows, cfg->T));
    if (e->async) {
        size_t mx = 0;
        for (int i = 0; i < e->n_stages; i++)
            if (e->st[i].span_n + (size_t)cfg->models[0]->cfg.vocab_size * e->C > mx)
                mx = e->st[i].span_n + (size_t)cfg->models[0]->cfg.vocab_size * e->C;
        e->live = pt_falloc(mx);
    }
    for (int k = 0; k < 2; k++) e->tmp[k] = pt_falloc((size_t)e->N * e->C);
    int len = s->len[e->p];
    e->recv_req = pt_calloc((size_t)len + 1, sizeof *e->recv_req);
    e->send_req = pt_calloc((size_t)len + 1, sizeof *e->send_req);
    e->pend = pt_calloc((size_t)len + 1, sizeof *e->pend);
    e->last_reduce = -1;
    for (int i = 0; i < len; i++)
        if (s->acts[e->p][i].kind == ACT_REDUCE_GRAD) { e->n_reduce++; e->last_reduce = i; }
    for (int i = 0; i < len; i++) e->n_step_acts += s->acts[e->p][i].kind == ACT_STEP;
    timeline_init(&e->tl, s, NULL, 1);
    *out = e;
    if (exec_split_comms(e) < 0) return pt_adderr("rank %d: ", cfg->world_rank);
    return 0;
}

void run_exec_free(run_exec *e) {
    if (!e) return;
    for (int i = 0; i < e->n_stages; i++) exec_stage_free(e, &e->st[i]);
    if (e->chunk_comm)
        for (int c = 0; c < e->c.s->stages_per_pipe; c++) comm_free(e->chunk_comm[c]);
    free(e->chunk_comm);
    comm_free(e->tied_comm);
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
    free(e);
}

const timeline *run_exec_timeline(const run_exec *e) { return &e->tl; }

/* ---- compute ---------------------------------------------------------------------------- */

/* Rows of microbatch mb in the global (B,T) batch: replica d's block, then the mb-th block. */
static const int *exec_rows(const run_exec *e, const int *tok, int mb) {
    size_t row = (size_t)e->d * (e->c.B / e->c.lo->D) + (size_t)mb * e->c.mb_rows;
    return tok + row * e->c.T;
}

/* Input of stage st for mb: the neighbour's output on this rank, or the received buffer. */
static const float *exec_input(run_exec *e, const run_stage *st, int mb) {
    if (st->prev < 0) return NULL;
    if (st->prev_rank >= 0) return st->xin[mb];
    return e->st[e->loc[st->prev]].out[mb];
}

/* Gradient w.r.t. stage st's output for mb: from the next stage (local or received). */
static const float *exec_dout(run_exec *e, const run_stage *st, int mb) {
    if (st->next_rank >= 0) return st->dyin[mb];
    return e->st[e->loc[st->next]].dxo[mb];
}

/* Activation set of (layer, mb). */
static float *exec_act(const run_stage *st, int layer, int mb) {
    return st->act[layer - st->first][st->slot_of[mb]];
}

/* Gives mb a free activation set (spare: the extra set a recomputing forward uses). */
static void exec_acquire(run_stage *st, int mb, int spare) {
    if (spare) { st->slot_of[mb] = st->n_slots; return; }
    for (int k = 0; k < st->n_slots; k++)
        if (st->slot_mb[k] < 0) { st->slot_mb[k] = mb; st->slot_of[mb] = k; return; }
    assert(!"activation sets exhausted: exec_count_slots disagrees with the schedule");
}

static void exec_release(run_stage *st, int mb) {
    if (st->slot_of[mb] < st->n_slots) st->slot_mb[st->slot_of[mb]] = -1;
    st->slot_of[mb] = -1;
}

/* F of stage st on mb. again: the recompute before a backward (output to scratch, loss not
 * counted; it already succeeded once, so it cannot fail). */
static int exec_forward(run_exec *e, run_stage *st, int mb, const int *tokens, const int *targets,
                        int again) {
    const float *x = exec_input(e, st, mb);
    int b = e->c.mb_rows, T = e->c.T, k = 0;
    float loss;
    for (int l = st->first; l < st->end; l++) {
        float *y;
        gpt_layer_kind kind = gpt_layer_kind_of(st->m, l);
        const int *tk = kind == GPT_LAYER_EMBED ? exec_rows(e, tokens, mb)
                      : kind == GPT_LAYER_HEAD ? exec_rows(e, targets, mb) : NULL;
        if (kind == GPT_LAYER_HEAD) y = again ? &loss : &st->loss[mb];
        else if (l == st->end - 1 && !again) y = st->out[mb];
        else { y = e->tmp[k]; k ^= 1; }
        if (gpt_layer_forward(st->m, l, exec_tied(st), exec_act(st, l, mb), e->scratch, y, x, tk, b, T) < 0)
            return pt_adderr("stage %d F%d: ", st->g, mb);
        x = y;
    }
    if (st->next < 0 && !again) e->loss_sum += st->loss[mb];
    return 0;
}

static void exec_backward_input(run_exec *e, run_stage *st, int mb) {
    /* the objective: mean over all microbatches, or (async) over this microbatch's replicas */
    float scale = 1.0f / (float)((e->async ? 1 : e->M) * e->c.lo->D);
    const float *dy = st->next < 0 ? &scale : exec_dout(e, st, mb);
    int k = 0;
    for (int l = st->end - 1; l >= st->first; l--) {
        float *dx;
        if (l == 0) dx = NULL;
        else if (l == st->first) dx = st->dxo[mb];
        else { dx = e->tmp[k]; k ^= 1; }
        gpt_layer_backward_input(st->m, l, exec_tied(st), exec_act(st, l, mb), e->scratch,
                                 dx, dy, e->c.mb_rows, e->c.T);
        dy = dx;
    }
}

/* W in reverse layer order, so a stage holding head and embedding adds to wte as one process. */
static void exec_backward_weight(run_exec *e, run_stage *st, int mb) {
    for (int l = st->end - 1; l >= st->first; l--)
        gpt_layer_backward_weight(st->m, l, exec_tied(st), exec_act(st, l, mb), e->scratch,
                                  e->c.mb_rows, e->c.T);
}

/* The F action: activations kept for the backward, or (recomputing) dropped at once. */
static int exec_forward_action(run_exec *e, run_stage *st, int mb, const int *tok, const int *tgt) {
    exec_acquire(st, mb, e->c.recompute);
    int rc = exec_forward(e, st, mb, tok, tgt, 0);
    if (e->c.recompute) exec_release(st, mb);
    return rc;
}

/* B, W or BW: recomputes the forward first when asked; the activations go after W. */
static void exec_backward(run_exec *e, run_stage *st, int mb, int input, int weight,
                          const int *tok, const int *tgt) {
    if (input && e->c.recompute) {
        exec_acquire(st, mb, 0);
        exec_forward(e, st, mb, tok, tgt, 1);
    }
    if (input) exec_backward_input(e, st, mb);
    if (weight) {
        exec_backward_weight(e, st, mb);
        exec_release(st, mb);
    }
}

/* ---- weight stashing (asynchronous schedules) ---------------------------------------------- */

/* The stage's weights (span, then the private wte when it has one) into dst. */
static void exec_weights_get(const run_stage *st, float *dst) {
    memcpy(dst, st->m->params + st->span_off, st->span_n * sizeof(float));
    if (st->priv_wte)
        memcpy(dst + st->span_n, st->priv_wte, (size_t)st->m->cfg.vocab_size * st->m->cfg.n_embd * sizeof(float));
}

static void exec_weights_put(run_stage *st, const float *src) {
    memcpy(st->m->params + st->span_off, src, st->span_n * sizeof(float));
    if (st->priv_wte)
        memcpy(st->priv_wte, src + st->span_n, (size_t)st->m->cfg.vocab_size * st->m->cfg.n_embd * sizeof(float));
}

/* Position-weighted checksum of w[0..n) as elements base.. of a longer vector: two weight
 * versions that differ anywhere almost surely differ here. */
static double exec_checksum(const float *w, size_t n, size_t base) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)w[i] * (double)(1 + (base + i) % 7919);
    return s;
}

/* Checksum of the weights the stage's layers read right now (span, then the private wte). */
static double exec_weights_sum(const run_stage *st) {
    double s = exec_checksum(st->m->params + st->span_off, st->span_n, 0);
    if (st->priv_wte) s += exec_checksum(st->priv_wte, exec_weights_n(st) - st->span_n, st->span_n);
    return s;
}

/* At F: remember the weights this microbatch sees. */
static void exec_stash(run_stage *st, int mb) {
    exec_weights_get(st, st->stash[mb]);
    st->stash_sum[mb] = exec_weights_sum(st);
}

/* Before the backward: the current weights aside, the stashed ones in. Counts (the direct
 * check of stashing): backwards run, backwards whose weights differ from their F's (a bug), and
 * backwards whose F's weights differ from the current ones (stashing mattered). */
static void exec_unstash(run_exec *e, run_stage *st, int mb) {
    exec_weights_get(st, e->live);
    exec_weights_put(st, st->stash[mb]);
    e->stash_checked++;
    e->stash_bad += exec_weights_sum(st) != st->stash_sum[mb];
    e->stash_stale += memcmp(e->live, st->stash[mb], exec_weights_n(st) * sizeof(float)) != 0;
}

static void exec_restash(run_exec *e, run_stage *st) { exec_weights_put(st, e->live); }

/* BW of an asynchronous schedule: on the weights its F used, then the current ones back. */
static void exec_backward_stashed(run_exec *e, run_stage *st, int mb, int input, int weight,
                                  const int *tok, const int *tgt) {
    exec_unstash(e, st, mb);
    exec_backward(e, st, mb, input, weight, tok, tgt);
    exec_restash(e, st);
}

/* ---- communication ---------------------------------------------------------------------- */

/* Posts every receive of the iteration at once (buffers are per stage and microbatch). */
static int exec_post_recvs(run_exec *e) {
    const sched *s = e->c.s;
    size_t bytes = (size_t)e->N * e->C * sizeof(float);
    for (int i = 0; i < s->len[e->p]; i++) {
        sched_action a = s->acts[e->p][i];
        run_stage *st = a.stage >= 0 ? &e->st[e->loc[a.stage]] : NULL;
        int rc = 0;
        if (a.kind == ACT_RECV_F)
            rc = comm_irecv(e->c.world, st->prev_rank, exec_tag(e, a.stage, a.mb, 0), st->xin[a.mb],
                            bytes, &e->recv_req[i]);
        else if (a.kind == ACT_RECV_B)
            rc = comm_irecv(e->c.world, st->next_rank, exec_tag(e, a.stage, a.mb, 1),
                            st->dyin[a.mb], bytes, &e->recv_req[i]);
        if (rc < 0) return pt_adderr("rank %d: posting %d%s%d: ", e->c.world_rank, a.stage,
                                     sched_kind_name(a.kind), a.mb);
    }
    return 0;
}

/* Completes finished sends without blocking (lazily, between actions). */
static int exec_poll_sends(run_exec *e) {
    int k = 0;
    for (int n = 0; n < e->n_pend; n++) {
        int i = e->pend[n], done = 0;
        if (comm_test(e->c.world, e->send_req[i], &done) < 0) return -1;
        if (done) e->send_req[i] = NULL;
        else e->pend[k++] = i;
    }
    e->n_pend = k;
    return 0;
}

static int exec_send(run_exec *e, int i, sched_action a, int *peer) {
    run_stage *st = &e->st[e->loc[a.stage]];
    size_t bytes = (size_t)e->N * e->C * sizeof(float);
    if (a.kind == ACT_SEND_F) {
        *peer = st->next_rank;
        return comm_isend(e->c.world, *peer, exec_tag(e, st->next, a.mb, 0), st->out[a.mb], bytes,
                          &e->send_req[i]);
    }
    *peer = st->prev_rank;
    return comm_isend(e->c.world, *peer, exec_tag(e, st->prev, a.mb, 1), st->dxo[a.mb], bytes,
                      &e->send_req[i]);
}

static int exec_recv(run_exec *e, int i, sched_action a, int *peer) {
    run_stage *st = &e->st[e->loc[a.stage]];
    *peer = a.kind == ACT_RECV_F ? st->prev_rank : st->next_rank;
    comm_req *r = e->recv_req[i];
    e->recv_req[i] = NULL;
    if (!r) return pt_seterr("RECV without a posted receive");
    return comm_wait(e->c.world, r, e->c.timeout);
}

/* ---- reduction and step ----------------------------------------------------------------- */

/* Sums this rank's copies (in stage order) into the first, all-reduces it over cm, copies back. */
static int exec_reduce_copies(comm *cm, float **copies, int n_copies, size_t n) {
    if (n_copies == 0 || n == 0) return 0;
    for (int k = 1; k < n_copies; k++)
        for (size_t i = 0; i < n; i++) copies[0][i] += copies[k][i];
    if (cm && cm->size > 1 && comm_allreduce_f32(cm, copies[0], n) < 0) return -1;
    for (int k = 1; k < n_copies; k++) memcpy(copies[k], copies[0], n * sizeof(float));
    return 0;
}

/* Floats of chunk stage st's gradient span, without wte (reduced with the tied copies). */
static void exec_chunk_span(const run_stage *st, size_t *off, size_t *n) {
    size_t o0, c0, o1, c1;
    gpt_layer_param_span(st->m, st->first, &o0, &c0);
    gpt_layer_param_span(st->m, st->end - 1, &o1, &c1);
    *off = o0;
    *n = o1 + c1 - o0;
    if (st->first == 0) {
        size_t wte = (size_t)st->m->cfg.vocab_size * st->m->cfg.n_embd;
        *off += wte;
        *n -= wte;
    }
}


/* Reduces every chunk, then wte, in one global order (chunk 0..K-1, tied) so collectives on the
 * sub-communicators cannot cross. Adds the unique gradients' sum of squares to e->sumsq. */
static int exec_reduce_all(run_exec *e) {
    int K = e->c.s->stages_per_pipe, n;
    float **copies = pt_malloc(sizeof(float *) * (size_t)(e->n_stages + 1));
    size_t off = 0, cnt = 0, wte = (size_t)e->c.models[0]->cfg.vocab_size * e->C;
    for (int c = 0; c < K; c++) {
        n = 0;
        for (int i = 0; i < e->n_stages; i++)
            if (e->st[i].chunk == c) { exec_chunk_span(&e->st[i], &off, &cnt); copies[n++] = e->st[i].m->grads + off; }
        if (exec_reduce_copies(e->chunk_comm[c], copies, n, cnt) < 0) goto fail;
        if (n && e->chunk_comm[c]->rank == 0) e->sumsq += optim_sumsq(copies[0], cnt);
    }
    n = 0;
    for (int i = 0; i < e->n_stages; i++) {
        if (e->st[i].chunk == 0) copies[n++] = e->st[i].m->grads;
        else if (e->st[i].priv_dwte) copies[n++] = e->st[i].priv_dwte;
    }
    if (exec_reduce_copies(e->tied_comm, copies, n, wte) < 0) goto fail;
    if (n && e->tied_comm->rank == 0) e->sumsq += optim_sumsq(copies[0], wte);
    free(copies);
    return 0;
fail:
    free(copies);
    return pt_adderr("rank %d: gradient reduction: ", e->c.world_rank);
}

/* Asynchronous schedules: stage st's gradients now (its chunk's holders, then the wte copies
 * when st has one). Every holder reduces the same microbatch's gradients: replicas run the same
 * list, and chunk 0's and the head's k-th backward are of the same microbatch. */
static int exec_reduce_stage(run_exec *e, run_stage *st) {
    size_t off, cnt, wte = (size_t)st->m->cfg.vocab_size * e->C;
    float *p;
    exec_chunk_span(st, &off, &cnt);
    p = st->m->grads + off;
    if (exec_reduce_copies(e->chunk_comm[st->chunk], &p, 1, cnt) < 0) goto fail;
    p = st->chunk == 0 ? st->m->grads : st->priv_dwte;
    if (p && exec_reduce_copies(e->tied_comm, &p, 1, wte) < 0) goto fail;
    return 0;
fail:
    return pt_adderr("rank %d: stage %d gradient reduction: ", e->c.world_rank, st->g);
}

/* World reduction of (sum of squares, loss sum): once per iteration, at STEP or at the end. */
static int exec_reduce_world(run_exec *e, run_exec_stats *rs) {
    double v[2] = { e->sumsq, e->loss_sum };
    if (comm_allreduce_f64(e->c.world, v, 2) < 0) return pt_adderr("rank %d: loss/norm: ", e->c.world_rank);
    rs->grad_norm = sqrt(v[0]);
    rs->loss = (float)(v[1] / (e->M * e->c.lo->D));
    if (e->async) rs->clip_scale = 1;
    return 0;
}

/* AdamW update t (bias correction) on every span this rank owns and its private wte copies,
 * gradients multiplied by scale (the clipping factor) first. */
static void exec_adamw(run_exec *e, const optim_config *oc, int t, double lr, double scale) {
    for (int i = 0; i < e->n_stages; i++) {
        run_stage *st = &e->st[i];
        for (int k = 0; k < gpt_param_count(st->m); k++) {
            const gpt_param_info *pi = gpt_param_info_at(st->m, k);
            if (pi->layer < st->first || pi->layer >= st->end) continue;
            adamw_update_span(st->opt, st->m->params, st->m->grads, pi->offset, pi->count, lr,
                              scale, pi->decay != 0, t, oc);
        }
        if (st->priv_wte) {
            const gpt_param_info *pi = gpt_param_info_at(st->m, 0);   /* wte */
            adamw_update_span(&st->priv_opt, st->priv_wte, st->priv_dwte, 0, pi->count, lr,
                              scale, pi->decay != 0, t, oc);
        }
    }
}

/* ---- the walk ----------------------------------------------------------------------------- */

static void exec_zero_grads(run_exec *e) {
    for (int i = 0; i < e->n_stages; i++) {
        run_stage *st = &e->st[i];
        size_t o0, c0, o1, c1, wte = (size_t)st->m->cfg.vocab_size * e->C;
        gpt_layer_param_span(st->m, st->first, &o0, &c0);
        gpt_layer_param_span(st->m, st->end - 1, &o1, &c1);
        memset(st->m->grads + o0, 0, (o1 + c1 - o0) * sizeof(float));
        if (st->priv_dwte) memset(st->priv_dwte, 0, wte * sizeof(float));
    }
}

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
        if (e->async) exec_stash(st, a.mb);
        rc = exec_forward_action(e, st, a.mb, tok, tgt);
        break;
    case ACT_B: case ACT_W: case ACT_BW:
        if (e->async) exec_backward_stashed(e, st, a.mb, a.kind != ACT_W, a.kind != ACT_B, tok, tgt);
        else exec_backward(e, st, a.mb, a.kind != ACT_W, a.kind != ACT_B, tok, tgt);
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

/* Waits for every outstanding send and cancels nothing: a receive left over is a bug. */
static int exec_finish_sends(run_exec *e) {
    for (int i = 0; i < e->c.s->len[e->p]; i++) {
        if (!e->send_req[i]) continue;
        comm_req *r = e->send_req[i];
        e->send_req[i] = NULL;
        if (comm_wait(e->c.world, r, e->c.timeout) < 0)
            return pt_adderr("rank %d: completing sends: ", e->c.world_rank);
    }
    e->n_pend = 0;
    return 0;
}

/* After a failure: frees the requests that completed (test reports them); the transport drops
 * the ones still pending when the endpoint is freed. Keeps the first error. */
static int exec_drop_requests(run_exec *e) {
    char err[1024];
    snprintf(err, sizeof err, "%s", pt_err());
    comm_req **lists[2] = { e->recv_req, e->send_req };
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < e->c.s->len[e->p]; i++) {
            int done = 0;
            if (lists[k][i]) comm_test(e->c.world, lists[k][i], &done);
            lists[k][i] = NULL;
        }
    return pt_seterr("%s", err);
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
