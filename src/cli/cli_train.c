/* pipetrain train: single-process training loop around train_step: data, LR schedule, metrics
 * (one JSON line per step), a progress line, checkpoints and resume. Pipelined layouts come with
 * the runtime. */
#include "cli/cli.h"
#include "cli/cli_model.h"
#include "io/data.h"
#include "train/checkpoint.h"
#include "train/train.h"
#include "util/pt.h"
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *config, *init, *data, *metrics, *save, *resume, *schedule;
    int batch, seq, steps, warmup, save_every, log_every, threads;
    long seed, shuffle;
    double lr_min;
    optim_config oc;
} train_args;

typedef struct {
    gpt_model m;
    adamw_state opt;
    data_set *d;
    FILE *metrics;
    int *inp, *tgt;
    long step0;        /* updates already done (resume) */
    double t_start;
} train_run;

static int parse_schedule(train_args *a) {
    if (!a->schedule || !strcmp(a->schedule, "constant")) a->oc.schedule = LR_CONSTANT;
    else if (!strcmp(a->schedule, "cosine")) a->oc.schedule = LR_COSINE;
    else return pt_seterr("--lr-schedule must be constant or cosine, got '%s'", a->schedule);
    a->oc.warmup = a->warmup;
    a->oc.total_steps = a->steps;
    a->oc.lr_min = a->lr_min >= 0 ? a->lr_min : a->oc.lr / 10;
    if (a->batch <= 0 || a->seq <= 0) return pt_seterr("--batch and --seq must be positive");
    if (!a->data) return pt_seterr("--data is required (a text file or an llm.c token file)");
    return optim_config_validate(&a->oc);
}

/* Model, optimizer and step counter: from --resume, else --config [+ --init]. */
static int setup_model(train_run *r, const train_args *a) {
    if (!a->resume) {
        if (cli_model_setup(&r->m, a->config, a->init, (uint64_t)a->seed, NULL) < 0) return -1;
        adamw_init(&r->opt, r->m.num_params);
        return 0;
    }
    ckpt_manifest man;
    if (ckpt_read_manifest(&man, a->resume) < 0 || cli_model_from_checkpoint(&r->m, a->resume) < 0)
        return -1;
    adamw_init(&r->opt, r->m.num_params);
    if (ckpt_load_optim(&r->opt, &r->m, a->resume) < 0) return -1;
    if (man.batch != a->batch || man.seq != a->seq || man.shuffle_seed != (uint64_t)a->shuffle)
        return pt_seterr("%s: saved with --batch %d --seq %d --shuffle %llu; resume with the same "
                         "values to continue the same data order", a->resume, man.batch, man.seq,
                         (unsigned long long)man.shuffle_seed);
    r->opt.t = man.adam_t;
    r->step0 = man.step;
    return 0;
}

static int save_checkpoint(train_run *r, const train_args *a, long step) {
    char dir[1100];
    ckpt_manifest man = {.cfg = r->m.cfg, .step = step, .adam_t = r->opt.t, .batch = a->batch,
                         .seq = a->seq, .shuffle_seed = (uint64_t)a->shuffle,
                         .init_seed = (uint64_t)a->seed};
    snprintf(man.data_path, sizeof man.data_path, "%s", a->data);
    snprintf(dir, sizeof dir, "%s/ckpt-%ld", a->save, step);
    if (ckpt_save(dir, &r->m, &r->opt, &man, 1) < 0) return -1;
    printf("saved %s\n", dir);
    return 0;
}

static void log_step(train_run *r, const train_args *a, long step, const train_stats *st, double dt) {
    double tok_s = (double)a->batch * a->seq / dt, elapsed = pt_now() - r->t_start;
    long done = step - r->step0, left = a->steps - step;
    if (r->metrics) {
        fprintf(r->metrics, "{\"step\":%ld,\"loss\":%.6f,\"lr\":%.6e,\"grad_norm\":%.6f,"
                "\"tokens_per_s\":%.1f,\"step_ms\":%.3f}\n", step, st->loss, st->lr, st->grad_norm,
                tok_s, dt * 1e3);
        fflush(r->metrics);
    }
    if (step % a->log_every && step != a->steps && step != r->step0 + 1) return;
    double eta = done > 0 ? elapsed / done * left : 0;
    printf("step %5ld/%d | loss %.4f | lr %.2e | norm %.3f | %.0f tok/s | %.0f ms | left %dm%02ds\n",
           step, a->steps, st->loss, st->lr, st->grad_norm, tok_s, dt * 1e3, (int)eta / 60,
           (int)eta % 60);
    fflush(stdout);
}

static int train_loop(train_run *r, const train_args *a) {
    size_t n = (size_t)a->batch * a->seq;
    r->inp = pt_malloc(n * sizeof(int));
    r->tgt = pt_malloc(n * sizeof(int));
    r->t_start = pt_now();
    for (long step = r->step0 + 1; step <= a->steps; step++) {
        int64_t k = data_batch_index(r->d, a->batch, a->seq, (uint64_t)a->shuffle, step - 1);
        if (k < 0 || data_batch(r->d, k, a->batch, a->seq, r->inp, r->tgt) < 0) return -1;
        train_stats st;
        double t0 = pt_now();
        if (train_step(&r->m, &r->opt, &a->oc, (int)step, r->inp, r->tgt, a->batch, a->seq, &st) < 0)
            return pt_adderr("step %ld: ", step);
        log_step(r, a, step, &st, pt_now() - t0);
        if (a->save && ((a->save_every > 0 && step % a->save_every == 0) || step == a->steps))
            if (save_checkpoint(r, a, step) < 0) return -1;
    }
    return 0;
}

