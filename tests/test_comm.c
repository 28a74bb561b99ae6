/* Transports in one process: the threads transport (messages, matching, sizes, timeouts, abort,
 * collectives, split) and the fault-injection wrapper around it (delays, a rank that dies).
 * Rank bodies run on threads and record what they saw; only the main thread runs CHECKs.
 * The MPI transport is tested by tests/test_comm_mpi.sh. */
#include "test.h"
#include "comm/comm.h"
#include "util/pt.h"
#include <math.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#define MAX_RANKS 8
#define WAIT_S 10.0          /* a generous bound for waits that must succeed (noisy machine) */

/* One run of `body` on `n` threads, rank r with endpoint cs[r]. Bodies report through arg. */
typedef struct { comm *c; void *arg; void (*body)(comm *, void *); } rank_job;

static void *rank_main(void *p) {
    rank_job *j = p;
    j->body(j->c, j->arg);
    return NULL;
}

static void run_ranks(comm **cs, int n, void (*body)(comm *, void *), void *arg) {
    pthread_t th[MAX_RANKS];
    rank_job jobs[MAX_RANKS];
    for (int r = 0; r < n; r++) {
        jobs[r] = (rank_job){cs[r], arg, body};
        pthread_create(&th[r], NULL, rank_main, &jobs[r]);
    }
    for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
}

/* A world of n threads endpoints, run body, free. */
static void run_world(int n, void (*body)(comm *, void *), void *arg) {
    comm *cs[MAX_RANKS];
    if (comm_threads_create(n, cs)) { printf("FAIL create: %s\n", pt_err()); exit(1); }
    run_ranks(cs, n, body, arg);
    for (int r = 0; r < n; r++) comm_free(cs[r]);
}

/* Per-rank outcome: 0 ok, else the first error and where. */
typedef struct { int bad[MAX_RANKS]; char msg[MAX_RANKS][300]; double t[MAX_RANKS]; } outcome;

static void note(outcome *o, int r, const char *what) {
    if (o->bad[r]) return;
    o->bad[r] = 1;
    snprintf(o->msg[r], sizeof o->msg[r], "rank %d: %s: %s", r, what, pt_err());
}

static int first_bad(const outcome *o, int n) {
    for (int r = 0; r < n; r++) if (o->bad[r]) return r;
    return -1;
}

static int send_wait(comm *c, int dst, int tag, const void *b, size_t n) {
    comm_req *q;
    return comm_isend(c, dst, tag, b, n, &q) || comm_wait(c, q, WAIT_S);
}

static int recv_wait(comm *c, int src, int tag, void *b, size_t n) {
    comm_req *q;
    return comm_irecv(c, src, tag, b, n, &q) || comm_wait(c, q, WAIT_S);
}

/* ---- point to point ------------------------------------------------------------------ */

/* comm_waitany: rank 0 waits on two receives; nothing sent yet, a short wait times out (*which
 * -1, both pending); then rank 1 sends the second one's, then (told) the first one's: each wait
 * returns that one, its entry NULL, its data there. */
static void body_waitany(comm *c, void *arg) {
    outcome *o = arg;
    int v[2] = { 0, 0 }, go = 1, which = -2;
    comm_req *q[2];
    if (c->rank == 1) {
        int a = 11, b = 22;
        if (recv_wait(c, 0, 9, &go, sizeof go) || send_wait(c, 0, 2, &b, sizeof b) ||
            recv_wait(c, 0, 10, &go, sizeof go) || send_wait(c, 0, 1, &a, sizeof a)) note(o, 1, "io");
        return;
    }
    if (comm_irecv(c, 1, 1, &v[0], sizeof v[0], &q[0]) || comm_irecv(c, 1, 2, &v[1], sizeof v[1], &q[1])) { note(o, 0, "irecv"); return; }
    if (comm_waitany(c, q, 2, 0.05, &which) || which != -1 || !q[0] || !q[1]) {
        snprintf(o->msg[0], 300, "nothing sent: which %d (want -1), both pending %d", which, q[0] && q[1]), o->bad[0] = 1;
        return;
    }
    if (send_wait(c, 1, 9, &go, sizeof go) || comm_waitany(c, q, 2, WAIT_S, &which) || which != 1 || q[1] || v[1] != 22) {
        snprintf(o->msg[0], 300, "second sent: which %d (want 1), value %d", which, v[1]), o->bad[0] = 1;
        return;
    }
    if (send_wait(c, 1, 10, &go, sizeof go) || comm_waitany(c, q, 2, WAIT_S, &which) || which != 0 || q[0] || v[0] != 11)
        snprintf(o->msg[0], 300, "first sent: which %d (want 0), value %d", which, v[0]), o->bad[0] = 1;
}

static void faulty_waitany(comm *c, void *arg) {   /* over a wrapper without waitany: the fallback */
    comm *f = NULL;
    if (comm_faulty_borrow(c, -1, &f) < 0) { note(arg, c->rank, "wrap"); return; }
    body_waitany(f, arg);
    comm_free(f);
}

static void test_waitany(void) {
    outcome o = {0}, of = {0};
    run_world(2, body_waitany, &o);
    int b = first_bad(&o, 2);
    CHECK("threads waitany: times out pending, then returns each as it completes", b < 0, "%s", b < 0 ? "" : o.msg[b]);
    run_world(2, faulty_waitany, &of);
    b = first_bad(&of, 2);
    CHECK("faulty waitany (the fallback): the same", b < 0, "%s", b < 0 ? "" : of.msg[b]);
}

#define PINGS 200
static void body_pingpong(comm *c, void *arg) {
    outcome *o = arg;
    int v = 0;
    for (int i = 0; i < PINGS; i++) {
        if (c->rank == 0) {
            int w = i * 2;
            if (send_wait(c, 1, 7, &w, sizeof w) || recv_wait(c, 1, 8, &v, sizeof v)) { note(o, 0, "io"); return; }
            if (v != w + 1) { snprintf(o->msg[0], 300, "round %d: got %d want %d", i, v, w + 1); o->bad[0] = 1; return; }
        } else {
            if (recv_wait(c, 0, 7, &v, sizeof v)) { note(o, 1, "recv"); return; }
            v++;
            if (send_wait(c, 0, 8, &v, sizeof v)) { note(o, 1, "send"); return; }
        }
    }
}

static void test_pingpong(void) {
    outcome o = {0};
    run_world(2, body_pingpong, &o);
    int b = first_bad(&o, 2);
    CHECK("threads ping-pong 200 rounds", b < 0, "%s", b < 0 ? "" : o.msg[b]);
}

