/* Compute of one stage on one microbatch: F, B and W over the stage's layers through the model's
 * kind table (what each layer reads: the activation stream, the batch's tokens, or its targets
 * and a loss), activation sets acquired at F and released after W, recomputation at B: the
 * whole stage's F again (--recompute), or each layer's communication-free rebuild from what it
 * kept (--tp-recompute: gpt_layer_keep_floats kept from F to B, gpt_layer_recompute before B).
 * Not here: communication, reduction, the order of actions (executor.c).
 * Activation gradients are written (=), parameter gradients accumulate (+=) over microbatches. */
#include "run/exec_int.h"
#include "util/pt.h"
#include <assert.h>
#include <string.h>
#include <time.h>

/* Rows of microbatch mb in the global (B,T) batch: replica d's block, then the mb-th block. */
static const int *exec_rows(const run_exec *e, const int *tok, int mb) {
    size_t row = (size_t)e->d * (e->c.B / e->c.lo->D) + (size_t)mb * e->c.mb_rows;
    return tok + row * e->c.T;
}

/* Input of stage st for mb: the neighbour's output on this rank, or the received buffer. */
static const float *exec_input(run_exec *e, const run_stage *st, int mb) {
    if (st->prev < 0) return NULL;
    if (st->prev_rank >= 0) return st->xin[mb];
    return e->st[e->loc[st->prev]].out[mb];
}

/* Gradient w.r.t. stage st's output for mb: from the next stage (local or received). */
static const float *exec_dout(run_exec *e, const run_stage *st, int mb) {
    if (st->next_rank >= 0) return st->dyin[mb];
    return e->st[e->loc[st->next]].dxo[mb];
}

/* Activation set of (layer, mb). */
static float *exec_act(const run_stage *st, int layer, int mb) {
    float *lent = st->lout ? exec_lend_act(st, layer, mb) : NULL;   /* --balance-memory's buffers */
    return lent ? lent : st->act[layer - st->first][st->slot_of[mb]];
}

static const gpt_tied *exec_tied(const run_stage *st) { return st->has_tied ? st->tied : NULL; }

/* Microbatch mb takes a free one of n sets (of[mb]: its set; mbs[k]: the microbatch in set k, -1
 * free); spare: set n, the extra one a recomputing forward uses, never held. */
static void exec_take(int *of, int *mbs, int n, int mb, int spare) {
    if (spare) { of[mb] = n; return; }
    for (int k = 0; k < n; k++)
        if (mbs[k] < 0) { mbs[k] = mb; of[mb] = k; return; }
    assert(!"activation sets exhausted: the slot count disagrees with the schedule");
}

static void exec_give(int *of, int *mbs, int n, int mb) {
    if (of[mb] >= 0 && of[mb] < n) mbs[of[mb]] = -1;
    of[mb] = -1;
}

static void exec_acquire(run_stage *st, int mb, int spare) { exec_take(st->slot_of, st->slot_mb, st->n_slots, mb, spare); }
static void exec_release(run_stage *st, int mb) { exec_give(st->slot_of, st->slot_mb, st->n_slots, mb); }

/* --seq-chunks (e->K > 1): unit mb is chunk mb % K of microbatch mb / K. Its tokens (which 0) or
 * targets (1): columns [c*T/K, (c+1)*T/K) of the microbatch's rows, gathered into e->ctok. */
static const int *exec_unit_rows(run_exec *e, const int *tok, int mb, int which) {
    if (e->K == 1) return exec_rows(e, tok, mb);
    const int *rows = exec_rows(e, tok, mb / e->K);
    int T = e->c.T, Tc = T / e->K, c = mb % e->K;
    for (int b = 0; b < e->c.mb_rows; b++)
        memcpy(e->ctok[which] + (size_t)b * Tc, rows + (size_t)b * T + (size_t)c * Tc, (size_t)Tc * sizeof *rows);
    return e->ctok[which];
}

/* The chunk of unit mb at layer l: its kept keys and values (its microbatch's set, NULL for a
 * layer without). */
static gpt_chunk exec_chunk(const run_exec *e, const run_stage *st, int l, int mb) {
    int k = st->kv_of[mb / e->K], i = l - st->first;
    gpt_chunk ck = { mb % e->K, e->K, NULL, NULL };
    if (k >= 0 && st->kv[i]) ck.kv = st->kv[i][k], ck.dkv = st->dkv[i][k];
    return ck;
}

/* Chunk 0's F takes a set of kept keys and values for its microbatch, gradients zeroed (every
 * chunk's B adds to them); chunk 0's B, the last of the microbatch's, gives it back. */
static void exec_kv_take(const run_exec *e, run_stage *st, int mb) {
    int m = mb / e->K;
    exec_take(st->kv_of, st->kv_mb, st->n_kv, m, 0);
    for (int l = st->first; l < st->end; l++)
        if (st->dkv[l - st->first])
            memset(st->dkv[l - st->first][st->kv_of[m]], 0,
                   gpt_layer_kv_floats(&st->m, l, e->c.mb_rows, e->c.T) * sizeof(float));
}

