/* The harvester: which tasks run in a rank's wait and for how long (the policy), each task's
 * step times, failures and notes, and the per-step bookkeeping on the main thread. The
 * predictions themselves are harvest_predict.c's; the tasks are task_*.c.
 *
 * Policy, in one wait of rank r (from w->since, predicted idle `pred`, so it ends at
 * since + pred): take the rank's active tasks in turn (round-robin over waits); an iterative
 * task runs its next step only when that kind of step's median duration fits in what is left,
 * a process task only when at least HV_MIN_SLOT_S is left (it is stopped HV_STOP_MARGIN_S
 * before the end); after every step arrived() is asked, and a yes returns the rank to its
 * action at once. A task with no measured step yet is not run in a bubble: its first step of
 * each kind runs at a step boundary (harvest_after_step), measured. */
#include "harvest/harvest_int.h"
#include "util/pt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void harvest_create(harvest **out) {
    harvest *h = pt_calloc(1, sizeof *h);
    *out = h;
}

int harvest_add(harvest *h, harvest_task *t) {
    if (h->n == h->cap) {
        h->cap = h->cap ? 2 * h->cap : 8;
        hv_task *v = pt_calloc((size_t)h->cap, sizeof *v);
        if (h->n) memcpy(v, h->tk, sizeof *v * (size_t)h->n);
        free(h->tk);
        h->tk = v;
    }
    h->tk[h->n].t = t;
    for (int k = 0; k < HARVEST_KINDS; k++) h->tk[h->n].med[k] = -1;
    return h->n++;
}

int harvest_count(const harvest *h) { return h ? h->n : 0; }

const harvest_task *harvest_task_at(const harvest *h, int i) { return h->tk[i].t; }

void hv_note(harvest *h, int task, const char *what, const char *fmt, ...) {
    if (h->n_notes == h->cap_notes) {
        h->cap_notes = h->cap_notes ? 2 * h->cap_notes : 16;
        harvest_note *v = pt_calloc((size_t)h->cap_notes, sizeof *v);
        if (h->n_notes) memcpy(v, h->notes, sizeof *v * (size_t)h->n_notes);
        free(h->notes);
        h->notes = v;
    }
    harvest_note *n = &h->notes[h->n_notes++];
    n->task = task;
    snprintf(n->what, sizeof n->what, "%s", what);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(n->text, sizeof n->text, fmt, ap);
    va_end(ap);
}

int harvest_next_note(harvest *h, harvest_note *out) {
    if (!h || h->note_at >= h->n_notes) {
        if (h) h->n_notes = h->note_at = 0;
        return 0;
    }
    *out = h->notes[h->note_at++];
    return 1;
}

/* Ranks: a task without one gets the next world rank in turn; each rank's list of tasks. */
static void hv_assign(harvest *h) {
    int next = 0;
    h->rank_tasks = pt_calloc((size_t)h->R, sizeof *h->rank_tasks);
    h->n_rank_tasks = pt_calloc((size_t)h->R, sizeof *h->n_rank_tasks);
    h->rr = pt_calloc((size_t)h->R, sizeof *h->rr);
    h->offered = pt_calloc((size_t)h->R, sizeof *h->offered);
    h->used = pt_calloc((size_t)h->R, sizeof *h->used);
    for (int i = 0; i < h->n; i++) {
        harvest_task *t = h->tk[i].t;
        if (t->rank < 0) t->rank = next++ % h->R;
        h->tk[i].local = t->rank >= h->lo && t->rank < h->hi;
        h->n_rank_tasks[t->rank]++;
    }
    for (int r = 0; r < h->R; r++) {
        h->rank_tasks[r] = pt_calloc((size_t)h->n_rank_tasks[r] + 1, sizeof(int));
        h->n_rank_tasks[r] = 0;
    }
    for (int i = 0; i < h->n; i++) {
        int r = h->tk[i].t->rank;
        h->rank_tasks[r][h->n_rank_tasks[r]++] = i;
    }
}

