/* Tensor parallelism in the pipelined runtime (threads transport): the layout's world ranks; plan
 * errors; a job at tp 2 and 4 against the same layout at tp 1 (loss, norm, every gradient,
 * training steps with clipping); the TP all-reduces counted against the model's cost table;
 * --zero 1 against --zero 0 at tp 2, bitwise; bytes per rank;
 * whole tensors from shards (gather, checkpoints: tp 2 -> tp 1 -> tp 2, files bitwise).
 * Not here: the sharded layers themselves (test_tp_model.c), the CLI and MPI (test_tp.sh).
 *
 * Legend: P stages, D replicas, tp TP ranks, M microbatches. */
#include "ckpt/checkpoint.h"
#include "model/gpt.h"
#include "run/run.h"
#include "util/pt.h"
#include "test.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* tp ranks sum a layer's partial products in another order than one rank's matmul does: float32
 * reassociation, a few ulps of the largest term */
#define TP_TOL 1e-4
/* after a few AdamW steps: m/sqrt(v) magnifies ulp-level differences of near-zero gradients */
#define TP_TRAIN_TOL 2e-3
/* --tp-overlap runs a block on two halves of its rows: OpenBLAS rounds a product of N/2 rows
 * differently from one of N rows (docs/tensor-parallel.md, "Bitwise or not"), a few ulps per
 * block (the model's own test allows 5e-6 per block; two blocks here) */
#define OVERLAP_TOL 1e-5

enum { BATCH = 8, SEQ = 8, STEPS = 3 };
/* n_head 4 (tp 1, 2, 4 divide it); a vocabulary no tp divides (wte's rows are padded) */
static const gpt_config CFG = { .n_layer = 2, .n_head = 4, .n_embd = 32, .vocab_size = 67,
                                .n_positions = 8 };
static int g_tok[BATCH * SEQ], g_tgt[BATCH * SEQ];

static void make_data(void) {
    pt_rng r;
    pt_rng_seed(&r, 11);
    for (int i = 0; i < BATCH * SEQ; i++) g_tok[i] = (int)(pt_rng_next(&r) % 67);
    for (int i = 0; i < BATCH * SEQ; i++) g_tgt[i] = (int)(pt_rng_next(&r) % 67);
}

/* ---- layout and plan ---------------------------------------------------------------------- */

static void test_layout(void) {
    run_layout lo;
    int rc = run_layout_init(&lo, 3, 2, 3, 1, &(gpt_config){ .n_layer = 6 }, NULL, 0), bad = 0;
    lo.tp = 2;
    for (int w = 0; rc == 0 && w < run_layout_ranks(&lo); w++) {
        int d, p, t;
        run_layout_coords(&lo, w, &d, &p, &t);
        bad |= run_layout_world_rank(&lo, d, p, t) != w || w != (d * 3 + p) * 2 + t;
    }
    CHECK("layout: w = (d*P + p)*tp + t, and back, over 12 ranks", rc == 0 && !bad && run_layout_ranks(&lo) == 12,
          "rc %d bad %d", rc, bad);
    if (rc == 0) run_layout_free(&lo);
}

static void expect_plan_error(const char *nm, run_opts o, const char *a, const char *b) {
    run_plan pl;
    int rc = run_plan_init(&pl, &o, &CFG, BATCH, SEQ);
    if (rc == 0) run_plan_free(&pl);
    CHECK(nm, rc < 0 && strstr(pt_err(), a) && (!b || strstr(pt_err(), b)), "rc %d: '%s'", rc, pt_err());
}

static void test_plan_errors(void) {
    run_opts o = { .P = 1, .D = 1, .tp = -1, .schedule = "1f1b", .M = 1 };
    expect_plan_error("plan: --tp below 1 is an error", o, "--tp must be >= 1 (got -1)", NULL);
    o.tp = 3;
    expect_plan_error("plan: --tp 3 does not divide n_head 4 (both named)", o, "3", "4");
    o = (run_opts){ .P = 64, .D = 64, .tp = 64, .schedule = "1f1b", .M = 64 };
    expect_plan_error("plan: stages x dp x tp beyond the rank limit", o, "--tp 64 is more than", NULL);
    o = (run_opts){ .P = 1, .D = 1, .tp = 1, .schedule = "1f1b", .M = 1, .tp_overlap = true };
    expect_plan_error("plan: --tp-overlap at tp 1 is an error naming --tp", o, "--tp-overlap needs --tp 2", "--tp is 1");
    o.tp_overlap = false, o.tp_recompute = true;
    expect_plan_error("plan: --tp-recompute at tp 1 is an error", o, "--tp-recompute needs --tp 2", NULL);
    o.tp = 2, o.recompute = true;
    expect_plan_error("plan: --tp-recompute with --recompute is an error", o, "--tp-recompute and --recompute", NULL);
}

