/* The in-test tensor-parallel collective shared by the sharded-model tests (test_tp_model,
 * test_tp_oases_model, test_tp_sp_model): a group of threads, one per TP rank, whose every rank's
 * buffer is read between two barriers, so a sum runs in rank order on every rank alike; the
 * whole model cut into a rank's shard; a rank thread per shard, started and joined. Each test
 * keeps its own member (the per-rank ctx with its counters) and its extra collectives. The
 * includer defines MAX_TP first. */
#ifndef PT_TEST_TP_GROUP_H
#define PT_TEST_TP_GROUP_H
#include "model/gpt.h"
#include "test.h"
#include "util/pt.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#ifndef MAX_TP
#error "define MAX_TP before including tp_group.h"
#endif

typedef struct {
    pthread_barrier_t bar;
    int size;
    float *buf[MAX_TP];
    size_t n[MAX_TP];
} tp_group;

static inline void tp_group_init(tp_group *g, int size) {
    g->size = size;
    pthread_barrier_init(&g->bar, NULL, (unsigned)size);
}

static inline void tp_group_destroy(tp_group *g) { pthread_barrier_destroy(&g->bar); }

/* Posts rank's buffer and waits for every rank's: then g->buf and g->n hold them all, to read
 * until tp_group_done. Returns 1 when every rank posted n floats, else 0. */
static inline int tp_group_post(tp_group *g, int rank, float *buf, size_t n) {
    g->buf[rank] = buf;
    g->n[rank] = n;
    pthread_barrier_wait(&g->bar);
    int same = 1;
    for (int r = 0; r < g->size; r++) same &= g->n[r] == n;
    return same;
}

/* Every rank has read every buffer: each may write its own again. */
static inline void tp_group_done(tp_group *g) { pthread_barrier_wait(&g->bar); }

/* The sum over the group in rank order into buf. Returns 0, or -1 when the ranks' lengths differ
 * (buf's contents then unspecified). */
static inline int tp_group_sum(tp_group *g, int rank, float *buf, size_t n) {
    int same = tp_group_post(g, rank, buf, n);
    float *sum = pt_falloc(n);
    for (size_t i = 0; same && i < n; i++) {
        float s = g->buf[0][i];
        for (int r = 1; r < g->size; r++) s += g->buf[r][i];
        sum[i] = s;
    }
    tp_group_done(g);
    memcpy(buf, sum, n * sizeof *buf);
    free(sum);
    return same ? 0 : -1;
}

/* sh: rank q's shard of the tp-way split of whole (all its layers), with whole's weights. */
static inline void tp_shard_of(gpt_model *sh, const gpt_model *whole, int q, int tp) {
    const gpt_config *c = &whole->cfg;
    gpt_init_layers_tp(sh, c, 0, c->n_layer + 2, q, tp);
    for (int k = 0; k < gpt_param_count(whole); k++) {
        const gpt_param_info *pi = gpt_param_info_at(whole, k);
        gpt_shard_extract(c, pi, q, tp, whole->params + pi->offset, sh->params + sh->info[k].offset);
    }
}

/* Runs fn on each of the tp jobs (job q at jobs + q * job_size), one thread each, and joins them. */
static inline void tp_run_threads(int tp, void *(*fn)(void *), void *jobs, size_t job_size) {
    pthread_t th[MAX_TP];
    for (int q = 0; q < tp; q++) pthread_create(&th[q], NULL, fn, (char *)jobs + (size_t)q * job_size);
    for (int q = 0; q < tp; q++) pthread_join(th[q], NULL);
}

/* n random tokens and targets below V; with mark_last, the first token and second target the
 * last real row (next to wte's padding). */
static inline void tp_make_batch(int *tok, int *tgt, int n, int V, uint64_t seed, int mark_last) {
    pt_rng r;
    pt_rng_seed(&r, seed);
    for (int i = 0; i < n; i++) { tok[i] = (int)(pt_rng_next(&r) % V); tgt[i] = (int)(pt_rng_next(&r) % V); }
    if (mark_last) tok[0] = tgt[1] = V - 1;
}

#endif