int harvest_start(harvest *h, int R, int lo, int hi) {
    h->R = R;
    h->lo = lo;
    h->hi = hi;
    for (int i = 0; i < h->n; i++)
        if (h->tk[i].t->rank >= R)
            return pt_seterr("side task %s: rank %d is not in the job (its ranks are 0..%d)",
                             h->tk[i].t->name, h->tk[i].t->rank, R - 1);
    hv_assign(h);
    for (int r = 0; r < R; r++)
        if (h->n_rank_tasks[r] > HV_MAX_RANK_TASKS)
            return pt_seterr("rank %d has %d side tasks; at most %d per rank", r, h->n_rank_tasks[r],
                             HV_MAX_RANK_TASKS);
    for (int i = 0; i < h->n; i++) {
        hv_task *k = &h->tk[i];
        if (!k->local) { k->state = HV_ELSEWHERE; continue; }
        if (k->t->vt->init && k->t->vt->init(k->t) < 0) return -1;
        k->inited = 1;
        hv_note(h, i, "start", "%s on rank %d, declares %.1f MB", k->t->name, k->t->rank,
                k->t->mem_bytes / 1e6);
    }
    h->started = 1;
    return 0;
}

/* ---- step times ----------------------------------------------------------------------------- */

static int hv_kind(const hv_task *k) {
    int kind = k->t->vt->next_kind ? k->t->vt->next_kind(k->t) : 0;
    return kind >= 0 && kind < HARVEST_KINDS ? kind : 0;
}

/* Keeps a step's duration (its kind's window of the last HV_WINDOW) and the median. */
static void hv_add_duration(hv_task *k, int kind, double d) {
    double *v = k->dur[kind], tmp[HV_WINDOW];
    v[k->at[kind]] = d;
    k->at[kind] = (k->at[kind] + 1) % HV_WINDOW;
    if (k->n_dur[kind] < HV_WINDOW) k->n_dur[kind]++;
    memcpy(tmp, v, sizeof(double) * (size_t)k->n_dur[kind]);
    k->med[kind] = pt_median(tmp, k->n_dur[kind]);
}

/* A step failed (on whatever thread): the task is off, its error kept for the note. */
static void hv_fail(hv_task *k) {
    k->state = HV_FAILED;
    snprintf(k->err, sizeof k->err, "%s", pt_err());
}

/* One step of task k, timed; its duration kept when it did work. Returns the step's result. */
static int hv_run_step(hv_task *k, const harvest_slot *slot, double *t0, double *t1) {
    int kind = hv_kind(k);
    *t0 = pt_now();
    int rc = k->t->vt->step(k->t, slot);
    *t1 = pt_now();
    if (rc < 0) hv_fail(k);
    if (rc == HARVEST_MORE) {
        if (!k->t->vt->until_deadline) hv_add_duration(k, kind, *t1 - *t0);
        k->steps++;
        k->secs += *t1 - *t0;
    }
    return rc;
}

/* ---- the wait hook ---------------------------------------------------------------------------- */

typedef struct { run_wait *w; int failed; } hv_arrival;

static int hv_arrived(void *arg) {
    hv_arrival *a = arg;
    int r = a->w->arrived(a->w);
    if (r < 0) a->failed = 1;
    return r;
}

/* The next task of rank r (in turn) whose next step fits before `end`, or -1. idle[j]: the rank's
 * j-th task had nothing to do in this wait. */
static int hv_pick(harvest *h, int r, double end, const char *idle) {
    int n = h->n_rank_tasks[r];
    double left = end - pt_now();
    for (int j = 0; j < n; j++) {
        int at = (h->rr[r] + j) % n, i = h->rank_tasks[r][at];
        hv_task *k = &h->tk[i];
        if (k->state != HV_ACTIVE || idle[at]) continue;
        double need = k->t->vt->until_deadline ? HV_MIN_SLOT_S : k->med[hv_kind(k)];
        if (need < 0 || need > left) continue;   /* not measured yet, or too long */
        h->rr[r] = (at + 1) % n;
        return at;
    }
    return -1;
}

void harvest_pause(harvest *h, int paused) { h->paused = paused; }

