/* MPI transport (Open MPI): one process per rank. Point-to-point maps onto MPI_Isend/MPI_Irecv
 * on a private duplicate of MPI_COMM_WORLD; allreduce is built from MPI_Alltoallv +
 * MPI_Allgatherv so it sums in rank order exactly like the threads transport (bitwise equal
 * results on every rank and across transports), and the non-blocking reduction from
 * MPI_Ialltoallv (+ MPI_Iallgatherv) the same way.
 *
 * Progress: Open MPI moves a message only inside MPI calls (this build has no progress thread of
 * its own), so where MPI lets other threads call it (SERIALIZED or MULTIPLE) one progress thread per process owns the completion of
 * every request: it tests them (short naps while nothing completes), does a reduction's sum
 * and posts its second phase, and wakes the rank that waits. Messages and reductions so
 * progress while the rank computes. Below SERIALIZED (or with PT_MPI_PROGRESS=0) the rank's own test
 * and wait calls progress them (polling with growing naps), as before.
 *
 * The one place library code prints: abort writes "rank R failed: why" to stderr before
 * MPI_Abort ends the whole job (no other rank could report it). */
#include "comm/comm_mpi_int.h"
#include "util/pt.h"
#include <errno.h>
#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NAP_MIN 10e-6           /* progress thread: first nap after a poll that completed nothing */
#define NAP_MAX 100e-6          /* ... growing to this */

/* A non-blocking rank-order sum: phase 0 the MPI_Ialltoallv of the slices, then (all) phase 1
 * the MPI_Iallgatherv of the summed slices. */
typedef struct mp_coll {
    float *buf;
    size_t n;
    int all, phase;                 /* 0 alltoallv in flight, 1 summed, 2 allgatherv in flight */
    int *cnt, *dsp, *rcnt, *rdsp;   /* [P] each; one allocation at cnt */
    float *scratch;                 /* P slices of this rank's slice */
} mp_coll;

static const comm_vtable mp_vtable;

/* Sets the error "mpi: <what and where>: <MPI's message for code>". Returns -1. */
static int mpi_error(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int mpi_error(int code, const char *fmt, ...) {
    char msg[MPI_MAX_ERROR_STRING], head[200];
    int len = 0;
    MPI_Error_string(code, msg, &len);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    return pt_seterr("mpi: %s: %s", head, msg);
}

comm *mp_endpoint_new(MPI_Comm mc, int tag_ub) {
    mp_impl *m = pt_calloc(1, sizeof *m);
    m->mc = mc;
    m->epoch = mp_epoch_now();
    m->tag_ub = tag_ub;
    MPI_LOCK();
    MPI_Comm_set_errhandler(mc, MPI_ERRORS_RETURN);
    MPI_Comm_dup(mc, &m->mc2);
    MPI_Comm_set_errhandler(m->mc2, MPI_ERRORS_RETURN);
    comm *c = pt_calloc(1, sizeof *c);
    c->vt = &mp_vtable;
    MPI_Comm_rank(mc, &c->rank);
    MPI_Comm_size(mc, &c->size);
    MPI_Comm_rank(mp_job_world, &c->world_rank);
    m->world_of = pt_malloc(sizeof *m->world_of * (size_t)c->size);
    int *mine = pt_malloc(sizeof *mine * (size_t)c->size);
    for (int r = 0; r < c->size; r++) mine[r] = r;
    MPI_Group g, wg;
    MPI_Comm_group(mc, &g);
    MPI_Comm_group(mp_job_world, &wg);
    MPI_Group_translate_ranks(g, c->size, mine, wg, m->world_of);
    MPI_Group_free(&g);
    MPI_Group_free(&wg);
    free(mine);
    MPI_UNLOCK();
    c->threaded = mp_threaded;
    c->impl = m;
    return c;
}

static int check_args(comm *c, const char *what, int peer, int tag, size_t bytes) {
    mp_impl *m = c->impl;
    if (mp_broken(c)) return mp_broken_err(c, what);
    if (peer < 0 || peer >= c->size)
        return pt_seterr("mpi: %s: rank %d has no peer %d (communicator of %d ranks)", what,
                         c->rank, peer, c->size);
    if (tag < 0 || tag > m->tag_ub)
        return pt_seterr("mpi: %s: rank %d, peer %d: tag %d outside 0..%d (MPI_TAG_UB)", what,
                         c->rank, peer, tag, m->tag_ub);
    if (bytes > INT_MAX)
        return pt_seterr("mpi: %s: rank %d, peer %d, tag %d: %zu bytes exceed MPI's int count",
                         what, c->rank, peer, tag, bytes);
    return 0;
}

static void sleep_s(double s) {
    struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&t, NULL);
}

