/* The planner's search: every tensor-parallel degree tp (a divisor of n_head and of the devices,
 * its groups inside nodes unless allowed across), data-parallel degree D dividing the devices / tp
 * (P = devices / (tp D)), device placement, power-of-two microbatch size, schedule,
 * recomputation (none, whole-stage, communication-free), TP overlap and sequence parallelism; a
 * lower bound per candidate that holds for each of its splits that fits (plan_candidate_bound);
 * then the simulator on candidates in bound order until the bound passes the N-th best simulated
 * time, at most max_sims, each candidate given up as soon as its bounds show it cannot enter the
 * top N (so the pruning loses nothing: tests/test_plan_prune.c checks it against
 * plan_opts.exhaustive). Not here: the split itself (plan_split.c), bounds and scoring
 * (plan_eval.c). */
#include "plan/plan_int.h"
#include "sched/sched_lend.h"
#include "util/pt.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { const char *name; int v; } sched_choice;
#define MAX_CHOICES_PER_ROW 2                 /* v, and 2v when the row takes more chunks */
#define DEFAULT_MAX_SIMS 400
#define MAX_RANK_MICROBATCHES (1L << 18)   /* P x M: schedules past this are slow to generate */
#define POLISH_BUDGET(K) (32 + 4 * (K))   /* simulations of local search per candidate */

/* How a candidate keeps activations and runs its TP all-reduces. */
typedef struct {
    bool recompute, tp_recompute, tp_overlap, sp;
} act_mode;
#define MAX_MODES 9                            /* {none, recompute, tp_recompute} x {-, overlap, sp} */

typedef struct {
    int P, D, tp, B, M, v, sched_i, placement;   /* placement: 0 node, 1 mixed */
    act_mode mode;
    int *first;                               /* [K+1] */
    double bound;
} candidate;

typedef struct {
    const gpt_config *cfg;
    const plan_cluster *k;
    const plan_opts *o;
    sched_choice *sc;                         /* [n_sc] */
    int n_sc;
    candidate *cand;
    long n_cand, cap_cand;
    int *mixed;                               /* [n_devices] mixed placement of the current D, tp */
    plan_result *res;
    double lean_need, lean_cap;               /* the smallest memory shortfall seen, for advice */
    int lean_P, lean_tp;
} search;

static void push_candidate(search *S, const candidate *c) {
    if (S->n_cand == S->cap_cand) {
        S->cap_cand = S->cap_cand ? 2 * S->cap_cand : 256;
        candidate *n = pt_malloc(sizeof *n * (size_t)S->cap_cand);
        if (S->n_cand) memcpy(n, S->cand, sizeof *n * (size_t)S->n_cand);
        free(S->cand);
        S->cand = n;
    }
    S->cand[S->n_cand++] = *c;
}

/* Mixed placement: every pipeline gets the same share of each device class (consecutive devices
 * of a class, so of a node, stay together; tp consecutive ones form a rank's TP group), classes
 * with more memory first (stage 0 holds the most activations). Returns 0, or -1 when a class does
 * not divide by D x tp. */
static int make_mixed(const plan_cluster *k, int P, int D, int tp, int *out) {
    int *order = pt_malloc(sizeof(int) * (size_t)k->n_classes), rc = -1;
    int *cnt = pt_calloc((size_t)k->n_classes, sizeof(int));
    double *mem = pt_calloc((size_t)k->n_classes, sizeof(double));
    for (int i = 0; i < k->n_devices; i++) { cnt[k->dev[i].cls]++; mem[k->dev[i].cls] = k->dev[i].memory; }
    for (int c = 0; c < k->n_classes; c++) {
        order[c] = c;
        if (cnt[c] % (D * tp)) goto done;
    }
    for (int a = 1; a < k->n_classes; a++)          /* insertion sort, memory descending */
        for (int b = a; b > 0 && mem[order[b]] > mem[order[b - 1]]; b--) { int t = order[b]; order[b] = order[b - 1]; order[b - 1] = t; }
    int p = 0;
    for (int oc = 0; oc < k->n_classes; oc++) {
        int c = order[oc], share = cnt[c] / (D * tp), seen = 0;   /* share: ranks per pipeline */
        for (int i = 0; i < k->n_devices; i++) {
            if (k->dev[i].cls != c) continue;
            int u = seen / tp;                                      /* the class's u-th TP group */
            out[((u / share) * P + p + u % share) * tp + seen % tp] = i;
            seen++;
        }
        p += share;
    }
    rc = 0;
done:
    free(order); free(cnt); free(mem);
    return rc;
}

