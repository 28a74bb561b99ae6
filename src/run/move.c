/* A job's state moved to a job of another layer split, rank to rank (run/move.h). Every rank
 * learns every rank's pieces and requests (two sums over the world), so every rank computes the
 * same plan of transfers without a root, then takes part in the ones it is at an end of: sends
 * are posted in that plan's order and receives in the same order, so one tag serves them all
 * (messages between two ranks with one tag arrive in the order sent). */
#include "run/move.h"
#include "util/pt.h"
#include <stdlib.h>
#include <string.h>

#define MOVE_FIELDS 4       /* an entry as doubles: moments, param, start, n */

/* A piece (have) or a request (want) of world rank `rank`: its idx-th in that rank's list. */
typedef struct { int rank, idx, moments, param; size_t start, n; } move_ent;

/* One transfer: n floats from src's piece at src_off to dst's request at dst_off. */
typedef struct { int src, src_idx, dst, dst_idx, moments; size_t src_off, dst_off, n; } move_xfer;

typedef struct {
    move_ent *have, *want;
    int n_have, n_want;
    int *key_at, *key_n;    /* [n_keys] haves sorted by (param, moments), each key's first, count */
    int n_keys;
} move_view;

static int move_key(const move_ent *x) { return x->param * 2 + x->moments; }

