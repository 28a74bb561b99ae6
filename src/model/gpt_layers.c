/* The layer kinds of GPT (embedding, transformer block, final layernorm + tied head) as rows of
 * one table: forward (F), backward-input (B) and backward-weight (W) on one microbatch over
 * caller-owned act storage laid out here, and the analytic cost of each. Not here: buffer
 * ownership, scheduling, the parameter table (gpt.c). */
#include "model/gpt.h"
#include "nn/nn.h"
#include "util/pt.h"
#include <stdio.h>
#include <string.h>

/* Views into one block's act storage; F part first (saved activations), then the B part
 * (gradients at each matmul / layernorm output that W needs). N = B*T. x and res2 come first:
 * they are what communication-free recomputation keeps (gpt_layer_keep_floats), and the rest
 * of the F part is rebuilt from them without a collective (block_recompute). */
typedef struct {
    float *x;                   /* (N,C) block input */
    float *res2;                /* (N,C) x + attention projection (after the group's sum) */
    float *ln1, *ln1m, *ln1r;   /* (N,C), (N), (N) */
    float *qkv;                 /* (N,3C/tp) */
    float *atty;                /* (N,C/tp) attention output, heads concatenated */
    float *att;                 /* (B,NH/tp,T,T) softmax probabilities */
    float *ln2, *ln2m, *ln2r;   /* (N,C), (N), (N) */
    float *fch, *fchg;          /* (N,4C/tp) c_fc output, after GELU */
    /* written by B, read by W */
    float *dres3;               /* (N,C) gradient at the block output (= at mlp.c_proj output) */
    float *dfch;                /* (N,4C/tp) at mlp.c_fc output */
    float *dln2;                /* (N,C) at ln_2 output */
    float *dres2;               /* (N,C) at res2 (= at attn.c_proj output) */
    float *dqkv;                /* (N,3C/tp) at attn.c_attn output */
    float *dln1;                /* (N,C) at ln_1 output */
    size_t keep;                /* floats of x and res2 (the start) */
    size_t saved;               /* floats of the F part (the start) */
    size_t size;                /* floats in all */
} block_act;

/* Head act: F part, then B part. */
typedef struct {
    float *x;                   /* (N,C) head input */
    float *lnf, *lnfm, *lnfr;   /* (N,C), (N), (N) */
    int *targets;               /* (N) stored as int in float-sized slots */
    float *probs;               /* (N,Vp/tp) softmax after F; dlogits after B (V at tp 1) */
    float *dlnf;                /* (N,C) B: gradient at ln_f output */
    size_t saved;               /* floats of the F part (the start) */
    size_t size;                /* floats in all */
} head_act;

/* Embedding act. */
typedef struct {
    int *tokens;                /* (N) */
    float *dout;                /* (N,C) B: gradient at the embedding output */
    size_t saved;               /* floats of the F part (the start) */
    size_t size;                /* floats in all */
} embed_act;

/* Carves base into consecutive regions of rows: returns the row n0 of a region of N rows of
 * `width` floats (NULL when base is NULL, which measures sizes only) and advances *off past the
 * region. */
static float *take_rows(float *base, size_t *off, size_t N, size_t width, size_t n0) {
    float *r = base ? base + *off + n0 * width : NULL;
    *off += N * width;
    return r;
}

/* A region of n floats, whole. */
static float *take(float *base, size_t *off, size_t n) { return take_rows(base, off, n, 1, 0); }

/* The per-rank widths of a block (gpt_init_layers_tp): the whole ones at tp 1. */
typedef struct { int C, Cl, NHl; } block_dims;   /* channels; the rank's channels and heads */

static block_dims block_dims_of(const gpt_model *m) {
    return (block_dims){ m->cfg.n_embd, m->cfg.n_embd / m->tp_size, m->cfg.n_head / m->tp_size };
}

/* The views at row n0 (a token: sequence n0/T) of a microbatch of (B,T): every region is
 * (N, per-token width), att's too (a sequence's (NH/tp,T,T) is T rows of NH/tp*T), so the views
 * of a sub-batch of sequences are the same arithmetic at an offset. */
static block_act block_act_rows(const gpt_model *m, float *a, int B, int T, size_t n0) {
    block_dims d = block_dims_of(m);
    size_t C = (size_t)d.C, Cl = (size_t)d.Cl, N = (size_t)B * T, NH = (size_t)d.NHl;
    block_act v;
    size_t o = 0;
    v.x = take_rows(a, &o, N, C, n0);
    v.res2 = take_rows(a, &o, N, C, n0);
    v.keep = o;
    v.ln1 = take_rows(a, &o, N, C, n0);
    v.ln1m = take_rows(a, &o, N, 1, n0); v.ln1r = take_rows(a, &o, N, 1, n0);
    v.qkv = take_rows(a, &o, N, 3 * Cl, n0);
    v.atty = take_rows(a, &o, N, Cl, n0);
    v.att = take_rows(a, &o, N, NH * T, n0);
    v.ln2 = take_rows(a, &o, N, C, n0);
    v.ln2m = take_rows(a, &o, N, 1, n0); v.ln2r = take_rows(a, &o, N, 1, n0);
    v.fch = take_rows(a, &o, N, 4 * Cl, n0); v.fchg = take_rows(a, &o, N, 4 * Cl, n0);
    v.saved = o;
    v.dres3 = take_rows(a, &o, N, C, n0); v.dfch = take_rows(a, &o, N, 4 * Cl, n0);
    v.dln2 = take_rows(a, &o, N, C, n0); v.dres2 = take_rows(a, &o, N, C, n0);
    v.dqkv = take_rows(a, &o, N, 3 * Cl, n0); v.dln1 = take_rows(a, &o, N, C, n0);
    v.size = o;
    return v;
}