/* Leanest-shortfall bookkeeping for the advice when nothing fits. */
static void note_shortfall(search *S, const plan_items *it, const plan_ranks *r, const sched *s) {
    int K = s->n_stages, *first = pt_malloc(sizeof(int) * (size_t)(K + 1)), rank = 0;
    for (int g = 0; g <= K; g++) first[g] = (int)((long)g * it->n / K);
    double need = plan_peak_need(it, s, first, &rank);
    if (S->lean_need == 0 || need / r->cap[rank] < S->lean_need / S->lean_cap) {
        S->lean_need = need; S->lean_cap = r->cap[rank]; S->lean_P = r->P; S->lean_tp = r->tp;
    }
    free(first);
}

/* The schedule used for P = 1: 1f1b if listed (it holds one microbatch), else the first. */
static int first_single(const search *S) {
    for (int i = 0; i < S->n_sc; i++) if (!strcmp(S->sc[i].name, "1f1b")) return i;
    return 0;
}

/* One candidate: schedule s (si) in activation mode md, kept with its lower bound when a split of
 * it fits (plan_candidate_bound; the split itself is made when it is simulated). */
static void consider(search *S, const plan_items *it, const plan_ranks *r, const sched *s, int si, int pl, int B,
                     int M, act_mode md) {
    S->res->considered++;
    double bound = plan_candidate_bound(S->k, it, r, s, plan_p2p_bytes(S->cfg, B, S->o->T));
    if (bound < 0) {
        S->res->infeasible++;
        note_shortfall(S, it, r, s);
        return;
    }
    candidate c = { r->P, r->D, r->tp, B, M, S->sc[si].v, si, pl, md, pt_malloc(sizeof(int) * (size_t)(s->n_stages + 1)),
                    bound };
    push_candidate(S, &c);
}

/* The per-layer numbers of a candidate's shape. */
static void items_for(const search *S, plan_items *it, const plan_scale *sc, int D, int tp, int B, act_mode md) {
    plan_item_shape sh = { B, S->o->T, tp, S->o->zero ? D : 1, md.recompute, md.tp_overlap, md.tp_recompute, md.sp,
                           S->o->seq_chunks, S->o->balance_memory, S->o->async_window };
    plan_items_init(it, S->cfg, sc, &sh);
}

/* The activation modes tried at (tp, B): recomputation off, whole-stage, communication-free (tp
 * >= 2), each plain, with overlap (tp >= 2, B >= 2; it changes nothing at B = 1) and with
 * sequence parallelism (tp >= 2 dividing B*T; not with overlap, as the runtime refuses). The
 * overlap mode comes right after its plain twin (enumerate_b relies on it). */
static int modes_for(const search *S, int tp, int B, act_mode *out) {
    int n = 0;
    if (S->o->seq_chunks > 1) {   /* a chunk keeps its whole act: no recompute, overlap or sp */
        out[0] = (act_mode){ false, false, false, false };
        return 1;
    }
    bool ov = tp > 1 && B > 1 && !S->o->no_tp_overlap;
    bool sp = tp > 1 && !S->o->no_sp && ((long)B * S->o->T) % tp == 0;
    for (int rc = 0; rc < 3; rc++) {
        if ((rc == 1 && S->o->no_recompute) || (rc == 2 && (tp < 2 || S->o->no_tp_recompute))) continue;
        for (int o = 0; o <= (int)ov; o++) out[n++] = (act_mode){ rc == 1, rc == 2, o == 1, false };
        if (sp) out[n++] = (act_mode){ rc == 1, rc == 2, false, true };
    }
    return n;
}

