/* Threads transport: the ranks of a job are threads of one process sharing one "world" (a mutex,
 * a condition variable per rank, a mailbox per rank). A message is handed over with one memcpy,
 * done by whichever side arrives second; collectives meet at a generation-counting barrier; a
 * non-blocking reduction is a shared operation each member advances in its own test and wait.
 * Not a general message queue: no wildcards, no cancel, no progress thread (none is needed: a
 * message needs nobody's call once both sides posted).
 *
 * Locking: one mutex per world guards every queue, request state and collective state. Buffer
 * copies run outside the lock while the request is marked REQ_COPYING. So an endpoint may be
 * used by several threads at once (a rank and a fault injector's delivery thread), as long as
 * no two wait on or test the same request. */
#include "comm/comm.h"
#include "util/pt.h"
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { REQ_QUEUED, REQ_COPYING, REQ_DONE, REQ_FAILED };

struct tw_coll;

/* A send or receive request (or a non-blocking collective's, coll != NULL). While REQ_QUEUED a
 * message request sits in a mailbox queue of its world. */
typedef struct tw_req {
    struct tw_req *next;
    struct tw_req *live_prev, *live_next;   /* the owner endpoint's requests not yet reported */
    int is_send, state;
    int ctx;                    /* communicator id: messages of different communicators never match */
    int src, dst;               /* world ranks */
    int src_rank, dst_rank;     /* ranks in the communicator (for messages) */
    int tag;
    void *buf;                  /* receive: destination; send: source (never written) */
    size_t bytes;
    char err[256];              /* REQ_FAILED: why */
    struct tw_coll *coll;       /* a non-blocking collective: its shared state */
    int phase;                  /* collective: 0 posted, 1 own slice summed, 2 others' copied */
} tw_req;

/* One non-blocking collective of a group (ireduce), shared by its members' requests. Each member
 * sums its own slice of every member's buffer (rank order) into its own buffer once all have
 * posted, then (all = 1) copies the other members' summed slices; a member's request completes
 * when nobody reads its buffer any more (all summed, or all copied). */
typedef struct tw_coll {
    struct tw_coll *next;
    unsigned seq;               /* the group's k-th non-blocking collective */
    size_t n;
    int all;
    float **bufs;               /* [size] each member's buffer, as posted */
    int posted, summed, copied, refs;
    int failed;
    char err[256];
} tw_coll;

typedef struct { tw_req *head, *tail; } tw_queue;

typedef struct {
    pthread_mutex_t mu;
    int size;
    pthread_cond_t *wake;       /* [size] rank w's thread sleeps on wake[w] */
    tw_queue *recvs;            /* [size] receives posted by rank w, in posting order */
    tw_queue *sends;            /* [size] unmatched sends to rank w, in sending order */
    int aborted, abort_rank;
    char why[200];
    int next_ctx;
    int refs;                   /* live endpoints, all communicators */
} tw_world;

/* A communicator: shared by its member endpoints, with its own collective state. */
typedef struct tw_group {
    tw_world *w;
    int ctx, size, refs;
    int *members;               /* [size] world rank of each communicator rank */
    int arrived;                /* barrier: ranks arrived in this generation */
    unsigned gen;
    const void **bufs;          /* [size] allreduce inputs */
    size_t *counts;             /* [size] allreduce element counts */
    int *colors;                /* [size] split colors */
    struct tw_group **split_out;/* [size] split results */
    void *scratch;              /* allreduce result, scratch_cap bytes */
    size_t scratch_cap;
    int failed;                 /* the last arriver found an error (err) for this generation */
    char err[256];
    tw_coll *colls;             /* non-blocking collectives not yet completed by every member */
    unsigned *coll_seq;         /* [size] number of non-blocking collectives each rank posted */
} tw_group;

/* One rank's endpoint of a communicator, with its requests not yet reported done (freed by
 * tw_free when the caller abandoned them, e.g. after an abort). */
typedef struct { tw_group *g; tw_req *live; } tw_ep;

static tw_group *ep_group(comm *c) { return ((tw_ep *)c->impl)->g; }

static const comm_vtable tw_vtable;

/* ---- world and group lifetime ---------------------------------------------------------- */

