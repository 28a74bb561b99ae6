/* train --balance-memory in the executor: a stage's layer that lends (sched/sched_lend.h) keeps
 * `cap` activation buffers instead of its peak; after the compute action its plan names, a
 * microbatch's act of that layer is sent to the partner rank, which holds it in a buffer of its
 * pool and sends it back as soon as it has it; the lender posts the receive of the way back after
 * the action its plan names (ahead of the backward), and waits for it only at the backward. The
 * numbers do not change: the act comes back bit for bit. On threads the same messages run (a
 * real copy into the partner's pool), so the bytes a rank holds are what its buffers are; on MPI
 * they are its process's. A rank serves what it borrows between its actions and inside its
 * waits (exec_lend_wait), and before its reduction and step (exec_lend_drain), so no rank waits
 * on a partner that waits on it. Not here: when actions run (executor.c), the plan (sched/). */
#include "run/exec_int.h"
#include "sched/sched_lend.h"
#include "util/pt.h"
#include <stdlib.h>
#include <string.h>

#define LEND_SLICE 0.002   /* seconds a wait blocks before it serves the partner side again */

/* The lender's side of one layer: its buffers (st->act[layer], not owned) and what is on them. */
struct exec_lend_out {
    const sched_lend_unit *u;
    int cap, peer;
    float **buf;                /* [cap] */
    size_t n;                   /* floats of each (exec_lend_init checks them against the plan) */
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
};

static size_t lend_floats(const run_exec *e, const sched_lend_unit *u) { return (size_t)(u->bytes / sizeof(float)); }

static int lend_tag(const run_exec *e, const sched_lend_unit *u, int mb, int back) {
    return e->lend->tag_base + (((u->stage * e->lend->Lmax + u->layer) * e->M + mb) * 2 + back);
}

/* The plan from every stage's layer sizes (read from the model m of this rank's first stage:
 * sizes depend on the layer's kind and the config, not on which stage holds it). */
static int lend_plan(run_exec *e, const gpt_model *m) {
    const sched *s = e->c.s;
    int P = s->n_stages, *nl = pt_calloc((size_t)P, sizeof(int));
    double **bytes = pt_calloc((size_t)P, sizeof *bytes);
    e->lend = pt_calloc(1, sizeof *e->lend);
    for (int g = 0; g < P; g++) {
        int first, end;
        run_layout_stage_layers(e->c.lo, g, &first, &end);
        nl[g] = end - first;
        e->lend->Lmax = nl[g] > e->lend->Lmax ? nl[g] : e->lend->Lmax;
        bytes[g] = pt_calloc((size_t)nl[g] + 1, sizeof(double));
        for (int l = first; l < end; l++)
            bytes[g][l - first] = (double)gpt_layer_act_floats(m, l, e->c.mb_rows, e->c.T) * sizeof(float);
    }
    int rc = sched_lend_balance(s, nl, (const double *const *)bytes, &e->lend->plan);
    for (int g = 0; g < P; g++) free(bytes[g]);
    free(bytes);
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
        o->of = pt_malloc(sizeof(int) * (size_t)e->M);
        for (int k = 0; k < u->cap; k++) o->buf_mb[k] = -1;
        for (int j = 0; j < e->M; j++) o->of[j] = -1;
        st->lout[l] = o;
    }
    return 0;
}

int exec_lend_cap(const run_stage *st, int layer) {
    return st->lout && st->lout[layer - st->first] ? st->lout[layer - st->first]->cap : -1;
}

