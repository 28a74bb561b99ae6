/* One candidate's splits, from its items to a simulated step: the exact split for a schedule,
 * the simulator's costs of a split and its score, lower bounds on the step of any split, and
 * the local search that polishes a split (plan_score_polish). Not the items and ranks
 * (plan_items.c), one plan file's layout (plan_layout_eval.c), or the search over candidates
 * (plan_search.c). */
#include "plan/plan_int.h"
#include "util/pt.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Seconds of every item on every rank of a placement, the TP collectives apart (alike blocks and
 * ranks priced once). */
typedef struct {
    int n, P;
    double *f, *b, *w;            /* [P*n] item i on rank p at p*n + i: F and B with their TP time, W */
    double *tp_f, *tp_b;          /* [P*n] the TP seconds within f and b (plan_item_tp_time) */
} item_times;

/* Whether item i's TP collectives are priced as item i-1's (blocks are alike: only the items that
 * hold the embedding or the head differ), so its seconds on a rank are the same. */
static bool same_tp_item(const plan_items *it, int i) {
    for (int ph = PLAN_F; ph <= PLAN_B; ph++)
        if (it->tp_bytes[ph][i] != it->tp_bytes[ph][i - 1] || it->tp_coll[ph][i] != it->tp_coll[ph][i - 1] ||
            it->sg_bytes[ph][i] != it->sg_bytes[ph][i - 1] || it->sg_coll[ph][i] != it->sg_coll[ph][i - 1])
            return false;
    return true;
}

/* Whether rank p prices TP collectives as rank p-1 does (same rate and link). */
static bool same_tp_rank(const plan_ranks *r, int p) {
    return r->rate[p] == r->rate[p - 1] && r->tp_bw[p] == r->tp_bw[p - 1] && r->tp_lat[p] == r->tp_lat[p - 1];
}

static void item_times_init(item_times *t, const plan_items *it, const plan_ranks *r) {
    int n = it->n, P = r->P;
    size_t N = (size_t)P * n;
    t->n = n, t->P = P;
    t->tp_f = pt_calloc(N, sizeof(double)), t->tp_b = pt_calloc(N, sizeof(double));
    t->f = pt_malloc(sizeof(double) * N), t->b = pt_malloc(sizeof(double) * N), t->w = pt_malloc(sizeof(double) * N);
    for (int p = 0; p < P; p++) {
        double *tf = t->tp_f + (size_t)p * n, *tb = t->tp_b + (size_t)p * n;
        if (r->tp > 1 && p > 0 && same_tp_rank(r, p)) {   /* the same prices: copy the row */
            memcpy(tf, tf - n, sizeof(double) * (size_t)n);
            memcpy(tb, tb - n, sizeof(double) * (size_t)n);
        } else if (r->tp > 1) {
            for (int i = 0; i < n; i++) {
                bool same = i > 0 && same_tp_item(it, i);
                tf[i] = same ? tf[i - 1] : plan_item_tp_time(it, r, p, i, PLAN_F);
                tb[i] = same ? tb[i - 1] : plan_item_tp_time(it, r, p, i, PLAN_B);
            }
        }
        for (int i = 0; i < n; i++) {
            size_t x = (size_t)p * n + i;
            t->f[x] = it->ph[PLAN_F][i] / r->rate[p] + tf[i];
            t->b[x] = it->ph[PLAN_B][i] / r->rate[p] + tb[i];
            t->w[x] = it->ph[PLAN_W][i] / r->rate[p];
        }
    }
}

static void item_times_free(item_times *t) {
    free(t->tp_f); free(t->tp_b); free(t->f); free(t->b); free(t->w);
    memset(t, 0, sizeof *t);
}

/* [K*n] seconds of TP collectives (F and B) of item i on chunk k's rank, or NULL at tp 1. */
static double *chunk_tp_times(const item_times *t, const plan_ranks *r, const sched *s) {
    if (r->tp <= 1) return NULL;
    int K = s->n_stages, n = t->n;
    double *x = pt_malloc(sizeof(double) * (size_t)K * (size_t)n);
    for (int k = 0; k < K; k++) {
        size_t row = (size_t)s->stage_rank[k] * n;
        for (int i = 0; i < n; i++) x[(size_t)k * n + i] = t->tp_f[row + i] + t->tp_b[row + i];
    }
    return x;
}

/* The chain of a candidate's split (plan_chain: per chunk its rank's speed, its share of the
 * rank's memory, the microbatches it holds at peak, what it holds besides; the TP seconds from t,
 * none when t is NULL: memory alone), its arrays malloc'd; chain_free frees them. */
