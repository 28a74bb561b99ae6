/* The matmul kernels: Conv1D-style linear layer (out = inp @ w + b) and the tied LM head
 * (logits = inp @ wte^T), all through cblas_sgemm, row-major. No threading decisions here. */
#include "nn/nn.h"
#include <cblas.h>
#include <stddef.h>
#include <string.h>

/* out = seed + inp @ w, seed (N,OUT) = res + b, b or res NULL for none: one pass writes the
 * seed and OpenBLAS accumulates onto it (beta 1), where zeroing (beta 0) and then adding bias and
 * residual would take three. */
static void matmul_seeded(float *out, const float *inp, const float *w, const float *b,
                          const float *res, int N, int IN, int OUT) {
    float beta = 1.0f;
    if (res && b)
        for (int n = 0; n < N; n++) {
            float *o = out + (size_t)n * OUT;
            const float *r = res + (size_t)n * OUT;
            for (int i = 0; i < OUT; i++) o[i] = r[i] + b[i];   /* vec */
        }
    else if (b)
        for (int n = 0; n < N; n++) memcpy(out + (size_t)n * OUT, b, (size_t)OUT * sizeof *b);
    else if (res && res != out)
        memcpy(out, res, (size_t)N * OUT * sizeof *out);
    else if (!res)
        beta = 0.0f;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, OUT, IN,
                1.0f, inp, IN, w, OUT, beta, out, OUT);
}

void matmul_forward(float *out, const float *inp, const float *w, const float *b,
                    int N, int IN, int OUT) {
    matmul_seeded(out, inp, w, b, NULL, N, IN, OUT);
}

void matmul_residual_forward(float *out, const float *inp, const float *w, const float *b,
                             const float *res, int N, int IN, int OUT) {
    matmul_seeded(out, inp, w, b, res, N, IN, OUT);
}

void matmul_backward_input(float *dinp, const float *dout, const float *w, int N, int IN, int OUT) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, IN, OUT,
                1.0f, dout, OUT, w, OUT, 0.0f, dinp, IN);
}

void matmul_backward_weight(float *dw, float *db, const float *dout, const float *inp,
                            int N, int IN, int OUT) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, IN, OUT, N,
                1.0f, inp, IN, dout, OUT, 1.0f, dw, OUT);
    if (!db) return;
    for (int n = 0; n < N; n++) {
        const float *d = dout + (size_t)n * OUT;
        for (int o = 0; o < OUT; o++) db[o] += d[o];   /* vec */
    }
}

void lmhead_forward(float *logits, const float *inp, const float *wte, int N, int C, int V) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, V, C,
                1.0f, inp, C, wte, C, 0.0f, logits, V);
}

void lmhead_backward_input(float *dinp, const float *dlogits, const float *wte, int N, int C, int V) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, C, V,
                1.0f, dlogits, V, wte, C, 0.0f, dinp, C);
}

void lmhead_backward_weight(float *dwte, const float *dlogits, const float *inp, int N, int C, int V) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, V, C, N,
                1.0f, dlogits, V, inp, C, 1.0f, dwte, C);
}
