/* Cleaning a save folder: temporary folders of dead writers, and all but the newest N
 * checkpoints. */
#include "ckpt/ckpt_int.h"
#include "util/pt.h"
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

