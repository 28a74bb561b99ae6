/* train --balance-memory in the executor: a stage's layer that lends (sched/sched_lend.h) keeps
 * `cap` activation buffers instead of its peak; after the compute action its plan names, a
 * microbatch's act of that layer (lent in parts: its tail, the head waiting in a head buffer of
 * the lender's) is sent to the partner rank, which holds it in a buffer of its
 * pool and sends it back as soon as it has it; the lender posts the receive of the way back after
 * the action its plan names (ahead of the backward), and waits for it only at the backward. The
 * numbers do not change: the act comes back bit for bit. On threads the same messages run (a
 * real copy into the partner's pool), so the bytes a rank holds are what its buffers are; on MPI
 * they are its process's. A rank serves what it borrows between its actions and inside its
 * waits (exec_lend_wait: asleep on the awaited request and the partner side's at once), and
 * before its reduction and step (exec_lend_drain), so no rank waits on a partner that waits on
 * it. Not here: when actions run (executor.c), the plan (sched/). */
#include "run/exec_int.h"
#include "sched/sched_lend.h"
#include "util/pt.h"
#include <stdlib.h>
#include <string.h>

/* The lender's side of one layer: its buffers (st->act[layer], not owned) and what is on them. */
struct exec_lend_out {
    const sched_lend_unit *u;
    int cap, peer;
    float **buf;                /* [cap] */
    size_t n;                   /* floats of each (exec_lend_init checks them against the plan) */
    size_t part_n, head_n;      /* of them, what a lend sends (the tail) and what stays (the head) */
    float **head;               /* [u->heads] (head_n) the heads of microbatches away */
    int *head_mb;               /* [u->heads] microbatch whose head it holds, -1: free */
    int *head_of;               /* [M] head buffer of each microbatch away, -1: none */
    int *buf_mb;                /* [cap] microbatch whose act it holds, -1: free */
    comm_req **req;             /* [cap] a send (lend) or receive (fetch) in flight on it */
    int *fetching;              /* [cap] req is a fetch */
    int *of;                    /* [M] buffer of each microbatch, -1: none here */
};

/* The partner's side of one lending layer: its pool and the windows going through it. */
typedef struct {
    const sched_lend_unit *u;
    int peer;
    float **pool;               /* [u->pool] */
    comm_req **req;             /* [u->pool] */
    int *state, *win;           /* [u->pool] 0 idle, 1 receiving, 2 sending back; its window */
    int next, returned;         /* windows of this iteration posted, and sent back */
} exec_lend_in;

struct exec_lend {
    sched_lend_plan plan;
    int Lmax, tag_base;
    exec_lend_in *in;
    int n_in;
    double wait_s;              /* seconds the rank waited on lending since init */
    comm_req **wv, ***ws;       /* [1 + pools] a wait's requests, and where each came from */
};

/* Floats of what a unit's lend sends (the same count on both sides). */
static size_t lend_floats(const sched_lend_unit *u) { return (size_t)(u->part / sizeof(float)); }

static int lend_tag(const run_exec *e, const sched_lend_unit *u, int mb, int back) {
    return e->lend->tag_base + (((u->stage * e->lend->Lmax + u->layer) * e->M + mb) * 2 + back);
}

/* What stage g's rank holds besides activation sets, the same on every rank: its layers'
 * parameters, gradients and moments as the planner prices them (the model's cost rows; --zero 1:
 * the moments split over the replicas), and its boundary buffers (each M x (Ns,C): the output and
 * the input gradient where a stage follows or comes before, the received input and output
 * gradient where that stage is on another rank). */
