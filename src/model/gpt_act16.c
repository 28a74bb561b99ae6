/* Activations stored in bf16 at --precision bf16: sizes, and packing between a layer's fp32
 * work area and its stored act (the scheme: gpt_act16.h). Not here: which regions a kind has
 * and which stay fp32 (gpt_layers.c, gpt_layer_act_spans). */
#include "model/gpt_act16.h"
#include "nn/nn_bf16.h"
#include <string.h>

static size_t stored_floats(const gpt_act_span *s) {
    return s->flags & ACT16_EXACT ? s->n : (s->n + 1) / 2;
}

static size_t act32_floats(const gpt_model *m, int layer, int B, int T) {
    return gpt_layer_ops_of(m, layer)->act_floats(m, B, T);
}

size_t gpt_act16_work_floats(const gpt_model *m, int B, int T) {
    if (m->precision != NN_BF16) return 0;
    gpt_act_span s[GPT_ACT16_MAX_SPANS];
    for (int l = 0; l < gpt_num_layers(m); l++)   /* every block's act is the same size */
        if (gpt_layer_kind_of(m, l) == GPT_LAYER_BLOCK && gpt_layer_act_spans(m, l, B, T, s) > 0)
            return act32_floats(m, l, B, T);
    return 0;
}

int gpt_act16_on(const gpt_model *m, int layer, int B, int T) {
    gpt_act_span s[GPT_ACT16_MAX_SPANS];
    return m->precision == NN_BF16 && gpt_layer_act_spans(m, layer, B, T, s) > 0 &&
           act32_floats(m, layer, B, T) <= gpt_act16_work_floats(m, B, T);
}

size_t gpt_act16_floats(const gpt_model *m, int layer, int B, int T, size_t end) {
    gpt_act_span s[GPT_ACT16_MAX_SPANS];
    int n = gpt_layer_act_spans(m, layer, B, T, s);
    size_t at = 0;
    for (int i = 0; i < n && s[i].off < end; i++) at += stored_floats(&s[i]);
    return at;
}

/* Calls f on each span in [lo, hi) whose flags pass, with its place in the stored act. */
typedef void (*span_fn)(const gpt_act_span *s, float *stored, float *fp32);

static void each_span(const gpt_model *m, int layer, int B, int T, float *act, float *work,
                      size_t lo, size_t hi, unsigned only, unsigned skip, span_fn f) {
    gpt_act_span s[GPT_ACT16_MAX_SPANS];
    int n = gpt_layer_act_spans(m, layer, B, T, s);
    size_t at = 0;
    for (int i = 0; i < n; at += stored_floats(&s[i]), i++)
        if (s[i].off >= lo && s[i].off < hi && (!only || (s[i].flags & only)) && !(s[i].flags & skip))
            f(&s[i], act + at, work + s[i].off);
}

static void pack_span(const gpt_act_span *s, float *stored, float *fp32) {
    if (s->flags & ACT16_EXACT) memmove(stored, fp32, s->n * sizeof *fp32);
    else nn_bf16_from_f32((uint16_t *)stored, fp32, s->n);
}

static void unpack_span(const gpt_act_span *s, float *stored, float *fp32) {
    if (s->flags & ACT16_EXACT) memmove(fp32, stored, s->n * sizeof *fp32);
    else nn_bf16_to_f32(fp32, (const uint16_t *)stored, s->n);
}

void gpt_act16_pack(const gpt_model *m, int layer, int B, int T, float *act, const float *work,
                    size_t lo, size_t hi, unsigned only) {
    each_span(m, layer, B, T, act, (float *)work, lo, hi, only, 0, pack_span);   /* work only read */
}

void gpt_act16_unpack(const gpt_model *m, int layer, int B, int T, float *work, const float *act,
                      size_t lo, size_t hi, unsigned skip) {
    each_span(m, layer, B, T, (float *)act, work, lo, hi, 0, skip, unpack_span);   /* act only read */
}
