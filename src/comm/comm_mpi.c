/* MPI transport (Open MPI): one process per rank. Point-to-point maps onto MPI_Isend/MPI_Irecv
 * on a private duplicate of MPI_COMM_WORLD; waits poll MPI_Test with short sleeps so they can time
 * out; allreduce is built from MPI_Alltoallv + MPI_Allgatherv so it sums in rank order exactly
 * like the threads transport (bitwise equal results on every rank and across transports), and the
 * non-blocking reduction from MPI_Ialltoallv (+ MPI_Iallgatherv) the same way, advanced by test.
 * Not thread-safe beyond MPI_THREAD_FUNNELED: one thread per process calls this transport.
 *
 * The one place library code prints: abort writes "rank R failed: why" to stderr before
 * MPI_Abort ends the whole job (no other rank could report it). */
#include "comm/comm.h"
#include "util/pt.h"
#include <limits.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
    MPI_Comm mc;      /* owned: freed with the endpoint */
    int tag_ub;       /* largest valid tag (MPI_TAG_UB of the world) */
} mp_impl;

struct mp_coll;

typedef struct {
    MPI_Request rq;
    int is_send, peer, tag;
    size_t bytes;
    struct mp_coll *coll;   /* a non-blocking collective (ireduce), else NULL */
} mp_req;

/* A non-blocking rank-order sum: phase 0 the MPI_Ialltoallv of the slices, then (all) phase 1
 * the MPI_Iallgatherv of the summed slices. */
