/* Private to src/model: activations stored in bf16 at --precision bf16 (gpt_act16.c). A
 * layer kind lists the regions of its fp32 act in order (its row's act16_spans); a layer's stored act
 * is then each region in turn, fp32 as it is (ACT16_EXACT) or as bf16 in half the floats
 * (rounded up). The layer itself runs on an fp32 copy in the scratch (its work area), packed
 * into the stored act after F and B and unpacked before B and W, so the layers' code does not
 * know: storage changes, the arithmetic does not (but for the rounding of what is stored).
 * The kinds list the spans (gpt_layer_ops.act16_spans), gpt_layers.c decides when to pack; here are
 * the sizes and the packing over a list.
 * Exact regions come first in a kind's list where its keep prefix is (gpt_layer_keep_floats:
 * a block's x and res2), so that prefix reads the same in both forms. Not for other modules. */
#ifndef PT_GPT_ACT16_H
#define PT_GPT_ACT16_H
#include <stddef.h>

enum {
    ACT16_EXACT = 1u,       /* stored fp32: the residual stream, statistics, token ids, probs */
    ACT16_NO_B = 2u,        /* B does not read it (not unpacked before B) */
    ACT16_NO_W = 4u,        /* W does not read it (not unpacked before W) */
    ACT16_B_WRITES = 8u,    /* in the F part, but B overwrites it (packed again after B) */
};

typedef struct gpt_act_span {   /* named: a layer-kind row lists them (gpt.h) */
    size_t off, n;          /* floats of the fp32 act */
    unsigned flags;         /* ACT16_* */
} gpt_act_span;

#define GPT_ACT16_MAX_SPANS 24

/* Stored floats of the fp32 act's floats [0, end) (end at a span boundary), over the n spans. */
size_t gpt_act16_floats(const gpt_act_span *s, int n, size_t end);
/* The spans in [lo, hi) of the fp32 act (whole spans) flagged `only` (0: all of them), from
 * work (fp32) into act (stored). */
void gpt_act16_pack(const gpt_act_span *s, int n, float *act, const float *work, size_t lo,
                    size_t hi, unsigned only);
/* The spans in [lo, hi) from act (stored) into work (fp32), but those flagged `skip`. */
void gpt_act16_unpack(const gpt_act_span *s, int n, float *work, const float *act, size_t lo,
                      size_t hi, unsigned skip);

#endif
