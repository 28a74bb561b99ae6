/* The transformer block layer kind: its act layout, F, B, W (plain; Megatron-LM's split over a
 * TP group; two-half ping-pong overlap of its all-reduces; sequence parallelism) and the
 * communication-free recompute, and its analytic cost, as one row of the kind registry
 * (gpt_layers.c). Not here: the other kinds, buffer ownership, scheduling. */
#include "model/gpt_layer_int.h"
#include "model/gpt_act16.h"
#include "nn/nn.h"
#include "util/pt.h"
#include <stdio.h>
#include <string.h>

/* Views into one block's act storage; F part first (saved activations), then the B part
 * (gradients at each matmul / layernorm output that W needs). N = B*T; Ns the rows of the stream
 * the rank holds (N, or N/tp under sequence parallelism: gpt_stream_rows), whose regions are
 * the eight (N,C) ones (x, res2, ln1, ln2 and the gradients at the block output, res2, ln2 and
 * ln1) and the layer norms' statistics; the regions of N rows are the split widths' (qkv, atty,
 * att, fch, fchg and their gradients, already divided by tp). Under sp a matmul that needs every
 * row of ln1, ln2, dres3 or dres2 reads them all-gathered into the scratch (F, B and recompute
 * gather them; B computes the matmuls' weight gradients then: block_b_sp), so every region of
 * a rank's act is 1/tp of the act at tp 1. x and res2 come first: they are what communication-free recomputation
 * keeps (gpt_layer_keep_floats), and the rest of the F part is rebuilt from them (without a
 * collective, or under sp with F's two all-gathers: block_recompute). */
typedef struct {
    float *x;                   /* (Ns,C) block input */
    float *res2;                /* (Ns,C) x + attention projection (after the group's sum) */
    float *ln1, *ln1m, *ln1r;   /* (Ns,C), (Ns), (Ns) */
    float *qkv;                 /* (N,3C/tp) */
    float *atty;                /* (N,C/tp) attention output, heads concatenated */
    float *att;                 /* (B,NH/tp,T,T) softmax probabilities */
    float *ln2, *ln2m, *ln2r;   /* (Ns,C), (Ns), (Ns) */
    float *fch, *fchg;          /* (N,4C/tp) c_fc output, after GELU */
    /* written by B, read by W (under sp W reads only dln2, dln1: the rest is B's own) */
    float *dres3;               /* (Ns,C) gradient at the block output (= at mlp.c_proj output) */
    float *dfch;                /* (N,4C/tp) at mlp.c_fc output (under sp, after c_fc's weight
                                 * gradient, B's (N,C/tp) gradient at the attention output) */
    float *dln2;                /* (Ns,C) at ln_2 output */
    float *dres2;               /* (Ns,C) at res2 (= at attn.c_proj output) */
    float *dqkv;                /* (N,3C/tp) at attn.c_attn output */
    float *dln1;                /* (Ns,C) at ln_1 output */
    size_t keep;                /* floats of x and res2 (the start) */
    size_t saved;               /* floats of the F part (the start) */
    size_t size;                /* floats in all */
} block_act;

/* The views at row n0 (a token: sequence n0/T) of a microbatch of (B,T): every region is
 * (N, per-token width), att's too (a sequence's (NH/tp,T,Tk) is T rows of NH/tp*Tk), so the
 * views of a sub-batch of sequences are the same arithmetic at an offset. Tk, the keys each
 * query may see, is T but for a sequence chunk (gpt_chunk: T its tokens, Tk those up to its
 * end). */
static block_act block_act_rows(const gpt_model *m, float *a, int B, int T, size_t n0, int Tk) {
    block_dims d = block_dims_of(m);
    size_t C = (size_t)d.C, Cl = (size_t)d.Cl, N = (size_t)B * T, NH = (size_t)d.NHl;
    size_t Ns = sp_rows(m, N);   /* n0 is 0 under sp (no halves) */
    block_act v;
    size_t o = 0;
    v.x = take_rows(a, &o, Ns, C, n0);
    v.res2 = take_rows(a, &o, Ns, C, n0);
    v.keep = o;
    v.ln1 = take_rows(a, &o, Ns, C, n0);
    v.ln1m = take_rows(a, &o, Ns, 1, n0); v.ln1r = take_rows(a, &o, Ns, 1, n0);
    v.qkv = take_rows(a, &o, N, 3 * Cl, n0);
    v.atty = take_rows(a, &o, N, Cl, n0);
    v.att = take_rows(a, &o, N, NH * (size_t)Tk, n0);
    v.ln2 = take_rows(a, &o, Ns, C, n0);
    v.ln2m = take_rows(a, &o, Ns, 1, n0); v.ln2r = take_rows(a, &o, Ns, 1, n0);
    v.fch = take_rows(a, &o, N, 4 * Cl, n0); v.fchg = take_rows(a, &o, N, 4 * Cl, n0);
    v.saved = o;
    v.dres3 = take_rows(a, &o, Ns, C, n0); v.dfch = take_rows(a, &o, N, 4 * Cl, n0);
    v.dln2 = take_rows(a, &o, Ns, C, n0); v.dres2 = take_rows(a, &o, Ns, C, n0);
    v.dqkv = take_rows(a, &o, N, 3 * Cl, n0); v.dln1 = take_rows(a, &o, Ns, C, n0);
    v.size = o;
    return v;
}