#define NTAGS 16
/* Rank 0 sends one message per tag in order; rank 1 posts receives in reverse tag order. */
static void body_tags(comm *c, void *arg) {
    outcome *o = arg;
    comm_req *q[NTAGS];
    int v[NTAGS];
    if (c->rank == 0) {
        for (int t = 0; t < NTAGS; t++) { v[t] = 1000 + t; if (comm_isend(c, 1, t, &v[t], sizeof v[t], &q[t])) { note(o, 0, "isend"); return; } }
        for (int t = 0; t < NTAGS; t++) if (comm_wait(c, q[t], WAIT_S)) { note(o, 0, "wait"); return; }
        return;
    }
    for (int t = NTAGS - 1; t >= 0; t--) if (comm_irecv(c, 0, t, &v[t], sizeof v[t], &q[t])) { note(o, 1, "irecv"); return; }
    for (int t = NTAGS - 1; t >= 0; t--) if (comm_wait(c, q[t], WAIT_S)) { note(o, 1, "wait"); return; }
    for (int t = 0; t < NTAGS; t++)
        if (v[t] != 1000 + t) { o->bad[1] = 1; snprintf(o->msg[1], 300, "tag %d got %d", t, v[t]); return; }
}

static void test_tags(void) {
    outcome o = {0};
    run_world(2, body_tags, &o);
    int b = first_bad(&o, 2);
    CHECK("threads many tags matched out of order", b < 0, "%s", b < 0 ? "" : o.msg[b]);
}

#define NFIFO 64
/* Same tag, many messages: half the receives posted before the sends start, half after. Two
 * tags interleaved must each keep their own order. */
static void body_fifo(comm *c, void *arg) {
    outcome *o = arg;
    comm_req *q[2 * NFIFO];
    int v[2 * NFIFO];
    if (c->rank == 0) {
        if (comm_barrier(c)) { note(o, 0, "barrier"); return; }
        for (int i = 0; i < 2 * NFIFO; i++) {
            v[i] = i;
            if (comm_isend(c, 1, 3 + (i & 1), &v[i], sizeof v[i], &q[i])) { note(o, 0, "isend"); return; }
        }
        for (int i = 0; i < 2 * NFIFO; i++) if (comm_wait(c, q[i], WAIT_S)) { note(o, 0, "wait"); return; }
        return;
    }
    for (int i = 0; i < NFIFO; i++)
        if (comm_irecv(c, 0, 3 + (i & 1), &v[i], sizeof v[i], &q[i])) { note(o, 1, "irecv"); return; }
    if (comm_barrier(c)) { note(o, 1, "barrier"); return; }
    for (int i = NFIFO; i < 2 * NFIFO; i++)
        if (comm_irecv(c, 0, 3 + (i & 1), &v[i], sizeof v[i], &q[i])) { note(o, 1, "irecv"); return; }
    for (int i = 0; i < 2 * NFIFO; i++) if (comm_wait(c, q[i], WAIT_S)) { note(o, 1, "wait"); return; }
    for (int i = 0; i < 2 * NFIFO; i++)
        if (v[i] != i) { o->bad[1] = 1; snprintf(o->msg[1], 300, "receive %d got message %d", i, v[i]); return; }
}

static void test_fifo(void) {
    outcome o = {0};
    run_world(2, body_fifo, &o);
    int b = first_bad(&o, 2);
    CHECK("threads FIFO per (src, dst, tag)", b < 0, "%s", b < 0 ? "" : o.msg[b]);
}

/* Single-threaded: both endpoints driven by the main thread (isend/irecv never block). */
static void test_size_mismatch(void) {
    comm *cs[2];
    comm_threads_create(2, cs);
    double big[2] = {1, 2};
    float small[1];
    comm_req *s, *r;
    /* send first, then a receive that is too small */
    int rc = comm_isend(cs[0], 1, 9, big, sizeof big, &s);
    int rc2 = comm_irecv(cs[1], 0, 9, small, sizeof small, &r);
    const char *e = pt_err();
    CHECK("size mismatch: receive fails", rc == 0 && rc2 == -1, "rc %d %d", rc, rc2);
    CHECK("size mismatch error names sizes, ranks, tag",
          strstr(e, "16 bytes") && strstr(e, "4-byte") && strstr(e, "rank 0") && strstr(e, "rank 1") &&
          strstr(e, "tag 9"), "%s", e);
    rc = comm_wait(cs[0], s, WAIT_S);
    CHECK("size mismatch: the send fails too", rc == -1 && strstr(pt_err(), "16 bytes"), "rc %d: %s", rc, pt_err());
    /* receive first, then a send that does not fit */
    rc = comm_irecv(cs[1], 0, 10, small, sizeof small, &r);
    rc2 = comm_isend(cs[0], 1, 10, big, sizeof big, &s);
    CHECK("size mismatch, receive posted first: send fails", rc == 0 && rc2 == -1 && strstr(pt_err(), "tag 10"),
          "rc %d %d: %s", rc, rc2, pt_err());
    rc = comm_wait(cs[1], r, WAIT_S);
    CHECK("size mismatch, receive posted first: receive fails", rc == -1 && strstr(pt_err(), "4-byte"),
          "rc %d: %s", rc, pt_err());
    comm_free(cs[0]); comm_free(cs[1]);
}

static void test_send_never_blocks(void) {
    comm *cs[2];
    comm_threads_create(2, cs);
    int v = 42, got = 0, done = -1, done2 = -1;
    comm_req *s, *r;
    double t0 = pt_now();
    int rc = comm_isend(cs[0], 1, 1, &v, sizeof v, &s);
    CHECK("isend without a receiver returns", rc == 0, "%s", pt_err());
    comm_test(cs[0], s, &done);
    CHECK("test: not done before a receive matched", done == 0, "done %d", done);
    rc = comm_wait(cs[0], s, 0.05);
    CHECK("wait times out while unmatched (send side names peer and tag)",
          rc == -1 && strstr(pt_err(), "rank 1") && strstr(pt_err(), "tag 1"), "rc %d: %s", rc, pt_err());
    comm_irecv(cs[1], 0, 1, &got, sizeof got, &r);
    comm_test(cs[0], s, &done);
    comm_test(cs[1], r, &done2);
    CHECK("test: done after the receive matched", done == 1 && done2 == 1 && got == 42,
          "done %d %d got %d", done, done2, got);
    (void)t0;
    comm_free(cs[0]); comm_free(cs[1]);
}

/* A rank may message itself (stages of one rank in interleaved schedules); in either order. */
static void test_self(void) {
    comm *cs[1];
    comm_threads_create(1, cs);
    int a = 5, b = 6, ga = 0, gb = 0;
    comm_req *s1, *r1, *s2, *r2;
    int rc = comm_isend(cs[0], 0, 1, &a, sizeof a, &s1) || comm_irecv(cs[0], 0, 1, &ga, sizeof ga, &r1) ||
             comm_irecv(cs[0], 0, 2, &gb, sizeof gb, &r2) || comm_isend(cs[0], 0, 2, &b, sizeof b, &s2) ||
             comm_wait(cs[0], s1, WAIT_S) || comm_wait(cs[0], r1, WAIT_S) ||
             comm_wait(cs[0], s2, WAIT_S) || comm_wait(cs[0], r2, WAIT_S);
    CHECK("message to self, send or receive first", !rc && ga == 5 && gb == 6, "%s", pt_err());
    comm_free(cs[0]);
}

