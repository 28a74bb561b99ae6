/* How long each wait of each rank lasts, and what side work did in the last step. A wait is an
 * action the executor offers (harvest.h): a RECV, a REDUCE_GRAD waiting for other ranks, or a
 * STEP waiting for every rank at the world reduction. Its idle time is from when the rank
 * reached the action to when what it waits for was there: a message's send (the transports
 * hand a message over at its isend, which the merged timeline links to the RECV), the latest
 * post of another rank's reduction, or the latest start of a rank's STEP. Side work does not
 * stretch it: a side step that runs past the arrival counts as overrun, not as idle.
 *
 * What the ranks get after each step (the root's numbers, over world under MPI), per wait
 * (world rank w, action i): the idle it measured in the last HV_HISTORY steps, ascending (the
 * policy's conditional rule reads them: harvest.c), and the fixed rule's prediction, the
 * wait_q quantile of the last HV_FIXED_STEPS of them. Before any step is measured: none (the
 * first step is the warm-up; no side work). The simulator is not asked: its wait for an action
 * is a constant that the quantile of (measured - simulated) added back cancels. */
#include "harvest/harvest_int.h"
#include "util/pt.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

void harvest_bind(harvest *h, const sched *s, int P) {
    hv_predict_free(h);
    h->s = s;
    h->P = P;
    h->L = 1;
    for (int p = 0; p < s->n_ranks; p++)
        if (s->len[p] > h->L) h->L = s->len[p];
    size_t rl = (size_t)h->R * h->L;
    h->pred = pt_calloc(rl * (1 + HV_HISTORY) + 2, sizeof *h->pred);
    h->samp = h->pred + rl;
    h->hist = pt_malloc(rl * HV_HISTORY * sizeof *h->hist);
    h->offers = pt_calloc(rl, sizeof *h->offers);
    for (size_t k = 0; k < rl * HV_HISTORY; k++) h->hist[k] = h->samp[k] = NAN;
    h->n_hist = 0;
}

void hv_predict_free(harvest *h) {
    free(h->pred);
    free(h->hist);
    free(h->offers);
    h->pred = h->samp = h->hist = NULL;
    h->offers = NULL;
    h->s = NULL;
}

static int hv_is_wait(sched_kind k) {
    return k == ACT_RECV_F || k == ACT_RECV_B || k == ACT_REDUCE_GRAD || k == ACT_STEP;
}

static int hv_same(const sched_action *a, const sched_action *b) {
    if (a->kind != b->kind || a->stage != b->stage) return 0;
    return a->kind == ACT_REDUCE_GRAD || a->kind == ACT_STEP || a->mb == b->mb;
}

/* When what a REDUCE_GRAD of rank w (event e) waits for was there: the latest post (the start
 * of a REDUCE_GRAD) of another rank before e ended, or its own post. */
static double hv_reduce_avail(const timeline *tl, const tl_event *e) {
    double t = e->start;
    for (int i = 0; i < tl->n; i++) {
        const tl_event *x = &tl->ev[i];
        if (x->rank != e->rank && x->act.kind == ACT_REDUCE_GRAD && x->stream != TL_SIDE &&
            x->start <= e->end && x->start > t)
            t = x->start;
    }
    return t;
}

/* When every rank had reached its STEP (what the world reduction waits for): the latest start
 * of a STEP event. */
static double hv_step_avail(const timeline *tl) {
    double t = -1;
    for (int i = 0; i < tl->n; i++)
        if (tl->ev[i].act.kind == ACT_STEP && tl->ev[i].stream != TL_SIDE && tl->ev[i].start > t)
            t = tl->ev[i].start;
    return t;
}

static const char *const HV_LOST_NAME[HARVEST_LOST_N] = {
    "unoffered", "no task", "too short", "prediction", "grain", "tasks idle", "overhead", "resting",
};

const char *harvest_lost_name(int k) { return k >= 0 && k < HARVEST_LOST_N ? HV_LOST_NAME[k] : "?"; }

static const char *const HV_WHY_NAME[] = { "none", "notask", "arrived", "fit", "idle", "rest" };

/* One wait's idle [r0, av] (timeline times) and the side seconds inside it: what went unused,
 * by reason, from the harvester's record of the offer (o; NULL: another process's rank).
 * Returns the idle left after the harvester gave the rank back (for the log). */
