/* What the kernels were compiled for, for benchmarks and reports: the vector ISA that -march
 * allowed (the CPU may have more; OpenBLAS picks its own kernels at run time). */
#include "nn/nn.h"

const char *nn_build_isa(void) {
#if defined(__AVX512F__)
    return "AVX-512";
#elif defined(__AVX2__)
    return "AVX2";
#elif defined(__SSE2__)
    return "SSE2";
#elif defined(__ARM_NEON)
    return "NEON";
#else
    return "scalar";
#endif
}
