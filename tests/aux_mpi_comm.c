/* MPI transport checks, run by tests/test_comm_mpi.sh under mpirun -np 4 (not a test binary on
 * its own). Every rank runs every check in the same order; a rank that fails prints its own
 * "FAIL name: rank r: why" line, rank 0 prints "ok name" when no rank failed.
 *   aux_mpi_comm          ping-pong, waitany, tags, FIFO, sizes, allreduce, ireduce, split, timeout,
 *                         faulty delay
 *   aux_mpi_comm abort    rank 2 aborts while the others wait: the job must end naming rank 2
 *   aux_mpi_comm die      rank 1 dies after 3 sends (faulty wrapper): the job ends naming rank 1
 *   aux_mpi_comm clock    clock offsets against each rank's PT_CLOCK_SKEW (tests/test_comm_clock.sh
 *                         gives each rank its own): measured, aligned, and a skewed sender's
 *                         injected delay still on time */
#include "comm/comm.h"
#include "util/pt.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define WAIT_S 20.0          /* bound for waits that must succeed (oversubscribed, noisy) */
#define DEAD_WAIT_S 30.0     /* waits that an abort must cut short long before this */

static int n_failed = 0;

/* Collective check: every rank passes its own verdict; rank 0 reports "ok" if all passed. */
static void check(comm *c, const char *name, int cond, const char *fmt, ...) {
    if (!cond) {
        char why[400];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, sizeof why, fmt, ap);
        va_end(ap);
        printf("FAIL %s: rank %d: %s\n", name, c->rank, why);
        fflush(stdout);
    }
    double bad = !cond;
    if (comm_allreduce_f64(c, &bad, 1)) { printf("FAIL %s: allreduce: %s\n", name, pt_err()); bad = 1; }
    if (bad) n_failed++;
    else if (c->rank == 0) { printf("ok %s\n", name); fflush(stdout); }
}

static int send_wait(comm *c, int dst, int tag, const void *b, size_t n) {
    comm_req *q;
    return comm_isend(c, dst, tag, b, n, &q) || comm_wait(c, q, WAIT_S);
}

static int recv_wait(comm *c, int src, int tag, void *b, size_t n) {
    comm_req *q;
    return comm_irecv(c, src, tag, b, n, &q) || comm_wait(c, q, WAIT_S);
}

/* Pairs (0,1) and (2,3) bounce a counter 100 times. */
static void test_pingpong(comm *c) {
    int peer = c->rank ^ 1, v = 0, ok = 1;
    for (int i = 0; i < 100 && ok; i++) {
        if (c->rank % 2 == 0) {
            int w = 2 * i;
            ok = !send_wait(c, peer, 1, &w, sizeof w) && !recv_wait(c, peer, 2, &v, sizeof v) && v == w + 1;
        } else {
            ok = !recv_wait(c, peer, 1, &v, sizeof v);
            v++;
            ok = ok && !send_wait(c, peer, 2, &v, sizeof v);
        }
    }
    check(c, "mpi ping-pong 100 rounds", ok, "%s (v %d)", pt_err(), v);
}

/* comm_waitany over MPI: even ranks wait on two receives from their odd peer; nothing sent yet,
 * a short wait times out with both pending; then the peer sends the second one's, then (told)
 * the first one's, and each wait returns that one. */
static void test_waitany(comm *c) {
    int peer = c->rank ^ 1, v[2] = { 0, 0 }, go = 1, which = -2, ok = 1, a = 11, b = 22;
    comm_req *q[2];
    if (c->rank % 2) {
        ok = !recv_wait(c, peer, 9, &go, sizeof go) && !send_wait(c, peer, 2, &b, sizeof b) &&
             !recv_wait(c, peer, 10, &go, sizeof go) && !send_wait(c, peer, 1, &a, sizeof a);
    } else {
        ok = !comm_irecv(c, peer, 1, &v[0], sizeof v[0], &q[0]) && !comm_irecv(c, peer, 2, &v[1], sizeof v[1], &q[1]);
        ok = ok && !comm_waitany(c, q, 2, 0.05, &which) && which == -1 && q[0] && q[1];
        ok = ok && !send_wait(c, peer, 9, &go, sizeof go) && !comm_waitany(c, q, 2, WAIT_S, &which) && which == 1 &&
             !q[1] && v[1] == 22;
        ok = ok && !send_wait(c, peer, 10, &go, sizeof go) && !comm_waitany(c, q, 2, WAIT_S, &which) && which == 0 &&
             !q[0] && v[0] == 11;
    }
    check(c, "mpi waitany: times out pending, then returns each as it completes", ok, "%s (which %d, values %d %d)",
          pt_err(), which, v[0], v[1]);
}

