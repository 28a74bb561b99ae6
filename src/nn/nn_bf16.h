/* bf16 matrix products with fp32 sums: the kernels behind `--precision bf16`. Inputs (fp32, or
 * bf16 already) are rounded to bf16 (round to nearest even) as they are packed; the products
 * of two bf16 values are exact in fp32 and are summed in fp32, as AVX512_BF16's vdpbf16ps does
 * (one pair of k at a time: c += a[2k+1] b[2k+1], then c += a[2k] b[2k]). Outputs are fp32.
 * No state but packing buffers per calling thread (allocated on its first call, freed when it
 * exits). Not a BLAS: beta is 0 or 1, no alpha.
 *
 * Threads: a product is split into parts of C (whole tiles of the wider of M and N), one per
 * thread, over as many threads as OpenBLAS is set to use (openblas_set_num_threads: the count
 * the fp32 path's sgemm gets, so a layout that gives each stage thread one core gets one thread
 * here too, and one process on every core gets every core), fewer for small products. Each
 * element's sums run in the same order whatever the split: bitwise the one-thread result.
 *
 * The kernel is chosen once, from what the CPU reports (cpuid): AVX512_BF16 micro-kernels
 * (vdpbf16ps on panels packed in its pair layout), or on a CPU without them an emulation in
 * plain C with the same packed layout and the same sums, slower than fp32
 * sgemm (nn_bf16_kernel says which; the CLI prints it). Legend as nn.h. */
#ifndef PT_NN_BF16_H
#define PT_NN_BF16_H
#include <stddef.h>
#include <stdint.h>
#include "util/half.h"   /* the scalar conversions: one definition */

/* The number formats of the matmuls (`--precision`). */
typedef enum { NN_FP32 = 0, NN_BF16 = 1 } nn_precision;

/* "fp32" / "bf16"; nn_precision_parse: 0 with *p set, -1 for any other name. */
const char *nn_precision_name(nn_precision p);
int nn_precision_parse(const char *s, nn_precision *p);

/* ---- conversions -------------------------------------------------------------------------- */
/* fp32 -> bf16, round to nearest even (a NaN stays a quiet NaN of its sign; inf stays inf). */
static inline uint16_t nn_bf16_of(float x) { return pt_f32_to_bf16(x); }
static inline float nn_f32_of(uint16_t h) { return pt_bf16_to_f32(h); }
/* dst (n) = bf16 of src (n), and back; nn_bf16_round: dst (n) = src rounded to bf16, in fp32
 * (dst may alias src). */
void nn_bf16_from_f32(uint16_t *dst, const float *src, size_t n);
void nn_bf16_to_f32(float *dst, const uint16_t *src, size_t n);
void nn_bf16_round(float *dst, const float *src, size_t n);

/* ---- products ----------------------------------------------------------------------------- */
/* One operand: p holds fp32 (bf16 0) or bf16 (bf16 1) values, row-major with leading dimension
 * ld, read transposed when trans is 1 (as cblas's Trans of a row-major matrix). */
typedef struct {
    const void *p;
    int ld, trans, bf16;
} nn_operand;

/* C (M,N) = beta C + op(A) (M,K) op(B) (K,N), op(A) and op(B) rounded to bf16, fp32 sums;
 * beta 0 (C is only written) or 1. C row-major with leading dimension ldc. Any sizes >= 0
 * (K 0 with beta 0 zeroes C). */
void nn_gemm_bf16(int M, int N, int K, nn_operand A, nn_operand B, float beta, float *C, int ldc);

/* The same with the emulated kernel whatever the CPU has (tests compare the two). */
void nn_gemm_bf16_emulated(int M, int N, int K, nn_operand A, nn_operand B, float beta,
                           float *C, int ldc);

/* The threads a product may use: nn_bf16_set_threads(n) with n >= 1 fixes it (at most
 * NN_BF16_MAX_THREADS), n 0 (the start) follows openblas_get_num_threads(). */
#define NN_BF16_MAX_THREADS 64
void nn_bf16_set_threads(int n);
int nn_bf16_threads(void);

/* 1 when this CPU runs the AVX512_BF16 kernels, else 0 (also 0 when the environment sets
 * PIPETRAIN_BF16_EMULATE to anything but 0: the tests run the emulation that way). */
int nn_bf16_native(void);
/* What nn_gemm_bf16 runs: "AVX512_BF16 (vdpbf16ps)" or a sentence saying it emulates, slower. */
const char *nn_bf16_kernel(void);

#endif
