/* How far the adaptive generator is from the best schedule there is: an exact branch and bound
 * over each rank's order of F, B and W for small pipelines (P = 2, M <= 8) under a per-stage
 * memory limit, with the simulator's model of link delays and queues; checks that what it finds
 * is valid and simulates to what it computed, that the adaptive schedule is as fast on these
 * cases (before its local search it was 1.6% slower at B = 1.2 F, W = 0.7 F, a delay of 3 F,
 * limit 4), and prints each case's gap. Test-only:
 * the runtime never searches like this (exponential). Not the generator (sched_gen_adaptive.c).
 *
 * The search: microbatches are interchangeable (equal costs per stage), so each stage runs its
 * F's, its B's and its W's in microbatch order (any schedule can be relabelled or exchanged into
 * one that does, no slower) and a rank's order is a word over {F, B, W}. Orders are built one
 * action at a time in (start time, rank) order, so each pair of words is built once; a branch is
 * cut when a bound (every rank's remaining work; the last microbatch's chain of forwards,
 * messages and backwards) reaches the best found, and a state seen before is not searched again.
 * Legend: P ranks (= stages), M microbatches, L per-stage memory limit. */
#include "sched/sched.h"
#include "sim/sim.h"
#include "util/pt.h"
#include "test.h"
#include <stdint.h>
#include <string.h>

#define XP 2            /* ranks the search handles (its state grows with P: 2 is what it is for) */
#define XM 8            /* microbatches at most */
/* Times are sums of costs in doubles: two starts within this are the same instant. */
#define X_EPS 1e-9
/* States remembered (a hash set); beyond it the search goes on without remembering. */
#define X_MEMO (1 << 20)

typedef struct {
    int P, M, L;
    double f[XP], b[XP], w[XP], delay[XP], busy[XP];   /* busy: a message's queue time (0: none) */
} xcase;

typedef struct {
    int nf[XP], nb[XP], nw[XP];
    double t[XP];               /* rank free */
    double farr[XP][XM];        /* F(g, m)'s output at g+1 */
    double barr[XP][XM];        /* B(g, m)'s gradient at g-1 */
    double qfree[2 * XP];       /* link g-g+1's queue free: [2g] forward, [2g+1] back */
    double last_s;
    int last_g;
    char word[XP][3 * XM];      /* each rank's order so far */
} xstate;

typedef struct {
    const xcase *c;
    double best;                /* the incumbent's makespan */
    char best_word[XP][3 * XM];
    long nodes;
    uint64_t *memo;             /* hashes of states searched */
} xsearch;

static double xmax(double a, double b) { return a > b ? a : b; }

/* A lower bound of the makespan of every completion of s. */
static double x_bound(const xsearch *X, const xstate *s) {
    const xcase *c = X->c;
    int P = c->P, M = c->M;
    double lb = 0, in_f = 0, ef[XP];
    for (int g = 0; g < P; g++) {
        double t0 = xmax(s->t[g], s->last_s);
        if (s->nw[g] < M)
            lb = xmax(lb, t0 + (M - s->nf[g]) * c->f[g] + (M - s->nb[g]) * c->b[g] + (M - s->nw[g]) * c->w[g]);
        ef[g] = s->nf[g] == M ? 0 : xmax(t0 + (M - s->nf[g]) * c->f[g], in_f + c->f[g]);
        if (g + 1 < P) in_f = s->nf[g] == M ? s->farr[g][M - 1] : ef[g] + c->delay[g] + c->busy[g];
    }
    double in_b = 0;
    for (int g = P - 1; g >= 0; g--) {
        if (s->nb[g] == M) { in_b = g > 0 ? s->barr[g][M - 1] : 0; continue; }
        double t0 = xmax(s->t[g], s->last_s);
        double eb = xmax(t0 + (M - s->nf[g]) * c->f[g] + (M - s->nb[g]) * c->b[g],
                         xmax(g == P - 1 ? ef[g] : in_b, 0) + c->b[g]);
        lb = xmax(lb, eb + c->w[g]);
        in_b = eb + (g > 0 ? c->delay[g - 1] + c->busy[g - 1] : 0);
    }
    return lb;
}

/* FNV-1a over what decides s's completions (counts, times, pending messages, queues, order key). */
static uint64_t x_hash(const xsearch *X, const xstate *s) {
    const xcase *c = X->c;
    uint64_t h = 1469598103934665603ull;
#define MIX(v) do { double d_ = (v); unsigned char *p_ = (unsigned char *)&d_; \
    for (size_t i_ = 0; i_ < sizeof d_; i_++) h = (h ^ p_[i_]) * 1099511628211ull; } while (0)
    for (int g = 0; g < c->P; g++) {
        MIX(s->nf[g] + 16 * s->nb[g] + 256 * s->nw[g]);
        MIX(s->t[g]);
        for (int m = g + 1 < c->P ? s->nf[g + 1] : 0; g + 1 < c->P && m < s->nf[g]; m++) MIX(s->farr[g][m]);
        for (int m = g > 0 ? s->nb[g - 1] : 0; g > 0 && m < s->nb[g]; m++) MIX(s->barr[g][m]);
        MIX(s->qfree[2 * g]);
        MIX(s->qfree[2 * g + 1]);
    }
    MIX(s->last_s);
    MIX(s->last_g);
