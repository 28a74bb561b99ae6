/* Training-step benchmark: forward + backward (B and W) of two GPT shapes, no optimizer update,
 * each repeat interleaving (1) a square OpenBLAS sgemm, (2) the sgemm mix of the model's own
 * linear layers, (3) our step and (4) PyTorch's step (bench/torch_train.py --serve, when
 * /usr/bin/python3 has torch), so machine noise hits all four alike. Prints medians with the
 * machine (CPU, its vector ISA, the ISA the kernels were built for, OpenBLAS's kernels): ms/step,
 * tokens/s, model GFLOP/s and its ratio to sgemm, PyTorch's step and the tokens/s ratio, peak
 * RSS after a step (ours and PyTorch's) and page faults per steady step. Not a test.
 * With --precision bf16 each repeat also times the same step with bf16 matmuls (a second model
 * with the same weights; the two steps in alternating order) and a bf16 product of the square's
 * size (nn_gemm_bf16), and prints them next to the fp32 ones.
 * Usage: bench_train [--shape ref|gpt2|all] [--repeats N] [--threads N] [--no-torch]
 *                    [--precision fp32|bf16] | --machine
 *        | --attention   (one layer's attention forward and backward alone, CPU ms, best of 31)
 *        (default: all shapes; 7 repeats for ref, 3 for gpt2; 1 thread) */
#include "bench_util.h"
#include "model/gpt.h"
#include "nn/nn_bf16.h"
#include <math.h>

void openblas_set_num_threads(int num_threads);

#define SQ 1024   /* square sgemm size for the reference GFLOP/s */

typedef struct {
    const char *name, *what;
    gpt_config cfg;
    int B, T, repeats;
} bench_shape;

static const bench_shape SHAPES[] = {
    { "ref", "the small reference shape",
      { .n_layer = 4, .n_head = 4, .n_embd = 256, .vocab_size = 256, .n_positions = 256 }, 8, 256, 7 },
    { "gpt2", "GPT-2 124M",
      { .n_layer = 12, .n_head = 12, .n_embd = 768, .vocab_size = 50257, .n_positions = 1024 }, 4, 256, 3 },
};

/* Seconds for one SQ x SQ x SQ sgemm: the median of 5 (one call is short enough for a single
 * slice of another process's time to double it); *cpu the same in CPU time. */
static double time_sgemm_square(const float *a, const float *b, float *c, double *cpu) {
    double t[5], u[5];
    for (int i = 0; i < 5; i++) {
        double t0 = pt_now(), c0 = bench_cpu_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, SQ, SQ, SQ, 1.0f, a, SQ, b, SQ, 0.0f, c, SQ);
        t[i] = pt_now() - t0;
        u[i] = bench_cpu_now() - c0;
    }
    *cpu = pt_median(u, 5);
    return pt_median(t, 5);
}

/* The same for one SQ^3 bf16 product (nn_gemm_bf16: inputs rounded as they are packed). */
static double time_bf16_square(const float *a, const float *b, float *c, double *cpu) {
    double t[5], u[5];
    for (int i = 0; i < 5; i++) {
        double t0 = pt_now(), c0 = bench_cpu_now();
        nn_gemm_bf16(SQ, SQ, SQ, (nn_operand){ a, SQ, 0, 0 }, (nn_operand){ b, SQ, 0, 0 }, 0.0f, c, SQ);
        t[i] = pt_now() - t0;
        u[i] = bench_cpu_now() - c0;
    }
    *cpu = pt_median(u, 5);
    return pt_median(t, 5);
}

/* The sgemm mix of one step's linear layers (the four of a block, n_layer times; the tied head
 * once), forward, input grad and weight grad of each at N rows; buffers sized by mix_floats.
 * Returns seconds; its flops in *flops, its CPU seconds in *cpu. */
typedef struct { float *x, *w, *y, *dw; } mix_bufs;

static double time_sgemm_model_mix(const gpt_config *g, int N, mix_bufs *m, double *flops, double *cpu) {
    int C = g->n_embd, V = g->vocab_size;
    int shapes[5][3] = {{C, 3 * C, g->n_layer}, {C, C, g->n_layer}, {C, 4 * C, g->n_layer},
                        {4 * C, C, g->n_layer}, {C, V, 1}};
    double t0 = pt_now(), c0 = bench_cpu_now();
    *flops = 0;
    for (int s = 0; s < 5; s++)
        for (int r = 0; r < shapes[s][2]; r++) {
            int IN = shapes[s][0], OUT = shapes[s][1];
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, OUT, IN, 1.0f, m->x, IN, m->w, OUT, 0.0f, m->y, OUT);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, IN, OUT, 1.0f, m->y, OUT, m->w, OUT, 0.0f, m->x, IN);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, IN, OUT, N, 1.0f, m->x, IN, m->y, OUT, 1.0f, m->dw, OUT);
            *flops += 3 * 2.0 * N * IN * OUT;
        }
    *cpu = bench_cpu_now() - c0;
    return pt_now() - t0;
}

