/* The lend plan of train --balance-memory (sched_lend.h): for a layer with fewer buffers than its
 * stage's peak, when each of its microbatches is away; which layers lend and to whom. Pure: the
 * same plan on every rank. Not the messages (run/exec_lend.c). Legend: P stages = ranks, M
 * microbatches, K compute actions of a stage. */
#include "sched/sched_lend.h"
#include "util/pt.h"
#include <stdlib.h>
#include <string.h>

/* A stage's compute actions in its rank's order, and per microbatch where its life starts (F),
 * where its first backward (B or BW) and its last (W or BW) are. */
typedef struct {
    int K, M;
    int *mb;                   /* [K] microbatch of action k */
    int *f_at, *b_at, *w_at;   /* [M] */
} stage_ops;

static void stage_ops_init(stage_ops *o, const sched *s, int g) {
    int r = s->stage_rank[g];
    o->M = s->n_mb;
    o->mb = pt_malloc(sizeof(int) * (size_t)(s->len[r] + 1));
    o->f_at = pt_malloc(sizeof(int) * 3 * (size_t)o->M);
    o->b_at = o->f_at + o->M;
    o->w_at = o->b_at + o->M;
    for (int j = 0; j < 3 * o->M; j++) o->f_at[j] = -1;
    o->K = 0;
    for (int i = 0; i < s->len[r]; i++) {
        sched_action a = s->acts[r][i];
        if (a.stage != g || (a.kind != ACT_F && a.kind != ACT_B && a.kind != ACT_W && a.kind != ACT_BW)) continue;
        int k = o->K++;
        o->mb[k] = a.mb;
        if (a.kind == ACT_F) o->f_at[a.mb] = k;
        if ((a.kind == ACT_B || a.kind == ACT_BW) && o->b_at[a.mb] < 0) o->b_at[a.mb] = k;
        if (a.kind == ACT_W || a.kind == ACT_BW) o->w_at[a.mb] = k;
    }
}

static void stage_ops_free(stage_ops *o) { free(o->mb); free(o->f_at); }

static int live_at(const stage_ops *o, int mb, int k) { return o->f_at[mb] >= 0 && o->f_at[mb] <= k && k <= o->w_at[mb]; }

/* Microbatches held locally during action k: alive, and not away (lent before k, fetched at or
 * after it). */
static int local_count(const stage_ops *o, const int *wl, const int *wf, int k) {
    int n = 0;
    for (int mb = 0; mb < o->M; mb++)
        n += live_at(o, mb, k) && !(wl[mb] >= 0 && wl[mb] < k && k <= wf[mb]);
    return n;
}

/* The microbatch to send away over action k: alive, not used by k, its F before k and its first
 * backward after it, not away already (or away until just before k: the window grows). One away
 * until just before k stays away while its backward is over two actions off (fewer messages, and
 * an action for its fetch to arrive in); else, when k is an F (it writes into the buffer the send
 * frees), one whose F is two actions back or more (its send has an action to finish in), then the
 * one whose backward is furthest. -1: none. */
static int lend_victim(const stage_ops *o, const int *wl, const int *wf, int k) {
    int best = -1;
    for (int mb = 0; mb < o->M; mb++) {
        if (!live_at(o, mb, k) || o->mb[k] == mb || o->f_at[mb] >= k || o->b_at[mb] <= k) continue;
        if (wl[mb] >= 0 && wf[mb] != k - 1) continue;
        if (wl[mb] >= 0 && o->b_at[mb] > k + 2) return mb;
        int fk = o->f_at[o->mb[k]] == k;   /* k is an F: it writes into the buffer the send frees */
        int early = fk && o->f_at[mb] <= k - 2, best_early = fk && best >= 0 && o->f_at[best] <= k - 2;
        if (best < 0 || early > best_early || (early == best_early && o->b_at[mb] >= o->b_at[best])) best = mb;
    }
    return best;
}

