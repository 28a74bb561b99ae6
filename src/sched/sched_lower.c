/* Lowering: adds the communication actions to a compute-only schedule. For each cross-rank edge a
 * SEND goes right after the producing action and a RECV right before the consuming one, so the
 * lowered schedule waits exactly where the compute-only one did and cannot deadlock if that one
 * did not. Not a validator (sched_validate.c) and not a timing model (sim/). */
#include "sched/sched.h"
#include "util/pt.h"

/* Pushes a with its RECV before and SEND after, where a neighbour stage lives on another rank. */
static void lower_push(sched *out, int r, const sched_action *a) {
    const sched *s = out;
    int g = a->stage, mb = a->mb;
    bool fwd = a->kind == ACT_F, bwd = a->kind == ACT_B || a->kind == ACT_BW;
    int pv = (fwd || bwd) ? sched_stage_prev(s, g) : -1, nx = (fwd || bwd) ? sched_stage_next(s, g) : -1;
    bool pv_remote = pv >= 0 && s->stage_rank[pv] != r, nx_remote = nx >= 0 && s->stage_rank[nx] != r;
    if (fwd && pv_remote) sched_push(out, r, ACT_RECV_F, g, mb);
    if (bwd && nx_remote) sched_push(out, r, ACT_RECV_B, g, mb);
    sched_push(out, r, a->kind, g, mb);
    if (fwd && nx_remote) sched_push(out, r, ACT_SEND_F, g, mb);
    if (bwd && pv_remote) sched_push(out, r, ACT_SEND_B, g, mb);
}

sched *sched_lower(const sched *s) {
    if (sched_validate(s, NULL) < 0) {
        pt_adderr("lowering schedule '%s': ", s->name);
        return NULL;
    }
    if (s->lowered) return sched_copy(s);
    sched *out = sched_copy(s);
    for (int r = 0; r < out->n_ranks; r++) out->len[r] = 0;
    for (int r = 0; r < s->n_ranks; r++)
        for (int i = 0; i < s->len[r]; i++) lower_push(out, r, &s->acts[r][i]);
    out->lowered = true;
    return out;
}