static block_act block_act_view(const gpt_model *m, float *a, int B, int T) {
    return block_act_rows(m, a, B, T, 0);
}

/* Vocabulary rows of wte (and logit columns) a rank holds: V at tp 1. */
static int vocab_local(const gpt_model *m) {
    return m->tp_size == 1 ? m->cfg.vocab_size : m->vocab_padded / m->tp_size;
}

static head_act head_act_view(const gpt_model *m, float *a, int B, int T) {
    size_t C = (size_t)m->cfg.n_embd, N = (size_t)B * T, V = (size_t)vocab_local(m);
    head_act v;
    size_t o = 0;
    v.x = take(a, &o, N * C);
    v.lnf = take(a, &o, N * C); v.lnfm = take(a, &o, N); v.lnfr = take(a, &o, N);
    v.targets = (int *)take(a, &o, N);
    v.probs = take(a, &o, N * V);
    v.saved = o;
    v.dlnf = take(a, &o, N * C);
    v.size = o;
    return v;
}

static embed_act embed_act_view(const gpt_model *m, float *a, int B, int T) {
    size_t C = (size_t)m->cfg.n_embd, N = (size_t)B * T;
    embed_act v;
    size_t o = 0;
    v.tokens = (int *)take(a, &o, N);
    v.saved = o;
    v.dout = take(a, &o, N * C);
    v.size = o;
    return v;
}

_Static_assert(sizeof(int) == sizeof(float), "token ids are stored in float-sized act slots");

static size_t embed_act_floats(const gpt_model *m, int B, int T) { return embed_act_view(m, NULL, B, T).size; }
static size_t block_act_floats(const gpt_model *m, int B, int T) { return block_act_view(m, NULL, B, T).size; }
static size_t head_act_floats(const gpt_model *m, int B, int T) { return head_act_view(m, NULL, B, T).size; }

/* What communication-free recomputation keeps from F to B: a block's x and res2; the
 * embedding's and the head's whole F part (they are not recomputed). */
static size_t embed_keep_floats(const gpt_model *m, int B, int T) { return embed_act_view(m, NULL, B, T).saved; }
static size_t block_keep_floats(const gpt_model *m, int B, int T) { return block_act_view(m, NULL, B, T).keep; }
static size_t head_keep_floats(const gpt_model *m, int B, int T) { return head_act_view(m, NULL, B, T).saved; }

/* The recompute of a kind that keeps its whole F part: nothing to rebuild. */
static int keep_all_recompute(const gpt_model *m, int l, const gpt_tied *tied, float *act,
                              float *scratch, int B, int T) {
    return 0;
}

size_t gpt_layer_act_floats(const gpt_model *m, int layer, int B, int T) {
    return gpt_layer_ops_of(m, layer)->act_floats(m, B, T);
}

size_t gpt_layer_act_saved_floats(const gpt_model *m, int layer, int B, int T) {
    switch (gpt_layer_kind_of(m, layer)) {
    case GPT_LAYER_EMBED: return embed_act_view(m, NULL, B, T).saved;
    case GPT_LAYER_BLOCK: return block_act_view(m, NULL, B, T).saved;
    default:              return head_act_view(m, NULL, B, T).saved;
    }
}

size_t gpt_layer_keep_floats(const gpt_model *m, int layer, int B, int T) {
    return gpt_layer_ops_of(m, layer)->keep_floats(m, B, T);
}

size_t gpt_layer_act_bytes_per_token(const gpt_model *m, int layer, int T) {
    return gpt_layer_act_floats(m, layer, 1, T) * sizeof(float) / (size_t)T;
}

/* Scratch of the kinds: a block's B needs (N,4C/tp) and the attention's; a sharded head's F the
 * per-token exchange (head_tp_forward), N*(tp + 3); the embedding none. */
size_t gpt_scratch_floats(const gpt_model *m, int B, int T) {
    size_t N = (size_t)B * T, block = N * 4 * (size_t)block_dims_of(m).Cl + ATTENTION_SCRATCH_FLOATS(T);
    size_t head = m->tp_size > 1 ? N * ((size_t)m->tp_size + 3) : 0;
    return block > head ? block : head;
}

/* Checks ids are in [0,V): -1 naming the first bad one, its (b,t) and what it was for. */
static int check_tokens(const gpt_model *m, const int *tok, int B, int T, const char *what) {
    for (int i = 0; i < B * T; i++)
        if (tok[i] < 0 || tok[i] >= m->cfg.vocab_size)
            return pt_seterr("%s %d at (b=%d, t=%d) is outside the vocabulary [0, %d)",
                             what, tok[i], i / T, i % T, m->cfg.vocab_size);
    return 0;
}