static void chain_init(plan_chain *c, const plan_items *it, const plan_ranks *r, const sched *s,
                       const item_times *t) {
    int K = s->n_stages, *peak = pt_malloc(sizeof(int) * (size_t)K), *per_rank = pt_calloc((size_t)r->P, sizeof(int));
    double *buf = pt_malloc(sizeof(double) * 4 * (size_t)K), *speed = buf, *cap = buf + K, *held = buf + 2 * K,
           *extra = buf + 3 * K;
    sched_peak_activations(s, peak);
    for (int k = 0; k < K; k++) per_rank[s->stage_rank[k]]++;
    double *units = it->balance ? plan_lend_units(s) : NULL;
    for (int k = 0; k < K; k++) {
        int rk = s->stage_rank[k];
        speed[k] = r->rate[rk];
        cap[k] = r->cap[rk] / per_rank[rk];   /* a rank's chunks share its memory evenly */
        held[k] = units ? units[k] : peak[k];
        extra[k] = plan_chunk_extra_any_split(it, k, K);
    }
    free(units);
    *c = (plan_chain){ .n = it->n, .K = K, .work = it->work, .mem_fixed = it->mem_fixed, .mem_act = it->mem_act,
                       .speed = speed, .cap = cap, .inflight = held, .mem_extra = extra,
                       .extra = t ? chunk_tp_times(t, r, s) : NULL };
    free(peak); free(per_rank);
}

static void chain_free(plan_chain *c) {
    free((double *)c->speed);   /* the head of chain_init's one buffer */
    free((double *)c->extra);
}

int plan_split_candidate(const plan_items *it, const plan_ranks *r, const sched *s, bool refine, int *first,
                         double *bottleneck) {
    item_times t;
    plan_chain c;
    item_times_init(&t, it, r);
    chain_init(&c, it, r, s, &t);
    int rc = plan_split(&c, first, bottleneck);
    if (rc == 0 && refine) rc = plan_split_refine(&c, *bottleneck, first);
    chain_free(&c);
    item_times_free(&t);
    return rc;
}

double plan_peak_need(const plan_items *it, const sched *s, const int *first, int *rank_out) {
    int K = s->n_stages, *peak = pt_malloc(sizeof(int) * (size_t)K);
    double *need = pt_calloc((size_t)s->n_ranks, sizeof(double)), worst = 0;
    double *mem = pt_malloc(sizeof(double) * (size_t)K);
    sched_peak_activations(s, peak);
    plan_chunks_need(it, s, first, peak, mem);
    for (int k = 0; k < K; k++) need[s->stage_rank[k]] += mem[k];
    free(mem);
    for (int p = 0; p < s->n_ranks; p++)
        if (need[p] > worst) { worst = need[p]; if (rank_out) *rank_out = p; }
    free(peak); free(need);
    return worst;
}

/* Simulator costs of the split: per-chunk F/B/W on its rank (F and B with their TP all-reduces:
 * they block the compute stream; W has none), messages of B*T*C floats (each TP rank sends its
 * whole copy to its counterpart, in parallel; under sp its N/tp rows, p2p / tp), the
 * data-parallel gradient ring as REDUCE_GRAD (under sp after the chunk's one all-reduce of its
 * blocks' layer-norm gradients over the TP group, as the runtime sums them before the ring)
 * followed by the chunk's optimizer step (it->opt: the runtime's STEP updates the rank's chunks on
 * its compute stream after their reductions; priced per chunk here rather than as the simulator's
 * one STEP time, since it moves with the split), links between the ranks of consecutive chunks. */
void plan_score_costs(const plan_cluster *k, const plan_items *it, const plan_ranks *r, const sched *s,
                      const int *first, double p2p, sim_costs *c) {
    int K = s->n_stages, D = r->D;
    sim_costs_init(c, K, 0, 0, 0);
    if (it->K > 1) sim_costs_seq_chunks(c);
    c->latency = k->inter_lat;
    c->bandwidth = k->inter_bw;
    c->tp = r->tp;
    for (int g = 0; g < K; g++) {
        int p = s->stage_rank[g];
        double rate = r->rate[p], grad = 0, ln = 0, opt = 0;
        for (int i = first[g]; i < first[g + 1]; i++) {
            c->tp_f[g] += plan_item_tp_time(it, r, p, i, PLAN_F);
            c->tp_b[g] += plan_item_tp_time(it, r, p, i, PLAN_B);
            c->f[g] += it->ph[PLAN_F][i] / rate;
            c->b[g] += it->ph[PLAN_B][i] / rate;
            c->w[g] += it->ph[PLAN_W][i] / rate;
            if (it->K > 1) {
                c->att_f[g] += it->att[0][i] / rate;
                c->att_b[g] += it->att[1][i] / rate;
                c->kv_bytes[g] += it->mem_kv[i];
            }
            grad += it->grad[i];
            ln += it->ln_bytes;
            opt += it->opt[i];
        }
        c->f[g] += c->tp_f[g];
        c->b[g] += c->tp_b[g];
        c->act_bytes[g] = (it->sp ? p2p / r->tp : p2p) / it->K;   /* a unit's message */
        c->reduce[g] = sim_allreduce_time(D, grad, 1, r->reduce_bw, r->reduce_lat) +
                       sim_allreduce_time(r->tp, ln, ln > 0, r->tp_bw[p], r->tp_lat[p]) + opt / rate;
        if (g + 1 < K && s->stage_rank[g] != s->stage_rank[g + 1]) {
            double bw, lat;
            plan_ranks_link(r, k, s->stage_rank[g], s->stage_rank[g + 1], &bw, &lat);
            sim_costs_set_link(c, s->stage_rank[g], s->stage_rank[g + 1], lat, bw, 0);
        }
    }
}

