/* An executor's gradient reduction and update: each chunk's gradients over its holders, each
 * tied tensor's over its owner and copies, the loss and squared norm over the world; AdamW on the
 * rank's spans and copies; zeroing. Not here: when they run (executor.c), the optimizer math
 * (optim/).
 *
 * Summation order (what makes results reproducible): a rank first adds its own copies of a
 * gradient (stage order), then the transport sums ranks in rank order; chunks reduce in order
 * 0..K-1, then the tied tensors in tie order, so collectives on sub-communicators never cross. */
#include "run/exec_int.h"
#include "util/pt.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A part of a gradient span: floats [off, off + n). */
typedef struct { size_t off, n; } exec_seg;

/* Sums this rank's copies (in stage order) into the first, all-reduces it over cm, copies back. */
static int exec_reduce_copies(comm *cm, float **copies, int n_copies, size_t n) {
    if (n_copies == 0 || n == 0) return 0;
    for (int k = 1; k < n_copies; k++)
        for (size_t i = 0; i < n; i++) copies[0][i] += copies[k][i];
    if (cm && cm->size > 1 && comm_allreduce_f32(cm, copies[0], n) < 0) return -1;
    for (int k = 1; k < n_copies; k++) memcpy(copies[k], copies[0], n * sizeof(float));
    return 0;
}

/* Stage st's gradient span without the tied tensors it owns (they reduce with their copies),
 * as segments in order: out[NT + 1]; returns their number. */
static int exec_chunk_segs(const run_exec *e, const run_stage *st, exec_seg *out) {
    size_t at = st->span_off, end = st->span_off + st->span_n;
    int n = 0;
    for (int t = 0; t < e->n_ties; t++) {   /* ties in offset order (GPT: one) */
        if (!exec_owns_tie(e, st, t)) continue;
        const gpt_param_info *pi = gpt_param_info_at(st->m, gpt_tie_at(st->m, t)->param);
        if (pi->offset > at) out[n++] = (exec_seg){ at, pi->offset - at };
        at = pi->offset + pi->count;
    }
    if (end > at) out[n++] = (exec_seg){ at, end - at };
    return n;
}

/* Stage st's gradient of tie t: the owner's span, its copy's, or NULL. */
static float *exec_tie_grad(const run_exec *e, const run_stage *st, int t) {
    if (exec_owns_tie(e, st, t))
        return st->m->grads + gpt_param_info_at(st->m, gpt_tie_at(st->m, t)->param)->offset;
    return st->copy[t].dw;
}

/* Chunk c over its holders: each segment of the span once; adds the sum of squares. */
static int exec_reduce_chunk(run_exec *e, int c, float **copies) {
    exec_seg seg[GPT_MAX_TIES + 1];
    int n_seg = 0, n = 0;
    for (int i = 0; i < e->n_stages; i++)
        if (e->st[i].chunk == c) { n_seg = exec_chunk_segs(e, &e->st[i], seg); n++; }
    for (int k = 0; k < n_seg; k++) {
        int j = 0;
        for (int i = 0; i < e->n_stages; i++)
            if (e->st[i].chunk == c) copies[j++] = e->st[i].m->grads + seg[k].off;
        if (exec_reduce_copies(e->chunk_comm[c], copies, n, seg[k].n) < 0) return -1;
        if (n && e->chunk_comm[c]->rank == 0) e->sumsq += optim_sumsq(copies[0], seg[k].n);
    }
    return 0;
}

/* Tie t over its owner and copies; adds the sum of squares. */
static int exec_reduce_tie(run_exec *e, int t, float **copies) {
    int n = 0;
    size_t cnt = 0;
    for (int i = 0; i < e->n_stages; i++) {
        float *g = exec_tie_grad(e, &e->st[i], t);
        if (!g) continue;
        copies[n++] = g;
        cnt = gpt_param_info_at(e->st[i].m, gpt_tie_at(e->st[i].m, t)->param)->count;
    }
    if (exec_reduce_copies(e->tie_comm[t], copies, n, cnt) < 0) return -1;
    if (n && e->tie_comm[t]->rank == 0) e->sumsq += optim_sumsq(copies[0], cnt);
    return 0;
}

