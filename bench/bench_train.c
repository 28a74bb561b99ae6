/* Training-step benchmark on one thread: forward + backward (B and W) of the reference GPT shape
 * (n_layer 4, n_embd 256, n_head 4, vocab 256, B 8, T 256), no optimizer update, against OpenBLAS
 * sgemm measured in the same run, interleaved with the steps so machine noise hits both alike.
 * Prints medians: ms/step, tokens/s, model GFLOP/s, sgemm GFLOP/s and their ratio. Not a test. */
#include "model/gpt.h"
#include "util/pt.h"
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void openblas_set_num_threads(int num_threads);

#define SQ 1024   /* square sgemm size for the reference GFLOP/s */

/* Seconds for one SQ x SQ x SQ sgemm. */
static double time_sgemm_square(const float *a, const float *b, float *c) {
    double t0 = pt_now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, SQ, SQ, SQ, 1.0f, a, SQ, b, SQ, 0.0f, c, SQ);
    return pt_now() - t0;
}

/* Seconds for the three products (forward, input grad, weight grad) of each linear layer of one
 * block at N rows: the sgemm mix the model runs. Returns its flops in *flops. */
static double time_sgemm_model_mix(int N, int C, const float *x, const float *w, float *y, float *dw,
                                   double *flops) {
    int shapes[4][2] = {{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}};
    double t0 = pt_now();
    *flops = 0;
    for (int s = 0; s < 4; s++) {
        int IN = shapes[s][0], OUT = shapes[s][1];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, OUT, IN, 1.0f, x, IN, w, OUT, 0.0f, y, OUT);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, IN, OUT, 1.0f, y, OUT, w, OUT, 0.0f, (float *)x, IN);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, IN, OUT, N, 1.0f, x, IN, y, OUT, 1.0f, dw, OUT);
        *flops += 3 * 2.0 * N * IN * OUT;
    }
    return pt_now() - t0;
}

int main(int argc, char **argv) {
    int repeats = argc > 1 ? atoi(argv[1]) : 7;
    if (repeats < 1) repeats = 1;
    openblas_set_num_threads(1);
    gpt_config cfg = {.n_layer = 4, .n_head = 4, .n_embd = 256, .vocab_size = 256, .n_positions = 256};
    int B = 8, T = 256, N = B * T, C = cfg.n_embd;
    gpt_model m;
    if (gpt_init(&m, &cfg) < 0) { fprintf(stderr, "bench_train: %s\n", pt_err()); return 1; }
    gpt_init_random(&m, 1);
    int *tok = pt_malloc((size_t)N * sizeof *tok), *tgt = pt_malloc((size_t)N * sizeof *tgt);
    pt_rng r;
    pt_rng_seed(&r, 2);
    for (int i = 0; i < N; i++) { tok[i] = (int)(pt_rng_next(&r) % 256); tgt[i] = (int)(pt_rng_next(&r) % 256); }
    float *a = pt_falloc((size_t)SQ * SQ), *b = pt_falloc((size_t)SQ * SQ), *c = pt_falloc((size_t)SQ * SQ);
    float *x = pt_falloc((size_t)N * 4 * C), *w = pt_falloc((size_t)16 * C * C), *y = pt_falloc((size_t)N * 4 * C);
    float *dw = pt_falloc((size_t)16 * C * C);
    for (size_t i = 0; i < (size_t)SQ * SQ; i++) { a[i] = (float)pt_rng_normal(&r); b[i] = (float)pt_rng_normal(&r); }
    for (size_t i = 0; i < (size_t)N * 4 * C; i++) x[i] = 0.01f * (float)pt_rng_normal(&r);
    for (size_t i = 0; i < (size_t)16 * C * C; i++) w[i] = 0.01f * (float)pt_rng_normal(&r);

    double *t_step = pt_calloc((size_t)repeats, sizeof(double)), *t_sq = pt_calloc((size_t)repeats, sizeof(double));
    double *t_mix = pt_calloc((size_t)repeats, sizeof(double)), mix_flops = 0;
    float loss = 0;
    gpt_forward_backward(&m, tok, tgt, B, T, &loss);   /* warm-up: buffers, page faults */
    time_sgemm_square(a, b, c);
    for (int i = 0; i < repeats; i++) {
        t_sq[i] = time_sgemm_square(a, b, c);
        t_mix[i] = time_sgemm_model_mix(N, C, x, w, y, dw, &mix_flops);
        double t0 = pt_now();
        gpt_zero_grad(&m);
        gpt_forward_backward(&m, tok, tgt, B, T, &loss);
        t_step[i] = pt_now() - t0;
    }
    double step = pt_median(t_step, repeats), sq = pt_median(t_sq, repeats), mix = pt_median(t_mix, repeats);
    double flops = gpt_flops_per_step(&m, B, T);
    double model_gf = flops / step * 1e-9, sq_gf = 2.0 * SQ * SQ * SQ / sq * 1e-9, mix_gf = mix_flops / mix * 1e-9;
    printf("bench_train: GPT n_layer 4, n_embd 256, n_head 4, vocab 256, B 8, T 256; 1 thread;\n"
           "  step = zero grads + forward + backward (B and W), no optimizer update; median of %d\n", repeats);
    printf("  ms/step            %8.1f   (loss %.4f)\n", step * 1e3, loss);
    printf("  tokens/s           %8.0f\n", N / step);
    printf("  model GFLOP/s      %8.2f   (%.2f GFLOP/step: 6*N*B*T + 6*L*B*T*T*C)\n", model_gf, flops * 1e-9);
    printf("  sgemm GFLOP/s      %8.2f   (square %d)\n", sq_gf, SQ);
    printf("  sgemm GFLOP/s      %8.2f   (the model's linear-layer shapes, fwd + both grads)\n", mix_gf);
    printf("  ratio model/sgemm  %8.3f   (vs square %d; %.3f vs the model's shapes)\n", model_gf / sq_gf, SQ, model_gf / mix_gf);
    free(t_step); free(t_sq); free(t_mix);
    free(a); free(b); free(c); free(x); free(w); free(y); free(dw);
    free(tok); free(tgt);
    gpt_free(&m);
    return 0;
}
