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

/* c (n,m) (= or, add, +=) A B for a triangular A (n,Kd), A(i,k) = a[i*ars + k*aks], zero past
 * the diagonal shifted by off: below it (upper 0: row i of A ends at k = i + off) or above it
 * (upper 1: starts at k = i - off), to tile grain (the extra entries must be zeros). b (Kd,m)
 * with row stride ldb. off is 0 for a whole sequence (n = Kd); a chunk's queries sit off
 * positions after its first key. Column strips outer, so a strip of b (Kd x ATT_NR) stays in L1
 * across the row tiles. */
static void att_triangular_product(float *c, int ldc, const float *a, size_t ars, size_t aks,
                                   const float *b, int ldb, int n, int m, int Kd, int off,
                                   int upper, int add) {
    for (int j = 0; j < m; j += ATT_NR)
        for (int i = 0; i < n; i += ATT_MR) {
            int nr = imin(ATT_MR, n - i);
            int k0 = upper ? (i - off > 0 ? i - off : 0) : 0, k1 = upper ? Kd : imin(Kd, i + nr + off);
            att_tile(c + (size_t)i * ldc + j, ldc, a + i * ars + k0 * aks, ars, aks,
                     b + (size_t)k0 * ldb + j, ldb, k1 - k0, nr, imin(ATT_NR, m - j), add);
        }
}

/* s[t][j] = scale * x[t] . y[j] for keys j <= t + off (and on to the end of their tile: the
 * caller's softmax ignores and zeroes what lies past the diagonal): x (Tq,hs), y (Tk,hs) with row
 * strides ldx, ldy, off = Tk - Tq (0 for a whole sequence, the chunk's first position for a
 * chunk); s (Tq,Tk). y is packed transposed and scaled, ATT_PACK_KEYS keys by ATT_PACK_DEPTH
 * channels at a time, each block once for all the rows that need it (4 per head at T 256, hs
 * 64). */
static void att_scores(float *s, const float *x, int ldx, const float *y, int ldy, float scale,
                       int Tq, int Tk, int hs) {
    float pack[ATT_PACK_DEPTH * ATT_PACK_KEYS];
    int off = Tk - Tq;
    for (int d0 = 0; d0 < hs; d0 += ATT_PACK_DEPTH) {
        int dn = imin(ATT_PACK_DEPTH, hs - d0);
        for (int j0 = 0; j0 < Tk; j0 += ATT_PACK_KEYS) {
            int jn = imin(ATT_PACK_KEYS, Tk - j0);
            for (int d = 0; d < dn; d++)
                for (int j = 0; j < jn; j++)
                    pack[d * ATT_PACK_KEYS + j] = scale * y[(size_t)(j0 + j) * ldy + d0 + d];
            for (int i = j0 - off > 0 ? j0 - off : 0; i < Tq; i += ATT_MR) {
                int nr = imin(ATT_MR, Tq - i);
                int cols = imin(jn, (i + nr + off - j0 + ATT_NR - 1) / ATT_NR * ATT_NR);
                for (int j = 0; j < cols; j += ATT_NR)
                    att_tile(s + (size_t)i * Tk + j0 + j, Tk, x + (size_t)i * ldx + d0, ldx, 1,
                             pack + j, ATT_PACK_KEYS, dn, nr, imin(ATT_NR, cols - j), d0 > 0);
            }
        }
    }
}

/* Row t of p (Tq rows of Tk): softmax over columns 0..t + off, zero after (off = Tk - Tq). */
static void attention_softmax_rows(float *p, int Tq, int Tk) {
    for (int t = 0; t < Tq; t++) {
        float *row = p + (size_t)t * Tk;
        int n = t + Tk - Tq + 1;
        float inv = 1.0f / nn_exp_shift_sum(row, row, nn_max(row, n), n);
        for (int j = 0; j < n; j++) row[j] *= inv;   /* vec */
        memset(row + n, 0, (size_t)(Tk - n) * sizeof *row);
    }
}

/* One (batch, head): Tq queries q (row stride ldq) at positions Tk-Tq.. of keys k and values v
 * (Tk rows, stride ldkv); o (Tq,hs) with stride ldo; p (Tq,Tk). */
static void attention_forward_head(float *o, int ldo, float *p, const float *q, int ldq,
                                   const float *k, const float *v, int ldkv, int Tq, int Tk, int hs) {
    att_scores(p, q, ldq, k, ldkv, 1.0f / sqrtf((float)hs), Tq, Tk, hs);
    attention_softmax_rows(p, Tq, Tk);
    att_triangular_product(o, ldo, p, Tk, 1, v, ldkv, Tq, hs, Tk, Tk - Tq, 0, 0);
}

void attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH) {
    int hs = C / NH;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *q = qkv + (size_t)b * T * 3 * C + (size_t)h * hs;
            attention_forward_head(out + (size_t)b * T * C + (size_t)h * hs, C,
                                   att + ((size_t)b * NH + h) * T * T, q, 3 * C, q + C, q + 2 * C,
                                   3 * C, T, T, hs);
        }
}

