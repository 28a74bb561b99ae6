/* Timeline storage: a growable array of events plus the schedule's shape. No analysis here
 * (the simulator computes its results itself; the writers read events directly). */
#include "trace/timeline.h"
#include "util/pt.h"
#include <stdlib.h>
#include <string.h>

void timeline_init(timeline *tl, const sched *s, const double *act_bytes, int n_iters) {
    memset(tl, 0, sizeof *tl);
    tl->n_ranks = s->n_ranks;
    tl->n_stages = s->n_stages;
    tl->n_mb = s->n_mb;
    tl->n_iters = n_iters;
    tl->stage_rank = pt_malloc(sizeof(int) * (size_t)s->n_stages);
    memcpy(tl->stage_rank, s->stage_rank, sizeof(int) * (size_t)s->n_stages);
    if (act_bytes) {
        tl->act_bytes = pt_malloc(sizeof(double) * (size_t)s->n_stages);
        memcpy(tl->act_bytes, act_bytes, sizeof(double) * (size_t)s->n_stages);
    }
    snprintf(tl->name, sizeof tl->name, "%s", s->name);
}

void timeline_free(timeline *tl) {
    free(tl->stage_rank);
    free(tl->act_bytes);
    free(tl->ev);
    memset(tl, 0, sizeof *tl);
}

void timeline_reserve(timeline *tl, int n) {
    if (n <= tl->cap) return;
    tl->ev = pt_realloc(tl->ev, sizeof *tl->ev * (size_t)n);
    tl->cap = n;
}

int timeline_push(timeline *tl, const tl_event *e) {
    if (tl->n == tl->cap) timeline_reserve(tl, tl->cap ? 2 * tl->cap : 256);
    tl->ev[tl->n] = *e;
    return tl->n++;
}

double timeline_end(const timeline *tl) {
    double t = 0;
    for (int i = 0; i < tl->n; i++)
        if (tl->ev[i].end > t) t = tl->ev[i].end;
    return t;
}
