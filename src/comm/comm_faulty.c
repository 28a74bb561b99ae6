/* Fault injection around any transport, for tests and slow-link experiments: messages to chosen
 * peers are held back a number of seconds without blocking the sender (they are in flight:
 * a delivery thread posts each one to the inner transport when it falls due, so neither the
 * sender nor the receiver has to call anything for it to arrive), a non-blocking reduction can
 * be held back the same way (a slow link between replicas), and a rank can die after N sends
 * (its calls fail and it aborts the job naming itself). Over a transport that takes calls from
 * one thread only (MPI without MPI_THREAD_MULTIPLE) the held-back messages are posted by this
 * rank's own later calls instead (the old way: late by up to one action).
 * A link can also be slow in bandwidth (comm_faulty_set_rate): each direction is a FIFO queue, a
 * message to that peer holds it bytes / rate seconds after the ones before it, then takes the
 * delay on top: due = max(now, link_free) + bytes / rate + delay, link_free moved to
 * max(now, link_free) + bytes / rate. Still not a network emulator: no reordering, no message
 * loss, no latency or bandwidth of the inner transport modelled (it adds its own).
 *
 * Locking: one mutex per rank's family (the wrapped communicator and every one split from it)
 * guards the queue, the delays, the fate and every request's deferred state. Inner calls are
 * made outside it. */
#include "comm/comm.h"
#include "util/pt.h"
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POLL_S 200e-6   /* one-thread mode: sleep between polls while a delayed item is pending */

typedef struct fa_impl fa_impl;

/* A request. A deferred one (a send or a reduction held back) sits in its family's queue until
 * due; then it is posted to the inner transport and behaves like any other. */
typedef struct fa_req {
    struct fa_req *next;            /* in the family's queue while deferred */
    struct fa_req *live_prev, *live_next;   /* its communicator's requests not yet freed */
    fa_impl *m;                     /* the communicator it belongs to */
    comm_req *inner;                /* NULL while deferred */
    int is_send, is_coll, deferred, failed;
    double due;                     /* when a deferred item may be posted */
    int peer, tag, wpeer;           /* wpeer: the peer's world rank */
    const void *buf;
    float *fbuf;                    /* a deferred reduction's buffer, count, form */
    size_t bytes, n;
    int all;
    char err[256];
} fa_req;

/* One rank's shared state: what happens to it (sends counted, death), the delays it suffers,
 * the queue of held-back items of all its communicators, and the thread that posts them. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;              /* an item was posted, the queue changed, or stop */
    int sends, die_after, dead, refs, world_rank;
    int n_world;                    /* 1 + the largest world rank of the wrapped communicator */
    double *delay;                  /* [n_world] seconds added to each message to that rank */
    double *red_delay;              /* [n_world] a reduction whose ranks include it starts so late */
    double *rate;                   /* [n_world] bytes per second of the link to it (0: unlimited) */
    double *red_rate;               /* [n_world] the same for a reduction whose ranks include it */
    double *link_free;              /* [n_world] when this rank's direction of that link is free */
    double *last_due;               /* [n_world] due time of the last held-back send to it */
    int *pending;                   /* [n_world] held-back sends to it not yet posted */
    fa_req *head;                   /* held-back items, by due time (FIFO among equal ones) */
    int threaded;                   /* the delivery thread posts them (inner takes any thread) */
    int thread_on, stop;
    pthread_t th;
} fa_fam;

struct fa_impl {
    comm *inner;
    int own_inner;                  /* inner is freed with this communicator */
    fa_fam *fam;
    int *wr;                        /* [size] world rank of each rank here */
    int top;                        /* the communicator wrapped (not one split from it) */
    int coll_pending, posting;      /* held-back reductions of this communicator; items of it
                                     * being posted right now (outside the lock) */
    double coll_last_due;
    double coll_link_free;          /* when a held-back reduction of this communicator no longer
                                     * holds its (slowest) link */
    fa_req *live;
    comm_vtable vt;                 /* per instance, for the name */
    char name[48];
};

static const comm_vtable fa_vtable;
static comm *faulty_new(comm *inner, int own_inner, fa_fam *fam, int top);

