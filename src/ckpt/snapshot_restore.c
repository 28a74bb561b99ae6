/* Snapshots (snapshot.h): the restore. Reads every rank's generations (snap.json), finds the
 * newest step whose chunks can all be found with good checksums, and writes them as a checkpoint
 * folder (ckpt_begin / ckpt_commit: the manifest and the atomic rename of checkpoint.c). Each
 * file is read once: copied into the folder being assembled while its sum is taken (the copy is
 * the check; one that fails is removed and the next source tried). Not here: the writer
 * (snapshot.c). */
#include "ckpt/snapshot.h"
#include "ckpt/ckpt_int.h"
#include "ckpt/snapshot_int.h"
#include "io/io.h"
#include "io/json.h"
#include "model/config.h"
#include "util/pt.h"
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SNAP_TP_MAX 16   /* TP ranks (and with moment slices replicas) per chunk a restore joins */

/* One generation of one rank, as its snap.json says. */
typedef struct {
    char dir[1500];
    char fdir[1500];                    /* its files' folder: dir, or for sums only ("files_at":
                                         * the holder) the holder's own generation of the step */
    int files_at;                       /* that holder's rank (-1: the files are in dir) */
    int rank;
    long step;
    int K;                              /* chunks of its layout */
    int chunk_first[CKPT_MAX_CHUNKS + 1];
    int shards;                         /* --zero 1: the world ranks whose moment shards it needs */
    int tp;                             /* tensor parallelism: each chunk in tp TP ranks' files */
    int D, slices, world;               /* replicas; slices (--zero 1 under TP: moment slices in the
                                         * chunk files): every one of the world ranks' generations
                                         * needed, all files of a chunk joined */
    cJSON *j;                           /* snap.json, owned */
    int checked[CKPT_SNAP_PIECES];      /* per piece: 0 not yet, 1 good, -1 bad */
} snap_gen;

static int in_list(int v, const int *list, int n) {
    for (int i = 0; i < n; i++)
        if (list[i] == v) return 1;
    return 0;
}

/* g's snap.json read and its layout checked; -1 when it is not a usable generation. */
static int gen_load(snap_gen *g) {
    char p[1600];
    snprintf(p, sizeof p, "%s/snap.json", g->dir);
    unsigned char *text;
    size_t len;
    if (io_map_file(p, &text, &len) < 0 || !text) return -1;   /* the whole file, whatever its size */
    g->j = cJSON_ParseWithLength((const char *)text, len);
    munmap(text, len);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(g->j, "format");
    const cJSON *lay = cJSON_GetObjectItemCaseSensitive(g->j, "layout");
    const cJSON *cf = cJSON_GetObjectItemCaseSensitive(lay, "chunk_first");
    long step;
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "pipetrain-snapshot") ||
        io_json_long(&step, g->j, "step", IO_JSON_REQUIRED, 1, 1L << 53, "%s: step", p) < 0 ||
        step != g->step || !cJSON_IsArray(cf) || cJSON_GetArraySize(cf) < 2 ||
        cJSON_GetArraySize(cf) > CKPT_MAX_CHUNKS + 1) return -1;
    g->K = cJSON_GetArraySize(cf) - 1;
    g->tp = 1;
    if (io_json_int(&g->shards, lay, "shards", IO_JSON_OPTIONAL, 0, 1 << 20, "%s: shards", p) < 0 ||
        io_json_int(&g->tp, lay, "tp", IO_JSON_OPTIONAL, 1, SNAP_TP_MAX, "%s: tp", p) < 0 ||
        io_json_int(&g->D, lay, "D", IO_JSON_REQUIRED, 1, 1 << 20, "%s: D", p) < 0 ||
        io_json_int(&g->slices, lay, "moment_slices", IO_JSON_OPTIONAL, 0, 1, "%s: moment_slices", p) < 0) return -1;
    if (g->slices && io_json_int(&g->world, lay, "world", IO_JSON_REQUIRED, 1, 1 << 20, "%s: world", p) < 0)
        return -1;
    g->D = 1;   /* with --zero 0, one replica's files make a chunk whole */
    g->files_at = -1;
    if (io_json_int(&g->files_at, g->j, "files_at", IO_JSON_OPTIONAL, 0, 1 << 30, "%s: files_at", p) < 0) return -1;
    for (int c = 0; c <= g->K; c++) {   /* whole layer numbers, increasing: each chunk >= 1 layer */
        const cJSON *x = cJSON_GetArrayItem(cf, c);
        if (!io_json_is_whole(x, c ? g->chunk_first[c - 1] + 1 : 0, 1 << 20)) return -1;
        g->chunk_first[c] = (int)x->valuedouble;
    }
    return 0;
}

