/* Equivalence of the pipelined runtime (threads transport) with a single-process run: loss and
 * every gradient for every synchronous schedule, P in {1,2,4}, D in {1,2}; 5 training steps;
 * --zero 1 and the overlapped reduction bitwise equal to --zero 0 and the deferred one; bytes
 * per rank; bad layouts. Not here: MPI (tests/test_run_mpi.sh), the CLI (tests/test_run_cli.sh).
 *
 * The reference is the single-process run with the same microbatching and the same summation
 * order: each (replica, pipe) accumulates its microbatches in increasing order, the head's wte
 * gradient is kept apart where the head's rank differs from the embedding's, and the partial
 * sums are added rank by rank (a rank's own copies first), as the executor and the transport do.
 * Bitwise where the schedule runs each stage's W in increasing microbatch order and the head and
 * embedding of one pipe are not two stages of one rank (zb-v's wte); else within REL_TOL. */
#include "model/gpt.h"
#include "run/run.h"
#include "optim/optim.h"
#include "train/train.h"
#include "util/pt.h"
#include "test.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* float32 sums of the same terms in another order: a few ulps of the largest partial sum */
#define REL_TOL 1e-5
/* the whole batch at once versus microbatches: the same math, reassociated reductions */
#define FULL_TOL 1e-4
/* after 5 AdamW steps: m/sqrt(v) turns ulp-level gradient differences of near-zero entries into
 * visible parameter differences */
#define TRAIN_TOL 1e-4

enum { BATCH = 16, SEQ = 8 };
static const gpt_config CFG = { .n_layer = 8, .n_head = 4, .n_embd = 32, .vocab_size = 64,
                                .n_positions = 8 };
static int g_tok[BATCH * SEQ], g_tgt[BATCH * SEQ];

static void make_data(void) {
    pt_rng r;
    pt_rng_seed(&r, 7);
    for (int i = 0; i < BATCH * SEQ; i++) g_tok[i] = (int)(pt_rng_next(&r) % 64);
    for (int i = 0; i < BATCH * SEQ; i++) g_tgt[i] = (int)(pt_rng_next(&r) % 64);
}

/* ---- the reference ---------------------------------------------------------------------- */

/* One microbatch through every layer: F, then B and W in reverse; grads += into m->grads
 * (head's wte gradient into dwte when not NULL). Returns its mean loss. */
static float ref_microbatch(gpt_model *m, const int *tok, const int *tgt, int b, float scale, float *dwte) {
    int nl = gpt_num_layers(m), C = m->cfg.n_embd;
    size_t nc = (size_t)b * SEQ * C;
    float **act = pt_malloc(sizeof(float *) * (size_t)nl), *sc = pt_falloc(gpt_scratch_floats(m, b, SEQ));
    float *x = pt_falloc(nc), *y = pt_falloc(nc), loss = 0;
    gpt_tied tied = { m->w.wte, dwte };
    const gpt_tied *tp = dwte ? &tied : NULL;
    for (int l = 0; l < nl; l++) act[l] = pt_falloc(gpt_layer_act_floats(m, l, b, SEQ));
    for (int l = 0; l < nl; l++) {
        gpt_layer_kind k = gpt_layer_kind_of(m, l);
        float *o = k == GPT_LAYER_HEAD ? &loss : y;
        gpt_layer_forward(m, l, tp, act[l], sc, o, k == GPT_LAYER_EMBED ? NULL : x,
                          k == GPT_LAYER_EMBED ? tok : k == GPT_LAYER_HEAD ? tgt : NULL, b, SEQ);
        float *t = x; x = y; y = t;
    }
    const float *dy = &scale;
    for (int l = nl - 1; l >= 0; l--) {
        gpt_layer_backward_input(m, l, tp, act[l], sc, l ? y : NULL, dy, b, SEQ);
        dy = y;
        float *t = x; x = y; y = t;
    }
    for (int l = nl - 1; l >= 0; l--) gpt_layer_backward_weight(m, l, tp, act[l], sc, b, SEQ);
    for (int l = 0; l < nl; l++) free(act[l]);
    free(act); free(sc); free(x); free(y);
    return loss;
}

typedef struct { float *g; float *h; } ref_part;   /* (num_params), (V,C) or NULL */

/* Head's wte gradient kept apart for pipe q (the head's rank is not the embedding's)? */
static int ref_split(const sched *s, int q) {
    int K = s->stages_per_pipe;
    return s->stage_rank[q * K] != s->stage_rank[q * K + K - 1];
}

/* Adds (two-level, rank by rank) the copies the executor would reduce: chunk c (or wte: c < 0). */
static void ref_fold(const run_plan *pl, ref_part *part, int c, float *dst, size_t off, size_t n) {
    const sched *s = pl->s;
    int K = s->stages_per_pipe, have = 0;
    float *pre = pt_falloc(n);
    for (int w = 0; w < pl->o.P * pl->o.D; w++) {
        int d = w / pl->o.P, p = w % pl->o.P, np = 0;
        for (int g = 0; g < s->n_stages; g++) {
            if (s->stage_rank[g] != p) continue;
            int q = g / K;
            ref_part *rp = &part[d * s->n_pipes + q];
            const float *src = NULL;
            if (c >= 0 && g % K == c) src = rp->g + off;
            if (c < 0 && g % K == 0) src = rp->g;
            if (c < 0 && g % K == K - 1 && K > 1 && rp->h && g % K != 0) src = rp->h;
            if (!src) continue;
            for (size_t i = 0; i < n; i++) pre[i] = np ? pre[i] + src[i] : src[i];
            np++;
        }
        if (!np) continue;
        for (size_t i = 0; i < n; i++) dst[off + i] = have ? dst[off + i] + pre[i] : pre[i];
        have = 1;
    }
    free(pre);
}