/* The head reads tie 0 (wte, set up by gpt_init). */
static const float *tied_wte(const gpt_model *m, const gpt_tied *tied) {
    return tied && tied[0].w ? tied[0].w : m->w.wte;
}

static float *tied_dwte(const gpt_model *m, const gpt_tied *tied) {
    return tied && tied[0].dw ? tied[0].dw : m->g.wte;
}

/* ---- tensor parallelism ------------------------------------------------------------------- */
/* The group's in-place sum of buf (n floats); nothing at tp 1. -1 with the collective's error. */
static int tp_allreduce(const gpt_model *m, float *buf, size_t n, const char *what) {
    if (m->tp_size == 1) return 0;
    if (!m->tp.allreduce)
        return pt_seterr("TP rank %d of %d has no collective for %s (gpt_set_tp was not called)",
                         m->tp_rank, m->tp_size, what);
    if (m->tp.allreduce(m->tp.ctx, buf, n) < 0)
        return pt_adderr("TP rank %d of %d, all-reduce of %s: ", m->tp_rank, m->tp_size, what);
    return 0;
}

/* Starts the group's sum of buf without waiting (gpt_tp.iallreduce): *req for tp_wait. */
static int tp_start(const gpt_model *m, float *buf, size_t n, void **req, const char *what) {
    if (!m->tp.iallreduce || !m->tp.wait)
        return pt_seterr("TP rank %d of %d overlaps its all-reduces but its collective has no "
                         "iallreduce and wait (gpt_set_tp after gpt_set_tp_overlap replaced it?)",
                         m->tp_rank, m->tp_size);
    if (m->tp.iallreduce(m->tp.ctx, buf, n, req) < 0)
        return pt_adderr("TP rank %d of %d, starting the all-reduce of %s: ", m->tp_rank, m->tp_size, what);
    return 0;
}

/* Waits for a sum tp_start started; *req is NULL after, whatever the outcome. */
static int tp_wait(const gpt_model *m, void **req, const char *what) {
    void *r = *req;
    *req = NULL;
    if (m->tp.wait(m->tp.ctx, r) < 0)
        return pt_adderr("TP rank %d of %d, all-reduce of %s: ", m->tp_rank, m->tp_size, what);
    return 0;
}

/* After a failure: waits for the n requests still in flight (the non-NULL ones), keeping the
 * first error's message. */
static void tp_drain(const gpt_model *m, void **req, int n) {
    char first[512];
    snprintf(first, sizeof first, "%s", pt_err());
    for (int i = 0; i < n; i++)
        if (req[i]) tp_wait(m, &req[i], "");
    pt_seterr("%s", first);
}

/* The vocabulary shard of m: ids [*v0, *v0 + *nv) are real rows of its wte (the rest of its
 * vocab_local rows are padding). */
static void vocab_range(const gpt_model *m, int *v0, int *nv) {
    int vl = vocab_local(m), left = m->cfg.vocab_size - m->tp_rank * vl;
    *v0 = m->tp_rank * vl;
    *nv = left < 0 ? 0 : left < vl ? left : vl;
}

/* ---- embedding ----------------------------------------------------------------------------
 * Over tp ranks: each gathers the rows of its vocabulary shard (zeros for the others' tokens),
 * rank 0 adds the positions, and the group sums the (N,C) output; W scatters into its rows. */
static int embed_forward(const gpt_model *m, int l, const gpt_tied *tied, float *act,
                         float *scratch, float *out, const float *x, const int *tokens, int B, int T) {
    if (check_tokens(m, tokens, B, T, "token") < 0) return -1;
    embed_act a = embed_act_view(m, act, B, T);
    memcpy(a.tokens, tokens, (size_t)B * T * sizeof *tokens);
    if (m->tp_size == 1) {
        embedding_forward(out, tokens, m->w.wte, m->w.wpe, B, T, m->cfg.n_embd);
        return 0;
    }
    int v0, nv;
    vocab_range(m, &v0, &nv);
    embedding_shard_forward(out, tokens, m->w.wte, m->tp_rank == 0 ? m->w.wpe : NULL, v0, nv, B,
                            T, m->cfg.n_embd);
    return tp_allreduce(m, out, (size_t)B * T * m->cfg.n_embd, "the embedding output");
}

static int embed_backward_input(const gpt_model *m, int l, const gpt_tied *tied, float *act,
                                float *scratch, float *dx, const float *dout, int B, int T) {
    memcpy(embed_act_view(m, act, B, T).dout, dout, (size_t)B * T * m->cfg.n_embd * sizeof *dout);
    return 0;
}

static int embed_backward_weight(const gpt_model *m, int l, const gpt_tied *tied, const float *act,
                                 float *scratch, int B, int T) {
    embed_act a = embed_act_view(m, (float *)act, B, T);   /* read only */
    int v0, nv;
    if (m->tp_size == 1) {
        embedding_backward_weight(m->g.wte, m->g.wpe, a.dout, a.tokens, B, T, m->cfg.n_embd);
        return 0;
    }
    vocab_range(m, &v0, &nv);
    embedding_shard_backward_weight(m->g.wte, m->g.wpe, a.dout, a.tokens, v0, nv, B, T, m->cfg.n_embd);
    return 0;
}

