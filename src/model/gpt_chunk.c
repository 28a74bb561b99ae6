/* Sequence chunks (gpt.h, "sequence chunks"): the checks and the dispatch of a layer's F, B and W
 * on one chunk of a microbatch (its kind's chunk row, or for a row-wise kind its plain row on
 * the chunk's rows), and gpt_forward_backward_chunks, the one-process reference of the order.
 * Not here: the kinds' chunk paths (gpt_embed.c, gpt_block.c), schedules over chunks (sched/),
 * the runtime's buffers (run/). At --precision bf16 a chunk's act is stored as a plain act is
 * (gpt_act16.h): the layer runs on the fp32 work area, its F part packed after F, its B part
 * after B, unpacked before B and W. */
#include "model/gpt_layer_int.h"
#include "model/gpt_act16.h"
#include "util/pt.h"
#include <stdlib.h>
#include <string.h>

int gpt_chunk_check(const gpt_model *m, int B, int T, int K) {
    if (K < 1 || T % K)
        return pt_seterr("--seq-chunks %d: must be >= 1 and divide the sequence length %d "
                         "(pick a divisor of %d)", K, T, T);
    if (K == 1) return 0;
    if (K > 1 && m->tp_sp && m->tp_size > 1)
        return pt_seterr("--seq-chunks %d: not with sequence parallelism (--sp): drop one", K);
    if (K > 1 && m->tp_overlap && m->tp_size > 1)
        return pt_seterr("--seq-chunks %d: not with --tp-overlap: drop one", K);
    return 0;
}

/* The checks of every chunk call: sizes, the chunk, the model's settings. */
static int chunk_args_ok(const gpt_model *m, int layer, const gpt_chunk *ck, int B, int T,
                         const char *what, int need_kv) {
    if (T < 1 || T > m->cfg.n_positions || B < 1)
        return pt_seterr("layer %d %s: sequence length %d must be in [1, n_positions=%d] and "
                         "batch %d >= 1", layer, what, T, m->cfg.n_positions, B);
    if (!ck || ck->K < 2 || ck->c < 0 || ck->c >= ck->K)
        return pt_seterr("layer %d %s: chunk %d of %d out of range (K >= 2: one chunk is the "
                         "plain gpt_layer_* call)", layer, what, ck ? ck->c : -1, ck ? ck->K : 0);
    if (gpt_chunk_check(m, B, T, ck->K) < 0) return pt_adderr("layer %d %s: ", layer, what);
    if (need_kv && gpt_layer_kv_floats(m, layer, B, T) && (!ck->kv || !ck->dkv))
        return pt_seterr("layer %d %s: chunk %d of %d has no kept keys and values (kv, dkv)",
                         layer, what, ck->c, ck->K);
    return 0;
}

/* A chunk's fp32 act: its floats, its F part, and (bf16 storage) its regions; *n_spans -1 when
 * its kind lists none for chunks (then it stays fp32). */
typedef struct {
    size_t n, saved;
    int n_spans;
    gpt_act_span s[GPT_ACT16_MAX_SPANS];
} chunk_act32;

static void chunk_act32_of(const gpt_model *m, int layer, int B, int T, const gpt_chunk *ck, chunk_act32 *a) {
    const gpt_layer_ops *k = gpt_layer_ops_of(m, layer);
    const gpt_chunk_ops *c = k->chunk;
    int Tc = T / ck->K;
    a->n = c ? c->act_floats(m, B, T, ck) : k->act_floats(m, B, Tc);
    a->saved = c ? (c->saved_floats ? c->saved_floats(m, B, T, ck) : a->n) : k->saved_floats(m, B, Tc);
    a->n_spans = -1;
    if (m->precision == NN_BF16 && (c ? c->act16_spans != NULL : k->act16_spans != NULL))
        a->n_spans = c ? c->act16_spans(m, B, T, ck, a->s) : k->act16_spans(m, B, Tc, a->s);
}

/* The work area layer runs chunk ck in (bf16 storage), or NULL: it runs on its act. */
static float *chunk_work(const gpt_model *m, const chunk_act32 *a, float *scratch, int B, int T) {
    return a->n_spans >= 0 ? gpt_act16_work(m, scratch, B, T, a->n) : NULL;
}

size_t gpt_scratch_floats_chunks(const gpt_model *m, int B, int T, int K) {
    if (K <= 1 || m->precision != NN_BF16) return gpt_scratch_floats(m, B, T);
    size_t work = 0;
    for (int l = 0; l < gpt_num_layers(m); l++) {
        gpt_chunk ck = { 0, K, NULL, NULL };
        chunk_act32 a;
        chunk_act32_of(m, l, B, T, &ck, &a);
        if (a.n_spans >= 0 && gpt_act16_fits(m, B, T, a.n) && a.n > work) work = a.n;
    }
    return gpt_kinds_scratch_floats(m, B, T) + work;
}