static tw_world *world_new(int size) {
    tw_world *w = pt_calloc(1, sizeof *w);
    pthread_mutex_init(&w->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    w->size = size;
    w->wake = pt_calloc(size, sizeof *w->wake);
    for (int i = 0; i < size; i++) pthread_cond_init(&w->wake[i], &ca);
    pthread_condattr_destroy(&ca);
    w->recvs = pt_calloc(size, sizeof *w->recvs);
    w->sends = pt_calloc(size, sizeof *w->sends);
    return w;
}

static void world_free(tw_world *w) {
    for (int i = 0; i < w->size; i++) pthread_cond_destroy(&w->wake[i]);
    pthread_mutex_destroy(&w->mu);
    free(w->wake); free(w->recvs); free(w->sends); free(w);
}

/* A group of n members (world ranks copied from members). Caller holds w->mu or owns w alone. */
static tw_group *group_new(tw_world *w, int n, const int *members) {
    tw_group *g = pt_calloc(1, sizeof *g);
    g->w = w;
    g->ctx = w->next_ctx++;
    g->size = g->refs = n;
    g->members = pt_malloc(n * sizeof *g->members);
    memcpy(g->members, members, n * sizeof *members);
    g->bufs = pt_calloc(n, sizeof *g->bufs);
    g->counts = pt_calloc(n, sizeof *g->counts);
    g->colors = pt_calloc(n, sizeof *g->colors);
    g->split_out = pt_calloc(n, sizeof *g->split_out);
    g->coll_seq = pt_calloc(n, sizeof *g->coll_seq);
    return g;
}

static void coll_free(tw_coll *op) {
    free(op->bufs);
    free(op);
}

static void group_free(tw_group *g) {
    while (g->colls) {
        tw_coll *op = g->colls;
        g->colls = op->next;
        coll_free(op);
    }
    free(g->members); free(g->bufs); free(g->counts); free(g->colors);
    free(g->split_out); free(g->scratch); free(g->coll_seq); free(g);
}

static comm *endpoint_new(tw_group *g, int rank) {
    comm *c = pt_calloc(1, sizeof *c);
    c->vt = &tw_vtable;
    c->rank = rank;
    c->size = g->size;
    c->threaded = 1;   /* every piece of state is under the world's lock */
    c->one_clock = 1;  /* threads of one process */
    c->world_rank = g->members[rank];
    tw_ep *ep = pt_calloc(1, sizeof *ep);
    ep->g = g;
    c->impl = ep;
    return c;
}

/* ---- queues and requests --------------------------------------------------------------- */

static void queue_push(tw_queue *q, tw_req *r) {
    r->next = NULL;
    if (q->tail) q->tail->next = r; else q->head = r;
    q->tail = r;
}

/* Removes and returns the first request with (ctx, src, tag), or NULL. FIFO matching. */
static tw_req *queue_take(tw_queue *q, int ctx, int src, int tag) {
    tw_req *prev = NULL;
    for (tw_req *r = q->head; r; prev = r, r = r->next) {
        if (r->ctx != ctx || r->src != src || r->tag != tag) continue;
        if (prev) prev->next = r->next; else q->head = r->next;
        if (q->tail == r) q->tail = prev;
        r->next = NULL;
        return r;
    }
    return NULL;
}

/* Removes r from q (where it must be). */
static void queue_remove(tw_queue *q, tw_req *r) {
    tw_req *prev = NULL;
    for (tw_req *x = q->head; x != r; x = x->next) prev = x;
    if (prev) prev->next = r->next; else q->head = r->next;
    if (q->tail == r) q->tail = prev;
    r->next = NULL;
}

/* The endpoint's live list (caller holds the lock). */
static void live_link(comm *c, tw_req *r) {
    tw_ep *ep = c->impl;
    r->live_prev = NULL;
    r->live_next = ep->live;
    if (ep->live) ep->live->live_prev = r;
    ep->live = r;
}

static void live_unlink(comm *c, tw_req *r) {
    tw_ep *ep = c->impl;
    if (r->live_prev) r->live_prev->live_next = r->live_next; else ep->live = r->live_next;
    if (r->live_next) r->live_next->live_prev = r->live_prev;
}

static int abort_error(tw_world *w) {
    return pt_seterr("rank %d failed: %s", w->abort_rank, w->why);
}

static int size_error(char *out, size_t cap, const tw_req *s, const tw_req *r) {
    snprintf(out, cap, "threads: message of %zu bytes from rank %d to rank %d tag %d does not "
             "match the %zu-byte receive buffer (size mismatch)", s->bytes, s->src_rank,
             s->dst_rank, s->tag, r->bytes);
    return -1;
}

static tw_req *req_new(comm *c, int is_send, int peer, int tag, void *buf, size_t bytes) {
    tw_group *g = ep_group(c);
    tw_req *r = pt_calloc(1, sizeof *r);
    r->is_send = is_send;
    r->ctx = g->ctx;
    r->src_rank = is_send ? c->rank : peer;
    r->dst_rank = is_send ? peer : c->rank;
    r->src = g->members[r->src_rank];
    r->dst = g->members[r->dst_rank];
    r->tag = tag;
    r->buf = buf;
    r->bytes = bytes;
    return r;
}

static int check_peer(comm *c, const char *what, int peer, int tag) {
    if (peer < 0 || peer >= c->size)
        return pt_seterr("threads: %s: rank %d has no peer %d (communicator of %d ranks)", what,
                         c->rank, peer, c->size);
    if (tag < 0) return pt_seterr("threads: %s: rank %d: tag %d is negative", what, c->rank, tag);
    return 0;
}

/* Copies `bytes` from src to dst outside the lock while `mark` is REQ_COPYING, then completes
 * mark and wakes its owner. Caller holds w->mu; it is held again on return. */
static void copy_unlocked(tw_world *w, tw_req *mark, int owner, void *dst, const void *src,
                          size_t bytes) {
    mark->state = REQ_COPYING;
    pthread_mutex_unlock(&w->mu);
    if (bytes) memcpy(dst, src, bytes);
    pthread_mutex_lock(&w->mu);
    mark->state = REQ_DONE;
    pthread_cond_broadcast(&w->wake[owner]);
}

/* ---- point to point -------------------------------------------------------------------- */

/* The rank whose thread waits on q: the sender of a send, the receiver of a receive. */
static int req_owner(const tw_req *q) { return q->is_send ? q->src : q->dst; }

/* Posts a new request `mine` (owned by c) to its world: it takes the oldest matching queued
 * request of the other kind from the receiver's mailbox, copies the message (from the sender's
 * buffer, never an intermediate one) and completes both; with no match it is queued there for a
 * later request to take. A match of another size fails the queued one and refuses mine. Sends
 * therefore never block. 0 with *out = mine, or -1 with mine freed. */
static int tw_post(comm *c, tw_req *mine, comm_req **out) {
    tw_world *w = ep_group(c)->w;
    tw_queue *theirs = mine->is_send ? &w->recvs[mine->dst] : &w->sends[mine->dst];
    tw_queue *ours = mine->is_send ? &w->sends[mine->dst] : &w->recvs[mine->dst];
    pthread_mutex_lock(&w->mu);
    if (w->aborted) { pthread_mutex_unlock(&w->mu); free(mine); return abort_error(w); }
    tw_req *peer = queue_take(theirs, mine->ctx, mine->src, mine->tag);
    tw_req *s = mine->is_send ? mine : peer, *r = mine->is_send ? peer : mine;
    if (!peer) {
        queue_push(ours, mine);
    } else if (peer->bytes != mine->bytes) {
        size_error(peer->err, sizeof peer->err, s, r);
        peer->state = REQ_FAILED;
        pt_seterr("%s", peer->err);   /* before unlocking: then peer's owner may free it */
        pthread_cond_broadcast(&w->wake[req_owner(peer)]);
        pthread_mutex_unlock(&w->mu);
        free(mine);
        return -1;
    } else {
        copy_unlocked(w, peer, req_owner(peer), r->buf, s->buf, mine->bytes);
        mine->state = REQ_DONE;
    }
    live_link(c, mine);
    pthread_mutex_unlock(&w->mu);
    *out = (comm_req *)mine;
    return 0;
}

static int tw_isend(comm *c, int dst, int tag, const void *buf, size_t bytes, comm_req **out) {
    if (check_peer(c, "isend", dst, tag)) return -1;
    return tw_post(c, req_new(c, 1, dst, tag, (void *)buf, bytes), out);
}

static int tw_irecv(comm *c, int src, int tag, void *buf, size_t bytes, comm_req **out) {
    if (check_peer(c, "irecv", src, tag)) return -1;
    return tw_post(c, req_new(c, 0, src, tag, buf, bytes), out);
}

/* Reports a finished request (freeing it): 0 done, -1 failed. Caller holds the lock. */
static int req_finish_locked(comm *c, tw_req *r) {
    int rc = 0;
    if (r->state == REQ_FAILED) rc = pt_seterr("%s", r->err);
    live_unlink(c, r);
    free(r);
    return rc;
}

static int req_pending(const tw_req *r) {
    return r->state == REQ_QUEUED || r->state == REQ_COPYING;
}

static int coll_timeout_error(comm *c, const tw_req *r, double timeout);
static void coll_progress(comm *c, tw_req *r, int *done);
static int coll_finish(comm *c, tw_req *r);

static int tw_test(comm *c, comm_req *req, int *done) {
    tw_world *w = ep_group(c)->w;
    tw_req *r = (tw_req *)req;
    int rc = 0;
    *done = 0;
    pthread_mutex_lock(&w->mu);
    if (r->coll) {
        coll_progress(c, r, done);
        if (*done) rc = coll_finish(c, r);
        else if (w->aborted) rc = abort_error(w);
    } else if (!req_pending(r)) { *done = 1; rc = req_finish_locked(c, r); }
    else if (w->aborted) rc = abort_error(w);
    pthread_mutex_unlock(&w->mu);
    return rc;
}

/* "rank 1 timed out ... receive from rank 0 tag 7"; in a sub-communicator the world ranks too. */
static int timeout_error(comm *c, const tw_req *r, double timeout) {
    char world[64] = "";
    if (ep_group(c)->ctx != 0)
        snprintf(world, sizeof world, " (sub-communicator; world ranks %d and %d)", r->src, r->dst);
    return pt_seterr("threads: rank %d timed out after %.3g s waiting to %s rank %d tag %d "
                     "(%zu bytes)%s: the peer never %s", c->rank, timeout,
                     r->is_send ? "send to" : "receive from", r->is_send ? r->dst_rank : r->src_rank,
                     r->tag, r->bytes, world, r->is_send ? "posted the receive" : "sent");
}

/* wait for a collective request: progress, sleep, until done, the deadline or an abort. Caller
 * holds the lock. */
static int coll_wait_locked(comm *c, tw_req *r, double timeout, const struct timespec *dl) {
    tw_world *w = ep_group(c)->w;
    for (;;) {
        int done = 0;
        coll_progress(c, r, &done);
        if (done) return coll_finish(c, r);
        if (w->aborted) return abort_error(w);
        if (timeout <= 0) pthread_cond_wait(&w->wake[c->world_rank], &w->mu);
        else if (pthread_cond_timedwait(&w->wake[c->world_rank], &w->mu, dl) == ETIMEDOUT) {
            coll_progress(c, r, &done);
            return done ? coll_finish(c, r) : coll_timeout_error(c, r, timeout);
        }
    }
}

/* Sleeps on this rank's condition variable until r completes, the deadline, or an abort. On a
 * timeout or an abort the request stays pending (wait again, or comm_free drops it). */
static int tw_wait(comm *c, comm_req *req, double timeout) {
    tw_world *w = ep_group(c)->w;
    tw_req *r = (tw_req *)req;
    struct timespec dl = pt_deadline_after(timeout > 0 ? timeout : 0);
    int rc = 0, timed_out = 0;
    pthread_mutex_lock(&w->mu);
    if (r->coll) {
        rc = coll_wait_locked(c, r, timeout, &dl);
        pthread_mutex_unlock(&w->mu);
        return rc;
    }
    while (req_pending(r) && !w->aborted && !timed_out) {
        if (timeout > 0)
            timed_out = pthread_cond_timedwait(&w->wake[c->world_rank], &w->mu, &dl) == ETIMEDOUT;
        else
            pthread_cond_wait(&w->wake[c->world_rank], &w->mu);
    }
    if (!req_pending(r)) rc = req_finish_locked(c, r);
    else if (w->aborted) rc = abort_error(w);
    else rc = timeout_error(c, r, timeout);
    pthread_mutex_unlock(&w->mu);
    return rc;
}

/* ---- collectives ----------------------------------------------------------------------- */

/* Generation-counting barrier over g. The last rank to arrive runs last(g, arg) under the lock
 * before releasing the others. Caller holds w->mu. Returns -1 on an abort. */
static int group_sync_locked(tw_group *g, int my_world, void (*last)(tw_group *, void *), void *arg) {
    tw_world *w = g->w;
    unsigned gen = g->gen;
    if (w->aborted) return abort_error(w);
    if (++g->arrived == g->size) {
        g->arrived = 0;
        g->failed = 0;
        if (last) last(g, arg);
        g->gen++;
        for (int i = 0; i < g->size; i++) pthread_cond_broadcast(&w->wake[g->members[i]]);
        return 0;
    }
    while (g->gen == gen && !w->aborted) pthread_cond_wait(&w->wake[my_world], &w->mu);
    return g->gen == gen ? abort_error(w) : 0;
}

static int group_sync(comm *c, void (*last)(tw_group *, void *), void *arg) {
    tw_group *g = ep_group(c);
    pthread_mutex_lock(&g->w->mu);
    int rc = group_sync_locked(g, c->world_rank, last, arg);
    if (rc == 0 && g->failed) rc = pt_seterr("%s", g->err);
    pthread_mutex_unlock(&g->w->mu);
    return rc;
}

static int tw_barrier(comm *c) { return group_sync(c, NULL, NULL); }

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

static int tw_allreduce_f32(comm *c, float *buf, size_t n) {
    return tw_allreduce(c, buf, n, sizeof *buf, sum_f32);
}

static int tw_allreduce_f64(comm *c, double *buf, size_t n) {
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
static int tw_allgather_f32(comm *c, float *buf, size_t n) {
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
static void coll_unref(tw_group *g, tw_coll *op) {
    if (--op->refs) return;
    tw_coll **at = &g->colls;
    while (*at != op) at = &(*at)->next;
    *at = op->next;
    coll_free(op);
}

static int tw_ireduce_f32(comm *c, float *buf, size_t n, int all, comm_req **out) {
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
        return abort_error(w);
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
    live_link(c, r);
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
static void coll_progress(comm *c, tw_req *r, int *done) {
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
static int coll_finish(comm *c, tw_req *r) {
    int rc = r->coll->failed ? pt_seterr("%s", r->coll->err) : 0;
    coll_unref(ep_group(c), r->coll);
    live_unlink(c, r);
    free(r);
    return rc;
}

static int coll_timeout_error(comm *c, const tw_req *r, double timeout) {
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
        tw_group *sub = group_new(g->w, n, members);
        for (int j = i; j < g->size; j++)
            if (g->colors[j] == g->colors[i]) g->split_out[j] = sub;
    }
    free(members);
}

static int tw_split(comm *c, int color, comm **out) {
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
    *out = endpoint_new(sub, r);
    return 0;
}

/* ---- failure and teardown -------------------------------------------------------------- */

/* The first abort wins; every sleeping rank wakes and fails "rank R failed: why". */
static void tw_abort(comm *c, const char *why) {
    tw_world *w = ep_group(c)->w;
    pthread_mutex_lock(&w->mu);
    if (!w->aborted) {
        w->aborted = 1;
        w->abort_rank = c->world_rank;
        snprintf(w->why, sizeof w->why, "%s", why ? why : "aborted");
    }
    for (int i = 0; i < w->size; i++) pthread_cond_broadcast(&w->wake[i]);
    pthread_mutex_unlock(&w->mu);
}

/* Frees the requests the caller never saw complete (unmatched ones leave their queue; one being
 * copied by a peer is waited for), then the group and the world when their last endpoint goes. */
static void tw_free(comm *c) {
    tw_ep *ep = c->impl;
    tw_group *g = ep->g;
    tw_world *w = g->w;
    pthread_mutex_lock(&w->mu);
    while (ep->live) {
        tw_req *r = ep->live;
        if (r->coll) {
            coll_unref(g, r->coll);
            live_unlink(c, r);
            free(r);
            continue;
        }
        while (r->state == REQ_COPYING) pthread_cond_wait(&w->wake[c->world_rank], &w->mu);
        if (r->state == REQ_QUEUED) queue_remove(r->is_send ? &w->sends[r->dst] : &w->recvs[r->dst], r);
        live_unlink(c, r);
        free(r);
    }
    int last_group = --g->refs == 0, last_world = --w->refs == 0;
    pthread_mutex_unlock(&w->mu);
    if (last_group) group_free(g);
    if (last_world) world_free(w);
    free(ep);
    free(c);
}

static int tw_world_rank_of(comm *c, int r) { return ep_group(c)->members[r]; }

static const comm_vtable tw_vtable = {
    .name = "threads",
    .isend = tw_isend, .irecv = tw_irecv, .test = tw_test, .wait = tw_wait,
    .allreduce_f32 = tw_allreduce_f32, .allreduce_f64 = tw_allreduce_f64,
    .ireduce_f32 = tw_ireduce_f32, .allgather_f32 = tw_allgather_f32,
    .barrier = tw_barrier, .split = tw_split, .abort = tw_abort, .free = tw_free,
    .world_rank_of = tw_world_rank_of,
};

int comm_threads_create(int size, comm **out) {
    if (size < 1) return pt_seterr("threads: cannot create a world of %d ranks (need >= 1)", size);
    tw_world *w = world_new(size);
    int *members = pt_malloc(size * sizeof *members);
    for (int i = 0; i < size; i++) members[i] = i;
    tw_group *g = group_new(w, size, members);
    free(members);
    w->refs = size;
    for (int i = 0; i < size; i++) out[i] = endpoint_new(g, i);
    return 0;
}
