/* bench_harvest's two modes about side programs (header only, included by bench_harvest.c):
 *
 * --signals: what a SIGCONT/SIGSTOP round costs here. A child spins at nice 19 / SCHED_IDLE,
 *   stopped; this thread (a rank) computes 200 us, resumes the child (SIGCONT), sleeps on a
 *   condition variable for a slot of T (as a rank sleeps in its transport's wait), stops it
 *   (SIGSTOP) and reads its CPU clock. Per T: the CPU the child received over the slot, the
 *   slot's wall time it did not get (the resume's cost), what the two signals cost the rank,
 *   and how late the rank woke. Twice: the child placed on the rank's core (what task_command.c
 *   does), and left on both cores while another thread computes on the other one (the other
 *   rank).
 *
 * --programs [ROUNDS [ITERATIONS]]: issue 20's case (defaults 5 rounds of 16 iterations per mode).
 *   P=2 rank threads, 4 layers x 256 (4 heads, vocab 256), batch 8 x 128; one CPU-bound
 *   program per rank (tests/aux_side_work, which counts its own work: `--side-command "0:..."
 *   --side-command "1:..."` in train's terms), for 1f1b M=2 and zb-h2 M=4. Each round is a new
 *   job whose measured iterations alternate: no side work (the programs paused), side work.
 *   Per round, over the iterations with side work: slowdown = median iteration with side work /
 *   median without - 1; the bubble is the idle of the waits offered to side work (wait_idle_s,
 *   harvest_stats.idle_s: docs/harvesting.md; bubble_s printed beside it); harvested by CPU =
 *   side_cpu_s / that; by the programs' own work = their counters' units / units per CPU second
 *   alone (calibrated before each layout) / that; agreement = side_cpu_s / the CPU the
 *   programs' own clocks counted; CPU/slots = side_cpu_s / side_s (the share of their slots the
 *   programs got: low when the cores were not idle). Where a round lost: the waits' idle not
 *   given to the programs, by reason, and the iterations the backoff rested. Then the medians
 *   of the rounds with their range, and whether issue 20's goal (a quiet machine: >= 60% by the
 *   counters, <= 2% slower, side_cpu_s within 10% of the counters) is met. BENCH_WAITS=FILE:
 *   the per-wait log (harvest_set_log). BENCH_SIDE_CMD="sleep 1000" runs that command instead
 *   (resumed and stopped alike, no work: the mechanism's own cost; nothing counted). */
#ifndef PT_BENCH_HARVEST_PROGRAMS_H
#define PT_BENCH_HARVEST_PROGRAMS_H
#include "harvest/harvest_tasks.h"
#include "run/run.h"
#include "util/pt.h"
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- --signals ------------------------------------------------------------------------------ */

static double bs_cpu_of(pid_t pid) {
    clockid_t id;
    struct timespec ts;
    if (clock_getcpuclockid(pid, &id) || clock_gettime(id, &ts)) return 0;
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void bs_pin(pid_t tid, int cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    if (cpu >= 0) CPU_SET(cpu, &s);
    else for (int c = 0; c < CPU_SETSIZE && c < 64; c++) CPU_SET(c, &s);
    sched_setaffinity(tid, sizeof s, &s);
}

static void bs_spin(double s) {
    double t = pt_now() + s;
    while (pt_now() < t) {}
}

static volatile int bs_stop_hog;
static void *bs_hog(void *arg) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(*(int *)arg, &s);
    pthread_setaffinity_np(pthread_self(), sizeof s, &s);
    while (!bs_stop_hog) bs_spin(1e-3);
    return NULL;
}

/* A stopped child spinning at the lowest priority, as task_command.c starts a program. */
static pid_t bs_child(void) {
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        setpriority(PRIO_PROCESS, 0, 19);
        struct sched_param idle = { 0 };
        sched_setscheduler(0, SCHED_IDLE, &idle);
        raise(SIGSTOP);
        for (volatile unsigned long x = 0;; x++) {}
    }
    int st;
    setpgid(pid, pid);
    waitpid(pid, &st, WUNTRACED);
    return pid;
}

/* Rounds of one slot length: medians of the CPU received / slot, the deficit (slot's wall time
 * not received, us), SIGCONT's and SIGSTOP + the clock's cost to the rank (us), the wake-up's
 * lateness (us). */
