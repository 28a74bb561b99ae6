/* pipetrain eval: the held-out loss of a checkpoint's weights over N batches of a token file
 * (harvest/eval.h: one layer of one sequence at a time, the units' losses averaged in order), the
 * same arithmetic train --eval-data does in the pipeline's bubbles, so the two agree bitwise on
 * the same weights. Flags only; the evaluation is the library's. */
#include "cli/cli.h"
#include "ckpt/ckpt_model.h"
#include "ckpt/checkpoint.h"
#include "harvest/eval.h"
#include "tok/tok.h"
#include "util/pt.h"
#include <cblas.h>
#include <stdio.h>

int cli_eval(int argc, char **argv) {
    const char *checkpoint = NULL, *data = NULL, *tokenizer = NULL, *precision = NULL;
    int batches = 0, B = 0, T = 0, threads = 1;
    const cli_opt opts[] = {
        {"--checkpoint", OPT_STR, &checkpoint, "checkpoint folder, or a --save folder (its newest)"},
        {"--data", OPT_STR, &data, "held-out tokens: an llm.c token file or text (vocab 256)"},
        {"--tokenizer", OPT_STR, &tokenizer, "gpt2 | DIR: --data is text, tokenised with it (src/tok)"},
        {"--batches", OPT_INT, &batches, "N batches (default: every whole batch in the file)"},
        {"--batch", OPT_INT, &B, "B, sequences per batch (as the training's, to match its eval_loss)"},
        {"--seq", OPT_INT, &T, "T, tokens per sequence"},
        {"--threads", OPT_INT, &threads, "OpenBLAS threads (default 1, as a rank's)"},
        cli_precision_opt(&precision),
    };
    int rc = cli_parse(argc, argv, "eval", "--checkpoint DIR --data FILE --batch B --seq T [--batches N]",
                       opts, sizeof opts / sizeof *opts);
    if (rc) return rc < 0 ? 2 : 0;
    if (!checkpoint || !data || B <= 0 || T <= 0) {
        fprintf(stderr, "pipetrain eval: give --checkpoint DIR, --data FILE, --batch B > 0 and --seq T > 0\n");
        return 2;
    }
    if (cli_precision_apply(precision, stderr) < 0) return cli_fail("eval");
    if (threads > 0) openblas_set_num_threads(threads);
    char dir[1200];
    gpt_model m;
    eval_set *set = NULL;
    double loss = 0;
    if (ckpt_model_load(&m, checkpoint, dir, sizeof dir) < 0)
        return cli_fail("eval");
    ckpt_manifest man;
    rc = ckpt_read_manifest(&man, dir);
    if (rc == 0 && T > m.cfg.n_positions)
        rc = pt_seterr("--seq %d exceeds the model's n_positions %d", T, m.cfg.n_positions);
    data_set *d = NULL;
    if (rc == 0 && tokenizer) rc = tok_data_open(&d, data, tokenizer, m.cfg.vocab_size) < 0 ? pt_adderr("--data: ")
                                   : eval_set_from(&set, d, B, T, batches, "--data");
    else if (rc == 0) rc = eval_set_open(&set, data, m.cfg.vocab_size, B, T, batches, "--data");
    if (rc == 0) rc = eval_model(&m, set, &loss);
    if (rc == 0)
        printf("eval_loss %.9g (%s, step %ld: %d batches of %d x %d from %s)\n", loss, dir,
               (long)man.step, eval_set_batches(set), B, T, data);
    eval_set_close(set);
    gpt_free(&m);
    return rc < 0 ? cli_fail("eval") : 0;
}
