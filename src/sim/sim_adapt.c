/* Straggler resilience in the simulator (sim_adapt.h): the judge for the adaptive generator, the
 * estimate of link delays and stage slowdowns from a timeline, the online policy with its
 * hysteresis, and the replay of the policy over iterations (simulate --adapt). The estimate and
 * the policy read only a timeline and the expected costs, so a measured run can use them too.
 * Not the generator (sched/), not the engine (sim.c). Legend: P ranks, S stages, N iterations. */
#include "sim/sim_adapt.h"
#include "util/pt.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the judge and the adaptive schedule ---- */

double sim_schedule_score(const sched *s, void *user) {
    sim_result r;
    sim_opts o = { 1, false };
    if (sim_run(s, (const sim_costs *)user, &o, &r) < 0) return -1;
    double t = r.iteration_time;
    sim_result_free(&r);
    return t;
}

/* How far off the estimate sim_schedule_robust looks: a slow link's delay (and a shaped link's
 * rate) 20% either way, and every other stage 20% slower (compute on shared cores varies by
 * 30-40% from step to step; a measured delay is a bound from a few messages). */
#define ROBUST_OFF 0.2

/* c (its faults as of iteration 1 folded in) with perturbation k of sim_schedule_robust applied. */
static void robust_costs(const sim_costs *c, int k, sim_costs *out) {
    sim_costs_at(c, 1, out);
    double link = k == 0 ? 1 - ROBUST_OFF : k == 1 ? 1 + ROBUST_OFF : 1;
    for (int i = 0; i < out->n_links; i++) out->links[i].extra *= link, out->links[i].rate /= link;
    for (int g = k - 2; k >= 2 && g < out->n_stages; g += 2) {
        double f = 1 + ROBUST_OFF;
        out->f[g] *= f, out->b[g] *= f, out->w[g] *= f;
        if (out->bw[g] >= 0) out->bw[g] *= f;
    }
}

double sim_schedule_robust(const sched *s, void *user) {
    double sum = 0;
    for (int k = 0; k < 4; k++) {
        sim_costs c;
        robust_costs((const sim_costs *)user, k, &c);
        double t = sim_schedule_score(s, &c);
        sim_costs_free(&c);
        if (t < 0) return -1;
        sum += t;
    }
    return sum / 4;
}

void sim_adaptive_params(const sim_costs *c, int n_ranks, sched_params *p, double *buf) {
    p->stage_cost_f = c->f, p->stage_cost_b = c->b, p->stage_cost_w = c->w;
    double *busy = buf + (n_ranks > 1 ? n_ranks - 1 : 0);
    for (int r = 0; r + 1 < n_ranks; r++) {
        busy[r] = sim_costs_link_busy(c, r, r + 1, c->act_bytes[r]);
        buf[r] = sim_costs_message_time(c, r, r + 1, c->act_bytes[r]) - busy[r];
    }
    p->link_delay = buf;
    p->link_busy = busy;
    p->score = sim_schedule_score;
    p->tiebreak = sim_schedule_robust;
    p->score_user = (void *)c;
}

sched *sim_adaptive_schedule(const sched_params *p, const sim_costs *c, sched_adaptive_info *info) {
    sim_costs now;
    sim_costs_at(c, 1, &now);
    double *buf = pt_calloc(2 * (size_t)p->ranks, sizeof(double));
    sched_params q = *p;
    sim_adaptive_params(&now, p->ranks, &q, buf);
    q.score_user = (void *)c;           /* judged with c's faults, as sim_run applies them */
    sched *s = now.n_stages == p->ranks ? sched_adaptive(&q, info) : NULL;
    if (now.n_stages != p->ranks)
        pt_seterr("schedule adaptive: the costs have %d stages, the pipeline %d ranks (one stage per rank)",
                  now.n_stages, p->ranks);
    free(buf);
    sim_costs_free(&now);
    return s;
}

/* The adaptive schedule's time and peak under c at limit L, or -1. */
static double adaptive_time_at(const sched_params *p, const sim_costs *c, int L, int *peak) {
    sched_params q = *p;
    q.mem_limit = L;
    sched_adaptive_info info;
    sched *s = sim_adaptive_schedule(&q, c, &info);
    if (!s) return -1;
    sched_free(s);
    if (peak) *peak = info.peak;
    return info.score;
}

