/* Loading from a checkpoint folder: a model's layers from whichever chunk file holds them (and
 * their AdamW moments, from the chunk files or the moment shards), single tensors, slices of
 * tensors for a re-sharded model (ckpt_reader), and the one-process helpers. Every field and
 * file is checked first (ckpt_manifest.c). */
#include "ckpt/ckpt_int.h"
#include "model/gpt_io.h"
#include "util/pt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- loading by layer ------------------------------------------------------------------- */

/* Reads one tensor (prefix + name) of chunk file f into dst, checking its shape. */
static int read_tensor(const st_file *f, const char *prefix, const gpt_param_info *pi, float *dst) {
    char name[160];
    int64_t shape[2] = {pi->shape[0], pi->shape[1]};
    snprintf(name, sizeof name, "%s%s", prefix, pi->name);
    return st_read_f32(f, name, dst + pi->offset, pi->ndim, shape);
}

/* Loads layers [first, end) held by chunk c: params into params (may be NULL), moments into
 * opt (may be NULL). */
static int load_from_chunk(const char *dir, int c, const gpt_model *m, float *params,
                           adamw_state *opt, int first, int end) {
    char path[CKPT_PATH_MAX];
    ckpt_chunk_path(path, sizeof path, dir, c);
    st_file *f;
    if (st_open(&f, path) < 0) return -1;
    int rc = 0;
    for (int i = 0; i < gpt_param_count(m) && rc == 0; i++) {
        const gpt_param_info *pi = gpt_param_info_at(m, i);
        if (pi->layer < first || pi->layer >= end) continue;
        if (params) rc = read_tensor(f, "", pi, params);
        if (rc == 0 && opt) rc = read_tensor(f, "m/", pi, opt->m);
        if (rc == 0 && opt) rc = read_tensor(f, "v/", pi, opt->v);
    }
    st_close(f);
    return rc;
}

/* The checks every load makes before reading: same config, a valid range, moments present. */
static int load_check(const char *dir, const ckpt_manifest *man, const gpt_model *m,
                      const adamw_state *opt, int first, int end) {
    const gpt_config *a = &man->cfg, *b = &m->cfg;
    if (a->n_layer != b->n_layer || a->n_head != b->n_head || a->n_embd != b->n_embd ||
        a->vocab_size != b->vocab_size || a->n_positions != b->n_positions)
        return pt_seterr("%s: checkpoint config differs from the model's (n_layer %d/%d, n_embd "
                         "%d/%d, ...)", dir, a->n_layer, b->n_layer, a->n_embd, b->n_embd);
    if (first < 0 || end <= first || end > gpt_num_layers(m))
        return pt_seterr("%s: bad layer range [%d, %d) (model has %d layers)", dir, first, end,
                         gpt_num_layers(m));
    if (opt && !man->has_optim) return pt_seterr("%s: checkpoint holds no optimizer state", dir);
    if (opt && opt->n != m->num_params)
        return pt_seterr("%s: optimizer state holds %zu floats, the model %zu", dir, opt->n,
                         m->num_params);
    return 0;
}

/* The moments of layers [first, end) from a checkpoint whose moments are sharded (--zero 1). */
static int load_shard_moments(const char *dir, const ckpt_manifest *man, const gpt_model *m,
                              adamw_state *opt, int first, int end) {
    ckpt_reader *r;
    if (ckpt_reader_open(&r, dir, man) < 0) return -1;
    int rc = 0;
    for (int i = 0; i < gpt_param_count(m) && rc == 0; i++) {
        const gpt_param_info *pi = gpt_param_info_at(m, i);
        if (pi->layer >= first && pi->layer < end)
            rc = ckpt_reader_read(r, pi->name, 0, pi->count, NULL, opt->m + pi->offset, opt->v + pi->offset);
    }
    ckpt_reader_close(r);
    return rc;
}

/* Loads layers [first, end) from every chunk overlapping them (moments from the shards when the
 * checkpoint has them there). */
static int load_range(const char *dir, const ckpt_manifest *man, const gpt_model *m,
                      float *params, adamw_state *opt, int first, int end) {
    if (load_check(dir, man, m, opt, first, end) < 0) return -1;
    for (int c = 0; c < man->n_chunks; c++) {
        int lo = man->chunks[c].first_layer > first ? man->chunks[c].first_layer : first;
        int hi = man->chunks[c].end_layer < end ? man->chunks[c].end_layer : end;
        if (lo < hi && load_from_chunk(dir, c, m, params, man->zero ? NULL : opt, lo, hi) < 0) return -1;
    }
    return opt && man->zero ? load_shard_moments(dir, man, m, opt, first, end) : 0;
}

int ckpt_load_layers(const char *dir, const ckpt_manifest *man, gpt_model *m, adamw_state *opt,
                     int first_layer, int end_layer) {
    return load_range(dir, man, m, m->params, opt, first_layer, end_layer);
}