/* Reference gradients of the plan's microbatching into ref->grads; returns the mean loss. */
static float ref_grads(const run_plan *pl, gpt_model *ref) {
    const sched *s = pl->s;
    int D = pl->o.D, M = s->n_mb, b = pl->mb_rows, n_part = D * s->n_pipes;
    size_t V = (size_t)ref->cfg.vocab_size * ref->cfg.n_embd;
    ref_part *part = pt_calloc((size_t)n_part, sizeof *part);
    double loss = 0;
    for (int d = 0; d < D; d++)
        for (int q = 0; q < s->n_pipes; q++) {
            ref_part *rp = &part[d * s->n_pipes + q];
            rp->h = ref_split(s, q) ? pt_falloc(V) : NULL;
            gpt_zero_grad(ref);
            for (int j = 0; j < M; j++) {
                if (s->mb_pipe[j] != q) continue;
                size_t row = (size_t)d * (BATCH / D) + (size_t)j * b;
                loss += ref_microbatch(ref, g_tok + row * SEQ, g_tgt + row * SEQ, b,
                                       1.0f / (float)(M * D), rp->h);
            }
            rp->g = pt_falloc(ref->num_params);
            memcpy(rp->g, ref->grads, ref->num_params * sizeof(float));
        }
    for (int c = 0; c < s->stages_per_pipe; c++) {
        size_t off = ref->layer_off[pl->lo.chunk_first[c]], n = ref->layer_off[pl->lo.chunk_first[c + 1]] - off;
        if (c == 0) { off += V; n -= V; }
        ref_fold(pl, part, c, ref->grads, off, n);
    }
    ref_fold(pl, part, -1, ref->grads, 0, V);
    for (int k = 0; k < n_part; k++) { free(part[k].g); free(part[k].h); }
    free(part);
    return (float)(loss / (M * D));
}

/* Every stage runs its W (or BW) in increasing microbatch order: accumulation order matches. */
static int sched_w_in_order(const sched *s) {
    int *last = pt_malloc(sizeof(int) * (size_t)s->n_stages), ok = 1;
    for (int g = 0; g < s->n_stages; g++) last[g] = -1;
    for (int r = 0; r < s->n_ranks; r++)
        for (int i = 0; i < s->len[r]; i++) {
            sched_action a = s->acts[r][i];
            if (a.kind != ACT_W && a.kind != ACT_BW) continue;
            if (a.mb < last[a.stage]) ok = 0;
            last[a.stage] = a.mb;
        }
    free(last);
    return ok;
}

/* wte accumulates head and embedding W of one rank in the reference's order (one stage, or two
 * ranks apart)? zb-v puts them on one rank as two stages in another order. */
static int sched_wte_in_order(const sched *s) {
    int K = s->stages_per_pipe;
    for (int q = 0; q < s->n_pipes; q++)
        if (K > 1 && !ref_split(s, q)) return 0;
    return 1;
}

/* ---- comparison ------------------------------------------------------------------------- */

typedef struct { int bitwise; double maxerr; char worst[48]; } cmp_res;

static cmp_res compare(const gpt_model *a, const gpt_model *ref, int skip_wte) {
    cmp_res r = { 1, 0, "" };
    for (int i = 0; i < gpt_param_count(ref); i++) {
        const gpt_param_info *pi = gpt_param_info_at(ref, i);
        if (skip_wte && i == 0) continue;
        const float *x = a->grads + pi->offset, *y = ref->grads + pi->offset;
        if (memcmp(x, y, pi->count * sizeof(float))) r.bitwise = 0;
        double e = test_tensor_relerr(x, y, pi->count);
        if (e > r.maxerr) { r.maxerr = e; snprintf(r.worst, sizeof r.worst, "%s", pi->name); }
    }
    return r;
}

static gpt_model g_init;

/* Runs one grad iteration of a layout; NULL opts errors go to the caller. */
static int run_grad(const run_plan *pl, gpt_model *out, float *loss) {
    run_job *j = NULL;
    run_stats st;
    int rc = run_job_init(&j, pl, &g_init, NULL, NULL);
    if (rc == 0) rc = run_job_iteration(j, g_tok, g_tgt, NULL, 1, &st);
    if (rc == 0) rc = run_job_gather(j, out);
    *loss = st.loss;
    run_job_free(j);
    return rc;
}

