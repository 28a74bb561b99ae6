/* An executor's gradient reduction and update, group by group (exec_group.c): the rank's own
 * copies added, each bucket reduced over the group (non-blocking: posted at the stages' last W,
 * or deferred, completed later), the sum of squares of the unique gradients, the loss and norm
 * over the world, AdamW on what this rank updates (--zero 1: its slices, then the parameters
 * gathered back), zeroing. Not here: when they run (executor.c), the optimizer math (optim/).
 *
 * Summation order (what makes results reproducible): a rank first adds its own copies of a
 * gradient (stage order), then the transport sums ranks in rank order, element by element, so
 * neither buckets nor slices nor the time a reduction starts change a bit. The norm's sum of
 * squares is taken per (bucket, slice) and added in that order, whoever computed the pieces, so
 * --zero 0 and --zero 1 give the same norm, bitwise. Groups are handled in one global order.
 *
 * Waits offered to side work (cfg.on_wait, as exec_comm.c offers a receive's): the final
 * reduction of --no-overlap (the rank's last REDUCE_GRAD, waiting for the groups' other
 * members) and the STEP's world reduction (waiting for every rank to reach it). The latter is
 * a blocking allreduce, so with on_wait set every rank first tells every other that it has
 * arrived (a byte each) and offers the wait for their messages; the numbers are still the
 * allreduce's, bitwise. */
#include "run/exec_int.h"
#include "util/pt.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int exec_group_shared(const exec_group *gr) { return gr->cm && gr->cm->size > 1; }

/* What of bucket b this iteration's reduction leaves summed on this rank: all, or its slice. */
static void exec_reduced_range(const run_exec *e, const exec_bucket *b, size_t *lo, size_t *hi) {
    *lo = e->all ? 0 : b->lo;
    *hi = e->all ? b->n : b->hi;
}

/* Posts bucket k of group gr. */
static int exec_post_bucket(run_exec *e, exec_group *gr, int k) {
    exec_bucket *b = &gr->bk[k];
    gr->next_bk = k + 1;
    if (comm_ireduce_f32(gr->cm, gr->g[0] + b->off, b->n, e->all, &b->req) == 0) return 0;
    return pt_adderr("rank %d: posting the reduction of %s %d: ", e->c.world_rank,
                     gr->tie >= 0 ? "tied tensor" : "chunk", gr->tie >= 0 ? gr->tie : gr->chunk);
}

/* Buckets go one after the other (the next posted when the last completes), so a rank holds the
 * transport's scratch of one bucket per group at a time, never of a whole region; every member
 * posts a group's buckets in the same order, and groups never wait for each other. */
int exec_post_group(run_exec *e, exec_group *gr) {
    if (gr->posted) return 0;
    gr->posted = 1;
    gr->post_t = pt_now();
    gr->next_bk = 0;
    for (int k = 1; k < gr->n_copies; k++)   /* the rank's own copies first, in stage order */
        for (size_t i = 0; i < gr->n; i++) gr->g[0][i] += gr->g[k][i];
    if (!exec_group_shared(gr) || gr->n_bk == 0) {
        gr->next_bk = gr->n_bk;
        gr->done_t = gr->post_t;
        return 0;
    }
    return exec_post_bucket(e, gr, 0);
}

int exec_post_all(run_exec *e) {
    for (int k = 0; k < e->n_grp; k++)
        if (exec_post_group(e, &e->grp[k]) < 0) return -1;
    return 0;
}

int exec_wait_group(run_exec *e, exec_group *gr) {
    for (int k = 0; k < gr->n_bk; k++) {
        exec_bucket *b = &gr->bk[k];
        if (k == gr->next_bk && exec_post_bucket(e, gr, k) < 0) return -1;
        if (!b->req) continue;
        comm_req *r = b->req;
        b->req = NULL;
        if (comm_wait(gr->cm, r, e->c.timeout) < 0)
            return pt_adderr("rank %d: gradient reduction of %s %d: ", e->c.world_rank,
                             gr->tie >= 0 ? "tied tensor" : "chunk", gr->tie >= 0 ? gr->tie : gr->chunk);
    }
    if (gr->done_t == 0) gr->done_t = pt_now();
    for (int k = 0; k < gr->n_bk; k++) {      /* the sum back into the rank's other copies */
        size_t lo, hi;
        exec_reduced_range(e, &gr->bk[k], &lo, &hi);
        for (int c = 1; c < gr->n_copies; c++)
            memcpy(gr->g[c] + gr->bk[k].off + lo, gr->g[0] + gr->bk[k].off + lo, (hi - lo) * sizeof(float));
    }
    return 0;
}

