/* The layer kinds of GPT (embedding, transformer block, final layernorm + tied head) as rows of
 * one table: forward (F), backward-input (B) and backward-weight (W) on one microbatch over
 * caller-owned act storage laid out here, and the analytic cost of each. Not here: buffer
 * ownership, scheduling, the parameter table (gpt.c). */
#include "model/gpt.h"
#include "nn/nn.h"
#include "util/pt.h"
#include <string.h>

/* Views into one block's act storage; F part first (saved activations), then the B part
 * (gradients at each matmul / layernorm output that W needs). N = B*T. */
typedef struct {
    float *x;                   /* (N,C) block input */
    float *ln1, *ln1m, *ln1r;   /* (N,C), (N), (N) */
    float *qkv;                 /* (N,3C/tp) */
    float *atty;                /* (N,C/tp) attention output, heads concatenated */
    float *att;                 /* (B,NH/tp,T,T) softmax probabilities */
    float *res2;                /* (N,C) x + attention projection */
    float *ln2, *ln2m, *ln2r;   /* (N,C), (N), (N) */
    float *fch, *fchg;          /* (N,4C/tp) c_fc output, after GELU */
    /* written by B, read by W */
    float *dres3;               /* (N,C) gradient at the block output (= at mlp.c_proj output) */
    float *dfch;                /* (N,4C/tp) at mlp.c_fc output */
    float *dln2;                /* (N,C) at ln_2 output */
    float *dres2;               /* (N,C) at res2 (= at attn.c_proj output) */
    float *dqkv;                /* (N,3C/tp) at attn.c_attn output */
    float *dln1;                /* (N,C) at ln_1 output */
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

/* Carves base into consecutive regions: returns base + *off (NULL when base is NULL, which
 * measures sizes only) and advances *off by n floats. */
static float *take(float *base, size_t *off, size_t n) {
    float *r = base ? base + *off : NULL;
    *off += n;
    return r;
}

/* The per-rank widths of a block (gpt_init_layers_tp): the whole ones at tp 1. */
typedef struct { int C, Cl, NHl; } block_dims;   /* channels; the rank's channels and heads */

static block_dims block_dims_of(const gpt_model *m) {
    return (block_dims){ m->cfg.n_embd, m->cfg.n_embd / m->tp_size, m->cfg.n_head / m->tp_size };
}

static block_act block_act_view(const gpt_model *m, float *a, int B, int T) {
    block_dims d = block_dims_of(m);
    size_t C = (size_t)d.C, Cl = (size_t)d.Cl, N = (size_t)B * T, NH = (size_t)d.NHl;
    block_act v;
    size_t o = 0;
    v.x = take(a, &o, N * C);
    v.ln1 = take(a, &o, N * C); v.ln1m = take(a, &o, N); v.ln1r = take(a, &o, N);
    v.qkv = take(a, &o, N * 3 * Cl);
    v.atty = take(a, &o, N * Cl);
    v.att = take(a, &o, (size_t)B * NH * T * T);
    v.res2 = take(a, &o, N * C);
    v.ln2 = take(a, &o, N * C); v.ln2m = take(a, &o, N); v.ln2r = take(a, &o, N);
    v.fch = take(a, &o, N * 4 * Cl); v.fchg = take(a, &o, N * 4 * Cl);
    v.saved = o;
    v.dres3 = take(a, &o, N * C); v.dfch = take(a, &o, N * 4 * Cl); v.dln2 = take(a, &o, N * C);
    v.dres2 = take(a, &o, N * C); v.dqkv = take(a, &o, N * 3 * Cl); v.dln1 = take(a, &o, N * C);
    v.size = o;
    return v;
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
 * input gradients over the group before each layernorm's backward. W is local. */

/* out (N,OUT) = res + b + inp @ w, inp holding IN of the projection's input rows (all of them at
 * tp 1). */
static int proj_residual_forward(const gpt_model *m, float *out, const float *inp, const float *w,
                                 const float *b, const float *res, int N, int IN, int OUT) {
    if (m->tp_size == 1) {
        matmul_residual_forward(out, inp, w, b, res, N, IN, OUT);
        return 0;
    }
    matmul_forward(out, inp, w, NULL, N, IN, OUT);
    if (tp_allreduce(m, out, (size_t)N * OUT, "a row-parallel projection") < 0) return -1;
    bias_residual_add(out, res, b, N, OUT);
    return 0;
}

/* dinp (N,IN) = dout @ w^T for a column-parallel matmul of OUT of the outputs: the group's sum. */
static int colpar_backward_input(const gpt_model *m, float *dinp, const float *dout,
                                 const float *w, int N, int IN, int OUT) {
    matmul_backward_input(dinp, dout, w, N, IN, OUT);
    return tp_allreduce(m, dinp, (size_t)N * IN, "a column-parallel input gradient");
}

static int block_forward(const gpt_model *m, int l, const gpt_tied *tied, float *act,
                         float *scratch, float *out, const float *x, const int *tokens, int B, int T) {
    const gpt_block_tensors *w = &m->w.h[l - 1];
    block_dims d = block_dims_of(m);
    int C = d.C, Cl = d.Cl, N = B * T;
    block_act a = block_act_view(m, act, B, T);
    memcpy(a.x, x, (size_t)N * C * sizeof *x);
    layernorm_forward(a.ln1, a.ln1m, a.ln1r, a.x, w->ln1w, w->ln1b, N, C);
    matmul_forward(a.qkv, a.ln1, w->qkvw, w->qkvb, N, C, 3 * Cl);
    attention_forward(a.atty, a.att, a.qkv, B, T, Cl, d.NHl);
    if (proj_residual_forward(m, a.res2, a.atty, w->attprojw, w->attprojb, a.x, N, Cl, C) < 0)
        return -1;
    layernorm_forward(a.ln2, a.ln2m, a.ln2r, a.res2, w->ln2w, w->ln2b, N, C);
    matmul_forward(a.fch, a.ln2, w->fcw, w->fcb, N, C, 4 * Cl);
    gelu_forward(a.fchg, a.fch, N * 4 * Cl);
    return proj_residual_forward(m, out, a.fchg, w->fcprojw, w->fcprojb, a.res2, N, 4 * Cl, C);
}

/* scratch: (N,4C/tp) for the widest intermediate, then the attention scratch. */
static int block_backward_input(const gpt_model *m, int l, const gpt_tied *tied, float *act,
                                float *scratch, float *dx, const float *dout, int B, int T) {
    const gpt_block_tensors *w = &m->w.h[l - 1];
    block_dims d = block_dims_of(m);
    int C = d.C, Cl = d.Cl, N = B * T;
    block_act a = block_act_view(m, act, B, T);
    float *s = scratch, *satt = scratch + (size_t)N * 4 * Cl;
    memcpy(a.dres3, dout, (size_t)N * C * sizeof *dout);
    matmul_backward_input(s, a.dres3, w->fcprojw, N, 4 * Cl, C);      /* at the GELU output */
    gelu_backward_input(a.dfch, s, a.fch, N * 4 * Cl);
    if (colpar_backward_input(m, a.dln2, a.dfch, w->fcw, N, C, 4 * Cl) < 0) return -1;
    layernorm_residual_backward_input(a.dres2, a.dln2, a.dres3, a.res2, w->ln2w, a.ln2m, a.ln2r, N, C);
    matmul_backward_input(s, a.dres2, w->attprojw, N, Cl, C);         /* at the attention output */
    attention_backward_input(a.dqkv, satt, s, a.qkv, a.att, B, T, Cl, d.NHl);
    if (colpar_backward_input(m, a.dln1, a.dqkv, w->qkvw, N, C, 3 * Cl) < 0) return -1;
    layernorm_residual_backward_input(dx, a.dln1, a.dres2, a.x, w->ln1w, a.ln1m, a.ln1r, N, C);
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
    o->input_bytes = 4.0 * N;
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
                          embed_backward_input, embed_backward_weight, embed_cost },
    [GPT_LAYER_BLOCK] = { "block", 0, block_act_floats, block_forward, block_backward_input,
                          block_backward_weight, block_cost },
    [GPT_LAYER_HEAD]  = { "head", GPT_IO_TARGETS, head_act_floats, head_forward,
                          head_backward_input, head_backward_weight, head_cost },
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