#define BIG_FLOATS (2u << 20)   /* 8 MiB: well past Open MPI's eager limit (rendezvous path) */
/* Pairs exchange big buffers both ways at once (isend and irecv before either wait), and every
 * rank sends a message to itself. */
static void test_big_and_self(comm *c) {
    float *out = pt_malloc(BIG_FLOATS * sizeof *out), *in = pt_malloc(BIG_FLOATS * sizeof *in);
    for (size_t i = 0; i < BIG_FLOATS; i++) out[i] = (float)(c->rank * 1000003 + i % 9973);
    int peer = c->rank ^ 1, ok;
    comm_req *s, *r;
    ok = !comm_isend(c, peer, 6, out, BIG_FLOATS * sizeof *out, &s) &&
         !comm_irecv(c, peer, 6, in, BIG_FLOATS * sizeof *in, &r) &&
         !comm_wait(c, r, WAIT_S) && !comm_wait(c, s, WAIT_S);
    for (size_t i = 0; ok && i < BIG_FLOATS; i++) ok = in[i] == (float)(peer * 1000003 + i % 9973);
    check(c, "mpi 8 MiB messages both ways at once", ok, "%s", pt_err());
    int v = 40 + c->rank, got = -1;
    ok = !comm_isend(c, c->rank, 2, &v, sizeof v, &s) && !recv_wait(c, c->rank, 2, &got, sizeof got) &&
         !comm_wait(c, s, WAIT_S) && got == v;
    check(c, "mpi message to self", ok, "%s", pt_err());
    free(out);
    free(in);
}

#define NTAGS 16
#define NFIFO 32
/* Rank 0 -> 1: one message per tag, received in reverse tag order; then NFIFO messages on one
 * tag, half the receives posted before the sends. */
static void test_tags_fifo(comm *c) {
    comm_req *q[NFIFO];
    int v[NFIFO], ok = 1;
    if (c->rank == 0) {
        for (int t = 0; t < NTAGS; t++) { v[t] = 100 + t; ok &= !comm_isend(c, 1, 1000 + t, &v[t], sizeof v[t], &q[t]); }
        for (int t = 0; t < NTAGS && ok; t++) ok &= !comm_wait(c, q[t], WAIT_S);
    } else if (c->rank == 1) {
        for (int t = NTAGS - 1; t >= 0; t--) ok &= !comm_irecv(c, 0, 1000 + t, &v[t], sizeof v[t], &q[t]);
        for (int t = NTAGS - 1; t >= 0 && ok; t--) ok &= !comm_wait(c, q[t], WAIT_S);
        for (int t = 0; t < NTAGS && ok; t++) ok &= v[t] == 100 + t;
    }
    check(c, "mpi many tags matched out of order", ok, "%s", pt_err());
    ok = 1;
    if (c->rank == 1)
        for (int i = 0; i < NFIFO / 2; i++) ok &= !comm_irecv(c, 0, 5, &v[i], sizeof v[i], &q[i]);
    comm_barrier(c);
    if (c->rank == 0) {
        int w[NFIFO];
        for (int i = 0; i < NFIFO; i++) { w[i] = i; ok &= !comm_isend(c, 1, 5, &w[i], sizeof w[i], &q[i]); }
        for (int i = 0; i < NFIFO && ok; i++) ok &= !comm_wait(c, q[i], WAIT_S);
    } else if (c->rank == 1) {
        for (int i = NFIFO / 2; i < NFIFO; i++) ok &= !comm_irecv(c, 0, 5, &v[i], sizeof v[i], &q[i]);
        for (int i = 0; i < NFIFO && ok; i++) ok &= !comm_wait(c, q[i], WAIT_S);
        for (int i = 0; i < NFIFO && ok; i++) ok &= v[i] == i;
    }
    check(c, "mpi FIFO per tag", ok, "%s", pt_err());
}

