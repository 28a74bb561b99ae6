/* A side task that only spins (train --side-task busy:US[,fail=N][,steps=N][,rank=R]): each step
 * computes for US microseconds; fail=N makes its N-th step fail, steps=N makes it finish after N.
 * For tests and for measuring the harvester itself (a step of known length); it touches nothing
 * of the training. */
#include "harvest/harvest.h"
#include "util/pt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    double secs;                  /* per step */
    long fail_at, steps_max, n;   /* fail at step fail_at (0: never), finish after steps_max */
    volatile double sink;         /* the spin's result, so it is not optimised away */
} busy_task;

static int busy_step(harvest_task *t, const harvest_slot *sl) {
    busy_task *b = t->self;
    if (b->steps_max > 0 && b->n >= b->steps_max) return HARVEST_IDLE;
    if (++b->n == b->fail_at) return pt_seterr("busy: failing at step %ld, as asked (fail=%ld)", b->n, b->fail_at);
    double end = pt_now() + b->secs, x = 0;
    while (pt_now() < end)
        for (int i = 0; i < 64; i++) x += 1e-9 * i;
    b->sink = x;
    return HARVEST_MORE;
}

static int busy_done(harvest_task *t) {
    busy_task *b = t->self;
    return b->steps_max > 0 && b->n >= b->steps_max;
}

static void busy_free(harvest_task *t) {
    if (t) free(t->self);
    free(t);
}

static const harvest_task_vt busy_vt = {
    .kind = "busy", .step = busy_step, .done = busy_done, .free = busy_free,
};

int harvest_busy_create(harvest_task **out, const char *args, const harvest_env *env) {
    static int n_made;
    const char *flag = env->flag ? env->flag : "--side-task";
    double us = -1;
    long fail = 0, steps = 0;
    int rank = -1, used = 0;
    *out = NULL;
    if (sscanf(args, "%lf%n", &us, &used) != 1 || us <= 0)
        return pt_seterr("%s busy:%s: expected busy:MICROSECONDS[,fail=N][,steps=N][,rank=R]", flag, args);
    for (const char *p = args + used; *p;) {
        int n = 0;
        if (sscanf(p, ",fail=%ld%n", &fail, &n) == 1 && n > 0) p += n;
        else if (sscanf(p, ",steps=%ld%n", &steps, &n) == 1 && n > 0) p += n;
        else if (sscanf(p, ",rank=%d%n", &rank, &n) == 1 && n > 0) p += n;
        else return pt_seterr("%s busy:%s: unknown part '%s' (fail=N, steps=N, rank=R)", flag, args, p);
    }
    if (rank >= env->R) return pt_seterr("%s busy:%s: rank %d is not in the job (0..%d)", flag, args, rank, env->R - 1);
    harvest_task *t = pt_calloc(1, sizeof *t);
    busy_task *b = pt_calloc(1, sizeof *b);
    b->secs = us * 1e-6;
    b->fail_at = fail;
    b->steps_max = steps;
    t->vt = &busy_vt;
    t->self = b;
    t->rank = rank;
    snprintf(t->name, sizeof t->name, "busy %d (%g us)", n_made++, us);
    *out = t;
    return 0;
}