/* ---- transformer block --------------------------------------------------------------------
 * Over tp ranks (Megatron-LM): c_attn and c_fc column-parallel (each rank its heads' q k v and
 * its share of the MLP), attn.c_proj and mlp.c_proj row-parallel: the rank's partial product,
 * the group's sum, then the bias and the residual once. B sums the column-parallel matmuls'
 * input gradients over the group before each layernorm's backward. W is local.
 *
 * F and B are each three stages with one group sum between stages 0 and 1 and one between 1
 * and 2 (block_f, block_b), run on rows of whole sequences (block_rows): on the whole
 * microbatch (block_run), or, with overlap (gpt_set_tp_overlap), on two halves in turn so that
 * each half's sum is in flight while the other half computes (block_pingpong). Every op but
 * W's sums is row-wise, so the halves compute what the whole does. */

/* One block's F or B on the rows of sequences [b0, b0 + B) of a microbatch. */
typedef struct {
    const gpt_model *m;
    const gpt_block_tensors *w;
    block_act a;                /* the views at the rows' first token */
    float *out;                 /* F: the block output; B: dx (the rows') */
    const float *dout;          /* B: the gradient at the output (the rows') */
    float *s, *satt;            /* B: the rows' part of the (N,4C/tp) scratch; attention's */
    int B, T;                   /* the rows: B sequences of T tokens */
    float *sum[2];              /* what the group sums after stage 0 and after stage 1 (N,C) */
} block_rows;

typedef void (*block_stage)(const block_rows *r);

/* The product of a row-parallel projection, out (N,OUT) = inp @ w: the rank's partial sum, the
 * bias and the residual to add after the group's sum (proj_finish). At tp 1 they are fused into
 * the product: out = res + b + inp @ w (inp holding all the input rows). */
static void proj_product(const gpt_model *m, float *out, const float *inp, const float *w,
                         const float *b, const float *res, int N, int IN, int OUT) {
    if (m->tp_size == 1) matmul_residual_forward(out, inp, w, b, res, N, IN, OUT);
    else matmul_forward(out, inp, w, NULL, N, IN, OUT);
}

static void proj_finish(const gpt_model *m, float *out, const float *res, const float *b, int N, int OUT) {
    if (m->tp_size > 1) bias_residual_add(out, res, b, N, OUT);
}

/* What communication-free recomputation redoes: ln_1, c_attn, attention from x ... */
static void block_f_attn(const block_rows *r) {
    const gpt_block_tensors *w = r->w;
    block_dims d = block_dims_of(r->m);
    int C = d.C, Cl = d.Cl, N = r->B * r->T;
    layernorm_forward(r->a.ln1, r->a.ln1m, r->a.ln1r, r->a.x, w->ln1w, w->ln1b, N, C);
    matmul_forward(r->a.qkv, r->a.ln1, w->qkvw, w->qkvb, N, C, 3 * Cl);
    attention_forward(r->a.atty, r->a.att, r->a.qkv, r->B, r->T, Cl, d.NHl);
}

/* ... and ln_2, c_fc, GELU from res2. */
static void block_f_mlp(const block_rows *r) {
    const gpt_block_tensors *w = r->w;
    int C = r->m->cfg.n_embd, Cl = block_dims_of(r->m).Cl, N = r->B * r->T;
    layernorm_forward(r->a.ln2, r->a.ln2m, r->a.ln2r, r->a.res2, w->ln2w, w->ln2b, N, C);
    matmul_forward(r->a.fch, r->a.ln2, w->fcw, w->fcb, N, C, 4 * Cl);
    gelu_forward(r->a.fchg, r->a.fch, N * 4 * Cl);
}

/* F stage 0: up to attn.c_proj's product (into res2, summed next). */
static void block_f0(const block_rows *r) {
    int C = r->m->cfg.n_embd, Cl = block_dims_of(r->m).Cl, N = r->B * r->T;
    block_f_attn(r);
    proj_product(r->m, r->a.res2, r->a.atty, r->w->attprojw, r->w->attprojb, r->a.x, N, Cl, C);
}

/* F stage 1: res2 finished, then up to mlp.c_proj's product (into out, summed next). */
static void block_f1(const block_rows *r) {
    int C = r->m->cfg.n_embd, Cl = block_dims_of(r->m).Cl, N = r->B * r->T;
    proj_finish(r->m, r->a.res2, r->a.x, r->w->attprojb, N, C);
    block_f_mlp(r);
    proj_product(r->m, r->out, r->a.fchg, r->w->fcprojw, r->w->fcprojb, r->a.res2, N, 4 * Cl, C);
}

/* F stage 2: the output finished. */
static void block_f2(const block_rows *r) {
    proj_finish(r->m, r->out, r->a.res2, r->w->fcprojb, r->B * r->T, r->m->cfg.n_embd);
}

