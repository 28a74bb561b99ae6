/* --adapt's links between replicas: each step's gradient-reduction waits against healthy ones,
 * a slow link said at onset and recovery, never adapted to (no order of one pipeline's work
 * changes what a reduction waits for). */
#include "adapt/adapt_int.h"
#include "util/pt.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>

/* ---- links between replicas ------------------------------------------------------------- */

/* A reduction between replicas is slow once it waits this much longer than when healthy, two
 * steps running (as a pipeline link: the link floor or link_on x mean F, whichever is larger),
 * and healthy again below half of it (hysteresis). */
static double replica_on(const adapt_state *A, double mf) { return fmax(ADAPT_LINK_FLOOR, A->po.link_on * mf); }

void adapt_replica_init(adapt_state *A) {
    replica_links *L = &A->rl;
    adapt_ring_init(&L->base, A->P);
    L->prev = pt_calloc((size_t)A->P, sizeof *L->prev);
    L->slow = pt_calloc((size_t)A->P, sizeof *L->slow);
}

void adapt_replica_free(adapt_state *A) {
    free(A->rl.base.v), free(A->rl.prev), free(A->rl.slow);
}

/* Per pipeline rank p, this step's wait of the gradient reduction over the replicas into w[P]:
 * per TP rank (each reduces over its own group of replicas), the first member's end of its
 * REDUCE_GRAD event minus the last member's start; the largest over the TP ranks (-1: none ran).
 * An overlapped reduction's event runs from its post (the stage's last W) to when the rank saw it
 * complete; --no-overlap's from the rank's last REDUCE_GRAD (where it posts) to its wait's end. */
static void replica_waits(const adapt_state *A, const timeline *tl, const run_layout *lo, double *w) {
    int T = lo->tp;
    double *post = pt_malloc(sizeof *post * (size_t)(2 * A->P * T)), *done = post + A->P * T;
    for (int g = 0; g < A->P * T; g++) post[g] = -INFINITY, done[g] = INFINITY;
    for (int i = 0; i < tl->n; i++) {
        const tl_event *x = &tl->ev[i];
        int xd, xp, xt;
        if (x->act.kind != ACT_REDUCE_GRAD) continue;
        run_layout_coords(lo, x->rank, &xd, &xp, &xt);
        post[xp * T + xt] = fmax(post[xp * T + xt], x->start), done[xp * T + xt] = fmin(done[xp * T + xt], x->end);
    }
    for (int p = 0; p < A->P; p++) {
        w[p] = -1;
        for (int t = 0; t < T; t++) {
            double a = post[p * T + t], b = done[p * T + t];
            if (isfinite(a) && isfinite(b)) w[p] = fmax(w[p], fmax(0, b - a));
        }
    }
    free(post);
}

