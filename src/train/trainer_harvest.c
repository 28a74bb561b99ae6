/* The trainer's side work (src/harvest, docs/harvesting.md): the harvester and its tasks made
 * from the options and checked before the engine starts (its wait hook goes into the job's
 * options), the HARVEST hook (the step's side work measured, predictions updated, the metrics
 * keys bubble_s, side_s, side_cpu_s, side_overrun_s, side_steps, side_sync_s, wait_idle_s, the tasks' notes as
 * "side_task" events), the EVALUATE hook (held-out loss of every K-th step's weights: a
 * snapshot evaluated in later bubbles, reported as eval_loss with eval_step), and the end's
 * summary. Not here: the policy and the tasks (harvest/), the loop (trainer.c). */
#include "train/trainer_int.h"
#include "harvest/harvest_tasks.h"
#include "util/pt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int side_any(const train_opts *o) {
    return o->n_side_commands > 0 || o->n_side_tasks > 0 || o->eval_data || o->side_train;
}

/* The flags' combinations that mean nothing. */
static int side_check_opts(const train_opts *o) {
    if (!o->eval_data && (o->eval_every || o->eval_batches))
        return pt_seterr("--eval-every and --eval-batches need --eval-data FILE (held-out tokens)");
    if (o->eval_every < 0) return pt_seterr("--eval-every %d: give K >= 1 (every K steps)", o->eval_every);
    if (o->side_mem < 0) return pt_seterr("--side-mem %.0f: give a number of bytes >= 0", o->side_mem);
    if (!o->side_train && (o->side_data || o->side_steps))
        return pt_seterr("--side-data and --side-steps need --side-train CONFIG (the second model)");
    if (o->side_train && !o->side_data)
        return pt_seterr("--side-train %s needs --side-data FILE (its training tokens)", o->side_train);
    if (!o->ro.P && (o->n_side_commands || o->n_side_tasks || o->side_train))
        return pt_seterr("%s needs a pipelined run (--stages P): one process has no bubbles to run "
                         "side work in", o->n_side_commands ? "--side-command" : o->side_train ?
                         "--side-train" : "--side-task");
    return 0;
}

/* Every side task of the options, added to h in flag order: commands, tasks, the evaluation. */
static int side_make_tasks(train_ctx *t, int R) {
    const train_opts *o = &t->o;
    train_side *sd = &t->side;
    harvest_env env = { .R = R, .mem_cap = o->side_mem, .flag = "--side-command" };
    harvest_task *task;
    for (int i = 0; i < o->n_side_commands; i++) {
        if (harvest_command_create(&task, o->side_commands[i], &env) < 0) return -1;
        harvest_add(sd->h, task);
    }
    env.flag = "--side-task";
    for (int i = 0; i < o->n_side_tasks; i++) {
        if (harvest_task_create(&task, o->side_tasks[i], &env) < 0) return -1;
        harvest_add(sd->h, task);
    }
    if (o->side_train) {
        char metrics[4200];
        size_t n = strlen(t->rep.metrics);
        if (n > 6 && !strcmp(t->rep.metrics + n - 6, ".jsonl")) n -= 6;
        snprintf(metrics, sizeof metrics, "%.*s.side.jsonl", (int)n, t->rep.metrics);
        harvest_train_opts to = { .config = o->side_train, .data = o->side_data, .steps = o->side_steps,
                                  .B = o->batch, .T = o->seq, .seed = o->seed, .rank = -1,
                                  .metrics = t->rep.on ? metrics : NULL };
        env.flag = "--side-train";
        if (harvest_train_new(&task, &to, &env) < 0) return -1;
        harvest_add(sd->h, task);
    }
    if (!o->eval_data) return 0;
    harvest_eval_opts eo = { .path = o->eval_data, .every = o->eval_every > 0 ? o->eval_every : o->steps,
                             .batches = o->eval_batches, .cfg = &t->m.cfg, .B = o->batch,
                             .T = o->seq, .R = R, .tokenizer = o->tokenizer };
    return harvest_eval_create(&sd->ev, sd->h, &eo);
}

/* A C task's declared memory against --side-mem (a command's is watched while it runs). */
static int side_check_memory(const train_ctx *t) {
    const harvest *h = t->side.h;
    for (int i = 0; i < harvest_count(h) && t->o.side_mem > 0; i++) {
        const harvest_task *k = harvest_task_at(h, i);
        if (strcmp(k->vt->kind, "command") && k->mem_bytes > t->o.side_mem)
            return pt_seterr("side task %s declares %.1f MB, over --side-mem %.1f MB", k->name,
                             k->mem_bytes / 1e6, t->o.side_mem / 1e6);
    }
    return 0;
}

