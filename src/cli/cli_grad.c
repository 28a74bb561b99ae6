/* pipetrain grad: loss and every parameter gradient of batch 0, written as safetensors with the
 * input's tensor names plus a scalar "loss". How anyone checks our numerics against theirs.
 * With pipeline flags (--stages, --dp, --schedule, ...) the same file comes from the pipelined
 * runtime (threads or MPI): the objective is the same mean loss, split into microbatches; each
 * rank reads only its layers, and the root gathers the whole gradient. --zero changes nothing
 * here (there is no optimizer state to shard). */
#include "cli/cli.h"
#include "cli/cli_layout.h"
#include "train/train_grad.h"
#include "util/pt.h"
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    train_grad_opts o;          /* what the library gets; o.ro: the layout flags */
    const char *transport;
    const char *split_text;     /* --split as given; its counts are o.ro.split */
    const char *precision;      /* --precision fp32 | bf16 */
} grad_args;

/* The library's run, then its line. */
static int grad_main(const grad_args *a, comm *world) {
    train_grad_result r;
    if (train_grad(&a->o, world, &r) < 0) return -1;
    if (!r.wrote) return 0;
    if (a->o.ro.P)
        printf("loss %.6f, %d gradients written to %s (%s, %d stages x %d replicas x tp %d, %d microbatches)\n",
               r.loss, r.n_grads, a->o.out, r.schedule, r.P, r.D, r.tp, r.n_mb);
    else
        printf("loss %.6f, %d gradients written to %s\n", r.loss, r.n_grads, a->o.out);
    return 0;
}


int cli_grad(int argc, char **argv) {
    grad_args a = {.o = {.batch = 0, .seq = 0, .seed = 1337}};
    cli_opt opts[8 + CLI_LAYOUT_N_OPTS] = {
        {"--config", OPT_STR, &a.o.config, "model config JSON (Hugging Face GPT-2 keys)"},
        {"--init", OPT_STR, &a.o.init, "weights (safetensors, HF GPT-2 names); default: seeded init"},
        {"--tokens", OPT_STR, &a.o.tokens, "token file (llm.c format) or raw text"},
        {"--batch", OPT_INT, &a.o.batch, "B, sequences in the batch"},
        {"--seq", OPT_INT, &a.o.seq, "T, tokens per sequence"},
        {"--out", OPT_STR, &a.o.out, "output safetensors: gradients with the input's names + 'loss'"},
        {"--seed", OPT_LONG, &a.o.seed, "init seed when --init is not given (default 1337)"},
        cli_precision_opt(&a.precision),
    };
    cli_layout_opts(opts + 8, &a.o.ro, &a.transport, &a.split_text);
    cli_layout_init(&a.o.ro);
    int rc = cli_layout_take_faults(&argc, argv, &a.o.ro) < 0 ? (cli_fail("grad"), -1)
           : cli_parse(argc, argv, "grad", "--config C.json [--init M.safetensors] --tokens X.bin "
                       "--batch B --seq T --out G.safetensors", opts, sizeof opts / sizeof *opts);
    if (rc || !a.o.tokens || !a.o.out || a.o.batch <= 0 || a.o.seq <= 0) {
        if (!rc) fprintf(stderr, "pipetrain grad: --tokens, --out, --batch (> 0) and --seq (> 0) are required\n");
        cli_layout_faults_free(&a.o.ro);
        return rc > 0 ? 0 : 2;
    }
    comm *world = NULL;
    int *split;
    if (cli_precision_apply(a.precision, stderr) < 0 || cli_layout_split(a.split_text, &split, &a.o.ro.n_split) < 0) {
        cli_layout_faults_free(&a.o.ro);
        return cli_fail("grad");
    }
    a.o.ro.split = split;
    a.transport = cli_layout_transport(a.transport);
    if (cli_layout_start(&a.o.ro, a.transport, &argc, &argv, &world) < 0) rc = cli_fail("grad");
    else if (grad_main(&a, world) < 0) {
        if (world) pt_adderr("rank %d: ", world->rank);
        rc = cli_fail("grad");
    } else rc = 0;
    cli_layout_stop(a.transport, world);
    free(split);
    cli_layout_faults_free(&a.o.ro);
    return rc;
}
