/* The starting points of a pipelined job (run/source.h): a whole model in memory, a weights file
 * or the seeded init, a checkpoint, requests kept for later. Each fills a partial model's layers
 * and reads slices of single tensors, so a rank loads only what it holds. A tensor-parallel shard (a model of
 * gpt_init_layers_tp) is cut from its whole tensor, read one tensor at a time. */
#include "run/source.h"
#include "io/safetensors.h"
#include "model/gpt_io.h"
#include "util/pt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Reads elements [start, start + n) of the whole tensor `param` (m: any model of the config,
 * for its table) into w, mm, vv (each may be NULL). */
typedef int (*whole_read_fn)(const run_source *s, const gpt_model *m, int param, size_t start,
                             size_t n, float *w, float *mm, float *vv);

static int sharded(const gpt_model *m) { return m->tp_size > 1; }

/* Elements [start, start + n) of m's shard of tensor `param` (m sharded): the whole tensor read
 * by rd, one buffer at a time (parameters, then each moment), and cut by gpt_shard_extract. So a
 * rank holds one whole tensor at a time, never the whole model. */
static int shard_read(const run_source *s, whole_read_fn rd, const gpt_model *m, int param,
                      size_t start, size_t n, float *w, float *mm, float *vv) {
    const gpt_param_info *pi = gpt_param_info_at(m, param);
    float *out[3] = { w, mm, vv }, *whole = pt_falloc(pi->full);
    float *shard = start || n != pi->count ? pt_falloc(pi->count) : NULL;
    int rc = 0;
    for (int k = 0; k < 3 && rc == 0; k++) {
        if (!out[k]) continue;
        float *dst[3] = { NULL, NULL, NULL };
        dst[k] = whole;
        rc = rd(s, m, param, 0, pi->full, dst[0], dst[1], dst[2]);
        if (rc < 0) break;
        gpt_shard_extract(&m->cfg, pi, m->tp_rank, m->tp_size, whole, shard ? shard : out[k]);
        if (shard) memcpy(out[k], shard + start, n * sizeof(float));
    }
    free(whole);
    free(shard);
    return rc;
}

/* Every tensor m holds, as shards (m sharded). */
static int shard_fill(const run_source *s, whole_read_fn rd, gpt_model *m) {
    for (int i = 0; i < gpt_param_count(m); i++) {
        const gpt_param_info *pi = gpt_param_info_at(m, i);
        if (gpt_holds_layer(m, pi->layer) &&
            shard_read(s, rd, m, i, 0, pi->count, m->params + pi->offset, NULL, NULL) < 0)
            return -1;
    }
    return 0;
}

/* ---- a whole model in memory ----------------------------------------------------------- */

static int model_whole(const run_source *s, const gpt_model *m, int param, size_t start, size_t n,
                       float *w, float *mm, float *vv);

static int model_fill(const run_source *s, gpt_model *m) {
    if (sharded(m)) return shard_fill(s, model_whole, m);
    size_t src_off, n, dst_off, n2;
    gpt_layers_param_span(s->model, m->first_layer, m->end_layer, &src_off, &n);
    gpt_layers_param_span(m, m->first_layer, m->end_layer, &dst_off, &n2);
    if (n) memcpy(m->params + dst_off, s->model->params + src_off, n * sizeof(float));
    return 0;
}

static void copy_or_zero(float *dst, const float *src, size_t n) {
    if (!dst) return;
    if (src) memcpy(dst, src, n * sizeof *dst);
    else memset(dst, 0, n * sizeof *dst);
}

static int model_whole(const run_source *s, const gpt_model *m, int param, size_t start, size_t n,
                       float *w, float *mm, float *vv) {
    size_t at = gpt_param_info_at(s->model, param)->offset + start;
    copy_or_zero(w, s->model->params + at, n);
    copy_or_zero(mm, s->opt ? s->opt->m + at : NULL, n);
    copy_or_zero(vv, s->opt ? s->opt->v + at : NULL, n);
    return 0;
}

static int model_read(const run_source *s, const gpt_model *m, int param, size_t start, size_t n,
                      float *w, float *mm, float *vv) {
    if (sharded(m)) return shard_read(s, model_whole, m, param, start, n, w, mm, vv);
    return model_whole(s, m, param, start, n, w, mm, vv);
}

void run_source_model(run_source *s, const gpt_model *m, const adamw_state *opt) {
    memset(s, 0, sizeof *s);
    s->fill = model_fill;
    s->read = model_read;
    s->cfg = m->cfg;
    s->model = m;
    s->opt = opt;
    s->has_moments = opt != NULL;
}

/* ---- a weights file, or the seeded init -------------------------------------------------- */

static int init_whole(const run_source *s, const gpt_model *m, int param, size_t start, size_t n,
                      float *w, float *mm, float *vv);

/* The seeded init draws a shard's values itself (gpt_init_random); a file is read whole. */
static int init_fill(const run_source *s, gpt_model *m) {
    if (!s->init) {
        gpt_init_random(m, s->seed);
        return 0;
    }
    if (sharded(m)) return shard_fill(s, init_whole, m);
    return gpt_load_safetensors(m, s->init, NULL);
}

/* Tensor `name` of the file (with or without the "transformer." prefix), elements [start,
 * start+n), converted to float. */
