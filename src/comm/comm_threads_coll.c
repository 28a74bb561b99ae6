/* The threads transport's collectives (comm_threads_int.h): barrier, allreduce, allgather, the
 * non-blocking reduction each member advances in its own test and wait, and split. */
#include "comm/comm_threads_int.h"
#include "util/pt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- collectives ----------------------------------------------------------------------- */

/* Generation-counting barrier over g. The last rank to arrive runs last(g, arg) under the lock
 * before releasing the others. Caller holds w->mu. Returns -1 on an abort. */
static int group_sync_locked(tw_group *g, int my_world, void (*last)(tw_group *, void *), void *arg) {
    tw_world *w = g->w;
    unsigned gen = g->gen;
    if (w->aborted) return tw_abort_error(w);
    if (++g->arrived == g->size) {
        g->arrived = 0;
        g->failed = 0;
        if (last) last(g, arg);
        g->gen++;
        for (int i = 0; i < g->size; i++) pthread_cond_broadcast(&w->wake[g->members[i]]);
        return 0;
    }
    while (g->gen == gen && !w->aborted) pthread_cond_wait(&w->wake[my_world], &w->mu);
    return g->gen == gen ? tw_abort_error(w) : 0;
}

static int group_sync(comm *c, void (*last)(tw_group *, void *), void *arg) {
    tw_group *g = ep_group(c);
    pthread_mutex_lock(&g->w->mu);
    int rc = group_sync_locked(g, c->world_rank, last, arg);
    if (rc == 0 && g->failed) rc = pt_seterr("%s", g->err);
    pthread_mutex_unlock(&g->w->mu);
    return rc;
}

int tw_barrier(comm *c) { return group_sync(c, NULL, NULL); }

/* Last arriver of an allreduce: all counts must agree; the scratch buffer gets room. */
static void allreduce_prepare(tw_group *g, void *arg) {
    size_t esz = *(size_t *)arg;
    for (int i = 1; i < g->size; i++) {
        if (g->counts[i] == g->counts[0]) continue;
        snprintf(g->err, sizeof g->err, "threads: allreduce: rank 0 passed %zu elements, rank %d "
                 "passed %zu", g->counts[0], i, g->counts[i]);
        g->failed = 1;
        return;
    }
    if (g->counts[0] * esz > g->scratch_cap) {
        free(g->scratch);
        g->scratch_cap = g->counts[0] * esz;
        g->scratch = pt_malloc(g->scratch_cap);
    }
}

typedef void (*sum_fn)(void *out, const void **in, int k, size_t lo, size_t hi);

/* out[i] = ((in[0][i] + in[1][i]) + in[2][i]) + ...: rank order, the same on every rank. */
static void sum_f32(void *out, const void **in, int k, size_t lo, size_t hi) {
    float *o = out;
    for (size_t i = lo; i < hi; i++) o[i] = ((const float *)in[0])[i];
    for (int j = 1; j < k; j++) {
        const float *x = in[j];
        for (size_t i = lo; i < hi; i++) o[i] += x[i];
    }
}

static void sum_f64(void *out, const void **in, int k, size_t lo, size_t hi) {
    double *o = out;
    for (size_t i = lo; i < hi; i++) o[i] = ((const double *)in[0])[i];
    for (int j = 1; j < k; j++) {
        const double *x = in[j];
        for (size_t i = lo; i < hi; i++) o[i] += x[i];
    }
}

/* Every rank publishes its buffer; after a barrier each rank sums its own slice of the element
 * range (in rank order) into the shared scratch; after a second barrier all copy the result out.
 * The next collective cannot resize scratch or reuse bufs[] before every rank has arrived at
 * it, i.e. finished copying, so two barriers suffice. */
static int tw_allreduce(comm *c, void *buf, size_t n, size_t esz, sum_fn sum) {
    tw_group *g = ep_group(c);
    pthread_mutex_lock(&g->w->mu);
    g->bufs[c->rank] = buf;
    g->counts[c->rank] = n;
    pthread_mutex_unlock(&g->w->mu);
    if (group_sync(c, allreduce_prepare, &esz)) return -1;
    size_t lo = n * c->rank / c->size, hi = n * (c->rank + 1) / c->size;
    sum(g->scratch, g->bufs, c->size, lo, hi);
    if (group_sync(c, NULL, NULL)) return -1;
    if (n) memcpy(buf, g->scratch, n * esz);
    return 0;
}

