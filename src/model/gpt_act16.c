/* Activations stored in bf16 at --precision bf16: sizes of a stored act, and packing between
 * a layer's fp32 work area and its stored act, over the spans a layer kind lists (the scheme:
 * gpt_act16.h). Not here: which regions a kind has, which stay fp32, when a layer packs
 * (gpt_layers.c). */
#include "model/gpt_act16.h"
#include "nn/nn_bf16.h"
#include <string.h>

static size_t stored_floats(const gpt_act_span *s) {
    return s->flags & ACT16_EXACT ? s->n : (s->n + 1) / 2;
}

size_t gpt_act16_floats(const gpt_act_span *s, int n, size_t end) {
    size_t at = 0;
    for (int i = 0; i < n && s[i].off < end; i++) at += stored_floats(&s[i]);
    return at;
}

/* Calls f on each span in [lo, hi) whose flags pass, with its place in the stored act. */
typedef void (*span_fn)(const gpt_act_span *s, float *stored, float *fp32);

static void each_span(const gpt_act_span *s, int n, float *act, float *work, size_t lo, size_t hi,
                      unsigned only, unsigned skip, span_fn f) {
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

void gpt_act16_pack(const gpt_act_span *s, int n, float *act, const float *work, size_t lo,
                    size_t hi, unsigned only) {
    each_span(s, n, act, (float *)work, lo, hi, only, 0, pack_span);   /* work only read */
}

void gpt_act16_unpack(const gpt_act_span *s, int n, float *work, const float *act, size_t lo,
                      size_t hi, unsigned skip) {
    each_span(s, n, (float *)act, work, lo, hi, 0, skip, unpack_span);   /* act only read */
}
