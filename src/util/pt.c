/* Utilities: per-thread error message, clock, allocation, RNG, whole-file read. */
#include "util/pt.h"
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static _Thread_local char err_buf[2048];

int pt_vseterr(const char *fmt, va_list ap) {
    vsnprintf(err_buf, sizeof err_buf, fmt, ap);
    return -1;
}

int pt_seterr(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    pt_vseterr(fmt, ap);
    va_end(ap);
    return -1;
}

int pt_adderr(const char *fmt, ...) {
    char prefix[1024], old[sizeof err_buf];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err_buf, sizeof old);
    size_t n = strlen(prefix);           /* truncation of a long message is fine */
    memcpy(err_buf, prefix, n);
    size_t room = sizeof err_buf - n - 1, m = strlen(old);
    if (m > room) m = room;
    memcpy(err_buf + n, old, m);
    err_buf[n + m] = 0;
    return -1;
}

const char *pt_err(void) { return err_buf; }

/* PT_CLOCK_SKEW: a test hook (seconds, read once; unset, empty or not a finite number: 0). */
static double clock_skew;
static pthread_once_t clock_skew_once = PTHREAD_ONCE_INIT;

static void clock_skew_read(void) {
    const char *s = getenv("PT_CLOCK_SKEW");
    char *end = NULL;
    double v = s ? strtod(s, &end) : 0;
    if (s && end != s && *end == 0 && isfinite(v)) clock_skew = v;
}

double pt_now(void) {
    pthread_once(&clock_skew_once, clock_skew_read);
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec + clock_skew;
}

static const char *oom_note;   /* pt_set_oom_note's, or NULL */

void pt_set_oom_note(const char *note) { oom_note = note; }

static void oom(size_t n) {
    fprintf(stderr, "pipetrain: out of memory allocating %zu bytes%s%s\n", n, oom_note ? " " : "",
            oom_note ? oom_note : "");
    abort();
}

void *pt_malloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) oom(n);
    return p;
}

void *pt_calloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) oom(n * size);
    return p;
}

void *pt_realloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q) oom(n);
    return q;
}

float *pt_falloc_try(size_t n) {
    if (n > (SIZE_MAX - 64) / sizeof(float)) return NULL;
    size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
    void *p = aligned_alloc(64, bytes ? bytes : 64);
    if (p) memset(p, 0, bytes ? bytes : 64);
    return p;
}

float *pt_falloc(size_t n) {
    float *p = pt_falloc_try(n);
    if (!p) oom(n * sizeof(float));
    return p;
}

char *pt_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = pt_malloc(n);
    memcpy(d, s, n);
    return d;
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void pt_rng_seed(pt_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) {           /* splitmix64 expands the seed */
        uint64_t z = (seed += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        r->s[i] = z ^ (z >> 31);
    }
}

uint64_t pt_rng_next(pt_rng *r) {
    uint64_t *s = r->s, result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
    s[2] ^= t; s[3] = rotl(s[3], 45);
    return result;
}

double pt_rng_uniform(pt_rng *r) { return (double)(pt_rng_next(r) >> 11) * 0x1.0p-53; }

double pt_rng_normal(pt_rng *r) {
    double u1 = pt_rng_uniform(r), u2 = pt_rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

char *pt_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) { pt_seterr("%s: cannot open: %s", path, strerror(errno)); return NULL; }
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        pt_seterr("%s: not a regular file (a folder?)", path);
        fclose(f);
        return NULL;
    }
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) != 0) goto io_error;
    long n = ftell(f);
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0) goto io_error;
    buf = pt_malloc((size_t)n + 1);
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) goto io_error;
    buf[n] = 0;
    fclose(f);
    if (len) *len = (size_t)n;
    return buf;
io_error:
    pt_seterr("%s: read failed: %s", path, strerror(errno));
    free(buf);
    fclose(f);
    return NULL;
}

int pt_make_parents(const char *path) {
    char *buf = pt_strdup(path);
    int rc = 0;
    for (char *p = buf + 1; *p && rc == 0; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) < 0 && errno != EEXIST)
            rc = pt_seterr("%s: cannot create folder: %s", buf, strerror(errno));
        *p = '/';
    }
    free(buf);
    return rc;
}

static int pt_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double pt_median(double *v, int n) {
    if (n <= 0) return 0;
    qsort(v, (size_t)n, sizeof *v, pt_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The value of the first "key : value" line of /proc/cpuinfo starting with key, or "". */
static void pt_cpuinfo_field(const char *key, char *out, size_t n) {
    char line[8192];
    out[0] = 0;
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, key, strlen(key)) != 0 || !colon) continue;
        colon++;
        while (*colon == ' ' || *colon == '\t') colon++;
        snprintf(out, n, "%s", colon);
        out[strcspn(out, "\n")] = 0;
        break;
    }
    fclose(f);
}

/* Whole word w in the space-separated list s. */
static int pt_has_word(const char *s, const char *w) {
    size_t n = strlen(w);
    for (const char *p = strstr(s, w); p; p = strstr(p + 1, w))
        if ((p == s || p[-1] == ' ') && (p[n] == ' ' || p[n] == 0)) return 1;
    return 0;
}

void pt_machine_info(pt_machine *m) {
    char flags[8192];
    pt_cpuinfo_field("model name", m->cpu, sizeof m->cpu);
    if (!m->cpu[0]) snprintf(m->cpu, sizeof m->cpu, "unknown");
    pt_cpuinfo_field("flags", flags, sizeof flags);
    const char *isa = pt_has_word(flags, "avx512f") ? "AVX-512" : pt_has_word(flags, "avx2") ? "AVX2"
                    : pt_has_word(flags, "sse2") ? "SSE2" : "none";
    snprintf(m->isa, sizeof m->isa, "%s", isa);
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    m->cores = c > 0 ? (int)c : 1;
}

struct timespec pt_deadline_after(double seconds) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    double whole = (double)(long)seconds;
    t.tv_sec += (time_t)whole;
    t.tv_nsec += (long)((seconds - whole) * 1e9);
    if (t.tv_nsec >= 1000000000L) { t.tv_sec++; t.tv_nsec -= 1000000000L; }
    return t;
}
