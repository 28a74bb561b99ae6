/* The schedule validator. Proves a schedule complete (each (stage, mb) has F and BW, or F, B and
 * W), ordered by the dependency rule (sched_deps.c), placed (one rank per stage), matched (each
 * send has its receive) and deadlock-free under unit-cost execution. Not a timing model: that is
 * sim/. Errors name rank, step, stage, mb and carry a window of the grid with the cell marked. */
#include "sched/sched.h"
#include "util/pt.h"
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const sched *s;
    int S, M, K;
    int *at[ACT_N_KINDS];   /* [S*M] step of (g, mb, kind) on stage g's rank, -1 when absent */
    char *done[ACT_N_KINDS];/* [S*M] unit-cost execution: action has run */
    int *first_rank;        /* [S] first rank seen running stage g, -1 none */
    sched_error *err;
} vstate;

#define GRID_HALF 5   /* columns shown either side of the failing cell */

/* Records the failing cell and sets pt_err to "msg\ngrid". Returns -1. */
static int vfail(vstate *v, int rank, int step, int stage, int mb, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
static int vfail(vstate *v, int rank, int step, int stage, int mb, const char *fmt, ...) {
    sched_error e = { .rank = rank, .step = step, .stage = stage, .mb = mb };
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.msg, sizeof e.msg, fmt, ap);
    va_end(ap);
    if (v->err) *v->err = e;
    char grid[1400];
    sched_format_grid(v->s, rank, step, GRID_HALF, grid, sizeof grid);
    return pt_seterr("%s\n%s", e.msg, grid);
}

static const char *astr(sched_kind k, int stage, int mb, char *buf) {
    sched_action a = { .stage = stage, .mb = mb, .kind = k };
    return sched_action_str(&a, buf, 48);
}

static int vstate_init(vstate *v, const sched *s, sched_error *err) {
    memset(v, 0, sizeof *v);
    v->s = s;
    v->err = err;
    if (s->n_ranks < 1 || s->n_stages < 1 || s->n_mb < 1 || s->n_pipes < 1 ||
        s->stages_per_pipe < 1 || s->stages_per_pipe * s->n_pipes != s->n_stages) {
        if (err) *err = (sched_error){ -1, -1, -1, -1, "" };
        return pt_seterr("schedule shape is impossible: %d ranks, %d stages, %d pipes of %d, %d microbatches",
                         s->n_ranks, s->n_stages, s->n_pipes, s->stages_per_pipe, s->n_mb);
    }
    v->S = s->n_stages, v->M = s->n_mb, v->K = s->stages_per_pipe;
    size_t n = (size_t)v->S * (size_t)v->M;
    for (int k = 0; k < ACT_N_KINDS; k++) {
        v->at[k] = pt_malloc(n * sizeof(int));
        for (size_t i = 0; i < n; i++) v->at[k][i] = -1;
        v->done[k] = pt_calloc(n, 1);
    }
    v->first_rank = pt_malloc((size_t)v->S * sizeof(int));
    for (int g = 0; g < v->S; g++) v->first_rank[g] = -1;
    return 0;
}

static void vstate_free(vstate *v) {
    for (int k = 0; k < ACT_N_KINDS; k++) {
        free(v->at[k]);
        free(v->done[k]);
    }
    free(v->first_rank);
}

/* ---- pass 1: every cell in range, placed on one rank, in its microbatch's pipe, not repeated ---- */

static int check_maps(vstate *v) {
    const sched *s = v->s;
    for (int g = 0; g < v->S; g++)
        if (s->stage_rank[g] < 0 || s->stage_rank[g] >= s->n_ranks)
            return vfail(v, -1, -1, g, -1, "stage_rank[%d] = %d is not a rank (0..%d)", g, s->stage_rank[g],
                         s->n_ranks - 1);
    for (int mb = 0; mb < v->M; mb++)
        if (s->mb_pipe[mb] < 0 || s->mb_pipe[mb] >= s->n_pipes)
            return vfail(v, -1, -1, -1, mb, "mb_pipe[%d] = %d is not a pipe (0..%d)", mb, s->mb_pipe[mb],
                         s->n_pipes - 1);
    if (s->seq_chunks < 1 || v->M % s->seq_chunks)
        return vfail(v, -1, -1, -1, -1, "%d units are not whole microbatches of %d sequence chunks "
                     "(seq_chunks must be >= 1 and divide the units)", v->M, s->seq_chunks);
    return 0;
}

