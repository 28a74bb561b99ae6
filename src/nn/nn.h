/* fp32 CPU kernels of a GPT-2 model: embedding, layernorm, matmul (+bias), causal multi-head
 * attention, GELU (tanh), residual add, tied LM head and softmax cross-entropy. Matmuls go
 * through cblas_sgemm; the rest is plain C. Not a tensor library: no shapes at run time, no
 * allocation, no threads of its own (callers set BLAS to one thread per pipeline stage).
 *
 * Conventions (llm.c style):
 * - Arguments: outputs first, then inputs, then sizes. Gradients take a `d` prefix.
 * - Each op has `*_forward`; its backward is split in two, callable separately and in any order
 *   after the forward (zero-bubble schedules run W long after B):
 *     `*_backward_input`  (B) writes (`=`) the gradient of the activation input;
 *     `*_backward_weight` (W) accumulates (`+=`) the gradient of the parameters, so gradients
 *                             sum across microbatches until the caller zeroes them.
 *   Ops without parameters (attention, GELU, residual, cross-entropy) have no backward_weight.
 * - Every function is thread-safe: no static state; scratch memory is passed in by the caller.
 * - Legend: B batch, T time, C channels, NH heads, hs = C/NH head size, V vocab,
 *   N = B*T rows, IN/OUT matmul widths.
 */
#ifndef PT_NN_H
#define PT_NN_H
#include "nn/nn_bf16.h"   /* nn_precision */

/* ---- embedding: out[b,t,:] = wte[tokens[b,t],:] + wpe[t,:] ------------------------------- */
/* out (B,T,C); tokens (B,T), each in [0,V) (callers validate); wte (V,C); wpe (maxT,C), T<=maxT. */
void embedding_forward(float *out, const int *tokens, const float *wte, const float *wpe,
                       int B, int T, int C);
/* dwte (V,C) += scatter of dout by token; dwpe (maxT,C) += sum over batch. dout (B,T,C).
 * (No backward_input: tokens are discrete.) */
void embedding_backward_weight(float *dwte, float *dwpe, const float *dout, const int *tokens,
                               int B, int T, int C);

/* The same on one shard of the vocabulary (tensor parallelism): wte holds rows [v0, v0 + nv) of
 * the table (wte (nv,C)); a token outside them gives a zero row (the group sums the shards' out).
 * wpe NULL adds no positions (the group's other ranks add them once). */
void embedding_shard_forward(float *out, const int *tokens, const float *wte, const float *wpe,
                             int v0, int nv, int B, int T, int C);
/* dwte (nv,C) += scatter of dout by the tokens in [v0, v0 + nv) (the others skipped); dwpe
 * (maxT,C) += sum over batch, as embedding_backward_weight. */
void embedding_shard_backward_weight(float *dwte, float *dwpe, const float *dout,
                                     const int *tokens, int v0, int nv, int B, int T, int C);

/* ---- layernorm over the last axis, eps 1e-5 (biased variance, as torch) ------------------ */
/* out, inp (N,C); w, b (C); saves mean, rstd (N) for the backward. */
void layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                       const float *w, const float *b, int N, int C);
/* dinp (N,C) = gradient of inp given dout (N,C). */
void layernorm_backward_input(float *dinp, const float *dout, const float *inp, const float *w,
                              const float *mean, const float *rstd, int N, int C);
/* dinp (N,C) = dres + gradient of inp given dout: a pre-LN block's residual stream, whose
 * gradient reaches inp both through the norm and around it, in one pass. dinp may alias dres. */
void layernorm_residual_backward_input(float *dinp, const float *dout, const float *dres,
                                       const float *inp, const float *w, const float *mean,
                                       const float *rstd, int N, int C);
/* dw, db (C) += gradients of the scale and shift. */
void layernorm_backward_weight(float *dw, float *db, const float *dout, const float *inp,
                               const float *mean, const float *rstd, int N, int C);

/* ---- matmul with bias, weights as Hugging Face Conv1D: out = inp @ w + b ------------------ */
/* out (N,OUT); inp (N,IN); w (IN,OUT); b (OUT) or NULL for no bias. */
void matmul_forward(float *out, const float *inp, const float *w, const float *b,
                    int N, int IN, int OUT);
