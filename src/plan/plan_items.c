/* A candidate's per-layer numbers: the scale of each kind and phase from profiled costs, the
 * chain items (a block each, with the layers that travel with it) one TP rank computes and
 * holds, and the ranks of a device placement (rates, memory caps, links, the TP collectives'
 * time). Not the split, the simulation or the search (plan_eval.c, plan_search.c). */
#include "plan/plan_int.h"
#include "util/pt.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

void plan_scale_init(plan_scale *s, const plan_costs *costs, const plan_cluster *k, int B) {
    for (int a = 0; a < PLAN_N_KINDS; a++)
        for (int b = 0; b < PLAN_N_PHASES; b++) s->eff[a][b] = 1;
    s->ref_rate = k->reference_flops;
    s->step_flops = 0;
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
    s->step_flops = costs->step_per_param * s->ref_rate;
    for (int a = 0; a < PLAN_N_KINDS; a++)
        for (int ph = 0; ph < PLAN_N_PHASES; ph++) {
            double r = plan_costs_rate(costs, a, ph, B);
            if (r > 0) s->eff[a][ph] = r / s->ref_rate;
        }
}

void plan_items_free(plan_items *it) {
    free(it->work); free(it->mem_fixed); free(it->mem_act); free(it->grad); free(it->opt);
    free(it->att[0]); free(it->att[1]); free(it->mem_kv);
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
                      double step_flops, const plan_item_shape *sh, bool block) {
    bool rc = sh->recompute, keep = sh->tp_recompute && block;
    double f = c->flops[PLAN_F] / eff[PLAN_F];
    it->ph[PLAN_F][i] += f;
    it->ph[PLAN_B][i] += c->flops[PLAN_B] / eff[PLAN_B] + (rc ? f : 0) + (keep ? c->recompute_flops / eff[PLAN_F] : 0);
    it->ph[PLAN_W][i] += c->flops[PLAN_W] / eff[PLAN_W];
    it->mem_fixed[i] += c->param_bytes + c->grad_bytes + c->optim_bytes / sh->optim_div;
    it->mem_act[i] += rc ? c->input_bytes : keep ? c->keep_bytes
                    : c->act_bytes - (it->K > 1 ? c->att_act_bytes : 0);   /* a chunk keeps no probabilities */
    it->att[0][i] += c->att_flops[0] / eff[PLAN_F];
    it->att[1][i] += c->att_flops[1] / eff[PLAN_B];
    it->mem_kv[i] += c->kv_bytes;
    it->grad[i] += c->grad_bytes;
    it->opt[i] += c->param_bytes / sizeof(float) * step_flops;
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
 * recomputation rebuilds one microbatch's activations (a block's, and those of the other layers
 * that travel with the chunk's blocks: the embedding's on the first chunk, the head's on the
 * last); communication-free recomputation one layer's act as the rank's work buffer (the
 * embedding and head keep their whole act per microbatch anyway). */
static void items_extra(plan_items *it, const gpt_config *cfg, const plan_layer_cost *c, const plan_item_shape *sh) {
    it->n_extra = 0;
    if (sh->recompute || sh->tp_recompute) it->extra_mid = c[PLAN_BLOCK].act_bytes;
    if (!sh->recompute) return;
    for (int l = 0; l < gpt_config_num_layers(cfg); l++) {
        int k = gpt_config_layer_kind(cfg, l);
        if (k == GPT_LAYER_BLOCK) continue;
        it->extra_item[it->n_extra] = gpt_config_layer_item(cfg, l);
        it->extra_bytes[it->n_extra++] = c[k].act_bytes;
    }
}

/* Sequence chunks: the microbatch's numbers to a unit's (a chunk's mean, 1/K of them; the TP
 * collectives as many, each of 1/K the bytes), B with the scores a chunk recomputes (half of F's
 * attention). Kept keys and values stay per microbatch. */