void exec_lend_bind(run_stage *st, int layer, float **bufs, size_t n) {
    exec_lend_out *o = st->lout ? st->lout[layer - st->first] : NULL;
    if (o) { o->buf = bufs; o->n = n; }
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
    e->lend->in = pt_calloc((size_t)p->n_units + 1, sizeof *e->lend->in);
    for (int i = 0; i < p->n_units; i++) {
        const sched_lend_unit *u = &p->unit[i];
        if (u->partner != e->p) continue;
        exec_lend_in *x = &e->lend->in[e->lend->n_in++];
        x->u = u;
        x->peer = run_layout_world_rank(e->c.lo, e->d, u->stage, e->t);
        x->pool = pt_calloc((size_t)u->pool, sizeof *x->pool);
        for (int k = 0; k < u->pool; k++) x->pool[k] = pt_falloc(lend_floats(e, u));
        x->req = pt_calloc((size_t)u->pool, sizeof *x->req);
        x->state = pt_calloc((size_t)u->pool, sizeof(int));
        x->win = pt_calloc((size_t)u->pool, sizeof(int));
    }
    return 0;
}

static void lend_out_free(exec_lend_out *o) {
    if (!o) return;
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
    sched_lend_plan_free(&e->lend->plan);
    free(e->lend);
    e->lend = NULL;
}

/* ---- the partner's side ------------------------------------------------------------------- */

/* Whether pool buffer k's request is done (a NULL request is: a wait completed it). -1 on failure. */
static int lend_in_done(run_exec *e, exec_lend_in *x, int k) {
    int done = 0;
    if (!x->req[k]) return 1;
    if (comm_test(e->c.world, x->req[k], &done) < 0) return -1;
    if (done) x->req[k] = NULL;
    return done;
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
    if (comm_isend(e->c.world, x->peer, lend_tag(e, u, mb, 1), x->pool[k], (size_t)u->bytes, &x->req[k]) < 0)
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
            if (comm_irecv(e->c.world, x->peer, lend_tag(e, u, w->mb, 0), x->pool[w->slot], (size_t)u->bytes,
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

/* Blocks until *req completes, serving the partner side every LEND_SLICE; with `count` the time
 * counts as lending's wait. 0, or -1 (the transport failed, or e->c.timeout passed). */
int exec_lend_wait(run_exec *e, comm_req **req, const char *what, int count) {
    double t0 = pt_now(), limit = e->c.timeout > 0 ? e->c.timeout : 60;
    while (*req) {
        int got = exec_req_block(e->c.world, req, pt_now() + LEND_SLICE);
        if (got < 0) return pt_adderr("rank %d: %s: ", e->c.world_rank, what);
        if (got == 0 && exec_lend_poll(e) < 0) return -1;
        if (got == 0 && pt_now() - t0 > limit)
            return pt_seterr("rank %d: %s: nothing after %.0f s (a rank stopped serving lent activations)",
                             e->c.world_rank, what, limit);
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

/* The windows of o that the stage's compute action k ends: lends first (their buffers free up),
 * then fetches into free buffers. */
static int lend_after(run_exec *e, run_stage *st, exec_lend_out *o, int k) {
    const sched_lend_unit *u = o->u;
    for (int i = 0; i < u->n_win; i++) {
        const sched_lend_window *w = &u->win[i];
        int b = o->of[w->mb];
        if (w->lend_at != k) continue;
        if (b < 0 || comm_isend(e->c.world, o->peer, lend_tag(e, u, w->mb, 0), o->buf[b], (size_t)u->bytes, &o->req[b]) < 0)
            return pt_adderr("stage %d layer %d: lending microbatch %d: ", st->g, st->first + u->layer, w->mb);
        o->fetching[b] = 0;
        o->buf_mb[b] = -1;
        o->of[w->mb] = -1;
    }
    for (int i = 0; i < u->n_win; i++) {
        const sched_lend_window *w = &u->win[i];
        if (w->fetch_at != k) continue;
        int b = lend_free_buf(e, o);
        if (b < 0 || comm_irecv(e->c.world, o->peer, lend_tag(e, u, w->mb, 1), o->buf[b], (size_t)u->bytes, &o->req[b]) < 0)
            return pt_adderr("stage %d layer %d: fetching microbatch %d: ", st->g, st->first + u->layer, w->mb);
        o->fetching[b] = 1;
        o->buf_mb[b] = w->mb;
        o->of[w->mb] = b;
    }
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

double exec_lend_wait_s(const run_exec *e) { return e->lend ? e->lend->wait_s : 0; }