/* 0 -> 1: an 8-byte message into a 16-byte buffer, and a 16-byte one into an 8-byte buffer. */
static void test_sizes(comm *c) {
    double d[2] = {1, 2};
    int ok = 1;
    char msg[300] = "";
    if (c->rank == 0) {
        ok = !send_wait(c, 1, 7, d, 8) && !send_wait(c, 1, 8, d, 16);
    } else if (c->rank == 1) {
        int rc = recv_wait(c, 0, 7, d, 16);
        snprintf(msg, sizeof msg, "%s", pt_err());
        ok = rc != 0 && strstr(msg, "8 bytes") && strstr(msg, "16-byte") && strstr(msg, "tag 7");
        rc = recv_wait(c, 0, 8, d, 8);
        ok = ok && rc != 0 && strstr(pt_err(), "8-byte") && strstr(pt_err(), "tag 8");
    }
    check(c, "mpi size mismatch names sizes and tag", ok, "%s | %s", msg, pt_err());
    comm_req *q;
    int rc = comm_isend(c, 0, -3, d, 8, &q);
    check(c, "mpi negative tag is an error", rc == -1 && strstr(pt_err(), "tag -3"), "%s", pt_err());
}

/* Same values as tests/test_comm.c: the float sum depends on the order. */
static double ar_value(int rank, size_t i) {
    double big = (i + rank) % 3 == 0 ? 1e8 : 1.0;
    return (rank % 2 ? -1 : 1) * big * (1.0 + 0.1 * (double)((i * 7 + rank * 13) % 17)) + 0.37 * rank;
}

/* Each rank checks the result bitwise against ((r0 + r1) + r2) + r3 computed locally: so all ranks
 * agree, and agree with the threads transport. */
static void test_allreduce(comm *c) {
    static const size_t sizes[] = {0, 1, 7, 1001, 65537};
    int ok_f = 1, ok_d = 1, rc = 0;
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        size_t n = sizes[k];
        float *f = pt_malloc((n + 1) * sizeof *f);
        double *d = pt_malloc((n + 1) * sizeof *d);
        for (size_t i = 0; i < n; i++) { f[i] = (float)ar_value(c->rank, i); d[i] = ar_value(c->rank, i); }
        rc |= comm_allreduce_f32(c, f, n) | comm_allreduce_f64(c, d, n);
        for (size_t i = 0; i < n; i++) {
            float sf = (float)ar_value(0, i);
            double sd = ar_value(0, i);
            for (int r = 1; r < c->size; r++) { sf += (float)ar_value(r, i); sd += ar_value(r, i); }
            ok_f &= memcmp(&sf, &f[i], sizeof sf) == 0;
            ok_d &= memcmp(&sd, &d[i], sizeof sd) == 0;
        }
        free(f);
        free(d);
    }
    check(c, "mpi allreduce f32 rank order, bitwise equal on all ranks (sizes 0..65537)", !rc && ok_f, "%s", pt_err());
    check(c, "mpi allreduce f64 rank order, bitwise equal on all ranks (sizes 0..65537)", !rc && ok_d, "%s", pt_err());
    float x[2] = {1, 2};
    rc = comm_allreduce_f32(c, x, c->rank == 3 ? 2 : 1);
    check(c, "mpi allreduce with different counts fails on every rank", rc == -1 && strstr(pt_err(), "different counts"),
          "rc %d: %s", rc, pt_err());
}

/* Non-blocking reductions give the allreduce's bits: ireduce (all) and ireduce (slices) then
 * allgather, two in flight at once, waited in reverse order; two sub-communicators posted in
 * opposite orders by different ranks do not deadlock. */
static void test_ireduce(comm *c) {
    static const size_t sizes[] = {0, 1, 7, 1001, 65537};
    int ok = 1, rc = 0;
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        size_t n = sizes[k];
        float *f = pt_malloc((n + 1) * sizeof *f), *g = pt_malloc((n + 1) * sizeof *g), *h = pt_malloc((n + 1) * sizeof *h);
        for (size_t i = 0; i < n; i++) f[i] = g[i] = h[i] = (float)ar_value(c->rank, i);
        comm_req *qa, *qb;
        rc |= comm_allreduce_f32(c, f, n) | comm_ireduce_f32(c, g, n, 1, &qa) | comm_ireduce_f32(c, h, n, 0, &qb);
        if (!rc) rc |= comm_wait(c, qb, 10) | comm_wait(c, qa, 10) | comm_allgather_f32(c, h, n);
        ok &= memcmp(f, g, n * sizeof *f) == 0 && memcmp(f, h, n * sizeof *f) == 0;
        free(f); free(g); free(h);
    }
    check(c, "mpi ireduce (all, and slices + allgather) equals allreduce bitwise (sizes 0..65537)",
          !rc && ok, "%s", pt_err());
    comm *sub[2] = {NULL, NULL};
    float x[2][5];
    comm_req *q[2];
    rc = comm_split(c, 0, &sub[0]) | comm_split(c, c->rank < 2 ? 0 : 1, &sub[1]);
    for (int j = 0; j < 2 && !rc; j++) {
        int kk = c->rank % 2 ? 1 - j : j;
        for (int i = 0; i < 5; i++) x[kk][i] = (float)(c->rank + kk + i);
        rc |= comm_ireduce_f32(sub[kk], x[kk], 5, 1, &q[kk]);
    }
    if (!rc) rc = comm_wait(sub[1], q[1], 10) | comm_wait(sub[0], q[0], 10);
    check(c, "mpi ireduce on two communicators posted in opposite orders: no deadlock, right sums",
          !rc && x[0][0] == 6 && x[1][4] == (c->rank < 2 ? 11 : 15), "%s", pt_err());
    comm_free(sub[0]);
    comm_free(sub[1]);
}

