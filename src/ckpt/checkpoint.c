/* Checkpoint folders: chunk files written by any rank into a temporary folder, a manifest with
 * checksums, an atomic install under the real name; loading by layer from whichever chunk file
 * holds it, with every field and file checked first. Not the trainer's policy (when, who). */
#include "ckpt/checkpoint.h"
#include "io/io.h"
#include "io/json.h"
#include "io/safetensors.h"
#include "model/gpt_io.h"
#include "util/pt.h"
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CKPT_PATH_MAX 1200   /* a file in a checkpoint folder */
#define CKPT_DIR_MAX 1100    /* a checkpoint folder (leaves room for the file name) */
#define CKPT_FORMAT "pipetrain-checkpoint"
#define CKPT_VERSION 3       /* 3 added layout.zero and layout.shards; 2 still reads */
#define JSON_LONG_MAX 9007199254740992L   /* 2^53: larger JSON numbers are not exact */
#define CKPT_STR_(x) #x
#define CKPT_STR(x) CKPT_STR_(x)

/* ---- test hook: one pointer test when unset ---------------------------------------------- */

static const char *crash_point;
static int crash_arg;

void ckpt_test_crash_at(const char *point, int arg) {
    crash_point = point;
    crash_arg = arg;
}

static void crash_maybe(const char *point, int arg) {
    if (strcmp(crash_point, point) || (arg >= 0 && arg != crash_arg)) return;
    if (!strcmp(point, "place")) kill(getpid(), SIGKILL);   /* kill -9 amid the writers */
    abort();
}
#define CRASH_POINT(p, arg) do { if (crash_point) crash_maybe(p, arg); } while (0)
/* "no-exchange" aborts nothing: it makes install_dir take its fallback path, for tests. */
#define NO_EXCHANGE() (crash_point && !strcmp(crash_point, "no-exchange"))

/* ---- small file helpers ------------------------------------------------------------------ */

/* dir without trailing slashes ("run/ckpt-1/" -> "run/ckpt-1"), so "<dir>.tmp.<pid>" is a
 * sibling of dir, never a child. -1 naming dir when it does not fit. */
static int trim_dir(char *out, size_t n, const char *dir) {
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') len--;
    if (len + 1 > n || len + 1 > CKPT_DIR_MAX) return pt_seterr("%s: checkpoint path too long", dir);
    memcpy(out, dir, len);
    out[len] = 0;
    return 0;
}

static void chunk_path(char *out, size_t n, const char *dir, int c) {
    snprintf(out, n, "%s/chunk-%d.safetensors", dir, c);
}

static void shard_path(char *out, size_t n, const char *dir, int r) {
    snprintf(out, n, "%s/optim-%d.safetensors", dir, r);
}

/* FNV-1a 64 and size of a whole file, streamed; -1 naming the path on read failure. */
static int file_fnv(const char *path, uint64_t *hash, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return pt_seterr("%s: cannot open: %s", path, strerror(errno));
    static const size_t bufsz = 1 << 20;
    unsigned char *buf = pt_malloc(bufsz);
    uint64_t h = 0xcbf29ce484222325ULL;
    size_t got, total = 0;
    while ((got = fread(buf, 1, bufsz, f)) > 0) {
        for (size_t i = 0; i < got; i++) h = (h ^ buf[i]) * 0x100000001b3ULL;
        total += got;
    }
    int rc = ferror(f) ? pt_seterr("%s: read error", path) : 0;
    fclose(f);
    free(buf);
    *hash = h;
    *len = total;
    return rc;
}

/* Names a checkpoint folder may hold: ours, the older single-process format, stale temporaries. */
static int is_ckpt_file(const char *name) {
    int c, end = 0;
    if (!strcmp(name, "manifest.json") || !strcmp(name, "model.safetensors") ||
        !strcmp(name, "optim.safetensors"))
        return 1;
    if (strstr(name, ".tmp."))
        return !strncmp(name, "chunk-", 6) || !strncmp(name, "optim-", 6) || !strncmp(name, "manifest", 8);
    if (sscanf(name, "optim-%d.safetensors%n", &c, &end) == 1 && !name[end]) return 1;
    return sscanf(name, "chunk-%d.safetensors%n", &c, &end) == 1 && !name[end];
}

void ckpt_abandon(const char *tmpdir) {
    DIR *d = opendir(tmpdir);
    if (!d) return;
    char path[CKPT_PATH_MAX];
    struct dirent *e;
    while ((e = readdir(d)))
        if (is_ckpt_file(e->d_name)) {
            snprintf(path, sizeof path, "%s/%s", tmpdir, e->d_name);
            unlink(path);
        }
    closedir(d);
    rmdir(tmpdir);
}

