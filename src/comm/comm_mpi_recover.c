/* The MPI transport going on after a rank dies (docs/recovery.md "In place"). Debian's Open MPI
 * 4.1 has no ULFM, but under `mpirun --enable-recovery` the survivors of a kill -9 keep running,
 * their point-to-point messages among themselves still flow, and MPI_Comm_create_group (collective
 * over its group only) makes a communicator over them (dev/recycle_p2p.c measured it). What MPI
 * does not do is notice: a receive from the dead rank, or a collective with it, stays pending
 * forever. So in recovery mode (comm_mpi_recover_arm) the blocking collectives are non-blocking
 * ones polled here, and when told (comm_mpi_interrupt: the supervisor's decision) every endpoint
 * made so far is broken: its pending requests fail with the reason (off the progress thread's
 * list at once, and a reduction off its endpoint's: the test that reports them frees them, as
 * any other), later calls on it fail at once, its abort no longer ends the job, and the
 * survivors make a new world of themselves (comm_mpi_survivors, in comm_mpi.c). What a broken
 * endpoint had posted is left to MPI: receives cancelled, sends and collectives never
 * completed, their buffers (this file's own copies) never freed. */
#include "comm/comm_mpi_int.h"
#include "util/pt.h"
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The transport's state (comm_mpi_int.h), here so that comm_mpi.c depends on this file alone. */
mp_engine eng = { .mu = PTHREAD_MUTEX_INITIALIZER };
int mp_threaded;
pthread_mutex_t mpi_mu = PTHREAD_MUTEX_INITIALIZER;
int mp_recover_on;
MPI_Comm mp_job_world = MPI_COMM_WORLD;
static atomic_int epoch;            /* interrupts so far */
static char lost_why[256];          /* the last interrupt's reason */

int mp_epoch_now(void) { return atomic_load(&epoch); }
int mp_broken(const comm *c) { return ((const mp_impl *)c->impl)->epoch != atomic_load(&epoch); }

int mp_broken_err(const comm *c, const char *what) {
    return pt_seterr("mpi: %s on rank %d: %s", what, c->world_rank, lost_why);
}

/* Tests rq and yields the core between tests (sched_yield: what Open MPI's own blocking wait does
 * when the node is oversubscribed), so the collective progresses at every test as a blocking one
 * would, and an interrupt (an atomic load per test) ends the wait. Naps (10 us growing to 200 us
 * between tests) cost about 1 ms a step: each round of a collective's algorithm waited for the
 * next test (bench/bench_recycle_cost.sh; docs/recovery.md "In place"). */
int mp_coll_poll(comm *c, MPI_Request *rq, const char *what) {
    for (;;) {
        int flag = 0;
        MPI_LOCK();
        int e = MPI_Test(rq, &flag, MPI_STATUS_IGNORE);
        MPI_UNLOCK();
        if (e != MPI_SUCCESS) return pt_seterr("mpi: %s on rank %d of %d failed (code %d)", what, c->rank, c->size, e);
        if (flag) return 0;
        if (mp_broken(c)) return mp_broken_err(c, what);
        sched_yield();
    }
}

int mp_allreduce_polled(comm *c, void *buf, size_t n, size_t esz, MPI_Datatype t, sum_fn sum, int *cnt,
                        char *scratch, const void **in) {
    int P = c->size, me = c->rank, *dsp = cnt + P, *rcnt = cnt + 2 * P, *rdsp = cnt + 3 * P;
    char *mine = pt_malloc(n * esz + 1);   /* MPI's copy of buf: a broken reduction keeps it */
    memcpy(mine, buf, n * esz);
    MPI_Request rq;
    MPI_LOCK();
    int e = MPI_Ialltoallv(mine, cnt, dsp, t, scratch, rcnt, rdsp, t, ((mp_impl *)c->impl)->mc, &rq);
    MPI_UNLOCK();
    if (e != MPI_SUCCESS || mp_coll_poll(c, &rq, "allreduce (alltoallv)") < 0) return -1;
    for (int i = 0; i < P; i++) in[i] = scratch + (size_t)rdsp[i] * esz;
    sum(mine + (size_t)dsp[me] * esz, in, P, (size_t)cnt[me]);
    MPI_LOCK();
    e = MPI_Iallgatherv(MPI_IN_PLACE, 0, t, mine, cnt, dsp, t, ((mp_impl *)c->impl)->mc, &rq);
    MPI_UNLOCK();
    if (e != MPI_SUCCESS || mp_coll_poll(c, &rq, "allreduce (allgatherv)") < 0) return -1;
    memcpy(buf, mine, n * esz);
    free(mine);
    free(in);
    free(scratch);
    free(cnt);
    return 0;
}

int mp_allgather_polled(comm *c, float *buf, size_t n, int *cnt) {
    float *mine = pt_malloc(n * sizeof *mine);
    memcpy(mine, buf, n * sizeof *mine);
    MPI_Request rq;
    MPI_LOCK();
    int e = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_FLOAT, mine, cnt, cnt + c->size, MPI_FLOAT,
                            ((mp_impl *)c->impl)->mc, &rq);
    MPI_UNLOCK();
    if (e != MPI_SUCCESS || mp_coll_poll(c, &rq, "allgather") < 0) return -1;
    memcpy(buf, mine, n * sizeof *mine);
    free(mine);
    free(cnt);
    return 0;
}