/* Whether overlap's TP time is no more than the blocking one's for every item on every rank: then
 * the mode without overlap holds the same bytes and is never faster (a step is a longest path
 * through the schedule's fixed order, monotone in every duration), so it is not tried. */
static bool overlap_dominates(const plan_items *on, const plan_items *off, const plan_ranks *r) {
    for (int p = 0; p < r->P; p++)
        for (int i = 0; i < on->n; i++)
            for (int ph = PLAN_F; ph <= PLAN_B; ph++)
                if (plan_item_tp_time(on, r, p, i, ph) > plan_item_tp_time(off, r, p, i, ph)) return false;
    return true;
}

/* All schedules x activation modes for one (tp, D, P, placement, B). */
static void enumerate_b(search *S, int tp, int P, int D, int pl, int B, int M) {
    if ((long)P * M > MAX_RANK_MICROBATCHES) return;   /* a larger microbatch size covers it */
    plan_scale sc;
    plan_scale_init(&sc, S->o->costs, S->k, B);
    plan_ranks r;
    plan_ranks_init(&r, S->k, &sc, P, D, tp, pl ? S->mixed : NULL);
    act_mode md[MAX_MODES];
    int n_md = modes_for(S, tp, B, md);
    bool skip[MAX_MODES] = { false };
    plan_items it[MAX_MODES];
    for (int m = 0; m < n_md; m++) items_for(S, &it[m], &sc, D, tp, B, md[m]);
    for (int m = 1; m < n_md; m++)   /* an overlap mode follows its blocking twin */
        if (md[m].tp_overlap) skip[m - 1] = overlap_dominates(&it[m], &it[m - 1], &r);
    for (int si = 0; si < S->n_sc; si++) {
        if (P == 1 && si != first_single(S)) continue;   /* one rank: every schedule is the same */
        sched *s = P * S->sc[si].v <= S->cfg->n_layer
                 ? plan_make_sched(S->sc[si].name, P, M, S->sc[si].v, S->o->seq_chunks) : NULL;
        for (int m = 0; s && s->n_pipes == 1 && m < n_md; m++)
            if (!skip[m]) consider(S, &it[m], &r, s, si, pl, B, M, md[m]);
        sched_free(s);
    }
    for (int m = 0; m < n_md; m++) plan_items_free(&it[m]);
    plan_ranks_free(&r);
}

/* Whether the search tries TP degree tp: the one asked for, else a divisor of n_head and of the
 * devices whose groups stay inside nodes (or may span them). */
static bool tp_searched(const search *S, int tp) {
    if (S->o->tp) return tp == S->o->tp;
    return S->cfg->n_head % tp == 0 && S->k->n_devices % tp == 0 &&
           (S->o->tp_across_nodes || plan_cluster_tp_fits_nodes(S->k, tp));
}

/* Every (D, P = N / D, placement, B) of one TP degree: N = devices / tp pipeline positions. */
static void enumerate_tp(search *S, int tp) {
    int N = S->k->n_devices / tp, L = S->cfg->n_layer;
    long G = S->o->global_batch;
    for (int D = 1; D <= N; D++) {
        int P = N / D;
        if (N % D || P > L || G % D) continue;
        long per = G / D;
        for (int pl = 0; pl < 2; pl++) {
            if (pl == 1 && (S->k->n_classes < 2 || make_mixed(S->k, P, D, tp, S->mixed) < 0)) continue;
            for (long B = 1; B <= per; B *= 2)
                if (per % B == 0) enumerate_b(S, tp, P, D, pl, (int)B, (int)(per / B));
        }
    }
}

static void enumerate(search *S) {
    S->mixed = pt_malloc(sizeof(int) * (size_t)S->k->n_devices);
    for (int tp = 1; tp <= S->k->n_devices && tp <= S->cfg->n_head; tp++)
        if (tp_searched(S, tp)) enumerate_tp(S, tp);
}

static int cmp_bound(const void *a, const void *b) {
    double x = ((const candidate *)a)->bound, y = ((const candidate *)b)->bound;
    return x < y ? -1 : x > y;
}