static void test_split(comm *c) {
    comm *sub = NULL, *none = NULL;
    int rc = comm_split(c, c->rank % 2, &sub);
    int ok = !rc && sub && sub->rank == c->rank / 2 && sub->size == 2;
    double x[2] = {c->rank, 1};
    for (int i = 0; i < 20 && ok; i++) {
        x[0] = c->rank; x[1] = i;
        ok = !comm_allreduce_f64(sub, x, 2) && x[0] == (c->rank % 2 ? 4 : 2) && x[1] == 2 * i;
    }
    int v = c->rank, got = -1;
    if (ok && sub->rank == 0) ok = !send_wait(sub, 1, 3, &v, sizeof v);
    if (ok && sub->rank == 1) ok = !recv_wait(sub, 0, 3, &got, sizeof got) && got == c->rank - 2;
    check(c, "mpi split: sub ranks, allreduce and messages per sub-communicator", ok, "%s", pt_err());
    rc = comm_split(c, c->rank == 3 ? -1 : 0, &none);
    check(c, "mpi split: colour -1 gives no communicator", !rc && (c->rank == 3 ? !none : none && none->size == 3),
          "%s", pt_err());
    comm_free(none);
    comm_free(sub);
}

/* Rank 1 waits 0.2 s for tag 99 from rank 0 (not yet sent): error names peer and tag; then rank
 * 0 sends and the same request completes on a second wait. */
static void test_timeout(comm *c) {
    int v = 5, got = 0, ok = 1;
    char msg[300] = "";
    comm_req *q = NULL;
    if (c->rank == 1) {
        ok = !comm_irecv(c, 0, 99, &got, sizeof got, &q) && comm_wait(c, q, 0.2) == -1;
        snprintf(msg, sizeof msg, "%s", pt_err());
        ok = ok && strstr(msg, "rank 0") && strstr(msg, "tag 99");
    }
    check(c, "mpi wait timeout names the peer and tag", ok, "%s", msg);
    ok = 1;
    if (c->rank == 0) ok = !send_wait(c, 1, 99, &v, sizeof v);
    if (c->rank == 1) ok = !comm_wait(c, q, WAIT_S) && got == 5;
    check(c, "mpi request completes after a timed-out wait", ok, "%s", pt_err());
}

#define DELAY_S 0.8          /* injected delay: big enough to tell from scheduling noise */
#define NOT_BLOCKED_S 0.5    /* "the sender was not held up": well under DELAY_S (a loaded 2-core
                                * machine can keep a ready process off its core for 100s of ms) */
#define SKEW_S 0.3           /* ranks leave a barrier up to this far apart (oversubscribed, loaded) */
/* Over a faulty wrapper (on a split copy of c): rank 0's messages to rank 1 are DELAY_S late;
 * rank 0's isends (to 1, then to 2) return at once; rank 1 waits about DELAY_S. */
static void test_faulty_delay(comm *c) {
    comm *sub = NULL, *f = NULL;
    int ok = !comm_split(c, 0, &sub) && !comm_faulty_wrap(sub, c->rank == 0 ? 1 : -1, DELAY_S, -1, &f);
    double dt = 0;
    int v = 7, got = 0;
    ok = ok && !comm_barrier(f);
    double t0 = pt_now();
    if (ok && c->rank == 0) {
        comm_req *a, *b;
        ok = !comm_isend(f, 1, 4, &v, sizeof v, &a) && !comm_isend(f, 2, 4, &v, sizeof v, &b);
        dt = pt_now() - t0;
        ok = ok && dt < NOT_BLOCKED_S && !comm_wait(f, b, WAIT_S) && !comm_wait(f, a, WAIT_S);
    } else if (ok && (c->rank == 1 || c->rank == 2)) {
        ok = !recv_wait(f, 0, 4, &got, sizeof got) && got == 7;
        dt = pt_now() - t0;
        if (c->rank == 1) ok = ok && dt >= DELAY_S - SKEW_S;
    }
    check(c, "mpi faulty delay: late delivery, the sender not held up", ok, "%.3f s: %s", dt, pt_err());
    if (f) comm_free(f);     /* frees sub too */
    else comm_free(sub);
}

