/* One candidate layout, from costs to a simulated step: per-layer reference FLOPs and bytes
 * (chain items, one TP rank's share), ranks' speeds, caps and links (pipeline, data-parallel and
 * tensor-parallel) for a device placement, the exact split for a schedule, and scoring with the
 * simulator. Not the search over candidates (plan_search.c). */
#include "plan/plan_int.h"
#include "sim/sim.h"
#include "util/pt.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

void plan_scale_init(plan_scale *s, const plan_costs *costs, const plan_cluster *k, int B) {
    for (int a = 0; a < PLAN_N_KINDS; a++)
        for (int b = 0; b < PLAN_N_PHASES; b++) s->eff[a][b] = 1;
    s->ref_rate = k->reference_flops;
    if (!costs) return;
    /* the profiled block's overall rate is the reference; other kinds and phases relative to it */
    plan_layer_cost blk;
    plan_layer_model(&costs->cfg, PLAN_BLOCK, B, costs->T, 1, &blk);
    double fl = 0, sec = 0;
    for (int ph = 0; ph < PLAN_N_PHASES; ph++) {
        double r = plan_costs_rate(costs, PLAN_BLOCK, ph, B);
        if (r > 0) { fl += blk.flops[ph]; sec += blk.flops[ph] / r; }
    }
    if (!(sec > 0)) return;
    s->ref_rate = fl / sec;
    for (int a = 0; a < PLAN_N_KINDS; a++)
        for (int ph = 0; ph < PLAN_N_PHASES; ph++) {
            double r = plan_costs_rate(costs, a, ph, B);
            if (r > 0) s->eff[a][ph] = r / s->ref_rate;
        }
}

void plan_items_free(plan_items *it) {
    free(it->work); free(it->mem_fixed); free(it->mem_act); free(it->grad);
    for (int ph = 0; ph < PLAN_N_PHASES; ph++) {
        free(it->ph[ph]); free(it->tp_bytes[ph]); free(it->tp_coll[ph]); free(it->sg_bytes[ph]); free(it->sg_coll[ph]);
    }
    memset(it, 0, sizeof *it);
}

/* Adds one layer's costs to item i. Recomputation redoes F before B, its all-reduces included;
 * communication-free recomputation (a block) keeps keep_bytes and redoes recompute_flops before
 * B with no collective (under sp: the all-gathers of recompute_tp_bytes); ZeRO-1 keeps
 * 1/optim_div of the AdamW moments. A block's all-reduces under overlap are priced per rank
 * (plan_item_tp_time), not here. pt: the row's collectives per phase by kind (plan_tp_parts_of). */
static void items_add(plan_items *it, int i, const plan_layer_cost *c, const plan_tp_parts *pt, const double *eff,
                      const plan_item_shape *sh, bool block) {
    bool rc = sh->recompute, keep = sh->tp_recompute && block;
    double f = c->flops[PLAN_F] / eff[PLAN_F];
    it->ph[PLAN_F][i] += f;
    it->ph[PLAN_B][i] += c->flops[PLAN_B] / eff[PLAN_B] + (rc ? f : 0) + (keep ? c->recompute_flops / eff[PLAN_F] : 0);
    it->ph[PLAN_W][i] += c->flops[PLAN_W] / eff[PLAN_W];
    it->mem_fixed[i] += c->param_bytes + c->grad_bytes + c->optim_bytes / sh->optim_div;
    it->mem_act[i] += rc ? c->input_bytes : keep ? c->keep_bytes : c->act_bytes;
    it->grad[i] += c->grad_bytes;
    if (block && it->overlap) return;
    for (int ph = 0; ph < PLAN_N_PHASES; ph++) {
        bool again = rc && ph == PLAN_B, rebuild = keep && ph == PLAN_B;
        it->tp_bytes[ph][i] += pt[ph].ar_bytes + (again ? pt[PLAN_F].ar_bytes : 0);
        it->tp_coll[ph][i] += pt[ph].ar_coll + (again ? pt[PLAN_F].ar_coll : 0);
        it->sg_bytes[ph][i] += pt[ph].sg_bytes + (again ? pt[PLAN_F].sg_bytes : 0) + (rebuild ? c->recompute_tp_bytes : 0);
        it->sg_coll[ph][i] += pt[ph].sg_coll + (again ? pt[PLAN_F].sg_coll : 0) + (rebuild ? c->recompute_tp_collectives : 0);
    }
}