/* ---- lower bounds on a simulated step ---------------------------------------------------------
 * The simulator's step is a longest path through the schedule's actions (sim/sim.c: each rank's
 * compute stream runs its list in order; a message leaves after the action that makes it and
 * takes latency + bytes / bandwidth). The search's schedules are synchronous, with every chunk's
 * REDUCE_GRAD and the STEP at the end of its rank's list (sched_append_sync_tail). Two kinds of
 * path bound the step below for any split, whatever the schedule's order:
 *   - rank p's list: it starts after the first microbatch's F has reached p's earliest chunk g
 *     (H_g: the F of chunks 0..g-1 and the messages between them) and then runs M times F, B, W
 *     of each of its chunks and their reductions, one after another;
 *   - chunk g's last backward: all M F and M B of g come first (after H_g), then that
 *     microbatch's backward through chunks g-1..0 and their messages (T_g), then its W on chunk
 *     0 (when W is apart from B) and chunk 0's reduction;
 * plan_candidate_bound adds the spread bound (spread_bound). */

/* Whether chunk g runs its backward only as fused BW actions (gpipe, 1f1b, interleaved), else
 * B then W (zero-bubble). */
static void fused_stages(const sched *s, bool *fused) {
    bool *split_b = pt_calloc((size_t)s->n_stages, sizeof(bool));
    memset(fused, 0, sizeof(bool) * (size_t)s->n_stages);
    for (int r = 0; r < s->n_ranks; r++)
        for (int i = 0; i < s->len[r]; i++) {
            const sched_action *a = &s->acts[r][i];
            if (a->kind == ACT_BW) fused[a->stage] = true;
            if (a->kind == ACT_B) split_b[a->stage] = true;
        }
    for (int g = 0; g < s->n_stages; g++) fused[g] = fused[g] && !split_b[g];
    free(split_b);
}

/* Seconds of a message of `bytes` from rank a to rank b as sim_run prices it at the least (its
 * link's latency, bandwidth and extra delay; no wait for the send stream or a shaped queue). */
static double msg_time(const sim_costs *c, int a, int b, double bytes) {
    double lat = c->latency, bw = c->bandwidth, extra = 0;
    for (int i = 0; i < c->n_links; i++) {
        const sim_link *l = &c->links[i];
        if (!((l->a == a && l->b == b) || (l->a == b && l->b == a))) continue;
        if (l->latency >= 0) lat = l->latency;
        if (l->bandwidth >= 0) bw = l->bandwidth;
        extra += l->extra;
    }
    return (bw > 0 && bytes > 0 ? bytes / bw : 0) + lat + extra;
}

/* The largest of the path bounds above for one split, from its simulator costs c (reductions in
 * the list, no faults: as score_costs builds them). */
static double split_bound(const sched *s, const sim_costs *c, const bool *fused) {
    int K = s->n_stages, P = s->n_ranks, M = s->n_mb;
    double *start = pt_malloc(sizeof(double) * (size_t)P), *busy = pt_calloc((size_t)P, sizeof(double));
    for (int p = 0; p < P; p++) start[p] = INFINITY;
    double h = 0, tail = (fused[0] ? 0 : c->w[0]) + c->reduce[0], lb = 0;
    for (int g = 0; g < K; g++) {
        int p = s->stage_rank[g];
        double bk = c->b[g] + (fused[g] ? c->w[g] : 0);
        start[p] = fmin(start[p], h);
        busy[p] += M * (c->f[g] + c->b[g] + c->w[g]) + c->reduce[g];
        lb = fmax(lb, h + M * (c->f[g] + bk) + tail);
        double m = g + 1 < K && s->stage_rank[g + 1] != p ? msg_time(c, p, s->stage_rank[g + 1], c->act_bytes[g]) : 0;
        h += c->f[g] + m;
        tail += bk + m;
    }
    for (int p = 0; p < P; p++) lb = fmax(lb, start[p] + busy[p]);
    free(start); free(busy);
    return lb;
}

