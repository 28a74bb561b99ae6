/* Causal multi-head self-attention on HF's fused qkv layout, with the two big products of each
 * (batch, head) done by cblas_sgemm in row blocks that stop at the diagonal (about half the
 * work of a full T x T product). Softmax and its backward are plain C. No masking buffer, no state. */
#include "nn/nn.h"
#include "nn/nn_math.h"
#include <cblas.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

#define ATT_BLOCK 64   /* rows per sgemm block: large enough for BLAS speed, small enough to skip
                          most of the masked upper triangle */

static int imin(int a, int b) { return a < b ? a : b; }

/* Row t of p (T wide): softmax over columns 0..t, zero after. */
static void attention_softmax_rows(float *p, int T) {
    for (int t = 0; t < T; t++) {
        float *row = p + (size_t)t * T;
        float inv = 1.0f / nn_exp_shift_sum(row, row, nn_max(row, t + 1), t + 1);
        for (int j = 0; j <= t; j++) row[j] *= inv;   /* vec */
        memset(row + t + 1, 0, (size_t)(T - t - 1) * sizeof *row);
    }
}

/* One (batch, head): q, k, v (T,hs) with row stride 3C; o (T,hs) with stride C; p (T,T). */
static void attention_forward_head(float *o, float *p, const float *q, const float *k,
                                   const float *v, int T, int C, int hs) {
    int C3 = 3 * C;
    float scale = 1.0f / sqrtf((float)hs);
    for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
        int r1 = imin(r0 + ATT_BLOCK, T);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, hs,
                    scale, q + (size_t)r0 * C3, C3, k, C3, 0.0f, p + (size_t)r0 * T, T);
    }
    attention_softmax_rows(p, T);
    for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
        int r1 = imin(r0 + ATT_BLOCK, T);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, r1 - r0, hs, r1,
                    1.0f, p + (size_t)r0 * T, T, v, C3, 0.0f, o + (size_t)r0 * C, C);
    }
}

void attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
    int hs = C / NH;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * 3 * C + (size_t)h * hs;
            attention_forward_head(out + (size_t)b * T * C + (size_t)h * hs,
                                   att + ((size_t)b * NH + h) * T * T, q, q + C, q + 2 * C, T, C, hs);
        }
}

/* ds (T,T) holds dP on entry; on exit scale * P * (dP - rowsum(P*dP)), zero past the diagonal. */
static void attention_softmax_backward_rows(float *ds, const float *p, int T, float scale) {
    for (int t = 0; t < T; t++) {
        float *d = ds + (size_t)t * T;
        const float *pr = p + (size_t)t * T;
        float dot = nn_dot(pr, d, t + 1);
        for (int j = 0; j <= t; j++) d[j] = scale * pr[j] * (d[j] - dot);   /* vec */
        memset(d + t + 1, 0, (size_t)(T - t - 1) * sizeof *d);
    }
}

/* Gradients for q, k, v of one (batch, head); strides as in attention_forward_head. */
static void attention_backward_head(float *dq, float *dk, float *dv, float *ds, const float *dout,
                                    const float *q, const float *k, const float *v,
                                    const float *p, int T, int C, int hs) {
    int C3 = 3 * C;
    for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {   /* dP = dO V^T, causal rows */
        int r1 = imin(r0 + ATT_BLOCK, T);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, r1 - r0, r1, hs,
                    1.0f, dout + (size_t)r0 * C, C, v, C3, 0.0f, ds + (size_t)r0 * T, T);
    }
    attention_softmax_backward_rows(ds, p, T, 1.0f / sqrtf((float)hs));
    for (int r0 = 0; r0 < T; r0 += ATT_BLOCK) {
        int r1 = imin(r0 + ATT_BLOCK, T), n = r1 - r0, rest = T - r0;
        /* dQ[r0:r1] = dS[r0:r1, 0:r1] K[0:r1] */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, hs, r1,
                    1.0f, ds + (size_t)r0 * T, T, k, C3, 0.0f, dq + (size_t)r0 * C3, C3);
        /* dK[r0:r1] = dS[r0:T, r0:r1]^T Q[r0:T];  dV[r0:r1] = P[r0:T, r0:r1]^T dO[r0:T] */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, hs, rest,
                    1.0f, ds + (size_t)r0 * T + r0, T, q + (size_t)r0 * C3, C3,
                    0.0f, dk + (size_t)r0 * C3, C3);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, hs, rest,
                    1.0f, p + (size_t)r0 * T + r0, T, dout + (size_t)r0 * C, C,
                    0.0f, dv + (size_t)r0 * C3, C3);
    }
}

void attention_backward_input(float *dqkv, float *scratch, const float *dout, const float *qkv,
                              const float *att, int B, int T, int C, int NH) {
    int hs = C / NH;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            size_t o3 = (size_t)b * T * 3 * C + (size_t)h * hs;
            const float *q = qkv + o3;
            float *dq = dqkv + o3;
            attention_backward_head(dq, dq + C, dq + 2 * C, scratch,
                                    dout + (size_t)b * T * C + (size_t)h * hs,
                                    q, q + C, q + 2 * C, att + ((size_t)b * NH + h) * T * T, T, C, hs);
        }
}
