/* An executor's reduction groups: which gradient regions are reduced and updated as one (each
 * chunk's span without the tied tensors it owns; each tied tensor over its owner and copies),
 * in one global order; their buckets; the slice of each bucket this rank updates (--zero 1) and
 * the AdamW moments of it, read from the job's source. Not here: reducing and updating
 * (exec_reduce.c), the stages and communicators (exec_state.c). */
#include "run/exec_int.h"
#include "util/pt.h"
#include <stdlib.h>
#include <string.h>

/* A piece of a stage's span: floats [off, off + n) of its model. */
typedef struct { size_t off, n; } exec_seg;

/* Stage st's span without the tied tensors it owns (they form groups of their own), as pieces
 * in order: out[NT + 1]; returns their number. */
static int exec_chunk_segs(const run_exec *e, const run_stage *st, exec_seg *out) {
    size_t at = st->span_off, end = st->span_off + st->span_n;
    int n = 0;
    for (int t = 0; t < e->n_ties; t++) {   /* ties in offset order (GPT: one) */
        if (!exec_owns_tie(e, st, t)) continue;
        const gpt_param_info *pi = gpt_param_info_at(&st->m, gpt_tie_at(&st->m, t)->param);
        if (pi->offset > at) out[n++] = (exec_seg){ at, pi->offset - at };
        at = pi->offset + pi->count;
    }
    if (end > at) out[n++] = (exec_seg){ at, end - at };
    return n;
}

/* A new group of e (grown by one), zeroed, with room for every local stage as a copy. */
static exec_group *exec_group_new(run_exec *e, comm *cm, int chunk, int tie) {
    exec_group *grp = pt_malloc(sizeof *grp * (size_t)(e->n_grp + 1));
    if (e->n_grp) memcpy(grp, e->grp, sizeof *grp * (size_t)e->n_grp);
    free(e->grp);
    e->grp = grp;
    exec_group *gr = &e->grp[e->n_grp++];
    memset(gr, 0, sizeof *gr);
    gr->cm = cm;
    gr->chunk = chunk;
    gr->tie = tie;
    gr->g = pt_calloc((size_t)e->n_stages, sizeof *gr->g);
    gr->w = pt_calloc((size_t)e->n_stages, sizeof *gr->w);
    gr->copy_stage = pt_calloc((size_t)e->n_stages, sizeof *gr->copy_stage);
    return gr;
}

static void exec_group_copy(exec_group *gr, int stage, float *g, float *w) {
    gr->copy_stage[gr->n_copies] = stage;
    gr->g[gr->n_copies] = g;
    gr->w[gr->n_copies++] = w;
}

/* Stage i's W adds to group index k. */
static void exec_add_writer(run_exec *e, int i, int k) {
    run_stage *st = &e->st[i];
    int *w = pt_malloc(sizeof *w * (size_t)(st->n_writes + 1));
    if (st->n_writes) memcpy(w, st->writes, sizeof *w * (size_t)st->n_writes);
    free(st->writes);
    st->writes = w;
    st->writes[st->n_writes++] = k;
    e->grp[k].n_writers++;
}

/* The tensors of model m in floats [off, off + n) of it (held layers), region-relative. */
static void exec_group_tensors(exec_group *gr, const gpt_model *m, size_t off, size_t n) {
    gr->ts = pt_calloc((size_t)gpt_param_count(m), sizeof *gr->ts);
    for (int i = 0; i < gpt_param_count(m); i++) {
        const gpt_param_info *pi = gpt_param_info_at(m, i);
        if (!gpt_holds_layer(m, pi->layer) || pi->offset < off || pi->offset >= off + n) continue;
        gr->ts[gr->n_ts++] = (exec_span){ i, pi->offset - off, pi->count, pi->decay,
                                          pi->split == GPT_SPLIT_NONE };
    }
    gr->n = n;
}

/* Chunk c's groups: one per piece of its span, the rank's stages holding c as copies. */
static void exec_chunk_groups(run_exec *e, int c) {
    exec_seg seg[GPT_MAX_TIES + 1];
    int first = -1, n_seg = 0;
    for (int i = 0; i < e->n_stages && first < 0; i++)
        if (e->st[i].chunk == c) first = i;
    if (first < 0) return;
    n_seg = exec_chunk_segs(e, &e->st[first], seg);
    for (int k = 0; k < n_seg; k++) {
        exec_group *gr = exec_group_new(e, e->chunk_comm[c], c, -1);
        int idx = e->n_grp - 1;
        exec_group_tensors(gr, &e->st[first].m, seg[k].off, seg[k].n);
        for (int i = 0; i < e->n_stages; i++) {
            if (e->st[i].chunk != c) continue;
            exec_group_copy(gr, i, e->st[i].m.grads + seg[k].off, e->st[i].m.params + seg[k].off);
            exec_add_writer(e, i, idx);
        }
    }
}

/* Tie t's group: owner stages and copies as copies; a user stage reading a local owner's
 * tensor writes to it too. */
