/* Tensor-parallel shards of the GPT model (gpt_init_layers_tp): the table and layout of a shard,
 * the split of every tensor (extract/place, a shard's seeded init equal to the whole init's
 * elements), and the sharded layers run by one thread per TP rank over an in-test all-reduce:
 * the whole model's loss and gradients, replicated gradients bitwise equal on every rank, zero
 * padding rows, the collectives the cost rows declare, the cost rows' memory equal to the
 * layers' buffers; errors. */
#include "model/gpt.h"
#include "model/gpt_io.h"
#include "test.h"
#include "util/pt.h"
#include <string.h>
#include <unistd.h>

#define LOSS_TOL 1e-5    /* sharded loss vs whole: the softmax sums added per shard, then over ranks */
#define SUM_TOL 1e-6     /* as test_gpt: the same float sums in another order ... */
#define GRAD_TOL(c) (SUM_TOL * ((c)->n_layer + 1))   /* ... once per block the gradient passes
                            * down through: every split matmul sums in another order (partial
                            * products over ranks), and the differences compound with depth */
#define LOSS_SCALE 0.5f  /* the head's dloss: a power of two, so the gradients scale exactly */
#define MAX_TP 4
#define MAX_LAYERS 8
#include "tp_group.h"

enum { B = 2, T = 7, N = B * T };

/* A vocabulary not divisible by tp (67: one padding row at tp 2 and 4); a vocabulary smaller
 * than tp's padding leaves a rank with padding only (5 at tp 4: rows 6, 7 of 8); one head per
 * rank at tp 4. */
static const gpt_config cfgs[] = {
    {.n_layer = 2, .n_head = 4, .n_embd = 32, .vocab_size = 67, .n_positions = 16},
    {.n_layer = 1, .n_head = 4, .n_embd = 16, .vocab_size = 5, .n_positions = 8},
    {.n_layer = 3, .n_head = 8, .n_embd = 24, .vocab_size = 40, .n_positions = 8},
};

/* Larger-than-GPT-2 random weights, so gradients stand well above float rounding. */
static void perturb_params(gpt_model *m, uint64_t seed) {
    pt_rng r;
    pt_rng_seed(&r, seed);
    for (size_t i = 0; i < m->num_params; i++) m->params[i] += (float)(0.3 * pt_rng_normal(&r));
}

/* ---- the in-test collective (tp_group.h): one thread per rank, sums in rank order -------- */
typedef struct {
    tp_group *g;
    int rank;
    int calls;      /* all-reduces so far, and their floats (this rank's counters) */
    size_t floats;
    int fail_after; /* single-rank error tests: succeed (as a group of one) this many times, then fail */
} member;

static int group_allreduce(void *ctx, float *buf, size_t n) {
    member *me = ctx;
    me->calls++;
    me->floats += n;
    if (!me->g) return me->fail_after-- > 0 ? 0 : pt_seterr("injected failure");
    return tp_group_sum(me->g, me->rank, buf, n) < 0 ? pt_seterr("ranks all-reduce different lengths") : 0;
}

/* ---- one rank's training step through the layer API --------------------------------------- */
typedef struct {
    gpt_model *m;
    member me;
    const int *tok, *tgt;
    float loss, loss_fb;
    float *grads;                   /* (n_held) the layer-API run's gradients (owned) */
    int rc;
    int calls[MAX_LAYERS][3];       /* all-reduces and floats per layer and phase (F, B, W) */
    size_t floats[MAX_LAYERS][3];
} rank_job;

/* Runs one phase call and counts its collectives. */
#define COUNTED(j, l, ph, call) do { \
    int c0 = (j)->me.calls; size_t f0 = (j)->me.floats; \
    if ((call) < 0) (j)->rc = -1; \
    (j)->calls[l][ph] += (j)->me.calls - c0; (j)->floats[l][ph] += (j)->me.floats - f0; } while (0)