/* The generations of folder rd (a rank's own, or a peer copy of origin `rank`'s held in rank
 * folder hold_rd of rank holder) appended to *gens (n of cap used), and their state entries
 * noted in st (every snap.json read here, once). A sums-only copy's files are the holder's own
 * generation of the step; one naming another rank is not used. */
static void gens_add(const char *rd, int rank, const char *hold_rd, int holder, snap_states *st, snap_gen **gens,
                     int *n, int *cap) {
    long *steps;
    int k = snap_list_gens(rd, &steps);
    for (int i = 0; i < k; i++) {
        if (*n == *cap) {
            *cap = *cap ? 2 * *cap : 16;
            *gens = pt_realloc(*gens, sizeof **gens * (size_t)*cap);
        }
        snap_gen *g = &(*gens)[*n];
        memset(g, 0, sizeof *g);
        snprintf(g->dir, sizeof g->dir, "%s/gen-%ld", rd, steps[i]);
        g->rank = rank;
        g->step = steps[i];
        int ok = gen_load(g) == 0 && (g->files_at < 0 || (hold_rd && g->files_at == holder));
        if (g->j) snap_states_note(st, g->dir, rank, steps[i], hold_rd == NULL, g->j);
        if (g->files_at >= 0) snprintf(g->fdir, sizeof g->fdir, "%s/gen-%ld", hold_rd ? hold_rd : "", steps[i]);
        else snprintf(g->fdir, sizeof g->fdir, "%s", g->dir);
        if (ok && g->files_at >= 0 && access(g->fdir, F_OK) != 0) ok = 0;   /* the holder's own is gone (kept fewer) */
        if (ok) (*n)++;
        else cJSON_Delete(g->j);
    }
    free(steps);
}

/* The peer copies held in rank folder rd: rd/peer-<origin>/, each as origin's generations. */
static void gens_add_peers(const char *rd, int holder, snap_states *st, snap_gen **gens, int *n, int *cap) {
    DIR *d = opendir(rd);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        char *end, pd[1400];
        if (strncmp(e->d_name, "peer-", 5)) continue;
        long o = strtol(e->d_name + 5, &end, 10);
        if (end == e->d_name + 5 || *end || o < 0) continue;
        snprintf(pd, sizeof pd, "%s/%s", rd, e->d_name);
        gens_add(pd, (int)o, rd, holder, st, gens, n, cap);
    }
    closedir(d);
}

/* Every generation under root/rank-* and their peer copies (rank folders in skip left out: a
 * lost host's memory, its own and the copies it held) into *gens (allocated, grown as needed;
 * free it), their state entries into st; returns how many. */
static int gens_collect(const char *root, const int *skip, int n_skip, snap_states *st, snap_gen **gens) {
    DIR *d = opendir(root);
    *gens = NULL;
    if (!d) return 0;
    struct dirent *e;
    int n = 0, cap = 0;
    while ((e = readdir(d))) {
        char *end;
        if (strncmp(e->d_name, "rank-", 5)) continue;
        long w = strtol(e->d_name + 5, &end, 10);
        if (end == e->d_name + 5 || *end || in_list((int)w, skip, n_skip)) continue;
        char rd[1000];
        snprintf(rd, sizeof rd, "%s/%s", root, e->d_name);
        gens_add(rd, (int)w, NULL, -1, st, gens, &n, &cap);
        gens_add_peers(rd, (int)w, st, gens, &n, &cap);
    }
    closedir(d);
    return n;
}

/* The file of g's entry e under its name in g's folder: chunk c or (shard) rank c's moments. */
static void piece_path(const snap_gen *g, int shard, int c, char *p, size_t n) {
    if (shard) ckpt_shard_path(p, n, g->fdir, c);
    else ckpt_chunk_path(p, n, g->fdir, c);
}

/* The entry of g holding chunk c (shard 0: with moments unless g's layout has shards; TP rank
 * tr's under tensor parallelism, any when tr < 0) or rank c's moment shard (shard 1); -1: none. */