static void test_bad_args(void) {
    comm *cs[2];
    comm_threads_create(2, cs);
    comm_req *q;
    int v = 0;
    CHECK("send to a rank outside the communicator fails", comm_isend(cs[0], 2, 0, &v, 4, &q) == -1 &&
          strstr(pt_err(), "peer 2"), "%s", pt_err());
    CHECK("negative tag fails", comm_irecv(cs[0], 1, -1, &v, 4, &q) == -1 && strstr(pt_err(), "tag -1"),
          "%s", pt_err());
    comm *none[1];
    CHECK("world of 0 ranks fails", comm_threads_create(0, none) == -1, "no error");
    /* free drops what the caller abandoned (no leak under ASan): an unmatched send and receive,
     * and a matched pair never waited for (as after an abort) */
    int w = 0;
    comm_isend(cs[0], 1, 5, &v, 4, &q);
    comm_irecv(cs[1], 0, 6, &v, 4, &q);
    comm_isend(cs[0], 1, 7, &v, 4, &q);
    comm_irecv(cs[1], 0, 7, &w, 4, &q);
    comm_free(cs[0]); comm_free(cs[1]);
}

static void test_wait_timeout(void) {
    comm *cs[2];
    comm_threads_create(2, cs);
    float x[4];
    comm_req *r;
    comm_irecv(cs[1], 0, 77, x, sizeof x, &r);
    double t0 = pt_now();
    int rc = comm_wait(cs[1], r, 0.1);
    double dt = pt_now() - t0;
    const char *e = pt_err();
    CHECK("wait timeout fails", rc == -1 && dt >= 0.09, "rc %d after %.3f s", rc, dt);
    CHECK("wait timeout error names the peer and tag", strstr(e, "rank 0") && strstr(e, "tag 77"), "%s", e);
    comm_free(cs[0]); comm_free(cs[1]);
}

/* ---- collectives ----------------------------------------------------------------------- */

#define AR_RANKS 4
static const size_t ar_sizes[] = {0, 1, 7, 1001, 65537};
#define N_AR_SIZES (sizeof ar_sizes / sizeof ar_sizes[0])

/* Values whose float sum depends on the order: big and small magnitudes mixed. */
static double ar_value(int rank, size_t i) {
    double big = (i + rank) % 3 == 0 ? 1e8 : 1.0;
    return (rank % 2 ? -1 : 1) * big * (1.0 + 0.1 * (double)((i * 7 + rank * 13) % 17)) + 0.37 * rank;
}

typedef struct { float *f[AR_RANKS][N_AR_SIZES]; double *d[AR_RANKS][N_AR_SIZES]; outcome o; } ar_state;

static void body_allreduce(comm *c, void *arg) {
    ar_state *st = arg;
    for (size_t k = 0; k < N_AR_SIZES; k++) {
        size_t n = ar_sizes[k];
        float *f = st->f[c->rank][k];
        double *d = st->d[c->rank][k];
        for (size_t i = 0; i < n; i++) { f[i] = (float)ar_value(c->rank, i); d[i] = ar_value(c->rank, i); }
        if (comm_allreduce_f32(c, n ? f : NULL, n) || comm_allreduce_f64(c, n ? d : NULL, n)) {
            note(&st->o, c->rank, "allreduce");
            return;
        }
    }
}

static void test_allreduce(void) {
    ar_state *st = pt_calloc(1, sizeof *st);
    for (int r = 0; r < AR_RANKS; r++)
        for (size_t k = 0; k < N_AR_SIZES; k++) {
            st->f[r][k] = pt_malloc((ar_sizes[k] + 1) * sizeof(float));
            st->d[r][k] = pt_malloc((ar_sizes[k] + 1) * sizeof(double));
        }
    run_world(AR_RANKS, body_allreduce, st);
    int b = first_bad(&st->o, AR_RANKS);
    CHECK("allreduce runs for sizes 0, 1, 7, 1001, 65537", b < 0, "%s", b < 0 ? "" : st->o.msg[b]);
    int eq_f = 1, eq_d = 1, ord_f = 1, ord_d = 1;
    for (size_t k = 0; k < N_AR_SIZES; k++)
        for (size_t i = 0; i < ar_sizes[k]; i++) {
            float sf = (float)ar_value(0, i);
            double sd = ar_value(0, i);
            for (int r = 1; r < AR_RANKS; r++) { sf += (float)ar_value(r, i); sd += ar_value(r, i); }
            ord_f &= memcmp(&st->f[0][k][i], &sf, sizeof sf) == 0;
            ord_d &= memcmp(&st->d[0][k][i], &sd, sizeof sd) == 0;
            for (int r = 1; r < AR_RANKS; r++) {
                eq_f &= memcmp(&st->f[r][k][i], &st->f[0][k][i], sizeof(float)) == 0;
                eq_d &= memcmp(&st->d[r][k][i], &st->d[0][k][i], sizeof(double)) == 0;
            }
        }
    CHECK("allreduce f32 bitwise equal on all ranks", eq_f, "differs");
    CHECK("allreduce f64 bitwise equal on all ranks", eq_d, "differs");
    CHECK("allreduce f32 sums in rank order (bitwise)", ord_f, "differs from ((r0+r1)+r2)+r3");
    CHECK("allreduce f64 sums in rank order (bitwise)", ord_d, "differs from ((r0+r1)+r2)+r3");
    for (int r = 0; r < AR_RANKS; r++)
        for (size_t k = 0; k < N_AR_SIZES; k++) { free(st->f[r][k]); free(st->d[r][k]); }
    free(st);
}

static void body_count_mismatch(comm *c, void *arg) {
    outcome *o = arg;
    float x[3] = {1, 2, 3};
    if (comm_allreduce_f32(c, x, c->rank == 2 ? 3 : 2) == 0) { o->bad[c->rank] = 1; return; }
    snprintf(o->msg[c->rank], 300, "%s", pt_err());
    if (comm_allreduce_f32(c, x, 3)) note(o, c->rank, "allreduce after a failed one");
}

static void test_allreduce_mismatch(void) {
    outcome o = {0};
    run_world(3, body_count_mismatch, &o);
    int all = 1;
    for (int r = 0; r < 3; r++) all &= !o.bad[r] && strstr(o.msg[r], "rank 2 passed 3") != NULL;
    CHECK("allreduce with different counts fails on every rank, naming the rank", all,
          "%s | %s | %s", o.msg[0], o.msg[1], o.msg[2]);
}

/* Non-blocking reductions: ireduce (all = 1) and ireduce (all = 0) + allgather give the
 * allreduce's bits; two are in flight at once on one communicator, waited in reverse order. */
typedef struct { float *ref[AR_RANKS][N_AR_SIZES], *all[AR_RANKS][N_AR_SIZES], *rs[AR_RANKS][N_AR_SIZES]; outcome o; } ir_state;

