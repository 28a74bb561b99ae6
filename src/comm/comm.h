/* Communication between the ranks of one job: non-blocking point-to-point messages with tags,
 * collectives on groups, and failure propagation. One small interface (a vtable) with one file per
 * transport: comm_threads.c (ranks are threads of one process; the default), comm_mpi.c (Open
 * MPI), and comm_faulty.c (wraps another transport to inject delays and failures for tests).
 *
 * Contract for every transport:
 * - isend never blocks and never waits for the receiver: it returns a request at once. The send
 *   buffer must stay unchanged until the request completes (test/wait says so); a transport may
 *   read it later (zero-copy handover) or copy it at once.
 * - Messages between one (src, dst) pair with the same tag arrive in the order sent. A receive
 *   matches on (src, tag) exactly (no wildcards). A message larger than the receive buffer is an
 *   error naming both sizes.
 * - wait(timeout) returns -1 with an error naming the peer and tag when nothing arrived in time,
 *   and -1 at once after any rank called abort (error: "rank R failed: <why>"), so a dead or failed
 *   rank makes the others stop within a bounded time instead of hanging.
 * - Collectives (allreduce, ireduce, allgather, barrier) are called by every rank of the
 *   communicator in the same order. Sums are taken in a fixed order (by rank), so every rank gets
 *   bitwise the same result and repeated runs agree; allreduce, ireduce (all = 1) and a
 *   reduce-scatter (ireduce, all = 0) followed by allgather give bitwise the same numbers.
 * - Slices: a collective over n elements gives rank r of a communicator of `size` ranks the slice
 *   [n*r/size, n*(r+1)/size) (comm_slice), on every transport.
 * - A non-blocking collective (ireduce) must eventually be waited for (or tested until done) by
 *   every rank; it may progress on its own meanwhile (MPI's progress thread) or only in this
 *   rank's test and wait calls (threads: each rank sums its slice when it looks). Its buffer must
 *   stay untouched until it completes. Other messages and collectives may run meanwhile.
 * - Messages progress without the ranks: on threads a message is handed over by whichever side
 *   comes second; on MPI (SERIALIZED or better) a progress thread per process completes every
 *   request while the ranks compute (docs/comm.md).
 * - Ranks of a split communicator are numbered 0..size-1 by increasing parent rank.
 * The threads and mpi transports go further (docs/comm.md): a message of any size other than the
 * receive buffer's is an error, and their allreduce sums are bitwise identical to each other.
 * - waitany (optional) sleeps until one of several point-to-point requests completes; comm_waitany
 *   gives every transport that call (comm_waitany.c: slices of waits where a transport lacks it).
 * All calls return 0 or -1 with pt_seterr.
 * - Who owns a request: the caller, from the call that made it (isend, irecv, ireduce) until the
 *   one call that reports it over, which frees it: test setting *done = 1 (returning 0, or -1
 *   when the request itself failed: a size mismatch, a broken link), wait returning 0, waitany
 *   setting its entry NULL. Nothing else frees it: a wait that returns -1 (timed out, aborted,
 *   or the request failed) leaves it the caller's, who may test or wait on it again (a failed
 *   one is then reported done, with -1, and freed) or leave it: comm_free frees what is left
 *   (the mpi transport leaves its own to MPI_Finalize). So a caller keeps its pointer in a slot
 *   and clears the slot exactly when test says done or wait returns 0; it never tests a
 *   request again after that (tests/test_comm_own.c holds every transport and the executor's
 *   failure path to this). */
#ifndef PT_COMM_H
#define PT_COMM_H
#include <stddef.h>

/* Every message tag the project uses, in one list (MPI guarantees tags up to 32767): the
 * executor's per-message tags stay below COMM_TAG_EXEC_LIMIT (run_plan.c refuses a schedule that
 * would need more); each other use has its own tags above it. */
#define COMM_TAG_EXEC_LIMIT 32000
#define COMM_TAG_ARRIVAL 32050    /* run/exec_reduce.c: "arrived" messages offered to side work */
#define COMM_TAG_GATHER 32100     /* run/run_job.c: timelines (+0, +1) and tensors (+2, +3) to rank 0 */
#define COMM_TAG_MOVE 32110       /* run/move.c: a re-split's parameters and moments */
#define COMM_TAG_CLOCK 32200      /* comm_clock.c: clock offsets' pings (+0) and pongs (+1) */
#define COMM_TAG_LINK 32300       /* comm_link.c: the link probe's messages (+0 .. +4) */
#define COMM_TAG_TIE_LAG 32400    /* run/exec_tie_lag.c: --defer-tie's parts of a tied gradient */

