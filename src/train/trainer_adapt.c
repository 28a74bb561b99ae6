/* train --adapt (docs/stragglers.md): the trainer's side of the adapt module (adapt/adapt.h): its
 * pipelined engine as the adapt_host (timeline, schedule, replan, resplit, layout, job), the run
 * report as its event sink, the options, and the ADAPT hook that runs adapt_step after each step.
 * Not here: measuring, deciding, switching (src/adapt/). */
#include "adapt/adapt.h"
#include "train/engine.h"
#include "train/trainer_int.h"
#include "util/pt.h"

static train_engine *engine(void *u) { return ((train_ctx *)u)->e; }
static const timeline *host_timeline(void *u) { return engine(u)->vt->timeline(engine(u)); }
static const sched *host_schedule(void *u) { return engine(u)->vt->schedule(engine(u)); }
static int host_replan(void *u, const sched *s) { return engine(u)->vt->replan(engine(u), s); }
static int host_resplit(void *u, const int *split, int n) { return engine(u)->vt->resplit(engine(u), split, n); }
static const run_layout *host_layout(void *u) { return &train_engine_plan(engine(u))->lo; }
static run_job *host_job(void *u) { return train_engine_job(engine(u)); }
static void host_event(void *u, const char *kind, long step, cJSON *fields) { train_report_event(u, kind, step, fields); }

int train_adapt_init(train_ctx *t) {
    const train_opts *o = &t->o;
    train_engine *e = t->e;
    adapt_host h = { .user = t, .timeline = e->vt->timeline ? host_timeline : NULL,
                     .schedule = e->vt->schedule ? host_schedule : NULL, .replan = e->vt->replan ? host_replan : NULL,
                     .resplit = e->vt->resplit ? host_resplit : NULL, .layout = host_layout, .job = host_job,
                     .event = host_event, .root = t->root };
    adapt_opts ao = { .mem_limit = o->mem_limit, .cluster = o->cluster, .world = o->world, .D = o->ro.D,
                      .overlap = !o->ro.no_overlap, .batch = o->batch, .seq = o->seq, .cfg = &t->m.cfg,
                      .n_ties = t->m.n_ties, .step0 = t->step0 };
    return adapt_init(&t->adapt, &ao, &h);
}

int train_hook_adapt(train_ctx *t, long step, const train_step_stats *st, void *user) {
    return adapt_step(user, step, st->split, st->iter_time);
}

void train_adapt_free(train_ctx *t) {
    if (!t) return;
    adapt_free(t->adapt);
    t->adapt = NULL;
}