/* ---- jobs --------------------------------------------------------------------------------- */

typedef struct {
    float loss[STEPS];
    double norm[STEPS];
    gpt_model m;            /* whole: params and grads gathered after the last iteration */
    run_mem mem0;           /* world rank 0's bytes */
    run_tp_stats tps;       /* the TP all-reduces of every rank, summed */
    int ranks;              /* how many ranks tps sums */
} job_out;

/* The layout (P, D, tp, zero): 1f1b, two microbatches. */
static run_opts layout(int P, int D, int tp, int zero) {
    return (run_opts){ .P = P, .D = D, .tp = tp, .schedule = "1f1b", .M = 2, .zero = zero };
}

/* A job of layout o from the seeded init (or checkpoint dir), `steps` iterations (0 optimizer
 * steps: one gradient, no update), gathered; saves to save_dir when given. */
static int run_opts_case(run_opts o, int steps, const char *from, const char *save_dir, job_out *out) {
    optim_config oc = optim_config_default();
    oc.lr = 1e-2;
    oc.grad_clip = 0.5;   /* on: the norm scales the update */
    run_plan pl;
    run_source src;
    ckpt_manifest *man = pt_calloc(1, sizeof *man);
    run_job *j = NULL;
    memset(out, 0, sizeof *out);
    int rc = run_plan_init(&pl, &o, &CFG, BATCH, SEQ);
    if (rc < 0) { free(man); return -1; }
    if (from) rc = ckpt_read_manifest(man, from) < 0 || run_source_checkpoint(&src, from, man) < 0 ? -1 : 0;
    else run_source_init(&src, &CFG, NULL, 5);
    if (rc == 0) rc = run_job_init_src(&j, &pl, &src, NULL);
    for (int s = 0; rc == 0 && s < (steps ? steps : 1); s++) {
        run_stats st;
        rc = run_job_iteration(j, g_tok, g_tgt, steps ? &oc : NULL, s + 1, &st);
        out->loss[s] = st.loss;
        out->norm[s] = st.grad_norm;
    }
    if (rc == 0) rc = gpt_init(&out->m, &CFG);
    if (rc == 0) rc = run_job_gather(j, &out->m);
    if (rc == 0) run_job_mem(j, 0, &out->mem0);
    if (rc == 0) run_job_tp_stats(j, &out->tps, &out->ranks);
    if (rc == 0 && save_dir) {
        *man = (ckpt_manifest){ .cfg = CFG, .step = steps, .adam_t = steps, .batch = BATCH, .seq = SEQ };
        rc = run_job_save(j, save_dir, man);
    }
    run_job_free(j);
    run_source_free(&src);
    run_plan_free(&pl);
    free(man);
    return rc;
}

static int run_case(int P, int D, int tp, int zero, int steps, const char *from, const char *save_dir,
                    job_out *out) {
    return run_opts_case(layout(P, D, tp, zero), steps, from, save_dir, out);
}

/* Largest whole-tensor normalised error of a's params (grads: 1) against b's, and its tensor. */
static double model_err(const gpt_model *a, const gpt_model *b, int grads, const char **name) {
    double worst = 0;
    *name = "";
    for (int i = 0; i < gpt_param_count(a); i++) {
        const gpt_param_info *pi = gpt_param_info_at(a, i);
        const float *x = (grads ? a->grads : a->params) + pi->offset, *y = (grads ? b->grads : b->params) + pi->offset;
        double e = test_tensor_relerr(x, y, pi->count);
        if (e > worst) { worst = e; *name = pi->name; }
    }
    return worst;
}

static double max_diff(const float *a, const float *b, const double *x, const double *y, int n) {
    double worst = 0;
    for (int i = 0; i < n; i++) {
        double e = a ? test_relerr(a[i], b[i], 1e-6) : test_relerr(x[i], y[i], 1e-6);
        if (e > worst) worst = e;
    }
    return worst;
}