/* Appends printf-style text to buf[n] at *at, cutting it at the end of buf (*at stays below n). */
static void line_add(char *buf, size_t n, size_t *at, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void line_add(char *buf, size_t n, size_t *at, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = *at < n ? vsnprintf(buf + *at, n - *at, fmt, ap) : 0;
    va_end(ap);
    *at = k > 0 && *at + (size_t)k < n ? *at + (size_t)k : n - 1;
}

/* "link between replicas 0-1 (ranks 0-2)", or with D > 2 "link between replicas of pipeline rank
 * 0 (ranks 0,2,4)" (the wait does not say which pair), appended to buf[n] at *at. */
static void replica_name(const adapt_state *A, const run_layout *lo, int p, char *buf, size_t n, size_t *at) {
    if (A->D == 2) {
        line_add(buf, n, at, "link between replicas 0-1 (ranks %d-%d)", run_layout_world_rank(lo, 0, p, 0),
                 run_layout_world_rank(lo, 1, p, 0));
        return;
    }
    line_add(buf, n, at, "link between replicas of pipeline rank %d (ranks ", p);
    for (int d = 0; d < A->D; d++) line_add(buf, n, at, "%s%d", d ? "," : "", run_layout_world_rank(lo, d, p, 0));
    line_add(buf, n, at, ")");
}

/* The adapt event of the pipeline ranks whose reduction between replicas changed (`change` +1: turned
 * slow, -1: healthy again): the estimate's fields and, per rank, its replicas, world ranks and
 * the reduction's wait beyond its healthy one (replica_links). */
static cJSON *replica_fields(const adapt_state *A, const run_layout *lo, const sim_estimate *est, const char *action,
                             const char *schedule, const int *change, int sign, const double *excess) {
    cJSON *o = adapt_fields(A, est, action, schedule, -1, -1), *arr = cJSON_CreateArray();
    for (int p = 0; p < A->P; p++) {
        if (change[p] != sign) continue;
        cJSON *l = cJSON_CreateObject(), *reps = cJSON_CreateArray(), *ranks = cJSON_CreateArray();
        cJSON_AddNumberToObject(l, "pipeline_rank", p);
        for (int d = 0; d < A->D; d++) cJSON_AddItemToArray(reps, cJSON_CreateNumber(d));
        for (int d = 0; d < A->D; d++) cJSON_AddItemToArray(ranks, cJSON_CreateNumber(run_layout_world_rank(lo, d, p, 0)));
        cJSON_AddItemToObject(l, "replicas", reps);
        cJSON_AddItemToObject(l, "ranks", ranks);
        cJSON_AddNumberToObject(l, "wait_s", excess[p]);
        cJSON_AddItemToArray(arr, l);
    }
    cJSON_AddItemToObject(o, "replica_links", arr);
    return o;
}

/* Says the pipeline ranks of `change` equal to sign in one line and event: turned slow (+1, with
 * each one's wait beyond its healthy one) or healthy again (-1). */
static void replica_say(adapt_state *A, long step, const sim_estimate *est, const int *change,
                        int sign, const double *excess) {
    const char *name = adapt_schedule(A)->name;
    const run_layout *lo = A->h.layout(A->h.user);   /* world ranks named: TP rank 0's */
    char line[1024] = "";
    size_t at = 0, n = sizeof line;
    int first = 0, last = 0;
    for (int p = 0; p < A->P; p++) {
        if (change[p] != sign) continue;
        first |= p == 0, last |= p == A->P - 1;
        if (at) line_add(line, n, &at, "; ");
        replica_name(A, lo, p, line, n, &at);
        if (sign > 0) line_add(line, n, &at, " +%.0f ms per reduction", excess[p] * 1e3);
        else line_add(line, n, &at, " healthy again");
    }
    if (first && last && A->o.n_ties > 0)   /* the tied embedding is one group over both ends */
        line_add(line, n, &at, " (pipeline ranks 0 and %d share the tied embedding's reduction: a slow link at "
                 "either shows at both)", A->P - 1);
    if (sign > 0) line_add(line, n, &at, "; no schedule change helps a gradient reduction: keeping %s", name);
    adapt_say(A, step, line, replica_fields(A, lo, est, sign > 0 ? "replica_slow" : "replica_healthy", name, change, sign, excess));
}

/* The step's reductions between replicas against their healthy waits: the pipeline ranks whose
 * reduction turned slow (replica_on, two steps running: the smaller of this step's excess and the
 * last's) or healthy again (under half of it), each said once per onset and recovery. The
 * schedule stays: no order of one pipeline's work changes what a reduction waits for. A step with
 * no rank over half of replica_on joins the baseline. */
void adapt_replicas(adapt_state *A, long step, const timeline *tl, const sim_estimate *est,
                           double mf) {
    replica_links *L = &A->rl;
    double *w = pt_malloc(sizeof *w * (size_t)A->P * 2), *excess = w + A->P, on = replica_on(A, mf);
    int *change = pt_calloc((size_t)A->P, sizeof *change), quiet = 1, any_on = 0, any_off = 0;
    replica_waits(A, tl, A->h.layout(A->h.user), w);
    for (int p = 0; p < A->P; p++) {
        double b = adapt_ring_median(&L->base, p), now = w[p] >= 0 && b >= 0 ? fmax(0, w[p] - b) : 0;
        excess[p] = fmin(now, L->prev[p]);
        L->prev[p] = now;
        quiet &= now < on / 2;
        if (!L->slow[p] && excess[p] >= on) L->slow[p] = 1, change[p] = 1, any_on = 1;
        else if (L->slow[p] && now < on / 2) L->slow[p] = 0, change[p] = -1, any_off = 1, excess[p] = now;
    }
    if (quiet) adapt_ring_add(&L->base, w);
    if (any_on) replica_say(A, step, est, change, 1, excess);
    if (any_off) replica_say(A, step, est, change, -1, excess);
    free(w), free(change);
}