/* out (N,OUT) = res + inp @ w + b: the layer and the residual add after it in one pass over out
 * (out starts as res + b and the product accumulates onto it). out may alias res; b may be NULL.
 * Its backward is matmul's: the gradient of res is dout itself. */
void matmul_residual_forward(float *out, const float *inp, const float *w, const float *b,
                             const float *res, int N, int IN, int OUT);
/* dinp (N,IN) = dout (N,OUT) @ w^T. */
void matmul_backward_input(float *dinp, const float *dout, const float *w, int N, int IN, int OUT);
/* dw (IN,OUT) += inp^T @ dout; db (OUT) += column sums of dout (db may be NULL). */
void matmul_backward_weight(float *dw, float *db, const float *dout, const float *inp,
                            int N, int IN, int OUT);

/* The matmuls above and the LM head's below in a number format (`--precision`): NN_FP32 is
 * the function without the suffix (cblas_sgemm); NN_BF16 rounds both inputs (activations and
 * weights) to bf16 and sums the products in fp32 (nn_gemm_bf16), bias, residual and db in fp32.
 * Same contracts otherwise. */
void matmul_forward_prec(nn_precision p, float *out, const float *inp, const float *w,
                         const float *b, int N, int IN, int OUT);
void matmul_residual_forward_prec(nn_precision p, float *out, const float *inp, const float *w,
                                  const float *b, const float *res, int N, int IN, int OUT);
void matmul_backward_input_prec(nn_precision p, float *dinp, const float *dout, const float *w,
                                int N, int IN, int OUT);
void matmul_backward_weight_prec(nn_precision p, float *dw, float *db, const float *dout,
                                 const float *inp, int N, int IN, int OUT);
void lmhead_forward_prec(nn_precision p, float *logits, const float *inp, const float *wte,
                         int N, int C, int V);
void lmhead_backward_input_prec(nn_precision p, float *dinp, const float *dlogits,
                                const float *wte, int N, int C, int V);
void lmhead_backward_weight_prec(nn_precision p, float *dwte, const float *dlogits,
                                 const float *inp, int N, int C, int V);

/* ---- causal multi-head self-attention ------------------------------------------------------ */
/* qkv (B,T,3C) as HF's c_attn output: q = qkv[..., 0:C], k = [C:2C], v = [2C:3C], head h owns
 * channels [h*hs, (h+1)*hs) of each. out (B,T,C): heads concatenated along C. att (B,NH,T,T)
 * receives the softmax probabilities (row t is zero past column t), saved for the backward.
 * Scores are scaled by 1/sqrt(hs). */
void attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH);
/* dqkv (B,T,3C) = gradient of qkv given dout (B,T,C), using the saved qkv and att.
 * scratch: T*T floats owned by the caller (one per thread). */
void attention_backward_input(float *dqkv, float *scratch, const float *dout, const float *qkv,
                              const float *att, int B, int T, int C, int NH);
/* The attention of a chunk of sequences (--seq-chunks): Tq queries at positions Tk - Tq ..
 * Tk - 1 over the keys and values of positions 0 .. Tk - 1. q: rows of ldq floats (the first C
 * read: a chunk's qkv rows, ldq 3C), sequence b's at q + b*Tq*ldq. kv: rows of 2C floats, k
 * then v (heads as in qkv), sequence b's at kv + b*kv_seq. out (B,Tq,C) written. The
 * probabilities are not kept (flash attention's trade): scratch holds one (batch, head)'s,
 * Tq*Tk floats. Tq == Tk gives attention_forward's values. */
void attention_forward_kv(float *out, float *scratch, const float *q, int ldq, const float *kv,
                          size_t kv_seq, int B, int Tq, int Tk, int C, int NH);
/* Its backward from dout (B,Tq,C), the probabilities recomputed: dq (rows of lddq, the first C)
 * written (=); dkv (kv's layout) added to (+=) on rows 0 .. Tk - 1, so later chunks' backwards
 * accumulate into the keys and values of the earlier ones. scratch: 2*Tq*Tk floats. */