static void test_case(const char *name, int P, int D, int M, int chunks) {
    char nm[160];
    run_opts o = { .P = P, .D = D, .schedule = name, .M = M, .chunks = chunks };
    run_plan pl;
    snprintf(nm, sizeof nm, "grad %s P=%d D=%d M=%d", name, P, D, M);
    if (run_plan_init(&pl, &o, &CFG, BATCH, SEQ) < 0) {
        printf("# skip %s: %s\n", nm, pt_err());
        return;
    }
    gpt_model got, ref, full;
    gpt_init(&got, &CFG); gpt_init(&ref, &CFG); gpt_init(&full, &CFG);
    memcpy(ref.params, g_init.params, ref.num_params * sizeof(float));
    memcpy(full.params, g_init.params, full.num_params * sizeof(float));
    float loss = 0, ref_loss = ref_grads(&pl, &ref), full_loss;
    int rc = run_grad(&pl, &got, &loss);
    CHECK(nm, rc == 0, "%s", pt_err());
    if (rc == 0) {
        int w_ok = sched_w_in_order(pl.s), wte_ok = sched_wte_in_order(pl.s);
        cmp_res all = compare(&got, &ref, 0), rest = compare(&got, &ref, 1);
        snprintf(nm, sizeof nm, "grad %s P=%d D=%d M=%d loss", name, P, D, M);
        CHECK(nm, loss == ref_loss, "%.9g vs %.9g", loss, ref_loss);
        snprintf(nm, sizeof nm, "grad %s P=%d D=%d M=%d within tolerance", name, P, D, M);
        CHECK(nm, all.maxerr <= REL_TOL, "%s off by %.3g", all.worst, all.maxerr);
        if (w_ok) {
            snprintf(nm, sizeof nm, "grad %s P=%d D=%d M=%d bitwise%s", name, P, D, M, wte_ok ? "" : " (but wte)");
            cmp_res c = wte_ok ? all : rest;
            CHECK(nm, c.bitwise, "%s differs by %.3g", c.worst, c.maxerr);
        } else printf("# %s: W not in microbatch order, tolerance only (max %.3g)\n", nm, all.maxerr);
        gpt_zero_grad(&full);
        gpt_forward_backward(&full, g_tok, g_tgt, BATCH, SEQ, &full_loss);
        cmp_res f = compare(&got, &full, 0);
        snprintf(nm, sizeof nm, "grad %s P=%d D=%d M=%d vs whole batch", name, P, D, M);
        CHECK(nm, f.maxerr <= FULL_TOL && test_relerr(loss, full_loss, 1e-6) <= FULL_TOL,
              "%s off by %.3g, loss %.7g vs %.7g", f.worst, f.maxerr, loss, full_loss);
    }
    gpt_free(&got); gpt_free(&ref); gpt_free(&full);
    run_plan_free(&pl);
}

static const struct { const char *name; int chunks; } SCHEDS[] = {
    { "gpipe", 0 }, { "1f1b", 0 }, { "interleaved-1f1b", 2 }, { "zb-h1", 0 }, { "zb-h2", 0 },
    { "zb-v", 0 }, { "chimera", 0 }, { "greedy", 0 },
};

static void test_equivalence(void) {
    const int Ps[] = { 1, 2, 4 };
    for (size_t k = 0; k < sizeof SCHEDS / sizeof *SCHEDS; k++)
        for (int pi = 0; pi < 3; pi++)
            for (int D = 1; D <= 2; D++)
                test_case(SCHEDS[k].name, Ps[pi], D, 4, SCHEDS[k].chunks);
}


/* ---- training ----------------------------------------------------------------------------- */

/* K steps of the reference (same microbatching and order), losses into out[K]. */
static void ref_train(const run_plan *pl, const optim_config *oc, int K, float *out, gpt_model *ref) {
    adamw_state opt;
    adamw_init(&opt, ref->num_params);
    for (int t = 1; t <= K; t++) {
        out[t - 1] = ref_grads(pl, ref);
        double norm = sqrt(optim_sumsq(ref->grads, ref->num_params));
        train_apply_adamw(ref, &opt, oc, t, optim_lr_at(oc, t), optim_clip_scale(norm, oc->grad_clip));
    }
    adamw_free(&opt);
}

enum { TRAIN_STEPS = 5 };

/* ref and got made from g_init, and in want the single-process losses of TRAIN_STEPS steps
 * (ref trained to its end). */
static void ref_start(const run_plan *pl, const optim_config *oc, float *want, gpt_model *ref,
                      gpt_model *got) {
    gpt_init(ref, &CFG);
    gpt_init(got, &CFG);
    memcpy(ref->params, g_init.params, ref->num_params * sizeof(float));
    ref_train(pl, oc, TRAIN_STEPS, want, ref);
}


static void test_train_case(const char *name, int P, int D, int chunks, double clip) {
    char nm[160];
    run_opts o = { .P = P, .D = D, .schedule = name, .M = 4, .chunks = chunks };
    run_plan pl;
    optim_config oc = optim_config_default();
    oc.lr = 1e-2;
    oc.grad_clip = clip;
    snprintf(nm, sizeof nm, "train %s P=%d D=%d clip %g: %d steps", name, P, D, clip, TRAIN_STEPS);
    if (run_plan_init(&pl, &o, &CFG, BATCH, SEQ) < 0) { CHECK(nm, 0, "%s", pt_err()); return; }
    gpt_model ref, got;
    float want[TRAIN_STEPS], have[TRAIN_STEPS] = { 0 };
    ref_start(&pl, &oc, want, &ref, &got);
    run_job *j = NULL;
    run_stats st;
    int rc = run_job_init(&j, &pl, &g_init, NULL, NULL);
    for (int t = 1; rc == 0 && t <= TRAIN_STEPS; t++) {
        rc = run_job_iteration(j, g_tok, g_tgt, &oc, t, &st);
        have[t - 1] = st.loss;
    }
    if (rc == 0) rc = run_job_gather(j, &got);
    run_job_free(j);
    CHECK(nm, rc == 0, "%s", pt_err());
    double worst = 0;
    int same = 1;
    for (int t = 0; t < TRAIN_STEPS; t++) {
        same &= have[t] == want[t];
        double e = test_relerr(have[t], want[t], 1e-6);
        if (e > worst) worst = e;
    }
    int bitwise = clip <= 0 && sched_w_in_order(pl.s) && sched_wte_in_order(pl.s);
    snprintf(nm, sizeof nm, "train %s P=%d D=%d clip %g: losses %s", name, P, D, clip,
             bitwise ? "bitwise" : "within tolerance");
    CHECK(nm, bitwise ? same : worst <= REL_TOL, "worst %.3g (step 1 %.7g vs %.7g, step %d %.7g vs %.7g)",
          worst, have[0], want[0], TRAIN_STEPS, have[TRAIN_STEPS - 1], want[TRAIN_STEPS - 1]);
    snprintf(nm, sizeof nm, "train %s P=%d D=%d clip %g: loss falls", name, P, D, clip);
    CHECK(nm, have[TRAIN_STEPS - 1] < have[0], "%.5f -> %.5f", have[0], have[TRAIN_STEPS - 1]);
    double perr = test_tensor_relerr(got.params, ref.params, ref.num_params);
    snprintf(nm, sizeof nm, "train %s P=%d D=%d clip %g: parameters", name, P, D, clip);
    CHECK(nm, bitwise ? !memcmp(got.params, ref.params, ref.num_params * sizeof(float)) : perr <= TRAIN_TOL,
          "off by %.3g", perr);
    gpt_free(&ref); gpt_free(&got);
    run_plan_free(&pl);
}