static double *zeros(int n) { return pt_calloc((size_t)n, sizeof(double)); }

/* The block's numbers the per-rank overlap price needs (plan_item_tp_time). */
static void items_overlap(plan_items *it, const plan_layer_cost *blk, const double *eff, const plan_item_shape *sh) {
    it->overlap = sh->tp_overlap && sh->tp > 1 && sh->B > 1;
    it->recompute = sh->recompute;
    for (int ph = 0; ph < PLAN_N_PHASES; ph++) {
        plan_tp_block_pieces(blk, ph, it->blk_piece[ph]);
        for (int h = 0; h < 2; h++) it->blk_piece[ph][h] /= eff[ph];
        it->blk_tp_bytes[ph] = blk->tp_bytes[ph];
        it->blk_tp_coll[ph] = blk->tp_collectives[ph];
    }
}

/* What a stage holds besides its microbatches in flight while one is in its backward: whole-stage
 * recomputation rebuilds one microbatch's activations (a block's, and the embedding's or the
 * head's on the first and last chunk); communication-free recomputation one layer's act as the
 * rank's work buffer (the embedding and head keep their whole act per microbatch anyway). */
static void items_extra(plan_items *it, const plan_layer_cost *c, const plan_item_shape *sh) {
    if (sh->recompute) {
        it->extra_mid = c[PLAN_BLOCK].act_bytes;
        it->extra_first = c[PLAN_EMBED].act_bytes;
        it->extra_last = c[PLAN_HEAD].act_bytes;
    } else if (sh->tp_recompute) {
        it->extra_mid = c[PLAN_BLOCK].act_bytes;
    }
}

void plan_items_init(plan_items *it, const gpt_config *cfg, const plan_scale *s, const plan_item_shape *sh) {
    int L = cfg->n_layer;
    memset(it, 0, sizeof *it);
    it->n = L;
    it->tp = sh->tp;
    it->work = zeros(L), it->mem_fixed = zeros(L), it->mem_act = zeros(L), it->grad = zeros(L);
    for (int ph = 0; ph < PLAN_N_PHASES; ph++) {
        it->ph[ph] = zeros(L), it->tp_bytes[ph] = zeros(L), it->tp_coll[ph] = zeros(L);
        it->sg_bytes[ph] = zeros(L), it->sg_coll[ph] = zeros(L);
    }
    it->sp = sh->sp && sh->tp > 1;
    it->ln_bytes = plan_sp_ln_bytes(cfg, sh->tp, it->sp);
    plan_layer_cost c[PLAN_N_KINDS];
    plan_tp_parts pt[PLAN_N_KINDS][PLAN_N_PHASES];
    for (int k = 0; k < PLAN_N_KINDS; k++) {
        plan_layer_model_sp(cfg, k, sh->B, sh->T, sh->tp, it->sp, &c[k]);
        for (int ph = 0; ph < PLAN_N_PHASES; ph++) plan_tp_parts_of(cfg, k, sh->B, sh->T, sh->tp, it->sp, ph, &pt[k][ph]);
    }
    items_overlap(it, &c[PLAN_BLOCK], s->eff[PLAN_BLOCK], sh);
    for (int i = 0; i < L; i++) items_add(it, i, &c[PLAN_BLOCK], pt[PLAN_BLOCK], s->eff[PLAN_BLOCK], sh, true);
    items_add(it, 0, &c[PLAN_EMBED], pt[PLAN_EMBED], s->eff[PLAN_EMBED], sh, false);
    items_add(it, L - 1, &c[PLAN_HEAD], pt[PLAN_HEAD], s->eff[PLAN_HEAD], sh, false);
    for (int i = 0; i < L; i++) it->work[i] = it->ph[PLAN_F][i] + it->ph[PLAN_B][i] + it->ph[PLAN_W][i];
    items_extra(it, c, sh);
}