/* grad (no update) and STEPS training steps at tp against tp 1, same P, D. */
static void test_against_tp1(int P, int D, int tp) {
    job_out r, x;
    char nm[160];
    const char *worst;
    int rc = run_case(P, D, 1, 0, 0, NULL, NULL, &r) < 0 ? -1 : run_case(P, D, tp, 0, 0, NULL, NULL, &x);
    snprintf(nm, sizeof nm, "grad P=%d D=%d tp=%d: loss, norm and every gradient as tp 1", P, D, tp);
    double eg = rc < 0 ? 1 : model_err(&x.m, &r.m, 1, &worst);
    CHECK(nm, rc == 0 && test_relerr(x.loss[0], r.loss[0], 1e-6) < TP_TOL && test_relerr(x.norm[0], r.norm[0], 1e-6) < TP_TOL &&
          eg < TP_TOL, "rc %d %s: loss %g/%g norm %g/%g, gradient err %g (%s)", rc, rc < 0 ? pt_err() : "",
          x.loss[0], r.loss[0], x.norm[0], r.norm[0], eg, rc < 0 ? "" : worst);
    gpt_free(&r.m);
    gpt_free(&x.m);
    rc = run_case(P, D, 1, 0, STEPS, NULL, NULL, &r) < 0 ? -1 : run_case(P, D, tp, 0, STEPS, NULL, NULL, &x);
    double el = max_diff(x.loss, r.loss, NULL, NULL, STEPS), en = max_diff(NULL, NULL, x.norm, r.norm, STEPS);
    double ep = rc < 0 ? 1 : model_err(&x.m, &r.m, 0, &worst);
    snprintf(nm, sizeof nm, "train P=%d D=%d tp=%d, %d steps clipped: losses, norms, parameters as tp 1", P, D, tp, STEPS);
    CHECK(nm, rc == 0 && el < TP_TOL && en < TP_TOL && ep < TP_TRAIN_TOL && r.norm[0] > 0.5,
          "rc %d %s: loss err %g, norm err %g (norm %g, clip 0.5), parameter err %g (%s)", rc,
          rc < 0 ? pt_err() : "", el, en, r.norm[0], ep, rc < 0 ? "" : worst);
    gpt_free(&r.m);
    gpt_free(&x.m);
}

/* --zero 1 at tp 2 over two replicas: the same bits as --zero 0 (per-TP-rank groups, slices). */
static void test_zero(void) {
    job_out a, b;
    const char *worst;
    int rc = run_case(1, 2, 2, 0, STEPS, NULL, NULL, &a) < 0 ? -1 : run_case(1, 2, 2, 1, STEPS, NULL, NULL, &b);
    int same = rc == 0 && !memcmp(a.loss, b.loss, sizeof a.loss) && !memcmp(a.norm, b.norm, sizeof a.norm) &&
               !memcmp(a.m.params, b.m.params, a.m.num_params * sizeof(float));
    CHECK("train D=2 tp=2: --zero 1 bitwise --zero 0", same, "rc %d %s: parameter err %g", rc,
          rc < 0 ? pt_err() : "", rc < 0 ? 1 : model_err(&b.m, &a.m, 0, &worst));
    CHECK("memory: --zero 1 at dp 2 holds half the moments of --zero 0 on rank 0",
          rc == 0 && fabs(b.mem0.optim / a.mem0.optim - 0.5) < 0.05, "optimizer bytes %g vs %g",
          b.mem0.optim, a.mem0.optim);
    gpt_free(&a.m);
    gpt_free(&b.m);
}

/* A rank's parameter bytes at tp 2 are about half of tp 1's (the replicated layer norms, biases
 * and wpe aside); the gather before any step is bitwise the seeded whole model. */
static void test_memory_and_gather(void) {
    job_out a, b;
    gpt_model whole;
    int rc = run_case(2, 1, 1, 0, 0, NULL, NULL, &a) < 0 ? -1 : run_case(2, 1, 2, 0, 0, NULL, NULL, &b);
    double ratio = rc == 0 ? b.mem0.params / a.mem0.params : 0;
    CHECK("memory: a rank's parameters at tp 2 are about half of tp 1's", ratio > 0.5 && ratio < 0.6,
          "rc %d: %.0f / %.0f bytes = %.3f", rc, b.mem0.params, a.mem0.params, ratio);
    CHECK("memory: gradients and moments follow the shards", rc == 0 && b.mem0.grads == b.mem0.params,
          "grads %.0f params %.0f", b.mem0.grads, b.mem0.params);
    rc = rc == 0 ? gpt_init(&whole, &CFG) : -1;
    if (rc == 0) gpt_init_random(&whole, 5);
    CHECK("gather at tp 2: the seeded whole model, bitwise (shards cut and placed back)",
          rc == 0 && !memcmp(whole.params, b.m.params, whole.num_params * sizeof(float)), "rc %d", rc);
    if (rc == 0) gpt_free(&whole);
    gpt_free(&a.m);
    gpt_free(&b.m);
}