static double hv_account(const hv_offer *o, double r0, double av, double used, harvest_stats *out) {
    double idle = fmax(0, av - r0), rest = fmax(0, idle - used), after = 0;
    out->idle_s += idle;
    out->used_s += idle - rest;
    if (!o || o->why == HV_WHY_NONE || o->why == HV_WHY_NOTASK || o->why == HV_WHY_REST) {
        int k = !o || o->why == HV_WHY_NONE ? HARVEST_LOST_UNOFFERED
              : o->why == HV_WHY_NOTASK ? HARVEST_LOST_NOTASK : HARVEST_LOST_REST;
        out->lost_s[k] += rest;
        return rest;
    }
    after = fmin(rest, fmax(0, av - (r0 + (o->stop - o->since))));   /* the offer began at r0 */
    out->lost_s[HARVEST_LOST_OVERHEAD] += rest - after;
    if (o->why == HV_WHY_FIT && o->steps == 0 && after < o->need) out->lost_s[HARVEST_LOST_SHORT] += after;
    else if (o->why == HV_WHY_FIT) {
        double whole = floor(after / o->need) * o->need;
        out->lost_s[HARVEST_LOST_PREDICT] += whole;
        out->lost_s[HARVEST_LOST_GRAIN] += after - whole;
    } else out->lost_s[o->why == HV_WHY_IDLE ? HARVEST_LOST_IDLE : HARVEST_LOST_OVERHEAD] += after;
    return after;
}

/* When the arrival woke the rank out of a program's slot among the side events [k0, k1) of rank
 * w (-1: none did): the wait lasted until then for the rank. */
static double hv_woke_of(const timeline *tl, int w, int k0, int k1) {
    double woke = -1;
    for (int k = k0; k >= 0 && k < k1; k++)
        if (tl->ev[k].rank == w && tl->ev[k].stream == TL_SIDE && tl->ev[k].woke > woke) woke = tl->ev[k].woke;
    return woke;
}

/* The side events of a wait (events [k0, k1) of rank w's, before its action's event): their
 * seconds, inside [r0, av], past av or past the rank's wake-up when later; counted into out. */
static void hv_side_of(const timeline *tl, int w, int k0, int k1, double r0, double av,
                       double *secs, double *inside, double *over, harvest_stats *out) {
    *secs = *inside = *over = 0;
    for (int k = k0; k >= 0 && k < k1; k++) {
        const tl_event *s = &tl->ev[k];
        if (s->rank != w || s->stream != TL_SIDE) continue;
        *secs += s->end - s->start;
        out->side_cpu_s += s->cpu;
        *inside += fmax(0, fmin(s->end, av) - fmax(s->start, r0));
        *over += fmax(0, s->end - fmax(fmax(s->start, av), s->woke));   /* woken: the stop's cost */
        out->steps++;
    }
    out->side_s += *secs;
    out->overrun_s += *over;
}

/* One rank's events in order: its actions (one event each, in list order) with the side events
 * of each wait just before the waiting action's event. */
static void hv_measure_rank(harvest *h, const timeline *tl, int w, const double *avail,
                            double step_avail, harvest_stats *out) {
    int p = w % h->P, len = h->s->len[p], j = 0, slot = h->n_hist % HV_HISTORY;
    int side0 = -1, side_n = 0;        /* the side events since the last action's event */
    double reached = -1;                /* latest end of an earlier action's event */
    double *hist = h->hist + (size_t)w * h->L * HV_HISTORY;
    for (int i = 0; i < tl->n; i++) {
        const tl_event *e = &tl->ev[i];
        if (e->rank != w) continue;
        if (e->stream == TL_SIDE) {
            if (side_n++ == 0) side0 = i;
            continue;
        }
        if (j >= len || !hv_same(&e->act, &h->s->acts[p][j])) return;   /* not this list: skip */
        double r0 = e->stream == TL_SEND && e->act.kind == ACT_REDUCE_GRAD ? reached : e->ready;
        double av = e->act.kind == ACT_REDUCE_GRAD ? hv_reduce_avail(tl, e)
                  : e->act.kind == ACT_STEP ? fmax(step_avail, e->start)
                  : avail[i] >= 0 ? avail[i] : e->end;
        if (r0 < 0) r0 = e->ready;
        int wait = hv_is_wait(e->act.kind);
        hist[(size_t)j * HV_HISTORY + slot] = wait ? fmax(0, av - r0) : NAN;
        /* The idle counted (idle_s, what harvested fractions divide by) lasts until the rank
         * went on: the arrival, or when it woke the rank from a program's slot if later (the
         * scheduler's wake-up latency, paid with side work or without; the prediction keeps
         * the arrival). A program runs only in its slot, so its CPU fits in this. */
        double woke = hv_woke_of(tl, w, side_n ? side0 : -1, i);
        if (woke > av) av = woke;
        double secs, inside, over;
        hv_side_of(tl, w, side_n ? side0 : -1, i, r0, av, &secs, &inside, &over, out);
        side_n = 0;
        if (wait) {
            const hv_offer *o = w >= h->lo && w < h->hi ? &h->offers[(size_t)w * h->L + j] : NULL;
            double after = hv_account(o, r0, av, inside, out);
            h->ctl_over += over;
            char b[32];
            if (h->log && (av > r0 || secs > 0))
                fprintf(h->log, "%ld %d %d %s pred %.3f idle %.3f steps %d side %.3f why %s need %.3f "
                        "after %.3f over %.3f\n", h->n_after + 1, w, j, sched_action_str(&e->act, b, sizeof b),
                        o ? o->pred * 1e3 : -1, fmax(0, av - r0) * 1e3, o ? o->steps : 0, secs * 1e3,
                        HV_WHY_NAME[o ? o->why : 0], o ? o->need * 1e3 : 0, after * 1e3, over * 1e3);
        }
        if (e->end > reached) reached = e->end;
        j++;
    }
}

