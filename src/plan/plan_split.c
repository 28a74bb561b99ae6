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
    double *X;              /* [K*(n+1)] prefix sums of each stage's row of extra, or NULL */
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
    s->X = NULL;
    if (!c->extra) return;
    size_t n1 = (size_t)c->n + 1;
    s->X = pt_calloc((size_t)c->K * n1, sizeof(double));
    for (int k = 0; k < c->K; k++)
        for (int i = 0; i < c->n; i++) s->X[k * n1 + i + 1] = s->X[k * n1 + i] + c->extra[(size_t)k * c->n + i];
}

static void sums_free(chain_sums *s) { free(s->W); free(s->MF); free(s->MA); free(s->X); }

/* The cut table and the prefix sums of a split search. */
static void tables_free(int *from, chain_sums *s) {
    free(from);
    sums_free(s);
}

/* Time of stage k holding items [i, j). */
static double seg_time(const chain_sums *s, int k, int i, int j) {
    double t = (s->W[j] - s->W[i]) / s->c->speed[k];
    if (s->X) t += s->X[(size_t)k * (s->c->n + 1) + j] - s->X[(size_t)k * (s->c->n + 1) + i];
    return t;
}

static bool seg_fits(const chain_sums *s, int k, int i, int j) {
    const plan_chain *c = s->c;
    if (c->cap[k] <= 0) return true;
    plan_mem_model m = { .fixed = s->MF[j] - s->MF[i], .act = s->MA[j] - s->MA[i],
                         .extra = c->mem_extra ? c->mem_extra[k] : 0 };
    return plan_mem_need(&m, c->inflight[k]) <= c->cap[k];
}

/* Feasibility at bottleneck X by reachability: reach[k][j] says items [0, j) fit on stages 0..k-1
 * with every stage within time X and its memory. Stage k can take [i, j) for i in [lo(j), j) only
 * (its time and memory grow as the range grows), and lo(j) never decreases as j grows, so one
 * sweep with a running count of reachable i per stage decides it: O(K n). (Taking as much as
 * fits per stage is not enough here: with unequal stages, a stage that takes an item can leave
 * the next stage one it cannot hold.) Fills first[K+1] and returns the largest stage time, or -1
 * when X is infeasible. reach and cnt: scratch of K+1 by n+1. */
static double feasible(const chain_sums *s, double X, int *first, unsigned char *reach, int *cnt) {
    const plan_chain *c = s->c;
    int n = c->n, K = c->K;
    memset(reach, 0, (size_t)(K + 1) * (n + 1));
    reach[0] = 1;   /* nothing placed on no stage */
    for (int k = 0; k < K; k++) {
        const unsigned char *rk = reach + (size_t)k * (n + 1);
        unsigned char *next = reach + (size_t)(k + 1) * (n + 1);
        int *ck = cnt + (size_t)k * (n + 2);   /* ck[i] = reachable positions in [0, i) */
        ck[0] = 0;
        for (int i = 0; i <= n; i++) ck[i + 1] = ck[i] + rk[i];
        for (int j = 1, lo = 0; j <= n; j++) {
            while (lo < j && !(seg_time(s, k, lo, j) <= X && seg_fits(s, k, lo, j))) lo++;
            next[j] = lo < j && ck[j] - ck[lo] > 0;
        }
    }
    if (!reach[(size_t)K * (n + 1) + n]) return -1;
    double worst = 0;
    first[K] = n;
    for (int k = K - 1, j = n; k >= 0; k--) {   /* walk back through any reachable cut */
        const unsigned char *rk = reach + (size_t)k * (n + 1);
        int i = j - 1;
        while (!(rk[i] && seg_time(s, k, i, j) <= X && seg_fits(s, k, i, j))) i--;
        first[k] = i;
        worst = fmax(worst, seg_time(s, k, i, j));
        j = i;
    }
    return worst;
}

int plan_split(const plan_chain *c, int *first, double *bottleneck) {
    if (c->K < 1 || c->n < c->K) return -1;
    chain_sums s;
    sums_init(&s, c);
    unsigned char *reach = pt_malloc((size_t)(c->K + 1) * (c->n + 1));
    int *cnt = pt_malloc(sizeof(int) * (size_t)c->K * (c->n + 2));
    double hi = feasible(&s, INFINITY, first, reach, cnt), lo = 0;
    int rc = -1;
    if (hi < 0) goto free_buffers;
    /* Bisection narrows (lo infeasible, hi feasible); hi is always an achieved bottleneck. */
    for (int it = 0; it < 200 && hi - lo > hi * 1e-15; it++) {
        double mid = lo + (hi - lo) / 2, t = feasible(&s, mid, first, reach, cnt);
        if (t >= 0) hi = t; else lo = mid;
    }
    /* Step down through achieved values until the next smaller double is infeasible: then hi is
     * feasible and nothing below it is (feasibility is monotone in X), so hi is the optimum. */
    for (;;) {
        double t = feasible(&s, nextafter(hi, 0), first, reach, cnt);
        if (t < 0) break;
        hi = t;
    }
    feasible(&s, hi, first, reach, cnt);
    *bottleneck = hi;
    rc = 0;
free_buffers:
    free(reach); free(cnt);
    sums_free(&s);
    return rc;
}

int plan_split_fits(const plan_chain *c) {
    if (c->K < 1 || c->n < c->K) return 0;
    chain_sums s;
    sums_init(&s, c);
    unsigned char *reach = pt_malloc((size_t)(c->K + 1) * (c->n + 1));
    int *cnt = pt_malloc(sizeof(int) * (size_t)c->K * (c->n + 2)), *first = pt_malloc(sizeof(int) * (size_t)(c->K + 1));
    int fits = feasible(&s, INFINITY, first, reach, cnt) >= 0;
    free(reach); free(cnt); free(first);
    sums_free(&s);
    return fits;
}

/* first[0..K] from a dynamic program's cut table: from[k][j] is where stage k starts when it
 * ends before item j (K by n+1). */
static void cuts_from_table(const int *from, int K, int n, int *first) {
    first[K] = n;
    for (int k = K - 1, j = n; k >= 0; k--) j = first[k] = from[k * (n + 1) + j];
}

/* The split's first layers from the cut table when a split was found (0), else -1. */
static int split_finish(int found, const int *from, int K, int n, int *first) {
    if (!found) return -1;
    cuts_from_table(from, K, n, first);
    return 0;
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
    rc = split_finish(opt != INFINITY, from, K, n, first);
    if (rc == 0) *bottleneck = opt;
    free(best);
    tables_free(from, &s);
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
    rc = split_finish(best[(K - 1) * (n + 1) + n].sum != INFINITY, from, K, n, first);
    free(best);
    tables_free(from, &s);
    return rc;
}
