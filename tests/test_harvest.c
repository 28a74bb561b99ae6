/* Bubble harvesting (src/harvest) through the trainer, P=2 rank threads on a tiny model: side
 * steps run only inside a rank's waits and never over its compute (checked on every step's
 * merged timeline), a failing side task is reported and disabled while training goes on with
 * the losses of a run without side work (bitwise), a side program is stopped at every step
 * boundary, uses no more CPU than its bubbles gave it, and is gone (with what it started) after
 * the run, and a program over --side-mem is stopped and reported. The CLI's side
 * (flags, bad input, a dying rank, signals, eval_loss against `pipetrain eval`):
 * tests/test_harvest_cli.sh. */
#include "train/trainer.h"
#include "harvest/harvest.h"
#include "util/pt.h"
#include "test.h"
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { STEPS = 12, MAX_STEPS = 40 };

static char tmpdir[64], cfg_path[128], cfg3_path[128], big_cfg_path[128], data_path[128], hog[256];

/* What the inspecting hook saw. */
typedef struct {
    float loss[MAX_STEPS];
    int side_events, outside_wait, over_compute;
    int in_step, in_final_reduce;   /* side events in a STEP's wait, in --no-overlap's final
                                     * REDUCE_GRAD (a compute-stream event) */
    int by_task_rank[8][4];         /* side events of task T on rank R (T, R < 8, 4) */
    char first_outside[400];        /* the first side event outside a wait, and its rank's events */
    int task_overlap;               /* pairs of one task's side events that overlap in time */
    double side_s;              /* of the timelines' side events */
    const char *pidfile[2];     /* side programs to watch (NULL: none) */
    int pid[2];
    int boundary_checks, not_stopped;
    double stop_wait;           /* the longest a program took to show as stopped */
    double cpu_s[2];            /* the programs' CPU time at the last step */
} record;

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0) { perror(path); exit(2); }
    fclose(f);
}

static int read_pid(const char *path) {
    FILE *f = fopen(path, "r");
    int pid = 0;
    if (f && fscanf(f, "%d", &pid) != 1) pid = 0;
    if (f) fclose(f);
    return pid;
}