/* ---- layout ------------------------------------------------------------------------------ */

int ckpt_manifest_set_layout(ckpt_manifest *man, int P, int D, int K, int n_pipes,
                             const char *schedule, const int *chunk_first) {
    if (K < 1 || K > CKPT_MAX_CHUNKS)
        return pt_seterr("checkpoint layout: %d chunks, must be 1..%d", K, CKPT_MAX_CHUNKS);
    man->P = P; man->D = D; man->K = K; man->n_pipes = n_pipes;
    snprintf(man->schedule, sizeof man->schedule, "%s", schedule ? schedule : "");
    man->n_chunks = K;
    for (int c = 0; c < K; c++) {
        man->chunks[c].first_layer = chunk_first[c];
        man->chunks[c].end_layer = chunk_first[c + 1];
    }
    return 0;
}

int ckpt_manifest_set_shards(ckpt_manifest *man, int n_ranks) {
    if (n_ranks < 1 || n_ranks > CKPT_MAX_SHARDS)
        return pt_seterr("checkpoint with sharded moments (--zero 1): %d ranks, at most %d write "
                         "shards (save with --zero 0)", n_ranks, CKPT_MAX_SHARDS);
    man->zero = 1;
    man->n_shards = n_ranks;
    return 0;
}

/* Chunk ranges must tile the model's layers in order, each non-empty. `where` names the source. */
static int check_tiling(const ckpt_manifest *man, const char *where) {
    int n_layers = gpt_config_num_layers(&man->cfg);
    if (man->n_chunks < 1 || man->n_chunks > CKPT_MAX_CHUNKS)
        return pt_seterr("%s: %d chunks, must be 1..%d", where, man->n_chunks, CKPT_MAX_CHUNKS);
    int next = 0;
    for (int c = 0; c < man->n_chunks; c++) {
        const ckpt_chunk *ch = &man->chunks[c];
        if (ch->first_layer != next || ch->end_layer <= ch->first_layer)
            return pt_seterr("%s: chunk %d covers layers [%d, %d), expected a non-empty range "
                             "starting at layer %d (chunks must cover every layer once, in order)",
                             where, c, ch->first_layer, ch->end_layer, next);
        next = ch->end_layer;
    }
    if (next != n_layers)
        return pt_seterr("%s: chunks cover layers [0, %d), the model has %d layers (embedding, "
                         "%d blocks, head)", where, next, n_layers, man->cfg.n_layer);
    return 0;
}

/* Index of the chunk holding layer, or -1. */
static int chunk_of_layer(const ckpt_manifest *man, int layer) {
    for (int c = 0; c < man->n_chunks; c++)
        if (layer >= man->chunks[c].first_layer && layer < man->chunks[c].end_layer) return c;
    return -1;
}

/* ---- save ------------------------------------------------------------------------------- */

int ckpt_tmpdir_name(const char *dir, long pid, char *tmpdir, size_t n) {
    char d[CKPT_DIR_MAX];
    if (trim_dir(d, sizeof d, dir) < 0) return -1;
    int len = snprintf(tmpdir, n, "%s.tmp.%ld", d, pid);
    if (len < 0 || (size_t)len >= n || len >= CKPT_DIR_MAX)
        return pt_seterr("%s: checkpoint path too long", dir);
    return 0;
}