static int gen_entry(const snap_gen *g, int shard, int c, int tr) {
    const cJSON *ch = cJSON_GetObjectItemCaseSensitive(g->j, "chunks");
    for (int i = 0; i < cJSON_GetArraySize(ch) && i < CKPT_SNAP_PIECES; i++) {
        const cJSON *e = cJSON_GetArrayItem(ch, i);
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, shard ? "shard" : "chunk");
        const cJSON *opt = cJSON_GetObjectItemCaseSensitive(e, "optim");
        if (!io_json_is_whole(id, 0, shard ? 1 << 20 : CKPT_MAX_CHUNKS) || (int)id->valuedouble != c) continue;
        if (!shard && (cJSON_IsNumber(opt) ? opt->valuedouble != 0 : 1) == (g->shards > 0)) continue;
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(e, "tp_rank");
        if (!shard && tr >= 0 && (cJSON_IsNumber(t) ? (int)t->valuedouble : 0) != tr) continue;
        return i;
    }
    return -1;
}

/* A chunk joined from several files (its TP ranks', or with moment slices every rank's that has
 * one): each byte has one writer among them, or writers that agree (replicas' parameters), and is
 * zero in the others (snapshot_slot.c), so their OR is the whole chunk. */
typedef struct {
    unsigned char *acc;         /* the OR of the good files so far (NULL: none yet) */
    size_t n;
} join_acc;

/* File p mapped once: its size and sum checked, then (good) ORed into j. 0 good, 1 damaged or
 * unreadable (j as it was), -1 when its size differs from j's first file's (pt_err says). */
static int join_checked(const char *p, size_t bytes, uint64_t sum, join_acc *j) {
    unsigned char *map;
    size_t len;
    if (io_map_file(p, &map, &len) < 0) return 1;
    int rc = len != bytes || snap_sum_mem(map, len) != sum;
    if (!rc && j->acc && len != j->n) rc = pt_seterr("snapshot restore: %s has %zu bytes, the first file %zu", p, len, j->n);
    if (!rc && !j->acc) { j->n = len; j->acc = pt_calloc(len ? len : 1, 1); }
    for (size_t i = 0; rc == 0 && i < len; i++) j->acc[i] |= map[i];
    if (map) munmap(map, len);
    return rc;
}

/* Piece i of g (shard, or chunk c) read once with its size and sum checked as it is read (the
 * copy is the check): copied to `to`, or (j) ORed into the chunk being joined. 1 good; 0 when g
 * has no such piece or it is damaged (`to` removed, j as it was; *bad counts each damaged file
 * once, and a damaged one is not read again); -1 when `to` cannot be written or the files of one
 * chunk differ in size (pt_err says). */
static int gen_take(snap_gen *g, int i, int shard, int c, const char *to, join_acc *j, int *bad) {
    if (i < 0 || g->checked[i] < 0) return 0;
    const cJSON *e = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(g->j, "chunks"), i);
    const cJSON *sum = cJSON_GetObjectItemCaseSensitive(e, "sum64");
    long bytes;
    char p[1600];
    piece_path(g, shard, c, p, sizeof p);
    int rc = 1;
    if (io_json_long(&bytes, e, "bytes", IO_JSON_REQUIRED, 0, 1L << 53, "%s: bytes", g->dir) == 0 && cJSON_IsString(sum)) {
        uint64_t h = strtoull(sum->valuestring, NULL, 16);
        rc = j ? join_checked(p, (size_t)bytes, h, j) : snap_copy_checked(p, to, (size_t)bytes, h);
    }
    if (rc <= 0) {
        if (rc == 0) g->checked[i] = 1;
        return rc < 0 ? -1 : 1;
    }
    if (g->checked[i] == 0) {
        (*bad)++;
        if (g->files_at >= 0)   /* a replica's file for a lost rank's: say why it is not */
            fprintf(stderr, "pipetrain: snapshot restore: rank %d's generation %ld (sums only, kept at rank %d) "
                    "does not match that rank's own %s (size or sum64 differs: the replicas differ, or the file "
                    "changed): not used for rank %d; trying the next source\n", g->rank, g->step, g->files_at, p,
                    g->rank);
    }
    g->checked[i] = -1;
    return 0;
}

/* j's chunk written to `to`. 0, or -1 naming it. */
static int join_write(const join_acc *j, const char *to) {
    FILE *f = fopen(to, "wb");
    int rc = 0;
    if (!f || fwrite(j->acc, 1, j->n, f) != j->n) rc = pt_seterr("snapshot restore: cannot write %s: %s", to, strerror(errno));
    if (f && fclose(f) != 0 && rc == 0) rc = pt_seterr("snapshot restore: writing %s failed", to);
    return rc;
}

