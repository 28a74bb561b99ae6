/* Who owns a request (comm.h): the one call that reports it over frees it, and a wait that
 * fails leaves it the caller's. Checked two ways. The transports: a receive that fails (a
 * message larger than its buffer) is reported by a failed wait and then, once, by a test that
 * frees it, on threads and faulty(threads). The executor's failure path: "owning", threads
 * wrapped from the tests folder with handles of its own that are never freed during the run,
 * so a call on a handle already reported over is counted (a use after free or a double free in
 * a real transport) instead of corrupting memory; it fails one chosen message of one rank after
 * it completed, and P=2 jobs (1f1b, 4 microbatches; with and without a wait hook that sleeps in
 * the executor's blocking wait, exec_req_block) must stop with that error and no such call. */
#include "comm/comm.h"
#include "model/gpt.h"
#include "run/run.h"
#include "util/pt.h"
#include "test.h"
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

enum { B = 8, T = 8 };
static const gpt_config CFG = { .n_layer = 4, .n_head = 2, .n_embd = 16, .vocab_size = 32,
                                .n_positions = 8 };

/* ---- the transports' own contract ------------------------------------------------------------ */

/* Rank 1 receives 8 bytes into a 4-byte buffer: its wait fails and leaves the request; a test
 * then reports it over (done, -1) and frees it. */
static void check_failed_wait(const char *name, comm **ep) {
    char big[8] = "1234567", small[4];
    comm_req *s = NULL, *r = NULL;
    int posted = comm_irecv(ep[1], 0, 5, small, sizeof small, &r) == 0;
    CHECK("own: a receive is posted", posted, "%s: %s", name, pt_err());
    if (!posted) return;
    if (comm_isend(ep[0], 1, 5, big, sizeof big, &s) < 0) s = NULL;   /* may fail at once (threads) */
    int w = comm_wait(ep[1], r, 5);
    CHECK("own: the receive's wait fails naming both sizes", w < 0 && strstr(pt_err(), "4"), "%s: %d: %s",
          name, w, pt_err());
    int done = 0, t = comm_test(ep[1], r, &done);
    CHECK("own: after a failed wait the request is still the caller's: a test reports it over, failed",
          t < 0 && done == 1, "%s: test %d done %d", name, t, done);
    done = 0;
    if (s) comm_test(ep[0], s, &done);   /* the send's side: over one way or the other */
    if (s && !done) comm_wait(ep[0], s, 0.01);
}

static void check_transports(void) {
    comm *ep[2], *fa[2];
    if (comm_threads_create(2, ep) == 0) {
        check_failed_wait("threads", ep);
        comm_free(ep[0]); comm_free(ep[1]);
    }
    if (comm_threads_create(2, ep) == 0) {
        int ok = comm_faulty_wrap(ep[0], -1, 0, -1, &fa[0]) == 0 && comm_faulty_wrap(ep[1], -1, 0, -1, &fa[1]) == 0;
        CHECK("own: faulty wraps threads", ok, "%s", pt_err());
        if (ok) check_failed_wait("faulty(threads)", fa);
        comm_free(fa[0]); comm_free(fa[1]);
    }
}

/* ---- "owning": threads with handles that outlive the run ------------------------------------- */

typedef struct ow_req {
    comm_req *inner;        /* threads' request, until it is over */
    int fail;               /* this message fails once it completed (injected) */
    int inner_over, over;   /* threads reported it over; this wrapper did (to its caller) */
    struct ow_req *next;    /* every handle made, freed after the run */
} ow_req;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static ow_req *g_all;
static atomic_int g_misuse;             /* calls on a handle already reported over */
static int g_fail_rank, g_fail_send, g_fail_nth;   /* the message that fails */
static atomic_int g_count;              /* messages of that kind posted by that rank so far */

static comm *inner(comm *c) { return c->impl; }

/* A request of world rank c->world_rank; is_send -1: a reduction; tag: the executor's messages
 * are below COMM_TAG_EXEC_LIMIT (the job's start probes the links with others). */