static block_act block_act_view(const gpt_model *m, float *a, int B, int T) {
    return block_act_rows(m, a, B, T, 0, T);
}

static size_t block_act_floats(const gpt_model *m, int B, int T) { return block_act_view(m, NULL, B, T).size; }
/* What communication-free recomputation keeps from F to B: x and res2. */
static size_t block_keep_floats(const gpt_model *m, int B, int T) { return block_act_view(m, NULL, B, T).keep; }
static size_t block_saved_floats(const gpt_model *m, int B, int T) { return block_act_view(m, NULL, B, T).saved; }

/* ---- transformer block --------------------------------------------------------------------
 * Over tp ranks (Megatron-LM): c_attn and c_fc column-parallel (each rank its heads' q k v and
 * its share of the MLP), attn.c_proj and mlp.c_proj row-parallel: the rank's partial product,
 * the group's sum, then the bias and the residual once. B sums the column-parallel matmuls'
 * input gradients over the group before each layernorm's backward. W is local.
 *
 * F and B are each a plan of stages with one collective after each stage but the last
 * (block_plan), run on rows of whole sequences (block_rows): on the whole microbatch
 * (block_run), or, with overlap (gpt_set_tp_overlap), on two halves in turn so that each
 * half's sum is in flight while the other half computes (block_pingpong). Every op but W's sums
 * is row-wise, so the halves compute what the whole does. Without sp a plan is three stages
 * with an all-reduce between each two; under sequence parallelism F is five stages, with an
 * all-gather before each column-parallel matmul and a reduce-scatter after each row-parallel
 * one, and B seven, the row-wise ops between them on the rank's rows only. Every all-gather
 * and reduce-scatter works on the (N,C) scratch; the act keeps only the rank's rows of ln1,
 * ln2, dres3 and dres2, so B gathers each again where a matmul needs all of its rows and
 * computes the four matmuls' weight gradients right there (W has no collective, so it could not
 * gather them; under sp W is the layer norms' alone):
 *
 *   F: ln_1 (rows) AG ln1 | c_attn, attention, c_proj partial RS | + bias + x = res2, ln_2 (rows)
 *      AG ln2 | c_fc, GELU, c_proj partial RS | + bias + res2 = out (rows)
 *   B: dout (rows) AG dres3 | mlp.c_proj's dW, to c_fc's output grad, ln2's rows AG ln2 | c_fc's
 *      dW, to its input grad RS | ln_2 backward (rows) = dres2 AG dres2 | attn.c_proj's dW, to
 *      c_attn's output grad, ln1's rows AG ln1 | c_attn's dW, to its input grad RS | ln_1
 *      backward (rows) = dx
 *
 * The sums are the same float sums in the same order as the all-reduces', and a row-wise op on
 * a row gives what it gives on all rows, so every value is bitwise the one without sp (the
 * matmuls' weight gradients too: the same products of the same gathered rows); only the layer
 * norms' W sums a rank's rows (their gradients' tp_sum). */

/* One block's F or B on the rows of sequences [b0, b0 + B) of a microbatch. */
typedef struct {
    const gpt_model *m;
    const gpt_block_tensors *w;
    const gpt_block_tensors *g; /* the block's gradients (under sp B adds the matmuls') */
    block_act a;                /* the views at the rows' first token */
    float *out;                 /* F: the block output; B: dx (the rows', the rank's under sp) */
    const float *dout;          /* B: the gradient at the output (the rows', the rank's under sp) */
    float *s, *satt;            /* the rows' part of the (N, block_scratch_width) scratch (B, and
                                 * under sp F and recompute: the (N,C) gathered or summed); attention's */
    int B, T;                   /* the rows: B sequences of T tokens */
    const gpt_chunk *ck;        /* a sequence chunk (its T tokens end at Tk of Tfull), or NULL */
    int Tk, Tfull;
    int Ns;                     /* the rank's rows of the stream: B*T, or B*T/tp under sp */
    size_t lo;                  /* their first in a whole (N,C) buffer: 0, or under sp rank*Ns */
    float *sum[6];              /* what the group reduces after stage k (N,C) */
} block_rows;

typedef void (*block_stage)(const block_rows *r);

/* Stages and the collective after each but the last (TP_*, on block_rows.sum[k]). */
typedef struct {
    int n;
    block_stage st[7];
    int coll[6];
    const char *what[6];        /* what each collective reduces, for errors */
} block_plan;

/* The product of a row-parallel projection, out (N,OUT) = inp @ w: the rank's partial sum, the
 * bias and the residual to add after the group's sum (proj_finish). At tp 1 they are fused into
 * the product: out = res + b + inp @ w (inp holding all the input rows). */
static void proj_product(const gpt_model *m, float *out, const float *inp, const float *w,
                         const float *b, const float *res, int N, int IN, int OUT) {
    if (m->tp_size == 1) matmul_residual_forward_prec(m->precision, out, inp, w, b, res, N, IN, OUT);
    else matmul_forward_prec(m->precision, out, inp, w, NULL, N, IN, OUT);
}

static void proj_finish(const gpt_model *m, float *out, const float *res, const float *b, int N, int OUT) {
    if (m->tp_size > 1) bias_residual_add(out, res, b, N, OUT);
}

/* Under sp: out (Ns,C) = the rank's rows of the reduce-scattered sum + res + b (bitwise
 * proj_finish on those rows). */
