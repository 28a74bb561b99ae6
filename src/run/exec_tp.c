/* Tensor parallelism in the executor: the TP group's communicator and the collectives its stage
 * models call (gpt_set_tp; under --sp also reduce-scatter and all-gather, and the sum of the
 * layer norms' partial gradients), and whole tensors made from a TP group's shards, for the
 * files that keep Hugging Face names and whole shapes (checkpoint chunks, the gradient file).
 * Not here: the sharded layers (model/), which rank writes which file (run_job.c).
 *
 * A TP group is the tp ranks of one (replica, pipeline rank): neighbouring world ranks. Each
 * holds its shard of every tensor its stages hold (gpt_param_info.split) and all of the
 * replicated ones, which stay equal on every TP rank (same gradients, same update). */
#include "run/exec_int.h"
#include "util/pt.h"
#include <stdlib.h>
#include <string.h>

/* The model's collectives: a sum over the TP group in rank order, started without waiting
 * (comm_ireduce_f32 with all = 1: bitwise the blocking allreduce on every transport, so threads
 * and MPI give the same bits), and its wait; counted and timed in e->tps (the time inside the
 * wait: what compute did not hide). req is the transport's comm_req. */
static int exec_tp_iallreduce(void *ctx, float *buf, size_t n, void **req) {
    run_exec *e = ctx;
    comm_req *r;
    if (comm_ireduce_f32(e->tp_comm, buf, n, 1, &r) < 0) return -1;
    e->tps.calls++;
    e->tps.floats += (double)n;
    *req = r;
    return 0;
}

static int exec_tp_wait(void *ctx, void *req) {
    run_exec *e = ctx;
    double t0 = pt_now();
    int rc = comm_wait(e->tp_comm, req, e->c.timeout);
    e->tps.seconds += pt_now() - t0;
    return rc;
}

/* The blocking one is the same, waited for at once: on threads that copies half of what
 * comm_allreduce does (each rank sums its slice in place and copies the others'), and a
 * --slow-link between TP ranks (comm_faulty holds reductions back) delays it as it delays an
 * overlapped one. */
static int exec_tp_allreduce(void *ctx, float *buf, size_t n) {
    void *req;
    if (exec_tp_iallreduce(ctx, buf, n, &req) < 0) return -1;
    return exec_tp_wait(ctx, req);
}

/* --sp's two, on whole (N,C) buffers whose slices (comm_slice) are the ranks' rows: the sum in
 * rank order into this rank's slice (comm_ireduce_f32 with all = 0, bitwise the all-reduce's
 * elements), and every rank's slice to every rank. Counted and timed with the all-reduces. */
static int exec_tp_reduce_scatter(void *ctx, float *buf, size_t n) {
    run_exec *e = ctx;
    comm_req *r;
    if (comm_ireduce_f32(e->tp_comm, buf, n, 0, &r) < 0) return -1;
    e->tps.calls++;
    e->tps.floats += (double)n;
    return exec_tp_wait(ctx, r);
}

static int exec_tp_allgather(void *ctx, float *buf, size_t n) {
    run_exec *e = ctx;
    double t0 = pt_now();
    int rc = comm_allgather_f32(e->tp_comm, buf, n);
    e->tps.calls++;
    e->tps.floats += (double)n;
    e->tps.seconds += pt_now() - t0;
    return rc;
}

int exec_tp_init(run_exec *e) {
    if (e->tp == 1) return 0;
    int color = run_layout_world_rank(e->c.lo, e->d, e->p, 0);   /* the group's first rank */
    if (comm_split(e->c.world, color, &e->tp_comm) < 0) return pt_adderr("TP group: ");
    if (e->tp_comm->size != e->tp || e->tp_comm->rank != e->t)   /* ranks ordered by world rank */
        return pt_seterr("TP group of rank %d: %d ranks, this one %d (expected %d, %d)",
                         e->c.world_rank, e->tp_comm->size, e->tp_comm->rank, e->tp, e->t);
    return 0;
}

int exec_tp_set(run_exec *e, run_stage *st) {
    if (e->tp == 1) return 0;
    gpt_tp tp = { .rank = e->t, .size = e->tp, .allreduce = exec_tp_allreduce,
                  .iallreduce = exec_tp_iallreduce, .wait = exec_tp_wait,
                  .reduce_scatter = exec_tp_reduce_scatter, .allgather = exec_tp_allgather, .ctx = e };
    gpt_set_tp(&st->m, &tp);
    if (gpt_set_tp_overlap(&st->m, e->c.tp_overlap) < 0 || gpt_set_tp_sp(&st->m, e->c.tp_sp) < 0) return -1;
    e->Ns = (int)gpt_stream_rows(&st->m, e->c.mb_rows, e->c.T / e->K);   /* the same for every stage */
    return 0;
}

