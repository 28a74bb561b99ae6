/* Zero-bubble generators (Qi et al. 2023, "Zero Bubble Pipeline Parallelism"): zb-h1 and zb-h2,
 * hand-made orders with B and W split, and zb-v (two chunks per rank in a V) built by the list
 * scheduler under a 1F1B-sized memory budget. Pure: no I/O. Not greedy (sched_gen_greedy.c).
 * How each is built and what it guarantees: docs/schedules-zb-chimera.md.
 * Legend: P ranks, S stages, M microbatches, r rank. */
#include "sched/gen.h"
#include "sched/gen_list.h"
#include "util/pt.h"
#include <stdlib.h>

static int zb_check_one_chunk(const char *name, const sched_params *p) {
    if (gen_check_common(name, p) < 0) return -1;
    if (p->chunks > 1)
        return pt_seterr("schedule %s: chunks must be 1 (one stage per rank; got %d); "
                         "use zb-v for two", name, p->chunks);
    return 0;
}

/* One rank's order for stage r: `warm` forwards, then per backward b: B b, the W of microbatch
 * b - defer (W's run `defer` backwards late, filling the cool-down), the next F; then the W's
 * still pending. */
static void zb_push_rank(sched *s, int r, int M, int warm, int defer) {
    int f = 0, w = 0, K = s->seq_chunks;
    if (warm > M) warm = M;
    for (; f < warm; f++) sched_push(s, r, ACT_F, r, f);
    for (int b = 0; b < M; b++) {
        sched_push(s, r, ACT_B, r, gen_seq_backward_unit(b, K));
        if (b >= defer) sched_push(s, r, ACT_W, r, gen_seq_backward_unit(w++, K));
        if (f < M) sched_push(s, r, ACT_F, r, f++);
    }
    for (; w < M; w++) sched_push(s, r, ACT_W, r, gen_seq_backward_unit(w, K));
}

static sched *zb_build(const char *name, const sched_params *p, int h2) {
    if (zb_check_one_chunk(name, p) < 0) return NULL;
    int P = p->ranks;
    sched *s = gen_new_linear(name, p);
    int M = s->n_mb, K = s->seq_chunks;   /* units; K - 1 more warm-up: see gen_push_1f1b_rank */
    for (int r = 0; r < P; r++) {
        if (h2) zb_push_rank(s, r, M, 2 * (P - r) - 1, 2 * r);
        else zb_push_rank(s, r, M, P - r + K - 1, r);
    }
    sched_append_sync_tail(s);
    return s;
}

/* ZB-H1: 1F1B's warm-up (P-r forwards on rank r, so P activations on stage 0), then B, W, F;
 * rank r defers r W's to its cool-down. Any M >= 1; with F=B=W the iteration is 3M + P - 1
 * (bubble (P-1)/(3M) of the ideal time) once M >= P. */
sched *gen_zb_h1(const sched_params *p) { return zb_build("zb-h1", p, 0); }

/* ZB-H2: 2(P-r)-1 warm-up forwards on rank r (2P-1 activations on stage 0) fill the wait for
 * the first B; rank r defers 2r W's. With F=B=W every rank is busy from its first action to its
 * last once M >= 2P-1 (smaller M is allowed and valid, with bubbles). */
sched *gen_zb_h2(const sched_params *p) { return zb_build("zb-h2", p, 1); }

/* ZB-V: S = 2P, stage g on rank g for g < P and on rank 2P-1-g for g >= P (chunks must be 2).
 * Built by the list scheduler with unit costs and at most 3P chunk activations per rank (1.5
 * times 1F1B's stage 0, counting an activation as held until its W; 2P, 1F1B's, leaves gaps in
 * the cool-down). Any M >= 1; with F=B=W and M >= 2P every rank is busy from its first action to
 * its last and the iteration is 6M + P - 1. */
sched *gen_zb_v(const sched_params *p) {
    if (gen_check_common("zb-v", p) < 0) return NULL;
    if (p->chunks != 0 && p->chunks != 2)
        return pt_seterr("schedule zb-v: chunks must be 2 (two stages per rank in a V; got %d)",
                         p->chunks), NULL;
    int P = p->ranks, S = 2 * P;
    int *stage_rank = pt_calloc((size_t)S, sizeof(int));
    double *one = pt_calloc((size_t)S, sizeof(double));
    for (int g = 0; g < S; g++) stage_rank[g] = g < P ? g : 2 * P - 1 - g, one[g] = 1.0;
    gen_list_spec sp = {
        .name = "zb-v", .n_ranks = P, .n_stages = S, .n_pipes = 1, .n_mb = p->microbatches,
        .stage_rank = stage_rank, .cost_f = one, .cost_b = one, .cost_w = one,
        .rank_limit = 3 * P,
    };
    sched *s = gen_list_schedule(&sp);
    free(stage_rank);
    free(one);
    return s;
}