static int mp_isend(comm *c, int dst, int tag, const void *buf, size_t bytes, comm_req **out) {
    if (check_args(c, "isend", dst, tag, bytes)) return -1;
    mp_req *r = pt_calloc(1, sizeof *r);
    *r = (mp_req){.rq = MPI_REQUEST_NULL, .is_send = 1, .peer = dst, .tag = tag, .bytes = bytes, .c = c};
    MPI_LOCK();   /* checked, posted and handed over in one hold (mp_engine_add) */
    int e = mp_broken(c) ? -1 : MPI_Isend(buf, (int)bytes, MPI_BYTE, dst, tag, ((mp_impl *)c->impl)->mc, &r->rq);
    if (e == MPI_SUCCESS) mp_engine_add(r);
    MPI_UNLOCK();
    if (e != MPI_SUCCESS) {
        free(r);
        return e < 0 ? mp_broken_err(c, "isend") : mpi_error(e, "isend from rank %d to rank %d tag %d", c->rank, dst, tag);
    }
    *out = (comm_req *)r;
    return 0;
}

static int mp_irecv(comm *c, int src, int tag, void *buf, size_t bytes, comm_req **out) {
    if (check_args(c, "irecv", src, tag, bytes)) return -1;
    mp_req *r = pt_calloc(1, sizeof *r);
    *r = (mp_req){.rq = MPI_REQUEST_NULL, .peer = src, .tag = tag, .bytes = bytes, .c = c};
    MPI_LOCK();   /* checked, posted and handed over in one hold (mp_engine_add) */
    int e = mp_broken(c) ? -1 : MPI_Irecv(buf, (int)bytes, MPI_BYTE, src, tag, ((mp_impl *)c->impl)->mc, &r->rq);
    if (e == MPI_SUCCESS) mp_engine_add(r);
    MPI_UNLOCK();
    if (e != MPI_SUCCESS) {
        free(r);
        return e < 0 ? mp_broken_err(c, "irecv") : mpi_error(e, "irecv on rank %d from rank %d tag %d", c->rank, src, tag);
    }
    *out = (comm_req *)r;
    return 0;
}

/* A completed receive: its size must equal the buffer's. A larger message shows up as
 * MPI_ERR_TRUNCATE (MPI does not say by how much). */
static int recv_check(comm *c, const mp_req *r, int code, MPI_Status *st) {
    int cls = MPI_SUCCESS;
    if (code != MPI_SUCCESS) MPI_Error_class(code, &cls);
    if (cls == MPI_ERR_TRUNCATE)
        return pt_seterr("mpi: message from rank %d to rank %d tag %d is larger than the %zu-byte "
                         "receive buffer (size mismatch)", r->peer, c->rank, r->tag, r->bytes);
    if (code != MPI_SUCCESS)
        return mpi_error(code, "receive on rank %d from rank %d tag %d", c->rank, r->peer, r->tag);
    int n = 0;
    MPI_Get_count(st, MPI_BYTE, &n);
    if ((size_t)n != r->bytes)
        return pt_seterr("mpi: message of %d bytes from rank %d to rank %d tag %d does not match "
                         "the %zu-byte receive buffer (size mismatch)", n, r->peer, c->rank,
                         r->tag, r->bytes);
    return 0;
}

static void colls_advance(mp_impl *m, mp_req *upto);

/* One MPI_Test of r (a collective: its next phase). *fin = 1 when r is finished: then the return
 * is its result (0, or -1 with the error set). Never frees r. Called under mpi_mu by whoever owns
 * r's completion: the progress thread, or the rank (no progress thread). */