static size_t mix_floats_x(const gpt_config *g, int N) { return (size_t)N * 4 * g->n_embd; }
static size_t mix_floats_y(const gpt_config *g, int N) {
    size_t a = (size_t)N * 4 * g->n_embd, b = (size_t)N * g->vocab_size;
    return a > b ? a : b;
}
static size_t mix_floats_w(const gpt_config *g) {
    size_t a = (size_t)4 * g->n_embd * g->n_embd, b = (size_t)g->vocab_size * g->n_embd;
    return a > b ? a : b;
}

typedef struct {
    double step, sq, mix, torch, torch_mm;   /* medians, seconds */
    double cpu_step, cpu_sq, cpu_mix, cpu_torch;   /* the same in CPU seconds of the thread */
    double mix_flops, flops, rss_mb, faults, torch_rss_mb;
    float loss;
    /* --precision bf16: the bf16 step and product (medians, seconds; CPU seconds), its loss */
    double bf_step, bf_sq, cpu_bf_step, cpu_bf_sq;
    float bf_loss;
    char torch_version[32];
    const char *torch_why;
} bench_res;

/* Our model, its batch, one warm-up step (whose peak RSS is the step's), then the buffers of the
 * sgemm references and the interleaved repeats. */
/* One timed step of m: wall seconds, CPU seconds in *cpu. */
static double time_step(gpt_model *m, const int *tok, const int *tgt, int B, int T, float *loss, double *cpu) {
    double t0 = pt_now(), c0 = bench_cpu_now();
    gpt_zero_grad(m);
    gpt_forward_backward(m, tok, tgt, B, T, loss);
    *cpu = bench_cpu_now() - c0;
    return pt_now() - t0;
}