/* In flight while the sender computes: over a faulty wrapper rank 0's message to rank 1 is DELAY_S
 * late, and rank 0 then sleeps BUSY_S without an MPI call; rank 1 gets it at about DELAY_S (the
 * delivery thread posts it, the progress thread moves it), and an 8 MiB message 2 -> 3 sent
 * just before rank 2 sleeps arrives at once too. */
#define BUSY_S 2.0
static void test_in_flight(comm *c) {
    comm *sub = NULL, *f = NULL;
    int ok = !comm_split(c, 0, &sub) && !comm_faulty_wrap(sub, c->rank == 0 ? 1 : -1, DELAY_S, -1, &f);
    size_t n = (size_t)8 << 20;
    char *big = pt_calloc(n, 1);
    int v = 7, got = 0;
    double dt = 0;
    ok = ok && !comm_barrier(f);
    double t0 = pt_now();
    comm_req *q = NULL;
    if (ok && c->rank % 2 == 0) {
        ok = c->rank == 0 ? !comm_isend(f, 1, 5, &v, sizeof v, &q) : !comm_isend(f, 3, 5, big, n, &q);
        struct timespec t = {(time_t)BUSY_S, 0};
        nanosleep(&t, NULL);           /* "computing": no call of the transport */
        ok = ok && !comm_wait(f, q, WAIT_S);
    } else if (ok) {
        ok = c->rank == 1 ? !recv_wait(f, 0, 5, &got, sizeof got) && got == 7 : !recv_wait(f, 2, 5, big, n);
        dt = pt_now() - t0;
        ok = ok && dt < BUSY_S - 0.5 && (c->rank == 3 || dt >= DELAY_S - SKEW_S);
    }
    check(c, "mpi: messages arrive while their sender computes (delayed 0 -> 1, 8 MiB 2 -> 3)", ok || !c->threaded,
          "arrived after %.3f s (sender busy %.1f s): %s", dt, BUSY_S, pt_err());
    free(big);
    if (f) comm_free(f);
    else comm_free(sub);
}

/* ---- clock offsets (mode "clock") ---- */

#define CLOCK_ROUNDS 16
#define CLOCK_TOL_S 20e-3    /* "within a few ms": the error bound of the best round, oversubscribed
                                * on a loaded machine (each round may wait for a core); far under the skews */
#define CLOCK_ROUND_S 1e-6   /* doubles of ~1e5 s (CLOCK_MONOTONIC) subtracted: rounding, far below */

/* This process's PT_CLOCK_SKEW as pt_now reads it (unset: 0). */
static double own_skew(void) {
    const char *s = getenv("PT_CLOCK_SKEW");
    return s && *s ? atof(s) : 0;
}

/* x from rank `from` on every rank (the others add zeros). */
static double from_rank(comm *c, int from, double x) {
    double *v = pt_calloc((size_t)c->size, sizeof *v);
    if (c->rank == from) v[from] = x;
    comm_allreduce_f64(c, v, (size_t)c->size);
    x = v[from];
    free(v);
    return x;
}

/* Every rank's offset is its skew minus rank 0's (one machine: the clocks differ by the skews
 * alone), within the offset's bound and CLOCK_TOL_S; every rank holds rank 0's arrays, bitwise. */
static void test_clock_measured(comm *c, const double *off, const double *bound, int ok) {
    int me = c->rank;
    double want = own_skew() - from_rank(c, 0, own_skew()), err = off[me] - want;
    check(c, "mpi clock offsets: each rank's skew against rank 0's, within its error bound (a few ms)",
          ok && fabs(err) <= bound[me] + CLOCK_ROUND_S && bound[me] < CLOCK_TOL_S && off[0] == 0,
          "offset %.6f s, want %.6f (error %.2g s, bound %.2g s): %s", off[me], want, err, bound[me], pt_err());
    int same = 1;
    for (int r = 0; r < c->size; r++)
        same &= from_rank(c, 0, off[r]) == off[r] && from_rank(c, 0, bound[r]) == bound[r];
    check(c, "mpi clock offsets: every rank gets the same offsets", same, "rank %d differs from rank 0", me);
}