static int req_advance(mp_req *r, int *fin) {
    MPI_Status st;
    int flag = 0;
    *fin = 0;
    if (r->coll || r->finished) {      /* a reduction: its endpoint's, in order, up to it */
        if (!r->finished) colls_advance(r->c->impl, r);
        *fin = r->finished;
        return r->finished && r->failed ? pt_seterr("%s", r->err) : 0;
    }
    int e = MPI_Test(&r->rq, &flag, &st);
    if (e == MPI_SUCCESS && !flag) return 0;
    *fin = 1;
    if (!r->is_send) return recv_check(r->c, r, e, &st);
    if (e != MPI_SUCCESS) return mpi_error(e, "send from rank %d to rank %d tag %d", r->c->rank, r->peer, r->tag);
    return 0;
}

/* A request the progress thread finished (or the interrupt broke): its result, and r freed (a
 * broken reduction's buffers stay: MPI may still write them). */
static int req_finish(mp_req *r) {
    int rc = r->broken ? pt_seterr("%s", r->why) : r->failed ? pt_seterr("%s", r->err) : 0;
    free(r);
    return rc;
}

/* The progress thread: tests its requests (outside the engine's lock), marks the finished done
 * and wakes the ranks; naps while none completes, sleeps while it holds none. A pass runs under one
 * hold of mpi_mu, so comm_mpi_interrupt (mpi_mu first) never breaks a request inside a pass. */
static void *engine_main(void *arg) {
    mp_req **snap = NULL;
    int cap = 0;
    double nap = NAP_MIN;
    pthread_mutex_lock(&eng.mu);
    while (!eng.stop) {
        if (eng.n == 0) { pthread_cond_wait(&eng.work_cv, &eng.mu); continue; }
        pthread_mutex_unlock(&eng.mu);
        MPI_LOCK();                     /* mpi_mu, then the engine's lock: the interrupt's order */
        pthread_mutex_lock(&eng.mu);
        int n = eng.n, any = 0;
        if (n > cap) { free(snap); cap = 2 * n; snap = pt_malloc(sizeof *snap * (size_t)cap); }
        memcpy(snap, eng.act, sizeof *snap * (size_t)n);
        pthread_mutex_unlock(&eng.mu);
        for (int i = 0; i < n; i++) {
            int fin = 0, rc = req_advance(snap[i], &fin);
            if (!fin) { snap[i] = NULL; continue; }
            if (rc < 0) { snap[i]->failed = 1; snprintf(snap[i]->err, sizeof snap[i]->err, "%s", pt_err()); }
            any = 1;
        }
        pthread_mutex_lock(&eng.mu);
        for (int i = 0; i < n && any; i++) {
            if (!snap[i]) continue;
            snap[i]->done = 1;
            for (int k = 0; k < eng.n; k++)
                if (eng.act[k] == snap[i]) { eng.act[k] = eng.act[--eng.n]; break; }
        }
        MPI_UNLOCK();
        if (any) { pthread_cond_broadcast(&eng.done_cv); nap = NAP_MIN; continue; }
        pthread_mutex_unlock(&eng.mu);
        sleep_s(nap);
        nap = nap * 2 < NAP_MAX ? nap * 2 : NAP_MAX;
        pthread_mutex_lock(&eng.mu);
    }
    pthread_mutex_unlock(&eng.mu);
    free(snap);
    return NULL;
}

static void engine_start(void) {
    const char *v = getenv("PT_MPI_PROGRESS");
    if (!mp_threaded || (v && !strcmp(v, "0"))) return;
    pthread_condattr_t ca;   /* timed waits read CLOCK_MONOTONIC */
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&eng.done_cv, &ca);
    pthread_cond_init(&eng.work_cv, NULL);
    pthread_condattr_destroy(&ca);
    eng.stop = 0;
    eng.on = 1;
    pthread_create(&eng.th, NULL, engine_main, NULL);
}

static void engine_stop(void) {
    if (!eng.on) return;
    pthread_mutex_lock(&eng.mu);
    eng.stop = 1;
    pthread_cond_signal(&eng.work_cv);
    pthread_mutex_unlock(&eng.mu);
    pthread_join(eng.th, NULL);
    pthread_cond_destroy(&eng.done_cv);
    pthread_cond_destroy(&eng.work_cv);
    free(eng.act);
    eng.act = NULL;
    eng.n = eng.cap = 0;
    eng.on = 0;
}

