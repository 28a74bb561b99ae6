/* comm_waitany (comm.h): one of several requests, on any transport. A transport that can sleep
 * until any of its requests completes fills vtable.waitany (threads, mpi); for one that cannot
 * (a wrapper), this tests them all and waits on the first pending one in short slices. Not here:
 * what the requests are for (the executor's lending, run/exec_lend.c). */
#include "comm/comm.h"
#include "util/pt.h"

/* Request i was tested (done: over and freed, with rc < 0 when it failed): its entry NULL,
 * *which = i; not done but rc < 0 (an abort): -1 with the entry left, *which = -1. */
static int waitany_over(comm_req **reqs, int i, int *which, int rc, int done) {
    if (!done) return -1;
    reqs[i] = NULL;
    *which = i;
    return rc < 0 ? -1 : 0;
}

int comm_waitany(comm *c, comm_req **reqs, int n, double timeout, int *which) {
    if (c->vt->waitany) return c->vt->waitany(c, reqs, n, timeout, which);
    double t0 = pt_now();
    *which = -1;
    for (;;) {
        int first = -1, done = 0, rc;
        for (int i = 0; i < n; i++) {
            if (!reqs[i]) continue;
            if ((rc = comm_test(c, reqs[i], &done)) < 0 || done) return waitany_over(reqs, i, which, rc, done);
            if (first < 0) first = i;
        }
        if (first < 0 || (timeout > 0 && pt_now() - t0 > timeout)) return 0;
        if (comm_wait(c, reqs[first], COMM_WAITANY_SLICE) == 0) return waitany_over(reqs, first, which, 0, 1);
        if ((rc = comm_test(c, reqs[first], &done)) < 0 || done) return waitany_over(reqs, first, which, rc, done);
    }
}
