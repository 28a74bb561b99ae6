/* Weight stashing for asynchronous schedules (PipeDream): a microbatch's backward runs on the
 * weights its forward used, although updates happened in between. The weights of a stage are its
 * parameter span and its private copies of tied tensors. Not here: when stashing happens (the
 * walk in executor.c). */
#include "run/exec_int.h"
#include <string.h>

/* The stage's weights (span, then its copies in tie order) into dst. */
void exec_weights_get(const run_exec *e, const run_stage *st, float *dst) {
    memcpy(dst, st->m.params + st->span_off, st->span_n * sizeof(float));
    dst += st->span_n;
    for (int t = 0; t < e->n_ties; t++)
        if (st->copy[t].w) {
            memcpy(dst, st->copy[t].w, st->copy[t].count * sizeof(float));
            dst += st->copy[t].count;
        }
}

void exec_weights_put(const run_exec *e, run_stage *st, const float *src) {
    memcpy(st->m.params + st->span_off, src, st->span_n * sizeof(float));
    src += st->span_n;
    for (int t = 0; t < e->n_ties; t++)
        if (st->copy[t].w) {
            memcpy(st->copy[t].w, src, st->copy[t].count * sizeof(float));
            src += st->copy[t].count;
        }
}

/* Position-weighted checksum of w[0..n) as elements base.. of a longer vector: two weight
 * versions that differ anywhere almost surely differ here. */
static double exec_checksum(const float *w, size_t n, size_t base) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)w[i] * (double)(1 + (base + i) % 7919);
    return s;
}

/* Checksum of the weights the stage's layers read right now (span, then the copies). */
static double exec_weights_sum(const run_exec *e, const run_stage *st) {
    double s = exec_checksum(st->m.params + st->span_off, st->span_n, 0);
    size_t base = st->span_n;
    for (int t = 0; t < e->n_ties; t++)
        if (st->copy[t].w) {
            s += exec_checksum(st->copy[t].w, st->copy[t].count, base);
            base += st->copy[t].count;
        }
    return s;
}

/* At F: remember the weights this microbatch sees. */
void exec_stash(run_exec *e, run_stage *st, int mb) {
    exec_weights_get(e, st, st->stash[mb]);
    st->stash_sum[mb] = exec_weights_sum(e, st);
}

/* Before the backward: the current weights aside, the stashed ones in. Counts (the direct
 * check of stashing): backwards run, backwards whose weights differ from their F's (a bug), and
 * backwards whose F's weights differ from the current ones (stashing mattered). */
void exec_unstash(run_exec *e, run_stage *st, int mb) {
    exec_weights_get(e, st, e->live);
    exec_weights_put(e, st, st->stash[mb]);
    e->stash_checked++;
    e->stash_bad += exec_weights_sum(e, st) != st->stash_sum[mb];
    e->stash_stale += memcmp(e->live, st->stash[mb], exec_weights_n(st, e->n_ties) * sizeof(float)) != 0;
}

/* After the backward: the current weights back. */
void exec_restash(run_exec *e, run_stage *st) { exec_weights_put(e, st, e->live); }