#undef MIX
    return h | 1;
}

/* True when h was seen (and records it otherwise). */
static bool x_seen(xsearch *X, uint64_t h) {
    for (uint64_t i = h & (X_MEMO - 1), k = 0; k < 64; i = (i + 1) & (X_MEMO - 1), k++) {
        if (X->memo[i] == h) return true;
        if (!X->memo[i]) { X->memo[i] = h; return false; }
    }
    return false;
}

/* Rank g's next action of kind k (0 F, 1 B, 2 W) in s: its start, or -1 when it cannot be next
 * (none left, over the limit, or its input not yet scheduled). */
static double x_start(const xcase *c, const xstate *s, int g, int k) {
    int P = c->P, M = c->M;
    double ready = 0;
    if (k == 0) {
        if (s->nf[g] == M || (c->L > 0 && s->nf[g] - s->nw[g] >= c->L)) return -1;
        if (g > 0 && s->nf[g] >= s->nf[g - 1]) return -1;
        if (g > 0) ready = s->farr[g - 1][s->nf[g]];
    } else if (k == 1) {
        if (s->nb[g] >= s->nf[g] || (g + 1 < P && s->nb[g] >= s->nb[g + 1])) return -1;
        if (g + 1 < P) ready = s->barr[g + 1][s->nb[g]];
    } else if (s->nw[g] >= s->nb[g]) {
        return -1;
    }
    return xmax(s->t[g], ready);
}

/* The arrival of a message leaving g for `to` at `end`: its direction's queue, then the delay. */
static double x_send(const xcase *c, xstate *s, int g, int to, double end) {
    int e = g < to ? g : to;
    double out = end;
    if (c->busy[e] > 0) {
        double *q = &s->qfree[2 * e + (to < g)];
        out = xmax(*q, end) + c->busy[e];
        *q = out;
    }
    return out + c->delay[e];
}

static void x_apply(const xcase *c, xstate *s, int g, int k, double start) {
    int P = c->P, pos = s->nf[g] + s->nb[g] + s->nw[g];
    s->word[g][pos] = "FBW"[k];
    s->last_s = start, s->last_g = g;
    if (k == 0) {
        s->t[g] = start + c->f[g];
        if (g + 1 < P) s->farr[g][s->nf[g]] = x_send(c, s, g, g + 1, s->t[g]);
        s->nf[g]++;
    } else if (k == 1) {
        s->t[g] = start + c->b[g];
        if (g > 0) s->barr[g][s->nb[g]] = x_send(c, s, g, g - 1, s->t[g]);
        s->nb[g]++;
    } else {
        s->t[g] = start + c->w[g], s->nw[g]++;
    }
}

static void x_dfs(xsearch *X, const xstate *s) {
    const xcase *c = X->c;
    X->nodes++;
    int done = 1;
    for (int g = 0; g < c->P; g++) done &= s->nw[g] == c->M;
    if (done) {
        double mk = 0;
        for (int g = 0; g < c->P; g++) mk = xmax(mk, s->t[g]);
        if (mk < X->best - X_EPS) X->best = mk, memcpy(X->best_word, s->word, sizeof s->word);
        return;
    }
    if (x_bound(X, s) >= X->best - X_EPS || x_seen(X, x_hash(X, s))) return;
    /* children in order of start: the earliest first finds good schedules sooner */
    double st[3 * XP];
    int order[3 * XP], n = 0;
    for (int g = 0; g < c->P; g++)
        for (int k = 0; k < 3; k++) {
            double v = x_start(c, s, g, k);
            if (v < 0 || v < s->last_s - X_EPS || (v <= s->last_s + X_EPS && g <= s->last_g)) continue;
            int i = n++;
            for (; i > 0 && st[i - 1] > v; i--) st[i] = st[i - 1], order[i] = order[i - 1];
            st[i] = v, order[i] = 3 * g + k;
        }
    for (int i = 0; i < n; i++) {
        xstate t = *s;
        x_apply(c, &t, order[i] / 3, order[i] % 3, st[i]);
        x_dfs(X, &t);
    }
}

/* The best makespan of c strictly below `above` (+inf: no bound), its orders into *out (NULL when
 * none is below). Returns the makespan, or `above` when nothing beats it. */