/* [K] prefix sums of the messages' seconds between chunks 0..g (0 on one rank), as score_costs
 * links them. */
static void hop_prefix(const plan_cluster *k, const plan_ranks *r, const sched *s, double bytes, double *hop) {
    hop[0] = 0;
    for (int g = 0; g + 1 < s->n_stages; g++) {
        int a = s->stage_rank[g], b = s->stage_rank[g + 1];
        double bw = INFINITY, lat = 0;
        if (a != b) plan_ranks_link(r, k, a, b, &bw, &lat);
        hop[g + 1] = hop[g] + (a != b ? (bw > 0 && bytes > 0 ? bytes / bw : 0) + lat : 0);
    }
}

/* Prefix sums (n+1 entries) of x[i] for i < n. */
static void prefix(const double *x, int n, double *out) {
    out[0] = 0;
    for (int i = 0; i < n; i++) out[i + 1] = out[i] + x[i];
}

/* The spread bound: every microbatch's F, B and W run somewhere, at best over all ranks in
 * proportion to their rates, and their TP collectives (at least the quickest rank's) keep ranks
 * of at least the slowest rate busy too; the first microbatch goes forward through every layer
 * and back at best at the fastest rank's rate and quickest TP link. */
static double spread_bound(const plan_items *it, const plan_ranks *r, const item_times *t, int M) {
    double work = 0, fb = 0, comm = 0, rates = 0, fastest = 0, slowest = INFINITY;
    for (int i = 0; i < it->n; i++) {
        double least = INFINITY;
        for (int p = 0; p < r->P; p++) least = fmin(least, t->tp_f[(size_t)p * it->n + i] + t->tp_b[(size_t)p * it->n + i]);
        work += it->work[i];
        fb += it->ph[PLAN_F][i] + it->ph[PLAN_B][i];
        comm += least;
    }
    for (int p = 0; p < r->P; p++) {
        rates += r->rate[p];
        fastest = fmax(fastest, r->rate[p]);
        slowest = fmin(slowest, r->rate[p]);
    }
    return fmax(M * (work + slowest * comm) / rates, fb / fastest + comm);
}

/* What the dynamic program of plan_candidate_bound reads: prefix sums over items. */
typedef struct {
    int n, K, M;
    double *F, *B, *W;        /* [P*(n+1)] per rank: seconds of items [0, i) */
    double *fmin, *bmin;      /* [n+1] items [0, i) each at its quickest rank (B with W when every
                               * chunk fuses them) */
    double *grad, *mf, *ma;   /* [n+1] gradient bytes, fixed and per-microbatch memory */
    double *opt;              /* [n+1] optimizer step reference FLOPs */
    double *hop;              /* [K] messages before chunk g */
    double tail0;             /* chunk 0's end of any backward path: item 0's W (unless fused) and its
                               * reduction */
    const bool *fused;
} bound_sums;

static void bound_sums_init(bound_sums *b, const plan_cluster *k, const plan_items *it, const plan_ranks *r,
                            const sched *s, const item_times *t, const bool *fused, double bytes) {
    int n = it->n, P = r->P, K = s->n_stages;
    size_t n1 = (size_t)n + 1;
    bool all_fused = true;
    for (int g = 0; g < K; g++) all_fused = all_fused && fused[g];
    b->n = n, b->K = K, b->M = s->n_mb, b->fused = fused;
    b->F = pt_malloc(sizeof(double) * P * n1), b->B = pt_malloc(sizeof(double) * P * n1), b->W = pt_malloc(sizeof(double) * P * n1);
    for (int p = 0; p < P; p++) {
        prefix(t->f + (size_t)p * n, n, b->F + p * n1);
        prefix(t->b + (size_t)p * n, n, b->B + p * n1);
        prefix(t->w + (size_t)p * n, n, b->W + p * n1);
    }
    double *fm = pt_malloc(sizeof(double) * n1), *bm = pt_malloc(sizeof(double) * n1);
    for (int i = 0; i < n; i++) {
        fm[i] = bm[i] = INFINITY;
        for (int p = 0; p < P; p++) {
            size_t x = (size_t)p * n + i;
            fm[i] = fmin(fm[i], t->f[x]);
            bm[i] = fmin(bm[i], t->b[x] + (all_fused ? t->w[x] : 0));
        }
    }
    b->fmin = pt_malloc(sizeof(double) * n1), b->bmin = pt_malloc(sizeof(double) * n1);
    b->grad = pt_malloc(sizeof(double) * n1), b->mf = pt_malloc(sizeof(double) * n1), b->ma = pt_malloc(sizeof(double) * n1);
    b->opt = pt_malloc(sizeof(double) * n1);
    prefix(fm, n, b->fmin); prefix(bm, n, b->bmin);
    prefix(it->grad, n, b->grad); prefix(it->mem_fixed, n, b->mf); prefix(it->mem_act, n, b->ma);
    prefix(it->opt, n, b->opt);
    free(fm); free(bm);
    b->hop = pt_malloc(sizeof(double) * (size_t)K);
    hop_prefix(k, r, s, it->sp ? bytes / r->tp : bytes, b->hop);
    int p0 = s->stage_rank[0];
    b->tail0 = (fused[0] ? 0 : t->w[(size_t)p0 * n]) + sim_allreduce_time(r->D, it->grad[0], 1, r->reduce_bw, r->reduce_lat) +
               sim_allreduce_time(r->tp, it->ln_bytes, it->ln_bytes > 0, r->tp_bw[p0], r->tp_lat[p0]) +
               it->opt[0] / r->rate[p0];
}