/* The folder that holds dir ("." for a bare name), into out[n]. */
static void parent_dir(const char *dir, char *out, size_t n) {
    char d[CKPT_DIR_MAX];
    const char *slash;
    if (trim_dir(d, sizeof d, dir) < 0 || !(slash = strrchr(d, '/'))) { snprintf(out, n, "."); return; }
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
static st_writer *chunk_writer(int chunk, int first, int end, const gpt_model *m, int has_optim,
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
    chunk_path(path, sizeof path, tmpdir, chunk);
    if (chunk < 0 || chunk >= CKPT_MAX_CHUNKS || first_layer < 0 || end_layer <= first_layer ||
        end_layer > gpt_num_layers(m) || first_layer < m->first_layer || end_layer > m->end_layer)
        return pt_seterr("%s: bad chunk %d or layer range [%d, %d) (model has %d layers, holds [%d, %d))",
                         path, chunk, first_layer, end_layer, gpt_num_layers(m), m->first_layer, m->end_layer);
    if (opt && opt->n != m->n_held)
        return pt_seterr("%s: optimizer state holds %zu floats, the model %zu", path, opt->n,
                         m->n_held);
    st_writer *w = chunk_writer(chunk, first_layer, end_layer, m, opt != NULL, m->params,
                                opt ? opt->m : NULL, opt ? opt->v : NULL);
    int rc = w ? st_write(w, path) : -1;
    st_writer_free(w);
    if (rc < 0) return pt_adderr("checkpoint chunk %d: ", chunk);
    CRASH_POINT("chunk", chunk);
    return 0;
}

int ckpt_write_shard(const char *tmpdir, int rank, const ckpt_slice *sl, int n) {
    char path[CKPT_PATH_MAX], name[200], v[32];
    shard_path(path, sizeof path, tmpdir, rank);
    st_writer *w = st_writer_new();
    snprintf(v, sizeof v, "%d", rank);
    int rc = st_writer_meta(w, "format", "pt");
    if (rc == 0) rc = st_writer_meta(w, "pipetrain.rank", v);
    for (int i = 0; i < n && rc == 0; i++) {
        int64_t shape[1] = { (int64_t)sl[i].n };
        snprintf(name, sizeof name, "m/%s@%zu", sl[i].name, sl[i].start);
        rc = st_writer_add(w, name, ST_F32, 1, shape, sl[i].m);
        snprintf(name, sizeof name, "v/%s@%zu", sl[i].name, sl[i].start);
        if (rc == 0) rc = st_writer_add(w, name, ST_F32, 1, shape, sl[i].v);
    }
    if (rc == 0) rc = st_write(w, path);
    st_writer_free(w);
    if (rc < 0) return pt_adderr("checkpoint moments of rank %d: ", rank);
    CRASH_POINT("shard", rank);
    return 0;
}

/* ---- chunk files filled in place by several writers (tensor parallelism) ------------------
 * The file's layout depends only on names, shapes and dtypes (chunk_writer with no data), so
 * every writer computes the same offsets; each pwrites its shard's elements there. */

int ckpt_chunk_create(const char *tmpdir, int chunk, int first_layer, int end_layer,
                      const gpt_model *m, int has_optim) {
    char path[CKPT_PATH_MAX];
    chunk_path(path, sizeof path, tmpdir, chunk);
    st_writer *w = chunk_writer(chunk, first_layer, end_layer, m, has_optim, NULL, NULL, NULL);
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
    chunk_path(path, sizeof path, p->dir, c);
    st_writer *w = chunk_writer(c, ch->first_layer, ch->end_layer, p->m, p->has_optim, NULL, NULL, NULL);
    if (!w) return pt_adderr("checkpoint chunk %d: ", c);
    int n = st_writer_count(w), n_info = gpt_param_count(p->m), k = 0;
    size_t *off = pt_malloc(sizeof *off * (size_t)(n + 1)), hdr;
    st_writer_layout(w, off, &hdr);
    st_writer_free(w);
    pf->at = pt_malloc(sizeof *pf->at * (size_t)(3 * n_info));
    for (int what = 0; what < (p->has_optim ? 3 : 1); what++)   /* chunk_writer's order */
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
    chunk_path(path, sizeof path, p->dir, c);
    return pt_adderr("%s", path);
}

int ckpt_placer_put(ckpt_placer *p, int what, int param, int rank, int size, size_t start,
                    size_t n, const float *src) {
    const gpt_param_info *pi = gpt_param_info_at(p->m, param);
    int c = chunk_of_layer(&p->man, pi->layer);
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
        chunk_path(path, sizeof path, p->dir, c);
        if (fsync(p->f[c].fd) < 0 && rc == 0) rc = pt_seterr("%s: fsync: %s", path, strerror(errno));
        if (close(p->f[c].fd) < 0 && rc == 0) rc = pt_seterr("%s: close: %s", path, strerror(errno));
        free(p->f[c].at);
    }
    if (stats) *stats = p->st;
    free(p);
    return rc;
}

/* Reads an integer metadata value of an open chunk file; -1 if missing or malformed. */
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
        chunk_path(path, sizeof path, tmpdir, c);
        if (check_written_chunk(path, ch, &opt) < 0) return -1;
        if (c > 0 && opt != man->has_optim)
            return pt_seterr("%s: optimizer state in some chunk files but not in others", path);
        if (man->zero && opt)
            return pt_seterr("%s: holds moments, but the moments of this checkpoint are sharded", path);
        man->has_optim = opt;
        if (file_fnv(path, &ch->fnv1a64, &ch->bytes) < 0) return -1;
    }
    for (int r = 0; man->zero && r < man->n_shards; r++) {
        shard_path(path, sizeof path, tmpdir, r);
        if (check_written_shard(path, r) < 0 || file_fnv(path, &man->shards[r].fnv1a64, &man->shards[r].bytes) < 0)
            return -1;
        man->has_optim = 1;
    }
    return 0;
}

