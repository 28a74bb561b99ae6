/* A transport added from the tests folder through comm/'s registry (comm_transport_register),
 * with no file of src/ changed: "counting", the threads transport wrapped so that every message
 * sent is counted. A job of 2 stages x 2 replicas runs on it (run_opts.transport) and gives the
 * threads transport's loss and gradients bitwise, having sent messages through the wrapper; the
 * registry's errors name the new transport. */
#include "comm/comm.h"
#include "model/gpt.h"
#include "run/run.h"
#include "util/pt.h"
#include "test.h"
#include <stdatomic.h>
#include <string.h>

enum { B = 8, T = 8 };
static const gpt_config CFG = { .n_layer = 4, .n_head = 2, .n_embd = 16, .vocab_size = 32,
                                .n_positions = 8 };
static atomic_long g_sends;

/* ---- the toy transport: every call goes to the inner threads endpoint ---------------------- */
static comm *inner(comm *c) { return c->impl; }
static int ct_isend(comm *c, int dst, int tag, const void *b, size_t n, comm_req **r) {
    atomic_fetch_add(&g_sends, 1);
    return comm_isend(inner(c), dst, tag, b, n, r);
}
static int ct_irecv(comm *c, int src, int tag, void *b, size_t n, comm_req **r) { return comm_irecv(inner(c), src, tag, b, n, r); }
static int ct_test(comm *c, comm_req *r, int *done) { return comm_test(inner(c), r, done); }
static int ct_wait(comm *c, comm_req *r, double t) { return comm_wait(inner(c), r, t); }
static int ct_allreduce_f32(comm *c, float *b, size_t n) { return comm_allreduce_f32(inner(c), b, n); }
static int ct_allreduce_f64(comm *c, double *b, size_t n) { return comm_allreduce_f64(inner(c), b, n); }
static int ct_ireduce_f32(comm *c, float *b, size_t n, int all, comm_req **r) { return comm_ireduce_f32(inner(c), b, n, all, r); }
static int ct_allgather_f32(comm *c, float *b, size_t n) { return comm_allgather_f32(inner(c), b, n); }
static int ct_barrier(comm *c) { return comm_barrier(inner(c)); }
static int ct_split(comm *c, int color, comm **out) { return comm_split(inner(c), color, out); }
static void ct_abort(comm *c, const char *why) { comm_abort(inner(c), why); }
static int ct_world_rank_of(comm *c, int r) { return comm_world_rank_of(inner(c), r); }
static void ct_free(comm *c) { comm_free(inner(c)); free(c); }

static const comm_vtable ct_vtable = {
    .name = "counting", .isend = ct_isend, .irecv = ct_irecv, .test = ct_test, .wait = ct_wait,
    .allreduce_f32 = ct_allreduce_f32, .allreduce_f64 = ct_allreduce_f64, .ireduce_f32 = ct_ireduce_f32,
    .allgather_f32 = ct_allgather_f32, .barrier = ct_barrier, .split = ct_split, .abort = ct_abort,
    .world_rank_of = ct_world_rank_of, .free = ct_free,
};

static int ct_create(int size, comm **out) {
    if (comm_threads_create(size, out) < 0) return -1;
    for (int r = 0; r < size; r++) {
        comm *w = pt_calloc(1, sizeof *w);
        *w = *out[r];
        w->vt = &ct_vtable;
        w->impl = out[r];
        out[r] = w;
    }
    return 0;
}

static const comm_transport counting = { .name = "counting", .help = "threads, messages counted",
                                         .create = ct_create };

/* One iteration of a P=2 x D=2 job on `transport` from init; gradients into out. */
static int run_on(const char *transport, const gpt_model *init, gpt_model *out, float *loss) {
    static int tok[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++) tok[i] = (i * 7 + 3) % CFG.vocab_size, tgt[i] = (i * 5 + 1) % CFG.vocab_size;
    run_opts o = { .P = 2, .D = 2, .schedule = "1f1b", .M = 2, .transport = transport };
    run_plan pl = { 0 };
    run_job *j = NULL;
    run_stats st = { 0 };
    int rc = run_plan_init(&pl, &o, &CFG, B, T);
    if (rc == 0) rc = run_job_init(&j, &pl, init, NULL, NULL);
    if (rc == 0) rc = run_job_iteration(j, tok, tgt, NULL, 1, &st);
    if (rc == 0) rc = run_job_gather(j, out);
    *loss = st.loss;
    run_job_free(j);
    if (pl.s) run_plan_free(&pl);
    return rc;
}

int main(void) {
    CHECK("register: the counting transport joins the registry",
          comm_transport_register(&counting) == 0 && comm_transport_find("counting") == &counting,
          "%s", pt_err());
    CHECK("find: an unknown name lists every transport, the new one too",
          !comm_transport_find("carrier-pigeon") && strstr(pt_err(), "threads, mpi or counting") &&
          strstr(pt_err(), "'carrier-pigeon'"), "%s", pt_err());
    gpt_model init, a, b;
    gpt_init(&init, &CFG); gpt_init(&a, &CFG); gpt_init(&b, &CFG);
    gpt_init_random(&init, 3);
    float la = 0, lb = 0;
    int ra = run_on(NULL, &init, &a, &la);
    long before = atomic_load(&g_sends);
    int rb = run_on("counting", &init, &b, &lb);
    long sends = atomic_load(&g_sends) - before;
    CHECK("job: runs on the counting transport", ra == 0 && rb == 0, "%s", pt_err());
    CHECK("job: its messages went through the wrapper", before == 0 && sends > 0,
          "%ld sends before, %ld during", before, sends);
    CHECK("job: loss and gradients bitwise those of threads", la == lb &&
          !memcmp(a.grads, b.grads, a.num_params * sizeof(float)), "loss %.9g vs %.9g", la, lb);
    gpt_free(&init); gpt_free(&a); gpt_free(&b);
    TEST_DONE();
}