static void bound_sums_free(bound_sums *b) {
    free(b->F); free(b->B); free(b->W); free(b->fmin); free(b->bmin); free(b->grad); free(b->mf); free(b->ma); free(b->opt); free(b->hop);
}

/* Seconds of the reductions (and optimizer step) of a chunk holding items [i, j) on rank p, as
 * score_costs prices them. */
static double chunk_reduce(const bound_sums *b, const plan_items *it, const plan_ranks *r, int p, int i, int j) {
    return sim_allreduce_time(r->D, b->grad[j] - b->grad[i], 1, r->reduce_bw, r->reduce_lat) +
           sim_allreduce_time(r->tp, it->ln_bytes * (j - i), it->ln_bytes > 0, r->tp_bw[p], r->tp_lat[p]) +
           (b->opt[j] - b->opt[i]) / r->rate[p];
}

/* The path bounds of chunk g holding items [i, j) on rank p, the items before it priced at
 * their quickest: max(rank path of g alone, g's last backward). */
static double chunk_bound(const bound_sums *b, const plan_items *it, const plan_ranks *r, int g, int p, int i, int j) {
    size_t row = (size_t)p * (b->n + 1);
    double f = b->F[row + j] - b->F[row + i], bb = b->B[row + j] - b->B[row + i], w = b->W[row + j] - b->W[row + i];
    double red = chunk_reduce(b, it, r, p, i, j);
    double h = b->fmin[i] + b->hop[g];
    double own = h + b->M * (f + bb + w) + red;
    double last = h + b->M * (f + bb + (b->fused[g] ? w : 0)) + b->bmin[i] + b->hop[g] + b->tail0;
    return own > last ? own : last;   /* not fmax: a libm call in the DP's inner loop */
}

/* Whether chunk g can hold items [i, j) in its share of memory (plan_split's rule). */
static bool chunk_fits(const bound_sums *b, const plan_chain *c, int g, int i, int j) {
    if (c->cap[g] <= 0) return true;
    return b->mf[j] - b->mf[i] + c->inflight[g] * (b->ma[j] - b->ma[i]) + c->mem_extra[g] <= c->cap[g];
}

/* min over splits that fit of the max over chunks of chunk_bound: best[j] for items [0, j) on the
 * chunks so far, one chunk at a time. */
static double split_bound_dp(const bound_sums *b, const plan_chain *c, const plan_items *it, const plan_ranks *r,
                             const sched *s) {
    int n = b->n, K = b->K;
    double *prev = pt_malloc(sizeof(double) * (size_t)(n + 1)), *cur = pt_malloc(sizeof(double) * (size_t)(n + 1));
    for (int j = 0; j <= n; j++) prev[j] = j ? INFINITY : 0;
    for (int g = 0; g < K; g++) {
        int p = s->stage_rank[g], jlo = g == K - 1 ? n : g + 1, jhi = n - (K - 1 - g);
        for (int j = 0; j <= n; j++) cur[j] = INFINITY;
        for (int j = jlo; j <= jhi; j++)
            for (int i = j - 1; i >= g && chunk_fits(b, c, g, i, j); i--) {   /* memory grows with the range */
                if (!(prev[i] < cur[j])) continue;   /* the max cannot come under cur[j] */
                double v = chunk_bound(b, it, r, g, p, i, j);
                v = v > prev[i] ? v : prev[i];
                if (v < cur[j]) cur[j] = v;
            }
        double *x = prev; prev = cur; cur = x;
    }
    double v = prev[n];
    free(prev); free(cur);
    return v;
}