static cJSON *manifest_layout_json(const ckpt_manifest *man) {
    char s[64];
    cJSON *lo = cJSON_CreateObject(), *chunks;
    cJSON_AddNumberToObject(lo, "P", man->P);
    cJSON_AddNumberToObject(lo, "D", man->D);
    cJSON_AddNumberToObject(lo, "K", man->K);
    cJSON_AddNumberToObject(lo, "pipes", man->n_pipes);
    cJSON_AddNumberToObject(lo, "tp", man->tp > 1 ? man->tp : 1);
    cJSON_AddStringToObject(lo, "schedule", man->schedule);
    chunks = cJSON_AddArrayToObject(lo, "chunks");
    for (int c = 0; c < man->n_chunks; c++) {
        cJSON *e = cJSON_CreateObject();
        snprintf(s, sizeof s, "chunk-%d.safetensors", c);
        cJSON_AddStringToObject(e, "file", s);
        cJSON_AddNumberToObject(e, "first_layer", man->chunks[c].first_layer);
        cJSON_AddNumberToObject(e, "end_layer", man->chunks[c].end_layer);
        cJSON_AddNumberToObject(e, "bytes", (double)man->chunks[c].bytes);
        snprintf(s, sizeof s, "%016" PRIx64, man->chunks[c].fnv1a64);
        cJSON_AddStringToObject(e, "fnv1a64", s);
        cJSON_AddItemToArray(chunks, e);
    }
    cJSON_AddNumberToObject(lo, "zero", man->zero);
    cJSON *shards = cJSON_AddArrayToObject(lo, "shards");
    for (int r = 0; man->zero && r < man->n_shards; r++) {
        cJSON *e = cJSON_CreateObject();
        snprintf(s, sizeof s, "optim-%d.safetensors", r);
        cJSON_AddStringToObject(e, "file", s);
        cJSON_AddNumberToObject(e, "bytes", (double)man->shards[r].bytes);
        snprintf(s, sizeof s, "%016" PRIx64, man->shards[r].fnv1a64);
        cJSON_AddStringToObject(e, "fnv1a64", s);
        cJSON_AddItemToArray(shards, e);
    }
    return lo;
}

static cJSON *manifest_json(const ckpt_manifest *man) {
    char s[32];
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", CKPT_FORMAT);
    cJSON_AddNumberToObject(root, "version", CKPT_VERSION);
    cJSON_AddItemToObject(root, "config", config_to_cjson(&man->cfg));
    cJSON_AddNumberToObject(root, "step", (double)man->step);
    cJSON_AddNumberToObject(root, "adam_t", man->adam_t);
    cJSON_AddNumberToObject(root, "batch", man->batch);
    cJSON_AddNumberToObject(root, "seq", man->seq);
    snprintf(s, sizeof s, "%" PRIu64, man->shuffle_seed);
    cJSON_AddStringToObject(root, "shuffle_seed", s);
    snprintf(s, sizeof s, "%" PRIu64, man->init_seed);
    cJSON_AddStringToObject(root, "init_seed", s);
    cJSON_AddStringToObject(root, "data", man->data_path);
    cJSON_AddBoolToObject(root, "optimizer", man->has_optim);
    cJSON_AddItemToObject(root, "layout", manifest_layout_json(man));
    return root;
}

static int write_manifest(const char *tmpdir, const ckpt_manifest *man) {
    char path[CKPT_PATH_MAX];
    snprintf(path, sizeof path, "%s/manifest.json", tmpdir);
    cJSON *root = manifest_json(man);
    int rc = io_write_json(root, path);
    cJSON_Delete(root);
    return rc;
}

/* Moves the complete tmpdir to dir. An existing dir (which must be a checkpoint) is swapped
 * out atomically where the filesystem can (renameat2 RENAME_EXCHANGE), else moved aside first;
 * either way it is deleted only once the new folder has the real name. */
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
    if (w->zero && (w->n_shards < 1 || w->n_shards > CKPT_MAX_SHARDS))
        return pt_seterr("%s: sharded moments need 1..%d shard files, got %d", tmpdir, CKPT_MAX_SHARDS,
                         w->n_shards);
    return check_tiling(w, tmpdir);
}

