/* The action dependency rule, written once for every module: a stage's forward neighbours
 * (sched_stage_prev/next), what must finish before an action may start (sched_action_deps), and
 * how many microbatches' activations a stage holds at once following its rank's order
 * (sched_stage_peak_slots, sched_peak_activations). The validator, the simulator and the list
 * scheduler read the rule; the executor's activation buffers are sized by the count. Not the
 * validator itself (sched_validate.c), not a timing model (sim/). Legend: S stages, M microbatches. */
#include "sched/sched.h"
#include "util/pt.h"
#include <stdlib.h>
#include <string.h>

int sched_stage_prev(const sched *s, int g) {
    return g % s->stages_per_pipe == 0 ? -1 : g - 1;
}

int sched_stage_next(const sched *s, int g) {
    return g % s->stages_per_pipe == s->stages_per_pipe - 1 ? -1 : g + 1;
}

/* Sets *o to (kind, stage, mb) and returns 1, or returns 0 when there is no such stage. */
static int dep(sched_action *o, sched_kind kind, int stage, int mb) {
    if (stage < 0) return 0;
    *o = (sched_action){ .stage = stage, .mb = mb, .kind = kind };
    return 1;
}

/* The neighbour stage nb (-1: none) of stage g, or g's own receive of kind recv when the schedule
 * is lowered and nb runs on another rank (the receive is then what g waits for). */
static int dep_neighbour(const sched *s, sched_action *o, sched_kind kind, int nb, int g, sched_kind recv, int mb) {
    if (nb < 0) return 0;
    if (s->lowered && s->stage_rank[nb] != s->stage_rank[g]) return dep(o, recv, g, mb);
    return dep(o, kind, nb, mb);
}

int sched_action_deps(const sched *s, const sched_action *a, sched_action out[SCHED_MAX_DEPS]) {
    int g = a->stage, mb = a->mb, n = 0, K = s->seq_chunks;
    if (g < 0) return 0;                   /* STEP; REDUCE_GRAD falls to default: none */
    switch (a->kind) {
    case ACT_F:
        n = dep_neighbour(s, out, ACT_F, sched_stage_prev(s, g), g, ACT_RECV_F, mb);
        return n + (K > 1 && mb % K > 0 ? dep(out + n, ACT_F, g, mb - 1) : 0);
    case ACT_B: case ACT_BW:
        n = dep(out, ACT_F, g, mb);
        n += dep_neighbour(s, out + n, ACT_B, sched_stage_next(s, g), g, ACT_RECV_B, mb);
        return n + (K > 1 && mb % K < K - 1 ? dep(out + n, ACT_B, g, mb + 1) : 0);
    case ACT_W: return dep(out, ACT_B, g, mb);
    case ACT_SEND_F: return dep(out, ACT_F, g, mb);
    case ACT_SEND_B: return dep(out, ACT_B, g, mb);
    case ACT_RECV_F: return dep(out, ACT_SEND_F, sched_stage_prev(s, g), mb);
    case ACT_RECV_B: return dep(out, ACT_SEND_B, sched_stage_next(s, g), mb);
    default: return 0;
    }
}

/* One action's effect on a stage's count of activation sets held (*n) and its peak (*peak). */
static void held_step(sched_kind k, bool recompute, int *n, int *peak) {
    if (k == (recompute ? ACT_B : ACT_F) || (recompute && k == ACT_BW)) (*n)++;
    if (*n > *peak) *peak = *n;
    if (k == ACT_W || k == ACT_BW) (*n)--;
}

int sched_stage_peak_slots(const sched *s, int g, bool recompute) {
    int r = s->stage_rank[g], n = 0, peak = 1;
    for (int i = 0; i < s->len[r]; i++)
        if (s->acts[r][i].stage == g) held_step(s->acts[r][i].kind, recompute, &n, &peak);
    return peak;
}

int sched_stage_peak_kv(const sched *s, int g) {
    int K = s->seq_chunks > 1 ? s->seq_chunks : 1, r = s->stage_rank[g], n = 0, peak = 1;
    for (int i = 0; i < s->len[r]; i++) {
        const sched_action *a = &s->acts[r][i];
        if (a->stage != g || a->mb % K) continue;
        if (a->kind == ACT_F && ++n > peak) peak = n;
        if (a->kind == ACT_B || a->kind == ACT_BW) n--;
    }
    return peak;
}

void sched_peak_activations(const sched *s, int *out) {
    int *held = pt_calloc((size_t)s->n_stages, sizeof(int));
    memset(out, 0, (size_t)s->n_stages * sizeof(int));
    for (int r = 0; r < s->n_ranks; r++)
        for (int i = 0; i < s->len[r]; i++) {
            const sched_action *a = &s->acts[r][i];
            if (a->stage >= 0 && a->stage < s->n_stages) held_step(a->kind, false, &held[a->stage], &out[a->stage]);
        }
    free(held);
}
