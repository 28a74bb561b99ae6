/* Snapshots' slots (snapshot_int.h): a rank keeps keep + 1 generation folders whose chunk files
 * are created and mapped once, then refilled in place: the compute thread copies its parameters
 * and moments straight into the mapped file (one copy, no page faults after the first
 * generation: tmpfs pages stay with the file), summing each piece right behind its copy, and
 * the writer thread only writes snap.json and renames. A slot's folder is renamed, never rewritten under a generation's name, so a
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

/* Appends a run (merged with the one before when both sides continue it); *cap grows f->run. */
static void run_add(snap_file *f, int *cap, snap_run r) {
    snap_run *last = f->n_run ? &f->run[f->n_run - 1] : NULL;
    if (last && last->what == r.what && last->at + last->bytes == r.at &&
        (r.what < 3 ? last->src + last->bytes / sizeof(float) == r.src
                    : last->src == r.src && last->sub + last->bytes / sizeof(float) == r.sub)) {
        last->bytes += r.bytes;
        return;
    }
    if (f->n_run == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        f->run = pt_realloc(f->run, sizeof *f->run * (size_t)*cap);
    }
    f->run[f->n_run++] = r;
}

/* Where each tensor of the chunk goes: ckpt_chunk_writer's order (parameters, then m/ and v/
 * when the file holds moments). Under tensor parallelism (f->tp > 1) the file has the whole
 * tensors' layout and this rank's shard goes where it belongs, run by run (gpt_shard_run; a
 * replicated tensor from TP rank 0 only): every byte of the file has one writer among the TP
 * ranks, the others' bytes stay zero, so the restore joins the TP ranks' files by OR. */
static void chunk_runs(snap_file *f, const gpt_model *m, const size_t *off, int n_what, int *cap_out) {
    int n_info = gpt_param_count(m), k = 0, cap = 0;
    for (int what = 0; what < n_what; what++)
        for (int i = 0; i < n_info; i++) {
            const gpt_param_info *pi = gpt_param_info_at(m, i);
            if (pi->layer < f->first || pi->layer >= f->end) continue;
            size_t at = off[k++], len, w;
            if (f->tp <= 1) {
                run_add(f, &cap, (snap_run){ .at = at, .src = pi->offset, .bytes = pi->count * sizeof(float), .what = what });
                continue;
            }
            if (pi->split == GPT_SPLIT_NONE && f->tp_rank != 0) continue;
            for (size_t e = 0; e < pi->count; e += len) {
                len = gpt_shard_run(pi, f->tp_rank, f->tp, e, &w);
                if (len > pi->count - e) len = pi->count - e;
                if (w != GPT_SHARD_PAD)
                    run_add(f, &cap, (snap_run){ .at = at + w * sizeof(float), .src = pi->offset + e,
                                                 .bytes = len * sizeof(float), .what = what });
            }
        }
    if (cap_out) *cap_out = cap;
}

/* The m/ and v/ runs of slices x[0..n) (TP rank f->tp_rank's shard indices) that fall in f's
 * chunk, at their places; off: the file's tensor offsets (ckpt_chunk_writer's order). */
static void slice_runs(snap_file *f, const gpt_model *m, const size_t *off, const ckpt_slice *x, int n, int *cap) {
    int n_info = gpt_param_count(m), in = 0, *j = pt_malloc(sizeof *j * (size_t)n_info);
    for (int i = 0; i < n_info; i++) {   /* param i's index among the chunk's tensors */
        int l = gpt_param_info_at(m, i)->layer;
        j[i] = l >= f->first && l < f->end ? in++ : -1;
    }
    for (int s = 0; s < n; s++) {
        int i = 0;
        while (i < n_info && strcmp(gpt_param_info_at(m, i)->name, x[s].name)) i++;
        if (i == n_info || j[i] < 0) continue;   /* another chunk's */
        const gpt_param_info *pi = gpt_param_info_at(m, i);
        if (pi->split == GPT_SPLIT_NONE && f->tp_rank != 0) continue;   /* TP rank 0's copy */
        size_t len, w;
        for (size_t e = x[s].start; e < x[s].start + x[s].n; e += len) {
            len = gpt_shard_run(pi, f->tp_rank, f->tp, e, &w);
            if (len > x[s].start + x[s].n - e) len = x[s].start + x[s].n - e;
            for (int what = 1; what < 3 && w != GPT_SHARD_PAD; what++)
                run_add(f, cap, (snap_run){ .at = off[what * in + j[i]] + w * sizeof(float), .src = (size_t)s,
                                            .sub = e - x[s].start, .bytes = len * sizeof(float), .what = what + 2 });
        }
    }
    free(j);
}

/* Creates file `path` as w lays it out (reserved tensors: zeros) and maps it into f; off[] (w's
 * count entries) gets each tensor's offset. */
