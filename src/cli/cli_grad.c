/* pipetrain grad: loss and every parameter gradient of batch 0, written as safetensors with the
 * input's tensor names plus a scalar "loss". How anyone checks our numerics against theirs. */
#include "cli/cli.h"
#include "cli/cli_model.h"
#include "io/data.h"
#include "io/safetensors.h"
#include "model/gpt_io.h"
#include "util/pt.h"
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    const char *config, *init, *tokens, *out;
    int batch, seq;
    long seed;
} grad_args;

static int grad_write(const gpt_model *m, int prefixed, float loss, const char *path) {
    st_writer *w = st_writer_new();
    int rc = st_writer_meta(w, "format", "pt");
    if (rc == 0) rc = gpt_add_to_writer(m, w, m->grads, prefixed ? "transformer." : "");
    if (rc == 0) rc = st_writer_add(w, "loss", ST_F32, 0, NULL, &loss);
    if (rc == 0) rc = st_write(w, path);
    st_writer_free(w);
    return rc;
}

static int grad_run(const grad_args *a) {
    gpt_model m;
    data_set *d = NULL;
    int prefixed, rc = -1, *inp = NULL, *tgt = NULL;
    float loss;
    if (cli_model_setup(&m, a->config, a->init, (uint64_t)a->seed, &prefixed) < 0) return -1;
    if (a->seq > m.cfg.n_positions) {
        pt_seterr("--seq %d exceeds n_positions %d of %s", a->seq, m.cfg.n_positions, a->config);
        goto free_model;
    }
    if (data_open(&d, a->tokens, m.cfg.vocab_size) < 0) goto free_model;
    inp = pt_malloc(sizeof(int) * a->batch * a->seq);
    tgt = pt_malloc(sizeof(int) * a->batch * a->seq);
    if (data_batch(d, 0, a->batch, a->seq, inp, tgt) < 0) goto free_data;
    gpt_zero_grad(&m);
    if (gpt_forward_backward(&m, inp, tgt, a->batch, a->seq, &loss) < 0) goto free_data;
    if (grad_write(&m, prefixed, loss, a->out) < 0) goto free_data;
    printf("loss %.6f, %d gradients written to %s\n", loss, gpt_param_count(&m), a->out);
    rc = 0;
free_data:
    free(inp);
    free(tgt);
    data_close(d);
free_model:
    gpt_free(&m);
    return rc;
}

int cli_grad(int argc, char **argv) {
    grad_args a = {.batch = 0, .seq = 0, .seed = 1337};
    const cli_opt opts[] = {
        {"--config", OPT_STR, &a.config, "model config JSON (Hugging Face GPT-2 keys)"},
        {"--init", OPT_STR, &a.init, "weights (safetensors, HF GPT-2 names); default: seeded init"},
        {"--tokens", OPT_STR, &a.tokens, "token file (llm.c format) or raw text"},
        {"--batch", OPT_INT, &a.batch, "B, sequences in the batch"},
        {"--seq", OPT_INT, &a.seq, "T, tokens per sequence"},
        {"--out", OPT_STR, &a.out, "output safetensors: gradients with the input's names + 'loss'"},
        {"--seed", OPT_LONG, &a.seed, "init seed when --init is not given (default 1337)"},
    };
    int rc = cli_parse(argc, argv, "grad", "--config C.json [--init M.safetensors] --tokens X.bin "
                       "--batch B --seq T --out G.safetensors", opts, sizeof opts / sizeof *opts);
    if (rc) return rc < 0 ? 2 : 0;
    if (!a.tokens || !a.out || a.batch <= 0 || a.seq <= 0) {
        fprintf(stderr, "pipetrain grad: --tokens, --out, --batch (> 0) and --seq (> 0) are required\n");
        return 2;
    }
    return grad_run(&a) < 0 ? cli_fail("grad") : 0;
}
