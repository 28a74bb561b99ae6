/* Sequence parallelism on the sharded GPT layers (gpt_set_tp_sp), one thread per TP rank over an
 * in-test collective (all-reduce, reduce-scatter and all-gather, each a sum or copy in rank
 * order; a reduce-scatter leaves NaN outside the rank's rows, so nothing may read them):
 * - the layers through the layer API at tp 2, 4 and 8 against the same shards without sp and
 *   the whole model: every layer's output and input-gradient rows bitwise the rows of the run
 *   without sp, the loss bitwise, the gradients bitwise but those marked tp_sum, whose sum over
 *   the ranks is the gradient without sp and the whole model's within rounding; the stream
 *   buffers exactly gpt_stream_rows rows (guards behind them untouched); the collectives each
 *   layer makes are its cost_sp row's; gpt_forward_backward the same;
 * - communication-free recomputation under sp: the keep prefix (the rank's rows of x and res2),
 *   the F part rebuilt bitwise with two all-gathers, the gradients bitwise;
 * - the cost rows under sp: act, keep and input bytes the layers' sizes, fewer than without;
 * - errors: B*T not divisible by tp, a collective without reduce_scatter/allgather, sp with
 *   overlap, failed collectives in F and B; tp 1 accepts sp and changes nothing. */
#include "model/gpt.h"
#include "test.h"
#include "util/pt.h"
#include <cblas.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#define LOSS_TOL 1e-5    /* sharded loss vs the whole model's (test_tp_model's) */
#define GRAD_TOL(c) (1e-6 * ((c)->n_layer + 1))   /* sharded gradients vs the whole model's
                            * (test_tp_model's: the split matmuls' sums in another order,
                            * compounding with depth) */
#define SUM_TOL 1e-6     /* a layer norm's gradient summed per rank's rows, then over the ranks,
                          * against one pass over all rows: the same float sum in another order */
#define LOSS_SCALE 0.5f  /* the head's dloss: a power of two, so the gradients scale exactly */
#define GUARD 16         /* floats behind each stream buffer that no layer may write */
#define MAX_TP 8
#define MAX_LAYERS 8
#define MAX_N 64
#include "tp_group.h"

/* Shapes: a vocabulary no tp divides; one head per rank at tp 4; tp 8 (c_fc's 4C/tp = C/2: the
 * reduce-scatter's (N,C) is wider than a block's B scratch rows without sp). B*T chosen so that
 * a rank's rows cross a sequence boundary at tp 4 (12 rows: 3 each). */
typedef struct { gpt_config c; int B, T, max_tp; } shape;
static const shape shapes[] = {
    {{.n_layer = 2, .n_head = 4, .n_embd = 32, .vocab_size = 67, .n_positions = 16}, 2, 8, 4},
    {{.n_layer = 1, .n_head = 4, .n_embd = 16, .vocab_size = 5, .n_positions = 8}, 3, 4, 4},
    {{.n_layer = 3, .n_head = 8, .n_embd = 24, .vocab_size = 40, .n_positions = 8}, 2, 8, 8},
};

/* ---- the in-test collective: one thread per rank ------------------------------------------ */
enum { K_AR, K_RS, K_AG, N_KINDS };

typedef struct {
    tp_group *g;
    int rank, size;
    int calls[N_KINDS];
    size_t floats[N_KINDS];
    int fail_after;     /* single-rank error tests (g NULL): succeed this many times, then fail */
} member;

/* Every rank's buffer read between two barriers: the sum in rank order (ar, rs) or the slices
 * (ag) into a private result, then copied into buf: all of it (ar), the rank's slice and NaN
 * elsewhere (rs), or every rank's slice (ag). */
static int group_op(member *me, int kind, float *buf, size_t n) {
    me->calls[kind]++;
    me->floats[kind] += n;
    if (!me->g) return me->fail_after-- > 0 ? 0 : pt_seterr("injected failure");
    tp_group *g = me->g;
    int same = tp_group_post(g, me->rank, buf, n);
    float *res = pt_falloc(n ? n : 1);
    for (size_t i = 0; same && i < n; i++) {
        if (kind == K_AG) {   /* element i from the rank whose slice holds it (comm_slice) */
            int r = 0;
            while (i >= n * (size_t)(r + 1) / (size_t)g->size) r++;
            res[i] = g->buf[r][i];
            continue;
        }
        float s = g->buf[0][i];
        for (int r = 1; r < g->size; r++) s += g->buf[r][i];
        res[i] = s;
    }
    tp_group_done(g);
    size_t lo = n * me->rank / g->size, hi = n * (me->rank + 1) / g->size;
    memcpy(buf, res, n * sizeof *buf);
    for (size_t i = 0; kind == K_RS && i < n; i++) if (i < lo || i >= hi) buf[i] = NAN;
    free(res);
    return same ? 0 : pt_seterr("ranks reduce different lengths");
}

