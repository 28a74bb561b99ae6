/* The bf16 products (src/nn/nn_bf16.c): conversions (round to nearest even), nn_gemm_bf16
 * against a double reference on the bf16-rounded inputs over random shapes (odd sizes, every
 * transposition, fp32 and bf16 operands, beta 0 and 1), the AVX512_BF16 kernels against the
 * emulation (when this CPU has them), a product split over threads (bitwise one thread's; the
 * count follows OpenBLAS's), and the matmul entry points at NN_BF16. */
#include "nn/nn.h"
#include "nn/nn_bf16.h"
#include "test.h"
#include "util/pt.h"
#include <cblas.h>
#include <stdint.h>
#include <string.h>

/* fp32 sums of K exact products (a bf16 times a bf16 fits fp32's 24 bits): each of the K adds
 * rounds by at most 2^-24 of a partial sum, itself at most sum |a b|, so |error| <= K 2^-24
 * sum |a b| (Higham's gamma_K to first order); one more add for beta 1's C. */
#define GEMM_TOL_ULPS(K) ((double)(K) + 2.0)

static pt_rng rng;

static float *rand_buf(size_t n) {
    float *p = pt_falloc(n);
    for (size_t i = 0; i < n; i++) p[i] = (float)pt_rng_normal(&rng);
    return p;
}

static float bits_f(uint32_t u) { float x; memcpy(&x, &u, sizeof x); return x; }

static void test_conversions(void) {
    struct { uint32_t in; uint16_t out; const char *what; } cases[] = {
        { 0x3f800000u, 0x3f80, "1.0 exact" },
        { 0x3f808000u, 0x3f80, "tie to even (down)" },
        { 0x3f818000u, 0x3f82, "tie to even (up)" },
        { 0x3f808001u, 0x3f81, "above the tie rounds up" },
        { 0x3f807fffu, 0x3f80, "below the tie rounds down" },
        { 0x7f7fffffu, 0x7f80, "FLT_MAX rounds to inf" },
        { 0xff800000u, 0xff80, "-inf stays" },
        { 0x7fc00001u, 0x7fc0, "NaN stays a quiet NaN" },
        { 0x7f800001u, 0x7fc0, "signalling NaN (payload in the low bits) stays NaN, not inf" },
        { 0x80000000u, 0x8000, "-0 keeps its sign" },
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        uint16_t h = nn_bf16_of(bits_f(cases[i].in));
        if (h != cases[i].out) {
            printf("# %s: 0x%08x -> 0x%04x, want 0x%04x\n", cases[i].what, cases[i].in, h, cases[i].out);
            bad++;
        }
    }
    CHECK("bf16 conversion rounds to nearest even, keeps inf and NaN", bad == 0, "%d cases wrong", bad);
    float x[37], r[37];
    uint16_t h[37];
    for (int i = 0; i < 37; i++) x[i] = (float)pt_rng_normal(&rng) * 1000.0f;
    nn_bf16_from_f32(h, x, 37);
    nn_bf16_round(r, x, 37);
    for (int i = 0; i < 37; i++) bad += h[i] != nn_bf16_of(x[i]) || r[i] != nn_f32_of(h[i]) ||
                                        fabsf(r[i] - x[i]) > fabsf(x[i]) * 0x1p-8f;   /* 8 significant bits */
    CHECK("bf16 array conversions agree with the scalar one, within half a bf16 ulp", bad == 0,
          "%d of 37 differ", bad);
}

typedef struct { int M, N, K, ta, tb, abf, bbf; float beta; } gemm_case;

/* Largest |C - ref| in units of 2^-24 sum |a b| (the bound's unit), and whether every entry of
 * C2 equals C's bits. */