size_t gpt_layer_chunk_act_floats(const gpt_model *m, int layer, int B, int T, int c, int K) {
    gpt_chunk ck = { c, K, NULL, NULL };
    chunk_act32 a;
    chunk_act32_of(m, layer, B, T, &ck, &a);
    return a.n_spans >= 0 && gpt_act16_fits(m, B, T, a.n) ? gpt_act16_floats(a.s, a.n_spans, a.n) : a.n;
}

size_t gpt_layer_kv_floats(const gpt_model *m, int layer, int B, int T) {
    const gpt_layer_ops *k = gpt_layer_ops_of(m, layer);
    return k->chunk && k->chunk->kv_floats ? k->chunk->kv_floats(m, B, T) : 0;
}

int gpt_layer_forward_chunk(const gpt_model *m, int layer, const gpt_tied *tied, const gpt_chunk *ck,
                            float *act, float *scratch, float *out, const float *x,
                            const int *tokens, int B, int T) {
    if (chunk_args_ok(m, layer, ck, B, T, "forward", 1) < 0) return -1;
    const gpt_layer_ops *k = gpt_layer_ops_of(m, layer);
    chunk_act32 a;
    chunk_act32_of(m, layer, B, T, ck, &a);
    float *work = chunk_work(m, &a, scratch, B, T), *run = work ? work : act;
    int rc = k->chunk ? k->chunk->forward(m, layer, tied, ck, run, scratch, out, x, tokens, B, T)
                      : k->forward(m, layer, tied, run, scratch, out, x, tokens, B, T / ck->K);
    if (rc < 0) return pt_adderr("layer %d forward of chunk %d/%d: ", layer, ck->c, ck->K);
    if (work) gpt_act16_pack(a.s, a.n_spans, act, work, 0, a.saved, 0);
    return 0;
}

int gpt_layer_backward_input_chunk(const gpt_model *m, int layer, const gpt_tied *tied,
                                   const gpt_chunk *ck, float *act, float *scratch, float *dx,
                                   const float *dout, int B, int T) {
    if (chunk_args_ok(m, layer, ck, B, T, "backward", 1) < 0) return -1;
    const gpt_layer_ops *k = gpt_layer_ops_of(m, layer);
    chunk_act32 a;
    chunk_act32_of(m, layer, B, T, ck, &a);
    float *work = chunk_work(m, &a, scratch, B, T), *run = work ? work : act;
    if (work) gpt_act16_unpack(a.s, a.n_spans, work, act, 0, a.saved, ACT16_NO_B);
    int rc = k->chunk ? k->chunk->backward_input(m, layer, tied, ck, run, scratch, dx, dout, B, T)
                      : k->backward_input(m, layer, tied, run, scratch, dx, dout, B, T / ck->K);
    if (rc < 0) return pt_adderr("layer %d backward of chunk %d/%d: ", layer, ck->c, ck->K);
    if (work) {
        gpt_act16_pack(a.s, a.n_spans, act, work, a.saved, a.n, 0);
        gpt_act16_pack(a.s, a.n_spans, act, work, 0, a.saved, ACT16_B_WRITES);
    }
    return 0;
}

int gpt_layer_backward_weight_chunk(const gpt_model *m, int layer, const gpt_tied *tied,
                                    const gpt_chunk *ck, const float *act, float *scratch, int B,
                                    int T) {
    if (chunk_args_ok(m, layer, ck, B, T, "weight backward", 0) < 0) return -1;
    const gpt_layer_ops *k = gpt_layer_ops_of(m, layer);
    chunk_act32 a;
    chunk_act32_of(m, layer, B, T, ck, &a);
    float *work = chunk_work(m, &a, scratch, B, T);
    const float *run = work ? work : act;
    if (work) gpt_act16_unpack(a.s, a.n_spans, work, act, 0, a.n, ACT16_NO_W);
    return k->chunk ? k->chunk->backward_weight(m, layer, tied, ck, run, scratch, B, T)
                    : k->backward_weight(m, layer, tied, run, scratch, B, T / ck->K);
}

/* ---- one process ------------------------------------------------------------------------- */
/* The buffers of gpt_forward_backward_chunks: an act per (layer, chunk), kv and dkv per layer,
 * the scratch, two (B,Tc,C) streams, a chunk's tokens and targets. One allocation each. */
typedef struct {
    float **act, **kv, **dkv, *scratch, *x[2];
    int *tok, *tgt;
} chunk_bufs;