/* F of every layer, B of every layer from the head down (dloss LOSS_SCALE), then W of every
 * layer: gradients into grads. Then gpt_forward_backward on the same batch: loss into loss_fb,
 * gradients (of dloss 1) into m->grads. */
static void *rank_thread(void *arg) {
    rank_job *j = arg;
    gpt_model *m = j->m;
    int nl = gpt_num_layers(m), C = m->cfg.n_embd;
    float *act[MAX_LAYERS], *x[MAX_LAYERS], dloss = LOSS_SCALE;
    float *scratch = pt_falloc(gpt_scratch_floats(m, B, T));
    for (int l = 0; l < nl; l++) {
        act[l] = pt_falloc(gpt_layer_act_floats(m, l, B, T));
        x[l] = pt_falloc((size_t)N * C);   /* output of layer l, then the gradient at it */
    }
    gpt_tp tp = {.rank = m->tp_rank, .size = m->tp_size, .allreduce = group_allreduce, .ctx = &j->me};
    if (m->tp_size > 1) gpt_set_tp(m, &tp);
    gpt_zero_grad(m);
    for (int l = 0; l < nl && j->rc == 0; l++)
        COUNTED(j, l, 0, gpt_layer_forward(m, l, NULL, act[l], scratch, l == nl - 1 ? &j->loss : x[l],
                                           l ? x[l - 1] : NULL, l == 0 ? j->tok : l == nl - 1 ? j->tgt : NULL, B, T));
    for (int l = nl - 1; l >= 0 && j->rc == 0; l--)
        COUNTED(j, l, 1, gpt_layer_backward_input(m, l, NULL, act[l], scratch, l ? x[l - 1] : NULL,
                                                  l == nl - 1 ? &dloss : x[l], B, T));
    for (int l = nl - 1; l >= 0 && j->rc == 0; l--)
        COUNTED(j, l, 2, gpt_layer_backward_weight(m, l, NULL, act[l], scratch, B, T));
    j->grads = pt_falloc(m->n_held);
    memcpy(j->grads, m->grads, m->n_held * sizeof *m->grads);
    gpt_zero_grad(m);
    if (j->rc == 0 && gpt_forward_backward(m, j->tok, j->tgt, B, T, &j->loss_fb) < 0) j->rc = -1;
    for (int l = 0; l < nl; l++) { free(act[l]); free(x[l]); }
    free(scratch);
    return NULL;
}

/* ---- checks -------------------------------------------------------------------------------- */
/* Layers' spans tile the buffer; every held tensor inside its layer's span, count its shard's,
 * at offsets in layout order; the other tensors unheld. */
static int layout_ok(const gpt_model *m) {
    size_t expect = 0, off, cnt;
    int ok = 1;
    for (int l = m->first_layer; l < m->end_layer; l++) {
        gpt_layer_param_span(m, l, &off, &cnt);
        ok &= off == expect;
        expect = off + cnt;
    }
    ok &= expect == m->n_held;
    size_t at = 0;
    for (int k = 0; k < gpt_param_count(m); k++) {
        const gpt_param_info *pi = gpt_param_info_at(m, k);
        ok &= pi->count == gpt_shard_count(&m->cfg, pi, m->tp_size);
        ok &= pi->full == (size_t)pi->shape[0] * (pi->ndim == 2 ? pi->shape[1] : 1);
        if (!gpt_holds_layer(m, pi->layer)) continue;
        gpt_layer_param_span(m, pi->layer, &off, &cnt);
        ok &= pi->offset == at && pi->offset >= off && pi->offset + pi->count <= off + cnt;
        at += pi->count;
    }
    return ok && at == m->n_held;
}

/* The split each tensor should have, by name. */
static int split_ok(const gpt_param_info *pi) {
    const char *n = pi->name;
    if (strstr(n, "c_attn.weight")) return pi->split == GPT_SPLIT_COLS && pi->segs == 3;
    if (strstr(n, "c_attn.bias")) return pi->split == GPT_SPLIT_VEC && pi->segs == 3;
    if (strstr(n, "c_fc.weight")) return pi->split == GPT_SPLIT_COLS && pi->segs == 1;
    if (strstr(n, "c_fc.bias")) return pi->split == GPT_SPLIT_VEC && pi->segs == 1;
    if (strstr(n, "c_proj.weight") || !strcmp(n, "wte.weight")) return pi->split == GPT_SPLIT_ROWS && pi->segs == 1;
    return pi->split == GPT_SPLIT_NONE && pi->segs == 1;
}

