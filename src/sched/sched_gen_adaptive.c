/* The adaptive generator ("adaptive"): a schedule for a pipeline whose links or stages turned
 * slow, within a memory limit, chosen among candidates by a judge the caller passes (the
 * simulator: sim_schedule_score) or by the list scheduler's own timeline. Pure: no I/O, no timing
 * of its own beyond the list scheduler's. Not the judge (sim/), not the online policy that decides
 * when to switch (sim/sim_adapt.c), not the list scheduler itself (sched_gen_list.c).
 * The design and the measured results: docs/stragglers.md.
 * Legend: P ranks (= stages: one per rank), M microbatches, L the per-stage memory limit. */
#include "sched/gen.h"
#include "sched/gen_list.h"
#include "util/pt.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Ties within this relative margin go to the candidate holding fewer activations (scores are
 * sums of the same costs: equal schedules differ by rounding only). */
#define ADAPT_TIE_REL 1e-9
/* The local search's budget from the best candidate, in actions timed (each swap it tries times
 * the whole order): about 4 ms, half a pass over P = 8, M = 32 (what gains there: 125.7 -> 125 in
 * test_local_search); P = 2, M = 8 searches until no swap gains. */
#define POLISH_WORK 300000L
/* ... and from each list candidate built for the real delays and limit, before it is judged: a
 * start the best does not reach by swaps may (on P = 2, M = 8, B, W 0.6..1.3 F, delays 1..4 F,
 * limits 2..4: 10 of 480 cases short of the optimum instead of 20); small, so only small
 * pipelines get far from it. */
#define POLISH_START_WORK (POLISH_WORK / 32)

/* How a list candidate caps a stage's forwards in flight (F started, B not). */
typedef enum {
    CAP_OWN,        /* the list scheduler's own: one round trip, minus the W's deferred under a limit */
    CAP_ROUND_TRIP, /* one round trip of costs and delays, in units of the stage's F */
    CAP_WARMUP,     /* PipeMorph's warm-up depth w[g] */
    CAP_LIMIT,      /* the memory limit itself (M without one) */
} adapt_cap;

typedef struct {
    gen_list_policy policy;
    adapt_cap cap;
    double scale;   /* the delays the candidate is built for, as a multiple of the real ones */
} adapt_list_cand;

/* The list candidates. Measured on random costs, delays and limits (docs/stragglers.md): each
 * row wins somewhere; the real delays (x1) win most, x0 is today's delay-blind greedy. */
static const adapt_list_cand list_cands[] = {
    { GEN_LIST_F_FIRST, CAP_OWN, 1 },        { GEN_LIST_B_FIRST, CAP_OWN, 1 },
    { GEN_LIST_F_FIRST, CAP_ROUND_TRIP, 1 }, { GEN_LIST_B_FIRST, CAP_ROUND_TRIP, 1 },
    { GEN_LIST_F_FIRST, CAP_WARMUP, 1 },     { GEN_LIST_B_FIRST, CAP_WARMUP, 1 },
    { GEN_LIST_F_FIRST, CAP_LIMIT, 1 },      { GEN_LIST_B_FIRST, CAP_LIMIT, 1 },
    { GEN_LIST_F_FIRST, CAP_OWN, 0 },        { GEN_LIST_B_FIRST, CAP_ROUND_TRIP, 0.5 },
    { GEN_LIST_F_FIRST, CAP_ROUND_TRIP, 0.5 }, { GEN_LIST_B_FIRST, CAP_ROUND_TRIP, 2 },
    { GEN_LIST_F_FIRST, CAP_ROUND_TRIP, 2 },
};
#define N_LIST_CANDS ((int)(sizeof list_cands / sizeof list_cands[0]))

static const char *const cap_name[] = { "own", "round-trip", "warm-up", "limit" };

/* The hand-made generators a scored search also tries, where they fit the limit. */
static sched *(*const fixed_gens[])(const sched_params *) = { gen_gpipe, gen_1f1b, gen_zb_h1, gen_zb_h2 };
static const char *const fixed_names[] = { "gpipe", "1f1b", "zb-h1", "zb-h2" };
#define N_FIXED ((int)(sizeof fixed_gens / sizeof fixed_gens[0]))

typedef struct {
    const sched_params *p;
    int P, M, L;
    int *stage_rank;        /* [P] stage g on rank g */
    double *f, *b, *w;      /* [P] costs, slowdowns applied */
    double *edge;           /* [P] delays of the candidate being built */
    double *busy;           /* [P] and the time each message holds its link's queue */
    int *cap;               /* [P] its in-flight caps */
    sched *best;
    double best_tie;        /* p->tiebreak of best, computed when a tie first needs it (NAN: not yet) */
    sched_adaptive_info info;
    char rejected[256];     /* why the judge rejected the last candidate it rejected */
} adapt_ctx;

