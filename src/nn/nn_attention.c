/* Causal multi-head self-attention on HF's fused qkv layout, one (batch, head) at a time, by
 * register-tiled products in plain C that gcc vectorises, not BLAS: at T 256 and head size 64
 * OpenBLAS's small calls spent 30% of their time packing and zeroing, and an AVX-512 build's
 * tiles use its 32 registers (OpenBLAS may run AVX2 kernels: OPENBLAS_CORETYPE=Haswell here).
 * Every product stops at the diagonal, to tile grain. Not flash attention: the probabilities are
 * stored, for the backward. No masking buffer, no state. */
#include "nn/nn.h"
#include "nn/nn_math.h"
#include <math.h>
#include <stddef.h>
#include <string.h>

/* The register tile: ATT_MR rows by ATT_NR columns (two vectors), so each step of a product loads
 * two vectors and ATT_MR broadcasts for 2 * ATT_MR multiply-adds, and the accumulators fill most
 * of the vector registers without spilling: 8 x 32 on AVX-512 (16 of 32 registers), 6 x 16 on
 * AVX(2) and NEON (12 of 16 or 24 of 32), 4 x 8 with 4-wide SSE (8 of 16). Measured at the
 * reference shape: 4 x 32 on AVX2 spills, 4 x 16 is slower. */
#if defined(__AVX512F__)
#define ATT_MR 8
#define ATT_NR 32
#elif defined(__AVX__) || defined(__aarch64__)
#define ATT_MR 6
#define ATT_NR 16
#else
#define ATT_MR 4
#define ATT_NR 8
#endif
#define ATT_PACK_KEYS 64    /* a packed block of K^T (or V^T), keys by channels: 16 KB, in L1 */
#define ATT_PACK_DEPTH 64

static int imin(int a, int b) { return a < b ? a : b; }

/* att_tile for a tile short of columns (the last of a head size or of a block of keys that is
 * no multiple of ATT_NR): one scalar chain per element. */
static void att_tile_edge(float *c, int ldc, const float *a, size_t ars, size_t aks,
                          const float *b, int ldb, int K, int nr, int nc, int add) {
    for (int r = 0; r < nr; r++)
        for (int j = 0; j < nc; j++) {
            float s = add ? c[(size_t)r * ldc + j] : 0.0f;
            for (int k = 0; k < K; k++) s = NN_FMA(a[r * ars + k * aks], b[(size_t)k * ldb + j], s);
            c[(size_t)r * ldc + j] = s;
        }
}

/* att_tile for nc == ATT_NR: rows past nr (a short tile) read row nr - 1 again and are not
 * stored. Inlined with nr == ATT_MR and ars or aks the constant 1 (A's rows, or A^T's), so gcc
 * specialises the full tiles' addressing: with a runtime pair of strides it kept the six row
 * offsets on the stack and reloaded them every k (AVX2 runs out of its 16 general registers). */
static inline __attribute__((always_inline)) void
att_tile_rows(float *c, int ldc, const float *a, size_t ars, size_t aks, const float *b, int ldb,
              int K, int nr, int add) {
    /* k = 0 starts the sums from c (or from zeros) in the loop's own vectors: gcc stored
       `add ? c : 0`, a memset or a memcpy into acc in other widths than the loop's loads of
       it, which then waited on those stores (a sixth of att_scores' time on AVX2) */
    static const float zeros[ATT_NR];
    const float *c0 = add ? c : zeros;
    size_t ldc0 = add ? (size_t)ldc : 0, ra[ATT_MR];
    float acc[ATT_MR][ATT_NR];
    for (int r = 0; r < ATT_MR; r++) {
        ra[r] = (size_t)imin(r, nr - 1);
        float ar = a[ra[r] * ars];
#pragma GCC unroll 1
        for (int j = 0; j < ATT_NR; j++) acc[r][j] = NN_FMA(ar, b[j], c0[ra[r] * ldc0 + j]);   /* vec */
    }
    /* two k a round: AVX2 attention 2-4% faster, AVX-512 the same (four: no better) */
#pragma GCC unroll 2
    for (int k = 1; k < K; k++) {
        const float *bk = b + (size_t)k * ldb;
        for (int r = 0; r < ATT_MR; r++) {
            float ar = a[ra[r] * ars + k * aks];
            /* no unroll before vectorising: gcc would unroll 16 columns into scalars and
               lose the accumulators to memory (10x slower on AVX2) */
#pragma GCC unroll 1
            for (int j = 0; j < ATT_NR; j++) acc[r][j] = NN_FMA(ar, bk[j], acc[r][j]);   /* vec */
        }
    }
    for (int r = 0; r < nr; r++) memcpy(c + (size_t)r * ldc, acc[r], sizeof acc[r]);
}

/* c[i][j] (= or +=) sum over k < K of a[i*ars + k*aks] * b[k*ldb + j], for i < nr <= ATT_MR,
 * j < nc <= ATT_NR, K >= 1. a's two strides let one tile read A or A^T; one of them is 1.
 * Every element is the same chain of multiply-adds in k order on all paths, so a result does
 * not depend on where its tile fell. */