static double gemm_check(const gemm_case *g, int emulated_too, int *bitwise) {
    int lda = (g->ta ? g->M : g->K) + 1, ldb = (g->tb ? g->K : g->N) + 2, ldc = g->N + 3;
    size_t na = (size_t)(g->ta ? g->K : g->M) * lda, nb = (size_t)(g->tb ? g->N : g->K) * ldb;
    size_t nc = (size_t)g->M * ldc;
    float *A = rand_buf(na), *B = rand_buf(nb), *C = rand_buf(nc), *C0 = pt_falloc(nc), *C2 = pt_falloc(nc);
    uint16_t *Ah = pt_malloc(na * 2), *Bh = pt_malloc(nb * 2);
    memcpy(C0, C, nc * sizeof *C);
    memcpy(C2, C, nc * sizeof *C);
    nn_bf16_from_f32(Ah, A, na);
    nn_bf16_from_f32(Bh, B, nb);
    nn_operand oa = { g->abf ? (const void *)Ah : A, lda, g->ta, g->abf };
    nn_operand ob = { g->bbf ? (const void *)Bh : B, ldb, g->tb, g->bbf };
    nn_gemm_bf16(g->M, g->N, g->K, oa, ob, g->beta, C, ldc);
    if (emulated_too) nn_gemm_bf16_emulated(g->M, g->N, g->K, oa, ob, g->beta, C2, ldc);
    double worst = 0;
    *bitwise = 1;
    for (int i = 0; i < g->M; i++)
        for (int j = 0; j < g->N; j++) {
            double s = g->beta != 0.0f ? C0[(size_t)i * ldc + j] : 0, sa = fabs(s);
            for (int k = 0; k < g->K; k++) {
                double a = nn_f32_of(Ah[g->ta ? (size_t)k * lda + i : (size_t)i * lda + k]);
                double b = nn_f32_of(Bh[g->tb ? (size_t)j * ldb + k : (size_t)k * ldb + j]);
                s += a * b;
                sa += fabs(a * b);
            }
            double e = fabs(C[(size_t)i * ldc + j] - s) / (sa * 0x1p-24 + 1e-30);
            worst = e > worst ? e : worst;
            if (emulated_too && memcmp(&C[(size_t)i * ldc + j], &C2[(size_t)i * ldc + j], sizeof *C)) *bitwise = 0;
        }
    for (size_t i = 0; i < nc; i++)   /* padding columns past N are not touched */
        if ((int)(i % ldc) >= g->N && C[i] != C0[i]) worst = INFINITY;
    free(A); free(B); free(C); free(C0); free(C2); free(Ah); free(Bh);
    return worst;
}

static void test_gemm_random(void) {
    int native = nn_bf16_native(), bad = 0, notbit = 0, n = 0;
    printf("# kernel: %s\n", nn_bf16_kernel());
    for (int it = 0; it < 60; it++, n++) {
        gemm_case g = { 1 + (int)(pt_rng_next(&rng) % 200), 1 + (int)(pt_rng_next(&rng) % 150),
                        1 + (int)(pt_rng_next(&rng) % 600), (int)(pt_rng_next(&rng) & 1),
                        (int)(pt_rng_next(&rng) & 1), (int)(pt_rng_next(&rng) & 1),
                        (int)(pt_rng_next(&rng) & 1), (pt_rng_next(&rng) & 1) ? 1.0f : 0.0f };
        if (it < 8) g.M = 1 + it, g.N = 1 + 3 * it, g.K = 1 + 2 * it;   /* tiny and odd */
        if (it == 8) g.M = 400, g.N = 70, g.K = 3;      /* more rows than a block (BF_MC) */
        if (it == 9) g.M = 13, g.N = 3100, g.K = 9;     /* more columns than a block (BF_NC) */
        if (it == 10) g.M = 20, g.N = 40, g.K = 2100;   /* more k than a block (BF_KC), odd */
        int bit;
        double w = gemm_check(&g, native, &bit);
        if (w > GEMM_TOL_ULPS(g.K)) {
            printf("# M %d N %d K %d ta %d tb %d a%s b%s beta %g: error %.3g units (bound %g)\n", g.M, g.N,
                   g.K, g.ta, g.tb, g.abf ? "bf16" : "f32", g.bbf ? "bf16" : "f32", g.beta, w, GEMM_TOL_ULPS(g.K));
            bad++;
        }
        notbit += !bit;
    }
    CHECK("bf16 products equal a double reference on the rounded inputs within fp32 summation error",
          bad == 0, "%d of %d shapes outside K * 2^-24 * sum|ab|", bad, n);
    if (native)   /* vdpbf16ps's documented sums are what the emulation does, in the same order */
        CHECK("AVX512_BF16 kernels equal the emulation bitwise", notbit == 0, "%d of %d shapes differ", notbit, n);
    else
        printf("# no AVX512_BF16 on this CPU: the emulation alone was checked\n");
}