double plan_candidate_bound(const plan_cluster *k, const plan_items *it, const plan_ranks *r, const sched *s,
                            double p2p) {
    plan_chain c;
    chain_init(&c, it, r, s, NULL);   /* the dynamic program reads memory from it */
    if (!plan_split_fits(&c)) {       /* most candidates: found in O(K n) before pricing anything */
        chain_free(&c);
        return -1;
    }
    item_times t;
    bound_sums b;
    bool *fused = pt_malloc(sizeof(bool) * (size_t)s->n_stages);
    fused_stages(s, fused);
    item_times_init(&t, it, r);
    bound_sums_init(&b, k, it, r, s, &t, fused, p2p);
    double dp = split_bound_dp(&b, &c, it, r, s);
    double lb = dp < INFINITY ? fmax(dp, spread_bound(it, r, &t, s->n_mb)) : -1;
    bound_sums_free(&b);
    chain_free(&c);
    item_times_free(&t);
    free(fused);
    return lb;
}

/* Fresh prediction arrays; the split array is the caller's when given (K entries). */
static void layout_arrays(plan_layout *p, int K) {
    free(p->stage_mem); free(p->stage_time); free(p->stage_inflight);
    p->K = K;
    if (!p->split) p->split = pt_calloc((size_t)K, sizeof(int));
    p->stage_mem = pt_calloc((size_t)K, sizeof(double));
    p->stage_time = pt_calloc((size_t)K, sizeof(double));
    p->stage_inflight = pt_calloc((size_t)K, sizeof(int));
}

/* The critical path of a simulated split by what it is made of: how many F, B, W and reductions
 * of each chunk lie on it (a BW counts as one B and one W); the rest of it (messages, latencies)
 * does not depend on the split. Under another split's costs the same chain of events is still a
 * path through its schedule, so that split's step is at least
 * step + sum_g n_g x (its chunk g's time - this one's). */
typedef struct {
    int K;
    double step;                  /* the simulated step the path is the length of */
    double *n;                    /* [4*K] counts: F, B, W, reduction of chunk g at g, K+g, ... */
} crit_counts;

static void crit_counts_init(crit_counts *cc, int K) {
    cc->K = K;
    cc->step = 0;
    cc->n = pt_calloc(4 * (size_t)K, sizeof(double));
}

static void crit_counts_free(crit_counts *cc) { free(cc->n); cc->n = NULL; }

static void crit_counts_of(crit_counts *cc, const sim_result *res) {
    int K = cc->K;
    memset(cc->n, 0, sizeof(double) * 4 * (size_t)K);
    cc->step = res->iteration_time;
    for (int i = 0; i < res->n_crit; i++) {
        const tl_event *e = &res->tl.ev[res->crit[i].ev];
        int g = e->act.stage;
        if (e->stream != TL_COMPUTE || g < 0 || g >= K) continue;
        if (e->act.kind == ACT_F) cc->n[g]++;
        if (e->act.kind == ACT_B || e->act.kind == ACT_BW) cc->n[K + g]++;
        if (e->act.kind == ACT_W || e->act.kind == ACT_BW) cc->n[2 * K + g]++;
        if (e->act.kind == ACT_REDUCE_GRAD) cc->n[3 * K + g]++;
    }
}

/* The length of cc's path under costs to, cc having been taken under costs from. */
static double crit_length(const crit_counts *cc, const sim_costs *from, const sim_costs *to) {
    double d = 0;
    for (int g = 0; g < cc->K; g++) {
        const double *n = cc->n;
        int K = cc->K;
        d += n[g] * (to->f[g] - from->f[g]) + n[K + g] * (to->b[g] - from->b[g]) + n[2 * K + g] * (to->w[g] - from->w[g]) +
             n[3 * K + g] * (to->reduce[g] - from->reduce[g]);
    }
    return cc->step + d;
}

/* Simulates schedule s under costs c (split first[]) into p's predictions; cc (or NULL) gets the
 * critical path's counts. */
static int score_sim(const plan_items *it, const sched *s, const sim_costs *c, const int *first, long global_batch,
                     plan_layout *p, crit_counts *cc) {
    sim_result res;
    sim_opts o = { .iterations = 1 };
    if (sim_run(s, c, &o, &res) < 0) return -1;
    int K = s->n_stages;
    layout_arrays(p, K);
    plan_chunks_need(it, s, first, res.peak_mb, p->stage_mem);
    for (int g = 0; g < K; g++) {
        p->split[g] = first[g + 1] - first[g];
        p->stage_inflight[g] = res.peak_mb[g];
        p->stage_time[g] = c->f[g] + c->b[g] + c->w[g];
    }
    p->step_time = res.iteration_time;
    p->bubble = res.bubble_fraction;
    p->tokens_per_s = res.iteration_time > 0 ? (double)global_batch * p->T / res.iteration_time : 0;
    if (cc) crit_counts_of(cc, &res);
    sim_result_free(&res);
    return 0;
}