typedef struct mp_coll {
    float *buf;
    size_t n;
    int all, phase;
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

static comm *endpoint_new(MPI_Comm mc, int tag_ub) {
    mp_impl *m = pt_calloc(1, sizeof *m);
    m->mc = mc;
    m->tag_ub = tag_ub;
    MPI_Comm_set_errhandler(mc, MPI_ERRORS_RETURN);
    comm *c = pt_calloc(1, sizeof *c);
    c->vt = &mp_vtable;
    MPI_Comm_rank(mc, &c->rank);
    MPI_Comm_size(mc, &c->size);
    MPI_Comm_rank(MPI_COMM_WORLD, &c->world_rank);
    c->impl = m;
    return c;
}

static int check_args(comm *c, const char *what, int peer, int tag, size_t bytes) {
    mp_impl *m = c->impl;
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

static int mp_isend(comm *c, int dst, int tag, const void *buf, size_t bytes, comm_req **out) {
    if (check_args(c, "isend", dst, tag, bytes)) return -1;
    mp_req *r = pt_calloc(1, sizeof *r);
    *r = (mp_req){MPI_REQUEST_NULL, 1, dst, tag, bytes, NULL};
    int e = MPI_Isend(buf, (int)bytes, MPI_BYTE, dst, tag, ((mp_impl *)c->impl)->mc, &r->rq);
    if (e != MPI_SUCCESS) {
        free(r);
        return mpi_error(e, "isend from rank %d to rank %d tag %d", c->rank, dst, tag);
    }
    *out = (comm_req *)r;
    return 0;
}

static int mp_irecv(comm *c, int src, int tag, void *buf, size_t bytes, comm_req **out) {
    if (check_args(c, "irecv", src, tag, bytes)) return -1;
    mp_req *r = pt_calloc(1, sizeof *r);
    *r = (mp_req){MPI_REQUEST_NULL, 0, src, tag, bytes, NULL};
    int e = MPI_Irecv(buf, (int)bytes, MPI_BYTE, src, tag, ((mp_impl *)c->impl)->mc, &r->rq);
    if (e != MPI_SUCCESS) {
        free(r);
        return mpi_error(e, "irecv on rank %d from rank %d tag %d", c->rank, src, tag);
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

static int coll_test(comm *c, mp_req *r, int *done);

/* One MPI_Test; on completion checks the result and frees r. */
static int mp_test(comm *c, comm_req *req, int *done) {
    mp_req *r = (mp_req *)req;
    MPI_Status st;
    int flag = 0;
    *done = 0;
    if (r->coll) return coll_test(c, r, done);
    int e = MPI_Test(&r->rq, &flag, &st);
    if (e == MPI_SUCCESS && !flag) return 0;
    *done = 1;
    int rc = 0;
    if (!r->is_send) rc = recv_check(c, r, e, &st);
    else if (e != MPI_SUCCESS) rc = mpi_error(e, "send from rank %d to rank %d tag %d", c->rank, r->peer, r->tag);
    free(r);
    return rc;
}

static void sleep_s(double s) {
    struct timespec t = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&t, NULL);
}

/* Polls MPI_Test, sleeping 20 us growing to 320 us between polls, until done or the deadline.
 * On a timeout the request stays pending (it may be waited again). */
static int mp_wait(comm *c, comm_req *req, double timeout) {
    mp_req *r = (mp_req *)req;
    double t0 = pt_now(), nap = 20e-6;
    for (;;) {
        int done = 0;
        int peer = r->peer, tag = r->tag, is_send = r->is_send;
        size_t bytes = r->bytes;
        int coll = r->coll != NULL, rc = mp_test(c, req, &done);
        if (rc || done) return rc;
        if (timeout > 0 && pt_now() - t0 > timeout && coll)
            return pt_seterr("mpi: rank %d timed out after %.3g s in a non-blocking reduction of "
                             "%zu bytes over %d ranks (world rank %d): some rank never posted it",
                             c->rank, timeout, bytes, c->size, c->world_rank);
        if (timeout > 0 && pt_now() - t0 > timeout)
            return pt_seterr("mpi: rank %d timed out after %.3g s waiting to %s rank %d tag %d "
                             "(%zu bytes): the peer never %s", c->rank, timeout,
                             is_send ? "send to" : "receive from", peer, tag, bytes,
                             is_send ? "posted the receive" : "sent");
        sleep_s(nap);
        if (nap < 250e-6) nap *= 2;
    }
}

/* ---- collectives ----------------------------------------------------------------------- */

/* Every rank must pass the same count to collective `what`: one tiny MPI_Allreduce of (n, -n)
 * with MPI_MAX. */
static int check_counts(comm *c, size_t n, const char *what) {
    long long v[2] = {(long long)n, -(long long)n}, m[2];
    int e = MPI_Allreduce(v, m, 2, MPI_LONG_LONG, MPI_MAX, ((mp_impl *)c->impl)->mc);
    if (e != MPI_SUCCESS) return mpi_error(e, "%s on rank %d of %d", what, c->rank, c->size);
    if (m[0] != (long long)n || -m[1] != (long long)n)
        return pt_seterr("mpi: %s: ranks passed different counts (rank %d passed %zu; "
                         "min %lld, max %lld)", what, c->rank, n, -m[1], m[0]);
    if (n > INT_MAX) return pt_seterr("mpi: %s of %zu elements exceeds MPI's int count", what, n);
    return 0;
}

typedef void (*sum_fn)(void *out, const void **in, int k, size_t n);

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
    int e = MPI_Alltoallv(buf, cnt, dsp, t, scratch, rcnt, rdsp, t, mc);
    if (e != MPI_SUCCESS) { rc = mpi_error(e, "allreduce (alltoallv) on rank %d of %d", me, P); goto free_buffers; }
    for (int i = 0; i < P; i++) in[i] = scratch + (size_t)rdsp[i] * esz;
    sum((char *)buf + (size_t)dsp[me] * esz, in, P, (size_t)cnt[me]);
    e = MPI_Allgatherv(MPI_IN_PLACE, 0, t, buf, cnt, dsp, t, mc);
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
    *r = (mp_req){MPI_REQUEST_NULL, 0, -1, -1, n * sizeof(float), k};
    int e = MPI_Ialltoallv(buf, k->cnt, k->dsp, MPI_FLOAT, k->scratch, k->rcnt, k->rdsp, MPI_FLOAT,
                           ((mp_impl *)c->impl)->mc, &r->rq);
    if (e != MPI_SUCCESS) {
        coll_free(k);
        free(r);
        return mpi_error(e, "ireduce (ialltoallv) on rank %d of %d", me, P);
    }
    *out = (comm_req *)r;
    return 0;
}

/* Advances a collective: after the alltoallv the rank-order sum of this rank's slice, then (all)
 * the allgatherv. Frees r when done or failed. */
static int coll_test(comm *c, mp_req *r, int *done) {
    mp_coll *k = r->coll;
    int flag = 0, me = c->rank, P = c->size, rc = 0;
    int e = MPI_Test(&r->rq, &flag, MPI_STATUS_IGNORE);
    if (e != MPI_SUCCESS) rc = mpi_error(e, "ireduce on rank %d of %d", me, P);
    else if (!flag) return 0;
    else if (k->phase == 0) {
        const void **in = pt_malloc((size_t)P * sizeof *in);
        for (int i = 0; i < P; i++) in[i] = k->scratch + k->rdsp[i];
        sum_f32(k->buf + k->dsp[me], in, P, (size_t)k->cnt[me]);
        free(in);
        k->phase = 1;
        if (k->all) {
            e = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, k->buf, k->cnt, k->dsp, MPI_FLOAT,
                                ((mp_impl *)c->impl)->mc, &r->rq);
            if (e == MPI_SUCCESS) return 0;
            rc = mpi_error(e, "ireduce (iallgatherv) on rank %d of %d", me, P);
        }
    }
    *done = 1;
    coll_free(k);
    free(r);
    return rc;
}

static int mp_allgather_f32(comm *c, float *buf, size_t n) {
    if (check_counts(c, n, "allgather")) return -1;
    if (c->size == 1 || n == 0) return 0;
    int *cnt = pt_malloc(2 * (size_t)c->size * sizeof *cnt);
    slices(n, c->size, cnt, cnt + c->size);
    int e = MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, buf, cnt, cnt + c->size, MPI_FLOAT,
                           ((mp_impl *)c->impl)->mc);
    free(cnt);
    return e == MPI_SUCCESS ? 0 : mpi_error(e, "allgather on rank %d of %d", c->rank, c->size);
}