static double x_optimum(const xcase *c, double above, sched **out, long *nodes) {
    xsearch X = { .c = c, .best = above };
    X.memo = pt_calloc(X_MEMO, sizeof(uint64_t));
    xstate s;
    memset(&s, 0, sizeof s);
    s.last_s = -1, s.last_g = -1;
    x_dfs(&X, &s);
    free(X.memo);
    *nodes = X.nodes;
    *out = NULL;
    if (X.best >= above) return above;
    sched *r = sched_new(c->P, c->P, 1, c->M);
    for (int g = 0; g < c->P; g++) {
        int n[3] = { 0, 0, 0 };
        for (int i = 0; i < 3 * c->M; i++) {
            int k = X.best_word[g][i] == 'F' ? 0 : X.best_word[g][i] == 'B' ? 1 : 2;
            sched_push(r, g, k == 0 ? ACT_F : k == 1 ? ACT_B : ACT_W, g, n[k]++);
        }
    }
    sched_append_sync_tail(r);
    *out = r;
    return X.best;
}

/* ---- the cases ---- */

/* The simulated iteration time of s under c (a sched_score_fn: user is the case). */
static double x_judge(const sched *s, void *user) {
    const xcase *c = user;
    sim_costs sc;
    sim_costs_init(&sc, c->P, 1, 1, 1);
    for (int g = 0; g < c->P; g++) sc.f[g] = c->f[g], sc.b[g] = c->b[g], sc.w[g] = c->w[g], sc.act_bytes[g] = 1;
    for (int r = 0; r + 1 < c->P; r++) {
        if (c->delay[r] > 0) sim_costs_set_link(&sc, r, r + 1, -1, -1, c->delay[r]);
        if (c->busy[r] > 0) sim_costs_set_link_rate(&sc, r, r + 1, 1 / c->busy[r]);
    }
    sim_result res;
    int rc = sim_run(s, &sc, &(sim_opts){ 1, false }, &res);
    sim_costs_free(&sc);
    if (rc < 0) return -1;
    double t = res.iteration_time;
    sim_result_free(&res);
    return t;
}

static int x_peak(const sched *s) {
    int pk[XP], peak = 0;
    sched_peak_activations(s, pk);
    for (int g = 0; g < s->n_stages; g++) peak = pk[g] > peak ? pk[g] : peak;
    return peak;
}

static xcase x_case(int M, int L, double f, double b, double w, double delay, double busy) {
    xcase c = { .P = 2, .M = M, .L = L, .f = { f, f }, .b = { b, b }, .w = { w, w } };
    c.delay[0] = delay, c.busy[0] = busy;
    return c;
}

/* One case: adaptive's time, the optimum (searched below adaptive's time plus a hair, so it
 * finds a schedule even when adaptive is optimal), and checks that the optimum is a valid
 * schedule within L whose simulated time is the search's, and that adaptive reaches it. */
static void x_check(const char *tname, const xcase *c, double *adaptive, double *optimum) {
    sched_params p = { .ranks = c->P, .microbatches = c->M, .mem_limit = c->L, .stage_cost_f = c->f,
                       .stage_cost_b = c->b, .stage_cost_w = c->w, .link_delay = c->delay,
                       .link_busy = c->busy, .score = x_judge, .score_user = (void *)c };
    sched_adaptive_info info;
    sched *a = sched_adaptive(&p, &info), *o;
    long nodes;
    *adaptive = a ? x_judge(a, (void *)c) : -1;
    *optimum = x_optimum(c, *adaptive + 1e-6, &o, &nodes);
    double sim = o ? x_judge(o, (void *)c) : -1;
    int valid = o && sched_validate(o, NULL) == 0, peak = o ? x_peak(o) : -1;
    CHECK(tname, a && o && valid && (c->L == 0 || peak <= c->L) && fabs(sim - *optimum) < 1e-6 &&
          *adaptive <= *optimum + 1e-6,
          "adaptive %g, search %g (simulated %g, valid %d, peak %d; %s)", *adaptive, *optimum, sim, valid, peak,
          o ? "" : pt_err());
    printf("# P=2 M=%d L=%d f=%g b=%g w=%g delay %g queue %g: adaptive %g (%s), optimum %g, gap %.1f%% (%ld nodes)\n",
           c->M, c->L, c->f[0], c->b[0], c->w[0], c->delay[0], c->busy[0], *adaptive, info.winner, *optimum,
           100 * (*adaptive / *optimum - 1), nodes);
    if (o && getenv("PT_EXACT_PRINT")) sched_print(o, stdout);
    sched_free(a), sched_free(o);
}

int main(void) {
    static const struct { double f, b, w; } costs[] = { { 1, 1, 1 }, { 1, 1.2, 0.7 } };
    static const double delays[] = { 0, 1, 2, 3 };
    for (int ic = 0; ic < 2; ic++)
        for (int id = 0; id < 4; id++)
            for (int L = 2; L <= 4; L++) {
                xcase c = x_case(8, L, costs[ic].f, costs[ic].b, costs[ic].w, delays[id] * costs[ic].f, 0);
                char tname[96];
                snprintf(tname, sizeof tname, "exact_p2_m8_L%d_b%g_w%g_delay%g_adaptive_is_optimal", L,
                         costs[ic].b, costs[ic].w, delays[id]);
                double a, o;
                x_check(tname, &c, &a, &o);
            }
    TEST_DONE();
}