static int move_cmp(const void *a, const void *b) {
    const move_ent *x = a, *y = b;
    int kx = move_key(x), ky = move_key(y);
    if (kx != ky) return kx < ky ? -1 : 1;
    if (x->rank != y->rank) return x->rank < y->rank ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Every rank's counts, then every rank's entries (each rank fills its own slots, zeros elsewhere:
 * a sum over the world is an all-gather), into v (the whole view, rank order, haves first). */
static int move_share(const run_piece *pc, int n_pc, const run_source_reqs *want, comm *w, move_view *v) {
    int R = w->size;
    double *cnt = pt_calloc((size_t)R * 2, sizeof *cnt);
    cnt[2 * w->rank] = n_pc;
    cnt[2 * w->rank + 1] = want->n;
    int rc = comm_allreduce_f64(w, cnt, (size_t)R * 2);
    size_t total = 0, off = 0;
    for (int r = 0; r < 2 * R; r++) {
        if (r == 2 * w->rank) off = total;
        total += (size_t)cnt[r];
    }
    double *e = pt_calloc(total * MOVE_FIELDS + 1, sizeof *e), *at = e + off * MOVE_FIELDS;
    for (int i = 0; i < n_pc; i++, at += MOVE_FIELDS) {
        double x[MOVE_FIELDS] = { pc[i].moments, pc[i].param, (double)pc[i].start, (double)pc[i].n };
        memcpy(at, x, sizeof x);
    }
    for (int i = 0; i < want->n; i++, at += MOVE_FIELDS) {
        const run_source_req *q = &want->v[i];
        double x[MOVE_FIELDS] = { q->moments, q->param, (double)q->start, (double)q->n };
        memcpy(at, x, sizeof x);
    }
    if (rc == 0) rc = comm_allreduce_f64(w, e, total * MOVE_FIELDS);
    v->have = pt_malloc(sizeof *v->have * (total + 1));
    v->want = pt_malloc(sizeof *v->want * (total + 1));
    at = e;
    for (int r = 0; r < 2 * R && rc == 0; r++)
        for (int i = 0; i < (int)cnt[r]; i++, at += MOVE_FIELDS) {
            move_ent x = { r / 2, i, (int)at[0], (int)at[1], (size_t)at[2], (size_t)at[3] };
            if (r % 2) v->want[v->n_want++] = x;
            else v->have[v->n_have++] = x;
        }
    free(e);
    free(cnt);
    return rc;
}

/* The haves grouped by key (param, moments), each key's in rank order. */
static void move_index(move_view *v) {
    qsort(v->have, (size_t)v->n_have, sizeof *v->have, move_cmp);
    for (int i = 0; i < v->n_have; i++)
        if (move_key(&v->have[i]) + 1 > v->n_keys) v->n_keys = move_key(&v->have[i]) + 1;
    v->key_at = pt_calloc((size_t)v->n_keys + 1, sizeof *v->key_at);
    v->key_n = pt_calloc((size_t)v->n_keys + 1, sizeof *v->key_n);
    for (int i = v->n_have - 1; i >= 0; i--) {
        v->key_at[move_key(&v->have[i])] = i;
        v->key_n[move_key(&v->have[i])]++;
    }
}

/* The have that serves element x of request q: of q's TP rank, the requester's own, else its
 * replica's, else the lowest world rank's; NULL when no rank holds it. */
static const move_ent *move_source(const move_view *v, const run_layout *lo, const move_ent *q, size_t x) {
    int k = move_key(q), dq, pq, tq, best = 3;
    const move_ent *h = NULL;
    if (k >= v->n_keys) return NULL;
    run_layout_coords(lo, q->rank, &dq, &pq, &tq);
    for (int i = v->key_at[k]; i < v->key_at[k] + v->key_n[k] && best > 0; i++) {
        const move_ent *c = &v->have[i];
        int d, p, t;
        run_layout_coords(lo, c->rank, &d, &p, &t);
        if (t != tq || x < c->start || x >= c->start + c->n) continue;
        int score = c->rank == q->rank ? 0 : d == dq ? 1 : 2;
        if (score < best) { best = score; h = c; }
    }
    return h;
}

/* Every request of every rank cut into transfers, in request order. -1 naming an element no
 * rank holds (a bug: the two jobs hold the same model). */
static int move_plan(const move_view *v, const run_layout *lo, const gpt_model *m, move_xfer **out, int *n_out) {
    int cap = v->n_want + 16, n = 0;
    move_xfer *xs = pt_malloc(sizeof *xs * (size_t)cap);
    for (int i = 0; i < v->n_want; i++) {
        const move_ent *q = &v->want[i];
        for (size_t x = q->start; x < q->start + q->n;) {
            const move_ent *h = move_source(v, lo, q, x);
            if (!h) {
                free(xs);
                return pt_seterr("re-split: no rank holds element %zu of %s's %s for rank %d", x,
                                 gpt_param_info_at(m, q->param)->name, q->moments ? "moments" : "parameters", q->rank);
            }
            size_t z = h->start + h->n < q->start + q->n ? h->start + h->n : q->start + q->n;
            if (n == cap) {
                cap *= 2;
                move_xfer *t = pt_malloc(sizeof *t * (size_t)cap);
                memcpy(t, xs, sizeof *t * (size_t)n);
                free(xs);
                xs = t;
            }
            xs[n++] = (move_xfer){ h->rank, h->idx, q->rank, q->idx, q->moments, x - h->start, x - q->start, z - x };
            x = z;
        }
    }
    *out = xs;
    *n_out = n;
    return 0;
}

/* This rank's ends of the transfers: copies where it is both, sends and receives posted (in plan
 * order, one tag), then every request waited for. */
static int move_run(const move_xfer *xs, int n, const run_piece *pc, const run_source_reqs *want,
                    comm *w, double timeout) {
    comm_req **rq = pt_malloc(sizeof *rq * (size_t)(2 * n + 1));
    int n_rq = 0, rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        const move_xfer *x = &xs[i];
        if (x->src != w->rank && x->dst != w->rank) continue;
        const run_piece *h = x->src == w->rank ? &pc[x->src_idx] : NULL;
        const run_source_req *q = x->dst == w->rank ? &want->v[x->dst_idx] : NULL;
        const float *from[2] = { h ? (x->moments ? h->m : h->w) : NULL, h && x->moments ? h->v : NULL };
        float *to[2] = { q ? (x->moments ? q->m : q->w) : NULL, q && x->moments ? q->v : NULL };
        size_t bytes = x->n * sizeof(float);
        for (int k = 0; k < 1 + x->moments && rc == 0; k++) {
            if (h && q) memcpy(to[k] + x->dst_off, from[k] + x->src_off, bytes);
            else if (h) rc = comm_isend(w, x->dst, COMM_TAG_MOVE, from[k] + x->src_off, bytes, &rq[n_rq++]);
            else rc = comm_irecv(w, x->src, COMM_TAG_MOVE, to[k] + x->dst_off, bytes, &rq[n_rq++]);
        }
    }
    if (rc < 0) n_rq--;   /* the failed post set no request */
    for (int i = 0; i < n_rq; i++)
        if (comm_wait(w, rq[i], timeout) < 0 && rc == 0) rc = -1;
    free(rq);
    return rc;
}

int run_move(const run_exec *old, const run_source_reqs *want, comm *world, const run_layout *lo,
             double timeout) {
    run_piece *pc;
    move_view v;
    move_xfer *xs = NULL;
    int n_xs = 0, n_pc = run_exec_pieces(old, &pc);
    memset(&v, 0, sizeof v);
    int rc = move_share(pc, n_pc, want, world, &v);
    if (rc == 0) {
        move_index(&v);
        rc = move_plan(&v, lo, run_exec_first_model(old), &xs, &n_xs);
    }
    if (rc == 0) rc = move_run(xs, n_xs, pc, want, world, timeout);
    free(xs);
    free(v.have);
    free(v.want);
    free(v.key_at);
    free(v.key_n);
    free(pc);
    return rc < 0 ? pt_adderr("rank %d: ", world->rank) : 0;
}