static void proj_finish_rows(const block_rows *r, float *out, const float *res, const float *b) {
    int C = r->m->cfg.n_embd;
    memcpy(out, r->s + r->lo * C, (size_t)r->Ns * C * sizeof *out);
    bias_residual_add(out, res, b, r->Ns, C);
}

/* Under sp: the rank's rows (Ns,C) into their place in the (N,C) scratch, for an all-gather. */
static void sp_put_rows(const block_rows *r, const float *rows) {
    int C = r->m->cfg.n_embd;
    memcpy(r->s + r->lo * C, rows, (size_t)r->Ns * C * sizeof *rows);
}

/* What communication-free recomputation redoes: ln_1 (of the rank's rows) from x ... */
static void block_ln1(const block_rows *r) {
    int C = r->m->cfg.n_embd;
    layernorm_forward(r->a.ln1, r->a.ln1m, r->a.ln1r, r->a.x, r->w->ln1w, r->w->ln1b, r->Ns, C);
}

/* A chunk's attention (gpt_chunk): its keys and values into their rows of kv, then its queries
 * over the keys and values of every position up to its end, the probabilities in the attention
 * scratch only (B recomputes them: a chunk's act keeps none). */
static void block_attn_chunk(const block_rows *r) {
    block_dims d = block_dims_of(r->m);
    size_t Cl = (size_t)d.Cl, t0 = (size_t)r->Tk - r->T, seq = (size_t)r->Tfull * 2 * Cl;
    for (int b = 0; b < r->B; b++)
        for (int t = 0; t < r->T; t++)
            memcpy(r->ck->kv + b * seq + (t0 + t) * 2 * Cl,
                   r->a.qkv + ((size_t)b * r->T + t) * 3 * Cl + Cl, 2 * Cl * sizeof(float));
    attention_forward_kv(r->a.atty, r->satt, r->a.qkv, 3 * d.Cl, r->ck->kv, seq, r->B, r->T,
                         r->Tk, d.Cl, d.NHl);
}

/* Its backward: the query gradients into dqkv, the key and value gradients added to dkv's rows
 * of every position up to its end; then its own rows of dkv (whole now: the later chunks' Bs ran
 * before) into dqkv's k and v. */
static void block_attn_chunk_backward(const block_rows *r, const float *datty) {
    block_dims d = block_dims_of(r->m);
    size_t Cl = (size_t)d.Cl, t0 = (size_t)r->Tk - r->T, seq = (size_t)r->Tfull * 2 * Cl;
    attention_backward_kv(r->a.dqkv, 3 * d.Cl, r->ck->dkv, r->satt, datty, r->a.qkv, 3 * d.Cl,
                          r->ck->kv, seq, r->B, r->T, r->Tk, d.Cl, d.NHl);
    for (int b = 0; b < r->B; b++)
        for (int t = 0; t < r->T; t++)
            memcpy(r->a.dqkv + ((size_t)b * r->T + t) * 3 * Cl + Cl,
                   r->ck->dkv + b * seq + (t0 + t) * 2 * Cl, 2 * Cl * sizeof(float));
}

/* ... c_attn and attention from ln1 (all rows: the act's, or under sp gathered) ... */
static void block_attn(const block_rows *r, const float *ln1) {
    block_dims d = block_dims_of(r->m);
    int C = d.C, Cl = d.Cl, N = r->B * r->T;
    matmul_forward_prec(r->m->precision, r->a.qkv, ln1, r->w->qkvw, r->w->qkvb, N, C, 3 * Cl);
    if (r->ck) block_attn_chunk(r);
    else attention_forward(r->a.atty, r->a.att, r->a.qkv, r->B, r->T, Cl, d.NHl);
}

/* ... ln_2 (of the rank's rows) from res2 ... */
static void block_ln2(const block_rows *r) {
    int C = r->m->cfg.n_embd;
    layernorm_forward(r->a.ln2, r->a.ln2m, r->a.ln2r, r->a.res2, r->w->ln2w, r->w->ln2b, r->Ns, C);
}

/* ... and c_fc, GELU from ln2 (all rows, as ln1). */
static void block_mlp(const block_rows *r, const float *ln2) {
    int C = r->m->cfg.n_embd, Cl = block_dims_of(r->m).Cl, N = r->B * r->T;
    matmul_forward_prec(r->m->precision, r->a.fch, ln2, r->w->fcw, r->w->fcb, N, C, 4 * Cl);
    gelu_forward(r->a.fchg, r->a.fch, N * 4 * Cl);
}

/* F stage 0: up to attn.c_proj's product (into res2, summed next). */
static void block_f0(const block_rows *r) {
    int C = r->m->cfg.n_embd, Cl = block_dims_of(r->m).Cl, N = r->B * r->T;
    block_ln1(r);
    block_attn(r, r->a.ln1);
    proj_product(r->m, r->a.res2, r->a.atty, r->w->attprojw, r->w->attprojb, r->a.x, N, Cl, C);
}

/* F stage 1: res2 finished, then up to mlp.c_proj's product (into out, summed next). */
static void block_f1(const block_rows *r) {
    int C = r->m->cfg.n_embd, Cl = block_dims_of(r->m).Cl, N = r->B * r->T;
    proj_finish(r->m, r->a.res2, r->a.x, r->w->attprojb, N, C);
    block_ln2(r);
    block_mlp(r, r->a.ln2);
    proj_product(r->m, r->out, r->a.fchg, r->w->fcprojw, r->w->fcprojb, r->a.res2, N, 4 * Cl, C);
}

