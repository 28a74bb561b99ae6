/* A private scratch folder for a test binary: tmpdir_make() creates it, tpath() names a file in
 * it, write_bytes() fills one, tmpdir_remove() deletes it with its files and empty subfolders.
 * Shared by the io tests; not a general file API. */
#ifndef PT_TEST_TMPDIR_H
#define PT_TEST_TMPDIR_H
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[64];

/* Creates /tmp/<prefix>XXXXXX; exits 2 when it cannot. */
static void tmpdir_make(const char *prefix) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/%sXXXXXX", prefix);
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); exit(2); }
}

/* tmpdir/name in one of 8 rotating buffers (so a call can take a few at once). */
static const char *tpath(const char *name) {
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 512, "%s/%.200s", tmpdir, name);
    return p;
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); exit(2); }
    if (n) fwrite(p, 1, n, f);
    fclose(f);
}

static void tmpdir_remove(void) {
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) rmdir(tpath(e->d_name)), unlink(tpath(e->d_name));
    if (d) closedir(d);
    rmdir(tmpdir);
}
#endif
