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
#include "comm/comm_threads_int.h"
#include "util/pt.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

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
    if (w->aborted) { pthread_mutex_unlock(&w->mu); free(mine); return tw_abort_error(w); }
    tw_req *peer = tw_queue_take(theirs, mine->ctx, mine->src, mine->tag);
    tw_req *s = mine->is_send ? mine : peer, *r = mine->is_send ? peer : mine;
    if (!peer) {
        tw_queue_push(ours, mine);
    } else if (peer->bytes != mine->bytes) {
        tw_size_error(peer->err, sizeof peer->err, s, r);
        peer->state = REQ_FAILED;
        pt_seterr("%s", peer->err);   /* before unlocking: then peer's owner may free it */
        pthread_cond_broadcast(&w->wake[req_owner(peer)]);
        pthread_mutex_unlock(&w->mu);
        free(mine);
        return -1;
    } else {
        tw_copy_unlocked(w, peer, req_owner(peer), r->buf, s->buf, mine->bytes);
        mine->state = REQ_DONE;
    }
    tw_live_link(c, mine);
    pthread_mutex_unlock(&w->mu);
    *out = (comm_req *)mine;
    return 0;
}

static int tw_isend(comm *c, int dst, int tag, const void *buf, size_t bytes, comm_req **out) {
    if (tw_check_peer(c, "isend", dst, tag)) return -1;
    return tw_post(c, tw_req_new(c, 1, dst, tag, (void *)buf, bytes), out);
}

static int tw_irecv(comm *c, int src, int tag, void *buf, size_t bytes, comm_req **out) {
    if (tw_check_peer(c, "irecv", src, tag)) return -1;
    return tw_post(c, tw_req_new(c, 0, src, tag, buf, bytes), out);
}

/* Reports a finished request (freeing it): 0 done, -1 failed. Caller holds the lock. */
static int req_finish_locked(comm *c, tw_req *r) {
    int rc = 0;
    if (r->state == REQ_FAILED) rc = pt_seterr("%s", r->err);
    tw_live_unlink(c, r);
    free(r);
    return rc;
}

static int req_pending(const tw_req *r) {
    return r->state == REQ_QUEUED || r->state == REQ_COPYING;
}


static int tw_test(comm *c, comm_req *req, int *done) {
    tw_world *w = ep_group(c)->w;
    tw_req *r = (tw_req *)req;
    int rc = 0;
    *done = 0;
    pthread_mutex_lock(&w->mu);
    if (r->coll) {
        tw_coll_progress(c, r, done);
        if (*done) rc = tw_coll_finish(c, r);
        else if (w->aborted) rc = tw_abort_error(w);
    } else if (!req_pending(r)) { *done = 1; rc = req_finish_locked(c, r); }
    else if (w->aborted) rc = tw_abort_error(w);
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
        tw_coll_progress(c, r, &done);
        if (done && r->coll->failed) return pt_seterr("%s", r->coll->err);   /* still the caller's */
        if (done) return tw_coll_finish(c, r);
        if (w->aborted) return tw_abort_error(w);
        if (timeout <= 0) pthread_cond_wait(&w->wake[c->world_rank], &w->mu);
        else if (pthread_cond_timedwait(&w->wake[c->world_rank], &w->mu, dl) == ETIMEDOUT) {
            tw_coll_progress(c, r, &done);
            if (done && r->coll->failed) return pt_seterr("%s", r->coll->err);
            return done ? tw_coll_finish(c, r) : tw_coll_timeout_error(c, r, timeout);
        }
    }
}

/* Sleeps on this rank's condition variable until r completes, the deadline, or an abort. Frees
 * r only when it completed without error: on a timeout or an abort it stays pending, and a
 * failed one stays for the test that reports it (comm.h: who owns a request). */
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
    if (r->state == REQ_FAILED) rc = pt_seterr("%s", r->err);
    else if (!req_pending(r)) rc = req_finish_locked(c, r);
    else if (w->aborted) rc = tw_abort_error(w);
    else rc = timeout_error(c, r, timeout);
    pthread_mutex_unlock(&w->mu);
    return rc;
}

/* The first of reqs[0..n) (point-to-point) done, without sleeping: -1 when none is. Caller holds
 * the lock. */
static int tw_first_done(comm_req **reqs, int n) {
    for (int i = 0; i < n; i++)
        if (reqs[i] && !((tw_req *)reqs[i])->coll && !req_pending((tw_req *)reqs[i])) return i;
    return -1;
}

/* Sleeps on this rank's condition variable (woken by every completion of its requests) until one
 * of reqs completes, the deadline, or an abort (comm.h's waitany). */
static int tw_waitany(comm *c, comm_req **reqs, int n, double timeout, int *which) {
    tw_world *w = ep_group(c)->w;
    struct timespec dl = pt_deadline_after(timeout > 0 ? timeout : 0);
    int rc = 0, timed_out = 0;
    pthread_mutex_lock(&w->mu);
    while ((*which = tw_first_done(reqs, n)) < 0 && !w->aborted && !timed_out) {
        if (timeout > 0)
            timed_out = pthread_cond_timedwait(&w->wake[c->world_rank], &w->mu, &dl) == ETIMEDOUT;
        else
            pthread_cond_wait(&w->wake[c->world_rank], &w->mu);
    }
    if (*which >= 0) {
        rc = req_finish_locked(c, (tw_req *)reqs[*which]);
        reqs[*which] = NULL;
    } else if (w->aborted) rc = tw_abort_error(w);
    pthread_mutex_unlock(&w->mu);
    return rc;
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
            tw_coll_unref(g, r->coll);
            tw_live_unlink(c, r);
            free(r);
            continue;
        }
        while (r->state == REQ_COPYING) pthread_cond_wait(&w->wake[c->world_rank], &w->mu);
        if (r->state == REQ_QUEUED) tw_queue_remove(r->is_send ? &w->sends[r->dst] : &w->recvs[r->dst], r);
        tw_live_unlink(c, r);
        free(r);
    }
    int last_group = --g->refs == 0, last_world = --w->refs == 0;
    pthread_mutex_unlock(&w->mu);
    if (last_group) tw_group_free(g);
    if (last_world) tw_world_free(w);
    free(ep);
    free(c);
}

static int tw_world_rank_of(comm *c, int r) { return ep_group(c)->members[r]; }

static const comm_vtable tw_vtable = {
    .name = "threads",
    .isend = tw_isend, .irecv = tw_irecv, .test = tw_test, .wait = tw_wait, .waitany = tw_waitany,
    .allreduce_f32 = tw_allreduce_f32, .allreduce_f64 = tw_allreduce_f64,
    .ireduce_f32 = tw_ireduce_f32, .allgather_f32 = tw_allgather_f32,
    .barrier = tw_barrier, .split = tw_split, .abort = tw_abort, .free = tw_free,
    .world_rank_of = tw_world_rank_of,
};

int comm_threads_create(int size, comm **out) {
    if (size < 1) return pt_seterr("threads: cannot create a world of %d ranks (need >= 1)", size);
    tw_world *w = tw_world_new(size);
    int *members = pt_malloc(size * sizeof *members);
    for (int i = 0; i < size; i++) members[i] = i;
    tw_group *g = tw_group_new(w, size, members);
    free(members);
    w->refs = size;
    for (int i = 0; i < size; i++) out[i] = tw_endpoint_new(g, i, &tw_vtable);
    return 0;
}

