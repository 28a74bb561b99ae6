/* Snapshots: the ranks' own state files (ckpt/ckpt_state.h). Writing: each slot's
 * "state-<rank>.safetensors" made and mapped once, refilled in place every generation (the
 * chunk files' way: snapshot_slot.c), so the copy is a memcpy and the peer copy sends it from
 * the mapping; snap.json names it ({"state": {"world", "bytes", "sum64"}}). Restoring: every
 * rank's file of the step, from its own folder or a peer's copy of it (a replica's sums-only
 * copy: the replica's own file, the same bytes), put into the checkpoint folder the restore
 * assembles. Not here: the chunks (snapshot_slot.c, snapshot_restore.c). */
#include "ckpt/ckpt_int.h"
#include "ckpt/ckpt_state.h"
#include "ckpt/snapshot_int.h"
#include "io/io.h"
#include "io/json.h"
#include "util/pt.h"
#include <cjson/cJSON.h>
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
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

/* One place rank w's state file of a step may be: the file, and the size and sum its origin's
 * snap.json gives. */
typedef struct { char file[1500]; size_t bytes; uint64_t sum; int world; } state_src;

/* Generation folder gd's "state" entry (world, bytes, sum) for rank w, and where the file is: in
 * gd (a peer's sums-only copy gets it whole too), else with "files_at": v the replica v's own
 * generation of the step (the same bytes when the replicas' states are: the sum says). 0, or -1
 * when it has none or cannot be read. */
static int state_entry(const char *root, const char *gd, int w, long step, state_src *o) {
    char p[1400];
    unsigned char *text;
    size_t len;
    int at = -1;
    snprintf(p, sizeof p, "%s/snap.json", gd);
    if (io_map_file(p, &text, &len) < 0 || !text) return -1;
    cJSON *j = cJSON_ParseWithLength((const char *)text, len);
    munmap(text, len);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "state");
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(e, "bytes"), *s = cJSON_GetObjectItemCaseSensitive(e, "sum64");
    int rc = cJSON_IsObject(e) && cJSON_IsNumber(b) && cJSON_IsString(s) &&
             io_json_int(&o->world, e, "world", IO_JSON_REQUIRED, 1, CKPT_MAX_SHARDS, "%s: state.world", p) == 0 &&
             io_json_int(&at, j, "files_at", IO_JSON_OPTIONAL, 0, 1 << 30, "%s: files_at", p) >= 0 ? 0 : -1;
    if (rc == 0) {
        o->bytes = (size_t)b->valuedouble;
        o->sum = strtoull(s->valuestring, NULL, 16);
        ckpt_state_path(o->file, sizeof o->file, gd, w);   /* there, or (sums only) at the replica */
        if (at >= 0 && access(o->file, F_OK) != 0) {
            snprintf(p, sizeof p, "%s/rank-%d/gen-%ld", root, at, step);
            ckpt_state_path(o->file, sizeof o->file, p, at);
        }
    }
    cJSON_Delete(j);
    return rc;
}

static int skipped(const int *skip, int n_skip, long r) {
    for (int k = 0; k < n_skip; k++)
        if (skip[k] == r) return 1;
    return 0;
}

/* Tries use(src, u) on each place rank w's state of `step` may be (its own folder, then the
 * peers' copies; rank folders in skip left out) until one returns 0. 0, or -1 when none did. */
static int state_each(const char *root, const int *skip, int n_skip, int w, long step,
                      int (*use)(const state_src *, void *), void *u) {
    char gd[1300];
    state_src o;
    snprintf(gd, sizeof gd, "%s/rank-%d/gen-%ld", root, w, step);
    if (!skipped(skip, n_skip, w) && state_entry(root, gd, w, step, &o) == 0 && use(&o, u) == 0) return 0;
    DIR *d = opendir(root);
    struct dirent *e;
    int rc = -1;
    while (d && rc < 0 && (e = readdir(d))) {
        char *end;
        if (strncmp(e->d_name, "rank-", 5)) continue;
        long v = strtol(e->d_name + 5, &end, 10);
        if (end == e->d_name + 5 || *end || skipped(skip, n_skip, v)) continue;
        snprintf(gd, sizeof gd, "%s/%s/peer-%d/gen-%ld", root, e->d_name, w, step);
        if (state_entry(root, gd, w, step, &o) == 0 && use(&o, u) == 0) rc = 0;
    }
    if (d) closedir(d);
    return rc;
}

typedef struct { const char *to; int world; } state_use;

/* The file copied to u->to (when u->to is set) if its size and sum are its snap.json's: a step is
 * chosen only where every rank's state checks, so the copy after it finds the same bytes. */
static int use_copy(const state_src *o, void *u) {
    unsigned char *map;
    size_t len;
    state_use *su = u;
    su->world = o->world;
    if (io_map_file(o->file, &map, &len) < 0) return -1;
    int rc = len == o->bytes && map && snap_sum_mem(map, len) == o->sum ? 0 : -1;
    FILE *f = rc == 0 && su->to ? fopen(su->to, "wb") : NULL;
    if (rc == 0 && !su->to) {
        if (map) munmap(map, len);
        return 0;
    }
    if (rc == 0 && (!f || fwrite(map, 1, len, f) != len)) rc = -1;
    if (f && fclose(f) != 0) rc = -1;
    if (map) munmap(map, len);
    return rc;
}

int snap_state_complete(const char *root, const int *skip, int n_skip, long step) {
    int world = 0, ok = 1;
    for (int w = 0; ok && (w == 0 || w < world); w++) {
        state_use u = { NULL, 0 };
        ok = state_each(root, skip, n_skip, w, step, use_copy, &u) == 0 && (w == 0 || u.world == world);
        if (w == 0) world = u.world;
    }
    return ok && world > 0;
}

int snap_state_restore(const char *root, const int *skip, int n_skip, long step, const char *tmpdir,
                       ckpt_manifest *man) {
    char p[1300];
    int world = 0, ok = 1;
    man->n_states = 0;
    for (int w = 0; ok && (w == 0 || w < world); w++) {
        ckpt_state_path(p, sizeof p, tmpdir, w);
        state_use u = { p, 0 };
        ok = state_each(root, skip, n_skip, w, step, use_copy, &u) == 0 && (w == 0 || u.world == world);
        if (w == 0) world = u.world;
    }
    if (ok && world > 0) return ckpt_manifest_set_states(man, world);
    if (world > 0)   /* checked whole when the step was chosen: changed since */
        fprintf(stderr, "pipetrain: snapshot restore at step %ld: a rank's state file under %s no longer matches "
                "its sum: resuming without the ranks' own state\n", step, root);
    for (int w = 0; w < world; w++) {   /* not all there: none (a resume says so) */
        ckpt_state_path(p, sizeof p, tmpdir, w);
        remove(p);
    }
    return 0;
}
