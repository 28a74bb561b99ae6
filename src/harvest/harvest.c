/* The harvester: which tasks run in a rank's wait and for how long (the policy), each task's
 * step times, failures and notes, and the per-step bookkeeping on the main thread. The
 * measured waits themselves are harvest_predict.c's; the tasks are task_*.c.
 *
 * Policy (harvest_policy), in one wait of rank r that began at w->since: take the rank's
 * active tasks in turn (round-robin over waits; a roaming task only when no other rank holds
 * it); a task's next step runs when its need (a quantile of its kind's recent durations; a
 * process task: HV_MIN_SLOT_S) fits: under the conditional rule, when enough of this wait's
 * past instances that lasted as long as this one so far lasted that much longer; under the
 * fixed rule, when it fits before the end predicted at the wait's start. After every step
 * arrived() is asked, and a yes returns the rank to its action at once. A task with no
 * measured step yet is not run in a bubble: its first step of each kind runs at a step
 * boundary (harvest_after_step), measured. Each wait's decisions are kept (h->offers) for the
 * accounting of what went unused. */
#include "harvest/harvest_int.h"
#include "util/pt.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

harvest_policy harvest_policy_default(void) {
    return (harvest_policy){ .conditional = 1, .wait_q = 0.25, .survive = HV_SURVIVE,
                             .overrun_target = HV_OVERRUN_TARGET, .step_q = HV_STEP_Q, .roam = true,
                             .backoff = true };
}

harvest_policy harvest_policy_fixed(void) {
    return (harvest_policy){ .conditional = 0, .wait_q = 0.25, .survive = HV_SURVIVE, .step_q = 0.5,
                             .roam = false };
}

void harvest_create(harvest **out) {
    harvest *h = pt_calloc(1, sizeof *h);
    h->pol = harvest_policy_default();
    h->survive = h->pol.survive;
    h->ema_over = -1;
    h->bo_duty = 1;
    h->bo_slow = NAN;
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
    h->tk[h->n].roams = t->rank < 0;
    atomic_init(&h->tk[h->n].held, 0);
    for (int k = 0; k < HARVEST_KINDS; k++) h->tk[h->n].med[k] = h->tk[h->n].need[k] = -1;
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

/* Whether task i is on rank r's list: its rank's, or for a roaming task every rank of its
 * process (its home rank's process: MPI processes run one rank each, so there it is home only). */
static int hv_listed(const harvest *h, int i, int r) {
    const hv_task *k = &h->tk[i];
    return r == k->t->rank || (k->roams && k->local && r >= h->lo && r < h->hi);
}

/* Ranks: a task without one gets the next world rank in turn (its home: the rank it is reported
 * on, the only one when it does not roam); each rank's list of tasks, in task order. */
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
    }
    for (int r = 0; r < h->R; r++) {
        h->rank_tasks[r] = pt_calloc((size_t)h->n + 1, sizeof(int));
        for (int i = 0; i < h->n; i++)
            if (hv_listed(h, i, r)) h->rank_tasks[r][h->n_rank_tasks[r]++] = i;
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

static int hv_cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Keeps a step's duration (its kind's window of the last HV_WINDOW), the median and the need
 * (the step_q quantile, the lower of the two around it). */
static void hv_add_duration(hv_task *k, int kind, double d, double step_q) {
    double *v = k->dur[kind], tmp[HV_WINDOW];
    v[k->at[kind]] = d;
    k->at[kind] = (k->at[kind] + 1) % HV_WINDOW;
    if (k->n_dur[kind] < HV_WINDOW) k->n_dur[kind]++;
    int n = k->n_dur[kind];
    memcpy(tmp, v, sizeof(double) * (size_t)n);
    qsort(tmp, (size_t)n, sizeof *tmp, hv_cmp_d);
    k->med[kind] = n % 2 ? tmp[n / 2] : 0.5 * (tmp[n / 2 - 1] + tmp[n / 2]);
    k->need[kind] = tmp[(int)(step_q * (n - 1))];
}

/* A step failed (on whatever thread): the task is off, its error kept for the note. */
static void hv_fail(hv_task *k) {
    k->state = HV_FAILED;
    snprintf(k->err, sizeof k->err, "%s", pt_err());
}