/* Split over threads (parts of C by rows or by columns, every transposition, bf16 and fp32
 * operands, beta 0 and 1): within the bound of the double reference, and bitwise the one-thread
 * product (each element's sums run in the same order). */
static void test_gemm_threads(void) {
    gemm_case cases[] = {
        { 300, 200, 300, 0, 0, 0, 0, 0.0f },   /* by rows */
        { 20, 1500, 600, 1, 1, 1, 0, 1.0f },   /* by columns, past a column block */
        { 401, 70, 517, 1, 0, 0, 1, 1.0f },    /* by rows, past a row and a k block */
        { 9, 700, 3000, 0, 1, 1, 1, 0.0f },    /* by columns, a ragged last part */
    };
    int bad = 0, notbit = 0, n = (int)(sizeof cases / sizeof *cases);
    for (int i = 0; i < n; i++) {
        const gemm_case *g = &cases[i];
        int lda = (g->ta ? g->M : g->K) + 1, ldb = (g->tb ? g->K : g->N) + 2, ldc = g->N + 3, bit;
        size_t na = (size_t)(g->ta ? g->K : g->M) * lda, nb = (size_t)(g->tb ? g->N : g->K) * ldb;
        size_t nc = (size_t)g->M * ldc;
        float *A = rand_buf(na), *B = rand_buf(nb), *C1 = rand_buf(nc), *C3 = pt_falloc(nc);
        memcpy(C3, C1, nc * sizeof *C1);
        nn_operand oa = { A, lda, g->ta, 0 }, ob = { B, ldb, g->tb, 0 };
        nn_bf16_set_threads(1);
        nn_gemm_bf16(g->M, g->N, g->K, oa, ob, g->beta, C1, ldc);
        nn_bf16_set_threads(3);
        nn_gemm_bf16(g->M, g->N, g->K, oa, ob, g->beta, C3, ldc);
        notbit += memcmp(C1, C3, nc * sizeof *C1) != 0;
        double w = gemm_check(g, 0, &bit);   /* threads 3, the case's own operand formats */
        if (w > GEMM_TOL_ULPS(g->K)) {
            printf("# threads 3, M %d N %d K %d: error %.3g units\n", g->M, g->N, g->K, w);
            bad++;
        }
        free(A); free(B); free(C1); free(C3);
    }
    nn_bf16_set_threads(0);   /* back to following OpenBLAS, as the layouts set it */
    int was = openblas_get_num_threads();
    openblas_set_num_threads(1);
    int one = nn_bf16_threads();
    openblas_set_num_threads(2);
    int two = nn_bf16_threads(), blas2 = openblas_get_num_threads();
    openblas_set_num_threads(was);
    CHECK("bf16 products follow OpenBLAS's thread count (1 per stage thread, more for one process)",
          one == 1 && two == blas2, "OpenBLAS 1: %d threads; OpenBLAS %d: %d threads", one, blas2, two);
    CHECK("bf16 product over 3 threads: within the reference's bound and bitwise one thread's",
          bad == 0 && notbit == 0, "%d of %d shapes outside the bound, %d differ from one thread", bad, n, notbit);
}

/* K 0 with beta 0 zeroes C; M or N 0 touch nothing. */
static void test_gemm_empty(void) {
    float C[6] = { 1, 2, 3, 4, 5, 6 }, A[1] = { 1 }, B[1] = { 1 };
    nn_gemm_bf16(2, 3, 0, (nn_operand){ A, 1, 0, 0 }, (nn_operand){ B, 3, 0, 0 }, 0.0f, C, 3);
    int zero = 1;
    for (int i = 0; i < 6; i++) zero &= C[i] == 0.0f;
    C[0] = 7;
    nn_gemm_bf16(0, 3, 4, (nn_operand){ A, 1, 0, 0 }, (nn_operand){ B, 3, 0, 0 }, 0.0f, C, 3);
    CHECK("bf16 product with K 0 zeroes C, with M 0 leaves it", zero && C[0] == 7.0f, "C[0] %g", C[0]);
}

/* out (M,N) = double sum of rounded a (M,K) and b (K,N), both row-major. */
static void ref_mm(double *out, const float *a, int ars, int aks, const float *b, int bks, int bjs,
                   int M, int N, int K) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int k = 0; k < K; k++)
                s += (double)nn_f32_of(nn_bf16_of(a[(size_t)i * ars + (size_t)k * aks])) *
                     nn_f32_of(nn_bf16_of(b[(size_t)k * bks + (size_t)j * bjs]));
            out[(size_t)i * N + j] = s;
        }
}