/* Copies tensor prefix+name of f (count floats) into dst. */
static int read_named(const st_file *f, const char *prefix, const char *name, size_t count, float *dst) {
    char full[200];
    snprintf(full, sizeof full, "%s%s", prefix, name);
    const st_tensor *t = st_find(f, full);
    if (!t) return pt_seterr("%s: has no tensor '%s'", st_path(f), full);
    if (t->numel != count)
        return pt_seterr("%s: tensor '%s' has %zu elements, expected %zu", st_path(f), full, t->numel, count);
    return st_tensor_f32(f, t, dst);
}

int ckpt_load_tensor(const char *dir, const ckpt_manifest *man, const char *name, size_t count,
                     float *param, float *mom_m, float *mom_v) {
    int layer = gpt_config_param_layer(&man->cfg, name), c = ckpt_chunk_of_layer(man, layer);
    if (layer < 0 || c < 0) return pt_seterr("%s: no parameter '%s' in this checkpoint", dir, name);
    if ((mom_m || mom_v) && !man->has_optim)
        return pt_seterr("%s: checkpoint holds no optimizer state", dir);
    char path[CKPT_PATH_MAX];
    ckpt_chunk_path(path, sizeof path, dir, c);
    st_file *f;
    if (st_open(&f, path) < 0) return -1;
    int rc = param ? read_named(f, "", name, count, param) : 0;
    if (rc == 0 && mom_m) rc = read_named(f, "m/", name, count, mom_m);
    if (rc == 0 && mom_v) rc = read_named(f, "v/", name, count, mom_v);
    st_close(f);
    return rc;
}

/* ---- slices ----------------------------------------------------------------------------- */

/* A slice of a tensor's moments in a shard file: "m/<name>@<start>" and its "v/" twin. */
typedef struct {
    char name[160];
    size_t start, n;
    const st_tensor *m, *v;
} shard_piece;

struct ckpt_reader {
    char dir[CKPT_DIR_MAX];
    ckpt_manifest man;
    st_file *chunk[CKPT_MAX_CHUNKS];   /* [man.n_chunks] */
    st_file **shard;                   /* [man.n_shards] (--zero 1 checkpoints) */
    shard_piece *pc;                   /* [n_pc] every slice of every shard file (room for cap_pc) */
    int n_pc, cap_pc;
};

/* Lists the moment slices of shard file f into r->pc. */
static int reader_index_shard(ckpt_reader *r, const st_file *f) {
    if (r->n_pc + st_count(f) + 1 > r->cap_pc) {   /* doubling: R shard files copy O(R) slices, not O(R^2) */
        int want = r->n_pc + st_count(f) + 1;
        r->cap_pc = want > 2 * r->cap_pc ? want : 2 * r->cap_pc;
        r->pc = pt_realloc(r->pc, sizeof *r->pc * (size_t)r->cap_pc);
    }
    for (int i = 0; i < st_count(f); i++) {
        const st_tensor *t = st_at(f, i);
        shard_piece *p = &r->pc[r->n_pc];
        const char *at = strrchr(t->name, '@');
        char vname[200];
        if (strncmp(t->name, "m/", 2)) continue;
        if (!at || at - t->name - 2 >= (long)sizeof p->name || sscanf(at + 1, "%zu", &p->start) != 1 ||
            t->dtype != ST_F32)
            return pt_seterr("%s: tensor '%s' is not a moment slice 'm/<name>@<start>' of F32", st_path(f), t->name);
        snprintf(p->name, sizeof p->name, "%.*s", (int)(at - t->name - 2), t->name + 2);
        snprintf(vname, sizeof vname, "v/%s", t->name + 2);
        p->m = t;
        p->v = st_find(f, vname);
        p->n = t->numel;
        if (!p->v || p->v->numel != p->n || p->v->dtype != ST_F32)
            return pt_seterr("%s: slice '%s' has no matching '%s'", st_path(f), t->name, vname);
        r->n_pc++;
    }
    return 0;
}

int ckpt_reader_open(ckpt_reader **out, const char *dir, const ckpt_manifest *man) {
    ckpt_reader *r = pt_calloc(1, sizeof *r);
    char path[CKPT_PATH_MAX];
    *out = NULL;
    snprintf(r->dir, sizeof r->dir, "%s", dir);
    r->man = *man;
    r->shard = pt_calloc((size_t)man->n_shards + 1, sizeof *r->shard);
    for (int c = 0; c < man->n_chunks; c++) {
        ckpt_chunk_path(path, sizeof path, dir, c);
        if (st_open(&r->chunk[c], path) < 0) goto close_reader;
    }
    for (int k = 0; man->zero && k < man->n_shards; k++) {
        ckpt_shard_path(path, sizeof path, dir, k);
        if (st_open(&r->shard[k], path) < 0 || reader_index_shard(r, r->shard[k]) < 0) goto close_reader;
    }
    *out = r;
    return 0;
close_reader:
    ckpt_reader_close(r);
    return -1;
}