static int coll_ar(void *ctx, float *buf, size_t n) { return group_op(ctx, K_AR, buf, n); }
static int coll_rs(void *ctx, float *buf, size_t n) { return group_op(ctx, K_RS, buf, n); }
static int coll_ag(void *ctx, float *buf, size_t n) { return group_op(ctx, K_AG, buf, n); }

static gpt_tp tp_of(member *me, int rank, int size) {
    return (gpt_tp){ .rank = rank, .size = size, .allreduce = coll_ar, .reduce_scatter = coll_rs,
                     .allgather = coll_ag, .ctx = me };
}

/* ---- one rank's training step through the layer API ------------------------------------------ */
enum { PH_F, PH_B, PH_W, PH_R, N_PH };   /* the phases, and the recompute before B */

typedef struct {
    gpt_model *m;
    member me;
    const int *tok, *tgt;
    int B, T, sp, recompute;
    int rc;
    char err[300];
    float loss, loss_fb;
    float *grads;                           /* (n_held) the layer-API run's (owned) */
    float *y[MAX_LAYERS], *dx[MAX_LAYERS];  /* each layer's output and input gradient rows (owned) */
    int guards, fb_same, same_part;
    int calls[MAX_LAYERS][N_PH][N_KINDS];
    size_t floats[MAX_LAYERS][N_PH][N_KINDS];
} rank_job;

#define SENTINEL 12345.0f

/* n floats and GUARD sentinels behind them. */
static float *guarded(size_t n) {
    float *p = pt_falloc(n + GUARD);
    for (int i = 0; i < GUARD; i++) p[n + i] = SENTINEL;
    return p;
}

static int guard_ok(const float *p, size_t n) {
    int ok = 1;
    for (int i = 0; i < GUARD; i++) ok &= p[n + i] == SENTINEL;
    return ok;
}

/* Runs one phase call, noting its collectives and the first error. */
#define NOTED(j, l, ph, call) do { \
    member *me_ = &(j)->me; int c0_[N_KINDS]; size_t f0_[N_KINDS]; \
    memcpy(c0_, me_->calls, sizeof c0_); memcpy(f0_, me_->floats, sizeof f0_); \
    if ((j)->rc == 0 && (call) < 0) { (j)->rc = -1; snprintf((j)->err, sizeof (j)->err, "%s", pt_err()); } \
    for (int k_ = 0; k_ < N_KINDS; k_++) { \
        (j)->calls[l][ph][k_] += me_->calls[k_] - c0_[k_]; (j)->floats[l][ph][k_] += me_->floats[k_] - f0_[k_]; } \
    } while (0)

typedef struct {
    float *act[MAX_LAYERS], *x[MAX_LAYERS], *d[MAX_LAYERS], *keep[MAX_LAYERS], *saved[MAX_LAYERS];
    float *scratch;
    size_t act_n[MAX_LAYERS], rows, scratch_n;
} rank_bufs;

static void bufs_init(rank_bufs *b, const gpt_model *m, int B, int T) {
    memset(b, 0, sizeof *b);
    size_t C = (size_t)m->cfg.n_embd;
    b->rows = gpt_stream_rows(m, B, T);
    b->scratch_n = gpt_scratch_floats(m, B, T);
    b->scratch = guarded(b->scratch_n);
    for (int l = 0; l < gpt_num_layers(m); l++) {
        b->act_n[l] = gpt_layer_act_floats(m, l, B, T);
        b->act[l] = guarded(b->act_n[l]);
        b->x[l] = guarded(b->rows * C);   /* layer l's output */
        b->d[l] = guarded(b->rows * C);   /* the gradient at it */
    }
}

/* Every guard intact; frees. */
static int bufs_free(rank_bufs *b, const gpt_model *m) {
    size_t C = (size_t)m->cfg.n_embd;
    int ok = guard_ok(b->scratch, b->scratch_n);
    for (int l = 0; l < gpt_num_layers(m); l++) {
        ok &= guard_ok(b->act[l], b->act_n[l]) && guard_ok(b->x[l], b->rows * C) && guard_ok(b->d[l], b->rows * C);
        free(b->act[l]); free(b->x[l]); free(b->d[l]); free(b->keep[l]); free(b->saved[l]);
    }
    free(b->scratch);
    return ok;
}

/* With recompute, after F: only each layer's keep prefix survives (a copy; the act is NaN'd). */
static void drop_to_keep(rank_job *j, rank_bufs *b, int l) {
    size_t keep = gpt_layer_keep_floats(j->m, l, j->B, j->T), saved = gpt_layer_act_saved_floats(j->m, l, j->B, j->T);
    b->keep[l] = pt_falloc(keep + 1);
    b->saved[l] = pt_falloc(saved);
    memcpy(b->keep[l], b->act[l], keep * sizeof(float));
    memcpy(b->saved[l], b->act[l], saved * sizeof(float));
    for (size_t i = 0; i < b->act_n[l]; i++) b->act[l][i] = NAN;
}

