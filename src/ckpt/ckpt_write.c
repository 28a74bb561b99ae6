/* Saving a checkpoint: a temporary folder, chunk and moment-shard files written by any rank,
 * then the commit (files checked, checksums into the manifest, an atomic install under the
 * real name). Not here: files filled in place by several writers (ckpt_place.c), reading. */
#include "ckpt/ckpt_int.h"
#include "ckpt/ckpt_state.h"
#include "io/io.h"
#include "util/pt.h"
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- save ------------------------------------------------------------------------------- */

int ckpt_tmpdir_name(const char *dir, long pid, char *tmpdir, size_t n) {
    char d[CKPT_DIR_MAX];
    if (ckpt_trim_dir(d, sizeof d, dir) < 0) return -1;
    int len = snprintf(tmpdir, n, "%s.tmp.%ld", d, pid);
    if (len < 0 || (size_t)len >= n || len >= CKPT_DIR_MAX)
        return pt_seterr("%s: checkpoint path too long", dir);
    return 0;
}

/* The folder that holds dir ("." for a bare name), into out[n]. */
static void parent_dir(const char *dir, char *out, size_t n) {
    char d[CKPT_DIR_MAX];
    const char *slash;
    if (ckpt_trim_dir(d, sizeof d, dir) < 0 || !(slash = strrchr(d, '/'))) { snprintf(out, n, "."); return; }
    snprintf(out, n, "%.*s", slash == d ? 1 : (int)(slash - d), d);
}

int ckpt_begin(const char *dir, char *tmpdir, size_t n) {
    char root[CKPT_DIR_MAX];
    if (ckpt_tmpdir_name(dir, (long)getpid(), tmpdir, n) < 0) return -1;
    parent_dir(dir, root, sizeof root);
    ckpt_clean_stale(root);   /* a crashed save's leftovers */
    ckpt_abandon(tmpdir);
    if (pt_make_parents(tmpdir) < 0) return -1;
    if (mkdir(tmpdir, 0755) < 0)
        return pt_seterr("%s: cannot create folder: %s", tmpdir, strerror(errno));
    return 0;
}

/* Adds layers [first, end) of buf (laid out like m->params) to w, names prefixed; buf NULL:
 * reserved (no data: written in place later, see ckpt_placer). */
static int add_layers(st_writer *w, const gpt_model *m, const float *buf, const char *prefix,
                      int first, int end) {
    char name[160];
    for (int i = 0; i < gpt_param_count(m); i++) {
        const gpt_param_info *pi = gpt_param_info_at(m, i);
        if (pi->layer < first || pi->layer >= end) continue;
        int64_t shape[2] = {pi->shape[0], pi->shape[1]};
        snprintf(name, sizeof name, "%s%s", prefix, pi->name);
        if ((buf ? st_writer_add(w, name, ST_F32, pi->ndim, shape, buf + pi->offset)
                 : st_writer_reserve(w, name, ST_F32, pi->ndim, shape)) < 0) return -1;
    }
    return 0;
}

/* Metadata that lets commit check a file against the manifest. */
static int add_chunk_meta(st_writer *w, int chunk, int first, int end, int has_optim) {
    char v[32];
    int rc = st_writer_meta(w, "format", "pt");
    snprintf(v, sizeof v, "%d", chunk);
    if (rc == 0) rc = st_writer_meta(w, "pipetrain.chunk", v);
    snprintf(v, sizeof v, "%d", first);
    if (rc == 0) rc = st_writer_meta(w, "pipetrain.first_layer", v);
    snprintf(v, sizeof v, "%d", end);
    if (rc == 0) rc = st_writer_meta(w, "pipetrain.end_layer", v);
    if (rc == 0) rc = st_writer_meta(w, "pipetrain.optimizer", has_optim ? "1" : "0");
    return rc;
}

/* The one description of a chunk file, whoever writes it: metadata, the parameters of layers
 * [first, end), then "m/" and "v/" of the same tensors when has_optim. params, mm, vv laid out
 * like m->params, or NULL: reserved (filled in place). NULL on failure (error set). */
st_writer *ckpt_chunk_writer(int chunk, int first, int end, const gpt_model *m, int has_optim,
                               const float *params, const float *mm, const float *vv) {
    st_writer *w = st_writer_new();
    int rc = add_chunk_meta(w, chunk, first, end, has_optim);
    if (rc == 0) rc = add_layers(w, m, params, "", first, end);
    if (rc == 0 && has_optim) rc = add_layers(w, m, mm, "m/", first, end);
    if (rc == 0 && has_optim) rc = add_layers(w, m, vv, "v/", first, end);
    if (rc == 0) return w;
    st_writer_free(w);
    return NULL;
}