/* The windows of a layer with `cap` buffers: walking the actions, whenever more are held than cap
 * the furthest-needed one goes away over that action (lent two actions before when its F allows
 * and `early`, so the send has an action to finish in; else right before; fetched right after the
 * last action it must be away). A unit that lends its microbatches whole lends early; one that
 * lends a part keeps the rest in head buffers, and lends late so that fewer are away at once.
 * Writes win (M entries at most) and returns their count, or -1 when cap cannot work. */
static int plan_windows(const stage_ops *o, int cap, int early, sched_lend_window *win) {
    int *wl = pt_malloc(sizeof(int) * 2 * (size_t)o->M), *wf = wl + o->M, n = 0, rc = 0;
    for (int j = 0; j < 2 * o->M; j++) wl[j] = -1;
    for (int k = 0; k < o->K && rc == 0; k++)
        while (local_count(o, wl, wf, k) > cap) {
            int v = lend_victim(o, wl, wf, k);
            if (v < 0) { rc = -1; break; }
            if (wl[v] < 0) wl[v] = !early ? k - 1 : o->f_at[v] > k - 2 ? o->f_at[v] : k - 2;
            wf[v] = k;
        }
    for (int mb = 0; rc == 0 && mb < o->M; mb++)
        if (wl[mb] >= 0) win[n++] = (sched_lend_window){ mb, wl[mb], wf[mb], -1 };
    free(wl);
    return rc < 0 ? -1 : n;
}

static int win_cmp(const void *a, const void *b) {
    const sched_lend_window *x = a, *y = b;
    return x->lend_at != y->lend_at ? x->lend_at - y->lend_at : x->mb - y->mb;
}

/* Sorts the windows by lend and gives each the partner's lowest buffer free by then (a buffer is
 * free again after the action its last window is fetched at). Returns the buffers used. */
static int assign_slots(sched_lend_window *win, int n) {
    qsort(win, (size_t)n, sizeof *win, win_cmp);
    int *end = pt_malloc(sizeof(int) * (size_t)(n + 1)), pool = 0;
    for (int i = 0; i < n; i++) {
        int s = 0;
        while (s < pool && end[s] >= win[i].lend_at) s++;
        if (s == pool) pool++;
        end[s] = win[i].fetch_at;
        win[i].slot = s;
    }
    free(end);
    return pool;
}

/* One F per microbatch on each stage: the plan's unit is a whole microbatch's act of a layer. */
static int lend_check_units(const sched *s) {
    int *n = pt_calloc((size_t)s->n_mb + 1, sizeof(int)), rc = 0;
    for (int g = 0; g < s->n_stages && rc == 0; g++) {
        memset(n, 0, sizeof(int) * (size_t)s->n_mb);
        for (int i = 0; i < s->len[g] && rc == 0; i++) {
            sched_action a = s->acts[g][i];
            if (a.stage == g && a.kind == ACT_F && a.mb >= 0 && a.mb < s->n_mb && ++n[a.mb] > 1)
                rc = pt_seterr("--balance-memory needs one F per microbatch on each stage (%s runs F%d twice on "
                               "stage %d: sequence chunks?)", s->name, a.mb, g);
        }
    }
    free(n);
    return rc;
}

int sched_lend_check(const sched *s) {
    if (s->seq_chunks > 1)
        return pt_seterr("--balance-memory and --seq-chunks: give one (the lend plan's unit is a whole "
                         "microbatch's activations; sequence chunks already hold 1/%d of them)", s->seq_chunks);
    if (s->async)
        return pt_seterr("--balance-memory needs a synchronous schedule (%s updates weights per microbatch)", s->name);
    if (s->n_pipes != 1 || s->n_stages != s->n_ranks)
        return pt_seterr("--balance-memory needs one stage per pipeline rank in one pipe (%s has %d stages on %d "
                         "ranks, %d pipes): use 1f1b, gpipe or zb-h1", s->name, s->n_stages, s->n_ranks, s->n_pipes);
    for (int g = 0; g < s->n_stages; g++)
        if (s->stage_rank[g] != g)
            return pt_seterr("--balance-memory needs stage g on rank g (%s puts stage %d on rank %d)", s->name, g,
                             s->stage_rank[g]);
    return lend_check_units(s);
}