/* Byte-equal files. */
static int same_file(const char *a, const char *b) {
    FILE *fa = fopen(a, "rb"), *fb = fopen(b, "rb");
    int same = fa && fb, ca = 0, cb = 0;
    while (same && (ca = fgetc(fa)) != EOF && (cb = fgetc(fb)) != EOF) same = ca == cb;
    if (same) same = ca == EOF && fgetc(fb) == EOF;
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}

/* Checkpoints hold whole tensors: tp 2 (zero 1, dp 2) -> tp 1 -> tp 2 (zero 0), each saving
 * again after its start, every chunk file bitwise the first (parameters and moments). */
static void test_checkpoints(void) {
    job_out a, b, c;
    char tmpdir[64] = "/tmp/pt_tp_run_XXXXXX";
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); exit(2); }
    char d0[300], d1[300], d2[300], f0[400], f1[400], f2[400];
    snprintf(d0, sizeof d0, "%s/c0", tmpdir);
    snprintf(d1, sizeof d1, "%s/c1", tmpdir);
    snprintf(d2, sizeof d2, "%s/c2", tmpdir);
    int rc = run_case(2, 2, 2, 1, STEPS, NULL, d0, &a);
    if (rc == 0) rc = run_case(2, 1, 1, 0, 0, d0, d1, &b);   /* one gradient, no update, saved */
    if (rc == 0) rc = run_case(1, 1, 2, 0, 0, d1, d2, &c);
    int same = rc == 0;
    for (int k = 0; same && k < 2; k++) {   /* P=2 in c0, c1; c2 (P=1) holds all in chunk 0 */
        snprintf(f0, sizeof f0, "%s/chunk-%d.safetensors", d0, k);
        snprintf(f1, sizeof f1, "%s/chunk-%d.safetensors", d1, k);
        same = same_file(f0, f1);
    }
    CHECK("checkpoint tp 2 (zero 1, dp 2) -> tp 1: resaved chunk files bitwise", same, "rc %d %s", rc,
          rc < 0 ? pt_err() : f0);
    CHECK("checkpoint -> tp 1 -> tp 2: the same parameters, bitwise", rc == 0 &&
          !memcmp(a.m.params, c.m.params, a.m.num_params * sizeof(float)), "rc %d", rc);
    snprintf(f2, sizeof f2, "%s/manifest.json", d0);
    FILE *f = fopen(f2, "r");
    char buf[4096] = "";
    if (f) { buf[fread(buf, 1, sizeof buf - 1, f)] = 0; fclose(f); }
    CHECK("checkpoint manifest says tp 2 and keeps moments in the chunk files", strstr(buf, "\"tp\":\t2") &&
          strstr(buf, "\"zero\":\t0"), "%.300s", buf);
    gpt_free(&a.m);
    gpt_free(&b.m);
    gpt_free(&c.m);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
}

/* The TP all-reduces the layers [first, end) make in phases (bit 0 F, 1 B, 2 W) of one iteration
 * of M microbatches on a rank: what the model's cost table says per layer, M times. */
static double tp_count(int tp, int M, int first, int end, unsigned phases) {
    gpt_model m;
    double n = 0;
    if (gpt_init_layers_tp(&m, &CFG, 0, 0, 0, tp) < 0) return -1;
    for (int l = first; l < end; l++) {
        gpt_layer_cost c;
        gpt_layer_ops_of(&m, l)->cost(&CFG, BATCH / M, SEQ, tp, &c);
        for (int k = 0; k < 3; k++) n += phases >> k & 1 ? c.tp_collectives[k] : 0;
    }
    gpt_free(&m);
    return n * M;
}

static double tp_collectives_per_iteration(int tp, int M) { return tp_count(tp, M, 0, CFG.n_layer + 2, 7); }

