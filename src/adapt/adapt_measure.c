/* --adapt's measurements: each step's median costs, the baseline of recent healthy steps (a ring),
 * the healthy cost model from it, and the step's estimate (links and stages) against it, per lane.
 * Not here: deciding (trainer_adapt.c), the estimator itself (sim/sim_adapt.h). */
#include "adapt/adapt_int.h"
#include "util/pt.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- measuring ---------------------------------------------------------------------------- */

static int kind_slot(sched_kind k) {
    return k == ACT_F ? 0 : k == ACT_B ? 1 : k == ACT_W ? 2 : k == ACT_BW ? 3 : k == ACT_STEP ? 4 : -1;
}

/* This step's median duration of each (stage, kind) over every rank and replica, into v[S * K]
 * (-1: none ran); STEP goes to stage 0's slot. */
void adapt_step_medians(const timeline *tl, int S, double *v) {
    double *d = pt_malloc(sizeof *d * (size_t)(tl->n + 1));
    for (int g = 0; g < S; g++)
        for (int k = 0; k < K_KINDS; k++) {
            int n = 0;
            for (int i = 0; i < tl->n; i++) {
                const tl_event *x = &tl->ev[i];
                if (kind_slot(x->act.kind) == k && (k == 4 ? g == 0 : x->act.stage == g)) d[n++] = x->end - x->start;
            }
            v[g * K_KINDS + k] = n ? pt_median(d, n) : -1;
        }
    free(d);
}

void adapt_ring_init(adapt_ring *r, int width) {
    r->v = pt_calloc((size_t)ADAPT_BASELINE * (size_t)width, sizeof *r->v);
    r->width = width, r->n = r->next = 0;
}

void adapt_ring_add(adapt_ring *r, const double *v) {
    memcpy(r->v + (size_t)r->next * (size_t)r->width, v, sizeof *v * (size_t)r->width);
    r->next = (r->next + 1) % ADAPT_BASELINE;
    if (r->n < ADAPT_BASELINE) r->n++;
}

/* The median over the ring's steps of value k (-1 when none has it: values < 0 are missing). */
double adapt_ring_median(const adapt_ring *r, int k) {
    double x[ADAPT_BASELINE];
    int n = 0;
    for (int i = 0; i < r->n; i++) {
        double y = r->v[(size_t)i * (size_t)r->width + (size_t)k];
        if (y >= 0) x[n++] = y;
    }
    return n ? pt_median(x, n) : -1;
}

/* The healthy costs: medians over the baseline steps (a fused BW's halves stand for B and W),
 * links free, messages of their real size (a link slow in bandwidth is a rate on them). */
void adapt_base_costs(const adapt_state *A, sim_costs *c) {
    double m[K_KINDS];
    sim_costs_init(c, A->S, 0, 0, 0);
    c->reduce_overlap = A->overlap;
    for (int g = 0; g < A->S; g++) c->act_bytes[g] = A->act_bytes;
    for (int g = 0; g < A->S; g++) {
        for (int k = 0; k < K_KINDS; k++) m[k] = adapt_ring_median(&A->base, g * K_KINDS + k);
        c->f[g] = m[0] > 0 ? m[0] : 0;
        c->b[g] = m[1] >= 0 ? m[1] : m[3] > 0 ? m[3] / 2 : 0;
        c->w[g] = m[2] >= 0 ? m[2] : m[3] > 0 ? m[3] / 2 : 0;
        c->bw[g] = m[3] >= 0 ? m[3] : -1;
        if (g == 0 && m[4] > 0) c->step = m[4];
    }
}

/* The events of one lane, replica d's TP rank t (its pipeline ranks exchange the stream's
 * messages among themselves), as a timeline of P ranks (world rank of (d, p, t) -> p), links
 * kept. */