static int *placement_copy(const search *S, const candidate *c) {
    int n = c->P * c->D * c->tp, *d = pt_malloc(sizeof(int) * (size_t)n);
    if (c->placement) make_mixed(S->k, c->P, c->D, c->tp, d);
    else for (int i = 0; i < n; i++) d[i] = i;
    return d;
}

/* Simulates candidate c into a fresh layout (its split refined, then polished); give_up as
 * plan_score_polish. Returns 0, or non-zero with nothing kept in p. */
static int simulate(search *S, const candidate *c, plan_layout *p, double give_up) {
    memset(p, 0, sizeof *p);
    p->P = c->P; p->D = c->D; p->tp = c->tp; p->zero = S->o->zero; p->M = c->M; p->mb_size = c->B; p->T = S->o->T;
    p->chunks = c->v; p->recompute = c->mode.recompute; p->bound = c->bound;
    p->tp_overlap = c->mode.tp_overlap; p->tp_recompute = c->mode.tp_recompute; p->sp = c->mode.sp;
    p->seq_chunks = S->o->seq_chunks > 1 ? S->o->seq_chunks : 0;
    snprintf(p->schedule, sizeof p->schedule, "%s", S->sc[c->sched_i].name);
    snprintf(p->placement, sizeof p->placement, "%s", c->placement ? "mixed" : "node");
    p->devices = placement_copy(S, c);
    plan_scale sc;
    plan_scale_init(&sc, S->o->costs, S->k, c->B);
    plan_items it;
    plan_ranks r;
    items_for(S, &it, &sc, c->D, c->tp, c->B, c->mode);
    plan_ranks_init(&r, S->k, &sc, c->P, c->D, c->tp, p->devices);
    sched *s = plan_make_sched(p->schedule, c->P, c->M, c->v, S->o->seq_chunks);
    p->balance_memory = s && it.balance && sched_lend_check(s) == 0;   /* what the items priced it with */
    p->async_window = s && s->async ? it.window : 0;
    double bott;
    int rc = s ? plan_split_candidate(&it, &r, s, true, c->first, &bott) : -1;
    if (rc == 0)
    {
        plan_candidate pc = { S->cfg, S->k, &it, &r, s, S->o->global_batch };
        plan_polish_opts po = { POLISH_BUDGET(s->n_stages), !S->o->exhaustive, give_up };
        rc = plan_score_polish(&pc, c->first, p, &po, &S->res->simulated);
    }
    for (int g = 0; rc == 0 && p->balance_memory && g < s->n_stages; g++)   /* the lend plan's exact bytes */
        if (p->stage_mem[g] > r.cap[s->stage_rank[g]]) rc = 1;
    sched_free(s);
    plan_items_free(&it);
    plan_ranks_free(&r);
    if (rc != 0) plan_layout_free(p);
    return rc;
}

static double max_mem(const plan_layout *p) {
    double m = 0;
    for (int k = 0; k < p->K; k++) if (p->stage_mem[k] > m) m = p->stage_mem[k];
    return m;
}

/* Faster first; within PLAN_TIE_REL of the same time, less peak memory first. */
#define TIE_REL PLAN_TIE_REL
static bool better(const plan_layout *a, const plan_layout *b) {
    if (a->step_time < b->step_time * (1 - TIE_REL)) return true;
    if (a->step_time > b->step_time * (1 + TIE_REL)) return false;
    return max_mem(a) < max_mem(b);
}

/* Inserts p into the sorted top list (keeps at most top); takes ownership. */
static void keep_best(plan_result *res, int top, plan_layout *p) {
    int i = res->n_best;
    if (i == top && !better(p, &res->best[i - 1])) { plan_layout_free(p); return; }
    if (i == top) plan_layout_free(&res->best[--i]);
    else res->n_best++;
    for (; i > 0 && better(p, &res->best[i - 1]); i--) res->best[i] = res->best[i - 1];
    res->best[i] = *p;
}

/* Simulates candidates in bound order until the next bound passes the N-th best time (nothing
 * after it can enter the top N), at most max_sims; exhaustive: every candidate. */
