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
 * the furthest-needed one goes away over that action (lent two actions before when its F allows,
 * so the send has an action to finish in; fetched right after the last action it must be away).
 * Writes win (M entries at most) and returns their count, or -1 when cap cannot work. */
static int plan_windows(const stage_ops *o, int cap, sched_lend_window *win) {
    int *wl = pt_malloc(sizeof(int) * 2 * (size_t)o->M), *wf = wl + o->M, n = 0, rc = 0;
    for (int j = 0; j < 2 * o->M; j++) wl[j] = -1;
    for (int k = 0; k < o->K && rc == 0; k++)
        while (local_count(o, wl, wf, k) > cap) {
            int v = lend_victim(o, wl, wf, k);
            if (v < 0) { rc = -1; break; }
            if (wl[v] < 0) wl[v] = o->f_at[v] > k - 2 ? o->f_at[v] : k - 2;
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

/* The candidate state of the search: per (stage, layer) its cap, partner, pool and windows. */
typedef struct {
    int P, M, *nl, **cap, **partner, **pool;
    const double *const *bytes;
    stage_ops *ops;
    double *load;              /* [P] held + borrowed */
} lend_search;

static int lightest(const lend_search *q, int not) {
    int r = -1;
    for (int p = 0; p < q->P; p++)
        if (p != not && (r < 0 || q->load[p] < q->load[r])) r = p;
    return r;
}

static int heaviest(const lend_search *q) {
    int r = 0;
    for (int p = 1; p < q->P; p++) if (q->load[p] > q->load[r]) r = p;
    return r;
}

/* The largest load if layer l of stage h lowered its cap by one (*pool_out its partner's new
 * pool, *to the partner), or -1 when that cap cannot work. */
/* The loads if layer l of stage h lowered its cap by one: their largest and their sum of
 * squares (*sq), *pool_out its partner's new pool, *to the partner; -1 when that cap cannot work. */
static double try_lower(const lend_search *q, int h, int l, int *pool_out, int *to, double *sq,
                        sched_lend_window *win) {
    int n = plan_windows(&q->ops[h], q->cap[h][l] - 1, win);
    if (n < 0) return -1;
    int pool = assign_slots(win, n), p = q->partner[h][l] >= 0 ? q->partner[h][l] : lightest(q, h);
    double b = q->bytes[h][l], mx = 0;
    *sq = 0;
    for (int r = 0; r < q->P; r++) {
        double v = q->load[r] - (r == h ? b : 0) + (r == p ? (pool - q->pool[h][l]) * b : 0);
        mx = v > mx ? v : mx;
        *sq += v * v;
    }
    *pool_out = pool;
    *to = p;
    return mx;
}

/* One step of the search: a cap to lower on a rank of the largest load: one that lowers the
 * largest load, else one that keeps it and lowers the sum of squared loads most (two ranks tied
 * at the top then both come down, one step each). 1 when one was lowered. */
static int lower_one(lend_search *q, sched_lend_window *win) {
    int best_h = -1, best = -1, best_pool = 0, best_to = -1;
    double cur = q->load[heaviest(q)], best_sq = 0;
    for (int r = 0; r < q->P; r++) best_sq += q->load[r] * q->load[r];
    best_sq *= 1 - 1e-9;
    for (int h = 0; h < q->P; h++)
        for (int l = 0; q->load[h] >= cur * (1 - 1e-9) && l < q->nl[h]; l++) {
            int pool, to;
            double sq;
            if (q->cap[h][l] <= 1 || !(q->bytes[h][l] > 0)) continue;
            double mx = try_lower(q, h, l, &pool, &to, &sq, win);
            if (mx < 0 || mx > cur * (1 + 1e-9)) continue;
            if (mx < cur * (1 - 1e-9)) sq -= 1e300;   /* a lower top wins over any sum of squares */
            if (sq < best_sq) { best_sq = sq; best_h = h; best = l; best_pool = pool; best_to = to; }
        }
    if (best < 0) return 0;
    int h = best_h;
    q->load[h] -= q->bytes[h][best];
    q->load[best_to] += (best_pool - q->pool[h][best]) * q->bytes[h][best];
    q->cap[h][best]--;
    q->pool[h][best] = best_pool;
    q->partner[h][best] = best_to;
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

/* The search's result into out: a unit per layer that lends, the bytes per rank. */
static void plan_fill(const lend_search *q, const int *peak, sched_lend_plan *out) {
    int P = q->P;
    out->P = P;
    out->plain = pt_calloc(4 * (size_t)P, sizeof(double));
    out->held = out->plain + P, out->lent = out->held + P, out->borrowed = out->lent + P;
    int n_layers = 0;
    for (int g = 0; g < P; g++) n_layers += q->nl[g];
    out->unit = pt_calloc((size_t)n_layers + 1, sizeof *out->unit);
    out->n_units = 0;
    for (int g = 0; g < P; g++)
        for (int l = 0; l < q->nl[g]; l++) {
            double b = q->bytes[g][l];
            out->plain[g] += peak[g] * b;
            out->held[g] += q->cap[g][l] * b;
            if (q->cap[g][l] == peak[g]) continue;
            sched_lend_unit *u = &out->unit[out->n_units++];
            u->win = pt_malloc(sizeof *u->win * (size_t)(q->M + 1));
            u->n_win = plan_windows(&q->ops[g], q->cap[g][l], u->win);
            u->pool = assign_slots(u->win, u->n_win);
            *u = (sched_lend_unit){ g, l, peak[g], q->cap[g][l], q->partner[g][l], u->pool, b, u->n_win, u->win };
            out->borrowed[u->partner] += u->pool * b;
        }
    for (int g = 0; g < P; g++) out->lent[g] = out->plain[g] - out->held[g];
}

int sched_lend_balance(const sched *s, const int *n_layers, const double *const *bytes, sched_lend_plan *out) {
    memset(out, 0, sizeof *out);
    if (sched_lend_check(s) < 0) return -1;
    int P = s->n_stages, *peak = pt_malloc(sizeof(int) * (size_t)P);
    lend_search q = { .P = P, .M = s->n_mb, .nl = (int *)n_layers, .bytes = bytes };
    sched_peak_activations(s, peak);
    q.ops = pt_malloc(sizeof *q.ops * (size_t)P);
    q.load = pt_calloc((size_t)P, sizeof(double));
    q.cap = pt_malloc(sizeof *q.cap * (size_t)P);
    for (int g = 0; g < P; g++) {
        stage_ops_init(&q.ops[g], s, g);
        q.cap[g] = pt_malloc(sizeof(int) * (size_t)(n_layers[g] + 1));
        for (int l = 0; l < n_layers[g]; l++) {
            q.cap[g][l] = peak[g] > 0 ? peak[g] : 1;
            q.load[g] += q.cap[g][l] * bytes[g][l];
        }
    }
    q.partner = int_rows(P, n_layers, -1);
    q.pool = int_rows(P, n_layers, 0);
    sched_lend_window *win = pt_malloc(sizeof *win * (size_t)(q.M + 1));
    while (lower_one(&q, win)) {}
    plan_fill(&q, peak, out);
    free(win);
    for (int g = 0; g < P; g++) stage_ops_free(&q.ops[g]);
    free(q.ops); free(q.load); free(peak);
    int_rows_free(q.cap, P); int_rows_free(q.partner, P); int_rows_free(q.pool, P);
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
