/* The embedding layer kind (layer 0: token and position embeddings): its act, F, B, W (plain,
 * over a TP group's vocabulary shards, under sequence parallelism) and analytic cost, as one row
 * of the kind registry (gpt_layers.c). */
#include "model/gpt_layer_int.h"
#include "model/gpt_act16.h"
#include "nn/nn.h"
#include "util/pt.h"
#include <stdio.h>
#include <string.h>

/* Embedding act. */
typedef struct {
    int *tokens;                /* (N) */
    float *dout;                /* (N,C) B: gradient at the embedding output */
    size_t saved;               /* floats of the F part (the start) */
    size_t size;                /* floats in all */
} embed_act;

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

static size_t embed_act_floats(const gpt_model *m, int B, int T) { return embed_act_view(m, NULL, B, T).size; }
/* Communication-free recomputation keeps the embedding's whole F part (it is not recomputed). */
static size_t embed_keep_floats(const gpt_model *m, int B, int T) { return embed_act_view(m, NULL, B, T).saved; }

/* ---- embedding ----------------------------------------------------------------------------
 * Over tp ranks: each gathers the rows of its vocabulary shard (zeros for the others' tokens),
 * rank 0 adds the positions, and the group sums the (N,C) output; W scatters into its rows.
 * Under sp the sum is reduce-scattered (each rank its rows of the output, built in scratch), and
 * B all-gathers the output gradient: W needs every row (the rank's tokens are anywhere), so the
 * gradients of wte's shard and of wpe are whole, as without sp. */
/* F of sequences whose tokens sit at positions t0 .. t0 + T - 1 (t0 > 0: a sequence chunk). */
static int embed_forward_at(const gpt_model *m, float *act, float *scratch, float *out,
                            const int *tokens, int B, int T, int t0) {
    if (gpt_check_tokens(m, tokens, B, T, "token") < 0) return -1;
    embed_act a = embed_act_view(m, act, B, T);
    const float *wpe = m->w.wpe + (size_t)t0 * m->cfg.n_embd;
    memcpy(a.tokens, tokens, (size_t)B * T * sizeof *tokens);
    if (m->tp_size == 1) {
        embedding_forward(out, tokens, m->w.wte, wpe, B, T, m->cfg.n_embd);
        return 0;
    }
    int v0, nv;
    gpt_vocab_range(m, &v0, &nv);
    size_t N = (size_t)B * T, C = (size_t)m->cfg.n_embd;
    float *whole = m->tp_sp ? scratch : out;
    embedding_shard_forward(whole, tokens, m->w.wte, m->tp_rank == 0 ? wpe : NULL, v0, nv, B,
                            T, (int)C);
    if (!m->tp_sp) return gpt_tp_allreduce(m, out, N * C, "the embedding output");
    if (gpt_tp_collective(m, TP_REDUCE_SCATTER, whole, N * C, "the embedding output") < 0) return -1;
    memcpy(out, whole + sp_first(m, N) * C, sp_rows(m, N) * C * sizeof *out);
    return 0;
}

static int embed_forward(const gpt_model *m, int l, const gpt_tied *tied, float *act,
                         float *scratch, float *out, const float *x, const int *tokens, int B, int T) {
    return embed_forward_at(m, act, scratch, out, tokens, B, T, 0);
}

static int embed_backward_input(const gpt_model *m, int l, const gpt_tied *tied, float *act,
                                float *scratch, float *dx, const float *dout, int B, int T) {
    size_t N = (size_t)B * T, C = (size_t)m->cfg.n_embd;
    float *whole = embed_act_view(m, act, B, T).dout;
    memcpy(whole + sp_first(m, N) * C, dout, sp_rows(m, N) * C * sizeof *dout);
    if (!m->tp_sp) return 0;
    return gpt_tp_collective(m, TP_ALLGATHER, whole, N * C, "the embedding's output gradient");
}

