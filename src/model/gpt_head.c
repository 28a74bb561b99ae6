/* The head layer kind (the last layer: final layernorm, logits against the tied wte, softmax
 * cross-entropy): its act, F, B, W (plain, vocabulary-parallel over a TP group, under sequence
 * parallelism) and analytic cost, as one row of the kind registry (gpt_layers.c). */
#include "model/gpt_layer_int.h"
#include "model/gpt_act16.h"
#include "nn/nn.h"
#include "util/pt.h"
#include <stdio.h>
#include <string.h>

/* Head act: F part, then B part. */
typedef struct {
    float *x;                   /* (N,C) head input */
    float *lnf, *lnfm, *lnfr;   /* (N,C), (N), (N) */
    int *targets;               /* (N) stored as int in float-sized slots */
    float *probs;               /* (N,Vp/tp) softmax after F; dlogits after B (V at tp 1) */
    float *dlnf;                /* (N,C) B: gradient at ln_f output */
    size_t saved;               /* floats of the F part (the start) */
    size_t size;                /* floats in all */
} head_act;

static head_act head_act_view(const gpt_model *m, float *a, int B, int T) {
    size_t C = (size_t)m->cfg.n_embd, N = (size_t)B * T, V = (size_t)vocab_local(m);
    head_act v;
    size_t o = 0;
    v.x = take(a, &o, N * C);
    v.lnf = take(a, &o, N * C); v.lnfm = take(a, &o, N); v.lnfr = take(a, &o, N);
    v.targets = (int *)take(a, &o, N);
    v.probs = take(a, &o, N * V);
    v.saved = o;
    v.dlnf = take(a, &o, N * C);
    v.size = o;
    return v;
}

static size_t head_act_floats(const gpt_model *m, int B, int T) { return head_act_view(m, NULL, B, T).size; }
/* Communication-free recomputation keeps the head's whole F part (it is not recomputed). */
static size_t head_keep_floats(const gpt_model *m, int B, int T) { return head_act_view(m, NULL, B, T).saved; }

/* ---- final layernorm + tied head ----------------------------------------------------------
 * Over tp ranks: each rank's logits are its vocabulary shard's columns, and the cross-entropy
 * is Megatron-LM's vocabulary-parallel one (head_tp_forward). B sums the input gradient. Under
 * sp F first all-gathers the input rows (then every rank runs ln_f on all rows, as without sp,
 * so ln_f's gradients stay whole), and B gives the rank's rows of the input gradient. */

/* Sharded cross-entropy of the logits in a.probs: the group's maximum per token (each rank
 * writes its own into its slot of a zeroed (N,tp) buffer, the group sums it: a sum is the only
 * collective), then the sums of exponentials and the target logits, summed together. Returns
 * the mean loss through *loss, the same on every rank. scratch: N*(tp + 3). */
static int head_tp_crossentropy(const gpt_model *m, head_act *a, float *scratch, int N, float *loss) {
    int tp = m->tp_size, V = vocab_local(m), v0, nv;
    float *slots = scratch, *mx = slots + (size_t)N * tp, *sums = mx + N, *tl = sums + N;
    gpt_vocab_range(m, &v0, &nv);
    crossentropy_shard_stats(mx, tl, a->probs, a->targets, v0, nv, N, V);
    memset(slots, 0, (size_t)N * tp * sizeof *slots);
    for (int n = 0; n < N; n++) slots[(size_t)n * tp + m->tp_rank] = mx[n];
    if (gpt_tp_allreduce(m, slots, (size_t)N * tp, "the per-token logit maxima") < 0) return -1;
    for (int n = 0; n < N; n++) {
        const float *s = slots + (size_t)n * tp;
        mx[n] = s[0];
        for (int r = 1; r < tp; r++) mx[n] = s[r] > mx[n] ? s[r] : mx[n];
    }
    crossentropy_shard_exp(a->probs, sums, a->probs, mx, nv, N, V);
    if (gpt_tp_allreduce(m, sums, 2 * (size_t)N, "the sums of exponentials and target logits") < 0)
        return -1;   /* sums and tl are adjacent: one call */
    *loss = crossentropy_shard_finish(a->probs, mx, sums, tl, N, V);
    return 0;
}

/* With targets: out[0] = mean loss, probs kept. Without: out (N,V) = logits (tp 1 only). */
static int head_forward(const gpt_model *m, int l, const gpt_tied *tied, float *act,
                        float *scratch, float *out, const float *x, const int *targets, int B, int T) {
    int C = m->cfg.n_embd, V = vocab_local(m), N = B * T;
    if (!targets && m->tp_size > 1)
        return pt_seterr("a tensor-parallel head (tp %d) has only its vocabulary shard's logits: "
                         "it needs targets (logits need a model of tp 1)", m->tp_size);
    if (targets && gpt_check_tokens(m, targets, B, T, "target") < 0) return -1;
    head_act a = head_act_view(m, act, B, T);
    memcpy(a.x + sp_first(m, (size_t)N) * C, x, sp_rows(m, (size_t)N) * C * sizeof *x);
    if (m->tp_sp && gpt_tp_collective(m, TP_ALLGATHER, a.x, (size_t)N * C, "the head's input") < 0)
        return -1;
    layernorm_forward(a.lnf, a.lnfm, a.lnfr, a.x, m->w.lnfw, m->w.lnfb, N, C);
    if (!targets) {
        lmhead_forward_prec(m->precision, out, a.lnf, gpt_tied_wte(m, tied), N, C, V);
        return 0;
    }
    memcpy(a.targets, targets, (size_t)N * sizeof *targets);
    lmhead_forward_prec(m->precision, a.probs, a.lnf, gpt_tied_wte(m, tied), N, C, V);
    if (m->tp_size > 1) return head_tp_crossentropy(m, &a, scratch, N, out);
    out[0] = crossentropy_forward(a.probs, a.probs, targets, N, V);
    return 0;
}