/* The partner's buffers (assign_slots) and the lender's head buffers a layer of stage g needs at
 * cap, per cap: -1 where the cap cannot work. A head buffer is free again at the action its window
 * is fetched at (the fetch takes the head the lend leaves: they swap), so heads is the most windows
 * away over one action. */
typedef struct {
    int *pool, *part_pool, *heads;   /* [peak + 1]: lending whole (early), in part (late) */
} stage_caps;

static int count_heads(const sched_lend_window *win, int n) {
    int most = 0;
    for (int i = 0; i < n; i++) {
        int away = 0;
        for (int j = 0; j < n; j++) away += win[j].lend_at <= win[i].lend_at && win[i].lend_at < win[j].fetch_at;
        most = away > most ? away : most;
    }
    return most;
}

static void stage_caps_init(stage_caps *c, const stage_ops *o, int peak, sched_lend_window *win) {
    c->pool = pt_malloc(sizeof(int) * 3 * (size_t)(peak + 1));
    c->part_pool = c->pool + peak + 1;
    c->heads = c->part_pool + peak + 1;
    for (int cap = 0; cap <= peak; cap++) {
        int n = cap >= 1 && cap < peak ? plan_windows(o, cap, 1, win) : -1;
        c->pool[cap] = n >= 0 ? assign_slots(win, n) : -1;
        n = cap >= 1 && cap < peak ? plan_windows(o, cap, 0, win) : -1;
        c->heads[cap] = n >= 0 ? count_heads(win, n) : -1;
        c->part_pool[cap] = n >= 0 ? assign_slots(win, n) : -1;
    }
    c->pool[peak] = c->part_pool[peak] = c->heads[peak] = 0;
}

/* The candidate state of the search: per (stage, layer) its cap, the parts of LEND_PARTS it lends
 * of each microbatch away, its partner, and the bytes it holds on its rank and on the partner's. */
typedef struct {
    int P, M, *nl, *peak, **cap, **parts, **partner;
    const double *const *bytes;
    stage_caps *caps;
    double **held, **given;
    double *load;              /* [P] fixed + held + borrowed */
} lend_search;

/* Bytes of each lent microbatch that go to the partner: `parts` of LEND_PARTS of the act (its
 * tail; the rest stays in a head buffer). */
static double lend_part(double bytes, int parts) {
    return parts >= LEND_PARTS ? bytes : bytes * parts / LEND_PARTS;
}

/* What layer l of stage g holds at (cap, parts): on its rank (*held) and its partner's (*given).
 * -1 when the cap cannot work. */
static int layer_cost(const lend_search *q, int g, int l, int cap, int parts, double *held, double *given) {
    double b = q->bytes[g][l], part = lend_part(b, parts);
    int whole = parts >= LEND_PARTS, pool = whole ? q->caps[g].pool[cap] : q->caps[g].part_pool[cap];
    if (pool < 0) return -1;
    *held = cap * b + (whole ? 0 : q->caps[g].heads[cap] * (b - part));
    *given = pool * part;
    return 0;
}

static int heaviest(const lend_search *q) {
    int r = 0;
    for (int p = 1; p < q->P; p++) if (q->load[p] > q->load[r]) r = p;
    return r;
}

/* A move of the search: layer l of stage h to (cap, parts), lent to `to`. */
typedef struct {
    int h, l, cap, parts, to;
    double held, given, top, sq;   /* its bytes, and the loads' largest and sum of squares after it */
} lend_move;

