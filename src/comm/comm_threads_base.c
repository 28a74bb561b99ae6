/* The threads transport's lifetime and bookkeeping (comm_threads_int.h): worlds, groups and
 * endpoints, the mailbox queues, requests, and the errors they report. */
#include "comm/comm_threads_int.h"
#include "util/pt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- world and group lifetime ---------------------------------------------------------- */

tw_world *tw_world_new(int size) {
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

void tw_world_free(tw_world *w) {
    for (int i = 0; i < w->size; i++) pthread_cond_destroy(&w->wake[i]);
    pthread_mutex_destroy(&w->mu);
    free(w->wake); free(w->recvs); free(w->sends); free(w);
}

/* A group of n members (world ranks copied from members). Caller holds w->mu or owns w alone. */
tw_group *tw_group_new(tw_world *w, int n, const int *members) {
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

void tw_coll_free(tw_coll *op) {
    free(op->bufs);
    free(op);
}

void tw_group_free(tw_group *g) {
    while (g->colls) {
        tw_coll *op = g->colls;
        g->colls = op->next;
        tw_coll_free(op);
    }
    free(g->members); free(g->bufs); free(g->counts); free(g->colors);
    free(g->split_out); free(g->scratch); free(g->coll_seq); free(g);
}

comm *tw_endpoint_new(tw_group *g, int rank, const comm_vtable *vt) {
    comm *c = pt_calloc(1, sizeof *c);
    c->vt = vt;
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

void tw_queue_push(tw_queue *q, tw_req *r) {
    r->next = NULL;
    if (q->tail) q->tail->next = r; else q->head = r;
    q->tail = r;
}

/* Removes and returns the first request with (ctx, src, tag), or NULL. FIFO matching. */
tw_req *tw_queue_take(tw_queue *q, int ctx, int src, int tag) {
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
void tw_queue_remove(tw_queue *q, tw_req *r) {
    tw_req *prev = NULL;
    for (tw_req *x = q->head; x != r; x = x->next) prev = x;
    if (prev) prev->next = r->next; else q->head = r->next;
    if (q->tail == r) q->tail = prev;
    r->next = NULL;
}

/* The endpoint's live list (caller holds the lock). */
void tw_live_link(comm *c, tw_req *r) {
    tw_ep *ep = c->impl;
    r->live_prev = NULL;
    r->live_next = ep->live;
    if (ep->live) ep->live->live_prev = r;
    ep->live = r;
}

void tw_live_unlink(comm *c, tw_req *r) {
    tw_ep *ep = c->impl;
    if (r->live_prev) r->live_prev->live_next = r->live_next; else ep->live = r->live_next;
    if (r->live_next) r->live_next->live_prev = r->live_prev;
}

int tw_abort_error(tw_world *w) {
    return pt_seterr("rank %d failed: %s", w->abort_rank, w->why);
}

int tw_size_error(char *out, size_t cap, const tw_req *s, const tw_req *r) {
    snprintf(out, cap, "threads: message of %zu bytes from rank %d to rank %d tag %d does not "
             "match the %zu-byte receive buffer (size mismatch)", s->bytes, s->src_rank,
             s->dst_rank, s->tag, r->bytes);
    return -1;
}

tw_req *tw_req_new(comm *c, int is_send, int peer, int tag, void *buf, size_t bytes) {
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

int tw_check_peer(comm *c, const char *what, int peer, int tag) {
    if (peer < 0 || peer >= c->size)
        return pt_seterr("threads: %s: rank %d has no peer %d (communicator of %d ranks)", what,
                         c->rank, peer, c->size);
    if (tag < 0) return pt_seterr("threads: %s: rank %d: tag %d is negative", what, c->rank, tag);
    return 0;
}

/* Copies `bytes` from src to dst outside the lock while `mark` is REQ_COPYING, then completes
 * mark and wakes its owner. Caller holds w->mu; it is held again on return. */
void tw_copy_unlocked(tw_world *w, tw_req *mark, int owner, void *dst, const void *src,
                          size_t bytes) {
    mark->state = REQ_COPYING;
    pthread_mutex_unlock(&w->mu);
    if (bytes) memcpy(dst, src, bytes);
    pthread_mutex_lock(&w->mu);
    mark->state = REQ_DONE;
    pthread_cond_broadcast(&w->wake[owner]);
}