/* B stage 0: from dout to c_fc's input gradient (dln2, summed next). */
static void block_b0(const block_rows *r) {
    const gpt_block_tensors *w = r->w;
    int C = r->m->cfg.n_embd, Cl = block_dims_of(r->m).Cl, N = r->B * r->T;
    memcpy(r->a.dres3, r->dout, (size_t)N * C * sizeof *r->dout);
    matmul_backward_input(r->s, r->a.dres3, w->fcprojw, N, 4 * Cl, C);   /* at the GELU output */
    gelu_backward_input(r->a.dfch, r->s, r->a.fch, N * 4 * Cl);
    matmul_backward_input(r->a.dln2, r->a.dfch, w->fcw, N, C, 4 * Cl);
}

/* B stage 1: ln_2's backward, then to c_attn's input gradient (dln1, summed next). */
static void block_b1(const block_rows *r) {
    const gpt_block_tensors *w = r->w;
    block_dims d = block_dims_of(r->m);
    int C = d.C, Cl = d.Cl, N = r->B * r->T;
    const block_act *a = &r->a;
    layernorm_residual_backward_input(a->dres2, a->dln2, a->dres3, a->res2, w->ln2w, a->ln2m, a->ln2r, N, C);
    matmul_backward_input(r->s, a->dres2, w->attprojw, N, Cl, C);      /* at the attention output */
    attention_backward_input(a->dqkv, r->satt, r->s, a->qkv, a->att, r->B, r->T, Cl, d.NHl);
    matmul_backward_input(a->dln1, a->dqkv, w->qkvw, N, C, 3 * Cl);
}

/* B stage 2: ln_1's backward into dx. */
static void block_b2(const block_rows *r) {
    const block_act *a = &r->a;
    layernorm_residual_backward_input(r->out, a->dln1, a->dres2, a->x, r->w->ln1w, a->ln1m, a->ln1r,
                                      r->B * r->T, r->m->cfg.n_embd);
}

static const block_stage block_f[3] = { block_f0, block_f1, block_f2 };
static const block_stage block_b[3] = { block_b0, block_b1, block_b2 };
static const char *const block_f_sums = "a row-parallel projection";
static const char *const block_b_sums = "a column-parallel input gradient";

/* How many parts F, B and recompute split a microbatch of B sequences into: two with overlap
 * on a sharded block (the first B/2 sequences, then the rest), else one. */
static int block_parts(const gpt_model *m, int B) {
    return m->tp_overlap && m->tp_size > 1 && B >= 2 ? 2 : 1;
}

/* The rows of each part (r[0..block_parts)) of layer l's F (dout NULL) or B on a microbatch. */
static int block_rows_init(block_rows *r, const gpt_model *m, int l, float *act, float *scratch,
                           float *out, const float *dout, int B, int T) {
    int parts = block_parts(m, B), C = m->cfg.n_embd, Cl = block_dims_of(m).Cl;
    size_t N = (size_t)B * T;
    for (int i = 0, b0 = 0; i < parts; i++) {
        int nb = parts == 1 ? B : i == 0 ? B / 2 : B - B / 2;
        size_t n0 = (size_t)b0 * T;
        block_rows *p = &r[i];
        *p = (block_rows){ .m = m, .w = &m->w.h[l - 1], .a = block_act_rows(m, act, B, T, n0),
                           .out = out ? out + n0 * C : NULL, .dout = dout ? dout + n0 * C : NULL,
                           .s = scratch ? scratch + n0 * 4 * Cl : NULL,
                           .satt = scratch ? scratch + N * 4 * Cl : NULL, .B = nb, .T = T };
        p->sum[0] = dout ? p->a.dln2 : p->a.res2;
        p->sum[1] = dout ? p->a.dln1 : p->out;
        b0 += nb;
    }
    return parts;
}

/* The three stages on the whole microbatch, the group's blocking sum between them. */
static int block_run(const block_stage st[3], const block_rows *r, const char *what) {
    size_t n = (size_t)r->B * r->T * r->m->cfg.n_embd;
    for (int k = 0; k < 3; k++) {
        st[k](r);
        if (k < 2 && tp_allreduce(r->m, r->sum[k], n, what) < 0) return -1;
    }
    return 0;
}

/* The three stages on two halves, ping-pong (Oases): stage k of half 0, its sum started, stage
 * k of half 1 while it is in flight, its sum started; then wait for half 0's sum before its
 * stage k + 1 (half 1's sum in flight meanwhile), and so on. A failed start or wait waits for
 * whatever is still in flight (the buffers are the caller's) and returns -1. */
static int block_pingpong(const block_stage st[3], const block_rows r[2], const char *what) {
    const gpt_model *m = r[0].m;
    void *req[2][2] = { { NULL } };
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 2; i++) {
            size_t n = (size_t)r[i].B * r[i].T * m->cfg.n_embd;
            if (k > 0 && tp_wait(m, &req[i][k - 1], what) < 0) goto drain;
            st[k](&r[i]);
            if (k < 2 && tp_start(m, r[i].sum[k], n, &req[i][k], what) < 0) goto drain;
        }
    return 0;
drain:
    tp_drain(m, &req[0][0], 4);
    return -1;
}