/* The gradients of the tensors st holds whose gradients are partial (tp_sum), in table order:
 * copied into packed (out 0) or back from it (out 1); packed NULL only counts them. Returns
 * their floats. */
static size_t exec_tp_partials(run_stage *st, float *packed, int out) {
    size_t n = 0;
    for (int i = 0; i < gpt_param_count(&st->m); i++) {
        const gpt_param_info *pi = gpt_param_info_at(&st->m, i);
        if (!pi->tp_sum || !gpt_holds_layer(&st->m, pi->layer)) continue;
        float *g = st->m.grads + pi->offset;
        if (packed) memcpy(out ? g : packed + n, out ? packed + n : g, pi->count * sizeof(float));
        n += pi->count;
    }
    return n;
}

/* One all-reduce of the packed partial gradients (4C floats a block), in rank order: bitwise the
 * same sum on every rank, threads or MPI. */
int exec_tp_sum_grads(run_exec *e, run_stage *st) {
    size_t n = e->tp > 1 && st->m.tp_sp ? exec_tp_partials(st, NULL, 0) : 0;
    if (n == 0) return 0;
    float *packed = pt_falloc(n);
    exec_tp_partials(st, packed, 0);
    int rc = comm_allreduce_f32(e->tp_comm, packed, n);
    if (rc == 0) exec_tp_partials(st, packed, 1);
    free(packed);
    return rc < 0 ? pt_adderr("rank %d: summing stage %d's layer-norm gradients over its TP group: ",
                              e->c.world_rank, st->g) : 0;
}

void run_exec_tp_stats(const run_exec *e, run_tp_stats *out) { *out = e->tps; }

void exec_tp_free(run_exec *e) {
    comm_free(e->tp_comm);
    e->tp_comm = NULL;
}

/* Floats of the whole tensor (pi->count at tp 1). */
static size_t exec_full(const gpt_param_info *pi) { return pi->full ? pi->full : pi->count; }

/* Whole tensor `param` on TP rank 0 (whole: exec_full floats; NULL on the other ranks) from the
 * group's shards (shard: this rank's gpt_shard_count floats). A replicated tensor is rank 0's
 * own; a split one is all-gathered in shard space (rank r's shard in slot r, so comm_slice gives
 * each rank its own) and placed, exactly: the bits are copied, never summed. Collective over the
 * TP group (a replicated tensor needs no message: every rank knows its split). */
static int exec_tp_whole(run_exec *e, const gpt_model *m, int param, const float *shard, float *whole) {
    const gpt_param_info *pi = gpt_param_info_at(m, param);
    size_t n = gpt_shard_count(&m->cfg, pi, e->tp);
    if (e->tp == 1 || pi->split == GPT_SPLIT_NONE) {
        if (whole) memcpy(whole, shard, exec_full(pi) * sizeof(float));
        return 0;
    }
    float *all = pt_falloc(n * (size_t)e->tp);
    memcpy(all + n * (size_t)e->t, shard, n * sizeof(float));
    int rc = comm_allgather_f32(e->tp_comm, all, n * (size_t)e->tp);
    for (int r = 0; rc == 0 && whole && r < e->tp; r++)
        gpt_shard_place(&m->cfg, pi, r, e->tp, all + n * (size_t)r, whole);
    free(all);
    return rc < 0 ? pt_adderr("rank %d: gathering %s over its TP group: ", e->c.world_rank, pi->name) : 0;
}

int run_exec_gather_stage(run_exec *e, int g, int grads, gpt_model *whole) {
    int si = e->loc[g];
    const gpt_model *m = &e->st[si].m;
    for (int i = 0; i < gpt_param_count(m); i++) {
        const gpt_param_info *pi = gpt_param_info_at(m, i);
        if (!gpt_holds_layer(m, pi->layer)) continue;
        size_t at = whole ? gpt_param_info_at(whole, i)->offset : 0;
        if (exec_tp_whole(e, m, i, m->params + pi->offset, whole ? whole->params + at : NULL) < 0 ||
            (grads && exec_tp_whole(e, m, i, m->grads + pi->offset, whole ? whole->grads + at : NULL) < 0))
            return -1;
    }
    return 0;
}

