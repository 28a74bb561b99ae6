/* Fault injection around any transport, for tests and slow-link experiments: messages to one
 * peer are held back `delay` seconds without blocking the sender (a deferred-send queue that this
 * rank's own later calls progress: no helper thread, so it works over MPI FUNNELED too), and a
 * rank can die after N sends (its calls fail and it aborts the job naming itself).
 * Not a network emulator: no bandwidth model, no reordering, no message loss. */
#include "comm/comm.h"
#include "util/pt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POLL_S 200e-6   /* sleep between polls while a delayed send is pending */

/* Death state, shared by a wrapped communicator and the ones split from it. */
typedef struct {
    int sends, die_after, dead, refs, world_rank;
} fa_fate;

typedef struct fa_req {
    struct fa_req *next;    /* in the deferred queue while not yet posted */
    struct fa_req *live_prev, *live_next;   /* every request not yet freed (for fa_free) */
    comm_req *inner;        /* NULL while deferred */
    int is_send, is_coll, deferred, failed;
    double due;             /* when a deferred send may be posted */
    int peer, tag;
    const void *buf;
    size_t bytes;
    char err[256];
} fa_req;

typedef struct {
    comm *inner;
    int slow_peer;
    double delay;
    fa_fate *fate;
    fa_req *head, *tail;    /* deferred sends, in sending order */
    fa_req *live;           /* requests not yet reported done (a timed-out or aborted wait) */
    comm_vtable vt;         /* per instance, for the name */
    char name[48];
} fa_impl;

static comm *faulty_new(comm *inner, int slow_peer, double delay, fa_fate *fate);

static fa_req *req_new(fa_impl *m, fa_req init) {
    fa_req *r = pt_malloc(sizeof *r);
    *r = init;
    r->live_prev = NULL;
    r->live_next = m->live;
    if (m->live) m->live->live_prev = r;
    m->live = r;
    return r;
}

static void req_free(fa_impl *m, fa_req *r) {
    if (r->live_prev) r->live_prev->live_next = r->live_next; else m->live = r->live_next;
    if (r->live_next) r->live_next->live_prev = r->live_prev;
    free(r);
}

static int dead_error(fa_fate *f) {
    return pt_seterr("faulty: rank %d died after %d sends (fault injection)", f->world_rank, f->die_after);
}

/* Posts one deferred send to the inner transport (its failure is kept for test/wait). */
static void post_deferred(fa_impl *m, fa_req *r) {
    r->deferred = 0;
    if (comm_isend(m->inner, r->peer, r->tag, r->buf, r->bytes, &r->inner)) {
        r->failed = 1;
        snprintf(r->err, sizeof r->err, "%s", pt_err());
    }
}

/* Posts every deferred send that is due (all of them when `all`, sleeping until each is due),
 * in order: messages to the slow peer keep their order. */
static void progress(fa_impl *m, int all) {
    while (m->head) {
        fa_req *r = m->head;
        double wait = r->due - pt_now();
        if (wait > 0 && !all) return;
        if (wait > 0) {
            struct timespec t = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
            nanosleep(&t, NULL);
        }
        m->head = r->next;
        if (!m->head) m->tail = NULL;
        r->next = NULL;
        post_deferred(m, r);
    }
}

static int fa_isend(comm *c, int dst, int tag, const void *buf, size_t bytes, comm_req **out) {
    fa_impl *m = c->impl;
    fa_fate *f = m->fate;
    if (f->dead) return dead_error(f);
    if (f->die_after >= 0 && f->sends >= f->die_after) {
        f->dead = 1;
        char why[128];
        snprintf(why, sizeof why, "died after %d sends (fault injection)", f->die_after);
        comm_abort(m->inner, why);
        return dead_error(f);
    }
    f->sends++;
    progress(m, 0);
    fa_req *r = req_new(m, (fa_req){.is_send = 1, .peer = dst, .tag = tag, .buf = buf, .bytes = bytes});
    if (dst == m->slow_peer && m->delay > 0) {
        r->deferred = 1;
        r->due = pt_now() + m->delay;
        if (m->tail) m->tail->next = r; else m->head = r;
        m->tail = r;
    } else if (comm_isend(m->inner, dst, tag, buf, bytes, &r->inner)) {
        req_free(m, r);
        return -1;
    }
    *out = (comm_req *)r;
    return 0;
}