/* Range and pipe checks of one cell. */
static int check_cell_range(vstate *v, int r, int i, const sched_action *a) {
    char b[48];
    const char *t = sched_action_str(a, b, sizeof b);
    int g = a->stage, mb = a->mb;
    if (a->kind < 0 || a->kind >= ACT_N_KINDS)
        return vfail(v, r, i, g, mb, "bad kind %d on rank %d step %d", (int)a->kind, r, i);
    if (a->kind == ACT_STEP) return 0;
    if (g < 0 || g >= v->S)
        return vfail(v, r, i, g, mb, "%s on rank %d step %d: stage %d is not in 0..%d", t, r, i, g, v->S - 1);
    if (a->kind == ACT_REDUCE_GRAD) return 0;
    if (mb < 0 || mb >= v->M)
        return vfail(v, r, i, g, mb, "%s on rank %d step %d: microbatch %d is not in 0..%d", t, r, i, mb, v->M - 1);
    if (v->s->mb_pipe[mb] != g / v->K)
        return vfail(v, r, i, g, mb, "%s on rank %d step %d: microbatch %d belongs to pipe %d, stage %d to pipe %d",
                     t, r, i, mb, v->s->mb_pipe[mb], g, g / v->K);
    return 0;
}

static int check_cell(vstate *v, int r, int i, const sched_action *a) {
    char b[48];
    const char *t = sched_action_str(a, b, sizeof b);
    if (check_cell_range(v, r, i, a) < 0) return -1;
    if (a->kind == ACT_STEP) return 0;
    int g = a->stage;
    if (v->first_rank[g] >= 0 && v->first_rank[g] != r)
        return vfail(v, r, i, g, a->mb, "stage %d appears on ranks %d and %d (%s at rank %d step %d)", g,
                     v->first_rank[g], r, t, r, i);
    v->first_rank[g] = r;
    if (a->kind == ACT_REDUCE_GRAD) return 0;
    int *at = &v->at[a->kind][g * v->M + a->mb];
    if (*at >= 0) return vfail(v, r, i, g, a->mb, "%s on rank %d step %d runs twice (also at step %d)", t, r, i, *at);
    *at = i;
    return 0;
}

static int check_cells(vstate *v) {
    const sched *s = v->s;
    for (int r = 0; r < s->n_ranks; r++)
        for (int i = 0; i < s->len[r]; i++)
            if (check_cell(v, r, i, &s->acts[r][i]) < 0) return -1;
    for (int g = 0; g < v->S; g++)
        if (v->first_rank[g] >= 0 && v->first_rank[g] != s->stage_rank[g])
            return vfail(v, v->first_rank[g], 0, g, -1, "stage %d runs on rank %d but stage_rank[%d] = %d", g,
                         v->first_rank[g], g, s->stage_rank[g]);
    return 0;
}

/* ---- pass 2: completeness of each (stage, mb) of the mb's pipe ---- */

static int vat(const vstate *v, sched_kind k, int g, int mb) { return v->at[k][g * v->M + mb]; }

/* The backward that hands the gradient on: BW, or B when split. Returns its kind. */
static sched_kind back_kind(const vstate *v, int g, int mb) { return vat(v, ACT_BW, g, mb) >= 0 ? ACT_BW : ACT_B; }

static int check_pair(vstate *v, int g, int mb) {
    int r = v->s->stage_rank[g], f = vat(v, ACT_F, g, mb), bw = vat(v, ACT_BW, g, mb);
    int b = vat(v, ACT_B, g, mb), w = vat(v, ACT_W, g, mb);
    char t1[48], t2[48];
    if (f < 0 && bw < 0 && b < 0 && w < 0)
        return vfail(v, r, -1, g, mb, "stage %d microbatch %d never runs: no %s on rank %d", g, mb,
                     astr(ACT_F, g, mb, t1), r);
    if (bw >= 0 && (b >= 0 || w >= 0))
        return vfail(v, r, bw, g, mb, "%s on rank %d step %d and %s at step %d: the backward runs twice",
                     astr(ACT_BW, g, mb, t1), r, bw, astr(b >= 0 ? ACT_B : ACT_W, g, mb, t2), b >= 0 ? b : w);
    if (b >= 0 && w < 0)
        return vfail(v, r, b, g, mb, "missing %s: %s on rank %d step %d has no matching weight gradient",
                     astr(ACT_W, g, mb, t1), astr(ACT_B, g, mb, t2), r, b);
    if (w >= 0 && b < 0)
        return vfail(v, r, w, g, mb, "missing %s: %s on rank %d step %d has no input gradient before it",
                     astr(ACT_B, g, mb, t1), astr(ACT_W, g, mb, t2), r, w);
    if (f < 0) {
        int at = bw >= 0 ? bw : b;
        return vfail(v, r, at, g, mb, "missing %s: %s on rank %d step %d has no forward", astr(ACT_F, g, mb, t1),
                     astr(back_kind(v, g, mb), g, mb, t2), r, at);
    }
    if (bw < 0 && b < 0)
        return vfail(v, r, f, g, mb, "missing backward: %s on rank %d step %d has no %s (nor B and W)",
                     astr(ACT_F, g, mb, t1), r, f, astr(ACT_BW, g, mb, t2));
    return 0;
}