static void judge(search *S) {
    int top = S->o->top, max_sims = S->o->max_sims > 0 ? S->o->max_sims : DEFAULT_MAX_SIMS;
    if (S->n_cand) qsort(S->cand, (size_t)S->n_cand, sizeof *S->cand, cmp_bound);
    S->res->best = pt_calloc((size_t)top, sizeof(plan_layout));
    for (long i = 0; i < S->n_cand && (S->o->exhaustive || i < max_sims); i++) {
        /* what the N-th best so far beats: nothing at or above it can enter the top N */
        double give_up = S->res->n_best == top ? S->res->best[top - 1].step_time * (1 + TIE_REL) : INFINITY;
        if (!S->o->exhaustive && S->cand[i].bound > give_up) break;
        plan_layout p;
        S->res->candidates_simulated++;
        if (simulate(S, &S->cand[i], &p, give_up) == 0) keep_best(S->res, top, &p);
    }
}

static char *fmt_bytes(double b, char *buf, size_t n) {
    const char *unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    int u = 0;
    while (b >= 1024 && u < 4) { b /= 1024; u++; }
    snprintf(buf, n, "%.4g %s", b, unit[u]);
    return buf;
}

static void write_advice(search *S) {
    plan_result *r = S->res;
    if (r->n_best > 0) return;
    if (r->considered == 0) {
        snprintf(r->advice, sizeof r->advice, "no layout to try: the global batch %ld must divide among the "
                 "data-parallel replicas (D divides the %d devices / tp, P = devices / (tp D) <= %d blocks); try a "
                 "global batch that is a multiple of a power of two, a cluster whose device count has divisors "
                 "<= n_layer, or --tp", S->o->global_batch, S->k->n_devices, S->cfg->n_layer);
        return;
    }
    double ratio = S->lean_need / S->lean_cap;
    char need[32], cap[32], fewer[96] = "";
    int blocks = (int)(S->cfg->n_layer / ratio);
    if (blocks >= 1 && blocks < S->cfg->n_layer) snprintf(fewer, sizeof fewer, ", or at most about %d blocks (n_layer)", blocks);
    snprintf(r->advice, sizeof r->advice, "nothing fits in memory: the leanest layout tried (P=%d, tp %d) needs %s "
             "on one device, which has %s. Would fit: about %.1fx the memory per device or more devices per "
             "pipeline%s%s%s, a smaller microbatch or shorter sequence%s", S->lean_P, S->lean_tp,
             fmt_bytes(S->lean_need, need, sizeof need), fmt_bytes(S->lean_cap, cap, sizeof cap), ratio,
             S->o->no_recompute ? ", recomputation (it was turned off)" : "",
             S->o->tp ? ", another --tp (tensor parallelism)" : "",
             S->o->zero ? "" : ", ZeRO-1 (--zero 1) with data parallelism", fewer);
}

static int check_opts(const gpt_config *cfg, const plan_cluster *k, const plan_opts *o) {
    if (o->global_batch < 1) return pt_seterr("plan: --global-batch must be >= 1 (sequences per step)");
    if (o->T < 1 || o->T > cfg->n_positions)
        return pt_seterr("plan: --seq %d must be in 1..%d (n_positions)", o->T, cfg->n_positions);
    if (o->top < 1) return pt_seterr("plan: --top must be >= 1");
    if (k->n_devices < 1) return pt_seterr("plan: the cluster has no devices");
    if (o->zero != 0 && o->zero != 1) return pt_seterr("plan: --zero %d: it must be 0 or 1", o->zero);
    if (o->tp < 0) return pt_seterr("plan: --tp %d must be >= 1", o->tp);
    if (o->seq_chunks < 0 || (o->seq_chunks > 1 && o->T % o->seq_chunks))
        return pt_seterr("plan: --seq-chunks %d must divide --seq %d", o->seq_chunks, o->T);
    if (o->async_window < 0 || o->async_window > PLAN_ASYNC_WINDOW_MAX || (o->async_window && !o->async))
        return pt_seterr("plan: --async-window %d: steps a pass of the asynchronous schedules, 1..%d, with --async",
                         o->async_window, PLAN_ASYNC_WINDOW_MAX);
    if (o->tp && cfg->n_head % o->tp)
        return pt_seterr("plan: --tp %d does not divide n_head %d (each TP rank holds n_head / tp heads)", o->tp,
                         cfg->n_head);
    if (o->tp && k->n_devices % o->tp)
        return pt_seterr("plan: --tp %d does not divide the cluster's %d devices (world = tp x dp x stages)", o->tp,
                         k->n_devices);
    return 0;
}