static double lend_fixed(const run_exec *e, int g, int first, int end) {
    const sched *s = e->c.s;
    const gpt_config *cfg = &e->c.src->cfg;
    double x = 0, div = e->c.zero && e->c.lo->D > 1 ? e->c.lo->D : 1;
    for (int l = first; l < end; l++) {
        gpt_layer_kind kind = gpt_config_layer_kind(cfg, l);
        gpt_layer_cost c = { 0 };
        gpt_kind_cost(kind, cfg, e->c.mb_rows, e->c.T, e->tp, e->c.tp_sp && gpt_kind_ops(kind)->cost_sp, &c);
        x += c.param_bytes + c.grad_bytes + c.optim_bytes / div;
    }
    int prev = sched_stage_prev(s, g), next = sched_stage_next(s, g);
    int bufs = (next >= 0) + (prev >= 0) + (prev >= 0 && s->stage_rank[prev] != s->stage_rank[g]) +
               (next >= 0 && s->stage_rank[next] != s->stage_rank[g]);
    return x + (double)bufs * e->M * e->Ns * e->C * sizeof(float);
}

/* The plan from every stage's layer sizes (read from the model m of this rank's first stage:
 * sizes depend on the layer's kind and the config, not on which stage holds it) and every rank's
 * fixed bytes (lend_fixed): it balances each rank's total. */
static int lend_plan(run_exec *e, const gpt_model *m) {
    const sched *s = e->c.s;
    int P = s->n_stages, *nl = pt_calloc((size_t)P, sizeof(int));
    double **bytes = pt_calloc((size_t)P, sizeof *bytes), *fixed = pt_calloc((size_t)P, sizeof(double));
    e->lend = pt_calloc(1, sizeof *e->lend);
    for (int g = 0; g < P; g++) {
        int first, end;
        run_layout_stage_layers(e->c.lo, g, &first, &end);
        nl[g] = end - first;
        e->lend->Lmax = nl[g] > e->lend->Lmax ? nl[g] : e->lend->Lmax;
        bytes[g] = pt_calloc((size_t)nl[g] + 1, sizeof(double));
        for (int l = first; l < end; l++)
            bytes[g][l - first] = (double)gpt_layer_act_floats(m, l, e->c.mb_rows, e->c.T) * sizeof(float);
        fixed[g] = lend_fixed(e, g, first, end);
    }
    int rc = sched_lend_balance(s, nl, (const double *const *)bytes, fixed, &e->lend->plan);
    for (int g = 0; g < P; g++) free(bytes[g]);
    free(bytes);
    free(fixed);
    free(nl);
    e->lend->tag_base = 2 * s->n_stages * s->n_mb;
    long top = e->lend->tag_base + 2L * P * e->lend->Lmax * s->n_mb;
    if (rc == 0 && top > COMM_TAG_EXEC_LIMIT)
        rc = pt_seterr("--balance-memory: %d stages x %d layers x %d microbatches need message tags up to %ld "
                       "(limit %d): use fewer microbatches", P, e->lend->Lmax, s->n_mb, top, COMM_TAG_EXEC_LIMIT);
    return rc;
}

int exec_lend_prepare(run_exec *e, run_stage *st) {
    if (!e->c.balance_memory) return 0;
    if (e->c.recompute || e->c.tp_recompute)
        return pt_seterr("--balance-memory does not go with --recompute or --tp-recompute (they keep "
                         "other buffers than whole activation sets)");
    if (!e->lend && lend_plan(e, &st->m) < 0) return -1;
    int nl = st->end - st->first;
    for (int l = 0; l < nl; l++) {
        const sched_lend_unit *u = sched_lend_find(&e->lend->plan, st->g, l);
        if (!u) continue;
        if (!st->lout) st->lout = pt_calloc((size_t)nl, sizeof *st->lout);
        exec_lend_out *o = pt_calloc(1, sizeof *o);
        o->u = u;
        o->cap = u->cap;
        o->peer = run_layout_world_rank(e->c.lo, e->d, u->partner, e->t);
        o->buf_mb = pt_malloc(sizeof(int) * (size_t)u->cap);
        o->req = pt_calloc((size_t)u->cap, sizeof *o->req);
        o->fetching = pt_calloc((size_t)u->cap, sizeof(int));
        o->of = pt_malloc(sizeof(int) * 2 * (size_t)e->M);
        o->head_of = o->of + e->M;
        o->head = pt_calloc((size_t)u->heads + 1, sizeof *o->head);
        o->head_mb = pt_malloc(sizeof(int) * (size_t)(u->heads + 1));
        for (int k = 0; k < u->cap; k++) o->buf_mb[k] = -1;
        for (int k = 0; k < u->heads; k++) o->head_mb[k] = -1;
        for (int j = 0; j < 2 * e->M; j++) o->of[j] = -1;
        st->lout[l] = o;
    }
    return 0;
}