static int check_complete(vstate *v) {
    for (int g = 0; g < v->S; g++)
        for (int mb = 0; mb < v->M; mb++)
            if (v->s->mb_pipe[mb] == g / v->K && check_pair(v, g, mb) < 0) return -1;
    return 0;
}

/* ---- pass 3: each send has its receive on the neighbour's rank and vice versa ---- */

/* Checks the comm action of kind k on (g, mb) against its partner kind pk on stage pg. */
static int check_comm_one(vstate *v, sched_kind k, int g, int mb, sched_kind pk, int pg) {
    int i = vat(v, k, g, mb), r = v->s->stage_rank[g];
    if (i < 0) return 0;
    char t1[48], t2[48];
    const char *t = astr(k, g, mb, t1);
    if (pg < 0)
        return vfail(v, r, i, g, mb, "%s on rank %d step %d: stage %d is at the %s of its pipe, there is no partner",
                     t, r, i, g, (k == ACT_SEND_F || k == ACT_RECV_B) ? "end" : "start");
    int pr = v->s->stage_rank[pg];
    if (pr == r)
        return vfail(v, r, i, g, mb, "%s on rank %d step %d: stage %d is on the same rank, no communication needed",
                     t, r, i, pg);
    if (vat(v, pk, pg, mb) < 0)
        return vfail(v, r, i, g, mb, "%s on rank %d step %d has no matching %s on rank %d", t, r, i,
                     astr(pk, pg, mb, t2), pr);
    return 0;
}

static int check_comm(vstate *v) {
    const sched *s = v->s;
    for (int g = 0; g < v->S; g++)
        for (int mb = 0; mb < v->M; mb++) {
            int nx = sched_stage_next(s, g), pv = sched_stage_prev(s, g);
            if (check_comm_one(v, ACT_SEND_F, g, mb, ACT_RECV_F, nx) < 0 ||
                check_comm_one(v, ACT_RECV_F, g, mb, ACT_SEND_F, pv) < 0 ||
                check_comm_one(v, ACT_SEND_B, g, mb, ACT_RECV_B, pv) < 0 ||
                check_comm_one(v, ACT_RECV_B, g, mb, ACT_SEND_B, nx) < 0)
                return -1;
        }
    return 0;
}

/* ---- pass 4: order on each rank, then unit-cost execution ---- */

/* What action a needs to have run first: the dependency rule (sched_action_deps), each B
 * resolved to the backward this schedule runs for that (stage, mb), BW where it is fused. */
static int prereqs_of(const vstate *v, const sched_action *a, sched_action out[SCHED_MAX_DEPS]) {
    int n = sched_action_deps(v->s, a, out);
    for (int j = 0; j < n; j++)
        if (out[j].kind == ACT_B) out[j].kind = back_kind(v, out[j].stage, out[j].mb);
    return n;
}

/* Prerequisites on the same rank must come earlier in its list. */
static int check_order_cell(vstate *v, int r, int i, const sched_action *a) {
    sched_action q[SCHED_MAX_DEPS];
    int n = prereqs_of(v, a, q);
    char t1[48], t2[48];
    for (int j = 0; j < n; j++) {
        if (v->s->stage_rank[q[j].stage] != r) continue;
        int at = vat(v, q[j].kind, q[j].stage, q[j].mb);
        if (at < 0)
            return vfail(v, r, i, a->stage, a->mb, "%s on rank %d step %d needs %s, which rank %d never runs",
                         sched_action_str(a, t1, 48), r, i, astr(q[j].kind, q[j].stage, q[j].mb, t2), r);
        if (at > i)
            return vfail(v, r, i, a->stage, a->mb, "%s on rank %d step %d runs before %s (step %d)",
                         sched_action_str(a, t1, 48), r, i, astr(q[j].kind, q[j].stage, q[j].mb, t2), at);
    }
    return 0;
}

/* REDUCE_GRAD after all backward work of its stage; in a synchronous schedule one STEP per rank
 * at most, with no compute after it. */
