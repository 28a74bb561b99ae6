/* Snapshots: the ranks' own state files (ckpt/ckpt_state.h). Writing: each slot's
 * "state-<rank>.safetensors" made and mapped once, refilled in place every generation (the
 * chunk files' way: snapshot_slot.c), so the copy is a memcpy and the peer copy sends it from
 * the mapping; snap.json names it ({"state": {"world", "bytes", "sum64"}}). Restoring: every
 * rank's file of the step, from its own folder or a peer's copy of it, put into the checkpoint
 * folder the restore assembles. Not here: the chunks (snapshot_slot.c, snapshot_restore.c). */
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

/* The "state" entry of generation folder gd's snap.json: world, bytes, sum. 0, or -1 when it has
 * none or cannot be read. */
static int state_entry(const char *gd, int *world, size_t *bytes, uint64_t *sum) {
    char p[1400];
    unsigned char *text;
    size_t len;
    snprintf(p, sizeof p, "%s/snap.json", gd);
    if (io_map_file(p, &text, &len) < 0 || !text) return -1;
    cJSON *j = cJSON_ParseWithLength((const char *)text, len);
    munmap(text, len);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "state");
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(e, "bytes"), *s = cJSON_GetObjectItemCaseSensitive(e, "sum64");
    int rc = cJSON_IsObject(e) && cJSON_IsNumber(b) && cJSON_IsString(s) &&
             io_json_int(world, e, "world", IO_JSON_REQUIRED, 1, CKPT_MAX_SHARDS, "%s: state.world", p) == 0 ? 0 : -1;
    if (rc == 0) {
        *bytes = (size_t)b->valuedouble;
        *sum = strtoull(s->valuestring, NULL, 16);
    }
    cJSON_Delete(j);
    return rc;
}

/* Rank w's state file of generation gd into tmpdir when its size and sum are snap.json's. */
static int state_copy(const char *gd, int w, size_t bytes, uint64_t sum, const char *tmpdir) {
    char from[1400], to[1400];
    unsigned char *map;
    size_t len;
    ckpt_state_path(from, sizeof from, gd, w);
    ckpt_state_path(to, sizeof to, tmpdir, w);
    if (io_map_file(from, &map, &len) < 0) return -1;
    int rc = len == bytes && map && snap_sum_mem(map, len) == sum ? 0 : -1;
    FILE *f = rc == 0 ? fopen(to, "wb") : NULL;
    if (rc == 0 && (!f || fwrite(map, 1, len, f) != len)) rc = -1;
    if (f && fclose(f) != 0) rc = -1;
    if (map) munmap(map, len);
    return rc;
}

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

/* Rank w's state of generation `step` into tmpdir, from its own folder or a peer's copy (rank
 * folders in skip left out); *world from its snap.json. 0, or -1 when none is good. */
static int state_find(const char *root, const int *skip, int n_skip, int w, long step, int *world,
                      const char *tmpdir) {
    char gd[1300];
    size_t bytes;
    uint64_t sum;
    int self = 1;
    for (int k = 0; k < n_skip; k++) self &= skip[k] != w;
    snprintf(gd, sizeof gd, "%s/rank-%d/gen-%ld", root, w, step);
    if (self && state_entry(gd, world, &bytes, &sum) == 0 && state_copy(gd, w, bytes, sum, tmpdir) == 0) return 0;
    DIR *d = opendir(root);
    struct dirent *e;
    int rc = -1;
    while (d && rc < 0 && (e = readdir(d))) {
        char *end;
        if (strncmp(e->d_name, "rank-", 5)) continue;
        long v = strtol(e->d_name + 5, &end, 10), hit = 0;
        for (int k = 0; k < n_skip; k++) hit |= skip[k] == v;
        if (end == e->d_name + 5 || *end || hit) continue;
        snprintf(gd, sizeof gd, "%s/%s/peer-%d/gen-%ld", root, e->d_name, w, step);
        if (state_entry(gd, world, &bytes, &sum) == 0 && state_copy(gd, w, bytes, sum, tmpdir) == 0) rc = 0;
    }
    if (d) closedir(d);
    return rc;
}

/* Whether rank w's state file of generation `step` is in its own folder or a peer's copy with
 * the size snap.json says (the sum is checked when it is copied); *world from it. */
static int state_there(const char *root, const int *skip, int n_skip, int w, long step, int *world) {
    char gd[1300], p[1400];
    size_t bytes;
    uint64_t sum;
    struct stat sb;
    int self = 1, rc = 0;
    for (int k = 0; k < n_skip; k++) self &= skip[k] != w;
    snprintf(gd, sizeof gd, "%s/rank-%d/gen-%ld", root, w, step);
    ckpt_state_path(p, sizeof p, gd, w);
    if (self && state_entry(gd, world, &bytes, &sum) == 0 && stat(p, &sb) == 0 && (size_t)sb.st_size == bytes) return 1;
    DIR *d = opendir(root);
    struct dirent *e;
    while (d && !rc && (e = readdir(d))) {
        char *end;
        if (strncmp(e->d_name, "rank-", 5)) continue;
        long v = strtol(e->d_name + 5, &end, 10), hit = 0;
        for (int k = 0; k < n_skip; k++) hit |= skip[k] == v;
        if (end == e->d_name + 5 || *end || hit) continue;
        snprintf(gd, sizeof gd, "%s/%s/peer-%d/gen-%ld", root, e->d_name, w, step);
        ckpt_state_path(p, sizeof p, gd, w);
        rc = state_entry(gd, world, &bytes, &sum) == 0 && stat(p, &sb) == 0 && (size_t)sb.st_size == bytes;
    }
    if (d) closedir(d);
    return rc;
}

int snap_state_complete(const char *root, const int *skip, int n_skip, long step) {
    int world = 0, ok = 1;
    for (int w = 0; ok && (w == 0 || w < world); w++) {
        int wd = 0;
        ok = state_there(root, skip, n_skip, w, step, &wd) && (w == 0 || wd == world);
        if (w == 0) world = wd;
    }
    return ok && world > 0;
}

int snap_state_restore(const char *root, const int *skip, int n_skip, long step, const char *tmpdir,
                       ckpt_manifest *man) {
    char p[1300];
    int world = 0, ok = 1;
    man->n_states = 0;
    for (int w = 0; ok && (w == 0 || w < world); w++) {
        int wd = 0;
        ok = state_find(root, skip, n_skip, w, step, &wd, tmpdir) == 0 && (w == 0 || wd == world);
        if (w == 0) world = wd;
    }
    if (ok && world > 0) return ckpt_manifest_set_states(man, world);
    for (int w = 0; w < world; w++) {   /* not all there: none (a resume says so) */
        ckpt_state_path(p, sizeof p, tmpdir, w);
        remove(p);
    }
    return 0;
}
