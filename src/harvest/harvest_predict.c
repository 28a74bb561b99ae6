/* How long each wait of each rank will last, and what side work did in the last step. A wait
 * is an action the executor offers (harvest.h): a RECV, or a REDUCE_GRAD waiting for other
 * ranks. Its idle time is from when the rank reached the action to when what it waits for was
 * there: a message's send (the transports hand a message over at its isend, which the merged
 * timeline links to the RECV), or the latest post of another rank's reduction. Side work does
 * not stretch it: a side step that runs past the arrival counts as overrun, not as idle.
 *
 * Prediction of the idle of action i on world rank w (pipeline rank p = w mod P):
 *   pred = max(0, sim[p][i] + the HV_QUANTILE quantile over the last HV_HISTORY steps of
 *                             (measured - sim)),
 * sim being the simulator's wait (end - ready of its RECV) from the costs profiled so far,
 * recomputed at steps 1, 2, 4, ... 32 and every 50th. Before any step is measured: 0 (the first
 * step is the warm-up; no side work). */
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
    h->pred = pt_calloc(rl, sizeof *h->pred);
    h->sim = pt_calloc((size_t)P * h->L, sizeof *h->sim);
    h->hist = pt_malloc(rl * HV_HISTORY * sizeof *h->hist);
    for (size_t k = 0; k < rl * HV_HISTORY; k++) h->hist[k] = NAN;
    h->n_hist = 0;
}

void hv_predict_free(harvest *h) {
    free(h->pred);
    free(h->sim);
    free(h->hist);
    h->pred = h->sim = h->hist = NULL;
    h->s = NULL;
}

static int hv_is_wait(sched_kind k) { return k == ACT_RECV_F || k == ACT_RECV_B || k == ACT_REDUCE_GRAD; }

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

/* One rank's events in order: its actions (one event each, in list order) with the side events
 * of each wait just before the waiting action's event. */
static void hv_measure_rank(harvest *h, const timeline *tl, int w, const double *avail,
                            harvest_stats *out) {
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
        double av = e->act.kind == ACT_REDUCE_GRAD ? hv_reduce_avail(tl, e) : avail[i] >= 0 ? avail[i] : e->end;
        if (r0 < 0) r0 = e->ready;
        hist[(size_t)j * HV_HISTORY + slot] =
            hv_is_wait(e->act.kind) ? fmax(0, av - r0) - h->sim[(size_t)p * h->L + j] : NAN;
        for (int k = side0; side_n > 0 && k < i; k++) {
            const tl_event *s = &tl->ev[k];
            if (s->rank != w || s->stream != TL_SIDE) continue;
            out->side_s += s->end - s->start;
            out->overrun_s += fmax(0, s->end - fmax(s->start, av));
            out->steps++;
        }
        side_n = 0;
        if (e->end > reached) reached = e->end;
        j++;
    }
}

void hv_measure(harvest *h, const timeline *tl, harvest_stats *out) {
    double *avail = pt_malloc(sizeof *avail * (size_t)(tl->n + 1));
    for (int i = 0; i < tl->n; i++) avail[i] = -1;
    for (int i = 0; i < tl->n; i++) {
        const tl_event *e = &tl->ev[i];
        if (e->stream == TL_SEND && e->link >= 0 && e->link < tl->n &&
            (e->act.kind == ACT_SEND_F || e->act.kind == ACT_SEND_B))
            avail[e->link] = e->start;
    }
    for (int w = 0; w < h->R; w++) {
        double *hist = h->hist + (size_t)w * h->L * HV_HISTORY;
        for (int j = 0; j < h->L; j++) hist[(size_t)j * HV_HISTORY + h->n_hist % HV_HISTORY] = NAN;
        hv_measure_rank(h, tl, w, avail, out);
    }
    free(avail);
    h->n_hist++;
}

/* Steps after which the simulator runs again: 1, 2, 4, ..., 32, then every 50th. */
static int hv_sim_due(long n) {
    long k = n + 1;
    return (k <= 32 && (k & (k - 1)) == 0) || k % 50 == 0;
}

int harvest_wants_costs(const harvest *h) { return h->s && hv_sim_due(h->n_after); }

void hv_simulate(harvest *h, const sim_costs *c) {
    if (!hv_sim_due(h->n_after)) return;
    sim_opts so = { .iterations = 1 };
    sim_result res;
    if (sim_run(h->s, c, &so, &res) < 0) return;   /* keep the last prediction */
    memset(h->sim, 0, sizeof *h->sim * (size_t)h->P * h->L);
    for (int i = 0; i < res.tl.n; i++) {
        const tl_event *e = &res.tl.ev[i];
        if (e->stream != TL_RECV || e->rank < 0 || e->rank >= h->P) continue;
        for (int j = 0; j < h->s->len[e->rank]; j++)
            if (hv_same(&e->act, &h->s->acts[e->rank][j])) {
                h->sim[(size_t)e->rank * h->L + j] = e->end - e->ready;
                break;
            }
    }
    sim_result_free(&res);
}

static int hv_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The HV_QUANTILE quantile of the non-NaN entries of v[0..n) (the lower of the two around it); 0
 * when there are none. */
static double hv_quantile_finite(const double *v, int n) {
    double tmp[HV_HISTORY];
    int m = 0;
    for (int k = 0; k < n; k++)
        if (!isnan(v[k])) tmp[m++] = v[k];
    if (!m) return 0;
    qsort(tmp, (size_t)m, sizeof *tmp, hv_cmp);
    return tmp[(int)(HV_QUANTILE * (m - 1))];
}

int hv_predict(harvest *h, int root, comm *world) {
    size_t rl = (size_t)h->R * h->L;
    for (int w = 0; w < h->R && root; w++) {
        int p = w % h->P;
        for (int j = 0; j < h->L; j++) {
            const double *v = h->hist + ((size_t)w * h->L + j) * HV_HISTORY;
            double s = h->sim[(size_t)p * h->L + j];
            h->pred[(size_t)w * h->L + j] = h->n_hist ? fmax(0, s + hv_quantile_finite(v, HV_HISTORY)) : 0;
        }
    }
    if (!world || world->size == 1) return 0;
    if (!root) memset(h->pred, 0, rl * sizeof *h->pred);
    return comm_allreduce_f64(world, h->pred, rl);   /* the root's numbers, everywhere */
}