/* Whether r is complete; on completion checks the result and frees r. */
static int mp_test(comm *c, comm_req *req, int *done) {
    mp_req *r = (mp_req *)req;
    *done = 0;
    if (eng.on) {
        pthread_mutex_lock(&eng.mu);
        int d = r->done;
        pthread_mutex_unlock(&eng.mu);
        if (!d) return 0;
        *done = 1;
        return req_finish(r);
    }
    MPI_LOCK();
    int fin = 0, rc = req_advance(r, &fin);
    MPI_UNLOCK();
    if (!fin) return 0;
    *done = 1;
    free(r);
    return rc;
}

/* Until done or the timeout: asleep on the progress thread's signal, or (none) polling MPI_Test
 * with naps of 20 us growing to 320 us. 1 done (r freed), -1 done with an error (r kept, marked
 * finished, for the test that reports it: comm.h, who owns a request), 0 timed out: the request
 * stays pending (it may be waited again). */
static int wait_done(comm *c, mp_req *r, double timeout) {
    if (eng.on) {
        struct timespec dl = pt_deadline_after(timeout > 0 ? timeout : 0);
        pthread_mutex_lock(&eng.mu);
        while (!r->done) {
            if (timeout <= 0) pthread_cond_wait(&eng.done_cv, &eng.mu);
            else if (pthread_cond_timedwait(&eng.done_cv, &eng.mu, &dl) == ETIMEDOUT) break;
        }
        int d = r->done;
        pthread_mutex_unlock(&eng.mu);
        if (!d) return 0;
        if (r->failed) return pt_seterr("%s", r->err);   /* still the caller's: its test frees it */
        return req_finish(r) < 0 ? -1 : 1;
    }
    double t0 = pt_now(), nap = 20e-6;
    for (;;) {
        MPI_LOCK();
        int fin = 0, rc = req_advance(r, &fin);
        MPI_UNLOCK();
        if (fin && rc < 0) {   /* kept: req_advance reports it again to the test */
            r->finished = r->failed = 1;
            snprintf(r->err, sizeof r->err, "%s", pt_err());
            return -1;
        }
        if (fin) { free(r); return 1; }
        if (timeout > 0 && pt_now() - t0 > timeout) return 0;
        sleep_s(nap);
        if (nap < 250e-6) nap *= 2;
    }
}

/* comm.h's waitany: asleep on the progress thread's signal until one of reqs is done (or, with
 * no progress thread, testing them in naps of 20 us growing to 320 us, as wait_done). */
static int mp_waitany(comm *c, comm_req **reqs, int n, double timeout, int *which) {
    double t0 = pt_now(), nap = 20e-6;
    struct timespec dl = pt_deadline_after(timeout > 0 ? timeout : 0);
    *which = -1;
    if (eng.on) pthread_mutex_lock(&eng.mu);
    for (int late = 0; *which < 0 && !late;) {
        for (int i = 0; i < n && *which < 0; i++) {
            int done = 0;
            if (!reqs[i]) continue;
            if (eng.on) done = ((mp_req *)reqs[i])->done;
            else if (mp_test(c, reqs[i], &done) < 0) { reqs[i] = NULL, *which = i; return -1; }
            if (done) *which = i;
        }
        if (*which >= 0) break;
        if (eng.on && timeout <= 0) pthread_cond_wait(&eng.done_cv, &eng.mu);
        else if (eng.on) late = pthread_cond_timedwait(&eng.done_cv, &eng.mu, &dl) == ETIMEDOUT;
        else if (!(late = timeout > 0 && pt_now() - t0 > timeout)) sleep_s(nap), nap = nap < 250e-6 ? 2 * nap : nap;
    }
    if (eng.on) pthread_mutex_unlock(&eng.mu);
    if (*which < 0) return 0;
    comm_req *r = reqs[*which];
    reqs[*which] = NULL;
    return eng.on ? (req_finish((mp_req *)r) < 0 ? -1 : 0) : 0;   /* without the thread mp_test freed it */
}

static int mp_wait(comm *c, comm_req *req, double timeout) {
    mp_req *r = (mp_req *)req;
    MPI_LOCK();   /* the progress thread may be finishing this request's reduction */
    int peer = r->peer, tag = r->tag, is_send = r->is_send, coll = r->coll != NULL;
    size_t bytes = r->bytes;
    MPI_UNLOCK();
    int w = wait_done(c, r, timeout);
    if (w != 0) return w > 0 ? 0 : -1;
    if (coll)
        return pt_seterr("mpi: rank %d timed out after %.3g s in a non-blocking reduction of "
                         "%zu bytes over %d ranks (world rank %d): some rank never posted it",
                         c->rank, timeout, bytes, c->size, c->world_rank);
    return pt_seterr("mpi: rank %d timed out after %.3g s waiting to %s rank %d tag %d "
                     "(%zu bytes): the peer never %s", c->rank, timeout,
                     is_send ? "send to" : "receive from", peer, tag, bytes,
                     is_send ? "posted the receive" : "sent");
}