static int adapt_check(const sched_params *p) {
    if (gen_check_common("adaptive", p) < 0) return -1;
    if (p->chunks > 1)
        return pt_seterr("schedule adaptive: chunks must be 1 (one stage per rank; got %d)", p->chunks);
    if (p->mem_limit < 0)
        return pt_seterr("schedule adaptive: mem_limit must be >= 0 (0: no limit; got %d)", p->mem_limit);
    return 0;
}

static void adapt_free(adapt_ctx *c) {
    free(c->stage_rank), free(c->f), free(c->b), free(c->w), free(c->edge), free(c->busy), free(c->cap);
    sched_free(c->best);
}

static int adapt_init(adapt_ctx *c, const sched_params *p) {
    c->p = p, c->P = p->ranks, c->M = p->microbatches, c->L = p->mem_limit;
    size_t n = (size_t)c->P;
    c->stage_rank = pt_malloc(n * sizeof(int)), c->cap = pt_malloc(n * sizeof(int));
    c->f = pt_malloc(n * sizeof(double)), c->b = pt_malloc(n * sizeof(double));
    c->w = pt_malloc(n * sizeof(double)), c->edge = pt_malloc(n * sizeof(double));
    c->busy = pt_malloc(n * sizeof(double));
    for (int g = 0; g < c->P; g++) c->stage_rank[g] = g;
    c->info.score = INFINITY, c->best_tie = NAN;
    if (gen_stage_costs("adaptive", p, c->P, c->f, c->b, c->w) < 0 ||
        gen_edge_delays("adaptive", p, c->stage_rank, c->P, 1.0, c->edge) < 0 ||
        gen_edge_busy("adaptive", p, c->stage_rank, c->P, 1.0, c->busy) < 0)
        return -1;
    return 0;
}

/* PipeMorph's depths from edge delays d[P] (a message's whole time on an idle link: its delay and
 * queue time) and forward costs f[P] into w[P]. */
static void warmup_depths(int P, const double *f, const double *d, const double *q, int *w) {
    w[P - 1] = 1;
    for (int i = P - 2; i >= 0; i--) {
        double k = ceil((d[i] + q[i]) / f[i]);
        w[i] = w[i + 1] + (k < 1e6 ? (int)k : 1000000) + 2;
    }
}

/* Fills c->cap for candidate k under the delays now in c->edge and c->busy and limit lim (clamped
 * to 1..M+1). */
static void adapt_caps(adapt_ctx *c, adapt_cap k, int lim) {
    if (k == CAP_WARMUP) warmup_depths(c->P, c->f, c->edge, c->busy, c->cap);
    for (int g = c->P - 1; g >= 0; g--) {
        double t = 0;
        for (int j = g + 1; j < c->P; j++) t += c->f[j] + c->b[j] + 2 * (c->edge[j - 1] + c->busy[j - 1]);
        double v = k == CAP_ROUND_TRIP ? 1 + t / c->f[g] : k == CAP_WARMUP ? c->cap[g] : lim > 0 ? lim : c->M;
        c->cap[g] = v < 1 ? 1 : v > c->M + 1 ? c->M + 1 : (int)v;
    }
}

/* Whether s (scored v, holding peak) beats the best so far: a lower score; at an equal one, fewer
 * activations; at both equal, a lower tiebreak (the best's is computed once, when first needed).
 * Without a tiebreak the first of equals stays. *tb gets s's tiebreak when it was computed. */
static bool adapt_better(adapt_ctx *c, const sched *s, double v, int peak, double *tb) {
    *tb = NAN;
    if (!c->best) return true;
    double tie = ADAPT_TIE_REL * (fabs(c->info.score) > 1 ? fabs(c->info.score) : 1);
    if (v < c->info.score - tie) return true;
    if (v > c->info.score + tie || peak > c->info.peak) return false;
    if (peak < c->info.peak) return true;
    if (!c->p->tiebreak) return false;
    if (isnan(c->best_tie)) c->best_tie = c->p->tiebreak(c->best, c->p->score_user);
    *tb = c->p->tiebreak(s, c->p->score_user);
    double eps = ADAPT_TIE_REL * (fabs(c->best_tie) > 1 ? fabs(c->best_tie) : 1);
    return *tb >= 0 && (c->best_tie < 0 || *tb < c->best_tie - eps);
}