int train_side_setup(train_ctx *t) {
    train_opts *o = &t->o;
    train_side *sd = &t->side;
    if (!side_any(o)) return side_check_opts(o);
    if (side_check_opts(o) < 0) return -1;
    int R = o->ro.P ? o->ro.P * o->ro.D : 1;
    int lo = o->world ? o->world->rank : 0, hi = o->world ? lo + 1 : R;
    harvest_create(&sd->h);
    if (side_make_tasks(t, R) < 0 || side_check_memory(t) < 0 || harvest_start(sd->h, R, lo, hi) < 0)
        return -1;
    if (o->ro.P) {
        o->ro.on_wait = harvest_on_wait;
        o->ro.wait_user = sd->h;
    }
    return 0;
}

/* ---- the HARVEST hook ------------------------------------------------------------------------ */

/* A task's note: on the root an event and a line; elsewhere (MPI) a line on stderr. */
static void side_note(train_ctx *t, long step, const harvest_note *n) {
    const harvest_task *k = harvest_task_at(t->side.h, n->task);
    if (!t->root) {
        fprintf(stderr, "rank %d: side task: %s\n", t->o.world ? t->o.world->rank : 0, n->text);
        return;
    }
    printf("side task: %s\n", n->text);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "message", n->text);
    cJSON_AddStringToObject(o, "task", k->name);
    cJSON_AddStringToObject(o, "what", n->what);
    cJSON_AddNumberToObject(o, "rank", k->rank);
    train_report_event(t, "side_task", step, o);
}

static void side_notes(train_ctx *t, long step) {
    harvest_note n;
    while (harvest_next_note(t->side.h, &n)) side_note(t, step, &n);
}

int train_hook_side(train_ctx *t, long step, const train_step_stats *st, void *user) {
    train_side *sd = &t->side;
    run_job *job = train_engine_job(t->e);
    const timeline *tl = job && t->root ? run_job_timeline(job) : NULL;
    harvest_stats hs;
    if (harvest_after_step(sd->h, tl, t->o.world, &hs) < 0) return pt_adderr("step %ld: side work: ", step);
    double bubble = st->bubble > 0 ? st->bubble * t->o.ro.P * t->o.ro.D * st->iter_time : 0;
    sd->bubble_s += bubble;
    sd->wait_idle_s += hs.idle_s;
    sd->side_s += hs.side_s;
    sd->side_cpu_s += hs.side_cpu_s;
    sd->overrun_s += hs.overrun_s;
    sd->sync_s += hs.sync_s;
    sd->step_s += st->step_time;
    sd->steps += hs.steps;
    sd->offered += hs.offered;
    sd->used += hs.used;
    sd->n_steps++;
    sd->rested += hs.rested;
    sd->slow = hs.slow;
    if (job) {
        train_metric(t, "bubble_s", bubble);
        train_metric(t, "side_s", hs.side_s);
        train_metric(t, "side_cpu_s", hs.side_cpu_s);
        train_metric(t, "side_overrun_s", hs.overrun_s);
        train_metric(t, "side_steps", hs.steps);
        train_metric(t, "side_sync_s", hs.sync_s);
        train_metric(t, "wait_idle_s", hs.idle_s);
    }
    side_notes(t, step);
    return 0;
}

/* ---- the EVALUATE hook ------------------------------------------------------------------------ */

/* The weights as they are now into the evaluation's snapshot: one process copies its model; the
 * job gathers each chunk to the root (collective under MPI). */
static int side_snapshot(train_ctx *t, gpt_model *snap) {
    run_job *job = train_engine_job(t->e);
    if (!job) {
        memcpy(snap->params, t->m.params, t->m.n_held * sizeof(float));
        return 0;
    }
    return run_job_gather(job, snap);
}

/* The rest of the pass on this thread (no bubbles left for it), timed as boundary work. */
static int side_eval_finish(train_ctx *t, double *sync) {
    double t0 = pt_now();
    if (harvest_eval_finish(t->side.ev) < 0) return pt_adderr("--eval-data: ");
    *sync += pt_now() - t0;
    return 0;
}

/* A complete pass's loss (root): into this step's metrics line, or (when a newer one goes
 * there) into an event; printed either way. */
