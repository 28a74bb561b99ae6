/* Inside the MPI transport (comm_mpi.c, comm_mpi_recover.c only): the endpoint, request and
 * progress-thread state both files touch, and the recovery hooks comm_mpi.c calls. */
#ifndef PT_COMM_MPI_INT_H
#define PT_COMM_MPI_INT_H
#include "comm/comm.h"
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>

typedef struct {
    MPI_Comm mc;      /* owned: freed with the endpoint */
    MPI_Comm mc2;     /* owned: a duplicate for the second phase of non-blocking reductions, which
                       * the progress thread starts (collectives must start in one order per
                       * communicator on every rank: these never mix with the rank's own) */
    int tag_ub;       /* largest valid tag (MPI_TAG_UB of the world) */
    int epoch;        /* mp_epoch when made: an older one is broken (a rank was lost) */
    int *world_of;    /* [size] world rank of each rank */
    struct mp_req *colls, *colls_tail;   /* reductions not yet finished, in posting order */
} mp_impl;

struct mp_coll;

typedef struct mp_req {
    MPI_Request rq;
    int is_send, peer, tag;
    size_t bytes;
    struct mp_coll *coll;   /* a non-blocking collective (ireduce), else NULL */
    comm *c;                /* its endpoint (the progress thread checks results with it) */
    int done, failed;       /* progress thread: completed (under the engine's lock), and how */
    int finished;           /* a reduction: all its phases over (failed, err say how) */
    int broken;             /* comm_mpi_interrupt failed it (why) and took it off the progress
                             * thread's list (a reduction also off its endpoint's): its test
                             * reports it (and frees it, not a reduction's buffers, which MPI
                             * may still write) */
    char why[256];
    struct mp_req *cnext;   /* a reduction: the next one of its endpoint */
    char err[256];
} mp_req;

/* The progress thread's state: the requests it completes, and the conditions it signals. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t done_cv;     /* a request completed (ranks wait on it) */
    pthread_cond_t work_cv;     /* a request arrived, or stop (the thread waits on it when idle) */
    mp_req **act;               /* [n] requests not yet complete */
    int n, cap;
    int on, stop;
    pthread_t th;
} mp_engine;

extern mp_engine eng;
extern int mp_threaded;         /* MPI lets any thread call it, one at a time (SERIALIZED or more) */
/* Every MPI call of this file is made under this lock: MPI is used SERIALIZED even where it
 * offers MULTIPLE (Open MPI 4's non-blocking collectives are not safe from two threads at once:
 * their progress runs inside any MPI call). Never held while waiting for a peer, except inside
 * a blocking collective, which progresses everything itself. MPI_Abort takes it when it can within a second. */
extern pthread_mutex_t mpi_mu;
#define MPI_LOCK() pthread_mutex_lock(&mpi_mu)
#define MPI_UNLOCK() pthread_mutex_unlock(&mpi_mu)


/* ---- going on after a lost rank (comm_mpi_recover.c; docs/recovery.md "In place") ---------- */
typedef void (*sum_fn)(void *out, const void **in, int k, size_t n);
extern int mp_recover_on;       /* comm_mpi_recover_arm was called: collectives poll */
extern MPI_Comm mp_job_world;   /* the job's world: MPI_COMM_WORLD, or the survivors' */
/* 1 when c was made before the last comm_mpi_interrupt (its ranks may include a dead one). */
int mp_broken(const comm *c);
/* Sets the interrupt's error for c's call `what` and returns -1. */
int mp_broken_err(const comm *c, const char *what);
/* Recovery mode: waits for the non-blocking collective rq (posted under mpi_mu by the caller)
 * polling, so an interrupt ends the wait: 0 done, -1 (the request left to MPI) broken or failed. */
int mp_coll_poll(comm *c, MPI_Request *rq, const char *what);
comm *mp_endpoint_new(MPI_Comm mc, int tag_ub);
int mp_epoch_now(void);
/* Recovery mode's collectives: the blocking ones as non-blocking ones polled (mp_coll_poll), on
 * buffers of their own (a broken one's are left to MPI, which may still write them). Each takes
 * the arrays it is given (cnt: the slices' counts and displacements as comm_mpi.c lays them). */
int mp_allreduce_polled(comm *c, void *buf, size_t n, size_t esz, MPI_Datatype t, sum_fn sum, int *cnt,
                        char *scratch, const void **in);
int mp_allgather_polled(comm *c, float *buf, size_t n, int *cnt);
int mp_barrier_polled(comm *c);
/* Posting (under mpi_mu, in the hold that checked mp_broken and posted r's MPI request, so that
 * an interrupt finds r on every list it must or the endpoint already broken): r handed to the
 * progress thread; a reduction linked to its endpoint's list first, then handed over. */
void mp_engine_add(mp_req *r);
void mp_coll_post(mp_req *r);
extern atomic_int mp_test_gap_hits;   /* test hook PIPETRAIN_TEST_IREDUCE_GAP_MS's sleeps so far */

#endif