int exec_lend_cap(const run_stage *st, int layer) {
    return st->lout && st->lout[layer - st->first] ? st->lout[layer - st->first]->cap : -1;
}

void exec_lend_bind(run_stage *st, int layer, float **bufs, size_t n) {
    exec_lend_out *o = st->lout ? st->lout[layer - st->first] : NULL;
    if (!o) return;
    o->buf = bufs, o->n = n;
    o->part_n = lend_floats(o->u) < n ? lend_floats(o->u) : n;
    o->head_n = n - o->part_n;
    for (int k = 0; o->head_n && k < o->u->heads; k++) o->head[k] = pt_falloc(o->head_n);
}

size_t exec_lend_head_floats(const run_stage *st, int layer) {
    const exec_lend_out *o = st->lout ? st->lout[layer - st->first] : NULL;
    return o && o->head_n ? (size_t)o->u->heads * o->head_n : 0;
}

/* Every lending layer's buffers are the plan's size (the messages are that many bytes). */
static int lend_check_sizes(const run_exec *e) {
    for (int i = 0; i < e->n_stages; i++)
        for (int l = 0; e->st[i].lout && l < e->st[i].end - e->st[i].first; l++) {
            const exec_lend_out *o = e->st[i].lout[l];
            if (o && (double)(o->n * sizeof(float)) != o->u->bytes)
                return pt_seterr("--balance-memory: stage %d layer %d holds acts of %zu bytes, the lend plan %.0f "
                                 "(a bug: the plan must read the sizes the buffers have)", e->st[i].g,
                                 e->st[i].first + l, o->n * sizeof(float), o->u->bytes);
        }
    return 0;
}

float *exec_lend_act(const run_stage *st, int layer, int mb) {
    const exec_lend_out *o = st->lout ? st->lout[layer - st->first] : NULL;
    return o && o->of[mb] >= 0 ? o->buf[o->of[mb]] : NULL;
}

/* The pools this rank keeps for the layers lent to it. */
int exec_lend_init(run_exec *e) {
    if (!e->lend) return 0;
    if (lend_check_sizes(e) < 0) return -1;
    const sched_lend_plan *p = &e->lend->plan;
    int n_wait = 1;
    e->lend->in = pt_calloc((size_t)p->n_units + 1, sizeof *e->lend->in);
    for (int i = 0; i < p->n_units; i++) {
        const sched_lend_unit *u = &p->unit[i];
        if (u->partner != e->p) continue;
        exec_lend_in *x = &e->lend->in[e->lend->n_in++];
        x->u = u;
        x->peer = run_layout_world_rank(e->c.lo, e->d, u->stage, e->t);
        x->pool = pt_calloc((size_t)u->pool, sizeof *x->pool);
        for (int k = 0; k < u->pool; k++) x->pool[k] = pt_falloc(lend_floats(u));
        x->req = pt_calloc((size_t)u->pool, sizeof *x->req);
        x->state = pt_calloc((size_t)u->pool, sizeof(int));
        x->win = pt_calloc((size_t)u->pool, sizeof(int));
        n_wait += u->pool;
    }
    e->lend->wv = pt_calloc((size_t)n_wait, sizeof *e->lend->wv);
    e->lend->ws = pt_calloc((size_t)n_wait, sizeof *e->lend->ws);
    return 0;
}