/* ---- collectives ----------------------------------------------------------------------- */

/* Every rank must pass the same count to collective `what`: one tiny MPI_Allreduce of (n, -n)
 * with MPI_MAX. */
static int check_counts(comm *c, size_t n, const char *what) {
    if (mp_broken(c)) return mp_broken_err(c, what);
    long long *v = pt_malloc(4 * sizeof *v), *m = v + 2;   /* recovery: left to MPI when broken */
    v[0] = (long long)n;
    v[1] = -(long long)n;
    MPI_Request rq;
    MPI_LOCK();
    int e = mp_recover_on ? MPI_Iallreduce(v, m, 2, MPI_LONG_LONG, MPI_MAX, ((mp_impl *)c->impl)->mc, &rq)
                          : MPI_Allreduce(v, m, 2, MPI_LONG_LONG, MPI_MAX, ((mp_impl *)c->impl)->mc);
    MPI_UNLOCK();
    if (e == MPI_SUCCESS && mp_recover_on && mp_coll_poll(c, &rq, what) < 0) return -1;
    long long m0 = m[0], m1 = m[1];
    free(v);
    if (e != MPI_SUCCESS) return mpi_error(e, "%s on rank %d of %d", what, c->rank, c->size);
    if (m0 != (long long)n || -m1 != (long long)n)
        return pt_seterr("mpi: %s: ranks passed different counts (rank %d passed %zu; "
                         "min %lld, max %lld)", what, c->rank, n, -m1, m0);
    if (n > INT_MAX) return pt_seterr("mpi: %s of %zu elements exceeds MPI's int count", what, n);
    return 0;
}

/* out[i] = ((in[0][i] + in[1][i]) + in[2][i]) + ...: rank order, as the threads transport. */
static void sum_f32(void *out, const void **in, int k, size_t n) {
    float *o = out;
    for (size_t i = 0; i < n; i++) o[i] = ((const float *)in[0])[i];
    for (int j = 1; j < k; j++)
        for (size_t i = 0; i < n; i++) o[i] += ((const float *)in[j])[i];
}

static void sum_f64(void *out, const void **in, int k, size_t n) {
    double *o = out;
    for (size_t i = 0; i < n; i++) o[i] = ((const double *)in[0])[i];
    for (int j = 1; j < k; j++)
        for (size_t i = 0; i < n; i++) o[i] += ((const double *)in[j])[i];
}

/* Reduce-scatter by hand then allgather: rank r receives slice r of every rank's buffer
 * (MPI_Alltoallv), sums the slices in rank order, and MPI_Allgatherv shares the slices. */
static int mp_allreduce(comm *c, void *buf, size_t n, size_t esz, MPI_Datatype t, sum_fn sum) {
    if (check_counts(c, n, "allreduce")) return -1;
    if (c->size == 1 || n == 0) return 0;
    int P = c->size, me = c->rank, rc = 0;
    int *cnt = pt_malloc(4 * P * sizeof *cnt), *dsp = cnt + P, *rcnt = cnt + 2 * P, *rdsp = cnt + 3 * P;
    for (int j = 0; j < P; j++) {
        dsp[j] = (int)(n * j / P);
        cnt[j] = (int)(n * (j + 1) / P) - dsp[j];
    }
    for (int i = 0; i < P; i++) { rcnt[i] = cnt[me]; rdsp[i] = i * cnt[me]; }
    char *scratch = pt_malloc((size_t)P * cnt[me] * esz + 1);
    const void **in = pt_malloc(P * sizeof *in);
    MPI_Comm mc = ((mp_impl *)c->impl)->mc;
    if (mp_recover_on) return mp_allreduce_polled(c, buf, n, esz, t, sum, cnt, scratch, in);
    MPI_LOCK();
    int e = MPI_Alltoallv(buf, cnt, dsp, t, scratch, rcnt, rdsp, t, mc);
    MPI_UNLOCK();
    if (e != MPI_SUCCESS) { rc = mpi_error(e, "allreduce (alltoallv) on rank %d of %d", me, P); goto free_buffers; }
    for (int i = 0; i < P; i++) in[i] = scratch + (size_t)rdsp[i] * esz;
    sum((char *)buf + (size_t)dsp[me] * esz, in, P, (size_t)cnt[me]);
    MPI_LOCK();
    e = MPI_Allgatherv(MPI_IN_PLACE, 0, t, buf, cnt, dsp, t, mc);
    MPI_UNLOCK();
    if (e != MPI_SUCCESS) rc = mpi_error(e, "allreduce (allgatherv) on rank %d of %d", me, P);
free_buffers:
    free(in);
    free(scratch);
    free(cnt);
    return rc;
}