static int mp_barrier(comm *c) {
    int e = MPI_Barrier(((mp_impl *)c->impl)->mc);
    return e == MPI_SUCCESS ? 0 : mpi_error(e, "barrier on rank %d of %d", c->rank, c->size);
}

static int mp_split(comm *c, int color, comm **out) {
    mp_impl *m = c->impl;
    MPI_Comm nc = MPI_COMM_NULL;
    *out = NULL;
    int e = MPI_Comm_split(m->mc, color < 0 ? MPI_UNDEFINED : color, c->rank, &nc);
    if (e != MPI_SUCCESS) return mpi_error(e, "split on rank %d, colour %d", c->rank, color);
    if (nc != MPI_COMM_NULL) *out = endpoint_new(nc, m->tag_ub);
    return 0;
}

/* Prints the reason naming this rank, then ends the whole job (never returns). */
static void mp_abort(comm *c, const char *why) {
    fprintf(stderr, "rank %d failed: %s\n", c->world_rank, why ? why : "aborted");
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static void mp_free(comm *c) {
    mp_impl *m = c->impl;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Comm_free(&m->mc);
    free(m);
    free(c);
}

static const comm_vtable mp_vtable = {
    .name = "mpi",
    .isend = mp_isend, .irecv = mp_irecv, .test = mp_test, .wait = mp_wait,
    .allreduce_f32 = mp_allreduce_f32, .allreduce_f64 = mp_allreduce_f64,
    .ireduce_f32 = mp_ireduce_f32, .allgather_f32 = mp_allgather_f32,
    .barrier = mp_barrier, .split = mp_split, .abort = mp_abort, .free = mp_free,
};

int comm_mpi_available(void) { return 1; }

int comm_mpi_init(int *argc, char ***argv, comm **out) {
    int inited = 0, provided = 0;
    MPI_Initialized(&inited);
    if (!inited && MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
        return pt_seterr("mpi: MPI_Init_thread failed (is this run under mpirun?)");
    if (!inited && provided < MPI_THREAD_FUNNELED)
        return pt_seterr("mpi: MPI provides thread level %d, pipetrain needs FUNNELED", provided);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int *ub = NULL, flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    MPI_Comm mc;
    if (MPI_Comm_dup(MPI_COMM_WORLD, &mc) != MPI_SUCCESS)
        return pt_seterr("mpi: could not duplicate MPI_COMM_WORLD");
    *out = endpoint_new(mc, flag && ub ? *ub : 32767);
    return 0;
}

void comm_mpi_finalize(void) {
    int inited = 0, fin = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&fin);
    if (inited && !fin) MPI_Finalize();
}