static int fa_irecv(comm *c, int src, int tag, void *buf, size_t bytes, comm_req **out) {
    fa_impl *m = c->impl;
    if (m->fate->dead) return dead_error(m->fate);
    progress(m, 0);
    fa_req *r = req_new(m, (fa_req){.peer = src, .tag = tag, .bytes = bytes});
    if (comm_irecv(m->inner, src, tag, buf, bytes, &r->inner)) { req_free(m, r); return -1; }
    *out = (comm_req *)r;
    return 0;
}

/* A request that is not deferred: its inner request's test. Frees r when done or failed. */
static int req_test(fa_impl *m, fa_req *r, int *done) {
    *done = 0;
    if (r->deferred) return 0;
    int rc = r->failed ? pt_seterr("%s", r->err) : comm_test(m->inner, r->inner, done);
    if (r->failed || *done) { *done = 1; req_free(m, r); }
    return rc;
}

static int fa_test(comm *c, comm_req *req, int *done) {
    fa_impl *m = c->impl;
    *done = 0;
    if (m->fate->dead) return dead_error(m->fate);
    progress(m, 0);
    return req_test(m, (fa_req *)req, done);
}

/* With nothing deferred the inner wait does it all; else poll, posting sends as they fall due
 * (the awaited request may depend on a peer that first needs one of them). */
static int fa_wait(comm *c, comm_req *req, double timeout) {
    fa_impl *m = c->impl;
    fa_req *r = (fa_req *)req;
    double t0 = pt_now();
    for (;;) {
        if (m->fate->dead) return dead_error(m->fate);
        progress(m, 0);
        if (!m->head && !r->deferred && !r->failed) {
            double left = timeout > 0 ? timeout - (pt_now() - t0) : 0;
            if (timeout > 0 && left <= 0) left = 1e-9;
            int rc = comm_wait(m->inner, r->inner, left);
            if (rc == 0) req_free(m, r);
            return rc;
        }
        int done, rc = req_test(m, r, &done);
        if (rc || done) return rc;
        if (timeout > 0 && pt_now() - t0 > timeout && r->is_coll)
            return pt_seterr("faulty: rank %d timed out after %.3g s in a non-blocking reduction",
                             c->rank, timeout);
        if (timeout > 0 && pt_now() - t0 > timeout)
            return pt_seterr("faulty: rank %d timed out after %.3g s waiting to %s rank %d tag %d%s",
                             c->rank, timeout, r->is_send ? "send to" : "receive from", r->peer, r->tag,
                             r->deferred ? " (still held back by the injected delay)" : "");
        struct timespec t = {0, (long)(POLL_S * 1e9)};
        nanosleep(&t, NULL);
    }
}

/* Collectives block anyway: every deferred send is posted first (waiting out its delay), so a
 * peer that needs one before joining the collective cannot deadlock it. */
static int before_collective(comm *c) {
    fa_impl *m = c->impl;
    if (m->fate->dead) return dead_error(m->fate);
    progress(m, 1);
    return 0;
}

static int fa_allreduce_f32(comm *c, float *buf, size_t n) {
    if (before_collective(c)) return -1;
    return comm_allreduce_f32(((fa_impl *)c->impl)->inner, buf, n);
}

static int fa_allreduce_f64(comm *c, double *buf, size_t n) {
    if (before_collective(c)) return -1;
    return comm_allreduce_f64(((fa_impl *)c->impl)->inner, buf, n);
}