/* A shard of a whole model's tensors at every tp: the split table, the layout, extract and
 * place round trip, the seeded init of a shard model (whole and partial) and of slices. */
static void test_shards(const gpt_config *c, int tp) {
    char name[160];
    gpt_model whole, sh[MAX_TP], part;
    gpt_init(&whole, c);
    gpt_init_random(&whole, 5);
    int ok_split = 1, ok_layout = 1, ok_trip = 1, ok_pad = 1, ok_init = 1, ok_slice = 1, ok_part = 1;
    for (int k = 0; k < gpt_param_count(&whole); k++) ok_split &= split_ok(gpt_param_info_at(&whole, k));
    for (int r = 0; r < tp; r++) {
        ok_layout &= gpt_init_layers_tp(&sh[r], c, 0, c->n_layer + 2, r, tp) == 0 && layout_ok(&sh[r]);
        gpt_init_random(&sh[r], 5);
    }
    int vp = sh[0].vocab_padded;
    for (int k = 0; k < gpt_param_count(&whole); k++) {
        const gpt_param_info *pi = gpt_param_info_at(&whole, k), *ps = gpt_param_info_at(&sh[0], k);
        float *back = pt_falloc(pi->full), *cut = pt_falloc(ps->count);
        for (int r = 0; r < tp; r++) {
            gpt_shard_extract(c, pi, r, tp, whole.params + pi->offset, cut);
            gpt_shard_place(c, pi, r, tp, cut, back);
            ok_init &= memcmp(cut, sh[r].params + ps->offset, ps->count * sizeof *cut) == 0;
            size_t s0 = ps->count / 3, n = ps->count / 2;
            float *sl = pt_falloc(n + 1);
            gpt_init_random_slice(&sh[r], 5, k, s0, n, sl);
            ok_slice &= memcmp(sl, cut + s0, n * sizeof *sl) == 0;
            free(sl);
            if (k == 0)   /* wte: rank r's padding rows (ids >= V) are zero */
                for (int v = c->vocab_size; v < vp; v++)
                    if (v / (vp / tp) == r)
                        for (int i = 0; i < c->n_embd; i++) ok_pad &= cut[(size_t)(v % (vp / tp)) * c->n_embd + i] == 0;
        }
        ok_trip &= memcmp(back, whole.params + pi->offset, pi->full * sizeof *back) == 0;
        free(back);
        free(cut);
    }
    /* a partial shard model (blocks from the second on, and the head): its layers' init, and a
     * tied copy of the wte shard drawn as a slice */
    int first = 2, r = tp - 1;
    ok_part = gpt_init_layers_tp(&part, c, first, c->n_layer + 2, r, tp) == 0 && layout_ok(&part) &&
              !part.w.wte && part.n_held == sh[r].n_held - sh[r].layer_off[first];
    gpt_init_random(&part, 5);
    ok_part &= memcmp(part.params, sh[r].params + sh[r].layer_off[first], part.n_held * sizeof(float)) == 0;
    float *copy = pt_falloc(part.info[0].count);
    gpt_init_random_slice(&part, 5, 0, 0, part.info[0].count, copy);
    ok_part &= memcmp(copy, sh[r].w.wte, part.info[0].count * sizeof *copy) == 0;
    free(copy);
#define NAMED(what) (snprintf(name, sizeof name, "tp model L%d C%d V%d tp %d: %s", c->n_layer, \
                              c->n_embd, c->vocab_size, tp, what), name)
    CHECK(NAMED("every tensor's split and segments"), ok_split, "a tensor's split differs");
    CHECK(NAMED("layer spans and tensors tile each shard's buffer"), ok_layout, "layout inconsistent");
    CHECK(NAMED("vocab_padded"), vp == (c->vocab_size + tp - 1) / tp * tp, "%d", vp);
    CHECK(NAMED("extract then place of every rank gives the whole tensor back"), ok_trip, "differs");
    CHECK(NAMED("wte shards' padding rows are zero"), ok_pad, "nonzero padding");
    CHECK(NAMED("a shard's seeded init equals extract(whole init) bitwise"), ok_init, "differs");
    CHECK(NAMED("gpt_init_random_slice of a shard equals the extract's elements"), ok_slice, "differs");
    CHECK(NAMED("a partial shard model: its layers' init and a tied wte copy's slice"), ok_part, "differs");
    for (int q = 0; q < tp; q++) gpt_free(&sh[q]);
    gpt_free(&part);
    gpt_free(&whole);
}