/* ... and before B, the prefix back and the rest of the F part rebuilt. */
static void rebuild(rank_job *j, rank_bufs *b, int l, float *scratch) {
    size_t keep = gpt_layer_keep_floats(j->m, l, j->B, j->T), saved = gpt_layer_act_saved_floats(j->m, l, j->B, j->T);
    memcpy(b->act[l], b->keep[l], keep * sizeof(float));
    NOTED(j, l, PH_R, gpt_layer_recompute(j->m, l, NULL, b->act[l], scratch, j->B, j->T));
    j->same_part &= memcmp(b->act[l], b->saved[l], saved * sizeof(float)) == 0;
}

/* F of every layer, B from the head down (dloss LOSS_SCALE), W of every layer (with recompute:
 * the rebuild before each B); then gpt_forward_backward on the same batch (dloss 1). */
static void *rank_thread(void *arg) {
    rank_job *j = arg;
    gpt_model *m = j->m;
    int nl = gpt_num_layers(m), B = j->B, T = j->T;
    float dloss = LOSS_SCALE;
    gpt_tp tp = tp_of(&j->me, m->tp_rank, m->tp_size);
    gpt_set_tp(m, &tp);
    if (gpt_set_tp_sp(m, j->sp) < 0) { j->rc = -1; snprintf(j->err, sizeof j->err, "%s", pt_err()); return NULL; }
    rank_bufs b;
    bufs_init(&b, m, B, T);
    size_t n = b.rows * (size_t)m->cfg.n_embd;
    gpt_zero_grad(m);
    for (int l = 0; l < nl; l++) {
        NOTED(j, l, PH_F, gpt_layer_forward(m, l, NULL, b.act[l], b.scratch, l == nl - 1 ? &j->loss : b.x[l],
                                            l ? b.x[l - 1] : NULL, l == 0 ? j->tok : l == nl - 1 ? j->tgt : NULL, B, T));
        j->y[l] = pt_falloc(n);
        memcpy(j->y[l], b.x[l], n * sizeof(float));
    }
    j->same_part = 1;
    for (int l = 0; j->recompute && l < nl; l++) drop_to_keep(j, &b, l);
    for (int l = nl - 1; l >= 0; l--) {
        if (j->recompute) rebuild(j, &b, l, b.scratch);
        NOTED(j, l, PH_B, gpt_layer_backward_input(m, l, NULL, b.act[l], b.scratch, l ? b.d[l - 1] : NULL,
                                                   l == nl - 1 ? &dloss : b.d[l], B, T));
        j->dx[l] = pt_falloc(n);
        if (l) memcpy(j->dx[l], b.d[l - 1], n * sizeof(float));
    }
    for (int l = nl - 1; l >= 0; l--) NOTED(j, l, PH_W, gpt_layer_backward_weight(m, l, NULL, b.act[l], b.scratch, B, T));
    j->guards = bufs_free(&b, m);
    j->grads = pt_falloc(m->n_held);
    memcpy(j->grads, m->grads, m->n_held * sizeof(float));
    gpt_zero_grad(m);
    j->fb_same = j->rc == 0 && gpt_forward_backward(m, j->tok, j->tgt, B, T, &j->loss_fb) == 0 && j->loss_fb == j->loss;
    for (size_t i = 0; j->fb_same && i < m->n_held; i++) j->fb_same &= m->grads[i] * LOSS_SCALE == j->grads[i];
    return NULL;
}

/* ---- a run of the group -------------------------------------------------------------------- */
typedef struct {
    gpt_model sh[MAX_TP];
    rank_job jobs[MAX_TP];
    tp_group g;
    int tp;
} run_state;

/* The whole model's seeded weights, perturbed (larger than GPT-2's, so gradients stand above
 * rounding), with its gradients of the batch (dloss 1). */
static void whole_model(gpt_model *w, const shape *sh, const int *tok, const int *tgt, float *loss) {
    gpt_init(w, &sh->c);
    gpt_init_random(w, 3);
    pt_rng r;
    pt_rng_seed(&r, 4);
    for (size_t i = 0; i < w->num_params; i++) w->params[i] += (float)(0.3 * pt_rng_normal(&r));
    gpt_zero_grad(w);
    gpt_forward_backward(w, tok, tgt, sh->B, sh->T, loss);
}

