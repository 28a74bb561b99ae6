/* The executor's asynchronous modes besides plain weight stashing (exec_mode.c's "async"):
 *   2bw       PipeDream-2BW (arXiv 2006.09503): updates after each batch of P microbatches; the
 *             microbatches of batch j of the job's batches run F and B on version j-1 (the
 *             older of the two a stage keeps while version j is being made), so every update
 *             applies a gradient one update old: W(j+1) = W(j) - lr * step(grad f(W(j-1)))
 *   pipemare  PipeMare (arXiv 1910.05124), pipedream's order without stashing: the stage's lr
 *             scaled by tau^-(1 - min(u / K, 1)) (T1), and each backward on the current weights
 *             moved back along the velocity estimate by the updates since its forward (T2)
 *   predict   weight prediction (SpecTrain, XPipe): each forward on the weights predicted for
 *             the time its gradient is applied, w + s * (the stage's last step), s its stale
 *             count; the backward on the current weights, no stashing
 * The correction math is optim/async_fix.h's; the walk calls these through exec_mode hooks. */
#include "run/exec_int.h"
#include "optim/async_fix.h"
#include "util/pt.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the stage's weights as pieces (span, then its copies in tie order) --------------------- */

typedef struct { float *w; size_t n; } exec_piece;

static int exec_pieces(const run_exec *e, run_stage *st, exec_piece *pc) {
    int n = 0;
    pc[n++] = (exec_piece){ st->m.params + st->span_off, st->span_n };
    for (int t = 0; t < e->n_ties; t++)
        if (st->copy[t].w) pc[n++] = (exec_piece){ st->copy[t].w, st->copy[t].count };
    return n;
}

/* The stage's weights += s * d (d laid out like exec_weights_get's buffer). */
static void exec_weights_axpy(const run_exec *e, run_stage *st, const float *d, double s) {
    exec_piece pc[1 + GPT_MAX_TIES];
    int n = exec_pieces(e, st, pc);
    for (int k = 0; k < n; d += pc[k].n, k++) async_fix_extrapolate(pc[k].w, pc[k].w, d, pc[k].n, s);
}

/* vel <- gamma vel + (1 - gamma) (the stage's weights - old). */
static void exec_weights_velocity(const run_exec *e, run_stage *st, float *vel, const float *old, double gamma) {
    exec_piece pc[1 + GPT_MAX_TIES];
    int n = exec_pieces(e, st, pc);
    for (int k = 0; k < n; vel += pc[k].n, old += pc[k].n, k++)
        async_fix_velocity(vel, pc[k].w, old, pc[k].n, gamma);
}

/* Other weights in for one action: the current ones aside into e->live first. */
static void exec_swap_in(run_exec *e, run_stage *st) {
    exec_weights_get(e, st, e->live);
    e->swapped = 1;
}

static void exec_swap_out(run_exec *e, run_stage *st) {
    if (!e->swapped) return;
    exec_weights_put(e, st, e->live);
    e->swapped = 0;
}

/* ---- 2bw ------------------------------------------------------------------------------------ */

/* Microbatch mb belongs to batch j = mb / (M / STEPs) of the iteration; with s of the rank's
 * STEPs done, the live weights are version s of the iteration's and ver holds s - 1. Batch j
 * needs version j - 1: live when s == j - 1, the older one when s == j (the 2bw order gives
 * nothing else; anything else is counted as a bug in the stash statistics). */
static void twobw_in(run_exec *e, run_stage *st, int mb) {
    int j = mb / (e->M / e->n_step_acts), s = e->step_idx;
    e->stash_checked++;
    e->stash_bad += s != j && s != j - 1;
    if (s != j) return;
    e->stash_stale++;
    exec_swap_in(e, st);
    exec_weights_put(e, st, st->ver);
}

static void swap_after_f(run_exec *e, run_stage *st, int mb) { exec_swap_out(e, st); }

static int swap_after_b(run_exec *e, int i, sched_action a, run_stage *st, double t0) {
    exec_swap_out(e, st);
    return 0;
}

/* ---- pipemare and predict --------------------------------------------------------------------- */

static void pipemare_before_f(run_exec *e, run_stage *st, int mb) { st->f_upd[mb] = st->n_upd; }

/* T2: the backward on w - d * velocity, d the updates since its forward. */
static void pipemare_before_b(run_exec *e, run_stage *st, int mb) {
    int d = st->n_upd - st->f_upd[mb];
    e->stash_checked++;
    if (d <= 0) return;
    e->stash_stale++;
    exec_swap_in(e, st);
    exec_weights_axpy(e, st, st->ver, -(double)d);
}

