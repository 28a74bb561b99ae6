/* Elementwise and per-row kernels: token + position embedding, layernorm, GELU (tanh form,
 * computed as a sigmoid), residual add. Plain C loops written so the compiler vectorises them
 * (loops marked vec are held to it: tools/check_vec.sh); no BLAS, no state. */
#include "nn/nn.h"
#include "nn/nn_math.h"
#include <math.h>
#include <stddef.h>
#include <string.h>

#define LN_EPS 1e-5f

void embedding_forward(float *out, const int *tokens, const float *wte, const float *wpe,
                       int B, int T, int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float *o = out + ((size_t)b * T + t) * C;
            const float *e = wte + (size_t)tokens[b * T + t] * C, *p = wpe + (size_t)t * C;
            for (int i = 0; i < C; i++) o[i] = e[i] + p[i];   /* vec */
        }
}

void embedding_backward_weight(float *dwte, float *dwpe, const float *dout, const int *tokens,
                               int B, int T, int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *d = dout + ((size_t)b * T + t) * C;
            float *e = dwte + (size_t)tokens[b * T + t] * C, *p = dwpe + (size_t)t * C;
            for (int i = 0; i < C; i++) { e[i] += d[i]; p[i] += d[i]; }   /* vec */
        }
}

void embedding_shard_forward(float *out, const int *tokens, const float *wte, const float *wpe,
                             int v0, int nv, int B, int T, int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float *o = out + ((size_t)b * T + t) * C;
            int r = tokens[b * T + t] - v0;
            if (r >= 0 && r < nv) memcpy(o, wte + (size_t)r * C, (size_t)C * sizeof *o);
            else memset(o, 0, (size_t)C * sizeof *o);
            if (wpe) {
                const float *p = wpe + (size_t)t * C;
                for (int i = 0; i < C; i++) o[i] += p[i];   /* vec */
            }
        }
}

void embedding_shard_backward_weight(float *dwte, float *dwpe, const float *dout,
                                     const int *tokens, int v0, int nv, int B, int T, int C) {
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *d = dout + ((size_t)b * T + t) * C;
            float *p = dwpe + (size_t)t * C;
            int r = tokens[b * T + t] - v0;
            for (int i = 0; i < C; i++) p[i] += d[i];   /* vec */
            if (r < 0 || r >= nv) continue;
            float *e = dwte + (size_t)r * C;
            for (int i = 0; i < C; i++) e[i] += d[i];   /* vec */
        }
}

void layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                       const float *w, const float *b, int N, int C) {
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C;
        float *o = out + (size_t)n * C;
        float m = nn_sum(x, C) / C;
        for (int i = 0; i < C; i++) o[i] = x[i] - m;   /* vec: centred input, scaled below */
        float r = 1.0f / sqrtf(nn_dot(o, o, C) / C + LN_EPS);
        for (int i = 0; i < C; i++) o[i] = o[i] * r * w[i] + b[i];   /* vec */
        mean[n] = m;
        rstd[n] = r;
    }
}

/* dx = dres + rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dout * w; dres NULL adds 0.
 * g is never stored: dinp may alias dres, so dx is written once, last. */
static void layernorm_backward_rows(float *dinp, const float *dout, const float *dres,
                                    const float *inp, const float *w, const float *mean,
                                    const float *rstd, int N, int C) {
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
        float *dx = dinp + (size_t)n * C;
        float m = mean[n], r = rstd[n];
        float sg = nn_dot(d, w, C) / C, sgx = nn_dot3_shift(d, w, x, m, C) * r / C;
        if (dres) {
            const float *dr = dres + (size_t)n * C;
            for (int i = 0; i < C; i++) {   /* vec */
                float xh = (x[i] - m) * r;
                dx[i] = dr[i] + r * (d[i] * w[i] - sg - xh * sgx);
            }
        } else {
            for (int i = 0; i < C; i++) {   /* vec */
                float xh = (x[i] - m) * r;
                dx[i] = r * (d[i] * w[i] - sg - xh * sgx);
            }
        }
    }
}

void layernorm_backward_input(float *dinp, const float *dout, const float *inp, const float *w,
                              const float *mean, const float *rstd, int N, int C) {
    layernorm_backward_rows(dinp, dout, NULL, inp, w, mean, rstd, N, C);
}

void layernorm_residual_backward_input(float *dinp, const float *dout, const float *dres,
                                       const float *inp, const float *w, const float *mean,
                                       const float *rstd, int N, int C) {
    layernorm_backward_rows(dinp, dout, dres, inp, w, mean, rstd, N, C);
}

void layernorm_backward_weight(float *dw, float *db, const float *dout, const float *inp,
                               const float *mean, const float *rstd, int N, int C) {
    for (int n = 0; n < N; n++) {
        const float *x = inp + (size_t)n * C, *d = dout + (size_t)n * C;
        float m = mean[n], r = rstd[n];
        for (int i = 0; i < C; i++) {   /* vec */
            dw[i] += d[i] * (x[i] - m) * r;
            db[i] += d[i];
        }
    }
}

/* gelu(x) = 0.5x(1 + tanh u), u = K(x + A x^3), computed as x * sigmoid(2u) = x / (1 + e^(-2u))
 * (the same function; one exp, one division). */
#define GELU_K 0.7978845608028654f   /* sqrt(2/pi) */
#define GELU_A 0.044715f
#define GELU_M1 (-2.0f * GELU_K)            /* -2u = x (M1 + M3 x^2) */
#define GELU_M3 (-2.0f * GELU_K * GELU_A)

void gelu_forward(float *out, const float *inp, int N) {
    for (int i = 0; i < N; i++) {   /* vec */
        float x = inp[i];
        out[i] = x / (1.0f + nn_expf(x * NN_FMA(GELU_M3, x * x, GELU_M1)));
    }
}

/* gelu'(x) = s + x s (1 - s) 2u', s = sigmoid(2u), 2u' = 2K (1 + 3A x^2). */
void gelu_backward_input(float *dinp, const float *dout, const float *inp, int N) {
    for (int i = 0; i < N; i++) {   /* vec */
        float x = inp[i], x2 = x * x;
        float s = nn_sigmoidf(x * NN_FMA(-GELU_M3, x2, -GELU_M1));
        float du2 = NN_FMA(6.0f * GELU_K * GELU_A, x2, 2.0f * GELU_K);
        dinp[i] = dout[i] * NN_FMA(x * s * (1.0f - s), du2, s);
    }
}

void bias_residual_add(float *out, const float *res, const float *b, int N, int C) {
    for (int n = 0; n < N; n++) {
        float *o = out + (size_t)n * C;
        const float *r = res + (size_t)n * C;
        for (int i = 0; i < C; i++) o[i] += r[i] + b[i];   /* vec */
    }
}

void residual_forward(float *out, const float *a, const float *b, int N) {
    for (int i = 0; i < N; i++) out[i] = a[i] + b[i];   /* vec */
}