int plan_score(const gpt_config *cfg, const plan_cluster *k, const plan_items *it, const plan_ranks *r,
               const sched *s, const int *first, long global_batch, plan_layout *p) {
    sim_costs c;
    plan_score_costs(k, it, r, s, first, plan_p2p_bytes(cfg, p->mb_size, p->T), &c);
    int rc = score_sim(it, s, &c, first, global_batch, p, NULL);
    sim_costs_free(&c);
    return rc;
}

/* True when every chunk of first[] fits its share of its rank's memory (the split's own rule). */
static bool split_fits(const plan_items *it, const plan_ranks *r, const sched *s, const int *peak, const int *first) {
    int K = s->n_stages, *per_rank = pt_calloc((size_t)s->n_ranks, sizeof(int));
    double *mem = pt_malloc(sizeof(double) * (size_t)K);
    bool ok = true;
    plan_chunks_need(it, s, first, peak, mem);
    for (int g = 0; g < K; g++) per_rank[s->stage_rank[g]]++;
    for (int g = 0; g < K && ok; g++) {
        int rk = s->stage_rank[g];
        ok = mem[g] <= r->cap[rk] / per_rank[rk];
    }
    free(per_rank);
    free(mem);
    return ok;
}

/* Moves worth trying: any pair for few chunks; else neighbours and chunks that share a rank. */
static bool move_allowed(const sched *s, int a, int b) {
    return s->n_stages <= 8 || abs(a - b) == 1 || s->stage_rank[a] == s->stage_rank[b];
}

/* One block from chunk a to chunk b: every cut between them shifts by one. */
static void move_block(int *first, int a, int b) {
    if (a < b) for (int g = a + 1; g <= b; g++) first[g]--;
    else for (int g = b + 1; g <= a; g++) first[g]++;
}

/* The path bounds sum in another order than the simulator: a bound this close above a time may
 * still be rounding. */
#define BOUND_SLACK 1e-12

/* cc's path (taken under costs base) priced for each split that fits, minimised over them by
 * dynamic programming: its length is a sum over chunks of the counts times the chunk's F, B, W
 * and reduction, plus what does not depend on the split. */
static double crit_bound_dp(const bound_sums *b, const plan_chain *c, const plan_items *it, const plan_ranks *r,
                            const sched *s, const crit_counts *cc, const sim_costs *base) {
    int n = b->n, K = b->K;
    const double *m = cc->n;
    double fixed = cc->step;
    for (int g = 0; g < K; g++)
        fixed -= m[g] * base->f[g] + m[K + g] * base->b[g] + m[2 * K + g] * base->w[g] + m[3 * K + g] * base->reduce[g];
    double *prev = pt_malloc(sizeof(double) * (size_t)(n + 1)), *cur = pt_malloc(sizeof(double) * (size_t)(n + 1));
    for (int j = 0; j <= n; j++) prev[j] = j ? INFINITY : 0;
    for (int g = 0; g < K; g++) {
        int p = s->stage_rank[g], jlo = g == K - 1 ? n : g + 1, jhi = n - (K - 1 - g);
        size_t row = (size_t)p * (n + 1);
        for (int j = 0; j <= n; j++) cur[j] = INFINITY;
        for (int j = jlo; j <= jhi; j++)
            for (int i = j - 1; i >= g && chunk_fits(b, c, g, i, j); i--) {
                if (!(prev[i] < cur[j])) continue;
                double v = prev[i] + m[g] * (b->F[row + j] - b->F[row + i]) + m[K + g] * (b->B[row + j] - b->B[row + i]) +
                           m[2 * K + g] * (b->W[row + j] - b->W[row + i]) +
                           (m[3 * K + g] > 0 ? m[3 * K + g] * chunk_reduce(b, it, r, p, i, j) : 0);
                if (v < cur[j]) cur[j] = v;
            }
        double *x = prev; prev = cur; cur = x;
    }
    double v = fixed + prev[n];
    free(prev); free(cur);
    return v;
}

/* Whether no split of the candidate that fits can simulate under give_up, by the critical path cc
 * of one of them (taken under costs base). */
static bool crit_rules_out(const gpt_config *cfg, const plan_cluster *k, const plan_items *it, const plan_ranks *r,
                           const sched *s, const plan_layout *p, const crit_counts *cc, const sim_costs *base,
                           double give_up) {
    if (!(cc->step * (1 - BOUND_SLACK) > give_up)) return false;   /* the bound is at most this split's step */
    item_times t;
    plan_chain c;
    bound_sums b;
    bool *fused = pt_malloc(sizeof(bool) * (size_t)s->n_stages);
    fused_stages(s, fused);
    item_times_init(&t, it, r);
    chain_init(&c, it, r, s, NULL);
    bound_sums_init(&b, k, it, r, s, &t, fused, plan_p2p_bytes(cfg, p->mb_size, p->T));
    double lb = crit_bound_dp(&b, &c, it, r, s, cc, base);
    bound_sums_free(&b);
    chain_free(&c);
    item_times_free(&t);
    free(fused);
    return lb * (1 - BOUND_SLACK) > give_up;
}