static void body_ireduce(comm *c, void *arg) {
    ir_state *st = arg;
    for (size_t k = 0; k < N_AR_SIZES; k++) {
        size_t n = ar_sizes[k];
        float *f = st->ref[c->rank][k], *g = st->all[c->rank][k], *h = st->rs[c->rank][k];
        for (size_t i = 0; i < n; i++) f[i] = g[i] = h[i] = (float)ar_value(c->rank, i);
        comm_req *qa, *qb;
        if (comm_allreduce_f32(c, f, n) || comm_ireduce_f32(c, g, n, 1, &qa) ||
            comm_ireduce_f32(c, h, n, 0, &qb)) { note(&st->o, c->rank, "post"); return; }
        if (c->rank % 2) usleep(2000);    /* some ranks wait late: progress must not need them */
        if (comm_wait(c, qb, WAIT_S) || comm_wait(c, qa, WAIT_S) || comm_allgather_f32(c, h, n)) {
            note(&st->o, c->rank, "wait/allgather");
            return;
        }
    }
}

/* Runs body_ireduce on `world` endpoints (plain or wrapped) and checks the bits. */
static void check_ireduce(comm **cs, const char *what) {
    ir_state *st = pt_calloc(1, sizeof *st);
    for (int r = 0; r < AR_RANKS; r++)
        for (size_t k = 0; k < N_AR_SIZES; k++) {
            st->ref[r][k] = pt_malloc((ar_sizes[k] + 1) * sizeof(float));
            st->all[r][k] = pt_malloc((ar_sizes[k] + 1) * sizeof(float));
            st->rs[r][k] = pt_malloc((ar_sizes[k] + 1) * sizeof(float));
        }
    run_ranks(cs, AR_RANKS, body_ireduce, st);
    int b = first_bad(&st->o, AR_RANKS), eq_all = 1, eq_rs = 1;
    for (int r = 0; r < AR_RANKS; r++)
        for (size_t k = 0; k < N_AR_SIZES; k++) {
            size_t bytes = ar_sizes[k] * sizeof(float);
            eq_all &= memcmp(st->all[r][k], st->ref[r][k], bytes) == 0;
            eq_rs &= memcmp(st->rs[r][k], st->ref[r][k], bytes) == 0;
            free(st->ref[r][k]); free(st->all[r][k]); free(st->rs[r][k]);
        }
    char name[160];
    snprintf(name, sizeof name, "%s: ireduce and allgather run (two in flight, waited in reverse)", what);
    CHECK(name, b < 0, "%s", b < 0 ? "" : st->o.msg[b]);
    snprintf(name, sizeof name, "%s: ireduce (all) equals allreduce bitwise on every rank", what);
    CHECK(name, b < 0 && eq_all, "differs");
    snprintf(name, sizeof name, "%s: ireduce (slices) + allgather equals allreduce bitwise", what);
    CHECK(name, b < 0 && eq_rs, "differs");
    free(st);
}

static void test_ireduce(void) {
    comm *cs[AR_RANKS];
    comm_threads_create(AR_RANKS, cs);
    check_ireduce(cs, "threads");
    for (int r = 0; r < AR_RANKS; r++) comm_free(cs[r]);
}

/* Reductions posted on two sub-communicators in opposite orders by different ranks, all waited
 * at the end: non-blocking collectives on different communicators never wait for each other. */
static void body_icrossed(comm *c, void *arg) {
    outcome *o = arg;
    comm *sub[2];
    float x[2][5];
    comm_req *q[2];
    if (comm_split(c, 0, &sub[0]) || comm_split(c, c->rank < 2 ? 0 : 1, &sub[1])) { note(o, c->rank, "split"); return; }
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < 5; i++) x[k][i] = (float)(c->rank + k + i);
    for (int j = 0; j < 2; j++) {
        int k = c->rank % 2 ? 1 - j : j;
        if (comm_ireduce_f32(sub[k], x[k], 5, 1, &q[k])) { note(o, c->rank, "ireduce"); return; }
    }
    if (comm_wait(sub[1], q[1], WAIT_S) || comm_wait(sub[0], q[0], WAIT_S)) note(o, c->rank, "wait");
    else if (x[0][0] != 6 || x[1][4] != (c->rank < 2 ? 1 + 10 : 5 + 10)) {
        o->bad[c->rank] = 1;
        snprintf(o->msg[c->rank], 300, "rank %d: sums %g %g", c->rank, x[0][0], x[1][4]);
    }
    comm_free(sub[0]);
    comm_free(sub[1]);
}

static void test_ireduce_crossed(void) {
    outcome o = {0};
    run_world(4, body_icrossed, &o);
    int b = first_bad(&o, 4);
    CHECK("ireduce on two communicators posted in opposite orders: no deadlock, right sums", b < 0,
          "%s", b < 0 ? "" : o.msg[b]);
}

/* A rank that never posts: the others' waits end with a timeout naming what they waited for. */
static void body_ireduce_timeout(comm *c, void *arg) {
    outcome *o = arg;
    float x[3] = {1, 2, 3};
    comm_req *q;
    if (c->rank == 2) return;
    if (comm_ireduce_f32(c, x, 3, 1, &q)) { note(o, c->rank, "post"); return; }
    if (comm_wait(c, q, 0.2) == 0) { o->bad[c->rank] = 1; return; }
    snprintf(o->msg[c->rank], 300, "%s", pt_err());
}

static void test_ireduce_timeout(void) {
    outcome o = {0};
    run_world(3, body_ireduce_timeout, &o);
    CHECK("ireduce: a rank that never posts makes the others time out, saying how many posted",
          !o.bad[0] && strstr(o.msg[0], "timed out") && strstr(o.msg[0], "2 of them posted"), "%s", o.msg[0]);
}

#define SPLIT_ROUNDS 50
/* 6 ranks: colours rank % 2 (two sub-communicators of 3) and colour -1 for rank 5 in a second
 * split. The two sub-communicators run allreduces concurrently and must not mix. */
typedef struct { outcome o; int sub_rank[6], sub_size[6]; int none_ok[6]; char timeout_msg[2][300]; } split_state;