static ow_req *ow_new(comm *c, int is_send, int tag) {
    ow_req *r = pt_calloc(1, sizeof *r);
    if (c->world_rank == g_fail_rank && is_send == g_fail_send && tag < COMM_TAG_EXEC_LIMIT)
        r->fail = atomic_fetch_add(&g_count, 1) + 1 == g_fail_nth;
    pthread_mutex_lock(&g_mu);
    r->next = g_all, g_all = r;
    pthread_mutex_unlock(&g_mu);
    return r;
}

static int ow_post(ow_req *r, int rc, comm_req **out) {
    if (rc < 0) r->over = 1;
    else *out = (comm_req *)r;
    return rc;
}

static int ow_isend(comm *c, int dst, int tag, const void *b, size_t n, comm_req **out) {
    ow_req *r = ow_new(c, 1, tag);
    return ow_post(r, comm_isend(inner(c), dst, tag, b, n, &r->inner), out);
}

static int ow_irecv(comm *c, int src, int tag, void *b, size_t n, comm_req **out) {
    ow_req *r = ow_new(c, 0, tag);
    return ow_post(r, comm_irecv(inner(c), src, tag, b, n, &r->inner), out);
}

static int ow_ireduce_f32(comm *c, float *b, size_t n, int all, comm_req **out) {
    ow_req *r = ow_new(c, -1, 0);
    return ow_post(r, comm_ireduce_f32(inner(c), b, n, all, &r->inner), out);
}

static int ow_misuse(const char *call) {
    atomic_fetch_add(&g_misuse, 1);
    return pt_seterr("owning: %s of a request already reported over (a use after free)", call);
}

/* Over to the caller: 0, or the injected failure. */
static int ow_result(comm *c, ow_req *r) {
    return r->fail ? pt_seterr("owning: rank %d's message failed (injected)", c->world_rank) : 0;
}

static int ow_test(comm *c, comm_req *req, int *done) {
    ow_req *r = (ow_req *)req;
    *done = 0;
    if (r->over) return ow_misuse("test");
    if (!r->inner_over) {
        int rc = comm_test(inner(c), r->inner, &r->inner_over);
        if (rc < 0 && r->inner_over) r->fail = 1;   /* threads' own failure: the same for us */
        if (!r->inner_over) return rc;
    }
    r->over = *done = 1;
    return ow_result(c, r);
}

static int ow_wait(comm *c, comm_req *req, double timeout) {
    ow_req *r = (ow_req *)req;
    if (r->over) return ow_misuse("wait");
    if (!r->inner_over) {
        if (comm_wait(inner(c), r->inner, timeout) < 0) return -1;   /* still the caller's */
        r->inner_over = 1;
    }
    if (r->fail) return ow_result(c, r);    /* failed: still the caller's, for its test */
    r->over = 1;
    return 0;
}

static int ow_allreduce_f32(comm *c, float *b, size_t n) { return comm_allreduce_f32(inner(c), b, n); }
static int ow_allreduce_f64(comm *c, double *b, size_t n) { return comm_allreduce_f64(inner(c), b, n); }
static int ow_allgather_f32(comm *c, float *b, size_t n) { return comm_allgather_f32(inner(c), b, n); }
static int ow_barrier(comm *c) { return comm_barrier(inner(c)); }
static int ow_split(comm *c, int color, comm **out) { return comm_split(inner(c), color, out); }
static void ow_abort(comm *c, const char *why) { comm_abort(inner(c), why); }
static int ow_world_rank_of(comm *c, int r) { return comm_world_rank_of(inner(c), r); }
static void ow_free(comm *c) { comm_free(inner(c)); free(c); }

static const comm_vtable ow_vtable = {
    .name = "owning", .isend = ow_isend, .irecv = ow_irecv, .test = ow_test, .wait = ow_wait,
    .allreduce_f32 = ow_allreduce_f32, .allreduce_f64 = ow_allreduce_f64, .ireduce_f32 = ow_ireduce_f32,
    .allgather_f32 = ow_allgather_f32, .barrier = ow_barrier, .split = ow_split, .abort = ow_abort,
    .world_rank_of = ow_world_rank_of, .free = ow_free,
};