/* Gradient of rank r's shard of tensor k, placed into whole (the others' elements untouched). */
static void place_grad(const gpt_model *m, int k, float *whole) {
    const gpt_param_info *pi = gpt_param_info_at(m, k);
    gpt_shard_place(&m->cfg, pi, m->tp_rank, m->tp_size, m->grads + pi->offset, whole);
}

/* The collectives each layer ran against its cost row's tp_collectives and tp_bytes. */
static int collectives_ok(const gpt_model *m, const rank_job *j) {
    int ok = 1;
    for (int l = 0; l < gpt_num_layers(m); l++) {
        gpt_layer_cost k;
        gpt_layer_ops_of(m, l)->cost(&m->cfg, B, T, m->tp_size, &k);
        for (int ph = 0; ph < 3; ph++)
            ok &= j->calls[l][ph] == k.tp_collectives[ph] && 4.0 * j->floats[l][ph] == k.tp_bytes[ph];
    }
    return ok;
}

/* The sharded layers' loss and gradients against the whole model's, one thread per rank. */
static void test_sharded_step(const gpt_config *c, int tp) {
    char name[160];
    int tok[N], tgt[N];
    float loss;
    gpt_model whole, sh[MAX_TP];
    gpt_init(&whole, c);
    gpt_init_random(&whole, 3);
    perturb_params(&whole, 4);
    tp_make_batch(tok, tgt, N, c->vocab_size, 6, 1);
    gpt_zero_grad(&whole);
    gpt_forward_backward(&whole, tok, tgt, B, T, &loss);

    tp_group g;
    tp_group_init(&g, tp);
    rank_job jobs[MAX_TP];
    for (int r = 0; r < tp; r++) {
        tp_shard_of(&sh[r], &whole, r, tp);
        jobs[r] = (rank_job){.m = &sh[r], .me = {.g = &g, .rank = r}, .tok = tok, .tgt = tgt};
    }
    tp_run_threads(tp, rank_thread, jobs, sizeof *jobs);
    tp_group_destroy(&g);
    int rc = 0, same_loss = 1, coll = 1, fb = 1;
    for (int r = 0; r < tp; r++) {
        rc |= jobs[r].rc;
        same_loss &= jobs[r].loss == jobs[0].loss && jobs[r].loss_fb == jobs[0].loss;
        coll &= collectives_ok(&sh[r], &jobs[r]);
        for (size_t i = 0; i < sh[r].n_held; i++) fb &= sh[r].grads[i] * LOSS_SCALE == jobs[r].grads[i];
        memcpy(sh[r].grads, jobs[r].grads, sh[r].n_held * sizeof(float));   /* checked below */
        free(jobs[r].grads);
    }
    double le = test_relerr(jobs[0].loss, loss, 1e-6);
    double worst = 0;
    const char *worst_name = "";
    int repl = 1, pad = 1;
    for (int k = 0; k < gpt_param_count(&whole); k++) {
        const gpt_param_info *pi = gpt_param_info_at(&whole, k), *ps = &sh[0].info[k];
        float *got = pt_falloc(pi->full), *want = pt_falloc(pi->full);
        for (int r = 0; r < tp; r++) place_grad(&sh[r], k, got);
        for (size_t i = 0; i < pi->full; i++) want[i] = whole.grads[pi->offset + i] * LOSS_SCALE;
        double e = test_tensor_relerr(got, want, pi->full);
        if (e > worst) { worst = e; worst_name = pi->name; }
        for (int r = 1; ps->split == GPT_SPLIT_NONE && r < tp; r++)
            repl &= memcmp(sh[r].grads + ps->offset, sh[0].grads + ps->offset, ps->count * sizeof(float)) == 0;
        free(got);
        free(want);
    }
    /* wte's padding rows: gradients exactly zero (and the weights still zero) */
    int vl = sh[0].vocab_padded / tp;
    for (int v = c->vocab_size; v < sh[0].vocab_padded; v++)
        for (int i = 0; i < c->n_embd; i++) {
            size_t at = (size_t)(v % vl) * c->n_embd + i;
            pad &= sh[v / vl].g.wte[at] == 0 && sh[v / vl].w.wte[at] == 0;
        }
    printf("# L%d C%d V%d tp %d: loss %.7f vs %.7f, worst gradient relerr %.3g in %s\n", c->n_layer,
           c->n_embd, c->vocab_size, tp, jobs[0].loss, loss, worst, worst_name);
    CHECK(NAMED("every rank's F, B, W ran"), rc == 0, "%s", pt_err());
    CHECK(NAMED("loss equals the whole model's"), le < LOSS_TOL, "%.8f vs %.8f (relerr %g)", jobs[0].loss, loss, le);
    CHECK(NAMED("loss bitwise equal on every rank, and from gpt_forward_backward"), same_loss, "differs");
    CHECK(NAMED("gpt_forward_backward of the shards: the layers' gradients (scaled) bitwise"), fb, "differ");
    CHECK(NAMED("gradients placed together equal the whole model's"), worst < GRAD_TOL(c), "relerr %g in %s", worst, worst_name);
    CHECK(NAMED("replicated tensors' gradients bitwise equal on every rank"), repl, "differ");
    CHECK(NAMED("wte padding rows' gradients exactly zero"), pad, "nonzero");
    CHECK(NAMED("the all-reduces each layer ran are its cost row's"), coll, "counts or bytes differ");
    for (int r = 0; r < tp; r++) gpt_free(&sh[r]);
    gpt_free(&whole);
}