int sim_adaptive_mem_needed(const sched_params *p, const sim_costs *c, double tol, double *unlimited,
                            int *unlimited_peak) {
    int hi;
    double t0 = adaptive_time_at(p, c, 0, &hi), goal = t0 * (1 + tol);
    if (t0 < 0) return -1;
    *unlimited = t0, *unlimited_peak = hi;
    int lo = p->mem_limit;                  /* invariant: lo misses the goal (or is 0), hi meets it */
    double t = lo > 0 ? adaptive_time_at(p, c, lo, NULL) : -1;
    if (lo > 0 && t >= 0 && t <= goal) return lo;
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        t = adaptive_time_at(p, c, mid, NULL);
        if (t < 0) return -1;
        if (t <= goal) hi = mid;
        else lo = mid;
    }
    return hi;
}

/* ---- the estimate ---- */

void sim_estimate_init(sim_estimate *e, int n_ranks, int n_stages) {
    memset(e, 0, sizeof *e);
    e->n_ranks = n_ranks, e->n_stages = n_stages;
    e->link_delay = pt_calloc((size_t)(n_ranks > 1 ? n_ranks - 1 : 1), sizeof(double));
    e->link_busy = pt_calloc((size_t)(n_ranks > 1 ? n_ranks - 1 : 1), sizeof(double));
    e->link_dir = pt_calloc((size_t)(n_ranks > 1 ? 2 * (n_ranks - 1) : 1), sizeof(double));
    e->link_told = pt_calloc((size_t)(n_ranks > 1 ? n_ranks - 1 : 1), sizeof(bool));
    e->stage_slow = pt_malloc(sizeof(double) * (size_t)(n_stages ? n_stages : 1));
    for (int g = 0; g < n_stages; g++) e->stage_slow[g] = 1;
}

void sim_estimate_free(sim_estimate *e) {
    free(e->link_delay), free(e->link_busy), free(e->stage_slow), free(e->link_dir), free(e->link_told);
    memset(e, 0, sizeof *e);
}

static void estimate_copy(sim_estimate *dst, const sim_estimate *src) {
    memcpy(dst->link_delay, src->link_delay, sizeof(double) * (size_t)(src->n_ranks > 1 ? src->n_ranks - 1 : 0));
    memcpy(dst->link_busy, src->link_busy, sizeof(double) * (size_t)(src->n_ranks > 1 ? src->n_ranks - 1 : 0));
    memcpy(dst->stage_slow, src->stage_slow, sizeof(double) * (size_t)src->n_stages);
}

/* The expected duration of compute event a under c (no faults), 0 for what takes no time. */
static double expected_time(const sim_costs *c, const sched_action *a) {
    int g = a->stage;
    switch (a->kind) {
    case ACT_F: return c->f[g];
    case ACT_B: return c->b[g];
    case ACT_W: return c->w[g];
    case ACT_BW: return c->bw[g] >= 0 ? c->bw[g] : c->b[g] + c->w[g];
    default: return 0;
    }
}

/* Per stage, the median of measured / expected over its compute events of iteration iter. */
static void estimate_stages(const timeline *tl, const sim_costs *c, int iter, sim_estimate *e) {
    int S = e->n_stages, *n = pt_calloc((size_t)S + 1, sizeof(int));
    double *ratio = pt_malloc(sizeof(double) * (size_t)(tl->n ? tl->n : 1));
    for (int i = 0; i < tl->n; i++) {       /* counting sort by stage: n[g+1] counts, then offsets */
        const tl_event *x = &tl->ev[i];
        if (x->iter == iter && x->stream == TL_COMPUTE && expected_time(c, &x->act) > 0) n[x->act.stage + 1]++;
    }
    for (int g = 0; g < S; g++) n[g + 1] += n[g];
    int *fill = pt_calloc((size_t)S, sizeof(int));
    for (int i = 0; i < tl->n; i++) {
        const tl_event *x = &tl->ev[i];
        double want = x->iter == iter && x->stream == TL_COMPUTE ? expected_time(c, &x->act) : 0;
        if (want > 0) ratio[n[x->act.stage] + fill[x->act.stage]++] = (x->end - x->start) / want;
    }
    for (int g = 0; g < S; g++) e->stage_slow[g] = fill[g] ? pt_median(ratio + n[g], fill[g]) : 1;
    free(fill), free(ratio), free(n);
}

/* A measured message's time varies by this fraction of the link's delay from one to the next
 * (thread wake-ups, a sender that lost its core): the queue fit's tolerance for a measured run. */
#define EST_JITTER 0.05

/* A link's two directions are one slow link, read as one, when the faster one's delay is at least
 * half the slower one's (a link shaped both ways measures within jitter of equal both ways; one
 * shaped one way measures the other direction healthy). */