static void bs_slots(pid_t pid, double slot, int rounds, double med[5]) {
    pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cv;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&cv, &ca);
    double *v[5];
    for (int k = 0; k < 5; k++) v[k] = pt_calloc((size_t)rounds, sizeof(double));
    for (int r = 0; r < rounds; r++) {
        bs_spin(200e-6);                       /* the rank computes; the program is stopped */
        double c0 = bs_cpu_of(pid), t0 = pt_now();
        kill(-pid, SIGCONT);
        double t1 = pt_now();
        struct timespec dl = pt_deadline_after(slot - (t1 - t0));
        pthread_mutex_lock(&mu);
        while (pthread_cond_timedwait(&cv, &mu, &dl) != ETIMEDOUT) {}
        pthread_mutex_unlock(&mu);
        double t2 = pt_now();
        kill(-pid, SIGSTOP);
        double c1 = bs_cpu_of(pid), t3 = pt_now();
        v[0][r] = (c1 - c0) / (t3 - t0);
        v[1][r] = ((t3 - t0) - (c1 - c0)) * 1e6;
        v[2][r] = (t1 - t0) * 1e6;
        v[3][r] = (t3 - t2) * 1e6;
        v[4][r] = (t2 - (t0 + slot)) * 1e6;
    }
    for (int k = 0; k < 5; k++) { med[k] = pt_median(v[k], rounds); free(v[k]); }
    pthread_cond_destroy(&cv);
}

static int bench_signals(int argc, char **argv) {
    int rounds = argc > 0 ? atoi(argv[0]) : 200;
    if (rounds < 5) rounds = 200;
    double load[3] = { -1, -1, -1 };
    if (getloadavg(load, 3) < 0) load[0] = -1;
    pt_machine mc;
    pt_machine_info(&mc);
    printf("bench_harvest --signals: %s (%s), %d cores, load average %.2f; %d rounds per slot length "
           "(medians); the program at nice 19, SCHED_IDLE\n", mc.cpu, mc.isa, mc.cores, load[0], rounds);
    int me = sched_getcpu(), other = me == 0 ? 1 : 0;
    bs_pin(0, me);
    pid_t pid = bs_child();
    static const double slots[] = { 50e-6, 100e-6, 200e-6, 500e-6, 1e-3, 2e-3, 5e-3 };
    for (int placed = 1; placed >= 0; placed--) {
        pthread_t hog;
        if (placed) bs_pin(pid, me);
        else {
            bs_pin(pid, -1);
            bs_stop_hog = 0;
            pthread_create(&hog, NULL, bs_hog, &other);
        }
        printf("%s\n  slot     CPU got  not got (us)  SIGCONT (us)  SIGSTOP+clock (us)  woke late (us)\n",
               placed ? "program placed on the rank's core (the other core idle):"
                      : "program on both cores, another thread computing on the other core (not placed):");
        for (size_t k = 0; k < sizeof slots / sizeof *slots; k++) {
            double med[5];
            bs_slots(pid, slots[k], rounds, med);
            printf("  %5.2f ms  %5.1f%%  %9.1f  %12.1f  %18.1f  %14.1f\n", slots[k] * 1e3, 100 * med[0],
                   med[1], med[2], med[3], med[4]);
        }
        if (!placed) { bs_stop_hog = 1; pthread_join(hog, NULL); }
    }
    kill(-pid, SIGKILL);
    waitpid(pid, NULL, 0);
    bs_pin(0, -1);
    fflush(stdout);
    return 0;
}

/* ---- --programs ----------------------------------------------------------------------------- */

enum { BP_BATCH = 8, BP_SEQ = 128, BP_WARM = 6 };
static const gpt_config BP_CFG = { .n_layer = 4, .n_head = 4, .n_embd = 256, .vocab_size = 256,
                                   .n_positions = 128 };

/* tests/aux_side_work's file: the complete record is rec[at % 2]. */
typedef struct { uint64_t units, cpu_ns; } bp_record;
typedef struct { volatile uint64_t at; bp_record rec[2]; } bp_counter;

static bp_record bp_read(const char *path) {
    bp_record r = { 0, 0 };
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || st.st_size < (off_t)sizeof(bp_counter)) {
        if (fd >= 0) close(fd);
        return r;
    }
    bp_counter *c = mmap(NULL, sizeof *c, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (c == MAP_FAILED) return r;
    r = c->rec[__atomic_load_n(&c->at, __ATOMIC_ACQUIRE) % 2];
    munmap(c, sizeof *c);
    return r;
}