int ckpt_commit(const char *dir_in, const char *tmpdir, const ckpt_manifest *man) {
    char dir[CKPT_DIR_MAX];
    if (trim_dir(dir, sizeof dir, dir_in) < 0) {
        ckpt_abandon(tmpdir);
        return -1;
    }
    ckpt_manifest *w = pt_malloc(sizeof *w);
    *w = *man;
    int rc = check_layout_fields(w, tmpdir);
    if (rc == 0) rc = checksum_chunks(w, tmpdir);
    if (rc == 0) CRASH_POINT("manifest", -1);
    if (rc == 0) rc = write_manifest(tmpdir, w);
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

/* ---- manifest reading ------------------------------------------------------------------- */

/* An integer field in [min, max] of obj (max <= 2^53, where doubles stop being exact); errors
 * name the manifest and the field's path. */
static int json_int(const cJSON *obj, const char *key, long min, long max, long *out,
                    const char *mpath, const char *field) {
    return io_json_long(out, obj, key, IO_JSON_REQUIRED, min, max,
                        "%s: field \"%s\" missing or not an integer in [%ld, %ld]", mpath, field, min, max);
}

/* A string field (pointing into obj), or NULL with the error set. */
static const char *json_str(const cJSON *obj, const char *key, const char *mpath, const char *field) {
    const char *s = NULL;
    io_json_str(&s, obj, key, IO_JSON_REQUIRED, 0, "%s: field \"%s\" missing or not a string", mpath, field);
    return s;
}

/* A decimal uint64 stored as a string (JSON numbers lose bits past 2^53). */
static int json_u64(const cJSON *obj, const char *key, uint64_t *out, const char *mpath) {
    const char *s = json_str(obj, key, mpath, key);
    char *end;
    if (!s) return -1;
    errno = 0;
    *out = strtoull(s, &end, 10);
    if (end == s || *end || errno || *s == '-')
        return pt_seterr("%s: field \"%s\" is not a decimal unsigned integer: '%s'", mpath, key, s);
    return 0;
}

static int manifest_progress(ckpt_manifest *man, const cJSON *root, const char *mpath) {
    long v[4];
    const char *keys[] = {"step", "adam_t", "batch", "seq"};
    for (int i = 0; i < 4; i++)
        if (json_int(root, keys[i], i < 2 ? 0 : 1, i == 0 ? JSON_LONG_MAX : INT_MAX, &v[i], mpath, keys[i]) < 0) return -1;
    man->step = v[0]; man->adam_t = (int)v[1]; man->batch = (int)v[2]; man->seq = (int)v[3];
    if (json_u64(root, "shuffle_seed", &man->shuffle_seed, mpath) < 0 ||
        json_u64(root, "init_seed", &man->init_seed, mpath) < 0)
        return -1;
    const char *data = json_str(root, "data", mpath, "data");
    if (!data) return -1;
    snprintf(man->data_path, sizeof man->data_path, "%s", data);
    bool opt;
    if (io_json_bool(&opt, root, "optimizer", IO_JSON_REQUIRED, "%s: field \"optimizer\" missing or not a boolean",
                     mpath) < 0)
        return -1;
    man->has_optim = opt;
    return 0;
}

/* The fields every file entry of the manifest has: layout.<list>[i].file must be
 * <prefix>-<i>.safetensors (never a path), bytes, fnv1a64 (16 hex digits). */
static int manifest_file(ckpt_chunk *ch, const cJSON *e, const char *list, const char *prefix, int i,
                         const char *mpath) {
    char field[64], want[48], *stop;
    long bytes = 0;
    snprintf(field, sizeof field, "layout.%s[%d].file", list, i);
    const char *file = json_str(e, "file", mpath, field);
    snprintf(want, sizeof want, "%s-%d.safetensors", prefix, i);
    if (!file) return -1;
    if (strcmp(file, want)) return pt_seterr("%s: field \"%s\" is '%s', expected '%s'", mpath, field, file, want);
    snprintf(field, sizeof field, "layout.%s[%d].bytes", list, i);
    if (json_int(e, "bytes", 0, JSON_LONG_MAX, &bytes, mpath, field) < 0) return -1;
    snprintf(field, sizeof field, "layout.%s[%d].fnv1a64", list, i);
    const char *sum = json_str(e, "fnv1a64", mpath, field);
    if (!sum) return -1;
    ch->fnv1a64 = strtoull(sum, &stop, 16);
    if (strlen(sum) != 16 || *stop) return pt_seterr("%s: field \"%s\" is not 16 hex digits", mpath, field);
    ch->bytes = (size_t)bytes;
    return 0;
}

/* One layout.chunks[c] entry: chunk-<c>.safetensors and its layer range. */
static int manifest_chunk(ckpt_chunk *ch, const cJSON *e, int c, const char *mpath) {
    char field[64];
    long first = 0, end = 0;
    if (manifest_file(ch, e, "chunks", "chunk", c, mpath) < 0) return -1;
    snprintf(field, sizeof field, "layout.chunks[%d].first_layer", c);
    if (json_int(e, "first_layer", 0, INT_MAX, &first, mpath, field) < 0) return -1;
    snprintf(field, sizeof field, "layout.chunks[%d].end_layer", c);
    if (json_int(e, "end_layer", 0, INT_MAX, &end, mpath, field) < 0) return -1;
    ch->first_layer = (int)first; ch->end_layer = (int)end;
    return 0;
}

/* One layout.shards[r] entry: optim-<r>.safetensors (a rank's AdamW moment slices). */
static int manifest_shard(ckpt_chunk *sh, const cJSON *e, int r, const char *mpath) {
    return manifest_file(sh, e, "shards", "optim", r, mpath);
}

/* Version 3: layout.zero and layout.shards (one entry per rank when zero is 1, else none). */
static int manifest_shards(ckpt_manifest *man, const cJSON *lo, const char *mpath) {
    long zero = 0;
    if (json_int(lo, "zero", 0, 1, &zero, mpath, "layout.zero") < 0) return -1;
    const cJSON *shards = cJSON_GetObjectItemCaseSensitive(lo, "shards"), *e;
    int n = cJSON_IsArray(shards) ? cJSON_GetArraySize(shards) : -1;
    if (n < 0 || n > CKPT_MAX_SHARDS || (zero && n < 1) || (!zero && n > 0))
        return pt_seterr("%s: field \"layout.shards\" missing or not an array of %s entries", mpath,
                         zero ? "1.." CKPT_STR(CKPT_MAX_SHARDS) : "0 (layout.zero is 0)");
    man->zero = (int)zero;
    man->n_shards = 0;
    cJSON_ArrayForEach(e, shards) {
        if (manifest_shard(&man->shards[man->n_shards], e, man->n_shards, mpath) < 0) return -1;
        man->n_shards++;
    }
    return 0;
}

static int manifest_layout(ckpt_manifest *man, const cJSON *root, const char *mpath, long version) {
    const cJSON *lo = cJSON_GetObjectItemCaseSensitive(root, "layout");
    if (!cJSON_IsObject(lo)) return pt_seterr("%s: field \"layout\" missing or not an object", mpath);
    long v[4];
    const char *keys[] = {"P", "D", "K", "pipes"};
    char field[64];
    for (int i = 0; i < 4; i++) {
        snprintf(field, sizeof field, "layout.%s", keys[i]);
        if (json_int(lo, keys[i], 1, INT_MAX, &v[i], mpath, field) < 0) return -1;
    }
    man->P = (int)v[0]; man->D = (int)v[1]; man->K = (int)v[2]; man->n_pipes = (int)v[3];
    long tp = 1;   /* optional: written since tensor parallelism (informational) */
    if (cJSON_GetObjectItemCaseSensitive(lo, "tp") && json_int(lo, "tp", 1, INT_MAX, &tp, mpath, "layout.tp") < 0)
        return -1;
    man->tp = (int)tp;
    const char *sched = json_str(lo, "schedule", mpath, "layout.schedule");
    if (!sched) return -1;
    snprintf(man->schedule, sizeof man->schedule, "%s", sched);
    const cJSON *chunks = cJSON_GetObjectItemCaseSensitive(lo, "chunks"), *e;
    if (!cJSON_IsArray(chunks) || cJSON_GetArraySize(chunks) != man->K || man->K > CKPT_MAX_CHUNKS)
        return pt_seterr("%s: field \"layout.chunks\" missing or not an array of K = %d entries "
                         "(at most %d)", mpath, man->K, CKPT_MAX_CHUNKS);
    man->n_chunks = 0;
    cJSON_ArrayForEach(e, chunks) {
        if (manifest_chunk(&man->chunks[man->n_chunks], e, man->n_chunks, mpath) < 0) return -1;
        man->n_chunks++;
    }
    if (version >= 3 && manifest_shards(man, lo, mpath) < 0) return -1;
    return check_tiling(man, mpath);
}

static int manifest_header(const cJSON *root, const char *mpath, long *version) {
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, CKPT_FORMAT))
        return pt_seterr("%s: field \"format\" missing or not \"" CKPT_FORMAT "\" (a checkpoint "
                         "from an older pipetrain, or not a checkpoint)", mpath);
    if (json_int(root, "version", 1, INT_MAX, version, mpath, "version") < 0) return -1;
    if (*version != CKPT_VERSION && *version != 2)
        return pt_seterr("%s: checkpoint format version %ld, this pipetrain reads versions 2 and %d",
                         mpath, *version, CKPT_VERSION);
    return 0;
}