void attention_backward_kv(float *dq, int lddq, float *dkv, float *scratch, const float *dout,
                           const float *q, int ldq, const float *kv, size_t kv_seq, int B, int Tq,
                           int Tk, int C, int NH);
/* Floats of scratch attention_backward_input needs. */
#define ATTENTION_SCRATCH_FLOATS(T) ((size_t)(T) * (size_t)(T))

/* ---- GELU, tanh approximation (HF "gelu_new"): 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3))) ---- */
/* out, inp (N); out may alias inp. */
void gelu_forward(float *out, const float *inp, int N);
/* dinp (N) = dout * gelu'(inp); dinp may alias dout. */
void gelu_backward_input(float *dinp, const float *dout, const float *inp, int N);

/* ---- residual add: out = a + b (N). Its backward passes dout unchanged to both inputs. ----- */
void residual_forward(float *out, const float *a, const float *b, int N);

/* out (N,C) += res (N,C) + b (C): the bias and residual add of a projection whose product out
 * already holds (tensor parallelism adds them once, after the group's sum of the products). */
void bias_residual_add(float *out, const float *res, const float *b, int N, int C);

/* ---- tied LM head: logits = inp @ wte^T (no bias) ----------------------------------------- */
/* logits (N,V); inp (N,C); wte (V,C). */
void lmhead_forward(float *logits, const float *inp, const float *wte, int N, int C, int V);
/* dinp (N,C) = dlogits (N,V) @ wte. */
void lmhead_backward_input(float *dinp, const float *dlogits, const float *wte, int N, int C, int V);
/* dwte (V,C) += dlogits^T @ inp. */
void lmhead_backward_weight(float *dwte, const float *dlogits, const float *inp, int N, int C, int V);

/* ---- softmax cross-entropy, mean over the N rows ----------------------------------------- */
/* probs (N,V) = softmax(logits) (probs may alias logits); targets (N) in [0,V).
 * Returns the mean of -log probs[i, targets[i]]. */
float crossentropy_forward(float *probs, const float *logits, const int *targets, int N, int V);
/* dlogits (N,V) = dloss * (probs - onehot(targets)) / N; dlogits may alias probs. */
void crossentropy_backward_input(float *dlogits, const float *probs, const int *targets,
                                 float dloss, int N, int V);

/* ---- vocabulary-parallel softmax cross-entropy (Megatron-LM's) ---------------------------
 * Each rank of a tensor-parallel group holds V columns of the logits, a shard of the vocabulary
 * starting at id v0, of which the first nv are real and the rest padding (ignored: probability
 * 0, gradient 0). The caller combines the per-row numbers over the group between the steps:
 * rowmax by a maximum, sums and tlogit by a sum. */
/* rowmax (N) = each row's maximum over the real columns (-FLT_MAX when nv is 0); tlogit (N) =
 * logits[n, targets[n] - v0] when that is a real column of the shard, else 0. */
void crossentropy_shard_stats(float *rowmax, float *tlogit, const float *logits,
                              const int *targets, int v0, int nv, int N, int V);
/* probs (N,V) = e^(logits - rowmax) on the real columns, 0 on padding (probs may alias logits);
 * sums (N) = each row's sum. rowmax: the group's. */
void crossentropy_shard_exp(float *probs, float *sums, const float *logits, const float *rowmax,
                            int nv, int N, int V);
/* probs (N,V) /= sums row by row; returns the mean over rows of rowmax + log(sum) - tlogit (the
 * loss). rowmax, sums, tlogit: the group's. */
float crossentropy_shard_finish(float *probs, const float *rowmax, const float *sums,
                                const float *tlogit, int N, int V);
/* dlogits (N,V) = dloss * (probs - onehot(targets - v0)) / N, the one-hot only for targets in
 * [v0, v0 + nv); dlogits may alias probs. */
void crossentropy_shard_backward_input(float *dlogits, const float *probs, const int *targets,
                                       int v0, int nv, float dloss, int N, int V);

/* ---- the build ---------------------------------------------------------------------------- */
/* The widest vector ISA these kernels were compiled for ("AVX-512", "AVX2", "SSE2", "NEON" or
 * "scalar"): what -march gave the compiler, which may be less than the CPU has. */
const char *nn_build_isa(void);

#endif