typedef struct comm comm;
typedef struct comm_req comm_req;

typedef struct {
    const char *name;   /* "threads", "mpi", "faulty(threads)" */
    int (*isend)(comm *c, int dst, int tag, const void *buf, size_t bytes, comm_req **req);
    int (*irecv)(comm *c, int src, int tag, void *buf, size_t bytes, comm_req **req);
    /* *done = 1 when the request is over (then it is freed, whatever the return says). */
    int (*test)(comm *c, comm_req *req, int *done);
    /* Blocks until done (0: req freed), the timeout (seconds; <= 0: no limit) passes, an abort,
     * or req fails: -1, and req is still the caller's (above: who owns a request). */
    int (*wait)(comm *c, comm_req *req, double timeout);
    /* Optional (NULL: comm_waitany tests and waits in slices). Blocks until one of the non-NULL
     * point-to-point requests reqs[0..n) completes: frees it, sets reqs[i] = NULL and *which = i
     * (the others stay pending); or the timeout (seconds; <= 0: no limit) passes: *which = -1,
     * nothing freed; or an abort. 0, or -1 (a failed request: freed, its entry NULL). */
    int (*waitany)(comm *c, comm_req **reqs, int n, double timeout, int *which);
    /* In-place sum over all ranks of c. */
    int (*allreduce_f32)(comm *c, float *buf, size_t n);
    int (*allreduce_f64)(comm *c, double *buf, size_t n);
    /* Non-blocking sum over all ranks of c, in rank order, in place. When the request completes,
     * buf's slice for this rank (comm_slice) holds the sum (all = 0: a reduce-scatter; the rest of
     * buf is unchanged), or all of buf does (all = 1: an allreduce). Complete it with test/wait. */
    int (*ireduce_f32)(comm *c, float *buf, size_t n, int all, comm_req **req);
    /* In place: slice r of rank r's buf (comm_slice) goes to every rank's buf. Blocking. */
    int (*allgather_f32)(comm *c, float *buf, size_t n);
    int (*barrier)(comm *c);
    /* Collective over c: ranks with the same color form a new communicator (*out); color < 0:
     * not in any (*out = NULL). Like MPI_Comm_split with key = rank. */
    int (*split)(comm *c, int color, comm **out);
    /* Tells every rank of the job to stop: their pending and later waits fail naming this rank. */
    void (*abort)(comm *c, const char *why);
    /* The world rank of rank r of c (local: no communication). */
    int (*world_rank_of)(comm *c, int r);
    void (*free)(comm *c);
} comm_vtable;

struct comm {
    const comm_vtable *vt;
    int rank, size;     /* in this communicator */
    int world_rank;     /* in the whole job, for messages */
    int threaded;       /* 1: calls on this endpoint may come from several threads of this
                         * process at once (threads; MPI at SERIALIZED or better); 0: from one
                         * thread at a time only (MPI at a lower thread level) */
    int one_clock;      /* 1: every rank of this communicator reads one clock (threads of one
                         * process; faulty copies its inner's); 0: each its own (MPI) */
    void *impl;
};

/* Convenience wrappers (same contracts as the vtable). */
static inline int comm_isend(comm *c, int dst, int tag, const void *b, size_t n, comm_req **r) { return c->vt->isend(c, dst, tag, b, n, r); }
static inline int comm_irecv(comm *c, int src, int tag, void *b, size_t n, comm_req **r) { return c->vt->irecv(c, src, tag, b, n, r); }
static inline int comm_test(comm *c, comm_req *r, int *done) { return c->vt->test(c, r, done); }
static inline int comm_wait(comm *c, comm_req *r, double timeout) { return c->vt->wait(c, r, timeout); }
/* waitany's contract on every transport (comm_waitany.c): the transport's own, else it tests
 * them all and waits on the first pending one in slices of COMM_WAITANY_SLICE seconds. */
