/* The MPI transport's recovery mode (comm_mpi_recover.c), run by tests/test_recover_recycle.sh
 * under `mpirun --enable-recovery -np 4` (not a test binary on its own). Each check prints "FAIL
 * name: rank r: why" on the rank where it failed and "ok name" on rank 0 when it held there:
 *   armed collectives (polled) give the rank-order sums of the plain ones, bitwise
 *   rank 3 dies (SIGKILL); a blocking allreduce over the old world, an irecv from rank 3 and an
 *     ireduce, all pending, fail with the reason once another thread calls comm_mpi_interrupt;
 *     the ireduce, reported and freed by its test, is no longer on its endpoint's list
 *   the old world refuses new calls at once; its abort does not end the job
 *   comm_mpi_survivors({0,1,2}): a world of 3 whose collectives, splits and messages work
 *   an interrupt while an ireduce is being posted (PIPETRAIN_TEST_IREDUCE_GAP_MS: a sleep between
 *     its two insertions, the interrupt made inside it): the ireduce's bounded wait fails naming
 *     why (was: the reduction, on its endpoint's list only, never failed: the wait ran out) */
#include "comm/comm.h"
#include "comm/comm_mpi_int.h"
#include "util/pt.h"
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int me;

static void check(const char *name, int cond, const char *why) {
    if (!cond) printf("FAIL %s: rank %d: %s\n", name, me, why);
    else if (me == 0) printf("ok %s\n", name);
    fflush(stdout);
}

/* Interrupts once a reduction's post has entered the test hook's gap (5 s bound). */
static void *gap_interrupter(void *arg) {
    int h0 = *(int *)arg;
    struct timespec t = { 0, 1000 * 1000 };
    for (int i = 0; i < 5000 && atomic_load(&mp_test_gap_hits) == h0; i++) nanosleep(&t, NULL);
    comm_mpi_interrupt("the survivors' world broken (the test's decision)");
    return NULL;
}

/* Rank 0 alone posts an ireduce on w (it can never complete) while another thread interrupts in
 * the post's gap: the wait must fail naming the interrupt, well inside its bound. */
static int interrupt_in_post(comm *w) {
    static float buf[64];   /* left to MPI once broken: never freed */
    comm_req *rq = NULL;
    pthread_t th;
    int h0 = atomic_load(&mp_test_gap_hits);
    pthread_create(&th, NULL, gap_interrupter, &h0);
    double t0 = pt_now();
    int posted = comm_ireduce_f32(w, buf, 64, 1, &rq) == 0;
    pthread_join(th, NULL);
    int rc = posted ? comm_wait(w, rq, 5) : 0, done = 0;
    int why = rc < 0 && strstr(pt_err(), "survivors' world broken") != NULL;
    int t = posted && rc < 0 ? comm_test(w, rq, &done) : 0;
    return posted && why && t < 0 && done && atomic_load(&mp_test_gap_hits) == h0 + 1 && pt_now() - t0 < 4.5;
}

static void *interrupter(void *arg) {
    (void)arg;
    struct timespec t = { 0, 300 * 1000 * 1000 };
    nanosleep(&t, NULL);
    comm_mpi_interrupt("rank 3 died (the test's decision)");
    return NULL;
}

/* Rank-order sums of n floats where rank r holds r * 0.1 + i * 1e-3: the plain allreduce's. */
static int armed_collectives(comm *w) {
    enum { N = 1001 };
    float *a = pt_malloc(N * sizeof *a), *want = pt_malloc(N * sizeof *want);
    for (int i = 0; i < N; i++) {
        a[i] = (float)(me * 0.1 + i * 1e-3);
        want[i] = 0;
        for (int r = 0; r < w->size; r++) want[i] += (float)(r * 0.1 + i * 1e-3);
    }
    int ok = comm_allreduce_f32(w, a, N) == 0 && !memcmp(a, want, N * sizeof *a);
    double d = me + 1;
    ok = ok && comm_allreduce_f64(w, &d, 1) == 0 && d == 10 && comm_barrier(w) == 0;
    for (int i = 0; i < N; i++) a[i] = (float)me;
    ok = ok && comm_allgather_f32(w, a, N) == 0;
    for (int i = 0; ok && i < N; i++) {
        size_t lo, hi;
        for (int r = 0; r < w->size; r++) {
            comm_slice(N, r, w->size, &lo, &hi);
            if ((size_t)i >= lo && (size_t)i < hi) ok = a[i] == (float)r;
        }
    }
    free(a);
    free(want);
    return ok;
}