/* One file's size and checksum against the manifest's. */
static int verify_file(const char *path, const ckpt_chunk *want) {
    uint64_t h;
    size_t len;
    if (file_fnv(path, &h, &len) < 0) return -1;
    if (len != want->bytes)
        return pt_seterr("%s: %zu bytes, manifest says %zu (truncated or replaced)", path, len, want->bytes);
    if (h != want->fnv1a64) return pt_seterr("%s: checksum mismatch (file changed or corrupt)", path);
    return 0;
}

/* Size and checksum of every chunk and shard file against the manifest. */
static int verify_chunks(const ckpt_manifest *man, const char *dir) {
    char path[CKPT_PATH_MAX];
    for (int c = 0; c < man->n_chunks; c++) {
        chunk_path(path, sizeof path, dir, c);
        if (verify_file(path, &man->chunks[c]) < 0) return -1;
    }
    for (int r = 0; man->zero && r < man->n_shards; r++) {
        shard_path(path, sizeof path, dir, r);
        if (verify_file(path, &man->shards[r]) < 0) return -1;
    }
    return 0;
}

/* Parses dir/manifest.json into man; verify: also check every chunk file's size and checksum. */
static int manifest_read(ckpt_manifest *man, const char *dir, int verify) {
    char mpath[CKPT_PATH_MAX], where[CKPT_PATH_MAX + 16];
    snprintf(mpath, sizeof mpath, "%s/manifest.json", dir);
    char *text = pt_read_file(mpath, NULL);
    if (!text) return pt_adderr("not a checkpoint folder: ");
    memset(man, 0, sizeof *man);
    cJSON *root = cJSON_Parse(text);
    free(text);
    int rc = -1;
    if (!cJSON_IsObject(root)) { pt_seterr("%s: not a JSON object (corrupt manifest)", mpath); goto done; }
    snprintf(where, sizeof where, "%s: config", mpath);
    long version = 0;
    if (manifest_header(root, mpath, &version) < 0 ||
        config_from_cjson(&man->cfg, cJSON_GetObjectItemCaseSensitive(root, "config"), where) < 0 ||
        manifest_progress(man, root, mpath) < 0 || manifest_layout(man, root, mpath, version) < 0)
        goto done;
    rc = verify ? verify_chunks(man, dir) : 0;
done:
    cJSON_Delete(root);
    return rc;
}