static void lane_timeline(const timeline *tl, const sched *s, const run_layout *lo, int d, int t,
                          timeline *out) {
    int *idx = pt_malloc(sizeof *idx * (size_t)(tl->n + 1));
    timeline_init(out, s, NULL, 1);
    for (int i = 0; i < tl->n; i++) {
        const tl_event *x = &tl->ev[i];
        int xd, xp, xt, pd, pp, pt;
        idx[i] = -1;
        run_layout_coords(lo, x->rank, &xd, &xp, &xt);
        if (xd != d || xt != t) continue;
        tl_event y = *x;
        y.rank = xp;
        if (y.peer >= 0) {
            run_layout_coords(lo, y.peer, &pd, &pp, &pt);
            y.peer = pp;
        }
        idx[i] = timeline_push(out, &y);
    }
    for (int i = 0; i < out->n; i++)
        if (out->ev[i].link >= 0) out->ev[i].link = idx[out->ev[i].link];
    free(idx);
}

/* The estimate of the step against the healthy costs: per lane, each replica's TP rank (each
 * link's slower direction, from the messages a receiver waited for), then the largest delay and
 * slowdown of each link and stage over the lanes (every lane runs the one schedule). Stage
 * slowdowns are taken relative to the fastest stage, so a machine-wide slowdown (other jobs on
 * the cores) is no straggler. */
int adapt_step_estimate(adapt_state *A, const timeline *tl, const sched *s, const run_layout *layout,
                         const sim_costs *healthy, sim_estimate *est) {
    sim_estimate one;
    sim_estimate_init(&one, A->P, A->S);
    one.directed = true;   /* a measured link may be slow one way (tc shapes a host's egress) */
    one.wait_eps = ADAPT_WAIT_EPS;
    for (int r = 0; r + 1 < A->P; r++) est->link_delay[r] = est->link_busy[r] = 0;
    for (int g = 0; g < A->S; g++) est->stage_slow[g] = 0;
    int rc = 0;
    for (int lane = 0; lane < A->D * layout->tp && rc == 0; lane++) {
        timeline sub;
        lane_timeline(tl, s, layout, lane / layout->tp, lane % layout->tp, &sub);
        rc = sim_estimate_timeline(&sub, healthy, 0, &one);
        timeline_free(&sub);
        for (int r = 0; r + 1 < A->P && rc == 0; r++) {
            est->link_delay[r] = fmax(est->link_delay[r], one.link_delay[r]);
            est->link_busy[r] = fmax(est->link_busy[r], one.link_busy[r]);
            est->link_told[r] |= one.link_told[r];
        }
        for (int g = 0; g < A->S && rc == 0; g++) est->stage_slow[g] = fmax(est->stage_slow[g], one.stage_slow[g]);
    }
    double lo = INFINITY;
    for (int g = 0; g < A->S; g++) lo = fmin(lo, est->stage_slow[g]);
    for (int g = 0; g < A->S && lo > 0 && isfinite(lo); g++) est->stage_slow[g] /= lo;
    for (int g = 0; g < A->S; g++) {   /* two steps in a row: one slow step of a busy core is noise
                                        * (a sender that lost its core for a while makes one slow
                                        * step of a link too: the hook filters links the same way) */
        double now = est->stage_slow[g];
        est->stage_slow[g] = fmin(now, A->prev_slow[g]);
        A->prev_slow[g] = now;
    }
    sim_estimate_free(&one);
    return rc;
}

double adapt_mean_f(const sim_costs *c) {
    double m = 0;
    for (int g = 0; g < c->n_stages; g++) m += c->f[g] / c->n_stages;
    return m;
}

/* Healthy by the `off` thresholds, as this step measured it (prev_*: unfiltered, so the first
 * slow step of a straggler never joins the baseline). */
int adapt_estimate_healthy(const adapt_state *A, const sim_estimate *e, double mf) {
    for (int r = 0; r + 1 < A->P; r++)
        if (A->prev_link[r] >= A->po.link_off * mf) return 0;
    for (int g = 0; g < A->S; g++)
        if (A->prev_slow[g] >= A->po.stage_off) return 0;
    return 1;
}
