/* Minimal test harness shared by every tests/test_*.c binary.
 * Each check prints "ok NAME" or "FAIL NAME: why (file:line)"; tests/run.sh counts those lines
 * across all binaries and scripts and prints "N passed, N failed". A binary exits non-zero when
 * any of its checks failed. Not a framework: no registration, no fixtures, just macros. */
#ifndef PT_TEST_H
#define PT_TEST_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static int test_failed_ = 0, test_passed_ = 0;

/* One named check: cond true -> "ok", else "FAIL" with a printf-style reason. */
#define CHECK(name, cond, ...) do { \
    if (cond) { test_passed_++; printf("ok %s\n", name); } \
    else { test_failed_++; printf("FAIL %s: ", name); printf(__VA_ARGS__); \
           printf(" (%s:%d)\n", __FILE__, __LINE__); } \
    fflush(stdout); } while (0)

/* Normalised error |a-b| / max(|b|, floor): floor keeps near-zero references meaningful. */
static inline double test_relerr(double a, double b, double floor_) {
    double d = fabs(b) > floor_ ? fabs(b) : floor_;
    return fabs(a - b) / d;
}

/* Largest |a_i-b_i| over max|b_i| (a whole-tensor normalised error), robust to tiny entries. */
static inline double test_tensor_relerr(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > num) num = d;
        if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
    }
    return den > 0 ? num / den : num;
}

#define TEST_DONE() do { printf("# %s: %d passed, %d failed\n", __FILE__, test_passed_, test_failed_); \
    return test_failed_ ? 1 : 0; } while (0)
#endif
