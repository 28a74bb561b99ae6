/* The layer-kind registry and the dispatch over it: one row per kind (gpt_layer_ops; the
 * built-in embedding, block and head rows live in gpt_embed.c, gpt_block.c, gpt_head.c, and a
 * kind added at run time is one gpt_kind_register call), and gpt_layer_forward / _backward_input
 * / _backward_weight / _recompute and the act sizes of a layer, which check their arguments and
 * call the layer's row. Not here: any kind's computation, the layer sequence (gpt_seq.c), the
 * parameter table (gpt.c). */
#include "model/gpt_layer_int.h"
#include "nn/nn.h"
#include "util/pt.h"
#include <assert.h>
#include <stdio.h>

size_t gpt_layer_act_floats(const gpt_model *m, int layer, int B, int T) {
    return gpt_layer_ops_of(m, layer)->act_floats(m, B, T);
}

size_t gpt_layer_act_saved_floats(const gpt_model *m, int layer, int B, int T) {
    return gpt_layer_ops_of(m, layer)->saved_floats(m, B, T);
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
size_t gpt_scratch_floats(const gpt_model *m, int B, int T) {
    size_t N = (size_t)B * T, block = N * block_scratch_width(m) + ATTENTION_SCRATCH_FLOATS(T);
    size_t head = m->tp_size > 1 ? N * ((size_t)m->tp_size + 3) : 0;
    return block > head ? block : head;
}

/* ---- the table ---------------------------------------------------------------------------- */
/* The registry: the built-in rows, then those gpt_kind_register adds. */
static const gpt_layer_ops *layer_kinds[GPT_MAX_KINDS] = {
    [GPT_LAYER_EMBED] = &gpt_embed_row, [GPT_LAYER_BLOCK] = &gpt_block_row, [GPT_LAYER_HEAD] = &gpt_head_row,
};
static int n_layer_kinds = GPT_N_LAYER_KINDS;

int gpt_kind_register(const gpt_layer_ops *ops) {
    if (n_layer_kinds == GPT_MAX_KINDS)
        return pt_seterr("layer kind '%s': the registry holds %d kinds already (GPT_MAX_KINDS)",
                         ops->name, GPT_MAX_KINDS);
    layer_kinds[n_layer_kinds] = ops;
    return n_layer_kinds++;
}

int gpt_kind_count(void) { return n_layer_kinds; }

const gpt_layer_ops *gpt_kind_ops(gpt_layer_kind kind) {
    assert((int)kind >= 0 && (int)kind < n_layer_kinds && "gpt_kind_ops: kind not registered");
    return layer_kinds[kind];
}

void gpt_kind_cost(gpt_layer_kind kind, const gpt_config *cfg, int B, int T, int tp, int sp,
                   gpt_layer_cost *out) {
    const gpt_layer_ops *k = gpt_kind_ops(kind);
    (sp ? k->cost_sp : k->cost)(cfg, B, T, tp, out);
}

const gpt_layer_ops *gpt_layer_ops_of(const gpt_model *m, int layer) {
    return gpt_kind_ops(gpt_layer_kind_of(m, layer));
}

/* ---- dispatch ----------------------------------------------------------------------------- */
int gpt_layer_forward(const gpt_model *m, int layer, const gpt_tied *tied, float *act,
                      float *scratch, float *out, const float *x, const int *tokens, int B, int T) {
    if (T < 1 || T > m->cfg.n_positions || B < 1)
        return pt_seterr("layer %d: sequence length %d must be in [1, n_positions=%d] and batch %d >= 1",
                         layer, T, m->cfg.n_positions, B);
    if (m->tp_sp && gpt_sp_check_rows(B, T, m->tp_size) < 0)
        return pt_adderr("layer %d forward: ", layer);
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
    if (m->tp_sp && gpt_sp_check_rows(B, T, m->tp_size) < 0)
        return pt_adderr("layer %d recompute: ", layer);
    if (gpt_layer_ops_of(m, layer)->recompute(m, layer, tied, act, scratch, B, T) < 0)
        return pt_adderr("layer %d recompute: ", layer);
    return 0;
}
