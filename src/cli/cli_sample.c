/* pipetrain sample: generates text from a checkpoint (or config + weights): parses the flags,
 * loads the model (ckpt/ckpt_model.h: a run folder's newest complete checkpoint), runs the
 * sampler (model/gpt_sample.h) and prints. Byte-level models (vocab 256) read and print text;
 * other vocabularies (no tokenizer here) take --prompt-tokens and print ids. */
#include "cli/cli.h"
#include "ckpt/ckpt_model.h"
#include "model/gpt_io.h"
#include "model/gpt_sample.h"
#include "util/pt.h"
#include <stdio.h>

/* Prints one token: a byte for a byte-level model, else its id and a space. */
static void print_token(int tok, void *vocab) {
    if (*(const int *)vocab == GPT_BYTE_VOCAB) putchar(tok);
    else printf("%d ", tok);
    fflush(stdout);
}

int cli_sample(int argc, char **argv) {
    const char *checkpoint = NULL, *config = NULL, *init = NULL;
    long seed = 1;
    gpt_sample_opts o = {.prompt = "", .length = 200, .temperature = 1.0, .top_k = 0};
    const cli_opt opts[] = {
        {"--checkpoint", OPT_STR, &checkpoint, "checkpoint folder, or a run folder (newest complete ckpt-N)"},
        {"--config", OPT_STR, &config, "model config JSON (instead of --checkpoint)"},
        {"--init", OPT_STR, &init, "weights (safetensors) with --config"},
        {"--prompt", OPT_STR, &o.prompt, "text to continue (byte-level models, vocab 256)"},
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
    rc = gpt_sample(&m, &o, print_token, &m.cfg.vocab_size);
    putchar('\n');
    gpt_free(&m);
    return rc < 0 ? cli_fail("sample") : 0;
}
