/* One candidate layout, from costs to a simulated step: per-layer reference FLOPs and bytes
 * (chain items), ranks' speeds, caps and links for a device placement, the exact split for a
 * schedule, and scoring with the simulator. Not the search over candidates (plan_search.c). */
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
    plan_layer_model(&costs->cfg, PLAN_BLOCK, B, costs->T, &blk);
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
    for (int ph = 0; ph < PLAN_N_PHASES; ph++) free(it->ph[ph]);
    memset(it, 0, sizeof *it);
}

/* Adds one layer's costs to item i. */
static void items_add(plan_items *it, int i, const plan_layer_cost *c, const double *eff, bool recompute) {
    double f = c->flops[PLAN_F] / eff[PLAN_F];
    it->ph[PLAN_F][i] += f;
    it->ph[PLAN_B][i] += c->flops[PLAN_B] / eff[PLAN_B] + (recompute ? f : 0);
    it->ph[PLAN_W][i] += c->flops[PLAN_W] / eff[PLAN_W];
    it->mem_fixed[i] += c->param_bytes + c->grad_bytes + c->optim_bytes;
    it->mem_act[i] += recompute ? c->input_bytes : c->act_bytes;
    it->grad[i] += c->grad_bytes;
}

void plan_items_init(plan_items *it, const gpt_config *cfg, const plan_scale *s, int B, int T, bool recompute) {
    int L = cfg->n_layer;
    memset(it, 0, sizeof *it);
    it->n = L;
    it->work = pt_calloc((size_t)L, sizeof(double));
    it->mem_fixed = pt_calloc((size_t)L, sizeof(double));
    it->mem_act = pt_calloc((size_t)L, sizeof(double));
    it->grad = pt_calloc((size_t)L, sizeof(double));
    for (int ph = 0; ph < PLAN_N_PHASES; ph++) it->ph[ph] = pt_calloc((size_t)L, sizeof(double));
    plan_layer_cost c[PLAN_N_KINDS];
    for (int k = 0; k < PLAN_N_KINDS; k++) plan_layer_model(cfg, k, B, T, &c[k]);
    for (int i = 0; i < L; i++) items_add(it, i, &c[PLAN_BLOCK], s->eff[PLAN_BLOCK], recompute);
    items_add(it, 0, &c[PLAN_EMBED], s->eff[PLAN_EMBED], recompute);
    items_add(it, L - 1, &c[PLAN_HEAD], s->eff[PLAN_HEAD], recompute);
    for (int i = 0; i < L; i++) it->work[i] = it->ph[PLAN_F][i] + it->ph[PLAN_B][i] + it->ph[PLAN_W][i];
    if (recompute) {   /* during a backward the stage holds one microbatch's full activations again */
        it->extra_mid = c[PLAN_BLOCK].act_bytes;
        it->extra_first = c[PLAN_EMBED].act_bytes;
        it->extra_last = c[PLAN_HEAD].act_bytes;
    }
}

static double device_rate(const plan_device *d, const plan_scale *s) {
    return d->rate > 0 ? d->rate : d->speed * s->ref_rate;
}

void plan_ranks_init(plan_ranks *r, const plan_cluster *k, const plan_scale *s, int P, int D, const int *devices) {
    memset(r, 0, sizeof *r);
    r->P = P; r->D = D; r->devices = devices;
    r->rate = pt_malloc(sizeof(double) * (size_t)P);
    r->cap = pt_malloc(sizeof(double) * (size_t)P);
    r->reduce_bw = INFINITY;
    for (int p = 0; p < P; p++) {
        r->rate[p] = INFINITY; r->cap[p] = INFINITY;
        int node0 = -1;
        bool one_node = true;
        for (int d = 0; d < D; d++) {
            const plan_device *dv = &k->dev[devices ? devices[d * P + p] : d * P + p];
            r->rate[p] = fmin(r->rate[p], device_rate(dv, s));
            r->cap[p] = fmin(r->cap[p], dv->memory);
            if (node0 < 0) node0 = dv->node; else if (dv->node != node0) one_node = false;
        }
        double bw = one_node ? k->intra_bw[node0] : k->inter_bw, lat = one_node ? k->intra_lat[node0] : k->inter_lat;
        if (bw < r->reduce_bw) r->reduce_bw = bw;
        if (lat > r->reduce_lat) r->reduce_lat = lat;
    }
}