int tw_allreduce_f32(comm *c, float *buf, size_t n) {
    return tw_allreduce(c, buf, n, sizeof *buf, sum_f32);
}

int tw_allreduce_f64(comm *c, double *buf, size_t n) {
    return tw_allreduce(c, buf, n, sizeof *buf, sum_f64);
}

/* Last arriver of an allgather: all counts must agree. */
static void allgather_check(tw_group *g, void *arg) {
    for (int i = 1; i < g->size; i++) {
        if (g->counts[i] == g->counts[0]) continue;
        snprintf(g->err, sizeof g->err, "threads: allgather: rank 0 passed %zu elements, rank %d "
                 "passed %zu", g->counts[0], i, g->counts[i]);
        g->failed = 1;
        return;
    }
}

/* Every rank publishes its buffer; after a barrier each copies the others' slices; a second
 * barrier keeps every buffer unchanged until all have copied. */
int tw_allgather_f32(comm *c, float *buf, size_t n) {
    tw_group *g = ep_group(c);
    pthread_mutex_lock(&g->w->mu);
    g->bufs[c->rank] = buf;
    g->counts[c->rank] = n;
    pthread_mutex_unlock(&g->w->mu);
    if (group_sync(c, allgather_check, NULL)) return -1;
    for (int j = 0; j < c->size; j++) {
        size_t lo, hi;
        comm_slice(n, j, c->size, &lo, &hi);
        if (j != c->rank && hi > lo) memcpy(buf + lo, (const float *)g->bufs[j] + lo, (hi - lo) * sizeof *buf);
    }
    return group_sync(c, NULL, NULL);
}

/* ---- non-blocking collectives ---------------------------------------------------------- */

static void group_wake(tw_group *g) {
    for (int i = 0; i < g->size; i++) pthread_cond_broadcast(&g->w->wake[g->members[i]]);
}

/* The group's non-blocking collective number seq, made by the first member to post it. Caller
 * holds the lock. */
static tw_coll *coll_get(tw_group *g, unsigned seq, size_t n, int all) {
    tw_coll **at = &g->colls;
    for (; *at; at = &(*at)->next)
        if ((*at)->seq == seq) return *at;
    tw_coll *op = pt_calloc(1, sizeof *op);
    op->seq = seq;
    op->n = n;
    op->all = all;
    op->refs = g->size;
    op->bufs = pt_calloc((size_t)g->size, sizeof *op->bufs);
    *at = op;
    return op;
}

/* A member is done with op (completed or dropped); the last one frees it. Caller holds the lock. */
void tw_coll_unref(tw_group *g, tw_coll *op) {
    if (--op->refs) return;
    tw_coll **at = &g->colls;
    while (*at != op) at = &(*at)->next;
    *at = op->next;
    tw_coll_free(op);
}

int tw_ireduce_f32(comm *c, float *buf, size_t n, int all, comm_req **out) {
    tw_group *g = ep_group(c);
    tw_world *w = g->w;
    tw_req *r = pt_calloc(1, sizeof *r);
    r->ctx = g->ctx;
    r->src = r->dst = c->world_rank;
    r->src_rank = r->dst_rank = c->rank;
    r->buf = buf;
    r->bytes = n * sizeof *buf;
    pthread_mutex_lock(&w->mu);
    if (w->aborted) {
        pthread_mutex_unlock(&w->mu);
        free(r);
        return tw_abort_error(w);
    }
    tw_coll *op = coll_get(g, g->coll_seq[c->rank]++, n, all != 0);
    if ((op->n != n || op->all != (all != 0)) && !op->failed) {
        op->failed = 1;
        snprintf(op->err, sizeof op->err, "threads: ireduce: rank %d passed %zu elements (all %d), "
                 "another rank %zu (all %d)", c->rank, n, all != 0, op->n, op->all);
    }
    op->bufs[c->rank] = buf;
    if (++op->posted == g->size || op->failed) group_wake(g);
    r->coll = op;
    tw_live_link(c, r);
    pthread_mutex_unlock(&w->mu);
    *out = (comm_req *)r;
    return 0;
}

/* out[lo, hi) = ((in[0] + in[1]) + in[2]) + ... element by element (rank order, as sum_f32);
 * out may be one of the inputs. */