static int same_layout(const snap_gen *a, const snap_gen *b) {
    return a->K == b->K && a->shards == b->shards && a->tp == b->tp && a->slices == b->slices && a->world == b->world && !memcmp(a->chunk_first, b->chunk_first, sizeof(int) * (size_t)(a->K + 1));
}

/* The step's pieces copied so far into tmp removed (ref's layout: a step found incomplete). */
static void step_drop(const snap_gen *ref, const char *tmp) {
    char p[1300];
    for (int c = 0; c < ref->K + ref->shards; c++) {
        if (c < ref->K) ckpt_chunk_path(p, sizeof p, tmp, c);
        else ckpt_shard_path(p, sizeof p, tmp, c - ref->K);
        remove(p);
    }
}

/* With moment slices (--zero 1 under TP): every rank's generation of the step with all its
 * chunk files good, each chunk joined from them into tmp; src[c * world + w] rank w's file of
 * chunk c, or NULL (it has none). 1 when every rank is there and every chunk has a file, 0 when
 * not, -1 on an error (step_complete). */
static int step_complete_slices(snap_gen *gens, int n, const snap_gen *ref, const char *tmp, snap_gen **src, int *bad) {
    snap_gen **gw = pt_calloc((size_t)ref->world, sizeof *gw);
    int rc = 1;
    for (int w = 0; w < ref->world && rc == 1; w++) {
        for (int i = 0; i < n && !gw[w]; i++)
            if (gens[i].step == ref->step && gens[i].rank == w && same_layout(&gens[i], ref)) gw[w] = &gens[i];
        if (!gw[w]) rc = 0;
    }
    for (int c = 0; c < ref->K && rc == 1; c++) {
        join_acc j = { 0 };
        char to[1300];
        for (int w = 0; w < ref->world && rc == 1; w++) {
            const cJSON *ch = cJSON_GetObjectItemCaseSensitive(gw[w]->j, "chunks");
            int listed = 0;   /* a chunk it lists must be good */
            for (int i = 0; i < cJSON_GetArraySize(ch); i++) {
                const cJSON *id = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(ch, i), "chunk");
                listed |= cJSON_IsNumber(id) && (int)id->valuedouble == c;
            }
            if (listed) rc = gen_take(gw[w], gen_entry(gw[w], 0, c, -1), 0, c, NULL, &j, bad);
            src[c * ref->world + w] = listed && rc == 1 ? gw[w] : NULL;
        }
        ckpt_chunk_path(to, sizeof to, tmp, c);
        if (rc == 1 && !j.acc) rc = 0;   /* no rank has the chunk */
        if (rc == 1 && join_write(&j, to) < 0) rc = -1;
        free(j.acc);
    }
    free(gw);
    return rc;
}

/* One piece of step ref->step (ref's layout: chunk id of TP rank tr, or rank id's moment shard)
 * taken into `to` (or j) from the first generation whose file checks: *found that one, NULL
 * when none does. 1 found, 0 none, -1 an error (gen_take). */
static int piece_find(snap_gen *gens, int n, const snap_gen *ref, int is_shard, int id, int tr, const char *to,
                      join_acc *j, snap_gen **found, int *bad) {
    *found = NULL;
    for (int i = 0; i < n; i++) {
        snap_gen *g = &gens[i];
        if (g->step != ref->step || !same_layout(g, ref) || (is_shard && g->rank != id)) continue;
        int rc = gen_take(g, gen_entry(g, is_shard, id, tr), is_shard, id, to, j, bad);
        if (rc != 0) {
            *found = rc > 0 ? g : NULL;
            return rc;
        }
    }
    return 0;
}

/* For step `step` with ref's layout, every piece copied into folder tmp from a good copy, each
 * file read once (the copy is the check: one that fails its sum is removed and the next source
 * tried): src[c * tp + t] the generation chunk c (of TP rank t) came from, joined by OR under
 * tensor parallelism, and with --zero 1 at tp 1 shard[r] the one rank r's moments came from (only
 * rank r's own folder, or its peer copy, has them). With moment slices see step_complete_slices.
 * 1 when every piece was found; 0 when not (none of the step's files left in tmp); -1 when tmp
 * cannot be written or a chunk's files differ in size (pt_err says). */