int main(int argc, char **argv) {
    comm *w;
    setenv("PIPETRAIN_TEST_IREDUCE_GAP_MS", "1000", 1);   /* each ireduce's post: 1 s in its gap */
    if (comm_mpi_init(&argc, &argv, &w) < 0) { printf("FAIL init: %s\n", pt_err()); return 1; }
    me = w->rank;
    alarm(60);   /* every wait here is bounded */
    check("recover: arm", comm_mpi_recover_arm() == 0, pt_err());
    check("recover: armed collectives give the plain ones' sums, bitwise", armed_collectives(w), pt_err());
    if (me == 3) raise(SIGKILL);
    comm_req *rq = NULL;
    int posted = comm_irecv(w, 3, 5, &me, sizeof me, &rq) == 0;
    static float red_buf[64];   /* left to MPI once broken: never freed */
    comm_req *red = NULL;
    int red_posted = comm_ireduce_f32(w, red_buf, 64, 1, &red) == 0;
    pthread_t th;
    pthread_create(&th, NULL, interrupter, NULL);
    double t0 = pt_now(), v = 1;
    int rc = comm_allreduce_f64(w, &v, 1);
    check("recover: a blocking allreduce with a dead rank fails once interrupted, naming why",
          rc < 0 && strstr(pt_err(), "rank 3 died") && pt_now() - t0 < 30, pt_err());
    pthread_join(th, NULL);
    rc = posted ? comm_wait(w, rq, 30) : 0;
    int why = rc < 0 && strstr(pt_err(), "rank 3 died"), done = 0;   /* the failed wait left it ours: */
    int t = posted && rc < 0 ? comm_test(w, rq, &done) : 0;          /* a test reports it and frees it */
    check("recover: a pending irecv from the dead rank fails, naming why", posted && why && t < 0 && done, pt_err());
    done = 0;
    t = red_posted ? comm_test(w, red, &done) : 0;
    why = t < 0 && strstr(pt_err(), "rank 3 died");
    check("recover: a pending ireduce fails, naming why; freed by its test, it is off its endpoint's list",
          red_posted && why && done && ((mp_impl *)w->impl)->colls == NULL && ((mp_impl *)w->impl)->colls_tail == NULL,
          red_posted ? pt_err() : "not posted");
    comm_req *sq;
    check("recover: the old world refuses a send at once", comm_isend(w, 1 - (me & 1), 6, &me, sizeof me, &sq) < 0, "isend accepted");
    comm_abort(w, "the test's abort on a broken world");   /* must return: the job goes on */
    int keep[3] = { 0, 1, 2 };
    comm *nw = NULL, *sub = NULL;
    rc = comm_mpi_survivors(keep, 3, &nw);
    int ok = rc == 0 && nw && nw->size == 3 && nw->rank == me && nw->world_rank == me;
    double d = me + 1;
    ok = ok && comm_allreduce_f64(nw, &d, 1) == 0 && d == 6;
    ok = ok && comm_split(nw, me == 2, &sub) == 0 && sub && comm_barrier(sub) == 0 &&
         comm_world_rank_of(sub, 0) == (me == 2 ? 2 : 0);
    int got = -1, out = 100 + me;
    comm_req *a, *b;
    ok = ok && comm_isend(nw, (me + 1) % 3, 7, &out, sizeof out, &a) == 0 &&
         comm_irecv(nw, (me + 2) % 3, 7, &got, sizeof got, &b) == 0 && comm_wait(nw, a, 30) == 0 &&
         comm_wait(nw, b, 30) == 0 && got == 100 + (me + 2) % 3;
    check("recover: the survivors' world: its collectives, split and messages work", ok, pt_err());
    if (me == 0)
        check("recover: an interrupt while an ireduce is posted fails it (its wait ends)", interrupt_in_post(nw), pt_err());
    comm_free(sub);
    comm_free(nw);
    comm_free(w);
    comm_mpi_finalize();
    return 0;
}
