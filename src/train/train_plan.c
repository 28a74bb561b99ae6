/* A plan file's layout merged into train options (train_plan.h). */
#include "train/train_plan.h"
#include "plan/plan.h"
#include "util/pt.h"
#include <stdlib.h>

/* A plan places world rank w on device devices[w] of the cluster file it was made for (their
 * speeds and memory shaped its split). The runtime pins nothing: say so rather than drop it. */
static void note_plan_devices(const char *path, const plan_layout *pl, int mpi, FILE *out) {
    if (!pl->devices) return;
    char list[128];
    int n = pl->P * pl->D * (pl->tp > 1 ? pl->tp : 1), at = 0, w = 0;
    for (; w < n && at < (int)sizeof list - 16; w++)
        at += snprintf(list + at, sizeof list - (size_t)at, "%s%d", w ? "," : "", pl->devices[w]);
    if (w < n) snprintf(list + at, sizeof list - (size_t)at, ",...");
    fprintf(out, "note: %s was planned for devices %s of its cluster file (world rank order); this run "
            "does not place ranks on devices: its %d ranks are %s\n", path, list, n,
            mpi ? "MPI processes wherever mpirun started them" : "threads of this process");
}

/* The plan's numbers into o (the batch and T already checked). */
static void merge_layout(train_opts *o, plan_layout *pl, train_plan_hold *hold) {
    run_opts *ro = &o->ro;
    o->batch = pl->D * pl->M * pl->mb_size;
    o->seq = pl->T;
    ro->P = pl->P; ro->D = pl->D; ro->M = pl->M; ro->chunks = pl->chunks;
    ro->tp = pl->tp > 1 ? pl->tp : 1;
    ro->recompute = ro->recompute || pl->recompute;
    ro->zero = ro->zero > pl->zero ? ro->zero : pl->zero;
    ro->tp_overlap = ro->tp_overlap || pl->tp_overlap;
    ro->tp_recompute = ro->tp_recompute || pl->tp_recompute;
    ro->tp_sp = ro->tp_sp || pl->sp;
    if (pl->seq_chunks > 1) ro->seq_chunks = pl->seq_chunks;
    ro->balance_memory = ro->balance_memory || pl->balance_memory;
    snprintf(hold->schedule, sizeof hold->schedule, "%s", pl->schedule);
    ro->schedule = hold->schedule;
    free(hold->split);
    hold->split = pl->split;     /* the counts themselves: no text in between */
    ro->split = pl->split;
    ro->n_split = pl->K;
    pl->split = NULL;
}

int train_plan_apply(train_opts *o, const char *path, int mpi, train_plan_hold *hold, FILE *out) {
    plan_layout pl;
    if (plan_read(path, &pl) < 0) return -1;
    int batch = pl.D * pl.M * pl.mb_size, rc = 0;
    if (o->batch && o->batch != batch)
        rc = pt_seterr("%s: the plan is for a global batch of %d sequences (dp %d x %d microbatches "
                       "x %d), not --batch %d", path, batch, pl.D, pl.M, pl.mb_size, o->batch);
    else if (o->seq && o->seq != pl.T)
        rc = pt_seterr("%s: the plan is for --seq %d, not %d", path, pl.T, o->seq);
    if (rc == 0) {
        char text[512];
        int tp = pl.tp > 1 ? pl.tp : 1;
        fprintf(out, "plan %s: %d stages x dp %d x tp %d, %s, %d microbatches of %d, split %s%s%s%s%s%s\n",
                path, pl.P, pl.D, tp, pl.schedule, pl.M, pl.mb_size,
                plan_layout_split_str(&pl, text, sizeof text), pl.recompute ? ", recompute" : "",
                pl.tp_recompute ? ", tp-recompute" : "", pl.tp_overlap ? ", tp-overlap" : "",
                pl.sp ? ", sp" : "", pl.zero ? ", zero 1" : "");
        note_plan_devices(path, &pl, mpi, out);
        merge_layout(o, &pl, hold);
    }
    plan_layout_free(&pl);
    return rc;
}

void train_plan_hold_free(train_plan_hold *hold) {
    free(hold->split);
    hold->split = NULL;
}