static void test_train(void) {
    test_train_case("1f1b", 2, 2, 0, 0);
    test_train_case("1f1b", 4, 1, 0, 1.0);
    test_train_case("zb-h1", 2, 2, 0, 0);
    test_train_case("interleaved-1f1b", 2, 1, 2, 0);
    test_train_case("zb-v", 2, 2, 0, 1.0);
    test_train_case("chimera", 2, 2, 0, 0);
    test_train_case("chimera", 4, 1, 0, 1.0);
}

/* Faults and a switch of schedule mid-run change no number: zb-h1 P=2 D=2 with a slow link
 * (pipeline, then between replicas) and a slow stage in some steps, switched to an adaptive
 * schedule built for a delay at step 3 and back at step 5 (run_job_replan): losses and parameters
 * bitwise the reference's; a schedule of another shape is refused, the old one staying. */
static void test_replan_faults(void) {
    const char *links[] = { "0-1:0.002@2-3", "1-3:0.003@4-4" }, *stages[] = { "1:1.5@2-2" };
    run_opts o = { .P = 2, .D = 2, .schedule = "zb-h1", .M = 4, .slow_link = links, .n_slow_link = 2,
                   .slow_stage = stages, .n_slow_stage = 1 };
    run_plan pl;
    optim_config oc = optim_config_default();
    oc.lr = 1e-2;
    oc.grad_clip = 0;
    if (run_plan_init(&pl, &o, &CFG, BATCH, SEQ) < 0) { CHECK("replan: plan", 0, "%s", pt_err()); return; }
    double delay[1] = { 3 };
    sched_params sp = { .ranks = 2, .microbatches = 4, .cost_f = 1, .cost_b = 1, .cost_w = 1, .mem_limit = 4,
                        .link_delay = delay };
    sched *ad = sched_generate("adaptive", &sp), *other = sched_generate("1f1b", &(sched_params){ .ranks = 2, .microbatches = 2 });
    sched *start = sched_copy(pl.s);
    gpt_model ref, got;
    float want[TRAIN_STEPS], have[TRAIN_STEPS] = { 0 };
    ref_start(&pl, &oc, want, &ref, &got);
    run_job *j = NULL;
    run_stats st;
    int rc = ad && other ? run_job_init(&j, &pl, &g_init, NULL, NULL) : -1, refused = 0;
    size_t act0 = rc == 0 ? run_job_act_bytes(j) : 0, act_ad = 0;
    for (int t = 1; rc == 0 && t <= TRAIN_STEPS; t++) {
        if (t == 3) {
            refused = run_job_replan(j, other) < 0 && strstr(pt_err(), "shape") && !strcmp(run_job_schedule(j)->name, "zb-h1");
            rc = run_job_replan(j, ad);
            act_ad = run_job_act_bytes(j);
        }
        if (t == 5 && rc == 0) rc = run_job_replan(j, start);
        if (rc == 0) rc = run_job_iteration(j, g_tok, g_tgt, &oc, t, &st);
        have[t - 1] = st.loss;
    }
    if (rc == 0) rc = run_job_gather(j, &got);
    run_job_free(j);
    CHECK("replan with faults: runs", rc == 0, "%s", pt_err());
    CHECK("replan: a schedule of another shape is refused, the old one kept", refused, "%s", pt_err());
    CHECK("replan: the adaptive schedule holds more activations", act_ad > act0, "%zu vs %zu", act_ad, act0);
    CHECK("replan with faults: losses bitwise", !memcmp(have, want, sizeof have), "step 5 %.9g vs %.9g", have[4], want[4]);
    CHECK("replan with faults: parameters bitwise", !memcmp(got.params, ref.params, ref.num_params * sizeof(float)),
          "off by %.3g", test_tensor_relerr(got.params, ref.params, ref.num_params));
    gpt_free(&ref); gpt_free(&got);
    sched_free(ad); sched_free(other); sched_free(start);
    run_plan_free(&pl);
}

/* A rank that dies mid-step: the others stop with an error naming it (no hang). gpipe and rank
 * 0 dying at its second send: no message to it can have arrived yet, so the dead rank leaves no
 * completed receive behind (comm_faulty cannot free those once dead: a leak under ASan). */