static int bench_shape_run(const bench_shape *s, int repeats, int threads, int want_torch, int bf16,
                           bench_res *o) {
    int B = s->B, T = s->T, N = B * T;
    gpt_model m, mb16;
    memset(o, 0, sizeof *o);
    if (gpt_init(&m, &s->cfg) < 0) return -1;
    gpt_init_random(&m, 1);
    if (bf16 && gpt_init(&mb16, &s->cfg) < 0) { gpt_free(&m); return -1; }
    if (bf16) {
        gpt_init_random(&mb16, 1);
        gpt_set_precision(&mb16, NN_BF16);
    }
    int *tok = pt_malloc((size_t)N * sizeof *tok), *tgt = pt_malloc((size_t)N * sizeof *tgt);
    pt_rng r;
    pt_rng_seed(&r, 2);
    for (int i = 0; i < N; i++) {
        tok[i] = (int)(pt_rng_next(&r) % (uint64_t)s->cfg.vocab_size);
        tgt[i] = (int)(pt_rng_next(&r) % (uint64_t)s->cfg.vocab_size);
    }
    gpt_zero_grad(&m);
    gpt_forward_backward(&m, tok, tgt, B, T, &o->loss);   /* warm-up: buffers, page faults */
    o->rss_mb = bench_peak_rss_mb();
    if (bf16) gpt_forward_backward(&mb16, tok, tgt, B, T, &o->bf_loss);
    bench_torch bt = {0};
    char targs[96];
    snprintf(targs, sizeof targs, "--shape %s --threads %d", s->name, threads);
    if (want_torch && bench_torch_start(&bt, targs, &o->torch_why) == 0) {
        snprintf(o->torch_version, sizeof o->torch_version, "%s", bt.version);
        o->torch_rss_mb = bt.rss_mb;
    } else if (!want_torch) o->torch_why = "--no-torch";
    float *a = pt_falloc((size_t)SQ * SQ), *b = pt_falloc((size_t)SQ * SQ), *c = pt_falloc((size_t)SQ * SQ);
    mix_bufs mb = { pt_falloc(mix_floats_x(&s->cfg, N)), pt_falloc(mix_floats_w(&s->cfg)),
                    pt_falloc(mix_floats_y(&s->cfg, N)), pt_falloc(mix_floats_w(&s->cfg)) };
    for (size_t i = 0; i < (size_t)SQ * SQ; i++) { a[i] = (float)pt_rng_normal(&r); b[i] = (float)pt_rng_normal(&r); }
    for (size_t i = 0; i < mix_floats_x(&s->cfg, N); i++) mb.x[i] = 0.01f * (float)pt_rng_normal(&r);
    for (size_t i = 0; i < mix_floats_w(&s->cfg); i++) mb.w[i] = 0.01f * (float)pt_rng_normal(&r);
    double *t = pt_calloc((size_t)repeats * 13, sizeof *t), cpu;
    double *t_bf = t + 9 * repeats, *c_bf = t + 10 * repeats, *t_bsq = t + 11 * repeats, *c_bsq = t + 12 * repeats;
    double *t_step = t, *t_sq = t + repeats, *t_mix = t + 2 * repeats, *t_pt = t + 3 * repeats;
    double *t_ptmm = t + 4 * repeats, *c_step = t + 5 * repeats, *c_sq = t + 6 * repeats;
    double *c_mix = t + 7 * repeats, *c_pt = t + 8 * repeats;
    time_sgemm_square(a, b, c, &cpu);
    long faults = 0;
    for (int i = 0; i < repeats; i++) {
        t_sq[i] = time_sgemm_square(a, b, c, &c_sq[i]);
        t_mix[i] = time_sgemm_model_mix(&s->cfg, N, &mb, &o->mix_flops, &c_mix[i]);
        if (bf16) t_bsq[i] = time_bf16_square(a, b, c, &c_bsq[i]);
        if (bf16 && i % 2) t_bf[i] = time_step(&mb16, tok, tgt, B, T, &o->bf_loss, &c_bf[i]);
        long f0 = bench_page_faults();
        t_step[i] = time_step(&m, tok, tgt, B, T, &o->loss, &c_step[i]);
        faults += bench_page_faults() - f0;
        if (bf16 && !(i % 2)) t_bf[i] = time_step(&mb16, tok, tgt, B, T, &o->bf_loss, &c_bf[i]);
        t_pt[i] = bench_torch_time(&bt, "step", &c_pt[i]);
        t_ptmm[i] = bench_torch_time(&bt, "mm", NULL);
    }
    o->step = pt_median(t_step, repeats);
    o->sq = pt_median(t_sq, repeats);
    o->mix = pt_median(t_mix, repeats);
    o->cpu_step = pt_median(c_step, repeats);
    o->cpu_sq = pt_median(c_sq, repeats);
    o->cpu_mix = pt_median(c_mix, repeats);
    o->torch = bt.pid ? pt_median(t_pt, repeats) : 0;
    o->cpu_torch = bt.pid ? pt_median(c_pt, repeats) : 0;
    o->torch_mm = bt.pid ? pt_median(t_ptmm, repeats) : 0;
    o->faults = (double)faults / repeats;
    if (bf16) {
        o->bf_step = pt_median(t_bf, repeats), o->cpu_bf_step = pt_median(c_bf, repeats);
        o->bf_sq = pt_median(t_bsq, repeats), o->cpu_bf_sq = pt_median(c_bsq, repeats);
        gpt_free(&mb16);
    }
    o->flops = gpt_flops_per_step(&m, B, T);
    bench_torch_stop(&bt);
    free(t);
    free(a); free(b); free(c); free(mb.x); free(mb.w); free(mb.y); free(mb.dw);
    free(tok); free(tgt);
    gpt_free(&m);
    return 0;
}

/* The --precision bf16 lines: the bf16 product's peak next to sgemm's, the bf16 step and its
 * ratio to the fp32 step (same repeats, alternating order), the model's fraction of the peak.
 * With one thread also by CPU time (with more, the calling thread's CPU time misses the others'). */