double hv_measure(harvest *h, const timeline *tl, harvest_stats *out) {
    double *avail = pt_malloc(sizeof *avail * (size_t)(tl->n + 1)), span = 0;
    h->ctl_over = 0;
    for (int i = 0; i < tl->n; i++) avail[i] = -1;
    for (int i = 0; i < tl->n; i++) span = fmax(span, tl->ev[i].end);
    for (int i = 0; i < tl->n; i++) {
        const tl_event *e = &tl->ev[i];
        if (e->stream == TL_SEND && e->link >= 0 && e->link < tl->n &&
            (e->act.kind == ACT_SEND_F || e->act.kind == ACT_SEND_B))
            avail[e->link] = e->start;
    }
    double step_avail = hv_step_avail(tl);
    if (h->log) fprintf(h->log, "# step %ld: survive %.3f, smoothed overrun %.4f\n", h->n_after + 1,
                        h->survive, h->ema_over);
    for (int w = 0; w < h->R; w++) {
        double *hist = h->hist + (size_t)w * h->L * HV_HISTORY;
        for (int j = 0; j < h->L; j++) hist[(size_t)j * HV_HISTORY + h->n_hist % HV_HISTORY] = NAN;
        hv_measure_rank(h, tl, w, avail, step_avail, out);
    }
    free(avail);
    h->n_hist++;
    return span;
}

void hv_offers_reset(harvest *h) {
    for (size_t k = 0; h->offers && k < (size_t)h->R * h->L; k++) h->offers[k].why = HV_WHY_NONE;
}

static int hv_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The non-NaN entries of the last `steps` slots of ring v (slot of the newest: `last`) into out,
 * ascending. Returns how many. */
static int hv_recent(const double *v, int last, int steps, double *out) {
    int m = 0;
    for (int k = 0; k < steps && k < HV_HISTORY; k++) {
        double x = v[(last - k + HV_HISTORY) % HV_HISTORY];
        if (!isnan(x)) out[m++] = x;
    }
    qsort(out, (size_t)m, sizeof *out, hv_cmp);
    return m;
}

int hv_predict(harvest *h, int root, comm *world) {
    size_t rl = (size_t)h->R * h->L;
    int last = (h->n_hist + HV_HISTORY - 1) % HV_HISTORY;
    for (size_t wj = 0; wj < rl && root; wj++) {
        const double *v = h->hist + wj * HV_HISTORY;
        double tmp[HV_HISTORY], *samp = h->samp + wj * HV_HISTORY;
        int m = h->n_hist ? hv_recent(v, last, HV_FIXED_STEPS, tmp) : 0;
        h->pred[wj] = m ? fmax(0, tmp[(int)(h->pol.wait_q * (m - 1))]) : 0;
        m = h->n_hist ? hv_recent(v, last, HV_HISTORY, samp) : 0;
        for (int k = m; k < HV_HISTORY; k++) samp[k] = NAN;
    }
    size_t n = rl * (1 + HV_HISTORY) + 2;   /* and the threshold in force, whether the next step rests */
    h->pred[n - 2] = root ? h->survive : 0;
    h->pred[n - 1] = root ? h->resting : 0;
    if (world && world->size > 1) {
        if (!root) memset(h->pred, 0, n * sizeof *h->pred);
        if (comm_allreduce_f64(world, h->pred, n) < 0) return -1;   /* the root's, everywhere */
    }
    h->survive = h->pred[n - 2];
    h->resting = h->pred[n - 1] > 0;
    return 0;
}

void hv_control(harvest *h, double iter_s) {
    if (!h->pol.conditional || h->pol.overrun_target <= 0 || iter_s <= 0 || h->n_hist < HV_FIXED_STEPS) return;
    double frac = h->ctl_over / iter_s, risk = 1 - h->survive;
    h->ema_over = h->ema_over < 0 ? frac : (1 - HV_EMA) * h->ema_over + HV_EMA * frac;
    risk *= h->ema_over > h->pol.overrun_target ? HV_RISK_DOWN : HV_RISK_UP;
    h->survive = fmin(HV_SURVIVE_MAX, fmax(HV_SURVIVE_MIN, 1 - risk));
}
