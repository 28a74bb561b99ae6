/* The whole model in one process: gpt_forward_backward (training), gpt_forward and
 * gpt_forward_last (inference, sampling), layer after layer over the model's private buffers.
 * Not here: the layers themselves (gpt_layers.c), storage (gpt.c), pipelines (run/). */
#include "model/gpt.h"
#include "nn/nn.h"
#include "util/pt.h"
#include <stdlib.h>
#include <string.h>

/* Grows one of the model's private buffers to at least n floats. */
static float *gpt_grow(float **buf, size_t *cap, size_t n) {
    if (*cap < n) {
        free(*buf);
        *buf = pt_falloc(n);
        *cap = n;
    }
    return *buf;
}

/* Sizes the private buffers for (B,T); returns the act base of each layer in acts[]. Layer l's
 * B part overlaps layer l+1's act (gpt_layer_act_saved_floats): the drivers here run B and W of
 * each layer back to back from the last layer down, so it is written only once layer l+1 is done.
 * Memory then holds every F part and one B part, not every B part (GPT-2 124M, B 4, T 256: 0.4 GB
 * less). */
static void gpt_fb_buffers(gpt_model *m, int B, int T, float **acts) {
    int nl = gpt_num_layers(m);
    size_t *off = pt_malloc((size_t)nl * sizeof *off), at = 0, total = 0, N = (size_t)B * T;
    for (int l = 0; l < nl; l++) {
        off[l] = at;
        size_t end = at + gpt_layer_act_floats(m, l, B, T);
        if (end > total) total = end;
        at += gpt_layer_act_saved_floats(m, l, B, T);
    }
    float *a = gpt_grow(&m->fb_act, &m->fb_act_cap, total);
    for (int l = 0; l < nl; l++) acts[l] = a + off[l];
    free(off);
    gpt_grow(&m->fb_scratch, &m->fb_scratch_cap, gpt_scratch_floats(m, B, T));
    gpt_grow(&m->fb_x, &m->fb_x_cap, 2 * N * (size_t)m->cfg.n_embd);   /* ping-pong x / dx */
}

/* Forward through every layer but the head; leaves its input in the returned buffer. */
static float *gpt_fb_forward_body(gpt_model *m, float **acts, const int *tokens, int B, int T) {
    size_t xn = (size_t)B * T * m->cfg.n_embd;
    float *x = m->fb_x, *y = m->fb_x + xn;
    if (gpt_layer_forward(m, 0, NULL, acts[0], m->fb_scratch, x, NULL, tokens, B, T) < 0) return NULL;
    for (int l = 1; l < gpt_num_layers(m) - 1; l++) {
        if (gpt_layer_forward(m, l, NULL, acts[l], m->fb_scratch, y, x, NULL, B, T) < 0) return NULL;
        float *t = x; x = y; y = t;
    }
    return x;
}

int gpt_forward_backward(gpt_model *m, const int *tokens, const int *targets, int B, int T,
                         float *loss) {
    int nl = gpt_num_layers(m);
    float **acts = pt_malloc((size_t)nl * sizeof *acts);
    int rc = -1;
    gpt_fb_buffers(m, B, T, acts);
    float *x = gpt_fb_forward_body(m, acts, tokens, B, T);
    if (!x || gpt_layer_forward(m, nl - 1, NULL, acts[nl - 1], m->fb_scratch, loss, x, targets,
                                B, T) < 0)
        goto free_acts;
    size_t xn = (size_t)B * T * m->cfg.n_embd;
    float *dx = m->fb_x, *dy = m->fb_x + xn;   /* forward buffers are free again */
    for (int l = nl - 1; l >= 0; l--) {
        if (gpt_layer_backward_input(m, l, NULL, acts[l], m->fb_scratch, l ? dx : NULL,
                                     l == nl - 1 ? NULL : dy, B, T) < 0 ||
            gpt_layer_backward_weight(m, l, NULL, acts[l], m->fb_scratch, B, T) < 0)
            goto free_acts;
        float *t = dx; dx = dy; dy = t;
    }
    rc = 0;
free_acts:
    free(acts);
    return rc;
}

int gpt_forward(gpt_model *m, float *logits, const int *tokens, int B, int T) {
    int nl = gpt_num_layers(m);
    float **acts = pt_malloc((size_t)nl * sizeof *acts);
    int rc = -1;
    gpt_fb_buffers(m, B, T, acts);
    float *x = gpt_fb_forward_body(m, acts, tokens, B, T);
    if (x) rc = gpt_layer_forward(m, nl - 1, NULL, acts[nl - 1], m->fb_scratch, logits, x, NULL, B, T);
    free(acts);
    return rc;
}

int gpt_forward_last(gpt_model *m, float *logits, const int *tokens, int B, int T) {
    int nl = gpt_num_layers(m), C = m->cfg.n_embd;
    if (m->tp_size > 1)
        return pt_seterr("gpt_forward_last: a tensor-parallel model (tp %d) has only a vocabulary "
                         "shard of the logits (sampling needs a model of tp 1)", m->tp_size);
    float **acts = pt_malloc((size_t)nl * sizeof *acts);
    gpt_fb_buffers(m, B, T, acts);
    float *x = gpt_fb_forward_body(m, acts, tokens, B, T);
    free(acts);
    if (!x) return -1;
    /* scratch (N*4C + T*T floats) easily holds last rows (B,C), their norm (B,C), mean, rstd (B) */
    float *last = m->fb_scratch, *ln = last + (size_t)B * C, *mean = ln + (size_t)B * C, *rstd = mean + B;
    for (int b = 0; b < B; b++)
        memcpy(last + (size_t)b * C, x + ((size_t)b * T + T - 1) * C, (size_t)C * sizeof *x);
    layernorm_forward(ln, mean, rstd, last, m->w.lnfw, m->w.lnfb, B, C);
    lmhead_forward_prec(m->precision, logits, ln, m->w.wte, B, C, m->cfg.vocab_size);
    return 0;
}