static void side_eval_report(train_ctx *t, long step, int to_line) {
    long k;
    double loss;
    if (!harvest_eval_take(t->side.ev, &k, &loss)) return;
    char msg[240];
    snprintf(msg, sizeof msg, "eval: the weights of step %ld: eval_loss %.6f (%d batches of %d x %d "
             "from %s)", k, loss, harvest_eval_batches(t->side.ev), t->o.batch, t->o.seq, t->o.eval_data);
    printf("%s\n", msg);
    fflush(stdout);
    if (to_line) {
        train_metric(t, "eval_loss", loss);
        train_metric(t, "eval_step", (double)k);
        return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "message", msg);
    cJSON_AddStringToObject(o, "what", "eval");
    cJSON_AddNumberToObject(o, "eval_loss", loss);
    cJSON_AddNumberToObject(o, "eval_step", (double)k);
    train_report_event(t, "side_task", step, o);
}

/* Whether the evaluation still runs in the bubbles (the root's; MPI: told to every rank, which
 * must all take the snapshot or none). -1 when the world's communication fails. */
static int side_eval_running(train_ctx *t) {
    double busy = t->root && harvest_eval_busy(t->side.ev);
    if (t->o.world && t->o.world->size > 1 && comm_allreduce_f64(t->o.world, &busy, 1) < 0) return -1;
    return busy > 0;
}

/* A due evaluation skipped, as an event: the last one has not finished in the bubbles. */
static void side_eval_skipped(train_ctx *t, long step) {
    if (!t->root) return;
    char msg[200];
    snprintf(msg, sizeof msg, "evaluation of step %ld skipped: the last one is still running in the "
             "bubbles (evaluate less often, or fewer --eval-batches)", step);
    printf("side task: %s\n", msg);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "message", msg);
    cJSON_AddStringToObject(o, "what", "skipped");
    train_report_event(t, "side_task", step, o);
}

/* Due at every K-th step (without --eval-every: the last). A due evaluation while the last one
 * still runs in the bubbles is skipped (the training never waits for it), except at the last
 * step, where what is left is finished on this thread; one process has no bubbles, so its
 * passes are finished at once. One eval_loss per metrics line: when two complete at the last
 * step, the older one goes to an event. */
int train_hook_eval(train_ctx *t, long step, const train_step_stats *st, void *user) {
    harvest_eval *ev = t->side.ev;
    int last = step == t->o.steps, bubbles = train_engine_job(t->e) != NULL;
    int due = step % harvest_eval_every(ev) == 0 || (last && !t->o.eval_every);
    double sync = 0;
    int rc = 0;
    if (due && !last && bubbles) {
        int running = side_eval_running(t);
        if (running < 0) return pt_adderr("step %ld: evaluation: ", step);
        if (running) {
            side_eval_skipped(t, step);
            due = 0;
        }
    }
    if (t->root && last && harvest_eval_busy(ev)) rc = side_eval_finish(t, &sync);
    if (t->root && rc == 0) side_eval_report(t, step, !(due && (last || !bubbles)));
    if (rc == 0 && due) {
        if (side_snapshot(t, harvest_eval_weights(ev)) < 0) rc = pt_adderr("step %ld: evaluation: ", step);
        else if (t->root) {                /* only the root holds the snapshot (MPI) */
            harvest_eval_begin(ev, step);
            if ((!bubbles || last) && (rc = side_eval_finish(t, &sync)) == 0) side_eval_report(t, step, 1);
        }
    }
    if (sync > 0) train_metric(t, "eval_sync_s", sync);
    t->side.eval_sync_s += sync;
    return rc;
}

/* ---- start, end, free ------------------------------------------------------------------------- */

void train_side_start(train_ctx *t) {
    const run_plan *pl = t->side.h ? train_engine_plan(t->e) : NULL;
    if (pl) harvest_bind(t->side.h, pl->s, pl->o.P);
}

/* One line per task: its steps and time, against running it alone. */
static void side_task_line(const train_ctx *t, int i, double wall) {
    const harvest_task *k = harvest_task_at(t->side.h, i);
    long n;
    double secs, med;
    harvest_task_totals(t->side.h, i, &n, &secs, &med);
    if (k->rank < 0 || (t->o.world && k->rank != t->o.world->rank)) return;
    char where[48];
    if (harvest_task_roams(t->side.h, i)) snprintf(where, sizeof where, "on any rank");
    else snprintf(where, sizeof where, "on rank %d", k->rank);
    double cpu = harvest_task_cpu(t->side.h, i);
    if (!strcmp(k->vt->kind, "command"))
        printf("  %s %s: %.3f s of CPU in %.3f s of slots (%.1f%%), %.1f%% of a core over the run's "
               "%.2f s (alone: 100%%)\n", k->name, where, cpu, secs, secs > 0 ? 100 * cpu / secs : 0,
               wall > 0 ? 100 * cpu / wall : 0, wall);
    else if (n > 0)   /* alone, back to back: a step per mean step time */
        printf("  %s %s: %ld steps, %.3f s: %.1f steps/s over the run against %.1f alone "
               "(mean step %.1f us): %.1f%%\n", k->name, where, n, secs, wall > 0 ? n / wall : 0,
               n / secs, secs / n * 1e6, wall > 0 ? 100 * secs / wall : 0);
    else printf("  %s %s: %ld steps, %.3f s\n", k->name, where, n, secs);
}

