/* util/idle.h: a thread put at SCHED_IDLE and back to the normal policy (its nice value kept),
 * another thread's policy changed by its id, PIPETRAIN_NO_IDLE=1 turning it off, not wanted while
 * every core is busy or just after a hurry. Where the
 * process may not leave SCHED_IDLE (no CAP_SYS_NICE, RLIMIT_NICE 0), available says 0 and
 * nothing changes: checked as such. */
#include "test.h"
#include "util/idle.h"
#include "util/pt.h"
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct { long tid; int go, done; pthread_mutex_t mu; pthread_cond_t cv; } other;

static void *other_main(void *arg) {
    other *o = arg;
    pthread_mutex_lock(&o->mu);
    o->tid = pt_idle_tid();
    pthread_cond_broadcast(&o->cv);
    while (!o->done) pthread_cond_wait(&o->cv, &o->mu);
    pthread_mutex_unlock(&o->mu);
    return NULL;
}

static void test_own_thread(int avail) {
    int nice0 = getpriority(PRIO_PROCESS, 0);
    if (!avail) {
        CHECK("idle: not available: pt_idle_set refuses and the policy stays",
              pt_idle_set(0, 1) == -1 && sched_getscheduler(0) == SCHED_OTHER, "policy %d", sched_getscheduler(0));
        return;
    }
    CHECK("idle: the caller at SCHED_IDLE", pt_idle_set(0, 1) == 0 && sched_getscheduler(0) == SCHED_IDLE,
          "policy %d", sched_getscheduler(0));
    CHECK("idle: and back to SCHED_OTHER", pt_idle_set(0, 0) == 0 && sched_getscheduler(0) == SCHED_OTHER,
          "policy %d", sched_getscheduler(0));
    CHECK("idle: its nice value kept", getpriority(PRIO_PROCESS, 0) == nice0, "%d, was %d",
          getpriority(PRIO_PROCESS, 0), nice0);
}

static void test_other_thread(int avail) {
    other o = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };
    pthread_t th;
    pthread_create(&th, NULL, other_main, &o);
    pthread_mutex_lock(&o.mu);
    while (!o.tid) pthread_cond_wait(&o.cv, &o.mu);
    pthread_mutex_unlock(&o.mu);
    if (avail) {
        CHECK("idle: another thread at SCHED_IDLE by its id",
              pt_idle_set(o.tid, 1) == 0 && sched_getscheduler((pid_t)o.tid) == SCHED_IDLE, "tid %ld", o.tid);
        CHECK("idle: the caller's own policy untouched", sched_getscheduler(0) == SCHED_OTHER, "policy %d",
              sched_getscheduler(0));
        CHECK("idle: and hurried back by its id",
              pt_idle_set(o.tid, 0) == 0 && sched_getscheduler((pid_t)o.tid) == SCHED_OTHER, "tid %ld", o.tid);
    }
    pthread_mutex_lock(&o.mu);
    o.done = 1;
    pthread_cond_broadcast(&o.cv);
    pthread_mutex_unlock(&o.mu);
    pthread_join(th, NULL);
}

static atomic_int spin_stop;
static void *spin_main(void *arg) {
    (void)arg;
    while (!atomic_load_explicit(&spin_stop, memory_order_relaxed)) {}
    return NULL;
}

/* Every core busy (a spinning thread each, for a little over two samples of /proc/stat): not
 * wanted, so background work keeps its normal policy on a loaded machine. */
static void test_loaded(int avail) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1 || n > 256) n = 2;
    pthread_t th[256];
    spin_stop = 0;
    for (long i = 0; i < n; i++) pthread_create(&th[i], NULL, spin_main, NULL);
    int want = 1;
    for (int k = 0; k < 4; k++) {   /* 4 x 0.3 s: the samples come from the busy time only */
        struct timespec ts = { 0, 300000000L };
        nanosleep(&ts, NULL);
        want = pt_idle_wanted();
    }
    spin_stop = 1;
    for (long i = 0; i < n; i++) pthread_join(th[i], NULL);
    CHECK("idle: every core busy: background work is not put at SCHED_IDLE", want == 0, "wanted %d (available %d)",
          want, avail);
}

/* A hurry backs off: not wanted at once after it, whatever the load (checked while the back-off's
 * IDLE_BACKOFF_MIN_S = 0.5 s cannot have passed). */
static void test_backoff(void) {
    double t0 = pt_now();
    pt_idle_hurried();
    int want = pt_idle_wanted();
    if (pt_now() - t0 < 0.4) CHECK("idle: just after a hurry background work waits for nothing (backed off)", want == 0,
                                   "wanted %d", want);
}

/* In a child (the probe runs once a process): PIPETRAIN_NO_IDLE=1 makes it unavailable. */
static void test_switch_off(void) {
    pid_t c = fork();
    if (c == 0) {
        setenv("PIPETRAIN_NO_IDLE", "1", 1);
        _exit(pt_idle_available() == 0 && pt_idle_set(0, 1) == -1 && sched_getscheduler(0) == SCHED_OTHER ? 0 : 1);
    }
    int st = 0;
    waitpid(c, &st, 0);
    CHECK("idle: PIPETRAIN_NO_IDLE=1: not available, the policy stays", WIFEXITED(st) && WEXITSTATUS(st) == 0,
          "child status %d", st);
}

int main(void) {
    test_switch_off();
    int avail = pt_idle_available();
    struct rlimit rl;
    if (getuid() == 0) CHECK("idle: as root SCHED_IDLE is available (entered and left)", avail == 1, "available %d", avail);
    else if (getrlimit(RLIMIT_NICE, &rl) == 0) printf("# not root: RLIMIT_NICE %ld, available %d\n", (long)rl.rlim_cur, avail);
    test_own_thread(avail);
    test_other_thread(avail);
    test_loaded(avail);
    test_backoff();
    TEST_DONE();
}
