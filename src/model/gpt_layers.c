/* The layer-kind registry and the dispatch over it: one row per kind (gpt_layer_ops; the
 * built-in embedding, block and head rows live in gpt_embed.c, gpt_block.c, gpt_head.c, and a
 * kind added at run time is one gpt_kind_register call), and gpt_layer_forward / _backward_input
 * / _backward_weight / _recompute and the act sizes of a layer, which check their arguments and
 * call the layer's row. Not here: any kind's computation, the layer sequence (gpt_seq.c), the
 * parameter table (gpt.c). */
#include "model/gpt_layer_int.h"
#include "model/gpt_act16.h"
#include "nn/nn.h"
#include "util/pt.h"
#include <assert.h>
#include <stdio.h>
#include <string.h>

/* The fp32 act's size and F part (a layer stores them so but at bf16: gpt_act16.h). */
static size_t act32_floats(const gpt_model *m, int layer, int B, int T) {
    return gpt_layer_ops_of(m, layer)->act_floats(m, B, T);
}

static size_t saved32_floats(const gpt_model *m, int layer, int B, int T) {
    return gpt_layer_ops_of(m, layer)->saved_floats(m, B, T);
}

/* At bf16 the scratch carries a work area of one block's fp32 act (0 floats at fp32), and a
 * layer stores its act in bf16 when its kind lists its regions and its fp32 act fits the work
 * area (a head whose logits outgrow a block's act stays fp32). */
static size_t act16_work_floats(const gpt_model *m, int B, int T) {
    return m->precision == NN_BF16 ? gpt_kind_ops(GPT_LAYER_BLOCK)->act_floats(m, B, T) : 0;
}

static size_t kinds_scratch_floats(const gpt_model *m, int B, int T);

int gpt_act16_fits(const gpt_model *m, int B, int T, size_t act32) {
    return m->precision == NN_BF16 && act32 <= act16_work_floats(m, B, T);
}

float *gpt_act16_work(const gpt_model *m, float *scratch, int B, int T, size_t act32) {
    return gpt_act16_fits(m, B, T, act32) ? scratch + kinds_scratch_floats(m, B, T) : NULL;
}

static int act16_on(const gpt_model *m, int layer, int B, int T) {
    return m->precision == NN_BF16 && gpt_layer_ops_of(m, layer)->act16_spans &&
           act32_floats(m, layer, B, T) <= act16_work_floats(m, B, T);
}

static int act_spans(const gpt_model *m, int layer, int B, int T, gpt_act_span *s) {
    return gpt_layer_ops_of(m, layer)->act16_spans(m, B, T, s);
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
size_t gpt_kinds_scratch_floats(const gpt_model *m, int B, int T) { return kinds_scratch_floats(m, B, T); }

size_t gpt_scratch_floats(const gpt_model *m, int B, int T) {
    return kinds_scratch_floats(m, B, T) + act16_work_floats(m, B, T);
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

/* ---- dispatch -----------------------------------------------------------------------------
 * At bf16 a layer whose act is stored so (act16_on) runs on the fp32 work area after the
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
    float *work = k->recompute == gpt_keep_all_recompute ? NULL : act16_work(m, layer, scratch, B, T);
    if (work) memcpy(work, act, k->keep_floats(m, B, T) * sizeof *work);   /* stored fp32 as is */
    if (k->recompute(m, layer, tied, work ? work : act, scratch, B, T) < 0)
        return pt_adderr("layer %d recompute: ", layer);
    if (work) act16_pack(m, layer, B, T, act, work, 0, saved32_floats(m, layer, B, T), 0);
    return 0;
}