static int mp_allreduce_f32(comm *c, float *buf, size_t n) {
    return mp_allreduce(c, buf, n, sizeof *buf, MPI_FLOAT, sum_f32);
}

static int mp_allreduce_f64(comm *c, double *buf, size_t n) {
    return mp_allreduce(c, buf, n, sizeof *buf, MPI_DOUBLE, sum_f64);
}

/* ---- non-blocking reduction and allgather -------------------------------------------------- */

/* Slice counts and displacements of n elements over P ranks (comm_slice), in int. */
static void slices(size_t n, int P, int *cnt, int *dsp) {
    for (int j = 0; j < P; j++) {
        size_t lo, hi;
        comm_slice(n, j, P, &lo, &hi);
        dsp[j] = (int)lo;
        cnt[j] = (int)(hi - lo);
    }
}

static void coll_free(mp_coll *k) {
    free(k->cnt);
    free(k->scratch);
    free(k);
}

static int mp_ireduce_f32(comm *c, float *buf, size_t n, int all, comm_req **out) {
    if (n > INT_MAX) return pt_seterr("mpi: ireduce of %zu elements exceeds MPI's int count", n);
    if (mp_broken(c)) return mp_broken_err(c, "ireduce");
    int P = c->size, me = c->rank;
    mp_coll *k = pt_calloc(1, sizeof *k);
    k->buf = buf;
    k->n = n;
    k->all = all != 0;
    k->cnt = pt_malloc(4 * (size_t)P * sizeof *k->cnt);
    k->dsp = k->cnt + P; k->rcnt = k->cnt + 2 * P; k->rdsp = k->cnt + 3 * P;
    slices(n, P, k->cnt, k->dsp);
    for (int i = 0; i < P; i++) { k->rcnt[i] = k->cnt[me]; k->rdsp[i] = i * k->cnt[me]; }
    k->scratch = pt_malloc(((size_t)P * k->cnt[me] + 1) * sizeof *k->scratch);
    mp_req *r = pt_calloc(1, sizeof *r);
    *r = (mp_req){.rq = MPI_REQUEST_NULL, .peer = -1, .tag = -1, .bytes = n * sizeof(float), .coll = k, .c = c};
    MPI_LOCK();   /* checked, posted, linked and handed over in one hold (mp_coll_post) */
    int e = mp_broken(c) ? -1 : MPI_Ialltoallv(buf, k->cnt, k->dsp, MPI_FLOAT, k->scratch, k->rcnt,
                                               k->rdsp, MPI_FLOAT, ((mp_impl *)c->impl)->mc, &r->rq);
    if (e == MPI_SUCCESS) mp_coll_post(r);
    MPI_UNLOCK();
    if (e != MPI_SUCCESS) {
        coll_free(k);
        free(r);
        return e < 0 ? mp_broken_err(c, "ireduce") : mpi_error(e, "ireduce (ialltoallv) on rank %d of %d", me, P);
    }
    *out = (comm_req *)r;
    return 0;
}

/* Takes reduction r one step: after the alltoallv the rank-order sum of this rank's slice, then
 * (all = 1) the allgatherv on the second communicator. *more: it may go on at once (it is waiting
 * for nothing). Marks it finished (failed, err) at the end. */
