/* Shared by the benchmarks (header only: each bench is one file): the machine line every figure
 * is printed next to, and a PyTorch process (bench/torch_train.py --serve) that runs its steps
 * interleaved with ours, so the machine's noise hits both alike. Not a test helper. */
#ifndef PT_BENCH_UTIL_H
#define PT_BENCH_UTIL_H
#include "nn/nn.h"
#include "util/pt.h"
#include <cblas.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* "AMD EPYC, 2 cores, CPU AVX-512; kernels built for AVX2; OpenBLAS 0.3.21 ... (Haswell)". */
static inline void bench_machine_line(char *buf, size_t n) {
    pt_machine mi;
    pt_machine_info(&mi);
    char cfg[128];
    snprintf(cfg, sizeof cfg, "%s", openblas_get_config());
    char *sp = strchr(cfg, ' ');   /* "OpenBLAS 0.3.21 DYNAMIC_ARCH ...": keep name and version */
    if (sp && (sp = strchr(sp + 1, ' '))) *sp = 0;
    snprintf(buf, n, "%s, %d cores, CPU %s; kernels built for %s; %s with %s kernels", mi.cpu,
             mi.cores, mi.isa, nn_build_isa(), cfg, openblas_get_corename());
}

/* "machine: ..." on its own line: every benchmark's figures are this machine's. */
static inline void bench_print_machine(void) {
    char mach[384];
    bench_machine_line(mach, sizeof mach);
    printf("machine: %s\n", mach);
}

/* Peak resident memory of this process so far, MB: VmHWM of /proc/self/status (the high-water
 * mark of this address space; ru_maxrss would carry a parent's peak across exec), else ru_maxrss. */
static inline double bench_peak_rss_mb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %lf kB", &kb) == 1) break;
    if (f) fclose(f);
    if (kb >= 0) return kb / 1024.0;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024.0;
}

/* Seconds of CPU this thread has used: unlike the wall clock, it does not count the time another
 * process held the core, so on a shared machine it is the steadier measure of one thread's work. */
static inline double bench_cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Minor + major page faults of this process so far. */
static inline long bench_page_faults(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt + ru.ru_majflt;
}

/* A running bench/torch_train.py --serve. */
typedef struct {
    pid_t pid;
    FILE *to, *from;
    char version[32];
    int threads;
    double rss_mb;   /* its peak RSS after the warm-up step */
} bench_torch;

/* Starts torch_train.py --serve with the given arguments (e.g. "--shape gpt2 --threads 1") under
 * /usr/bin/python3 and waits for its "ready" line. Returns 0, or -1 with *why saying why not
 * (no python3, no torch, no script): the caller prints the reason and goes on without it. */
static inline int bench_torch_start(bench_torch *bt, const char *args, const char **why) {
    const char *script = getenv("TORCH_BENCH") ? getenv("TORCH_BENCH") : "bench/torch_train.py";
    memset(bt, 0, sizeof *bt);
    *why = NULL;
    if (access("/usr/bin/python3", X_OK) != 0) { *why = "no /usr/bin/python3"; return -1; }
    if (access(script, R_OK) != 0) { *why = "bench/torch_train.py not found (run from the repository root)"; return -1; }
    int in[2], out[2];
    if (pipe(in) < 0 || pipe(out) < 0) { *why = "pipe failed"; return -1; }
    char cmd[512];
    snprintf(cmd, sizeof cmd, "exec /usr/bin/python3 %s --serve %s", script, args);
    /* posix_spawn, not fork: a fork marks every page of ours copy-on-write, and our next step
     * would take a page fault on each page it writes (seen as ~14k faults a step). */
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addclose(&fa, in[1]);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    char *sargv[] = { "sh", "-c", cmd, NULL };
    if (posix_spawn(&bt->pid, "/bin/sh", &fa, NULL, sargv, environ) != 0) bt->pid = -1;
    posix_spawn_file_actions_destroy(&fa);
    close(in[0]);
    close(out[1]);
    bt->to = fdopen(in[1], "w");
    bt->from = fdopen(out[0], "r");
    char line[256];
    double rss_kb = 0;
    if (bt->pid < 0 || !fgets(line, sizeof line, bt->from) ||
        sscanf(line, "ready %31s %d %lf", bt->version, &bt->threads, &rss_kb) != 3) {
        *why = "torch_train.py --serve did not start (is python3-torch installed?)";
        if (bt->to) fclose(bt->to);
        if (bt->from) fclose(bt->from);
        if (bt->pid > 0) waitpid(bt->pid, NULL, 0);
        bt->pid = 0;
        return -1;
    }
    bt->rss_mb = rss_kb / 1024.0;
    return 0;
}

/* Seconds of one PyTorch step ("step") or 1024^3 matmul ("mm"), wall clock, and in *cpu the CPU
 * seconds of its thread (NULL: not wanted); -1 when the process is gone. */
static inline double bench_torch_time(bench_torch *bt, const char *what, double *cpu) {
    char line[96];
    double s, c = -1;
    if (!bt->pid || fprintf(bt->to, "%s\n", what) < 0 || fflush(bt->to) != 0 ||
        !fgets(line, sizeof line, bt->from) || sscanf(line, "%lf %lf", &s, &c) < 1)
        return -1;
    if (cpu) *cpu = c;
    return s;
}

static inline void bench_torch_stop(bench_torch *bt) {
    if (!bt->pid) return;
    fprintf(bt->to, "quit\n");
    fclose(bt->to);
    fclose(bt->from);
    waitpid(bt->pid, NULL, 0);
    bt->pid = 0;
}

#endif
