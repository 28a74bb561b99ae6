/* pipetrain train: the training loop: data, LR schedule, metrics (one JSON line per step), a
 * progress line, checkpoints and resume. One process (train_step), or with pipeline flags the
 * pipelined runtime (run/run.h) on threads or MPI, which adds the measured bubble per step and,
 * at the end, measured iteration time next to the simulator's prediction from profiled costs. */
#include "cli/cli.h"
#include "cli/cli_layout.h"
#include "cli/cli_model.h"
#include "io/data.h"
#include "io/io.h"
#include "trace/svg.h"
#include "trace/trace.h"
#include "plan/plan.h"
#include "run/run.h"
#include "sim/sim.h"
#include "ckpt/checkpoint.h"
#include "train/train.h"
#include "util/pt.h"
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    const char *config, *init, *data, *metrics, *save, *resume, *schedule;
    int batch, seq, steps, warmup, save_every, log_every, threads;
    long seed, shuffle;
    double lr_min;
    optim_config oc;
    run_opts ro;                 /* pipelined when ro.P > 0 (any layout flag given) */
    const char *transport, *trace, *svg;
    const char *plan;            /* --plan plan.json: the layout from `pipetrain plan --out` */
    const char *split_text;      /* --split as given */
    int *split;                  /* ro.split: its counts, or the plan's (owned) */
    char plan_schedule[32];
} train_args;

typedef struct {
    gpt_model m;
    adamw_state opt;
    data_set *d;
    FILE *metrics;
    int *inp, *tgt;
    long step0;        /* updates already done (resume) */
    double t_start;
    /* pipelined */
    comm *world;       /* MPI endpoint, or NULL (threads) */
    run_plan pl;
    run_job *job;
    int root;          /* prints and writes files */
    double *iter_t, *bubble;   /* [steps] measured per step */
    int n_iter;
} train_run;

static int parse_schedule(train_args *a) {
    if (!a->schedule || !strcmp(a->schedule, "constant")) a->oc.schedule = LR_CONSTANT;
    else if (!strcmp(a->schedule, "cosine")) a->oc.schedule = LR_COSINE;
    else return pt_seterr("--lr-schedule must be constant or cosine, got '%s'", a->schedule);
    a->oc.warmup = a->warmup;
    a->oc.total_steps = a->steps;
    a->oc.lr_min = isnan(a->lr_min) ? a->oc.lr / 10 : a->lr_min;
    if (a->batch <= 0 || a->seq <= 0) return pt_seterr("--batch and --seq must be positive");
    if (!a->data) return pt_seterr("--data is required (a text file or an llm.c token file)");
    return optim_config_validate(&a->oc);
}

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

/* A diverged step is an error, not a run that goes on computing NaN. */
static int check_loss(float loss, long step) {
    if (isfinite(loss)) return 0;
    return pt_seterr("step %ld: the loss is %f: training diverged (lower --lr, keep --grad-clip, or "
                     "check the data and weights)", step, loss);
}

/* Output files that are only written at the end are tried at the start, so a bad path fails
 * before the training, not after it. */
static int check_writable(const char *path, const char *flag) {
    if (!path) return 0;
    if (pt_make_parents(path) < 0) return -1;
    FILE *f = fopen(path, "a");
    if (!f) return pt_seterr("%s %s: cannot write there: %s", flag, path, strerror(errno));
    long size = ftell(f);
    fclose(f);
    if (size == 0) unlink(path);      /* we created it: leave nothing behind until the end */
    return 0;
}