static int block_forward(const gpt_model *m, int l, const gpt_tied *tied, float *act,
                         float *scratch, float *out, const float *x, const int *tokens, int B, int T) {
    block_rows r[2];
    int parts = block_rows_init(r, m, l, act, NULL, out, NULL, B, T);
    memcpy(block_act_view(m, act, B, T).x, x, (size_t)B * T * m->cfg.n_embd * sizeof *x);
    return parts == 2 ? block_pingpong(block_f, r, block_f_sums) : block_run(block_f, &r[0], block_f_sums);
}

/* scratch: (N,4C/tp) for the widest intermediate, then the attention scratch. */
static int block_backward_input(const gpt_model *m, int l, const gpt_tied *tied, float *act,
                                float *scratch, float *dx, const float *dout, int B, int T) {
    block_rows r[2];
    int parts = block_rows_init(r, m, l, act, scratch, dx, dout, B, T);
    return parts == 2 ? block_pingpong(block_b, r, block_b_sums) : block_run(block_b, &r[0], block_b_sums);
}

/* The F part after x and res2, from them, in the parts F ran in (so bitwise what F wrote). */
static int block_recompute(const gpt_model *m, int l, const gpt_tied *tied, float *act,
                           float *scratch, int B, int T) {
    block_rows r[2];
    int parts = block_rows_init(r, m, l, act, NULL, NULL, NULL, B, T);
    for (int i = 0; i < parts; i++) {
        block_f_attn(&r[i]);
        block_f_mlp(&r[i]);
    }
    return 0;
}

static int block_backward_weight(const gpt_model *m, int l, const gpt_tied *tied, const float *act,
                                 float *scratch, int B, int T) {
    const gpt_block_tensors *g = &m->g.h[l - 1];
    block_dims d = block_dims_of(m);
    int C = d.C, Cl = d.Cl, N = B * T;
    block_act a = block_act_view(m, (float *)act, B, T);   /* read only below */
    matmul_backward_weight(g->fcprojw, g->fcprojb, a.dres3, a.fchg, N, 4 * Cl, C);
    matmul_backward_weight(g->fcw, g->fcb, a.dfch, a.ln2, N, C, 4 * Cl);
    layernorm_backward_weight(g->ln2w, g->ln2b, a.dln2, a.res2, a.ln2m, a.ln2r, N, C);
    matmul_backward_weight(g->attprojw, g->attprojb, a.dres2, a.atty, N, Cl, C);
    matmul_backward_weight(g->qkvw, g->qkvb, a.dqkv, a.ln1, N, C, 3 * Cl);
    layernorm_backward_weight(g->ln1w, g->ln1b, a.dln1, a.x, a.ln1m, a.ln1r, N, C);
    return 0;
}

/* ---- final layernorm + tied head ----------------------------------------------------------
 * Over tp ranks: each rank's logits are its vocabulary shard's columns, and the cross-entropy
 * is Megatron-LM's vocabulary-parallel one (head_tp_forward). B sums the input gradient. */

/* Sharded cross-entropy of the logits in a.probs: the group's maximum per token (each rank
 * writes its own into its slot of a zeroed (N,tp) buffer, the group sums it: a sum is the only
 * collective), then the sums of exponentials and the target logits, summed together. Returns
 * the mean loss through *loss, the same on every rank. scratch: N*(tp + 3). */
static int head_tp_crossentropy(const gpt_model *m, head_act *a, float *scratch, int N, float *loss) {
    int tp = m->tp_size, V = vocab_local(m), v0, nv;
    float *slots = scratch, *mx = slots + (size_t)N * tp, *sums = mx + N, *tl = sums + N;
    vocab_range(m, &v0, &nv);
    crossentropy_shard_stats(mx, tl, a->probs, a->targets, v0, nv, N, V);
    memset(slots, 0, (size_t)N * tp * sizeof *slots);
    for (int n = 0; n < N; n++) slots[(size_t)n * tp + m->tp_rank] = mx[n];
    if (tp_allreduce(m, slots, (size_t)N * tp, "the per-token logit maxima") < 0) return -1;
    for (int n = 0; n < N; n++) {
        const float *s = slots + (size_t)n * tp;
        mx[n] = s[0];
        for (int r = 1; r < tp; r++) mx[n] = s[r] > mx[n] ? s[r] : mx[n];
    }
    crossentropy_shard_exp(a->probs, sums, a->probs, mx, nv, N, V);
    if (tp_allreduce(m, sums, 2 * (size_t)N, "the sums of exponentials and target logits") < 0)
        return -1;   /* sums and tl are adjacent: one call */
    *loss = crossentropy_shard_finish(a->probs, mx, sums, tl, N, V);
    return 0;
}

