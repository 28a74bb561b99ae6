/* Internal to sched/: the cost-aware list scheduler behind the greedy, adaptive, zb-v and chimera
 * generators (sched_gen_list.c). It simulates all ranks with the given per-stage durations and
 * message delays and lets each free rank pick a ready action by a fixed priority rule; the order
 * it picks becomes the rank's action list. Not a simulator of a given schedule (that is sim/), not public API.
 * Legend: P ranks, S stages, K stages per pipe, M microbatches. */
#ifndef PT_SCHED_GEN_LIST_H
#define PT_SCHED_GEN_LIST_H
#include "sched/sched.h"
#include <stdbool.h>

/* Which ready action a free rank takes first. Both take only actions whose inputs have arrived. */
typedef enum {
    GEN_LIST_F_FIRST,   /* a forward its memory and in-flight cap allow, else the oldest B, else W */
    GEN_LIST_B_FIRST,   /* the oldest B, else a forward, else W (zero bubble's and PipeMorph's order) */
} gen_list_policy;

typedef struct {
    const char *name;            /* schedule name (copied into the result) */
    int n_ranks, n_stages, n_pipes, n_mb;
    const int *stage_rank;       /* [S] rank of each stage */
    const int *mb_pipe;          /* [M] pipe of each microbatch (NULL: all pipe 0) */
    const double *cost_f, *cost_b, *cost_w;  /* [S] durations, each > 0 */
    int stage_limit;             /* max activations held per stage (F started, W not done); 0: none */
    int rank_limit;              /* max activations held per rank, its stages together; 0: none */
    bool fused;                  /* emit BW (duration b + w) instead of B then W */
    const double *edge_delay;    /* [S] or NULL: time stage g's output takes to reach g+1 and g+1's
                                  * gradient to reach g, when they are on different ranks (>= 0) */
    const double *edge_busy;     /* [S] or NULL: time such a message first holds its link (>= 0):
                                  * each direction between two ranks is a FIFO queue, a message
                                  * enters it when its action ends (after the messages before it),
                                  * leaves busy later and arrives edge_delay after that */
    gen_list_policy policy;      /* default GEN_LIST_F_FIRST */
    const int *stage_cap;        /* [S] or NULL: forwards in flight (F started, B not) per stage,
                                  * >= 1; NULL: one round trip of the costs and delays */
} gen_list_spec;

/* Builds a compute-only schedule (F, B, W or BW per rank, then the sync tail) by greedy list
 * scheduling under sp's costs, delays and memory limits. Priority of a free rank (F_FIRST): a
 * forward that its memory and in-flight cap allow (the deepest stage first), else the oldest
 * ready B (or BW), else the oldest pending W; B_FIRST swaps the first two. An action is ready
 * when its prerequisites (sched_action_deps) have finished and, from another rank, their message
 * has arrived (edge_delay later). Each stage runs its forwards in its pipe's microbatch order.
 * Needs stage_limit >= 1 or 0, rank_limit 0 or >= the stages a rank holds of one pipe.
 * *makespan (may be NULL) gets the end of the last action in the scheduler's own timeline: an
 * upper bound of the simulated time under the same costs and delays (a fixed order only starts
 * earlier when nothing else is modelled). Returns NULL with an error naming sp->name only if no
 * rank can move (a bug, never expected). */
sched *gen_list_run(const gen_list_spec *sp, double *makespan);
/* gen_list_run without the makespan. */
sched *gen_list_schedule(const gen_list_spec *sp);
/* Times fixed orders of one schedule's actions under sp's costs, delays and queues (sp's limits,
 * caps and policy are not read; stages are s's, on sp->stage_rank's ranks): each action starts
 * when its rank is free and its prerequisites' messages have arrived, as in the list scheduler's
 * timeline, so an order the list scheduler built times the same or earlier. A message's queue is
 * FIFO in its sender's order. Prepared once for s's actions (new; sp and s must outlive it), then
 * run on any reordering of them within their ranks (what a local search tries). */
typedef struct gen_list_timer gen_list_timer;
gen_list_timer *gen_list_timer_new(const gen_list_spec *sp, const sched *s);
void gen_list_timer_free(gen_list_timer *T);                    /* NULL is fine */
/* The makespan of s's order; *sum_end (may be NULL) gets the sum of every action's end (lower:
 * work done earlier). cutoff > 0: stops as soon as some rank's end plus its work left passes
 * cutoff, returning that (> cutoff; *sum_end then infinite). -1 when the orders deadlock.
 * O(actions) plus a pass over the ranks each time one waits on another. */
double gen_list_timer_run(gen_list_timer *T, const sched *s, double cutoff, double *sum_end);

#endif