#define EST_BOTH_WAYS 0.5

/* One message over a link, as the estimate reads it: sent at `post` (the send's end; directed:
 * its start), got at `got` (minus the expected latency), and whether its consumer waited for it
 * (then `got` is when it arrived). */
typedef struct {
    double post, got;
    bool waited;
    int dir;                /* 2r: r -> r+1, 2r+1: back */
} est_msg;

static int cmp_post(const void *a, const void *b) {
    const est_msg *x = a, *y = b;
    return x->dir != y->dir ? (x->dir > y->dir) - (x->dir < y->dir) : (x->post > y->post) - (x->post < y->post);
}

/* Whether a queue of s per message, the rest of delay D after it, predicts every message of m[n]
 * (by post) arriving no later than it was got (within tol); *queued: whether it explains a
 * message that clearly queued (one waited for that took at least D/4 + tol longer than D, at
 * least half of that spent in the queue). */
static bool queue_fits(const est_msg *m, int n, double D, double s, double tol, bool *queued) {
    double q = -INFINITY;
    *queued = false;
    for (int i = 0; i < n; i++) {
        double start = m[i].post > q ? m[i].post : q, excess = m[i].got - m[i].post - D;
        q = start + s;
        if (start + D > m[i].got + tol) return false;
        if (m[i].waited && excess >= 0.25 * D + tol && start - m[i].post >= 0.5 * excess) *queued = true;
    }
    return true;
}

/* What one direction's messages say of a queue (fit_busy). */
typedef struct {
    double hi;      /* the largest queue time per message in 0..D that fits them (queue_fits) */
    bool queued;    /* at hi, a message clearly queued: the queue is hi */
    bool bounded;   /* a queue of D does not fit: messages sent closer together than D arrived
                     * sooner than it would have let them (none queued: a delay) */
} est_fit;

/* One direction's messages m[n] (sorted by post) whose fastest took D: hi bisected (the predicted
 * arrivals only grow with s), and what the messages say. Neither queued nor bounded: they say
 * nothing (all sent a link time apart or more, as a direction paced by the replies of the other;
 * or late for another reason: a consumer that looked late, a sender or delivery that lost its
 * core on a busy machine, which the queue does not explain). */
static est_fit fit_busy(const est_msg *m, int n, double D, double tol) {
    est_fit f = { 0, false, false };
    if (D <= 0 || !queue_fits(m, n, D, 0, tol, &f.queued)) return f;   /* one faster than D: no fit */
    double lo = 0, hi = D;
    if (queue_fits(m, n, D, hi, tol, &f.queued)) lo = hi;
    else f.bounded = true;
    for (int it = 0; it < 60 && hi - lo > 1e-12 * (1 + D); it++) {
        double mid = (lo + hi) / 2;
        if (queue_fits(m, n, D, mid, tol, &f.queued)) lo = mid;
        else hi = mid;
    }
    f.hi = lo;
    queue_fits(m, n, D, lo, tol, &f.queued);
    return f;
}

/* Link r's queue time from its directions' fits f[2r], f[2r+1] and delays low[] into e: a queue
 * when a direction read says one queued (the smallest hi of those read: each bounds it from
 * above), else 0 (a delay); e->link_told[r]: whether a direction read said either. Directed,
 * the slower direction is read, and the other too when it is at least EST_BOTH_WAYS as slow (a
 * link shaped both ways is equally slow in both, which one measures a hair slower is chance, and
 * one direction's messages may be paced by the other's and say nothing; a healthy direction
 * says nothing of the slow one); the simulator's, both. */
static void link_queue(const est_fit *f, const double *low, int r, sim_estimate *e) {
    int slow = low[2 * r] > low[2 * r + 1] ? 2 * r : 2 * r + 1, read[2] = { slow, slow ^ 1 };
    bool both = !e->directed || low[slow ^ 1] >= EST_BOTH_WAYS * low[slow], queued = false, bounded = false;
    double q = INFINITY;
    for (int k = 0; k < (both ? 2 : 1); k++) {
        const est_fit *x = &f[read[k]];
        if (x->queued || x->bounded) q = fmin(q, x->hi);
        queued |= x->queued, bounded |= x->bounded;
    }
    e->link_told[r] = queued || bounded;
    e->link_busy[r] = queued ? fmin(q, e->link_delay[r]) : 0;
}

/* The messages of iteration iter between neighbouring ranks into m (allocated; *n of them), with
 * the expected latency taken off `got`. */
