/* The list scheduler behind the greedy, adaptive, zb-v and chimera generators (gen_list.h): a small event
 * simulation in which each free rank picks a ready action by priority, under per-stage and
 * per-rank activation limits and per-edge message delays. Pure: no I/O. Not a generator itself
 * (those call it), not the simulator (sim/ times a given schedule; this builds one), not the
 * hand-made schedules. Legend: P ranks, S stages, K stages per pipe, M microbatches, pos = g % K. */
#include "sched/gen_list.h"
#include "util/pt.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int kind;                    /* ACT_F, ACT_B, ACT_W, ACT_BW, or -1 when the rank is free */
    int stage, mb;
    int slot;                    /* B, BW: index in the stage's candidate list, while being picked */
    double end;
} gl_run;

typedef struct {
    const gen_list_spec *sp;
    int P, S, K, M;
    int *pipe_mb;                /* [n_pipes][M] microbatches of each pipe, in order */
    int *pipe_n;                 /* [n_pipes] */
    double *fend;                /* [S][M] forward finished at (what the dependency rule reads), -1 */
    double *bend;                /* [S][M] input-gradient backward (B or BW) finished at, -1 */
    double *farr, *barr;         /* [S][M] when F's output reached g+1, B's gradient g-1, -1 */
    double *qfree;               /* [2P] link r-r+1's queue free: [2r] r -> r+1, [2r+1] back */
    double *arr;                 /* min-heap of message arrival times still ahead */
    int n_arr;
    int *next_f;                 /* [S] index into the pipe's list of the next forward */
    int *inflight;               /* [S] forwards started whose B has not started */
    int *held;                   /* [S] activations held: F started, W (or BW) not finished */
    int *rank_held;              /* [P] sum of held over the rank's stages */
    int *bcand, *n_bcand;        /* [S][M] microbatches whose F started and B not, count */
    int *wq, *wq_head, *wq_tail; /* [S][M] FIFO of microbatches whose B started and W not */
    int *rank_st, *n_rank_st;    /* [P][S] stages of each rank, count */
    int *cap;                    /* [S] in-flight cap: forwards that fill one round trip */
    gl_run *run;                 /* [P] */
    sched *out;
} gen_list;

static int gl_pos(const gen_list *L, int g) { return g % L->K; }

/* Delay of the message across edge g -> g+1 (either way), 0 on one rank or without delays. */
static double gl_edge_delay(const gen_list_spec *sp, int g) {
    if (!sp->edge_delay || sp->stage_rank[g] == sp->stage_rank[g + 1]) return 0;
    return sp->edge_delay[g];
}

/* Time the message across edge g holds its link's queue, 0 on one rank or without it. */
static double gl_edge_busy(const gen_list_spec *sp, int g) {
    if (!sp->edge_busy || sp->stage_rank[g] == sp->stage_rank[g + 1]) return 0;
    return sp->edge_busy[g];
}

/* Forwards stage g can start before its first B returns with these costs: its own F plus the
 * downstream F and B times and the delays both ways, in units of its F (1 + 2(K-1-pos) with equal
 * costs and no delay). With a stage limit and split B/W, keep pos slots free for W's deferred to
 * the cool-down (ZB-H1's shape at limit P). A caller's stage_cap replaces all of this. */
static int gl_round_trip_cap(const gen_list *L, int g) {
    const gen_list_spec *sp = L->sp;
    int pipe_end = (g / L->K + 1) * L->K;
    double t = 0;
    for (int j = g + 1; j < pipe_end; j++)
        t += sp->cost_f[j] + sp->cost_b[j] + 2 * (gl_edge_delay(sp, j - 1) + gl_edge_busy(sp, j - 1));
    double c = sp->stage_cap ? sp->stage_cap[g] : 1.0 + t / sp->cost_f[g];
    int cap = c > L->M + 1.0 ? L->M + 1 : (int)c;
    if (sp->stage_cap) return cap;
    if (sp->stage_limit > 0 && !sp->fused) {
        int lim = sp->stage_limit - gl_pos(L, g);
        if (lim < 1) lim = 1;
        if (lim < cap) cap = lim;
    }
    return cap;
}

