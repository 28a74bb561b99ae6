/* The layer kinds of GPT (embedding, transformer block, final layernorm + tied head) as rows of
 * one table: forward (F), backward-input (B) and backward-weight (W) on one microbatch over
 * caller-owned act storage laid out here, and the analytic cost of each. Not here: buffer
 * ownership, scheduling, the parameter table (gpt.c). */
#include "model/gpt.h"
#include "model/gpt_act16.h"
#include "nn/nn.h"
#include "util/pt.h"
#include <stdio.h>
#include <string.h>

/* Views into one block's act storage; F part first (saved activations), then the B part
 * (gradients at each matmul / layernorm output that W needs). N = B*T; Ns the rows of the stream
 * the rank holds (N, or N/tp under sequence parallelism: gpt_stream_rows), whose regions are
 * the eight (N,C) ones (x, res2, ln1, ln2 and the gradients at the block output, res2, ln2 and
 * ln1) and the layer norms' statistics; the regions of N rows are the split widths' (qkv, atty,
 * att, fch, fchg and their gradients, already divided by tp). Under sp a matmul that needs every
 * row of ln1, ln2, dres3 or dres2 reads them all-gathered into the scratch (F, B and recompute
 * gather them; B computes the matmuls' weight gradients then: block_b_sp), so every region of
 * a rank's act is 1/tp of the act at tp 1. x and res2 come first: they are what communication-free recomputation
 * keeps (gpt_layer_keep_floats), and the rest of the F part is rebuilt from them (without a
 * collective, or under sp with F's two all-gathers: block_recompute). */
