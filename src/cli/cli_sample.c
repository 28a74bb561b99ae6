/* pipetrain sample: generates text from a checkpoint (or config + weights) by repeated forward
 * passes over a sliding window, with temperature and top-k. Byte-level models (vocab 256) read
 * and print text; other vocabularies (no tokenizer here) take --prompt-tokens and print ids. */
#include "cli/cli.h"
#include "cli/cli_model.h"
#include "model/gpt_io.h"
#include "util/pt.h"
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

typedef struct {
    const char *checkpoint, *config, *init, *prompt, *prompt_tokens;
    int length, top_k;
    double temperature;
    long seed;
} sample_args;

/* A run folder (holding ckpt-N subfolders) resolves to its newest checkpoint. */
static int resolve_checkpoint(const char *dir, char *out, size_t n) {
    char path[1200];
    struct stat st;
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    if (stat(path, &st) == 0) { snprintf(out, n, "%s", dir); return 0; }
    DIR *d = opendir(dir);
    if (!d) return pt_seterr("%s: no such checkpoint folder", dir);
    long best = -1, k;
    struct dirent *e;
    char tail;
    while ((e = readdir(d)))
        if (sscanf(e->d_name, "ckpt-%ld%c", &k, &tail) == 1 && k > best) best = k;
    closedir(d);
    if (best < 0) return pt_seterr("%s: neither a checkpoint (no manifest.json) nor a run folder "
                                   "with ckpt-N checkpoints", dir);
    snprintf(out, n, "%s/ckpt-%ld", dir, best);
    return 0;
}

/* Samples one token from logits (V) with temperature and top-k (0 = all). */
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

#define BYTE_VOCAB 256   /* a byte-level model: tokens are bytes, printed as text */

static void emit(int tok, int V) {
    if (V == BYTE_VOCAB) putchar(tok);
    else printf("%d ", tok);
    fflush(stdout);
}

/* The prompt as tokens into ctx: bytes of --prompt (byte-level models), or the comma-separated
 * ids of --prompt-tokens (any model). Returns the count, or -1 naming the bad entry. */
static int prompt_tokens(const sample_args *a, int V, int *ctx) {
    int n = 0;
    if (a->prompt[0] && V != BYTE_VOCAB)
        return pt_seterr("--prompt is text, which needs a byte-level model (vocab_size %d, this one has "
                         "%d); give token ids with --prompt-tokens 1,2,3", BYTE_VOCAB, V);
    for (const char *s = a->prompt; *s; s++) ctx[n++] = (unsigned char)*s;
    for (const char *s = a->prompt_tokens; s && *s;) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || (*end && *end != ',') || v < 0 || v >= V)
            return pt_seterr("--prompt-tokens '%s': entry %d is not a token id in [0, %d)", a->prompt_tokens, n, V);
        ctx[n++] = (int)v;
        s = *end ? end + 1 : end;
    }
    return n;
}

static int sample_run(gpt_model *m, const sample_args *a) {
    int V = m->cfg.vocab_size, maxT = m->cfg.n_positions;
    size_t cap = strlen(a->prompt) + (a->prompt_tokens ? strlen(a->prompt_tokens) : 0) + a->length + 1;
    int *ctx = pt_malloc(sizeof(int) * cap);
    int n = prompt_tokens(a, V, ctx);
    if (n < 0) { free(ctx); return -1; }
    for (int i = 0; i < n; i++) emit(ctx[i], V);
    if (n == 0) ctx[n++] = '\n' % V;          /* an empty prompt starts from a newline (byte 10) */
    float *logits = pt_falloc((size_t)maxT * V);
    double *p = pt_malloc(sizeof(double) * V);
    pt_rng rng;
    pt_rng_seed(&rng, (uint64_t)a->seed);
    int rc = 0;
    for (int i = 0; i < a->length && rc == 0; i++) {
        int T = n < maxT ? n : maxT;
        rc = gpt_forward(m, logits, ctx + n - T, 1, T);
        if (rc == 0) { ctx[n] = sample_token(logits + (size_t)(T - 1) * V, V, a->temperature, a->top_k, &rng, p); emit(ctx[n++], V); }
    }
    putchar('\n');
    free(p); free(logits); free(ctx);
    return rc;
}

int cli_sample(int argc, char **argv) {
    sample_args a = {.prompt = "", .length = 200, .temperature = 1.0, .top_k = 0, .seed = 1};
    const cli_opt opts[] = {
        {"--checkpoint", OPT_STR, &a.checkpoint, "checkpoint folder, or a run folder (newest ckpt-N)"},
        {"--config", OPT_STR, &a.config, "model config JSON (instead of --checkpoint)"},
        {"--init", OPT_STR, &a.init, "weights (safetensors) with --config"},
        {"--prompt", OPT_STR, &a.prompt, "text to continue (byte-level models, vocab 256)"},
        {"--prompt-tokens", OPT_STR, &a.prompt_tokens, "token ids to continue, e.g. 15496,11 (any model)"},
        {"--length", OPT_INT, &a.length, "tokens to generate (default 200)"},
        {"--temperature", OPT_DOUBLE, &a.temperature, "softmax temperature (default 1.0)"},
        {"--top-k", OPT_INT, &a.top_k, "sample among the k likeliest tokens (default 0: all)"},
        {"--seed", OPT_LONG, &a.seed, "sampling seed (default 1)"},
    };
    int rc = cli_parse(argc, argv, "sample", "--checkpoint DIR [--prompt TEXT] [--length N]", opts,
                       sizeof opts / sizeof *opts);
    if (rc) return rc < 0 ? 2 : 0;
    if (!(a.temperature > 0) || a.length < 0 || a.top_k < 0) {
        fprintf(stderr, "pipetrain sample: --temperature must be > 0, --length and --top-k >= 0\n");
        return 2;
    }
    gpt_model m;
    char dir[1200];
    if (a.checkpoint) rc = resolve_checkpoint(a.checkpoint, dir, sizeof dir) < 0 ? -1
                           : cli_model_from_checkpoint(&m, dir);
    else if (a.config && a.init) rc = gpt_model_load(&m, a.config, a.init, 0, NULL);
    else rc = pt_seterr("give --checkpoint DIR, or --config and --init");
    if (rc < 0) return cli_fail("sample");
    rc = sample_run(&m, &a);
    gpt_free(&m);
    return rc < 0 ? cli_fail("sample") : 0;
}