static void lend_out_free(exec_lend_out *o) {
    if (!o) return;
    for (int k = 0; k < o->u->heads; k++) free(o->head[k]);
    free(o->head); free(o->head_mb);
    free(o->buf_mb); free(o->req); free(o->fetching); free(o->of);
    free(o);
}

void exec_lend_stage_free(run_stage *st) {
    for (int l = 0; st->lout && l < st->end - st->first; l++) lend_out_free(st->lout[l]);
    free(st->lout);
    st->lout = NULL;
}

void exec_lend_free(run_exec *e) {
    if (!e->lend) return;
    for (int i = 0; i < e->lend->n_in; i++) {
        exec_lend_in *x = &e->lend->in[i];
        for (int k = 0; k < x->u->pool; k++) free(x->pool[k]);
        free(x->pool); free(x->req); free(x->state); free(x->win);
    }
    free(e->lend->in);
    free(e->lend->wv);
    free(e->lend->ws);
    sched_lend_plan_free(&e->lend->plan);
    free(e->lend);
    e->lend = NULL;
}

/* ---- the partner's side ------------------------------------------------------------------- */

/* Whether pool buffer k's request is done (a NULL request is: a wait completed it). -1 on failure. */
static int lend_in_done(run_exec *e, exec_lend_in *x, int k) {
    return exec_req_test(e->c.world, &x->req[k]);
}

/* Pool buffer k of x one state on when its request is done: an act that arrived goes straight
 * back (the lender receives it once it posts its fetch), one that went back frees the buffer.
 * 1 when it moved, 0 not, -1 on failure. */
static int lend_in_step(run_exec *e, exec_lend_in *x, int k) {
    const sched_lend_unit *u = x->u;
    int done = x->state[k] ? lend_in_done(e, x, k) : 0;
    if (done <= 0) return done;
    if (x->state[k] == 2) {
        x->state[k] = 0;
        x->returned++;
        return 1;
    }
    int mb = u->win[x->win[k]].mb;
    if (comm_isend(e->c.world, x->peer, lend_tag(e, u, mb, 1), x->pool[k], lend_floats(u) * sizeof(float), &x->req[k]) < 0)
        return pt_adderr("rank %d: sending back stage %d layer %d microbatch %d: ", e->c.world_rank, u->stage,
                         u->layer, mb);
    x->state[k] = 2;
    return 1;
}

/* Serves what is lent to this rank without blocking: every pool buffer a state on, then the
 * receives of the windows due in the buffers that are free. Returns how many things moved, or -1. */
static int lend_serve(run_exec *e) {
    int moved = 0;
    for (int i = 0; e->lend && i < e->lend->n_in; i++) {
        exec_lend_in *x = &e->lend->in[i];
        const sched_lend_unit *u = x->u;
        for (int k = 0; k < u->pool; k++) {
            int m = lend_in_step(e, x, k);
            if (m < 0) return -1;
            moved += m;
        }
        while (x->next < u->n_win && x->state[u->win[x->next].slot] == 0) {
            const sched_lend_window *w = &u->win[x->next];
            if (comm_irecv(e->c.world, x->peer, lend_tag(e, u, w->mb, 0), x->pool[w->slot], lend_floats(u) * sizeof(float),
                           &x->req[w->slot]) < 0)
                return pt_adderr("rank %d: receiving stage %d layer %d microbatch %d: ", e->c.world_rank, u->stage,
                                 u->layer, w->mb);
            x->state[w->slot] = 1;
            x->win[w->slot] = x->next++;
            moved++;
        }
    }
    return moved;
}

int exec_lend_poll(run_exec *e) { return lend_serve(e) < 0 ? -1 : 0; }

/* The requests a wait sleeps on: *req first, then every pool request of this rank in flight
 * (the partner side's: an act arriving, or going back). Returns their count. */
