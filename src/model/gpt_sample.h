/* Text generation from a model: repeated forward passes over a sliding window of the last
 * n_positions tokens, sampling each next token with temperature and top-k. It is not a
 * tokenizer (byte-level models read their prompt as bytes; others take token ids) and it prints
 * nothing: each token goes to the caller's emit function. */
#ifndef PT_GPT_SAMPLE_H
#define PT_GPT_SAMPLE_H
#include "model/gpt.h"
#include <stdint.h>

#define GPT_BYTE_VOCAB 256   /* a byte-level model: tokens are bytes (text in, text out) */

typedef struct {
    const char *prompt;         /* text to continue (a byte-level model only); "" or NULL: none */
    const char *prompt_tokens;  /* token ids to continue, "15496,11" (any model); NULL: none */
    int length;                 /* tokens to generate, >= 0 */
    double temperature;         /* > 0 */
    int top_k;                  /* sample among the k likeliest tokens; 0: all */
    uint64_t seed;
} gpt_sample_opts;

/* Called with each token in order: the prompt's, then each generated one. */
typedef void (*gpt_sample_emit_fn)(int token, void *ctx);

/* Emits the prompt's tokens, then o->length sampled ones (an empty prompt starts from a newline,
 * token 10, not emitted). Deterministic for a given model, options and seed. -1 naming the
 * option when the prompt does not fit the model (text for a vocabulary other than bytes, an id
 * out of range) or an option is out of range; -1 from the forward pass. */
int gpt_sample(gpt_model *m, const gpt_sample_opts *o, gpt_sample_emit_fn emit, void *ctx);

#endif
