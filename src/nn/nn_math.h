/* Private to src/nn: a branch-free expf the compiler can vectorise (libm's expf and tanhf are
 * scalar calls and dominated the step time in GELU and softmax). Not a general libm: inputs are
 * clamped to [-87, 88] (results stay normal, never inf or NaN for finite input); NaN in gives
 * NaN out, so a diverged run still shows a NaN loss.
 * Accuracy: a few float ulps (relative error ~2e-7) over the clamped range.
 *
 * Why the clamps are bit blends and not `x < lo ? lo : x`: gcc turns a select with a constant
 * arm back into a branch (PRE folds the arithmetic after it on the constant path), and without
 * AVX-512 masks it cannot vectorise a loop with a branch around floating-point arithmetic
 * ("control flow in loop"). A blend of bit patterns is no select to split. tools/check_vec.sh
 * holds every hot loop to this on AVX2 and AVX-512 builds. */
#ifndef PT_NN_MATH_H
#define PT_NN_MATH_H
#include <math.h>
#include <stdint.h>
#include <string.h>

/* a * b + c, as one fused multiply-add where the target has it (x86-64-v3 and up, arm64): gcc
 * vectorises fmaf there, while -std=c11 keeps it from contracting a * b + c by itself; elsewhere
 * fmaf is a libm call, so a product and a sum. */
#if defined(__FMA__) || defined(__aarch64__)
#define NN_FMA(a, b, c) fmaf((a), (b), (c))
#else
#define NN_FMA(a, b, c) ((a) * (b) + (c))
#endif

/* cond ? a : b as a blend of bits (all-ones or all-zero mask): no branch for any compiler. */
static inline float nn_blend(int cond, float a, float b) {
    int32_t ia, ib, mask = -(int32_t)(cond != 0), r;
    memcpy(&ia, &a, sizeof ia);
    memcpy(&ib, &b, sizeof ib);
    r = (ia & mask) | (ib & ~mask);
    float f;
    memcpy(&f, &r, sizeof f);
    return f;
}

/* max(x, lo) and min(x, hi) that let a NaN x through (a NaN compares false). */
static inline float nn_maxf(float x, float lo) { return nn_blend(x < lo, lo, x); }
static inline float nn_minf(float x, float hi) { return nn_blend(x > hi, hi, x); }

/* e^x = 2^n * e^r, n = round(x / ln2), |r| <= ln2/2; e^r by its degree-6 Taylor polynomial
 * (truncation < 7e-8 relative at |r| = ln2/2). 2^n comes from the bits of the rounding sum
 * itself (no float-to-int conversion, so a NaN flows through as NaN * 0 = NaN). Each step is a
 * fused multiply-add where the target has one (GELU's forward + backward 30% faster on AVX2). */