static int init_read_file(const char *path, const gpt_param_info *pi, size_t start, size_t n, float *w) {
    st_file *f;
    char pref[80];
    if (st_open(&f, path) < 0) return -1;
    snprintf(pref, sizeof pref, "transformer.%s", pi->name);
    const st_tensor *t = st_find(f, pi->name);
    if (!t) t = st_find(f, pref);
    int rc = 0;
    size_t full = pi->full ? pi->full : pi->count;
    if (!t || t->numel != full) rc = pt_seterr("%s: no tensor '%s' of %zu elements", path, pi->name, full);
    float *all = rc == 0 && (start || n != full) ? pt_falloc(full) : w;
    if (rc == 0) rc = st_tensor_f32(f, t, all);
    if (rc == 0 && all != w) memcpy(w, all + start, n * sizeof *w);
    if (all != w) free(all);
    st_close(f);
    return rc;
}

/* Whole-tensor elements from the file (moments: zeros). */
static int init_whole(const run_source *s, const gpt_model *m, int param, size_t start, size_t n,
                      float *w, float *mm, float *vv) {
    copy_or_zero(mm, NULL, n);
    copy_or_zero(vv, NULL, n);
    return w ? init_read_file(s->init, gpt_param_info_at(m, param), start, n, w) : 0;
}

/* The seeded init's slice is m's own (a shard's elements when m is sharded). */
static int init_read(const run_source *s, const gpt_model *m, int param, size_t start, size_t n,
                     float *w, float *mm, float *vv) {
    if (s->init && sharded(m)) return shard_read(s, init_whole, m, param, start, n, w, mm, vv);
    if (s->init) return init_whole(s, m, param, start, n, w, mm, vv);
    copy_or_zero(mm, NULL, n);
    copy_or_zero(vv, NULL, n);
    if (w) gpt_init_random_slice(m, s->seed, param, start, n, w);
    return 0;
}

void run_source_init(run_source *s, const gpt_config *cfg, const char *init, uint64_t seed) {
    memset(s, 0, sizeof *s);
    s->fill = init_fill;
    s->read = init_read;
    s->cfg = *cfg;
    s->init = init;
    s->seed = seed;
}

/* ---- a checkpoint ------------------------------------------------------------------------ */

static int ckpt_whole(const run_source *s, const gpt_model *m, int param, size_t start, size_t n,
                      float *w, float *mm, float *vv);

static int ckpt_fill(const run_source *s, gpt_model *m) {
    if (sharded(m)) return shard_fill(s, ckpt_whole, m);
    for (int i = 0; i < gpt_param_count(m); i++) {
        const gpt_param_info *pi = gpt_param_info_at(m, i);
        if (gpt_holds_layer(m, pi->layer) &&
            ckpt_reader_read(s->ckpt, pi->name, 0, pi->count, m->params + pi->offset, NULL, NULL) < 0)
            return -1;
    }
    return 0;
}

static int ckpt_whole(const run_source *s, const gpt_model *m, int param, size_t start, size_t n,
                      float *w, float *mm, float *vv) {
    if (!s->has_moments) {
        copy_or_zero(mm, NULL, n);
        copy_or_zero(vv, NULL, n);
        mm = vv = NULL;
    }
    return ckpt_reader_read(s->ckpt, gpt_param_info_at(m, param)->name, start, n, w, mm, vv);
}

static int ckpt_read(const run_source *s, const gpt_model *m, int param, size_t start, size_t n,
                     float *w, float *mm, float *vv) {
    if (sharded(m)) return shard_read(s, ckpt_whole, m, param, start, n, w, mm, vv);
    return ckpt_whole(s, m, param, start, n, w, mm, vv);
}

int run_source_checkpoint(run_source *s, const char *dir, const ckpt_manifest *man) {
    memset(s, 0, sizeof *s);
    s->fill = ckpt_fill;
    s->read = ckpt_read;
    s->cfg = man->cfg;
    s->has_moments = man->has_optim;
    s->ckpt_dir = dir;
    s->n_states = man->n_states;
    return ckpt_reader_open(&s->ckpt, dir, man);
}

/* ---- requests kept for later ------------------------------------------------------------- */

static void defer_add(const run_source *s, run_source_req r) {
    run_source_reqs *q = s->reqs;
    if (q->n == q->cap) {
        q->cap = q->cap ? 2 * q->cap : 64;
        run_source_req *v = pt_malloc(sizeof *v * (size_t)q->cap);
        if (q->n) memcpy(v, q->v, sizeof *v * (size_t)q->n);
        free(q->v);
        q->v = v;
    }
    q->v[q->n++] = r;
}

static int defer_fill(const run_source *s, gpt_model *m) {
    for (int i = 0; i < gpt_param_count(m); i++) {
        const gpt_param_info *pi = gpt_param_info_at(m, i);
        if (gpt_holds_layer(m, pi->layer))
            defer_add(s, (run_source_req){ .param = i, .n = pi->count, .w = m->params + pi->offset });
    }
    return 0;
}

/* start and n index the requester's TP shard: its holders are of the same TP rank (run/move.h). */
static int defer_read(const run_source *s, const gpt_model *m, int param, size_t start, size_t n,
                      float *w, float *mm, float *vv) {
    if (w) defer_add(s, (run_source_req){ .param = param, .start = start, .n = n, .w = w });
    if (mm)
        defer_add(s, (run_source_req){ .param = param, .moments = 1, .start = start, .n = n, .m = mm, .v = vv });
    return 0;
}

void run_source_defer(run_source *s, const gpt_config *cfg, run_source_reqs *reqs) {
    memset(s, 0, sizeof *s);
    s->fill = defer_fill;
    s->read = defer_read;
    s->cfg = *cfg;
    s->has_moments = 1;
    s->reqs = reqs;
}

void run_source_free(run_source *s) {
    ckpt_reader_close(s->ckpt);
    s->ckpt = NULL;
}
