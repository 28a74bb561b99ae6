/* Held-out evaluation as a side task (train --eval-data FILE --eval-every K): the trainer copies
 * the weights of step K into the evaluation's own whole model (its snapshot), begins a pass, and
 * one task per world rank computes the pass's pieces in that rank's bubbles (eval.h: one layer of
 * one sequence per step), claiming sequences from the shared pass; the trainer takes the loss
 * when the pass is complete, or finishes it on its own thread when there are no bubbles (one
 * process), when the next evaluation is due, or after the last step. Under MPI only the root
 * holds the snapshot, so only its rank evaluates. Not here: the arithmetic (eval.c), when the
 * trainer snapshots (train/). */
#include "harvest/task_eval.h"
#include "tok/tok.h"
#include "util/pt.h"
#include <stdio.h>
#include <stdlib.h>

struct harvest_eval {
    eval_set *set;
    gpt_model snap;               /* the weights of step `step` (whole model: params and grads) */
    eval_pass pass;
    long step;                    /* the step the pass evaluates; -1: none begun */
    int taken;                    /* the complete pass's loss was taken */
    int every;
    eval_worker **workers;        /* [n_workers] one per task (the tasks own them) */
    int n_workers;
    eval_worker *own;             /* the trainer's thread's, for finishing */
};

typedef struct { harvest_eval *ev; eval_worker *w; } eval_task;

static int evtask_step(harvest_task *t, const harvest_slot *sl) {
    eval_task *x = t->self;
    if (x->ev->step < 0) return HARVEST_IDLE;
    int rc = eval_worker_step(x->w, &x->ev->pass);
    return rc < 0 ? -1 : rc ? HARVEST_MORE : HARVEST_IDLE;
}

static int evtask_kind(const harvest_task *t) {
    const eval_task *x = t->self;
    return eval_worker_next_kind(x->w);
}

static void evtask_free(harvest_task *t) {
    if (!t) return;
    eval_task *x = t->self;
    if (x) eval_worker_free(x->w);
    free(x);
    free(t);
}

static const harvest_task_vt eval_vt = {
    .kind = "eval", .step = evtask_step, .next_kind = evtask_kind, .free = evtask_free,
};

int harvest_eval_create(harvest_eval **out, harvest *h, const harvest_eval_opts *o) {
    harvest_eval *ev = pt_calloc(1, sizeof *ev);
    *out = NULL;
    ev->step = -1;
    ev->every = o->every;
    if (o->every < 1) {
        free(ev);
        return pt_seterr("--eval-every %d: evaluate every K >= 1 steps", o->every);
    }
    data_set *d = NULL;
    int rc = tok_data_open(&d, o->path, o->tokenizer, o->cfg->vocab_size) < 0 ? pt_adderr("--eval-data: ")
             : eval_set_from(&ev->set, d, o->B, o->T, o->batches, "--eval-data");
    if (rc < 0 || gpt_init(&ev->snap, o->cfg) < 0) {
        harvest_eval_free(ev);
        return -1;
    }
    eval_pass_init(&ev->pass, ev->set);
    eval_worker_create(&ev->own, &ev->snap, o->T);
    ev->n_workers = o->R;
    ev->workers = pt_calloc((size_t)o->R, sizeof *ev->workers);
    for (int r = 0; r < o->R; r++) {
        harvest_task *t = pt_calloc(1, sizeof *t);
        eval_task *x = pt_calloc(1, sizeof *x);
        x->ev = ev;
        eval_worker_create(&x->w, &ev->snap, o->T);
        ev->workers[r] = x->w;
        t->vt = &eval_vt;
        t->self = x;
        t->rank = r;
        t->mem_bytes = eval_worker_bytes(x->w) + (r == 0 ? 2.0 * ev->snap.n_held * sizeof(float) : 0);
        snprintf(t->name, sizeof t->name, "eval (rank %d)", r);
        harvest_add(h, t);
    }
    *out = ev;
    return 0;
}

gpt_model *harvest_eval_weights(harvest_eval *ev) { return &ev->snap; }
int harvest_eval_every(const harvest_eval *ev) { return ev->every; }
int harvest_eval_batches(const harvest_eval *ev) { return eval_set_batches(ev->set); }

void harvest_eval_begin(harvest_eval *ev, long step) {
    ev->step = step;
    ev->taken = 0;
    eval_pass_begin(&ev->pass, &ev->snap);
}

int harvest_eval_busy(const harvest_eval *ev) { return ev->step >= 0 && !eval_pass_complete(&ev->pass); }

int harvest_eval_take(harvest_eval *ev, long *step, double *loss) {
    if (ev->step < 0 || ev->taken || !eval_pass_complete(&ev->pass)) return 0;
    ev->taken = 1;
    *step = ev->step;
    *loss = eval_pass_loss(&ev->pass);
    return 1;
}

int harvest_eval_finish(harvest_eval *ev) {
    if (ev->step < 0) return 0;
    for (int r = 0; r < ev->n_workers; r++)   /* units a rank left half done, then the rest */
        for (int rc; (rc = eval_worker_step(ev->workers[r], &ev->pass)) != 0;)
            if (rc < 0) return -1;
    for (int rc; (rc = eval_worker_step(ev->own, &ev->pass)) != 0;)
        if (rc < 0) return -1;
    return 0;
}

void harvest_eval_free(harvest_eval *ev) {
    if (!ev) return;
    eval_pass_free(&ev->pass);
    eval_worker_free(ev->own);
    free(ev->workers);
    gpt_free(&ev->snap);
    eval_set_close(ev->set);
    free(ev);
}
