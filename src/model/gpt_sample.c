/* Text generation (model/gpt_sample.h): the prompt as tokens, then one forward pass per new
 * token over the last n_positions tokens, sampling from the last position's logits. */
#include "model/gpt_sample.h"
#include "util/pt.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Samples one token from logits (V) with temperature and top-k (0 = all); p is scratch (V). */
static int sample_token(const float *logits, int V, double temp, int top_k, pt_rng *rng, double *p) {
    double mx = -INFINITY, sum = 0, cut = -INFINITY;
    for (int i = 0; i < V; i++) mx = fmax(mx, logits[i]);
    if (top_k > 0 && top_k < V) {     /* cut = the k-th largest logit (V is small: O(V*k)) */
        for (int i = 0; i < V; i++) p[i] = logits[i];
        for (int j = 0; j < top_k; j++) {
            int best = 0;
            for (int i = 1; i < V; i++) if (p[i] > p[best]) best = i;
            cut = p[best];
            p[best] = -INFINITY;
        }
    }
    for (int i = 0; i < V; i++) {
        p[i] = logits[i] >= cut ? exp((logits[i] - mx) / temp) : 0;
        sum += p[i];
    }
    double u = pt_rng_uniform(rng) * sum;
    for (int i = 0; i < V; i++) if ((u -= p[i]) <= 0) return i;
    return V - 1;
}

/* The prompt as tokens into ctx: the bytes of o->prompt (byte-level models), then the
 * comma-separated ids of o->prompt_tokens. Returns the count, or -1 naming the bad entry. */
static int prompt_tokens(const gpt_sample_opts *o, int V, int *ctx) {
    int n = 0;
    const char *text = o->prompt ? o->prompt : "";
    if (text[0] && V != GPT_BYTE_VOCAB)
        return pt_seterr("--prompt is text, which needs a byte-level model (vocab_size %d, this one has "
                         "%d); give token ids with --prompt-tokens 1,2,3", GPT_BYTE_VOCAB, V);
    for (const char *s = text; *s; s++) ctx[n++] = (unsigned char)*s;
    for (const char *s = o->prompt_tokens; s && *s;) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || (*end && *end != ',') || v < 0 || v >= V)
            return pt_seterr("--prompt-tokens '%s': entry %d is not a token id in [0, %d)", o->prompt_tokens, n, V);
        ctx[n++] = (int)v;
        s = *end ? end + 1 : end;
    }
    return n;
}

int gpt_sample(gpt_model *m, const gpt_sample_opts *o, gpt_sample_emit_fn emit, void *cb) {
    if (!(o->temperature > 0) || o->length < 0 || o->top_k < 0)
        return pt_seterr("--temperature must be > 0, --length and --top-k >= 0 (got %g, %d, %d)",
                         o->temperature, o->length, o->top_k);
    int V = m->cfg.vocab_size, maxT = m->cfg.n_positions;
    size_t cap = (o->prompt ? strlen(o->prompt) : 0) + (o->prompt_tokens ? strlen(o->prompt_tokens) : 0)
                 + (size_t)o->length + 1;
    int *ctx = pt_malloc(sizeof(int) * cap);
    int n = prompt_tokens(o, V, ctx);
    if (n < 0) { free(ctx); return -1; }
    for (int i = 0; i < n; i++) emit(ctx[i], cb);
    if (n == 0) ctx[n++] = '\n' % V;          /* an empty prompt starts from a newline (byte 10) */
    float *logits = pt_falloc((size_t)maxT * V);
    double *p = pt_malloc(sizeof(double) * V);
    pt_rng rng;
    pt_rng_seed(&rng, o->seed);
    int rc = 0;
    for (int i = 0; i < o->length && rc == 0; i++) {
        int T = n < maxT ? n : maxT;
        rc = gpt_forward(m, logits, ctx + n - T, 1, T);
        if (rc == 0) {
            ctx[n] = sample_token(logits + (size_t)(T - 1) * V, V, o->temperature, o->top_k, &rng, p);
            emit(ctx[n++], cb);
        }
    }
    free(p); free(logits); free(ctx);
    return rc;
}