/* The runtime counts the all-reduces its layers call: the cost table's number per iteration on
 * every rank, and none at tp 1. */
static void test_tp_counts(void) {
    job_out a, b;
    int rc = run_case(1, 1, 2, 0, 0, NULL, NULL, &a) < 0 ? -1 : run_case(1, 1, 1, 0, 0, NULL, NULL, &b);
    double want = tp_collectives_per_iteration(2, 2);
    CHECK("tp 2: all-reduces counted per rank, the cost table's number per iteration",
          rc == 0 && a.ranks == 2 && a.tps.calls == 2 * want && want > 0 && a.tps.floats > 0,
          "rc %d: %ld calls over %d ranks, want %g each", rc, rc < 0 ? 0 : a.tps.calls, a.ranks, want);
    CHECK("tp 1: no all-reduce counted", rc == 0 && b.tps.calls == 0 && b.tps.seconds == 0, "rc %d: %ld",
          rc, b.tps.calls);
    gpt_free(&a.m);
    gpt_free(&b.m);
}

/* Largest normalised error of loss, norm and every gradient of x against r (one iteration). */
static double grad_err(const job_out *x, const job_out *r, const char **worst) {
    double e = model_err(&x->m, &r->m, 1, worst), el = test_relerr(x->loss[0], r->loss[0], 1e-6);
    double en = test_relerr(x->norm[0], r->norm[0], 1e-6);
    return e > el ? (e > en ? e : en) : (el > en ? el : en);
}

/* Bitwise the same losses, norms and parameters (steps iterations; gradients too when 0). */
static int same_run(const job_out *a, const job_out *b, int steps) {
    size_t n = a->m.num_params * sizeof(float);
    int k = steps ? steps : 1;
    return !memcmp(a->loss, b->loss, sizeof(float) * k) && !memcmp(a->norm, b->norm, sizeof(double) * k) &&
           !memcmp(a->m.params, b->m.params, n) && (steps || !memcmp(a->m.grads, b->m.grads, n));
}

/* --tp-overlap (tp 2, P stages): gradients and three clipped steps as without, up to the halves'
 * rounding; each block's all-reduces are issued as two halves, so the count grows by the
 * blocks' number; the other layers' stay. */
static void test_overlap(int P) {
    job_out a, b;
    char nm[160];
    const char *worst = "";
    run_opts o = layout(P, 1, 2, 0), ov = o;
    ov.tp_overlap = true;
    int rc = run_opts_case(o, 0, NULL, NULL, &a) < 0 ? -1 : run_opts_case(ov, 0, NULL, NULL, &b);
    double e = rc < 0 ? 1 : grad_err(&b, &a, &worst);
    double want = a.tps.calls + 2 * tp_count(2, o.M, 1, CFG.n_layer + 1, 3);   /* both TP ranks */
    snprintf(nm, sizeof nm, "--tp-overlap P=%d tp=2: loss, norm and every gradient as without (within %g)", P, OVERLAP_TOL);
    CHECK(nm, rc == 0 && e < OVERLAP_TOL, "rc %d %s: err %g (%s)", rc, rc < 0 ? pt_err() : "", e, worst);
    snprintf(nm, sizeof nm, "--tp-overlap P=%d: the blocks' all-reduces issued in two halves", P);
    CHECK(nm, rc == 0 && b.tps.calls == want && b.tps.floats == a.tps.floats, "%ld calls (want %g), %g floats (%g)",
          rc < 0 ? 0 : b.tps.calls, want, b.tps.floats, a.tps.floats);
    gpt_free(&a.m);
    gpt_free(&b.m);
    rc = run_opts_case(o, STEPS, NULL, NULL, &a) < 0 ? -1 : run_opts_case(ov, STEPS, NULL, NULL, &b);
    double ep = rc < 0 ? 1 : model_err(&b.m, &a.m, 0, &worst);
    double el = max_diff(b.loss, a.loss, NULL, NULL, STEPS), en = max_diff(NULL, NULL, b.norm, a.norm, STEPS);
    snprintf(nm, sizeof nm, "--tp-overlap P=%d: %d clipped steps as without", P, STEPS);
    CHECK(nm, rc == 0 && el < OVERLAP_TOL && en < OVERLAP_TOL && ep < TP_TRAIN_TOL, "rc %d: loss %g norm %g param %g (%s)",
          rc, el, en, ep, worst);
    gpt_free(&a.m);
    gpt_free(&b.m);
}

