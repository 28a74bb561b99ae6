/* --defer-tie (pipedream, with any --async-fix): a tied tensor's gradient (wte: the embedding on
 * the first stage, the head's copy on the last) is summed over its holders in the background
 * instead of at each microbatch's REDUCE_GRAD. Without it every microbatch's update waits until
 * the other holder has run the same microbatch's backward, which couples the ends of the pipe:
 * the last stage waits a whole backward pass through the links (3 x 30 ms at P=4 on the bench's
 * delayed links) per microbatch (docs/async.md, "Throughput under link delay").
 *
 * The rule: the holders' sum of microbatch k's tied gradient is posted after k's backward and
 * applied at update k + K, the same sequence on every holder, so the copies stay equal. K is
 * the forwards the first stage admits before its first backward (P in the 1f1b order, max(P, D)
 * with --async-depth D; exec_tie_k): the smallest lag that never waits, since the last
 * stage's update k + K follows microbatch k + K's forward, which the first stage sends after
 * k's backward and its part of k. It does not grow with the step's microbatches or an
 * --async-window (it was M before the window: one step). The first K updates of a job apply none (the optimizer's step on a zero gradient: weight decay
 * only). Clipping: the stage's norm at update u is its span's gradient of u plus the tied sum it
 * applies; the tied tensor's factor is, on every holder alike, the smallest over the holders of
 * what that stage's factor was for microbatch k (each member sends its span's sum of squares with
 * its part), so no other exchange is needed. The parts travel point to point and each holder
 * adds them in member order (the transports' rank order of a reduction). Not here: when it runs (exec_reduce_stage,
 * exec_async_clip). A resumed run starts with nothing in flight (the last K sums are lost). */
#include "run/exec_int.h"
#include "optim/optim.h"
#include "util/pt.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct exec_tie_lag {
    exec_tie_ring r;                  /* K slots of 2H requests: each member's send and receive */
    size_t width;                     /* floats of the tensor + its span's sum of squares */
    float *part;                      /* [K][H][width] each member's part of a microbatch */
    int *busy;                        /* [K] the slot holds a microbatch not yet applied */
    float *ready;                     /* (n) the sum applied at this update */
    float *span;                      /* [H] each member's span sum of squares for it */
    int has_ready;                    /* ready holds a sum (else this update applies none) */
    long long seq;                    /* microbatches posted so far */
};

static float *lag_part(const exec_tie_lag *L, int s, int m) {
    return L->part + ((size_t)s * (size_t)L->r.H + (size_t)m) * L->width;
}

int exec_tie_lag_init(run_exec *e) {
    if (!e->c.defer_tie) return 0;
    for (int k = 0; k < e->n_grp; k++) {
        exec_group *gr = &e->grp[k];
        if (!exec_tie_shared(gr)) continue;
        exec_tie_lag *L = pt_calloc(1, sizeof *L);
        exec_tie_ring_init(&L->r, e, gr, 2 * gr->cm->size);
        L->width = gr->n + 1;
        L->part = pt_falloc((size_t)L->r.K * (size_t)L->r.H * L->width);
        L->busy = pt_calloc((size_t)L->r.K, sizeof *L->busy);
        L->ready = pt_falloc(L->r.n);
        L->span = pt_calloc((size_t)L->r.H, sizeof *L->span);
        gr->lag = L;
    }
    return 0;
}

/* Slot s's messages complete. 0, or -1. */
static int lag_wait_slot(run_exec *e, exec_group *gr, int s) {
    return exec_tie_ring_wait(&gr->lag->r, e, gr, s, "deferred reduction");
}

/* Completes what is in flight (every member sent as many), then frees. */
void exec_tie_lag_free(run_exec *e) {
    for (int k = 0; e->grp && k < e->n_grp; k++) {
        exec_tie_lag *L = e->grp[k].lag;
        if (!L) continue;
        int held = 0;   /* a request whose wait failed still names its buffer: kept (comm_free ends it) */
        for (int s = 0; s < L->r.K; s++) held |= lag_wait_slot(e, &e->grp[k], s) < 0;
        if (!held) free(L->part);
        exec_tie_ring_free(&L->r);
        free(L->busy);
        free(L->ready);
        free(L->span);
        free(L);
        e->grp[k].lag = NULL;
    }
}

