/* The link probe: latency and bandwidth between two ranks, each direction, measured by
 * ping-pong over the communicator the run itself uses (the same transport and progress; tags
 * of their own). Not here: what a job does with the numbers (run/run_link.c). Contract in
 * comm.h (comm_link_probe); docs/comm.md. */
#include "comm/comm.h"
#include "util/pt.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LINK_SMALL 8   /* bytes of a ping: the latency's message */

/* Every buffer a probe message uses: on the heap, so that after a failed wait (its request still
 * pending: comm.h) the probe can comm_abort before freeing them; on threads a late peer copies
 * into the buffer whichever side comes second. */
typedef struct {
    char ping[LINK_SMALL];
    char ans[2][LINK_SMALL];
    double rtt;
    double v[4], theirs[4];
} link_bufs;

static int link_send(comm *c, int peer, int tag, const void *buf, size_t n, double timeout) {
    comm_req *r;
    return comm_isend(c, peer, tag, buf, n, &r) < 0 ? -1 : comm_wait(c, r, timeout);
}

static int link_recv(comm *c, int peer, int tag, void *buf, size_t n, double timeout) {
    comm_req *r;
    return comm_irecv(c, peer, tag, buf, n, &r) < 0 ? -1 : comm_wait(c, r, timeout);
}

/* One round trip of a small message: the pinger sends, the other answers. Seconds on the pinger. */
static int link_ping(comm *c, int peer, int pinger, double timeout, char *b, double *rtt) {
    double t0 = pt_now();
    if (pinger) {
        if (link_send(c, peer, COMM_TAG_LINK, b, LINK_SMALL, timeout) < 0 ||
            link_recv(c, peer, COMM_TAG_LINK + 1, b, LINK_SMALL, timeout) < 0) return -1;
        *rtt = pt_now() - t0;
        return 0;
    }
    return link_recv(c, peer, COMM_TAG_LINK, b, LINK_SMALL, timeout) < 0 ? -1
           : link_send(c, peer, COMM_TAG_LINK + 1, b, LINK_SMALL, timeout);
}

/* One round of the bandwidth: the sender posts two messages of n bytes back to back, the
 * receiver answers each with a small one as it lands; the gap between the answers is what the
 * second message held the link (the first one's latency and any burst the link lets through
 * cancel out), *total the time from posting to the second answer. Seconds on the sender; the
 * receiver returns 0. */
static int link_pair(comm *c, int peer, int sender, char *big, size_t n, double timeout,
                     char a[2][LINK_SMALL], double *gap, double *total) {
    comm_req *rq[4];
    if (sender) {
        double t0 = pt_now();
        if (comm_irecv(c, peer, COMM_TAG_LINK + 3, a[0], LINK_SMALL, &rq[2]) < 0 ||
            comm_irecv(c, peer, COMM_TAG_LINK + 3, a[1], LINK_SMALL, &rq[3]) < 0 ||
            comm_isend(c, peer, COMM_TAG_LINK + 2, big, n, &rq[0]) < 0 ||
            comm_isend(c, peer, COMM_TAG_LINK + 2, big + n, n, &rq[1]) < 0) return -1;
        if (comm_wait(c, rq[2], timeout) < 0) return -1;
        double t1 = pt_now();
        if (comm_wait(c, rq[3], timeout) < 0) return -1;
        *gap = pt_now() - t1;
        *total = pt_now() - t0;
        return comm_wait(c, rq[0], timeout) < 0 || comm_wait(c, rq[1], timeout) < 0 ? -1 : 0;
    }
    for (int k = 0; k < 2; k++)
        if (link_recv(c, peer, COMM_TAG_LINK + 2, big + (size_t)k * n, n, timeout) < 0 ||
            link_send(c, peer, COMM_TAG_LINK + 3, a[k], LINK_SMALL, timeout) < 0) return -1;
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int comm_link_probe(comm *c, int peer, size_t bytes, int rounds, double timeout, comm_link_dir out[2]) {
    if (peer < 0 || peer >= c->size || peer == c->rank || rounds < 1 || rounds > COMM_LINK_MAX_ROUNDS || bytes < 1)
        return pt_seterr("link probe: rank %d with peer %d of %d ranks, %d rounds (1..%d), %zu bytes: bad "
                         "arguments", c->rank, peer, c->size, rounds, COMM_LINK_MAX_ROUNDS, bytes);
    int low = c->rank < peer;
    double bws[COMM_LINK_MAX_ROUNDS];
    link_bufs *m = pt_calloc(1, sizeof *m);
    double *v = m->v, *theirs = m->theirs;
    char *big = pt_calloc(2 * bytes, 1);
    m->rtt = 1e300;
    int rc = 0;
    for (int k = 0; k < rounds && rc == 0; k++) {   /* latency: the lower rank pings */
        double t = 0;
        rc = link_ping(c, peer, low, timeout, m->ping, &t);
        if (low && t < m->rtt) m->rtt = t;
    }
    if (rc == 0)                                     /* the high rank needs the round trip too */
        rc = low ? link_send(c, peer, COMM_TAG_LINK + 4, &m->rtt, sizeof m->rtt, timeout)
                 : link_recv(c, peer, COMM_TAG_LINK + 4, &m->rtt, sizeof m->rtt, timeout);
    for (int d = 0; d < 2 && rc == 0; d++) {        /* d 0: low -> high sends the pairs; 1: back */
        int sender = low == (d == 0);
        for (int k = 0; k < rounds && rc == 0; k++) {
            double gap = 0, total = 0;
            rc = link_pair(c, peer, sender, big, bytes, timeout, m->ans, &gap, &total);
            /* the gap, unless a late first answer shortened it: then the two messages over the
             * whole time less a round trip (a gap below 0.1 us: memory, not a link) */
            bws[k] = fmin(bytes / fmax(gap, 1e-7), 2.0 * bytes / fmax(total - m->rtt, 1e-7));
        }
        if (sender && rc == 0) {   /* the round least held up by a busy core (each only reads low) */
            qsort(bws, (size_t)rounds, sizeof *bws, cmp_double);
            v[2 * d + 1] = bws[rounds - 1];
        }
    }
    if (low) v[0] = v[2] = m->rtt / 2;
    /* both ends get both directions: each sends what it measured, the other adds it */
    if (rc == 0)
        rc = low ? (link_send(c, peer, COMM_TAG_LINK + 4, v, sizeof m->v, timeout) < 0 ||
                    link_recv(c, peer, COMM_TAG_LINK + 4, theirs, sizeof m->theirs, timeout) < 0 ? -1 : 0)
                 : (link_recv(c, peer, COMM_TAG_LINK + 4, theirs, sizeof m->theirs, timeout) < 0 ||
                    link_send(c, peer, COMM_TAG_LINK + 4, v, sizeof m->v, timeout) < 0 ? -1 : 0);
    if (rc < 0) {   /* a request may still be pending on these buffers: end the job first */
        pt_adderr("link probe between ranks %d and %d: ", c->rank, peer);
        comm_abort(c, pt_err());
    }
    for (int d = 0; d < 2 && rc == 0; d++)
        out[d] = (comm_link_dir){ .latency = v[2 * d] + theirs[2 * d], .bandwidth = v[2 * d + 1] + theirs[2 * d + 1] };
    free(big);
    free(m);
    return rc < 0 ? -1 : 0;
}