/* The counting program beside this binary: build/bench/.. /tests/aux_side_work. */
static int bp_worker(char *out, size_t n) {
    char self[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
    if (k <= 0) return -1;
    self[k] = 0;
    char *slash = strrchr(self, '/');
    if (!slash) return -1;
    *slash = 0;
    if (snprintf(out, n, "%.*s/../tests/aux_side_work", (int)(n > 64 ? n - 64 : 0), self) >= (int)n) return -1;
    return access(out, X_OK);
}

/* Units per CPU second of the program alone (its --calibrate, 0.5 s). */
static double bp_calibrate(const char *worker) {
    char cmd[PATH_MAX + 32];
    double rate = 0;
    snprintf(cmd, sizeof cmd, "%s --calibrate 0.5", worker);
    FILE *f = popen(cmd, "r");
    if (!f || fscanf(f, "units_per_s %lf", &rate) != 1) rate = 0;
    if (f) pclose(f);
    return rate;
}

/* One round's figures. */
typedef struct { double slow, by_cpu, by_work, agree, of_slots, waits, bubble, off_ms, est; int rested; } bp_round;

typedef struct {
    double *off, *on;            /* iteration seconds */
    int n_off, n_on;
    double bubble, cpu;          /* over the iterations with side work: bubble_s, side_cpu_s, */
    double idle, used, side;     /* wait_idle_s (the denominator), side_s inside it, side_s */
    double over;                 /* side_overrun_s: the programs' stops past the rank's wake-up */
    double lost[HARVEST_LOST_N]; /* the waits' idle side work did not use, by reason */
    int rested;                  /* of them, run without by the policy (the main job first) */
    double slow;                 /* the policy's estimate of side work's cost to a step's compute */
} bp_sums;

static int bp_add_programs(harvest *h, const char *worker, const char *dir, const char *tag, int round) {
    harvest_env env = { .R = 2, .flag = "--side-command" };
    for (int r = 0; r < 2; r++) {
        char spec[2 * PATH_MAX];
        harvest_task *t;
        const char *other = getenv("BENCH_SIDE_CMD");   /* e.g. "sleep 1000": the mechanism alone */
        if (other) snprintf(spec, sizeof spec, "%d:%s", r, other);
        else snprintf(spec, sizeof spec, "%d:%s %s/count_%s_%d_%d", r, worker, dir, tag, round, r);
        if (harvest_command_create(&t, spec, &env) < 0) return -1;
        harvest_add(h, t);
    }
    return 0;
}

/* One job: warm-up with side work, then iters iterations of each, alternating (odd rounds start
 * without). The counters are read when the measured iterations start and end. */
static int bp_job(const char *sched_name, int M, const gpt_model *init, const int *tok, const char *worker,
                  const char *dir, int round, int iters, bp_sums *s, bp_record c0[2], bp_record c1[2]) {
    harvest *h;
    run_plan pl = { 0 };
    run_job *j = NULL;
    optim_config oc = optim_config_default();
    harvest_create(&h);
    static FILE *wl;
    if (!wl && getenv("BENCH_WAITS")) wl = fopen(getenv("BENCH_WAITS"), "w");
    if (wl) fprintf(wl, "# %s M=%d round %d\n", sched_name, M, round + 1);
    harvest_set_log(h, wl);
    int rc = bp_add_programs(h, worker, dir, sched_name, round) < 0 || harvest_start(h, 2, 0, 2) < 0 ? -1 : 0;
    run_opts o = { .P = 2, .D = 1, .schedule = sched_name, .M = M, .on_wait = harvest_on_wait, .wait_user = h };
    if (rc == 0) rc = run_plan_init(&pl, &o, &BP_CFG, BP_BATCH, BP_SEQ);
    if (rc == 0) rc = run_job_init(&j, &pl, init, NULL, NULL);
    if (rc == 0) harvest_bind(h, pl.s, 2);
    for (int t = 1; rc == 0 && t <= BP_WARM + 2 * iters; t++) {
        int on = t <= BP_WARM || (t - BP_WARM + round) % 2 == 0;
        run_stats st;
        harvest_stats hs;
        char path[PATH_MAX + 32];
        if (t == BP_WARM + 1)
            for (int r = 0; r < 2; r++) { snprintf(path, sizeof path, "%s/count_%s_%d_%d", dir, sched_name, round, r); c0[r] = bp_read(path); }
        harvest_pause(h, !on);
        if ((rc = run_job_iteration(j, tok, tok + 1, &oc, t, &st)) < 0) break;
        if ((rc = harvest_after_step(h, run_job_timeline(j), NULL, &hs)) < 0) break;
        if (t <= BP_WARM) continue;
        s->slow = hs.slow;
        if (on) {
            s->rested += hs.rested;
            s->on[s->n_on++] = st.iter_time;
            s->bubble += st.bubble * 2 * st.iter_time;
            s->cpu += hs.side_cpu_s;
            s->idle += hs.idle_s;
            s->used += hs.used_s;
            s->side += hs.side_s;
            s->over += hs.overrun_s;
            for (int k = 0; k < HARVEST_LOST_N; k++) s->lost[k] += hs.lost_s[k];
        } else s->off[s->n_off++] = st.iter_time;
    }
    for (int r = 0; r < 2 && rc == 0; r++) {
        char path[PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/count_%s_%d_%d", dir, sched_name, round, r);
        c1[r] = bp_read(path);
    }
    harvest_free(h);
    run_job_free(j);
    if (pl.s) run_plan_free(&pl);
    return rc;
}

static int bp_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double bp_median(double *v, int n) {
    if (n == 0) return 0;
    qsort(v, (size_t)n, sizeof *v, bp_cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The medians of the rounds' column k (the rounds' range with it). */
static void bp_median_col(const bp_round *rr, int n, size_t off, double scale, const char *fmt) {
    double *v = pt_calloc((size_t)n, sizeof *v);
    for (int r = 0; r < n; r++) v[r] = scale * *(const double *)((const char *)&rr[r] + off);
    double med = bp_median(v, n);   /* sorts v */
    printf(fmt, med, v[0], v[n - 1]);
    free(v);
}

static int bp_layout(const char *sched_name, int M, int rounds, int iters, const gpt_model *m, const int *tok,
                     const char *worker, const char *dir) {
    bp_round *rr = pt_calloc((size_t)rounds, sizeof *rr);
    double rate = bp_calibrate(worker), load[3] = { -1, -1, -1 };
    if (rate <= 0) { fprintf(stderr, "bench_harvest --programs: %s --calibrate failed\n", worker); return -1; }
    printf("\n%s M=%d (the program alone: %.0f units per CPU second)\n"
           "  round  slowdown  harvested: by CPU  by work  side_cpu_s/counters  CPU/slots  waits idle  bubble_s  "
           "iteration  load\n", sched_name, M, rate);
    for (int r = 0; r < rounds; r++) {
        bp_sums s = { pt_calloc((size_t)iters, sizeof(double)), pt_calloc((size_t)iters, sizeof(double)), .slow = NAN };
        bp_record c0[2], c1[2];
        if (bp_job(sched_name, M, m, tok, worker, dir, r, iters, &s, c0, c1) < 0) {
            printf("  round %d failed: %s\n", r + 1, pt_err());
            return -1;
        }
        double units = 0, own_cpu = 0;
        for (int k = 0; k < 2; k++) {
            units += (double)(c1[k].units - c0[k].units);
            own_cpu += (double)(c1[k].cpu_ns - c0[k].cpu_ns) / 1e9;
        }
        double off = bp_median(s.off, s.n_off), on = bp_median(s.on, s.n_on);
        rr[r] = (bp_round){ .slow = on / off - 1, .by_cpu = s.idle > 0 ? s.cpu / s.idle : 0,
                            .by_work = s.idle > 0 ? units / rate / s.idle : 0, .agree = own_cpu > 0 ? s.cpu / own_cpu : 0,
                            .of_slots = s.side > 0 ? s.cpu / s.side : 0, .waits = s.idle / s.n_on,
                            .bubble = s.bubble / s.n_on, .off_ms = off * 1e3, .rested = s.rested, .est = s.slow };
        if (getloadavg(load, 3) < 0) load[0] = -1;
        printf("  %5d  %+7.1f%%  %16.1f%%  %6.1f%%  %19.3f  %8.1f%%  %7.1f ms  %5.1f ms  %6.1f ms  %.2f\n", r + 1,
               100 * rr[r].slow, 100 * rr[r].by_cpu, 100 * rr[r].by_work, rr[r].agree, 100 * rr[r].of_slots,
               1e3 * rr[r].waits, 1e3 * rr[r].bubble, rr[r].off_ms, load[0]);
        /* Where a round loses: the waits the policy did not give to the programs (by reason), the
         * steps it rested, and the share of their slots the programs got (low: the cores were not
         * idle, other tenants ran; the programs are SCHED_IDLE) */
        printf("         slots %.1f%% of the waits' idle; unused:", s.idle > 0 ? 100 * s.used / s.idle : 0);
        int any = 0;
        for (int k = 0; k < HARVEST_LOST_N; k++)
            if (s.lost[k] > 0.005 * s.idle) any = printf(" %s %.1f%%", harvest_lost_name(k), 100 * s.lost[k] / s.idle);
        if (!any) printf(" none");
        printf("; %d of %d iterations rested; side work's cost to compute by the policy %+.1f%%; overrun "
               "(stops past the wake-up) %.3f ms per iteration\n", rr[r].rested, s.n_on, 100 * rr[r].est,
               s.n_on ? 1e3 * s.over / s.n_on : 0);
        fflush(stdout);
        free(s.off);
        free(s.on);
    }
    printf("  %s M=%d, medians of %d rounds (range):\n", sched_name, M, rounds);
    bp_median_col(rr, rounds, offsetof(bp_round, slow), 100, "    main job's slowdown %+.1f%% (%+.1f..%+.1f)\n");
    bp_median_col(rr, rounds, offsetof(bp_round, by_cpu), 100, "    harvested by side CPU %.1f%% (%.1f..%.1f) of the waits' idle\n");
    bp_median_col(rr, rounds, offsetof(bp_round, by_work), 100, "    harvested by the programs' own work %.1f%% (%.1f..%.1f)\n");
    bp_median_col(rr, rounds, offsetof(bp_round, agree), 1, "    side_cpu_s / the programs' own CPU clocks %.3f (%.3f..%.3f)\n");
    double v[3][3];
    for (int k = 0; k < 3; k++) {
        double *x = pt_calloc((size_t)rounds, sizeof *x);
        for (int r = 0; r < rounds; r++) x[r] = k == 0 ? rr[r].slow : k == 1 ? rr[r].by_work : rr[r].agree;
        v[k][0] = bp_median(x, rounds);
        free(x);
    }
    printf("    issue 20's goal (a quiet machine: >= 60%% by the programs' work, <= 2%% slower, agreement within "
           "10%%): %s\n", v[1][0] >= 0.6 && v[0][0] <= 0.02 && fabs(v[2][0] - 1) <= 0.1 ? "met" : "not met");
    free(rr);
    return 0;
}

static int bench_programs(int argc, char **argv) {
    int rounds = argc > 0 ? atoi(argv[0]) : 5, iters = argc > 1 ? atoi(argv[1]) : 16;
    char worker[PATH_MAX], dir[] = "/tmp/bench_harvest_progXXXXXX";
    if (rounds < 1 || iters < 2) { fprintf(stderr, "usage: bench_harvest --programs [ROUNDS [ITERATIONS]]\n"); return 2; }
    if (bp_worker(worker, sizeof worker) < 0) {
        fprintf(stderr, "bench_harvest --programs: %s is missing (make build/tests/aux_side_work)\n", worker);
        return 2;
    }
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 2; }
    pt_machine mc;
    pt_machine_info(&mc);
    double load[3] = { -1, -1, -1 };
    if (getloadavg(load, 3) < 0) load[0] = -1;
    printf("bench_harvest --programs: %s (%s), %d cores, load average %.2f %.2f %.2f; P=2 threads, 4 x 256, "
           "batch %d x %d; one counting program per rank; %d rounds (a job each) of %d iterations without "
           "and %d with side work, alternating, after %d warm-up\n", mc.cpu, mc.isa, mc.cores, load[0], load[1],
           load[2], BP_BATCH, BP_SEQ, rounds, iters, iters, BP_WARM);
    gpt_model m;
    if (gpt_init(&m, &BP_CFG) < 0) return 1;
    gpt_init_random(&m, 1);
    pt_rng rng;
    pt_rng_seed(&rng, 7);
    int *tok = pt_malloc(sizeof(int) * (BP_BATCH * BP_SEQ + 1));
    for (int i = 0; i <= BP_BATCH * BP_SEQ; i++) tok[i] = (int)(pt_rng_next(&rng) % 256);
    int status = bp_layout("1f1b", 2, rounds, iters, &m, tok, worker, dir) < 0 ||
                 bp_layout("zb-h2", 4, rounds, iters, &m, tok, worker, dir) < 0;
    if (getloadavg(load, 3) < 0) load[0] = -1;
    printf("\nload average at the end %.2f %.2f %.2f (2 cores: above 2, other tenants took part of the idle cores)\n",
           load[0], load[1], load[2]);
    char rm[80];
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    if (system(rm) != 0) status = 1;
    gpt_free(&m);
    free(tok);
    return status;
}

#endif