/* Leaving a barrier, the ranks' clocks minus their offsets agree within SKEW_S (what merging
 * timelines needs); unaligned they would be the skews apart. */
static void test_clock_aligned(comm *c, const double *off) {
    int ok = !comm_barrier(c);
    double t = pt_now(), worst = 0;
    for (int r = 0; r < c->size; r++) {
        double d = fabs(from_rank(c, r, t) - off[r] - from_rank(c, 0, t));
        if (d > worst) worst = d;
    }
    check(c, "mpi clock offsets: a barrier's exit on one time axis across skewed ranks", ok && worst < SKEW_S,
          "%.3f s apart after alignment: %s", worst, pt_err());
}

/* A skewed rank's held-back message is still on time (the delivery thread's deadline is on the
 * condition's clock, not the skewed one): rank 1 -> 0 over faulty, DELAY_S late, well under 1 s more. */
static void test_clock_faulty(comm *c) {
    comm *sub = NULL, *f = NULL;
    int ok = !comm_split(c, 0, &sub) && !comm_faulty_wrap(sub, c->rank == 1 ? 0 : -1, DELAY_S, -1, &f);
    int v = 7, got = 0;
    double dt = 0;
    ok = ok && !comm_barrier(f);
    double t0 = pt_now();
    if (ok && c->rank == 1) ok = !send_wait(f, 0, 6, &v, sizeof v);
    if (ok && c->rank == 0) {
        ok = !recv_wait(f, 1, 6, &got, sizeof got) && got == 7;
        dt = pt_now() - t0;
        ok = ok && dt >= DELAY_S - SKEW_S && dt < DELAY_S + 1.0;
    }
    check(c, "mpi faulty delay from a skewed rank: on time", ok, "arrived after %.3f s (delay %.1f s): %s", dt,
          DELAY_S, pt_err());
    if (f) comm_free(f);
    else comm_free(sub);
}

static void run_clock(comm *c) {
    double *off = pt_calloc((size_t)c->size, sizeof *off), *bound = pt_calloc((size_t)c->size, sizeof *bound);
    int ok = !comm_clock_offsets(c, CLOCK_ROUNDS, WAIT_S, off, bound);
    test_clock_measured(c, off, bound, ok);
    test_clock_aligned(c, off);
    test_clock_faulty(c);
    if (c->rank == 0)
        for (int r = 1; r < c->size; r++) printf("# rank %d: offset %+.6f s +- %.1f us\n", r, off[r], bound[r] * 1e6);
    free(off);
    free(bound);
}

/* Rank 1 (die_after 3) sends to rank 0 until it dies; never returns normally. */
static int run_die(comm *c) {
    comm *f;
    if (comm_faulty_wrap(c, -1, 0, c->rank == 1 ? 3 : -1, &f)) return 1;
    int v = 0;
    for (int i = 0; i < 10; i++) {
        if (c->rank == 1) send_wait(f, 0, 1, &v, sizeof v);
        if (c->rank == 0) recv_wait(f, 1, 1, &v, sizeof v);
    }
    return comm_barrier(f);
}

/* Rank 2 aborts; the others block in a wait that nobody will satisfy. Never returns normally. */
static int run_abort(comm *c) {
    comm_barrier(c);
    if (c->rank == 2) comm_abort(c, "injected failure");
    int x;
    recv_wait(c, (c->rank + 1) % c->size, 42, &x, sizeof x);
    return 0;
}

int main(int argc, char **argv) {
    comm *c;
    if (comm_mpi_init(&argc, &argv, &c)) { fprintf(stderr, "%s\n", pt_err()); return 1; }
    const char *mode = argc > 1 ? argv[1] : "all";
    if (strcmp(mode, "abort") == 0) run_abort(c);
    else if (strcmp(mode, "die") == 0) run_die(c);
    else if (strcmp(mode, "clock") == 0) run_clock(c);
    else {
        test_pingpong(c);
        test_waitany(c);
        test_big_and_self(c);
        test_tags_fifo(c);
        test_sizes(c);
        test_allreduce(c);
        test_ireduce(c);
        test_split(c);
        test_timeout(c);
        test_faulty_delay(c);
        test_in_flight(c);
    }
    comm_free(c);
    comm_mpi_finalize();
    return n_failed ? 1 : 0;
}
