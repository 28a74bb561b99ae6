/* 16-bit floats on the wire: scalar conversions between fp32 and bf16 / IEEE fp16, and loops over
 * arrays. Round to nearest, ties to even; NaN stays NaN (quietened, sign and the payload's top
 * bits kept, as the x86 F16C instructions do), infinities stay infinities; fp16 has subnormals
 * (down to 2^-24) and overflows to infinity from 65520 on (the halfway point above 65504).
 * bf16 keeps fp32's exponent range: only the 16 low significand bits go (lossy: about 3
 * significant digits; fp16: about 3.3, over a range of 6e-8 .. 65504).
 * Not here: compute in 16 bits (the kernels stay fp32), the wire format's choice (run/). */
#ifndef PT_UTIL_HALF_H
#define PT_UTIL_HALF_H
#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t pt_f32_bits(float f) { uint32_t u; memcpy(&u, &f, sizeof u); return u; }
static inline float pt_bits_f32(uint32_t u) { float f; memcpy(&f, &u, sizeof f); return f; }

/* fp32 -> bf16, round to nearest even; a NaN becomes a quiet NaN with its sign. */
static inline uint16_t pt_f32_to_bf16(float f) {
    uint32_t u = pt_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);   /* carries into the exponent: up to inf, as it should */
    return (uint16_t)(u >> 16);
}

static inline float pt_bf16_to_f32(uint16_t h) { return pt_bits_f32((uint32_t)h << 16); }

/* Rounds m / 2^shift (1 <= shift <= 24) to nearest even. */
static inline uint32_t pt_half_round_shift(uint32_t m, int shift) {
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    return q + (rem > half || (rem == half && (q & 1u)));
}

/* fp32 -> IEEE fp16, round to nearest even, subnormals kept, overflow to inf. */
static inline uint16_t pt_f32_to_f16(float f) {
    uint32_t x = pt_f32_bits(f), sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));   /* NaN */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);   /* >= 65520 (or inf): inf */
    if (ax >= 0x38800000u) {                                     /* >= 2^-14: normal */
        uint32_t r = ax - 0x38000000u;                           /* exponent bias 127 -> 15 */
        r += 0xfffu + ((r >> 13) & 1u);                          /* may carry to the next binade */
        return (uint16_t)(sign | (r >> 13));
    }
    if (ax <= 0x33000000u) return (uint16_t)sign;                /* <= 2^-25: ties to 0 */
    /* subnormal: the value in units of 2^-24, from the 24-bit significand (a carry to 0x400 is
     * the smallest normal, which its encoding already is) */
    uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
    return (uint16_t)(sign | pt_half_round_shift(m, (int)(126 - e)));
}

/* IEEE fp16 -> fp32 (exact; a NaN comes back quiet, as F16C's vcvtph2ps gives it). */
static inline float pt_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return pt_bits_f32(sign | 0x7f800000u | (m << 13) | (m ? 0x400000u : 0));
    if (e) return pt_bits_f32(sign | ((e + 112) << 23) | (m << 13));
    return pt_bits_f32(sign | pt_f32_bits((float)m * 0x1p-24f));   /* zero or subnormal: exact */
}

/* The wire formats (--wire): fp32 (as computed), bf16, fp16. */
typedef enum { PT_WIRE_F32 = 0, PT_WIRE_BF16 = 1, PT_WIRE_F16 = 2 } pt_wire;

/* "fp32", "bf16", "fp16" (the --wire names); "fp32" for any other value. */
static inline const char *pt_wire_name(int w) {
    return w == PT_WIRE_BF16 ? "bf16" : w == PT_WIRE_F16 ? "fp16" : "fp32";
}

/* The format named s (pt_wire_name's names) into *w: 0, or -1 for any other name. */
static inline int pt_wire_parse(const char *s, pt_wire *w) {
    for (int k = PT_WIRE_F32; k <= PT_WIRE_F16; k++)
        if (!strcmp(s, pt_wire_name(k))) {
            *w = (pt_wire)k;
            return 0;
        }
    return -1;
}

/* Bytes per element on the wire: 4, 2, 2. */
static inline size_t pt_wire_bytes(pt_wire w) { return w == PT_WIRE_F32 ? 4 : 2; }

/* out[i] = x[i] in the 16-bit format w (bf16 or fp16), n elements. */
static inline void pt_wire_pack(pt_wire w, uint16_t *out, const float *x, size_t n) {
    if (w == PT_WIRE_BF16)
        for (size_t i = 0; i < n; i++) out[i] = pt_f32_to_bf16(x[i]);
    else
        for (size_t i = 0; i < n; i++) out[i] = pt_f32_to_f16(x[i]);
}

/* out[i] = fp32 of the 16-bit x[i] in format w (bf16 or fp16), n elements. */
static inline void pt_wire_unpack(pt_wire w, float *out, const uint16_t *x, size_t n) {
    if (w == PT_WIRE_BF16)
        for (size_t i = 0; i < n; i++) out[i] = pt_bf16_to_f32(x[i]);
    else
        for (size_t i = 0; i < n; i++) out[i] = pt_f16_to_f32(x[i]);
}

#endif