static int ow_create(int size, comm **out) {
    if (comm_threads_create(size, out) < 0) return -1;
    for (int r = 0; r < size; r++) {
        comm *w = pt_calloc(1, sizeof *w);
        *w = *out[r];
        w->vt = &ow_vtable;
        w->impl = out[r];
        out[r] = w;
    }
    return 0;
}

static const comm_transport owning = { .name = "owning", .help = "threads, request ownership checked",
                                       .create = ow_create };

static void ow_free_all(void) {
    while (g_all) {
        ow_req *r = g_all;
        g_all = r->next;
        free(r);
    }
}

/* A wait hook that sleeps in the executor's blocking wait (exec_req_block) in 1 ms slices. */
static int sleepy_wait(void *user, run_wait *w) {
    (void)user;
    for (;;) {
        int got = w->block(w, pt_now() + 1e-3);
        if (got != 0) return got < 0 ? -1 : 0;
    }
}

/* One iteration of a P=2 job on "owning", message nth of kind (send or receive) of rank fr failing. */
static int run_failing(int fr, int send, int nth, int hook) {
    static int tok[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++) tok[i] = (i * 7 + 3) % CFG.vocab_size, tgt[i] = (i * 5 + 1) % CFG.vocab_size;
    g_fail_rank = fr, g_fail_send = send, g_fail_nth = nth;
    atomic_store(&g_count, 0);
    run_opts o = { .P = 2, .D = 1, .schedule = "1f1b", .M = 4, .transport = "owning", .timeout = 20,
                   .on_wait = hook ? sleepy_wait : NULL };
    run_plan pl = { 0 };
    run_job *j = NULL;
    run_stats st = { 0 };
    gpt_model init;
    gpt_init(&init, &CFG);
    gpt_init_random(&init, 3);
    int rc = run_plan_init(&pl, &o, &CFG, B, T);
    if (rc == 0) rc = run_job_init(&j, &pl, &init, NULL, NULL);
    if (rc == 0) rc = run_job_iteration(j, tok, tgt, NULL, 1, &st);
    run_job_free(j);
    if (pl.s) run_plan_free(&pl);
    gpt_free(&init);
    return rc;
}

static void check_executor(void) {
    CHECK("own: the owning transport joins the registry", comm_transport_register(&owning) == 0, "%s", pt_err());
    CHECK("own: a job on it without failures runs", run_failing(-1, 1, 0, 0) == 0 && atomic_load(&g_misuse) == 0,
          "%s; %d misuses", pt_err(), atomic_load(&g_misuse));
    static const struct { int rank, send, nth, hook; const char *what; } cases[] = {
        { 0, 1, 2, 0, "rank 0's second send (tested between actions: exec_poll_sends)" },
        { 1, 1, 1, 0, "rank 1's first send" },
        { 1, 0, 2, 0, "rank 1's second receive (its wait)" },
        { 1, 0, 2, 1, "rank 1's second receive, in a wait hook (exec_req_block)" },
        { 0, 0, 1, 1, "rank 0's first receive, in a wait hook" },
        { 0, 1, 3, 1, "rank 0's third send, with a wait hook" },
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        atomic_store(&g_misuse, 0);
        int rc = run_failing(cases[k].rank, cases[k].send, cases[k].nth, cases[k].hook);
        CHECK("own: a failed message stops the job with its error", rc < 0 && strstr(pt_err(), "failed"),
              "%s: rc %d: %s", cases[k].what, rc, pt_err());
        CHECK("own: the executor never touches a request after it was reported over",
              atomic_load(&g_misuse) == 0, "%s: %d calls on requests already over", cases[k].what,
              atomic_load(&g_misuse));
    }
    ow_free_all();
}

int main(void) {
    check_transports();
    check_executor();
    TEST_DONE();
}