/* ---- waits offered to side work --------------------------------------------------------------- */

int exec_groups_arrived(run_wait *w) {
    exec_waiting *x = w->priv;
    run_exec *e = x->e;
    if (exec_poll_groups(e) < 0) return -1;
    int n = x->st ? x->st->n_writes : e->n_grp;
    for (int j = 0; j < n; j++) {
        const exec_group *gr = &e->grp[x->st ? x->st->writes[j] : j];
        if (gr->posted && gr->done_t == 0) return 0;
    }
    return 1;
}

/* Asleep in the transport's wait on the bucket in flight of the first group not yet complete,
 * then the next, until all are (posting each next bucket as its last one completes). */
int exec_groups_block(run_wait *w, double deadline) {
    exec_waiting *x = w->priv;
    run_exec *e = x->e;
    for (;;) {
        int got = exec_groups_arrived(w), n = x->st ? x->st->n_writes : e->n_grp;
        if (got != 0) return got;
        exec_group *gr = NULL;
        for (int j = 0; j < n && !gr; j++) {
            exec_group *g = &e->grp[x->st ? x->st->writes[j] : j];
            if (g->posted && g->done_t == 0 && g->next_bk > 0 && g->bk[g->next_bk - 1].req) gr = g;
        }
        if (!gr) return 0;          /* nothing in flight to sleep on (not expected) */
        got = exec_req_block(gr->cm, &gr->bk[gr->next_bk - 1].req, deadline);
        if (got <= 0) return got < 0 ? pt_adderr("rank %d: gradient reduction: ", e->c.world_rank) : 0;
    }
}

/* Index of the rank's STEP action, or -1 (a list without one reduces at its end). */
static int exec_step_index(const run_exec *e) {
    for (int i = e->c.s->len[e->p] - 1; i >= 0; i--)
        if (e->c.s->acts[e->p][i].kind == ACT_STEP) return i;
    return -1;
}

/* Completes (or, after a failure, drops) every request of req[0..n). */
static int exec_finish_reqs(run_exec *e, comm_req **req, int n, int failed) {
    int rc = failed ? -1 : 0;
    for (int k = 0; k < n; k++) {
        int done = 0;
        if (!req[k]) continue;
        if (failed) comm_test(e->c.world, req[k], &done);
        else if (comm_wait(e->c.world, req[k], e->c.timeout) < 0) rc = -1, failed = 1;
        req[k] = NULL;
    }
    return rc;
}

/* Synchronous schedules with on_wait: every rank tells every other that it reached its norm (a
 * byte to each, once per iteration on every rank) and offers the wait for theirs when it has a
 * STEP (the action waiting); a message is handed over when both sides have posted, so the
 * last rank to arrive waits for nothing and nobody's side work delays another's arrival. */
static int exec_world_arrival(run_exec *e) {
    int R = e->c.world->size, me = e->c.world->rank, n = 0, rc = 0;
    if (!e->c.on_wait || e->async || R == 1) return 0;
    static const char one = 1;        /* read by receivers until the sends complete */
    char *got = pt_calloc((size_t)R, 1);
    comm_req **req = pt_calloc(2 * (size_t)R, sizeof *req), **sent = req + R;
    for (int r = 0; r < R && rc == 0; r++) {
        if (r == me) continue;
        rc = comm_irecv(e->c.world, r, COMM_TAG_ARRIVAL, &got[r], 1, &req[n]);
        if (rc == 0) rc = comm_isend(e->c.world, r, COMM_TAG_ARRIVAL, &one, 1, &sent[n]);
        n++;
    }
    int i = exec_step_index(e);
    exec_waiting x = { .e = e, .req = req, .n = n };
    if (rc == 0 && i >= 0) rc = exec_offer_wait(e, i, exec_reqs_arrived, exec_reqs_block, &x);
    rc = exec_finish_reqs(e, req, n, rc < 0);
    if (exec_finish_reqs(e, sent, n, rc < 0) < 0) rc = -1;
    free(req);
    if (rc == 0) free(got);           /* after a failure a receive may still land in it */
    return rc < 0 ? pt_adderr("rank %d: waiting for every rank at the step: ", e->c.world_rank) : 0;
}

/* --no-overlap's final reduction (the last REDUCE_GRAD, before the step) is offered when a group
 * still waits for other members. */