static void sum_slice_inplace(float *out, float *const *in, int k, size_t lo, size_t hi) {
    enum { BLK = 2048 };
    float acc[BLK];
    for (size_t b = lo; b < hi; b += BLK) {
        size_t m = hi - b < BLK ? hi - b : BLK;
        memcpy(acc, in[0] + b, m * sizeof *acc);
        for (int j = 1; j < k; j++)
            for (size_t i = 0; i < m; i++) acc[i] += in[j][b + i];
        memcpy(out + b, acc, m * sizeof *acc);
    }
}

/* Takes r as far as it can go without waiting (the lock is released around the arithmetic):
 * its own slice summed once all posted, the others' slices copied once all summed (all = 1).
 * *done when it completed (or the collective failed). Caller holds the lock. */
void tw_coll_progress(comm *c, tw_req *r, int *done) {
    tw_coll *op = r->coll;
    tw_group *g = ep_group(c);
    int me = c->rank, P = g->size;
    size_t lo, hi;
    *done = op->failed;
    if (op->failed) return;
    if (r->phase == 0) {
        if (op->posted < P) return;
        comm_slice(op->n, me, P, &lo, &hi);
        pthread_mutex_unlock(&g->w->mu);
        sum_slice_inplace(op->bufs[me], op->bufs, P, lo, hi);
        pthread_mutex_lock(&g->w->mu);
        r->phase = 1;
        if (++op->summed == P) group_wake(g);
    }
    if (op->summed < P) return;
    if (!op->all) { *done = 1; return; }
    if (r->phase == 1) {
        pthread_mutex_unlock(&g->w->mu);
        for (int j = 0; j < P; j++) {
            comm_slice(op->n, j, P, &lo, &hi);
            if (j != me && hi > lo) memcpy(op->bufs[me] + lo, op->bufs[j] + lo, (hi - lo) * sizeof(float));
        }
        pthread_mutex_lock(&g->w->mu);
        r->phase = 2;
        if (++op->copied == P) group_wake(g);
    }
    *done = op->copied == P;
}

/* Reports a finished collective request (freeing it). Caller holds the lock. */
int tw_coll_finish(comm *c, tw_req *r) {
    int rc = r->coll->failed ? pt_seterr("%s", r->coll->err) : 0;
    tw_coll_unref(ep_group(c), r->coll);
    tw_live_unlink(c, r);
    free(r);
    return rc;
}

int tw_coll_timeout_error(comm *c, const tw_req *r, double timeout) {
    return pt_seterr("threads: rank %d timed out after %.3g s in a non-blocking reduction of %zu "
                     "floats over %d ranks (world rank %d): %d of them posted it, %d summed",
                     c->rank, timeout, r->coll->n, c->size, c->world_rank, r->coll->posted,
                     r->coll->summed);
}

/* Last arriver of a split: one new group per colour >= 0, members in parent rank order. */
static void split_build(tw_group *g, void *arg) {
    int *members = pt_malloc(g->size * sizeof *members);
    for (int i = 0; i < g->size; i++) g->split_out[i] = NULL;
    for (int i = 0; i < g->size; i++) {
        if (g->colors[i] < 0 || g->split_out[i]) continue;
        int n = 0;
        for (int j = i; j < g->size; j++)
            if (g->colors[j] == g->colors[i]) members[n++] = g->members[j];
        tw_group *sub = tw_group_new(g->w, n, members);
        for (int j = i; j < g->size; j++)
            if (g->colors[j] == g->colors[i]) g->split_out[j] = sub;
    }
    free(members);
}

int tw_split(comm *c, int color, comm **out) {
    tw_group *g = ep_group(c);
    *out = NULL;
    pthread_mutex_lock(&g->w->mu);
    g->colors[c->rank] = color;
    pthread_mutex_unlock(&g->w->mu);
    if (group_sync(c, split_build, NULL)) return -1;
    pthread_mutex_lock(&g->w->mu);
    tw_group *sub = g->split_out[c->rank];
    if (sub) g->w->refs++;
    pthread_mutex_unlock(&g->w->mu);
    if (!sub) return 0;
    int r = 0;
    while (sub->members[r] != c->world_rank) r++;
    *out = tw_endpoint_new(sub, r, c->vt);
    return 0;
}