static void bench_bf16_print(const bench_res *o, int N, int threads) {
    double sq = 2.0 * SQ * SQ * SQ, bf_gf = sq / o->bf_sq * 1e-9, sg_gf = sq / o->sq * 1e-9;
    char c1[80] = "", c2[120] = "", c3[80] = "";
    if (threads == 1) {
        snprintf(c1, sizeof c1, "; by CPU time %.2fx", o->cpu_sq / o->cpu_bf_sq);
        snprintf(c2, sizeof c2, "; by CPU time %.3fx: %.1f vs %.1f CPU ms", o->cpu_step / o->cpu_bf_step,
                 o->cpu_step * 1e3, o->cpu_bf_step * 1e3);
        snprintf(c3, sizeof c3, "; by CPU time %.3f", o->flops / o->cpu_bf_step / (sq / o->cpu_bf_sq));
    }
    printf("  bf16 (--precision bf16; kernel %s; %d thread%s):\n", nn_bf16_kernel(), nn_bf16_threads(),
           nn_bf16_threads() == 1 ? "" : "s");
    printf("  bf16 GEMM GFLOP/s  %8.2f   (square %d; %.2fx sgemm's %.2f%s)\n", bf_gf, SQ, bf_gf / sg_gf, sg_gf, c1);
    printf("  bf16 ms/step       %8.1f   (loss %.4f; fp32 %.4f)\n", o->bf_step * 1e3, o->bf_loss, o->loss);
    printf("  bf16 tokens/s      %8.0f\n", N / o->bf_step);
    printf("  bf16 step speed-up %8.3fx  (fp32 ms/step over bf16's, medians%s)\n", o->step / o->bf_step, c2);
    printf("  bf16 model/peak    %8.3f   (model GFLOP/s %.2f over the bf16 square's%s)\n",
           o->flops / o->bf_step / (sq / o->bf_sq), o->flops / o->bf_step * 1e-9, c3);
}

static void bench_shape_print(const bench_shape *s, int repeats, int threads, const bench_res *o) {
    const gpt_config *g = &s->cfg;
    int N = s->B * s->T;
    char mach[384];
    bench_machine_line(mach, sizeof mach);
    double model_gf = o->flops / o->step * 1e-9, sq_gf = 2.0 * SQ * SQ * SQ / o->sq * 1e-9;
    double mix_gf = o->mix_flops / o->mix * 1e-9;
    printf("bench_train: %s: n_layer %d, n_embd %d, n_head %d, vocab %d, B %d, T %d; %d thread%s;\n"
           "  step = zero grads + forward + backward (B and W), no optimizer update; median of %d\n"
           "  machine: %s\n", s->what, g->n_layer, g->n_embd, g->n_head, g->vocab_size, s->B, s->T,
           threads, threads == 1 ? "" : "s", repeats, mach);
    printf("  ms/step            %8.1f   (loss %.4f)\n", o->step * 1e3, o->loss);
    printf("  tokens/s           %8.0f\n", N / o->step);
    printf("  model GFLOP/s      %8.2f   (%.2f GFLOP/step: 6*N*B*T + 6*L*B*T*T*C)\n", model_gf, o->flops * 1e-9);
    printf("  sgemm GFLOP/s      %8.2f   (square %d)\n", sq_gf, SQ);
    printf("  sgemm GFLOP/s      %8.2f   (the model's linear-layer shapes, fwd + both grads)\n", mix_gf);
    printf("  ratio model/sgemm  %8.3f   (vs square %d; %.3f vs the model's shapes)\n",
           model_gf / sq_gf, SQ, model_gf / mix_gf);
    if (threads == 1)   /* one thread: its CPU time leaves out the time other processes held the core */
        printf("  by CPU time        %8.3f   (vs square; %.3f vs the model's shapes; %.1f CPU ms/step)\n",
               o->flops / o->cpu_step / (2.0 * SQ * SQ * SQ / o->cpu_sq),
               o->flops / o->cpu_step / (o->mix_flops / o->cpu_mix), o->cpu_step * 1e3);
    printf("  peak RSS           %8.0f MB after a step; page faults per steady step %.0f\n",
           o->rss_mb, o->faults);
    if (o->torch > 0) {
        printf("  PyTorch %s: %.1f ms/step, %.0f tokens/s, peak RSS %.0f MB after a step, matmul %.2f GFLOP/s\n"
               "  ratio tokens/s pipetrain/PyTorch  %.2fx   (same thread count, steps interleaved)\n",
               o->torch_version, o->torch * 1e3, N / o->torch, o->torch_rss_mb,
               2.0 * SQ * SQ * SQ / o->torch_mm * 1e-9, o->torch / o->step);
        if (threads == 1 && o->cpu_torch > 0)
            printf("  by CPU time               %.2fx   (PyTorch %.1f CPU ms/step)\n",
                   o->cpu_torch / o->cpu_step, o->cpu_torch * 1e3);
    } else
        printf("  PyTorch: skipped (%s)\n", o->torch_why ? o->torch_why : "it stopped answering");
    if (o->bf_step > 0) bench_bf16_print(o, N, threads);
}