static int lend_wait_set(run_exec *e, comm_req **req) {
    struct exec_lend *l = e->lend;
    int n = 0;
    l->wv[n] = *req, l->ws[n++] = req;
    for (int i = 0; i < l->n_in; i++)
        for (int k = 0; k < l->in[i].u->pool; k++)
            if (l->in[i].state[k] && l->in[i].req[k] && &l->in[i].req[k] != req)
                l->wv[n] = l->in[i].req[k], l->ws[n++] = &l->in[i].req[k];
    return n;
}

/* Blocks until *req completes; asleep on it and on the partner side's requests together
 * (comm_waitany), serving the partner side whenever one of those completes; with `count` the
 * time counts as lending's wait. 0, or -1 (the transport failed, or e->c.timeout passed). */
int exec_lend_wait(run_exec *e, comm_req **req, const char *what, int count) {
    double t0 = pt_now(), limit = e->c.timeout > 0 ? e->c.timeout : 60;
    while (*req) {
        int n = lend_wait_set(e, req), which = -1;
        double left = limit - (pt_now() - t0);
        int rc = comm_waitany(e->c.world, e->lend->wv, n, left > 1e-6 ? left : 1e-6, &which);
        if (which >= 0) *e->lend->ws[which] = NULL;   /* done (or failed): its request is freed */
        if (rc < 0) return pt_adderr("rank %d: %s: ", e->c.world_rank, what);
        if (which < 0)
            return pt_seterr("rank %d: %s: nothing after %.0f s (a rank stopped serving lent activations)",
                             e->c.world_rank, what, limit);
        if (which > 0 && exec_lend_poll(e) < 0) return -1;
    }
    if (count) e->lend->wait_s += pt_now() - t0;
    return 0;
}

/* ---- the lender's side -------------------------------------------------------------------- */

/* A buffer with no microbatch for o: one with nothing in flight, else one whose lend is still
 * being sent (waited for). -1 when none (a bug: the plan never holds more than cap). */
static int lend_free_buf(run_exec *e, exec_lend_out *o) {
    for (int pass = 0; pass < 2; pass++)
        for (int k = 0; k < o->cap; k++) {
            if (o->buf_mb[k] >= 0 || (pass == 0 && o->req[k])) continue;
            if (o->req[k] && exec_lend_wait(e, &o->req[k], "a lent activation's send", 1) < 0) return -2;
            return k;
        }
    return -1;
}

int exec_lend_take(run_exec *e, run_stage *st, int mb) {
    for (int l = 0; st->lout && l < st->end - st->first; l++) {
        exec_lend_out *o = st->lout[l];
        if (!o) continue;
        int k = lend_free_buf(e, o);
        if (k == -2) return -1;
        if (k < 0) return pt_seterr("stage %d layer %d: no free activation buffer for F%d (lend plan and "
                                    "schedule disagree)", st->g, st->first + l, mb);
        o->buf_mb[k] = mb;
        o->of[mb] = k;
    }
    return 0;
}

int exec_lend_ready(run_exec *e, run_stage *st, int mb) {
    for (int l = 0; st->lout && l < st->end - st->first; l++) {
        exec_lend_out *o = st->lout[l];
        if (!o) continue;
        int k = o->of[mb];
        if (k < 0) return pt_seterr("stage %d layer %d: microbatch %d is away at its backward (lend plan and "
                                    "schedule disagree)", st->g, st->first + l, mb);
        if (o->fetching[k] && o->req[k] && exec_lend_wait(e, &o->req[k], "fetching a lent activation", 1) < 0) return -1;
        o->fetching[k] = 0;
    }
    return 0;
}

/* The window of o whose microbatch mb is, or NULL. */
static const sched_lend_window *lend_window_of(const exec_lend_out *o, int mb, int fetch_at) {
    for (int i = 0; i < o->u->n_win; i++)
        if (o->u->win[i].mb == mb && o->u->win[i].fetch_at == fetch_at) return &o->u->win[i];
    return NULL;
}