int ckpt_read_manifest(ckpt_manifest *man, const char *dir) {
    return manifest_read(man, dir, 1);
}

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
    chunk_path(path, sizeof path, dir, c);
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
    int layer = gpt_config_param_layer(&man->cfg, name), c = chunk_of_layer(man, layer);
    if (layer < 0 || c < 0) return pt_seterr("%s: no parameter '%s' in this checkpoint", dir, name);
    if ((mom_m || mom_v) && !man->has_optim)
        return pt_seterr("%s: checkpoint holds no optimizer state", dir);
    char path[CKPT_PATH_MAX];
    chunk_path(path, sizeof path, dir, c);
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
    shard_piece *pc;                   /* [n_pc] every slice of every shard file */
    int n_pc;
};

/* Lists the moment slices of shard file f into r->pc. */
static int reader_index_shard(ckpt_reader *r, const st_file *f) {
    shard_piece *pc = pt_malloc(sizeof *pc * (size_t)(r->n_pc + st_count(f) + 1));
    if (r->n_pc) memcpy(pc, r->pc, sizeof *pc * (size_t)r->n_pc);
    free(r->pc);
    r->pc = pc;
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
        chunk_path(path, sizeof path, dir, c);
        if (st_open(&r->chunk[c], path) < 0) goto close_reader;
    }
    for (int k = 0; man->zero && k < man->n_shards; k++) {
        shard_path(path, sizeof path, dir, k);
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
    int layer = gpt_config_param_layer(&r->man.cfg, name), c = chunk_of_layer(&r->man, layer);
    if (layer < 0 || c < 0) return pt_seterr("%s: no parameter '%s' in this checkpoint", r->dir, name);
    if ((mm || vv) && !r->man.has_optim) return pt_seterr("%s: checkpoint holds no optimizer state", r->dir);
    const st_file *f = r->chunk[c];
    int rc = w ? read_slice(f, "", name, start, n, w) : 0;
    if (rc == 0 && (mm || vv) && r->man.zero) return reader_shard_moments(r, name, start, n, mm, vv);
    if (rc == 0 && mm) rc = read_slice(f, "m/", name, start, n, mm);
    if (rc == 0 && vv) rc = read_slice(f, "v/", name, start, n, vv);
    return rc;
}

/* ---- a save root ------------------------------------------------------------------------ */

/* The step of a complete checkpoint folder root/name ("ckpt-<step>" holding manifest.json), or -1. */
static long ckpt_folder_step(const char *root, const char *name) {
    long step;
    int end = 0;
    char path[CKPT_PATH_MAX];
    if (sscanf(name, "ckpt-%ld%n", &step, &end) != 1 || name[end] || step < 0) return -1;
    snprintf(path, sizeof path, "%s/%s/manifest.json", root, name);
    return access(path, F_OK) == 0 ? step : -1;
}