static void gl_init_stages(gen_list *L) {
    const gen_list_spec *sp = L->sp;
    for (int g = 0; g < L->S; g++) {
        int r = sp->stage_rank[g];
        L->rank_st[r * L->S + L->n_rank_st[r]++] = g;
        L->cap[g] = gl_round_trip_cap(L, g);
    }
    for (int m = 0; m < L->M; m++) {
        int p = sp->mb_pipe ? sp->mb_pipe[m] : 0;
        L->pipe_mb[p * L->M + L->pipe_n[p]++] = m;
    }
}

static void gl_alloc(gen_list *L, const gen_list_spec *sp) {
    memset(L, 0, sizeof *L);
    L->sp = sp;
    L->P = sp->n_ranks, L->S = sp->n_stages, L->M = sp->n_mb, L->K = sp->n_stages / sp->n_pipes;
    size_t SM = (size_t)L->S * L->M, S = L->S, P = L->P;
    L->pipe_mb = pt_calloc((size_t)sp->n_pipes * L->M, sizeof(int));
    L->pipe_n = pt_calloc((size_t)sp->n_pipes, sizeof(int));
    L->fend = pt_malloc(SM * sizeof(double));
    L->bend = pt_malloc(SM * sizeof(double));
    L->farr = pt_malloc(SM * sizeof(double));
    L->barr = pt_malloc(SM * sizeof(double));
    for (size_t i = 0; i < SM; i++) L->fend[i] = L->bend[i] = L->farr[i] = L->barr[i] = -1;
    L->qfree = pt_calloc(2 * P, sizeof(double));
    L->arr = pt_malloc((2 * SM + 1) * sizeof(double));
    L->next_f = pt_calloc(S, sizeof(int));
    L->inflight = pt_calloc(S, sizeof(int));
    L->held = pt_calloc(S, sizeof(int));
    L->rank_held = pt_calloc(P, sizeof(int));
    L->bcand = pt_calloc(SM, sizeof(int));
    L->n_bcand = pt_calloc(S, sizeof(int));
    L->wq = pt_calloc(SM, sizeof(int));
    L->wq_head = pt_calloc(S, sizeof(int));
    L->wq_tail = pt_calloc(S, sizeof(int));
    L->rank_st = pt_calloc(P * S, sizeof(int));
    L->n_rank_st = pt_calloc(P, sizeof(int));
    L->cap = pt_calloc(S, sizeof(int));
    L->run = pt_calloc(P, sizeof(gl_run));
    for (int r = 0; r < L->P; r++) L->run[r].kind = -1;
    gl_init_stages(L);
}

static void gl_free(gen_list *L) {
    free(L->pipe_mb), free(L->pipe_n), free(L->fend), free(L->bend), free(L->arr), free(L->next_f), free(L->inflight);
    free(L->farr), free(L->barr), free(L->qfree);
    free(L->held), free(L->rank_held), free(L->bcand), free(L->n_bcand), free(L->wq);
    free(L->wq_head), free(L->wq_tail), free(L->rank_st), free(L->n_rank_st);
    free(L->cap), free(L->run);
}

static void gl_release(gen_list *L, int g) {
    L->held[g]--;
    L->rank_held[L->sp->stage_rank[g]]--;
}

/* When prerequisite d (an F or B of stage d->stage) is usable by stage g: its end on g's own
 * stage, else when its message reached g (gl_finish set it); -1 while it has not run. The one
 * value for both the readiness test and the arrival events, so the times compare exactly. */
static double gl_avail(const gen_list *L, const sched_action *d, int g) {
    size_t i = (size_t)d->stage * L->M + d->mb;
    double e = (d->kind == ACT_F ? L->fend : L->bend)[i];
    if (e < 0 || d->stage == g) return e;
    return (d->kind == ACT_F ? L->farr : L->barr)[i];
}

/* When the message of an action of stage g ending at `end` reaches stage `to` (g +- 1): through
 * the queue of their link's direction when the edge has a busy time (after the messages before
 * it: callers send them in time order, so the queue is FIFO; qfree [2P] as gen_list's), then its
 * delay. */
static double gl_arrival(const gen_list_spec *sp, double *qfree, int g, int to, double end) {
    int e = g < to ? g : to, a = sp->stage_rank[g], b = sp->stage_rank[to];
    double busy = gl_edge_busy(sp, e), out = end;
    if (busy > 0) {
        double *q = &qfree[2 * (a < b ? a : b) + (a > b)];
        out = (*q > end ? *q : end) + busy;
        *q = out;
    }
    return out + gl_edge_delay(sp, e);
}