static est_msg *link_messages(const timeline *tl, const sim_costs *c, int iter, const sim_estimate *e, int *n) {
    est_msg *m = pt_malloc(sizeof *m * (size_t)(tl->n + 1));
    *n = 0;
    for (int i = 0; i < tl->n; i++) {
        const tl_event *x = &tl->ev[i];
        if (x->iter != iter || x->stream != TL_SEND || x->link < 0 || abs(x->peer - x->rank) != 1) continue;
        const tl_event *y = &tl->ev[x->link];
        bool recv = y->stream == TL_RECV;
        double wait = recv ? y->end - y->start : y->start - y->ready;
        m[*n] = (est_msg){ .post = e->directed ? x->start : x->end,
                           .got = (recv ? y->end : y->start) - sim_costs_message_time(c, x->rank, x->peer, 0),
                           .waited = e->directed ? recv && wait >= e->wait_eps : wait > 0,
                           .dir = 2 * (x->rank < x->peer ? x->rank : x->peer) + (x->rank > x->peer) };
        if (!e->directed || m[*n].waited || recv) (*n)++;
    }
    qsort(m, (size_t)*n, sizeof *m, cmp_post);
    return m;
}

/* Per link r-r+1 and direction, the smallest (got - sent - expected latency) of its messages:
 * an upper bound of the link's delay, exact once a consumer waited (the first forward of an
 * iteration always is: its rank has nothing else to do); and the queue time (fit_busy). Directed
 * (a measured run): only the messages whose receive waited bound the delay, and the slower
 * direction is the link's. */
static void estimate_links(const timeline *tl, const sim_costs *c, int iter, sim_estimate *e) {
    int L = e->n_ranks - 1, n;
    double *low = e->link_dir;
    est_fit *fit = pt_calloc((size_t)(2 * L + 1), sizeof *fit);
    for (int i = 0; i < 2 * L; i++) low[i] = INFINITY;
    est_msg *m = link_messages(tl, c, iter, e, &n);
    for (int i = 0; i < n; i++)
        if (!e->directed || m[i].waited) low[m[i].dir] = fmin(low[m[i].dir], m[i].got - m[i].post);
    for (int i = 0; i < 2 * L; i++) low[i] = isfinite(low[i]) && low[i] > 0 ? low[i] : 0;
    for (int i = 0, j = 0; i < n; i = j) {   /* each direction's run of messages, by post */
        while (j < n && m[j].dir == m[i].dir) j++;
        double D = low[m[i].dir];
        fit[m[i].dir] = fit_busy(m + i, j - i, D, e->directed ? fmax(e->wait_eps, EST_JITTER * D) : 1e-9 * (1 + D));
    }
    for (int r = 0; r < L; r++) {           /* symmetric: both bounds hold the one delay, the smaller is tighter */
        double a = low[2 * r], b = low[2 * r + 1];
        e->link_delay[r] = e->directed ? (a > b ? a : b) : (a < b ? a : b);
        link_queue(fit, low, r, e);
        if (!e->directed) low[2 * r] = low[2 * r + 1] = e->link_delay[r];
    }
    free(m), free(fit);
}

void sim_estimate_directions(const sim_estimate *e, double *out) {
    memcpy(out, e->link_dir, sizeof(double) * (size_t)(e->n_ranks > 1 ? 2 * (e->n_ranks - 1) : 0));
}

int sim_estimate_timeline(const timeline *tl, const sim_costs *expected, int iter, sim_estimate *e) {
    if (tl->n_ranks != e->n_ranks || tl->n_stages != e->n_stages || expected->n_stages != e->n_stages)
        return pt_seterr("estimate: the timeline has %d ranks and %d stages, the estimate %d and %d, the costs %d "
                         "stages", tl->n_ranks, tl->n_stages, e->n_ranks, e->n_stages, expected->n_stages);
    estimate_stages(tl, expected, iter, e);
    estimate_links(tl, expected, iter, e);
    return 0;
}

void sim_costs_apply_estimate(const sim_costs *healthy, const sim_estimate *e, sim_costs *out) {
    sim_costs_copy(healthy, out);
    for (int g = 0; g < out->n_stages && g < e->n_stages; g++) {
        double k = e->stage_slow[g];
        out->f[g] *= k, out->b[g] *= k, out->w[g] *= k;
        if (out->bw[g] >= 0) out->bw[g] *= k;
    }
    for (int r = 0; r + 1 < e->n_ranks; r++) {
        double q = fmin(e->link_busy[r], e->link_delay[r]);
        if (e->link_delay[r] - q > 0) sim_costs_set_link(out, r, r + 1, -1, -1, e->link_delay[r] - q);
        if (q <= 0) continue;
        if (!(out->act_bytes[r] > 0)) out->act_bytes[r] = 1;   /* a queue needs a size; only the link reads it */
        sim_costs_set_link_rate(out, r, r + 1, out->act_bytes[r] / q);
    }
}