/* The cost rows' memory equals the layers' buffers: act_bytes = 4 * act_floats, param_bytes =
 * 4 * the floats the layer holds (the head: ln_f and its copy of the wte shard); the act and
 * scratch sizes are gpt.h's. */
static void test_cost_memory(const gpt_config *c) {
    char name[160];
    int ok = 1;
    for (int tp = 1; tp <= 4; tp *= 2) {
        gpt_model m;
        gpt_init_layers_tp(&m, c, 0, c->n_layer + 2, 0, tp);
        for (int l = 0; l < gpt_num_layers(&m); l++) {
            gpt_layer_cost k;
            size_t off, cnt;
            gpt_layer_ops_of(&m, l)->cost(c, 3, 5, tp, &k);
            gpt_layer_param_span(&m, l, &off, &cnt);
            if (gpt_layer_kind_of(&m, l) == GPT_LAYER_HEAD) cnt += m.info[0].count;
            ok &= k.act_bytes == 4.0 * gpt_layer_act_floats(&m, l, 3, 5) && k.param_bytes == 4.0 * cnt &&
                  k.grad_bytes == 4.0 * cnt;
            ok &= gpt_layer_act_saved_floats(&m, l, 3, 5) <= gpt_layer_act_floats(&m, l, 3, 5);
        }
        gpt_free(&m);
    }
    /* the sizes gpt.h documents, per token, at tp 2 */
    gpt_model m;
    size_t n = 3 * 5, C = (size_t)c->n_embd, NH = (size_t)c->n_head, tp = 2, T5 = 5, H = (size_t)c->n_layer + 1;
    gpt_init_layers_tp(&m, c, 0, c->n_layer + 2, 1, (int)tp);
    size_t vl = (size_t)m.vocab_padded / tp, blk = n * 4 * C / tp + T5 * T5, head = n * (tp + 3);
    ok &= gpt_layer_act_floats(&m, 1, 3, 5) == n * (8 * C + 19 * C / tp + 4 + NH / tp * T5) &&
          gpt_layer_act_saved_floats(&m, 1, 3, 5) == n * (4 * C + 12 * C / tp + 4 + NH / tp * T5) &&
          gpt_layer_act_floats(&m, (int)H, 3, 5) == n * (3 * C + 3 + vl) &&
          gpt_layer_act_saved_floats(&m, (int)H, 3, 5) == n * (2 * C + 3 + vl) &&
          gpt_layer_act_floats(&m, 0, 3, 5) == n * (1 + C) &&
          gpt_scratch_floats(&m, 3, 5) == (blk > head ? blk : head);
    gpt_free(&m);
    snprintf(name, sizeof name, "tp model L%d C%d V%d: cost rows' act and param bytes are the "
             "layers' floats at tp 1, 2, 4, and gpt.h's sizes", c->n_layer, c->n_embd, c->vocab_size);
    CHECK(name, ok, "differ");
}