/* A lent part: the head of microbatch mb (in buffer b) into a free head buffer; where none is
 * free, it swaps with the head of a microbatch fetched after this same action k, which then
 * comes back into b (b is bound to it now). Returns that microbatch, -1 when none was swapped,
 * -2 when no head buffer fits (the plan and the run disagree). */
static int lend_keep_head(exec_lend_out *o, int b, int mb, int k) {
    int h = -1, back = -1;
    for (int i = 0; i < o->u->heads && h < 0; i++) if (o->head_mb[i] < 0) h = i;
    for (int i = 0; i < o->u->heads && h < 0; i++)
        if (lend_window_of(o, o->head_mb[i], k)) h = i, back = o->head_mb[i];
    if (h < 0) return -2;
    float *x = o->buf[b], *y = o->head[h];
    if (back < 0) memcpy(y, x, o->head_n * sizeof(float));
    for (size_t j = 0; back >= 0 && j < o->head_n; j++) { float t = x[j]; x[j] = y[j]; y[j] = t; }
    o->head_mb[h] = mb, o->head_of[mb] = h;
    if (back >= 0) o->head_of[back] = -1, o->buf_mb[b] = back, o->of[back] = b;
    return back;
}

/* Sends the act of w's microbatch (its tail part) to the partner: its buffer is free once sent,
 * unless a fetch took it over (lend_keep_head). */
static int lend_send(run_exec *e, run_stage *st, exec_lend_out *o, const sched_lend_window *w, int k) {
    const sched_lend_unit *u = o->u;
    int b = o->of[w->mb], back = -1;
    if (b >= 0 && o->head_n) back = lend_keep_head(o, b, w->mb, k);
    if (b < 0 || back == -2 ||
        comm_isend(e->c.world, o->peer, lend_tag(e, u, w->mb, 0), o->buf[b] + o->head_n, o->part_n * sizeof(float),
                   &o->req[b]) < 0)
        return pt_adderr("stage %d layer %d: lending microbatch %d%s: ", st->g, st->first + u->layer, w->mb,
                         back == -2 ? " (no head buffer free: lend plan and schedule disagree)" : "");
    if (o->of[w->mb] == b) o->of[w->mb] = -1;
    if (back < 0) o->buf_mb[b] = -1, o->fetching[b] = 0;
    return 0;
}

/* Fetches w's microbatch back: into the buffer its head already is in (after that buffer's send),
 * else into a free one, its head copied in from its head buffer; the tail comes from the partner. */
static int lend_fetch(run_exec *e, run_stage *st, exec_lend_out *o, const sched_lend_window *w) {
    const sched_lend_unit *u = o->u;
    int b = o->of[w->mb];
    if (b >= 0 && o->req[b] && exec_lend_wait(e, &o->req[b], "a lent activation's send", 1) < 0) return -1;
    if (b < 0) {
        b = lend_free_buf(e, o);
        int h = o->head_n ? o->head_of[w->mb] : -1;
        if (b >= 0 && h >= 0) {
            memcpy(o->buf[b], o->head[h], o->head_n * sizeof(float));
            o->head_mb[h] = -1, o->head_of[w->mb] = -1;
        }
    }
    if (b < 0 || comm_irecv(e->c.world, o->peer, lend_tag(e, u, w->mb, 1), o->buf[b] + o->head_n,
                            o->part_n * sizeof(float), &o->req[b]) < 0)
        return pt_adderr("stage %d layer %d: fetching microbatch %d: ", st->g, st->first + u->layer, w->mb);
    o->fetching[b] = 1;
    o->buf_mb[b] = w->mb;
    o->of[w->mb] = b;
    return 0;
}

/* The windows of o that the stage's compute action k ends: lends first (their buffers free up),
 * then fetches into free buffers. */
