/* The training loop (trainer.h): setup of a run, the loop over steps for every engine, and the
 * step-boundary hooks. Not here: the model a run starts from (trainer_model.c), the built-in
 * save and log hooks (trainer_hooks.c), how a step is computed (engine_single.c, engine_pipe.c). */
#include "optim/async_fix.h"
#include "tok/tok.h"
#include "train/train_memlimit.h"
#include "train/trainer_int.h"
#include "util/pt.h"
#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What tensor parallelism cannot run yet, refused rather than computed wrong: side work in the
 * bubbles (its tasks see one rank per pipeline rank, evaluation and side training read whole
 * layers). */
static int check_tp(const train_opts *o) {
    if (o->ro.tp <= 1) return 0;
    const char *what = o->eval_data ? "--eval-data" : o->n_side_commands ? "--side-command"
                     : o->n_side_tasks ? "--side-task" : o->side_train ? "--side-train" : NULL;
    if (!what) return 0;
    return pt_seterr("%s with --tp %d is not supported yet (side work needs whole layers on one "
                     "rank); drop it or run with --tp 1", what, o->ro.tp);
}

/* --dp-sync H > 1 keeps state (each rank's theta_start, outer momentum, the replica's own weights
 * and moments) that checkpoints and snapshots carry (run/exec_rankstate.c) but that --adapt's
 * re-split would not move: refused. */
static int check_dp_sync(const train_opts *o) {
    if (o->ro.dp_sync <= 1 || !o->adapt) return 0;
    return pt_seterr("--adapt with --dp-sync %d is not supported: the outer step's state (theta_start and "
                     "the outer momentum) is not moved by a re-split; drop --adapt, or run with --dp-sync 1",
                     o->ro.dp_sync);
}