/* With targets: out[0] = mean loss, probs kept. Without: out (N,V) = logits (tp 1 only). */
static int head_forward(const gpt_model *m, int l, const gpt_tied *tied, float *act,
                        float *scratch, float *out, const float *x, const int *targets, int B, int T) {
    int C = m->cfg.n_embd, V = vocab_local(m), N = B * T;
    if (!targets && m->tp_size > 1)
        return pt_seterr("a tensor-parallel head (tp %d) has only its vocabulary shard's logits: "
                         "it needs targets (logits need a model of tp 1)", m->tp_size);
    if (targets && check_tokens(m, targets, B, T, "target") < 0) return -1;
    head_act a = head_act_view(m, act, B, T);
    memcpy(a.x, x, (size_t)N * C * sizeof *x);
    layernorm_forward(a.lnf, a.lnfm, a.lnfr, a.x, m->w.lnfw, m->w.lnfb, N, C);
    if (!targets) {
        lmhead_forward(out, a.lnf, tied_wte(m, tied), N, C, V);
        return 0;
    }
    memcpy(a.targets, targets, (size_t)N * sizeof *targets);
    lmhead_forward(a.probs, a.lnf, tied_wte(m, tied), N, C, V);
    if (m->tp_size > 1) return head_tp_crossentropy(m, &a, scratch, N, out);
    out[0] = crossentropy_forward(a.probs, a.probs, targets, N, V);
    return 0;
}

static int head_backward_input(const gpt_model *m, int l, const gpt_tied *tied, float *act,
                               float *scratch, float *dx, const float *dloss, int B, int T) {
    int C = m->cfg.n_embd, V = vocab_local(m), N = B * T, v0, nv;
    head_act a = head_act_view(m, act, B, T);
    if (m->tp_size == 1) {
        crossentropy_backward_input(a.probs, a.probs, a.targets, dloss ? *dloss : 1.0f, N, V);
    } else {
        vocab_range(m, &v0, &nv);
        crossentropy_shard_backward_input(a.probs, a.probs, a.targets, v0, nv,
                                          dloss ? *dloss : 1.0f, N, V);
    }
    lmhead_backward_input(a.dlnf, a.probs, tied_wte(m, tied), N, C, V);
    if (tp_allreduce(m, a.dlnf, (size_t)N * C, "the head's input gradient") < 0) return -1;
    layernorm_backward_input(dx, a.dlnf, a.x, m->w.lnfw, a.lnfm, a.lnfr, N, C);
    return 0;
}

static int head_backward_weight(const gpt_model *m, int l, const gpt_tied *tied, const float *act,
                                float *scratch, int B, int T) {
    int C = m->cfg.n_embd, V = vocab_local(m), N = B * T;
    head_act a = head_act_view(m, (float *)act, B, T);   /* read only below */
    lmhead_backward_weight(tied_dwte(m, tied), a.probs, a.lnf, N, C, V);
    layernorm_backward_weight(m->g.lnfw, m->g.lnfb, a.dlnf, a.x, a.lnfm, a.lnfr, N, C);
    return 0;
}

/* ---- analytic costs ------------------------------------------------------------------------
 * FLOPs: matmuls cost 2 per multiply-add; B and W each repeat the forward's matmul FLOPs (dX = dY W^T,
 * dW = X^T dY); causal attention (QK^T and AV, half the T x T square) is 2*N*T*C forward and
 * twice that backward, all of it in B (it has no weights). Element-wise work is left out.
 * Over tp TP ranks (gpt_init_layers_tp) each figure is one rank's: the split matmuls, heads and
 * vocabulary rows divide by tp, the replicated tensors and the (N,C) streams do not. */
static void block_cost(const gpt_config *g, int B, int T, int tp, gpt_layer_cost *o) {
    *o = (gpt_layer_cost){ 0 };
    double N = (double)B * T, C = g->n_embd, t = tp, mm = 12.0 * C * C / t, att = 2.0 * N * T * C / t;
    double params = mm + 7.0 * C / t + 6.0 * C;   /* split: 12C^2 + 7C; replicated: ln 4C, 2 biases */
    o->flops[0] = 2.0 * mm * N + att;
    o->flops[1] = 2.0 * mm * N + 2.0 * att;
    o->flops[2] = 2.0 * mm * N;
    /* the act layout above: 8 (N,C) streams, 19 (N,C) of split widths (qkv, atty, fch, fchg and
     * their gradients), 4 (N) stats, (B,NH/tp,T,T) probabilities */
    o->act_bytes = 4.0 * (8.0 * N * C + 19.0 * N * C / t + 4.0 * N + N * g->n_head / t * T);
    o->input_bytes = 4.0 * N * C;
    o->keep_bytes = 4.0 * 2.0 * N * C;                  /* x and res2 */
    o->recompute_flops = 2.0 * 7.0 * C * C / t * N + att;   /* F without the two projections */
    o->param_bytes = o->grad_bytes = 4.0 * params;
    o->optim_bytes = 8.0 * params;
    if (tp > 1) {   /* after each row-parallel projection (F) and column-parallel input grad (B) */
        o->tp_bytes[0] = o->tp_bytes[1] = 2.0 * 4.0 * N * C;
        o->tp_collectives[0] = o->tp_collectives[1] = 2;
    }
}

/* wte rows one TP rank holds: V padded up to a multiple of tp, divided. */
static double vocab_shard(const gpt_config *g, int tp) {
    return (double)((g->vocab_size + tp - 1) / tp);
}

/* Head: ln_f, logits against the tied wte (V,C), softmax cross-entropy (about 5 FLOPs a logit).
 * The stage stores a copy of wte and its gradient; AdamW state lives with the embedding. Over tp
 * ranks: a vocabulary shard of the logits, and the cross-entropy's per-token numbers exchanged
 * (every rank's maximum, then the sums of exponentials and the target logits). */
