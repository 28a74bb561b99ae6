/* bf16 products: the blocked driver, the choice of kernel, the conversions, and the emulated
 * kernel family (plain C, any CPU) that the AVX512_BF16 one (nn_bf16_avx512.c) must match.
 * Layout and blocking: nn_bf16_int.h. */
#include "nn/nn_bf16.h"
#include "nn/nn_bf16_int.h"
#include "util/pt.h"
#include <cblas.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *nn_precision_name(nn_precision p) { return p == NN_BF16 ? "bf16" : "fp32"; }

int nn_precision_parse(const char *s, nn_precision *p) {
    if (!strcmp(s, "fp32")) *p = NN_FP32;
    else if (!strcmp(s, "bf16")) *p = NN_BF16;
    else return -1;
    return 0;
}

void nn_bf16_from_f32(uint16_t *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = nn_bf16_of(src[i]);   /* vec */
}

void nn_bf16_to_f32(float *dst, const uint16_t *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = nn_f32_of(src[i]);   /* vec */
}

void nn_bf16_round(float *dst, const float *src, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = nn_f32_of(nn_bf16_of(src[i]));   /* vec */
}

/* ---- the emulated family ------------------------------------------------------------------ */
/* Element (i, k) of an operand as bf16 (A: rows i; B: the same with i a column, k a row). */
static inline uint16_t op_get(const nn_operand *o, int i, int k) {
    size_t at = o->trans ? (size_t)k * o->ld + i : (size_t)i * o->ld + k;
    return o->bf16 ? ((const uint16_t *)o->p)[at] : nn_bf16_of(((const float *)o->p)[at]);
}

/* The pair (k, k + 1) of row i, zeros past kend. */
static inline uint32_t op_pair(const nn_operand *o, int i, int k, int kend) {
    uint32_t lo = k < kend ? op_get(o, i, k) : 0, hi = k + 1 < kend ? op_get(o, i, k + 1) : 0;
    return lo | hi << 16;
}

static void emu_pack_a(uint32_t *dst, const nn_operand *A, int i0, int mc, int k0, int kc) {
    int kcp = (kc + 1) / 2, rows = bf_round16(mc);
    for (int r = 0; r < rows; r++)
        for (int kp = 0; kp < kcp; kp++)
            dst[(size_t)r * BF_KCP + kp] = r < mc ? op_pair(A, i0 + r, k0 + 2 * kp, k0 + kc) : 0;
}

/* B's element (k, j) is op_get(B, j, k) with the transposition swapped: B (K,N) not transposed
 * is stored k-major. */
static void emu_pack_b(uint32_t *dst, const nn_operand *B, int k0, int kc, int j0, int nc) {
    int kcp = (kc + 1) / 2;
    nn_operand bt = *B;
    bt.trans = !B->trans;
    size_t stride = bf_bstride(kcp);
    for (int j = 0; j < (nc + BF_NR - 1) / BF_NR * BF_NR; j++)
        for (int kp = 0; kp < kcp; kp++)
            dst[(size_t)(j / BF_NR) * stride + (size_t)kp * BF_NR + j % BF_NR] =
                j < nc ? op_pair(&bt, j0 + j, k0 + 2 * kp, k0 + kc) : 0;
}

/* vdpbf16ps's sums: per pair, the high halves' product then the low halves', each added in
 * fp32 (a product of two bf16 is exact in fp32, so there is one rounding per add). */
static void emu_kernel(int kcp, const uint32_t *a, const uint32_t *b, float *c, int ldc, int mr,
                       int nr, int acc) {
    float s[BF_MR][BF_NR];
    memset(s, 0, sizeof s);
    for (int p = 0; p < kcp; p++) {
        const uint32_t *bp = b + (size_t)p * BF_NR;
        for (int r = 0; r < BF_MR; r++) {
            uint32_t ar = a[(size_t)r * BF_KCP + p];
            float a0 = nn_f32_of((uint16_t)ar), a1 = nn_f32_of((uint16_t)(ar >> 16));
            for (int j = 0; j < BF_NR; j++) {   /* vec */
                float b0 = nn_f32_of((uint16_t)bp[j]), b1 = nn_f32_of((uint16_t)(bp[j] >> 16));
                s[r][j] = a1 * b1 + s[r][j];
                s[r][j] = a0 * b0 + s[r][j];
            }
        }
    }
    for (int r = 0; r < mr; r++)
        for (int j = 0; j < nr; j++) c[(size_t)r * ldc + j] = acc ? c[(size_t)r * ldc + j] + s[r][j] : s[r][j];
}