/* Model, optimizer and step counter: from --resume, else --config [+ --init]. */
static int setup_model(train_run *r, const train_args *a) {
    if (!a->resume) {
        if (cli_model_setup(&r->m, a->config, a->init, (uint64_t)a->seed, NULL) < 0) return -1;
        adamw_init(&r->opt, r->m.num_params);
        return 0;
    }
    ckpt_manifest man;
    if (a->init) return pt_seterr("--init and --resume exclude each other (the checkpoint holds the weights)");
    if (ckpt_read_manifest(&man, a->resume) < 0) return -1;
    if (a->config && check_same_config(a->config, &man.cfg, a->resume) < 0) return -1;
    if (cli_model_from_checkpoint(&r->m, a->resume) < 0) return -1;
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

static void log_step(train_run *r, const train_args *a, long step, const train_stats *st, double dt,
                     double bubble) {
    double tok_s = (double)a->batch * a->seq / dt, elapsed = pt_now() - r->t_start;
    long done = step - r->step0, left = a->steps - step;
    if (r->metrics) {
        fprintf(r->metrics, "{\"step\":%ld,\"loss\":%.6f,\"lr\":%.6e,\"grad_norm\":%.6f,"
                "\"tokens_per_s\":%.1f,\"step_ms\":%.3f", step, st->loss, st->lr, st->grad_norm,
                tok_s, dt * 1e3);
        if (bubble >= 0) fprintf(r->metrics, ",\"bubble_fraction\":%.4f,\"act_bytes_max_rank\":%zu",
                                 bubble, run_job_act_bytes(r->job));
        fprintf(r->metrics, "}\n");
        fflush(r->metrics);
    }
    if (!r->root) return;
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
        if (check_loss(st.loss, step) < 0) return -1;
        log_step(r, a, step, &st, pt_now() - t0, -1);
        if (a->save && ((a->save_every > 0 && step % a->save_every == 0) || step == a->steps))
            if (save_checkpoint(r, a, step) < 0) return -1;
    }
    return 0;
}


/* ---- pipelined --------------------------------------------------------------------------- */

/* Checkpoint of the pipelined run: each chunk written by its holder (run_job_save). */
static int pipe_save(train_run *r, const train_args *a, long step) {
    char dir[1100];
    ckpt_manifest man = {.cfg = r->m.cfg, .step = step, .adam_t = (int)step, .batch = a->batch,
                         .seq = a->seq, .shuffle_seed = (uint64_t)a->shuffle,
                         .init_seed = (uint64_t)a->seed};
    snprintf(man.data_path, sizeof man.data_path, "%s", a->data);
    snprintf(dir, sizeof dir, "%s/ckpt-%ld", a->save, step);
    if (run_job_save(r->job, dir, &man) < 0) return -1;
    if (r->root) printf("saved %s\n", dir);
    return 0;
}

static int cmp_double(const void *x, const void *y) {
    double u = *(const double *)x, v = *(const double *)y;
    return u < v ? -1 : u > v;
}

/* Median of v[0..n) after the first entry (the warm-up) when there are several. */
static double median_after_first(const double *v, int n) {
    int skip = n > 1, k = n - skip;
    if (k <= 0) return 0;
    double *t = pt_malloc(sizeof *t * (size_t)k);
    memcpy(t, v + skip, sizeof *t * (size_t)k);
    qsort(t, (size_t)k, sizeof *t, cmp_double);
    double m = k % 2 ? t[k / 2] : 0.5 * (t[k / 2 - 1] + t[k / 2]);
    free(t);
    return m;
}

/* Measured iteration time and bubble next to the simulator's, from costs profiled in this run;
 * then the last iteration's trace and picture when asked. Root only. */
