/* The classic schedules: gpipe, 1f1b, interleaved-1f1b (Megatron-LM's order) and pipedream
 * (asynchronous 1F1B). Pure functions: no I/O. Not here: the registry and dispatch
 * (sched_registry.c), zero-bubble, chimera and greedy generators (their own files).
 * Legend: P ranks, S stages, M microbatches, v chunks (stages per rank). */
#include "sched/gen.h"
#include "util/pt.h"

/* Rejects chunks other than 0 or 1 for generators with one stage per rank. */
static int gen_check_one_chunk(const char *name, const sched_params *p) {
    if (gen_check_common(name, p) < 0) return -1;
    if (p->chunks > 1)
        return pt_seterr("schedule %s: chunks must be 1 (one stage per rank; got %d); "
                         "use interleaved-1f1b for several", name, p->chunks);
    return 0;
}

/* GPipe: every rank runs all forwards, then all backwards (BW, mb 0..M-1), then the sync tail. */
sched *gen_gpipe(const sched_params *p) {
    if (gen_check_one_chunk("gpipe", p) < 0) return NULL;
    sched *s = gen_new_linear("gpipe", p);
    for (int r = 0; r < p->ranks; r++) {
        for (int mb = 0; mb < p->microbatches; mb++) sched_push(s, r, ACT_F, r, mb);
        for (int mb = 0; mb < p->microbatches; mb++) sched_push(s, r, ACT_BW, r, mb);
    }
    sched_append_sync_tail(s);
    return s;
}

/* The 1F1B order of rank r (stage r) over the schedule's M units: min(P-r-1, M) warm-up
 * forwards, then F/BW pairs, then the remaining backwards. async: each BW is followed by its
 * REDUCE_GRAD and a STEP. With sequence chunks (s->seq_chunks K > 1; seq1F1B) the warm-up is
 * P-r-1 + K-1 units (a stage runs a microbatch's last chunk forward before its first backward)
 * and the backwards go chunk K-1 first (gen_seq_backward_unit). */
static void gen_push_1f1b_rank(sched *s, int r, int P, int M, bool async, int depth) {
    int K = s->seq_chunks, want = P - r - 1 + K - 1, f = 0;
    if (depth - 1 > want) want = depth - 1;       /* async: admits `depth` before its first backward */
    int warm = want < M ? want : M;
    for (; f < warm; f++) sched_push(s, r, ACT_F, r, f);
    for (int b = 0; b < M; b++) {
        if (f < M) sched_push(s, r, ACT_F, r, f++);
        sched_push(s, r, ACT_BW, r, gen_seq_backward_unit(b, K));
        if (async) {
            sched_push(s, r, ACT_REDUCE_GRAD, r, -1);
            sched_push(s, r, ACT_STEP, -1, -1);
        }
    }
}

/* 1F1B (PipeDream-flush / Megatron non-interleaved): M < P is allowed, the warm-up shortens. */
sched *gen_1f1b(const sched_params *p) {
    if (gen_check_one_chunk("1f1b", p) < 0) return NULL;
    sched *s = gen_new_linear("1f1b", p);
    for (int r = 0; r < p->ranks; r++) gen_push_1f1b_rank(s, r, p->ranks, s->n_mb, false, 0);
    sched_append_sync_tail(s);
    return s;
}

/* PipeDream's asynchronous 1F1B: the same order as 1f1b (rank r admits P-r forwards before its
 * first backward; with async_depth D, max(P-r, D)), but weights update after every backward
 * (REDUCE_GRAD + STEP), no flush. */
sched *gen_pipedream(const sched_params *p) {
    if (gen_check_one_chunk("pipedream", p) < 0) return NULL;
    if (p->async_depth < 0) {
        pt_seterr("schedule pipedream: async depth must be >= 0 (got %d)", p->async_depth);
        return NULL;
    }
    sched *s = gen_new_linear("pipedream", p);
    s->async = true;
    for (int r = 0; r < p->ranks; r++) gen_push_1f1b_rank(s, r, p->ranks, p->microbatches, true, p->async_depth);
    return s;
}

/* Interleaved virtual microbatch k of rank r (Megatron-LM's order): groups of P microbatches run
 * through chunk 0, then chunk 1, ...; backward visits chunks in reverse. Sets *stage, *mb. */
static void gen_interleaved_step(int k, int r, int P, int v, bool backward, int *stage, int *mb) {
    int chunk = (k % (P * v)) / P;
    if (backward) chunk = v - 1 - chunk;
    *stage = chunk * P + r;
    *mb = (k / (P * v)) * P + k % P;
}

static int gen_check_interleaved(const sched_params *p) {
    if (p->chunks != 0 && p->chunks < 2)
        return pt_seterr("schedule interleaved-1f1b: chunks must be >= 2 (got %d)", p->chunks);
    if (p->microbatches % p->ranks != 0)
        return pt_seterr("interleaved-1f1b needs microbatches divisible by ranks (got M=%d, P=%d)",
                         p->microbatches, p->ranks);
    return 0;
}

/* Interleaved 1F1B: S = P*v stages, stage g on rank g % P. Rank r warms up with
 * (P-r-1)*2 + (v-1)*P forwards (capped at v*M), alternates F and BW, then cools down. chunks 0
 * means 2. Needs M % P == 0. */
sched *gen_interleaved(const sched_params *p) {
    if (gen_check_common("interleaved-1f1b", p) < 0 || gen_check_interleaved(p) < 0) return NULL;
    int P = p->ranks, M = p->microbatches, v = p->chunks ? p->chunks : 2, total = v * M;
    sched *s = sched_new(P, P * v, 1, M);
    snprintf(s->name, sizeof s->name, "interleaved-1f1b");
    for (int r = 0; r < P; r++) {
        int warm = (P - r - 1) * 2 + (v - 1) * P, f = 0, g, mb;
        if (warm > total) warm = total;
        for (; f < warm; f++) {
            gen_interleaved_step(f, r, P, v, false, &g, &mb);
            sched_push(s, r, ACT_F, g, mb);
        }
        for (int b = 0; b < total; b++) {
            if (f < total) {
                gen_interleaved_step(f++, r, P, v, false, &g, &mb);
                sched_push(s, r, ACT_F, g, mb);
            }
            gen_interleaved_step(b, r, P, v, true, &g, &mb);
            sched_push(s, r, ACT_BW, g, mb);
        }
    }
    sched_append_sync_tail(s);
    return s;
}
