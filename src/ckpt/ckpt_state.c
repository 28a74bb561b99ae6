/* A rank's own state file (ckpt_state.h): named float tensors, the numbers as a small I64 tensor
 * and the rest as metadata, in the safetensors format of the chunk files; written whole (disk
 * checkpoints) or made once and refilled in place (snapshots). */
#include "ckpt/ckpt_state.h"
#include "io/safetensors.h"
#include "util/pt.h"
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define STATE_FORMAT "pipetrain-rank-state"
#define STATE_VERSION "1"
#define STATE_NUMS "state/nums"   /* I64 [3]: step, n_upd, pending */

int ckpt_state_add(ckpt_state *s, const char *name, float *f, size_t n, int optional) {
    if (s->n >= CKPT_STATE_ITEMS) return pt_seterr("rank state: more than %d tensors", CKPT_STATE_ITEMS);
    ckpt_state_item *it = &s->it[s->n++];
    memset(it, 0, sizeof *it);
    snprintf(it->name, sizeof it->name, "%s", name);
    it->f = f;
    it->n = n;
    it->optional = optional;
    return 0;
}

void ckpt_state_path(char *out, size_t n, const char *dir, int rank) {
    snprintf(out, n, "%s/state-%d.safetensors", dir, rank);
}

/* The writer of s as rank's file: metadata, the numbers, the items (all = 1: every item,
 * reserved, for the in-place form; else those with data). NULL on failure (error set). */
static st_writer *state_writer(int rank, const ckpt_state *s, const int64_t *nums, int all) {
    st_writer *w = st_writer_new();
    int rc = 0;
    int64_t three[1] = { 3 };
    (void)rank;   /* in the file's name only: a replica's equal state is the same bytes */
    st_writer_meta(w, "format", STATE_FORMAT);
    st_writer_meta(w, "version", STATE_VERSION);
    st_writer_meta(w, "sig", s->sig);
    for (int i = 0; i < s->n && rc == 0; i++) {
        const ckpt_state_item *it = &s->it[i];
        int64_t shape[1] = { (int64_t)it->n };
        if (all) rc = st_writer_reserve(w, it->name, ST_F32, 1, shape);
        else if (it->f) rc = st_writer_add(w, it->name, ST_F32, 1, shape, it->f);
    }
    if (rc == 0) rc = all ? st_writer_reserve(w, STATE_NUMS, ST_I64, 1, three) : st_writer_add(w, STATE_NUMS, ST_I64, 1, three, nums);
    if (rc == 0) return w;
    st_writer_free(w);
    return NULL;
}

int ckpt_state_write(const char *dir, int rank, const ckpt_state *s) {
    char path[1300];
    int64_t nums[3] = { s->step, s->n_upd, s->pending };
    ckpt_state_path(path, sizeof path, dir, rank);
    st_writer *w = state_writer(rank, s, nums, 0);
    int rc = w ? st_write(w, path) : -1;
    st_writer_free(w);
    return rc < 0 ? pt_adderr("rank state %s: ", path) : 0;
}

/* ---- in place (snapshots) ----------------------------------------------------------------- */