static int pipe_report(train_run *r, const train_args *a) {
    if (!r->root || r->n_iter == 0) return 0;
    const sched *s = r->pl.s;
    double it = median_after_first(r->iter_t, r->n_iter), bub = median_after_first(r->bubble, r->n_iter);
    sim_costs c;
    sim_result res;
    sim_opts o = { .iterations = 1 };
    sim_costs_init(&c, s->n_stages, 0, 0, 0);
    run_job_profile(r->job, &c);
    int rc = sim_run(s, &c, &o, &res);
    sim_costs_free(&c);
    printf("measured:  iteration %.3f ms, bubble %.1f%% (%s, P=%d, D=%d, M=%d; median of steps)\n",
           it * 1e3, bub * 100, s->name, r->pl.o.P, r->pl.o.D, s->n_mb);
    if (rc == 0) {
        printf("simulated: iteration %.3f ms, bubble %.1f%% (from F/B/W costs profiled in this run; "
               "measured/simulated %.2f)\n", res.iteration_time * 1e3, res.bubble_fraction * 100,
               res.iteration_time > 0 ? it / res.iteration_time : 0);
        sim_result_free(&res);
    } else printf("simulated: not available: %s\n", pt_err());
    const timeline *tl = run_job_timeline(r->job);
    if (a->trace && trace_write(tl, a->trace) < 0) return -1;
    if (a->svg) {
        char title[96], sub[96];
        snprintf(title, sizeof title, "%s  P=%d  D=%d  M=%d  (measured)", s->name, r->pl.o.P, r->pl.o.D, s->n_mb);
        snprintf(sub, sizeof sub, "last step  %.2f ms  bubble %.1f%%", r->iter_t[r->n_iter - 1] * 1e3,
                 r->bubble[r->n_iter - 1] * 100);
        svg_opts so = { title, sub, 0 };
        if (svg_write(tl, &so, a->svg) < 0) return -1;
    }
    return 0;
}

static int pipe_loop(train_run *r, const train_args *a) {
    size_t n = (size_t)a->batch * a->seq;
    r->inp = pt_malloc(n * sizeof(int));
    r->tgt = pt_malloc(n * sizeof(int));
    r->iter_t = pt_calloc((size_t)a->steps + 1, sizeof *r->iter_t);
    r->bubble = pt_calloc((size_t)a->steps + 1, sizeof *r->bubble);
    r->t_start = pt_now();
    for (long step = r->step0 + 1; step <= a->steps; step++) {
        int64_t k = data_batch_index(r->d, a->batch, a->seq, (uint64_t)a->shuffle, step - 1);
        if (k < 0 || data_batch(r->d, k, a->batch, a->seq, r->inp, r->tgt) < 0) return -1;
        run_stats rs;
        double t0 = pt_now();
        if (run_job_iteration(r->job, r->inp, r->tgt, &a->oc, (int)step, &rs) < 0)
            return pt_adderr("step %ld: ", step);
        train_stats st = { .loss = rs.loss, .grad_norm = rs.grad_norm, .lr = rs.lr,
                           .clip_scale = rs.clip_scale };
        if (check_loss(st.loss, step) < 0) return -1;
        r->iter_t[r->n_iter] = rs.iter_time;
        r->bubble[r->n_iter++] = rs.bubble;
        log_step(r, a, step, &st, pt_now() - t0, rs.bubble);
        if (a->save && ((a->save_every > 0 && step % a->save_every == 0) || step == a->steps))
            if (pipe_save(r, a, step) < 0) return -1;
    }
    return pipe_report(r, a);
}

/* The plan and the job over the model (and moments, when resuming) set up so far. */
static int pipe_start(train_run *r, const train_args *a) {
    if (run_plan_init(&r->pl, &a->ro, &r->m.cfg, a->batch, a->seq) < 0) return -1;
    if (run_job_init(&r->job, &r->pl, &r->m, &r->opt, r->world) < 0) return -1;
    r->root = run_job_is_root(r->job);
    if (r->world && a->threads > 0) openblas_set_num_threads(a->threads);   /* per process */
    return 0;
}