static void test_errors(void) {
    gpt_config c = cfgs[0];
    gpt_model m;
    int rc = gpt_init_layers_tp(&m, &c, 0, c.n_layer + 2, 0, 3);
    CHECK("tp model: tp not dividing n_head names both", rc < 0 && strstr(pt_err(), "n_head (4)") &&
          strstr(pt_err(), "tp (3)"), "rc %d: %s", rc, pt_err());
    rc = gpt_init_layers_tp(&m, &c, 0, c.n_layer + 2, 2, 2);
    CHECK("tp model: tp_rank outside the group", rc < 0 && strstr(pt_err(), "tp_rank 2"), "rc %d: %s", rc, pt_err());
    rc = gpt_init_layers_tp(&m, &c, 0, c.n_layer + 2, -1, 2);
    CHECK("tp model: a negative tp_rank", rc < 0 && strstr(pt_err(), "tp_rank -1"), "rc %d: %s", rc, pt_err());
    rc = gpt_init_layers_tp(&m, &c, 0, c.n_layer + 2, 0, 0);
    CHECK("tp model: tp 0", rc < 0 && strstr(pt_err(), "tp (0)"), "rc %d: %s", rc, pt_err());

    /* one rank of a group of 2 whose collective works as a group of one for a while, then fails */
    gpt_init_layers_tp(&m, &c, 0, c.n_layer + 2, 1, 2);
    gpt_init_random(&m, 1);
    int tok[N], tgt[N], C = c.n_embd;
    tp_make_batch(tok, tgt, N, c.vocab_size, 2, 1);
    float *act = pt_falloc(gpt_layer_act_floats(&m, 1, B, T)), *sc = pt_falloc(gpt_scratch_floats(&m, B, T));
    float *x = pt_falloc((size_t)N * C), *y = pt_falloc((size_t)N * C), loss;
    rc = gpt_layer_forward(&m, 0, NULL, act, sc, x, NULL, tok, B, T);
    CHECK("tp model: a sharded layer without gpt_set_tp", rc < 0 && strstr(pt_err(), "gpt_set_tp"), "rc %d: %s", rc, pt_err());
    member me = {.fail_after = 0};
    gpt_tp tp = {.rank = 1, .size = 2, .allreduce = group_allreduce, .ctx = &me};
    gpt_set_tp(&m, &tp);
    rc = gpt_layer_forward(&m, 1, NULL, act, sc, y, x, NULL, B, T);
    CHECK("tp model: block F returns the all-reduce's failure", rc < 0 && strstr(pt_err(), "injected") &&
          strstr(pt_err(), "layer 1"), "rc %d: %s", rc, pt_err());
    me.fail_after = 2;   /* F's two succeed, B's first fails */
    rc = gpt_layer_forward(&m, 1, NULL, act, sc, y, x, NULL, B, T);
    int rb = gpt_layer_backward_input(&m, 1, NULL, act, sc, x, y, B, T);
    CHECK("tp model: block B returns the all-reduce's failure", rc == 0 && rb < 0 && strstr(pt_err(), "injected") &&
          strstr(pt_err(), "layer 1 backward"), "rc %d %d: %s", rc, rb, pt_err());
    me.fail_after = 0;
    rc = gpt_forward_backward(&m, tok, tgt, B, T, &loss);
    CHECK("tp model: gpt_forward_backward returns the all-reduce's failure", rc < 0 && strstr(pt_err(), "injected"),
          "rc %d: %s", rc, pt_err());
    float *head_act = pt_falloc(gpt_layer_act_floats(&m, c.n_layer + 1, B, T));
    rc = gpt_layer_forward(&m, c.n_layer + 1, NULL, head_act, sc, y, x, NULL, B, T);
    CHECK("tp model: a sharded head without targets", rc < 0 && strstr(pt_err(), "targets"), "rc %d: %s", rc, pt_err());
    rc = gpt_forward_last(&m, y, tok, B, T);
    CHECK("tp model: gpt_forward_last of a shard", rc < 0 && strstr(pt_err(), "tp 1"), "rc %d: %s", rc, pt_err());
    free(act); free(sc); free(x); free(y); free(head_act);
    gpt_free(&m);
}