static void coll_step(mp_req *r, int *more) {
    mp_coll *k = r->coll;
    comm *c = r->c;
    int flag = 0, me = c->rank, P = c->size, rc = 0;
    *more = 0;
    int e = k->phase == 1 ? MPI_SUCCESS : MPI_Test(&r->rq, &flag, MPI_STATUS_IGNORE);
    if (e != MPI_SUCCESS) rc = mpi_error(e, "ireduce on rank %d of %d", me, P);
    else if (k->phase != 1 && !flag) return;
    else if (k->phase == 0) {
        const void **in = pt_malloc((size_t)P * sizeof *in);
        for (int i = 0; i < P; i++) in[i] = k->scratch + k->rdsp[i];
        sum_f32(k->buf + k->dsp[me], in, P, (size_t)k->cnt[me]);
        free(in);
        k->phase = 1;
        *more = k->all;
        if (k->all) return;
    } else if (k->phase == 1) {
        e = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, k->buf, k->cnt, k->dsp, MPI_FLOAT,
                            ((mp_impl *)c->impl)->mc2, &r->rq);
        k->phase = 2;
        if (e == MPI_SUCCESS) return;
        rc = mpi_error(e, "ireduce (iallgatherv) on rank %d of %d", me, P);
    }
    r->finished = 1;
    r->failed = rc < 0;
    if (rc < 0) snprintf(r->err, sizeof r->err, "%s", pt_err());
    coll_free(k);
    r->coll = NULL;
}

/* Advances the endpoint's unfinished reductions in posting order, up to `upto`: a second phase
 * starts only once every earlier reduction's has (collectives start in one order on every rank),
 * so a reduction whose turn has not come waits, summed. Finished ones leave the list (their
 * requests stay for their owners to test). Under mpi_mu, by the owner of completion. */
static void colls_advance(mp_impl *m, mp_req *upto) {
    int blocked = 0;   /* an earlier reduction has not started its second phase */
    for (mp_req **at = &m->colls, *prev = NULL; *at;) {
        mp_req *r = *at;
        int more = 1;
        while (more && r->coll && !(blocked && r->coll->phase == 1)) coll_step(r, &more);
        if (r->finished) {
            *at = r->cnext;
            if (m->colls_tail == r) m->colls_tail = prev;
            r->cnext = NULL;
        } else {
            blocked |= r->coll->phase < 2;
            prev = r;
            at = &r->cnext;
        }
        if (r == upto) break;
    }
}

static int mp_allgather_f32(comm *c, float *buf, size_t n) {
    if (check_counts(c, n, "allgather")) return -1;
    if (c->size == 1 || n == 0) return 0;
    int *cnt = pt_malloc(2 * (size_t)c->size * sizeof *cnt);
    slices(n, c->size, cnt, cnt + c->size);
    if (mp_recover_on) return mp_allgather_polled(c, buf, n, cnt);
    MPI_LOCK();
    int e = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, buf, cnt, cnt + c->size, MPI_FLOAT,
                           ((mp_impl *)c->impl)->mc);
    MPI_UNLOCK();
    free(cnt);
    return e == MPI_SUCCESS ? 0 : mpi_error(e, "allgather on rank %d of %d", c->rank, c->size);
}

static int mp_barrier(comm *c) {
    if (mp_recover_on) return mp_barrier_polled(c);
    MPI_LOCK();
    int e = MPI_Barrier(((mp_impl *)c->impl)->mc);
    MPI_UNLOCK();
    return e == MPI_SUCCESS ? 0 : mpi_error(e, "barrier on rank %d of %d", c->rank, c->size);
}

static int mp_split(comm *c, int color, comm **out) {
    mp_impl *m = c->impl;
    MPI_Comm nc = MPI_COMM_NULL;
    *out = NULL;
    MPI_LOCK();
    int e = MPI_Comm_split(m->mc, color < 0 ? MPI_UNDEFINED : color, c->rank, &nc);
    MPI_UNLOCK();
    if (e != MPI_SUCCESS) return mpi_error(e, "split on rank %d, colour %d", c->rank, color);
    if (nc != MPI_COMM_NULL) *out = mp_endpoint_new(nc, m->tag_ub);
    return 0;
}

/* Prints the reason naming this rank, then ends the whole job (never returns), except on an
 * endpoint broken by comm_mpi_interrupt (the job goes on without the lost rank). */