static void att_tile(float *c, int ldc, const float *a, size_t ars, size_t aks, const float *b,
                     int ldb, int K, int nr, int nc, int add) {
    if (nc == ATT_NR && nr == ATT_MR && aks == 1)
        att_tile_rows(c, ldc, a, ars, 1, b, ldb, K, ATT_MR, add);
    else if (nc == ATT_NR && nr == ATT_MR)
        att_tile_rows(c, ldc, a, 1, aks, b, ldb, K, ATT_MR, add);
    else if (nc == ATT_NR)
        att_tile_rows(c, ldc, a, ars, aks, b, ldb, K, nr, add);
    else
        att_tile_edge(c, ldc, a, ars, aks, b, ldb, K, nr, nc, add);
}

/* c (n,m) = A B for a triangular A (n,n), A(i,k) = a[i*ars + k*aks], zero past the diagonal:
 * below it (upper 0: row i of A ends at k = i) or above it (upper 1: starts at k = i), to tile
 * grain (the extra entries must be zeros). b (n,m) with row stride ldb. Column strips outer, so
 * a strip of b (n x ATT_NR) stays in L1 across the row tiles. */
static void att_triangular_product(float *c, int ldc, const float *a, size_t ars, size_t aks,
                                   const float *b, int ldb, int n, int m, int upper) {
    for (int j = 0; j < m; j += ATT_NR)
        for (int i = 0; i < n; i += ATT_MR) {
            int nr = imin(ATT_MR, n - i), k0 = upper ? i : 0, k1 = upper ? n : i + nr;
            att_tile(c + (size_t)i * ldc + j, ldc, a + i * ars + k0 * aks, ars, aks,
                     b + (size_t)k0 * ldb + j, ldb, k1 - k0, nr, imin(ATT_NR, m - j), 0);
        }
}

/* s[t][j] = scale * x[t] . y[j] for keys j <= t (and on to the end of their tile: the caller's
 * softmax ignores and zeroes what lies past the diagonal): x, y (T,hs) with row strides ldx,
 * ldy; s (T,T). y is packed transposed and scaled, ATT_PACK_KEYS keys by ATT_PACK_DEPTH channels
 * at a time, each block once for all the rows that need it (4 per head at T 256, hs 64). */
static void att_scores(float *s, const float *x, int ldx, const float *y, int ldy, float scale,
                       int T, int hs) {
    float pack[ATT_PACK_DEPTH * ATT_PACK_KEYS];
    for (int d0 = 0; d0 < hs; d0 += ATT_PACK_DEPTH) {
        int dn = imin(ATT_PACK_DEPTH, hs - d0);
        for (int j0 = 0; j0 < T; j0 += ATT_PACK_KEYS) {
            int jn = imin(ATT_PACK_KEYS, T - j0);
            for (int d = 0; d < dn; d++)
                for (int j = 0; j < jn; j++)
                    pack[d * ATT_PACK_KEYS + j] = scale * y[(size_t)(j0 + j) * ldy + d0 + d];
            for (int i = j0; i < T; i += ATT_MR) {
                int nr = imin(ATT_MR, T - i);
                int cols = imin(jn, (i + nr - j0 + ATT_NR - 1) / ATT_NR * ATT_NR);
                for (int j = 0; j < cols; j += ATT_NR)
                    att_tile(s + (size_t)i * T + j0 + j, T, x + (size_t)i * ldx + d0, ldx, 1,
                             pack + j, ATT_PACK_KEYS, dn, nr, imin(ATT_NR, cols - j), d0 > 0);
            }
        }
    }
}

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
    att_scores(p, q, 3 * C, k, 3 * C, 1.0f / sqrtf((float)hs), T, hs);
    attention_softmax_rows(p, T);
    att_triangular_product(o, C, p, T, 1, v, 3 * C, T, hs, 0);
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

/* Gradients for q, k, v of one (batch, head); strides as in attention_forward_head: dP = dO V^T,
 * dS = the softmax's backward times the scale, dQ = dS K, dK = dS^T Q, dV = P^T dO; the key side
 * reads dS and P by columns from the diagonal down. */
static void attention_backward_head(float *dq, float *dk, float *dv, float *ds, const float *dout,
                                    const float *q, const float *k, const float *v,
                                    const float *p, int T, int C, int hs) {
    int C3 = 3 * C;
    att_scores(ds, dout, C, v, C3, 1.0f, T, hs);
    attention_softmax_backward_rows(ds, p, T, 1.0f / sqrtf((float)hs));
    att_triangular_product(dq, C3, ds, T, 1, k, C3, T, hs, 0);
    att_triangular_product(dk, C3, ds, 1, T, q, C3, T, hs, 1);   /* dS^T, P^T: upper */
    att_triangular_product(dv, C3, p, 1, T, dout, C, T, hs, 1);
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