/* Prices move m into m->top and m->sq; 0, or -1 when its cap cannot work. */
static int move_price(const lend_search *q, lend_move *m) {
    if (m->cap < 1 || layer_cost(q, m->h, m->l, m->cap, m->parts, &m->held, &m->given) < 0) return -1;
    int old = q->partner[m->h][m->l];
    m->top = m->sq = 0;
    for (int r = 0; r < q->P; r++) {
        double v = q->load[r] - (r == m->h ? q->held[m->h][m->l] - m->held : 0) - (r == old ? q->given[m->h][m->l] : 0) +
                   (r == m->to ? m->given : 0);
        m->top = v > m->top ? v : m->top;
        m->sq += v * v;
    }
    return 0;
}

/* The moves of layer l of stage h into out (at most LEND_MOVES): one that does not lend yet lends
 * one microbatch to any other rank; one that does lends one part more or less of each microbatch
 * away, or keeps one microbatch fewer (its partner stays). `fine`: in any number of parts, else
 * whole only. */
#define LEND_MOVES(P) ((P) * LEND_PARTS + LEND_PARTS + 2)
static int layer_moves(const lend_search *q, int h, int l, int fine, lend_move *out) {
    int n = 0, cap = q->cap[h][l], parts = q->parts[h][l], to = q->partner[h][l];
    for (int k = fine ? 1 : LEND_PARTS; k <= LEND_PARTS; k++)
        for (int p = 0; p < q->P; p++)
            if (cap == q->peak[h] ? p != h : p == to)
                out[n++] = (lend_move){ .h = h, .l = l, .cap = cap - 1, .parts = k, .to = p };
    for (int d = -1; fine && cap < q->peak[h] && d <= 1; d += 2)
        if (parts + d >= 1 && parts + d <= LEND_PARTS)
            out[n++] = (lend_move){ .h = h, .l = l, .cap = cap, .parts = parts + d, .to = to };
    return n;
}

static void move_apply(lend_search *q, const lend_move *m) {
    int h = m->h, l = m->l, old = q->partner[h][l];
    q->load[h] -= q->held[h][l] - m->held;
    if (old >= 0) q->load[old] -= q->given[h][l];
    q->load[m->to] += m->given;
    q->cap[h][l] = m->cap, q->parts[h][l] = m->parts, q->partner[h][l] = m->to;
    q->held[h][l] = m->held, q->given[h][l] = m->given;
}

/* One step of the search (layer_moves' `fine`) on a rank of the largest load: a move that lowers
 * the largest load, else (whole acts only) one that keeps it and lowers the sum of squared loads
 * most (two ranks tied at the top then both come down, one step each); among those that lower
 * it, the lowest sum of squares. 1 when one was made. */
static int lower_one(lend_search *q, int fine, lend_move *cand) {
    lend_move best = { .h = -1 };
    double cur = q->load[heaviest(q)], best_sq = 0;
    int best_low = 0;   /* best lowers the top: it wins over any that does not */
    for (int r = 0; r < q->P; r++) best_sq += q->load[r] * q->load[r];
    best_sq *= 1 - 1e-9;
    for (int h = 0; h < q->P; h++)
        for (int l = 0; q->load[h] >= cur * (1 - 1e-9) && l < q->nl[h]; l++) {
            if (!(q->bytes[h][l] > 0)) continue;
            int n = layer_moves(q, h, l, fine, cand);
            for (int i = 0; i < n; i++) {
                if (move_price(q, &cand[i]) < 0 || cand[i].top > cur * (1 + 1e-9)) continue;
                int low = cand[i].top < cur * (1 - 1e-9);
                if (fine && !low) continue;   /* parts only where they lower the top: no lends for ties */
                if (low > best_low || (low == best_low && cand[i].sq < best_sq))
                    best_low = low, best_sq = cand[i].sq, best = cand[i];
            }
        }
    if (best.h < 0) return 0;
    move_apply(q, &best);
    return 1;
}

