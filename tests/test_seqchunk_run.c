/* Sequence chunks in pipelined jobs (run_opts.seq_chunks, train --seq-chunks): a job over threads
 * whose units are chunks gives the loss and gradients of the whole model in one process (float
 * tolerance), under 1f1b and zb-h1, over 1-3 stages, with data and tensor parallelism; it holds
 * fewer activation bytes than the job without chunks; the plan refuses what chunks do not run. */
#include "model/gpt.h"
#include "run/run.h"
#include "test.h"
#include "util/pt.h"
#include <cblas.h>
#include <string.h>

#define CHUNK_TOL 2e-5   /* chunked pipeline against the whole model, fp32: sums in other orders */

static const gpt_config CFG = { .n_layer = 4, .n_head = 4, .n_embd = 32, .vocab_size = 64,
                                .n_positions = 48 };
enum { BATCH = 4, SEQ = 24 };
static int g_tok[BATCH * SEQ], g_tgt[BATCH * SEQ];
static gpt_model g_init, g_ref;
static float g_ref_loss;

static void setup(void) {
    openblas_set_num_threads(1);   /* as a job sets it: one summation order, no BLAS threads */
    pt_rng r;
    pt_rng_seed(&r, 21);
    for (int i = 0; i < BATCH * SEQ; i++) g_tok[i] = (int)(pt_rng_next(&r) % CFG.vocab_size);
    for (int i = 0; i < BATCH * SEQ; i++) g_tgt[i] = (int)(pt_rng_next(&r) % CFG.vocab_size);
    gpt_init(&g_init, &CFG);
    gpt_init_random(&g_init, 3);
    gpt_init(&g_ref, &CFG);
    memcpy(g_ref.params, g_init.params, g_init.n_held * sizeof(float));
    gpt_forward_backward(&g_ref, g_tok, g_tgt, BATCH, SEQ, &g_ref_loss);
}

/* One iteration of the job of o; its gathered gradients' worst normalised error against the
 * whole model's (worst tensor named), its loss, its largest rank's activation bytes. */
static int run_case(run_opts o, double *err, char *worst, float *loss, size_t *act) {
    run_plan pl;
    run_job *j = NULL;
    gpt_model got;
    memset(&got, 0, sizeof got);
    run_stats st;
    if (run_plan_init(&pl, &o, &CFG, BATCH, SEQ) < 0) return -1;
    int rc = run_job_init(&j, &pl, &g_init, NULL, NULL);
    rc = rc || run_job_iteration(j, g_tok, g_tgt, NULL, 1, &st) < 0 || gpt_init(&got, &CFG) < 0 ||
         run_job_gather(j, &got) < 0;
    *err = 0;
    for (int i = 0; !rc && i < gpt_param_count(&got); i++) {
        const gpt_param_info *pi = gpt_param_info_at(&got, i);
        double e = test_tensor_relerr(got.grads + pi->offset, g_ref.grads + pi->offset, pi->count);
        if (e > *err) { *err = e; snprintf(worst, 64, "%s", pi->name); }
    }
    *loss = st.loss;
    *act = j ? run_job_act_bytes(j) : 0;
    run_job_free(j);
    gpt_free(&got);
    run_plan_free(&pl);
    return rc ? -1 : 0;
}

static void test_case(const char *sname, int P, int D, int tp, int M, int K) {
    run_opts o = { .P = P, .D = D, .tp = tp, .schedule = sname, .M = M, .seq_chunks = K };
    double err = 1;
    float loss = 0;
    size_t act = 0;
    char name[96], worst[64] = "";
    snprintf(name, sizeof name, "%s_P%d_D%d_tp%d_M%d_K%d", sname, P, D, tp, M, K);
    int rc = run_case(o, &err, worst, &loss, &act);
    CHECK(name, rc == 0 && err < CHUNK_TOL && fabs(loss - g_ref_loss) < CHUNK_TOL * fabs(g_ref_loss),
          "%s; grad relerr %g (%s), loss %.7f vs %.7f", rc ? pt_err() : "ran", err, worst, loss, g_ref_loss);
}

/* Stage 0 of 1f1b holds P microbatches' acts; with K chunks P + K - 1 chunks' (each 1/K of a
 * microbatch's rows, no attention probabilities) and the kept keys and values: fewer bytes. */
static void test_fewer_act_bytes(void) {
    run_opts o = { .P = 2, .D = 1, .tp = 1, .schedule = "1f1b", .M = 4, .seq_chunks = 1 };
    double err;
    float loss;
    size_t whole = 0, chunked = 0;
    char worst[64];
    int rc = run_case(o, &err, worst, &loss, &whole);
    o.seq_chunks = 4;
    rc = rc || run_case(o, &err, worst, &loss, &chunked);
    printf("# act bytes, largest rank: 1f1b %zu, --seq-chunks 4 %zu (%.2fx)\n", whole, chunked,
           whole ? (double)chunked / whole : 0);
    CHECK("seq_chunks_hold_fewer_act_bytes", rc == 0 && chunked < whole, "%s; %zu vs %zu",
          rc ? pt_err() : "ran", chunked, whole);
}

static void expect_refused(const char *name, run_opts o, const char *pattern) {
    run_plan pl;
    int rc = run_plan_init(&pl, &o, &CFG, BATCH, SEQ);
    if (rc == 0) run_plan_free(&pl);
    CHECK(name, rc < 0 && strstr(pt_err(), pattern), "rc %d: %s", rc, pt_err());
}

static void test_refusals(void) {
    run_opts o = { .P = 2, .D = 1, .tp = 1, .schedule = "1f1b", .M = 2, .seq_chunks = 5 };
    expect_refused("refuses_k_not_dividing_seq", o, "must divide --seq 24");
    o.seq_chunks = 2, o.recompute = true;
    expect_refused("refuses_recompute", o, "not with --recompute");
    o.recompute = false, o.schedule = "gpipe";
    expect_refused("refuses_gpipe", o, "use 1f1b or zb-h1");
}

int main(void) {
    setup();
    test_case("1f1b", 1, 1, 1, 2, 2);
    test_case("1f1b", 2, 1, 1, 2, 4);
    test_case("1f1b", 3, 1, 1, 1, 3);
    test_case("zb-h1", 2, 1, 1, 4, 2);
    test_case("zb-h1", 3, 1, 1, 2, 4);
    test_case("1f1b", 2, 2, 1, 1, 2);
    test_case("1f1b", 2, 1, 2, 2, 2);
    test_case("zb-h1", 2, 1, 2, 2, 3);
    test_fewer_act_bytes();
    test_refusals();
    gpt_free(&g_init);
    gpt_free(&g_ref);
    TEST_DONE();
}