static void body_split(comm *c, void *arg) {
    split_state *st = arg;
    comm *sub = NULL, *sub2 = NULL;
    if (comm_split(c, c->rank % 2, &sub)) { note(&st->o, c->rank, "split"); return; }
    st->sub_rank[c->rank] = sub->rank;
    st->sub_size[c->rank] = sub->size;
    for (int i = 0; i < SPLIT_ROUNDS; i++) {
        double x[3] = {c->rank, 1, i};
        if (comm_allreduce_f64(sub, x, 3)) { note(&st->o, c->rank, "sub allreduce"); break; }
        double want = c->rank % 2 ? 1 + 3 + 5 : 0 + 2 + 4;
        if (x[0] != want || x[1] != 3 || x[2] != 3 * i) {
            st->o.bad[c->rank] = 1;
            snprintf(st->o.msg[c->rank], 300, "rank %d round %d: sum %g %g %g", c->rank, i, x[0], x[1], x[2]);
            break;
        }
    }
    /* point to point inside the sub-communicator uses sub ranks */
    int v = c->rank, got = -1;
    if (sub->rank == 0) { if (send_wait(sub, 1, 0, &v, sizeof v)) note(&st->o, c->rank, "sub send"); }
    else if (sub->rank == 1) {
        if (recv_wait(sub, 0, 0, &got, sizeof got)) note(&st->o, c->rank, "sub recv");
        else if (got != c->rank - 2) { st->o.bad[c->rank] = 1; snprintf(st->o.msg[c->rank], 300, "got %d", got); }
    }
    if (sub->rank == 2) {   /* a timeout inside a sub-communicator names the world ranks too */
        comm_req *q;
        if (comm_irecv(sub, 0, 9, &got, sizeof got, &q) == 0 && comm_wait(sub, q, 0.02) == -1)
            snprintf(st->timeout_msg[c->rank % 2], 300, "%s", pt_err());
    }
    if (comm_split(c, c->rank == 5 ? -1 : 0, &sub2)) note(&st->o, c->rank, "split 2");
    st->none_ok[c->rank] = c->rank == 5 ? sub2 == NULL : sub2 != NULL && sub2->size == 5;
    if (sub2 && comm_barrier(sub2)) note(&st->o, c->rank, "sub2 barrier");
    if (comm_barrier(c)) note(&st->o, c->rank, "world barrier");
    comm_free(sub2);
    comm_free(sub);
}

static void test_split(void) {
    split_state st = {0};
    run_world(6, body_split, &st);
    int b = first_bad(&st.o, 6);
    CHECK("split: concurrent allreduces on two sub-communicators", b < 0, "%s", b < 0 ? "" : st.o.msg[b]);
    int ranks_ok = 1, none_ok = 1;
    for (int r = 0; r < 6; r++) {
        ranks_ok &= st.sub_rank[r] == r / 2 && st.sub_size[r] == 3;
        none_ok &= st.none_ok[r];
    }
    CHECK("split: sub ranks ordered by parent rank", ranks_ok, "rank 5 -> %d", st.sub_rank[5]);
    CHECK("split: colour -1 gives no communicator", none_ok, "wrong");
    CHECK("split: a timeout names sub and world ranks",
          strstr(st.timeout_msg[0], "rank 0 tag 9") && strstr(st.timeout_msg[0], "world ranks 0 and 4") &&
          strstr(st.timeout_msg[1], "world ranks 1 and 5"), "%s | %s", st.timeout_msg[0], st.timeout_msg[1]);
}

/* ---- abort ----------------------------------------------------------------------------- */

#define ABORT_WAIT_S 5.0     /* the waits that an abort must cut short */
static void body_abort(comm *c, void *arg) {
    outcome *o = arg;
    double t0 = pt_now();
    if (c->rank == 2) {
        usleep(50000);
        comm_abort(c, "injected failure");
        return;
    }
    float x;
    comm_req *r;
    int rc;
    if (c->rank == 3) rc = comm_barrier(c);        /* a collective is cut short too */
    else rc = comm_irecv(c, (c->rank + 1) % 4, 5, &x, sizeof x, &r) || comm_wait(c, r, ABORT_WAIT_S);
    o->t[c->rank] = pt_now() - t0;
    if (rc == 0) { o->bad[c->rank] = 1; snprintf(o->msg[c->rank], 300, "rank %d: no error", c->rank); return; }
    snprintf(o->msg[c->rank], 300, "%s", pt_err());
}

static void test_abort(void) {
    outcome o = {0};
    run_world(4, body_abort, &o);
    int named = 1, fast = 1;
    for (int r = 0; r < 4; r++) {
        if (r == 2) continue;
        named &= !o.bad[r] && strstr(o.msg[r], "rank 2 failed: injected failure") != NULL;
        fast &= o.t[r] < ABORT_WAIT_S;
    }
    CHECK("abort: every other rank's wait fails naming the rank", named, "%s | %s | %s", o.msg[0], o.msg[1], o.msg[3]);
    CHECK("abort: waits end before their timeout", fast, "%.2f %.2f %.2f s", o.t[0], o.t[1], o.t[3]);
}

/* ---- fault injection ------------------------------------------------------------------- */

/* A world whose endpoints are all wrapped: rank r gets (slow[r], delay[r], die[r]). */
static void run_faulty_world(int n, const int *slow, const double *delay, const int *die,
                             void (*body)(comm *, void *), void *arg) {
    comm *raw[MAX_RANKS], *cs[MAX_RANKS];
    comm_threads_create(n, raw);
    for (int r = 0; r < n; r++)
        if (comm_faulty_wrap(raw[r], slow[r], delay[r], die[r], &cs[r])) { printf("FAIL wrap: %s\n", pt_err()); exit(1); }
    run_ranks(cs, n, body, arg);
    for (int r = 0; r < n; r++) comm_free(cs[r]);
}

static void test_faulty_transparent(void) {
    int slow[6] = {-1, -1, -1, -1, -1, -1}, die[6] = {-1, -1, -1, -1, -1, -1};
    double delay[6] = {0};
    outcome o = {0};
    run_faulty_world(2, slow, delay, die, body_pingpong, &o);
    int b = first_bad(&o, 2);
    CHECK("faulty without faults: ping-pong", b < 0, "%s", b < 0 ? "" : o.msg[b]);
    split_state st = {0};
    run_faulty_world(6, slow, delay, die, body_split, &st);
    b = first_bad(&st.o, 6);
    CHECK("faulty without faults: split and allreduce", b < 0, "%s", b < 0 ? "" : st.o.msg[b]);
    comm *raw[1], *c;
    comm_threads_create(1, raw);
    comm_faulty_wrap(raw[0], -1, 0, -1, &c);
    comm *raw4[AR_RANKS], *cs4[AR_RANKS];
    comm_threads_create(AR_RANKS, raw4);
    for (int r = 0; r < AR_RANKS; r++) comm_faulty_wrap(raw4[r], -1, 0, -1, &cs4[r]);
    check_ireduce(cs4, "faulty(threads)");
    for (int r = 0; r < AR_RANKS; r++) comm_free(cs4[r]);
    CHECK("faulty name says what it wraps", strcmp(c->vt->name, "faulty(threads)") == 0, "%s", c->vt->name);
    comm_free(c);
}

#define DELAY_S 0.8          /* injected delay: big enough to tell from scheduling noise */
#define NOT_BLOCKED_S 0.5    /* "the sender was not held up by the delay": well under DELAY_S (a
                                * loaded 2-core machine can keep a ready thread off its core for 100s of ms) */
/* Rank 0 sends to the slow rank 1, then at once to rank 2. t[0]: isend to the slow peer took;
 * t[1]: rank 1's message arrived after t0; t[2]: rank 2's arrived after t0. */