static int **int_rows(int P, const int *nl, int v) {
    int **x = pt_malloc(sizeof *x * (size_t)P);
    for (int g = 0; g < P; g++) {
        x[g] = pt_malloc(sizeof(int) * (size_t)(nl[g] + 1));
        for (int l = 0; l < nl[g]; l++) x[g][l] = v;
    }
    return x;
}

static void int_rows_free(int **x, int P) {
    for (int g = 0; g < P; g++) free(x[g]);
    free(x);
}

static double **dbl_rows(int P, const int *nl) {
    double **x = pt_malloc(sizeof *x * (size_t)P);
    for (int g = 0; g < P; g++) x[g] = pt_calloc((size_t)nl[g] + 1, sizeof(double));
    return x;
}

static void dbl_rows_free(double **x, int P) {
    for (int g = 0; g < P; g++) free(x[g]);
    free(x);
}

/* The search's result into out: a unit per layer that lends, the bytes per rank. */
static void plan_fill(const lend_search *q, sched_lend_plan *out, stage_ops *ops) {
    int P = q->P, n_layers = 0;
    out->P = P;
    out->plain = pt_calloc(4 * (size_t)P, sizeof(double));
    out->held = out->plain + P, out->lent = out->held + P, out->borrowed = out->lent + P;
    for (int g = 0; g < P; g++) n_layers += q->nl[g];
    out->unit = pt_calloc((size_t)n_layers + 1, sizeof *out->unit);
    for (int g = 0; g < P; g++)
        for (int l = 0; l < q->nl[g]; l++) {
            double b = q->bytes[g][l];
            out->plain[g] += q->peak[g] * b;
            out->held[g] += q->held[g][l];
            if (q->cap[g][l] == q->peak[g]) continue;
            sched_lend_unit *u = &out->unit[out->n_units++];
            sched_lend_window *win = pt_malloc(sizeof *win * (size_t)(q->M + 1));
            int whole = q->parts[g][l] >= LEND_PARTS, n = plan_windows(&ops[g], q->cap[g][l], whole, win);
            int heads = whole ? 0 : count_heads(win, n), pool = assign_slots(win, n);
            *u = (sched_lend_unit){ g, l, q->peak[g], q->cap[g][l], q->partner[g][l], pool, b,
                                    lend_part(b, q->parts[g][l]), heads, n, win };
            out->borrowed[u->partner] += q->given[g][l];
        }
    for (int g = 0; g < P; g++) out->lent[g] = out->plain[g] - out->held[g];
}

static void search_init(lend_search *q, const sched *s, const int *n_layers, const double *const *bytes,
                        const double *fixed, stage_ops *ops, sched_lend_window *win) {
    int P = q->P;
    q->nl = (int *)n_layers, q->bytes = bytes;
    q->peak = pt_malloc(sizeof(int) * (size_t)P);
    sched_peak_activations(s, q->peak);
    q->load = pt_calloc((size_t)P, sizeof(double));
    q->caps = pt_malloc(sizeof *q->caps * (size_t)P);
    q->cap = int_rows(P, n_layers, 0);
    q->parts = int_rows(P, n_layers, LEND_PARTS);
    q->partner = int_rows(P, n_layers, -1);
    q->held = dbl_rows(P, n_layers);
    q->given = dbl_rows(P, n_layers);
    for (int g = 0; g < P; g++) {
        if (q->peak[g] < 1) q->peak[g] = 1;
        stage_ops_init(&ops[g], s, g);
        stage_caps_init(&q->caps[g], &ops[g], q->peak[g], win);
        q->load[g] = fixed ? fixed[g] : 0;
        for (int l = 0; l < n_layers[g]; l++) {
            q->cap[g][l] = q->peak[g];
            q->held[g][l] = q->peak[g] * bytes[g][l];
            q->load[g] += q->held[g][l];
        }
    }
}

