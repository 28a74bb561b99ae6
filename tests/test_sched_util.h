/* Helpers shared by the schedule tests: generate by name, print to a string, and compare a
 * schedule with its golden file in tests/golden/ (PT_WRITE_GOLDEN=1 rewrites the goldens). */
#ifndef PT_TEST_SCHED_UTIL_H
#define PT_TEST_SCHED_UTIL_H
#include "sched/sched.h"
#include "test.h"
#include "util/pt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline sched *gen(const char *name, int P, int M, int v) {
    sched_params p = { .ranks = P, .microbatches = M, .chunks = v };
    return sched_generate(name, &p);
}

/* Prints s into a malloc'd string. */
static inline char *print_str(const sched *s) {
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    sched_print(s, f);
    fclose(f);
    return buf;
}

/* Generates name (P, M, chunks v; v = 0 leaves it out of the file name) and checks its printed
 * grid against tests/golden/<name>-p<P>-m<M>[-v<v>].txt. Returns the generated schedule and, in
 * *want, the golden text (both the caller's to free; NULL when generating failed). */
static inline sched *golden_check(const char *name, int P, int M, int v, char **want) {
    char path[128], tname[160];
    if (v) snprintf(path, sizeof path, "tests/golden/%s-p%d-m%d-v%d.txt", name, P, M, v);
    else snprintf(path, sizeof path, "tests/golden/%s-p%d-m%d.txt", name, P, M);
    snprintf(tname, sizeof tname, "golden_%s", path + strlen("tests/golden/"));
    *want = NULL;
    sched *s = gen(name, P, M, v);
    if (!s) { CHECK(tname, 0, "generate: %s", pt_err()); return NULL; }
    char *got = print_str(s);
    if (getenv("PT_WRITE_GOLDEN")) {
        FILE *f = fopen(path, "w");
        if (f) { fputs(got, f); fclose(f); }
    }
    *want = pt_read_file(path, NULL);
    CHECK(tname, *want && strcmp(*want, got) == 0, "differs from %s; got:\n%s", path, got);
    free(got);
    return s;
}
#endif