void ckpt_reader_close(ckpt_reader *r) {
    if (!r) return;
    for (int c = 0; c < r->man.n_chunks; c++) st_close(r->chunk[c]);
    for (int k = 0; k < r->man.n_shards; k++) st_close(r->shard[k]);
    free(r->shard);
    free(r->pc);
    free(r);
}

/* Moments [start, start+n) of tensor name from the shard slices that overlap it; every element
 * must be found. */
static int reader_shard_moments(const ckpt_reader *r, const char *name, size_t start, size_t n,
                                float *mm, float *vv) {
    size_t got = 0, end = start + n;
    for (int i = 0; i < r->n_pc; i++) {
        const shard_piece *p = &r->pc[i];
        size_t a = p->start > start ? p->start : start, z = p->start + p->n < end ? p->start + p->n : end;
        if (a >= z || strcmp(p->name, name)) continue;
        if (mm) memcpy(mm + (a - start), (const float *)p->m->data + (a - p->start), (z - a) * sizeof *mm);
        if (vv) memcpy(vv + (a - start), (const float *)p->v->data + (a - p->start), (z - a) * sizeof *vv);
        got += z - a;
    }
    if (got != n)
        return pt_seterr("%s: the moments of '%s' [%zu, %zu) are not all in its optim-*.safetensors "
                         "files (%zu of %zu elements)", r->dir, name, start, end, got, n);
    return 0;
}

/* Elements [start, start+n) of tensor prefix+name of f into dst (F32 as our writer makes it). */
static int read_slice(const st_file *f, const char *prefix, const char *name, size_t start,
                      size_t n, float *dst) {
    char full[200];
    snprintf(full, sizeof full, "%s%s", prefix, name);
    const st_tensor *t = st_find(f, full);
    if (!t) return pt_seterr("%s: has no tensor '%s'", st_path(f), full);
    if (t->dtype != ST_F32)
        return pt_seterr("%s: tensor '%s' is %s, checkpoints hold F32", st_path(f), full, st_dtype_name(t->dtype));
    if (start > t->numel || n > t->numel - start)
        return pt_seterr("%s: tensor '%s' has %zu elements, asked for [%zu, %zu)", st_path(f), full,
                         t->numel, start, start + n);
    if (n) memcpy(dst, (const float *)t->data + start, n * sizeof *dst);
    return 0;
}

int ckpt_reader_read(const ckpt_reader *r, const char *name, size_t start, size_t n, float *w,
                     float *mm, float *vv) {
    int layer = gpt_config_param_layer(&r->man.cfg, name), c = ckpt_chunk_of_layer(&r->man, layer);
    if (layer < 0 || c < 0) return pt_seterr("%s: no parameter '%s' in this checkpoint", r->dir, name);
    if ((mm || vv) && !r->man.has_optim) return pt_seterr("%s: checkpoint holds no optimizer state", r->dir);
    const st_file *f = r->chunk[c];
    int rc = w ? read_slice(f, "", name, start, n, w) : 0;
    if (rc == 0 && (mm || vv) && r->man.zero) return reader_shard_moments(r, name, start, n, mm, vv);
    if (rc == 0 && mm) rc = read_slice(f, "m/", name, start, n, mm);
    if (rc == 0 && vv) rc = read_slice(f, "v/", name, start, n, vv);
    return rc;
}

/* ---- one process ------------------------------------------------------------------------ */

int ckpt_load_params(gpt_model *m, const char *dir, const ckpt_manifest *man) {
    return load_range(dir, man, m, m->params, NULL, 0, gpt_num_layers(m));
}

int ckpt_load_optim(adamw_state *s, const gpt_model *m, const char *dir) {
    ckpt_manifest *man = pt_malloc(sizeof *man);
    int rc = ckpt_manifest_read(man, dir, 0);
    if (rc == 0) rc = load_range(dir, man, m, NULL, s, 0, gpt_num_layers(m));
    free(man);
    return rc;
}

int ckpt_export_params(const char *dir, const char *path) {
    ckpt_manifest *man = pt_malloc(sizeof *man);
    gpt_model m;
    memset(&m, 0, sizeof m);
    int rc = ckpt_read_manifest(man, dir);
    if (rc == 0) rc = gpt_init(&m, &man->cfg);
    if (rc == 0) rc = ckpt_load_params(&m, dir, man);
    if (rc == 0) rc = gpt_save_safetensors(&m, path);
    gpt_free(&m);
    free(man);
    return rc;
}