int exec_wait_all(run_exec *e) {
    int i = e->last_reduce;
    exec_waiting x = { .e = e };   /* every group */
    if (e->c.on_wait && !e->c.overlap && !e->stepped && !e->async && i >= 0 &&
        exec_offer_wait(e, i, exec_groups_arrived, exec_groups_block, &x) < 0)
        return -1;
    for (int k = 0; k < e->n_grp; k++)
        if (exec_wait_group(e, &e->grp[k]) < 0) return -1;
    return 0;
}

/* Tests the posted reductions (MPI progresses them inside such calls), posts a group's next
 * bucket when its last one completed; notes when a group is seen complete. */
int exec_poll_groups(run_exec *e) {
    for (int k = 0; k < e->n_grp; k++) {
        exec_group *gr = &e->grp[k];
        if (!gr->posted || gr->done_t > 0) continue;
        exec_bucket *b = &gr->bk[gr->next_bk - 1];   /* the one in flight */
        if (exec_req_test(gr->cm, &b->req) < 0)
            return pt_adderr("rank %d: gradient reduction: ", e->c.world_rank);
        if (b->req) continue;
        if (gr->next_bk < gr->n_bk) {
            if (exec_post_bucket(e, gr, gr->next_bk) < 0) return -1;
        } else gr->done_t = pt_now();
    }
    return 0;
}

/* Asynchronous schedules: the groups whose copies include stage st, now, whole. Every holder
 * reduces the same microbatch's gradients: replicas run the same list, and the owner's and the
 * user's k-th backward are of the same microbatch. --defer-tie: the shared tied tensors last
 * (their posts carry the span's reduced sum of squares), in the background (exec_tie_lag.c). */
int exec_reduce_stage(run_exec *e, run_stage *st) {
    int me = (int)(st - e->st);
    for (int pass = 0; pass < 2; pass++)
        for (int j = 0; j < st->n_writes; j++) {
            exec_group *gr = &e->grp[st->writes[j]];
            int mine = 0;
            for (int c = 0; c < gr->n_copies; c++) mine |= gr->copy_stage[c] == me;
            if (!mine || (gr->lag != NULL) != pass) continue;
            if (gr->lag) {
                if (exec_tie_lag_reduce(e, gr) < 0) return pt_adderr("stage %d: ", st->g);
                continue;
            }
            gr->posted = 0;
            gr->done_t = 0;
            if (exec_post_group(e, gr) < 0 || exec_wait_group(e, gr) < 0)
                return pt_adderr("stage %d: ", st->g);
            gr->posted = 0;
        }
    return 0;
}

/* Sum of squares of floats [lo, hi) of group gr's region. Under tensor parallelism each TP
 * rank sums its shards, and the replicated tensors (the same on every TP rank) only TP rank 0
 * counts, tensor by tensor; at tp 1 one sum over the range (the order the tp-1 runs keep). */
static double exec_range_sumsq(const run_exec *e, const exec_group *gr, size_t lo, size_t hi) {
    if (e->tp == 1) return optim_sumsq(gr->g[0] + lo, hi - lo);
    double s = 0;
    for (int i = 0; i < gr->n_ts; i++) {
        const exec_span *ts = &gr->ts[i];
        size_t a = ts->off > lo ? ts->off : lo, z = ts->off + ts->n < hi ? ts->off + ts->n : hi;
        if (a < z && (e->t == 0 || !ts->replicated)) s += optim_sumsq(gr->g[0] + a, z - a);
    }
    return s;
}

/* Group gr's sum of squares: per bucket and slice of the group (comm_slice over its ranks), in
 * that order. With whole sums any rank has every piece (the group's rank 0 counts it); with
 * slices each rank has its own, and a small allreduce puts them side by side (the other entries
 * are +0.0, which adds exactly). *out gets the total on the rank that counts it, else 0. */
static int exec_group_sumsq(run_exec *e, const exec_group *gr, double *out) {
    int size = exec_group_shared(gr) ? gr->cm->size : 1, rank = size > 1 ? gr->cm->rank : 0;
    int sliced = !e->all && size > 1;
    size_t n = (size_t)gr->n_bk * (size_t)size;
    double *part = pt_calloc(n, sizeof *part), total = 0;
    for (int k = 0; k < gr->n_bk; k++)
        for (int s = 0; s < size; s++) {
            size_t lo, hi;
            comm_slice(gr->bk[k].n, s, size, &lo, &hi);
            if (sliced ? s == rank : rank == 0)
                part[(size_t)k * size + s] = exec_range_sumsq(e, gr, gr->bk[k].off + lo, gr->bk[k].off + hi);
        }
    int rc = sliced ? comm_allreduce_f64(gr->cm, part, n) : 0;
    for (size_t i = 0; i < n; i++) total += part[i];
    free(part);
    *out = rank == 0 ? total : 0;
    return rc;
}