/* W of sequences at positions t0 .. (embed_forward_at). */
static void embed_backward_weight_at(const gpt_model *m, const float *act, int B, int T, int t0) {
    embed_act a = embed_act_view(m, (float *)act, B, T);   /* read only */
    float *dwpe = m->g.wpe + (size_t)t0 * m->cfg.n_embd;
    int v0, nv;
    if (m->tp_size == 1) {
        embedding_backward_weight(m->g.wte, dwpe, a.dout, a.tokens, B, T, m->cfg.n_embd);
        return;
    }
    gpt_vocab_range(m, &v0, &nv);
    embedding_shard_backward_weight(m->g.wte, dwpe, a.dout, a.tokens, v0, nv, B, T, m->cfg.n_embd);
}

static int embed_backward_weight(const gpt_model *m, int l, const gpt_tied *tied, const float *act,
                                 float *scratch, int B, int T) {
    embed_backward_weight_at(m, act, B, T, 0);
    return 0;
}

/* Sequence chunks (gpt_chunk): chunk c of K is the (B,T/K) rows at positions c*T/K ... */
static size_t embed_chunk_act_floats(const gpt_model *m, int B, int T, const gpt_chunk *ck) {
    return embed_act_floats(m, B, T / ck->K);
}

static int embed_forward_chunk(const gpt_model *m, int l, const gpt_tied *tied, const gpt_chunk *ck,
                               float *act, float *scratch, float *out, const float *x,
                               const int *tokens, int B, int T) {
    int Tc = T / ck->K;
    return embed_forward_at(m, act, scratch, out, tokens, B, Tc, ck->c * Tc);
}

static int embed_backward_input_chunk(const gpt_model *m, int l, const gpt_tied *tied,
                                      const gpt_chunk *ck, float *act, float *scratch, float *dx,
                                      const float *dout, int B, int T) {
    return embed_backward_input(m, l, tied, act, scratch, dx, dout, B, T / ck->K);
}

static int embed_backward_weight_chunk(const gpt_model *m, int l, const gpt_tied *tied,
                                       const gpt_chunk *ck, const float *act, float *scratch,
                                       int B, int T) {
    int Tc = T / ck->K;
    embed_backward_weight_at(m, act, B, Tc, ck->c * Tc);
    return 0;
}


/* Embedding: a gather forward, a scatter-add for W; memory-bound, counted as one FLOP a value.
 * Over tp ranks: each gathers the rows of its vocabulary shard, and the (N,C) sum is reduced
 * (under sp reduce-scattered, and the output gradient all-gathered in B). */
static void embed_cost_at(const gpt_config *g, int B, int T, int tp, int sp, gpt_layer_cost *o) {
    *o = (gpt_layer_cost){ 0 };
    double N = (double)B * T, C = g->n_embd;
    double params = gpt_vocab_shard(g, tp) * C + (double)g->n_positions * C;
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

/* bf16 storage (gpt_act16.h): the token ids fp32, the output gradient bf16. */
static int embed_act16_spans(const gpt_model *m, int B, int T, gpt_act_span *s) {
    size_t C = (size_t)m->cfg.n_embd, N = (size_t)B * T;
    size_t len[] = { N, N * C };   /* tokens, dout: embed_act_view's regions */
    unsigned f[] = { ACT16_EXACT, 0 };
    return gpt_act16_spans_of(s, len, f, 2, embed_act_floats(m, B, T), "embedding");
}

/* A chunk's act at bf16: the plain regions on its (B,T/K) rows. */
static size_t embed_chunk_saved_floats(const gpt_model *m, int B, int T, const gpt_chunk *ck) {
    return embed_keep_floats(m, B, T / ck->K);
}

static int embed_chunk_act16_spans(const gpt_model *m, int B, int T, const gpt_chunk *ck, gpt_act_span *s) {
    return embed_act16_spans(m, B, T / ck->K, s);
}

static const gpt_chunk_ops embed_chunk_ops = {
    embed_chunk_act_floats, NULL, embed_forward_chunk, embed_backward_input_chunk,
    embed_backward_weight_chunk, embed_chunk_saved_floats, embed_chunk_act16_spans };

const gpt_layer_ops gpt_embed_row = {
    "embedding", GPT_IO_TOKENS, embed_act_floats, embed_forward, embed_backward_input,
    embed_backward_weight, embed_cost, embed_cost_sp, embed_keep_floats, gpt_keep_all_recompute,
    embed_keep_floats, embed_act16_spans, &embed_chunk_ops };
