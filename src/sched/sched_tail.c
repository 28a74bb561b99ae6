/* The optimizer's tail of a schedule: appending the synchronous one (each stage's REDUCE_GRAD
 * and a STEP per rank) to a generated or compute-only schedule, and the check that a schedule can
 * train (its tail is complete and, when asynchronous, the same on every rank). Not the order of
 * the tail's cells (the validator checks it) nor running it (run/). */
#include "sched/sched.h"
#include "util/pt.h"
#include <stdlib.h>

void sched_append_sync_tail(sched *s) {
    int *last = pt_malloc((size_t)s->n_stages * sizeof(int));
    int *order = pt_malloc((size_t)s->n_stages * sizeof(int));
    for (int r = 0; r < s->n_ranks; r++) {
        for (int g = 0; g < s->n_stages; g++) last[g] = s->len[r];   /* no backward: reduce last */
        for (int i = 0; i < s->len[r]; i++) {
            const sched_action *a = &s->acts[r][i];
            if (a->kind == ACT_B || a->kind == ACT_W || a->kind == ACT_BW) last[a->stage] = i;
        }
        int n = 0;
        for (int g = 0; g < s->n_stages; g++) {
            if (s->stage_rank[g] != r) continue;
            int j = n++;                          /* insertion sort by last backward position */
            for (; j > 0 && last[order[j - 1]] > last[g]; j--) order[j] = order[j - 1];
            order[j] = g;
        }
        for (int j = 0; j < n; j++) sched_push(s, r, ACT_REDUCE_GRAD, order[j], -1);
        sched_push(s, r, ACT_STEP, -1, -1);
    }
    free(order);
    free(last);
}

bool sched_append_missing_tail(sched *s) {
    if (s->async) return false;
    for (int r = 0; r < s->n_ranks; r++)
        for (int i = 0; i < s->len[r]; i++)
            if (s->acts[r][i].kind == ACT_REDUCE_GRAD || s->acts[r][i].kind == ACT_STEP) return false;
    sched_append_sync_tail(s);
    return true;
}

/* An asynchronous (pipedream-style) schedule runs one collective per REDUCE_GRAD and per STEP, so
 * every rank must issue them in the same pattern or the job would wait forever: one stage per
 * rank, and REDUCE_GRAD then STEP pairs, per microbatch (a stash per microbatch: what the
 * pipedream generator writes) or, with two weight versions (2bw), per batch of P microbatches. */
static int tail_check_async(const sched *s, const char *where) {
    int per = s->weight_versions == 2 ? s->n_ranks : 1;   /* microbatches per update */
    if (s->n_mb % per)
        return pt_seterr("%s: schedule %s updates every %d microbatches: M=%d is not a multiple",
                         where, s->name, per, s->n_mb);
    if (s->n_stages != s->n_ranks)
        return pt_seterr("%s: an asynchronous schedule (several STEPs per rank) needs one stage per "
                         "rank; it has %d stages on %d ranks", where, s->n_stages, s->n_ranks);
    for (int r = 0; r < s->n_ranks; r++) {
        int pairs = 0, want_step = 0;
        for (int i = 0; i < s->len[r]; i++) {
            sched_kind k = s->acts[r][i].kind;
            if (k != ACT_REDUCE_GRAD && k != ACT_STEP) continue;
            if ((k == ACT_STEP) != want_step)
                return pt_seterr("%s: rank %d step %d: an asynchronous schedule alternates "
                                 "<stage>REDUCE_GRAD and STEP, one pair after each microbatch's "
                                 "backward; found %s", where, r, i,
                                 want_step ? "REDUCE_GRAD twice" : "STEP without REDUCE_GRAD");
            pairs += want_step;
            want_step = !want_step;
        }
        if (pairs != s->n_mb / per || want_step)
            return pt_seterr("%s: rank %d has %d REDUCE_GRAD/STEP pairs; an asynchronous schedule needs "
                             "one per %s (%d), the same on every rank", where, r, pairs,
                             per > 1 ? "batch of P microbatches" : "microbatch", s->n_mb / per);
    }
    return 0;
}

/* Rank r's tail: a STEP, and a REDUCE_GRAD for each of its stages (reduced[] is scratch, [S]). */
static int tail_check_rank(const sched *s, int r, bool *reduced, const char *where) {
    bool stepped = false;
    for (int g = 0; g < s->n_stages; g++) reduced[g] = false;
    for (int i = 0; i < s->len[r]; i++) {
        if (s->acts[r][i].kind == ACT_REDUCE_GRAD) reduced[s->acts[r][i].stage] = true;
        if (s->acts[r][i].kind == ACT_STEP) stepped = true;
    }
    if (!stepped)
        return pt_seterr("%s: rank %d has no STEP: the weights would never be updated; end each row "
                         "with <stage>REDUCE_GRAD ... STEP", where, r);
    for (int g = 0; g < s->n_stages; g++)
        if (s->stage_rank[g] == r && !reduced[g])
            return pt_seterr("%s: rank %d has no %dREDUCE_GRAD: stage %d's gradients would never be "
                             "reduced; end each row with <stage>REDUCE_GRAD for each of its stages "
                             "(after their backward work), then STEP", where, r, g, g);
    return 0;
}

int sched_check_runnable(const sched *s, const char *where) {
    if (s->async) return tail_check_async(s, where);
    bool *reduced = pt_calloc((size_t)s->n_stages, sizeof *reduced);
    int rc = 0;
    for (int r = 0; r < s->n_ranks && rc == 0; r++) rc = tail_check_rank(s, r, reduced, where);
    free(reduced);
    return rc;
}