unsigned long long ckpt_state_key(int rank, const ckpt_state *s) {
    unsigned long long h = 1469598103934665603ULL ^ (unsigned)rank;
    for (const char *p = s->sig; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ULL;
    for (int i = 0; i < s->n; i++) {
        for (const char *p = s->it[i].name; *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ULL;
        h = (h ^ s->it[i].n) * 1099511628211ULL;
    }
    return h;
}

int ckpt_state_map(ckpt_state_file *f, const char *path, int rank, const ckpt_state *s) {
    memset(f, 0, sizeof *f);
    st_writer *w = state_writer(rank, s, NULL, 1);
    if (!w) return pt_adderr("rank state %s: ", path);
    f->bytes = st_writer_layout(w, f->off, NULL);
    int rc = st_create(w, path);
    st_writer_free(w);
    if (rc < 0) return -1;
    int fd = open(path, O_RDWR);
    void *m = fd < 0 ? MAP_FAILED : mmap(NULL, f->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (fd >= 0) close(fd);
    if (m == MAP_FAILED) return pt_seterr("rank state %s: cannot map: %s", path, strerror(errno));
    f->map = m;
    f->n = s->n;
    f->key = ckpt_state_key(rank, s);
    return 0;
}

void ckpt_state_fill(ckpt_state_file *f, const ckpt_state *s) {
    int64_t nums[3] = { s->step, s->n_upd, s->pending };
    for (int i = 0; i < s->n && i < f->n; i++) {
        size_t b = s->it[i].n * sizeof(float);
        if (s->it[i].f) memcpy(f->map + f->off[i], s->it[i].f, b);
        else memset(f->map + f->off[i], 0, b);
    }
    memcpy(f->map + f->off[f->n], nums, sizeof nums);
}

void ckpt_state_unmap(ckpt_state_file *f) {
    if (f->map) munmap(f->map, f->bytes);
    memset(f, 0, sizeof *f);
}

/* ---- reading ------------------------------------------------------------------------------ */

/* The numbers tensor into s; -1 naming file and field. */
static int state_nums(const st_file *f, ckpt_state *s) {
    const st_tensor *t = st_find(f, STATE_NUMS);
    int64_t v[3];
    if (!t || t->dtype != ST_I64 || t->ndim != 1 || t->numel != 3)
        return pt_seterr("%s: tensor \"" STATE_NUMS "\" missing or not 3 I64 (damaged rank state)", st_path(f));
    memcpy(v, t->data, sizeof v);
    if (v[2] != 0 && v[2] != 1)
        return pt_seterr("%s: tensor \"" STATE_NUMS "\": pending is %lld, not 0 or 1", st_path(f), (long long)v[2]);
    s->step = (long)v[0];
    s->n_upd = (long)v[1];
    s->pending = (int)v[2];
    return 0;
}

/* The file's header against s: 1 usable, 0 not (why says), -1 damaged. */
static int state_check(const st_file *f, int rank, ckpt_state *s, char *why, size_t nw) {
    const char *fmt = st_meta(f, "format"), *sig = st_meta(f, "sig");
    (void)rank;
    if (!fmt || strcmp(fmt, STATE_FORMAT))
        return pt_seterr("%s: field \"format\" missing or not \"" STATE_FORMAT "\"", st_path(f));
    if (!sig) return pt_seterr("%s: field \"sig\" missing (damaged rank state)", st_path(f));
    if (strcmp(sig, s->sig)) {
        snprintf(why, nw, "saved under another layout (%s; this run: %s)", sig, s->sig);
        return 0;
    }
    for (int i = 0; i < s->n; i++) {
        const st_tensor *t = st_find(f, s->it[i].name);
        if (!t && !s->it[i].optional) {
            snprintf(why, nw, "it holds no \"%s\" (saved by a run without that state)", s->it[i].name);
            return 0;
        }
        if (t && (t->dtype != ST_F32 || t->ndim != 1 || t->numel != s->it[i].n))
            return pt_seterr("%s: tensor \"%s\" has %zu elements, expected %zu F32 (damaged, or another model)",
                             st_path(f), s->it[i].name, t->numel, s->it[i].n);
    }
    return state_nums(f, s) < 0 ? -1 : 1;
}

int ckpt_state_read(const char *dir, int rank, ckpt_state *s, char *why, size_t nw) {
    char path[1300];
    st_file *f;
    ckpt_state_path(path, sizeof path, dir, rank);
    if (access(path, F_OK) != 0) {
        snprintf(why, nw, "%s is absent", path);
        return 0;
    }
    if (st_open(&f, path) < 0) return -1;
    int rc = state_check(f, rank, s, why, nw);
    for (int i = 0; i < s->n && rc == 1; i++) {
        const st_tensor *t = st_find(f, s->it[i].name);
        s->it[i].found = t != NULL;
        if (t) memcpy(s->it[i].f, t->data, t->nbytes);
    }
    st_close(f);
    return rc;
}