static int lend_after(run_exec *e, run_stage *st, exec_lend_out *o, int k) {
    const sched_lend_unit *u = o->u;
    for (int i = 0; i < u->n_win; i++)
        if (u->win[i].lend_at == k && lend_send(e, st, o, &u->win[i], k) < 0) return -1;
    for (int i = 0; i < u->n_win; i++)
        if (u->win[i].fetch_at == k && lend_fetch(e, st, o, &u->win[i]) < 0) return -1;
    return 0;
}

int exec_lend_after(run_exec *e, run_stage *st, sched_kind kind, int mb) {
    if (!e->lend) return 0;
    int k = st->lend_k++;
    for (int l = 0; st->lout && l < st->end - st->first; l++) {
        exec_lend_out *o = st->lout[l];
        if (!o) continue;
        if ((kind == ACT_W || kind == ACT_BW) && o->of[mb] >= 0) {
            o->buf_mb[o->of[mb]] = -1;
            o->of[mb] = -1;
        }
        if (lend_after(e, st, o, k) < 0) return -1;
    }
    return exec_lend_poll(e);
}

/* ---- the iteration's ends ------------------------------------------------------------------ */

void exec_lend_begin(run_exec *e) {
    if (!e->lend) return;
    for (int i = 0; i < e->n_stages; i++) e->st[i].lend_k = 0;
    for (int i = 0; i < e->lend->n_in; i++) e->lend->in[i].next = e->lend->in[i].returned = 0;
}

/* A pool request of this rank still in flight, or NULL. */
static comm_req **lend_pending(run_exec *e) {
    for (int i = 0; i < e->lend->n_in; i++)
        for (int k = 0; k < e->lend->in[i].u->pool; k++)
            if (e->lend->in[i].state[k] && e->lend->in[i].req[k]) return &e->lend->in[i].req[k];
    return NULL;
}

static int lend_all_back(const run_exec *e) {
    for (int i = 0; i < e->lend->n_in; i++)
        if (e->lend->in[i].returned < e->lend->in[i].u->n_win) return 0;
    return 1;
}

/* Every window lent to this rank has gone back, and every send of this rank's lends is done. */
int exec_lend_drain(run_exec *e) {
    if (!e->lend) return 0;
    while (!lend_all_back(e)) {
        int moved = lend_serve(e);
        if (moved < 0) return -1;
        comm_req **r = moved ? NULL : lend_pending(e);
        if (!moved && !r) return pt_seterr("rank %d: lent activations stuck (no request in flight)", e->c.world_rank);
        if (r && exec_lend_wait(e, r, "serving lent activations", 0) < 0) return -1;
    }
    for (int i = 0; i < e->n_stages; i++)
        for (int l = 0; e->st[i].lout && l < e->st[i].end - e->st[i].first; l++) {
            exec_lend_out *o = e->st[i].lout[l];
            for (int k = 0; o && k < o->cap; k++)
                if (o->req[k] && exec_lend_wait(e, &o->req[k], "finishing a lent activation's send", 1) < 0) return -1;
        }
    return 0;
}

void exec_lend_mem(const run_exec *e, double *lent, double *borrowed) {
    *lent = *borrowed = 0;
    if (!e->lend) return;
    const sched_lend_plan *p = &e->lend->plan;
    *lent = p->lent[e->p];
    *borrowed = p->borrowed[e->p];
}

int exec_lend_parts(const run_exec *e) {
    int least = 0;
    for (int i = 0; e->lend && i < e->lend->plan.n_units; i++) {
        const sched_lend_unit *u = &e->lend->plan.unit[i];
        int parts = (int)(u->part / u->bytes * LEND_PARTS + 0.5);
        if (u->stage == e->p && (!least || parts < least)) least = parts;
    }
    return least;
}

double exec_lend_wait_s(const run_exec *e) { return e->lend ? e->lend->wait_s : 0; }