static inline float nn_expf(float in) {
    float x = nn_minf(nn_maxf(in, -87.0f), 88.0f);
    const float round_magic = 12582912.0f;          /* 1.5 * 2^23: adding it rounds to an integer */
    float t = NN_FMA(x, 1.44269504088896341f, round_magic);   /* = round_magic + n, exactly */
    float n = t - round_magic;
    float r = NN_FMA(n, -0.693145751953125f, x);    /* ln2 split hi + lo (Cody-Waite) */
    r = NN_FMA(n, -1.42860682030941723212e-6f, r);
    float p = 1.0f / 720.0f;
    p = NN_FMA(p, r, 1.0f / 120.0f);
    p = NN_FMA(p, r, 1.0f / 24.0f);
    p = NN_FMA(p, r, 1.0f / 6.0f);
    p = NN_FMA(p, r, 0.5f);
    p = NN_FMA(p, r, 1.0f);
    p = NN_FMA(p, r, 1.0f);
    /* t + 127 holds n + 127 (in [1, 254] after the clamp) in its low mantissa bits, above bits
     * that shift out: << 23 makes it the exponent field of 2^n. */
    float k = t + 127.0f;
    uint32_t bits;
    memcpy(&bits, &k, sizeof bits);
    bits <<= 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* The logistic sigmoid 1 / (1 + e^-x); absolute error ~1e-7, exact limits 0 and 1. GELU's
 * 0.5x(1 + tanh u) is x * sigmoid(2u): one exp and one division, no tanh. */
static inline float nn_sigmoidf(float x) { return 1.0f / (1.0f + nn_expf(-x)); }

/* Reductions with NN_LANES independent partial sums, so the compiler vectorises them (a plain
 * float `s += x[i]` loop must stay sequential without -ffast-math). */
#define NN_LANES 16

/* sum of x[0..n). */
static inline float nn_sum(const float *x, int n) {
    float acc[NN_LANES] = {0}, s = 0;
    int i = 0;
    for (; i + NN_LANES <= n; i += NN_LANES)   /* vec */
        for (int k = 0; k < NN_LANES; k++) acc[k] += x[i + k];
    for (; i < n; i++) s += x[i];
    for (int k = 0; k < NN_LANES; k++) s += acc[k];
    return s;
}

/* sum of a[i] * b[i]. */
static inline float nn_dot(const float *a, const float *b, int n) {
    float acc[NN_LANES] = {0}, s = 0;
    int i = 0;
    for (; i + NN_LANES <= n; i += NN_LANES)   /* vec */
        for (int k = 0; k < NN_LANES; k++) acc[k] += a[i + k] * b[i + k];
    for (; i < n; i++) s += a[i] * b[i];
    for (int k = 0; k < NN_LANES; k++) s += acc[k];
    return s;
}

/* sum of (a[i] * b[i]) * (c[i] - shift): the products first, so a layer norm's sum of
 * g * (x - mean), g = dout * w, needs no g stored; no cancellation of dot(g,x) - mean*sum(g). */
static inline float nn_dot3_shift(const float *a, const float *b, const float *c, float shift, int n) {
    float acc[NN_LANES] = {0}, s = 0;
    int i = 0;
    for (; i + NN_LANES <= n; i += NN_LANES)   /* vec */
        for (int k = 0; k < NN_LANES; k++) acc[k] += (a[i + k] * b[i + k]) * (c[i + k] - shift);
    for (; i < n; i++) s += (a[i] * b[i]) * (c[i] - shift);
    for (int k = 0; k < NN_LANES; k++) s += acc[k];
    return s;
}

/* A float's bits as an int that orders like the float (negative floats have their magnitude bits
 * flipped), and back. Max over these keys is an integer max, which vectorises on every ISA; a
 * float max with NaN semantics does not (gcc may not reorder a NaN-honouring select chain). */
static inline int32_t nn_order_key(float f) {
    int32_t b;
    memcpy(&b, &f, sizeof b);
    int32_t neg = (int32_t)((uint32_t)b >> 31);
    return b ^ (-neg & 0x7fffffff);
}

static inline float nn_order_unkey(int32_t k) {
    int32_t neg = (int32_t)((uint32_t)k >> 31), b = k ^ (-neg & 0x7fffffff);
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

/* max of x[0..n), n >= 1. A NaN with the sign bit clear is the maximum (it then turns every
 * softmax value into NaN, as it should). */
static inline float nn_max(const float *x, int n) {
    int32_t m = nn_order_key(x[0]);
    for (int i = 1; i < n; i++) {   /* vec */
        int32_t k = nn_order_key(x[i]);
        m = k > m ? k : m;
    }
    return nn_order_unkey(m);
}

/* out[i] = e^(x[i] - shift) for i < n (out may alias x); returns their sum. */
static inline float nn_exp_shift_sum(float *out, const float *x, float shift, int n) {
    for (int i = 0; i < n; i++) out[i] = nn_expf(x[i] - shift);   /* vec */
    return nn_sum(out, n);
}

#endif