static void test_rank_dies(void) {
    run_opts o = { .P = 4, .D = 1, .schedule = "gpipe", .M = 4, .fail_rank = 0, .fail_after = 1,
                   .timeout = 10 };
    run_plan pl;
    if (run_plan_init(&pl, &o, &CFG, BATCH, SEQ) < 0) { CHECK("rank dies", 0, "%s", pt_err()); return; }
    run_job *j = NULL;
    run_stats st;
    double t0 = pt_now();
    int rc = run_job_init(&j, &pl, &g_init, NULL, NULL);
    if (rc == 0) rc = run_job_iteration(j, g_tok, g_tgt, NULL, 1, &st);
    double dt = pt_now() - t0;
    CHECK("rank dies: the job fails naming it", rc < 0 && strstr(pt_err(), "rank 0"), "rc %d: %s", rc, pt_err());
    CHECK("rank dies: the others stop before their timeout", dt < 5, "took %.1f s", dt);
    run_job_free(j);
    run_plan_free(&pl);
}

/* ---- recomputation ------------------------------------------------------------------------ */

/* --recompute gives bitwise the gradients (and pipedream's updates) of keeping activations;
 * `fewer`: and the busiest rank holds fewer activation bytes (where F to W keeps more
 * microbatches in flight than B to W plus the forward's spare set). */
static void test_recompute_case(const char *name, int P, int D, int chunks, int M, int fewer) {
    char nm[128];
    gpt_model a, b;
    gpt_init(&a, &CFG); gpt_init(&b, &CFG);
    optim_config oc = optim_config_default();
    int rc = 0;
    size_t bytes[2] = { 0, 0 };
    for (int rcmp = 0; rcmp < 2 && rc == 0; rcmp++) {
        run_opts o = { .P = P, .D = D, .schedule = name, .M = M, .chunks = chunks, .recompute = rcmp };
        run_plan pl;
        run_job *j = NULL;
        run_stats st;
        rc = run_plan_init(&pl, &o, &CFG, BATCH, SEQ);
        if (rc == 0) rc = run_job_init(&j, &pl, &g_init, NULL, NULL);
        for (int t = 1; rc == 0 && t <= 2; t++) rc = run_job_iteration(j, g_tok, g_tgt, &oc, t, &st);
        if (rc == 0) rc = run_job_gather(j, rcmp ? &b : &a);
        if (j) bytes[rcmp] = run_job_act_bytes(j);
        run_job_free(j);
        if (pl.s) run_plan_free(&pl);
    }
    snprintf(nm, sizeof nm, "recompute %s P=%d D=%d: 2 steps bitwise as without", name, P, D);
    CHECK(nm, rc == 0 && !memcmp(a.params, b.params, a.num_params * sizeof(float)) &&
              !memcmp(a.grads, b.grads, a.num_params * sizeof(float)), "rc %d %s", rc, pt_err());
    if (fewer) {
        snprintf(nm, sizeof nm, "recompute %s P=%d D=%d M=%d: the busiest rank holds fewer activations", name, P, D, M);
        CHECK(nm, bytes[1] < bytes[0], "%zu bytes with, %zu without", bytes[1], bytes[0]);
    }
    gpt_free(&a); gpt_free(&b);
}

static void test_recompute(void) {
    test_recompute_case("1f1b", 2, 2, 0, 4, 0);
    test_recompute_case("1f1b", 4, 1, 0, 8, 1);     /* rank 0: 4 in flight from F, 1 + 1 from B */
    test_recompute_case("gpipe", 2, 1, 0, 8, 1);    /* 8 in flight from F */
    test_recompute_case("zb-h1", 4, 1, 0, 4, 0);
    test_recompute_case("zb-v", 2, 1, 0, 4, 0);
    test_recompute_case("interleaved-1f1b", 2, 1, 2, 4, 0);
    test_recompute_case("chimera", 2, 1, 0, 4, 0);
    test_recompute_case("pipedream", 2, 2, 0, 4, 0);
}

/* ---- pipedream (asynchronous, weight stashing) -------------------------------------------- */

/* One stage: pipedream is AdamW after every microbatch (no staleness): bitwise against that. */
static void test_pipedream_one_stage(void) {
    run_opts o = { .P = 1, .D = 1, .schedule = "pipedream", .M = 4 };
    run_plan pl;
    optim_config oc = optim_config_default();
    oc.lr = 1e-2;
    if (run_plan_init(&pl, &o, &CFG, BATCH, SEQ) < 0) { CHECK("pipedream P=1", 0, "%s", pt_err()); return; }
    gpt_model ref, got;
    gpt_init(&ref, &CFG); gpt_init(&got, &CFG);
    memcpy(ref.params, g_init.params, ref.num_params * sizeof(float));
    adamw_state opt;
    adamw_init(&opt, ref.num_params);
    int b = pl.mb_rows, u = 0;
    for (int t = 1; t <= 2; t++)
        for (int j = 0; j < 4; j++) {
            gpt_zero_grad(&ref);
            ref_microbatch(&ref, g_tok + (size_t)j * b * SEQ, g_tgt + (size_t)j * b * SEQ, b, 1.0f, NULL);
            double clip = optim_clip_scale(sqrt(optim_sumsq(ref.grads, ref.num_params)), oc.grad_clip);
            train_apply_adamw(&ref, &opt, &oc, ++u, optim_lr_at(&oc, t), clip);   /* P=1: the whole clip */
        }
    adamw_free(&opt);
    run_job *j = NULL;
    run_stats st;
    int rc = run_job_init(&j, &pl, &g_init, NULL, NULL);
    for (int t = 1; rc == 0 && t <= 2; t++) rc = run_job_iteration(j, g_tok, g_tgt, &oc, t, &st);
    if (rc == 0) rc = run_job_gather(j, &got);
    run_job_free(j);
    CHECK("pipedream P=1: AdamW after every microbatch, bitwise",
          rc == 0 && !memcmp(got.params, ref.params, ref.num_params * sizeof(float)), "rc %d %s, off by %.3g",
          rc, pt_err(), test_tensor_relerr(got.params, ref.params, ref.num_params));
    gpt_free(&ref); gpt_free(&got);
    run_plan_free(&pl);
}