static const bf_impl bf_impl_emulated = { emu_pack_a, emu_pack_b, emu_kernel };

/* ---- the choice --------------------------------------------------------------------------- */
int nn_bf16_native(void) {
    const char *emulate = getenv("PIPETRAIN_BF16_EMULATE");   /* tests: the other path here */
    if (emulate && *emulate && strcmp(emulate, "0")) return 0;
#if defined(__x86_64__) && defined(__GNUC__)
    return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl");
#else
    return 0;
#endif
}

const char *nn_bf16_kernel(void) {
    return nn_bf16_native() ? "AVX512_BF16 (vdpbf16ps)"
                            : "emulated in plain C (no AVX512_BF16 here, or PIPETRAIN_BF16_EMULATE: slower than fp32)";
}

/* ---- packing buffers: per calling thread, one pair per part of a split product ------------- */
typedef struct { uint32_t *a, *b; } bf_bufs;
typedef struct { bf_bufs part[NN_BF16_MAX_THREADS]; } bf_tls;   /* pairs allocated on first use */
static pthread_key_t bf_key;
static pthread_once_t bf_once = PTHREAD_ONCE_INIT;

static void bf_tls_free(void *p) {
    bf_tls *t = p;
    for (int i = 0; i < NN_BF16_MAX_THREADS; i++) {
        free(t->part[i].a);
        free(t->part[i].b);
    }
    free(t);
}

static void bf_key_init(void) {
    if (pthread_key_create(&bf_key, bf_tls_free) != 0) {   /* a programmer error: keys run out */
        fprintf(stderr, "bf16 products: pthread_key_create failed (no thread-specific key left)\n");
        abort();
    }
}

/* The calling thread's buffers for part i of a product (its workers use them while it waits). */
static bf_bufs *bf_bufs_get(int i) {
    pthread_once(&bf_once, bf_key_init);
    bf_tls *t = pthread_getspecific(bf_key);
    if (!t) {
        t = pt_calloc(1, sizeof *t);
        pthread_setspecific(bf_key, t);
    }
    bf_bufs *b = &t->part[i];
    if (!b->a) {
        b->a = (uint32_t *)pt_falloc((size_t)BF_MC * BF_KCP);
        b->b = (uint32_t *)pt_falloc((size_t)((BF_NC + BF_NR - 1) / BF_NR) * bf_bstride(BF_KCP));
    }
    return b;
}

/* ---- the driver --------------------------------------------------------------------------- */
static int imin(int a, int b) { return a < b ? a : b; }

static void gemm_run(const bf_impl *im, bf_bufs *buf, int M, int N, int K, const nn_operand *A,
                     const nn_operand *B, float beta, float *C, int ldc) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        if (beta == 0.0f)
            for (int i = 0; i < M; i++) memset(C + (size_t)i * ldc, 0, (size_t)N * sizeof *C);
        return;
    }
    for (int jc = 0; jc < N; jc += BF_NC) {
        int nc = imin(BF_NC, N - jc);
        for (int pc = 0; pc < K; pc += BF_KC) {
            int kc = imin(BF_KC, K - pc), kcp = (kc + 1) / 2, acc = pc > 0 || beta != 0.0f;
            size_t bs = bf_bstride(kcp);
            im->pack_b(buf->b, B, pc, kc, jc, nc);
            for (int ic = 0; ic < M; ic += BF_MC) {
                int mc = imin(BF_MC, M - ic);
                im->pack_a(buf->a, A, ic, mc, pc, kc);
                for (int jr = 0; jr < nc; jr += BF_NR)
                    for (int ir = 0; ir < mc; ir += BF_MR)
                        im->kernel(kcp, buf->a + (size_t)ir * BF_KCP, buf->b + (size_t)(jr / BF_NR) * bs,
                                   C + (size_t)(ic + ir) * ldc + jc + jr, ldc, imin(BF_MR, mc - ir),
                                   imin(BF_NR, nc - jr), acc);
            }
        }
    }
}