/* F stage 2: the output finished. */
static void block_f2(const block_rows *r) {
    proj_finish(r->m, r->out, r->a.res2, r->w->fcprojb, r->B * r->T, r->m->cfg.n_embd);
}

/* Under sp, F: ln_1 of the rank's rows, into the scratch to be gathered ... */
static void block_fs0(const block_rows *r) {
    block_ln1(r);
    sp_put_rows(r, r->a.ln1);
}

/* ... c_attn (from the gathered ln1), attention and attn.c_proj's partial product into the
 * scratch ... */
static void block_fs1(const block_rows *r) {
    int C = r->m->cfg.n_embd, Cl = block_dims_of(r->m).Cl;
    block_attn(r, r->s);
    matmul_forward_prec(r->m->precision, r->s, r->a.atty, r->w->attprojw, NULL, r->B * r->T, Cl, C);
}

/* ... res2 of the rank's rows, ln_2 of them (into the scratch to be gathered) ... */
static void block_fs2(const block_rows *r) {
    proj_finish_rows(r, r->a.res2, r->a.x, r->w->attprojb);
    block_ln2(r);
    sp_put_rows(r, r->a.ln2);
}

/* ... c_fc (from the gathered ln2), GELU and mlp.c_proj's partial product into scratch ... */
static void block_fs3(const block_rows *r) {
    int C = r->m->cfg.n_embd, Cl = block_dims_of(r->m).Cl;
    block_mlp(r, r->s);
    matmul_forward_prec(r->m->precision, r->s, r->a.fchg, r->w->fcprojw, NULL, r->B * r->T, 4 * Cl, C);
}

/* ... and the output's rows. */
static void block_fs4(const block_rows *r) { proj_finish_rows(r, r->out, r->a.res2, r->w->fcprojb); }

/* B: the gradient at the output, the rank's rows of it into dres3 (all of it without sp). */
static void block_dout(const block_rows *r) {
    int C = r->m->cfg.n_embd;
    memcpy(r->a.dres3, r->dout, (size_t)r->Ns * C * sizeof *r->dout);
}

/* B from dres3 (all rows) to c_fc's input gradient, into dln2 (N,C) (partial: summed next). */
static void block_b_mlp(const block_rows *r, float *dln2) {
    const gpt_block_tensors *w = r->w;
    int C = r->m->cfg.n_embd, Cl = block_dims_of(r->m).Cl, N = r->B * r->T;
    matmul_backward_input_prec(r->m->precision, r->s, r->a.dres3, w->fcprojw, N, 4 * Cl, C);   /* at the GELU output */
    gelu_backward_input(r->a.dfch, r->s, r->a.fch, N * 4 * Cl);
    matmul_backward_input_prec(r->m->precision, dln2, r->a.dfch, w->fcw, N, C, 4 * Cl);
}

/* ln_2's backward on the rank's rows: into its rows of dres2. */
static void block_b_ln2(const block_rows *r) {
    const block_act *a = &r->a;
    int C = r->m->cfg.n_embd;
    layernorm_residual_backward_input(a->dres2, a->dln2, a->dres3, a->res2,
                                      r->w->ln2w, a->ln2m, a->ln2r, r->Ns, C);
}

/* B from dres2 (all rows) to c_attn's input gradient, into dln1 (N,C) (partial: summed next). */
static void block_b_attn(const block_rows *r, float *dln1) {
    const gpt_block_tensors *w = r->w;
    block_dims d = block_dims_of(r->m);
    int C = d.C, Cl = d.Cl, N = r->B * r->T;
    matmul_backward_input_prec(r->m->precision, r->s, r->a.dres2, w->attprojw, N, Cl, C);      /* at the attention output */
    if (r->ck) block_attn_chunk_backward(r, r->s);
    else attention_backward_input(r->a.dqkv, r->satt, r->s, r->a.qkv, r->a.att, r->B, r->T, Cl, d.NHl);
    matmul_backward_input_prec(r->m->precision, dln1, r->a.dqkv, w->qkvw, N, C, 3 * Cl);
}

/* ln_1's backward on the rank's rows into dx. */
static void block_b_ln1(const block_rows *r) {
    const block_act *a = &r->a;
    layernorm_residual_backward_input(r->out, a->dln1, a->dres2, a->x,
                                      r->w->ln1w, a->ln1m, a->ln1r, r->Ns, r->m->cfg.n_embd);
}

/* B stages without sp: to dln2 (summed next); ln_2's backward and on to dln1 (summed next);
 * ln_1's backward. */
static void block_b0(const block_rows *r) { block_dout(r); block_b_mlp(r, r->a.dln2); }
static void block_b1(const block_rows *r) { block_b_ln2(r); block_b_attn(r, r->a.dln1); }

/* Under sp, B (block_b_sp): each stage ends with the (N,C) scratch to gather or to sum. The
 * output gradient's rows kept (dres3) and put to be gathered ... */
static void block_bs0(const block_rows *r) {
    block_dout(r);
    sp_put_rows(r, r->a.dres3);
}

/* ... from dres3 (gathered): mlp.c_proj's weight gradient, the GELU output's gradient and c_fc's
 * output gradient (in place in dfch); ln2's rows to be gathered ... */