/* Every rank's step on the whole model's weights cut into tp shards. */
static void run_group(run_state *s, const gpt_model *whole, const shape *sh, int tp, int sp, int recompute,
                      const int *tok, const int *tgt) {
    s->tp = tp;
    tp_group_init(&s->g, tp);
    for (int q = 0; q < tp; q++) {
        tp_shard_of(&s->sh[q], whole, q, tp);
        s->jobs[q] = (rank_job){ .m = &s->sh[q], .me = { .g = &s->g, .rank = q, .size = tp }, .tok = tok,
                                 .tgt = tgt, .B = sh->B, .T = sh->T, .sp = sp, .recompute = recompute };
    }
    tp_run_threads(tp, rank_thread, s->jobs, sizeof *s->jobs);
    tp_group_destroy(&s->g);
}

static void run_free(run_state *s) {
    for (int q = 0; q < s->tp; q++) {
        rank_job *j = &s->jobs[q];
        for (int l = 0; l < MAX_LAYERS; l++) { free(j->y[l]); free(j->dx[l]); }
        free(j->grads);
        gpt_free(&s->sh[q]);
    }
}

static int run_ok(const run_state *s, char *why, size_t n) {
    for (int q = 0; q < s->tp; q++)
        if (s->jobs[q].rc) { snprintf(why, n, "rank %d: %s", q, s->jobs[q].err); return 0; }
    return 1;
}

/* ---- checks -------------------------------------------------------------------------------- */
static int is_layer_norm_of_block(const char *name) {
    return strstr(name, "ln_1.") != NULL || strstr(name, "ln_2.") != NULL;
}

/* Every rank's layer outputs (F) and input gradients (B) are rows [r*Ns, (r+1)*Ns) of the run
 * without sp (every rank of which holds all rows), bitwise. */
static int streams_ok(const run_state *sp, const run_state *ref, int B, int T) {
    const gpt_model *m = &sp->sh[0];
    int nl = gpt_num_layers(m), ok = 1;
    size_t C = (size_t)m->cfg.n_embd, ns = gpt_stream_rows(m, B, T) * C;
    for (int q = 0; q < sp->tp; q++)
        for (int l = 0; l < nl; l++) {
            if (l < nl - 1) ok &= memcmp(sp->jobs[q].y[l], ref->jobs[0].y[l] + q * ns, ns * sizeof(float)) == 0;
            if (l > 0) ok &= memcmp(sp->jobs[q].dx[l], ref->jobs[0].dx[l] + q * ns, ns * sizeof(float)) == 0;
        }
    return ok;
}

/* The collectives each layer made in F, B, W and the recompute: its cost_sp row's counts and
 * bytes (all kinds together), and under sp no all-reduce in a block. */
static int collectives_ok(const run_state *s, int B, int T) {
    int ok = 1;
    for (int q = 0; q < s->tp; q++) {
        const gpt_model *m = &s->sh[q];
        const rank_job *j = &s->jobs[q];
        for (int l = 0; l < gpt_num_layers(m); l++) {
            gpt_layer_cost k;
            gpt_kind_cost(gpt_layer_kind_of(m, l), &m->cfg, B, T, m->tp_size, m->tp_sp, &k);
            for (int ph = 0; ph < N_PH; ph++) {
                int calls = 0;
                size_t floats = 0;
                for (int kd = 0; kd < N_KINDS; kd++) { calls += j->calls[l][ph][kd]; floats += j->floats[l][ph][kd]; }
                int want_c = ph == PH_R ? (j->recompute ? k.recompute_tp_collectives : 0) : k.tp_collectives[ph];
                double want_b = ph == PH_R ? (j->recompute ? k.recompute_tp_bytes : 0) : k.tp_bytes[ph];
                ok &= calls == want_c && 4.0 * floats == want_b;
            }
            if (gpt_layer_kind_of(m, l) == GPT_LAYER_BLOCK)
                ok &= j->calls[l][PH_F][K_AR] + j->calls[l][PH_B][K_AR] == 0 &&
                      j->calls[l][PH_F][K_RS] == 2 && j->calls[l][PH_F][K_AG] == 2 &&
                      j->calls[l][PH_B][K_RS] == 2 && j->calls[l][PH_B][K_AG] == 4;
        }
    }
    return ok;
}

/* Gradients: the unmarked bitwise those without sp (rank by rank); the marked (exactly the
 * blocks' layer norms) summed over the ranks in rank order, into every rank's copy (what the
 * runtime does), within SUM_TOL of those without sp (*worst_sum). */
