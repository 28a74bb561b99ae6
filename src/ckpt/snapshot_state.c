/* Snapshots: the ranks' own state files (ckpt/ckpt_state.h). Writing: each slot's
 * "state-<rank>.safetensors" made and mapped once, refilled in place every generation (the
 * chunk files' way: snapshot_slot.c), so the copy is a memcpy and the peer copy sends it from
 * the mapping; snap.json names it ({"state": {"world", "bytes", "sum64"}}). Restoring: every
 * rank's file of the step, from its own folder or a peer's copy of it (a replica's sums-only
 * copy: the replica's own file, the same bytes), copied into the checkpoint folder the restore
 * assembles while its sum is taken (one read: the copy is the check), the places each may be
 * listed once per restore from the snap.json files the restore reads anyway. Not here: the
 * chunks (snapshot_slot.c, snapshot_restore.c). */
#include "ckpt/ckpt_int.h"
#include "ckpt/ckpt_state.h"
#include "ckpt/snapshot_int.h"
#include "io/io.h"
#include "io/json.h"
#include "util/pt.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int snap_state_fill(snap_slot *sl, int rank, const ckpt_state *st, uint64_t *sum, size_t *bytes) {
    char p[1300];
    ckpt_state_path(p, sizeof p, sl->dir, rank);
    if (sl->st.map && sl->st.key != ckpt_state_key(rank, st)) ckpt_state_unmap(&sl->st);   /* another job's */
    if (!sl->st.map && ckpt_state_map(&sl->st, p, rank, st) < 0) return -1;
    ckpt_state_fill(&sl->st, st);
    *sum = snap_sum_mem(sl->st.map, sl->st.bytes);
    *bytes = sl->st.bytes;
    return 0;
}

/* One place rank w's state file of a step may be: generation folder gd (the rank's own, or a
 * peer's copy of it), the size and sum its snap.json gives, and at >= 0 when gd is a sums-only
 * copy (its file may be the replica `at`'s own of the step). */
typedef struct {
    long step;
    int w, own, seq;            /* own: gd is rank w's own folder (tried first); seq: order noted */
    char *gd;
    size_t bytes;
    uint64_t sum;
    int world, at;
} state_src;

struct snap_states {
    char root[1000];
    state_src *src;
    int n, cap, sorted;
    long took;                  /* the step whose files are in took_dir now (-1: none) */
    int took_world;             /* how many (0: the step has not every rank's good) */
    char took_dir[1200];
    int n_bad;                  /* ranks' states of a step listed whose every copy failed its check */
};

snap_states *snap_states_new(const char *root) {
    snap_states *s = pt_calloc(1, sizeof *s);
    snprintf(s->root, sizeof s->root, "%s", root);
    s->took = -1;
    return s;
}

void snap_states_note(snap_states *s, const char *gd, int w, long step, int own, const struct cJSON *j) {
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "state");
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(e, "bytes"), *sm = cJSON_GetObjectItemCaseSensitive(e, "sum64");
    state_src o = { .step = step, .w = w, .own = own, .seq = s->n, .at = -1 };
    if (!cJSON_IsObject(e) || !cJSON_IsNumber(b) || !cJSON_IsString(sm) ||
        io_json_int(&o.world, e, "world", IO_JSON_REQUIRED, 1, 1 << 30, "%s/snap.json: state.world", gd) < 0 ||
        io_json_int(&o.at, j, "files_at", IO_JSON_OPTIONAL, 0, 1 << 30, "%s/snap.json: files_at", gd) < 0) return;
    o.bytes = (size_t)b->valuedouble;
    o.sum = strtoull(sm->valuestring, NULL, 16);
    o.gd = pt_malloc(strlen(gd) + 1);
    strcpy(o.gd, gd);
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->src = pt_realloc(s->src, sizeof *s->src * (size_t)s->cap);
    }
    s->src[s->n++] = o;
    s->sorted = 0;
}

/* By step, rank, own folder first, then the order noted (the peers' copies as found). */
static int src_cmp(const void *pa, const void *pb) {
    const state_src *a = pa, *b = pb;
    if (a->step != b->step) return a->step < b->step ? -1 : 1;
    if (a->w != b->w) return a->w < b->w ? -1 : 1;
    if (a->own != b->own) return a->own ? -1 : 1;
    return (a->seq > b->seq) - (a->seq < b->seq);
}

/* The sources of rank w at `step` (sorted): *first and how many. */
static int srcs_of(snap_states *s, long step, int w, const state_src **first) {
    if (!s->sorted) {
        if (s->n) qsort(s->src, (size_t)s->n, sizeof *s->src, src_cmp);
        s->sorted = 1;
    }
    int lo = 0, hi = s->n;
    while (lo < hi) {   /* the first at or after (step, w) */
        int mid = (lo + hi) / 2;
        const state_src *m = &s->src[mid];
        if (m->step < step || (m->step == step && m->w < w)) lo = mid + 1;
        else hi = mid;
    }
    int k = lo;
    while (k < s->n && s->src[k].step == step && s->src[k].w == w) k++;
    *first = s->src ? &s->src[lo] : NULL;   /* none noted: no offset from NULL */
    return k - lo;
}