/* Several stages: trains, and every backward ran on the weights its forward used, some of
 * which had been updated since (so stashing was needed). */
static void test_pipedream(int P, int D) {
    char nm[128];
    run_opts o = { .P = P, .D = D, .schedule = "pipedream", .M = 4 };
    run_plan pl;
    optim_config oc = optim_config_default();
    oc.lr = 1e-2;
    oc.grad_clip = 0;          /* stashing under test; the per-stage clip slows these 8 steps */
    enum { STEPS = 8 };
    snprintf(nm, sizeof nm, "pipedream P=%d D=%d: %d steps", P, D, STEPS);
    if (run_plan_init(&pl, &o, &CFG, BATCH, SEQ) < 0) { CHECK(nm, 0, "%s", pt_err()); return; }
    run_job *j = NULL;
    run_stats st;
    float first = 0, last = 0;
    int rc = run_job_init(&j, &pl, &g_init, NULL, NULL), stash[3] = { 0, 0, 0 };
    for (int t = 1; rc == 0 && t <= STEPS; t++) {
        rc = run_job_iteration(j, g_tok, g_tgt, &oc, t, &st);
        if (t == 1) first = st.loss;
        last = st.loss;
    }
    if (j) run_job_stash_stats(j, stash);
    run_job_free(j);
    CHECK(nm, rc == 0, "%s", pt_err());
    snprintf(nm, sizeof nm, "pipedream P=%d D=%d: loss falls", P, D);
    CHECK(nm, last < 0.95f * first, "%.4f -> %.4f", first, last);
    snprintf(nm, sizeof nm, "pipedream P=%d D=%d: every backward used its forward's weights", P, D);
    CHECK(nm, stash[0] == P * D * 4 * STEPS && stash[1] == 0, "%d backwards, %d on other weights",
          stash[0], stash[1]);
    snprintf(nm, sizeof nm, "pipedream P=%d D=%d: weights changed between some F and B", P, D);
    CHECK(nm, stash[2] > 0, "no backward saw newer weights: stashing untested");
    run_plan_free(&pl);
}

/* ---- ZeRO-1 and the overlapped reduction --------------------------------------------------- */

/* One way of running 3 training steps; what it ended with. */
typedef struct { int zero, no_overlap; size_t bucket; const char *what; } red_mode;
typedef struct { int rc; float loss[3]; double norm[3]; gpt_model m; run_mem mem[8]; int R; } red_out;

static void run_red_mode(const char *name, int P, int D, int chunks, const red_mode *md, red_out *out) {
    run_opts o = { .P = P, .D = D, .schedule = name, .M = 4, .chunks = chunks, .zero = md->zero,
                   .no_overlap = md->no_overlap, .bucket = md->bucket };
    optim_config oc = optim_config_default();
    run_plan pl;
    run_job *j = NULL;
    run_stats st;
    oc.lr = 1e-2;
    oc.grad_clip = 0.5;   /* the norm takes part: it must come out bitwise too */
    gpt_init(&out->m, &CFG);
    out->R = P * D;
    out->rc = run_plan_init(&pl, &o, &CFG, BATCH, SEQ);
    if (out->rc == 0) out->rc = run_job_init(&j, &pl, &g_init, NULL, NULL);
    for (int t = 1; out->rc == 0 && t <= 3; t++) {
        out->rc = run_job_iteration(j, g_tok, g_tgt, &oc, t, &st);
        out->loss[t - 1] = st.loss;
        out->norm[t - 1] = st.grad_norm;
    }
    for (int w = 0; out->rc == 0 && w < out->R && w < 8; w++) run_job_mem(j, w, &out->mem[w]);
    if (out->rc == 0) out->rc = run_job_gather(j, &out->m);
    run_job_free(j);
    if (pl.s) run_plan_free(&pl);
}

/* Deferred or overlapped, moments whole or sharded: bitwise the same losses, norms and
 * parameters (clipping on), with one bucket per group or many (small buckets, slices crossing
 * tensors). The norm's pieces follow the buckets, so each bucket size has its own reference. */