/* A whole model's safetensors file (with a tied lm_head) loaded into shard models: each rank's
 * extract;
 * writing a shard model's tensors is refused. */
static void test_load(void) {
    const gpt_config *c = &cfgs[0];
    gpt_model whole, sh;
    gpt_init(&whole, c);
    gpt_init_random(&whole, 9);
    perturb_params(&whole, 10);
    char path[] = "/tmp/pt_tp_model_XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    st_writer *wr = st_writer_new();
    int64_t wte_shape[2] = {c->vocab_size, c->n_embd};
    int ok = gpt_add_to_writer(&whole, wr, whole.params, "") == 0 &&
             st_writer_add(wr, "lm_head.weight", ST_F32, 2, wte_shape, whole.w.wte) == 0 && st_write(wr, path) == 0;
    st_writer_free(wr);
    for (int r = 0; ok && r < 2; r++) {
        ok &= gpt_init_layers_tp(&sh, c, 0, c->n_layer + 2, r, 2) == 0 && gpt_load_safetensors(&sh, path, NULL) == 0;
        for (int k = 0; ok && k < gpt_param_count(&sh); k++) {
            const gpt_param_info *pi = gpt_param_info_at(&whole, k);
            float *cut = pt_falloc(sh.info[k].count);
            gpt_shard_extract(c, pi, r, 2, whole.params + pi->offset, cut);
            ok &= memcmp(cut, sh.params + sh.info[k].offset, sh.info[k].count * sizeof *cut) == 0;
            free(cut);
        }
        if (r == 1) {
            st_writer *w = st_writer_new();
            int rc = gpt_add_to_writer(&sh, w, sh.params, "");
            CHECK("tp model: writing a shard model's tensors is refused", rc < 0 && strstr(pt_err(), "gpt_shard_place"),
                  "rc %d: %s", rc, pt_err());
            st_writer_free(w);
        }
        gpt_free(&sh);
    }
    CHECK("tp model: a whole model's file loads into each rank's shards", ok, "%s", pt_err());
    unlink(path);
    gpt_free(&whole);
}

int main(void) {
    test_load();
    test_errors();
    for (size_t i = 0; i < sizeof cfgs / sizeof *cfgs; i++) {
        test_cost_memory(&cfgs[i]);
        for (int tp = 1; tp <= MAX_TP; tp *= 2) {
            test_shards(&cfgs[i], tp);
            test_sharded_step(&cfgs[i], tp);
        }
    }
    TEST_DONE();
}