/* --tp-recompute under schedule (P stages, M microbatches, tp 2): bitwise the gradients and three
 * clipped steps of the run that keeps whole activations, with (world rank 0) fewer activation
 * bytes (fewer: 1; else not more: where W comes long after B, a stage keeps whole sets) and not
 * one all-reduce more; --recompute instead repeats F's all-reduces. With --tp-overlap too:
 * bitwise the overlapped run. */
static void test_tp_recompute(const char *schedule, int P, int M, int fewer) {
    job_out a, b, c;
    char nm[200];
    run_opts o = layout(P, 1, 2, 0);
    o.schedule = schedule, o.M = M;
    run_opts tr = o, wr = o;
    tr.tp_recompute = true, wr.recompute = true;
    int rc = run_opts_case(o, 0, NULL, NULL, &a) < 0 || run_opts_case(tr, 0, NULL, NULL, &b) < 0 ? -1
           : run_opts_case(wr, 0, NULL, NULL, &c);
    snprintf(nm, sizeof nm, "--tp-recompute %s P=%d M=%d: bitwise the gradients of whole activations", schedule, P, M);
    CHECK(nm, rc == 0 && same_run(&b, &a, 0), "rc %d %s", rc, rc < 0 ? pt_err() : "");
    snprintf(nm, sizeof nm, "--tp-recompute %s P=%d M=%d: rank 0 holds %s activation bytes", schedule, P, M,
             fewer ? "fewer" : "no more");
    CHECK(nm, rc == 0 && (fewer ? b.mem0.acts < a.mem0.acts : b.mem0.acts <= a.mem0.acts), "%.0f vs %.0f",
          b.mem0.acts, a.mem0.acts);
    snprintf(nm, sizeof nm, "--tp-recompute %s P=%d M=%d: no all-reduce more (%ld); --recompute repeats F's (%ld)",
             schedule, P, M, rc < 0 ? 0 : a.tps.calls, rc < 0 ? 0 : c.tps.calls);
    CHECK(nm, rc == 0 && b.tps.calls == a.tps.calls && c.tps.calls > a.tps.calls, "%ld, %ld, %ld",
          b.tps.calls, a.tps.calls, c.tps.calls);
    gpt_free(&a.m);
    gpt_free(&b.m);
    gpt_free(&c.m);
    run_opts ov = o, both;
    ov.tp_overlap = true;
    both = ov, both.tp_recompute = true;
    rc = run_opts_case(o, STEPS, NULL, NULL, &a) < 0 || run_opts_case(tr, STEPS, NULL, NULL, &b) < 0 ? -1 : 0;
    snprintf(nm, sizeof nm, "--tp-recompute %s P=%d M=%d: %d clipped steps bitwise", schedule, P, M, STEPS);
    CHECK(nm, rc == 0 && same_run(&b, &a, STEPS), "rc %d %s", rc, rc < 0 ? pt_err() : "");
    gpt_free(&a.m);
    gpt_free(&b.m);
    rc = run_opts_case(ov, 0, NULL, NULL, &a) < 0 ? -1 : run_opts_case(both, 0, NULL, NULL, &b);
    snprintf(nm, sizeof nm, "--tp-recompute --tp-overlap %s P=%d M=%d: bitwise --tp-overlap's gradients", schedule, P, M);
    CHECK(nm, rc == 0 && same_run(&b, &a, 0), "rc %d %s", rc, rc < 0 ? pt_err() : "");
    gpt_free(&a.m);
    gpt_free(&b.m);
}

int main(void) {
    make_data();
    test_layout();
    test_plan_errors();
    test_against_tp1(1, 1, 2);
    test_against_tp1(2, 1, 2);
    test_against_tp1(2, 2, 4);
    test_tp_counts();
    test_overlap(1);
    test_overlap(2);
    test_tp_recompute("1f1b", 1, 2, 1);
    test_tp_recompute("1f1b", 2, 4, 1);
    test_tp_recompute("gpipe", 2, 4, 1);
    test_tp_recompute("zb-h1", 2, 4, 0);
    test_tp_recompute("zb-h2", 2, 4, 1);   /* stage 0 rebuilds with its B apart from W */
    test_zero();
    test_memory_and_gather();
    test_checkpoints();
    TEST_DONE();
}
