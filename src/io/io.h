/* Small file helpers of the io module: JSON and atomic file writing (temporary name, fsync,
 * rename), folder fsync. Safetensors and token data have their own headers (io/safetensors.h,
 * io/data.h); model configs are model/config.h's, traces trace/'s. */
#ifndef PT_IO_IO_H
#define PT_IO_IO_H
#include <stdio.h>
#include <cjson/cJSON.h>

/* Writes a JSON value as pretty text plus a newline, atomically (see io_atomic_open). -1 with an
 * error naming the path. */
int io_write_json(const cJSON *value, const char *path);
/* Atomic file writing: write through `f`, then commit. Until commit the real path is untouched;
 * after a crash at most a stale "<path>.tmp.<pid>" is left. Not for two threads of one process
 * writing the same path at once (they would share the temporary name). */
typedef struct {
    FILE *f;          /* write here */
    char *path;       /* final name */
    char *tmp;        /* "<path>.tmp.<pid>" */
} io_atomic_file;

/* Creates the temporary file. -1 with an error naming the path on failure (a is then empty). */
int io_atomic_open(io_atomic_file *a, const char *path);
/* Flushes, fsyncs, closes, renames over the real path and fsyncs its folder. Any write error
 * seen since open (ferror) fails here. On failure the temporary is removed and -1 returned
 * with an error naming the path. Always releases a. */
int io_atomic_commit(io_atomic_file *a);
/* Closes and removes the temporary without touching the real path. Releases a; empty a is fine. */
void io_atomic_abort(io_atomic_file *a);

/* Writes buf[0..n) at byte offset off of the open file fd (pwrite, repeated on short writes and
 * EINTR): for files several writers fill in place, each its own byte ranges. -1 with an error
 * naming `what` (the path) on failure. */
int io_pwrite_all(int fd, const void *buf, size_t n, size_t off, const char *what);

/* fsync a folder, so that renames and new entries in it survive a crash. Best effort: a folder
 * that cannot be opened or synced is skipped silently (some filesystems refuse). */
void io_fsync_dir(const char *dir);
/* io_fsync_dir of the folder holding path ("." for a bare name, "/" for "/name"). */
void io_fsync_parent(const char *path);

/* Maps the whole regular file at path read-only (private). An empty file cannot be mapped: it
 * gives *map NULL and *len 0, and the caller says what empty means for it. -1 with an error
 * naming the path when it cannot be opened, stat'd or mapped or is not a regular file (*map
 * NULL). Release with munmap(*map, *len) when *map is not NULL. */
int io_map_file(const char *path, unsigned char **map, size_t *len);

/* For parse errors: the 1-based line of byte `at` in text[0..len), and in `near` (cap bytes) a
 * printable excerpt of that line around it (a few characters before, some after). */
int io_text_position(const char *text, size_t len, size_t at, char *near, size_t cap);

#endif
