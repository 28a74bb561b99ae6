/* SCHED_IDLE for background threads, and back (idle.h). Linux only; elsewhere never available. */
#include "util/idle.h"
#include "util/pt.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __linux__
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#define IDLE_BACKOFF_MIN_S 0.5   /* a hurry's back-off: a few steps of a small model */
#define IDLE_BACKOFF_MAX_S 60.0  /* under a load that stays: one late piece of work a minute */

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static int available;
#define IDLE_MIN_FRAC 0.05       /* of all cores' time idle lately: a pipeline's bubbles are 10-50% */
#define IDLE_SAMPLE_S 0.25       /* /proc/stat read at most this often */

static pthread_mutex_t backoff_mu = PTHREAD_MUTEX_INITIALIZER;
static double backoff_until, backoff_span;   /* pt_now() seconds; the last back-off's length */
static double sample_t = -1, idle_frac;      /* the last /proc/stat sample's time; idle share since the one before */
static unsigned long long last_idle, last_total;

long pt_idle_tid(void) {
#ifdef __linux__
    return (long)syscall(SYS_gettid);
#else
    return 0;
#endif
}

static int set_policy(long tid, int idle) {
#ifdef __linux__
    struct sched_param sp = { 0 };
    return sched_setscheduler((pid_t)tid, idle ? SCHED_IDLE : SCHED_OTHER, &sp) == 0 ? 0 : -1;
#else
    (void)tid, (void)idle;
    return -1;
#endif
}

/* The probe: into SCHED_IDLE and out again, on a thread of its own (one that cannot get out is
 * thrown away, not left slow). */
static void *probe_main(void *arg) {
    int *ok = arg;
    *ok = set_policy(0, 1) == 0 && set_policy(0, 0) == 0;
    return NULL;
}

static void probe(void) {
    const char *off = getenv("PIPETRAIN_NO_IDLE");
    pthread_t th;
    int ok = 0;
    if (off && *off && strcmp(off, "0")) return;
    if (pthread_create(&th, NULL, probe_main, &ok) != 0) return;
    pthread_join(th, NULL);
    available = ok;
}

int pt_idle_available(void) {
    pthread_once(&probe_once, probe);
    return available;
}

int pt_idle_set(long tid, int idle) {
    if (!pt_idle_available()) return -1;
    return set_policy(tid, idle);
}

/* All cores' idle and total time so far (/proc/stat's first line, in ticks). 0, or -1. */
static int cpu_times(unsigned long long *idle, unsigned long long *total) {
    FILE *f = fopen("/proc/stat", "r");
    unsigned long long v[8] = { 0 };
    int n = f ? fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                       &v[6], &v[7]) : 0;
    if (f) fclose(f);
    if (n < 4) return -1;
    *idle = v[3] + v[4];   /* idle, iowait */
    *total = 0;
    for (int i = 0; i < 8; i++) *total += v[i];
    return 0;
}

/* Under backoff_mu: idle_frac brought up to date when the last sample is IDLE_SAMPLE_S old. */
static void sample_cpu(double now) {
    unsigned long long idle, total;
    if (sample_t >= 0 && now - sample_t < IDLE_SAMPLE_S) return;
    if (cpu_times(&idle, &total) < 0) { idle_frac = 1; return; }   /* unknown: the back-off alone */
    if (sample_t >= 0 && total > last_total) idle_frac = (double)(idle - last_idle) / (double)(total - last_total);
    sample_t = now, last_idle = idle, last_total = total;
}

int pt_idle_wanted(void) {
    if (!pt_idle_available()) return 0;
    double now = pt_now();
    pthread_mutex_lock(&backoff_mu);
    sample_cpu(now);
    int want = now >= backoff_until && idle_frac >= IDLE_MIN_FRAC;
    pthread_mutex_unlock(&backoff_mu);
    return want;
}

void pt_idle_hurried(void) {
    double now = pt_now();
    pthread_mutex_lock(&backoff_mu);
    if (now < backoff_until) { /* already backing off: one hurry counts once */ }
    else {
        int again = backoff_span > 0 && now < backoff_until + backoff_span;
        backoff_span = again ? backoff_span * 2 : IDLE_BACKOFF_MIN_S;
        if (backoff_span > IDLE_BACKOFF_MAX_S) backoff_span = IDLE_BACKOFF_MAX_S;
        backoff_until = now + backoff_span;
    }
    pthread_mutex_unlock(&backoff_mu);
}