static int head_backward_input(const gpt_model *m, int l, const gpt_tied *tied, float *act,
                               float *scratch, float *dx, const float *dloss, int B, int T) {
    int C = m->cfg.n_embd, V = vocab_local(m), N = B * T, v0, nv;
    head_act a = head_act_view(m, act, B, T);
    if (m->tp_size == 1) {
        crossentropy_backward_input(a.probs, a.probs, a.targets, dloss ? *dloss : 1.0f, N, V);
    } else {
        gpt_vocab_range(m, &v0, &nv);
        crossentropy_shard_backward_input(a.probs, a.probs, a.targets, v0, nv,
                                          dloss ? *dloss : 1.0f, N, V);
    }
    lmhead_backward_input_prec(m->precision, a.dlnf, a.probs, gpt_tied_wte(m, tied), N, C, V);
    if (gpt_tp_allreduce(m, a.dlnf, (size_t)N * C, "the head's input gradient") < 0) return -1;
    size_t lo = sp_first(m, (size_t)N);   /* the rank's rows (all without sp) */
    layernorm_backward_input(dx, a.dlnf + lo * C, a.x + lo * C, m->w.lnfw, a.lnfm + lo, a.lnfr + lo,
                             (int)sp_rows(m, (size_t)N), C);
    return 0;
}

static int head_backward_weight(const gpt_model *m, int l, const gpt_tied *tied, const float *act,
                                float *scratch, int B, int T) {
    int C = m->cfg.n_embd, V = vocab_local(m), N = B * T;
    head_act a = head_act_view(m, (float *)act, B, T);   /* read only below */
    lmhead_backward_weight_prec(m->precision, gpt_tied_dwte(m, tied), a.probs, a.lnf, N, C, V);
    layernorm_backward_weight(m->g.lnfw, m->g.lnfb, a.dlnf, a.x, a.lnfm, a.lnfr, N, C);
    return 0;
}

/* Head: ln_f, logits against the tied wte (V,C), softmax cross-entropy (about 5 FLOPs a logit).
 * The stage stores a copy of wte and its gradient; AdamW state lives with the embedding. Over tp
 * ranks: a vocabulary shard of the logits, and the cross-entropy's per-token numbers exchanged
 * (every rank's maximum, then the sums of exponentials and the target logits). */
static void head_cost_at(const gpt_config *g, int B, int T, int tp, int sp, gpt_layer_cost *o) {
    *o = (gpt_layer_cost){ 0 };
    sp = sp && tp > 1;
    double N = (double)B * T, C = g->n_embd, V = gpt_vocab_shard(g, tp), mm = 2.0 * N * C * V;
    o->flops[0] = mm + 5.0 * N * V;
    o->flops[1] = mm;
    o->flops[2] = mm;
    o->act_bytes = 4.0 * (3.0 * N * C + 3.0 * N + N * V);
    o->input_bytes = 4.0 * (sp ? N / tp : N) * C;
    o->keep_bytes = 4.0 * (2.0 * N * C + 3.0 * N + N * V);   /* its F part: not recomputed */
    o->param_bytes = o->grad_bytes = 4.0 * (V * C + 2.0 * C);
    o->optim_bytes = 8.0 * 2.0 * C;
    if (tp > 1) {   /* under sp an all-gather of the input first */
        o->tp_bytes[0] = 4.0 * (N * tp + 2.0 * N) + (sp ? 4.0 * N * C : 0);
        o->tp_collectives[0] = sp ? 3 : 2;
        o->tp_bytes[1] = 4.0 * N * C;
        o->tp_collectives[1] = 1;
    }
}

static void head_cost(const gpt_config *g, int B, int T, int tp, gpt_layer_cost *o) { head_cost_at(g, B, T, tp, 0, o); }
static void head_cost_sp(const gpt_config *g, int B, int T, int tp, gpt_layer_cost *o) { head_cost_at(g, B, T, tp, 1, o); }

/* bf16 storage (gpt_act16.h): fp32 stay the input, ln_f's statistics, the targets and the
 * probabilities (softmax and loss in fp32; B turns them into dlogits). */
static int head_act16_spans(const gpt_model *m, int B, int T, gpt_act_span *s) {
    enum { E = ACT16_EXACT };
    size_t C = (size_t)m->cfg.n_embd, N = (size_t)B * T, V = (size_t)vocab_local(m);
    size_t len[] = { N * C, N * C, N, N, N, N * V, N * C };   /* head_act_view's: x, lnf, lnfm, lnfr, targets, probs, dlnf */
    unsigned f[] = { E, ACT16_NO_B, E, E, E, E | ACT16_B_WRITES, 0 };
    return gpt_act16_spans_of(s, len, f, 7, head_act_floats(m, B, T), "head");
}

const gpt_layer_ops gpt_head_row = {
    "head", GPT_IO_TARGETS, head_act_floats, head_forward, head_backward_input,
    head_backward_weight, head_cost, head_cost_sp, head_keep_floats, gpt_keep_all_recompute,
    head_keep_floats, head_act16_spans, NULL };