/* The forward on w + s * (last step), s the updates until its backward. */
static void predict_before_f(run_exec *e, run_stage *st, int mb) {
    int s = st->stale[mb];
    if (s <= 0 || st->n_upd == 0) return;
    exec_swap_in(e, st);
    exec_weights_axpy(e, st, st->ver, (double)s);
}

static void predict_before_b(run_exec *e, run_stage *st, int mb) { e->stash_checked++; }

/* ---- reduction and step ------------------------------------------------------------------------ */

static int async_reduce(run_exec *e, int i, sched_action a, run_stage *st, double t0) {
    return exec_tp_sum_grads(e, st) < 0 ? -1 : exec_reduce_stage(e, st);
}

static int async_finish(run_exec *e, run_exec_stats *rs) { return exec_reduce_world(e, rs); }

/* ---- clipping ---------------------------------------------------------------------------------- */

/* Sum of squares of group gr's reduced gradient on this rank (under TP its shards, the
 * replicated tensors counted by TP rank 0 only). */
static double exec_group_sumsq_here(const run_exec *e, const exec_group *gr) {
    double s = 0;
    for (int i = 0; i < gr->n_ts; i++)
        if (e->tp == 1 || e->t == 0 || !gr->ts[i].replicated) s += optim_sumsq(gr->g[0] + gr->ts[i].off, gr->ts[i].n);
    return s;
}

/* Clipping factors f[n_grp] of an update: the stage's gradient (its groups, tied ones summed
 * over their holders) clipped at --grad-clip / sqrt(P), so that stages all at the bound make
 * the whole model's norm the bound (P = 1: exactly the synchronous clip); a tied tensor takes
 * the smallest factor of its holders, so its copies stay equal (--defer-tie: exec_tie_lag.c's
 * rule). 0, or -1. */
static int exec_async_clip(run_exec *e, const optim_config *oc, double *f) {
    double s = 0, c = oc->grad_clip;
    for (int k = 0; k < e->n_grp; k++) f[k] = 1.0;
    if (c <= 0) return 0;
    for (int k = 0; k < e->n_grp; k++) s += exec_group_sumsq_here(e, &e->grp[k]);
    if (e->tp_comm && comm_allreduce_f64(e->tp_comm, &s, 1) < 0)
        return pt_adderr("rank %d: stage gradient norm over TP: ", e->c.world_rank);
    double r = optim_clip_scale(sqrt(s), c / sqrt((double)e->c.s->n_stages));
    for (int k = 0; k < e->n_grp; k++) {
        exec_group *gr = &e->grp[k];
        f[k] = r;
        if (gr->tie < 0 || !gr->cm || gr->cm->size < 2) continue;
        if (gr->lag) {   /* --defer-tie: from the shipped sums, no exchange */
            f[k] = exec_tie_lag_factor(gr, c / sqrt((double)e->c.s->n_stages));
            continue;
        }
        double *part = pt_calloc((size_t)gr->cm->size, sizeof *part);
        part[gr->cm->rank] = r;
        int rc = comm_allreduce_f64(gr->cm, part, (size_t)gr->cm->size);
        for (int i = 0; i < gr->cm->size; i++) f[k] = part[i] < f[k] ? part[i] : f[k];
        free(part);
        if (rc < 0) return pt_adderr("rank %d: tie %d clip factor: ", e->c.world_rank, gr->tie);
    }
    return 0;
}

/* Update u of every group at lr (PipeMare: times the factor of the group's delay, annealed
 * over `warm` updates), each group's gradient clipped by exec_async_clip first. 0, or -1. */
int exec_async_update(run_exec *e, const optim_config *oc, int u, double lr, int warm) {
    double *f = pt_malloc(sizeof *f * (size_t)(e->n_grp > 0 ? e->n_grp : 1));
    int rc = exec_async_clip(e, oc, f);
    for (int k = 0; k < e->n_grp && rc == 0; k++) {
        exec_group *gr = &e->grp[k];
        double p = e->fix != ASYNC_FIX_PIPEMARE ? 1.0
                 : async_fix_pipemare_lr(gr->tie >= 0 ? e->tau_max : e->st[0].tau, u, warm);
        rc = exec_update_group(e, gr, oc, u, lr * p, f[k]);
    }
    free(f);
    return rc;
}

/* The rank's next STEP of an iteration that starts at step t: its update number (from the step
 * alone, so a resumed run counts the same) and, into *step, the step it belongs to. With a
 * window of e->win steps the iteration's STEPs are its steps' in order, per = STEPs a step:
 * STEP k is update (t - 1) per + k, of step t + (k - 1) / per (its lr). */
int exec_async_next(run_exec *e, int t, int *step) {
    int per = e->n_step_acts / e->win, k = ++e->step_idx;
    *step = t + (k - 1) / per;
    return (t - 1) * per + k;
}