#define COMM_WAITANY_SLICE 0.002
int comm_waitany(comm *c, comm_req **reqs, int n, double timeout, int *which);
static inline int comm_allreduce_f32(comm *c, float *b, size_t n) { return c->vt->allreduce_f32(c, b, n); }
static inline int comm_allreduce_f64(comm *c, double *b, size_t n) { return c->vt->allreduce_f64(c, b, n); }
static inline int comm_ireduce_f32(comm *c, float *b, size_t n, int all, comm_req **r) { return c->vt->ireduce_f32(c, b, n, all, r); }
static inline int comm_allgather_f32(comm *c, float *b, size_t n) { return c->vt->allgather_f32(c, b, n); }
static inline int comm_barrier(comm *c) { return c->vt->barrier(c); }
static inline int comm_split(comm *c, int color, comm **out) { return c->vt->split(c, color, out); }
static inline void comm_abort(comm *c, const char *why) { c->vt->abort(c, why); }
static inline int comm_world_rank_of(comm *c, int r) { return c->vt->world_rank_of(c, r); }
static inline void comm_free(comm *c) { if (c) c->vt->free(c); }

/* Rank r's slice of n elements in a communicator of size ranks: [*lo, *hi). */
static inline void comm_slice(size_t n, int r, int size, size_t *lo, size_t *hi) {
    *lo = n * (size_t)r / (size_t)size;
    *hi = n * (size_t)(r + 1) / (size_t)size;
}

/* ---- transports: one file each plus one row of the registry (comm_transport.c) -------------
 * A transport either makes the endpoints of a whole job for threads of this process (create:
 * threads, or a wrapper of it) or joins a world of processes started by a launcher (init and
 * finalize: mpi). Everyone picks one by name here: --transport, the job's endpoints
 * (run_opts.transport), the end of the process's world. */
typedef struct {
    const char *name;       /* --transport NAME */
    const char *help;       /* one line for --help */
    /* In-process: `size` connected endpoints for `size` threads (out[size]); free each with
     * comm_free. NULL for a world transport. */
    int (*create)(int size, comm **out);
    /* World: this process's endpoint of the launcher's world (*out); NULL for in-process. */
    int (*init)(int *argc, char ***argv, comm **out);
    void (*finalize)(void); /* after the last endpoint of init's world is freed; NULL: nothing */
    int (*available)(void); /* 0 when this build lacks it; NULL: always there */
} comm_transport;

/* Adds a transport (its row is borrowed: keep it alive) before any lookup uses it, from one
 * thread. -1 when the registry is full or the row gives both or neither of create and init. */
int comm_transport_register(const comm_transport *t);
/* The transport named `name` (NULL: "threads"), or NULL with "--transport must be threads or
 * mpi, got 'x'" (every registered name). */
const comm_transport *comm_transport_find(const char *name);
int comm_transport_count(void);
const comm_transport *comm_transport_at(int i);
/* A world transport's start: checks it is available and joins the world (*world); an in-process
 * one: *world = NULL, nothing to do (the job creates its endpoints). 0, or -1 naming it. */
int comm_transport_start(const comm_transport *t, int *argc, char ***argv, comm **world);
/* Frees world (NULL: nothing) and ends t's world (its finalize). */
void comm_transport_stop(const comm_transport *t, comm *world);

/* Threads transport: creates `size` connected endpoints for `size` threads of this process
 * (out[r] is rank r's; each used by one thread only). Free each with comm_free. */
int comm_threads_create(int size, comm **out);

/* MPI transport: MPI_Init_thread asking for MPI_THREAD_SERIALIZED (then a progress thread per
 * process completes requests while the ranks compute, and the endpoint is `threaded`; with less,
 * down to FUNNELED, requests progress inside this rank's calls only) and the world communicator.
 * PT_MPI_PROGRESS=0 in the environment keeps the progress thread off (for comparisons).
 * comm_mpi_available() is 0 when built without MPI. */
int comm_mpi_available(void);
int comm_mpi_init(int *argc, char ***argv, comm **out);
void comm_mpi_finalize(void);
/* Going on after a rank dies (comm_mpi_recover.c; run under `mpirun --enable-recovery`).
 * arm: before the job's first collective, from then on blocking collectives poll (interruptible);
 * -1 without the progress thread. interrupt(why): every endpoint made so far is broken: its
 * pending requests fail with why, later calls on it fail at once, its abort does not end the job;
 * callable from any thread. interrupts: how many so far. survivors: collective over the world
 * ranks keep[0..n) (increasing; of the current world) only: a new world of them in *out (rank i
 * is keep[i]); a caller not in keep gets NULL and communicates nothing. */
int comm_mpi_recover_arm(void);
void comm_mpi_interrupt(const char *why);
int comm_mpi_interrupts(void);
int comm_mpi_survivors(const int *keep, int n, comm **out);

