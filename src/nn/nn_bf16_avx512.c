/* The AVX512_BF16 kernel family of the bf16 products: packers that convert 16 values at a time
 * (vcvtneps2bf16) and transpose 16 x 16 blocks of pairs in registers, and a 6 x 64 micro-kernel
 * of vdpbf16ps. Compiled for AVX512_BF16 by target attributes whatever -march says, so a build
 * for an AVX2 machine still carries it; nn_bf16.c calls it only when cpuid reports the ISA.
 * Layout: nn_bf16_int.h. Not here: blocking, the choice, the emulation (nn_bf16.c). */
#include "nn/nn_bf16_int.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#ifndef BF_PF_ROWS
#define BF_PF_ROWS 4   /* A's rows prefetched this far ahead while packing */
#endif

#define BF_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

static inline __mmask16 mask_of(int n) {
    return n >= 16 ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

/* n <= 16 values of an operand from element at (rows beyond n read as 0), as 16 bf16. Masked
 * loads do not touch the elements masked off. */
BF_TARGET static inline __m256i load16(const nn_operand *o, size_t at, int n) {
    __mmask16 m = mask_of(n);
    if (o->bf16) return _mm256_maskz_loadu_epi16(m, (const uint16_t *)o->p + at);
    return (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, (const float *)o->p + at));
}

/* 16 pairs (lo[i], hi[i]) as 16 uint32. */
BF_TARGET static inline __m512i pairs16(__m256i lo, __m256i hi) {
    return _mm512_or_si512(_mm512_cvtepu16_epi32(lo), _mm512_slli_epi32(_mm512_cvtepu16_epi32(hi), 16));
}

/* r[0..16) as a 16 x 16 matrix of uint32, transposed in place. */
BF_TARGET static void transpose16(__m512i r[16]) {
    __m512i a[16], b[16];
    for (int i = 0; i < 8; i++) {
        a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int j = 0; j < 4; j++) {   /* b[4j+m], 128-bit lane L: column 4L+m of rows 4j..4j+3 */
        b[4 * j + 0] = _mm512_unpacklo_epi64(a[4 * j], a[4 * j + 2]);
        b[4 * j + 1] = _mm512_unpackhi_epi64(a[4 * j], a[4 * j + 2]);
        b[4 * j + 2] = _mm512_unpacklo_epi64(a[4 * j + 1], a[4 * j + 3]);
        b[4 * j + 3] = _mm512_unpackhi_epi64(a[4 * j + 1], a[4 * j + 3]);
    }
    for (int m = 0; m < 4; m++) {   /* column 4L+m: lane L of b[m], b[4+m], b[8+m], b[12+m] */
        __m512i q0 = _mm512_shuffle_i32x4(b[m], b[4 + m], 0x44), q1 = _mm512_shuffle_i32x4(b[m], b[4 + m], 0xee);
        __m512i q2 = _mm512_shuffle_i32x4(b[8 + m], b[12 + m], 0x44), q3 = _mm512_shuffle_i32x4(b[8 + m], b[12 + m], 0xee);
        r[m] = _mm512_shuffle_i32x4(q0, q2, 0x88);
        r[4 + m] = _mm512_shuffle_i32x4(q0, q2, 0xdd);
        r[8 + m] = _mm512_shuffle_i32x4(q1, q3, 0x88);
        r[12 + m] = _mm512_shuffle_i32x4(q1, q3, 0xdd);
    }
}

/* A not transposed: each row's k run is already pairs in order; convert and store. */
BF_TARGET static void pack_a_rows(uint32_t *dst, const nn_operand *A, int i0, int mc, int k0, int kc) {
    int kcp = (kc + 1) / 2, esz = A->bf16 ? 2 : 4;
    for (int r = 0; r < bf_round16(mc); r++) {
        uint32_t *d = dst + (size_t)r * BF_KCP;
        size_t at = (size_t)(i0 + r) * A->ld + k0;
        if (r + BF_PF_ROWS < mc)   /* each row is a new stream the hardware is slow to start */
            for (int b = 0; b < kc * esz; b += 64)
                _mm_prefetch((const char *)A->p + (at + (size_t)BF_PF_ROWS * A->ld) * esz + b, _MM_HINT_T0);
        for (int kp = 0; kp < kcp; kp += 16) {
            int left = r < mc ? kc - 2 * kp : 0;
            __m256i lo = load16(A, at + 2 * (size_t)kp, left), hi = load16(A, at + 2 * (size_t)kp + 16, left - 16);
            __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
            _mm512_mask_storeu_epi32(d + kp, mask_of(kcp - kp), v);
        }
    }
}

/* A transposed (stored K x M): rows k and k+1 give 16 rows' pairs; 16 pairs at a time are
 * transposed into the rows. */
BF_TARGET static void pack_a_cols(uint32_t *dst, const nn_operand *A, int i0, int mc, int k0, int kc) {
    int kcp = (kc + 1) / 2;
    __m512i v[16];
    for (int r0 = 0; r0 < bf_round16(mc); r0 += 16)
        for (int kp = 0; kp < kcp; kp += 16) {
            for (int q = 0; q < 16; q++) {
                int k = 2 * (kp + q), n = mc - r0;
                size_t at = (size_t)(k0 + k) * A->ld + i0 + r0;
                __m256i lo = load16(A, at, k < kc ? n : 0), hi = load16(A, at + A->ld, k + 1 < kc ? n : 0);
                v[q] = pairs16(lo, hi);
            }
            transpose16(v);
            for (int r = 0; r < 16; r++)
                _mm512_mask_storeu_epi32(dst + (size_t)(r0 + r) * BF_KCP + kp, mask_of(kcp - kp), v[r]);
        }
}

