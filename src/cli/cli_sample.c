/* pipetrain sample: generates text from a checkpoint (or config + weights): parses the flags,
 * loads the model (ckpt/ckpt_model.h: a run folder's newest complete checkpoint), runs the
 * sampler (model/gpt_sample.h) and prints. Byte-level models (vocab 256) read and print text;
 * with --tokenizer (src/tok) any model does; other vocabularies take --prompt-tokens and print
 * ids. */
#include "cli/cli.h"
#include "ckpt/ckpt_model.h"
#include "model/gpt_io.h"
#include "model/gpt_sample.h"
#include "tok/tok.h"
#include "util/pt.h"
#include <stdio.h>
#include <stdlib.h>

/* Prints one token: a byte for a byte-level model, else its id and a space. */
static void print_token(int id, void *vocab) {
    if (*(const int *)vocab == GPT_BYTE_VOCAB) putchar(id);
    else printf("%d ", id);
    fflush(stdout);
}

/* With a tokenizer: each token's text; the <|endoftext|> an empty prompt starts from is not shown. */
typedef struct {
    const tok *t;
    int skip;        /* tokens not to print */
} tok_printer;

static void print_text(int id, void *ctx) {
    tok_printer *p = ctx;
    size_t len;
    const char *s = tok_token_bytes(p->t, id, &len);
    if (p->skip > 0) p->skip--;
    else if (s) fwrite(s, 1, len, stdout);
    else printf("[%d]", id);    /* a padded vocabulary's id the tokenizer has no text for */
    fflush(stdout);
}

/* --tokenizer: the prompt's text as ids into o (so any vocabulary continues text). */
static int prompt_through(const char *spec, gpt_sample_opts *o, tok **t, char **csv, tok_printer *pr) {
    if (tok_load(t, spec) < 0) return -1;
    if (o->prompt_tokens) return pt_seterr("--tokenizer takes the prompt as text (--prompt), not --prompt-tokens");
    *csv = tok_encode_csv(*t, o->prompt ? o->prompt : "");
    *pr = (tok_printer){*t, o->prompt && o->prompt[0] ? 0 : 1};
    o->prompt_tokens = *csv;
    o->prompt = "";
    return 0;
}

int cli_sample(int argc, char **argv) {
    const char *checkpoint = NULL, *config = NULL, *init = NULL, *tokenizer = NULL;
    long seed = 1;
    gpt_sample_opts o = {.prompt = "", .length = 200, .temperature = 1.0, .top_k = 0};
    const cli_opt opts[] = {
        {"--checkpoint", OPT_STR, &checkpoint, "checkpoint folder, or a run folder (newest complete ckpt-N)"},
        {"--config", OPT_STR, &config, "model config JSON (instead of --checkpoint)"},
        {"--init", OPT_STR, &init, "weights (safetensors) with --config"},
        {"--prompt", OPT_STR, &o.prompt, "text to continue (byte-level models, vocab 256, or with --tokenizer)"},
        {"--tokenizer", OPT_STR, &tokenizer, "gpt2 | DIR: the prompt's text through it, the tokens printed as text"},
        {"--prompt-tokens", OPT_STR, &o.prompt_tokens, "token ids to continue, e.g. 15496,11 (any model)"},
        {"--length", OPT_INT, &o.length, "tokens to generate (default 200)"},
        {"--temperature", OPT_DOUBLE, &o.temperature, "softmax temperature (default 1.0)"},
        {"--top-k", OPT_INT, &o.top_k, "sample among the k likeliest tokens (default 0: all)"},
        {"--seed", OPT_LONG, &seed, "sampling seed (default 1)"},
    };
    int rc = cli_parse(argc, argv, "sample", "--checkpoint DIR [--prompt TEXT] [--length N]", opts,
                       sizeof opts / sizeof *opts);
    if (rc) return rc < 0 ? 2 : 0;
    if (!(o.temperature > 0) || o.length < 0 || o.top_k < 0) {
        fprintf(stderr, "pipetrain sample: --temperature must be > 0, --length and --top-k >= 0\n");
        return 2;
    }
    o.seed = (uint64_t)seed;
    gpt_model m;
    if (checkpoint) rc = ckpt_model_load(&m, checkpoint, NULL, 0);
    else if (config && init) rc = gpt_model_load(&m, config, init, 0, NULL);
    else rc = pt_seterr("give --checkpoint DIR, or --config and --init");
    if (rc < 0) return cli_fail("sample");
    tok *t = NULL;
    char *csv = NULL;
    tok_printer pr;
    if (tokenizer) rc = prompt_through(tokenizer, &o, &t, &csv, &pr);
    if (rc == 0 && t && tok_vocab_size(t) > m.cfg.vocab_size)
        rc = pt_seterr("--tokenizer %s has %d tokens, more than the model's vocab_size %d", tokenizer,
                       tok_vocab_size(t), m.cfg.vocab_size);
    if (rc == 0) rc = t ? gpt_sample(&m, &o, print_text, &pr) : gpt_sample(&m, &o, print_token, &m.cfg.vocab_size);
    putchar('\n');
    free(csv);
    tok_free(t);
    gpt_free(&m);
    return rc < 0 ? cli_fail("sample") : 0;
}