static void test_zero_overlap_case(const char *name, int P, int D, int chunks, int small_buckets) {
    static const red_mode modes[] = {
        { 0, 1, 0, "--zero 0, deferred" }, { 0, 0, 0, "--zero 0, overlapped" },
        { 1, 1, 0, "--zero 1, deferred" }, { 1, 0, 0, "--zero 1, overlapped" },
        { 0, 1, 37, "--zero 0, deferred, buckets of 37" }, { 0, 0, 37, "--zero 0, overlapped, buckets of 37" },
        { 1, 0, 37, "--zero 1, overlapped, buckets of 37" },
    };
    int N_MODES = small_buckets ? (int)(sizeof modes / sizeof *modes) : 4;
    red_out *out = pt_calloc((size_t)N_MODES, sizeof *out);
    char nm[200];
    for (int k = 0; k < N_MODES; k++) run_red_mode(name, P, D, chunks, &modes[k], &out[k]);
    for (int k = 1; k < N_MODES; k++) {
        int r = modes[k].bucket ? 4 : 0;   /* the deferred --zero 0 run of the same buckets */
        if (k == r) continue;
        snprintf(nm, sizeof nm, "%s P=%d D=%d: %s equals %s bitwise (3 steps, clipped)", name, P, D,
                 modes[k].what, modes[r].what);
        int same = out[r].rc == 0 && out[k].rc == 0 &&
                   !memcmp(out[k].loss, out[r].loss, sizeof out[r].loss) &&
                   !memcmp(out[k].norm, out[r].norm, sizeof out[r].norm) &&
                   !memcmp(out[k].m.params, out[r].m.params, out[r].m.num_params * sizeof(float));
        CHECK(nm, same, "rc %d/%d %s; loss %.9g vs %.9g, norm %.17g vs %.17g, params off by %.3g",
              out[r].rc, out[k].rc, pt_err(), out[k].loss[2], out[r].loss[2], out[k].norm[2],
              out[r].norm[2], test_tensor_relerr(out[k].m.params, out[r].m.params, out[r].m.num_params));
    }
    for (int k = 0; k < N_MODES; k++) gpt_free(&out[k].m);
    free(out);
}

/* Bytes each rank reports: a stage holds its layers only (no rank anything near the whole
 * model with P = 4), and --zero 1 at dp 2 halves every rank's optimizer bytes. */
static void test_mem_per_rank(void) {
    red_mode z0 = { 0, 0, 0, "" }, z1 = { 1, 0, 0, "" };
    red_out a, b, c;
    memset(&a, 0, sizeof a); memset(&b, 0, sizeof b); memset(&c, 0, sizeof c);
    run_red_mode("1f1b", 4, 1, 0, &z0, &a);
    run_red_mode("1f1b", 2, 2, 0, &z0, &b);
    run_red_mode("1f1b", 2, 2, 0, &z1, &c);
    double whole = 4.0 * (double)gpt_config_num_params(&CFG), V = 4.0 * CFG.vocab_size * CFG.n_embd;
    double sum = 0, mx = 0;
    for (int w = 0; w < 4; w++) {
        sum += a.mem[w].params;
        mx = a.mem[w].params > mx ? a.mem[w].params : mx;
    }
    CHECK("memory P=4: the stages' parameters add up to the model plus the head's wte copy",
          a.rc == 0 && sum == whole + V, "sum %.0f, model %.0f + wte %.0f", sum, whole, V);
    CHECK("memory P=4: no rank holds the whole model's parameters, gradients or moments",
          a.rc == 0 && mx < whole && a.mem[1].grads == a.mem[1].params && a.mem[1].optim == 2 * a.mem[1].params,
          "largest %.0f of %.0f", mx, whole);
    int half = b.rc == 0 && c.rc == 0;   /* wte's moments go over 4 ranks (2 owners, 2 copies) */
    for (int w = 0; w < 4 && half; w++)
        half = c.mem[w].optim <= b.mem[w].optim / 2 + 64 && c.mem[w].optim >= b.mem[w].optim / 4 &&
               c.mem[w].params == b.mem[w].params;
    CHECK("memory: --zero 1 at dp 2 at least halves every rank's optimizer bytes", half,
          "rank 0: %.0f vs %.0f, rank 1: %.0f vs %.0f", c.mem[0].optim, b.mem[0].optim, c.mem[1].optim,
          b.mem[1].optim);
    gpt_free(&a.m); gpt_free(&b.m); gpt_free(&c.m);
}

static void test_zero_overlap(void) {
    test_zero_overlap_case("1f1b", 2, 2, 0, 1);
    test_zero_overlap_case("interleaved-1f1b", 2, 2, 2, 0);
    test_zero_overlap_case("zb-v", 2, 2, 0, 0);
    test_zero_overlap_case("chimera", 2, 2, 0, 0);
    test_zero_overlap_case("chimera", 2, 1, 0, 1);   /* dp 1: two pipes and the tie still share */
    test_zero_overlap_case("zb-h1", 4, 1, 0, 0);     /* dp 1: only the tie is shared */
    test_mem_per_rank();
}

/* ---- bad layouts -------------------------------------------------------------------------- */

static void expect_plan_error(const char *nm, run_opts o, int B, const char *pattern) {
    run_plan pl;
    int rc = run_plan_init(&pl, &o, &CFG, B, SEQ);
    if (rc == 0) run_plan_free(&pl);
    CHECK(nm, rc < 0 && strstr(pt_err(), pattern), "rc %d, error '%s' lacks '%s'", rc, pt_err(), pattern);
}

/* run_layout_init from counts: chunk c's first layer; the embedding joins chunk 0, the head the
 * last chunk; NULL is the even split. */