static double max_rel(const float *got, const double *want, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num = fmax(num, fabs(got[i] - want[i]));
        den = fmax(den, fabs(want[i]));
    }
    return num / den;
}

/* The entry points at NN_BF16 compute the fp32 contract on rounded inputs: within 1e-5 of the
 * double reference's largest entry (K <= 70 sums: K 2^-24 ~ 4e-6). */
#define ENTRY_TOL 1e-5

static void test_entry_points(void) {
    enum { N = 37, IN = 29, OUT = 45, V = 51 };
    float *inp = rand_buf(N * IN), *w = rand_buf(IN * OUT), *b = rand_buf(OUT), *res = rand_buf(N * OUT);
    float *dout = rand_buf(N * OUT), *out = pt_falloc(N * OUT), *dinp = pt_falloc(N * IN);
    float *dw = rand_buf(IN * OUT), *dw0 = pt_falloc(IN * OUT), *db = pt_falloc(OUT);
    double *ref = pt_malloc(sizeof(double) * N * V * 4);
    memcpy(dw0, dw, sizeof(float) * IN * OUT);
    matmul_residual_forward_prec(NN_BF16, out, inp, w, b, res, N, IN, OUT);
    ref_mm(ref, inp, IN, 1, w, OUT, 1, N, OUT, IN);
    for (int i = 0; i < N * OUT; i++) ref[i] += (double)res[i] + b[i % OUT];
    double e1 = max_rel(out, ref, N * OUT);
    matmul_backward_input_prec(NN_BF16, dinp, dout, w, N, IN, OUT);
    ref_mm(ref, dout, OUT, 1, w, 1, OUT, N, IN, OUT);
    double e2 = max_rel(dinp, ref, N * IN);
    matmul_backward_weight_prec(NN_BF16, dw, db, dout, inp, N, IN, OUT);
    ref_mm(ref, inp, 1, IN, dout, OUT, 1, IN, OUT, N);
    for (int i = 0; i < IN * OUT; i++) ref[i] += dw0[i];
    double e3 = max_rel(dw, ref, IN * OUT);
    CHECK("matmul at bf16: forward (+ residual, bias), input grad (=), weight grad (+=) on rounded inputs",
          e1 < ENTRY_TOL && e2 < ENTRY_TOL && e3 < ENTRY_TOL, "errors %.3g %.3g %.3g", e1, e2, e3);
    float *wte = rand_buf(V * IN), *logits = pt_falloc(N * V), *dl = rand_buf(N * V);
    float *dwte = rand_buf(V * IN), *dwte0 = pt_falloc(V * IN);
    memcpy(dwte0, dwte, sizeof(float) * V * IN);
    lmhead_forward_prec(NN_BF16, logits, inp, wte, N, IN, V);
    ref_mm(ref, inp, IN, 1, wte, 1, IN, N, V, IN);
    e1 = max_rel(logits, ref, N * V);
    lmhead_backward_input_prec(NN_BF16, dinp, dl, wte, N, IN, V);
    ref_mm(ref, dl, V, 1, wte, IN, 1, N, IN, V);
    e2 = max_rel(dinp, ref, N * IN);
    lmhead_backward_weight_prec(NN_BF16, dwte, dl, inp, N, IN, V);
    ref_mm(ref, dl, 1, V, inp, IN, 1, V, IN, N);
    for (int i = 0; i < V * IN; i++) ref[i] += dwte0[i];
    e3 = max_rel(dwte, ref, V * IN);
    CHECK("LM head at bf16: logits, input grad, weight grad (+=) on rounded inputs",
          e1 < ENTRY_TOL && e2 < ENTRY_TOL && e3 < ENTRY_TOL, "errors %.3g %.3g %.3g", e1, e2, e3);
    free(inp); free(w); free(b); free(res); free(dout); free(out); free(dinp); free(dw); free(dw0);
    free(db); free(ref); free(wte); free(logits); free(dl); free(dwte); free(dwte0);
}

int main(void) {
    pt_rng_seed(&rng, 26);
    test_conversions();
    test_gemm_empty();
    test_gemm_random();
    test_gemm_threads();
    test_entry_points();
    TEST_DONE();
}