int exec_norm(run_exec *e) {
    if (exec_world_arrival(e) < 0) return -1;
    for (int k = 0; k < e->n_grp; k++) {
        double s;
        if (exec_group_sumsq(e, &e->grp[k], &s) < 0) return pt_adderr("rank %d: gradient norm: ", e->c.world_rank);
        e->sumsq += s;
    }
    return 0;
}

/* World reduction of (sum of squares, loss sum): once per iteration, at STEP or at the end.
 * Every TP rank's head has the same loss: TP rank 0's counts. */
int exec_reduce_world(run_exec *e, run_exec_stats *rs) {
    if (e->outer) return exec_outer_reduce_world(e, rs);
    double v[2 + RUN_MAX_WINDOW] = { e->sumsq, e->t == 0 ? e->loss_sum : 0 };
    int n = e->win > 1 ? 2 + e->win : 2;   /* a window: each step's loss too */
    for (int k = 0; k < e->win && n > 2; k++) v[2 + k] = e->t == 0 ? e->win_loss[k] : 0;
    if (comm_allreduce_f64(e->c.world, v, (size_t)n) < 0) return pt_adderr("rank %d: loss/norm: ", e->c.world_rank);
    rs->grad_norm = sqrt(v[0]);
    rs->loss = (float)(v[1] / (e->M * e->c.lo->D));
    for (int k = 0; k < e->win && n > 2; k++) rs->win_loss[k] = (float)(v[2 + k] * e->win / (e->M * e->c.lo->D));
    if (e->async) rs->clip_scale = 1;
    return 0;
}

/* AdamW step t on floats [lo, hi) of bucket b of group gr (region-relative: b->off + lo ...),
 * tensor by tensor (each its own decay). */
static void exec_update_slice(const exec_group *gr, const exec_bucket *b, const optim_config *oc,
                              int t, double lr, double scale) {
    size_t lo = b->off + b->lo, hi = b->off + b->hi;
    for (int i = 0; i < gr->n_ts; i++) {
        const exec_span *ts = &gr->ts[i];
        size_t a = ts->off > lo ? ts->off : lo, z = ts->off + ts->n < hi ? ts->off + ts->n : hi;
        if (a < z)
            adamw_update(gr->w[0] + a, b->mm + (a - lo), b->vv + (a - lo), gr->g[0] + a, z - a, lr,
                         scale, ts->decay != 0, t, oc);
    }
}

/* AdamW update t of every group's home copy (its slices with --zero 1, then the parameters
 * gathered from the group in the global order), gradients scaled by `scale` (the clipping
 * factor) first; then the rank's other copies get the new parameters. */
int exec_update_group(run_exec *e, exec_group *gr, const optim_config *oc, int t, double lr, double scale) {
    for (int b = 0; b < gr->n_bk; b++) exec_update_slice(gr, &gr->bk[b], oc, t, lr, scale);
    for (int b = 0; b < gr->n_bk && e->c.zero && exec_group_shared(gr); b++)
        if (comm_allgather_f32(gr->cm, gr->w[0] + gr->bk[b].off, gr->bk[b].n) < 0)
            return pt_adderr("rank %d: gathering updated parameters: ", e->c.world_rank);
    for (int c = 1; c < gr->n_copies; c++) memcpy(gr->w[c], gr->w[0], gr->n * sizeof(float));
    return 0;
}

int exec_update(run_exec *e, const optim_config *oc, int t, double lr, double scale) {
    for (int k = 0; k < e->n_grp; k++)
        if (exec_update_group(e, &e->grp[k], oc, t, lr, scale) < 0) return -1;
    return 0;
}

void exec_zero_grads(run_exec *e) {
    for (int i = 0; i < e->n_stages; i++) {
        run_stage *st = &e->st[i];
        gpt_zero_grad(&st->m);
        for (int t = 0; t < e->n_ties; t++)
            if (st->copy[t].dw) memset(st->copy[t].dw, 0, st->copy[t].count * sizeof(float));
    }
}
