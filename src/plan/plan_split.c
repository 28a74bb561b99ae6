/* The exact min-max split of a chain of layers onto an ordered chain of stages with per-stage
 * speed and memory cap: a bisection + greedy solver (fast) and a dynamic program (the reference).
 * Not here: where the per-layer numbers come from (plan_eval.c). */
#include "plan/plan.h"
#include "util/pt.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const plan_chain *c;
    double *W, *MF, *MA;    /* [n+1] prefix sums of work, mem_fixed, mem_act */
} chain_sums;

static void sums_init(chain_sums *s, const plan_chain *c) {
    s->c = c;
    s->W = pt_calloc((size_t)c->n + 1, sizeof(double));
    s->MF = pt_calloc((size_t)c->n + 1, sizeof(double));
    s->MA = pt_calloc((size_t)c->n + 1, sizeof(double));
    for (int i = 0; i < c->n; i++) {
        s->W[i + 1] = s->W[i] + c->work[i];
        s->MF[i + 1] = s->MF[i] + c->mem_fixed[i];
        s->MA[i + 1] = s->MA[i] + c->mem_act[i];
    }
}

static void sums_free(chain_sums *s) { free(s->W); free(s->MF); free(s->MA); }

/* Time of stage k holding items [i, j). */
static double seg_time(const chain_sums *s, int k, int i, int j) {
    return (s->W[j] - s->W[i]) / s->c->speed[k];
}

static bool seg_fits(const chain_sums *s, int k, int i, int j) {
    const plan_chain *c = s->c;
    if (c->cap[k] <= 0) return true;
    double m = s->MF[j] - s->MF[i] + c->inflight[k] * (s->MA[j] - s->MA[i]) + (c->mem_extra ? c->mem_extra[k] : 0);
    return m <= c->cap[k];
}

/* Greedy at bottleneck X: each stage takes as many items as fit in time X and its memory while
 * leaving one item per later stage. Optimal for the feasibility question because a stage's time
 * and memory only grow with its items, so a shorter remaining suffix is never harder. Fills
 * first[K+1] and returns the largest stage time, or -1 when X is infeasible. */
static double greedy(const chain_sums *s, double X, int *first) {
    const plan_chain *c = s->c;
    int i = 0;
    double worst = 0;
    for (int k = 0; k < c->K; k++) {
        int last = c->n - (c->K - 1 - k), j = i;
        while (j < last && seg_time(s, k, i, j + 1) <= X && seg_fits(s, k, i, j + 1)) j++;
        if (j == i || (k == c->K - 1 && j != c->n)) return -1;
        first[k] = i;
        double t = seg_time(s, k, i, j);
        if (t > worst) worst = t;
        i = j;
    }
    first[c->K] = c->n;
    return worst;
}

int plan_split(const plan_chain *c, int *first, double *bottleneck) {
    if (c->K < 1 || c->n < c->K) return -1;
    chain_sums s;
    sums_init(&s, c);
    double hi = greedy(&s, INFINITY, first), lo = 0;
    int rc = -1;
    if (hi < 0) goto done;
    /* Bisection narrows (lo infeasible, hi feasible); hi is always an achieved bottleneck. */
    for (int it = 0; it < 200 && hi - lo > hi * 1e-15; it++) {
        double mid = lo + (hi - lo) / 2, t = greedy(&s, mid, first);
        if (t >= 0) hi = t; else lo = mid;
    }
    /* Step down through achieved values until the next smaller double is infeasible: then hi is
     * feasible and nothing below it is (feasibility is monotone in X), so hi is the optimum. */
    for (;;) {
        double t = greedy(&s, nextafter(hi, 0), first);
        if (t < 0) break;
        hi = t;
    }
    greedy(&s, hi, first);
    *bottleneck = hi;
    rc = 0;
done:
    sums_free(&s);
    return rc;
}

/* best[k][j]: smallest bottleneck placing items [0, j) on stages 0..k; from[k][j] the cut. */
int plan_split_dp(const plan_chain *c, int *first, double *bottleneck) {
    if (c->K < 1 || c->n < c->K) return -1;
    int n = c->n, K = c->K, rc = -1;
    chain_sums s;
    sums_init(&s, c);
    double *best = pt_malloc(sizeof(double) * (size_t)K * (n + 1));
    int *from = pt_malloc(sizeof(int) * (size_t)K * (n + 1));
    for (int k = 0; k < K; k++)
        for (int j = 0; j <= n; j++) {
            double *b = &best[k * (n + 1) + j];
            *b = INFINITY;
            for (int i = k; i < j; i++) {   /* stage k takes [i, j); stages before hold [0, i) */
                double prev = k == 0 ? (i == 0 ? 0 : INFINITY) : best[(k - 1) * (n + 1) + i];
                if (prev == INFINITY || !seg_fits(&s, k, i, j)) continue;
                double t = fmax(prev, seg_time(&s, k, i, j));
                if (t < *b) { *b = t; from[k * (n + 1) + j] = i; }
            }
        }
    double opt = best[(K - 1) * (n + 1) + n];
    if (opt == INFINITY) goto done;
    first[K] = n;
    for (int k = K - 1, j = n; k >= 0; k--) j = first[k] = from[k * (n + 1) + j];
    *bottleneck = opt;
    rc = 0;
done:
    free(best); free(from);
    sums_free(&s);
    return rc;
}

/* Among splits with every stage time <= X (and within memory): the least total time, then the
 * least sum of squared stage times (the most even). best[k][j] holds the pair for [0, j) on
 * stages 0..k. */
typedef struct { double sum, sq; } split_score;

static bool score_less(split_score a, split_score b) {
    double tol = 1e-12 * (fabs(a.sum) + fabs(b.sum));   /* sums in another order round differently */
    return a.sum < b.sum - tol || (a.sum <= b.sum + tol && a.sq < b.sq);
}

int plan_split_refine(const plan_chain *c, double X, int *first) {
    if (c->K < 1 || c->n < c->K) return -1;
    int n = c->n, K = c->K, rc = -1;
    chain_sums s;
    sums_init(&s, c);
    split_score *best = pt_malloc(sizeof(split_score) * (size_t)K * (n + 1)), inf = { INFINITY, INFINITY };
    int *from = pt_malloc(sizeof(int) * (size_t)K * (n + 1));
    for (int k = 0; k < K; k++)
        for (int j = 0; j <= n; j++) {
            split_score *b = &best[k * (n + 1) + j];
            *b = inf;
            for (int i = k; i < j; i++) {
                split_score prev = k == 0 ? (i == 0 ? (split_score){ 0, 0 } : inf) : best[(k - 1) * (n + 1) + i];
                double t = seg_time(&s, k, i, j);
                if (prev.sum == INFINITY || t > X || !seg_fits(&s, k, i, j)) continue;
                split_score cand = { prev.sum + t, prev.sq + t * t };
                if (score_less(cand, *b)) { *b = cand; from[k * (n + 1) + j] = i; }
            }
        }
    if (best[(K - 1) * (n + 1) + n].sum == INFINITY) goto done;
    first[K] = n;
    for (int k = K - 1, j = n; k >= 0; k--) j = first[k] = from[k * (n + 1) + j];
    rc = 0;
done:
    free(best); free(from);
    sums_free(&s);
    return rc;
}