static void block_bs1(const block_rows *r) {
    const block_act *a = &r->a;
    int C = r->m->cfg.n_embd, Cl = block_dims_of(r->m).Cl, N = r->B * r->T;
    matmul_backward_weight_prec(r->m->precision, r->g->fcprojw, r->g->fcprojb, r->s, a->fchg, N, 4 * Cl, C);
    matmul_backward_input_prec(r->m->precision, a->dfch, r->s, r->w->fcprojw, N, 4 * Cl, C);
    gelu_backward_input(a->dfch, a->dfch, a->fch, N * 4 * Cl);
    sp_put_rows(r, a->ln2);
}

/* ... from ln2 (gathered): c_fc's weight gradient, then its partial input gradient into the
 * scratch (reduce-scattered next) ... */
static void block_bs2(const block_rows *r) {
    const block_act *a = &r->a;
    int C = r->m->cfg.n_embd, Cl = block_dims_of(r->m).Cl, N = r->B * r->T;
    matmul_backward_weight_prec(r->m->precision, r->g->fcw, r->g->fcb, a->dfch, r->s, N, C, 4 * Cl);
    matmul_backward_input_prec(r->m->precision, r->s, a->dfch, r->w->fcw, N, C, 4 * Cl);
}

/* ... the rank's rows of the sum kept (for W), ln_2's backward on them, dres2's rows to be
 * gathered ... */
static void block_bs3(const block_rows *r) {
    int C = r->m->cfg.n_embd;
    memcpy(r->a.dln2, r->s + r->lo * C, (size_t)r->Ns * C * sizeof *r->s);
    block_b_ln2(r);
    sp_put_rows(r, r->a.dres2);
}

/* ... from dres2 (gathered): attn.c_proj's weight gradient, the attention output's gradient
 * (into dfch, free now) and c_attn's output gradient; ln1's rows to be gathered ... */
static void block_bs4(const block_rows *r) {
    const block_act *a = &r->a;
    block_dims d = block_dims_of(r->m);
    int C = d.C, Cl = d.Cl, N = r->B * r->T;
    matmul_backward_weight_prec(r->m->precision, r->g->attprojw, r->g->attprojb, r->s, a->atty, N, Cl, C);
    matmul_backward_input_prec(r->m->precision, a->dfch, r->s, r->w->attprojw, N, Cl, C);
    attention_backward_input(a->dqkv, r->satt, a->dfch, a->qkv, a->att, r->B, r->T, Cl, d.NHl);
    sp_put_rows(r, a->ln1);
}

/* ... from ln1 (gathered): c_attn's weight gradient, then its partial input gradient into the
 * scratch (reduce-scattered next) ... */
static void block_bs5(const block_rows *r) {
    const block_act *a = &r->a;
    int C = r->m->cfg.n_embd, Cl = block_dims_of(r->m).Cl, N = r->B * r->T;
    matmul_backward_weight_prec(r->m->precision, r->g->qkvw, r->g->qkvb, a->dqkv, r->s, N, C, 3 * Cl);
    matmul_backward_input_prec(r->m->precision, r->s, a->dqkv, r->w->qkvw, N, C, 3 * Cl);
}

/* ... and the rank's rows of the sum kept (for W), ln_1's backward on them into dx. */
static void block_bs6(const block_rows *r) {
    int C = r->m->cfg.n_embd;
    memcpy(r->a.dln1, r->s + r->lo * C, (size_t)r->Ns * C * sizeof *r->s);
    block_b_ln1(r);
}

static const block_plan block_f = {
    3, { block_f0, block_f1, block_f2 }, { TP_ALLREDUCE, TP_ALLREDUCE },
    { "a row-parallel projection", "a row-parallel projection" } };
static const block_plan block_b = {
    3, { block_b0, block_b1, block_b_ln1 }, { TP_ALLREDUCE, TP_ALLREDUCE },
    { "a column-parallel input gradient", "a column-parallel input gradient" } };
static const block_plan block_f_sp = {
    5, { block_fs0, block_fs1, block_fs2, block_fs3, block_fs4 },
    { TP_ALLGATHER, TP_REDUCE_SCATTER, TP_ALLGATHER, TP_REDUCE_SCATTER },
    { "ln_1's output", "attn.c_proj's product", "ln_2's output", "mlp.c_proj's product" } };
static const block_plan block_b_sp = {
    7, { block_bs0, block_bs1, block_bs2, block_bs3, block_bs4, block_bs5, block_bs6 },
    { TP_ALLGATHER, TP_ALLGATHER, TP_REDUCE_SCATTER, TP_ALLGATHER, TP_ALLGATHER, TP_REDUCE_SCATTER },
    { "the block's output gradient", "ln_2's output", "c_fc's input gradient", "res2's gradient",
      "ln_1's output", "c_attn's input gradient" } };

/* How many parts F, B and recompute split a microbatch of B sequences into: two with overlap
 * on a sharded block (the first B/2 sequences, then the rest), else one. */
static int block_parts(const gpt_model *m, int B) {
    return m->tp_overlap && m->tp_size > 1 && B >= 2 ? 2 : 1;
}

/* The rows of each part (r[0..block_parts)) of layer l's F (dout NULL) or B on a microbatch of
 * (B,T), or on its chunk ck (NULL: the whole; a chunk runs in one part, gpt_chunk_check). */