static double device_rate(const plan_device *d, const plan_scale *s) {
    return d->rate > 0 ? d->rate : d->speed * s->ref_rate;
}

/* Cluster device of replica d, pipeline rank p, TP rank t. */
static int dev_at(const plan_ranks *r, int d, int p, int t) {
    int i = (d * r->P + p) * r->tp + t;
    return r->devices ? r->devices[i] : i;
}

/* Slowest bandwidth and latency seen so far, with the link (bw, lat) added. */
static void worst_link(double *bw, double *lat, double b, double l) {
    if (b < *bw) *bw = b;
    if (l > *lat) *lat = l;
}

/* Rank p's rate, memory and TP link (slowest over replicas and TP ranks); the data-parallel ring
 * of each of its TP ranks joins the replicas' devices. */
static void rank_init(plan_ranks *r, const plan_cluster *k, const plan_scale *s, int p, int *group) {
    r->rate[p] = INFINITY, r->cap[p] = INFINITY, r->tp_bw[p] = INFINITY, r->tp_lat[p] = 0;
    double bw, lat;
    for (int d = 0; d < r->D; d++) {
        for (int t = 0; t < r->tp; t++) {
            const plan_device *dv = &k->dev[group[t] = dev_at(r, d, p, t)];
            r->rate[p] = fmin(r->rate[p], device_rate(dv, s));
            r->cap[p] = fmin(r->cap[p], dv->memory);
        }
        plan_cluster_group_link(k, group, r->tp, &bw, &lat);
        worst_link(&r->tp_bw[p], &r->tp_lat[p], bw, lat);
    }
    for (int t = 0; t < r->tp; t++) {
        for (int d = 0; d < r->D; d++) group[d] = dev_at(r, d, p, t);
        plan_cluster_group_link(k, group, r->D, &bw, &lat);
        worst_link(&r->reduce_bw, &r->reduce_lat, bw, lat);
    }
}

void plan_ranks_init(plan_ranks *r, const plan_cluster *k, const plan_scale *s, int P, int D, int tp,
                     const int *devices) {
    memset(r, 0, sizeof *r);
    r->P = P; r->D = D; r->tp = tp > 0 ? tp : 1; r->devices = devices;
    r->rate = pt_malloc(sizeof(double) * (size_t)P);
    r->cap = pt_malloc(sizeof(double) * (size_t)P);
    r->tp_bw = pt_malloc(sizeof(double) * (size_t)P);
    r->tp_lat = pt_malloc(sizeof(double) * (size_t)P);
    r->reduce_bw = INFINITY;
    int *group = pt_malloc(sizeof(int) * (size_t)(D > r->tp ? D : r->tp));
    for (int p = 0; p < P; p++) rank_init(r, k, s, p, group);
    free(group);
}

void plan_ranks_free(plan_ranks *r) {
    free(r->rate); free(r->cap); free(r->tp_bw); free(r->tp_lat);
    memset(r, 0, sizeof *r);
}

void plan_ranks_link(const plan_ranks *r, const plan_cluster *k, int a, int b, double *bw, double *lat) {
    *bw = INFINITY; *lat = 0;
    for (int d = 0; d < r->D; d++)
        for (int t = 0; t < r->tp; t++) {
            int pair[2] = { dev_at(r, d, a, t), dev_at(r, d, b, t) };
            double w, l;
            plan_cluster_group_link(k, pair, 2, &w, &l);
            worst_link(bw, lat, w, l);
        }
}

/* Exposed seconds of one block's ping-pong in phase ph on rank p. */
static double block_pingpong(const plan_items *it, const plan_ranks *r, int p, int ph) {
    return plan_tp_pingpong(r->tp, it->blk_tp_bytes[ph], it->blk_tp_coll[ph], it->blk_piece[ph], r->rate[p],
                            r->tp_bw[p], r->tp_lat[p]);
}

