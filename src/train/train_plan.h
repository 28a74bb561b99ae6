/* A plan file (`pipetrain plan --out plan.json`) merged into train options: the layout it chose
 * (stages, replicas, TP, microbatches, schedule, chunks, split, recompute, overlap, sp, zero) and
 * the batch and sequence length it was made for. Not here: reading the flags (cli/cli_train.c),
 * the search that writes plans (plan/). */
#ifndef PT_TRAIN_TRAIN_PLAN_H
#define PT_TRAIN_TRAIN_PLAN_H
#include <stdio.h>
#include "train/trainer.h"

/* What the merged options borrow from the plan: o->ro.schedule points at schedule, o->ro.split
 * at split. Keep it until the run is over; free with train_plan_hold_free. */
typedef struct {
    char schedule[32];
    int *split;              /* [o->ro.n_split] blocks per chunk (owned) */
} train_plan_hold;

/* Reads the plan at path and sets o's layout from it: P, D, tp, M, chunks, schedule and split
 * (borrowed from *hold); recompute, tp_recompute, tp_overlap and sp are on when either o or the
 * plan asks; zero the larger. o->batch and o->seq become the plan's (D * M * microbatch size,
 * T); when given (non-zero) they must equal them. Prints the plan's line (and, when the plan
 * names devices, a note that this run places no ranks) to out; `mpi` says how the ranks run for
 * that note. The caller refuses layout flags next to a plan. Returns 0, or -1 naming the file
 * and the number that differs (o unchanged but for what was already merged). */
int train_plan_apply(train_opts *o, const char *path, int mpi, train_plan_hold *hold, FILE *out);
void train_plan_hold_free(train_plan_hold *hold);

#endif