/* Layer l's F, B, W of unit mb: the plain call, or a chunk's (gpt_layer_*_chunk). */
static int exec_layer_f(run_exec *e, const run_stage *st, int l, int mb, float *act, float *y,
                        const float *x, const int *tk) {
    if (e->K == 1)
        return gpt_layer_forward(&st->m, l, exec_tied(st), act, e->scratch, y, x, tk, e->c.mb_rows, e->c.T);
    gpt_chunk ck = exec_chunk(e, st, l, mb);
    return gpt_layer_forward_chunk(&st->m, l, exec_tied(st), &ck, act, e->scratch, y, x, tk,
                                   e->c.mb_rows, e->c.T);
}

static int exec_layer_b(run_exec *e, const run_stage *st, int l, int mb, float *act, float *dx,
                        const float *dy) {
    if (e->K == 1)
        return gpt_layer_backward_input(&st->m, l, exec_tied(st), act, e->scratch, dx, dy, e->c.mb_rows, e->c.T);
    gpt_chunk ck = exec_chunk(e, st, l, mb);
    return gpt_layer_backward_input_chunk(&st->m, l, exec_tied(st), &ck, act, e->scratch, dx, dy,
                                          e->c.mb_rows, e->c.T);
}

static int exec_layer_w(run_exec *e, const run_stage *st, int l, int mb, const float *act) {
    if (e->K == 1)
        return gpt_layer_backward_weight(&st->m, l, exec_tied(st), act, e->scratch, e->c.mb_rows, e->c.T);
    gpt_chunk ck = { mb % e->K, e->K, NULL, NULL };   /* W reads the act alone */
    return gpt_layer_backward_weight_chunk(&st->m, l, exec_tied(st), &ck, act, e->scratch,
                                           e->c.mb_rows, e->c.T);
}

/* --tp-recompute: what (layer, mb) kept from its F. */
static float *exec_kept(const run_exec *e, const run_stage *st, int layer, int mb) {
    assert(st->rebuild && st->keep_of[mb] >= 0);
    return st->keep[layer - st->first][st->keep_of[mb]];
}

static size_t exec_keep_n(const run_exec *e, const run_stage *st, int layer) {
    return gpt_layer_keep_floats(&st->m, layer, e->c.mb_rows, e->c.T);
}

/* The act F of (layer, mb) writes: its set, or (--tp-recompute) the rank's work buffer, whose
 * kept prefix exec_forward copies out after the layer. */
static float *exec_act_f(run_exec *e, const run_stage *st, int layer, int mb) {
    return st->rebuild ? e->work : exec_act(st, layer, mb);
}

/* --tp-recompute, before B of (layer, mb): act (a whole set, or the work buffer) gets the kept
 * prefix back and the layer rebuilds the rest of its F part, bitwise, with no collective.
 * 0, or -1 (the model's error). */
static int exec_rebuild(run_exec *e, run_stage *st, int layer, int mb, float *act) {
    memcpy(act, exec_kept(e, st, layer, mb), exec_keep_n(e, st, layer) * sizeof(float));
    if (gpt_layer_recompute(&st->m, layer, exec_tied(st), act, e->scratch, e->c.mb_rows, e->c.T) < 0)
        return pt_adderr("stage %d, rebuilding layer %d of microbatch %d: ", st->g, layer, mb);
    return 0;
}

/* F of stage st on mb. again: the recompute before a backward (output to scratch, loss not
 * counted; it already succeeded once, so it fails only when a tensor-parallel collective does). */
static int exec_forward(run_exec *e, run_stage *st, int mb, const int *tokens, const int *targets,
                        int again) {
    const float *x = exec_input(e, st, mb);
    int k = 0;
    float loss;
    for (int l = st->first; l < st->end; l++) {
        float *y;
        unsigned io = gpt_layer_ops_of(&st->m, l)->io;
        const int *tk = io & GPT_IO_TOKENS ? exec_unit_rows(e, tokens, mb, 0)
                      : io & GPT_IO_TARGETS ? exec_unit_rows(e, targets, mb, 1) : NULL;
        if (io & GPT_IO_TARGETS) y = again ? &loss : &st->loss[mb];
        else if (l == st->end - 1 && !again) y = st->out[mb];
        else { y = e->tmp[k]; k ^= 1; }
        float *act = exec_act_f(e, st, l, mb);
        if (exec_layer_f(e, st, l, mb, act, y, x, tk) < 0)
            return pt_adderr("stage %d F%d: ", st->g, mb);
        if (st->rebuild) memcpy(exec_kept(e, st, l, mb), act, exec_keep_n(e, st, l) * sizeof(float));
        x = y;
    }
    if (st->next < 0 && !again) {
        e->loss_sum += st->loss[mb];
        e->win_loss[mb / (e->M / e->win)] += st->loss[mb];   /* the step mb belongs to */
    }
    return 0;
}