static int grads_vs_ref(run_state *sp, const run_state *ref, double *worst_sum, int *marks) {
    const gpt_model *m = &sp->sh[0];
    int same = 1;
    *marks = 1;
    *worst_sum = 0;
    for (int k = 0; k < gpt_param_count(m); k++) {
        const gpt_param_info *pi = gpt_param_info_at(m, k);
        *marks &= pi->tp_sum == is_layer_norm_of_block(pi->name) && !ref->sh[0].info[k].tp_sum;
        size_t o = pi->offset, n = pi->count;
        if (!pi->tp_sum) {
            for (int q = 0; q < sp->tp; q++)
                same &= memcmp(sp->jobs[q].grads + o, ref->jobs[q].grads + o, n * sizeof(float)) == 0;
            continue;
        }
        float *sum = pt_falloc(n);
        memcpy(sum, sp->jobs[0].grads + o, n * sizeof *sum);
        for (int q = 1; q < sp->tp; q++)
            for (size_t i = 0; i < n; i++) sum[i] += sp->jobs[q].grads[o + i];
        for (int q = 0; q < sp->tp; q++) memcpy(sp->jobs[q].grads + o, sum, n * sizeof *sum);
        double e = test_tensor_relerr(sum, ref->jobs[0].grads + o, n);
        *worst_sum = e > *worst_sum ? e : *worst_sum;
        free(sum);
    }
    return same;
}

/* The ranks' gradients (marked ones summed) placed together against the whole model's. */
static double grads_vs_whole(const run_state *s, const gpt_model *whole, const char **worst_name) {
    double worst = 0;
    for (int k = 0; k < gpt_param_count(whole); k++) {
        const gpt_param_info *pi = gpt_param_info_at(whole, k);
        float *got = pt_falloc(pi->full), *want = pt_falloc(pi->full);
        for (int q = 0; q < s->tp; q++) {
            const gpt_param_info *ps = &s->sh[q].info[k];
            gpt_shard_place(&whole->cfg, pi, q, s->tp, s->jobs[q].grads + ps->offset, got);
        }
        for (size_t i = 0; i < pi->full; i++) want[i] = whole->grads[pi->offset + i] * LOSS_SCALE;
        double e = test_tensor_relerr(got, want, pi->full);
        if (e > worst) { worst = e; *worst_name = pi->name; }
        free(got);
        free(want);
    }
    return worst;
}

static int grads_same(const run_state *a, const run_state *b) {
    int ok = 1;
    for (int q = 0; q < a->tp; q++)
        ok &= memcmp(a->jobs[q].grads, b->jobs[q].grads, a->sh[q].n_held * sizeof(float)) == 0;
    return ok;
}

static int loss_same(const run_state *a, const run_state *b) {
    int ok = 1;
    for (int q = 0; q < a->tp; q++) ok &= a->jobs[q].loss == b->jobs[0].loss;
    return ok;
}

static int all_flag(const run_state *s, size_t field) {
    int ok = 1;
    for (int q = 0; q < s->tp; q++) ok &= *(const int *)((const char *)&s->jobs[q] + field);
    return ok;
}

/* ---- the step under sp against the same shards without it and the whole model -------------- */
static void test_sp_step(const shape *sh, int tp) {
    const gpt_config *c = &sh->c;
    char name[200], why[400] = "";
    int tok[MAX_N], tgt[MAX_N], N = sh->B * sh->T, marks;
    float loss;
    gpt_model whole;
    tp_make_batch(tok, tgt, N, c->vocab_size, 6, 1);
    whole_model(&whole, sh, tok, tgt, &loss);
    run_state ref, sp, rc;
    run_group(&ref, &whole, sh, tp, 0, 0, tok, tgt);
    run_group(&sp, &whole, sh, tp, 1, 0, tok, tgt);
    run_group(&rc, &whole, sh, tp, 1, 1, tok, tgt);
#define NAMED(what) (snprintf(name, sizeof name, "tp sp L%d C%d tp %d B %d T %d: %s", c->n_layer, c->n_embd, \
                              tp, sh->B, sh->T, what), name)
    int ok = run_ok(&ref, why, sizeof why) && run_ok(&sp, why, sizeof why) && run_ok(&rc, why, sizeof why);
    CHECK(NAMED("every rank's F, B, W ran, with sp, without, and with sp and recompute"), ok, "%s", why);
    if (!ok) goto free_runs;
    CHECK(NAMED("the stream is N/tp rows a rank (gpt_stream_rows), no layer writes past its buffers"),
          gpt_stream_rows(&sp.sh[0], sh->B, sh->T) == (size_t)(N / tp) && all_flag(&sp, offsetof(rank_job, guards)) &&
          all_flag(&rc, offsetof(rank_job, guards)), "rows %zu", gpt_stream_rows(&sp.sh[0], sh->B, sh->T));
    CHECK(NAMED("every layer's output and input gradient: the rank's rows of those without sp, bitwise"),
          streams_ok(&sp, &ref, sh->B, sh->T), "differ");
    double le = test_relerr(sp.jobs[0].loss, loss, 1e-6);
    CHECK(NAMED("loss bitwise the loss without sp on every rank, and the whole model's"),
          loss_same(&sp, &ref) && le < LOSS_TOL, "%.8f vs %.8f (whole %.8f)", sp.jobs[0].loss, ref.jobs[0].loss, loss);
    double worst_sum;
    int same = grads_vs_ref(&sp, &ref, &worst_sum, &marks);
    CHECK(NAMED("tp_sum marks exactly the blocks' ln_1 and ln_2 (none without sp)"), marks, "differ");
    CHECK(NAMED("unmarked gradients bitwise those without sp"), same, "differ");
    CHECK(NAMED("marked gradients summed over the ranks equal those without sp"), worst_sum < SUM_TOL,
          "relerr %g", worst_sum);
    const char *worst_name = "";
    double worst = grads_vs_whole(&sp, &whole, &worst_name);
    printf("# L%d C%d tp %d sp: loss %.7f (whole %.7f); layer norms summed over ranks vs without sp %.3g; "
           "worst gradient relerr vs whole %.3g in %s\n", c->n_layer, c->n_embd, tp, sp.jobs[0].loss, loss,
           worst_sum, worst, worst_name);
    CHECK(NAMED("gradients (marked summed) placed together equal the whole model's"), worst < GRAD_TOL(c),
          "relerr %g in %s", worst, worst_name);
    CHECK(NAMED("the collectives each layer made are its cost_sp row's (RS 2 and AG 2 in a block's F, AG 4 in B)"),
          collectives_ok(&sp, sh->B, sh->T), "counts or bytes differ");
    CHECK(NAMED("gpt_forward_backward under sp: the layers' loss and gradients (scaled), bitwise"),
          all_flag(&sp, offsetof(rank_job, fb_same)), "differ");
    /* recompute: compare raw (the marked gradients of sp were summed in place above) */
    double wr;
    int same_rc = grads_vs_ref(&rc, &ref, &wr, &marks);
    CHECK(NAMED("recompute: the F part rebuilt bitwise from the rank's rows of x and res2"),
          all_flag(&rc, offsetof(rank_job, same_part)), "differs");
    CHECK(NAMED("recompute: only its cost row's all-gathers (2 a block, none elsewhere)"),
          collectives_ok(&rc, sh->B, sh->T), "differ");
    CHECK(NAMED("recompute: loss and gradients bitwise those without it"),
          loss_same(&rc, &sp) && same_rc && grads_same(&rc, &sp), "differ (sum relerr %g)", wr);