static void test_layout_counts(void) {
    run_layout lo;
    int rc = run_layout_init(&lo, 3, 1, 3, 1, &(gpt_config){ .n_layer = 8 }, (int[]){1, 2, 5}, 3);
    CHECK("layout: counts 1,2,5 give chunks [0,2) [2,4) [4,10)", rc == 0 && lo.chunk_first[0] == 0 &&
          lo.chunk_first[1] == 2 && lo.chunk_first[2] == 4 && lo.chunk_first[3] == 10 && lo.n_layers == 10,
          "rc %d: %s", rc, rc ? pt_err() : "wrong chunk_first");
    if (rc == 0) run_layout_free(&lo);
    rc = run_layout_init(&lo, 3, 1, 3, 1, &(gpt_config){ .n_layer = 8 }, NULL, 0);
    CHECK("layout: NULL is the even split 3,3,2", rc == 0 && lo.chunk_first[1] == 4 &&
          lo.chunk_first[2] == 7 && lo.chunk_first[3] == 10, "rc %d", rc);
    if (rc == 0) run_layout_free(&lo);
    rc = run_layout_init(&lo, 2, 1, 2, 1, &(gpt_config){ .n_layer = 8 }, (int[]){3, 4}, 2);
    CHECK("layout: counts that drop a block are an error", rc < 0 &&
          strstr(pt_err(), "--split '3,4' covers 7 blocks, the model has 8"), "rc %d: %s", rc, pt_err());
    rc = run_layout_init(&lo, 2, 1, 2, 1, &(gpt_config){ .n_layer = 8 }, (int[]){4, 4}, 1);
    CHECK("layout: fewer counts than chunks are an error", rc < 0 &&
          strstr(pt_err(), "--split '4' lists 1 stages, the layout has 2"), "rc %d: %s", rc, pt_err());
}

static void test_bad_layouts(void) {
    run_opts o = { .P = 16, .D = 1, .schedule = "1f1b", .M = 16 };
    expect_plan_error("bad layout: more stages than blocks", o, 16, "only 8 transformer blocks");
    o = (run_opts){ .P = 2, .D = 2, .schedule = "1f1b", .M = 3 };
    expect_plan_error("bad layout: batch not divisible by dp x microbatches", o, 16, "not divisible");
    o = (run_opts){ .P = 4, .D = 1, .schedule = "chimera", .M = 1 };
    expect_plan_error("bad layout: too few microbatches for the schedule", o, 16, "microbatches");
    o = (run_opts){ .P = 2, .D = 1, .schedule = "1f1b", .M = 2, .split = (int[]){3, 4}, .n_split = 2 };
    expect_plan_error("bad layout: split drops a block", o, 16, "covers 7 blocks");
    o.split = (int[]){5, 4};
    expect_plan_error("bad layout: split repeats a block", o, 16, "covers 9 blocks");
    /* (a malformed --split text, e.g. a trailing comma, is the CLI's to catch: test_run_cli.sh) */
    o.split = (int[]){4, 0, 4};
    o.n_split = 3;
    expect_plan_error("bad layout: split with an empty stage", o, 16,
                      "--split '4,0,4': stage 1 has 0 blocks; every stage needs at least 1");
    o.split = (int[]){2, 2, 4};
    expect_plan_error("bad layout: split lists more stages than the layout has", o, 16,
                      "--split '2,2,4' lists more than 2 stages");
    o.n_split = 1;
    expect_plan_error("bad layout: split lists fewer stages than the layout has", o, 16,
                      "--split '2' lists 1 stages, the layout has 2");
    o.split = NULL;
    o.n_split = 0;
    o.zero = 2;
    expect_plan_error("bad layout: --zero 2 says it is not supported and why", o, 16,
                      "--zero 2 (sharded gradients) is not supported");
    o.zero = 3;
    expect_plan_error("bad layout: --zero 3", o, 16, "--zero must be 0 or 1");
    o.zero = 1;
    o.schedule = "pipedream";
    expect_plan_error("bad layout: --zero 1 with an asynchronous schedule", o, 16,
                      "--zero 1 needs a synchronous schedule");
    o.zero = 0;
    o.schedule = "nope";
    expect_plan_error("bad layout: unknown schedule", o, 16, "unknown schedule");
    const char *csv = "/tmp/test_run_sched.csv";
    FILE *f = fopen(csv, "w");
    fprintf(f, "0F0,0F1,0BW0,0BW1,0REDUCE_GRAD,STEP\n1F0,1BW0,1F1,1BW1,1REDUCE_GRAD,STEP\n");
    fclose(f);
    o = (run_opts){ .P = 4, .D = 1, .schedule_file = csv };
    expect_plan_error("bad layout: schedule file rank count", o, 16, "has 2 ranks");
    o.P = 2;
    run_plan pl;
    int rc = run_plan_init(&pl, &o, &CFG, BATCH, SEQ);
    CHECK("schedule file: 2 ranks, 2 microbatches", rc == 0 && pl.s->n_mb == 2, "%s", pt_err());
    if (rc == 0) {
        gpt_model got, ref;
        gpt_init(&got, &CFG); gpt_init(&ref, &CFG);
        memcpy(ref.params, g_init.params, ref.num_params * sizeof(float));
        float loss, rl = ref_grads(&pl, &ref);
        rc = run_grad(&pl, &got, &loss);
        cmp_res c = compare(&got, &ref, 0);
        CHECK("schedule file: gradients bitwise", rc == 0 && c.bitwise && loss == rl, "%s %s %.3g",
              pt_err(), c.worst, c.maxerr);
        gpt_free(&got); gpt_free(&ref);
        run_plan_free(&pl);
    }
    remove(csv);
}

int main(void) {
    make_data();
    gpt_init(&g_init, &CFG);
    gpt_init_random(&g_init, 1);
    test_equivalence();
    test_train();
    test_replan_faults();
    test_zero_overlap();
    test_layout_counts();
    test_bad_layouts();
    test_rank_dies();
    test_pipedream_one_stage();
    test_pipedream(2, 1);
    test_pipedream(4, 2);
    test_recompute();
    gpt_free(&g_init);
    TEST_DONE();
}