static int step_complete(snap_gen *gens, int n, const snap_gen *ref, const char *tmp, snap_gen **src, snap_gen **shard,
                         int *bad) {
    int rc = 1;
    if (ref->slices) rc = step_complete_slices(gens, n, ref, tmp, src, bad);
    for (int c = 0; !ref->slices && c < ref->K + ref->shards && rc == 1; c++) {
        int is_shard = c >= ref->K, id = is_shard ? c - ref->K : c, tp = is_shard ? 1 : ref->tp;
        join_acc j = { 0 };
        char to[1300];
        if (is_shard) ckpt_shard_path(to, sizeof to, tmp, id);
        else ckpt_chunk_path(to, sizeof to, tmp, id);
        for (int tr = 0; tr < tp && rc == 1; tr++)
            rc = piece_find(gens, n, ref, is_shard, id, tr, to, tp > 1 ? &j : NULL, is_shard ? &shard[id] : &src[id * tp + tr], bad);
        if (rc == 1 && tp > 1 && join_write(&j, to) < 0) rc = -1;
        free(j.acc);
    }
    if (rc != 1) step_drop(ref, tmp);
    return rc;
}

/* The manifest of ref's generation (config, progress, seeds, data, layout). */
static int gen_manifest(const snap_gen *ref, ckpt_manifest *man) {
    const cJSON *j = ref->j, *lay = cJSON_GetObjectItemCaseSensitive(j, "layout");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(j, "shuffle_seed");
    const cJSON *is = cJSON_GetObjectItemCaseSensitive(j, "init_seed");
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(j, "data");
    const cJSON *sched = cJSON_GetObjectItemCaseSensitive(lay, "schedule");
    int P, D, pipes;
    const char *f = "%s/snap.json: a field is missing or not a whole number in its range";
    memset(man, 0, sizeof *man);
    if (config_from_cjson(&man->cfg, cJSON_GetObjectItemCaseSensitive(j, "config"), ref->dir) < 0) return -1;
    if (io_json_int(&man->adam_t, j, "adam_t", IO_JSON_REQUIRED, 0, 1 << 30, f, ref->dir) < 0 ||
        io_json_int(&man->batch, j, "batch", IO_JSON_REQUIRED, 1, 1 << 30, f, ref->dir) < 0 ||
        io_json_int(&man->seq, j, "seq", IO_JSON_REQUIRED, 1, 1 << 30, f, ref->dir) < 0 ||
        io_json_int(&P, lay, "P", IO_JSON_REQUIRED, 1, 1 << 20, f, ref->dir) < 0 ||
        io_json_int(&D, lay, "D", IO_JSON_REQUIRED, 1, 1 << 20, f, ref->dir) < 0 ||
        io_json_int(&pipes, lay, "pipes", IO_JSON_REQUIRED, 1, 1 << 20, f, ref->dir) < 0)
        return -1;
    if (!cJSON_IsString(sh) || !cJSON_IsString(is) || !cJSON_IsString(data))
        return pt_seterr("%s/snap.json: a field is missing or not of its type", ref->dir);
    man->step = ref->step;
    man->shuffle_seed = strtoull(sh->valuestring, NULL, 10);
    man->init_seed = strtoull(is->valuestring, NULL, 10);
    snprintf(man->data_path, sizeof man->data_path, "%s", data->valuestring);
    if (ckpt_optim_from_json(man, j, ref->dir) < 0) return -1;   /* --optim nadam's fields */
    return ckpt_manifest_set_layout(man, P, D, ref->K, pipes,
                                    cJSON_IsString(sched) ? sched->valuestring : "", ref->chunk_first);
}

/* The checkpoint folder being assembled: its temporary name, made on first use (a restore that
 * finds nothing makes none). */
typedef struct {
    const char *dir;
    char tmp[1200];
    int begun;
} restore_out;

static int out_begin(restore_out *o) {
    if (!o->begun && ckpt_begin(o->dir, o->tmp, sizeof o->tmp) < 0) return -1;
    o->begun = 1;
    return 0;
}

/* The checkpoint folder o->dir committed: the chosen step's chunk and shard files and the
 * n_states ranks' state files are in o->tmp already (copied as they were checked). */
static int assemble(const snap_gen *ref, restore_out *o, int n_states) {
    ckpt_manifest man;
    if (gen_manifest(ref, &man) < 0 || (ref->shards && ckpt_manifest_set_shards(&man, ref->shards) < 0) ||
        (n_states && ckpt_manifest_set_states(&man, n_states) < 0)) {
        ckpt_abandon(o->tmp);
        return -1;
    }
    man.tp = ref->tp;
    return ckpt_commit(o->dir, o->tmp, &man);
}

