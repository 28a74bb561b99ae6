/* One batch's loss and gradients into a safetensors file (train_grad.h). */
#include "train/train_grad.h"
#include "io/data.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/gpt_io.h"
#include "util/pt.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
static int grad_pipelined(const train_grad_opts *a, const gpt_config *cfg, const int *inp,
                          const int *tgt, comm *world, train_grad_result *res) {
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
        res->wrote = rc == 0;
    }
    res->loss = st.loss;
    res->n_grads = gpt_param_count(&m);
    snprintf(res->schedule, sizeof res->schedule, "%s", pl.s->name);
    res->P = pl.o.P, res->D = pl.o.D, res->tp = pl.lo.tp, res->n_mb = pl.s->n_mb / pl.s->seq_chunks;
    gpt_free(&m);
    run_job_free(j);
    run_source_free(&src);
    run_plan_free(&pl);
    return rc;
}

/* The pipelined path: the config, the batch, the job. */
static int grad_run_pipelined(const train_grad_opts *a, comm *world, train_grad_result *res) {
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
    if (data_batch(d, 0, a->batch, a->seq, inp, tgt) == 0) rc = grad_pipelined(a, &cfg, inp, tgt, world, res);
    free(inp);
    free(tgt);
    data_close(d);
    return rc;
}

int train_grad(const train_grad_opts *a, comm *world, train_grad_result *res) {
    gpt_model m;
    data_set *d = NULL;
    int prefixed, rc = -1, *inp = NULL, *tgt = NULL;
    float loss;
    memset(res, 0, sizeof *res);
    if (a->ro.P) return grad_run_pipelined(a, world, res);
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
    *res = (train_grad_result){ .loss = loss, .n_grads = gpt_param_count(&m), .wrote = 1 };
    rc = 0;
free_data:
    free(inp);
    free(tgt);
    data_close(d);
free_model:
    gpt_free(&m);
    return rc;
}

