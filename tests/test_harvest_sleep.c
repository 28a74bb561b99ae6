/* A rank that lends its core to a side program sleeps until the arrival wakes it (issue 20): no
 * spinning, no polling with short naps. Counted as this process's voluntary context switches
 * (getrusage: a thread that sleeps and is woken is one; the program's own are its process's):
 * the same training run with a CPU-bound program on each rank against without, and the extra
 * switches per second of the programs' slots must stay far below what a rank polling every
 * 50 us makes (20,000 a second of slot: POLL_RATE). Also: the losses equal the run without side
 * work, bitwise. Counts, not speed: a loaded machine makes fewer polls, never more. And the
 * program's placement on the rank's core (cmd_group_place). */
#include "harvest/cmd_group.h"
#include "train/trainer.h"
#include "util/pt.h"
#include "test.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

enum { STEPS = 16 };
/* What a poll every 50 us would cost per second of slot, and the bound: a hundredth of it, plus
 * per side step a few switches of its own and per training step the arrival messages at STEP
 * (on_wait set only with side work). Sleeping ranks add about none (measured: 0 of 232, where
 * 50 us polls added 5491 over 1.9 s of slots at load 20: a loaded machine polls less often). */
#define POLL_RATE 20000.0
#define PER_SIDE_STEP 4
#define PER_STEP 10

static char tmpdir[64], cfg[128], data[128];

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0) { perror(path); exit(2); }
    fclose(f);
}

static long nvcsw(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_nvcsw;
}

/* The sum of key over the metrics file's lines. */
static double metrics_sum(const char *path, const char *key) {
    size_t n;
    char *s = pt_read_file(path, &n), pat[64];
    double sum = 0;
    snprintf(pat, sizeof pat, "\"%s\":", key);
    for (char *p = s; p && (p = strstr(p, pat)); p += strlen(pat)) sum += atof(p + strlen(pat));
    free(s);
    return sum;
}

/* One run; its voluntary switches, losses (the metrics file's text after each "loss"). */
static int run(const char *name, const char **cmds, int n_cmds, long *switches, char *metrics, size_t mn) {
    snprintf(metrics, mn, "%s/%s.jsonl", tmpdir, name);
    train_opts o = { .config = cfg, .data = data, .batch = 32, .seq = 32, .steps = STEPS, .seed = 1,
                     .oc = optim_config_default(), .threads = 1, .log_every = 1000, .metrics = metrics };
    o.oc.total_steps = STEPS;
    o.ro = (run_opts){ .P = 2, .D = 1, .schedule = "1f1b", .M = 2 };
    o.side_commands = cmds;
    o.n_side_commands = n_cmds;
    train_ctx *t;
    long before = nvcsw();
    if (train_init(&t, &o) < 0) return -1;
    int rc = train_run(t);
    train_free(t);
    *switches = nvcsw() - before;
    return rc;
}

static int same_losses(const char *a, const char *b) {
    size_t na, nb;
    char *x = pt_read_file(a, &na), *y = pt_read_file(b, &nb);
    int same = x && y;
    for (char *p = x, *q = y; same && (p = strstr(p, "\"loss\":")) && (q = strstr(q, "\"loss\":")); p++, q++)
        same = atof(p + 7) == atof(q + 7) && strncmp(p, q, strcspn(p, ",")) == 0;
    free(x);
    free(y);
    return same;
}

/* cmd_group_place puts a stopped program's threads on the core this thread runs on (where
 * this process may run on two or more); with PT_SIDE_PIN=0 it leaves them. */
static void test_placement(void) {
    cpu_set_t mine;
    if (sched_getaffinity(0, sizeof mine, &mine) != 0 || CPU_COUNT(&mine) < 2) {
        printf("ok harvest sleep: placement (skipped: this process may run on one core only)\n");
        return;
    }
    for (int pin = 1; pin >= 0; pin--) {
        pid_t pid = fork();
        if (pid == 0) { raise(SIGSTOP); _exit(0); }
        waitpid(pid, NULL, WUNTRACED);
        if (!pin) setenv("PT_SIDE_PIN", "0", 1);
        cmd_group g;
        cmd_group_init(&g, pid);
        unsetenv("PT_SIDE_PIN");
        int cpu = sched_getcpu();
        cmd_group_place(&g);
        cpu_set_t got;
        sched_getaffinity(pid, sizeof got, &got);
        int alone = g.placed >= 0 && CPU_COUNT(&got) == 1 && CPU_ISSET(g.placed, &got);
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        if (pin) CHECK("harvest sleep: a program is placed on the rank's core", alone && g.placed >= 0,
                       "placed %d (this thread was on %d), its cores: %d", g.placed, cpu, CPU_COUNT(&got));
        else CHECK("harvest sleep: PT_SIDE_PIN=0 leaves a program on this process's cores",
                   g.placed < 0 && CPU_EQUAL(&got, &mine), "placed %d, its cores: %d", g.placed, CPU_COUNT(&got));
    }
}

int main(void) {
    test_placement();
    const char *base = getenv("TEST_TMP") ? getenv("TEST_TMP") : "/tmp";
    snprintf(tmpdir, sizeof tmpdir, "%.40s/hsleepXXXXXX", base);
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 2; }
    snprintf(cfg, sizeof cfg, "%s/cfg.json", tmpdir);
    snprintf(data, sizeof data, "%s/text.txt", tmpdir);
    write_file(cfg, "{\"n_layer\": 4, \"n_head\": 4, \"n_embd\": 128, \"vocab_size\": 256, \"n_positions\": 32}");
    char text[20000] = "";
    for (int i = 0; i < 300; i++) strcat(text, i % 3 ? "the quick brown fox " : "jumps over the lazy dog\n");
    write_file(data, text);
    const char *cmds[] = { "0:while :; do :; done", "1:while :; do :; done" };
    char m0[256], m1[256];
    long s0 = 0, s1 = 0;
    int rc0 = run("alone", NULL, 0, &s0, m0, sizeof m0), rc1 = run("side", cmds, 2, &s1, m1, sizeof m1);
    CHECK("harvest sleep: both runs complete", rc0 == 0 && rc1 == 0, "rc %d, %d: %s", rc0, rc1, pt_err());
    CHECK("harvest sleep: losses with side programs equal the run without, bitwise", same_losses(m0, m1),
          "see %s and %s", m0, m1);
    double slots = metrics_sum(m1, "side_s"), side_steps = metrics_sum(m1, "side_steps");
    double bound = POLL_RATE / 100 * slots + PER_SIDE_STEP * side_steps + PER_STEP * STEPS;
    CHECK("harvest sleep: the programs had slots to poll in (so polling would show)", slots > 0.02,
          "%.4f s of slots in %.0f side steps", slots, side_steps);
    CHECK("harvest sleep: a rank lending its core sleeps until the arrival (voluntary switches: no polls)",
          s1 - s0 <= bound, "%ld extra switches over %.4f s of slots and %.0f side steps (bound %.0f; a 50 us "
          "poll makes %.0f)", s1 - s0, slots, side_steps, bound, POLL_RATE * slots);
    printf("# %ld switches alone, %ld with programs; %.4f s of slots, %.0f side steps\n", s0, s1, slots, side_steps);
    char rm[200];
    snprintf(rm, sizeof rm, "rm -rf '%s'", tmpdir);
    if (system(rm) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    TEST_DONE();
}