/* Every chunk, then every tie, in one global order. Adds the unique gradients' sum of squares
 * to e->sumsq. */
int exec_reduce_all(run_exec *e) {
    int K = e->c.s->stages_per_pipe, rc = 0;
    float **copies = pt_malloc(sizeof(float *) * (size_t)(e->n_stages + 1));
    for (int c = 0; c < K && rc == 0; c++) rc = exec_reduce_chunk(e, c, copies);
    for (int t = 0; t < e->n_ties && rc == 0; t++) rc = exec_reduce_tie(e, t, copies);
    free(copies);
    return rc < 0 ? pt_adderr("rank %d: gradient reduction: ", e->c.world_rank) : 0;
}

/* Asynchronous schedules: stage st's gradients now (its chunk's holders, then each tie it owns
 * or copies). Every holder reduces the same microbatch's gradients: replicas run the same list,
 * and the owner's and the user's k-th backward are of the same microbatch. */
int exec_reduce_stage(run_exec *e, run_stage *st) {
    exec_seg seg[GPT_MAX_TIES + 1];
    int n_seg = exec_chunk_segs(e, st, seg);
    for (int k = 0; k < n_seg; k++) {
        float *p = st->m->grads + seg[k].off;
        if (exec_reduce_copies(e->chunk_comm[st->chunk], &p, 1, seg[k].n) < 0) goto fail;
    }
    for (int t = 0; t < e->n_ties; t++) {
        float *p = exec_tie_grad(e, st, t);
        size_t cnt = gpt_param_info_at(st->m, gpt_tie_at(st->m, t)->param)->count;
        if (p && exec_reduce_copies(e->tie_comm[t], &p, 1, cnt) < 0) goto fail;
    }
    return 0;
fail:
    return pt_adderr("rank %d: stage %d gradient reduction: ", e->c.world_rank, st->g);
}

/* World reduction of (sum of squares, loss sum): once per iteration, at STEP or at the end. */
int exec_reduce_world(run_exec *e, run_exec_stats *rs) {
    double v[2] = { e->sumsq, e->loss_sum };
    if (comm_allreduce_f64(e->c.world, v, 2) < 0) return pt_adderr("rank %d: loss/norm: ", e->c.world_rank);
    rs->grad_norm = sqrt(v[0]);
    rs->loss = (float)(v[1] / (e->M * e->c.lo->D));
    if (e->async) rs->clip_scale = 1;
    return 0;
}

/* AdamW update t (bias correction) on every span this rank owns and its tied copies, gradients
 * multiplied by scale (the clipping factor) first. */
void exec_adamw(run_exec *e, const optim_config *oc, int t, double lr, double scale) {
    for (int i = 0; i < e->n_stages; i++) {
        run_stage *st = &e->st[i];
        for (int k = 0; k < gpt_param_count(st->m); k++) {
            const gpt_param_info *pi = gpt_param_info_at(st->m, k);
            if (pi->layer < st->first || pi->layer >= st->end) continue;
            adamw_update_span(st->opt, st->m->params, st->m->grads, pi->offset, pi->count, lr,
                              scale, pi->decay != 0, t, oc);
        }
        for (int tie = 0; tie < e->n_ties; tie++) {
            exec_tie_copy *cp = &st->copy[tie];
            if (!cp->w) continue;
            const gpt_param_info *pi = gpt_param_info_at(st->m, gpt_tie_at(st->m, tie)->param);
            adamw_update_span(&cp->opt, cp->w, cp->dw, 0, cp->count, lr, scale, pi->decay != 0, t, oc);
        }
    }
}

void exec_zero_grads(run_exec *e) {
    for (int i = 0; i < e->n_stages; i++) {
        run_stage *st = &e->st[i];
        memset(st->m->grads + st->span_off, 0, st->span_n * sizeof(float));
        for (int t = 0; t < e->n_ties; t++)
            if (st->copy[t].dw) memset(st->copy[t].dw, 0, st->copy[t].count * sizeof(float));
    }
}