static void gl_heap_push(gen_list *L, double t) {
    int i = L->n_arr++;
    for (; i > 0 && L->arr[(i - 1) / 2] > t; i = (i - 1) / 2) L->arr[i] = L->arr[(i - 1) / 2];
    L->arr[i] = t;
}

static void gl_heap_pop(gen_list *L) {
    double x = L->arr[--L->n_arr];
    int i = 0;
    for (;;) {
        int c = 2 * i + 1;
        if (c >= L->n_arr) break;
        if (c + 1 < L->n_arr && L->arr[c + 1] < L->arr[c]) c++;
        if (L->arr[c] >= x) break;
        L->arr[i] = L->arr[c];
        i = c;
    }
    if (L->n_arr) L->arr[i] = x;
}

/* Records a finished action: the end times the dependency rule is checked against, the arrival
 * of its message at a neighbour on another rank (an event: a rank may wait for nothing else), and
 * the memory a W or BW frees. What may start next is the rule's business (gl_deps_met). */
static void gl_finish(gen_list *L, const gl_run *a) {
    size_t i = (size_t)a->stage * L->M + a->mb;
    int g = a->stage, to = -1;
    if (a->kind == ACT_F) L->fend[i] = a->end, to = g % L->K < L->K - 1 ? g + 1 : -1;
    if (a->kind == ACT_B || a->kind == ACT_BW) L->bend[i] = a->end, to = g % L->K > 0 ? g - 1 : -1;
    if (a->kind == ACT_W || a->kind == ACT_BW) gl_release(L, a->stage);
    if (to < 0) return;
    double t = gl_arrival(L->sp, L->qfree, g, to, a->end);
    (a->kind == ACT_F ? L->farr : L->barr)[i] = t;
    if (t > a->end) gl_heap_push(L, t);
}

/* True when every prerequisite of (kind, g, m) by the dependency rule (sched_action_deps on the
 * compute-only schedule being built: F and B prerequisites only) is usable at time t. */
static bool gl_deps_met(const gen_list *L, sched_kind kind, int g, int m, double t) {
    sched_action a = { .stage = g, .mb = m, .kind = kind }, d[SCHED_MAX_DEPS];
    int n = sched_action_deps(L->out, &a, d);
    for (int j = 0; j < n; j++) {
        double at = gl_avail(L, &d[j], g);
        if (at < 0 || at > t) return false;
    }
    return true;
}

/* Slots a rank keeps free when stage g starts a forward: one for each deeper stage of the same
 * rank and pipe that holds nothing yet, so a full rank can always take the forward that leads
 * its oldest microbatch towards the pipe's end (where B needs nothing else). */
static int gl_reserve(const gen_list *L, int g) {
    int r = L->sp->stage_rank[g], n = 0;
    const int *st = L->rank_st + (size_t)r * L->S;
    for (int i = 0; i < L->n_rank_st[r]; i++) {
        int h = st[i];
        if (h / L->K == g / L->K && h > g && L->held[h] == 0) n++;
    }
    return n;
}

/* The forward stage g could start now, or -1: next in its pipe's order, input ready, memory
 * (stage limit, rank limit keeping room for the rank's deeper stages) and in-flight cap allow. */
static int gl_ready_f(const gen_list *L, int g, double t) {
    const gen_list_spec *sp = L->sp;
    int p = g / L->K;
    if (L->next_f[g] >= L->pipe_n[p]) return -1;
    int m = L->pipe_mb[p * L->M + L->next_f[g]];
    if (!gl_deps_met(L, ACT_F, g, m, t)) return -1;
    if (sp->stage_limit > 0 && L->held[g] >= sp->stage_limit) return -1;
    if (sp->rank_limit > 0 && L->rank_held[sp->stage_rank[g]] + gl_reserve(L, g) >= sp->rank_limit) return -1;
    if (L->inflight[g] >= L->cap[g]) return -1;
    return m;
}

/* Index in bcand of stage g's oldest microbatch whose backward may start now, or -1. */
static int gl_oldest_b(const gen_list *L, int g, double t) {
    int best = -1;
    const int *b = L->bcand + (size_t)g * L->M;
    sched_kind k = L->sp->fused ? ACT_BW : ACT_B;
    for (int i = 0; i < L->n_bcand[g]; i++)
        if ((best < 0 || b[i] < b[best]) && gl_deps_met(L, k, g, b[i], t)) best = i;
    return best;
}