static int train_main(const train_args *a, comm *world) {
    train_run r;
    memset(&r, 0, sizeof r);
    r.world = world;
    r.root = !world || world->rank == 0;
    int rc = -1;
    if (setup_model(&r, a) < 0) goto cleanup;
    if (a->seq > r.m.cfg.n_positions) {
        pt_seterr("--seq %d exceeds the model's n_positions %d", a->seq, r.m.cfg.n_positions);
        goto cleanup;
    }
    if (data_open(&r.d, a->data, r.m.cfg.vocab_size) < 0 || data_check_batch(r.d, a->batch, a->seq) < 0)
        goto cleanup;
    if (a->ro.P && pipe_start(&r, a) < 0) goto cleanup;
    if (r.root && a->metrics && (pt_make_parents(a->metrics) < 0 || !(r.metrics = fopen(a->metrics, "a")))) {
        pt_seterr("--metrics %s: cannot open for writing: %s", a->metrics, strerror(errno));
        goto cleanup;
    }
    if (r.root && (check_writable(a->trace, "--trace") < 0 || check_writable(a->svg, "--svg") < 0))
        goto cleanup;
    if (r.step0 >= a->steps) {
        if (r.root) printf("nothing to do: %s is at step %ld and --steps is %d\n", a->resume, r.step0, a->steps);
        rc = 0;
        goto cleanup;
    }
    if (r.root)
        printf("model: %d layers, %d heads, %d channels, vocab %d, %.2fM parameters; data: %s, %zu tokens\n",
               r.m.cfg.n_layer, r.m.cfg.n_head, r.m.cfg.n_embd, r.m.cfg.vocab_size, r.m.num_params / 1e6,
               a->data, data_ntokens(r.d));
    if (r.root && a->ro.P)
        printf("pipeline: %s, %d stages x %d replicas, %d microbatches of %d sequences, %s transport; "
               "activations %.2f MB on the busiest rank%s\n", r.pl.s->name, r.pl.o.P, r.pl.o.D,
               r.pl.s->n_mb, r.pl.mb_rows, world ? "mpi" : "threads", run_job_act_bytes(r.job) / 1e6,
               a->ro.recompute ? " (recomputing)" : "");
    rc = a->ro.P ? pipe_loop(&r, a) : train_loop(&r, a);
cleanup:
    run_job_free(r.job);
    if (r.pl.s) run_plan_free(&r.pl);
    free(r.iter_t);
    free(r.bubble);
    if (r.metrics) fclose(r.metrics);
    free(r.inp);
    free(r.tgt);
    data_close(r.d);
    if (r.m.params) adamw_free(&r.opt);
    gpt_free(&r.m);
    return rc;
}

/* A plan places world rank w on device devices[w] of the cluster file it was made for (their
 * speeds and memory shaped its split). The runtime pins nothing: say so rather than drop it. */
static void note_plan_devices(const train_args *a, const plan_layout *pl) {
    if (!pl->devices) return;
    char list[128];
    int n = pl->P * pl->D, at = 0, w = 0;
    for (; w < n && at < (int)sizeof list - 16; w++)
        at += snprintf(list + at, sizeof list - (size_t)at, "%s%d", w ? "," : "", pl->devices[w]);
    if (w < n) snprintf(list + at, sizeof list - (size_t)at, ",...");
    printf("note: %s was planned for devices %s of its cluster file (world rank order); this run "
           "does not place ranks on devices: its %d ranks are %s\n", a->plan, list, n,
           a->transport && !strcmp(a->transport, "mpi") ? "MPI processes wherever mpirun started them"
                                                        : "threads of this process");
}

/* --plan: takes P, D, M, schedule, chunks, split and recompute from a plan file; the global batch
 * is D * M * microbatch size and T the plan's, unless --batch / --seq say the same. Layout flags
 * next to --plan are an error (which would win is not obvious). */
static int apply_plan(train_args *a) {
    run_opts *o = &a->ro;
    if (o->P != CLI_UNSET || o->D != CLI_UNSET || o->M != CLI_UNSET || o->schedule ||
        o->schedule_file || o->split || o->chunks)
        return pt_seterr("--plan sets the layout: drop --stages/--dp/--schedule/--schedule-file/"
                         "--microbatches/--split/--chunks, or drop --plan");
    plan_layout pl;
    if (plan_read(a->plan, &pl) < 0) return -1;
    int batch = pl.D * pl.M * pl.mb_size, rc = 0;
    if (a->batch && a->batch != batch)
        rc = pt_seterr("%s: the plan is for a global batch of %d sequences (dp %d x %d microbatches "
                       "x %d), not --batch %d", a->plan, batch, pl.D, pl.M, pl.mb_size, a->batch);
    else if (a->seq && a->seq != pl.T)
        rc = pt_seterr("%s: the plan is for --seq %d, not %d", a->plan, pl.T, a->seq);
    if (rc == 0) {
        a->batch = batch;
        a->seq = pl.T;
        o->P = pl.P; o->D = pl.D; o->M = pl.M; o->chunks = pl.chunks;
        o->recompute = o->recompute || pl.recompute;
        snprintf(a->plan_schedule, sizeof a->plan_schedule, "%s", pl.schedule);
        o->schedule = a->plan_schedule;
        char text[512];
        printf("plan %s: %d stages x dp %d, %s, %d microbatches of %d, split %s%s\n", a->plan, pl.P,
               pl.D, pl.schedule, pl.M, pl.mb_size, plan_layout_split_str(&pl, text, sizeof text),
               pl.recompute ? ", recompute" : "");
        note_plan_devices(a, &pl);
        a->split = pl.split;          /* the counts themselves: no text in between */
        o->split = pl.split;
        o->n_split = pl.K;
        pl.split = NULL;
    }
    plan_layout_free(&pl);
    return rc;
}

