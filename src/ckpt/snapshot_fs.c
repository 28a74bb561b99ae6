/* Snapshots' folder and file helpers (snapshot_int.h): generations listed, removed, checksummed;
 * the heartbeat read back (snapshot.h). */
#include "ckpt/snapshot.h"
#include "ckpt/snapshot_int.h"
#include "io/io.h"
#include "util/pt.h"
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

void snap_remove_dir(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char p[1400];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
    closedir(d);
    rmdir(dir);
}

void snap_clean_tmp(const char *rank_dir) {
    DIR *d = opendir(rank_dir);
    if (!d) return;
    struct dirent *e;
    char p[1400];
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, "gen-", 4) && strstr(e->d_name, ".tmp.")) {
            snprintf(p, sizeof p, "%s/%s", rank_dir, e->d_name);
            snap_remove_dir(p);
        }
    closedir(d);
}

static int cmp_desc(const void *a, const void *b) {
    long x = *(const long *)a, y = *(const long *)b;
    return (x < y) - (x > y);
}

int snap_list_gens(const char *rank_dir, long **steps) {
    DIR *d = opendir(rank_dir);
    *steps = NULL;
    if (!d) return 0;
    struct dirent *e;
    int n = 0, cap = 0;
    while ((e = readdir(d))) {
        char *end;
        if (strncmp(e->d_name, "gen-", 4)) continue;
        long s = strtol(e->d_name + 4, &end, 10);
        if (end == e->d_name + 4 || *end || s <= 0) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            *steps = pt_realloc(*steps, sizeof **steps * (size_t)cap);
        }
        (*steps)[n++] = s;
    }
    closedir(d);
    if (n) qsort(*steps, (size_t)n, sizeof **steps, cmp_desc);
    return n;
}

#define SUM_BASIS 0xcbf29ce484222325ULL
#define SUM_PRIME 0x100000001b3ULL
#define SUM_LANES 8

uint64_t snap_sum_mem(const unsigned char *p, size_t n) {
    uint64_t h[SUM_LANES], w;
    for (int k = 0; k < SUM_LANES; k++) h[k] = SUM_BASIS + (uint64_t)k;
    size_t i = 0;
    for (; i + 8 * SUM_LANES <= n; i += 8 * SUM_LANES)
        for (int k = 0; k < SUM_LANES; k++) {   /* independent chains: no multiply waits on another */
            memcpy(&w, p + i + 8 * (size_t)k, 8);
            h[k] = (h[k] ^ w) * SUM_PRIME;
            h[k] ^= h[k] >> 29;
        }
    uint64_t r = SUM_BASIS ^ (uint64_t)n;
    for (int k = 0; k < SUM_LANES; k++) {
        r = (r ^ h[k]) * SUM_PRIME;
        r ^= r >> 29;
    }
    for (; i < n; i++) r = (r ^ p[i]) * SUM_PRIME;
    return r;
}

int snap_file_sum(const char *path, uint64_t *hash, size_t *len) {
    unsigned char *map;
    if (io_map_file(path, &map, len) < 0) return -1;
    *hash = snap_sum_mem(map, *len);
    if (map) munmap(map, *len);
    return 0;
}

int ckpt_snap_read_heartbeat(const char *root, int rank, long *step, long *pid, double *when, char *host) {
    char p[1100], line[200] = "", h[65] = "";
    snprintf(p, sizeof p, "%s/rank-%d/heartbeat", root, rank);
    FILE *f = fopen(p, "r");
    if (!f) return -1;
    int ok = fgets(line, sizeof line, f) && sscanf(line, "%ld %ld %lf %64s", step, pid, when, h) >= 3;
    fclose(f);
    if (host) snprintf(host, 65, "%s", h);
    return ok ? 0 : -1;
}

/* Removes the generations of folder rd after step. */
static void reset_gens(const char *rd, long step) {
    long *steps;
    char p[1500];
    int n = snap_list_gens(rd, &steps);
    for (int i = 0; i < n; i++)
        if (steps[i] > step) {
            snprintf(p, sizeof p, "%s/gen-%ld", rd, steps[i]);
            snap_remove_dir(p);
        }
    free(steps);
}

void ckpt_snap_reset(const char *root, long step) {
    DIR *d = opendir(root);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, "rank-", 5)) continue;
        char rd[1000], p[1400];
        snprintf(rd, sizeof rd, "%s/%s", root, e->d_name);
        snprintf(p, sizeof p, "%s/heartbeat", rd);
        unlink(p);
        reset_gens(rd, step);
        DIR *r = opendir(rd);   /* the peer copies it holds */
        struct dirent *q;
        while (r && (q = readdir(r)))
            if (!strncmp(q->d_name, "peer-", 5)) {
                snprintf(p, sizeof p, "%s/%s", rd, q->d_name);
                reset_gens(p, step);
            }
        if (r) closedir(r);
    }
    closedir(d);
}