/* Rank r's forward to start at t into *a, if any: the deepest of its stages first. */
static void gl_pick_f(const gen_list *L, int r, double t, gl_run *a) {
    const int *st = L->rank_st + (size_t)r * L->S;
    for (int i = 0; i < L->n_rank_st[r]; i++) {
        int g = st[i], m = gl_ready_f(L, g, t);
        if (m >= 0 && (a->kind < 0 || gl_pos(L, g) > gl_pos(L, a->stage)))
            *a = (gl_run){ ACT_F, g, m, 0, 0 };
    }
}

/* Rank r's backward (B or BW) to start at t into *a, if any: oldest microbatch, then deepest stage. */
static void gl_pick_b(const gen_list *L, int r, double t, gl_run *a) {
    const int *st = L->rank_st + (size_t)r * L->S;
    for (int i = 0; i < L->n_rank_st[r]; i++) {
        int g = st[i], k = gl_oldest_b(L, g, t);
        if (k < 0) continue;
        int m = L->bcand[(size_t)g * L->M + k];
        if (a->kind < 0 || m < a->mb || (m == a->mb && gl_pos(L, g) > gl_pos(L, a->stage)))
            *a = (gl_run){ L->sp->fused ? ACT_BW : ACT_B, g, m, k, 0 };
    }
}

/* Rank r's oldest pending W into *a, if any (a W needs only its own B). */
static void gl_pick_w(const gen_list *L, int r, double t, gl_run *a) {
    const int *st = L->rank_st + (size_t)r * L->S;
    for (int i = 0; i < L->n_rank_st[r]; i++) {
        int g = st[i];
        if (L->wq_head[g] == L->wq_tail[g]) continue;
        int m = L->wq[(size_t)g * L->M + L->wq_head[g]];
        if ((a->kind < 0 || m < a->mb) && gl_deps_met(L, ACT_W, g, m, t)) *a = (gl_run){ ACT_W, g, m, 0, 0 };
    }
}

/* Picks rank r's next action at time t into *a (kind -1 when nothing is ready), by the policy. */
static void gl_pick(const gen_list *L, int r, double t, gl_run *a) {
    a->kind = -1;
    bool b_first = L->sp->policy == GEN_LIST_B_FIRST;
    if (b_first) gl_pick_b(L, r, t, a);
    if (a->kind < 0) gl_pick_f(L, r, t, a);
    if (a->kind < 0 && !b_first) gl_pick_b(L, r, t, a);
    if (a->kind < 0) gl_pick_w(L, r, t, a);
}

/* Starts a picked action on rank r at time t: bookkeeping, duration, and the output list. */
static void gl_start(gen_list *L, int r, gl_run a, double t) {
    const gen_list_spec *sp = L->sp;
    int g = a.stage;
    double d;
    if (a.kind == ACT_F) {
        L->next_f[g]++, L->inflight[g]++, L->held[g]++, L->rank_held[r]++;
        L->bcand[(size_t)g * L->M + L->n_bcand[g]++] = a.mb;   /* its backward is a candidate now */
        d = sp->cost_f[g];
    } else if (a.kind == ACT_W) {
        L->wq_head[g]++;
        d = sp->cost_w[g];
    } else {                                /* B or BW: drop it from the candidates */
        int k = a.slot, *b = L->bcand + (size_t)g * L->M;
        b[k] = b[--L->n_bcand[g]];
        if (a.kind == ACT_B) L->wq[(size_t)g * L->M + L->wq_tail[g]++] = a.mb;   /* its W is one now */
        L->inflight[g]--;
        d = sp->cost_b[g] + (a.kind == ACT_BW ? sp->cost_w[g] : 0);
    }
    a.end = t + d;
    L->run[r] = a;
    sched_push(L->out, r, (sched_kind)a.kind, g, a.mb);
}

/* One event step at time t: finish what ends by t, start what free ranks pick. Returns the
 * next event time (an action's end or a message's arrival), or -1 when nothing runs and no
 * message is on its way (all done, or stuck). *last gets the latest end seen. */