/* ---- requests and the queue (caller holds fam->mu) -------------------------------------- */

static fa_req *req_new(fa_impl *m, fa_req init) {
    fa_req *r = pt_malloc(sizeof *r);
    *r = init;
    r->m = m;
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

static int dead_error(fa_fam *f) {
    return pt_seterr("faulty: rank %d died after %d sends (fault injection)", f->world_rank, f->die_after);
}

/* Puts r in the queue after every item due no later than it. */
static void queue_insert(fa_fam *f, fa_req *r) {
    fa_req **at = &f->head;
    while (*at && (*at)->due <= r->due) at = &(*at)->next;
    r->next = *at;
    *at = r;
    r->deferred = 1;
    if (r->is_coll) r->m->coll_pending++;
    else f->pending[r->wpeer]++;
}

static void queue_remove_head(fa_fam *f) {
    fa_req *r = f->head;
    f->head = r->next;
    r->next = NULL;
    if (r->is_coll) r->m->coll_pending--;
    else f->pending[r->wpeer]--;
}

/* Posts item r (out of the queue) to its inner transport; a failure is kept for test/wait.
 * Called without the lock; r is nobody else's until it is marked posted. */
static void post_item(fa_req *r) {
    fa_impl *m = r->m;
    int rc = r->is_coll ? comm_ireduce_f32(m->inner, r->fbuf, r->n, r->all, &r->inner)
                        : comm_isend(m->inner, r->peer, r->tag, r->buf, r->bytes, &r->inner);
    if (rc) {
        r->failed = 1;
        snprintf(r->err, sizeof r->err, "%s", pt_err());
    }
}

/* Takes the head off the queue and posts it, the lock released meanwhile. */
static void post_head(fa_fam *f) {
    fa_req *r = f->head;
    queue_remove_head(f);
    r->m->posting++;
    pthread_mutex_unlock(&f->mu);
    post_item(r);
    pthread_mutex_lock(&f->mu);
    r->m->posting--;
    r->deferred = 0;
    pthread_cond_broadcast(&f->cv);
}

/* One-thread mode: posts the items that are due (all of them when `all`, sleeping until each
 * is due), in order. Caller holds the lock. */
static void drain(fa_fam *f, int all) {
    if (f->threaded) return;
    while (f->head) {
        double wait = f->head->due - pt_now();
        if (wait > 0 && !all) return;
        if (wait > 0) {
            struct timespec t = {(time_t)wait, (long)((wait - (double)(time_t)wait) * 1e9)};
            pthread_mutex_unlock(&f->mu);
            nanosleep(&t, NULL);
            pthread_mutex_lock(&f->mu);
            continue;
        }
        post_head(f);
    }
}

/* The deadline for a timed wait until pt_now() reads t (pt_now may be skewed for tests; the
 * condition's clock never is). */
static struct timespec abs_time(double t) {
    double left = t - pt_now();
    return pt_deadline_after(left > 0 ? left : 0);
}

/* The delivery thread: sleeps until the first item is due, posts it, and so on, until stop. */
static void *delivery_main(void *arg) {
    fa_fam *f = arg;
    pthread_mutex_lock(&f->mu);
    while (!f->stop) {
        if (!f->head) { pthread_cond_wait(&f->cv, &f->mu); continue; }
        double due = f->head->due;
        if (due > pt_now()) {
            struct timespec ts = abs_time(due);
            pthread_cond_timedwait(&f->cv, &f->mu, &ts);
            continue;
        }
        post_head(f);
    }
    pthread_mutex_unlock(&f->mu);
    return NULL;
}

/* Queues r and, in threaded mode, makes sure the thread runs and sees it: woken only when r is
 * due before everything queued (else it wakes for the head anyway, and a wake-up per message
 * would cost the sender its core on a busy machine). Caller holds the lock. */
static void defer(fa_fam *f, fa_req *r) {
    queue_insert(f, r);
    if (!f->threaded) return;
    if (!f->thread_on) {
        pthread_create(&f->th, NULL, delivery_main, f);
        f->thread_on = 1;
    }
    if (f->head == r) pthread_cond_broadcast(&f->cv);
}

/* ---- point to point --------------------------------------------------------------------- */

/* A message of `bytes` entering a link of `rate` bytes per second (0: unlimited) at `now`: it
 * waits until the link is free, holds it bytes / rate, and leaves it then (returned; *free moves
 * there). With no rate it leaves at once and the link is untouched. */
static double link_due(double now, double *free_at, size_t bytes, double rate) {
    if (!(rate > 0)) return now;
    double start = *free_at > now ? *free_at : now;
    *free_at = start + (double)bytes / rate;
    return *free_at;
}

/* The death check of an isend: the first die_after go through, the next one kills the rank. */
static int count_send(fa_impl *m) {
    fa_fam *f = m->fam;
    if (f->dead) return dead_error(f);
    if (f->die_after >= 0 && f->sends >= f->die_after) {
        f->dead = 1;
        char why[128];
        snprintf(why, sizeof why, "died after %d sends (fault injection)", f->die_after);
        pthread_mutex_unlock(&f->mu);
        comm_abort(m->inner, why);
        pthread_mutex_lock(&f->mu);
        return dead_error(f);
    }
    f->sends++;
    return 0;
}

static int fa_isend(comm *c, int dst, int tag, const void *buf, size_t bytes, comm_req **out) {
    fa_impl *m = c->impl;
    fa_fam *f = m->fam;
    if (dst < 0 || dst >= c->size) return comm_isend(m->inner, dst, tag, buf, bytes, out);   /* its error */
    pthread_mutex_lock(&f->mu);
    if (count_send(m) < 0) { pthread_mutex_unlock(&f->mu); return -1; }
    drain(f, 0);
    int w = m->wr[dst];
    double d = f->delay[w], rate = f->rate[w];
    fa_req *r = req_new(m, (fa_req){.is_send = 1, .peer = dst, .tag = tag, .wpeer = w, .buf = buf,
                                    .bytes = bytes});
    if (d > 0 || rate > 0 || f->pending[w]) {   /* behind the ones already held back: one order per peer */
        double due = link_due(pt_now(), &f->link_free[w], bytes, rate) + d;
        r->due = due > f->last_due[w] ? due : f->last_due[w];
        f->last_due[w] = r->due;
        defer(f, r);
        pthread_mutex_unlock(&f->mu);
        *out = (comm_req *)r;
        return 0;
    }
    pthread_mutex_unlock(&f->mu);
    if (comm_isend(m->inner, dst, tag, buf, bytes, &r->inner)) {
        pthread_mutex_lock(&f->mu);
        req_free(m, r);
        pthread_mutex_unlock(&f->mu);
        return -1;
    }
    *out = (comm_req *)r;
    return 0;
}

static int fa_irecv(comm *c, int src, int tag, void *buf, size_t bytes, comm_req **out) {
    fa_impl *m = c->impl;
    fa_fam *f = m->fam;
    pthread_mutex_lock(&f->mu);
    if (f->dead) { pthread_mutex_unlock(&f->mu); return dead_error(f); }
    drain(f, 0);
    fa_req *r = req_new(m, (fa_req){.peer = src, .tag = tag, .wpeer = -1, .bytes = bytes});
    pthread_mutex_unlock(&f->mu);
    if (comm_irecv(m->inner, src, tag, buf, bytes, &r->inner)) {
        pthread_mutex_lock(&f->mu);
        req_free(m, r);
        pthread_mutex_unlock(&f->mu);
        return -1;
    }
    *out = (comm_req *)r;
    return 0;
}

/* A posted request's inner test; frees r when done or failed. */
static int req_test(fa_impl *m, fa_req *r, int *done) {
    int rc = r->failed ? pt_seterr("%s", r->err) : comm_test(m->inner, r->inner, done);
    if (r->failed) *done = 1;
    if (*done) {
        pthread_mutex_lock(&m->fam->mu);
        req_free(m, r);
        pthread_mutex_unlock(&m->fam->mu);
    }
    return rc;
}

/* wait's look at a posted request: frees r when it completed; one that failed stays, marked
 * failed (its inner request over), for the test that reports it (comm.h: who owns a request). */
static int req_poll(fa_impl *m, fa_req *r, int *done) {
    if (r->failed) return pt_seterr("%s", r->err);
    int rc = comm_test(m->inner, r->inner, done);
    if (*done && rc == 0) {
        pthread_mutex_lock(&m->fam->mu);
        req_free(m, r);
        pthread_mutex_unlock(&m->fam->mu);
    } else if (*done) {
        r->failed = 1;
        r->inner = NULL;
        snprintf(r->err, sizeof r->err, "%s", pt_err());
    }
    return rc;
}

static int fa_test(comm *c, comm_req *req, int *done) {
    fa_impl *m = c->impl;
    fa_fam *f = m->fam;
    fa_req *r = (fa_req *)req;
    *done = 0;
    pthread_mutex_lock(&f->mu);
    if (f->dead) { pthread_mutex_unlock(&f->mu); return dead_error(f); }
    drain(f, 0);
    int deferred = r->deferred;
    pthread_mutex_unlock(&f->mu);
    return deferred ? 0 : req_test(m, r, done);
}

static int timeout_error(comm *c, const fa_req *r, double timeout) {
    if (r->is_coll)
        return pt_seterr("faulty: rank %d timed out after %.3g s in a non-blocking reduction%s", c->rank,
                         timeout, r->deferred ? " (still held back by the injected delay)" : "");
    return pt_seterr("faulty: rank %d timed out after %.3g s waiting to %s rank %d tag %d%s", c->rank, timeout,
                     r->is_send ? "send to" : "receive from", r->peer, r->tag,
                     r->deferred ? " (still held back by the injected delay)" : "");
}

/* Until r is posted (the delivery thread, or this rank's own polls in one-thread mode), the
 * deadline t1 (0: none) or death. Caller holds the lock. 0 when posted. */
static int wait_posted(fa_fam *f, fa_req *r, double t1) {
    while (r->deferred && !f->dead) {
        if (t1 > 0 && pt_now() >= t1) return -1;
        if (f->threaded) {
            struct timespec ts = abs_time(t1 > 0 ? t1 : pt_now() + 3600);
            if (f->thread_on) pthread_cond_timedwait(&f->cv, &f->mu, &ts);
            continue;
        }
        drain(f, 0);
        if (!r->deferred) break;
        pthread_mutex_unlock(&f->mu);
        struct timespec t = {0, (long)(POLL_S * 1e9)};
        nanosleep(&t, NULL);
        pthread_mutex_lock(&f->mu);
    }
    return r->deferred ? -1 : 0;
}

/* One-thread mode with other items still held back: polls the inner request, posting them as
 * they fall due (the awaited message may depend on a peer that first needs one of them). */
static int wait_polling(comm *c, fa_req *r, double timeout, double t0) {
    fa_fam *f = ((fa_impl *)c->impl)->fam;
    for (;;) {
        int done = 0, rc = req_poll(c->impl, r, &done);
        if (rc || done) return rc;
        if (timeout > 0 && pt_now() - t0 > timeout) return timeout_error(c, r, timeout);
        struct timespec t = {0, (long)(POLL_S * 1e9)};
        nanosleep(&t, NULL);
        pthread_mutex_lock(&f->mu);
        int dead = f->dead;
        drain(f, 0);
        pthread_mutex_unlock(&f->mu);
        if (dead) return dead_error(f);
    }
}

static int fa_wait(comm *c, comm_req *req, double timeout) {
    fa_impl *m = c->impl;
    fa_fam *f = m->fam;
    fa_req *r = (fa_req *)req;
    double t0 = pt_now();
    pthread_mutex_lock(&f->mu);
    int posted = wait_posted(f, r, timeout > 0 ? t0 + timeout : 0), dead = f->dead;
    int polling = !f->threaded && f->head;
    pthread_mutex_unlock(&f->mu);
    if (dead) return dead_error(f);
    if (posted < 0) return timeout_error(c, r, timeout);
    if (r->failed) return pt_seterr("%s", r->err);   /* the caller's still: its test frees it */
    if (polling) return wait_polling(c, r, timeout, t0);
    double left = timeout > 0 ? timeout - (pt_now() - t0) : 0;
    if (timeout > 0 && left <= 0) left = 1e-9;
    int rc = comm_wait(m->inner, r->inner, left);
    if (rc == 0) {
        pthread_mutex_lock(&f->mu);
        req_free(m, r);
        pthread_mutex_unlock(&f->mu);
    }
    return rc;
}

/* ---- collectives ------------------------------------------------------------------------ */

/* Blocking collectives wait until this communicator's held-back reductions are posted (every
 * rank calls collectives in one order, and MPI keeps that order per communicator). In
 * one-thread mode every held-back item is posted first, waiting out its delay (a peer that
 * needs one before joining the collective would otherwise deadlock it). */
static int before_collective(comm *c) {
    fa_impl *m = c->impl;
    fa_fam *f = m->fam;
    pthread_mutex_lock(&f->mu);
    drain(f, 1);
    while (f->threaded && (m->coll_pending || m->posting) && !f->dead) pthread_cond_wait(&f->cv, &f->mu);
    int dead = f->dead;
    pthread_mutex_unlock(&f->mu);
    return dead ? dead_error(f) : 0;
}

static int fa_allreduce_f32(comm *c, float *buf, size_t n) {
    if (before_collective(c)) return -1;
    return comm_allreduce_f32(((fa_impl *)c->impl)->inner, buf, n);
}

static int fa_allreduce_f64(comm *c, double *buf, size_t n) {
    if (before_collective(c)) return -1;
    return comm_allreduce_f64(((fa_impl *)c->impl)->inner, buf, n);
}

/* The largest reduction delay of this communicator's ranks (a slow link to any of them holds
 * the whole reduction back). Caller holds the lock. */
static double reduction_delay(const comm *c) {
    const fa_impl *m = c->impl;
    double d = 0;
    for (int r = 0; r < c->size; r++)
        if (r != c->rank && m->fam->red_delay[m->wr[r]] > d) d = m->fam->red_delay[m->wr[r]];
    return d;
}

/* The slowest reduction rate of this communicator's ranks (0: none limited). Caller holds the
 * lock. */
static double reduction_rate(const comm *c) {
    const fa_impl *m = c->impl;
    double k = 0;
    for (int r = 0; r < c->size; r++) {
        double x = r == c->rank ? 0 : m->fam->red_rate[m->wr[r]];
        if (x > 0 && (k == 0 || x < k)) k = x;
    }
    return k;
}

/* A non-blocking reduction: posted at once, or (a slow link to one of its ranks) held back like
 * a message, behind any reduction of this communicator already held back; on a link slow in
 * bandwidth it queues behind them, holding the link for its buffer's bytes / rate. Never sleeps. */
static int fa_ireduce_f32(comm *c, float *buf, size_t n, int all, comm_req **out) {
    fa_impl *m = c->impl;
    fa_fam *f = m->fam;
    pthread_mutex_lock(&f->mu);
    if (f->dead) { pthread_mutex_unlock(&f->mu); return dead_error(f); }
    drain(f, 0);
    double d = reduction_delay(c), rate = reduction_rate(c);
    fa_req *r = req_new(m, (fa_req){.is_coll = 1, .peer = -1, .tag = -1, .wpeer = -1, .fbuf = buf, .n = n,
                                    .all = all, .bytes = n * sizeof *buf});
    if (d > 0 || rate > 0 || m->coll_pending) {
        double due = link_due(pt_now(), &m->coll_link_free, r->bytes, rate) + d;
        r->due = due > m->coll_last_due ? due : m->coll_last_due;
        m->coll_last_due = r->due;
        defer(f, r);
        pthread_mutex_unlock(&f->mu);
        *out = (comm_req *)r;
        return 0;
    }
    pthread_mutex_unlock(&f->mu);
    if (comm_ireduce_f32(m->inner, buf, n, all, &r->inner)) {
        pthread_mutex_lock(&f->mu);
        req_free(m, r);
        pthread_mutex_unlock(&f->mu);
        return -1;
    }
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

/* Sub-communicators share this rank's family: sends count together, death kills all, and the
 * delays apply to them by the peer's world rank. */
static int fa_split(comm *c, int color, comm **out) {
    fa_impl *m = c->impl;
    comm *sub = NULL;
    *out = NULL;
    if (before_collective(c) || comm_split(m->inner, color, &sub)) return -1;
    if (!sub) return 0;
    pthread_mutex_lock(&m->fam->mu);
    m->fam->refs++;
    pthread_mutex_unlock(&m->fam->mu);
    *out = faulty_new(sub, 1, m->fam, 0);
    return 0;
}

static void fa_abort(comm *c, const char *why) {
    comm_abort(((fa_impl *)c->impl)->inner, why);
}

static int fa_world_rank_of(comm *c, int r) { return ((fa_impl *)c->impl)->wr[r]; }

/* Stops the delivery thread (the family's last communicator is going). */
static void fam_free(fa_fam *f) {
    if (f->thread_on) {
        pthread_mutex_lock(&f->mu);
        f->stop = 1;
        pthread_cond_broadcast(&f->cv);
        pthread_mutex_unlock(&f->mu);
        pthread_join(f->th, NULL);
    }
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->cv);
    free(f->delay); free(f->red_delay); free(f->last_due); free(f->pending);
    free(f->rate); free(f->red_rate); free(f->link_free);
    free(f);
}

/* Drops this communicator's items never posted, waits for one being posted, then its requests
 * never reported done, then the inner endpoint (which drops its own pending requests). */
static void fa_free(comm *c) {
    fa_impl *m = c->impl;
    fa_fam *f = m->fam;
    pthread_mutex_lock(&f->mu);
    for (fa_req **at = &f->head; *at;) {
        fa_req *r = *at;
        if (r->m != m) { at = &r->next; continue; }
        *at = r->next;
        if (r->is_coll) m->coll_pending--; else f->pending[r->wpeer]--;
    }
    while (m->posting) pthread_cond_wait(&f->cv, &f->mu);
    while (m->live) req_free(m, m->live);
    int last = --f->refs == 0;
    pthread_mutex_unlock(&f->mu);
    if (m->own_inner) comm_free(m->inner);
    if (last) fam_free(f);
    free(m->wr);
    free(m);
    free(c);
}

static const comm_vtable fa_vtable = {
    .isend = fa_isend, .irecv = fa_irecv, .test = fa_test, .wait = fa_wait,
    .allreduce_f32 = fa_allreduce_f32, .allreduce_f64 = fa_allreduce_f64,
    .ireduce_f32 = fa_ireduce_f32, .allgather_f32 = fa_allgather_f32,
    .barrier = fa_barrier, .split = fa_split, .abort = fa_abort, .free = fa_free,
    .world_rank_of = fa_world_rank_of,
};

static comm *faulty_new(comm *inner, int own_inner, fa_fam *fam, int top) {
    fa_impl *m = pt_calloc(1, sizeof *m);
    m->inner = inner;
    m->own_inner = own_inner;
    m->fam = fam;
    m->top = top;
    m->wr = pt_malloc(sizeof *m->wr * (size_t)inner->size);
    for (int r = 0; r < inner->size; r++) m->wr[r] = comm_world_rank_of(inner, r);
    m->vt = fa_vtable;
    snprintf(m->name, sizeof m->name, "faulty(%s)", inner->vt->name);
    m->vt.name = m->name;
    comm *c = pt_calloc(1, sizeof *c);
    c->vt = &m->vt;
    c->rank = inner->rank;
    c->size = inner->size;
    c->world_rank = inner->world_rank;
    c->threaded = inner->threaded;
    c->one_clock = inner->one_clock;
    c->impl = m;
    return c;
}

/* A family for the communicator wrapped. */
static fa_fam *fam_new(comm *inner, int die_after) {
    fa_fam *f = pt_calloc(1, sizeof *f);
    pthread_condattr_t ca;   /* timed waits read CLOCK_MONOTONIC, as pt_now */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, &ca);
    pthread_condattr_destroy(&ca);
    f->die_after = die_after;
    f->refs = 1;
    f->world_rank = inner->world_rank;
    for (int r = 0; r < inner->size; r++)
        if (comm_world_rank_of(inner, r) + 1 > f->n_world) f->n_world = comm_world_rank_of(inner, r) + 1;
    f->delay = pt_calloc((size_t)f->n_world, sizeof *f->delay);
    f->red_delay = pt_calloc((size_t)f->n_world, sizeof *f->red_delay);
    f->last_due = pt_calloc((size_t)f->n_world, sizeof *f->last_due);
    f->pending = pt_calloc((size_t)f->n_world, sizeof *f->pending);
    f->rate = pt_calloc((size_t)f->n_world, sizeof *f->rate);
    f->red_rate = pt_calloc((size_t)f->n_world, sizeof *f->red_rate);
    f->link_free = pt_calloc((size_t)f->n_world, sizeof *f->link_free);
    f->threaded = inner->threaded;
    return f;
}