static void chunk_bufs_init(chunk_bufs *u, const gpt_model *m, int B, int T, int K) {
    int nl = gpt_num_layers(m);
    size_t N = (size_t)B * T;
    u->act = pt_malloc((size_t)nl * K * sizeof *u->act);
    u->kv = pt_malloc((size_t)nl * 2 * sizeof *u->kv);
    u->dkv = u->kv + nl;
    for (int l = 0; l < nl; l++) {
        for (int c = 0; c < K; c++)
            u->act[l * K + c] = pt_falloc(gpt_layer_chunk_act_floats(m, l, B, T, c, K));
        size_t kvn = gpt_layer_kv_floats(m, l, B, T);
        u->kv[l] = kvn ? pt_falloc(kvn) : NULL;
        u->dkv[l] = kvn ? pt_falloc(kvn) : NULL;
        if (kvn) memset(u->dkv[l], 0, kvn * sizeof(float));
    }
    u->scratch = pt_falloc(gpt_scratch_floats_chunks(m, B, T, K));
    u->x[0] = pt_falloc(2 * N / K * m->cfg.n_embd);
    u->x[1] = u->x[0] + N / K * m->cfg.n_embd;
    u->tok = pt_malloc(2 * N / K * sizeof *u->tok);
    u->tgt = u->tok + N / K;
}

static void chunk_bufs_free(chunk_bufs *u, const gpt_model *m, int K) {
    for (int l = 0; l < gpt_num_layers(m); l++) {
        for (int c = 0; c < K; c++) free(u->act[l * K + c]);
        free(u->kv[l]);
        free(u->dkv[l]);
    }
    free(u->act);
    free(u->kv);
    free(u->scratch);
    free(u->x[0]);
    free(u->tok);
}

/* Columns [c*Tc, (c+1)*Tc) of each row of a (B,T) array, into out (B,Tc). */
static void chunk_cols(int *out, const int *in, int B, int T, int c, int Tc) {
    for (int b = 0; b < B; b++) memcpy(out + (size_t)b * Tc, in + (size_t)b * T + (size_t)c * Tc, (size_t)Tc * sizeof *in);
}

/* F of chunk c through every layer; adds its loss to *loss. */
static int chunk_forward(gpt_model *m, chunk_bufs *u, const int *tokens, const int *targets,
                         int B, int T, int c, int K, float *loss) {
    int nl = gpt_num_layers(m), Tc = T / K;
    float l_c = 0, *x = u->x[0], *y = u->x[1];
    chunk_cols(u->tok, tokens, B, T, c, Tc);
    chunk_cols(u->tgt, targets, B, T, c, Tc);
    for (int l = 0; l < nl; l++) {
        gpt_chunk ck = { c, K, u->kv[l], u->dkv[l] };
        const int *io = l == 0 ? u->tok : l == nl - 1 ? u->tgt : NULL;
        if (gpt_layer_forward_chunk(m, l, NULL, &ck, u->act[l * K + c], u->scratch,
                                    l == nl - 1 ? &l_c : y, l ? x : NULL, io, B, T) < 0) return -1;
        float *t = x; x = y; y = t;
    }
    *loss += l_c / K;
    return 0;
}

/* B and W of chunk c through every layer, the last first, the head's gradient 1/K. */
static int chunk_backward(gpt_model *m, chunk_bufs *u, int B, int T, int c, int K) {
    int nl = gpt_num_layers(m);
    float *dx = u->x[0], *dy = u->x[1], dloss = 1.0f / K;
    for (int l = nl - 1; l >= 0; l--) {
        gpt_chunk ck = { c, K, u->kv[l], u->dkv[l] };
        if (gpt_layer_backward_input_chunk(m, l, NULL, &ck, u->act[l * K + c], u->scratch,
                                           l ? dx : NULL, l == nl - 1 ? &dloss : dy, B, T) < 0 ||
            gpt_layer_backward_weight_chunk(m, l, NULL, &ck, u->act[l * K + c], u->scratch, B, T) < 0)
            return -1;
        float *t = dx; dx = dy; dy = t;
    }
    return 0;
}

int gpt_forward_backward_chunks(gpt_model *m, const int *tokens, const int *targets, int B, int T,
                                int K, float *loss) {
    if (gpt_chunk_check(m, B, T, K) < 0) return -1;
    if (K == 1) return gpt_forward_backward(m, tokens, targets, B, T, loss);
    chunk_bufs u;
    int rc = -1;
    chunk_bufs_init(&u, m, B, T, K);
    *loss = 0;
    for (int c = 0; c < K; c++)
        if (chunk_forward(m, &u, tokens, targets, B, T, c, K, loss) < 0) goto free_bufs;
    for (int c = K - 1; c >= 0; c--)
        if (chunk_backward(m, &u, B, T, c, K) < 0) goto free_bufs;
    rc = 0;
free_bufs:
    chunk_bufs_free(&u, m, K);
    return rc;
}