free_runs:
    run_free(&ref);
    run_free(&sp);
    run_free(&rc);
    gpt_free(&whole);
}

/* ---- cost rows ------------------------------------------------------------------------------ */
/* Under sp at tp 2, 4 (8): every kind's act, keep and input bytes are the layers' sizes (the
 * input: the stream's rows, the embedding's tokens); a block's act and keep fewer than without
 * sp, its act exactly 1/tp of the act at tp 1 (every region shrinks by tp), its matmuls' weight
 * gradient FLOPs in B (W none), B + W the same total; the embedding's and the head's the same;
 * tp 1's sp row is its plain row. */
static void test_sp_cost(const shape *sh) {
    const gpt_config *c = &sh->c;
    char name[200];
    int ok = 1, less = 1, shrink = 1, B = sh->B, T = sh->T;
    size_t act1 = 0;   /* a block's act floats at tp 1 */
    member me = {0};
    for (int tp = 1; tp <= sh->max_tp; tp *= 2) {
        gpt_model m;
        gpt_init_layers_tp(&m, c, 0, c->n_layer + 2, 0, tp);
        gpt_tp t = tp_of(&me, 0, tp);
        gpt_set_tp(&m, &t);
        ok &= gpt_set_tp_sp(&m, 1) == 0;
        size_t rows = gpt_stream_rows(&m, B, T), C = (size_t)c->n_embd;
        for (int l = 0; l < gpt_num_layers(&m); l++) {
            gpt_layer_kind kind = gpt_layer_kind_of(&m, l);
            gpt_layer_cost k, plain;
            gpt_kind_cost(kind, c, B, T, tp, 1, &k);
            gpt_kind_cost(kind, c, B, T, tp, 0, &plain);
            double in = kind == GPT_LAYER_EMBED ? 4.0 * B * T : 4.0 * rows * C;
            ok &= k.act_bytes == 4.0 * gpt_layer_act_floats(&m, l, B, T) &&
                  k.keep_bytes == 4.0 * gpt_layer_keep_floats(&m, l, B, T) && k.input_bytes == in &&
                  k.param_bytes == plain.param_bytes && k.flops[0] == plain.flops[0];
            if (kind == GPT_LAYER_BLOCK && tp == 1) act1 = gpt_layer_act_floats(&m, l, B, T);
            if (tp == 1) ok &= memcmp(&k, &plain, sizeof k) == 0;
            else if (kind == GPT_LAYER_BLOCK) {
                less &= k.act_bytes < plain.act_bytes && k.keep_bytes < plain.keep_bytes;
                shrink &= gpt_layer_act_floats(&m, l, B, T) * (size_t)tp == act1 && k.flops[2] == 0 &&
                          k.flops[1] == plain.flops[1] + plain.flops[2];
            } else less &= k.act_bytes == plain.act_bytes;
        }
        gpt_free(&m);
    }
    /* the sizes gpt.h documents under sp, at tp 2 */
    gpt_model m;
    size_t N = (size_t)B * T, tp = 2, Ns = N / tp, C = (size_t)c->n_embd, NHl = (size_t)c->n_head / tp;
    gpt_init_layers_tp(&m, c, 0, c->n_layer + 2, 1, (int)tp);
    gpt_tp t = tp_of(&me, 1, (int)tp);
    gpt_set_tp(&m, &t);
    gpt_set_tp_sp(&m, 1);
    size_t head = N * (tp + 3), blk = N * C + (size_t)T * T;
    ok &= gpt_layer_act_floats(&m, 1, B, T) == 8 * Ns * C + 19 * N * C / tp + 4 * Ns + N * NHl * T &&
          gpt_layer_act_saved_floats(&m, 1, B, T) == 4 * Ns * C + 12 * N * C / tp + 4 * Ns + N * NHl * T &&
          gpt_scratch_floats(&m, B, T) == (blk > head ? blk : head);
    gpt_free(&m);
    snprintf(name, sizeof name, "tp sp L%d C%d: cost_sp rows' act, keep and input bytes are the layers' sizes, "
             "and gpt.h's", c->n_layer, c->n_embd);
    CHECK(name, ok, "differ");
    snprintf(name, sizeof name, "tp sp L%d C%d: a block holds fewer act and keep bytes under sp, the "
             "embedding and head the same", c->n_layer, c->n_embd);
    CHECK(name, less, "differ");
    snprintf(name, sizeof name, "tp sp L%d C%d: a block's act under sp at tp is 1/tp of its act at tp 1; "
             "its matmuls' weight-gradient FLOPs are B's, W none", c->n_layer, c->n_embd);
    CHECK(name, shrink, "differ");
}