int harvest_on_wait(void *user, run_wait *w) {
    harvest *h = user;
    int r = w->world_rank;
    if (!h->s || h->paused || r < h->lo || r >= h->hi || w->action >= h->L || h->n_rank_tasks[r] == 0) return 0;
    double end = w->since + h->pred[r * h->L + w->action];
    char idle[HV_MAX_RANK_TASKS] = { 0 };
    hv_arrival arr = { w, 0 };
    harvest_slot slot = { end - HV_STOP_MARGIN_S, hv_arrived, &arr };
    h->offered[r]++;
    int ran = 0, at;
    while ((at = hv_pick(h, r, end, idle)) >= 0) {
        int i = h->rank_tasks[r][at];
        double t0, t1;
        int rc = hv_run_step(&h->tk[i], &slot, &t0, &t1);
        if (arr.failed) return -1;
        if (rc == HARVEST_MORE) {
            w->record(w, i, t0, t1);
            ran = 1;
        } else idle[at] = 1;
        int got = hv_arrived(&arr);
        if (got < 0) return -1;
        if (got) break;
    }
    h->used[r] += ran;
    return 0;
}

/* ---- between steps ---------------------------------------------------------------------------- */

/* Main thread, at a boundary: an iterative task whose next kind of step has no measured length
 * yet runs steps here until it has (at most HV_PROBE_STEPS of them, HV_PROBE_S of time). */
static void hv_probe(harvest *h, hv_task *k) {
    harvest_slot slot = { pt_now() + 1.0, NULL, NULL };
    double t0, t1, start = pt_now();
    for (int n = 0; n < HV_PROBE_STEPS && k->state == HV_ACTIVE && !k->t->vt->until_deadline &&
                    k->med[hv_kind(k)] < 0 && pt_now() - start < HV_PROBE_S; n++) {
        if (hv_run_step(k, &slot, &t0, &t1) != HARVEST_MORE) break;
        h->sync_s += t1 - t0;
    }
}

/* Main thread: failures and exits to notes; done(); the first step of each kind measured here. */
static void hv_upkeep(harvest *h) {
    for (int i = 0; i < h->n; i++) {
        hv_task *k = &h->tk[i];
        if (k->state == HV_FAILED && !k->noted) {
            hv_note(h, i, "failed", "%s failed and is off (training goes on): %s", k->t->name, k->err);
            k->noted = 1;
        }
        if (k->state != HV_ACTIVE) continue;
        int d = k->t->vt->done ? k->t->vt->done(k->t) : 0;
        if (d < 0) {
            hv_fail(k);
            hv_note(h, i, "failed", "%s failed and is off (training goes on): %s", k->t->name, k->err);
            k->noted = 1;
        } else if (d > 0) {
            k->state = HV_FINISHED;
            hv_note(h, i, "finished", "%s finished%s%s%s: %ld steps, %.3f s in bubbles", k->t->name,
                    k->t->report[0] ? " (" : "", k->t->report, k->t->report[0] ? ")" : "", k->steps, k->secs);
        } else hv_probe(h, k);
    }
}

int harvest_after_step(harvest *h, const timeline *tl, const sim_costs *costs, comm *world,
                       harvest_stats *out) {
    memset(out, 0, sizeof *out);
    h->sync_s = 0;
    if (h->s) {
        if (tl) hv_measure(h, tl, out);
        if (tl && costs) hv_simulate(h, costs);
        if (hv_predict(h, tl != NULL, world) < 0) return -1;
        for (int r = h->lo; r < h->hi; r++) {
            out->offered += h->offered[r];
            out->used += h->used[r];
            h->offered[r] = h->used[r] = 0;
        }
    }
    hv_upkeep(h);
    out->sync_s = h->sync_s;
    h->n_after++;
    return 0;
}

void harvest_task_totals(const harvest *h, int i, long *steps, double *secs, double *median) {
    *steps = h->tk[i].steps;
    *secs = h->tk[i].secs;
    *median = h->tk[i].med[0];
}

void harvest_free(harvest *h) {
    if (!h) return;
    for (int i = 0; i < h->n; i++)
        if (h->tk[i].t && h->tk[i].t->vt->free) h->tk[i].t->vt->free(h->tk[i].t);
    for (int r = 0; r < h->R && h->rank_tasks; r++) free(h->rank_tasks[r]);
    free(h->rank_tasks); free(h->n_rank_tasks); free(h->rr); free(h->offered); free(h->used);
    free(h->tk);
    free(h->notes);
    hv_predict_free(h);
    free(h);
}
