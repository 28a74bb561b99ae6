/* What the layer kinds share (gpt_layer_int.h): token checks, the tied wte, the TP group's
 * collectives with errors that name the rank and what was reduced, the vocabulary shard. Not
 * here: any kind's F, B or W. */
#include "model/gpt_layer_int.h"
#include "model/gpt_act16.h"
#include "nn/nn.h"
#include "util/pt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Checks ids are in [0,V): -1 naming the first bad one, its (b,t) and what it was for. */
int gpt_check_tokens(const gpt_model *m, const int *tok, int B, int T, const char *what) {
    for (int i = 0; i < B * T; i++)
        if (tok[i] < 0 || tok[i] >= m->cfg.vocab_size)
            return pt_seterr("%s %d at (b=%d, t=%d) is outside the vocabulary [0, %d)",
                             what, tok[i], i / T, i % T, m->cfg.vocab_size);
    return 0;
}

/* The head reads tie 0 (wte, set up by gpt_init). */
const float *gpt_tied_wte(const gpt_model *m, const gpt_tied *tied) {
    return tied && tied[0].w ? tied[0].w : m->w.wte;
}

float *gpt_tied_dwte(const gpt_model *m, const gpt_tied *tied) {
    return tied && tied[0].dw ? tied[0].dw : m->g.wte;
}

/* ---- tensor parallelism ------------------------------------------------------------------- */
/* The group's in-place sum of buf (n floats); nothing at tp 1. -1 with the collective's error. */
int gpt_tp_allreduce(const gpt_model *m, float *buf, size_t n, const char *what) {
    if (m->tp_size == 1) return 0;
    if (!m->tp.allreduce)
        return pt_seterr("TP rank %d of %d has no collective for %s (gpt_set_tp was not called)",
                         m->tp_rank, m->tp_size, what);
    if (m->tp.allreduce(m->tp.ctx, buf, n) < 0)
        return pt_adderr("TP rank %d of %d, all-reduce of %s: ", m->tp_rank, m->tp_size, what);
    return 0;
}

/* The group's collective of a kind on buf (n floats; gpt_tp): the all-reduce, or sequence
 * parallelism's on a whole (N,C) buffer: the sum into the rank's rows (reduce-scatter), every
 * rank's rows to every rank (all-gather). -1 with the collective's error, or when it has none. */

int gpt_tp_collective(const gpt_model *m, int kind, float *buf, size_t n, const char *what) {
    static const char *const names[] = { "all-reduce", "reduce-scatter", "all-gather" };
    if (kind == TP_ALLREDUCE) return gpt_tp_allreduce(m, buf, n, what);
    int (*f)(void *, float *, size_t) = kind == TP_REDUCE_SCATTER ? m->tp.reduce_scatter : m->tp.allgather;
    if (!f)
        return pt_seterr("TP rank %d of %d runs sequence parallelism but its collective has no %s "
                         "(gpt_set_tp after gpt_set_tp_sp replaced it?)", m->tp_rank, m->tp_size,
                         kind == TP_REDUCE_SCATTER ? "reduce_scatter" : "allgather");
    if (f(m->tp.ctx, buf, n) < 0)
        return pt_adderr("TP rank %d of %d, %s of %s: ", m->tp_rank, m->tp_size, names[kind], what);
    return 0;
}

/* Starts the group's sum of buf without waiting (gpt_tp.iallreduce): *req for gpt_tp_wait. */
int gpt_tp_start(const gpt_model *m, float *buf, size_t n, void **req, const char *what) {
    if (!m->tp.iallreduce || !m->tp.wait)
        return pt_seterr("TP rank %d of %d overlaps its all-reduces but its collective has no "
                         "iallreduce and wait (gpt_set_tp after gpt_set_tp_overlap replaced it?)",
                         m->tp_rank, m->tp_size);
    if (m->tp.iallreduce(m->tp.ctx, buf, n, req) < 0)
        return pt_adderr("TP rank %d of %d, starting the all-reduce of %s: ", m->tp_rank, m->tp_size, what);
    return 0;
}

/* Waits for a sum gpt_tp_start started; *req is NULL after, whatever the outcome. */
int gpt_tp_wait(const gpt_model *m, void **req, const char *what) {
    void *r = *req;
    *req = NULL;
    if (m->tp.wait(m->tp.ctx, r) < 0)
        return pt_adderr("TP rank %d of %d, all-reduce of %s: ", m->tp_rank, m->tp_size, what);
    return 0;
}

/* After a failure: waits for the n requests still in flight (the non-NULL ones), keeping the
 * first error's message. */
void gpt_tp_drain(const gpt_model *m, void **req, int n) {
    char first[512];
    snprintf(first, sizeof first, "%s", pt_err());
    for (int i = 0; i < n; i++)
        if (req[i]) gpt_tp_wait(m, &req[i], "");
    pt_seterr("%s", first);
}

/* The vocabulary shard of m: ids [*v0, *v0 + *nv) are real rows of its wte (the rest of its
 * vocab_local rows are padding). */
void gpt_vocab_range(const gpt_model *m, int *v0, int *nv) {
    int vl = vocab_local(m), left = m->cfg.vocab_size - m->tp_rank * vl;
    *v0 = m->tp_rank * vl;
    *nv = left < 0 ? 0 : left < vl ? left : vl;
}

/* The recompute of a kind that keeps its whole F part: nothing to rebuild. */
int gpt_keep_all_recompute(const gpt_model *m, int l, const gpt_tied *tied, float *act,
                              float *scratch, int B, int T) {
    return 0;
}


int gpt_act16_spans_of(gpt_act_span *s, const size_t *len, const unsigned *f, int n, size_t size,
                       const char *kind) {
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        s[i] = (gpt_act_span){ off, len[i], f[i] };
        off += len[i];
    }
    if (off != size) {   /* the kind's list and its view disagree: fix the list */
        fprintf(stderr, "bf16 storage: the %s act's regions add up to %zu floats, its view has %zu "
                "(update its act16_spans list to the view's regions)\n", kind, off, size);
        abort();
    }
    return n;
}