static int wrap(comm *inner, int own_inner, int die_after, comm **out) {
    if (!inner) return pt_seterr("faulty: no communicator to wrap");
    *out = faulty_new(inner, own_inner, fam_new(inner, die_after), 1);
    return 0;
}

int comm_faulty_wrap(comm *inner, int slow_peer, double delay, int die_after, comm **out) {
    if (!inner) return pt_seterr("faulty: no communicator to wrap");
    if (slow_peer >= inner->size)
        return pt_seterr("faulty: slow peer %d is not a rank of the %d-rank communicator", slow_peer, inner->size);
    if (delay < 0) return pt_seterr("faulty: delay %g s is negative", delay);
    if (wrap(inner, 1, die_after, out) < 0) return -1;
    if (slow_peer >= 0) ((fa_impl *)(*out)->impl)->fam->delay[comm_world_rank_of(inner, slow_peer)] = delay;
    return 0;
}

int comm_faulty_borrow(comm *inner, int die_after, comm **out) {
    return wrap(inner, 0, die_after, out);
}

int comm_faulty_set_delay(comm *c, int peer, double seconds, int reductions) {
    if (!c || c->vt->isend != fa_isend) return pt_seterr("faulty: set_delay on a communicator that is not faulty");
    fa_impl *m = c->impl;
    fa_fam *f = m->fam;
    if (!m->top) return pt_seterr("faulty: set_delay on a communicator split from the faulty one (use the one wrapped)");
    if (peer < 0 || peer >= c->size) return pt_seterr("faulty: set_delay: no rank %d in %d", peer, c->size);
    if (!(seconds >= 0)) return pt_seterr("faulty: set_delay: %g s is not a delay", seconds);
    int w = m->wr[peer];
    pthread_mutex_lock(&f->mu);
    f->delay[w] = seconds;
    f->red_delay[w] = reductions ? seconds : 0;
    pthread_mutex_unlock(&f->mu);
    return 0;
}

int comm_faulty_set_rate(comm *c, int peer, double bytes_per_s, int reductions) {
    if (!c || c->vt->isend != fa_isend) return pt_seterr("faulty: set_rate on a communicator that is not faulty");
    fa_impl *m = c->impl;
    fa_fam *f = m->fam;
    if (!m->top) return pt_seterr("faulty: set_rate on a communicator split from the faulty one (use the one wrapped)");
    if (peer < 0 || peer >= c->size) return pt_seterr("faulty: set_rate: no rank %d in %d", peer, c->size);
    if (!(bytes_per_s >= 0) || isinf(bytes_per_s))
        return pt_seterr("faulty: set_rate: %g bytes/s is not a rate (> 0, or 0 for unlimited)", bytes_per_s);
    int w = m->wr[peer];
    pthread_mutex_lock(&f->mu);
    f->rate[w] = bytes_per_s;
    f->red_rate[w] = reductions ? bytes_per_s : 0;
    pthread_mutex_unlock(&f->mu);
    return 0;
}