BF_TARGET static void pack_a(uint32_t *dst, const nn_operand *A, int i0, int mc, int k0, int kc) {
    if (A->trans) pack_a_cols(dst, A, i0, mc, k0, kc);
    else pack_a_rows(dst, A, i0, mc, k0, kc);
}

/* B not transposed (stored K x N): rows k and k+1 interleave into 16 columns' pairs; the two
 * rows are read along (a column-wise walk reads lines far apart). */
BF_TARGET static void pack_b_rows(uint32_t *dst, const nn_operand *B, int k0, int kc, int j0, int nc) {
    int kcp = (kc + 1) / 2;
    size_t stride = bf_bstride(kcp);
    int esz = B->bf16 ? 2 : 4;
    for (int kp = 0; kp < kcp; kp++) {
        int k = 2 * kp;
        if (k + BF_PF_ROWS + 1 < kc)   /* rows k+BF_PF_ROWS and the next, as in pack_a_rows */
            for (int r = BF_PF_ROWS; r < BF_PF_ROWS + 2; r++)
                for (int b = 0; b < nc * esz; b += 64)
                    _mm_prefetch((const char *)B->p + ((size_t)(k0 + k + r) * B->ld + j0) * esz + b, _MM_HINT_T0);
        for (int j = 0; j < (nc + BF_NR - 1) / BF_NR * BF_NR; j += 16) {
            size_t at = (size_t)(k0 + k) * B->ld + j0 + j;
            __m256i lo = load16(B, at, nc - j), hi = load16(B, at + B->ld, k + 1 < kc ? nc - j : 0);
            _mm512_storeu_si512(dst + (size_t)(j / BF_NR) * stride + j % BF_NR + (size_t)kp * BF_NR, pairs16(lo, hi));
        }
    }
}

/* B transposed (stored N x K): each column's k run is pairs in order; 16 columns by 16 pairs
 * are transposed into the panel. */
BF_TARGET static void pack_b_cols(uint32_t *dst, const nn_operand *B, int k0, int kc, int j0, int nc) {
    int kcp = (kc + 1) / 2;
    size_t stride = bf_bstride(kcp);
    __m512i v[16];
    for (int j = 0; j < (nc + BF_NR - 1) / BF_NR * BF_NR; j += 16) {
        uint32_t *d = dst + (size_t)(j / BF_NR) * stride + j % BF_NR;
        for (int kp = 0; kp < kcp; kp += 16) {
            for (int q = 0; q < 16; q++) {
                int left = j + q < nc ? kc - 2 * kp : 0;
                size_t at = (size_t)(j0 + j + q) * B->ld + k0 + 2 * (size_t)kp;
                __m256i lo = load16(B, at, left), hi = load16(B, at + 16, left - 16);
                v[q] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
            }
            transpose16(v);   /* v[q]: pair kp + q of the 16 columns */
            for (int q = 0; q < 16; q++) _mm512_storeu_si512(d + (size_t)(kp + q) * BF_NR, v[q]);
        }
    }
}

BF_TARGET static void pack_b(uint32_t *dst, const nn_operand *B, int k0, int kc, int j0, int nc) {
    if (B->trans) pack_b_cols(dst, B, k0, kc, j0, nc);
    else pack_b_rows(dst, B, k0, kc, j0, nc);
}

/* One BF_MR x BF_NR tile: BF_MR x BF_NV sums in registers, per pair of k BF_NV loads of B and
 * BF_MR broadcasts of A. */
#define BF_NV (BF_NR / 16)
BF_TARGET static void kernel(int kcp, const uint32_t *a, const uint32_t *b, float *c, int ldc,
                             int mr, int nr, int acc) {
    __m512 s[BF_MR][BF_NV];
    for (int r = 0; r < BF_MR; r++)
        for (int v = 0; v < BF_NV; v++) s[r][v] = _mm512_setzero_ps();
    for (int p = 0; p < kcp; p++) {
        __m512bh bv[BF_NV];
        for (int v = 0; v < BF_NV; v++) bv[v] = (__m512bh)_mm512_load_si512(b + (size_t)p * BF_NR + 16 * v);
        for (int r = 0; r < BF_MR; r++) {
            __m512bh ar = (__m512bh)_mm512_set1_epi32((int)a[(size_t)r * BF_KCP + p]);
            for (int v = 0; v < BF_NV; v++) s[r][v] = _mm512_dpbf16_ps(s[r][v], ar, bv[v]);
        }
    }
    for (int r = 0; r < mr; r++) {
        float *cr = c + (size_t)r * ldc;
        for (int v = 0; v < BF_NV; v++) {
            __mmask16 mk = mask_of(nr - 16 * v);
            if (acc) s[r][v] = _mm512_add_ps(s[r][v], _mm512_maskz_loadu_ps(mk, cr + 16 * v));
            _mm512_mask_storeu_ps(cr + 16 * v, mk, s[r][v]);
        }
    }
}

const bf_impl bf_impl_avx512 = { pack_a, pack_b, kernel };

#else
const bf_impl bf_impl_avx512 = { 0, 0, 0 };   /* never chosen: nn_bf16_native() is 0 here */
#endif