static int check_tail_cell(vstate *v, int r, int i, const sched_action *a, int *step_at) {
    char t1[48], t2[48];
    for (int mb = 0; a->kind == ACT_REDUCE_GRAD && !v->s->async && mb < v->M; mb++) {
        sched_kind k = back_kind(v, a->stage, mb) == ACT_BW ? ACT_BW : ACT_W;
        int last = vat(v, k, a->stage, mb);
        if (last > i)
            return vfail(v, r, i, a->stage, -1, "%s on rank %d step %d runs before %s (step %d)",
                         sched_action_str(a, t1, 48), r, i, astr(k, a->stage, mb, t2), last);
    }
    if (v->s->async) return 0;
    if (a->kind == ACT_STEP && *step_at >= 0)
        return vfail(v, r, i, -1, -1, "second STEP on rank %d step %d (first at step %d) in a synchronous schedule",
                     r, i, *step_at);
    if (a->kind == ACT_STEP) *step_at = i;
    else if (*step_at >= 0 && (sched_kind_is_compute(a->kind) || a->kind == ACT_REDUCE_GRAD))
        return vfail(v, r, i, a->stage, a->mb, "%s on rank %d step %d runs after STEP (step %d) in a synchronous schedule",
                     sched_action_str(a, t1, 48), r, i, *step_at);
    return 0;
}

static int check_order(vstate *v) {
    for (int r = 0; r < v->s->n_ranks; r++) {
        int step_at = -1;
        for (int i = 0; i < v->s->len[r]; i++)
            if (check_order_cell(v, r, i, &v->s->acts[r][i]) < 0 ||
                check_tail_cell(v, r, i, &v->s->acts[r][i], &step_at) < 0)
                return -1;
    }
    return 0;
}

/* First prerequisite of a that has not run, or -1 when a is ready. */
static int first_unmet(const vstate *v, const sched_action *a, sched_action *q) {
    int n = prereqs_of(v, a, q);
    for (int j = 0; j < n; j++)
        if (!v->done[q[j].kind][q[j].stage * v->M + q[j].mb]) return j;
    return -1;
}

/* Writes the deadlock report: each stuck rank, its action and what it waits for. */
static int report_deadlock(vstate *v, const int *pc) {
    char msg[512] = "deadlock: every rank waits:", t1[48], t2[48];
    int first = -1, shown = 0;
    for (int r = 0; r < v->s->n_ranks; r++) {
        if (pc[r] >= v->s->len[r]) continue;
        if (first < 0) first = r;
        if (shown++ == 6) { strncat(msg, " ...", sizeof msg - strlen(msg) - 1); continue; }
        if (shown > 6) continue;
        const sched_action *a = &v->s->acts[r][pc[r]];
        sched_action q[SCHED_MAX_DEPS];
        int j = first_unmet(v, a, q);
        size_t l = strlen(msg);
        snprintf(msg + l, sizeof msg - l, "%s rank %d at step %d (%s) waits for %s (rank %d)", shown > 1 ? ";" : "", r,
                 pc[r], sched_action_str(a, t1, 48), astr(q[j].kind, q[j].stage, q[j].mb, t2),
                 v->s->stage_rank[q[j].stage]);
    }
    const sched_action *a = &v->s->acts[first][pc[first]];
    return vfail(v, first, pc[first], a->stage, a->mb, "%s", msg);
}

/* Runs every rank's list with unit costs: a rank advances while its next action's prerequisites
 * have run. Sends never block. Stuck before the end: deadlock. */
static int check_deadlock(vstate *v) {
    const sched *s = v->s;
    int *pc = pt_calloc((size_t)s->n_ranks, sizeof(int)), rc = 0;
    for (bool progress = true; progress;) {
        progress = false;
        for (int r = 0; r < s->n_ranks; r++) {
            sched_action q[SCHED_MAX_DEPS];
            while (pc[r] < s->len[r] && first_unmet(v, &s->acts[r][pc[r]], q) < 0) {
                const sched_action *a = &s->acts[r][pc[r]++];
                if (a->stage >= 0 && a->mb >= 0) v->done[a->kind][a->stage * v->M + a->mb] = 1;
                progress = true;
            }
        }
    }
    for (int r = 0; r < s->n_ranks && rc == 0; r++)
        if (pc[r] < s->len[r]) rc = report_deadlock(v, pc);
    free(pc);
    return rc;
}

int sched_validate(const sched *s, sched_error *err) {
    vstate v;
    if (vstate_init(&v, s, err) < 0) return -1;
    int rc = -1;
    if (check_maps(&v) == 0 && check_cells(&v) == 0 && check_complete(&v) == 0 && check_comm(&v) == 0 &&
        check_order(&v) == 0 && check_deadlock(&v) == 0) {
        rc = 0;
        if (err) *err = (sched_error){ -1, -1, -1, -1, "" };
    }
    vstate_free(&v);
    return rc;
}