typedef struct { outcome o; double t0; double t[3]; int v[3]; pthread_mutex_t mu; } delay_state;

static void body_delay(comm *c, void *arg) {
    delay_state *st = arg;
    int v = 40 + c->rank;
    if (comm_barrier(c)) { note(&st->o, c->rank, "barrier"); return; }
    if (c->rank == 0) {
        comm_req *a, *b;
        double t0 = pt_now();
        pthread_mutex_lock(&st->mu); st->t0 = t0; pthread_mutex_unlock(&st->mu);
        int v1 = 41, v2 = 42;
        if (comm_isend(c, 1, 0, &v1, sizeof v1, &a)) { note(&st->o, 0, "isend slow"); return; }
        st->t[0] = pt_now() - t0;
        if (comm_isend(c, 2, 0, &v2, sizeof v2, &b)) { note(&st->o, 0, "isend"); return; }
        if (comm_wait(c, b, WAIT_S) || comm_wait(c, a, WAIT_S)) note(&st->o, 0, "wait");
        return;
    }
    if (recv_wait(c, 0, 0, &v, sizeof v)) { note(&st->o, c->rank, "recv"); return; }
    double now = pt_now();
    pthread_mutex_lock(&st->mu);
    st->t[c->rank] = now - st->t0;
    st->v[c->rank] = v;
    pthread_mutex_unlock(&st->mu);
}

static void test_faulty_delay(void) {
    int slow[3] = {1, -1, -1}, die[3] = {-1, -1, -1};
    double delay[3] = {DELAY_S, 0, 0};
    delay_state st = {0};
    pthread_mutex_init(&st.mu, NULL);
    run_faulty_world(3, slow, delay, die, body_delay, &st);
    int b = first_bad(&st.o, 3);
    CHECK("faulty delay: messages arrive", b < 0 && st.v[1] == 41 && st.v[2] == 42, "%s", b < 0 ? "" : st.o.msg[b]);
    CHECK("faulty delay: the slow peer gets it no earlier than the delay", st.t[1] >= DELAY_S,
          "arrived after %.3f s", st.t[1]);
    CHECK("faulty delay: the isend returned at once", st.t[0] < NOT_BLOCKED_S, "took %.3f s", st.t[0]);
    CHECK("faulty delay: the next send (to another peer) was not held up", st.t[2] < NOT_BLOCKED_S,
          "arrived after %.3f s", st.t[2]);
    pthread_mutex_destroy(&st.mu);
}

#define DIE_AFTER 3
/* Rank 1 sends to 0 and 2 in turn until it dies; 0 and 2 receive until their wait fails. */
static void body_die(comm *c, void *arg) {
    outcome *o = arg;
    double t0 = pt_now();
    int v = 0;
    if (c->rank == 1) {
        for (int i = 0; i < 100; i++) {
            comm_req *q;
            v = i;
            if (comm_isend(c, i % 2 ? 2 : 0, 0, &v, sizeof v, &q) || comm_wait(c, q, WAIT_S)) break;
        }
        snprintf(o->msg[1], 300, "%s", pt_err());
        o->bad[1] = comm_barrier(c) == 0 || !strstr(pt_err(), "rank 1 died");   /* dead: calls fail */
        return;
    }
    for (int i = 0; i < 100; i++)
        if (recv_wait(c, 1, 0, &v, sizeof v)) break;
    o->t[c->rank] = pt_now() - t0;
    snprintf(o->msg[c->rank], 300, "%s", pt_err());
}

static void test_faulty_die(void) {
    int slow[3] = {-1, -1, -1}, die[3] = {-1, DIE_AFTER, -1};
    double delay[3] = {0};
    outcome o = {0};
    run_faulty_world(3, slow, delay, die, body_die, &o);
    CHECK("faulty die_after: the dying rank's calls fail naming it",
          !o.bad[1] && strstr(o.msg[1], "rank 1 died after 3 sends"), "%s", o.msg[1]);
    CHECK("faulty die_after: the others fail naming the dead rank",
          strstr(o.msg[0], "rank 1 failed: died after 3 sends") && strstr(o.msg[2], "rank 1 failed"),
          "%s | %s", o.msg[0], o.msg[2]);
    CHECK("faulty die_after: within a bounded time", o.t[0] < WAIT_S && o.t[2] < WAIT_S,
          "%.2f %.2f s", o.t[0], o.t[2]);
}

/* Delivery without anyone's call: rank 0 isends to the slow rank 1 (DELAY_S) and then sleeps
 * SLEEP_S (> DELAY_S) without touching the transport; rank 1's receive completes at about
 * DELAY_S, not when rank 0 wakes (the delivery thread posts it). */
#define SLEEP_S 2.0
typedef struct { outcome o; double t0, got; pthread_mutex_t mu; } inflight_state;

static void body_inflight(comm *c, void *arg) {
    inflight_state *st = arg;
    if (comm_barrier(c)) { note(&st->o, c->rank, "barrier"); return; }
    if (c->rank == 0) {
        int v = 7;
        comm_req *q;
        pthread_mutex_lock(&st->mu); st->t0 = pt_now(); pthread_mutex_unlock(&st->mu);
        if (comm_isend(c, 1, 3, &v, sizeof v, &q)) { note(&st->o, 0, "isend"); return; }
        usleep((useconds_t)(SLEEP_S * 1e6));
        if (comm_wait(c, q, WAIT_S)) note(&st->o, 0, "wait");
        return;
    }
    int v = 0;
    if (recv_wait(c, 0, 3, &v, sizeof v) || v != 7) { note(&st->o, 1, "recv"); return; }
    double now = pt_now();
    pthread_mutex_lock(&st->mu); st->got = now - st->t0; pthread_mutex_unlock(&st->mu);
}

static void test_faulty_in_flight(void) {
    int slow[2] = {1, -1}, die[2] = {-1, -1};
    double delay[2] = {DELAY_S, 0};
    inflight_state st = {0};
    pthread_mutex_init(&st.mu, NULL);
    run_faulty_world(2, slow, delay, die, body_inflight, &st);
    int b = first_bad(&st.o, 2);
    CHECK("faulty delay: delivered while the sender computes (no call of either side needed)",
          b < 0 && st.got >= DELAY_S && st.got < SLEEP_S - 0.3, "%s arrived after %.3f s (delay %.1f, sender "
          "busy %.1f)", b < 0 ? "" : st.o.msg[b], st.got, DELAY_S, SLEEP_S);
    pthread_mutex_destroy(&st.mu);
}

/* set_delay: rank 0 sends 1, 2 (delayed) then 3 after the delay dropped to 0: rank 1 gets them
 * in order (a message never overtakes one held back before it); a sub-communicator split from the
 * wrapped one delays by world rank too; a delayed reduction (reductions on) completes late with
 * the right sum. */
typedef struct { outcome o; int v[3]; double t_sub, t_red; float red; } setdelay_state;