/* GPT-2 124M's block at B 4, T 256 per rank, with and without sp (the sizes need only the
 * config, tp and sp: a model holding no layer). */
static void print_gpt2_memory(void) {
    gpt_config g = {.n_layer = 12, .n_head = 12, .n_embd = 768, .vocab_size = 50257, .n_positions = 1024};
    for (int tp = 2; tp <= 4; tp *= 2) {
        gpt_layer_cost k, sp;
        gpt_kind_cost(GPT_LAYER_BLOCK, &g, 4, 256, tp, 0, &k);
        gpt_kind_cost(GPT_LAYER_BLOCK, &g, 4, 256, tp, 1, &sp);
        printf("# GPT-2 124M block, B 4, T 256, tp %d, per rank: act %.2f MB, with sp %.2f MB; keep "
               "(comm-free recompute) %.2f MB, with sp %.2f MB; stream between layers %.2f MB, with sp "
               "%.2f MB; F collectives' payload %.2f MB, with sp %.2f MB\n", tp, k.act_bytes / 1e6,
               sp.act_bytes / 1e6, k.keep_bytes / 1e6, sp.keep_bytes / 1e6, k.input_bytes / 1e6,
               sp.input_bytes / 1e6, k.tp_bytes[0] / 1e6, sp.tp_bytes[0] / 1e6);
    }
}