static int block_rows_init(block_rows *r, const gpt_model *m, int l, float *act, float *scratch,
                           float *out, const float *dout, int B, int T, const gpt_chunk *ck) {
    int Tfull = T, Tk = T;
    if (ck) {
        T = Tfull / ck->K;
        Tk = (ck->c + 1) * T;   /* the keys it sees; its act has no probabilities (0 wide) */
    }
    int parts = ck ? 1 : block_parts(m, B), C = m->cfg.n_embd;
    size_t N = (size_t)B * T, sw = block_scratch_width(m);
    for (int i = 0, b0 = 0; i < parts; i++) {
        int nb = parts == 1 ? B : i == 0 ? B / 2 : B - B / 2;
        size_t n0 = (size_t)b0 * T;
        block_rows *p = &r[i];
        *p = (block_rows){ .m = m, .w = &m->w.h[gpt_config_block_of(&m->cfg, l)], .g = &m->g.h[gpt_config_block_of(&m->cfg, l)], .a = block_act_rows(m, act, B, T, n0, ck ? 0 : Tk),
                           .out = out ? out + n0 * C : NULL, .dout = dout ? dout + n0 * C : NULL,
                           .s = scratch ? scratch + n0 * sw : NULL,
                           .satt = scratch ? scratch + N * sw : NULL, .B = nb, .T = T,
                           .ck = ck, .Tk = Tk, .Tfull = Tfull,
                           .Ns = (int)sp_rows(m, (size_t)nb * T), .lo = sp_first(m, N) };
        if (m->tp_sp) {
            for (int k = 0; k < 6; k++) p->sum[k] = p->s;   /* every collective on the (N,C) scratch */
        } else {
            p->sum[0] = dout ? p->a.dln2 : p->a.res2;
            p->sum[1] = dout ? p->a.dln1 : p->out;
        }
        b0 += nb;
    }
    return parts;
}

/* A plan's stages on the whole microbatch, the group's blocking collective between them. */
static int block_run(const block_plan *pl, const block_rows *r) {
    size_t n = (size_t)r->B * r->T * r->m->cfg.n_embd;
    for (int k = 0; k < pl->n; k++) {
        pl->st[k](r);
        if (k < pl->n - 1 && gpt_tp_collective(r->m, pl->coll[k], r->sum[k], n, pl->what[k]) < 0) return -1;
    }
    return 0;
}

/* The three stages of a plan without sp on two halves, ping-pong (Oases): stage k of half 0,
 * its sum started, stage k of half 1 while it is in flight, its sum started; then wait for half
 * 0's sum before its stage k + 1 (half 1's sum in flight meanwhile), and so on. A failed start
 * or wait waits for whatever is still in flight (the buffers are the caller's) and returns -1. */
static int block_pingpong(const block_plan *pl, const block_rows r[2]) {
    const gpt_model *m = r[0].m;
    void *req[2][2] = { { NULL } };
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 2; i++) {
            size_t n = (size_t)r[i].B * r[i].T * m->cfg.n_embd;
            if (k > 0 && gpt_tp_wait(m, &req[i][k - 1], pl->what[k - 1]) < 0) goto drain;
            pl->st[k](&r[i]);
            if (k < 2 && gpt_tp_start(m, r[i].sum[k], n, &req[i][k], pl->what[k]) < 0) goto drain;
        }
    return 0;
drain:
    gpt_tp_drain(m, &req[0][0], 4);
    return -1;
}

static int block_forward(const gpt_model *m, int l, const gpt_tied *tied, float *act,
                         float *scratch, float *out, const float *x, const int *tokens, int B, int T) {
    block_rows r[2];
    int parts = block_rows_init(r, m, l, act, scratch, out, NULL, B, T, NULL);
    memcpy(r[0].a.x, x, gpt_stream_rows(m, B, T) * m->cfg.n_embd * sizeof *x);
    if (parts == 2) return block_pingpong(&block_f, r);
    return block_run(m->tp_sp ? &block_f_sp : &block_f, &r[0]);
}

/* scratch: (N, block_scratch_width) for the widest intermediate, then the attention scratch. */
static int block_backward_input(const gpt_model *m, int l, const gpt_tied *tied, float *act,
                                float *scratch, float *dx, const float *dout, int B, int T) {
    block_rows r[2];
    int parts = block_rows_init(r, m, l, act, scratch, dx, dout, B, T, NULL);
    if (parts == 2) return block_pingpong(&block_b, r);
    return block_run(m->tp_sp ? &block_b_sp : &block_b, &r[0]);
}

/* The F part after x and res2, from them, in the parts F ran in (so bitwise what F wrote).
 * Under sp the layer norms' outputs are all-gathered into the scratch as in F (the only
 * collectives). */
static int block_recompute(const gpt_model *m, int l, const gpt_tied *tied, float *act,
                           float *scratch, int B, int T) {
    block_rows r[2];
    int parts = block_rows_init(r, m, l, act, m->tp_sp ? scratch : NULL, NULL, NULL, B, T, NULL);
    size_t n = (size_t)B * T * m->cfg.n_embd;
    if (m->tp_sp) {   /* one part: no overlap under sp */
        block_fs0(&r[0]);
        if (gpt_tp_collective(m, TP_ALLGATHER, r[0].s, n, "ln_1's output") < 0) return -1;
        block_attn(&r[0], r[0].s);
        block_ln2(&r[0]);
        sp_put_rows(&r[0], r[0].a.ln2);
        if (gpt_tp_collective(m, TP_ALLGATHER, r[0].s, n, "ln_2's output") < 0) return -1;
        block_mlp(&r[0], r[0].s);
        return 0;
    }
    for (int i = 0; i < parts; i++) {
        block_ln1(&r[i]);
        block_attn(&r[i], r[i].a.ln1);
        block_ln2(&r[i]);
        block_mlp(&r[i], r[i].a.ln2);
    }
    return 0;
}