static void body_setdelay(comm *c, void *arg) {
    setdelay_state *st = arg;
    int r = c->rank;
    if (r == 0 && comm_faulty_set_delay(c, 1, 0.3, 1)) { note(&st->o, 0, "set_delay"); return; }
    if (r == 1 && comm_faulty_set_delay(c, 0, 0.3, 1)) { note(&st->o, 1, "set_delay"); return; }
    if (comm_barrier(c)) { note(&st->o, r, "barrier"); return; }
    if (r == 0) {
        comm_req *q[3];
        int v[3] = {1, 2, 3};
        if (comm_isend(c, 1, 9, &v[0], sizeof v[0], &q[0]) || comm_isend(c, 1, 9, &v[1], sizeof v[1], &q[1]) ||
            comm_faulty_set_delay(c, 1, 0, 1) || comm_isend(c, 1, 9, &v[2], sizeof v[2], &q[2]))
            { note(&st->o, 0, "isend"); return; }
        for (int k = 0; k < 3; k++) if (comm_wait(c, q[k], WAIT_S)) { note(&st->o, 0, "wait"); return; }
        comm_faulty_set_delay(c, 1, 0.3, 1);
    } else if (r == 1) {
        for (int k = 0; k < 3; k++) if (recv_wait(c, 0, 9, &st->v[k], sizeof st->v[k])) { note(&st->o, 1, "recv"); return; }
    }
    comm *sub = NULL;   /* ranks 0 and 1 (and 2 alone): a message 0 -> 1 on it is late too */
    double t0 = pt_now();   /* before the split: rank 0 leaves it (and sends) after rank 1 entered */
    if (comm_split(c, r < 2 ? 0 : 1, &sub)) { note(&st->o, r, "split"); return; }
    if (r == 0) { int x = 5; if (send_wait(sub, 1, 1, &x, sizeof x)) note(&st->o, 0, "sub send"); }
    if (r == 1) { int x = 0; if (recv_wait(sub, 0, 1, &x, sizeof x) || x != 5) note(&st->o, 1, "sub recv"); st->t_sub = pt_now() - t0; }
    float x = (float)(r + 1);   /* a reduction over 0 and 1: held back by the slow link */
    comm_req *q = NULL;
    t0 = pt_now();   /* before a barrier, for the same reason */
    if (r < 2 && comm_barrier(sub)) note(&st->o, r, "sub barrier");
    if (r < 2 && (comm_ireduce_f32(sub, &x, 1, 1, &q) || comm_wait(sub, q, WAIT_S))) note(&st->o, r, "ireduce");
    if (r == 1) { st->t_red = pt_now() - t0; st->red = x; }
    comm_free(sub);
}

static void test_faulty_set_delay(void) {
    int slow[3] = {-1, -1, -1}, die[3] = {-1, -1, -1};
    double delay[3] = {0};
    setdelay_state st = {0};
    run_faulty_world(3, slow, delay, die, body_setdelay, &st);
    int b = first_bad(&st.o, 3);
    CHECK("faulty set_delay: messages to one peer keep their order when the delay drops",
          b < 0 && st.v[0] == 1 && st.v[1] == 2 && st.v[2] == 3, "%s got %d %d %d", b < 0 ? "" : st.o.msg[b],
          st.v[0], st.v[1], st.v[2]);
    CHECK("faulty set_delay: a split communicator is delayed by world rank", st.t_sub >= 0.3, "%.3f s", st.t_sub);
    CHECK("faulty set_delay: a reduction over the slow link completes late, summed right",
          st.t_red >= 0.3 && st.red == 3.0f, "%.3f s, sum %g", st.t_red, st.red);
    comm *raw[1], *f;
    comm_threads_create(1, raw);
    CHECK("faulty borrow: wraps without taking the endpoint", comm_faulty_borrow(raw[0], -1, &f) == 0, "%s", pt_err());
    comm_free(f);
    CHECK("faulty set_delay: refused on a transport that is not faulty",
          comm_faulty_set_delay(raw[0], 0, 1, 0) < 0 && strstr(pt_err(), "not faulty"), "%s", pt_err());
    comm_free(raw[0]);   /* still ours after the wrapper went */
}

/* set_rate: rank 0's link to rank 1 carries RATE_BPS bytes per second. Rank 0 sends two messages
 * of RATE_BYTES back to back: its isends return at once, and rank 1 gets them at about n/R and
 * 2n/R after they were sent (a FIFO: the second waits for the first to leave the link). Rank 1's
 * own link to 0 is shaped the same, and its one message the other way queues on its own (about
 * n/R, not behind rank 0's). */
#define RATE_BPS 1e6
#define RATE_BYTES 250000     /* 0.25 s a message at RATE_BPS */
typedef struct { outcome o; double t0, isend, got[2], back; pthread_mutex_t mu; } rate_state;

static void body_rate(comm *c, void *arg) {
    rate_state *st = arg;
    int r = c->rank, peer = 1 - r;
    unsigned char *buf = calloc(3, RATE_BYTES);
    comm_req *q[3];
    if (comm_faulty_set_rate(c, peer, RATE_BPS, 0)) { note(&st->o, r, "set_rate"); free(buf); return; }
    for (int k = 0; k < 2 && r == 1; k++)
        if (comm_irecv(c, 0, 4, buf + (size_t)k * RATE_BYTES, RATE_BYTES, &q[k])) { note(&st->o, 1, "irecv"); free(buf); return; }
    if (r == 0 && comm_irecv(c, 1, 5, buf + 2 * (size_t)RATE_BYTES, RATE_BYTES, &q[2])) { note(&st->o, 0, "irecv"); free(buf); return; }
    if (comm_barrier(c)) { note(&st->o, r, "barrier"); free(buf); return; }
    double t0 = pt_now();
    if (r == 0) {
        memset(buf, 7, 2 * (size_t)RATE_BYTES);
        if (comm_isend(c, 1, 4, buf, RATE_BYTES, &q[0]) || comm_isend(c, 1, 4, buf + RATE_BYTES, RATE_BYTES, &q[1]))
            { note(&st->o, 0, "isend"); free(buf); return; }
        double dt = pt_now() - t0;
        if (comm_wait(c, q[2], WAIT_S)) { note(&st->o, 0, "recv back"); free(buf); return; }
        double back = pt_now() - t0;
        for (int k = 0; k < 2; k++) if (comm_wait(c, q[k], WAIT_S)) { note(&st->o, 0, "wait"); free(buf); return; }
        pthread_mutex_lock(&st->mu); st->isend = dt; st->back = back; pthread_mutex_unlock(&st->mu);
    } else {
        comm_req *s;
        memset(buf + 2 * (size_t)RATE_BYTES, 9, RATE_BYTES);
        if (comm_isend(c, 0, 5, buf + 2 * (size_t)RATE_BYTES, RATE_BYTES, &s)) { note(&st->o, 1, "isend"); free(buf); return; }
        double got[2];
        for (int k = 0; k < 2; k++) {
            if (comm_wait(c, q[k], WAIT_S)) { note(&st->o, 1, "recv"); free(buf); return; }
            got[k] = pt_now() - t0;
        }
        if (comm_wait(c, s, WAIT_S)) { note(&st->o, 1, "wait"); free(buf); return; }
        if (buf[0] != 7 || buf[2 * (size_t)RATE_BYTES - 1] != 7) note(&st->o, 1, "payload");
        pthread_mutex_lock(&st->mu); st->got[0] = got[0]; st->got[1] = got[1]; pthread_mutex_unlock(&st->mu);
    }
    free(buf);
}