/* The registry rows the planner searches: synchronous single-pipe schedules that need no costs
 * up front, and with o->async (plan --async) the asynchronous ones (pipedream, 2bw: no flush, so
 * their step is not a synchronous step: they change the math; never with --zero 1, which they
 * refuse). Chimera (two model replicas) changes what a step means; greedy orders by costs the
 * candidate does not have yet. */
static bool searchable(const sched_generator *g, const plan_opts *o) {
    return g && (!g->async || (o->async && !o->zero)) && g->pipes == 1 && !g->stage_costs;
}

/* The chunk counts tried for row g: its default v, and 2v when it takes more (interleaved: 2, 4).
 * Appends them to S->sc. */
static void add_choices(search *S, const sched_generator *g, bool all_chunks) {
    S->sc[S->n_sc++] = (sched_choice){ g->name, g->chunks };
    if (all_chunks && g->more_chunks) S->sc[S->n_sc++] = (sched_choice){ g->name, 2 * g->chunks };
}

/* The searchable names, comma-separated, for the error on one the planner does not search. */
static void searchable_list(char *buf, size_t n, const plan_opts *o) {
    int rows;
    const sched_generator *g = sched_generator_rows(&rows);
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; i < rows; i++)
        if (searchable(&g[i], o) && used < n)
            used += (size_t)snprintf(buf + used, n - used, "%s%s", used ? ", " : "", g[i].name);
}

/* The schedule list: every searchable row (interleaved with v = 2 and 4), or the names given
 * (each with its default chunks). */
static int choose_scheds(search *S) {
    int n = 0, rows;
    const sched_generator *g = sched_generator_rows(&rows);
    if (!S->o->schedules) {
        S->sc = pt_malloc(sizeof *S->sc * (size_t)rows * MAX_CHOICES_PER_ROW);
        for (int i = 0; i < rows; i++)
            if (searchable(&g[i], S->o)) add_choices(S, &g[i], true);
        return 0;
    }
    while (S->o->schedules[n]) n++;
    S->sc = pt_malloc(sizeof *S->sc * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) {
        const char *nm = S->o->schedules[i];
        const sched_generator *row = sched_generator_find(nm);
        if (!searchable(row, S->o)) {
            char list[256];
            searchable_list(list, sizeof list, S->o);
            free(S->sc);
            if (row && row->async && !S->o->async)
                return pt_seterr("plan: schedule '%s' is asynchronous (it changes the math: docs/async.md); give "
                                 "--async to search it", nm);
            return pt_seterr("plan: schedule '%s' is not one the planner searches%s (%s)", nm,
                             row && row->async ? " with --zero 1" : "", list);
        }
        add_choices(S, row, false);
    }
    return 0;
}

int plan_search(const gpt_config *cfg, const plan_cluster *k, const plan_opts *o, plan_result *out) {
    memset(out, 0, sizeof *out);
    if (check_opts(cfg, k, o) < 0) return -1;
    search S = { .cfg = cfg, .k = k, .o = o, .res = out };
    if (choose_scheds(&S) < 0) return -1;
    enumerate(&S);
    judge(&S);
    write_advice(&S);
    for (long i = 0; i < S.n_cand; i++) free(S.cand[i].first);
    free(S.cand); free(S.mixed); free(S.sc);
    return 0;
}

void plan_result_free(plan_result *r) {
    for (int i = 0; i < r->n_best; i++) plan_layout_free(&r->best[i]);
    free(r->best);
    memset(r, 0, sizeof *r);
}
