/* One pipeline rank's memory model, the one both the planner (a split's fit, a plan's stage
 * memory) and train --adapt (its memory limit) use: what a rank holds whatever the schedule, plus
 * one activation set per microbatch in flight, plus what a backward holds besides; a chunk's
 * memory from its items, and with --balance-memory the lend plan's (sched/sched_lend.h). Not
 * here: where the numbers come from (plan_items.c's layer costs, the runtime's run_mem). */
#include "plan/plan_int.h"
#include "sched/sched_lend.h"
#include "util/pt.h"
#include <math.h>
#include <stdlib.h>

double plan_mem_need(const plan_mem_model *m, double held) {
    double kv_mb = m->K > 1 && held > 0 ? ceil((held - 1) / m->K) + 1 : 0;
    return m->fixed + held * m->act + m->extra + kv_mb * m->kv;
}

int plan_mem_held_max(const plan_mem_model *m, double have, int cap) {
    if (!(plan_mem_need(m, 0) <= have)) return -1;
    if (!(m->act > 0)) return cap;
    double h = floor((have - m->fixed - m->extra) / m->act);
    int n = h >= cap ? cap : (int)h;
    while (n > 0 && plan_mem_need(m, n) > have) n--;   /* the rounding of the division, not the rule */
    while (n < cap && plan_mem_need(m, n + 1) <= have) n++;
    return n;
}

/* The extra of a chunk holding items [first, end) (0 when nothing is rebuilt), in layer order. */
double plan_chunk_extra(const plan_items *it, int first, int end) {
    if (!(it->extra_mid > 0)) return 0;
    double x = it->extra_mid;
    for (int j = 0; j < it->n_extra; j++)
        if (it->extra_item[j] >= first && it->extra_item[j] < end) x += it->extra_bytes[j];
    return x;
}

/* chunk_extra of chunk k of K before the split is known: the layers that travel with the first
 * block (item 0) are always chunk 0's, those with the last block the last chunk's; those with a
 * block in between are left out (the split decides their chunk). */
double plan_chunk_extra_any_split(const plan_items *it, int k, int K) {
    if (K == 1) return plan_chunk_extra(it, 0, it->n);
    if (k == 0) return plan_chunk_extra(it, 0, 1);
    return plan_chunk_extra(it, k == K - 1 ? it->n - 1 : 0, k == K - 1 ? it->n : 0);
}

/* Memory chunk k needs at peak with `held` microbatches in flight. */
double plan_chunk_mem(const plan_items *it, int K, const int *first, int k, int held) {
    plan_mem_model m = { 0, 0, 0, 0, it->K };
    for (int i = first[k]; i < first[k + 1]; i++) {
        m.fixed += it->mem_fixed[i];
        m.act += it->mem_act[i];
        m.kv += it->mem_kv[i];
    }
    m.extra = plan_chunk_extra(it, first[k], first[k + 1]);
    return plan_mem_need(&m, held);
}

/* What an asynchronous schedule's chunk k keeps besides the live weights and the activation sets
 * in flight, in bytes, as the executor allocates it (run/executor.c, run/exec_state.c): a pass of
 * W steps (--async-window) is one schedule of W x M microbatches, and each keeps for the whole
 * pass its boundary buffers (the output and the incoming gradient unless the chunk is the last,
 * the input and its gradient unless it is the first: p2p bytes each), a float of loss on the last
 * chunk and, for pipedream, its stash (a copy of the chunk's fp32 weights: its gradient bytes);
 * 2bw keeps one older version instead (s->weight_versions - 1); both keep one more copy aside while
 * a backward runs on the stashed or older weights (the executor's `live`). 0 for a synchronous
 * schedule. One chunk per rank (the asynchronous schedules take no more). */
static double chunk_window(const plan_items *it, const sched *s, const int *first, int k) {
    if (!s->async) return 0;
    double copy = 0, n = (double)it->window * s->n_mb;   /* the pass's microbatches */
    int K = s->n_stages;
    for (int i = first[k]; i < first[k + 1]; i++) copy += it->grad[i];
    double per_mb = (2.0 * (k > 0) + 2.0 * (k < K - 1)) * it->p2p + (k == K - 1 ? sizeof(float) : 0);
    return n * per_mb + (1 + (s->weight_versions > 0 ? s->weight_versions - 1 : n)) * copy;
}

/* Memory of every chunk of the split first[] at its peak[k] microbatches in flight (out[K]), or
 * with --balance-memory where s can lend (it->balance; one chunk per rank): its fixed part plus
 * the lend plan's activations of its rank (its own kept sets and what it keeps for others; the
 * items are the plan's layers; the plan balances fixed part + activations). */
void plan_chunks_need(const plan_items *it, const sched *s, const int *first, const int *peak, double *out) {
    int K = s->n_stages;
    sched_lend_plan lp;
    if (!it->balance || sched_lend_check(s) < 0) {
        for (int k = 0; k < K; k++) out[k] = plan_chunk_mem(it, K, first, k, peak[k]) + chunk_window(it, s, first, k);
        return;
    }
    int *nl = pt_malloc(sizeof(int) * (size_t)K);
    const double **bytes = pt_malloc(sizeof *bytes * (size_t)K);
    double *fixed = pt_malloc(sizeof(double) * (size_t)K);
    for (int k = 0; k < K; k++) {
        nl[k] = first[k + 1] - first[k];
        bytes[k] = it->mem_act + first[k];
        fixed[k] = plan_chunk_mem(it, K, first, k, 0);   /* what it holds with no microbatch in flight */
    }
    sched_lend_balance(s, nl, bytes, fixed, &lp);
    for (int k = 0; k < K; k++) out[k] = fixed[k] + sched_lend_rank_bytes(&lp, k);
    sched_lend_plan_free(&lp);
    free(nl);
    free(bytes);
    free(fixed);
}

/* --balance-memory, for the split before it is known: each stage's activations under the lend plan
 * of whole sets (one layer of one unit per stage), in microbatches ([K], malloc'd), or NULL
 * when s cannot lend. The split's items may lend finer; the exact bytes judge it afterwards
 * (plan_chunks_need). */
double *plan_lend_units(const sched *s) {
    int K = s->n_stages, *nl = pt_malloc(sizeof(int) * (size_t)K);
    double one = 1, *out = NULL;
    const double **bytes = pt_malloc(sizeof *bytes * (size_t)K);
    sched_lend_plan lp;
    for (int k = 0; k < K; k++) { nl[k] = 1; bytes[k] = &one; }
    if (sched_lend_check(s) == 0 && sched_lend_balance(s, nl, bytes, NULL, &lp) == 0) {
        out = pt_malloc(sizeof(double) * (size_t)K);
        for (int k = 0; k < K; k++) out[k] = sched_lend_rank_bytes(&lp, k);
        sched_lend_plan_free(&lp);
    }
    free(nl);
    free(bytes);
    return out;
}