/* The update (exec_async_update), the older weights kept (2bw: in ver; else in e->live, for
 * the velocity), the update counted. */
static int async_fix_step(run_exec *e, const optim_config *oc, int t, run_exec_stats *rs) {
    int rc = 0;
    run_stage *st = &e->st[0];            /* asynchronous: one stage per rank */
    if (oc) {
        int step, u = exec_async_next(e, t, &step);
        rs->lr = optim_lr_at(oc, step);
        exec_weights_get(e, st, e->c.s->weight_versions == 2 ? st->ver : e->live);
        int warm = (oc->total_steps / 10 > 1 ? oc->total_steps / 10 : 1) * (e->n_step_acts / e->win);
        rc = exec_async_update(e, oc, u, rs->lr, warm);
        if (e->fix == ASYNC_FIX_PIPEMARE || e->fix == ASYNC_FIX_PREDICT)
            exec_weights_velocity(e, st, st->ver, e->live,
                                  e->fix == ASYNC_FIX_PIPEMARE ? async_fix_pipemare_gamma(st->tau) : 0.0);
        st->n_upd++;
    }
    exec_zero_grads(e);
    return rc;
}

static const exec_mode MODE_2BW = { "2bw", twobw_in, twobw_in, swap_after_b, async_reduce, async_fix_step,
                                    async_finish, NULL, swap_after_f };
static const exec_mode MODE_PIPEMARE = { "pipemare", pipemare_before_f, pipemare_before_b, swap_after_b,
                                         async_reduce, async_fix_step, async_finish, NULL, NULL };
static const exec_mode MODE_PREDICT = { "predict", predict_before_f, predict_before_b, swap_after_b,
                                        async_reduce, async_fix_step, async_finish, NULL, swap_after_f };

const exec_mode *exec_async_mode(const run_exec *e) {
    if (!e->async) return NULL;
    if (e->c.s->weight_versions == 2) return &MODE_2BW;
    return e->fix == ASYNC_FIX_PIPEMARE ? &MODE_PIPEMARE : e->fix == ASYNC_FIX_PREDICT ? &MODE_PREDICT : NULL;
}

/* ---- set-up --------------------------------------------------------------------------------- */

/* STEPs of rank r's list between F(g, mb) and the backward of (g, mb), for every mb of stage
 * g (out[M]); returns the largest. */
static int exec_stale_counts(const sched *s, int g, int *out) {
    int r = s->stage_rank[g], steps = 0, mx = 0;
    for (int i = 0; i < s->len[r]; i++) {
        sched_action a = s->acts[r][i];
        if (a.kind == ACT_STEP) steps++;
        if (a.stage != g || a.mb < 0) continue;
        if (a.kind == ACT_F) out[a.mb] = steps;
        if (a.kind == ACT_B || a.kind == ACT_BW) {
            out[a.mb] = steps - out[a.mb];
            if (out[a.mb] > mx) mx = out[a.mb];
        }
    }
    return mx;
}

/* The largest delay of any stage of the pipeline (the tied tensors' groups use it, so that
 * every holder of a tie applies the same factor and the copies stay equal). */
static int exec_tau_max(const run_exec *e) {
    const sched *s = e->c.s;
    int *tmp = pt_malloc(sizeof(int) * (size_t)s->n_mb), mx = 0;
    for (int g = 0; g < s->n_stages; g++) {
        int t = exec_stale_counts(s, g, tmp);
        if (t > mx) mx = t;
    }
    free(tmp);
    return mx;
}

int exec_async_init(run_exec *e) {
    if (!exec_async_mode(e)) return 0;
    for (int i = 0; i < e->n_stages; i++) {
        run_stage *st = &e->st[i];
        size_t n = exec_weights_n(st, e->n_ties);
        st->ver = pt_falloc(n);           /* zeros: no velocity, no step yet */
        if (e->c.s->weight_versions == 2) exec_weights_get(e, st, st->ver);   /* W(-1) = W(0) */
        st->stale = pt_calloc((size_t)e->M, sizeof *st->stale);
        st->f_upd = pt_calloc((size_t)e->M, sizeof *st->f_upd);
        st->tau = exec_stale_counts(e->c.s, st->g, st->stale);
    }
    e->tau_max = exec_tau_max(e);
    return 0;
}

void exec_async_free(run_exec *e) {
    for (int i = 0; e->st && i < e->n_stages; i++) {
        free(e->st[i].ver);
        free(e->st[i].stale);
        free(e->st[i].f_upd);
        e->st[i].ver = NULL;
        e->st[i].stale = e->st[i].f_upd = NULL;
    }
}

size_t exec_async_floats(const run_exec *e, const run_stage *st) {
    return st->ver ? exec_weights_n(st, e->n_ties) : 0;
}