static double gl_step(gen_list *L, double t, double *last) {
    for (int r = 0; r < L->P; r++)
        if (L->run[r].kind >= 0 && L->run[r].end <= t) {
            gl_finish(L, &L->run[r]);
            if (L->run[r].end > *last) *last = L->run[r].end;
            L->run[r].kind = -1;
        }
    while (L->n_arr && L->arr[0] <= t) gl_heap_pop(L);
    double next = L->n_arr ? L->arr[0] : -1;
    for (int r = 0; r < L->P; r++) {
        if (L->run[r].kind < 0) {
            gl_run a;
            gl_pick(L, r, t, &a);
            if (a.kind >= 0) gl_start(L, r, a, t);
        }
        if (L->run[r].kind >= 0 && (next < 0 || L->run[r].end < next)) next = L->run[r].end;
    }
    return next;
}

sched *gen_list_schedule(const gen_list_spec *sp) { return gen_list_run(sp, NULL); }

sched *gen_list_run(const gen_list_spec *sp, double *makespan) {
    gen_list L;
    gl_alloc(&L, sp);
    L.out = sched_new(sp->n_ranks, sp->n_stages, sp->n_pipes, sp->n_mb);
    snprintf(L.out->name, sizeof L.out->name, "%s", sp->name);
    memcpy(L.out->stage_rank, sp->stage_rank, (size_t)sp->n_stages * sizeof(int));
    if (sp->mb_pipe) memcpy(L.out->mb_pipe, sp->mb_pipe, (size_t)sp->n_mb * sizeof(int));
    double last = 0;
    for (double t = 0; t >= 0;) t = gl_step(&L, t, &last);
    if (makespan) *makespan = last;
    long want = (long)L.K * L.M * (sp->fused ? 2 : 3);
    if (sched_total_actions(L.out) != want) {
        pt_seterr("schedule %s: list scheduler stuck after %ld of %ld actions (a bug)", sp->name,
                  sched_total_actions(L.out), want);
        sched_free(L.out);
        L.out = NULL;
    } else {
        sched_append_sync_tail(L.out);
    }
    gl_free(&L);
    return L.out;
}

/* A timer of fixed orders (gen_list.h). Cells [4][S][M]: F ends, B (or BW) ends, F outputs'
 * arrivals at g+1, B gradients' arrivals at g-1; -1 until set. Per compute action, keyed
 * (kind, stage, mb) (its order may change between runs, its prerequisites do not): duration,
 * prerequisite cells, the cell its end sets, the cell its message's arrival sets and where to. */
struct gen_list_timer {
    const gen_list_spec *sp;
    int P, S, M;
    double *dur;                 /* [4][S][M] by key, kinds F, B, W, BW */
    int *dep;                    /* [4][S][M][SCHED_MAX_DEPS] cells, -1: none */
    int *own, *msg, *to;         /* [4][S][M] cell of its end, of its message's arrival (-1), to stage */
    double *rest0;               /* [P] each rank's compute time */
    double *cell, *t, *rest, *qfree;    /* scratch: [4SM], [P], [P], [2P] */
    int *pos;                    /* scratch [P] */
};

static int gt_key(const gen_list_timer *T, const sched_action *a) {
    return ((int)a->kind * T->S + a->stage) * T->M + a->mb;
}

/* The cell that prerequisite d (an F or B) of an action of stage g is read from. */
static int gt_cell(const gen_list_timer *T, const sched_action *d, int g) {
    int i = d->stage * T->M + d->mb, SM = T->S * T->M;
    return (d->kind == ACT_F ? 0 : SM) + (d->stage == g ? 0 : 2 * SM) + i;
}

static void gt_prepare(gen_list_timer *T, const sched *s, const sched_action *a) {
    int k = gt_key(T, a), g = a->stage, SM = T->S * T->M, i = g * T->M + a->mb;
    const gen_list_spec *sp = T->sp;
    sched_action d[SCHED_MAX_DEPS];
    int n = sched_action_deps(s, a, d);
    for (int j = 0; j < SCHED_MAX_DEPS; j++) T->dep[k * SCHED_MAX_DEPS + j] = j < n ? gt_cell(T, &d[j], g) : -1;
    T->dur[k] = a->kind == ACT_F ? sp->cost_f[g] : a->kind == ACT_W ? sp->cost_w[g] :
                sp->cost_b[g] + (a->kind == ACT_BW ? sp->cost_w[g] : 0);
    bool f = a->kind == ACT_F;
    T->own[k] = a->kind == ACT_W ? -1 : (f ? 0 : SM) + i;
    T->to[k] = a->kind == ACT_W ? -1 : f ? sched_stage_next(s, g) : sched_stage_prev(s, g);
    T->msg[k] = T->to[k] < 0 ? -1 : (f ? 2 * SM : 3 * SM) + i;
}