/* The layer norms' gradients from the rank's rows (under sp a partial sum: tp_sum); the
 * matmuls' from all rows, without sp (under sp B added them: block_b_sp). */
static void block_w(const gpt_model *m, int l, block_act a, int N) {
    const gpt_block_tensors *g = &m->g.h[gpt_config_block_of(&m->cfg, l)];
    block_dims d = block_dims_of(m);
    int C = d.C, Cl = d.Cl, Ns = (int)sp_rows(m, (size_t)N);
    if (!m->tp_sp) {
        matmul_backward_weight_prec(m->precision, g->fcprojw, g->fcprojb, a.dres3, a.fchg, N, 4 * Cl, C);
        matmul_backward_weight_prec(m->precision, g->fcw, g->fcb, a.dfch, a.ln2, N, C, 4 * Cl);
    }
    layernorm_backward_weight(g->ln2w, g->ln2b, a.dln2, a.res2, a.ln2m, a.ln2r, Ns, C);
    if (!m->tp_sp) {
        matmul_backward_weight_prec(m->precision, g->attprojw, g->attprojb, a.dres2, a.atty, N, Cl, C);
        matmul_backward_weight_prec(m->precision, g->qkvw, g->qkvb, a.dqkv, a.ln1, N, C, 3 * Cl);
    }
    layernorm_backward_weight(g->ln1w, g->ln1b, a.dln1, a.x, a.ln1m, a.ln1r, Ns, C);
}

static int block_backward_weight(const gpt_model *m, int l, const gpt_tied *tied, const float *act,
                                 float *scratch, int B, int T) {
    block_w(m, l, block_act_view(m, (float *)act, B, T), B * T);   /* act read only */
    return 0;
}

/* ---- sequence chunks (gpt_chunk) -----------------------------------------------------------
 * A chunk's F and B are the plain plans on its rows, its attention over the kept keys and values
 * (block_attn_chunk); its act is the (B,T/K) rows' without probabilities (att 0 wide): the same
 * for every chunk, 1/K of a microbatch's rows, plus the microbatch's kept keys and values. */
static size_t block_chunk_act_floats(const gpt_model *m, int B, int T, const gpt_chunk *ck) {
    return block_act_rows(m, NULL, B, T / ck->K, 0, 0).size;
}

static size_t block_kv_floats(const gpt_model *m, int B, int T) {
    return (size_t)B * T * 2 * (size_t)block_dims_of(m).Cl;
}

static int block_forward_chunk(const gpt_model *m, int l, const gpt_tied *tied, const gpt_chunk *ck,
                               float *act, float *scratch, float *out, const float *x,
                               const int *tokens, int B, int T) {
    block_rows r;
    block_rows_init(&r, m, l, act, scratch, out, NULL, B, T, ck);
    memcpy(r.a.x, x, (size_t)B * r.T * m->cfg.n_embd * sizeof *x);
    return block_run(&block_f, &r);
}

static int block_backward_input_chunk(const gpt_model *m, int l, const gpt_tied *tied,
                                      const gpt_chunk *ck, float *act, float *scratch, float *dx,
                                      const float *dout, int B, int T) {
    block_rows r;
    block_rows_init(&r, m, l, act, scratch, dx, dout, B, T, ck);
    return block_run(&block_b, &r);
}

static int block_backward_weight_chunk(const gpt_model *m, int l, const gpt_tied *tied,
                                       const gpt_chunk *ck, const float *act, float *scratch,
                                       int B, int T) {
    int Tc = T / ck->K;
    block_w(m, l, block_act_rows(m, (float *)act, B, Tc, 0, 0), B * Tc);
    return 0;
}


/* ---- analytic costs ------------------------------------------------------------------------
 * FLOPs: matmuls cost 2 per multiply-add; B and W each repeat the forward's matmul FLOPs (dX = dY W^T,
 * dW = X^T dY); causal attention (QK^T and AV, half the T x T square) is 2*N*T*C forward and
 * twice that backward, all of it in B (it has no weights). Element-wise work is left out.
 * Over tp TP ranks (gpt_init_layers_tp) each figure is one rank's: the split matmuls, heads and
 * vocabulary rows divide by tp, the replicated tensors and the (N,C) streams do not. */
