/* PipeDream-2BW (Narayanan et al., arXiv 2006.09503): the 1f1b order (rank r admits P-r forwards
 * before its first backward) without a flush between batches: the M microbatches form M / P
 * batches of P consecutive microbatches, and each rank updates its stage after the backward of
 * each batch's last microbatch (REDUCE_GRAD + STEP), while forwards of the next batch are already
 * in flight. The update rule it stands for: batch b's gradient is taken on the weights of update
 * b-2 and applied on top of update b-1's, W(b) = W(b-1) - lr * grad f(W(b-2)), so every stage
 * keeps two weight versions (weight_versions = 2), whatever P. Gradients are summed over the P
 * microbatches of a batch (the paper's m >= d, at m = d). async_depth D admits max(P-r, D)
 * forwards before the first backward (D <= P: a forward further ahead would run before the
 * version it needs exists); the versions each action uses, and so every number, stay the same.
 * Pure: no I/O. */
#include "sched/gen.h"
#include "util/pt.h"

sched *gen_2bw(const sched_params *p) {
    if (gen_check_common("2bw", p) < 0) return NULL;
    int P = p->ranks, M = p->microbatches;
    if (p->chunks > 1) {
        pt_seterr("schedule 2bw: chunks must be 1 (one stage per rank; got %d)", p->chunks);
        return NULL;
    }
    if (M % P) {
        pt_seterr("2bw needs microbatches divisible by ranks: a batch is P microbatches (got M=%d, P=%d)", M, P);
        return NULL;
    }
    if (p->async_depth < 0 || p->async_depth > P) {
        pt_seterr("schedule 2bw: async depth must be in 0..P=%d (got %d): a forward further ahead would run "
                  "before the weight version it needs exists", P, p->async_depth);
        return NULL;
    }
    sched *s = gen_new_linear("2bw", p);
    s->async = true;
    s->weight_versions = 2;
    for (int r = 0; r < P; r++) {
        int f = 0, warm = P - r - 1 > p->async_depth - 1 ? P - r - 1 : p->async_depth - 1;
        for (; f < warm && f < M; f++) sched_push(s, r, ACT_F, r, f);
        for (int b = 0; b < M; b++) {
            if (f < M) sched_push(s, r, ACT_F, r, f++);
            sched_push(s, r, ACT_BW, r, b);
            if ((b + 1) % P) continue;
            sched_push(s, r, ACT_REDUCE_GRAD, r, -1);
            sched_push(s, r, ACT_STEP, -1, -1);
        }
    }
    return s;
}