int ckpt_write_chunk(const char *tmpdir, int chunk, int first_layer, int end_layer,
                     const gpt_model *m, const adamw_state *opt) {
    char path[CKPT_PATH_MAX];
    ckpt_chunk_path(path, sizeof path, tmpdir, chunk);
    if (chunk < 0 || chunk >= CKPT_MAX_CHUNKS || first_layer < 0 || end_layer <= first_layer ||
        end_layer > gpt_num_layers(m) || first_layer < m->first_layer || end_layer > m->end_layer)
        return pt_seterr("%s: bad chunk %d or layer range [%d, %d) (model has %d layers, holds [%d, %d))",
                         path, chunk, first_layer, end_layer, gpt_num_layers(m), m->first_layer, m->end_layer);
    if (opt && opt->n != m->n_held)
        return pt_seterr("%s: optimizer state holds %zu floats, the model %zu", path, opt->n,
                         m->n_held);
    st_writer *w = ckpt_chunk_writer(chunk, first_layer, end_layer, m, opt != NULL, m->params,
                                opt ? opt->m : NULL, opt ? opt->v : NULL);
    int rc = w ? st_write(w, path) : -1;
    st_writer_free(w);
    if (rc < 0) return pt_adderr("checkpoint chunk %d: ", chunk);
    CRASH_POINT("chunk", chunk);
    return 0;
}

st_writer *ckpt_shard_writer(int rank, const ckpt_slice *sl, int n, int reserve) {
    char name[200], v[32];
    st_writer *w = st_writer_new();
    snprintf(v, sizeof v, "%d", rank);
    int rc = st_writer_meta(w, "format", "pt");
    if (rc == 0) rc = st_writer_meta(w, "pipetrain.rank", v);
    for (int i = 0; i < n && rc == 0; i++) {
        int64_t shape[1] = { (int64_t)sl[i].n };
        for (int k = 0; k < 2 && rc == 0; k++) {   /* m/, then v/ */
            snprintf(name, sizeof name, "%s/%s@%zu", k ? "v" : "m", sl[i].name, sl[i].start);
            rc = reserve ? st_writer_reserve(w, name, ST_F32, 1, shape)
                         : st_writer_add(w, name, ST_F32, 1, shape, k ? sl[i].v : sl[i].m);
        }
    }
    if (rc == 0) return w;
    st_writer_free(w);
    return NULL;
}

int ckpt_write_shard(const char *tmpdir, int rank, const ckpt_slice *sl, int n) {
    char path[CKPT_PATH_MAX];
    ckpt_shard_path(path, sizeof path, tmpdir, rank);
    st_writer *w = ckpt_shard_writer(rank, sl, n, 0);
    int rc = w ? st_write(w, path) : -1;
    st_writer_free(w);
    if (rc < 0) return pt_adderr("checkpoint moments of rank %d: ", rank);
    CRASH_POINT("shard", rank);
    return 0;
}

static int meta_int(const st_file *f, const char *key, int *out) {
    const char *v = st_meta(f, key);
    char *end;
    if (!v) return -1;
    long x = strtol(v, &end, 10);
    if (end == v || *end) return -1;
    *out = (int)x;
    return 0;
}

/* Checks one written chunk file against the manifest's range; sets *has_optim from it. */
static int check_written_chunk(const char *path, const ckpt_chunk *ch, int *has_optim) {
    st_file *f;
    if (st_open(&f, path) < 0) return -1;
    int first, end, opt, rc = 0;
    if (meta_int(f, "pipetrain.first_layer", &first) < 0 || meta_int(f, "pipetrain.end_layer", &end) < 0 ||
        meta_int(f, "pipetrain.optimizer", &opt) < 0)
        rc = pt_seterr("%s: not a pipetrain chunk file (metadata missing)", path);
    else if (first != ch->first_layer || end != ch->end_layer)
        rc = pt_seterr("%s: holds layers [%d, %d), the manifest says [%d, %d)", path, first, end,
                       ch->first_layer, ch->end_layer);
    else
        *has_optim = opt;
    st_close(f);
    return rc;
}

/* A written shard file must say it is rank r's. */
static int check_written_shard(const char *path, int r) {
    st_file *f;
    int rank = -1, rc = 0;
    if (st_open(&f, path) < 0) return -1;
    if (meta_int(f, "pipetrain.rank", &rank) < 0 || rank != r)
        rc = pt_seterr("%s: not rank %d's moments file (pipetrain.rank %d)", path, r, rank);
    st_close(f);
    return rc;
}

/* Fills bytes, checksums and has_optim of *man from the chunk and shard files in tmpdir. */
static int checksum_chunks(ckpt_manifest *man, const char *tmpdir) {
    char path[CKPT_PATH_MAX];
    for (int c = 0; c < man->n_chunks; c++) {
        ckpt_chunk *ch = &man->chunks[c];
        int opt = 0;
        ckpt_chunk_path(path, sizeof path, tmpdir, c);
        if (check_written_chunk(path, ch, &opt) < 0) return -1;
        if (c > 0 && opt != man->has_optim)
            return pt_seterr("%s: optimizer state in some chunk files but not in others", path);
        if (man->zero && opt)
            return pt_seterr("%s: holds moments, but the moments of this checkpoint are sharded", path);
        man->has_optim = opt;
        if (ckpt_file_fnv(path, &ch->fnv1a64, &ch->bytes) < 0) return -1;
    }
    for (int r = 0; man->zero && r < man->n_shards; r++) {
        ckpt_shard_path(path, sizeof path, tmpdir, r);
        if (check_written_shard(path, r) < 0) return -1;   /* summed as the manifest is written */
        man->has_optim = 1;
    }
    return 0;   /* each rank's own state file (ckpt_state.h): summed as the manifest is written */
}

