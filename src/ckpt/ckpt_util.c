/* What the checkpoint files share (ckpt_int.h): the crash test hook, folder and file names,
 * file checksums, the step of a complete checkpoint folder, and abandoning a temporary folder.
 * Not here: writing, reading or resolving checkpoints. */
#include "ckpt/ckpt_int.h"
#include "util/pt.h"
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- test hook: one pointer test when unset ---------------------------------------------- */

static const char *crash_point;
static int crash_arg;

void ckpt_test_crash_at(const char *point, int arg) {
    crash_point = point;
    crash_arg = arg;
}

void ckpt_crash_maybe(const char *point, int arg) {
    if (!crash_point || strcmp(crash_point, point) || (arg >= 0 && arg != crash_arg)) return;
    if (!strcmp(point, "place")) kill(getpid(), SIGKILL);   /* kill -9 amid the writers */
    abort();
}
int ckpt_crash_no_exchange(void) { return crash_point && !strcmp(crash_point, "no-exchange"); }

/* ---- small file helpers ------------------------------------------------------------------ */

/* dir without trailing slashes ("run/ckpt-1/" -> "run/ckpt-1"), so "<dir>.tmp.<pid>" is a
 * sibling of dir, never a child. -1 naming dir when it does not fit. */
int ckpt_trim_dir(char *out, size_t n, const char *dir) {
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') len--;
    if (len + 1 > n || len + 1 > CKPT_DIR_MAX) return pt_seterr("%s: checkpoint path too long", dir);
    memcpy(out, dir, len);
    out[len] = 0;
    return 0;
}

void ckpt_chunk_path(char *out, size_t n, const char *dir, int c) {
    snprintf(out, n, "%s/chunk-%d.safetensors", dir, c);
}

void ckpt_shard_path(char *out, size_t n, const char *dir, int r) {
    snprintf(out, n, "%s/optim-%d.safetensors", dir, r);
}

/* FNV-1a 64 and size of a whole file, streamed; -1 naming the path on read failure. */
int ckpt_file_fnv(const char *path, uint64_t *hash, size_t *len) {
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
        return !strncmp(name, "chunk-", 6) || !strncmp(name, "optim-", 6) || !strncmp(name, "manifest", 8) ||
               !strncmp(name, "state-", 6);
    if (sscanf(name, "optim-%d.safetensors%n", &c, &end) == 1 && !name[end]) return 1;
    if (sscanf(name, "state-%d.safetensors%n", &c, &end) == 1 && !name[end]) return 1;
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

/* ---- a save root ------------------------------------------------------------------------ */

/* The step of a complete checkpoint folder root/name ("ckpt-<step>" holding manifest.json), or -1. */
long ckpt_folder_step(const char *root, const char *name) {
    long step;
    int end = 0;
    char path[CKPT_PATH_MAX];
    if (sscanf(name, "ckpt-%ld%n", &step, &end) != 1 || name[end] || step < 0) return -1;
    snprintf(path, sizeof path, "%s/%s/manifest.json", root, name);
    return access(path, F_OK) == 0 ? step : -1;
}