/* Judges candidate s (with the list scheduler's makespan, or -1 for a hand-made one) and keeps
 * the better of it and the best so far; takes s. A candidate over the limit or rejected by the
 * judge is dropped. Returns -1 only when s is NULL (its generator failed: pt_err says why). */
static int adapt_offer(adapt_ctx *c, sched *s, double makespan, const char *what) {
    if (!s) return -1;
    int *pk = pt_calloc((size_t)s->n_stages, sizeof(int)), peak = 0;
    sched_peak_activations(s, pk);
    for (int g = 0; g < s->n_stages; g++) peak = pk[g] > peak ? pk[g] : peak;
    free(pk);
    double v = c->L > 0 && peak > c->L ? -1 : c->p->score ? c->p->score(s, c->p->score_user) : makespan, tb;
    if (v < 0 && !(c->L > 0 && peak > c->L)) snprintf(c->rejected, sizeof c->rejected, "%s: %s", what, pt_err());
    if (v < 0) { sched_free(s); return 0; }
    c->info.n_judged++;
    if (!adapt_better(c, s, v, peak, &tb)) { sched_free(s); return 0; }
    sched_free(c->best);
    c->best = s, c->best_tie = tb, c->info.score = v, c->info.peak = peak;
    snprintf(c->info.winner, sizeof c->info.winner, "%s", what);
    return 0;
}

/* Whether rank r's actions at i and i+1 may trade places: both compute, not the same
 * microbatch's F, B and W of one stage (their own order), not of one kind (each stage keeps its
 * microbatch order), and an F moved ahead of a W keeps the stage within limit L (held: the
 * stage's activations before i). A swap that deadlocks the ranks is caught by the timing. */
static bool polish_swappable(const sched *s, int r, int i, int held, int L) {
    const sched_action *a = &s->acts[r][i], *b = &s->acts[r][i + 1];
    if (!sched_kind_is_compute(a->kind) || !sched_kind_is_compute(b->kind)) return false;
    if (a->kind == b->kind || (a->stage == b->stage && a->mb == b->mb)) return false;
    return !(L > 0 && b->kind == ACT_F && a->kind == ACT_W && held + 1 > L);
}

/* The local search's order: its makespan by gen_list_timer_run, its summed end time, and how many
 * more timings the search may spend. */
typedef struct {
    double v, sum;
    long evals_left;
} polish_state;

/* One pass of the local search over every rank's adjacent pairs: a swap stays when the order's
 * timeline (gen_list_timer_run) ends earlier, or as early with less summed end time (work moved
 * earlier: what lets a later swap gain). Returns whether any stayed. */
static bool polish_pass(gen_list_timer *T, sched *s, int L, polish_state *ps) {
    bool gained = false;
    for (int r = 0; r < s->n_ranks; r++)
        for (int i = 0, held = 0; i + 1 < s->len[r] && ps->evals_left > 0; i++) {
            sched_action *a = s->acts[r];
            if (polish_swappable(s, r, i, held, L)) {
                sched_action x = a[i];
                a[i] = a[i + 1], a[i + 1] = x;
                double tie = ADAPT_TIE_REL * ps->v, sm, t = gen_list_timer_run(T, s, ps->v + tie, &sm);
                ps->evals_left--;
                if (t >= 0 && (t < ps->v - tie || (t <= ps->v + tie && sm < ps->sum - ADAPT_TIE_REL * ps->sum)))
                    ps->v = t, ps->sum = sm, gained = true;
                else
                    a[i + 1] = a[i], a[i] = x;
            }
            held += a[i].kind == ACT_F ? 1 : a[i].kind == ACT_W || a[i].kind == ACT_BW ? -1 : 0;
        }
    return gained;
}

/* The local search from `from` (named `what`): adjacent swaps under the real delays while they
 * gain, within `work` actions timed; the result, when its timeline gains, is offered to the judge
 * like any candidate (so it wins only where the judge agrees). */
