/* pipetrain grad: loss and every parameter gradient of batch 0, written as safetensors with the
 * input's tensor names plus a scalar "loss". How anyone checks our numerics against theirs.
 * With pipeline flags (--stages, --dp, --schedule, ...) the same file comes from the pipelined
 * runtime (threads or MPI): the objective is the same mean loss, split into microbatches; each
 * rank reads only its layers, and the root gathers the whole gradient. --zero changes nothing
 * here (there is no optimizer state to shard). */
#include "cli/cli.h"
#include "cli/cli_layout.h"
#include "io/data.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/gpt_io.h"
#include "run/run.h"
#include "util/pt.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *config, *init, *tokens, *out, *transport;
    const char *split_text;     /* --split as given; its counts are ro.split */
    int batch, seq;
    long seed;
    run_opts ro;
    const char *precision;      /* --precision fp32 | bf16 */
} grad_args;

static int grad_write(const gpt_model *m, int prefixed, float loss, const char *path) {
    if (!isfinite(loss))
        return pt_seterr("the loss is %f, not a number: NaN or inf in the weights? (nothing written "
                         "to %s)", loss, path);
    st_writer *w = st_writer_new();
    int rc = st_writer_meta(w, "format", "pt");
    if (rc == 0) rc = gpt_add_to_writer(m, w, m->grads, prefixed ? "transformer." : "");
    if (rc == 0) rc = st_writer_add(w, "loss", ST_F32, 0, NULL, &loss);
    if (rc == 0) rc = st_write(w, path);
    st_writer_free(w);
    return rc;
}

/* 1 when the --init file names its tensors "transformer.*" (the output keeps its names). */
static int init_prefixed(const char *init) {
    st_file *f;
    if (!init || st_open(&f, init) < 0) return 0;   /* a bad file: the job's load names it */
    int pref = st_find(f, "transformer.wte.weight") != NULL;
    st_close(f);
    return pref;
}

/* Loss and gradients through the pipeline: each rank reads only its layers (from --init or the
 * seeded init); the root gathers the whole gradient into a whole model and writes it.
 * world: MPI endpoint or NULL. */
static int grad_pipelined(const grad_args *a, const gpt_config *cfg, const int *inp,
                          const int *tgt, comm *world) {
    run_plan pl;
    run_job *j = NULL;
    run_stats st;
    run_source src;
    gpt_model m;
    memset(&m, 0, sizeof m);
    if (run_plan_init(&pl, &a->ro, cfg, a->batch, a->seq) < 0) return -1;
    if (run_plan_check_fault_steps(&pl, 1) < 0) { run_plan_free(&pl); return -1; }   /* grad runs step 1 */
    run_source_init(&src, cfg, a->init, (uint64_t)a->seed);
    int rc = run_job_init_src(&j, &pl, &src, world);
    if (rc == 0) rc = run_job_iteration(j, inp, tgt, NULL, 1, &st);
    if (rc == 0 && run_job_is_root(j)) rc = gpt_init(&m, cfg);
    if (rc == 0) rc = run_job_gather(j, run_job_is_root(j) ? &m : NULL);
    if (rc == 0 && run_job_is_root(j)) {
        rc = grad_write(&m, init_prefixed(a->init), st.loss, a->out);
        if (rc == 0)
            printf("loss %.6f, %d gradients written to %s (%s, %d stages x %d replicas x tp %d, %d microbatches)\n",
                   st.loss, gpt_param_count(&m), a->out, pl.s->name, pl.o.P, pl.o.D, pl.lo.tp, pl.s->n_mb);
    }
    gpt_free(&m);
    run_job_free(j);
    run_source_free(&src);
    run_plan_free(&pl);
    return rc;
}

/* The pipelined path: the config, the batch, the job. */
static int grad_run_pipelined(const grad_args *a, comm *world) {
    gpt_config cfg;
    data_set *d = NULL;
    int rc = -1, *inp = NULL, *tgt = NULL;
    if (!a->config) return pt_seterr("--config is required (a JSON file with n_layer, n_head, "
                                     "n_embd, vocab_size, n_positions)");
    if (config_load_json(&cfg, a->config) < 0) return -1;
    if (a->seq > cfg.n_positions)
        return pt_seterr("--seq %d exceeds n_positions %d of %s", a->seq, cfg.n_positions, a->config);
    if (data_open(&d, a->tokens, cfg.vocab_size) < 0) return -1;
    inp = pt_malloc(sizeof(int) * a->batch * a->seq);
    tgt = pt_malloc(sizeof(int) * a->batch * a->seq);
    if (data_batch(d, 0, a->batch, a->seq, inp, tgt) == 0) rc = grad_pipelined(a, &cfg, inp, tgt, world);
    free(inp);
    free(tgt);
    data_close(d);
    return rc;
}

static int grad_run(const grad_args *a, comm *world) {
    gpt_model m;
    data_set *d = NULL;
    int prefixed, rc = -1, *inp = NULL, *tgt = NULL;
    float loss;
    if (a->ro.P) return grad_run_pipelined(a, world);
    if (gpt_model_load(&m, a->config, a->init, (uint64_t)a->seed, &prefixed) < 0) return -1;
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
    cli_opt opts[8 + CLI_LAYOUT_N_OPTS] = {
        {"--config", OPT_STR, &a.config, "model config JSON (Hugging Face GPT-2 keys)"},
        {"--init", OPT_STR, &a.init, "weights (safetensors, HF GPT-2 names); default: seeded init"},
        {"--tokens", OPT_STR, &a.tokens, "token file (llm.c format) or raw text"},
        {"--batch", OPT_INT, &a.batch, "B, sequences in the batch"},
        {"--seq", OPT_INT, &a.seq, "T, tokens per sequence"},
        {"--out", OPT_STR, &a.out, "output safetensors: gradients with the input's names + 'loss'"},
        {"--seed", OPT_LONG, &a.seed, "init seed when --init is not given (default 1337)"},
        cli_precision_opt(&a.precision),
    };
    cli_layout_opts(opts + 8, &a.ro, &a.transport, &a.split_text);
    cli_layout_init(&a.ro);
    int rc = cli_layout_take_faults(&argc, argv, &a.ro) < 0 ? (cli_fail("grad"), -1)
           : cli_parse(argc, argv, "grad", "--config C.json [--init M.safetensors] --tokens X.bin "
                       "--batch B --seq T --out G.safetensors", opts, sizeof opts / sizeof *opts);
    if (rc || !a.tokens || !a.out || a.batch <= 0 || a.seq <= 0) {
        if (!rc) fprintf(stderr, "pipetrain grad: --tokens, --out, --batch (> 0) and --seq (> 0) are required\n");
        cli_layout_faults_free(&a.ro);
        return rc > 0 ? 0 : 2;
    }
    comm *world = NULL;
    int *split;
    if (cli_precision_apply(a.precision, stderr) < 0 || cli_layout_split(a.split_text, &split, &a.ro.n_split) < 0) {
        cli_layout_faults_free(&a.ro);
        return cli_fail("grad");
    }
    a.ro.split = split;
    a.transport = cli_layout_transport(a.transport);
    if (cli_layout_start(&a.ro, a.transport, &argc, &argv, &world) < 0) rc = cli_fail("grad");
    else if (grad_run(&a, world) < 0) {
        if (world) pt_adderr("rank %d: ", world->rank);
        rc = cli_fail("grad");
    } else rc = 0;
    if (world) { comm_free(world); comm_mpi_finalize(); }
    free(split);
    cli_layout_faults_free(&a.ro);
    return rc;
}