static void mp_abort(comm *c, const char *why) {
    if (mp_broken(c)) {   /* a rank was lost and the job goes on without it: no MPI_Abort */
        fprintf(stderr, "rank %d stopped its step: %s\n", c->world_rank, why ? why : "aborted");
        return;
    }
    fprintf(stderr, "rank %d failed: %s\n", c->world_rank, why ? why : "aborted");
    fflush(stderr);
    for (int i = 0; i < 1000 && pthread_mutex_trylock(&mpi_mu) != 0; i++) sleep_s(1e-3);  /* no MPI call under way */
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static void mp_free(comm *c) {
    mp_impl *m = c->impl;
    int fin = 0;
    MPI_LOCK();
    MPI_Finalized(&fin);
    if (!fin && !mp_broken(c)) { MPI_Comm_free(&m->mc); MPI_Comm_free(&m->mc2); }   /* broken: left */
    MPI_UNLOCK();
    free(m->world_of);
    free(m);
    free(c);
}

static int mp_world_rank_of(comm *c, int r) { return ((mp_impl *)c->impl)->world_of[r]; }

static const comm_vtable mp_vtable = {
    .name = "mpi",
    .isend = mp_isend, .irecv = mp_irecv, .test = mp_test, .wait = mp_wait, .waitany = mp_waitany,
    .allreduce_f32 = mp_allreduce_f32, .allreduce_f64 = mp_allreduce_f64,
    .ireduce_f32 = mp_ireduce_f32, .allgather_f32 = mp_allgather_f32,
    .barrier = mp_barrier, .split = mp_split, .abort = mp_abort, .free = mp_free,
    .world_rank_of = mp_world_rank_of,
};

int comm_mpi_available(void) { return 1; }

int comm_mpi_init(int *argc, char ***argv, comm **out) {
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited && MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        return pt_seterr("mpi: MPI_Init_thread failed (is this run under mpirun?)");
    if (inited) MPI_Query_thread(&provided);
    if (provided < MPI_THREAD_FUNNELED)
        return pt_seterr("mpi: MPI provides thread level %d, pipetrain needs FUNNELED", provided);
    mp_threaded = provided >= MPI_THREAD_SERIALIZED;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int *ub = NULL, flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    MPI_Comm mc;
    if (MPI_Comm_dup(MPI_COMM_WORLD, &mc) != MPI_SUCCESS)
        return pt_seterr("mpi: could not duplicate MPI_COMM_WORLD");
    *out = mp_endpoint_new(mc, flag && ub ? *ub : 32767);
    engine_start();
    return 0;
}

void comm_mpi_finalize(void) {
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    engine_stop();
    if (inited && !fin) MPI_Finalize();
}

/* The survivors' world (comm.h; comm_mpi_recover.c says why this works under Open MPI 4.1). */
int comm_mpi_survivors(const int *keep, int n, comm **out) {
    *out = NULL;
    int me = -1, size = 0, *ub = NULL, flag = 0;
    MPI_LOCK();
    MPI_Comm_rank(mp_job_world, &me);
    MPI_Comm_size(mp_job_world, &size);
    MPI_UNLOCK();
    int in = 0;
    for (int i = 0; i < n; i++) {
        if (keep[i] < 0 || keep[i] >= size || (i && keep[i] <= keep[i - 1]))
            return pt_seterr("mpi: survivors: keep[%d] = %d is not a rank of the %d-rank world in "
                             "increasing order", i, keep[i], size);
        in |= keep[i] == me;
    }
    if (!in) return 0;
    MPI_Group g, sg;
    MPI_Comm nc = MPI_COMM_NULL, mc = MPI_COMM_NULL;
    MPI_LOCK();
    MPI_Comm_group(mp_job_world, &g);
    MPI_Group_incl(g, n, keep, &sg);
    int e = MPI_Comm_create_group(mp_job_world, sg, 4200 + mp_epoch_now() % 100, &nc);
    if (e == MPI_SUCCESS) {
        MPI_Comm_set_errhandler(nc, MPI_ERRORS_RETURN);
        e = MPI_Comm_dup(nc, &mc);
    }
    MPI_Group_free(&g);
    MPI_Group_free(&sg);
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    MPI_UNLOCK();
    if (e != MPI_SUCCESS)
        return pt_seterr("mpi: rank %d: the survivors' communicator (%d ranks) could not be made (code %d)", me, n, e);
    mp_job_world = nc;   /* kept for the job's life: world ranks are counted in it from now on */
    *out = mp_endpoint_new(mc, flag && ub ? *ub : 32767);
    return 0;
}
