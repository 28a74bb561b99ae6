/* The matmul kernels: Conv1D-style linear layer (out = inp @ w + b) and the tied LM head
 * (logits = inp @ wte^T), row-major, through cblas_sgemm (fp32) or nn_gemm_bf16 (the `_prec`
 * entry points at NN_BF16). No threading decisions here. */
#include "nn/nn.h"
#include <cblas.h>
#include <stddef.h>
#include <string.h>

/* out = seed + inp @ w, seed (N,OUT) = res + b, b or res NULL for none: one pass writes the
 * seed and OpenBLAS accumulates onto it (beta 1), where zeroing (beta 0) and then adding bias and
 * residual would take three. */
static void matmul_seeded(nn_precision p, float *out, const float *inp, const float *w,
                          const float *b, const float *res, int N, int IN, int OUT) {
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
    if (p == NN_BF16)
        nn_gemm_bf16(N, OUT, IN, (nn_operand){ inp, IN, 0, 0 }, (nn_operand){ w, OUT, 0, 0 }, beta, out, OUT);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, OUT, IN,
                    1.0f, inp, IN, w, OUT, beta, out, OUT);
}

void matmul_forward(float *out, const float *inp, const float *w, const float *b,
                    int N, int IN, int OUT) {
    matmul_seeded(NN_FP32, out, inp, w, b, NULL, N, IN, OUT);
}

void matmul_residual_forward(float *out, const float *inp, const float *w, const float *b,
                             const float *res, int N, int IN, int OUT) {
    matmul_seeded(NN_FP32, out, inp, w, b, res, N, IN, OUT);
}

void matmul_backward_input(float *dinp, const float *dout, const float *w, int N, int IN, int OUT) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, IN, OUT,
                1.0f, dout, OUT, w, OUT, 0.0f, dinp, IN);
}

/* db (OUT) += column sums of dout (N,OUT); nothing when db is NULL. */
static void bias_grad(float *db, const float *dout, int N, int OUT) {
    if (!db) return;
    for (int n = 0; n < N; n++) {
        const float *d = dout + (size_t)n * OUT;
        for (int o = 0; o < OUT; o++) db[o] += d[o];   /* vec */
    }
}

void matmul_backward_weight(float *dw, float *db, const float *dout, const float *inp,
                            int N, int IN, int OUT) {
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, IN, OUT, N,
                1.0f, inp, IN, dout, OUT, 1.0f, dw, OUT);
    bias_grad(db, dout, N, OUT);
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

/* ---- in a number format ------------------------------------------------------------------- */
static nn_operand rows_of(const float *p, int ld) { return (nn_operand){ p, ld, 0, 0 }; }
static nn_operand cols_of(const float *p, int ld) { return (nn_operand){ p, ld, 1, 0 }; }

void matmul_forward_prec(nn_precision p, float *out, const float *inp, const float *w,
                         const float *b, int N, int IN, int OUT) {
    matmul_seeded(p, out, inp, w, b, NULL, N, IN, OUT);
}

void matmul_residual_forward_prec(nn_precision p, float *out, const float *inp, const float *w,
                                  const float *b, const float *res, int N, int IN, int OUT) {
    matmul_seeded(p, out, inp, w, b, res, N, IN, OUT);
}

void matmul_backward_input_prec(nn_precision p, float *dinp, const float *dout, const float *w,
                                int N, int IN, int OUT) {
    if (p != NN_BF16) {
        matmul_backward_input(dinp, dout, w, N, IN, OUT);
        return;
    }
    nn_gemm_bf16(N, IN, OUT, rows_of(dout, OUT), cols_of(w, OUT), 0.0f, dinp, IN);
}

void matmul_backward_weight_prec(nn_precision p, float *dw, float *db, const float *dout,
                                 const float *inp, int N, int IN, int OUT) {
    if (p != NN_BF16) {
        matmul_backward_weight(dw, db, dout, inp, N, IN, OUT);
        return;
    }
    nn_gemm_bf16(IN, OUT, N, cols_of(inp, IN), rows_of(dout, OUT), 1.0f, dw, OUT);
    bias_grad(db, dout, N, OUT);
}

void lmhead_forward_prec(nn_precision p, float *logits, const float *inp, const float *wte,
                         int N, int C, int V) {
    if (p != NN_BF16) lmhead_forward(logits, inp, wte, N, C, V);
    else nn_gemm_bf16(N, V, C, rows_of(inp, C), cols_of(wte, C), 0.0f, logits, V);
}

void lmhead_backward_input_prec(nn_precision p, float *dinp, const float *dlogits,
                                const float *wte, int N, int C, int V) {
    if (p != NN_BF16) lmhead_backward_input(dinp, dlogits, wte, N, C, V);
    else nn_gemm_bf16(N, C, V, rows_of(dlogits, V), rows_of(wte, C), 0.0f, dinp, C);
}

void lmhead_backward_weight_prec(nn_precision p, float *dwte, const float *dlogits,
                                 const float *inp, int N, int C, int V) {
    if (p != NN_BF16) lmhead_backward_weight(dwte, dlogits, inp, N, C, V);
    else nn_gemm_bf16(V, C, N, cols_of(dlogits, V), rows_of(inp, C), 1.0f, dwte, C);
}
