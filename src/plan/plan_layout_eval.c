/* One layout scored as it is (plan_evaluate), its simulator costs (plan_sim_costs), and its
 * ranks' memory against their devices (plan_rank_memory): the candidate's context built from a
 * plan_layout, then plan_eval.c's scoring. */
#include "plan/plan_int.h"
#include "util/pt.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

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
    if (p->seq_chunks > 1 && (p->T % p->seq_chunks || p->recompute || p->tp_overlap || p->tp_recompute || p->sp))
        return pt_seterr("plan: seq_chunks %d needs a seq it divides (%d) and no recompute, tp_overlap, "
                         "tp_recompute or sp", p->seq_chunks, p->T);
    if (p->async_window < 0 || p->async_window > PLAN_ASYNC_WINDOW_MAX)
        return pt_seterr("plan: async_window %d must be in 1..%d (steps a pass; 0: train's default %d)",
                         p->async_window, PLAN_ASYNC_WINDOW_MAX, PLAN_ASYNC_WINDOW_DEFAULT);
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
    sched *s = plan_make_sched(p->schedule, p->P, p->M, p->chunks, p->seq_chunks);
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
    plan_item_shape sh = { p->mb_size, p->T, tp, p->zero ? p->D : 1, p->recompute, p->tp_overlap, p->tp_recompute, p->sp,
                           p->seq_chunks, p->balance_memory, p->async_window };
    plan_items_init(&x->it, cfg, &sc, &sh);
    plan_ranks_init(&x->r, k, &sc, p->P, p->D, tp, p->devices);
    return 0;
}

int plan_evaluate(const gpt_config *cfg, const plan_cluster *k, const plan_costs *costs, plan_layout *p) {
    layout_ctx x;
    if (ctx_open(&x, cfg, k, costs, p) < 0) return -1;
    int rc = plan_score(cfg, k, &x.it, &x.r, x.s, x.first, (long)p->D * p->M * p->mb_size, p);
    if (x.s->async) p->async_window = x.it.window;   /* the window its memory priced */
    ctx_close(&x);
    return rc;
}

int plan_sim_costs(const gpt_config *cfg, const plan_cluster *k, const plan_costs *costs, const plan_layout *p,
                   sim_costs *out, sched **s) {
    layout_ctx x;
    if (ctx_open(&x, cfg, k, costs, p) < 0) return -1;
    plan_score_costs(k, &x.it, &x.r, x.s, x.first, plan_p2p_bytes(cfg, p->mb_size, p->T), out);
    *s = x.s;
    x.s = NULL;   /* the caller's now */
    ctx_close(&x);
    return 0;
}

int plan_rank_memory(const plan_cluster *k, const plan_layout *p, double *need, double *have) {
    sched *s = plan_make_sched(p->schedule, p->P, p->M, p->chunks, p->seq_chunks);
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