static void block_cost_at(const gpt_config *g, int B, int T, int tp, int sp, gpt_layer_cost *o) {
    *o = (gpt_layer_cost){ 0 };
    sp = sp && tp > 1;
    double N = (double)B * T, C = g->n_embd, t = tp, mm = 12.0 * C * C / t, att = 2.0 * N * T * C / t;
    double params = mm + 7.0 * C / t + 6.0 * C;   /* split: 12C^2 + 7C; replicated: ln 4C, 2 biases */
    double Ns = sp ? N / t : N;                   /* the rank's rows of the stream */
    o->flops[0] = 2.0 * mm * N + att;
    o->flops[1] = 2.0 * mm * N + 2.0 * att;
    o->flops[2] = 2.0 * mm * N;
    if (sp) {       /* B computes the matmuls' weight gradients (block_b_sp); W's layer norms are
                     * element-wise, left out */
        o->flops[1] += o->flops[2];
        o->flops[2] = 0;
    }
    /* the act layout above: 8 (N,C) streams, all the rank's rows under sp; 19 (N,C) of split
     * widths (qkv, atty, fch, fchg and their gradients), 4 stats of the rank's rows,
     * (B,NH/tp,T,T) probabilities */
    o->act_bytes = 4.0 * (8.0 * Ns * C + 19.0 * N * C / t + 4.0 * Ns + N * g->n_head / t * T);
    o->input_bytes = 4.0 * Ns * C;
    o->keep_bytes = 4.0 * 2.0 * Ns * C;                 /* x and res2 */
    o->att_flops[0] = att;
    o->att_flops[1] = 2.0 * att;
    o->att_act_bytes = 4.0 * N * g->n_head / t * T;
    o->kv_bytes = 2.0 * 4.0 * N * 2.0 * C / t;          /* kv and dkv: (N, 2C/tp) each */
    o->recompute_flops = 2.0 * 7.0 * C * C / t * N + att;   /* F without the two projections */
    o->param_bytes = o->grad_bytes = 4.0 * params;
    o->optim_bytes = 8.0 * params;
    if (tp > 1) {   /* after each row-parallel projection (F) and column-parallel input grad (B);
                     * under sp a reduce-scatter there and an all-gather before each conjugate,
                     * and in B two more, of ln1 and ln2 for c_attn's and c_fc's weight gradients */
        o->tp_bytes[0] = (sp ? 4.0 : 2.0) * 4.0 * N * C;
        o->tp_bytes[1] = (sp ? 6.0 : 2.0) * 4.0 * N * C;
        o->tp_collectives[0] = sp ? 4 : 2;
        o->tp_collectives[1] = sp ? 6 : 2;
    }
    if (sp) {       /* the recompute's all-gathers of ln_1's and ln_2's outputs */
        o->recompute_tp_bytes = 2.0 * 4.0 * N * C;
        o->recompute_tp_collectives = 2;
    }
}

static void block_cost(const gpt_config *g, int B, int T, int tp, gpt_layer_cost *o) { block_cost_at(g, B, T, tp, 0, o); }
static void block_cost_sp(const gpt_config *g, int B, int T, int tp, gpt_layer_cost *o) { block_cost_at(g, B, T, tp, 1, o); }

/* bf16 storage (gpt_act16.h): fp32 stay x, res2 and the layer norms' statistics; everything
 * else is a matmul's input or output, stored in bf16. */
static int block_act16_spans_at(const gpt_model *m, int B, int T, int Tk, gpt_act_span *s) {
    enum { E = ACT16_EXACT, NW = ACT16_NO_W };
    block_dims d = block_dims_of(m);
    size_t C = (size_t)d.C, Cl = (size_t)d.Cl, N = (size_t)B * T, NH = (size_t)d.NHl, Ns = sp_rows(m, N);
    unsigned nb = m->tp_sp ? 0 : ACT16_NO_B;   /* under sp B computes the weight gradients */
    size_t len[] = { Ns * C, Ns * C, Ns * C, Ns, Ns, N * 3 * Cl, N * Cl, N * NH * Tk, Ns * C, Ns,   /* block_act_rows': */
                     Ns, N * 4 * Cl, N * 4 * Cl, Ns * C, N * 4 * Cl, Ns * C, Ns * C, N * 3 * Cl, Ns * C };
    /* x, res2, ln1, ln1m, ln1r, qkv, atty, att, ln2, ln2m, ln2r, fch, fchg, dres3, dfch, dln2, dres2, dqkv, dln1 */
    unsigned f[] = { E, E, nb, E, E, NW, nb, NW, nb, E, E, NW, nb, 0, 0, 0, 0, 0, 0 };
    return gpt_act16_spans_of(s, len, f, 19, block_act_rows(m, NULL, B, T, 0, Tk).size, "block");
}

static int block_act16_spans(const gpt_model *m, int B, int T, gpt_act_span *s) {
    return block_act16_spans_at(m, B, T, T, s);
}

/* A chunk's act at bf16: the same regions on its (B,T/K) rows, no probabilities (att 0 wide). */
static size_t block_chunk_saved_floats(const gpt_model *m, int B, int T, const gpt_chunk *ck) {
    return block_act_rows(m, NULL, B, T / ck->K, 0, 0).saved;
}

static int block_chunk_act16_spans(const gpt_model *m, int B, int T, const gpt_chunk *ck, gpt_act_span *s) {
    return block_act16_spans_at(m, B, T / ck->K, 0, s);
}

static const gpt_chunk_ops block_chunk_ops = {
    block_chunk_act_floats, block_kv_floats, block_forward_chunk, block_backward_input_chunk,
    block_backward_weight_chunk, block_chunk_saved_floats, block_chunk_act16_spans };

const gpt_layer_ops gpt_block_row = {
    "block", 0, block_act_floats, block_forward, block_backward_input, block_backward_weight,
    block_cost, block_cost_sp, block_keep_floats, block_recompute, block_saved_floats, block_act16_spans,
    &block_chunk_ops };
