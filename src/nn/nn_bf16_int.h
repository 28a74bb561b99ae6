/* Private to the bf16 products (nn_bf16.c, nn_bf16_avx512.c): the blocking, the packed layouts
 * and the three steps every kernel implements. Not for other modules.
 *
 * Goto's blocking: a block of B (BF_KC x up to BF_NC) is packed once, then for each block of A
 * (up to BF_MC x BF_KC, in L2) a BF_MR x BF_NR tile of C runs over every BF_NR-wide panel of B
 * (BF_KC x BF_NR: 128 KB, in L2 with the A block). A long k block matters most: each block of k
 * is one more pass over C (read, add, write back), which on the bench's larger shapes comes from
 * L3; k blocks of 256 (a B panel in L1) ran at 0.70-0.80x oneDNN's speed there, 1024 at par.
 * The sizes were measured against 12 x 32, 8 x 48 and 14 x 32 tiles and other blocks on the
 * bench's shapes (dev/bf16_onednn.cpp, which builds with -DBF_KC=.. -DBF_MC=.. -DBF_NC=.. to try
 * others; docs/perf.md). The k dimension goes in pairs (vdpbf16ps multiplies two bf16
 * of A by two of B into one fp32 sum), so a packed value is a uint32_t holding the pair
 * (k even in the low half, k odd in the high half; a missing k is 0):
 *   A: row-major, row r of the block at r * BF_KCP, pair kp at + kp (rows past the block's zero,
 *      up to a multiple of 16, so BF_MC is one of 16 and BF_MR);
 *   B: panel q (columns q*BF_NR ..) at q * bstride, pair kp of column j at + kp*BF_NR + j
 *      (columns past N zero); bstride = bf_bstride(kcp) leaves room for whole groups of 16 pairs. */
#ifndef PT_NN_BF16_INT_H
#define PT_NN_BF16_INT_H
#include "nn/nn_bf16.h"

#define BF_MR 6           /* C tile rows: 6 x 4 vectors = 24 of 32 registers hold the sums */
#define BF_NR 64          /* C tile columns: four vectors of 16 fp32 */
#ifndef BF_KC
#define BF_KC 1024        /* k per block (even): one pass over C up to k 1024 */
#endif
#define BF_KCP (BF_KC / 2)
#ifndef BF_MC
#define BF_MC 96          /* rows of A per block (192 KB packed, in L2): a multiple of 16 and of BF_MR */
#endif
#ifndef BF_NC
#define BF_NC 1024        /* columns of B per block: 16 panels, 2 MB packed (in L3) */
#endif

static inline int bf_round16(int n) { return (n + 15) & ~15; }
static inline size_t bf_bstride(int kcp) { return (size_t)bf_round16(kcp) * BF_NR; }

/* The three steps of one kernel family. The packers read rows [i0, i0 + mc) (A) or columns
 * [j0, j0 + nc) (B) and k in [k0, k0 + kc) of an operand of M rows (A) or N columns (B) and K
 * depth; the micro-kernel sums kcp pairs of one tile into C (acc 1: onto it, 0: over it),
 * storing mr <= BF_MR rows and nr <= BF_NR columns. */
typedef struct {
    void (*pack_a)(uint32_t *dst, const nn_operand *A, int i0, int mc, int k0, int kc);
    void (*pack_b)(uint32_t *dst, const nn_operand *B, int k0, int kc, int j0, int nc);
    void (*kernel)(int kcp, const uint32_t *a, const uint32_t *b, float *c, int ldc, int mr,
                   int nr, int acc);
} bf_impl;

/* The AVX512_BF16 family (nn_bf16_avx512.c), compiled for it whatever -march says: call only
 * when the CPU has it. */
extern const bf_impl bf_impl_avx512;

#endif
