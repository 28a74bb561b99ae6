/* Chunk files filled in place by several writers (tensor parallelism): created with every
 * tensor's full size, each rank writes its shard's runs where they belong. */
#include "ckpt/ckpt_int.h"
#include "io/io.h"
#include "util/pt.h"
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- chunk files filled in place by several writers (tensor parallelism) ------------------
 * The file's layout depends only on names, shapes and dtypes (ckpt_chunk_writer with no data), so
 * every writer computes the same offsets; each pwrites its shard's elements there. */

int ckpt_chunk_create(const char *tmpdir, int chunk, int first_layer, int end_layer,
                      const gpt_model *m, int has_optim) {
    char path[CKPT_PATH_MAX];
    ckpt_chunk_path(path, sizeof path, tmpdir, chunk);
    st_writer *w = ckpt_chunk_writer(chunk, first_layer, end_layer, m, has_optim, NULL, NULL, NULL);
    int rc = w ? st_create(w, path) : -1;
    st_writer_free(w);
    return rc < 0 ? pt_adderr("checkpoint chunk %d: ", chunk) : 0;
}

/* One chunk file open for pwrite, and where each tensor's data starts in it. */
typedef struct {
    int fd;                     /* -1: not opened yet */
    size_t *at;                 /* [3 * n_info] file offset of (what, param) (params, m/, v/) */
} placer_file;

struct ckpt_placer {
    char dir[CKPT_DIR_MAX];
    ckpt_manifest man;          /* the layout: chunk ranges */
    const gpt_model *m;         /* the tensor table (any model of the config) */
    int has_optim;
    placer_file f[CKPT_MAX_CHUNKS];
    ckpt_place_stats st;
};

int ckpt_placer_open(ckpt_placer **out, const char *tmpdir, const ckpt_manifest *man,
                     const gpt_model *m, int has_optim) {
    ckpt_placer *p = pt_calloc(1, sizeof *p);
    snprintf(p->dir, sizeof p->dir, "%s", tmpdir);
    p->man = *man;
    p->m = m;
    p->has_optim = has_optim;
    for (int c = 0; c < CKPT_MAX_CHUNKS; c++) p->f[c].fd = -1;
    *out = p;
    return 0;
}

/* Opens chunk c (made by ckpt_chunk_create) and lays out its offsets, once. */
static int placer_file_open(ckpt_placer *p, int c) {
    placer_file *pf = &p->f[c];
    if (pf->fd >= 0) return 0;
    char path[CKPT_PATH_MAX];
    const ckpt_chunk *ch = &p->man.chunks[c];
    ckpt_chunk_path(path, sizeof path, p->dir, c);
    st_writer *w = ckpt_chunk_writer(c, ch->first_layer, ch->end_layer, p->m, p->has_optim, NULL, NULL, NULL);
    if (!w) return pt_adderr("checkpoint chunk %d: ", c);
    int n = st_writer_count(w), n_info = gpt_param_count(p->m), k = 0;
    size_t *off = pt_malloc(sizeof *off * (size_t)(n + 1)), hdr;
    st_writer_layout(w, off, &hdr);
    st_writer_free(w);
    pf->at = pt_malloc(sizeof *pf->at * (size_t)(3 * n_info));
    for (int what = 0; what < (p->has_optim ? 3 : 1); what++)   /* ckpt_chunk_writer's order */
        for (int i = 0; i < n_info; i++) {
            int layer = gpt_param_info_at(p->m, i)->layer;
            if (layer >= ch->first_layer && layer < ch->end_layer) pf->at[what * n_info + i] = off[k++];
        }
    free(off);
    size_t buf = hdr > sizeof *off * (size_t)(n + 1) ? hdr : sizeof *off * (size_t)(n + 1);
    if (buf > p->st.max_alloc) p->st.max_alloc = buf;
    pf->fd = open(path, O_WRONLY);
    if (pf->fd < 0)
        return pt_seterr("%s: cannot open for writing: %s (its creator writes it before the others "
                         "write into it)", path, strerror(errno));
    p->st.files++;
    return 0;
}

/* pwrites n floats at whole element w of the tensor starting at byte base. */
static int placer_write(ckpt_placer *p, int c, size_t base, size_t w, const float *src, size_t n) {
    char path[CKPT_PATH_MAX];
    if (n == 0) return 0;
    p->st.writes++;
    p->st.bytes += n * sizeof *src;
    if (io_pwrite_all(p->f[c].fd, src, n * sizeof *src, base + w * sizeof *src, "") == 0) {
        CRASH_POINT("place", c);
        return 0;
    }
    ckpt_chunk_path(path, sizeof path, p->dir, c);
    return pt_adderr("%s", path);
}

int ckpt_placer_put(ckpt_placer *p, int what, int param, int rank, int size, size_t start,
                    size_t n, const float *src) {
    const gpt_param_info *pi = gpt_param_info_at(p->m, param);
    int c = ckpt_chunk_of_layer(&p->man, pi->layer);
    if (c < 0 || what < 0 || what > 2 || (what && !p->has_optim) ||
        start + n > gpt_shard_count(&p->m->cfg, pi, size))
        return pt_seterr("checkpoint: cannot place %s [%zu, %zu) of TP rank %d of %d (chunk %d, "
                         "part %d)", pi->name, start, start + n, rank, size, c, what);
    if (pi->split == GPT_SPLIT_NONE && rank != 0) return 0;   /* replicated: rank 0's copy */
    if (placer_file_open(p, c) < 0) return -1;
    size_t base = p->f[c].at[what * gpt_param_count(p->m) + param], run_w = 0, run_n = 0, w, len;
    const float *run_src = src;
    for (size_t k = start; k < start + n; k += len) {   /* coalesce runs adjacent in the file */
        len = gpt_shard_run(pi, rank, size, k, &w);
        if (len > start + n - k) len = start + n - k;
        if (w != GPT_SHARD_PAD && run_n && run_w + run_n == w) { run_n += len; continue; }
        if (placer_write(p, c, base, run_w, run_src, run_n) < 0) return -1;
        run_n = w == GPT_SHARD_PAD ? 0 : len;
        run_w = w;
        run_src = src + (k - start);
    }
    return placer_write(p, c, base, run_w, run_src, run_n);
}

int ckpt_placer_put_slice(ckpt_placer *p, const ckpt_slice *sl, int rank, int size) {
    for (int i = 0; i < gpt_param_count(p->m); i++)
        if (!strcmp(gpt_param_info_at(p->m, i)->name, sl->name))
            return ckpt_placer_put(p, 1, i, rank, size, sl->start, sl->n, sl->m) < 0 ? -1
                 : ckpt_placer_put(p, 2, i, rank, size, sl->start, sl->n, sl->v);
    return pt_seterr("checkpoint: no tensor '%s' to place moments of", sl->name);
}

int ckpt_placer_close(ckpt_placer *p, ckpt_place_stats *stats) {
    int rc = 0;
    char path[CKPT_PATH_MAX];
    if (!p) return 0;
    for (int c = 0; c < CKPT_MAX_CHUNKS; c++) {
        if (p->f[c].fd < 0) continue;
        ckpt_chunk_path(path, sizeof path, p->dir, c);
        if (fsync(p->f[c].fd) < 0 && rc == 0) rc = pt_seterr("%s: fsync: %s", path, strerror(errno));
        if (close(p->f[c].fd) < 0 && rc == 0) rc = pt_seterr("%s: close: %s", path, strerror(errno));
        free(p->f[c].at);
    }
    if (stats) *stats = p->st;
    free(p);
    return rc;
}

/* Reads an integer metadata value of an open chunk file; -1 if missing or malformed. */