int snap_states_listed(snap_states *s, long step) {
    const state_src *o;
    if (srcs_of(s, step, 0, &o) == 0) return 0;
    for (int w = 1; w < o->world; w++) {
        const state_src *x;
        if (srcs_of(s, step, w, &x) == 0) return 0;
    }
    return 1;
}

/* o's file: in its folder (a peer's sums-only copy gets it whole too), else with "files_at": v
 * the replica v's own generation of the step (the same bytes when the replicas' states are: the
 * sum says). */
static void src_file(const snap_states *s, const state_src *o, char *p, size_t n) {
    ckpt_state_path(p, n, o->gd, o->w);
    if (o->at >= 0 && access(p, F_OK) != 0) {
        char gd[1300];
        snprintf(gd, sizeof gd, "%s/rank-%d/gen-%ld", s->root, o->at, o->step);
        ckpt_state_path(p, n, gd, o->at);
    }
}

int snap_copy_checked(const char *from, const char *to, size_t bytes, uint64_t want) {
    struct stat sb;
    FILE *a = fopen(from, "rb");
    if (!a || fstat(fileno(a), &sb) != 0 || (size_t)sb.st_size != bytes) {   /* the size: no read */
        if (a) fclose(a);
        return 1;
    }
    FILE *b = fopen(to, "wb");
    if (!b) {
        fclose(a);
        return pt_seterr("snapshot restore: cannot write %s: %s", to, strerror(errno));
    }
    unsigned char *buf = pt_malloc(1 << 20);
    snap_sum sum;
    size_t got;
    int rc = 0;
    snap_sum_init(&sum);
    while (rc == 0 && (got = fread(buf, 1, 1 << 20, a)) > 0) {
        snap_sum_add(&sum, buf, got);
        if (fwrite(buf, 1, got, b) != got) rc = pt_seterr("snapshot restore: writing %s failed", to);
    }
    if (rc == 0 && ferror(a)) rc = 1;
    if (fclose(b) != 0 && rc == 0) rc = pt_seterr("snapshot restore: writing %s failed", to);
    fclose(a);
    free(buf);
    if (rc == 0 && (sum.n != bytes || snap_sum_end(&sum) != want)) rc = 1;
    if (rc) remove(to);
    return rc;
}

/* Rank w's state of `step` (of world ranks; world 0: any) copied good into tmpdir from the
 * first of its places that checks. Its world, 0 when none did, -1 when tmpdir cannot be
 * written. */
static int take_rank(snap_states *s, long step, int w, int world, const char *tmpdir) {
    char to[1300];
    const state_src *o;
    int n = srcs_of(s, step, w, &o);
    ckpt_state_path(to, sizeof to, tmpdir, w);
    int failed = 0;
    for (int k = 0; k < n; k++) {
        if (world && o[k].world != world) continue;
        char from[1600];
        src_file(s, &o[k], from, sizeof from);
        int rc = snap_copy_checked(from, to, o[k].bytes, o[k].sum);
        if (rc <= 0) return rc < 0 ? -1 : o[k].world;
        failed++;   /* damaged or gone since listed: the next place */
    }
    s->n_bad += failed > 0;   /* a rank whose every listed copy failed */
    return 0;
}

void snap_states_drop(snap_states *s) {
    char p[1300];
    for (int w = 0; s->took >= 0 && w < s->took_world; w++) {
        ckpt_state_path(p, sizeof p, s->took_dir, w);
        remove(p);
    }
    s->took = -1;
    s->took_world = 0;
}

int snap_states_take(snap_states *s, long step, const char *tmpdir) {
    if (s->took == step && !strcmp(s->took_dir, tmpdir)) return s->took_world;   /* known */
    snap_states_drop(s);
    s->took = step;
    snprintf(s->took_dir, sizeof s->took_dir, "%s", tmpdir);
    if (!snap_states_listed(s, step)) return 0;
    int world = take_rank(s, step, 0, 0, tmpdir);
    s->took_world = world > 0 ? world : 0;
    for (int w = 1; w < s->took_world; w++) {
        int r = take_rank(s, step, w, world, tmpdir);
        if (r > 0) continue;
        snap_states_drop(s);   /* not every rank's: none (absent ones are fine to remove) */
        s->took = step;
        return r;
    }
    return world;
}

int snap_states_bad(const snap_states *s) {
    return s->n_bad;
}

void snap_states_free(snap_states *s) {
    if (!s) return;
    for (int i = 0; i < s->n; i++) free(s->src[i].gd);
    free(s->src);
    free(s);
}