/* ---- threads: parts of C, each its own product over the same k (so each element's sums run
 * in the same order as with one thread: the result is bitwise the same) -------------------- */
static int bf_threads_set = 0;   /* 0: follow OpenBLAS's count */

void nn_bf16_set_threads(int n) { bf_threads_set = n < 0 ? 0 : n > NN_BF16_MAX_THREADS ? NN_BF16_MAX_THREADS : n; }

int nn_bf16_threads(void) {
    int n = bf_threads_set ? bf_threads_set : openblas_get_num_threads();
    return n < 1 ? 1 : n > NN_BF16_MAX_THREADS ? NN_BF16_MAX_THREADS : n;
}

/* The operand's view from row (A) or column (B) `first` on: an offset into its storage (A's
 * rows and B's columns run along its leading dimension unless it is read transposed). */
static nn_operand op_from(nn_operand o, int first, int is_b) {
    size_t at = (o.trans ^ is_b) ? (size_t)first : (size_t)first * o.ld;
    o.p = (const char *)o.p + at * (o.bf16 ? 2 : 4);
    return o;
}

typedef struct {
    const bf_impl *im;
    bf_bufs *buf;
    int M, N, K, ldc;
    nn_operand A, B;
    float beta, *C;
} bf_part;

static void *bf_part_run(void *arg) {
    bf_part *p = arg;
    gemm_run(p->im, p->buf, p->M, p->N, p->K, &p->A, &p->B, p->beta, p->C, p->ldc);
    return NULL;
}

/* Parts: at most nn_bf16_threads(), each at least BF_PART_FLOPS of work, the wider of M and N
 * cut into whole tiles (BF_NR columns or BF_MR rows). A thread that cannot start leaves its
 * part to the caller. */
#define BF_PART_FLOPS (16.0 * 1024 * 1024)
static void gemm_split(const bf_impl *im, int M, int N, int K, const nn_operand *A,
                       const nn_operand *B, float beta, float *C, int ldc) {
    double flops = 2.0 * M * N * (K > 0 ? K : 1);
    int n = nn_bf16_threads(), by_n = N / BF_NR >= M / BF_MR, unit = by_n ? BF_NR : BF_MR;
    int len = by_n ? N : M, units = (len + unit - 1) / unit;
    n = imin(imin(n, units), (int)(flops / BF_PART_FLOPS));
    if (n <= 1) {
        gemm_run(im, bf_bufs_get(0), M, N, K, A, B, beta, C, ldc);
        return;
    }
    bf_part part[NN_BF16_MAX_THREADS];
    pthread_t th[NN_BF16_MAX_THREADS];
    int started[NN_BF16_MAX_THREADS] = { 0 }, per = (units + n - 1) / n;
    for (int i = 0; i < n; i++) {
        int lo = imin(i * per * unit, len), hi = imin((i + 1) * per * unit, len);
        bf_part *p = &part[i];
        *p = (bf_part){ im, bf_bufs_get(i), by_n ? M : hi - lo, by_n ? hi - lo : N, K, ldc,
                        by_n ? *A : op_from(*A, lo, 0), by_n ? op_from(*B, lo, 1) : *B, beta,
                        C + (by_n ? (size_t)lo : (size_t)lo * ldc) };
        if (i > 0) started[i] = pthread_create(&th[i], NULL, bf_part_run, p) == 0;
    }
    bf_part_run(&part[0]);
    for (int i = 1; i < n; i++) {
        if (started[i]) pthread_join(th[i], NULL);
        else bf_part_run(&part[i]);
    }
}

void nn_gemm_bf16(int M, int N, int K, nn_operand A, nn_operand B, float beta, float *C, int ldc) {
    gemm_split(nn_bf16_native() ? &bf_impl_avx512 : &bf_impl_emulated, M, N, K, &A, &B, beta, C, ldc);
}

void nn_gemm_bf16_emulated(int M, int N, int K, nn_operand A, nn_operand B, float beta,
                           float *C, int ldc) {
    gemm_split(&bf_impl_emulated, M, N, K, &A, &B, beta, C, ldc);
}
