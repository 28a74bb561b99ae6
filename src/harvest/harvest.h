/* Bubble harvesting: side tasks run in the idle time of a pipelined job's ranks (a receive whose
 * message has not arrived, a gradient reduction waiting for other ranks at the end of the
 * iteration) without delaying a ready action. A side task is a C object bound to one world rank
 * (a name, the memory it holds, init / step / done / free); the harvester is the executor's
 * wait hook (run_exec_cfg.on_wait): in each wait it runs steps of the rank's tasks while the idle
 * time predicted for that wait is longer than the next step's measured median, and returns as
 * soon as the awaited message arrives between steps. A process task (any program, task_command.c)
 * runs one step per wait: resumed (SIGCONT) at its start, stopped (SIGSTOP) before its
 * predicted end or at the arrival. Prediction: the simulator's wait for the action (costs
 * profiled in this run) plus the median of what the last steps measured beyond it.
 * Not here: the executor (run/), the trainer's flags, metrics and events (train/), the
 * evaluation's arithmetic (harvest/eval.h). docs/harvesting.md says more.
 *
 * Threads: a task's step runs on its rank's thread during an iteration (the rank's own tasks
 * only); every other call, and the harvester's bookkeeping, on the main thread between
 * iterations (the rank threads are joined then). */
#ifndef PT_HARVEST_HARVEST_H
#define PT_HARVEST_HARVEST_H
#include "comm/comm.h"
#include "run/executor.h"
#include "sched/sched.h"
#include "sim/sim.h"
#include "trace/timeline.h"
#include <stdbool.h>

/* What a step returns besides -1 (failure, with pt_seterr: the task is disabled and reported;
 * training goes on). */
enum { HARVEST_IDLE = 0,      /* nothing to do now (waiting for input): no more steps this wait */
       HARVEST_MORE = 1 };    /* did a piece of work */

#define HARVEST_KINDS 8       /* kinds of step a task may have, each with its own median */

typedef struct harvest_task harvest_task;

/* A step's window, for tasks that run until told (process tasks, vt.until_deadline): return
 * by `deadline` (pt_now() time), and as soon as arrived(arg) says non-zero (1: the main job
 * needs the rank back; -1: the job failed). Iterative tasks may ignore it. */
typedef struct {
    double deadline;
    int (*arrived)(void *arg);
    void *arg;
} harvest_slot;

typedef struct {
    const char *kind;       /* its registry row's name ("busy", "command", "eval", ...) */
    bool until_deadline;    /* a step runs until the slot's deadline or the arrival (a process),
                             * not one piece of fixed length */
    /* Main thread, once, before training starts: allocate, open and check input, start processes.
     * -1 with an error naming the flag and the file refuses the run before it starts. */
    int (*init)(harvest_task *t);
    /* The rank's thread, inside a bubble: one piece of work, about as long as the last ones of
     * its kind. HARVEST_MORE, HARVEST_IDLE, or -1 with pt_seterr. */
    int (*step)(harvest_task *t, const harvest_slot *slot);
    /* Main thread, after every training step: 1 when the task has finished all its work (no more
     * steps), 0 not yet, -1 failed (pt_seterr; disabled). Also the task's upkeep (a process's
     * memory and exit). NULL: never finishes. */
    int (*done)(harvest_task *t);
    /* The kind of the next step (0..HARVEST_KINDS-1) when steps differ in length (an
     * evaluation's head against its blocks). NULL: all alike. */
    int (*next_kind)(const harvest_task *t);
    /* Main thread: frees the task and stops all it started (kills its processes); also for a
     * task whose init was never called (another process's rank, or a run refused earlier). */
    void (*free)(harvest_task *t);
} harvest_task_vt;

struct harvest_task {
    const harvest_task_vt *vt;
    char name[96];          /* for reports: "busy 0", "command 1 (./job.sh)" */
    double mem_bytes;       /* memory it declares it holds at most */
    int rank;               /* world rank whose bubbles it runs in (-1: the harvester spreads) */
    char report[160];       /* what the task has to say when it finishes (an exit status), or "" */
    void *self;             /* the task's state */
};

/* ---- the registry: one row per kind a user can name (train --side-task KIND[:ARGS]) ---------- */