static void items_per_chunk(plan_items *it) {
    double K = it->K;
    for (int i = 0; i < it->n; i++) {
        it->ph[PLAN_B][i] += it->att[0][i] / 2;
        it->att[1][i] += it->att[0][i] / 2;
        for (int ph = 0; ph < PLAN_N_PHASES; ph++) {
            it->ph[ph][i] /= K;
            it->tp_bytes[ph][i] /= K;
            it->sg_bytes[ph][i] /= K;
        }
        it->att[0][i] /= K, it->att[1][i] /= K;
        it->mem_act[i] /= K;
    }
}

/* A kind's efficiencies: the profiled ones of the built-in kinds, 1 for a registered kind. */
static const double *kind_eff(const plan_scale *s, int k) {
    static const double one[PLAN_N_PHASES] = { 1, 1, 1 };
    return k < PLAN_N_KINDS ? s->eff[k] : one;
}

void plan_items_init(plan_items *it, const gpt_config *cfg, const plan_scale *s, const plan_item_shape *sh) {
    int L = cfg->n_layer, nk = gpt_kind_count();
    memset(it, 0, sizeof *it);
    it->n = L;
    it->tp = sh->tp;
    it->work = zeros(L), it->mem_fixed = zeros(L), it->mem_act = zeros(L), it->grad = zeros(L), it->opt = zeros(L);
    it->K = sh->seq_chunks > 1 ? sh->seq_chunks : 1;
    it->att[0] = zeros(L), it->att[1] = zeros(L), it->mem_kv = zeros(L);
    for (int ph = 0; ph < PLAN_N_PHASES; ph++) {
        it->ph[ph] = zeros(L), it->tp_bytes[ph] = zeros(L), it->tp_coll[ph] = zeros(L);
        it->sg_bytes[ph] = zeros(L), it->sg_coll[ph] = zeros(L);
    }
    it->sp = sh->sp && sh->tp > 1;
    it->balance = sh->balance && !sh->recompute && !sh->tp_recompute && sh->seq_chunks <= 1;
    it->window = sh->window > 0 ? sh->window : PLAN_ASYNC_WINDOW_DEFAULT;
    it->p2p = plan_p2p_bytes(cfg, sh->B, sh->T) / (sh->sp && sh->tp > 1 ? sh->tp : 1);
    it->ln_bytes = plan_sp_ln_bytes(cfg, sh->tp, it->sp);
    plan_layer_cost c[GPT_MAX_KINDS];
    plan_tp_parts pt[GPT_MAX_KINDS][PLAN_N_PHASES];
    for (int k = 0; k < nk; k++) {
        plan_layer_model_sp(cfg, k, sh->B, sh->T, sh->tp, it->sp, &c[k]);
        for (int ph = 0; ph < PLAN_N_PHASES; ph++) plan_tp_parts_of(cfg, k, sh->B, sh->T, sh->tp, it->sp, ph, &pt[k][ph]);
    }
    items_overlap(it, &c[PLAN_BLOCK], s->eff[PLAN_BLOCK], sh);
    for (int i = 0; i < L; i++) items_add(it, i, &c[PLAN_BLOCK], pt[PLAN_BLOCK], s->eff[PLAN_BLOCK], s->step_flops, sh, true);
    for (int l = 0; l < gpt_config_num_layers(cfg); l++) {   /* the other layers, with their blocks */
        int k = gpt_config_layer_kind(cfg, l);
        if (k != GPT_LAYER_BLOCK)
            items_add(it, gpt_config_layer_item(cfg, l), &c[k], pt[k], kind_eff(s, k), s->step_flops, sh, false);
    }
    if (it->K > 1) items_per_chunk(it);
    for (int i = 0; i < L; i++) it->work[i] = it->ph[PLAN_F][i] + it->ph[PLAN_B][i] + it->ph[PLAN_W][i];
    items_extra(it, cfg, c, sh);
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

sched *plan_make_sched(const char *name, int P, int M, int v, int K) {
    sched_params sp = { .ranks = P, .microbatches = M, .chunks = v, .seq_chunks = K, .cost_f = 1, .cost_b = 1,
                        .cost_w = 1 };
    return sched_generate(name, &sp);
}

