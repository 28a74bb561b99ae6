/* Private to src/nn: a branch-free expf the compiler can vectorise (libm's expf and tanhf are
 * scalar calls and dominated the step time in GELU and softmax). Not a general libm: inputs are
 * clamped to [-87, 88] (results stay normal, never inf or NaN for finite input); NaN in gives
 * NaN out, so a diverged run still shows a NaN loss.
 * Accuracy: a few float ulps (relative error ~2e-7) over the clamped range. */
#ifndef PT_NN_MATH_H
#define PT_NN_MATH_H
#include <stdint.h>
#include <string.h>

/* e^x = 2^n * e^r, n = round(x / ln2), |r| <= ln2/2; e^r by its degree-6 Taylor polynomial
 * (truncation < 7e-8 relative at |r| = ln2/2). */
static inline float nn_expf(float in) {
    float x = in < -87.0f ? -87.0f : in > 88.0f ? 88.0f : in;
    x = x == x ? x : 0.0f;                          /* NaN: compute on 0 (no undefined int cast) */
    const float round_magic = 12582912.0f;          /* 1.5 * 2^23: adding it rounds to an integer */
    float n = (x * 1.44269504088896341f + round_magic) - round_magic;
    float r = x - n * 0.693145751953125f;           /* ln2 split hi + lo (Cody-Waite) */
    r = r - n * 1.42860682030941723212e-6f;
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    int32_t bits = ((int32_t)n + 127) << 23;        /* 2^n, n in [-126, 127] after the clamp */
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return in == in ? p * scale : in;
}

/* tanh(x) = 1 - 2 / (1 + e^(2x)); absolute error ~1e-7, exact limits +-1. */
static inline float nn_tanhf(float x) { return 1.0f - 2.0f / (1.0f + nn_expf(2.0f * x)); }

/* Reductions with NN_LANES independent partial sums, so the compiler vectorises them (a plain
 * float `s += x[i]` loop must stay sequential without -ffast-math). */
#define NN_LANES 16

/* sum of x[0..n). */
static inline float nn_sum(const float *x, int n) {
    float acc[NN_LANES] = {0}, s = 0;
    int i = 0;
    for (; i + NN_LANES <= n; i += NN_LANES)
        for (int k = 0; k < NN_LANES; k++) acc[k] += x[i + k];
    for (; i < n; i++) s += x[i];
    for (int k = 0; k < NN_LANES; k++) s += acc[k];
    return s;
}

/* sum of a[i] * b[i]. */
static inline float nn_dot(const float *a, const float *b, int n) {
    float acc[NN_LANES] = {0}, s = 0;
    int i = 0;
    for (; i + NN_LANES <= n; i += NN_LANES)
        for (int k = 0; k < NN_LANES; k++) acc[k] += a[i + k] * b[i + k];
    for (; i < n; i++) s += a[i] * b[i];
    for (int k = 0; k < NN_LANES; k++) s += acc[k];
    return s;
}

/* sum of a[i] * (b[i] - shift), without the cancellation of dot(a,b) - shift*sum(a). */
static inline float nn_dot_shift(const float *a, const float *b, float shift, int n) {
    float acc[NN_LANES] = {0}, s = 0;
    int i = 0;
    for (; i + NN_LANES <= n; i += NN_LANES)
        for (int k = 0; k < NN_LANES; k++) acc[k] += a[i + k] * (b[i + k] - shift);
    for (; i < n; i++) s += a[i] * (b[i] - shift);
    for (int k = 0; k < NN_LANES; k++) s += acc[k];
    return s;
}

/* max of x[0..n), n >= 1. */
static inline float nn_max(const float *x, int n) {
    float acc[NN_LANES], m = x[0];
    for (int k = 0; k < NN_LANES; k++) acc[k] = x[0];
    int i = 0;
    for (; i + NN_LANES <= n; i += NN_LANES)
        for (int k = 0; k < NN_LANES; k++) acc[k] = x[i + k] > acc[k] ? x[i + k] : acc[k];
    for (; i < n; i++) m = x[i] > m ? x[i] : m;
    for (int k = 0; k < NN_LANES; k++) m = acc[k] > m ? acc[k] : m;
    return m;
}

/* out[i] = e^(x[i] - shift) for i < n (out may alias x); returns their sum. */
static inline float nn_exp_shift_sum(float *out, const float *x, float shift, int n) {
    for (int i = 0; i < n; i++) out[i] = nn_expf(x[i] - shift);
    return nn_sum(out, n);
}

#endif