/* What a task's constructor may read about the run. */
typedef struct {
    int R;                  /* world ranks of the job */
    double mem_cap;         /* --side-mem: bytes a task may hold (0: no cap) */
    const char *flag;       /* the flag that named it, for errors ("--side-task") */
} harvest_env;

typedef struct {
    const char *name;       /* "busy" */
    /* A task from ARGS (what follows "KIND:", or "" when nothing does). -1 naming the flag. */
    int (*create)(harvest_task **out, const char *args, const harvest_env *env);
    const char *args;       /* the ARGS form, for help */
    const char *help;
} harvest_kind;

const harvest_kind *harvest_kind_rows(int *n);
const harvest_kind *harvest_kind_find(const char *name);
/* "KIND[:ARGS]" through its row; -1 naming env->flag and the known kinds on an unknown one. */
int harvest_task_create(harvest_task **out, const char *spec, const harvest_env *env);
/* The kinds in the registry, one line each, for --help. */
void harvest_print_kinds(FILE *f);

/* ---- the harvester ------------------------------------------------------------------------ */

typedef struct harvest harvest;

/* One thing to report about a task (the trainer turns it into a run event). */
typedef struct {
    int task;               /* index in the harvester */
    char what[16];          /* "start", "failed", "finished", "memory", "exit" */
    char text[320];
} harvest_note;

/* Numbers of the last training step, from its merged timeline (root). */
typedef struct {
    double side_s;          /* rank-seconds of side steps (each started inside a bubble) */
    double overrun_s;       /* the part of them past the awaited message's arrival: time a
                             * main-job action started later than it could have */
    double sync_s;          /* side work run at the step boundary (first steps, to measure them) */
    int steps;              /* side steps run */
    int offered;            /* waits offered to side work, and of them with steps run: */
    int used;
} harvest_stats;

/* An empty harvester; tasks are added, then started (harvest_start). */
void harvest_create(harvest **out);
/* Takes t (owned from now on, freed by harvest_free). Its rank: t->rank, or if -1 the next
 * world rank in turn (round-robin from 0). Returns the task's index. */
int harvest_add(harvest *h, harvest_task *t);
int harvest_count(const harvest *h);
const harvest_task *harvest_task_at(const harvest *h, int i);
/* Which world ranks this process runs ([lo, hi): threads all of them, MPI its own) and the job's
 * size R. Tasks of other ranks are freed unstarted (each process of an MPI job adds every task).
 * Then every local task's init, in order. -1 with the failing task's error (names its flag). */
int harvest_start(harvest *h, int R, int lo, int hi);
/* The job's schedule (lowered, as the ranks run it; borrowed until free) and pipeline ranks P:
 * needed before the first iteration that offers waits. */
void harvest_bind(harvest *h, const sched *s, int P);
/* Paused (1): waits are not used until resumed (0); a process task stays stopped. Between
 * iterations only (bench/bench_harvest.c alternates iterations with and without side work). */
void harvest_pause(harvest *h, int paused);
/* The executor's wait hook: pass harvest_on_wait and h as run_opts.on_wait / wait_user. */
int harvest_on_wait(void *user, run_wait *w);
/* After each training step, on every process (collective over world when non-NULL, MPI): root
 * (tl: the step's merged timeline, times from its start, send links set; costs: profiled, or
 * NULL) measures the waits and the side work (into *out) and updates the predictions; every
 * process gets them, runs its tasks' done(), measures tasks that have no step time yet (one step
 * now), and queues notes. -1 only when world's communication fails. */
int harvest_after_step(harvest *h, const timeline *tl, const sim_costs *costs, comm *world,
                       harvest_stats *out);
/* Whether the next harvest_after_step will run the simulator (then pass it profiled costs). */
int harvest_wants_costs(const harvest *h);
/* The next queued note (1), or 0 when none. */
int harvest_next_note(harvest *h, harvest_note *out);
/* Over the run, per task: steps, seconds of steps, median step seconds (kind 0; -1: none). */
void harvest_task_totals(const harvest *h, int i, long *steps, double *secs, double *median);
/* Frees every task (killing their processes) and the harvester. NULL is fine. */
void harvest_free(harvest *h);

#endif