static int install_dir(const char *dir, const char *tmpdir) {
    struct stat st;
    char mpath[CKPT_PATH_MAX], aside[CKPT_PATH_MAX];
    if (stat(dir, &st) != 0) {
        if (rename(tmpdir, dir) < 0)
            return pt_seterr("%s: cannot rename %s into place: %s", dir, tmpdir, strerror(errno));
        return 0;
    }
    snprintf(mpath, sizeof mpath, "%s/manifest.json", dir);
    if (access(mpath, F_OK) != 0)
        return pt_seterr("%s: exists and is not a checkpoint folder (no manifest.json); not "
                         "replacing it", dir);
    if (!NO_EXCHANGE() && renameat2(AT_FDCWD, tmpdir, AT_FDCWD, dir, RENAME_EXCHANGE) == 0) {
        snprintf(aside, sizeof aside, "%s", tmpdir);
    } else {
        snprintf(aside, sizeof aside, "%s.old", tmpdir);
        if (rename(dir, aside) < 0)
            return pt_seterr("%s: cannot move the old checkpoint aside: %s", dir, strerror(errno));
        if (rename(tmpdir, dir) < 0) {
            int err = errno;
            (void)rename(aside, dir);
            return pt_seterr("%s: cannot rename %s into place: %s", dir, tmpdir, strerror(err));
        }
    }
    CRASH_POINT("swap", -1);
    ckpt_abandon(aside);
    return 0;
}

/* The layout fields commit writes must read back: P, D, pipes >= 1, K == the chunk count. */
static int check_layout_fields(ckpt_manifest *w, const char *tmpdir) {
    if (w->P < 1 || w->D < 1 || w->n_pipes < 1)
        return pt_seterr("%s: manifest layout P %d, D %d, pipes %d: each must be >= 1 (see "
                         "ckpt_manifest_set_layout)", tmpdir, w->P, w->D, w->n_pipes);
    w->K = w->n_chunks;
    if (w->zero && w->n_shards < 1)
        return pt_seterr("%s: sharded moments need 1 or more shard files, got %d", tmpdir, w->n_shards);
    return ckpt_check_tiling(w, tmpdir);
}

int ckpt_commit(const char *dir_in, const char *tmpdir, const ckpt_manifest *man) {
    char dir[CKPT_DIR_MAX];
    if (ckpt_trim_dir(dir, sizeof dir, dir_in) < 0) {
        ckpt_abandon(tmpdir);
        return -1;
    }
    ckpt_manifest *w = pt_malloc(sizeof *w);
    *w = *man;
    int rc = check_layout_fields(w, tmpdir);
    if (rc == 0) rc = checksum_chunks(w, tmpdir);
    if (rc == 0) CRASH_POINT("manifest", -1);
    if (rc == 0) rc = ckpt_write_manifest(tmpdir, w);
    free(w);
    if (rc == 0) {
        io_fsync_dir(tmpdir);
        CRASH_POINT("rename", -1);
        rc = install_dir(dir, tmpdir);
    }
    if (rc < 0) {
        ckpt_abandon(tmpdir);
        return pt_adderr("saving checkpoint %s: ", dir);
    }
    io_fsync_parent(dir);
    return 0;
}

int ckpt_save(const char *dir, const gpt_model *m, const adamw_state *opt, const ckpt_manifest *man,
              int overwrite) {
    char tmp[CKPT_DIR_MAX];
    struct stat st;
    if (strlen(dir) > 1000) return pt_seterr("%s: checkpoint path too long", dir);
    if (!overwrite && stat(dir, &st) == 0) return pt_seterr("%s: already exists; not overwriting", dir);
    ckpt_manifest *w = pt_malloc(sizeof *w);
    *w = *man;
    int rc = 0;
    if (w->n_chunks == 0) {
        int first[2] = {0, gpt_num_layers(m)};
        rc = ckpt_manifest_set_layout(w, 1, 1, 1, 1, man->schedule, first);
    }
    if (rc == 0) rc = ckpt_begin(dir, tmp, sizeof tmp);
    for (int c = 0; rc == 0 && c < w->n_chunks; c++) {
        const ckpt_chunk *ch = &w->chunks[c];
        rc = ckpt_write_chunk(tmp, c, ch->first_layer, ch->end_layer, m, opt);
        if (rc < 0) ckpt_abandon(tmp);
    }
    if (rc == 0) rc = ckpt_commit(dir, tmp, w);
    free(w);
    return rc;
}