double plan_item_tp_time(const plan_items *it, const plan_ranks *r, int p, int i, int ph) {
    double t = sim_allreduce_time(r->tp, it->tp_bytes[ph][i], (int)it->tp_coll[ph][i], r->tp_bw[p], r->tp_lat[p]) +
               sim_rsag_time(r->tp, it->sg_bytes[ph][i], (int)it->sg_coll[ph][i], r->tp_bw[p], r->tp_lat[p]);
    if (!it->overlap || ph == PLAN_W) return t;
    t += block_pingpong(it, r, p, ph);
    return ph == PLAN_B && it->recompute ? t + block_pingpong(it, r, p, PLAN_F) : t;
}

sched *plan_make_sched(const char *name, int P, int M, int v) {
    sched_params sp = { .ranks = P, .microbatches = M, .chunks = v, .cost_f = 1, .cost_b = 1, .cost_w = 1 };
    return sched_generate(name, &sp);
}

/* Memory chunk k needs at peak with `held` microbatches in flight. */
static double chunk_mem(const plan_items *it, int K, const int *first, int k, int held) {
    double m = 0, a = 0;
    for (int i = first[k]; i < first[k + 1]; i++) { m += it->mem_fixed[i]; a += it->mem_act[i]; }
    double extra = it->extra_mid + (k == 0 ? it->extra_first : 0) + (k == K - 1 ? it->extra_last : 0);
    return m + held * a + (it->extra_mid > 0 ? extra : 0);
}

/* [K*n] seconds of TP all-reduces (F and B) of item i on chunk k's rank, or NULL at tp 1. */
static double *chunk_tp_times(const plan_items *it, const plan_ranks *r, const sched *s) {
    if (r->tp <= 1) return NULL;
    int K = s->n_stages, n = it->n;
    double *x = pt_malloc(sizeof(double) * (size_t)K * (size_t)n);
    for (int k = 0; k < K; k++)
        for (int i = 0; i < n; i++)
            x[(size_t)k * n + i] = plan_item_tp_time(it, r, s->stage_rank[k], i, PLAN_F) +
                                   plan_item_tp_time(it, r, s->stage_rank[k], i, PLAN_B);
    return x;
}

int plan_split_candidate(const plan_items *it, const plan_ranks *r, const sched *s, bool refine, int *first,
                         double *bottleneck) {
    int K = s->n_stages, *peak = pt_malloc(sizeof(int) * (size_t)K), *per_rank = pt_calloc((size_t)r->P, sizeof(int));
    double *buf = pt_malloc(sizeof(double) * 4 * (size_t)K), *speed = buf, *cap = buf + K, *held = buf + 2 * K,
           *extra = buf + 3 * K, *comm = chunk_tp_times(it, r, s);
    sched_peak_activations(s, peak);
    for (int k = 0; k < K; k++) per_rank[s->stage_rank[k]]++;
    for (int k = 0; k < K; k++) {
        int rk = s->stage_rank[k];
        speed[k] = r->rate[rk];
        cap[k] = r->cap[rk] / per_rank[rk];   /* a rank's chunks share its memory evenly */
        held[k] = peak[k];
        extra[k] = it->extra_mid > 0 ? it->extra_mid + (k == 0 ? it->extra_first : 0) + (k == K - 1 ? it->extra_last : 0) : 0;
    }
    plan_chain c = { .n = it->n, .K = K, .work = it->work, .mem_fixed = it->mem_fixed, .mem_act = it->mem_act,
                     .speed = speed, .cap = cap, .inflight = held, .mem_extra = extra, .extra = comm };
    int rc = plan_split(&c, first, bottleneck);
    if (rc == 0 && refine) rc = plan_split_refine(&c, *bottleneck, first);
    free(peak); free(per_rank); free(buf); free(comm);
    return rc;
}

double plan_peak_need(const plan_items *it, const sched *s, const int *first, int *rank_out) {
    int K = s->n_stages, *peak = pt_malloc(sizeof(int) * (size_t)K);
    double *need = pt_calloc((size_t)s->n_ranks, sizeof(double)), worst = 0;
    sched_peak_activations(s, peak);
    for (int k = 0; k < K; k++) need[s->stage_rank[k]] += chunk_mem(it, K, first, k, peak[k]);
    for (int p = 0; p < s->n_ranks; p++)
        if (need[p] > worst) { worst = need[p]; if (rank_out) *rank_out = p; }
    free(peak); free(need);
    return worst;
}