/* A non-blocking reduction: it must not sleep out the delays (the rank computes on), so only
 * the sends already due go out; waiting for it later polls, posting the others as they fall due,
 * so a peer that needs one of them before it posts cannot deadlock it. */
static int fa_ireduce_f32(comm *c, float *buf, size_t n, int all, comm_req **out) {
    fa_impl *m = c->impl;
    if (m->fate->dead) return dead_error(m->fate);
    progress(m, 0);
    fa_req *r = req_new(m, (fa_req){.is_coll = 1, .peer = -1, .tag = -1, .bytes = n * sizeof *buf});
    if (comm_ireduce_f32(m->inner, buf, n, all, &r->inner)) { req_free(m, r); return -1; }
    *out = (comm_req *)r;
    return 0;
}

static int fa_allgather_f32(comm *c, float *buf, size_t n) {
    if (before_collective(c)) return -1;
    return comm_allgather_f32(((fa_impl *)c->impl)->inner, buf, n);
}

static int fa_barrier(comm *c) {
    if (before_collective(c)) return -1;
    return comm_barrier(((fa_impl *)c->impl)->inner);
}

/* Sub-communicators share this rank's fate (sends count together, death kills all) but carry
 * no delay: slow_peer names a rank of the communicator it was given for. */
static int fa_split(comm *c, int color, comm **out) {
    fa_impl *m = c->impl;
    comm *sub = NULL;
    *out = NULL;
    if (before_collective(c) || comm_split(m->inner, color, &sub)) return -1;
    if (sub) {
        m->fate->refs++;
        *out = faulty_new(sub, -1, 0, m->fate);
    }
    return 0;
}

static void fa_abort(comm *c, const char *why) {
    comm_abort(((fa_impl *)c->impl)->inner, why);
}

/* Drops requests never reported done (sends never posted among them), then the inner endpoint
 * (which drops its own pending requests). */
static void fa_free(comm *c) {
    fa_impl *m = c->impl;
    while (m->live) req_free(m, m->live);
    comm_free(m->inner);
    if (--m->fate->refs == 0) free(m->fate);
    free(m);
    free(c);
}

static const comm_vtable fa_vtable = {
    .isend = fa_isend, .irecv = fa_irecv, .test = fa_test, .wait = fa_wait,
    .allreduce_f32 = fa_allreduce_f32, .allreduce_f64 = fa_allreduce_f64,
    .ireduce_f32 = fa_ireduce_f32, .allgather_f32 = fa_allgather_f32,
    .barrier = fa_barrier, .split = fa_split, .abort = fa_abort, .free = fa_free,
};

static comm *faulty_new(comm *inner, int slow_peer, double delay, fa_fate *fate) {
    fa_impl *m = pt_calloc(1, sizeof *m);
    m->inner = inner;
    m->slow_peer = slow_peer;
    m->delay = delay;
    m->fate = fate;
    m->vt = fa_vtable;
    snprintf(m->name, sizeof m->name, "faulty(%s)", inner->vt->name);
    m->vt.name = m->name;
    comm *c = pt_calloc(1, sizeof *c);
    c->vt = &m->vt;
    c->rank = inner->rank;
    c->size = inner->size;
    c->world_rank = inner->world_rank;
    c->impl = m;
    return c;
}

int comm_faulty_wrap(comm *inner, int slow_peer, double delay, int die_after, comm **out) {
    if (!inner) return pt_seterr("faulty: no communicator to wrap");
    if (slow_peer >= inner->size)
        return pt_seterr("faulty: slow peer %d is not a rank of the %d-rank communicator", slow_peer, inner->size);
    if (delay < 0) return pt_seterr("faulty: delay %g s is negative", delay);
    fa_fate *f = pt_calloc(1, sizeof *f);
    *f = (fa_fate){.die_after = die_after, .refs = 1, .world_rank = inner->world_rank};
    *out = faulty_new(inner, slow_peer, delay, f);
    return 0;
}
