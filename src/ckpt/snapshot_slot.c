/* Snapshots' slots (snapshot_int.h): a rank keeps keep + 1 generation folders whose chunk files
 * are created and mapped once, then refilled in place: the compute thread copies its parameters
 * and moments straight into the mapped file (one copy, no page faults after the first
 * generation: tmpfs pages stay with the file), and the writer thread only sums the bytes and
 * writes snap.json. A slot's folder is renamed, never rewritten under a generation's name, so a
 * folder named "gen-<step>" is always whole. Not here: the writer thread (snapshot.c). */
#include "ckpt/snapshot_int.h"
#include "ckpt/ckpt_int.h"
#include "io/io.h"
#include "util/pt.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static void free_name(const snap_slot *sl, const char *rank_dir, int idx, char *out, size_t n) {
    (void)sl;
    snprintf(out, n, "%s/gen-free-%d.tmp.%ld", rank_dir, idx, (long)getpid());
}

int snap_slot_prepare(snap_slot *sl, const char *rank_dir, int idx) {
    char fresh[1200];
    free_name(sl, rank_dir, idx, fresh, sizeof fresh);
    sl->idx = idx;
    if (sl->step > 0) {   /* the oldest whole generation: no longer one from here on */
        if (rename(sl->dir, fresh) < 0)
            return pt_seterr("snapshot %s: cannot rename to %s: %s", sl->dir, fresh, strerror(errno));
        snprintf(sl->dir, sizeof sl->dir, "%s", fresh);
        sl->step = 0;
        char j[1300];
        snprintf(j, sizeof j, "%s/snap.json", fresh);
        unlink(j);
        return 0;
    }
    if (sl->dir[0]) return 0;   /* a free folder already (a generation that failed) */
    if (mkdir(fresh, 0755) < 0 && errno != EEXIST)
        return pt_seterr("snapshot %s: cannot create: %s", fresh, strerror(errno));
    snprintf(sl->dir, sizeof sl->dir, "%s", fresh);
    return 0;
}

static void file_unmap(snap_file *f) {
    if (f->map) munmap(f->map, f->bytes);
    free(f->run);
    memset(f, 0, sizeof *f);
}

/* Where each tensor of the chunk goes: ckpt_chunk_writer's order (parameters, m/, v/). */
static void file_runs(snap_file *f, const gpt_model *m, const size_t *off) {
    int n_info = gpt_param_count(m), k = 0;
    f->run = pt_malloc(sizeof *f->run * (size_t)(3 * n_info));
    for (int what = 0; what < 3; what++)
        for (int i = 0; i < n_info; i++) {
            const gpt_param_info *pi = gpt_param_info_at(m, i);
            if (pi->layer < f->first || pi->layer >= f->end) continue;
            f->run[k] = (snap_run){ .at = off[k], .src = pi->offset, .bytes = pi->count * sizeof(float),
                                    .what = what };
            k++;
        }
    f->n_run = k;
}

/* Creates chunk file f (laid out for m) in folder dir and maps it. */
static int file_create(snap_file *f, const char *dir, const gpt_model *m) {
    char path[CKPT_PATH_MAX];
    ckpt_chunk_path(path, sizeof path, dir, f->chunk);
    st_writer *w = ckpt_chunk_writer(f->chunk, f->first, f->end, m, 1, NULL, NULL, NULL);
    if (!w || st_create(w, path) < 0) { st_writer_free(w); return pt_adderr("snapshot: "); }
    int n = st_writer_count(w);
    size_t *off = pt_malloc(sizeof *off * (size_t)(n + 1));
    f->bytes = st_writer_layout(w, off, NULL);
    st_writer_free(w);
    file_runs(f, m, off);
    free(off);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return pt_seterr("snapshot %s: cannot open for writing: %s", path, strerror(errno));
    void *p = mmap(NULL, f->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return pt_seterr("snapshot %s: cannot map %zu bytes: %s", path, f->bytes, strerror(errno));
    f->map = p;
    return 0;
}

int snap_slot_fill(snap_slot *sl, int k, int chunk, int first, int end, const gpt_model *m,
                   const adamw_state *opt) {
    snap_file *f = &sl->f[k];
    if (k >= sl->n_f || !f->map || f->chunk != chunk || f->first != first || f->end != end ||
        f->n_held != m->n_held) {
        file_unmap(f);
        *f = (snap_file){ .chunk = chunk, .first = first, .end = end, .n_held = m->n_held };
        if (file_create(f, sl->dir, m) < 0) { file_unmap(f); return -1; }
        if (k >= sl->n_f) sl->n_f = k + 1;
    }
    const float *src[3] = { m->params, opt->m, opt->v };
    for (int i = 0; i < f->n_run; i++)
        memcpy(f->map + f->run[i].at, src[f->run[i].what] + f->run[i].src, f->run[i].bytes);
    return 0;
}

int snap_slot_install(snap_slot *sl, const char *rank_dir, long step) {
    char fin[1200];
    snprintf(fin, sizeof fin, "%s/gen-%ld", rank_dir, step);
    snap_remove_dir(fin);   /* the same step from an earlier process (a restart): the newer one wins */
    if (rename(sl->dir, fin) < 0)
        return pt_seterr("snapshot %s: cannot rename to %s: %s", sl->dir, fin, strerror(errno));
    snprintf(sl->dir, sizeof sl->dir, "%s", fin);
    sl->step = step;
    return 0;
}

/* File f of dst made as a copy of src's (same chunk, same bytes: header and a generation's data,
 * overwritten at the next fill) in dst's folder, mapped: its pages are in place from here on. */
static int file_clone(snap_file *f, const snap_file *src, const char *dir) {
    char path[CKPT_PATH_MAX];
    ckpt_chunk_path(path, sizeof path, dir, src->chunk);
    *f = (snap_file){ .chunk = src->chunk, .first = src->first, .end = src->end, .n_held = src->n_held,
                      .n_run = src->n_run };
    f->run = pt_malloc(sizeof *f->run * (size_t)(src->n_run ? src->n_run : 1));
    memcpy(f->run, src->run, sizeof *f->run * (size_t)src->n_run);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return pt_seterr("snapshot %s: cannot create: %s", path, strerror(errno));
    void *p = MAP_FAILED;
    if (ftruncate(fd, (off_t)src->bytes) == 0)
        p = mmap(NULL, src->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return pt_seterr("snapshot %s: cannot size or map %zu bytes: %s", path, src->bytes, strerror(errno));
    f->map = p;
    f->bytes = src->bytes;
    memcpy(f->map, src->map, f->bytes);
    return 0;
}

int snap_slot_clone(snap_slot *dst, const snap_slot *src, const char *rank_dir, int idx) {
    if (dst->n_f || dst->step > 0) return 0;   /* in use already */
    if (snap_slot_prepare(dst, rank_dir, idx) < 0) return -1;
    for (int k = 0; k < src->n_f; k++) {
        if (file_clone(&dst->f[k], src->f + k, dst->dir) < 0) {
            snap_slot_free(dst);
            return -1;
        }
        dst->n_f = k + 1;
    }
    return 0;
}

void snap_slot_free(snap_slot *sl) {
    for (int k = 0; k < CKPT_SNAP_PIECES; k++) file_unmap(&sl->f[k]);
    sl->n_f = 0;
}
