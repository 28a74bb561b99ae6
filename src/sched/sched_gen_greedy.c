/* The cost-aware greedy generator ("greedy"): the list scheduler (sched_gen_list.c) with the
 * caller's per-stage costs, link delays and per-stage memory limit, stage g on rank g or in a V.
 * Pure: no I/O. Not the simulator (sim/ times a given schedule; this builds one), not the
 * search over candidates (sched_gen_adaptive.c).
 * Legend: P ranks, S stages, M microbatches. */
#include "sched/gen.h"
#include "sched/gen_list.h"
#include "util/pt.h"
#include <stdlib.h>

/* Greedy: stage g on rank g (chunks 1), or a V (chunks 2: stage g on rank g for g < P, else
 * 2P-1-g). B and W split; the per-stage limit is p->mem_limit (0: none); a message between
 * neighbouring ranks r, r+1 takes p->link_delay[r] (NULL: nothing) after holding the link's
 * queue for p->link_busy[r] (NULL: nothing). */
sched *gen_greedy(const sched_params *p) {
    if (gen_check_common("greedy", p) < 0) return NULL;
    int P = p->ranks, v = p->chunks ? p->chunks : 1, S = P * v;
    if (v > 2)
        return pt_seterr("schedule greedy: chunks must be 1 or 2 (V placement; got %d)", v), NULL;
    if (p->mem_limit < 0)
        return pt_seterr("schedule greedy: mem_limit must be >= 0 (0: no limit; got %d)", p->mem_limit), NULL;
    double *cost = pt_calloc((size_t)5 * S, sizeof(double));
    int *stage_rank = pt_calloc((size_t)S, sizeof(int));
    sched *s = NULL;
    for (int g = 0; g < S; g++) stage_rank[g] = g < P ? g : 2 * P - 1 - g;
    if (gen_stage_costs("greedy", p, S, cost, cost + S, cost + 2 * S) < 0 ||
        gen_edge_delays("greedy", p, stage_rank, S, 1.0, cost + 3 * S) < 0 ||
        gen_edge_busy("greedy", p, stage_rank, S, 1.0, cost + 4 * S) < 0)
        goto free_arrays;
    gen_list_spec sp = {
        .name = "greedy", .n_ranks = P, .n_stages = S, .n_pipes = 1, .n_mb = p->microbatches,
        .stage_rank = stage_rank, .cost_f = cost, .cost_b = cost + S, .cost_w = cost + 2 * S,
        .stage_limit = p->mem_limit, .edge_delay = cost + 3 * S, .edge_busy = cost + 4 * S,
    };
    s = gen_list_schedule(&sp);
free_arrays:
    free(cost);
    free(stage_rank);
    return s;
}
