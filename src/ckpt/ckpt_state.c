/* A rank's own state file (ckpt_state.h): named float tensors and a few numbers as metadata, in
 * the safetensors format of the chunk files. */
#include "ckpt/ckpt_state.h"
#include "io/safetensors.h"
#include "util/pt.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STATE_FORMAT "pipetrain-rank-state"
#define STATE_VERSION "1"

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

static void meta_long(st_writer *w, const char *key, long v) {
    char s[32];
    snprintf(s, sizeof s, "%ld", v);
    st_writer_meta(w, key, s);
}

int ckpt_state_write(const char *dir, int rank, const ckpt_state *s) {
    char path[1300];
    ckpt_state_path(path, sizeof path, dir, rank);
    st_writer *w = st_writer_new();
    int rc = 0;
    st_writer_meta(w, "format", STATE_FORMAT);
    st_writer_meta(w, "version", STATE_VERSION);
    st_writer_meta(w, "sig", s->sig);
    meta_long(w, "rank", rank);
    meta_long(w, "step", s->step);
    meta_long(w, "n_upd", s->n_upd);
    meta_long(w, "pending", s->pending);
    for (int i = 0; i < s->n && rc == 0; i++) {
        const ckpt_state_item *it = &s->it[i];
        int64_t shape[1] = { (int64_t)it->n };
        if (it->f) rc = st_writer_add(w, it->name, ST_F32, 1, shape, it->f);
    }
    if (rc == 0) rc = st_write(w, path);
    st_writer_free(w);
    return rc < 0 ? pt_adderr("rank state %s: ", path) : 0;
}

/* Metadata key as a whole number into *v; -1 naming file and field. */
static int meta_get(const st_file *f, const char *key, long *v) {
    const char *s = st_meta(f, key);
    char *end;
    if (!s) return pt_seterr("%s: field \"%s\" missing (damaged rank state)", st_path(f), key);
    *v = strtol(s, &end, 10);
    if (end == s || *end) return pt_seterr("%s: field \"%s\" is '%s', not a whole number", st_path(f), key, s);
    return 0;
}

/* The file's header against s: 1 usable, 0 not (why says), -1 damaged. */
static int state_check(const st_file *f, int rank, ckpt_state *s, char *why, size_t nw) {
    const char *fmt = st_meta(f, "format"), *sig = st_meta(f, "sig");
    long r, step, n_upd, pending;
    if (!fmt || strcmp(fmt, STATE_FORMAT))
        return pt_seterr("%s: field \"format\" missing or not \"" STATE_FORMAT "\"", st_path(f));
    if (!sig) return pt_seterr("%s: field \"sig\" missing (damaged rank state)", st_path(f));
    if (meta_get(f, "rank", &r) < 0 || meta_get(f, "step", &step) < 0 || meta_get(f, "n_upd", &n_upd) < 0 ||
        meta_get(f, "pending", &pending) < 0) return -1;
    if (r != rank) return pt_seterr("%s: field \"rank\" is %ld, expected %d", st_path(f), r, rank);
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
    s->step = step;
    s->n_upd = n_upd;
    s->pending = (int)pending;
    return 1;
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
