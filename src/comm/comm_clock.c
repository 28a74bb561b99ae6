/* Clock offsets between the ranks of a communicator, measured by ping-pong over the comm
 * interface (any transport), so timelines stamped by several hosts' clocks can be merged on one
 * time axis. Not a clock synchronisation service: one estimate per call, no drift model (the
 * caller measures again if a run is long enough for the clocks to drift apart).
 *
 * Rank 0 pings rank r: it reads t0, sends, rank r reads its clock tr and answers with it, rank 0
 * reads t1 when the answer arrived. tr was read between t0 and t1 (on rank 0's axis), so
 * offset = tr - (t0 + t1) / 2 is off by at most (t1 - t0) / 2; of `rounds` tries the one with the
 * smallest round trip wins (a try that a busy core or a scheduler held up says least). */
#include "comm/comm.h"
#include "util/pt.h"
#include <math.h>
#include <stdlib.h>

#define TAG_PING COMM_TAG_CLOCK
#define TAG_PONG (COMM_TAG_CLOCK + 1)

/* The messages' buffers: on the heap, so that a failed wait (its request still pending) can be
 * followed by comm_abort before they are freed. */
typedef struct { int ping; double pong; } clock_msg;

/* One try with rank r (rank 0's side): the round trip into *rtt, the offset into *off. */
static int clock_round(comm *c, int r, int k, double timeout, clock_msg *m, double *rtt, double *off) {
    comm_req *rq, *sq;
    m->ping = k;
    if (comm_irecv(c, r, TAG_PONG, &m->pong, sizeof m->pong, &rq) < 0) return -1;
    double t0 = pt_now();
    if (comm_isend(c, r, TAG_PING, &m->ping, sizeof m->ping, &sq) < 0 || comm_wait(c, rq, timeout) < 0) return -1;
    double t1 = pt_now();
    if (comm_wait(c, sq, timeout) < 0) return -1;
    *rtt = t1 - t0;
    *off = m->pong - (t0 + t1) / 2;
    return 0;
}

/* Rank 0's side with rank r: the best of `rounds` tries into *off and *bound. */
static int clock_ping(comm *c, int r, int rounds, double timeout, clock_msg *m, double *off, double *bound) {
    double best = INFINITY;
    for (int k = 0; k < rounds; k++) {
        double rtt, o;
        if (clock_round(c, r, k, timeout, m, &rtt, &o) < 0)
            return pt_adderr("clock offsets: rank 0 with rank %d, round %d of %d: ", r, k + 1, rounds);
        if (rtt < best) { best = rtt; *off = o; }
    }
    *bound = best / 2;
    return 0;
}

/* Rank r's side: answers each of rank 0's pings with its clock. */
static int clock_pong(comm *c, int rounds, double timeout, clock_msg *m) {
    for (int k = 0; k < rounds; k++) {
        comm_req *q;
        if (comm_irecv(c, 0, TAG_PING, &m->ping, sizeof m->ping, &q) < 0 || comm_wait(c, q, timeout) < 0)
            return pt_adderr("clock offsets: rank %d, round %d of %d: ", c->rank, k + 1, rounds);
        m->pong = pt_now();
        if (comm_isend(c, 0, TAG_PONG, &m->pong, sizeof m->pong, &q) < 0 || comm_wait(c, q, timeout) < 0)
            return pt_adderr("clock offsets: rank %d, round %d of %d: ", c->rank, k + 1, rounds);
    }
    return 0;
}

int comm_clock_offsets(comm *c, int rounds, double timeout, double *offsets, double *bounds) {
    if (rounds < 1 || rounds > COMM_CLOCK_MAX_ROUNDS)
        return pt_seterr("clock offsets: %d rounds (give 1..%d)", rounds, COMM_CLOCK_MAX_ROUNDS);
    int n = c->size, rc = 0;
    /* offsets then bounds, shared in one sum: rank 0 fills them, the others add zeros */
    double *v = pt_calloc(2 * (size_t)n, sizeof *v);
    clock_msg *m = pt_calloc(1, sizeof *m);
    if (!c->one_clock) {
        if (c->rank == 0)
            for (int r = 1; r < n && rc == 0; r++) rc = clock_ping(c, r, rounds, timeout, m, &v[r], &v[n + r]);
        else
            rc = clock_pong(c, rounds, timeout, m);
        if (rc < 0) comm_abort(c, pt_err());   /* the others would wait for this rank; m may be pending */
        if (rc == 0) rc = comm_allreduce_f64(c, v, 2 * (size_t)n);
    }
    for (int r = 0; r < n && rc == 0; r++) {
        offsets[r] = v[r];
        if (bounds) bounds[r] = v[n + r];
    }
    free(m);
    free(v);
    return rc;
}
