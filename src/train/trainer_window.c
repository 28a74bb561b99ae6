/* The asynchronous window (--async-window W, docs/async.md "Throughput under link delay"): with
 * pipedream or 2bw one engine iteration runs W steps as one continuous stream of W x M
 * microbatches, so the next step's forwards enter the pipe while this step's backwards return
 * (no fill and drain between them). The updates stay per microbatch (pipedream) or per batch
 * (2bw), each with its own step's lr and update number (run/exec_async.c); microbatch j of step
 * s is the same rows as without the window; each step is still reported on its own (its loss,
 * its hooks, a share of the pass's time). A pass ends only where a step boundary needs the
 * weights (evaluation, checkpoint, snapshot, the last step): the window divides them all.
 * Not here: the executor's side (run/), the loop itself (trainer.c). */
#include "sched/sched.h"
#include "train/trainer_int.h"
#include "util/pt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRAIN_WINDOW_DEFAULT 4   /* steps a pass by default: enough microbatches in flight to
                                  * hide a 30 ms link at P = 4, M = 4 (docs/async.md) */

struct train_window {
    int W;                       /* steps a pass */
    int *step_tok, *step_tgt;    /* (B, T) one step's batch */
};

static long gcd(long a, long b) {
    while (b) { long r = a % b; a = b; b = r; }
    return a;
}

/* The step counts a pass must not cross, as (value, flag) pairs: W must divide each. n. */
static int window_bounds(const train_ctx *t, long *v, const char **name) {
    const train_opts *o = &t->o;
    int n = 0;
    v[n] = o->steps, name[n++] = "--steps";
    if (t->step0) v[n] = t->step0, name[n++] = "the resumed step";
    if (o->eval_data && o->eval_every > 0) v[n] = o->eval_every, name[n++] = "--eval-every";
    if (o->save && o->save_every > 0) v[n] = o->save_every, name[n++] = "--save-every";
    if (o->snapshot_every > 0) v[n] = o->snapshot_every, name[n++] = "--snapshot-every";
    return n;
}

/* Whether the run's schedule is a generated asynchronous one. */
static int window_async(const train_opts *o) {
    if (!o->ro.P || o->ro.schedule_file || !o->ro.schedule) return 0;
    const sched_generator *g = sched_generator_find(o->ro.schedule);
    return g && g->async;
}

/* The largest window below `below` that divides every boundary (1 at least). */
int train_window_below(const train_ctx *t, int below) {
    long v[8], g = 0;
    const char *name[8];
    int n = window_bounds(t, v, name), W = below - 1;
    for (int i = 0; i < n; i++) g = gcd(g, v[i]);
    while (W > 1 && g % W) W--;
    return W > 1 ? W : 1;
}

/* t->win for W steps a pass (none for W = 1), o.ro.async_window to match. */
static void window_alloc(train_ctx *t, int W) {
    const train_opts *o = &t->o;
    train_window_free(t);
    t->o.ro.async_window = W > 1 ? W : 0;
    if (W < 2) return;
    t->win = pt_calloc(1, sizeof *t->win);
    t->win->W = W;
    t->win->step_tok = pt_malloc(sizeof(int) * (size_t)o->batch * (size_t)o->seq);
    t->win->step_tgt = pt_malloc(sizeof(int) * (size_t)o->batch * (size_t)o->seq);
}

void train_window_shrink(train_ctx *t, int W, const char *why) {
    window_alloc(t, W);
    snprintf(t->win_note, sizeof t->win_note, "%d step%s a pass (the default %d shrunk to fit %s; --async-window 1: "
             "a flush every step)", W, W > 1 ? "s" : "", TRAIN_WINDOW_DEFAULT, why);
}