/* Fault injection around `inner` (which it owns): every message to rank `slow_peer` (-1: none)
 * is delivered `delay` seconds late without blocking the sender (a delivery thread posts it when
 * due; over a transport that is not `threaded`, this rank's later calls do); after `die_after`
 * sends (< 0: never) this rank fails: its calls return -1 and it aborts the job ("rank R died").
 * Communicators split from it share its fate and its delays (which follow the peer's world rank). */
int comm_faulty_wrap(comm *inner, int slow_peer, double delay, int die_after, comm **out);
/* The same with no delay, around a communicator the caller keeps (it frees inner after out). */
int comm_faulty_borrow(comm *inner, int die_after, comm **out);
/* From now on, messages from this rank to rank `peer` of c (a communicator made by
 * comm_faulty_wrap or _borrow, not one split from it) take `seconds` longer (0: on time), on c
 * and on every communicator split from it; with `reductions`, a non-blocking reduction on any of
 * them whose ranks include peer starts that late too. Messages to one peer keep their order.
 * -1 when c is not such a communicator, peer is not a rank of it, or seconds < 0. */
int comm_faulty_set_delay(comm *c, int peer, double seconds, int reductions);
/* From now on, the link from this rank to rank `peer` of c (as above) carries `bytes_per_s`
 * bytes per second (0: unlimited): the messages to peer queue on it in the order sent, each
 * holding it bytes / rate seconds, and are delivered at max(now, link free) + bytes / rate +
 * the delay of set_delay, without blocking the sender (the delivery thread posts them). The
 * other direction is the peer's own link (its own call). With `reductions`, a non-blocking
 * reduction whose ranks include peer queues the same way on its communicator (its buffer's
 * bytes at the slowest such rate). -1 as set_delay, or when bytes_per_s is negative or not finite. */
int comm_faulty_set_rate(comm *c, int peer, double bytes_per_s, int reductions);

/* Clock offsets (comm_clock.c): how far each rank's pt_now() reads ahead of rank 0's, so events
 * stamped on different hosts can be put on one time axis (t on rank r is t - offsets[r] on rank
 * 0). Collective over c. NTP-style: rank 0 pings each other rank `rounds` times (1..1000), the
 * rank answers with its clock, and the round with the smallest round trip gives
 * offset = t_remote - (t_send + t_back) / 2, off by at most half that round trip. Every rank
 * gets the whole array offsets[c->size] (offsets[0] = 0), and bounds[c->size] (NULL: not
 * wanted), each offset's error bound (half its best round trip). A one-clock communicator
 * (threads) gives zeros without a message. Each wait is bounded by timeout seconds (<= 0: none).
 * Uses tags COMM_TAG_CLOCK and COMM_TAG_CLOCK + 1 on c while it runs. -1 on a bad argument (on
 * every rank alike), or when a message failed, naming the rank and round: then it has aborted c
 * (the other ranks would wait for this one). */
#define COMM_CLOCK_MAX_ROUNDS 1000
int comm_clock_offsets(comm *c, int rounds, double timeout, double *offsets, double *bounds);

/* Link probe (comm_link.c): what the link between this rank and `peer` of c does, each way,
 * measured over c itself (its transport, progress and any fault wrapper). Called by exactly
 * those two ranks, each naming the other (the other ranks are free meanwhile). The lower rank
 * pings `rounds` times (1..COMM_LINK_MAX_ROUNDS) with small messages: latency = half the best
 * round trip (both directions alike). Then each direction in turn: `rounds` pairs of messages of
 * `bytes` posted back to back, each answered by a small message as it lands; the gap between the
 * two answers is what the second held the link (the first message's latency and a shaper's
 * burst cancel out), unless a late first answer shortened it: a round reads the smaller of bytes
 * / gap and 2 x bytes / (time to the second answer less a round trip), and bandwidth is the best
 * round's (a core busy elsewhere only ever makes a round read low). out[0] is lower -> higher rank,
 * out[1] the way back; both ranks get both. Allocates 2 x bytes. Waits bounded by timeout.
 * Uses tags COMM_TAG_LINK .. +4 on c while it runs. -1 on a bad argument or a failed message,
 * naming both ranks. */
#define COMM_LINK_MAX_ROUNDS 64
typedef struct {
    double latency;     /* seconds one way of a small message */
    double bandwidth;   /* bytes per second a message of `bytes` holds the link for */
} comm_link_dir;
int comm_link_probe(comm *c, int peer, size_t bytes, int rounds, double timeout, comm_link_dir out[2]);

#endif