/* ---- errors ----------------------------------------------------------------------------------- */
static void test_errors(void) {
    const gpt_config *c = &shapes[0].c;
    gpt_model m;
    member me = {0};
    int rc;
    /* tp 1: accepted, nothing changes */
    gpt_init_layers_tp(&m, c, 0, c->n_layer + 2, 0, 1);
    rc = gpt_set_tp_sp(&m, 1);
    CHECK("tp sp: accepted at tp 1, changing nothing", rc == 0 && !m.tp_sp && gpt_stream_rows(&m, 2, 7) == 14,
          "rc %d sp %d", rc, m.tp_sp);
    gpt_free(&m);

    gpt_init_layers_tp(&m, c, 0, c->n_layer + 2, 1, 2);
    gpt_set_tp(&m, &(gpt_tp){ .rank = 1, .size = 2, .allreduce = coll_ar, .ctx = &me });
    rc = gpt_set_tp_sp(&m, 1);
    CHECK("tp sp: refused for a collective without reduce_scatter and allgather",
          rc < 0 && strstr(pt_err(), "reduce_scatter") && !m.tp_sp, "rc %d: %s", rc, pt_err());
    gpt_tp t = tp_of(&me, 1, 2);
    t.iallreduce = NULL;
    gpt_set_tp(&m, &t);
    m.tp_overlap = 1;   /* as gpt_set_tp_overlap would with an iallreduce */
    rc = gpt_set_tp_sp(&m, 1);
    CHECK("tp sp: refused while overlapping", rc < 0 && strstr(pt_err(), "overlap") && !m.tp_sp, "rc %d: %s", rc, pt_err());
    m.tp_overlap = 0;
    rc = gpt_set_tp_sp(&m, 1);
    int ro = gpt_set_tp_overlap(&m, 1);
    CHECK("tp sp: overlap refused under sp", rc == 0 && ro < 0 && strstr(pt_err(), "sequence parallelism") &&
          !m.tp_overlap, "rc %d %d: %s", rc, ro, pt_err());

    /* B*T not divisible by tp: 2*7 = 14 rows over tp 4 */
    gpt_model m4;
    gpt_init_layers_tp(&m4, c, 0, c->n_layer + 2, 0, 4);
    gpt_tp t4 = tp_of(&me, 0, 4);
    gpt_set_tp(&m4, &t4);
    gpt_set_tp_sp(&m4, 1);
    int tok[MAX_N], tgt[MAX_N];
    tp_make_batch(tok, tgt, 16, c->vocab_size, 2, 1);
    size_t na = gpt_layer_act_floats(&m, 1, 2, 8), ns = gpt_scratch_floats(&m, 2, 8);   /* m's, the larger */
    float *act = pt_falloc(na), *sc = pt_falloc(ns);
    float *x = pt_falloc((size_t)16 * c->n_embd), *y = pt_falloc((size_t)16 * c->n_embd);
    rc = gpt_layer_forward(&m4, 0, NULL, act, sc, x, NULL, tok, 2, 7);
    CHECK("tp sp: B*T not divisible by tp names N, B, T and tp", rc < 0 && strstr(pt_err(), "N = B*T = 2*7 = 14") &&
          strstr(pt_err(), "tp 4") && strstr(pt_err(), "layer 0") && gpt_stream_rows(&m4, 2, 7) == 0 &&
          gpt_sp_check_rows(2, 7, 4) < 0 && gpt_sp_check_rows(2, 8, 4) == 0, "rc %d: %s", rc, pt_err());
    rc = gpt_layer_recompute(&m4, 1, NULL, act, sc, 2, 7);
    CHECK("tp sp: the recompute refuses it too", rc < 0 && strstr(pt_err(), "layer 1 recompute") &&
          strstr(pt_err(), "14"), "rc %d: %s", rc, pt_err());
    gpt_free(&m4);

    /* failed collectives, one rank of two working as a group of one for a while: block F's second
     * (the reduce-scatter of attn.c_proj's product), B's first (the all-gather of dout) */
    gpt_init_random(&m, 1);
    me = (member){ .fail_after = 1 };
    rc = gpt_layer_forward(&m, 1, NULL, act, sc, y, x, NULL, 2, 8);
    CHECK("tp sp: block F returns a failed reduce-scatter, naming it", rc < 0 && strstr(pt_err(), "injected") &&
          strstr(pt_err(), "reduce-scatter of attn.c_proj's product") && strstr(pt_err(), "layer 1 forward"),
          "rc %d: %s", rc, pt_err());
    me.fail_after = 4;
    rc = gpt_layer_forward(&m, 1, NULL, act, sc, y, x, NULL, 2, 8);
    int rb = gpt_layer_backward_input(&m, 1, NULL, act, sc, x, y, 2, 8);
    CHECK("tp sp: block B returns a failed all-gather, naming it", rc == 0 && rb < 0 &&
          strstr(pt_err(), "all-gather of the block's output gradient") && strstr(pt_err(), "layer 1 backward"),
          "rc %d %d: %s", rc, rb, pt_err());
    me.fail_after = 0;
    rc = gpt_layer_forward(&m, c->n_layer + 1, NULL, act, sc, &(float){0}, x, tgt, 2, 8);
    CHECK("tp sp: head F returns a failed all-gather of its input", rc < 0 && strstr(pt_err(), "the head's input"),
          "rc %d: %s", rc, pt_err());
    /* a collective replaced (gpt_set_tp) by one without reduce_scatter after sp was set */
    gpt_set_tp(&m, &(gpt_tp){ .rank = 1, .size = 2, .allreduce = coll_ar, .ctx = &me });
    rc = gpt_layer_forward(&m, 0, NULL, act, sc, x, NULL, tok, 2, 8);
    CHECK("tp sp: a collective without reduce_scatter at run time is an error naming it",
          rc < 0 && strstr(pt_err(), "no reduce_scatter"), "rc %d: %s", rc, pt_err());
    free(act); free(sc); free(x); free(y);
    gpt_free(&m);
}

int main(void) {
    openblas_set_num_threads(1);   /* one core per rank, as the runtime's ranks */
    print_gpt2_memory();
    test_errors();
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        test_sp_cost(&shapes[i]);
        for (int tp = 2; tp <= shapes[i].max_tp; tp *= 2) test_sp_step(&shapes[i], tp);
    }
    TEST_DONE();
}