static int train_main(const train_args *a) {
    train_run r;
    memset(&r, 0, sizeof r);
    int rc = -1;
    if (setup_model(&r, a) < 0) goto cleanup;
    if (a->seq > r.m.cfg.n_positions) {
        pt_seterr("--seq %d exceeds the model's n_positions %d", a->seq, r.m.cfg.n_positions);
        goto cleanup;
    }
    if (data_open(&r.d, a->data, r.m.cfg.vocab_size) < 0 || data_check_batch(r.d, a->batch, a->seq) < 0)
        goto cleanup;
    if (a->metrics && !(r.metrics = fopen(a->metrics, r.step0 ? "a" : "w"))) {
        pt_seterr("%s: cannot open for writing", a->metrics);
        goto cleanup;
    }
    printf("model: %d layers, %d heads, %d channels, vocab %d, %.2fM parameters; data: %s, %zu tokens\n",
           r.m.cfg.n_layer, r.m.cfg.n_head, r.m.cfg.n_embd, r.m.cfg.vocab_size, r.m.num_params / 1e6,
           a->data, data_ntokens(r.d));
    rc = train_loop(&r, a);
cleanup:
    if (r.metrics) fclose(r.metrics);
    free(r.inp);
    free(r.tgt);
    data_close(r.d);
    if (r.m.params) adamw_free(&r.opt);
    gpt_free(&r.m);
    return rc;
}

int cli_train(int argc, char **argv) {
    train_args a = {.steps = 100, .seed = 1337, .log_every = 0, .lr_min = -1, .threads = 0,
                    .oc = optim_config_default()};
    const cli_opt opts[] = {
        {"--config", OPT_STR, &a.config, "model config JSON (Hugging Face GPT-2 keys)"},
        {"--init", OPT_STR, &a.init, "initial weights (safetensors); default: GPT-2 init from --seed"},
        {"--data", OPT_STR, &a.data, "training data: raw text (bytes) or an llm.c token file"},
        {"--batch", OPT_INT, &a.batch, "B, sequences per step"},
        {"--seq", OPT_INT, &a.seq, "T, tokens per sequence"},
        {"--steps", OPT_INT, &a.steps, "K, optimizer steps in all (default 100)"},
        {"--lr", OPT_DOUBLE, &a.oc.lr, "peak learning rate (default 3e-4)"},
        {"--lr-min", OPT_DOUBLE, &a.lr_min, "cosine floor (default lr/10)"},
        {"--lr-schedule", OPT_STR, &a.schedule, "constant | cosine (default constant)"},
        {"--warmup", OPT_INT, &a.warmup, "linear warm-up steps (default 0)"},
        {"--weight-decay", OPT_DOUBLE, &a.oc.weight_decay, "AdamW decoupled weight decay (default 0.1)"},
        {"--beta1", OPT_DOUBLE, &a.oc.beta1, "AdamW beta1 (default 0.9)"},
        {"--beta2", OPT_DOUBLE, &a.oc.beta2, "AdamW beta2 (default 0.95)"},
        {"--eps", OPT_DOUBLE, &a.oc.eps, "AdamW epsilon (default 1e-8)"},
        {"--grad-clip", OPT_DOUBLE, &a.oc.grad_clip, "max global gradient norm, 0 = off (default 1)"},
        {"--shuffle", OPT_LONG, &a.shuffle, "seed for a shuffled batch order (default 0: sequential)"},
        {"--seed", OPT_LONG, &a.seed, "init seed (default 1337)"},
        {"--metrics", OPT_STR, &a.metrics, "append one JSON line per step to this file"},
        {"--save", OPT_STR, &a.save, "checkpoint folder: writes DIR/ckpt-<step>"},
        {"--save-every", OPT_INT, &a.save_every, "also save every K steps (default: only at the end)"},
        {"--resume", OPT_STR, &a.resume, "continue from a checkpoint folder (DIR/ckpt-<step>)"},
        {"--log-every", OPT_INT, &a.log_every, "progress line every N steps (default: ~50 lines)"},
        {"--threads", OPT_INT, &a.threads, "OpenBLAS threads (default: all cores)"},
    };
    int rc = cli_parse(argc, argv, "train", "--config C.json --data FILE --batch B --seq T --steps K "
                       "--lr X [flags]", opts, sizeof opts / sizeof *opts);
    if (rc) return rc < 0 ? 2 : 0;
    if (a.log_every <= 0) a.log_every = a.steps / 50 > 1 ? a.steps / 50 : 1;
    if (a.threads > 0) openblas_set_num_threads(a.threads);
    if (parse_schedule(&a) < 0 || train_main(&a) < 0) return cli_fail("train");
    return 0;
}