static void exec_tie_group(run_exec *e, int t) {
    exec_group *gr = NULL;
    for (int i = 0; i < e->n_stages; i++) {
        run_stage *st = &e->st[i];
        const gpt_param_info *pi = gpt_param_info_at(&st->m, gpt_tie_at(&st->m, t)->param);
        int owns = exec_owns_tie(e, st, t), copy = st->copy[t].w != NULL;
        int user = st->has_tied && st->tied[t].dw != NULL;
        if (!owns && !user) continue;
        if (!gr) {
            gr = exec_group_new(e, e->tie_comm[t], -1, t);
            gr->ts = pt_calloc(1, sizeof *gr->ts);
            gr->ts[gr->n_ts++] = (exec_span){ gpt_tie_at(&st->m, t)->param, 0, pi->count, pi->decay,
                                              pi->split == GPT_SPLIT_NONE };
            gr->n = pi->count;
        }
        if (owns) exec_group_copy(gr, i, st->m.grads + pi->offset, st->m.params + pi->offset);
        if (copy) exec_group_copy(gr, i, st->copy[t].dw, st->copy[t].w);
        exec_add_writer(e, i, e->n_grp - 1);
    }
}

/* The moments of group gr's home (its first copy) at region offset 0: --zero 0 keeps them in
 * the home stage's adamw_state (laid out like its model, so a checkpoint writes it as it is) or
 * in the tied copy's. (--zero 1 keeps every bucket's slice on its own, even a whole one.) */
static void exec_home_moments(run_exec *e, exec_group *gr, float **mm, float **vv) {
    run_stage *st = &e->st[gr->copy_stage[0]];
    adamw_state *s = &st->opt;
    size_t off = (size_t)(gr->w[0] - st->m.params);
    if (gr->tie >= 0 && st->copy[gr->tie].w == gr->w[0]) {
        s = &st->copy[gr->tie].opt;
        off = 0;
        if (!s->m) adamw_init(s, st->copy[gr->tie].count);
    } else if (!s->m) adamw_init(s, st->m.n_held);
    *mm = s->m + off;
    *vv = s->v + off;
}

/* Buckets of at most e->c.bucket floats; this rank's slice of each (--zero 1); its moments. */
static void exec_group_buckets(run_exec *e, exec_group *gr) {
    size_t B = e->c.bucket ? e->c.bucket : RUN_BUCKET_DEFAULT;
    int shard = e->c.zero && gr->cm && gr->cm->size > 1;
    float *hm = NULL, *hv = NULL;
    if (!e->c.zero) exec_home_moments(e, gr, &hm, &hv);
    gr->n_bk = (int)((gr->n + B - 1) / B);
    gr->bk = pt_calloc((size_t)gr->n_bk, sizeof *gr->bk);
    for (int k = 0; k < gr->n_bk; k++) {
        exec_bucket *b = &gr->bk[k];
        b->off = (size_t)k * B;
        b->n = gr->n - b->off < B ? gr->n - b->off : B;
        b->lo = 0;
        b->hi = b->n;
        if (shard) comm_slice(b->n, gr->cm->rank, gr->cm->size, &b->lo, &b->hi);
        if (!e->c.zero) {
            b->mm = hm + b->off;
            b->vv = hv + b->off;
            continue;
        }
        b->owned = 1;
        b->mm = pt_falloc(b->hi - b->lo);
        b->vv = pt_falloc(b->hi - b->lo);
    }
}

/* The moments of each bucket's slice from the source, tensor by tensor. */
static int exec_group_load_moments(run_exec *e, exec_group *gr) {
    const gpt_model *m = &e->st[gr->copy_stage[0]].m;
    if (!e->c.src->has_moments) return 0;   /* zeros, as allocated */
    for (int k = 0; k < gr->n_bk; k++) {
        exec_bucket *b = &gr->bk[k];
        size_t lo = b->off + b->lo, hi = b->off + b->hi;
        for (int i = 0; i < gr->n_ts; i++) {
            const exec_span *ts = &gr->ts[i];
            size_t a = ts->off > lo ? ts->off : lo, z = ts->off + ts->n < hi ? ts->off + ts->n : hi;
            if (a >= z) continue;
            if (e->c.src->read(e->c.src, m, ts->param, a - ts->off, z - a, NULL, b->mm + (a - lo),
                               b->vv + (a - lo)) < 0)
                return pt_adderr("moments of %s: ", gpt_param_info_at(m, ts->param)->name);
        }
    }
    return 0;
}

int exec_groups_init(run_exec *e) {
    for (int c = 0; c < e->c.s->stages_per_pipe; c++) exec_chunk_groups(e, c);
    for (int t = 0; t < e->n_ties; t++) exec_tie_group(e, t);
    for (int k = 0; k < e->n_grp; k++) {
        exec_group_buckets(e, &e->grp[k]);
        if (exec_group_load_moments(e, &e->grp[k]) < 0) return pt_adderr("rank %d: ", e->c.world_rank);
    }
    return 0;
}

void exec_groups_free(run_exec *e) {
    for (int k = 0; k < e->n_grp; k++) {
        exec_group *gr = &e->grp[k];
        for (int b = 0; b < gr->n_bk; b++)
            if (gr->bk[b].owned) { free(gr->bk[b].mm); free(gr->bk[b].vv); }
        free(gr->bk);
        free(gr->ts);
        free(gr->g);
        free(gr->w);
        free(gr->copy_stage);
    }
    free(e->grp);
    e->grp = NULL;
    e->n_grp = 0;
}
