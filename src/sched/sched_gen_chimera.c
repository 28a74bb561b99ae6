/* Chimera (Li & Hoefler 2021): two model replicas pipelined in opposite directions on the same
 * P ranks, so each rank holds one stage of each; ordered by the list scheduler with fused BW.
 * Pure: no I/O. Not the data-parallel all-reduce of stage k with stage P+k (the runtime does it).
 * Legend: P ranks, K = P stages per pipe, S = 2P stages, M microbatches. */
#include "sched/gen.h"
#include "sched/gen_list.h"
#include "util/pt.h"
#include <stdlib.h>

static int chimera_check(const sched_params *p) {
    if (gen_check_common("chimera", p) < 0) return -1;
    if (p->chunks > 1)
        return pt_seterr("schedule chimera: chunks must be 1 (one stage per rank per pipe; got %d)",
                         p->chunks);
    if (p->ranks % 2 != 0)
        return pt_seterr("schedule chimera: ranks must be even (two pipes in opposite directions; "
                         "got %d)", p->ranks);
    if (p->microbatches % p->ranks != 0)
        return pt_seterr("schedule chimera: microbatches must be a multiple of ranks (a basic unit "
                         "is P microbatches, P/2 per pipe; got M=%d, P=%d)", p->microbatches, p->ranks);
    return 0;
}

/* Pipe 0: stage k on rank k; pipe 1: stage P+k on rank P-1-k. Microbatches go in alternating
 * half-units: mb in [jP, jP + P/2) to pipe 0, [jP + P/2, (j+1)P) to pipe 1 (for M = P: the
 * first half down, the second half up). Each stage holds at most P/2 activations, so a rank
 * never holds more than P (1F1B's stage 0). Needs P even, M a multiple of P. */
sched *gen_chimera(const sched_params *p) {
    if (chimera_check(p) < 0) return NULL;
    int P = p->ranks, S = 2 * P, M = p->microbatches;
    int *stage_rank = pt_calloc((size_t)S, sizeof(int)), *mb_pipe = pt_calloc((size_t)M, sizeof(int));
    double *one = pt_calloc((size_t)S, sizeof(double));   /* F = B = W = 1: BW is 2F, as in the paper */
    for (int g = 0; g < S; g++) stage_rank[g] = g < P ? g : 2 * P - 1 - g, one[g] = 1.0;
    for (int m = 0; m < M; m++) mb_pipe[m] = (m / (P / 2)) % 2;
    gen_list_spec sp = {
        .name = "chimera", .n_ranks = P, .n_stages = S, .n_pipes = 2, .n_mb = M,
        .stage_rank = stage_rank, .mb_pipe = mb_pipe, .cost_f = one, .cost_b = one, .cost_w = one,
        .stage_limit = P, .fused = true,
    };
    sched *s = gen_list_schedule(&sp);
    free(stage_rank), free(mb_pipe), free(one);
    return s;
}