static int adapt_polish(adapt_ctx *c, const sched *from, const char *what, long work) {
    if (gen_edge_delays("adaptive", c->p, c->stage_rank, c->P, 1.0, c->edge) < 0 ||
        gen_edge_busy("adaptive", c->p, c->stage_rank, c->P, 1.0, c->busy) < 0)
        return -1;
    gen_list_spec sp = {
        .name = "adaptive", .n_ranks = c->P, .n_stages = c->P, .n_pipes = 1, .n_mb = c->M,
        .stage_rank = c->stage_rank, .cost_f = c->f, .cost_b = c->b, .cost_w = c->w,
        .edge_delay = c->edge, .edge_busy = c->busy,
    };
    sched *s = sched_copy(from);
    gen_list_timer *T = gen_list_timer_new(&sp, s);
    polish_state ps = { .evals_left = work / sched_total_actions(s) };
    double v0 = ps.v = gen_list_timer_run(T, s, 0, &ps.sum);
    while (v0 >= 0 && ps.evals_left > 0 && polish_pass(T, s, c->L, &ps)) {}
    gen_list_timer_free(T);
    if (v0 < 0 || ps.v >= v0) { sched_free(s); return 0; }
    char name[64];
    snprintf(name, sizeof name, "%s%.52s", strncmp(what, "swaps from ", 11) ? "swaps from " : "", what);
    return adapt_offer(c, s, ps.v, name);
}

/* Builds list candidate k under per-stage limit lim and offers it; one built for the real delays
 * and limit also offers what the local search makes of it. Without a scorer only candidates
 * built for the real delays are comparable (their makespans are under those delays). */
static int adapt_list(adapt_ctx *c, const adapt_list_cand *k, int lim) {
    if (!c->p->score && k->scale != 1) return 0;
    if (gen_edge_delays("adaptive", c->p, c->stage_rank, c->P, k->scale, c->edge) < 0 ||
        gen_edge_busy("adaptive", c->p, c->stage_rank, c->P, k->scale, c->busy) < 0)
        return -1;
    adapt_caps(c, k->cap, lim);
    gen_list_spec sp = {
        .name = "adaptive", .n_ranks = c->P, .n_stages = c->P, .n_pipes = 1, .n_mb = c->M,
        .stage_rank = c->stage_rank, .cost_f = c->f, .cost_b = c->b, .cost_w = c->w,
        .stage_limit = lim, .edge_delay = c->edge, .edge_busy = c->busy, .policy = k->policy,
        .stage_cap = k->cap == CAP_OWN ? NULL : c->cap,
    };
    double makespan;
    sched *s = gen_list_run(&sp, &makespan);
    char what[64];
    int n = snprintf(what, sizeof what, "list %s cap=%s delays x%g", k->policy == GEN_LIST_B_FIRST ? "b-first" :
                     "f-first", cap_name[k->cap], k->scale);
    if (lim != c->L && n > 0 && n < (int)sizeof what) snprintf(what + n, sizeof what - (size_t)n, " limit %d", lim);
    if (s && k->scale == 1 && lim == c->L && adapt_polish(c, s, what, POLISH_START_WORK) < 0) return -1;
    return adapt_offer(c, s, makespan, what);
}

sched *sched_adaptive(const sched_params *p, sched_adaptive_info *info) {
    if (adapt_check(p) < 0) return NULL;
    adapt_ctx c = { 0 };
    sched *out = NULL;
    if (adapt_init(&c, p) < 0) goto free_ctx;
    for (int i = 0; i < N_LIST_CANDS; i++)
        if (adapt_list(&c, &list_cands[i], c.L) < 0) goto free_ctx;
    for (int k = 2; k >= 1; k--)        /* under 2P and P too, below the limit: as fast in less memory wins the tie */
        for (int i = 0; (c.L == 0 || k * c.P < c.L) && i < N_LIST_CANDS; i++)
            if (list_cands[i].scale == 1 && adapt_list(&c, &list_cands[i], k * c.P) < 0) goto free_ctx;
    for (int i = 0; p->score && i < N_FIXED; i++) {
        sched_params q = *p;
        q.chunks = 1;
        if (adapt_offer(&c, fixed_gens[i](&q), -1, fixed_names[i]) < 0) goto free_ctx;
    }
    if (c.best && adapt_polish(&c, c.best, c.info.winner, POLISH_WORK) < 0) goto free_ctx;
    if (!c.best) {
        pt_seterr("schedule adaptive: the judge rejected every candidate (the last: %s)", c.rejected);
        goto free_ctx;
    }
    out = c.best, c.best = NULL;
    snprintf(out->name, sizeof out->name, "adaptive");
    if (info) *info = c.info;
free_ctx:
    adapt_free(&c);
    return out;
}

sched *gen_adaptive(const sched_params *p) { return sched_adaptive(p, NULL); }

int sched_adaptive_warmup(const sched_params *p, int *w) {
    adapt_ctx c = { 0 };
    int rc = adapt_check(p) < 0 || adapt_init(&c, p) < 0 ? -1 : 0;
    if (rc == 0) warmup_depths(c.P, c.f, c.edge, c.busy, w);
    adapt_free(&c);
    return rc;
}
