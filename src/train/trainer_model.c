/* The model a training run starts from: a config JSON with its weights or the seeded GPT-2
 * init, or a checkpoint to resume (weights, AdamW moments, step), refusing a resume that would
 * not continue the same run. One process loads the whole model; a pipelined run keeps only the
 * tables and a source (run/source.h) from which each rank reads its share. Not here: saving
 * checkpoints (trainer_hooks.c, ckpt/). */
#include "train/trainer_int.h"
#include "ckpt/checkpoint.h"
#include "model/config.h"
#include "model/gpt_io.h"
#include "util/pt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --config next to --resume must describe the checkpoint's model. */
static int check_same_config(const char *path, const gpt_config *saved, const char *dir) {
    gpt_config c;
    if (config_load_json(&c, path) < 0) return -1;
    if (c.n_layer != saved->n_layer || c.n_head != saved->n_head || c.n_embd != saved->n_embd ||
        c.vocab_size != saved->vocab_size || c.n_positions != saved->n_positions)
        return pt_seterr("%s describes another model than the checkpoint %s (n_layer %d/%d, n_head "
                         "%d/%d, n_embd %d/%d, vocab_size %d/%d, n_positions %d/%d); drop --config "
                         "to resume", path, dir, c.n_layer, saved->n_layer, c.n_head, saved->n_head,
                         c.n_embd, saved->n_embd, c.vocab_size, saved->vocab_size, c.n_positions,
                         saved->n_positions);
    return 0;
}

/* Weights, moments and step of the checkpoint man (read from dir), for the same data order. A
 * pipelined run only checks it here and keeps it as the job's source: each rank reads its own
 * layers and moments when the job starts. */
static int model_from_checkpoint(train_ctx *t, const ckpt_manifest *man) {
    const train_opts *o = &t->o;
    if (man->batch != o->batch || man->seq != o->seq || man->shuffle_seed != (uint64_t)o->shuffle)
        return pt_seterr("%s: saved with --batch %d --seq %d --shuffle %llu; resume with the same "
                         "values to continue the same data order", o->resume, man->batch, man->seq,
                         (unsigned long long)man->shuffle_seed);
    if (!man->has_optim) return pt_seterr("%s: checkpoint holds no optimizer state", o->resume);
    if (ckpt_check_optim(man, &o->oc, o->resume) < 0) return -1;
    t->step0 = man->step;
    if (o->ro.P) {
        if (gpt_init_layers(&t->m, &man->cfg, 0, 0) < 0) return -1;   /* the tables only */
        return run_source_checkpoint(&t->src, o->resume, man);
    }
    if (gpt_init(&t->m, &man->cfg) < 0) return -1;
    if (ckpt_load_params(&t->m, o->resume, man) < 0) return -1;
    adamw_init(&t->opt, t->m.num_params);
    if (ckpt_load_optim(&t->opt, &t->m, o->resume) < 0) return -1;
    t->opt.t = man->adam_t;
    return 0;
}

/* A fresh run: one process loads the whole model; a pipelined one reads only the config here,
 * and each rank its layers (from --init or the seeded init) when the job starts. */
static int model_fresh(train_ctx *t) {
    const train_opts *o = &t->o;
    gpt_config cfg;
    if (!o->ro.P) {
        if (gpt_model_load(&t->m, o->config, o->init, (uint64_t)o->seed, NULL) < 0) return -1;
        adamw_init(&t->opt, t->m.num_params);
        return 0;
    }
    if (!o->config) return pt_seterr("--config is required (a JSON file with n_layer, n_head, "
                                     "n_embd, vocab_size, n_positions)");
    if (config_load_json(&cfg, o->config) < 0 || gpt_init_layers(&t->m, &cfg, 0, 0) < 0) return -1;
    run_source_init(&t->src, &cfg, o->init, (uint64_t)o->seed);
    return 0;
}

/* --resume names a checkpoint, or the --save folder of them: then its newest complete one
 * (a save cut short never bears a checkpoint's name). t->o.resume becomes the folder used. */
static int resolve_resume(train_ctx *t) {
    const char *given = t->o.resume;
    if (ckpt_resolve(given, t->resume_dir, sizeof t->resume_dir) < 0) return pt_adderr("--resume: ");
    t->o.resume = t->resume_dir;
    if (t->root && strcmp(given, t->resume_dir))
        printf("resume: %s (the newest complete checkpoint in %s)\n", t->resume_dir, given);
    return 0;
}

int train_setup_model(train_ctx *t) {
    const train_opts *o = &t->o;
    if (!o->resume) return model_fresh(t);
    ckpt_manifest *man = pt_malloc(sizeof *man);   /* large: kept off the rank thread's stack */
    int rc = -1;
    if (o->init) pt_seterr("--init and --resume exclude each other (the checkpoint holds the weights)");
    else if (resolve_resume(t) == 0 && ckpt_read_manifest(man, o->resume) == 0 &&
             (!o->config || check_same_config(o->config, &man->cfg, o->resume) == 0))
        rc = model_from_checkpoint(t, man);
    free(man);
    return rc;
}