/* B of every layer, the last first. With --tp-recompute each layer is rebuilt from what it kept
 * just before its B: into its set (a lone B, its W later), or with weight (a fused BW) into the
 * rank's work buffer, the layer's W right after its B (still in reverse layer order, so the sums
 * are those of B then W). 0, or -1 when a tensor-parallel layer's collective failed (the job is
 * stopping). */
static int exec_backward_input(run_exec *e, run_stage *st, int mb, int weight) {
    /* the objective: mean over all microbatches, or (async) over the microbatches of one update;
     * --dp-sync H > 1: over the replica's own (its inner steps see its gradient alone) */
    float scale = 1.0f / (float)((e->async ? e->M / e->n_step_acts : e->M) * (e->c.dp_sync > 1 ? 1 : e->c.lo->D));
    const float *dy = st->next < 0 ? &scale : exec_dout(e, st, mb);
    int k = 0;
    for (int l = st->end - 1; l >= st->first; l--) {
        float *dx, *act = weight ? e->work : exec_act(st, l, mb);
        if (gpt_layer_ops_of(&st->m, l)->io & GPT_IO_TOKENS) dx = NULL;   /* no input to grade */
        else if (l == st->first) dx = st->dxo[mb];
        else { dx = e->tmp[k]; k ^= 1; }
        if (st->rebuild && exec_rebuild(e, st, l, mb, act) < 0) return -1;
        if (exec_layer_b(e, st, l, mb, act, dx, dy) < 0)
            return pt_adderr("stage %d B%d: ", st->g, mb);
        if (weight) exec_layer_w(e, st, l, mb, act);
        dy = dx;
    }
    return 0;
}

/* W in reverse layer order, so a stage holding a tie's user and owner adds to it as one process. */
static void exec_backward_weight(run_exec *e, run_stage *st, int mb) {
    for (int l = st->end - 1; l >= st->first; l--) exec_layer_w(e, st, l, mb, exec_act(st, l, mb));
}

/* A slow stage (--slow-stage): the action that started at t0 (e->tps.seconds then tp0) takes
 * st->slow times its compute time; the rank sleeps out the rest (it computes nothing meanwhile,
 * as a slower device would). Its time inside TP collectives is no compute: it holds the wait for
 * the other TP ranks' stretch, and stretching it too would compound from action to action. */
static void exec_stretch(const run_exec *e, const run_stage *st, double t0, double tp0) {
    if (st->slow <= 1) return;
    double extra = (st->slow - 1) * (pt_now() - t0 - (e->tps.seconds - tp0));
    struct timespec t = { (time_t)extra, (long)((extra - (double)(time_t)extra) * 1e9) };
    nanosleep(&t, NULL);
}

/* The F action: activations kept for the backward, or (recomputing) dropped at once, or
 * (--tp-recompute) each layer's kept prefix only. */
int exec_forward_action(run_exec *e, run_stage *st, int mb, const int *tok, const int *tgt) {
    double t0 = pt_now(), tp0 = e->tps.seconds;
    if (st->rebuild) exec_take(st->keep_of, st->keep_mb, st->n_keep, mb, 0);
    else exec_acquire(st, mb, e->c.recompute);
    if (e->K > 1 && mb % e->K == 0) exec_kv_take(e, st, mb);
    if (st->lout && exec_lend_take(e, st, mb) < 0) return -1;
    int rc = exec_forward(e, st, mb, tok, tgt, 0);
    if (e->c.recompute) exec_release(st, mb);
    exec_stretch(e, st, t0, tp0);
    return rc;
}

/* B, W or BW: recomputes the forward first when asked; the activations go after W. -1 only
 * when a tensor-parallel collective failed (another rank stopped the job). */
int exec_backward(run_exec *e, run_stage *st, int mb, int input, int weight, const int *tok,
                  const int *tgt) {
    double t0 = pt_now(), tp0 = e->tps.seconds;
    int fused = st->rebuild && input && weight;   /* no set: each layer in the work buffer */
    if (st->lout && exec_lend_ready(e, st, mb) < 0) return -1;
    if (input && (e->c.recompute || (st->rebuild && !weight))) exec_acquire(st, mb, 0);
    if (input && e->c.recompute && exec_forward(e, st, mb, tok, tgt, 1) < 0) return -1;
    if (input && exec_backward_input(e, st, mb, fused) < 0) return -1;
    if (input && e->K > 1 && mb % e->K == 0) exec_give(st->kv_of, st->kv_mb, st->n_kv, mb / e->K);
    if (input && st->rebuild) exec_give(st->keep_of, st->keep_mb, st->n_keep, mb);
    if (weight && !fused) {
        exec_backward_weight(e, st, mb);
        exec_release(st, mb);
    }
    exec_stretch(e, st, t0, tp0);
    return 0;
}