static double hv_thread_cpu(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* One step of task k, timed, with the CPU it received (*cpu: the task's own count through
 * slot.cpu_s, else this thread's CPU clock around it); its duration kept when it did work.
 * Returns the step's result. */
static int hv_run_step(hv_task *k, harvest_slot *slot, double step_q, double *t0, double *t1, double *cpu) {
    int kind = hv_kind(k);
    double own = -1, c0 = k->t->vt->until_deadline ? 0 : hv_thread_cpu();
    slot->cpu_s = &own;
    *t0 = pt_now();
    int rc = k->t->vt->step(k->t, slot);
    *t1 = pt_now();
    *cpu = own >= 0 ? own : k->t->vt->until_deadline ? 0 : hv_thread_cpu() - c0;
    if (rc < 0) hv_fail(k);
    if (rc == HARVEST_MORE) {
        if (!k->t->vt->until_deadline) hv_add_duration(k, kind, *t1 - *t0, step_q);
        k->steps++;
        k->secs += *t1 - *t0;
        k->cpu += *cpu;
    }
    return rc;
}

/* ---- the wait hook ---------------------------------------------------------------------------- */

typedef struct { run_wait *w; int failed; double woke; } hv_arrival;

static int hv_arrived(void *arg) {
    hv_arrival *a = arg;
    int r = a->w->arrived(a->w);
    if (r < 0) a->failed = 1;
    return r;
}

static int hv_block(void *arg, double deadline) {
    hv_arrival *a = arg;
    int r = a->w->block ? a->w->block(a->w, deadline) : a->w->arrived(a->w);
    if (r < 0) a->failed = 1;
    if (r > 0) a->woke = pt_now();
    return r;
}

/* Of the wait's past instances (samp: ascending, NaN past the last), the fraction of those that
 * lasted at least e that lasted e + d too, with Laplace's rule of succession (one more that did
 * and one that did not: an estimate from one or two instances stays doubtful, and from none is
 * 1/2). */
static double hv_survive(const double *samp, double e, double d) {
    int at_e = 0, at_ed = 0;
    for (int k = 0; k < HV_HISTORY && !isnan(samp[k]); k++) {
        at_e += samp[k] >= e;
        at_ed += samp[k] >= e + d;
    }
    return (at_ed + 1.0) / (at_e + 2.0);
}

/* One wait as the policy sees it. */
typedef struct {
    double since, end;          /* when it began; the fixed rule's predicted end */
    const double *samp;         /* its past instances (conditional rule) */
} hv_wait;

/* Whether a step needing `need` seconds may start now in wait v. */
static int hv_fits(const harvest *h, const hv_wait *v, double need) {
    double now = pt_now();
    if (!h->pol.conditional) return need <= v->end - now;
    double p = h->pol.overrun_target > 0 ? h->survive : h->pol.survive;
    return hv_survive(v->samp, now - v->since, need) >= p;
}

/* The next task of rank r (in turn) whose next step fits, held for this rank (release it after
 * the step), or -1; then *why says why not (HV_WHY_FIT with *need_out the shortest need that
 * did not fit; HV_WHY_IDLE: the tasks had nothing to do; HV_WHY_NOTASK: none active and free
 * for this rank). idle[j]: the rank's j-th task had nothing to do in this wait. A roaming task
 * held by another rank is passed over; one away from home only when roaming. */
static int hv_pick(harvest *h, int r, const hv_wait *v, const char *idle, int *why, double *need_out) {
    int n = h->n_rank_tasks[r];
    *need_out = 0;
    *why = HV_WHY_NOTASK;
    for (int j = 0; j < n; j++) {
        int at = (h->rr[r] + j) % n, i = h->rank_tasks[r][at];
        hv_task *k = &h->tk[i];
        if (r != k->t->rank && !h->pol.roam) continue;
        if (atomic_exchange(&k->held, 1)) {
            if (*why == HV_WHY_NOTASK) *why = HV_WHY_HELD;
            continue;
        }
        double need = k->state != HV_ACTIVE ? -1 : k->t->vt->until_deadline ? HV_MIN_SLOT_S : k->need[hv_kind(k)];
        if (k->state == HV_ACTIVE && (*why == HV_WHY_NOTASK || *why == HV_WHY_HELD)) *why = HV_WHY_IDLE;
        if (need >= 0 && !idle[at] && hv_fits(h, v, need)) {
            h->rr[r] = (at + 1) % n;
            return at;
        }
        if (need > 0 && !idle[at] && (*need_out == 0 || need < *need_out)) *need_out = need;
        atomic_store(&k->held, 0);                /* finished, failed, not measured, or too long */
    }
    if (*need_out > 0) *why = HV_WHY_FIT;
    return -1;
}

/* A process task's slot ends: fixed rule, HV_STOP_MARGIN_S before the predicted end;
 * conditional, at the arrival (the rank sleeps until it, and stopping the program then costs
 * the rank a signal: nothing to gain by stopping earlier), bounded by HV_SLOT_MAX_S. */
static double hv_deadline(const harvest *h, const hv_wait *v) {
    if (!h->pol.conditional) return v->end - HV_STOP_MARGIN_S;
    return pt_now() + HV_SLOT_MAX_S;
}

void harvest_pause(harvest *h, int paused) { h->paused = paused; }

int harvest_resting(const harvest *h) { return h->resting; }

void harvest_set_log(harvest *h, FILE *f) { h->log = f; }

/* A policy without backoff never rests, whatever the one before decided for this step. */
void harvest_set_policy(harvest *h, const harvest_policy *p) {
    h->pol = *p;
    if (!p->backoff) h->resting = 0;
}

int harvest_on_wait(void *user, run_wait *w) {
    harvest *h = user;
    int r = w->world_rank;
    if (!h->s || r < h->lo || r >= h->hi || w->action >= h->L) return 0;
    size_t wj = (size_t)r * h->L + (size_t)w->action;
    hv_offer *o = &h->offers[wj];
    hv_wait v = { w->since, w->since + h->pred[wj], h->samp + wj * HV_HISTORY };
    *o = (hv_offer){ .since = w->since, .stop = w->since, .pred = h->pred[wj], .why = HV_WHY_NOTASK };
    if (h->resting) o->why = HV_WHY_REST;
    if (h->paused || h->resting || h->n_rank_tasks[r] == 0) return 0;
    char idle[HV_MAX_RANK_TASKS] = { 0 };
    hv_arrival arr = { w, 0, 0 };
    h->offered[r]++;
    int at, why;
    double held_until = pt_now() + HV_HELD_MAX_S;
    while ((at = hv_pick(h, r, &v, idle, &why, &o->need)) >= 0 || why == HV_WHY_HELD) {
        if (at < 0) {                     /* only a task another rank is giving back */
            int got = pt_now() < held_until ? hv_block(&arr, pt_now() + HV_HELD_POLL_S) : 1;
            arr.woke = 0;
            if (got < 0) return -1;
            if (got) { why = HV_WHY_NOTASK; break; }
            continue;
        }
        int i = h->rank_tasks[r][at];
        harvest_slot slot = { .deadline = hv_deadline(h, &v), .arrived = hv_arrived, .block = hv_block,
                              .arg = &arr };
        double t0, t1, cpu;
        arr.woke = 0;
        int rc = hv_run_step(&h->tk[i], &slot, h->pol.step_q, &t0, &t1, &cpu);
        atomic_store(&h->tk[i].held, 0);
        if (arr.failed) return -1;
        if (rc == HARVEST_MORE) {
            w->record(w, i, t0, t1, cpu, arr.woke);
            o->steps++;
        } else idle[at] = 1;
        int got = hv_arrived(&arr);
        if (got < 0) return -1;
        if (got) break;
    }
    o->why = at >= 0 ? HV_WHY_ARRIVED : why;
    o->stop = pt_now();
    h->used[r] += o->steps > 0;
    return 0;
}

/* ---- between steps ---------------------------------------------------------------------------- */

/* Main thread, at a boundary: an iterative task whose next kind of step has no measured length
 * yet runs steps here until it has (at most HV_PROBE_STEPS of them, HV_PROBE_S of time). */
static void hv_probe(harvest *h, hv_task *k) {
    harvest_slot slot = { .deadline = pt_now() + 1.0 };
    double t0, t1, cpu, start = pt_now();
    for (int n = 0; n < HV_PROBE_STEPS && k->state == HV_ACTIVE && !k->t->vt->until_deadline &&
                    k->need[hv_kind(k)] < 0 && pt_now() - start < HV_PROBE_S; n++) {
        if (hv_run_step(k, &slot, h->pol.step_q, &t0, &t1, &cpu) != HARVEST_MORE) break;
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

static void hv_stats_add(harvest_stats *sum, const harvest_stats *x) {
    sum->side_s += x->side_s;
    sum->side_cpu_s += x->side_cpu_s;
    sum->overrun_s += x->overrun_s;
    sum->sync_s += x->sync_s;
    sum->steps += x->steps;
    sum->offered += x->offered;
    sum->used += x->used;
    sum->idle_s += x->idle_s;
    sum->used_s += x->used_s;
    for (int k = 0; k < HARVEST_LOST_N; k++) sum->lost_s[k] += x->lost_s[k];
}

int harvest_after_step(harvest *h, const timeline *tl, comm *world, harvest_stats *out) {
    memset(out, 0, sizeof *out);
    h->sync_s = 0;
    if (h->s) {
        out->rested = h->resting;
        if (tl) {
            double iter_s = hv_measure(h, tl, out);
            if (!h->paused && !h->resting) hv_control(h, iter_s);
            hv_backoff_step(h, tl, out->steps > 0);
            h->resting = hv_backoff_rest(h);
        }
        out->slow = h->bo_slow;
        hv_offers_reset(h);
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
    hv_stats_add(&h->total, out);
    return 0;
}

void harvest_run_totals(const harvest *h, harvest_stats *out) { *out = h->total; }

int harvest_task_roams(const harvest *h, int i) {
    return h->tk[i].roams && h->tk[i].local && h->hi - h->lo > 1 && h->pol.roam;
}

void harvest_task_totals(const harvest *h, int i, long *steps, double *secs, double *median) {
    *steps = h->tk[i].steps;
    *secs = h->tk[i].secs;
    *median = h->tk[i].med[0];
}

double harvest_task_cpu(const harvest *h, int i) { return h->tk[i].cpu; }

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