/* The options a flag parser may have let through, in the order they are reported. */
static int check_opts(const train_opts *o) {
    if (o->batch <= 0 || o->seq <= 0) return pt_seterr("--batch and --seq must be positive");
    if (!o->data) return pt_seterr("--data is required (a text file or an llm.c token file)");
    if (check_tp(o) < 0 || check_dp_sync(o) < 0) return -1;
    return optim_config_validate(&o->oc);
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

/* Root: the metrics file (appended to: a resumed run continues it) and the end-of-run paths. */
static int open_outputs(train_ctx *t) {
    const train_opts *o = &t->o;
    if (!t->root) return 0;
    const char *m = t->rep.on ? t->rep.metrics : NULL;   /* --metrics, or the save folder's */
    if (m && (pt_make_parents(m) < 0 || !(t->metrics = fopen(m, "a"))))
        return pt_seterr("%s %s: cannot open for writing: %s", o->metrics ? "--metrics" : "--save",
                         m, strerror(errno));
    if (check_writable(o->trace, "--trace") < 0 || check_writable(o->svg, "--svg") < 0) return -1;
    return 0;
}

/* With auto_layout and no layout given: this machine's layout (train_layout_choose) into t->o.ro. */
static void choose_layout(train_ctx *t) {
    train_opts *o = &t->o;
    if (!o->auto_layout || o->ro.P || o->world) return;
    pt_machine mi;
    pt_machine_info(&mi);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    double mem = pages > 0 && page > 0 ? (double)pages * (double)page : 0;
    train_layout_choose(&o->ro, &t->m, o->batch, o->seq, mi.cores, mem, t->layout_note,
                        sizeof t->layout_note);
    /* chosen pipelined (replicas over threads): the job starts from the model loaded whole */
    if (o->ro.P) run_source_model(&t->src, &t->m, &t->opt);
}

/* The engine for o->ro: the pipelined job when ro.P > 0, else this process alone. */
static int start_engine(train_ctx *t) {
    const train_opts *o = &t->o;
    choose_layout(t);
    if (!o->ro.P) return train_engine_single_init(&t->e, &t->m, &t->opt, o->batch, o->seq, o->threads);
    train_pipe_opts po = { .ro = o->ro, .world = o->world, .threads = o->threads,
                           .trace = o->trace, .svg = o->svg, .last_step = o->steps,
                           .adapt = o->adapt };
    if (!po.svg && t->rep.on) po.svg = t->rep.svg;   /* the report draws the last step */
    return train_engine_pipe_init(&t->e, &po, &t->src, o->batch, o->seq);
}

/* --mem-limit's smaller default window: the engine stopped and started again under o.ro as it is
 * now. 0, or -1. */
static int restart_engine(train_ctx *t) {
    train_engine_free(t->e);
    t->e = NULL;
    if (start_engine(t) < 0) return -1;
    t->root = t->e->root;
    return 0;
}

/* Model, data, engine, outputs, in the order their errors are reported. */
static int setup_run(train_ctx *t) {
    const train_opts *o = &t->o;
    if (check_opts(o) < 0 || train_setup_model(t) < 0) return -1;
    if (o->seq > t->m.cfg.n_positions)
        return pt_seterr("--seq %d exceeds the model's n_positions %d", o->seq, t->m.cfg.n_positions);
    if (tok_data_open(&t->d, o->data, o->tokenizer, t->m.cfg.vocab_size) < 0 ||
        data_check_batch(t->d, o->batch, o->seq) < 0)
        return -1;
    if (train_window_choose(t) < 0) return -1;   /* before the engine: its plan holds the window */
    if (train_report_paths(t) < 0 || train_side_setup(t) < 0 || start_engine(t) < 0) return -1;
    t->root = t->e->root;
    int rc;
    while ((rc = train_memlimit_apply(t)) > 0)    /* --mem-limit SIZE: a smaller default window */
        if (restart_engine(t) < 0) return -1;
    if (rc < 0) return -1;
    run_source_free(&t->src);   /* read by the job's start only */
    train_side_start(t);
    if (open_outputs(t) < 0) return -1;
    size_t n = (size_t)o->batch * o->seq * (size_t)train_window_steps(t);   /* a pass's rows */
    t->inp = pt_malloc(n * sizeof *t->inp);
    t->tgt = pt_malloc(n * sizeof *t->tgt);
    return 0;
}

int train_init(train_ctx **out, const train_opts *o) {
    train_ctx *t = pt_calloc(1, sizeof *t);
    t->o = *o;
    if (t->o.log_every <= 0) t->o.log_every = o->steps / 50 > 1 ? o->steps / 50 : 1;
    t->root = !o->world || o->world->rank == 0;
    *out = NULL;
    if (o->threads > 0) openblas_set_num_threads(o->threads);
    if (setup_run(t) < 0) goto free_ctx;
    if (t->side.h) train_add_hook(t, TRAIN_HOOK_HARVEST, train_hook_side, NULL);
    if (t->side.ev) train_add_hook(t, TRAIN_HOOK_EVALUATE, train_hook_eval, NULL);
    if (o->save) train_add_hook(t, TRAIN_HOOK_SAVE, train_hook_save, NULL);
    train_add_hook(t, TRAIN_HOOK_LOG, train_hook_log, NULL);
    if (t->rep.on) train_add_hook(t, TRAIN_HOOK_LOG, train_hook_report, NULL);
    if (o->adapt && (train_adapt_init(t) < 0 || train_add_hook(t, TRAIN_HOOK_ADAPT, train_hook_adapt, t->adapt) < 0))
        goto free_ctx;
    if (o->adapt_wire && (train_wire_init(t) < 0 ||
                          train_add_hook(t, TRAIN_HOOK_ADAPT, train_hook_wire, &t->wire_state) < 0))
        goto free_ctx;
    if (train_recover_init(t) < 0 || (t->recover && train_add_hook(t, TRAIN_HOOK_SAVE, train_hook_snapshot, NULL) < 0))
        goto free_ctx;
    *out = t;
    return 0;
free_ctx:
    train_free(t);
    return -1;
}

int train_add_hook(train_ctx *t, train_hook_slot slot, train_hook_fn fn, void *user) {
    if ((unsigned)slot >= TRAIN_HOOK_SLOTS) return pt_seterr("train_add_hook: no hook slot %d", (int)slot);
    if (t->n_hooks[slot] == TRAIN_MAX_HOOKS)
        return pt_seterr("train_add_hook: slot %d already holds %d hooks", (int)slot, TRAIN_MAX_HOOKS);
    t->hooks[slot][t->n_hooks[slot]++] = (train_hook){ fn, user };
    return 0;
}



/* Root: the model and data, then the engine's own line. */
static void print_header(const train_ctx *t) {
    if (!t->root) return;
    printf("model: %d layers, %d heads, %d channels, vocab %d, %.2fM parameters; data: %s, %zu tokens\n",
           t->m.cfg.n_layer, t->m.cfg.n_head, t->m.cfg.n_embd, t->m.cfg.vocab_size,
           t->m.num_params / 1e6, t->o.data, data_ntokens(t->d));
    if (t->layout_note[0]) printf("layout: %s\n", t->layout_note);
    train_engine_describe(t->e);
    const run_plan *pl = train_engine_plan(t->e);
    if (pl && pl->s->async) {   /* the correction and the update rule it leaves (docs/async.md) */
        char line[256];
        printf("asynchronous: %s (docs/async.md)\n", async_fix_describe(line, sizeof line, (async_fix)pl->o.async_fix,
                                                                     pl->o.async_fix_default, &t->o.oc));
        if (t->win_note[0]) printf("asynchronous window: %s\n", t->win_note);
    }
}

/* One step: its batch (a pure function of the step: data order survives a resume), the engine,
 * the loss check, the hooks. */
static int run_step(train_ctx *t, long step) {
    const train_opts *o = &t->o;
    train_step_stats st = {0};
    int64_t k = data_batch_index(t->d, o->batch, o->seq, (uint64_t)o->shuffle, step - 1);
    if (k < 0 || data_batch(t->d, k, o->batch, o->seq, t->inp, t->tgt) < 0) return -1;
    double t0 = pt_now();
    if (train_engine_step(t->e, t->inp, t->tgt, &o->oc, step, &st) < 0)
        return pt_adderr("step %ld: ", step);
    st.step_time = pt_now() - t0;
    if (train_check_loss(st.opt.loss, step) < 0) return -1;
    return train_call_hooks(t, step, &st);
}

int train_run(train_ctx *t) {
    const train_opts *o = &t->o;
    if (t->step0 >= o->steps) {
        if (t->root) printf("nothing to do: %s is at step %ld and --steps is %d\n",
                            o->resume ? o->resume : "the run", t->step0, o->steps);
        return 0;
    }
    print_header(t);
    train_report_start(t);
    t->t_start = pt_now();
    int W = train_window_steps(t);   /* --async-window: W steps a pass (it divides every boundary) */
    for (long step = t->step0 + 1; step <= o->steps; step += W) {
        long failed = step;           /* a window's pass says which of its steps failed */
        if ((W > 1 ? train_window_pass(t, step, &failed) : run_step(t, step)) < 0) {
            train_report_error(t, failed);
            return -1;
        }
    }
    if (train_engine_report(t->e) < 0) return -1;
    train_side_end(t);
    train_recover_end(t);
    train_report_end(t, o->steps);
    return 0;
}

void train_free(train_ctx *t) {
    if (!t) return;
    train_side_free(t);              /* first: side processes die now */
    train_recover_free(t);
    train_adapt_free(t);
    train_window_free(t);
    train_engine_free(t->e);
    if (t->metrics) fclose(t->metrics);
    free(t->inp);
    free(t->tgt);
    data_close(t->d);
    run_source_free(&t->src);
    if (t->m.params) adamw_free(&t->opt);
    gpt_free(&t->m);
    free(t);
}

const train_opts *train_ctx_opts(const train_ctx *t) { return &t->o; }
int train_ctx_is_root(const train_ctx *t) { return t->root; }
train_engine *train_ctx_engine(train_ctx *t) { return t->e; }
