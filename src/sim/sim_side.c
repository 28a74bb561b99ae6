/* How much of a simulated run's bubbles a side task can use (sim.h, sim_side_fit): the waits of
 * each rank from its compute-stream events, and the side steps of a given length that fit in
 * each. The runtime's harvester follows the same rule with measured step times and predicted
 * waits (src/harvest); this is its upper bound for a task with steps of exactly that length. */
#include "sim/sim.h"
#include "util/pt.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_start(const void *a, const void *b) {
    double x = ((const double *)a)[0], y = ((const double *)b)[0];
    return x < y ? -1 : x > y;
}

/* A wait of `gap` seconds on rank p: the steps that fit. */
static void side_wait(sim_side *s, int p, double gap) {
    if (gap <= 0) return;
    long n = (long)floor(gap / s->step * (1 + 1e-12));
    s->idle[p] += gap;
    s->waits[p]++;
    s->steps[p] += n;
    s->usable[p] += n * s->step;
    s->used[p] += n > 0;
}

int sim_side_fit(const sim_result *r, double step, sim_side *out) {
    memset(out, 0, sizeof *out);
    if (!(step > 0)) return pt_seterr("--side-step must be > 0 seconds (got %g)", step);
    int P = r->n_ranks;
    out->n_ranks = P;
    out->step = step;
    out->idle = pt_calloc((size_t)P, sizeof(double));
    out->usable = pt_calloc((size_t)P, sizeof(double));
    out->steps = pt_calloc((size_t)P, sizeof(long));
    out->waits = pt_calloc((size_t)P, sizeof(int));
    out->used = pt_calloc((size_t)P, sizeof(int));
    double *iv = pt_malloc(sizeof(double) * 2 * (size_t)(r->tl.n + 1));
    for (int p = 0; p < P; p++) {
        int n = 0;
        for (int i = 0; i < r->tl.n; i++) {
            const tl_event *e = &r->tl.ev[i];
            if (e->rank != p || e->stream != TL_COMPUTE || e->end <= e->start) continue;
            iv[2 * n] = e->start;
            iv[2 * n++ + 1] = e->end;
        }
        qsort(iv, (size_t)n, 2 * sizeof(double), cmp_start);
        double t = 0;   /* the rank is busy up to t */
        for (int k = 0; k < n; k++) {
            side_wait(out, p, iv[2 * k] - t);
            if (iv[2 * k + 1] > t) t = iv[2 * k + 1];
        }
        side_wait(out, p, r->makespan - t);
        out->idle_total += out->idle[p];
        out->usable_total += out->usable[p];
    }
    free(iv);
    return 0;
}

void sim_side_free(sim_side *s) {
    free(s->idle); free(s->usable); free(s->steps); free(s->waits); free(s->used);
    memset(s, 0, sizeof *s);
}