/* Newer step first; ties in the order collected. */
static int cand_cmp(const void *pa, const void *pb, void *u) {
    const snap_gen *g = u;
    int a = *(const int *)pa, b = *(const int *)pb;
    if (g[a].step != g[b].step) return g[a].step > g[b].step ? -1 : 1;
    return (a > b) - (a < b);
}

/* The newest of gens[0..n) whose step is complete (its pieces copied into o->tmp as they are
 * checked; src, shard filled as step_complete's) with every rank's own state (pass 0: copied
 * into o->tmp, checked as copied; *n_states their count), else (pass 1) without; NULL when none
 * is. *err set when o->tmp cannot be written. */
static snap_gen *choose(snap_gen *gens, int n, snap_states *st, restore_out *o, snap_gen **src, snap_gen **shard,
                        int *n_states, int *bad, int *err) {
    int *order = pt_malloc(sizeof *order * (size_t)(n ? n : 1));
    snap_gen *best = NULL;
    for (int i = 0; i < n; i++) order[i] = i;
    qsort_r(order, (size_t)n, sizeof *order, cand_cmp, gens);
    char *dead = pt_calloc((size_t)(n ? n : 1), 1);   /* its step and layout found incomplete */
    int with = 0;
    for (int pass = 0; pass < 2 && !best && !*err; pass++)   /* with every rank's own state (pass 0), else without */
        for (int k = 0; k < n && !best && !*err; k++) {
            snap_gen *g = &gens[order[k]];
            if (dead[order[k]] || (pass == 0 && !snap_states_listed(st, g->step))) continue;   /* nothing read */
            if (pass == 0 && (out_begin(o) < 0 || (with = snap_states_take(st, g->step, o->tmp)) < 0)) *err = 1;
            if (pass == 0 && with <= 0) continue;
            int rc = *err || out_begin(o) < 0 ? -1 : step_complete(gens, n, g, o->tmp, src, shard, bad);
            if (rc > 0) best = g;
            *err |= rc < 0;
            for (int i = 0; i < n && rc == 0; i++)   /* its ties and pass 1 read none of it again */
                dead[i] |= gens[i].step == g->step && same_layout(&gens[i], g);
            if (pass == 1) with = 0;
        }
    if (!best || with <= 0) snap_states_drop(st);   /* chosen without state, or none: no state files stay */
    *n_states = best && !*err ? with : 0;
    free(dead);
    free(order);
    return *err ? NULL : best;
}

int ckpt_snap_restore(const char *root, const int *skip, int n_skip, const char *dir,
                      ckpt_snap_found *found) {
    snap_gen *gens;
    snap_states *st = snap_states_new(root);
    restore_out o = { .dir = dir };
    int n = gens_collect(root, skip, n_skip, st, &gens), rc = 0, err = 0, n_states, most = SNAP_TP_MAX, shards = 1;
    for (int i = 0; i < n; i++) {   /* any number of ranks: as many as the generations say */
        if (gens[i].slices && gens[i].world > most) most = gens[i].world;
        if (gens[i].shards > shards) shards = gens[i].shards;
    }
    snap_gen **src = pt_calloc((size_t)CKPT_MAX_CHUNKS * (size_t)most, sizeof *src);
    snap_gen **shard = pt_calloc((size_t)shards, sizeof *shard);
    memset(found, 0, sizeof *found);
    snap_gen *best = choose(gens, n, st, &o, src, shard, &n_states, &found->n_bad, &err);
    if (best) {
        rc = assemble(best, &o, n_states) < 0 ? -1 : 1;
        found->step = best->step;
        found->n_chunks = best->K;
        int per = best->slices ? best->world : best->tp;
        for (int c = 0; c < best->K; c++) {
            found->from_rank[c] = -1;
            for (int k = 0; k < per && found->from_rank[c] < 0; k++)
                if (src[c * per + k]) found->from_rank[c] = src[c * per + k]->rank;
        }
    }
    if (best && !err && n_states == 0 && snap_states_bad(st) > 0)
        fprintf(stderr, "pipetrain: snapshot restore: step %ld restored without the ranks' own state (asynchronous "
                "versions, --dp-sync's outer state): at %d step%s a rank's every copy of it was damaged, no step has "
                "every rank's whole; the run starts that state fresh\n", best->step, snap_states_bad(st),
                snap_states_bad(st) == 1 ? "" : "s");
    if (err) rc = -1;
    if (!best && o.begun) ckpt_abandon(o.tmp);
    snap_states_free(st);
    for (int i = 0; i < n; i++) cJSON_Delete(gens[i].j);
    free(gens);
    free(shard);
    free(src);
    return rc;
}