static void search_free(lend_search *q) {
    int P = q->P;
    for (int g = 0; g < P; g++) free(q->caps[g].pool);
    free(q->caps); free(q->load); free(q->peak);
    int_rows_free(q->cap, P); int_rows_free(q->parts, P); int_rows_free(q->partner, P);
    dbl_rows_free(q->held, P); dbl_rows_free(q->given, P);
}

/* What the search holds per layer (caps, parts, partners, bytes) and per rank, copied from q into
 * `to` (same shapes), to go back to it. */
static void search_copy(lend_search *to, const lend_search *q) {
    for (int g = 0; g < q->P; g++) {
        size_t n = (size_t)q->nl[g];
        memcpy(to->cap[g], q->cap[g], n * sizeof(int));
        memcpy(to->parts[g], q->parts[g], n * sizeof(int));
        memcpy(to->partner[g], q->partner[g], n * sizeof(int));
        memcpy(to->held[g], q->held[g], n * sizeof(double));
        memcpy(to->given[g], q->given[g], n * sizeof(double));
    }
    memcpy(to->load, q->load, (size_t)q->P * sizeof(double));
}

/* Lending in parts: only when it lowers the largest total by this fraction more than whole acts
 * do (else its messages, one per lent microbatch each step, buy too little). */
#define LEND_PARTS_MIN_GAIN 0.01

/* The search: whole acts while they lower the top, then parts (kept where they pay). */
static void search_run(lend_search *q, lend_move *cand) {
    while (lower_one(q, 0, cand)) {}
    lend_search whole = *q;
    whole.cap = int_rows(q->P, q->nl, 0), whole.parts = int_rows(q->P, q->nl, 0);
    whole.partner = int_rows(q->P, q->nl, 0);
    whole.held = dbl_rows(q->P, q->nl), whole.given = dbl_rows(q->P, q->nl);
    whole.load = pt_malloc(sizeof(double) * (size_t)q->P);
    search_copy(&whole, q);
    double top = q->load[heaviest(q)];
    while (lower_one(q, 1, cand)) {}
    if (q->load[heaviest(q)] > top * (1 - LEND_PARTS_MIN_GAIN)) search_copy(q, &whole);
    int_rows_free(whole.cap, q->P); int_rows_free(whole.parts, q->P); int_rows_free(whole.partner, q->P);
    dbl_rows_free(whole.held, q->P); dbl_rows_free(whole.given, q->P);
    free(whole.load);
}

int sched_lend_balance(const sched *s, const int *n_layers, const double *const *bytes, const double *fixed,
                       sched_lend_plan *out) {
    memset(out, 0, sizeof *out);
    if (sched_lend_check(s) < 0) return -1;
    int P = s->n_stages;
    lend_search q = { .P = P, .M = s->n_mb };
    stage_ops *ops = pt_malloc(sizeof *ops * (size_t)P);
    sched_lend_window *win = pt_malloc(sizeof *win * (size_t)(q.M + 1));
    lend_move *cand = pt_malloc(sizeof *cand * (size_t)LEND_MOVES(P));
    search_init(&q, s, n_layers, bytes, fixed, ops, win);
    search_run(&q, cand);
    plan_fill(&q, out, ops);
    for (int g = 0; g < P; g++) stage_ops_free(&ops[g]);
    free(ops); free(win); free(cand);
    search_free(&q);
    return 0;
}

void sched_lend_plan_free(sched_lend_plan *p) {
    for (int i = 0; p->unit && i < p->n_units; i++) free(p->unit[i].win);
    free(p->unit);
    free(p->plain);
    memset(p, 0, sizeof *p);
}

double sched_lend_rank_bytes(const sched_lend_plan *p, int r) { return p->held[r] + p->borrowed[r]; }

const sched_lend_unit *sched_lend_find(const sched_lend_plan *p, int stage, int layer) {
    for (int i = 0; i < p->n_units; i++)
        if (p->unit[i].stage == stage && p->unit[i].layer == layer) return &p->unit[i];
    return NULL;
}
