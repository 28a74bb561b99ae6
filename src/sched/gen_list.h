/* Internal to sched/: the cost-aware list scheduler behind the greedy, zb-v and chimera
 * generators (sched_gen_list.c). It simulates all ranks with the given per-stage durations and
 * lets each free rank pick a ready action by a fixed priority rule; the order it picks becomes the
 * rank's action list. Not a simulator of a given schedule (that is sim/), not public API.
 * Legend: P ranks, S stages, K stages per pipe, M microbatches. */
#ifndef PT_SCHED_GEN_LIST_H
#define PT_SCHED_GEN_LIST_H
#include "sched/sched.h"
#include <stdbool.h>

typedef struct {
    const char *name;            /* schedule name (copied into the result) */
    int n_ranks, n_stages, n_pipes, n_mb;
    const int *stage_rank;       /* [S] rank of each stage */
    const int *mb_pipe;          /* [M] pipe of each microbatch (NULL: all pipe 0) */
    const double *cost_f, *cost_b, *cost_w;  /* [S] durations, each > 0 */
    int stage_limit;             /* max activations held per stage (F started, W not done); 0: none */
    int rank_limit;              /* max activations held per rank, its stages together; 0: none */
    bool fused;                  /* emit BW (duration b + w) instead of B then W */
} gen_list_spec;

/* Builds a compute-only schedule (F, B, W or BW per rank, then the sync tail) by greedy list
 * scheduling under sp's costs and memory limits. Priority of a free rank: a forward that its
 * memory and in-flight cap allow (the deepest stage first), else the oldest ready B (or BW), else
 * the oldest pending W. Each stage runs its forwards in its pipe's microbatch order.
 * Needs stage_limit >= 1 or 0, rank_limit 0 or >= the stages a rank holds of one pipe.
 * Returns NULL with an error naming sp->name only if no rank can move (a bug, never expected). */
sched *gen_list_schedule(const gen_list_spec *sp);

#endif