static void swap_costs(sim_costs *a, sim_costs *b) { sim_costs x = *a; *a = *b; *b = x; }
static void swap_crit(crit_counts *a, crit_counts *b) { crit_counts x = *a; *a = *b; *b = x; }

/* The local search of plan_score_polish from first[] (scored into p); base and cc: the costs and
 * critical path of the split in p, kept up to date as moves are taken; runs counts the
 * simulations. */
typedef struct {
    sim_costs base;
    crit_counts cc;
} polish_state;

/* Tries the split trial[] (first[] with one block moved; it fits): returns true and takes it
 * (first, p, st) when its simulated step improves on p's; *runs counts the simulation. tc: the
 * critical path's counts of the trial (scratch). */
static bool polish_try(const plan_candidate *c, int *first, const int *trial, plan_layout *p, bool prune,
                       const bool *fused, polish_state *st, crit_counts *tc, long *runs) {
    const plan_items *it = c->it;
    const sched *s = c->s;
    plan_layout q = *p;
    q.split = NULL; q.stage_mem = NULL; q.stage_time = NULL; q.stage_inflight = NULL; q.devices = NULL;
    sim_costs sc;
    plan_score_costs(c->k, it, c->r, s, trial, plan_p2p_bytes(c->cfg, p->mb_size, p->T), &sc);
    /* a move whose step is bounded at or above the step so far would not be taken */
    double lb = prune ? fmax(split_bound(s, &sc, fused), crit_length(&st->cc, &st->base, &sc)) : 0;
    bool hopeless = prune && lb * (1 - BOUND_SLACK) >= p->step_time * (1 - PLAN_TIE_REL), took = false;
    *runs += !hopeless;
    if (!hopeless && score_sim(it, s, &sc, trial, c->global_batch, &q, tc) == 0 &&
        q.step_time < p->step_time * (1 - PLAN_TIE_REL)) {
        memcpy(first, trial, sizeof(int) * (size_t)(s->n_stages + 1));
        q.devices = p->devices;
        p->devices = NULL;
        plan_layout_free(p);
        *p = q;
        swap_costs(&st->base, &sc);
        swap_crit(&st->cc, tc);
        took = true;
    } else {
        plan_layout_free(&q);
    }
    sim_costs_free(&sc);
    return took;
}

static void polish(const plan_candidate *c, int *first, plan_layout *p, int budget, bool prune,
                   polish_state *st, long *runs) {
    const sched *s = c->s;
    int K = s->n_stages, sims = 0, *peak = pt_malloc(sizeof(int) * (size_t)K);
    int *trial = pt_malloc(sizeof(int) * (size_t)(K + 1));
    bool *fused = pt_malloc(sizeof(bool) * (size_t)K);
    crit_counts tc;
    crit_counts_init(&tc, K);
    sched_peak_activations(s, peak);
    fused_stages(s, fused);
    bool improved = true;
    while (improved && sims < budget) {
        improved = false;
        for (int a = 0; a < K && !improved && sims < budget; a++)
            for (int b = 0; b < K && !improved && sims < budget; b++) {
                if (a == b || first[a + 1] - first[a] < 2 || !move_allowed(s, a, b)) continue;
                memcpy(trial, first, sizeof(int) * (size_t)(K + 1));
                move_block(trial, a, b);
                if (!split_fits(c->it, c->r, s, peak, trial)) continue;
                sims++;   /* the budget counts moves tried, simulated or not, so pruning keeps the path */
                improved = polish_try(c, first, trial, p, prune, fused, st, &tc, runs);
            }
    }
    crit_counts_free(&tc);
    free(peak); free(trial); free(fused);
}

int plan_score_polish(const plan_candidate *c, int *first, plan_layout *p, const plan_polish_opts *o, long *runs) {
    polish_state st;
    plan_score_costs(c->k, c->it, c->r, c->s, first, plan_p2p_bytes(c->cfg, p->mb_size, p->T), &st.base);
    crit_counts_init(&st.cc, c->s->n_stages);
    (*runs)++;
    int rc = score_sim(c->it, c->s, &st.base, first, c->global_batch, p, &st.cc);
    if (rc == 0 && o->prune && crit_rules_out(c->cfg, c->k, c->it, c->r, c->s, p, &st.cc, &st.base, o->give_up)) rc = 1;
    if (rc == 0) polish(c, first, p, o->budget, o->prune, &st, runs);
    crit_counts_free(&st.cc);
    sim_costs_free(&st.base);
    return rc;
}