/* Pipelined when any layout flag is given (then P = D = 1, 1f1b and M = P unless given); the MPI
 * world when --transport mpi. */
static int pipe_flags(train_args *a, int *argc, char ***argv, comm **world) {
    run_opts *o = &a->ro;
    if (!cli_layout_given(o, a->transport) && (a->trace || a->svg))
        return pt_seterr("--trace and --svg record a pipelined run (give --stages)");
    if (cli_layout_start(o, a->transport, argc, argv, world) < 0) return -1;
    /* the fault-injection test hook: threads mode wraps inside the job, MPI here (it owns world) */
    if (*world && o->fail_after > 0 && (*world)->rank == o->fail_rank)
        return comm_faulty_wrap(*world, -1, 0, o->fail_after, world);
    return 0;
}

int cli_train(int argc, char **argv) {
    train_args a = {.steps = 100, .seed = 1337, .log_every = 0, .lr_min = NAN, .threads = 0,
                    .oc = optim_config_default()};
    enum { N_TRAIN_OPTS = 28 };
    cli_opt opts[N_TRAIN_OPTS + CLI_LAYOUT_N_OPTS] = {
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
        {"--threads", OPT_INT, &a.threads, "OpenBLAS threads (default: all cores; pipelined: 1 per rank, MPI: this many per process)"},
        {"--fail-rank", OPT_INT, &a.ro.fail_rank, "testing: this world rank dies after --fail-after sends"},
        {"--fail-after", OPT_INT, &a.ro.fail_after, "testing: sends before --fail-rank dies (default 0: never)"},
        {"--trace", OPT_STR, &a.trace, "pipelined: Chrome trace JSON of the last step, measured"},
        {"--svg", OPT_STR, &a.svg, "pipelined: SVG timeline of the last step, measured"},
        {"--plan", OPT_STR, &a.plan, "run the layout of a plan file (pipetrain plan --out plan.json)"},
    };
    cli_layout_opts(opts + N_TRAIN_OPTS, &a.ro, &a.transport, &a.split_text);
    cli_layout_init(&a.ro);
    int rc = cli_parse(argc, argv, "train", "--config C.json --data FILE --batch B --seq T --steps K "
                       "--lr X [flags]", opts, sizeof opts / sizeof *opts);
    if (rc) return rc < 0 ? 2 : 0;
    if (a.log_every <= 0) a.log_every = a.steps / 50 > 1 ? a.steps / 50 : 1;
    if (a.threads > 0) openblas_set_num_threads(a.threads);
    comm *world = NULL;
    a.transport = cli_layout_transport(a.transport);
    if (cli_layout_split(a.split_text, &a.split, &a.ro.n_split) < 0) return cli_fail("train");
    a.ro.split = a.split;
    rc = 0;
    if ((a.plan && apply_plan(&a) < 0) || pipe_flags(&a, &argc, &argv, &world) < 0) rc = cli_fail("train");
    else if (parse_schedule(&a) < 0 || train_main(&a, world) < 0) {
        if (world) pt_adderr("rank %d: ", world->rank);
        rc = cli_fail("train");
    }
    if (world) { comm_free(world); comm_mpi_finalize(); }
    free(a.split);
    return rc;
}