size_t exec_tie_lag_floats(const run_exec *e) {
    size_t n = 0;
    for (int k = 0; k < e->n_grp; k++)
        if (e->grp[k].lag) {
            const exec_tie_lag *L = e->grp[k].lag;
            n += (size_t)L->r.K * (size_t)L->r.H * L->width + L->r.n;
        }
    return n;
}

/* Sum of squares of the rank's reduced gradients outside tied tensors (one stage per rank). */
static double exec_span_sumsq(const run_exec *e) {
    double s = 0;
    for (int k = 0; k < e->n_grp; k++) {
        const exec_group *gr = &e->grp[k];
        if (gr->tie >= 0) continue;
        for (int i = 0; i < gr->n_ts; i++) s += optim_sumsq(gr->g[0] + gr->ts[i].off, gr->ts[i].n);
    }
    return s;
}

/* Slot s's parts summed in member order (the transports' rank order) into ready. */
static void lag_sum_slot(exec_tie_lag *L, int s) {
    memcpy(L->ready, lag_part(L, s, 0), L->r.n * sizeof(float));
    for (int m = 1; m < L->r.H; m++) {
        const float *x = lag_part(L, s, m);
        for (size_t i = 0; i < L->r.n; i++) L->ready[i] += x[i];
    }
    for (int m = 0; m < L->r.H; m++) L->span[m] = lag_part(L, s, m)[L->r.n];
}

/* Microbatch seq's tied gradient (the rank's part, in g[0]) sent to the other members, theirs
 * received in the background (point to point: the transports hand a message over without the
 * receiver's calls, where a collective needs every member to look); the sum of microbatch
 * seq - K (or zeros) put in g[0]'s place, for this update. 0, or -1. */
int exec_tie_lag_reduce(run_exec *e, exec_group *gr) {
    exec_tie_lag *L = gr->lag;
    int s = (int)(L->seq % L->r.K);
    L->has_ready = 0;
    if (L->busy[s]) {
        if (lag_wait_slot(e, gr, s) < 0) return -1;
        lag_sum_slot(L, s);
        L->has_ready = 1;
    }
    float *mine = lag_part(L, s, L->r.me);
    memcpy(mine, gr->g[0], L->r.n * sizeof(float));
    mine[L->r.n] = (float)exec_span_sumsq(e);
    comm_req **rq = &L->r.req[(size_t)s * 2 * (size_t)L->r.H];
    for (int m = 0; m < L->r.H; m++) {
        if (m == L->r.me) continue;
        if (comm_irecv(gr->cm, m, COMM_TAG_TIE_LAG, lag_part(L, s, m), L->width * sizeof(float), &rq[2 * m]) < 0 ||
            comm_isend(gr->cm, m, COMM_TAG_TIE_LAG, mine, L->width * sizeof(float), &rq[2 * m + 1]) < 0)
            return pt_adderr("rank %d: posting the deferred reduction of tied tensor %d: ", e->c.world_rank, gr->tie);
    }
    L->busy[s] = 1;
    L->seq++;
    if (L->has_ready) memcpy(gr->g[0], L->ready, L->r.n * sizeof(float));
    else memset(gr->g[0], 0, L->r.n * sizeof(float));
    return 0;
}

/* The tied tensor's clipping factor at this update (cap: the stage's bound): the smallest over
 * the members of optim_clip_scale(sqrt(their span's sum of squares + the tied sum's)), the same
 * numbers on every holder; 1 when the update applies no sum. */
double exec_tie_lag_factor(const exec_group *gr, double cap) {
    const exec_tie_lag *L = gr->lag;
    if (!L->has_ready) return 1.0;
    double t = optim_sumsq(L->ready, L->r.n), f = 1.0;
    for (int m = 0; m < L->r.H; m++) {
        double r = optim_clip_scale(sqrt((double)L->span[m] + t), cap);
        if (r < f) f = r;
    }
    return f;
}
