/* Small utilities shared by every module: error reporting, a monotonic clock, a seeded RNG,
 * checked allocation. Not a platform layer: POSIX and C11 are assumed.
 *
 * Errors: library functions return 0 on success and -1 on failure after calling pt_seterr()
 * with a message that says what was wrong and where (file, field, rank, step). The message is
 * per thread. Only the CLI prints it and decides to exit. */
#ifndef PT_UTIL_H
#define PT_UTIL_H
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

/* Sets this thread's last error (printf format). Always returns -1, so `return pt_seterr(...)`. */
int pt_seterr(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* pt_seterr for a function that takes a format and arguments of its own (va_list). Returns -1. */
int pt_vseterr(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));
/* Prefixes this thread's last error with more context ("loading x.safetensors: " + old). Returns -1. */
int pt_adderr(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* This thread's last error message ("" when none). */
const char *pt_err(void);

/* Monotonic wall clock in seconds (CLOCK_MONOTONIC). Test hook: PT_CLOCK_SKEW=S in the
 * environment (seconds, read at the first call) adds S to every reading, so one process of a job
 * plays a host whose clock is off (comm_clock_offsets measures it; tests/test_comm_clock.sh).
 * Never set it outside tests. Differences of pt_now() are unaffected. */
double pt_now(void);
/* The CLOCK_MONOTONIC time `seconds` from now, for timed waits (pthread_cond_timedwait on a
 * condition set to that clock). Never skewed: to wait until a pt_now() time t, pass t - pt_now(). */
struct timespec pt_deadline_after(double seconds);

/* Allocation that aborts with a message on failure (out of memory is not a recoverable user error
 * here). pt_calloc zeroes. pt_falloc returns a 64-byte aligned, zeroed float buffer; free with free(). */
void *pt_malloc(size_t n);
/* Words the allocation failure adds after "out of memory allocating N bytes" (a static string,
 * e.g. train --mem-limit's; NULL: none). Set before threads start. */
void pt_set_oom_note(const char *note);
void *pt_calloc(size_t n, size_t size);
/* realloc(p, n) that aborts the same way (p's contents kept up to n bytes; p NULL: pt_malloc). */
void *pt_realloc(void *p, size_t n);
float *pt_falloc(size_t n);
/* The same, but NULL (no abort, no error set) when the memory cannot be had: for buffers whose
 * size a user chose (a model's parameters), so the caller can say what was too big. */
float *pt_falloc_try(size_t n);
char *pt_strdup(const char *s);

/* Seeded RNG (xoshiro256**): identical streams on every platform for the same seed. */
typedef struct { uint64_t s[4]; } pt_rng;
void pt_rng_seed(pt_rng *r, uint64_t seed);
uint64_t pt_rng_next(pt_rng *r);
double pt_rng_uniform(pt_rng *r);          /* [0, 1) */
double pt_rng_normal(pt_rng *r);           /* standard normal (Box-Muller) */

/* Median of v[0..n) (the mean of the middle two when n is even); sorts v in place. 0 when n <= 0. */
double pt_median(double *v, int n);

/* The machine, for reports and benchmarks: the CPU model ("AMD EPYC 9R14", from /proc/cpuinfo;
 * "unknown" elsewhere), the widest x86 vector ISA it has ("AVX-512", "AVX2", "SSE2" or "none"),
 * and the online cores. */
typedef struct {
    char cpu[128];
    char isa[16];
    int cores;
} pt_machine;
void pt_machine_info(pt_machine *m);

/* Reads a whole file into a malloc'd buffer (NUL-terminated for convenience); *len gets the size.
 * Returns NULL and sets the error naming the path on failure. */
char *pt_read_file(const char *path, size_t *len);

/* mkdir -p of the folder that will hold path (not path itself). -1 naming the folder that could
 * not be made. */
int pt_make_parents(const char *path);

#endif