gen_list_timer *gen_list_timer_new(const gen_list_spec *sp, const sched *s) {
    gen_list_timer *T = pt_calloc(1, sizeof *T);
    T->sp = sp, T->P = s->n_ranks, T->S = s->n_stages, T->M = s->n_mb;
    size_t K = 4 * (size_t)T->S * T->M, P = (size_t)T->P;
    T->dur = pt_calloc(K, sizeof(double)), T->dep = pt_malloc(K * SCHED_MAX_DEPS * sizeof(int));
    T->own = pt_malloc(K * sizeof(int)), T->msg = pt_malloc(K * sizeof(int)), T->to = pt_malloc(K * sizeof(int));
    T->cell = pt_malloc(K * sizeof(double));
    T->rest0 = pt_calloc(5 * P, sizeof(double));
    T->t = T->rest0 + P, T->rest = T->t + P, T->qfree = T->rest + P;
    T->pos = pt_calloc(P, sizeof(int));
    for (int r = 0; r < T->P; r++)
        for (int i = 0; i < s->len[r]; i++)
            if (sched_kind_is_compute(s->acts[r][i].kind)) {
                gt_prepare(T, s, &s->acts[r][i]);
                T->rest0[r] += T->dur[gt_key(T, &s->acts[r][i])];
            }
    return T;
}

void gen_list_timer_free(gen_list_timer *T) {
    if (!T) return;
    free(T->dur), free(T->dep), free(T->own), free(T->msg), free(T->to), free(T->cell), free(T->rest0), free(T->pos);
    free(T);
}

/* Runs rank r from its position as far as its inputs allow. Returns whether it moved; sets
 * *over when its end plus its work left passes cutoff (> 0). */
static bool gt_advance(gen_list_timer *T, const sched *s, int r, double cutoff, double *sum, double *span,
                       bool *over) {
    bool moved = false;
    for (; T->pos[r] < s->len[r]; T->pos[r]++, moved = true) {
        const sched_action *a = &s->acts[r][T->pos[r]];
        if (!sched_kind_is_compute(a->kind)) continue;
        int k = gt_key(T, a);
        double ready = 0;
        for (int j = 0; j < SCHED_MAX_DEPS; j++) {
            int c = T->dep[k * SCHED_MAX_DEPS + j];
            if (c >= 0 && T->cell[c] < 0) return moved;
            if (c >= 0 && T->cell[c] > ready) ready = T->cell[c];
        }
        double end = (ready > T->t[r] ? ready : T->t[r]) + T->dur[k];
        T->t[r] = end, *sum += end, *span = end > *span ? end : *span, T->rest[r] -= T->dur[k];
        if (cutoff > 0 && end + T->rest[r] > cutoff) {
            *over = true, *span = end + T->rest[r];
            return moved;
        }
        if (T->own[k] >= 0) T->cell[T->own[k]] = end;
        if (T->msg[k] >= 0) T->cell[T->msg[k]] = gl_arrival(T->sp, T->qfree, a->stage, T->to[k], end);
    }
    return moved;
}

double gen_list_timer_run(gen_list_timer *T, const sched *s, double cutoff, double *sum_end) {
    size_t K = 4 * (size_t)T->S * T->M;
    for (size_t i = 0; i < K; i++) T->cell[i] = -1;
    for (int r = 0; r < T->P; r++)
        T->t[r] = 0, T->rest[r] = T->rest0[r], T->qfree[2 * r] = T->qfree[2 * r + 1] = 0, T->pos[r] = 0;
    double sum = 0, span = 0;
    bool moved = true, over = false;
    while (moved && !over) {    /* each sweep runs every rank as far as its inputs allow */
        moved = false;
        for (int r = 0; r < T->P && !over; r++) moved |= gt_advance(T, s, r, cutoff, &sum, &span, &over);
    }
    int left = 0;
    for (int r = 0; r < T->P && !over; r++) left += s->len[r] - T->pos[r];
    if (sum_end) *sum_end = over ? INFINITY : sum;
    return left ? -1 : span;
}