int mp_barrier_polled(comm *c) {
    if (mp_broken(c)) return mp_broken_err(c, "barrier");
    MPI_Request rq;
    MPI_LOCK();
    int e = MPI_Ibarrier(((mp_impl *)c->impl)->mc, &rq);
    MPI_UNLOCK();
    return e != MPI_SUCCESS ? pt_seterr("mpi: barrier on rank %d failed to start", c->rank) : mp_coll_poll(c, &rq, "barrier");
}

int comm_mpi_recover_arm(void) {
    if (!eng.on)
        return pt_seterr("mpi: going on after a lost rank needs the progress thread (MPI at "
                         "MPI_THREAD_SERIALIZED, PT_MPI_PROGRESS not 0)");
    mp_recover_on = 1;
    return 0;
}

int comm_mpi_interrupts(void) { return atomic_load(&epoch); }

/* Hands r to the progress thread, when it runs (else the rank's own calls complete it). Under
 * mpi_mu, in the hold that posted r: an interrupt (mpi_mu first) then finds r on the thread's
 * list, or r's endpoint already broken when the poster checked it (mp_broken under mpi_mu). */
void mp_engine_add(mp_req *r) {
    if (!eng.on) return;
    pthread_mutex_lock(&eng.mu);
    if (eng.n == eng.cap) {
        eng.cap = eng.cap ? 2 * eng.cap : 64;
        mp_req **a = pt_malloc(sizeof *a * (size_t)eng.cap);
        if (eng.n) memcpy(a, eng.act, sizeof *a * (size_t)eng.n);
        free(eng.act);
        eng.act = a;
    }
    eng.act[eng.n++] = r;
    pthread_cond_signal(&eng.work_cv);
    pthread_mutex_unlock(&eng.mu);
}

atomic_int mp_test_gap_hits;

/* Test hook: PIPETRAIN_TEST_IREDUCE_GAP_MS=MS (read once) sleeps MS milliseconds between a
 * reduction's two insertions, still holding mpi_mu (an interrupt meanwhile waits for both),
 * counted in mp_test_gap_hits (tests/aux_mpi_recover.c interrupts in the gap). */
static void test_gap(void) {
    static long ms = -1;   /* under mpi_mu */
    if (ms < 0) { const char *v = getenv("PIPETRAIN_TEST_IREDUCE_GAP_MS"); ms = v ? atol(v) : 0; }
    if (ms <= 0) return;
    atomic_fetch_add(&mp_test_gap_hits, 1);
    struct timespec t = { ms / 1000, ms % 1000 * 1000000L };
    nanosleep(&t, NULL);
}

/* A posted reduction r linked to its endpoint's list of unfinished ones (posting order) and
 * handed to the progress thread, both in the caller's hold of mpi_mu: comm_mpi_interrupt (which
 * takes mpi_mu first) sees r on both lists or on neither (then the poster saw the endpoint
 * broken and posted nothing). Two holds let an interrupt in between leave r never failed. */
void mp_coll_post(mp_req *r) {
    mp_impl *m = r->c->impl;
    if (m->colls_tail) m->colls_tail->cnext = r; else m->colls = r;
    m->colls_tail = r;
    test_gap();
    mp_engine_add(r);
}

/* r taken off its endpoint's list of unfinished reductions (comm_mpi.c's colls_advance walks
 * it), so that the test that reports r and frees it leaves no pointer to it there. */
static void colls_unlink(mp_req *r) {
    mp_impl *m = r->c->impl;
    mp_req *prev = NULL;
    for (mp_req **at = &m->colls; *at; prev = *at, at = &(*at)->cnext) {
        if (*at != r) continue;
        *at = r->cnext;
        if (m->colls_tail == r) m->colls_tail = prev;
        r->cnext = NULL;
        return;
    }
}

void comm_mpi_interrupt(const char *why) {
    MPI_LOCK();
    snprintf(lost_why, sizeof lost_why, "%s", why);
    atomic_fetch_add(&epoch, 1);
    pthread_mutex_lock(&eng.mu);
    for (int i = 0; i < eng.n;) {   /* every pending request: done, failed, off the progress thread's list */
        mp_req *r = eng.act[i];
        if (r->finished) { i++; continue; }   /* a reduction finished meanwhile: its pass reports it */
        if (!r->coll && !r->is_send) MPI_Cancel(&r->rq);
        if (!r->coll) MPI_Request_free(&r->rq);
        else colls_unlink(r);   /* finished: off the list, as colls_advance takes finished ones */
        r->finished = r->failed = r->broken = r->done = 1;
        snprintf(r->err, sizeof r->err, "mpi: rank %d, %s rank %d tag %d: %s", r->c->world_rank,
                 r->coll ? "reduction with" : r->is_send ? "send to" : "receive from", r->peer, r->tag, why);
        memcpy(r->why, r->err, sizeof r->why);
        eng.act[i] = eng.act[--eng.n];         /* the engine holds none outside its pass */
    }
    pthread_cond_broadcast(&eng.done_cv);   /* their waits end now */
    pthread_cond_signal(&eng.work_cv);
    pthread_mutex_unlock(&eng.mu);
    MPI_UNLOCK();
}