void attention_forward_kv(float *out, float *scratch, const float *q, int ldq, const float *kv,
                          size_t kv_seq, int B, int Tq, int Tk, int C, int NH) {
    int hs = C / NH;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *k = kv + b * kv_seq + (size_t)h * hs;
            attention_forward_head(out + (size_t)b * Tq * C + (size_t)h * hs, C, scratch,
                                   q + (size_t)b * Tq * ldq + (size_t)h * hs, ldq, k, k + C,
                                   2 * C, Tq, Tk, hs);
        }
}

/* ds (Tq,Tk) holds dP on entry; on exit scale * P * (dP - rowsum(P*dP)), zero past the
 * diagonal (row t ends at column t + Tk - Tq). */
static void attention_softmax_backward_rows(float *ds, const float *p, int Tq, int Tk, float scale) {
    for (int t = 0; t < Tq; t++) {
        float *d = ds + (size_t)t * Tk;
        const float *pr = p + (size_t)t * Tk;
        int n = t + Tk - Tq + 1;
        float dot = nn_dot(pr, d, n);
        for (int j = 0; j < n; j++) d[j] = scale * pr[j] * (d[j] - dot);   /* vec */
        memset(d + n, 0, (size_t)(Tk - n) * sizeof *d);
    }
}

/* Where one (batch, head)'s backward reads and writes: q, dq (Tq rows), k, v, dk, dv (Tk rows),
 * dout (Tq rows), each with its row stride; dk and dv written (add 0) or added to (add 1). */
typedef struct {
    float *dq, *dk, *dv;
    int lddq, lddkv, add;
    const float *dout, *q, *k, *v, *p;
    int lddo, ldq, ldkv;
} att_bwd;

/* Gradients for q, k, v of one (batch, head): dP = dO V^T, dS = the softmax's backward times the
 * scale, dQ = dS K, dK = dS^T Q, dV = P^T dO; the key side reads dS and P by columns from the
 * diagonal down. */
static void attention_backward_head(const att_bwd *x, float *ds, int Tq, int Tk, int hs) {
    int off = Tk - Tq;
    att_scores(ds, x->dout, x->lddo, x->v, x->ldkv, 1.0f, Tq, Tk, hs);
    attention_softmax_backward_rows(ds, x->p, Tq, Tk, 1.0f / sqrtf((float)hs));
    att_triangular_product(x->dq, x->lddq, ds, Tk, 1, x->k, x->ldkv, Tq, hs, Tk, off, 0, 0);
    att_triangular_product(x->dk, x->lddkv, ds, 1, Tk, x->q, x->ldq, Tk, hs, Tq, off, 1, x->add);   /* dS^T, P^T: upper */
    att_triangular_product(x->dv, x->lddkv, x->p, 1, Tk, x->dout, x->lddo, Tk, hs, Tq, off, 1, x->add);
}

void attention_backward_input(float *dqkv, float *scratch, const float *dout, const float *qkv,
                              const float *att, int B, int T, int C, int NH) {
    int hs = C / NH, C3 = 3 * C;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            size_t o3 = (size_t)b * T * C3 + (size_t)h * hs;
            const float *q = qkv + o3;
            float *dq = dqkv + o3;
            att_bwd x = { dq, dq + C, dq + 2 * C, C3, C3, 0,
                          dout + (size_t)b * T * C + (size_t)h * hs, q, q + C, q + 2 * C,
                          att + ((size_t)b * NH + h) * T * T, C, C3, C3 };
            attention_backward_head(&x, scratch, T, T, hs);
        }
}

/* The chunk's backward recomputes each (batch, head)'s probabilities into the first Tq*Tk
 * floats of scratch (the forward's scores and softmax again: the same values), dS after them. */
void attention_backward_kv(float *dq, int lddq, float *dkv, float *scratch, const float *dout,
                           const float *q, int ldq, const float *kv, size_t kv_seq, int B, int Tq,
                           int Tk, int C, int NH) {
    int hs = C / NH;
    float *p = scratch, *ds = scratch + (size_t)Tq * Tk;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            size_t ok = b * kv_seq + (size_t)h * hs;
            const float *qh = q + (size_t)b * Tq * ldq + (size_t)h * hs;
            att_scores(p, qh, ldq, kv + ok, 2 * C, 1.0f / sqrtf((float)hs), Tq, Tk, hs);
            attention_softmax_rows(p, Tq, Tk);
            att_bwd x = { dq + (size_t)b * Tq * lddq + (size_t)h * hs, dkv + ok, dkv + ok + C,
                          lddq, 2 * C, 1, dout + (size_t)b * Tq * C + (size_t)h * hs,
                          qh, kv + ok, kv + ok + C, p, C, ldq, 2 * C };
            attention_backward_head(&x, ds, Tq, Tk, hs);
        }
}
