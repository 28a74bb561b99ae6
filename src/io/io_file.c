/* File helpers shared by the io readers and writers: atomic writing ("<path>.tmp.<pid>", fsync,
 * rename over the real path), writing in place at an offset, folder fsync, read-only file maps and parse-error positions. Not a general file API. */
#include "io/io.h"
#include "util/pt.h"
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static void atomic_release(io_atomic_file *a) {
    free(a->path);
    free(a->tmp);
    memset(a, 0, sizeof *a);
}

int io_atomic_open(io_atomic_file *a, const char *path) {
    memset(a, 0, sizeof *a);
    size_t n = strlen(path) + 32;
    a->tmp = pt_malloc(n);
    snprintf(a->tmp, n, "%s.tmp.%ld", path, (long)getpid());
    a->f = fopen(a->tmp, "wb");
    if (!a->f) {
        pt_seterr("%s: cannot create %s: %s", path, a->tmp, strerror(errno));
        atomic_release(a);
        return -1;
    }
    a->path = pt_strdup(path);
    return 0;
}

int io_pwrite_all(int fd, const void *buf, size_t n, size_t off, const char *what) {
    const char *p = buf;
    while (n > 0) {
        ssize_t k = pwrite(fd, p, n, (off_t)off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            return pt_seterr("%s: cannot write %zu bytes at offset %zu: %s", what, n, off,
                             k < 0 ? strerror(errno) : "no progress");
        p += k;
        n -= (size_t)k;
        off += (size_t)k;
    }
    return 0;
}

void io_fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) { (void)fsync(fd); close(fd); }
}

void io_fsync_parent(const char *path) {
    char *dir = pt_strdup(path);
    char *slash = strrchr(dir, '/');
    if (!slash) strcpy(dir, ".");
    else if (slash == dir) dir[1] = 0;
    else *slash = 0;
    io_fsync_dir(dir);
    free(dir);
}

int io_atomic_commit(io_atomic_file *a) {
    int err = ferror(a->f) ? EIO : 0;     /* an earlier fwrite failed; its errno is gone */
    if (!err && (fflush(a->f) != 0 || fsync(fileno(a->f)) != 0)) err = errno;
    if (fclose(a->f) != 0 && !err) err = errno;
    a->f = NULL;
    if (err) {
        pt_seterr("%s: write failed: %s", a->path, strerror(err));
        goto remove_tmp;
    }
    if (rename(a->tmp, a->path) != 0) {
        pt_seterr("%s: cannot rename %s over it: %s", a->path, a->tmp, strerror(errno));
        goto remove_tmp;
    }
    io_fsync_parent(a->path);
    atomic_release(a);
    return 0;
remove_tmp:
    unlink(a->tmp);
    atomic_release(a);
    return -1;
}

void io_atomic_abort(io_atomic_file *a) {
    if (a->f) fclose(a->f);
    if (a->tmp) unlink(a->tmp);
    atomic_release(a);
}

int io_map_file(const char *path, unsigned char **map, size_t *len) {
    *map = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return pt_seterr("%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    int rc = 0;
    if (fstat(fd, &sb) != 0) rc = pt_seterr("%s: cannot stat: %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode)) rc = pt_seterr("%s: not a regular file", path);
    else if (sb.st_size > 0) {
        void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) rc = pt_seterr("%s: cannot map: %s", path, strerror(errno));
        else { *map = m; *len = (size_t)sb.st_size; }
    }
    close(fd);
    return rc;
}

int io_text_position(const char *text, size_t len, size_t at, char *near, size_t cap) {
    if (at > len) at = len;
    int line = 1;
    size_t start = 0;
    for (size_t i = 0; i < at; i++)
        if (text[i] == '\n') { line++; start = i + 1; }
    size_t from = at > start + 16 ? at - 16 : start, k = 0;
    for (size_t i = from; i < len && i < at + 8 && text[i] != '\n' && k + 1 < cap; i++)
        near[k++] = (text[i] >= 32 && text[i] < 127) ? text[i] : '?';
    near[k] = 0;
    return line;
}

int io_write_json(const cJSON *value, const char *path) {
    char *text = cJSON_Print(value);
    if (!text) return pt_seterr("%s: out of memory formatting JSON", path);
    io_atomic_file a;
    int rc = io_atomic_open(&a, path);
    if (rc == 0) {
        fputs(text, a.f);
        fputc('\n', a.f);
        rc = io_atomic_commit(&a);
    }
    cJSON_free(text);
    return rc;
}
