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
    float *qkv;                 /* (N,3C) */
    float *atty;                /* (N,C) attention output, heads concatenated */
    float *att;                 /* (B,NH,T,T) softmax probabilities */
    float *res2;                /* (N,C) x + attention projection */
    float *ln2, *ln2m, *ln2r;   /* (N,C), (N), (N) */
    float *fch, *fchg;          /* (N,4C) c_fc output, after GELU */
    /* written by B, read by W */
    float *dres3;               /* (N,C) gradient at the block output (= at mlp.c_proj output) */
    float *dfch;                /* (N,4C) at mlp.c_fc output */
    float *dln2;                /* (N,C) at ln_2 output */
    float *dres2;               /* (N,C) at res2 (= at attn.c_proj output) */
    float *dqkv;                /* (N,3C) at attn.c_attn output */
    float *dln1;                /* (N,C) at ln_1 output */
    size_t saved;               /* floats of the F part (the start) */
    size_t size;                /* floats in all */
} block_act;

/* Head act: F part, then B part. */
typedef struct {
    float *x;                   /* (N,C) head input */
    float *lnf, *lnfm, *lnfr;   /* (N,C), (N), (N) */
    int *targets;               /* (N) stored as int in float-sized slots */
    float *probs;               /* (N,V) softmax after F; dlogits after B */
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

static block_act block_act_view(const gpt_model *m, float *a, int B, int T) {
    size_t C = (size_t)m->cfg.n_embd, N = (size_t)B * T, NH = (size_t)m->cfg.n_head;
    block_act v;
    size_t o = 0;
    v.x = take(a, &o, N * C);
    v.ln1 = take(a, &o, N * C); v.ln1m = take(a, &o, N); v.ln1r = take(a, &o, N);
    v.qkv = take(a, &o, N * 3 * C);
    v.atty = take(a, &o, N * C);
    v.att = take(a, &o, (size_t)B * NH * T * T);
    v.res2 = take(a, &o, N * C);
    v.ln2 = take(a, &o, N * C); v.ln2m = take(a, &o, N); v.ln2r = take(a, &o, N);
    v.fch = take(a, &o, N * 4 * C); v.fchg = take(a, &o, N * 4 * C);
    v.saved = o;
    v.dres3 = take(a, &o, N * C); v.dfch = take(a, &o, N * 4 * C); v.dln2 = take(a, &o, N * C);
    v.dres2 = take(a, &o, N * C); v.dqkv = take(a, &o, N * 3 * C); v.dln1 = take(a, &o, N * C);
    v.size = o;
    return v;
}

static head_act head_act_view(const gpt_model *m, float *a, int B, int T) {
    size_t C = (size_t)m->cfg.n_embd, N = (size_t)B * T, V = (size_t)m->cfg.vocab_size;
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

size_t gpt_scratch_floats(const gpt_model *m, int B, int T) {
    return (size_t)B * T * 4 * m->cfg.n_embd + ATTENTION_SCRATCH_FLOATS(T);
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

/* ---- embedding ---------------------------------------------------------------------------- */
static int embed_forward(const gpt_model *m, int l, const gpt_tied *tied, float *act,
                         float *scratch, float *out, const float *x, const int *tokens, int B, int T) {
    if (check_tokens(m, tokens, B, T, "token") < 0) return -1;
    embed_act a = embed_act_view(m, act, B, T);
    memcpy(a.tokens, tokens, (size_t)B * T * sizeof *tokens);
    embedding_forward(out, tokens, m->w.wte, m->w.wpe, B, T, m->cfg.n_embd);
    return 0;
}

static int embed_backward_input(const gpt_model *m, int l, const gpt_tied *tied, float *act,
                                float *scratch, float *dx, const float *dout, int B, int T) {
    memcpy(embed_act_view(m, act, B, T).dout, dout, (size_t)B * T * m->cfg.n_embd * sizeof *dout);
    return 0;
}

static int embed_backward_weight(const gpt_model *m, int l, const gpt_tied *tied, const float *act,
                                 float *scratch, int B, int T) {
    embed_act a = embed_act_view(m, (float *)act, B, T);   /* read only */
    embedding_backward_weight(m->g.wte, m->g.wpe, a.dout, a.tokens, B, T, m->cfg.n_embd);
    return 0;
}

/* ---- transformer block -------------------------------------------------------------------- */
static int block_forward(const gpt_model *m, int l, const gpt_tied *tied, float *act,
                         float *scratch, float *out, const float *x, const int *tokens, int B, int T) {
    const gpt_block_tensors *w = &m->w.h[l - 1];
    int C = m->cfg.n_embd, N = B * T;
    block_act a = block_act_view(m, act, B, T);
    memcpy(a.x, x, (size_t)N * C * sizeof *x);
    layernorm_forward(a.ln1, a.ln1m, a.ln1r, a.x, w->ln1w, w->ln1b, N, C);
    matmul_forward(a.qkv, a.ln1, w->qkvw, w->qkvb, N, C, 3 * C);
    attention_forward(a.atty, a.att, a.qkv, B, T, C, m->cfg.n_head);
    matmul_residual_forward(a.res2, a.atty, w->attprojw, w->attprojb, a.x, N, C, C);
    layernorm_forward(a.ln2, a.ln2m, a.ln2r, a.res2, w->ln2w, w->ln2b, N, C);
    matmul_forward(a.fch, a.ln2, w->fcw, w->fcb, N, C, 4 * C);
    gelu_forward(a.fchg, a.fch, N * 4 * C);
    matmul_residual_forward(out, a.fchg, w->fcprojw, w->fcprojb, a.res2, N, 4 * C, C);
    return 0;
}

/* scratch: (N,4C) for the widest intermediate, then the attention scratch. */
static int block_backward_input(const gpt_model *m, int l, const gpt_tied *tied, float *act,
                                float *scratch, float *dx, const float *dout, int B, int T) {
    const gpt_block_tensors *w = &m->w.h[l - 1];
    int C = m->cfg.n_embd, N = B * T;
    block_act a = block_act_view(m, act, B, T);
    float *s = scratch, *satt = scratch + (size_t)N * 4 * C;
    memcpy(a.dres3, dout, (size_t)N * C * sizeof *dout);
    matmul_backward_input(s, a.dres3, w->fcprojw, N, 4 * C, C);       /* at the GELU output */
    gelu_backward_input(a.dfch, s, a.fch, N * 4 * C);
    matmul_backward_input(a.dln2, a.dfch, w->fcw, N, C, 4 * C);
    layernorm_residual_backward_input(a.dres2, a.dln2, a.dres3, a.res2, w->ln2w, a.ln2m, a.ln2r, N, C);
    matmul_backward_input(s, a.dres2, w->attprojw, N, C, C);          /* at the attention output */
    attention_backward_input(a.dqkv, satt, s, a.qkv, a.att, B, T, C, m->cfg.n_head);
    matmul_backward_input(a.dln1, a.dqkv, w->qkvw, N, C, 3 * C);
    layernorm_residual_backward_input(dx, a.dln1, a.dres2, a.x, w->ln1w, a.ln1m, a.ln1r, N, C);
    return 0;
}

static int block_backward_weight(const gpt_model *m, int l, const gpt_tied *tied, const float *act,
                                 float *scratch, int B, int T) {
    const gpt_block_tensors *g = &m->g.h[l - 1];
    int C = m->cfg.n_embd, N = B * T;
    block_act a = block_act_view(m, (float *)act, B, T);   /* read only below */
    matmul_backward_weight(g->fcprojw, g->fcprojb, a.dres3, a.fchg, N, 4 * C, C);
    matmul_backward_weight(g->fcw, g->fcb, a.dfch, a.ln2, N, C, 4 * C);
    layernorm_backward_weight(g->ln2w, g->ln2b, a.dln2, a.res2, a.ln2m, a.ln2r, N, C);
    matmul_backward_weight(g->attprojw, g->attprojb, a.dres2, a.atty, N, C, C);
    matmul_backward_weight(g->qkvw, g->qkvb, a.dqkv, a.ln1, N, C, 3 * C);
    layernorm_backward_weight(g->ln1w, g->ln1b, a.dln1, a.x, a.ln1m, a.ln1r, N, C);
    return 0;
}

/* ---- final layernorm + tied head ---------------------------------------------------------- */
/* With targets: out[0] = mean loss, probs kept. Without: out (N,V) = logits. */
static int head_forward(const gpt_model *m, int l, const gpt_tied *tied, float *act,
                        float *scratch, float *out, const float *x, const int *targets, int B, int T) {
    int C = m->cfg.n_embd, V = m->cfg.vocab_size, N = B * T;
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
    out[0] = crossentropy_forward(a.probs, a.probs, targets, N, V);
    return 0;
}

static int head_backward_input(const gpt_model *m, int l, const gpt_tied *tied, float *act,
                               float *scratch, float *dx, const float *dloss, int B, int T) {
    int C = m->cfg.n_embd, V = m->cfg.vocab_size, N = B * T;
    head_act a = head_act_view(m, act, B, T);
    crossentropy_backward_input(a.probs, a.probs, a.targets, dloss ? *dloss : 1.0f, N, V);
    lmhead_backward_input(a.dlnf, a.probs, tied_wte(m, tied), N, C, V);
    layernorm_backward_input(dx, a.dlnf, a.x, m->w.lnfw, a.lnfm, a.lnfr, N, C);
    return 0;
}

static int head_backward_weight(const gpt_model *m, int l, const gpt_tied *tied, const float *act,
                                float *scratch, int B, int T) {
    int C = m->cfg.n_embd, V = m->cfg.vocab_size, N = B * T;
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
    return gpt_layer_ops_of(m, layer)->backward_input(m, layer, tied, act, scratch, dx, dout, B, T);
}

int gpt_layer_backward_weight(const gpt_model *m, int layer, const gpt_tied *tied,
                              const float *act, float *scratch, int B, int T) {
    return gpt_layer_ops_of(m, layer)->backward_weight(m, layer, tied, act, scratch, B, T);
}