/* Where the waits' idle time that side work did not use went, as "reason 12.3%, ...". */
static void side_lost_line(const harvest_stats *tot, char *buf, size_t n) {
    size_t at = 0;
    buf[0] = 0;
    for (int k = 0; k < HARVEST_LOST_N && tot->idle_s > 0; k++) {
        double f = tot->lost_s[k] / tot->idle_s;
        if (f >= 0.0005 && at < n)
            at += (size_t)snprintf(buf + at, n - at, "%s%s %.1f%%", at ? ", " : "", harvest_lost_name(k), 100 * f);
    }
}

void train_side_end(train_ctx *t) {
    train_side *sd = &t->side;
    if (!sd->h || !t->root || sd->n_steps == 0) return;
    harvest_stats tot;
    harvest_run_totals(sd->h, &tot);
    /* The fraction harvested: the CPU side work received over the idle of the waits offered to
     * it (wait_idle_s; bubble_s leaves out the reductions' and the STEP's waits, which side work
     * uses too). One definition everywhere: here, the summary event, the report, bench_harvest. */
    double wall = pt_now() - t->t_start, frac = sd->wait_idle_s > 0 ? sd->side_cpu_s / sd->wait_idle_s : 0;
    double delay = sd->step_s > 0 ? (sd->overrun_s + sd->sync_s + sd->eval_sync_s) / sd->step_s : 0;
    char lost[400];
    side_lost_line(&tot, lost, sizeof lost);
    if (train_engine_job(t->e))
        printf("side work: %.3f s of CPU in the ranks' %.3f s of waits offered to it (%.1f%% harvested; "
               "unused by its %.3f s of steps, %.3f s inside the waits: %s) in %ld steps (%ld of %ld waits "
               "used; bubble_s %.3f s); overrun %.4f s, at step boundaries %.4f s: the main job waited "
               "about %.2f%% of its %.2f s of steps for side work\n", sd->side_cpu_s, sd->wait_idle_s,
               100 * frac, sd->side_s, tot.used_s, lost[0] ? lost : "none", sd->steps, sd->used, sd->offered,
               sd->bubble_s, sd->overrun_s, sd->sync_s + sd->eval_sync_s, 100 * delay,
               sd->step_s);
    if (train_engine_job(t->e) && sd->rested > 0) {
        char cost[64] = "not measured yet";
        if (sd->slow == sd->slow) snprintf(cost, sizeof cost, "%+.1f%%", 100 * sd->slow);
        printf("  the main job first: %ld of %ld steps ran without side work (the baseline, or backed off; "
               "side work's cost to a step's compute: %s)\n", sd->rested, sd->n_steps, cost);
    }
    for (int i = 0; i < harvest_count(sd->h) && train_engine_job(t->e); i++) side_task_line(t, i, wall);
    cJSON *o = cJSON_CreateObject();
    char msg[240];
    snprintf(msg, sizeof msg, "side work: %.1f%% of the ranks' %.3f s of waits offered to it harvested "
             "(CPU received), main job waited %.2f%%", 100 * frac, sd->wait_idle_s, 100 * delay);
    cJSON_AddStringToObject(o, "message", msg);
    cJSON_AddStringToObject(o, "what", "summary");
    cJSON_AddNumberToObject(o, "bubble_s", sd->bubble_s);
    cJSON_AddNumberToObject(o, "side_s", sd->side_s);
    cJSON_AddNumberToObject(o, "side_cpu_s", sd->side_cpu_s);
    cJSON_AddNumberToObject(o, "side_overrun_s", sd->overrun_s);
    cJSON_AddNumberToObject(o, "side_sync_s", sd->sync_s + sd->eval_sync_s);
    cJSON_AddNumberToObject(o, "wait_idle_s", sd->wait_idle_s);
    cJSON_AddNumberToObject(o, "harvested_fraction", frac);
    train_report_event(t, "side_task", t->o.steps, o);
}

void train_side_free(train_ctx *t) {
    harvest_free(t->side.h);
    harvest_eval_free(t->side.ev);
    t->side.h = NULL;
    t->side.ev = NULL;
}