/* One layer's attention of the reference shape alone (docs/perf.md "Attention's own products"):
 * forward and backward-input, the CPU time of the fastest of 31 calls each. */
static void bench_attention(void) {
    const bench_shape *s = &SHAPES[0];
    int B = s->B, T = s->T, C = s->cfg.n_embd, NH = s->cfg.n_head;
    size_t nq = (size_t)B * T * 3 * C, no = (size_t)B * T * C, na = (size_t)B * NH * T * T;
    float *qkv = pt_malloc(nq * sizeof(float)), *dqkv = pt_malloc(nq * sizeof(float));
    float *out = pt_malloc(no * sizeof(float)), *dout = pt_malloc(no * sizeof(float));
    float *att = pt_malloc(na * sizeof(float)), *scratch = pt_malloc(ATTENTION_SCRATCH_FLOATS(T) * sizeof(float));
    for (size_t i = 0; i < nq; i++) qkv[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    for (size_t i = 0; i < no; i++) dout[i] = (float)((i * 40503u) % 1000) / 1000.0f - 0.5f;
    double best_f = INFINITY, best_b = INFINITY;
    for (int r = 0; r < 31; r++) {
        double t0 = bench_cpu_now();
        attention_forward(out, att, qkv, B, T, C, NH);
        double t1 = bench_cpu_now();
        attention_backward_input(dqkv, scratch, dout, qkv, att, B, T, C, NH);
        double t2 = bench_cpu_now();
        best_f = fmin(best_f, t1 - t0), best_b = fmin(best_b, t2 - t1);
    }
    char mach[384];
    bench_machine_line(mach, sizeof mach);
    printf("bench_train --attention: one layer of %s (B %d, T %d, C %d, %d heads), CPU ms, fastest of 31\n"
           "  machine: %s\n  forward %.2f ms, backward (input) %.2f ms\n", s->what, B, T, C, NH, mach,
           best_f * 1e3, best_b * 1e3);
    free(qkv), free(dqkv), free(out), free(dout), free(att), free(scratch);
}

int main(int argc, char **argv) {
    const char *shape = "all";
    int repeats = 0, threads = 1, want_torch = 1, bf16 = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--shape") && i + 1 < argc) shape = argv[++i];
        else if (!strcmp(argv[i], "--repeats") && i + 1 < argc) repeats = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--no-torch")) want_torch = 0;
        else if (!strcmp(argv[i], "--precision") && i + 1 < argc) {
            nn_precision p;
            if (nn_precision_parse(argv[++i], &p) < 0) {
                fprintf(stderr, "bench_train: --precision '%s': expected fp32 or bf16\n", argv[i]);
                return 2;
            }
            bf16 = p == NN_BF16;
        }
        else if (!strcmp(argv[i], "--attention")) {
            openblas_set_num_threads(1);
            bench_attention();
            return 0;
        }
        else if (!strcmp(argv[i], "--machine")) {   /* the machine line alone, for scripts */
            char mach[384];
            bench_machine_line(mach, sizeof mach);
            printf("%s\n", mach);
            return 0;
        }
        else if (atoi(argv[i]) > 0) repeats = atoi(argv[i]);   /* the old form: bench_train N */
        else {
            fprintf(stderr, "usage: bench_train [--shape ref|gpt2|all] [--repeats N] [--threads N] [--no-torch] "
                            "[--precision fp32|bf16] | --machine | --attention\n");
            return 2;
        }
    }
    if (threads < 1) threads = 1;
    openblas_set_num_threads(threads);
    signal(SIGPIPE, SIG_IGN);   /* a PyTorch process that dies is reported, not fatal */
    int status = 0, ran = 0;
    for (size_t k = 0; k < sizeof SHAPES / sizeof *SHAPES; k++) {
        const bench_shape *s = &SHAPES[k];
        if (strcmp(shape, "all") && strcmp(shape, s->name)) continue;
        int n = repeats > 0 ? repeats : s->repeats;
        bench_res o;
        ran++;
        if (bench_shape_run(s, n, threads, want_torch, bf16, &o) < 0) {
            fprintf(stderr, "bench_train: %s: %s\n", s->name, pt_err());
            status = 1;
            continue;
        }
        bench_shape_print(s, n, threads, &o);
        fflush(stdout);
    }
    if (!ran) { fprintf(stderr, "bench_train: no shape '%s' (ref, gpt2, all)\n", shape); return 2; }
    return status;
}