int ckpt_resolve(const char *path, char *out, size_t n) {
    char mpath[CKPT_PATH_MAX], best[256] = "";
    long best_step = -1;
    snprintf(mpath, sizeof mpath, "%s/manifest.json", path);
    if (access(mpath, F_OK) == 0) {
        snprintf(out, n, "%s", path);
        return 0;
    }
    DIR *d = opendir(path);
    if (!d) return pt_seterr("%s: cannot open: %s (give a checkpoint folder or the --save folder "
                             "that holds them)", path, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d))) {
        long step = ckpt_folder_step(path, e->d_name);
        if (step > best_step) {
            best_step = step;
            snprintf(best, sizeof best, "%s", e->d_name);
        }
    }
    closedir(d);
    if (best_step < 0)
        return pt_seterr("%s: not a checkpoint folder (no manifest.json), and it holds no complete "
                         "checkpoint folder ckpt-<step>", path);
    if ((size_t)snprintf(out, n, "%s/%s", path, best) >= n) return pt_seterr("%s: path too long", path);
    return 0;
}

/* The pid of a temporary save folder "<name>.tmp.<pid>" (not "....old"), or -1. */
static long tmp_folder_pid(const char *name) {
    const char *t = strstr(name, ".tmp.");
    long pid;
    int end = 0;
    if (!t || sscanf(t + 5, "%ld%n", &pid, &end) != 1 || t[5 + end] || pid <= 0) return -1;
    return pid;
}

int ckpt_clean_stale(const char *root) {
    DIR *d = opendir(root);
    char path[CKPT_PATH_MAX], old[CKPT_PATH_MAX + 8];
    struct dirent *e;
    struct stat st;
    int n = 0;
    if (!d) return 0;
    while ((e = readdir(d))) {
        long pid = tmp_folder_pid(e->d_name);
        snprintf(path, sizeof path, "%s/%s", root, e->d_name);
        snprintf(old, sizeof old, "%s.old", path);
        if (pid < 0 || stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) continue;
        if (pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno == EPERM) continue;   /* alive */
        if (access(old, F_OK) == 0) continue;   /* a replace cut between its renames: the user's call */
        ckpt_abandon(path);
        n += access(path, F_OK) != 0;
    }
    closedir(d);
    return n;
}

typedef struct { long step; char name[64]; } ckpt_entry;

static int cmp_entry_desc(const void *a, const void *b) {
    long x = ((const ckpt_entry *)a)->step, y = ((const ckpt_entry *)b)->step;
    return x < y ? 1 : x > y ? -1 : 0;
}

int ckpt_prune(const char *root, int keep, const char *saved) {
    DIR *d = opendir(root);
    if (!d) return pt_seterr("%s: cannot open: %s", root, strerror(errno));
    const char *base = strrchr(saved, '/') ? strrchr(saved, '/') + 1 : saved;
    ckpt_entry *v = NULL;
    int n = 0, cap = 0, removed = 0, rc = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        long step = ckpt_folder_step(root, e->d_name);
        if (step < 0 || !strcmp(e->d_name, base) || strlen(e->d_name) >= sizeof v->name) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            ckpt_entry *w = pt_malloc(sizeof *w * (size_t)cap);
            if (n) memcpy(w, v, sizeof *w * (size_t)n);
            free(v);
            v = w;
        }
        v[n].step = step;
        memcpy(v[n++].name, e->d_name, strlen(e->d_name) + 1);   /* fits: checked above */
    }
    closedir(d);
    if (n) qsort(v, (size_t)n, sizeof *v, cmp_entry_desc);
    for (int i = keep - 1; i < n && rc == 0; i++) {   /* the saved one counts as one of `keep` */
        char path[CKPT_PATH_MAX];
        snprintf(path, sizeof path, "%s/%s", root, v[i].name);
        ckpt_abandon(path);
        if (access(path, F_OK) == 0) rc = pt_seterr("%s: could not remove it (files of its own in it?)", path);
        else removed++;
    }
    free(v);
    return rc < 0 ? -1 : removed;
}

/* ---- one process ------------------------------------------------------------------------ */

int ckpt_load_params(gpt_model *m, const char *dir, const ckpt_manifest *man) {
    return load_range(dir, man, m, m->params, NULL, 0, gpt_num_layers(m));
}

int ckpt_load_optim(adamw_state *s, const gpt_model *m, const char *dir) {
    ckpt_manifest *man = pt_malloc(sizeof *man);
    int rc = manifest_read(man, dir, 0);
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