/* Simulator costs of the split: per-chunk F/B/W on its rank (F and B with their TP all-reduces:
 * they block the compute stream; W has none), messages of B*T*C floats (each TP rank sends its
 * whole copy to its counterpart, in parallel; under sp its N/tp rows, p2p / tp), the
 * data-parallel gradient ring as REDUCE_GRAD (under sp after the chunk's one all-reduce of its
 * blocks' layer-norm gradients over the TP group, as the runtime sums them before the ring),
 * links between the ranks of consecutive chunks. */
static void score_costs(const plan_cluster *k, const plan_items *it, const plan_ranks *r, const sched *s,
                        const int *first, double p2p, sim_costs *c) {
    int K = s->n_stages, D = r->D;
    sim_costs_init(c, K, 0, 0, 0);
    c->latency = k->inter_lat;
    c->bandwidth = k->inter_bw;
    c->tp = r->tp;
    for (int g = 0; g < K; g++) {
        int p = s->stage_rank[g];
        double rate = r->rate[p], grad = 0, ln = 0;
        for (int i = first[g]; i < first[g + 1]; i++) {
            c->tp_f[g] += plan_item_tp_time(it, r, p, i, PLAN_F);
            c->tp_b[g] += plan_item_tp_time(it, r, p, i, PLAN_B);
            c->f[g] += it->ph[PLAN_F][i] / rate;
            c->b[g] += it->ph[PLAN_B][i] / rate;
            c->w[g] += it->ph[PLAN_W][i] / rate;
            grad += it->grad[i];
            ln += it->ln_bytes;
        }
        c->f[g] += c->tp_f[g];
        c->b[g] += c->tp_b[g];
        c->act_bytes[g] = it->sp ? p2p / r->tp : p2p;
        c->reduce[g] = sim_allreduce_time(D, grad, 1, r->reduce_bw, r->reduce_lat) +
                       sim_allreduce_time(r->tp, ln, ln > 0, r->tp_bw[p], r->tp_lat[p]);
        if (g + 1 < K && s->stage_rank[g] != s->stage_rank[g + 1]) {
            double bw, lat;
            plan_ranks_link(r, k, s->stage_rank[g], s->stage_rank[g + 1], &bw, &lat);
            sim_costs_set_link(c, s->stage_rank[g], s->stage_rank[g + 1], lat, bw, 0);
        }
    }
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

int plan_score(const gpt_config *cfg, const plan_cluster *k, const plan_items *it, const plan_ranks *r,
               const sched *s, const int *first, long global_batch, plan_layout *p) {
    sim_costs c;
    score_costs(k, it, r, s, first, plan_p2p_bytes(cfg, p->mb_size, p->T), &c);
    sim_result res;
    sim_opts o = { .iterations = 1 };
    int rc = sim_run(s, &c, &o, &res);
    if (rc < 0) { sim_costs_free(&c); return -1; }
    int K = s->n_stages;
    layout_arrays(p, K);
    for (int g = 0; g < K; g++) {
        p->split[g] = first[g + 1] - first[g];
        p->stage_inflight[g] = res.peak_mb[g];
        p->stage_mem[g] = chunk_mem(it, K, first, g, res.peak_mb[g]);
        p->stage_time[g] = c.f[g] + c.b[g] + c.w[g];
    }
    p->step_time = res.iteration_time;
    p->bubble = res.bubble_fraction;
    p->tokens_per_s = res.iteration_time > 0 ? (double)global_batch * p->T / res.iteration_time : 0;
    sim_result_free(&res);
    sim_costs_free(&c);
    return 0;
}

/* The numbers of a layout the cluster and the model can hold, or -1 with an error naming them. */
static int layout_check(const gpt_config *cfg, const plan_cluster *k, const plan_layout *p, int tp) {
    if (p->P < 1 || p->D < 1 || p->M < 1 || p->mb_size < 1 || p->T < 1 || tp < 1)
        return pt_seterr("plan: stages %d, dp %d, tp %d, microbatches %d, microbatch size %d and seq %d must all "
                         "be >= 1", p->P, p->D, tp, p->M, p->mb_size, p->T);
    if (p->T > cfg->n_positions) return pt_seterr("plan: seq %d is more than n_positions %d", p->T, cfg->n_positions);
    if (cfg->n_head % tp)
        return pt_seterr("plan: tp %d does not divide n_head %d (each TP rank holds n_head / tp heads)", tp,
                         cfg->n_head);
    if (p->zero != 0 && p->zero != 1) return pt_seterr("plan: zero is %d; it must be 0 or 1", p->zero);
    if ((p->tp_overlap || p->tp_recompute) && tp < 2)
        return pt_seterr("plan: %s needs tp >= 2 (it works on a TP group's all-reduces); tp is %d",
                         p->tp_overlap ? "tp_overlap" : "tp_recompute", tp);
    if (p->tp_recompute && p->recompute)
        return pt_seterr("plan: tp_recompute and recompute are two ways of recomputing: keep one");
    if (p->sp && tp < 2)
        return pt_seterr("plan: sp needs tp >= 2 (sequence parallelism splits the activation stream over the ranks "
                         "of a TP group); tp is %d", tp);
    if (p->sp && p->tp_overlap)
        return pt_seterr("plan: sp and tp_overlap cannot be combined (under sp a block reduce-scatters and "
                         "all-gathers; tp_overlap overlaps all-reduces only): keep one");
    if (p->sp && gpt_sp_check_rows(p->mb_size, p->T, tp) < 0) return pt_adderr("plan: ");
    long n = (long)p->P * p->D * tp;
    if (n > k->n_devices)
        return pt_seterr("plan: tp %d x dp %d x stages %d = %ld devices, the cluster has %d", tp, p->D, p->P, n,
                         k->n_devices);
    for (long i = 0; p->devices && i < n; i++)
        if (p->devices[i] < 0 || p->devices[i] >= k->n_devices)
            return pt_seterr("plan: devices[%ld] = %d is not a device of the cluster (0..%d)", i, p->devices[i],
                             k->n_devices - 1);
    return 0;
}

/* One layout ready to score: its schedule, chunk boundaries, items and ranks. */
typedef struct {
    sched *s;
    int *first;              /* [K+1] */
    plan_items it;
    plan_ranks r;
    bool ready;              /* it and r are built */
} layout_ctx;

static void ctx_close(layout_ctx *x) {
    if (x->ready) { plan_items_free(&x->it); plan_ranks_free(&x->r); }
    free(x->first);
    sched_free(x->s);
    memset(x, 0, sizeof *x);
}

static int ctx_open(layout_ctx *x, const gpt_config *cfg, const plan_cluster *k, const plan_costs *costs,
                    const plan_layout *p) {
    memset(x, 0, sizeof *x);
    int tp = p->tp > 0 ? p->tp : 1;
    if (layout_check(cfg, k, p, tp) < 0) return -1;
    sched *s = plan_make_sched(p->schedule, p->P, p->M, p->chunks);
    if (!s) return -1;
    int K = s->n_stages;
    x->first = pt_malloc(sizeof(int) * (size_t)(K + 1));
    x->first[0] = 0;
    for (int g = 0; g < K; g++) x->first[g + 1] = x->first[g] + (p->split ? p->split[g] : 0);
    if (s->n_pipes != 1 || !p->split || x->first[K] != cfg->n_layer) {
        pt_seterr("plan: the split must give all %d blocks to the %d chunks of one pipe", cfg->n_layer, K);
        sched_free(s);
        ctx_close(x);
        return -1;
    }
    x->s = s;
    x->ready = true;
    plan_scale sc;
    plan_scale_init(&sc, costs, k, p->mb_size);
    plan_item_shape sh = { p->mb_size, p->T, tp, p->zero ? p->D : 1, p->recompute, p->tp_overlap, p->tp_recompute, p->sp };
    plan_items_init(&x->it, cfg, &sc, &sh);
    plan_ranks_init(&x->r, k, &sc, p->P, p->D, tp, p->devices);
    return 0;
}

int plan_evaluate(const gpt_config *cfg, const plan_cluster *k, const plan_costs *costs, plan_layout *p) {
    layout_ctx x;
    if (ctx_open(&x, cfg, k, costs, p) < 0) return -1;
    int rc = plan_score(cfg, k, &x.it, &x.r, x.s, x.first, (long)p->D * p->M * p->mb_size, p);
    ctx_close(&x);
    return rc;
}

int plan_sim_costs(const gpt_config *cfg, const plan_cluster *k, const plan_costs *costs, const plan_layout *p,
                   sim_costs *out, sched **s) {
    layout_ctx x;
    if (ctx_open(&x, cfg, k, costs, p) < 0) return -1;
    score_costs(k, &x.it, &x.r, x.s, x.first, plan_p2p_bytes(cfg, p->mb_size, p->T), out);
    *s = x.s;
    x.s = NULL;   /* the caller's now */
    ctx_close(&x);
    return 0;
}

int plan_rank_memory(const plan_cluster *k, const plan_layout *p, double *need, double *have) {
    sched *s = plan_make_sched(p->schedule, p->P, p->M, p->chunks);
    if (!s) return -1;
    int tp = p->tp > 0 ? p->tp : 1, over = 0;
    for (int r = 0; r < p->P; r++) {
        need[r] = 0, have[r] = INFINITY;
        for (int d = 0; d < p->D; d++)
            for (int t = 0; t < tp; t++) {
                int i = (d * p->P + r) * tp + t;
                have[r] = fmin(have[r], k->dev[p->devices ? p->devices[i] : i].memory);
            }
    }
    for (int g = 0; g < s->n_stages && g < p->K; g++) need[s->stage_rank[g]] += p->stage_mem[g];
    for (int r = 0; r < p->P; r++) over += need[r] > have[r];
    sched_free(s);
    return over;
}

/* True when every chunk of first[] fits its share of its rank's memory (the split's own rule). */
static bool split_fits(const plan_items *it, const plan_ranks *r, const sched *s, const int *peak, const int *first) {
    int K = s->n_stages, *per_rank = pt_calloc((size_t)s->n_ranks, sizeof(int));
    bool ok = true;
    for (int g = 0; g < K; g++) per_rank[s->stage_rank[g]]++;
    for (int g = 0; g < K && ok; g++) {
        int rk = s->stage_rank[g];
        ok = chunk_mem(it, K, first, g, peak[g]) <= r->cap[rk] / per_rank[rk];
    }
    free(per_rank);
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

int plan_polish(const gpt_config *cfg, const plan_cluster *k, const plan_items *it, const plan_ranks *r,
                const sched *s, int *first, long global_batch, plan_layout *p, int budget) {
    int K = s->n_stages, sims = 0, *peak = pt_malloc(sizeof(int) * (size_t)K);
    int *trial = pt_malloc(sizeof(int) * (size_t)(K + 1));
    sched_peak_activations(s, peak);
    bool improved = true;
    while (improved && sims < budget) {
        improved = false;
        for (int a = 0; a < K && !improved && sims < budget; a++)
            for (int b = 0; b < K && !improved && sims < budget; b++) {
                if (a == b || first[a + 1] - first[a] < 2 || !move_allowed(s, a, b)) continue;
                memcpy(trial, first, sizeof(int) * (size_t)(K + 1));
                move_block(trial, a, b);
                if (!split_fits(it, r, s, peak, trial)) continue;
                plan_layout q = *p;
                q.split = NULL; q.stage_mem = NULL; q.stage_time = NULL; q.stage_inflight = NULL; q.devices = NULL;
                sims++;
                if (plan_score(cfg, k, it, r, s, trial, global_batch, &q) == 0 &&
                    q.step_time < p->step_time * (1 - PLAN_TIE_REL)) {
                    memcpy(first, trial, sizeof(int) * (size_t)(K + 1));
                    q.devices = p->devices;
                    p->devices = NULL;
                    plan_layout_free(p);
                    *p = q;
                    improved = true;
                } else {
                    plan_layout_free(&q);
                }
            }
    }
    free(peak); free(trial);
    return sims;
}