void plan_ranks_free(plan_ranks *r) {
    free(r->rate); free(r->cap);
    memset(r, 0, sizeof *r);
}

void plan_ranks_link(const plan_ranks *r, const plan_cluster *k, int a, int b, double *bw, double *lat) {
    *bw = INFINITY; *lat = 0;
    for (int d = 0; d < r->D; d++) {
        int da = r->devices ? r->devices[d * r->P + a] : d * r->P + a;
        int db = r->devices ? r->devices[d * r->P + b] : d * r->P + b;
        int na = k->dev[da].node, nb = k->dev[db].node;
        double w = na == nb ? k->intra_bw[na] : k->inter_bw, l = na == nb ? k->intra_lat[na] : k->inter_lat;
        if (w < *bw) *bw = w;
        if (l > *lat) *lat = l;
    }
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

int plan_split_candidate(const plan_items *it, const plan_ranks *r, const sched *s, bool refine, int *first,
                         double *bottleneck) {
    int K = s->n_stages, *peak = pt_malloc(sizeof(int) * (size_t)K), *per_rank = pt_calloc((size_t)r->P, sizeof(int));
    double *buf = pt_malloc(sizeof(double) * 4 * (size_t)K), *speed = buf, *cap = buf + K, *held = buf + 2 * K,
           *extra = buf + 3 * K;
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
                     .speed = speed, .cap = cap, .inflight = held, .mem_extra = extra };
    int rc = plan_split(&c, first, bottleneck);
    if (rc == 0 && refine) rc = plan_split_refine(&c, *bottleneck, first);
    free(peak); free(per_rank); free(buf);
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

/* Simulator costs of the split: per-chunk F/B/W on its rank, messages of B*T*C floats, the
 * data-parallel gradient ring as REDUCE_GRAD, links between the ranks of consecutive chunks. */
static void score_costs(const plan_cluster *k, const plan_items *it, const plan_ranks *r, const sched *s,
                        const int *first, double p2p, sim_costs *c) {
    int K = s->n_stages, D = r->D;
    sim_costs_init(c, K, 0, 0, 0);
    c->latency = k->inter_lat;
    c->bandwidth = k->inter_bw;
    for (int g = 0; g < K; g++) {
        double rate = r->rate[s->stage_rank[g]], grad = 0;
        for (int i = first[g]; i < first[g + 1]; i++) {
            c->f[g] += it->ph[PLAN_F][i] / rate;
            c->b[g] += it->ph[PLAN_B][i] / rate;
            c->w[g] += it->ph[PLAN_W][i] / rate;
            grad += it->grad[i];
        }
        c->act_bytes[g] = p2p;
        if (D > 1) c->reduce[g] = 2.0 * (D - 1) / D * grad / r->reduce_bw + 2.0 * (D - 1) * r->reduce_lat;
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

int plan_evaluate(const gpt_config *cfg, const plan_cluster *k, const plan_costs *costs, plan_layout *p) {
    if (p->P < 1 || p->D < 1 || p->M < 1 || p->mb_size < 1 || p->T < 1)
        return pt_seterr("plan: P, D, M, microbatch size and seq must be >= 1");
    if ((long)p->P * p->D > k->n_devices)
        return pt_seterr("plan: P x D = %d devices, the cluster has %d", p->P * p->D, k->n_devices);
    sched *s = plan_make_sched(p->schedule, p->P, p->M, p->chunks);
    if (!s) return -1;
    int K = s->n_stages, rc = -1, *first = pt_malloc(sizeof(int) * (size_t)(K + 1));
    first[0] = 0;
    for (int g = 0; g < K; g++) first[g + 1] = first[g] + (p->split ? p->split[g] : 0);
    if (s->n_pipes != 1 || !p->split || first[K] != cfg->n_layer) {
        pt_seterr("plan: the split must give all %d blocks to the %d chunks of one pipe", cfg->n_layer, K);
        goto done;
    }
    plan_scale sc;
    plan_scale_init(&sc, costs, k, p->mb_size);
    plan_items it;
    plan_ranks r;
    plan_items_init(&it, cfg, &sc, p->mb_size, p->T, p->recompute);
    plan_ranks_init(&r, k, &sc, p->P, p->D, p->devices);
    rc = plan_score(cfg, k, &it, &r, s, first, (long)p->D * p->M * p->mb_size, p);
    plan_items_free(&it);
    plan_ranks_free(&r);
done:
    free(first);
    sched_free(s);
    return rc;
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
