// Experiment, not product: our bf16 GEMM (nn_gemm_bf16) against oneDNN 2.6's bf16 matmul
// primitive (Debian's libdnnl-dev; its C API has no bf16 gemm, so the C++ matmul primitive, created
// once per shape, inputs already bf16, one thread) on the bench shapes: 1024^3 and the linear
// layers of the reference shape (N 2048 rows, C 256) and of GPT-2 124M (N 1024, C 768), the forward
// product of each (row-major inp (N,IN) x w (IN,OUT)). Alternating calls, CPU time, median of 9.
// Two comparisons: operands already bf16, and fp32 operands (what the model passes: oneDNN then
// needs a conversion pass first, timed with it; ours rounds while packing).
// Other blocks of ours: add -DBF_KC=.. -DBF_MC=.. -DBF_NC=.. and src/nn/nn_bf16*.c to the g++ line.
// Build and run (from the repository root, after make):
//   g++ -O2 -std=c++17 -Isrc dev/bf16_onednn.cpp build/libpipetrain.a -ldnnl -lopenblas -lm -lpthread -o build/bf16_onednn
//   OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 build/bf16_onednn
#include <oneapi/dnnl/dnnl.hpp>
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <vector>
extern "C" {
#include "nn/nn_bf16.h"
}

static double cpu_now() {
    timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

int main() {
    using namespace dnnl;
    engine eng(engine::kind::cpu, 0);
    stream st(eng);
    struct { const char *what; long M, N, K; } shapes[] = {
        {"square 1024^3", 1024, 1024, 1024},
        {"ref c_attn fwd (2048 x 256 -> 768)", 2048, 768, 256},
        {"ref c_proj fwd (2048 x 256 -> 256)", 2048, 256, 256},
        {"ref mlp.c_fc fwd (2048 x 256 -> 1024)", 2048, 1024, 256},
        {"ref mlp.c_proj fwd (2048 x 1024 -> 256)", 2048, 256, 1024},
        {"gpt2 c_attn fwd (1024 x 768 -> 2304)", 1024, 2304, 768},
        {"gpt2 mlp.c_proj fwd (1024 x 3072 -> 768)", 1024, 768, 3072},
    };
    std::printf("bf16 GEMM, one thread, CPU-time GFLOP/s (median of 9 alternating calls); kernel: %s\n"
                "(fp32 in: oneDNN's time includes converting both operands to bf16 first, ours rounds while\n"
                "packing; (x): ours' speed over oneDNN's)\n", nn_bf16_kernel());
    for (auto &s : shapes) {
        long M = s.M, N = s.N, K = s.K;
        std::vector<float> a(M * K), b(K * N), c(M * N);
        for (long i = 0; i < M * K; i++) a[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
        for (long i = 0; i < K * N; i++) b[i] = (float)((i * 40503u) % 1000) / 1000.0f - 0.5f;
        std::vector<uint16_t> ah(M * K), bh(K * N);
        nn_bf16_from_f32(ah.data(), a.data(), a.size());
        nn_bf16_from_f32(bh.data(), b.data(), b.size());
        memory::desc ad({M, K}, memory::data_type::bf16, memory::format_tag::ab);
        memory::desc bd({K, N}, memory::data_type::bf16, memory::format_tag::ab);
        memory::desc cd({M, N}, memory::data_type::f32, memory::format_tag::ab);
        matmul::primitive_desc pd(matmul::desc(ad, bd, cd), eng);
        matmul mm(pd);
        memory am(ad, eng, ah.data()), bm(bd, eng, bh.data()), cm(cd, eng, c.data());
        std::vector<double> t_dnnl, t_dnnl32, t_ours16, t_ours32;
        for (int r = 0; r < 10; r++) {
            double tc = cpu_now();   // what the model would pay: its operands are fp32
            nn_bf16_from_f32(ah.data(), a.data(), a.size());
            nn_bf16_from_f32(bh.data(), b.data(), b.size());
            mm.execute(st, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
            st.wait();
            double t0 = cpu_now();
            mm.execute(st, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
            st.wait();
            double t1 = cpu_now();
            nn_gemm_bf16((int)M, (int)N, (int)K, {ah.data(), (int)K, 0, 1}, {bh.data(), (int)N, 0, 1}, 0.0f, c.data(), (int)N);
            double t2 = cpu_now();
            nn_gemm_bf16((int)M, (int)N, (int)K, {a.data(), (int)K, 0, 0}, {b.data(), (int)N, 0, 0}, 0.0f, c.data(), (int)N);
            double t3 = cpu_now();
            if (r == 0) continue;   // warm-up
            t_dnnl.push_back(t1 - t0), t_dnnl32.push_back(t0 - tc), t_ours16.push_back(t2 - t1), t_ours32.push_back(t3 - t2);
        }
        double f = 2.0 * M * N * K * 1e-9;
        std::printf("  %-42s bf16 in: oneDNN %6.1f ours %6.1f (%.2fx)   fp32 in: oneDNN %6.1f ours %6.1f (%.2fx)\n",
                    s.what, f / median(t_dnnl), f / median(t_ours16), median(t_dnnl) / median(t_ours16),
                    f / median(t_dnnl32), f / median(t_ours32), median(t_dnnl32) / median(t_ours32));
    }
    return 0;
}