char *sim_estimate_describe(const sim_estimate *e, const sim_policy_opts *o, double mean_f, char *buf, int n) {
    int len = 0;
    buf[0] = 0;
    for (int r = 0; r + 1 < e->n_ranks && len < n; r++)
        if (e->link_delay[r] >= o->link_off * mean_f) {
            len += snprintf(buf + len, (size_t)(n - len), "%slink %d-%d +%.4g per message", len ? "; " : "", r, r + 1,
                            e->link_delay[r]);
            if (e->link_busy[r] > 0 && len < n)
                len += snprintf(buf + len, (size_t)(n - len), " (%.4g of it in a queue: slow in bandwidth)",
                                e->link_busy[r]);
        }
    for (int g = 0; g < e->n_stages && len < n; g++)
        if (e->stage_slow[g] >= o->stage_off)
            len += snprintf(buf + len, (size_t)(n - len), "%sstage %d x%.3g", len ? "; " : "", g, e->stage_slow[g]);
    if (!len) snprintf(buf, (size_t)n, "healthy");
    return buf;
}

/* ---- the policy ---- */

sim_policy_opts sim_policy_defaults(void) {
    return (sim_policy_opts){ .link_on = 0.5, .link_off = 0.25, .stage_on = 1.2, .stage_off = 1.1,
                              .onset = 1, .recovery = 1, .regen = 0.25 };
}

void sim_policy_init(sim_policy *pol, int n_ranks, int n_stages) {
    memset(pol, 0, sizeof *pol);
    sim_estimate_init(&pol->basis, n_ranks, n_stages);
}

void sim_policy_free(sim_policy *pol) { sim_estimate_free(&pol->basis); }

/* Whether e has a straggler by the `on` thresholds (on = true) or is healthy by the `off` ones. */
static bool estimate_over(const sim_estimate *e, const sim_policy_opts *o, double mean_f, bool on) {
    for (int r = 0; r + 1 < e->n_ranks; r++)
        if (e->link_delay[r] >= (on ? o->link_on : o->link_off) * mean_f) return true;
    for (int g = 0; g < e->n_stages; g++)
        if (e->stage_slow[g] >= (on ? o->stage_on : o->stage_off)) return true;
    return false;
}

/* Whether e moved from the basis by more than o->regen of it (delays: of at least link_on x F). */
static bool estimate_moved(const sim_estimate *e, const sim_estimate *basis, const sim_policy_opts *o, double mean_f) {
    for (int r = 0; r + 1 < e->n_ranks; r++) {
        double ref = fmax(basis->link_delay[r], o->link_on * mean_f);
        if (fabs(e->link_delay[r] - basis->link_delay[r]) > o->regen * ref) return true;
        if (fabs(e->link_busy[r] - basis->link_busy[r]) > o->regen * ref) return true;
    }
    for (int g = 0; g < e->n_stages; g++)
        if (fabs(e->stage_slow[g] - basis->stage_slow[g]) > o->regen * basis->stage_slow[g]) return true;
    return false;
}

sim_policy_action sim_policy_step(sim_policy *pol, const sim_policy_opts *o, const sim_estimate *e, double mean_f) {
    if (!pol->adapted) {
        pol->slow_seen = estimate_over(e, o, mean_f, true) ? pol->slow_seen + 1 : 0;
        if (pol->slow_seen < (o->onset > 0 ? o->onset : 1)) return SIM_POLICY_KEEP;
        pol->adapted = true, pol->slow_seen = pol->healthy_seen = 0;
        estimate_copy(&pol->basis, e);
        return SIM_POLICY_ADAPT;
    }
    bool healthy = !estimate_over(e, o, mean_f, false);
    pol->healthy_seen = healthy ? pol->healthy_seen + 1 : 0;
    if (pol->healthy_seen >= (o->recovery > 0 ? o->recovery : 1)) {
        pol->adapted = false, pol->healthy_seen = 0;
        return SIM_POLICY_REVERT;
    }
    if (healthy || !estimate_moved(e, &pol->basis, o, mean_f)) return SIM_POLICY_KEEP;
    estimate_copy(&pol->basis, e);
    return SIM_POLICY_ADAPT;
}