static void head_cost(const gpt_config *g, int B, int T, int tp, gpt_layer_cost *o) {
    *o = (gpt_layer_cost){ 0 };
    double N = (double)B * T, C = g->n_embd, V = vocab_shard(g, tp), mm = 2.0 * N * C * V;
    o->flops[0] = mm + 5.0 * N * V;
    o->flops[1] = mm;
    o->flops[2] = mm;
    o->act_bytes = 4.0 * (3.0 * N * C + 3.0 * N + N * V);
    o->input_bytes = 4.0 * N * C;
    o->keep_bytes = 4.0 * (2.0 * N * C + 3.0 * N + N * V);   /* its F part: not recomputed */
    o->param_bytes = o->grad_bytes = 4.0 * (V * C + 2.0 * C);
    o->optim_bytes = 8.0 * 2.0 * C;
    if (tp > 1) {
        o->tp_bytes[0] = 4.0 * (N * tp + 2.0 * N);
        o->tp_collectives[0] = 2;
        o->tp_bytes[1] = 4.0 * N * C;
        o->tp_collectives[1] = 1;
    }
}

/* Embedding: a gather forward, a scatter-add for W; memory-bound, counted as one FLOP a value.
 * Over tp ranks: each gathers the rows of its vocabulary shard, and the (N,C) sum is reduced. */
static void embed_cost(const gpt_config *g, int B, int T, int tp, gpt_layer_cost *o) {
    *o = (gpt_layer_cost){ 0 };
    double N = (double)B * T, C = g->n_embd;
    double params = vocab_shard(g, tp) * C + (double)g->n_positions * C;
    o->flops[0] = o->flops[1] = o->flops[2] = N * C;
    o->act_bytes = 4.0 * (N + N * C);
    o->input_bytes = o->keep_bytes = 4.0 * N;   /* the tokens */
    o->param_bytes = o->grad_bytes = 4.0 * params;
    o->optim_bytes = 8.0 * params;
    if (tp > 1) {
        o->tp_bytes[0] = 4.0 * N * C;
        o->tp_collectives[0] = 1;
    }
}

/* ---- the table ---------------------------------------------------------------------------- */
static const gpt_layer_ops layer_kinds[GPT_N_LAYER_KINDS] = {
    [GPT_LAYER_EMBED] = { "embedding", GPT_IO_TOKENS, embed_act_floats, embed_forward,
                          embed_backward_input, embed_backward_weight, embed_cost,
                          embed_keep_floats, keep_all_recompute },
    [GPT_LAYER_BLOCK] = { "block", 0, block_act_floats, block_forward, block_backward_input,
                          block_backward_weight, block_cost, block_keep_floats, block_recompute },
    [GPT_LAYER_HEAD]  = { "head", GPT_IO_TARGETS, head_act_floats, head_forward,
                          head_backward_input, head_backward_weight, head_cost,
                          head_keep_floats, keep_all_recompute },
};

const gpt_layer_ops *gpt_kind_ops(gpt_layer_kind kind) { return &layer_kinds[kind]; }

const gpt_layer_ops *gpt_layer_ops_of(const gpt_model *m, int layer) {
    return &layer_kinds[gpt_layer_kind_of(m, layer)];
}

/* ---- dispatch ----------------------------------------------------------------------------- */
int gpt_layer_forward(const gpt_model *m, int layer, const gpt_tied *tied, float *act,
                      float *scratch, float *out, const float *x, const int *tokens, int B, int T) {
    if (T < 1 || T > m->cfg.n_positions || B < 1)
        return pt_seterr("layer %d: sequence length %d must be in [1, n_positions=%d] and batch %d >= 1",
                         layer, T, m->cfg.n_positions, B);
    if (gpt_layer_ops_of(m, layer)->forward(m, layer, tied, act, scratch, out, x, tokens, B, T) < 0)
        return pt_adderr("layer %d forward: ", layer);
    return 0;
}

int gpt_layer_backward_input(const gpt_model *m, int layer, const gpt_tied *tied, float *act,
                             float *scratch, float *dx, const float *dout, int B, int T) {
    if (gpt_layer_ops_of(m, layer)->backward_input(m, layer, tied, act, scratch, dx, dout, B, T) < 0)
        return pt_adderr("layer %d backward: ", layer);
    return 0;
}

int gpt_layer_backward_weight(const gpt_model *m, int layer, const gpt_tied *tied,
                              const float *act, float *scratch, int B, int T) {
    return gpt_layer_ops_of(m, layer)->backward_weight(m, layer, tied, act, scratch, B, T);
}

int gpt_layer_recompute(const gpt_model *m, int layer, const gpt_tied *tied, float *act,
                        float *scratch, int B, int T) {
    if (T < 1 || T > m->cfg.n_positions || B < 1)
        return pt_seterr("layer %d recompute: sequence length %d must be in [1, n_positions=%d] "
                         "and batch %d >= 1", layer, T, m->cfg.n_positions, B);
    return gpt_layer_ops_of(m, layer)->recompute(m, layer, tied, act, scratch, B, T);
}