static int file_create(snap_file *f, const char *path, st_writer *w, size_t *off) {
    if (st_create(w, path) < 0) return pt_adderr("snapshot: ");
    f->bytes = st_writer_layout(w, off, NULL);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return pt_seterr("snapshot %s: cannot open for writing: %s", path, strerror(errno));
    void *p = mmap(NULL, f->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return pt_seterr("snapshot %s: cannot map %zu bytes: %s", path, f->bytes, strerror(errno));
    f->map = p;
    return 0;
}

/* Piece k of sl: kept when its key matches *want, else made again by make(); 0 or -1. */
static snap_file *slot_piece(snap_slot *sl, int k, const snap_file *want) {
    snap_file *f = &sl->f[k];
    if (k < sl->n_f && f->map && f->kind == want->kind && f->chunk == want->chunk && f->first == want->first &&
        f->end == want->end && f->has_optim == want->has_optim && f->n_held == want->n_held && f->sig == want->sig &&
        f->tp == want->tp && f->tp_rank == want->tp_rank && f->replica == want->replica)
        return f;
    file_unmap(f);
    *f = *want;
    if (k >= sl->n_f) sl->n_f = k + 1;
    return NULL;
}

#define COPY_PIECE 16384   /* bytes copied before they are summed: well inside the L1 cache */

/* Whether f's runs are in file order with none overlapping (a fill can then sum the file in
 * order as it copies); once, when the runs are made. */
static void runs_check_order(snap_file *f) {
    size_t end = 0;
    f->ordered = 1;
    for (int i = 0; i < f->n_run; i++) {
        if (f->run[i].at < end) f->ordered = 0;
        end = f->run[i].at + f->run[i].bytes;
    }
}

/* Where run r's bytes come from (ctx: the fill's sources). */
typedef const void *(*run_src_fn)(const snap_run *r, const void *ctx);

/* Copies each run of f from src(run) into the mapped file and, when its runs are in order, sums
 * the whole file on the way (the bytes between runs as they are, each piece of a run right
 * after its copy, while it is in the cache): the writer then has no pass of its own. */
static void copy_runs(snap_file *f, run_src_fn src, const void *ctx) {
    f->summed = 0;
    if (!f->ordered) {
        for (int i = 0; i < f->n_run; i++) memcpy(f->map + f->run[i].at, src(&f->run[i], ctx), f->run[i].bytes);
        return;
    }
    snap_sum s;
    size_t pos = 0;
    snap_sum_init(&s);
    for (int i = 0; i < f->n_run; i++) {
        const snap_run *r = &f->run[i];
        const unsigned char *from = src(r, ctx);
        if (r->at > pos) snap_sum_add(&s, f->map + pos, r->at - pos);
        for (size_t o = 0, w; o < r->bytes; o += w) {
            w = r->bytes - o < COPY_PIECE ? r->bytes - o : COPY_PIECE;
            memcpy(f->map + r->at + o, from + o, w);
            snap_sum_add(&s, f->map + r->at + o, w);
        }
        pos = r->at + r->bytes;
    }
    if (pos < f->bytes) snap_sum_add(&s, f->map + pos, f->bytes - pos);
    f->sum = snap_sum_end(&s);
    f->summed = 1;
}

/* snap_slot_fill's sources: the parameters, m and v. */
static const void *chunk_src(const snap_run *r, const void *ctx) {
    const float *const *src = ctx;
    return src[r->what] + r->src;
}

int snap_slot_fill(snap_slot *sl, int k, int chunk, int first, int end, const gpt_model *m,
                   const adamw_state *opt, int tp_rank, int tp) {
    snap_file want = { .kind = SNAP_FILE_CHUNK, .chunk = chunk, .first = first, .end = end,
                       .has_optim = opt != NULL, .n_held = m->n_held, .tp_rank = tp_rank, .tp = tp,
                       .replica = -1 };
    snap_file *f = slot_piece(sl, k, &want);
    if (!f) {
        char path[CKPT_PATH_MAX];
        f = &sl->f[k];
        ckpt_chunk_path(path, sizeof path, sl->dir, chunk);
        st_writer *w = ckpt_chunk_writer(chunk, first, end, m, f->has_optim, NULL, NULL, NULL);
        size_t *off = w ? pt_malloc(sizeof *off * (size_t)(st_writer_count(w) + 1)) : NULL;
        int rc = w ? file_create(f, path, w, off) : -1;
        if (rc == 0) chunk_runs(f, m, off, f->has_optim ? 3 : 1, NULL);
        free(off);
        st_writer_free(w);
        if (rc < 0) { file_unmap(f); return -1; }
        runs_check_order(f);
    }
    const float *src[3] = { m->params, opt ? opt->m : NULL, opt ? opt->v : NULL };
    copy_runs(f, chunk_src, src);
    return 0;
}

static uint64_t slices_sig(const ckpt_slice *x, int n);

/* snap_slot_fill_slices' sources (ctx: the model, the slices): parameters, or a slice's m or v. */
static const void *slices_src(const snap_run *r, const void *ctx) {
    const gpt_model *m = ((const void *const *)ctx)[0];
    const ckpt_slice *x = ((const void *const *)ctx)[1];
    return r->what == 0 ? m->params + r->src : (r->what == 3 ? x[r->src].m : x[r->src].v) + r->sub;
}

/* snap_slot_fill_shard's sources (ctx: the slices): a slice's m (what 0) or v (1). */
static const void *shard_src(const snap_run *r, const void *ctx) {
    const ckpt_slice *c = (const ckpt_slice *)ctx + r->src;
    return r->what ? c->v : c->m;
}

int snap_slot_fill_slices(snap_slot *sl, int k, int chunk, int first, int end, const gpt_model *m,
                          int with_params, const ckpt_slice *x, int n, int tp_rank, int tp, int replica) {
    snap_file want = { .kind = SNAP_FILE_CHUNK, .chunk = chunk, .first = first, .end = end, .has_optim = 1,
                       .n_held = with_params ? m->n_held : 0, .tp_rank = tp_rank, .tp = tp, .replica = replica,
                       .sig = slices_sig(x, n) };
    snap_file *f = slot_piece(sl, k, &want);
    if (!f) {
        char path[CKPT_PATH_MAX];
        int cap = 0;
        f = &sl->f[k];
        ckpt_chunk_path(path, sizeof path, sl->dir, chunk);
        st_writer *w = ckpt_chunk_writer(chunk, first, end, m, 1, NULL, NULL, NULL);
        size_t *off = w ? pt_malloc(sizeof *off * (size_t)(st_writer_count(w) + 1)) : NULL;
        int rc = w ? file_create(f, path, w, off) : -1;
        if (rc == 0) {
            if (with_params) chunk_runs(f, m, off, 1, &cap);   /* the parameters; the moments from the slices */
            slice_runs(f, m, off, x, n, &cap);
        }
        free(off);
        st_writer_free(w);
        if (rc < 0) { file_unmap(f); return -1; }
        runs_check_order(f);
    }
    const void *ctx[2] = { m, x };
    copy_runs(f, slices_src, ctx);
    return 0;
}

/* A key of the slices' names, starts and lengths: a shard file is reused only for the same. */
static uint64_t slices_sig(const ckpt_slice *x, int n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    for (int i = 0; i < n; i++) {
        for (const char *c = x[i].name; *c; c++) h = (h ^ (unsigned char)*c) * 0x100000001b3ULL;
        h = (h ^ x[i].start) * 0x100000001b3ULL;
        h = (h ^ x[i].n) * 0x100000001b3ULL;
    }
    return h ^ (uint64_t)n;
}

int snap_slot_fill_shard(snap_slot *sl, int k, int rank, const ckpt_slice *x, int n) {
    snap_file want = { .kind = SNAP_FILE_SHARD, .chunk = rank, .sig = slices_sig(x, n), .replica = -1 };
    snap_file *f = slot_piece(sl, k, &want);
    if (!f) {
        char path[CKPT_PATH_MAX];
        f = &sl->f[k];
        ckpt_shard_path(path, sizeof path, sl->dir, rank);
        st_writer *w = ckpt_shard_writer(rank, x, n, 1);
        size_t *off = w ? pt_malloc(sizeof *off * (size_t)(2 * n + 1)) : NULL;
        int rc = w ? file_create(f, path, w, off) : -1;
        if (rc == 0) {   /* runs in ckpt_shard_writer's order; src: the slice, what: m or v */
            f->run = pt_malloc(sizeof *f->run * (size_t)(2 * n + 1));
            for (int i = 0; i < 2 * n; i++)
                f->run[i] = (snap_run){ .at = off[i], .src = (size_t)(i / 2), .what = i % 2,
                                        .bytes = x[i / 2].n * sizeof(float) };
            f->n_run = 2 * n;
        }
        free(off);
        st_writer_free(w);
        if (rc < 0) { file_unmap(f); return -1; }
        runs_check_order(f);
    }
    copy_runs(f, shard_src, x);
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
    if (src->kind == SNAP_FILE_SHARD) ckpt_shard_path(path, sizeof path, dir, src->chunk);
    else ckpt_chunk_path(path, sizeof path, dir, src->chunk);
    *f = *src;
    f->map = NULL;
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
    f->summed = 0;   /* its fill sums it */
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
    ckpt_state_unmap(&sl->st);
}
