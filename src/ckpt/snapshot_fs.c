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
#define SUM_VEC 8   /* lanes of one vector: 64 bytes (one AVX-512 register where there is one) */

typedef uint64_t sum_v8 __attribute__((vector_size(8 * SUM_VEC)));

/* nb blocks of SNAP_SUM_BLOCK bytes at p into the lanes h: lane k takes word k of each block. Four
 * vectors of eight lanes, each a chain of its own, so no multiply waits on another's result (one
 * chain is latency-bound at a quarter of this speed). */
static void sum_blocks(uint64_t *h, const unsigned char *p, size_t nb) {
    sum_v8 a, b, c, d, w0, w1, w2, w3;
    memcpy(&a, h, 64), memcpy(&b, h + 8, 64), memcpy(&c, h + 16, 64), memcpy(&d, h + 24, 64);
    for (size_t i = 0; i < nb; i++, p += SNAP_SUM_BLOCK) {
        memcpy(&w0, p, 64), memcpy(&w1, p + 64, 64), memcpy(&w2, p + 128, 64), memcpy(&w3, p + 192, 64);
        a = (a ^ w0) * SUM_PRIME, b = (b ^ w1) * SUM_PRIME, c = (c ^ w2) * SUM_PRIME, d = (d ^ w3) * SUM_PRIME;
        a ^= a >> 29, b ^= b >> 29, c ^= c >> 29, d ^= d >> 29;
    }
    memcpy(h, &a, 64), memcpy(h + 8, &b, 64), memcpy(h + 16, &c, 64), memcpy(h + 24, &d, 64);
}

void snap_sum_init(snap_sum *s) {
    for (int k = 0; k < SNAP_SUM_LANES; k++) s->h[k] = SUM_BASIS + (uint64_t)k;
    s->n = 0;
    s->nb = 0;
}

void snap_sum_add(snap_sum *s, const unsigned char *p, size_t n) {
    s->n += n;
    if (s->nb) {   /* a partial block from before: filled first */
        size_t have = (size_t)s->nb, k = SNAP_SUM_BLOCK - have < n ? SNAP_SUM_BLOCK - have : n;
        memcpy(s->buf + have, p, k);
        s->nb += (int)k, p += k, n -= k;
        if ((size_t)s->nb < SNAP_SUM_BLOCK) return;
        sum_blocks(s->h, s->buf, 1);
        s->nb = 0;
    }
    sum_blocks(s->h, p, n / SNAP_SUM_BLOCK);
    s->nb = (int)(n % SNAP_SUM_BLOCK);
    memcpy(s->buf, p + n - (size_t)s->nb, (size_t)s->nb);
}

uint64_t snap_sum_end(const snap_sum *s) {
    uint64_t r = SUM_BASIS ^ (uint64_t)s->n;
    for (int k = 0; k < SNAP_SUM_LANES; k++) {
        r = (r ^ s->h[k]) * SUM_PRIME;
        r ^= r >> 29;
    }
    for (int i = 0; i < s->nb; i++) r = (r ^ s->buf[i]) * SUM_PRIME;   /* the tail, byte-wise */
    return r;
}

uint64_t snap_sum_mem(const unsigned char *p, size_t n) {
    snap_sum s;
    snap_sum_init(&s);
    if (n) snap_sum_add(&s, p, n);
    return snap_sum_end(&s);
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

void ckpt_snap_mark_finished(const char *root, int rank, int set) {
    char p[1100];
    snprintf(p, sizeof p, "%s/rank-%d/finished", root, rank);
    if (!set) {
        unlink(p);
        return;
    }
    FILE *f = fopen(p, "w");
    if (f) fclose(f);
}

int ckpt_snap_finished(const char *root, int rank) {
    char p[1100];
    snprintf(p, sizeof p, "%s/rank-%d/finished", root, rank);
    return access(p, F_OK) == 0;
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