static void test_faulty_set_rate(void) {
    int slow[2] = {-1, -1}, die[2] = {-1, -1};
    double delay[2] = {0}, n_r = RATE_BYTES / RATE_BPS, lo = 0.98;   /* n / R, tolerance of the lower bounds */
    rate_state st = {0};
    pthread_mutex_init(&st.mu, NULL);
    run_faulty_world(2, slow, delay, die, body_rate, &st);
    int b = first_bad(&st.o, 2);
    CHECK("faulty set_rate: messages arrive intact", b < 0, "%s", b < 0 ? "" : st.o.msg[b]);
    CHECK("faulty set_rate: the isends return at once", st.isend < NOT_BLOCKED_S, "took %.3f s", st.isend);
    CHECK("faulty set_rate: the first message arrives after about n/R", st.got[0] >= lo * n_r && st.got[0] < 10 * n_r,
          "after %.3f s (n/R %.3f)", st.got[0], n_r);
    CHECK("faulty set_rate: the second queues behind it, about 2n/R", st.got[1] >= lo * 2 * n_r &&
          st.got[1] < 10 * 2 * n_r, "after %.3f s (2n/R %.3f)", st.got[1], 2 * n_r);
    CHECK("faulty set_rate: the other direction queues on its own (about n/R, not 3n/R)",
          st.back >= lo * n_r && st.back < 2.9 * n_r,   /* behind rank 0's two: 3n/R */ "after %.3f s (n/R %.3f)", st.back, n_r);
    pthread_mutex_destroy(&st.mu);
    comm *raw[2], *f;
    comm_threads_create(2, raw);
    comm_faulty_wrap(raw[0], -1, 0, -1, &f);
    CHECK("faulty set_rate: a negative or infinite rate is refused, 0 (unlimited) taken",
          comm_faulty_set_rate(f, 1, -1, 0) < 0 && strstr(pt_err(), "not a rate") &&
          comm_faulty_set_rate(f, 1, INFINITY, 0) < 0 && comm_faulty_set_rate(f, 1, 0, 1) == 0, "%s", pt_err());
    CHECK("faulty set_rate: refused on a transport that is not faulty",
          comm_faulty_set_rate(raw[1], 0, 1, 0) < 0 && strstr(pt_err(), "not faulty"), "%s", pt_err());
    comm_free(f);
    comm_free(raw[1]);
}

/* ---- clock offsets -------------------------------------------------------------------- */

#define CLOCK_ROUNDS 8
typedef struct { outcome o; double off[MAX_RANKS][MAX_RANKS], bound[MAX_RANKS][MAX_RANKS]; int measure; } clock_state;

/* Every rank's view of the offsets; measure = 1 pings even though the ranks share one clock. */
static void body_clock(comm *c, void *arg) {
    clock_state *st = arg;
    if (st->measure) c->one_clock = 0;
    if (comm_clock_offsets(c, CLOCK_ROUNDS, WAIT_S, st->off[c->rank], st->bound[c->rank]))
        note(&st->o, c->rank, "clock offsets");
}

/* Every rank got the same arrays; offsets exactly 0 (one clock), or (measured) within their
 * bounds of 0, the bounds under 0.5 s; rank 0's 0 exactly. */
static int clock_views_ok(const clock_state *st, int n, int measured) {
    for (int r = 0; r < n; r++)
        for (int k = 0; k < n; k++) {
            double o = st->off[r][k], b = st->bound[r][k];
            if (o != st->off[0][k] || b != st->bound[0][k]) return 0;
            if ((!measured || k == 0) ? (o != 0 || b != 0) : (fabs(o) > b + 1e-9 || !(b < 0.5))) return 0;
        }
    return 1;
}

static void test_clock_offsets(void) {
    clock_state st = {0};
    run_world(3, body_clock, &st);
    int b = first_bad(&st.o, 3);
    CHECK("clock offsets: threads share one clock: zeros on every rank",
          b < 0 && clock_views_ok(&st, 3, 0), "%s (rank 1: %g)", b < 0 ? "" : st.o.msg[b], st.off[1][1]);
    clock_state ms = {.measure = 1};
    run_world(3, body_clock, &ms);
    b = first_bad(&ms.o, 3);
    CHECK("clock offsets: measured by ping-pong, each within its bound of 0 (the same clock)",
          b < 0 && clock_views_ok(&ms, 3, 1), "%s (rank 1: %g +- %g, rank 2: %g +- %g)", b < 0 ? "" : ms.o.msg[b],
          ms.off[0][1], ms.bound[0][1], ms.off[0][2], ms.bound[0][2]);
    int slow[2] = {-1, -1}, die[2] = {-1, -1};
    double delay[2] = {0};
    clock_state fs = {0};
    run_faulty_world(2, slow, delay, die, body_clock, &fs);
    b = first_bad(&fs.o, 2);
    CHECK("clock offsets: faulty(threads) keeps one clock", b < 0 && clock_views_ok(&fs, 2, 0), "%s",
          b < 0 ? "" : fs.o.msg[b]);
    comm *raw[1];
    double off[1];
    comm_threads_create(1, raw);
    CHECK("clock offsets: rounds outside 1..1000 refused",
          comm_clock_offsets(raw[0], 0, WAIT_S, off, NULL) < 0 && strstr(pt_err(), "0 rounds (give 1..1000)") &&
          comm_clock_offsets(raw[0], COMM_CLOCK_MAX_ROUNDS + 1, WAIT_S, off, NULL) < 0, "%s", pt_err());
    CHECK("clock offsets: one rank: 0", comm_clock_offsets(raw[0], 1, WAIT_S, off, NULL) == 0 && off[0] == 0, "%s",
          pt_err());
    comm_free(raw[0]);
}

int main(void) {
    test_pingpong();
    test_waitany();
    test_tags();
    test_fifo();
    test_size_mismatch();
    test_send_never_blocks();
    test_self();
    test_bad_args();
    test_wait_timeout();
    test_allreduce();
    test_allreduce_mismatch();
    test_ireduce();
    test_ireduce_crossed();
    test_ireduce_timeout();
    test_split();
    test_abort();
    test_faulty_transparent();
    test_faulty_delay();
    test_faulty_in_flight();
    test_faulty_set_delay();
    test_faulty_set_rate();
    test_faulty_die();
    test_clock_offsets();
    TEST_DONE();
}