int train_window_choose(train_ctx *t) {
    train_opts *o = &t->o;
    int given = o->async_window;
    long v[8];
    const char *name[8];
    int n = window_bounds(t, v, name);
    if (given < 0 || given > RUN_MAX_WINDOW)
        return pt_seterr("--async-window must be in 1..%d (steps a pass; 1: a flush every step), got %d",
                         RUN_MAX_WINDOW, given);
    if (!window_async(o) || o->adapt) {
        if (given > 1)
            return pt_seterr("--async-window %d: only for a generated asynchronous schedule (pipedream, 2bw)%s; "
                             "give --async-window 1 or leave it out", given, o->adapt ? " without --adapt" : "");
        o->ro.async_window = 0;
        return 0;
    }
    for (int i = 0; given > 1 && i < n; i++)
        if (v[i] % given)
            return pt_seterr("--async-window %d must divide %s (%ld): a pass of %d steps ends only where its "
                             "weights are needed; give a window that divides it (or 1)", given, name[i], v[i], given);
    int W = given ? given : train_window_below(t, TRAIN_WINDOW_DEFAULT + 1);   /* the default: the largest that fits */
    window_alloc(t, W);
    if (!given)
        snprintf(t->win_note, sizeof t->win_note, "%d step%s a pass (the default %d%s; --async-window 1: a flush "
                 "every step)", W, W > 1 ? "s" : "", TRAIN_WINDOW_DEFAULT,
                 W < TRAIN_WINDOW_DEFAULT ? ", the largest that divides --steps and the save/eval boundaries" : "");
    else snprintf(t->win_note, sizeof t->win_note, "%d step%s a pass (--async-window %d)", W, W > 1 ? "s" : "", given);
    return 0;
}

int train_window_steps(const train_ctx *t) { return t->win ? t->win->W : 1; }

void train_window_free(train_ctx *t) {
    if (!t->win) return;
    free(t->win->step_tok);
    free(t->win->step_tgt);
    free(t->win);
    t->win = NULL;
}

/* Step s's batch into the pass's rows: the executor reads replica d's microbatch k at row
 * d (B W / D) + k b, so step w's rows of replica d go to d (B W / D) + w (B / D). 0, or -1
 * (*failed: the step whose batch could not be read). */
static int window_gather(train_ctx *t, long first, long *failed) {
    const train_opts *o = &t->o;
    struct train_window *x = t->win;
    int D = o->ro.D > 0 ? o->ro.D : 1, W = x->W;
    size_t T = (size_t)o->seq, r = (size_t)(o->batch / D);
    for (int w = 0; w < W; w++) {
        int64_t k = data_batch_index(t->d, o->batch, o->seq, (uint64_t)o->shuffle, first + w - 1);
        *failed = first + w;
        if (k < 0 || data_batch(t->d, k, o->batch, o->seq, x->step_tok, x->step_tgt) < 0) return -1;
        for (int d = 0; d < D; d++) {
            size_t to = ((size_t)d * r * (size_t)W + (size_t)w * r) * T, from = (size_t)d * r * T;
            memcpy(t->inp + to, x->step_tok + from, r * T * sizeof(int));
            memcpy(t->tgt + to, x->step_tgt + from, r * T * sizeof(int));
        }
    }
    return 0;
}

int train_window_pass(train_ctx *t, long first, long *failed) {
    const train_opts *o = &t->o;
    int W = t->win->W;
    train_step_stats st = {0};
    if (window_gather(t, first, failed) < 0) return -1;
    *failed = first;                  /* the engine's iteration: the pass as a whole */
    double t0 = pt_now();
    if (train_engine_step(t->e, t->inp, t->tgt, &o->oc, first, &st) < 0)
        return pt_adderr("steps %ld-%ld (one pass of --async-window %d): ", first, first + W - 1, W);
    double dt = pt_now() - t0;
    for (int w = 0; w < W; w++) {
        train_step_stats s = st;      /* each step: its loss and lr, a share of the pass's time */
        s.opt.loss = st.win_loss[w];
        s.opt.lr = optim_lr_at(&o->oc, first + w);
        s.step_time = dt / W;
        s.iter_time = st.iter_time / W;
        *failed = first + w;
        if (train_check_loss(s.opt.loss, first + w) < 0 || train_call_hooks(t, first + w, &s) < 0) return -1;
    }
    return 0;
}
