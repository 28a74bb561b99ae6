/* Softmax cross-entropy over the vocabulary, mean over rows. The forward keeps the
 * probabilities (the backward needs nothing else); no fused logits matmul here. */
#include "nn/nn.h"
#include "nn/nn_math.h"
#include <float.h>
#include <math.h>
#include <stddef.h>

float crossentropy_forward(float *probs, const float *logits, const int *targets, int N, int V) {
    double loss = 0;
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * V;
        float *p = probs + (size_t)n * V;
        float lt = l[targets[n]];   /* read before p (maybe = l) is written */
        float mx = nn_max(l, V), s = nn_exp_shift_sum(p, l, mx, V);
        float inv = 1.0f / s;
        for (int v = 0; v < V; v++) p[v] *= inv;   /* vec */
        /* log p from the logits directly: exact even when p underflows to 0 */
        loss += (double)(mx + logf(s) - lt);
    }
    return (float)(loss / N);
}

void crossentropy_backward_input(float *dlogits, const float *probs, const int *targets,
                                 float dloss, int N, int V) {
    float k = dloss / (float)N;
    for (int n = 0; n < N; n++) {
        const float *p = probs + (size_t)n * V;
        float *d = dlogits + (size_t)n * V;
        for (int v = 0; v < V; v++) d[v] = k * p[v];   /* vec */
        d[targets[n]] -= k;
    }
}

/* ---- vocabulary-parallel ------------------------------------------------------------------ */
void crossentropy_shard_stats(float *rowmax, float *tlogit, const float *logits,
                              const int *targets, int v0, int nv, int N, int V) {
    for (int n = 0; n < N; n++) {
        const float *l = logits + (size_t)n * V;
        int t = targets[n] - v0;
        rowmax[n] = nv > 0 ? nn_max(l, nv) : -FLT_MAX;
        tlogit[n] = t >= 0 && t < nv ? l[t] : 0.0f;
    }
}

void crossentropy_shard_exp(float *probs, float *sums, const float *logits, const float *rowmax,
                            int nv, int N, int V) {
    for (int n = 0; n < N; n++) {
        float *p = probs + (size_t)n * V;
        sums[n] = nn_exp_shift_sum(p, logits + (size_t)n * V, rowmax[n], nv);
        for (int v = nv; v < V; v++) p[v] = 0.0f;
    }
}

float crossentropy_shard_finish(float *probs, const float *rowmax, const float *sums,
                                const float *tlogit, int N, int V) {
    double loss = 0;
    for (int n = 0; n < N; n++) {
        float *p = probs + (size_t)n * V, inv = 1.0f / sums[n];
        for (int v = 0; v < V; v++) p[v] *= inv;   /* vec */
        loss += (double)(rowmax[n] + logf(sums[n]) - tlogit[n]);
    }
    return (float)(loss / N);
}

void crossentropy_shard_backward_input(float *dlogits, const float *probs, const int *targets,
                                       int v0, int nv, float dloss, int N, int V) {
    float k = dloss / (float)N;
    for (int n = 0; n < N; n++) {
        const float *p = probs + (size_t)n * V;
        float *d = dlogits + (size_t)n * V;
        int t = targets[n] - v0;
        for (int v = 0; v < V; v++) d[v] = k * p[v];   /* vec */
        if (t >= 0 && t < nv) d[t] -= k;
    }
}