/* State letter and CPU seconds (utime + stime) of a process, from /proc; '?' when gone. */
static char proc_state(int pid, double *cpu) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) return '?';
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')'), st = '?';
    unsigned long ut = 0, stt = 0;
    if (p && sscanf(p + 2, "%c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &st, &ut, &stt) == 3 && cpu)
        *cpu = (double)(ut + stt) / (double)sysconf(_SC_CLK_TCK);
    return st;
}

/* Nanoseconds pid has run on a CPU (/proc/PID/schedstat); -1 when gone. */
static double run_ns(int pid) {
    char path[64];
    double ns = -1;
    snprintf(path, sizeof path, "/proc/%d/schedstat", pid);
    FILE *f = fopen(path, "r");
    if (f && fscanf(f, "%lf", &ns) != 1) ns = -1;
    if (f) fclose(f);
    return ns;
}

/* Between steps (no bubble) a side program must not run: over PAUSE_S of free CPU (the rank
 * threads are idle now) it gets less than RUN_MAX_S. A SIGSTOP shows in /proc as 'T' only once
 * the process is next scheduled, which for a nice-19 process on a busy machine takes a while, so
 * the CPU it gets is what is checked; the longest it took to show 'T' is printed. */
#define PAUSE_S 0.005
#define RUN_MAX_S 0.0005
static int stopped_soon(int pid, double *cpu, double *longest) {
    double a = run_ns(pid), t0 = pt_now();
    usleep((useconds_t)(PAUSE_S * 1e6));
    double b = run_ns(pid);
    while (proc_state(pid, cpu) == 'R' && pt_now() - t0 < 0.05) usleep(100);
    if (pt_now() - t0 > *longest) *longest = pt_now() - t0;
    return a >= 0 && b >= 0 && (b - a) * 1e-9 < RUN_MAX_S;
}

/* Dead: no such process, or a zombie (killed; an orphan waits for init to reap it). */
static int gone(int pid) {
    char st = proc_state(pid, NULL);
    return st == '?' || st == 'Z' || st == 'X';
}

static int is_wait(sched_kind k) { return k == ACT_RECV_F || k == ACT_RECV_B || k == ACT_REDUCE_GRAD; }

/* The side event s and its rank's other events around it, into r->first_outside. */
static void describe_outside(record *r, const timeline *tl, const tl_event *s, double all_stepped) {
    size_t n = sizeof r->first_outside, at = 0;
    at += (size_t)snprintf(r->first_outside, n, "rank %d side [%.6f, %.6f], last STEP start %.6f:", s->rank,
                           s->start, s->end, all_stepped);
    for (int k = 0; k < tl->n && at < n; k++) {
        const tl_event *e = &tl->ev[k];
        char b[32];
        if (e->rank != s->rank || e->stream == TL_SIDE || e->end < s->start - 0.002 || e->start > s->end + 0.002) continue;
        at += (size_t)snprintf(r->first_outside + at, n - at, " %s/%d [%.6f %.6f]",
                               sched_action_str(&e->act, b, sizeof b), e->stream, e->start, e->end);
    }
}

/* When the last rank reached its STEP: the world reduction's wait is over soon after, once that
 * rank has posted its reductions, taken its norm and sent its arrival messages; the timeline
 * does not show when, so a side step in a STEP's wait may start up to STEP_SLACK_S later
 * (sanitizers and a loaded machine stretch that path to hundreds of microseconds). */
#define STEP_SLACK_S 2e-3
/* When the last rank reached its STEP: the world reduction's wait is over then. */
static double last_step_start(const timeline *tl) {
    double t = -1e300;
    for (int i = 0; i < tl->n; i++)
        if (tl->ev[i].act.kind == ACT_STEP && tl->ev[i].stream != TL_SIDE && tl->ev[i].start > t)
            t = tl->ev[i].start;
    return t;
}

/* Every side event of the step: inside a wait of its rank (a RECV's or a REDUCE_GRAD's span, or
 * a STEP's while some rank had not reached its STEP, give or take STEP_SLACK_S: its world
 * reduction's wait) and over none of its compute (F, B, W, BW; the STEP's update comes after
 * its wait). */
static void check_timeline(record *r, const timeline *tl) {
    const double eps = 1e-9, all_stepped = last_step_start(tl);
    for (int i = 0; i < tl->n; i++) {
        const tl_event *s = &tl->ev[i];
        if (s->stream != TL_SIDE) continue;
        int in_wait = 0, over = 0;
        for (int k = 0; k < tl->n; k++) {
            const tl_event *e = &tl->ev[k];
            if (e->rank != s->rank || e->stream == TL_SIDE) continue;
            int inside = e->start <= s->start + eps && s->end <= e->end + eps;
            if (is_wait(e->act.kind) && inside) {
                in_wait = 1;
                r->in_final_reduce += e->act.kind == ACT_REDUCE_GRAD && e->stream == TL_COMPUTE;
            }
            if (e->act.kind == ACT_STEP && inside && s->start <= all_stepped + STEP_SLACK_S) {
                in_wait = 1;
                r->in_step++;
            }
            if (sched_kind_is_compute(e->act.kind) && e->start < s->end - eps && s->start < e->end - eps) over = 1;
        }
        if (s->act.mb >= 0 && s->act.mb < 8 && s->rank >= 0 && s->rank < 4) r->by_task_rank[s->act.mb][s->rank]++;
        for (int k = i + 1; k < tl->n; k++) {
            const tl_event *o = &tl->ev[k];
            r->task_overlap += o->stream == TL_SIDE && o->act.mb == s->act.mb && o->start < s->end - eps &&
                               s->start < o->end - eps;
        }
        r->side_events++;
        r->side_s += s->end - s->start;
        r->outside_wait += !in_wait;
        if (!in_wait && !r->first_outside[0]) describe_outside(r, tl, s, all_stepped);
        r->over_compute += over;
    }
}

static int inspect(train_ctx *t, long step, const train_step_stats *st, void *user) {
    record *r = user;
    if (step <= MAX_STEPS) r->loss[step - 1] = st->opt.loss;
    run_job *job = train_engine_job(train_ctx_engine(t));
    if (job) check_timeline(r, run_job_timeline(job));
    for (int k = 0; k < 2; k++) {
        if (!r->pidfile[k]) continue;
        if (!r->pid[k]) r->pid[k] = read_pid(r->pidfile[k]);
        if (!r->pid[k]) continue;        /* it has not had a bubble to start in yet */
        r->boundary_checks++;
        r->not_stopped += !stopped_soon(r->pid[k], &r->cpu_s[k], &r->stop_wait);
    }
    return 0;
}

/* The programs' runs use a bigger model: bubbles of a millisecond and more, room for a slot. */
static train_opts base_opts(const char *name, int steps, int big) {
    static char metrics[8][600];
    static int n;
    train_opts o = { .config = big ? big_cfg_path : cfg_path, .data = data_path, .batch = 8,
                     .seq = big ? 64 : 16, .steps = steps,
                     .seed = 1, .oc = optim_config_default(), .threads = 1, .log_every = 1000 };
    o.oc.total_steps = steps;
    o.ro = (run_opts){ .P = 2, .D = 1, .schedule = "1f1b", .M = 2 };
    snprintf(metrics[n % 8], 600, "%s/%s.jsonl", tmpdir, name);
    o.metrics = metrics[n++ % 8];
    return o;
}

/* A run of o with the inspecting hook; train_run's status (-2: setup failed). */
static int run(const train_opts *o, record *r) {
    train_ctx *t;
    if (train_init(&t, o) < 0) return -2;
    int rc = train_add_hook(t, TRAIN_HOOK_LOG, inspect, r) < 0 ? -2 : train_run(t);
    train_free(t);
    return rc;
}

static int file_has(const char *path, const char *text) {
    size_t n;
    char *s = pt_read_file(path, &n);
    int yes = s && strstr(s, text);
    free(s);
    return yes;
}

static void events_path(const train_opts *o, char *buf, size_t n) {
    snprintf(buf, n, "%.*s.events.jsonl", (int)strlen(o->metrics) - 6, o->metrics);
}

static void test_iterative(void) {
    record base = { 0 }, side = { 0 };
    train_opts o = base_opts("base", STEPS, 0);
    CHECK("harvest: a run without side work", run(&o, &base) == 0, "%s", pt_err());
    /* the failing task fails at its first step, which every task runs measured at a step
     * boundary (harvest.c): fail=2 needed a second step in a bubble that a loaded machine or the
     * back-off may never give it within STEPS */
    const char *tasks[] = { "busy:40,rank=0", "busy:40,rank=1", "busy:40,fail=1,rank=1" };
    o = base_opts("busy", STEPS, 0);
    o.side_tasks = tasks;
    o.n_side_tasks = 3;
    int rc = run(&o, &side);
    CHECK("harvest: a run with side tasks, one of them failing, completes", rc == 0, "rc %d: %s", rc, pt_err());
    CHECK("harvest: side steps ran in the bubbles", side.side_events > 0 && side.side_s > 0,
          "%d side events", side.side_events);
    CHECK("harvest: every side step lies inside a wait of its rank (timeline)", side.outside_wait == 0,
          "%d of %d outside", side.outside_wait, side.side_events);
    CHECK("harvest: no side step overlaps its rank's compute (timeline)", side.over_compute == 0,
          "%d of %d overlap", side.over_compute, side.side_events);
    CHECK("harvest: losses equal the run without side work, bitwise",
          !memcmp(base.loss, side.loss, sizeof(float) * STEPS), "step 1: %.9g vs %.9g", base.loss[0], side.loss[0]);
    char ev[700];
    events_path(&o, ev, sizeof ev);
    CHECK("harvest: the failing task is reported as a side_task event, with its error",
          file_has(ev, "\"what\":\"failed\"") && file_has(ev, "failing at step 1"), "see %s", ev);
    CHECK("harvest: the metrics carry bubble_s, side_s, side_overrun_s, side_steps",
          file_has(o.metrics, "\"bubble_s\":") && file_has(o.metrics, "\"side_s\":") &&
          file_has(o.metrics, "\"side_overrun_s\":") && file_has(o.metrics, "\"side_steps\":"), "see %s", o.metrics);
}

static void test_program(void) {
    char pf[2][300], cmd[2][900];
    record r = { 0 };
    snprintf(pf[0], sizeof pf[0], "%s/hog0.pid", tmpdir);
    snprintf(pf[1], sizeof pf[1], "%s/hog1.pid", tmpdir);
    /* the first execs the program (it is the group's leader); the second starts it in the
     * background and waits (a grandchild in the group) */
    snprintf(cmd[0], sizeof cmd[0], "0:exec %s %s 0", hog, pf[0]);
    snprintf(cmd[1], sizeof cmd[1], "1:%s %s 0 & wait", hog, pf[1]);
    const char *cmds[] = { cmd[0], cmd[1] };
    train_opts o = base_opts("cmd", 24, 1);
    o.side_commands = cmds;
    o.n_side_commands = 2;
    r.pidfile[0] = pf[0];
    r.pidfile[1] = pf[1];
    int rc = run(&o, &r);
    CHECK("harvest: a run with two side programs completes", rc == 0, "rc %d: %s", rc, pt_err());
    CHECK("harvest: the side programs started in bubbles", r.pid[0] > 0 && r.pid[1] > 0,
          "pids %d %d", r.pid[0], r.pid[1]);
    CHECK("harvest: a side program gets no CPU at any step boundary", r.boundary_checks > 0 &&
          r.not_stopped == 0, "%d of %d checks found it running", r.not_stopped, r.boundary_checks);
    printf("# a program showed as stopped ('T') at most %.3f ms after the step ended\n", r.stop_wait * 1e3);
    /* CPU clock ticks are 10 ms: a tick or two either way */
    CHECK("harvest: the programs used no more CPU than the bubbles they were given",
          r.cpu_s[0] + r.cpu_s[1] <= r.side_s + 0.03, "%.3f s of CPU, %.3f s of side slots",
          r.cpu_s[0] + r.cpu_s[1], r.side_s);
    CHECK("harvest: the side programs (leader and grandchild) are gone after the run",
          r.pid[0] > 0 && r.pid[1] > 0 && gone(r.pid[0]) && gone(r.pid[1]), "pids %d %d: states %c %c",
          r.pid[0], r.pid[1], proc_state(r.pid[0], NULL), proc_state(r.pid[1], NULL));
}

static void test_memory_cap(void) {
    char pf[300], cmd[900], ev[700];
    record r = { 0 };
    snprintf(pf, sizeof pf, "%s/big.pid", tmpdir);
    snprintf(cmd, sizeof cmd, "exec %s %s 256", hog, pf);
    const char *cmds[] = { cmd };
    train_opts o = base_opts("mem", 40, 1);
    o.side_commands = cmds;
    o.n_side_commands = 1;
    o.side_mem = 16 << 20;
    r.pidfile[0] = pf;
    int rc = run(&o, &r);
    events_path(&o, ev, sizeof ev);
    CHECK("harvest: a program over --side-mem: training completes", rc == 0, "rc %d: %s", rc, pt_err());
    CHECK("harvest: a program over --side-mem is stopped and reported",
          file_has(ev, "over --side-mem") && r.not_stopped == 0, "see %s", ev);
    CHECK("harvest: ... and gone after the run", r.pid[0] > 0 && gone(r.pid[0]), "pid %d", r.pid[0]);
}

/* The waits at the end of an iteration: the STEP's world reduction (P=3: the middle rank holds
 * no tied tensor, so it waits at its STEP for the first rank's last backward, made long by
 * slowing stage 0 down) and --no-overlap's final reduction. Side steps there too, still only
 * inside waits, the losses unchanged. The harvester starts a step only where its measured length
 * (a quantile of recent ones: a 40 us step reads milliseconds when its thread loses the core on a
 * loaded machine) fits what the wait's past instances promise; so the wait must outlast such a
 * step: at 4 x slow (waits of a few hundred us) the STEP's wait went unused in a run at load 14-29,
 * as it does every time with 3 ms steps (busy:3000: 0 of 222 side events there); 20 x holds them
 * (a slow stage sleeps a multiple of its measured compute, so its waits grow with the load too). */
static void test_step_waits(void) {
    const char *tasks[] = { "busy:40,rank=0", "busy:40,rank=1", "busy:40,rank=2" };
    const char *slow[] = { "0:20" };
    record base = { 0 }, side = { 0 }, nob = { 0 }, nos = { 0 };
    train_opts o = base_opts("p3", STEPS, 0);
    o.config = cfg3_path;
    o.ro.P = 3;
    o.ro.M = 4;
    o.ro.slow_stage = slow;
    o.ro.n_slow_stage = 1;
    CHECK("harvest: P=3 without side work", run(&o, &base) == 0, "%s", pt_err());
    o.side_tasks = tasks;
    o.n_side_tasks = 3;
    int rc = run(&o, &side);
    CHECK("harvest: P=3 with side tasks on every rank", rc == 0, "rc %d: %s", rc, pt_err());
    CHECK("harvest: P=3: side steps in the STEP's wait for the world reduction", side.in_step > 0,
          "%d of %d side events", side.in_step, side.side_events);
    CHECK("harvest: P=3: every side step inside a wait, none over compute",
          side.side_events > 0 && side.outside_wait == 0 && side.over_compute == 0,
          "%d outside, %d over compute, of %d; %s", side.outside_wait, side.over_compute, side.side_events,
          side.first_outside);
    CHECK("harvest: P=3: losses equal the run without side work, bitwise",
          !memcmp(base.loss, side.loss, sizeof(float) * STEPS), "step 1: %.9g vs %.9g", base.loss[0], side.loss[0]);
    o = base_opts("noov", STEPS, 0);
    o.ro.no_overlap = true;
    o.ro.slow_stage = slow;   /* rank 1 then waits in the final reduction for stage 0's last B, */
    o.ro.n_slow_stage = 1;    /* long enough for a side step on a loaded machine too */
    CHECK("harvest: --no-overlap without side work", run(&o, &nob) == 0, "%s", pt_err());
    o.side_tasks = tasks;
    o.n_side_tasks = 2;
    rc = run(&o, &nos);
    CHECK("harvest: --no-overlap with side tasks", rc == 0, "rc %d: %s", rc, pt_err());
    CHECK("harvest: --no-overlap: side steps in the final reduction's wait", nos.in_final_reduce > 0,
          "%d of %d side events", nos.in_final_reduce, nos.side_events);
    CHECK("harvest: --no-overlap: every side step inside a wait, none over compute",
          nos.side_events > 0 && nos.outside_wait == 0 && nos.over_compute == 0,
          "%d outside, %d over compute, of %d", nos.outside_wait, nos.over_compute, nos.side_events);
    CHECK("harvest: --no-overlap: losses equal the run without side work, bitwise",
          !memcmp(nob.loss, nos.loss, sizeof(float) * STEPS), "step 1: %.9g vs %.9g", nob.loss[0], nos.loss[0]);
}

/* A task added without a rank roams: its steps run in the waits of both ranks, one rank at a
 * time; a task given a rank stays there. */
static void test_roaming(void) {
    const char *tasks[] = { "busy:40", "busy:40,rank=1" };
    record r = { 0 };
    train_opts o = base_opts("roam", STEPS, 0);
    o.side_tasks = tasks;
    o.n_side_tasks = 2;
    int rc = run(&o, &r);
    CHECK("harvest: a roaming task and a pinned one: the run completes", rc == 0, "rc %d: %s", rc, pt_err());
    CHECK("harvest: the roaming task ran in the waits of both ranks",
          r.by_task_rank[0][0] > 0 && r.by_task_rank[0][1] > 0, "rank 0: %d, rank 1: %d side events",
          r.by_task_rank[0][0], r.by_task_rank[0][1]);
    /* never on rank 0; that pinned tasks run at all is test_iterative's (here the roaming task may take
     * rank 1's few waits that fit a step when the machine is loaded) */
    CHECK("harvest: the pinned task only on its rank", r.by_task_rank[1][0] == 0,
          "rank 0: %d, rank 1: %d side events", r.by_task_rank[1][0], r.by_task_rank[1][1]);
    CHECK("harvest: a task's steps never overlap (one rank at a time)", r.task_overlap == 0,
          "%d overlapping pairs", r.task_overlap);
    CHECK("harvest: roaming: every side step inside a wait, none over compute",
          r.outside_wait == 0 && r.over_compute == 0, "%d outside, %d over compute, of %d",
          r.outside_wait, r.over_compute, r.side_events);
}

/* Evaluation and a second model's training on the rank threads (the shared pass, the snapshot,
 * per-rank workers: what the thread sanitizer build looks at), with the timeline checks. */
static void test_builtin(void) {
    char side_cfg[300];
    record r = { 0 };
    snprintf(side_cfg, sizeof side_cfg, "%s/side.json", tmpdir);
    write_file(side_cfg, "{\"n_layer\": 1, \"n_head\": 2, \"n_embd\": 16, \"vocab_size\": 256, \"n_positions\": 16}");
    train_opts o = base_opts("builtin", STEPS, 0);
    o.eval_data = data_path;
    o.eval_every = 3;
    o.eval_batches = 2;
    o.side_train = side_cfg;
    o.side_data = data_path;
    int rc = run(&o, &r);
    CHECK("harvest: evaluation and side training in the bubbles: the run completes", rc == 0, "rc %d: %s", rc, pt_err());
    CHECK("harvest: ... an eval_loss is reported", file_has(o.metrics, "\"eval_loss\":"), "see %s", o.metrics);
    CHECK("harvest: ... their steps stay inside waits, off the compute", r.outside_wait == 0 && r.over_compute == 0,
          "%d outside, %d over compute, of %d", r.outside_wait, r.over_compute, r.side_events);
}

int main(int argc, char **argv) {
    const char *base = getenv("TEST_TMP") ? getenv("TEST_TMP") : "/tmp";
    snprintf(tmpdir, sizeof tmpdir, "%.40s/harvestXXXXXX", base);
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 2; }
    snprintf(cfg_path, sizeof cfg_path, "%s/cfg.json", tmpdir);
    snprintf(data_path, sizeof data_path, "%s/text.txt", tmpdir);
    snprintf(big_cfg_path, sizeof big_cfg_path, "%s/big.json", tmpdir);
    snprintf(cfg3_path, sizeof cfg3_path, "%s/cfg3.json", tmpdir);
    write_file(cfg_path, "{\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 32, \"vocab_size\": 256, \"n_positions\": 16}");
    write_file(cfg3_path, "{\"n_layer\": 3, \"n_head\": 2, \"n_embd\": 32, \"vocab_size\": 256, \"n_positions\": 16}");
    write_file(big_cfg_path, "{\"n_layer\": 4, \"n_head\": 4, \"n_embd\": 128, \"vocab_size\": 256, \"n_positions\": 64}");
    char text[20000] = "";
    for (int i = 0; i < 300; i++) strcat(text, i % 3 ? "the quick brown fox " : "jumps over the lazy dog\n");
    write_file(data_path, text);
    /* the helper program sits next to this binary */
    snprintf(hog, sizeof hog, "%.200s", argv[0]);
    char *slash = strrchr(hog, '/');
    snprintf(slash ? slash + 1 : hog, sizeof hog - (size_t)(slash ? slash + 1 - hog : 0), "aux_hog");
    if (access(hog, X_OK) != 0) { printf("FAIL harvest: %s is missing (make builds tests/aux_hog.c)\n", hog); return 1; }
    /* argv[1] (optional) runs one group only, for looping a case: iterative, builtin, step_waits,
     * roaming, program, memory_cap */
    static const struct { const char *name; void (*fn)(void); } groups[] = {
        { "iterative", test_iterative }, { "builtin", test_builtin }, { "step_waits", test_step_waits },
        { "roaming", test_roaming }, { "program", test_program }, { "memory_cap", test_memory_cap },
    };
    for (size_t k = 0; k < sizeof groups / sizeof groups[0]; k++)
        if (argc < 2 || !strcmp(argv[1], groups[k].name)) groups[k].fn();
    char rm[200];
    snprintf(rm, sizeof rm, "rm -rf '%s'", tmpdir);
    if (system(rm) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    TEST_DONE();
}