typedef struct {
    float *x;                   /* (Ns,C) block input */
    float *res2;                /* (Ns,C) x + attention projection (after the group's sum) */
    float *ln1, *ln1m, *ln1r;   /* (Ns,C), (Ns), (Ns) */
    float *qkv;                 /* (N,3C/tp) */
    float *atty;                /* (N,C/tp) attention output, heads concatenated */
    float *att;                 /* (B,NH/tp,T,T) softmax probabilities */
    float *ln2, *ln2m, *ln2r;   /* (Ns,C), (Ns), (Ns) */
    float *fch, *fchg;          /* (N,4C/tp) c_fc output, after GELU */
    /* written by B, read by W (under sp W reads only dln2, dln1: the rest is B's own) */
    float *dres3;               /* (Ns,C) gradient at the block output (= at mlp.c_proj output) */
    float *dfch;                /* (N,4C/tp) at mlp.c_fc output (under sp, after c_fc's weight
                                 * gradient, B's (N,C/tp) gradient at the attention output) */
    float *dln2;                /* (Ns,C) at ln_2 output */
    float *dres2;               /* (Ns,C) at res2 (= at attn.c_proj output) */
    float *dqkv;                /* (N,3C/tp) at attn.c_attn output */
    float *dln1;                /* (Ns,C) at ln_1 output */
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

/* Sequence parallelism (gpt_set_tp_sp): of N rows of the stream the rank holds sp_rows, from
 * row sp_first of a whole (N,C) buffer (all of them from 0 without sp). N divisible by tp
 * (gpt_layer_forward checks). */
static size_t sp_rows(const gpt_model *m, size_t N) { return m->tp_sp ? N / (size_t)m->tp_size : N; }
static size_t sp_first(const gpt_model *m, size_t N) { return m->tp_sp ? (size_t)m->tp_rank * sp_rows(m, N) : 0; }

/* Width of a block's B scratch rows: c_fc's (4C/tp), or under sp C, for the (N,C) buffer that
 * every all-gather fills and every reduce-scatter sums (B's (N,4C/tp) intermediates go into the
 * act's dfch there: block_b_sp). */
static size_t block_scratch_width(const gpt_model *m) {
    size_t w = 4 * (size_t)block_dims_of(m).Cl, C = (size_t)m->cfg.n_embd;
    return m->tp_sp ? C : w;
}

/* The views at row n0 (a token: sequence n0/T) of a microbatch of (B,T): every region is
 * (N, per-token width), att's too (a sequence's (NH/tp,T,T) is T rows of NH/tp*T), so the views
 * of a sub-batch of sequences are the same arithmetic at an offset. */
static block_act block_act_rows(const gpt_model *m, float *a, int B, int T, size_t n0) {
    block_dims d = block_dims_of(m);
    size_t C = (size_t)d.C, Cl = (size_t)d.Cl, N = (size_t)B * T, NH = (size_t)d.NHl;
    size_t Ns = sp_rows(m, N);   /* n0 is 0 under sp (no halves) */
    block_act v;
    size_t o = 0;
    v.x = take_rows(a, &o, Ns, C, n0);
    v.res2 = take_rows(a, &o, Ns, C, n0);
    v.keep = o;
    v.ln1 = take_rows(a, &o, Ns, C, n0);
    v.ln1m = take_rows(a, &o, Ns, 1, n0); v.ln1r = take_rows(a, &o, Ns, 1, n0);
    v.qkv = take_rows(a, &o, N, 3 * Cl, n0);
    v.atty = take_rows(a, &o, N, Cl, n0);
    v.att = take_rows(a, &o, N, NH * T, n0);
    v.ln2 = take_rows(a, &o, Ns, C, n0);
    v.ln2m = take_rows(a, &o, Ns, 1, n0); v.ln2r = take_rows(a, &o, Ns, 1, n0);
    v.fch = take_rows(a, &o, N, 4 * Cl, n0); v.fchg = take_rows(a, &o, N, 4 * Cl, n0);
    v.saved = o;
    v.dres3 = take_rows(a, &o, Ns, C, n0); v.dfch = take_rows(a, &o, N, 4 * Cl, n0);
    v.dln2 = take_rows(a, &o, Ns, C, n0); v.dres2 = take_rows(a, &o, Ns, C, n0);
    v.dqkv = take_rows(a, &o, N, 3 * Cl, n0); v.dln1 = take_rows(a, &o, Ns, C, n0);
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

/* The fp32 act's size and F part (a layer stores them so but at bf16: gpt_act16.h). */
static size_t act32_floats(const gpt_model *m, int layer, int B, int T) {
    return gpt_layer_ops_of(m, layer)->act_floats(m, B, T);
}

static size_t saved32_floats(const gpt_model *m, int layer, int B, int T) {
    switch (gpt_layer_kind_of(m, layer)) {
    case GPT_LAYER_EMBED: return embed_act_view(m, NULL, B, T).saved;
    case GPT_LAYER_BLOCK: return block_act_view(m, NULL, B, T).saved;
    default:              return head_act_view(m, NULL, B, T).saved;
    }
}

/* The regions of layer's act of (B,T) in order, covering it (at most GPT_ACT16_MAX_SPANS);
 * their count, 0 for a kind stored fp32. */
static int act_spans(const gpt_model *m, int layer, int B, int T, gpt_act_span *s);

/* At bf16 the scratch carries a work area of one block's fp32 act (0 floats at fp32), and a
 * layer stores its act in bf16 when its fp32 act fits it (a head whose logits outgrow a block's
 * act stays fp32). */
static size_t act16_work_floats(const gpt_model *m, int B, int T) {
    return m->precision == NN_BF16 ? block_act_floats(m, B, T) : 0;
}

static int act16_on(const gpt_model *m, int layer, int B, int T) {
    gpt_act_span s[GPT_ACT16_MAX_SPANS];
    return m->precision == NN_BF16 && act32_floats(m, layer, B, T) <= act16_work_floats(m, B, T) &&
           act_spans(m, layer, B, T, s) > 0;
}

/* Stored floats of the fp32 act's [0, end). */
static size_t stored_floats(const gpt_model *m, int layer, int B, int T, size_t end) {
    gpt_act_span s[GPT_ACT16_MAX_SPANS];
    return act16_on(m, layer, B, T) ? gpt_act16_floats(s, act_spans(m, layer, B, T, s), end) : end;
}

size_t gpt_layer_act_floats(const gpt_model *m, int layer, int B, int T) {
    return stored_floats(m, layer, B, T, act32_floats(m, layer, B, T));
}

size_t gpt_layer_act_saved_floats(const gpt_model *m, int layer, int B, int T) {
    return stored_floats(m, layer, B, T, saved32_floats(m, layer, B, T));
}

/* ---- bf16 storage: each kind's regions (gpt_act16.h) ---------------------------------------
 * fp32 stay the residual stream (x, res2, the head's input), the layer norms' statistics, the
 * token ids and the head's probabilities (softmax and loss in fp32; B turns them into dlogits);
 * everything else is a matmul's input or output, stored in bf16. The offsets come from views
 * over a stand-in base, of which only differences are used. */
static int spans_of(gpt_act_span *s, float *const *p, const unsigned *f, int n, const float *base,
                    size_t size) {
    for (int i = 0; i < n; i++) s[i] = (gpt_act_span){ (size_t)(p[i] - base), 0, f[i] };
    for (int i = 0; i < n; i++) s[i].n = (i + 1 < n ? s[i + 1].off : size) - s[i].off;
    return n;
}

static int act_spans(const gpt_model *m, int layer, int B, int T, gpt_act_span *s) {
    static float base[1];
    enum { E = ACT16_EXACT, NW = ACT16_NO_W };
    if (gpt_layer_kind_of(m, layer) == GPT_LAYER_BLOCK) {
        block_act v = block_act_view(m, base, B, T);
        unsigned nb = m->tp_sp ? 0 : ACT16_NO_B;   /* under sp B computes the weight gradients */
        float *p[] = { v.x, v.res2, v.ln1, v.ln1m, v.ln1r, v.qkv, v.atty, v.att, v.ln2, v.ln2m,
                       v.ln2r, v.fch, v.fchg, v.dres3, v.dfch, v.dln2, v.dres2, v.dqkv, v.dln1 };
        unsigned f[] = { E, E, nb, E, E, NW, nb, NW, nb, E, E, NW, nb, 0, 0, 0, 0, 0, 0 };
        return spans_of(s, p, f, 19, base, v.size);
    }
    if (gpt_layer_kind_of(m, layer) == GPT_LAYER_HEAD) {
        head_act v = head_act_view(m, base, B, T);
        float *p[] = { v.x, v.lnf, v.lnfm, v.lnfr, (float *)v.targets, v.probs, v.dlnf };
        unsigned f[] = { E, ACT16_NO_B, E, E, E, E | ACT16_B_WRITES, 0 };
        return spans_of(s, p, f, 7, base, v.size);
    }
    if (gpt_layer_kind_of(m, layer) == GPT_LAYER_EMBED) {
        embed_act v = embed_act_view(m, base, B, T);
        float *p[] = { (float *)v.tokens, v.dout };
        unsigned f[] = { E, 0 };
        return spans_of(s, p, f, 2, base, v.size);
    }
    return 0;   /* a kind without a list stays fp32 */
}

size_t gpt_layer_keep_floats(const gpt_model *m, int layer, int B, int T) {
    return gpt_layer_ops_of(m, layer)->keep_floats(m, B, T);
}

size_t gpt_layer_act_bytes_per_token(const gpt_model *m, int layer, int T) {
    return gpt_layer_act_floats(m, layer, 1, T) * sizeof(float) / (size_t)T;
}

/* Scratch of the kinds: a block's B needs (N,4C/tp) (under sp at least (N,C), also in F) and
 * the attention's; a sharded head's F the per-token exchange (head_tp_forward), N*(tp + 3); the
 * embedding none, or under sp its (N,C) output before the reduce-scatter (within the block's). */
static size_t kinds_scratch_floats(const gpt_model *m, int B, int T) {
    size_t N = (size_t)B * T, block = N * block_scratch_width(m) + ATTENTION_SCRATCH_FLOATS(T);
    size_t head = m->tp_size > 1 ? N * ((size_t)m->tp_size + 3) : 0;
    return block > head ? block : head;
}

/* At bf16 the work area follows (gpt_act16.h). */
size_t gpt_scratch_floats(const gpt_model *m, int B, int T) {
    return kinds_scratch_floats(m, B, T) + act16_work_floats(m, B, T);
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

/* The group's collective of a kind on buf (n floats; gpt_tp): the all-reduce, or sequence
 * parallelism's on a whole (N,C) buffer: the sum into the rank's rows (reduce-scatter), every
 * rank's rows to every rank (all-gather). -1 with the collective's error, or when it has none. */
enum { TP_ALLREDUCE, TP_REDUCE_SCATTER, TP_ALLGATHER };

static int tp_collective(const gpt_model *m, int kind, float *buf, size_t n, const char *what) {
    static const char *const names[] = { "all-reduce", "reduce-scatter", "all-gather" };
    if (kind == TP_ALLREDUCE) return tp_allreduce(m, buf, n, what);
    int (*f)(void *, float *, size_t) = kind == TP_REDUCE_SCATTER ? m->tp.reduce_scatter : m->tp.allgather;
    if (!f)
        return pt_seterr("TP rank %d of %d runs sequence parallelism but its collective has no %s "
                         "(gpt_set_tp after gpt_set_tp_sp replaced it?)", m->tp_rank, m->tp_size,
                         kind == TP_REDUCE_SCATTER ? "reduce_scatter" : "allgather");
    if (f(m->tp.ctx, buf, n) < 0)
        return pt_adderr("TP rank %d of %d, %s of %s: ", m->tp_rank, m->tp_size, names[kind], what);
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
 * rank 0 adds the positions, and the group sums the (N,C) output; W scatters into its rows.
 * Under sp the sum is reduce-scattered (each rank its rows of the output, built in scratch), and
 * B all-gathers the output gradient: W needs every row (the rank's tokens are anywhere), so the
 * gradients of wte's shard and of wpe are whole, as without sp. */
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
    size_t N = (size_t)B * T, C = (size_t)m->cfg.n_embd;
    float *whole = m->tp_sp ? scratch : out;
    embedding_shard_forward(whole, tokens, m->w.wte, m->tp_rank == 0 ? m->w.wpe : NULL, v0, nv, B,
                            T, (int)C);
    if (!m->tp_sp) return tp_allreduce(m, out, N * C, "the embedding output");
    if (tp_collective(m, TP_REDUCE_SCATTER, whole, N * C, "the embedding output") < 0) return -1;
    memcpy(out, whole + sp_first(m, N) * C, sp_rows(m, N) * C * sizeof *out);
    return 0;
}

static int embed_backward_input(const gpt_model *m, int l, const gpt_tied *tied, float *act,
                                float *scratch, float *dx, const float *dout, int B, int T) {
    size_t N = (size_t)B * T, C = (size_t)m->cfg.n_embd;
    float *whole = embed_act_view(m, act, B, T).dout;
    memcpy(whole + sp_first(m, N) * C, dout, sp_rows(m, N) * C * sizeof *dout);
    if (!m->tp_sp) return 0;
    return tp_collective(m, TP_ALLGATHER, whole, N * C, "the embedding's output gradient");
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
 * F and B are each a plan of stages with one collective after each stage but the last
 * (block_plan), run on rows of whole sequences (block_rows): on the whole microbatch
 * (block_run), or, with overlap (gpt_set_tp_overlap), on two halves in turn so that each
 * half's sum is in flight while the other half computes (block_pingpong). Every op but W's sums
 * is row-wise, so the halves compute what the whole does. Without sp a plan is three stages
 * with an all-reduce between each two; under sequence parallelism F is five stages, with an
 * all-gather before each column-parallel matmul and a reduce-scatter after each row-parallel
 * one, and B seven, the row-wise ops between them on the rank's rows only. Every all-gather
 * and reduce-scatter works on the (N,C) scratch; the act keeps only the rank's rows of ln1,
 * ln2, dres3 and dres2, so B gathers each again where a matmul needs all of its rows and
 * computes the four matmuls' weight gradients right there (W has no collective, so it could not
 * gather them; under sp W is the layer norms' alone):
 *
 *   F: ln_1 (rows) AG ln1 | c_attn, attention, c_proj partial RS | + bias + x = res2, ln_2 (rows)
 *      AG ln2 | c_fc, GELU, c_proj partial RS | + bias + res2 = out (rows)
 *   B: dout (rows) AG dres3 | mlp.c_proj's dW, to c_fc's output grad, ln2's rows AG ln2 | c_fc's
 *      dW, to its input grad RS | ln_2 backward (rows) = dres2 AG dres2 | attn.c_proj's dW, to
 *      c_attn's output grad, ln1's rows AG ln1 | c_attn's dW, to its input grad RS | ln_1
 *      backward (rows) = dx
 *
 * The sums are the same float sums in the same order as the all-reduces', and a row-wise op on
 * a row gives what it gives on all rows, so every value is bitwise the one without sp (the
 * matmuls' weight gradients too: the same products of the same gathered rows); only the layer
 * norms' W sums a rank's rows (their gradients' tp_sum). */

/* One block's F or B on the rows of sequences [b0, b0 + B) of a microbatch. */
typedef struct {
    const gpt_model *m;
    const gpt_block_tensors *w;
    const gpt_block_tensors *g; /* the block's gradients (under sp B adds the matmuls') */
    block_act a;                /* the views at the rows' first token */
    float *out;                 /* F: the block output; B: dx (the rows', the rank's under sp) */
    const float *dout;          /* B: the gradient at the output (the rows', the rank's under sp) */
    float *s, *satt;            /* the rows' part of the (N, block_scratch_width) scratch (B, and
                                 * under sp F and recompute: the (N,C) gathered or summed); attention's */
    int B, T;                   /* the rows: B sequences of T tokens */
    int Ns;                     /* the rank's rows of the stream: B*T, or B*T/tp under sp */
    size_t lo;                  /* their first in a whole (N,C) buffer: 0, or under sp rank*Ns */
    float *sum[6];              /* what the group reduces after stage k (N,C) */
} block_rows;

typedef void (*block_stage)(const block_rows *r);

/* Stages and the collective after each but the last (TP_*, on block_rows.sum[k]). */
typedef struct {
    int n;
    block_stage st[7];
    int coll[6];
    const char *what[6];        /* what each collective reduces, for errors */
} block_plan;

/* The product of a row-parallel projection, out (N,OUT) = inp @ w: the rank's partial sum, the
 * bias and the residual to add after the group's sum (proj_finish). At tp 1 they are fused into
 * the product: out = res + b + inp @ w (inp holding all the input rows). */
static void proj_product(const gpt_model *m, float *out, const float *inp, const float *w,
                         const float *b, const float *res, int N, int IN, int OUT) {
    if (m->tp_size == 1) matmul_residual_forward_prec(m->precision, out, inp, w, b, res, N, IN, OUT);
    else matmul_forward_prec(m->precision, out, inp, w, NULL, N, IN, OUT);
}

static void proj_finish(const gpt_model *m, float *out, const float *res, const float *b, int N, int OUT) {
    if (m->tp_size > 1) bias_residual_add(out, res, b, N, OUT);
}

/* Under sp: out (Ns,C) = the rank's rows of the reduce-scattered sum + res + b (bitwise
 * proj_finish on those rows). */
static void proj_finish_rows(const block_rows *r, float *out, const float *res, const float *b) {
    int C = r->m->cfg.n_embd;
    memcpy(out, r->s + r->lo * C, (size_t)r->Ns * C * sizeof *out);
    bias_residual_add(out, res, b, r->Ns, C);
}

/* Under sp: the rank's rows (Ns,C) into their place in the (N,C) scratch, for an all-gather. */
static void sp_put_rows(const block_rows *r, const float *rows) {
    int C = r->m->cfg.n_embd;
    memcpy(r->s + r->lo * C, rows, (size_t)r->Ns * C * sizeof *rows);
}

/* What communication-free recomputation redoes: ln_1 (of the rank's rows) from x ... */
static void block_ln1(const block_rows *r) {
    int C = r->m->cfg.n_embd;
    layernorm_forward(r->a.ln1, r->a.ln1m, r->a.ln1r, r->a.x, r->w->ln1w, r->w->ln1b, r->Ns, C);
}

/* ... c_attn and attention from ln1 (all rows: the act's, or under sp gathered) ... */
static void block_attn(const block_rows *r, const float *ln1) {
    block_dims d = block_dims_of(r->m);
    int C = d.C, Cl = d.Cl, N = r->B * r->T;
    matmul_forward_prec(r->m->precision, r->a.qkv, ln1, r->w->qkvw, r->w->qkvb, N, C, 3 * Cl);
    attention_forward(r->a.atty, r->a.att, r->a.qkv, r->B, r->T, Cl, d.NHl);
}

/* ... ln_2 (of the rank's rows) from res2 ... */
static void block_ln2(const block_rows *r) {
    int C = r->m->cfg.n_embd;
    layernorm_forward(r->a.ln2, r->a.ln2m, r->a.ln2r, r->a.res2, r->w->ln2w, r->w->ln2b, r->Ns, C);
}

/* ... and c_fc, GELU from ln2 (all rows, as ln1). */
static void block_mlp(const block_rows *r, const float *ln2) {
    int C = r->m->cfg.n_embd, Cl = block_dims_of(r->m).Cl, N = r->B * r->T;
    matmul_forward_prec(r->m->precision, r->a.fch, ln2, r->w->fcw, r->w->fcb, N, C, 4 * Cl);
    gelu_forward(r->a.fchg, r->a.fch, N * 4 * Cl);
}

/* F stage 0: up to attn.c_proj's product (into res2, summed next). */
static void block_f0(const block_rows *r) {
    int C = r->m->cfg.n_embd, Cl = block_dims_of(r->m).Cl, N = r->B * r->T;
    block_ln1(r);
    block_attn(r, r->a.ln1);
    proj_product(r->m, r->a.res2, r->a.atty, r->w->attprojw, r->w->attprojb, r->a.x, N, Cl, C);
}

/* F stage 1: res2 finished, then up to mlp.c_proj's product (into out, summed next). */
static void block_f1(const block_rows *r) {
    int C = r->m->cfg.n_embd, Cl = block_dims_of(r->m).Cl, N = r->B * r->T;
    proj_finish(r->m, r->a.res2, r->a.x, r->w->attprojb, N, C);
    block_ln2(r);
    block_mlp(r, r->a.ln2);
    proj_product(r->m, r->out, r->a.fchg, r->w->fcprojw, r->w->fcprojb, r->a.res2, N, 4 * Cl, C);
}

/* F stage 2: the output finished. */
static void block_f2(const block_rows *r) {
    proj_finish(r->m, r->out, r->a.res2, r->w->fcprojb, r->B * r->T, r->m->cfg.n_embd);
}

/* Under sp, F: ln_1 of the rank's rows, into the scratch to be gathered ... */
static void block_fs0(const block_rows *r) {
    block_ln1(r);
    sp_put_rows(r, r->a.ln1);
}

/* ... c_attn (from the gathered ln1), attention and attn.c_proj's partial product into the
 * scratch ... */
static void block_fs1(const block_rows *r) {
    int C = r->m->cfg.n_embd, Cl = block_dims_of(r->m).Cl;
    block_attn(r, r->s);
    matmul_forward_prec(r->m->precision, r->s, r->a.atty, r->w->attprojw, NULL, r->B * r->T, Cl, C);
}

/* ... res2 of the rank's rows, ln_2 of them (into the scratch to be gathered) ... */
static void block_fs2(const block_rows *r) {
    proj_finish_rows(r, r->a.res2, r->a.x, r->w->attprojb);
    block_ln2(r);
    sp_put_rows(r, r->a.ln2);
}

/* ... c_fc (from the gathered ln2), GELU and mlp.c_proj's partial product into scratch ... */
static void block_fs3(const block_rows *r) {
    int C = r->m->cfg.n_embd, Cl = block_dims_of(r->m).Cl;
    block_mlp(r, r->s);
    matmul_forward_prec(r->m->precision, r->s, r->a.fchg, r->w->fcprojw, NULL, r->B * r->T, 4 * Cl, C);
}

/* ... and the output's rows. */
static void block_fs4(const block_rows *r) { proj_finish_rows(r, r->out, r->a.res2, r->w->fcprojb); }

/* B: the gradient at the output, the rank's rows of it into dres3 (all of it without sp). */
static void block_dout(const block_rows *r) {
    int C = r->m->cfg.n_embd;
    memcpy(r->a.dres3, r->dout, (size_t)r->Ns * C * sizeof *r->dout);
}

/* B from dres3 (all rows) to c_fc's input gradient, into dln2 (N,C) (partial: summed next). */
static void block_b_mlp(const block_rows *r, float *dln2) {
    const gpt_block_tensors *w = r->w;
    int C = r->m->cfg.n_embd, Cl = block_dims_of(r->m).Cl, N = r->B * r->T;
    matmul_backward_input_prec(r->m->precision, r->s, r->a.dres3, w->fcprojw, N, 4 * Cl, C);   /* at the GELU output */
    gelu_backward_input(r->a.dfch, r->s, r->a.fch, N * 4 * Cl);
    matmul_backward_input_prec(r->m->precision, dln2, r->a.dfch, w->fcw, N, C, 4 * Cl);
}

/* ln_2's backward on the rank's rows: into its rows of dres2. */
static void block_b_ln2(const block_rows *r) {
    const block_act *a = &r->a;
    int C = r->m->cfg.n_embd;
    layernorm_residual_backward_input(a->dres2, a->dln2, a->dres3, a->res2,
                                      r->w->ln2w, a->ln2m, a->ln2r, r->Ns, C);
}

/* B from dres2 (all rows) to c_attn's input gradient, into dln1 (N,C) (partial: summed next). */
static void block_b_attn(const block_rows *r, float *dln1) {
    const gpt_block_tensors *w = r->w;
    block_dims d = block_dims_of(r->m);
    int C = d.C, Cl = d.Cl, N = r->B * r->T;
    matmul_backward_input_prec(r->m->precision, r->s, r->a.dres2, w->attprojw, N, Cl, C);      /* at the attention output */
    attention_backward_input(r->a.dqkv, r->satt, r->s, r->a.qkv, r->a.att, r->B, r->T, Cl, d.NHl);
    matmul_backward_input_prec(r->m->precision, dln1, r->a.dqkv, w->qkvw, N, C, 3 * Cl);
}

/* ln_1's backward on the rank's rows into dx. */
static void block_b_ln1(const block_rows *r) {
    const block_act *a = &r->a;
    layernorm_residual_backward_input(r->out, a->dln1, a->dres2, a->x,
                                      r->w->ln1w, a->ln1m, a->ln1r, r->Ns, r->m->cfg.n_embd);
}

/* B stages without sp: to dln2 (summed next); ln_2's backward and on to dln1 (summed next);
 * ln_1's backward. */
static void block_b0(const block_rows *r) { block_dout(r); block_b_mlp(r, r->a.dln2); }
static void block_b1(const block_rows *r) { block_b_ln2(r); block_b_attn(r, r->a.dln1); }

/* Under sp, B (block_b_sp): each stage ends with the (N,C) scratch to gather or to sum. The
 * output gradient's rows kept (dres3) and put to be gathered ... */
static void block_bs0(const block_rows *r) {
    block_dout(r);
    sp_put_rows(r, r->a.dres3);
}

/* ... from dres3 (gathered): mlp.c_proj's weight gradient, the GELU output's gradient and c_fc's
 * output gradient (in place in dfch); ln2's rows to be gathered ... */
static void block_bs1(const block_rows *r) {
    const block_act *a = &r->a;
    int C = r->m->cfg.n_embd, Cl = block_dims_of(r->m).Cl, N = r->B * r->T;
    matmul_backward_weight_prec(r->m->precision, r->g->fcprojw, r->g->fcprojb, r->s, a->fchg, N, 4 * Cl, C);
    matmul_backward_input_prec(r->m->precision, a->dfch, r->s, r->w->fcprojw, N, 4 * Cl, C);
    gelu_backward_input(a->dfch, a->dfch, a->fch, N * 4 * Cl);
    sp_put_rows(r, a->ln2);
}

/* ... from ln2 (gathered): c_fc's weight gradient, then its partial input gradient into the
 * scratch (reduce-scattered next) ... */
static void block_bs2(const block_rows *r) {
    const block_act *a = &r->a;
    int C = r->m->cfg.n_embd, Cl = block_dims_of(r->m).Cl, N = r->B * r->T;
    matmul_backward_weight_prec(r->m->precision, r->g->fcw, r->g->fcb, a->dfch, r->s, N, C, 4 * Cl);
    matmul_backward_input_prec(r->m->precision, r->s, a->dfch, r->w->fcw, N, C, 4 * Cl);
}

/* ... the rank's rows of the sum kept (for W), ln_2's backward on them, dres2's rows to be
 * gathered ... */
static void block_bs3(const block_rows *r) {
    int C = r->m->cfg.n_embd;
    memcpy(r->a.dln2, r->s + r->lo * C, (size_t)r->Ns * C * sizeof *r->s);
    block_b_ln2(r);
    sp_put_rows(r, r->a.dres2);
}

/* ... from dres2 (gathered): attn.c_proj's weight gradient, the attention output's gradient
 * (into dfch, free now) and c_attn's output gradient; ln1's rows to be gathered ... */
static void block_bs4(const block_rows *r) {
    const block_act *a = &r->a;
    block_dims d = block_dims_of(r->m);
    int C = d.C, Cl = d.Cl, N = r->B * r->T;
    matmul_backward_weight_prec(r->m->precision, r->g->attprojw, r->g->attprojb, r->s, a->atty, N, Cl, C);
    matmul_backward_input_prec(r->m->precision, a->dfch, r->s, r->w->attprojw, N, Cl, C);
    attention_backward_input(a->dqkv, r->satt, a->dfch, a->qkv, a->att, r->B, r->T, Cl, d.NHl);
    sp_put_rows(r, a->ln1);
}

/* ... from ln1 (gathered): c_attn's weight gradient, then its partial input gradient into the
 * scratch (reduce-scattered next) ... */
static void block_bs5(const block_rows *r) {
    const block_act *a = &r->a;
    int C = r->m->cfg.n_embd, Cl = block_dims_of(r->m).Cl, N = r->B * r->T;
    matmul_backward_weight_prec(r->m->precision, r->g->qkvw, r->g->qkvb, a->dqkv, r->s, N, C, 3 * Cl);
    matmul_backward_input_prec(r->m->precision, r->s, a->dqkv, r->w->qkvw, N, C, 3 * Cl);
}

/* ... and the rank's rows of the sum kept (for W), ln_1's backward on them into dx. */
static void block_bs6(const block_rows *r) {
    int C = r->m->cfg.n_embd;
    memcpy(r->a.dln1, r->s + r->lo * C, (size_t)r->Ns * C * sizeof *r->s);
    block_b_ln1(r);
}

static const block_plan block_f = {
    3, { block_f0, block_f1, block_f2 }, { TP_ALLREDUCE, TP_ALLREDUCE },
    { "a row-parallel projection", "a row-parallel projection" } };
static const block_plan block_b = {
    3, { block_b0, block_b1, block_b_ln1 }, { TP_ALLREDUCE, TP_ALLREDUCE },
    { "a column-parallel input gradient", "a column-parallel input gradient" } };
static const block_plan block_f_sp = {
    5, { block_fs0, block_fs1, block_fs2, block_fs3, block_fs4 },
    { TP_ALLGATHER, TP_REDUCE_SCATTER, TP_ALLGATHER, TP_REDUCE_SCATTER },
    { "ln_1's output", "attn.c_proj's product", "ln_2's output", "mlp.c_proj's product" } };
static const block_plan block_b_sp = {
    7, { block_bs0, block_bs1, block_bs2, block_bs3, block_bs4, block_bs5, block_bs6 },
    { TP_ALLGATHER, TP_ALLGATHER, TP_REDUCE_SCATTER, TP_ALLGATHER, TP_ALLGATHER, TP_REDUCE_SCATTER },
    { "the block's output gradient", "ln_2's output", "c_fc's input gradient", "res2's gradient",
      "ln_1's output", "c_attn's input gradient" } };

/* How many parts F, B and recompute split a microbatch of B sequences into: two with overlap
 * on a sharded block (the first B/2 sequences, then the rest), else one. */
static int block_parts(const gpt_model *m, int B) {
    return m->tp_overlap && m->tp_size > 1 && B >= 2 ? 2 : 1;
}

/* The rows of each part (r[0..block_parts)) of layer l's F (dout NULL) or B on a microbatch. */
static int block_rows_init(block_rows *r, const gpt_model *m, int l, float *act, float *scratch,
                           float *out, const float *dout, int B, int T) {
    int parts = block_parts(m, B), C = m->cfg.n_embd;
    size_t N = (size_t)B * T, sw = block_scratch_width(m);
    for (int i = 0, b0 = 0; i < parts; i++) {
        int nb = parts == 1 ? B : i == 0 ? B / 2 : B - B / 2;
        size_t n0 = (size_t)b0 * T;
        block_rows *p = &r[i];
        *p = (block_rows){ .m = m, .w = &m->w.h[l - 1], .g = &m->g.h[l - 1], .a = block_act_rows(m, act, B, T, n0),
                           .out = out ? out + n0 * C : NULL, .dout = dout ? dout + n0 * C : NULL,
                           .s = scratch ? scratch + n0 * sw : NULL,
                           .satt = scratch ? scratch + N * sw : NULL, .B = nb, .T = T,
                           .Ns = (int)sp_rows(m, (size_t)nb * T), .lo = sp_first(m, N) };
        if (m->tp_sp) {
            for (int k = 0; k < 6; k++) p->sum[k] = p->s;   /* every collective on the (N,C) scratch */
        } else {
            p->sum[0] = dout ? p->a.dln2 : p->a.res2;
            p->sum[1] = dout ? p->a.dln1 : p->out;
        }
        b0 += nb;
    }
    return parts;
}

/* A plan's stages on the whole microbatch, the group's blocking collective between them. */
static int block_run(const block_plan *pl, const block_rows *r) {
    size_t n = (size_t)r->B * r->T * r->m->cfg.n_embd;
    for (int k = 0; k < pl->n; k++) {
        pl->st[k](r);
        if (k < pl->n - 1 && tp_collective(r->m, pl->coll[k], r->sum[k], n, pl->what[k]) < 0) return -1;
    }
    return 0;
}

/* The three stages of a plan without sp on two halves, ping-pong (Oases): stage k of half 0,
 * its sum started, stage k of half 1 while it is in flight, its sum started; then wait for half
 * 0's sum before its stage k + 1 (half 1's sum in flight meanwhile), and so on. A failed start
 * or wait waits for whatever is still in flight (the buffers are the caller's) and returns -1. */
static int block_pingpong(const block_plan *pl, const block_rows r[2]) {
    const gpt_model *m = r[0].m;
    void *req[2][2] = { { NULL } };
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 2; i++) {
            size_t n = (size_t)r[i].B * r[i].T * m->cfg.n_embd;
            if (k > 0 && tp_wait(m, &req[i][k - 1], pl->what[k - 1]) < 0) goto drain;
            pl->st[k](&r[i]);
            if (k < 2 && tp_start(m, r[i].sum[k], n, &req[i][k], pl->what[k]) < 0) goto drain;
        }
    return 0;
drain:
    tp_drain(m, &req[0][0], 4);
    return -1;
}

static int block_forward(const gpt_model *m, int l, const gpt_tied *tied, float *act,
                         float *scratch, float *out, const float *x, const int *tokens, int B, int T) {
    block_rows r[2];
    int parts = block_rows_init(r, m, l, act, scratch, out, NULL, B, T);
    memcpy(r[0].a.x, x, gpt_stream_rows(m, B, T) * m->cfg.n_embd * sizeof *x);
    if (parts == 2) return block_pingpong(&block_f, r);
    return block_run(m->tp_sp ? &block_f_sp : &block_f, &r[0]);
}

/* scratch: (N, block_scratch_width) for the widest intermediate, then the attention scratch. */
static int block_backward_input(const gpt_model *m, int l, const gpt_tied *tied, float *act,
                                float *scratch, float *dx, const float *dout, int B, int T) {
    block_rows r[2];
    int parts = block_rows_init(r, m, l, act, scratch, dx, dout, B, T);
    if (parts == 2) return block_pingpong(&block_b, r);
    return block_run(m->tp_sp ? &block_b_sp : &block_b, &r[0]);
}

/* The F part after x and res2, from them, in the parts F ran in (so bitwise what F wrote).
 * Under sp the layer norms' outputs are all-gathered into the scratch as in F (the only
 * collectives). */
static int block_recompute(const gpt_model *m, int l, const gpt_tied *tied, float *act,
                           float *scratch, int B, int T) {
    block_rows r[2];
    int parts = block_rows_init(r, m, l, act, m->tp_sp ? scratch : NULL, NULL, NULL, B, T);
    size_t n = (size_t)B * T * m->cfg.n_embd;
    if (m->tp_sp) {   /* one part: no overlap under sp */
        block_fs0(&r[0]);
        if (tp_collective(m, TP_ALLGATHER, r[0].s, n, "ln_1's output") < 0) return -1;
        block_attn(&r[0], r[0].s);
        block_ln2(&r[0]);
        sp_put_rows(&r[0], r[0].a.ln2);
        if (tp_collective(m, TP_ALLGATHER, r[0].s, n, "ln_2's output") < 0) return -1;
        block_mlp(&r[0], r[0].s);
        return 0;
    }
    for (int i = 0; i < parts; i++) {
        block_ln1(&r[i]);
        block_attn(&r[i], r[i].a.ln1);
        block_ln2(&r[i]);
        block_mlp(&r[i], r[i].a.ln2);
    }
    return 0;
}

/* The layer norms' gradients from the rank's rows (under sp a partial sum: tp_sum); the
 * matmuls' from all rows, without sp (under sp B added them: block_b_sp). */
static int block_backward_weight(const gpt_model *m, int l, const gpt_tied *tied, const float *act,
                                 float *scratch, int B, int T) {
    const gpt_block_tensors *g = &m->g.h[l - 1];
    block_dims d = block_dims_of(m);
    int C = d.C, Cl = d.Cl, N = B * T, Ns = (int)sp_rows(m, (size_t)N);
    block_act a = block_act_view(m, (float *)act, B, T);   /* read only below */
    if (!m->tp_sp) {
        matmul_backward_weight_prec(m->precision, g->fcprojw, g->fcprojb, a.dres3, a.fchg, N, 4 * Cl, C);
        matmul_backward_weight_prec(m->precision, g->fcw, g->fcb, a.dfch, a.ln2, N, C, 4 * Cl);
    }
    layernorm_backward_weight(g->ln2w, g->ln2b, a.dln2, a.res2, a.ln2m, a.ln2r, Ns, C);
    if (!m->tp_sp) {
        matmul_backward_weight_prec(m->precision, g->attprojw, g->attprojb, a.dres2, a.atty, N, Cl, C);
        matmul_backward_weight_prec(m->precision, g->qkvw, g->qkvb, a.dqkv, a.ln1, N, C, 3 * Cl);
    }
    layernorm_backward_weight(g->ln1w, g->ln1b, a.dln1, a.x, a.ln1m, a.ln1r, Ns, C);
    return 0;
}

/* ---- final layernorm + tied head ----------------------------------------------------------
 * Over tp ranks: each rank's logits are its vocabulary shard's columns, and the cross-entropy
 * is Megatron-LM's vocabulary-parallel one (head_tp_forward). B sums the input gradient. Under
 * sp F first all-gathers the input rows (then every rank runs ln_f on all rows, as without sp,
 * so ln_f's gradients stay whole), and B gives the rank's rows of the input gradient. */

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
    memcpy(a.x + sp_first(m, (size_t)N) * C, x, sp_rows(m, (size_t)N) * C * sizeof *x);
    if (m->tp_sp && tp_collective(m, TP_ALLGATHER, a.x, (size_t)N * C, "the head's input") < 0)
        return -1;
    layernorm_forward(a.lnf, a.lnfm, a.lnfr, a.x, m->w.lnfw, m->w.lnfb, N, C);
    if (!targets) {
        lmhead_forward_prec(m->precision, out, a.lnf, tied_wte(m, tied), N, C, V);
        return 0;
    }
    memcpy(a.targets, targets, (size_t)N * sizeof *targets);
    lmhead_forward_prec(m->precision, a.probs, a.lnf, tied_wte(m, tied), N, C, V);
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
    lmhead_backward_input_prec(m->precision, a.dlnf, a.probs, tied_wte(m, tied), N, C, V);
    if (tp_allreduce(m, a.dlnf, (size_t)N * C, "the head's input gradient") < 0) return -1;
    size_t lo = sp_first(m, (size_t)N);   /* the rank's rows (all without sp) */
    layernorm_backward_input(dx, a.dlnf + lo * C, a.x + lo * C, m->w.lnfw, a.lnfm + lo, a.lnfr + lo,
                             (int)sp_rows(m, (size_t)N), C);
    return 0;
}

static int head_backward_weight(const gpt_model *m, int l, const gpt_tied *tied, const float *act,
                                float *scratch, int B, int T) {
    int C = m->cfg.n_embd, V = vocab_local(m), N = B * T;
    head_act a = head_act_view(m, (float *)act, B, T);   /* read only below */
    lmhead_backward_weight_prec(m->precision, tied_dwte(m, tied), a.probs, a.lnf, N, C, V);
    layernorm_backward_weight(m->g.lnfw, m->g.lnfb, a.dlnf, a.x, a.lnfm, a.lnfr, N, C);
    return 0;
}

/* ---- analytic costs ------------------------------------------------------------------------
 * FLOPs: matmuls cost 2 per multiply-add; B and W each repeat the forward's matmul FLOPs (dX = dY W^T,
 * dW = X^T dY); causal attention (QK^T and AV, half the T x T square) is 2*N*T*C forward and
 * twice that backward, all of it in B (it has no weights). Element-wise work is left out.
 * Over tp TP ranks (gpt_init_layers_tp) each figure is one rank's: the split matmuls, heads and
 * vocabulary rows divide by tp, the replicated tensors and the (N,C) streams do not. */
static void block_cost_at(const gpt_config *g, int B, int T, int tp, int sp, gpt_layer_cost *o) {
    *o = (gpt_layer_cost){ 0 };
    sp = sp && tp > 1;
    double N = (double)B * T, C = g->n_embd, t = tp, mm = 12.0 * C * C / t, att = 2.0 * N * T * C / t;
    double params = mm + 7.0 * C / t + 6.0 * C;   /* split: 12C^2 + 7C; replicated: ln 4C, 2 biases */
    double Ns = sp ? N / t : N;                   /* the rank's rows of the stream */
    o->flops[0] = 2.0 * mm * N + att;
    o->flops[1] = 2.0 * mm * N + 2.0 * att;
    o->flops[2] = 2.0 * mm * N;
    if (sp) {       /* B computes the matmuls' weight gradients (block_b_sp); W's layer norms are
                     * element-wise, left out */
        o->flops[1] += o->flops[2];
        o->flops[2] = 0;
    }
    /* the act layout above: 8 (N,C) streams, all the rank's rows under sp; 19 (N,C) of split
     * widths (qkv, atty, fch, fchg and their gradients), 4 stats of the rank's rows,
     * (B,NH/tp,T,T) probabilities */
    o->act_bytes = 4.0 * (8.0 * Ns * C + 19.0 * N * C / t + 4.0 * Ns + N * g->n_head / t * T);
    o->input_bytes = 4.0 * Ns * C;
    o->keep_bytes = 4.0 * 2.0 * Ns * C;                 /* x and res2 */
    o->recompute_flops = 2.0 * 7.0 * C * C / t * N + att;   /* F without the two projections */
    o->param_bytes = o->grad_bytes = 4.0 * params;
    o->optim_bytes = 8.0 * params;
    if (tp > 1) {   /* after each row-parallel projection (F) and column-parallel input grad (B);
                     * under sp a reduce-scatter there and an all-gather before each conjugate,
                     * and in B two more, of ln1 and ln2 for c_attn's and c_fc's weight gradients */
        o->tp_bytes[0] = (sp ? 4.0 : 2.0) * 4.0 * N * C;
        o->tp_bytes[1] = (sp ? 6.0 : 2.0) * 4.0 * N * C;
        o->tp_collectives[0] = sp ? 4 : 2;
        o->tp_collectives[1] = sp ? 6 : 2;
    }
    if (sp) {       /* the recompute's all-gathers of ln_1's and ln_2's outputs */
        o->recompute_tp_bytes = 2.0 * 4.0 * N * C;
        o->recompute_tp_collectives = 2;
    }
}

static void block_cost(const gpt_config *g, int B, int T, int tp, gpt_layer_cost *o) { block_cost_at(g, B, T, tp, 0, o); }
static void block_cost_sp(const gpt_config *g, int B, int T, int tp, gpt_layer_cost *o) { block_cost_at(g, B, T, tp, 1, o); }

/* wte rows one TP rank holds: V padded up to a multiple of tp, divided. */
static double vocab_shard(const gpt_config *g, int tp) {
    return (double)((g->vocab_size + tp - 1) / tp);
}

/* Head: ln_f, logits against the tied wte (V,C), softmax cross-entropy (about 5 FLOPs a logit).
 * The stage stores a copy of wte and its gradient; AdamW state lives with the embedding. Over tp
 * ranks: a vocabulary shard of the logits, and the cross-entropy's per-token numbers exchanged
 * (every rank's maximum, then the sums of exponentials and the target logits). */
static void head_cost_at(const gpt_config *g, int B, int T, int tp, int sp, gpt_layer_cost *o) {
    *o = (gpt_layer_cost){ 0 };
    sp = sp && tp > 1;
    double N = (double)B * T, C = g->n_embd, V = vocab_shard(g, tp), mm = 2.0 * N * C * V;
    o->flops[0] = mm + 5.0 * N * V;
    o->flops[1] = mm;
    o->flops[2] = mm;
    o->act_bytes = 4.0 * (3.0 * N * C + 3.0 * N + N * V);
    o->input_bytes = 4.0 * (sp ? N / tp : N) * C;
    o->keep_bytes = 4.0 * (2.0 * N * C + 3.0 * N + N * V);   /* its F part: not recomputed */
    o->param_bytes = o->grad_bytes = 4.0 * (V * C + 2.0 * C);
    o->optim_bytes = 8.0 * 2.0 * C;
    if (tp > 1) {   /* under sp an all-gather of the input first */
        o->tp_bytes[0] = 4.0 * (N * tp + 2.0 * N) + (sp ? 4.0 * N * C : 0);
        o->tp_collectives[0] = sp ? 3 : 2;
        o->tp_bytes[1] = 4.0 * N * C;
        o->tp_collectives[1] = 1;
    }
}

static void head_cost(const gpt_config *g, int B, int T, int tp, gpt_layer_cost *o) { head_cost_at(g, B, T, tp, 0, o); }
static void head_cost_sp(const gpt_config *g, int B, int T, int tp, gpt_layer_cost *o) { head_cost_at(g, B, T, tp, 1, o); }

/* Embedding: a gather forward, a scatter-add for W; memory-bound, counted as one FLOP a value.
 * Over tp ranks: each gathers the rows of its vocabulary shard, and the (N,C) sum is reduced
 * (under sp reduce-scattered, and the output gradient all-gathered in B). */
static void embed_cost_at(const gpt_config *g, int B, int T, int tp, int sp, gpt_layer_cost *o) {
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
    if (tp > 1 && sp) {
        o->tp_bytes[1] = 4.0 * N * C;
        o->tp_collectives[1] = 1;
    }
}

static void embed_cost(const gpt_config *g, int B, int T, int tp, gpt_layer_cost *o) { embed_cost_at(g, B, T, tp, 0, o); }
static void embed_cost_sp(const gpt_config *g, int B, int T, int tp, gpt_layer_cost *o) { embed_cost_at(g, B, T, tp, 1, o); }

/* ---- the table ---------------------------------------------------------------------------- */
static const gpt_layer_ops layer_kinds[GPT_N_LAYER_KINDS] = {
    [GPT_LAYER_EMBED] = { "embedding", GPT_IO_TOKENS, embed_act_floats, embed_forward,
                          embed_backward_input, embed_backward_weight, embed_cost, embed_cost_sp,
                          embed_keep_floats, keep_all_recompute },
    [GPT_LAYER_BLOCK] = { "block", 0, block_act_floats, block_forward, block_backward_input,
                          block_backward_weight, block_cost, block_cost_sp, block_keep_floats,
                          block_recompute },
    [GPT_LAYER_HEAD]  = { "head", GPT_IO_TARGETS, head_act_floats, head_forward,
                          head_backward_input, head_backward_weight, head_cost, head_cost_sp,
                          head_keep_floats, keep_all_recompute },
};

const gpt_layer_ops *gpt_kind_ops(gpt_layer_kind kind) { return &layer_kinds[kind]; }

void gpt_kind_cost(gpt_layer_kind kind, const gpt_config *cfg, int B, int T, int tp, int sp,
                   gpt_layer_cost *out) {
    const gpt_layer_ops *k = gpt_kind_ops(kind);
    (sp ? k->cost_sp : k->cost)(cfg, B, T, tp, out);
}

const gpt_layer_ops *gpt_layer_ops_of(const gpt_model *m, int layer) {
    return &layer_kinds[gpt_layer_kind_of(m, layer)];
}

/* ---- dispatch -----------------------------------------------------------------------------
 * At bf16 a layer whose act is stored so (gpt_act16_on) runs on the fp32 work area after the
 * kinds' scratch: F packs its F part into act; B unpacks the F part it reads, packs its B part
 * and what it overwrote; W unpacks what it reads; the recompute starts from the keep prefix. */
static float *act16_work(const gpt_model *m, int layer, float *scratch, int B, int T) {
    return act16_on(m, layer, B, T) ? scratch + kinds_scratch_floats(m, B, T) : NULL;
}

/* Packs or unpacks [lo, hi) of layer's act (gpt_act16_pack / _unpack). */
static void act16_pack(const gpt_model *m, int layer, int B, int T, float *act, const float *work,
                       size_t lo, size_t hi, unsigned only) {
    gpt_act_span s[GPT_ACT16_MAX_SPANS];
    gpt_act16_pack(s, act_spans(m, layer, B, T, s), act, work, lo, hi, only);
}

static void act16_unpack(const gpt_model *m, int layer, int B, int T, float *work, const float *act,
                         size_t lo, size_t hi, unsigned skip) {
    gpt_act_span s[GPT_ACT16_MAX_SPANS];
    gpt_act16_unpack(s, act_spans(m, layer, B, T, s), work, act, lo, hi, skip);
}

int gpt_layer_forward(const gpt_model *m, int layer, const gpt_tied *tied, float *act,
                      float *scratch, float *out, const float *x, const int *tokens, int B, int T) {
    if (T < 1 || T > m->cfg.n_positions || B < 1)
        return pt_seterr("layer %d: sequence length %d must be in [1, n_positions=%d] and batch %d >= 1",
                         layer, T, m->cfg.n_positions, B);
    if (m->tp_sp && gpt_sp_check_rows(B, T, m->tp_size) < 0)
        return pt_adderr("layer %d forward: ", layer);
    float *work = act16_work(m, layer, scratch, B, T);
    if (gpt_layer_ops_of(m, layer)->forward(m, layer, tied, work ? work : act, scratch, out, x, tokens, B, T) < 0)
        return pt_adderr("layer %d forward: ", layer);
    if (work) act16_pack(m, layer, B, T, act, work, 0, saved32_floats(m, layer, B, T), 0);
    return 0;
}

int gpt_layer_backward_input(const gpt_model *m, int layer, const gpt_tied *tied, float *act,
                             float *scratch, float *dx, const float *dout, int B, int T) {
    float *work = act16_work(m, layer, scratch, B, T);
    size_t saved = saved32_floats(m, layer, B, T);
    if (work) act16_unpack(m, layer, B, T, work, act, 0, saved, ACT16_NO_B);
    if (gpt_layer_ops_of(m, layer)->backward_input(m, layer, tied, work ? work : act, scratch, dx, dout, B, T) < 0)
        return pt_adderr("layer %d backward: ", layer);
    if (work) {
        act16_pack(m, layer, B, T, act, work, saved, act32_floats(m, layer, B, T), 0);
        act16_pack(m, layer, B, T, act, work, 0, saved, ACT16_B_WRITES);
    }
    return 0;
}

int gpt_layer_backward_weight(const gpt_model *m, int layer, const gpt_tied *tied,
                              const float *act, float *scratch, int B, int T) {
    float *work = act16_work(m, layer, scratch, B, T);
    if (work) act16_unpack(m, layer, B, T, work, act, 0, act32_floats(m, layer, B, T), ACT16_NO_W);
    return gpt_layer_ops_of(m, layer)->backward_weight(m, layer, tied, work ? work : act, scratch, B, T);
}

int gpt_layer_recompute(const gpt_model *m, int layer, const gpt_tied *tied, float *act,
                        float *scratch, int B, int T) {
    if (T < 1 || T > m->cfg.n_positions || B < 1)
        return pt_seterr("layer %d recompute: sequence length %d must be in [1, n_positions=%d] "
                         "and batch %d >= 1", layer, T, m->cfg.n_positions, B);
    if (m->tp_sp && gpt_sp_check_rows(B, T, m->tp_size) < 0)
        return pt_adderr("layer %d recompute: ", layer);
    const gpt_layer_ops *k = gpt_layer_ops_of(m, layer);
    float *work = k->recompute == keep_all_recompute ? NULL : act16_work(m, layer, scratch, B, T);
    if (work) memcpy(work, act, k->keep_floats(m, B, T) * sizeof *work);   /* stored fp32 as is */
    if (k->recompute(m, layer, tied, work ? work : act, scratch, B, T) < 0)
        return pt_adderr("layer %d recompute: ", layer);
    if (work) act16_pack(m, layer, B, T, act, work, 0, saved32_floats(m, layer, B, T), 0);
    return 0;
}
