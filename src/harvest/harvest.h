/* Bubble harvesting: side tasks run in the idle time of a pipelined job's ranks (a receive whose
 * message has not arrived, a gradient reduction waiting for other ranks at the end of the
 * iteration, the STEP's world reduction waiting for every rank) without delaying a ready
 * action. A side task is a C object (a name, the memory it holds, init / step / done / free)
 * bound to one world rank, or roaming over the ranks of its process; the harvester is the
 * executor's wait hook (run_exec_cfg.on_wait): in each wait it runs steps of the rank's tasks
 * while the wait's measured history says the next step will fit (harvest_policy), and returns
 * as soon as the awaited message arrives between steps. A process task (any program,
 * task_command.c) runs one slot per wait: resumed (SIGCONT) at its start, stopped (SIGSTOP) at
 * the arrival or the end of its slot. Not here: the executor (run/), the trainer's flags,
 * metrics and events (train/), the evaluation's arithmetic (harvest/eval.h).
 * docs/harvesting.md says more.
 *
 * Threads: a task's step runs on a rank's thread during an iteration (its rank's, or for a
 * roaming task whichever rank holds it, one at a time); every other call, and the harvester's
 * bookkeeping, on the main thread between iterations (the rank threads are joined then). */
#ifndef PT_HARVEST_HARVEST_H
#define PT_HARVEST_HARVEST_H
#include "comm/comm.h"
#include "run/executor.h"
#include "sched/sched.h"
#include "trace/timeline.h"
#include <stdbool.h>
#include <stdio.h>

/* What a step returns besides -1 (failure, with pt_seterr: the task is disabled and reported;
 * training goes on). */
enum { HARVEST_IDLE = 0,      /* nothing to do now (waiting for input): no more steps this wait */
       HARVEST_MORE = 1 };    /* did a piece of work */

#define HARVEST_KINDS 8       /* kinds of step a task may have, each with its own median */

typedef struct harvest_task harvest_task;

/* A step's window, for tasks that run until told (process tasks, vt.until_deadline): return
 * by `deadline` (pt_now() time), and as soon as arrived(arg) says non-zero (1: the main job
 * needs the rank back; -1: the job failed). block(arg, deadline), when set, sleeps until the
 * arrival or the deadline (1, 0, -1 alike): a process task resumes its program, blocks there
 * (the rank leaves its core), and stops the program when it returns. Iterative tasks may
 * ignore all three. cpu_s: a task whose work runs outside the rank's thread (a process)
 * stores the CPU seconds that work received during the step there; for the others the
 * harvester reads the rank thread's CPU clock around the step. */
typedef struct {
    double deadline;
    int (*arrived)(void *arg);
    int (*block)(void *arg, double deadline);
    void *arg;
    double *cpu_s;
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

/* Where the idle time of the waits went that side work did not use (harvest_stats.lost_s). */
enum {
    HARVEST_LOST_UNOFFERED,   /* never offered: over when the executor looked, or a wait the
                               * executor does not offer */
    HARVEST_LOST_NOTASK,      /* no active task on the rank (or paused) */
    HARVEST_LOST_SHORT,       /* no step of the rank's tasks fitted in the whole wait */
    HARVEST_LOST_PREDICT,     /* whole steps that would have fitted after the harvester gave
                               * the rank back: the predicted wait was too short */
    HARVEST_LOST_GRAIN,       /* the rest after the last step that fitted: less than a step */
    HARVEST_LOST_IDLE,        /* the tasks had nothing to do */
    HARVEST_LOST_OVERHEAD,    /* between steps: the offer, arrival checks, signals, wake-ups */
    HARVEST_LOST_REST,        /* the step rested: the main job first (harvest_policy.backoff) */
    HARVEST_LOST_N
};
/* "unoffered", "no task", ...: for tables. */
const char *harvest_lost_name(int k);

/* Numbers of the last training step, from its merged timeline (root). */
typedef struct {
    double side_s;          /* rank-seconds of side steps (each started inside a bubble) */
    double side_cpu_s;      /* CPU seconds those steps received: the rank threads' CPU clocks
                             * (C tasks), the programs' processes' (process tasks): the work
                             * side tasks got, against idle_s (wait_idle_s) the fraction harvested */
    double overrun_s;       /* the part of them past the awaited message's arrival (for a
                             * program's slot, past when the arrival woke the sleeping rank:
                             * the stop's cost): time a main-job action started later than
                             * it could have */
    double sync_s;          /* side work run at the step boundary (first steps, to measure them) */
    int steps;              /* side steps run */
    int rested;             /* 1: the step ran without side work (the main job first) */
    double slow;            /* the estimated cost of side work to a step's compute (0.03: 3%
                             * slower), NaN before there is one (harvest_policy.backoff) */
    int offered;            /* waits offered to side work, and of them with steps run: */
    int used;
    /* The waits' idle rank-seconds (from reaching the waiting action to when what it waited for
     * was there, or to when that woke the rank out of a program's slot if later; every wait of
     * the schedule: RECV, REDUCE_GRAD, STEP), the side seconds inside
     * it, and the rest by reason: idle_s = used_s + sum of lost_s. The reasons come from this
     * process's ranks' records (MPI: the root's rank only; other ranks' idle is UNOFFERED). */
    double idle_s, used_s;
    double lost_s[HARVEST_LOST_N];
} harvest_stats;

/* How the harvester decides (harvest_policy_default(); bench/bench_harvest.c compares others). */
typedef struct {
    /* When a wait's next step may start. Fixed (0): the wait is predicted once, at its start,
     * to last the wait_q quantile of its last 8 measured waits, and a step starts when its
     * need fits in what is left of that. Conditional (1): a step starts while at least
     * `survive` of the wait's last 16 measured waits that lasted as long as this one so far
     * lasted the step's need longer; a process task's slot runs until the arrival or the
     * longest of them. */
    int conditional;
    double wait_q;          /* fixed rule: 0.25, so a shorter wait than predicted is rare */
    double survive;         /* conditional rule's probability (the start, when controlled) */
    /* Conditional rule: > 0, `survive` follows the measured overrun (side seconds past
     * arrivals per second of iteration, smoothed over steps): up while it is above this
     * target, down while below, so the rule takes as much of the waits as the target allows. */
    double overrun_target;
    double step_q;          /* a step's need: this quantile of its kind's last 32 durations */
    bool roam;              /* a task added without a rank runs in the waits of any rank of its
                             * process, one rank at a time (else: of the rank it was given) */
    /* The main job first: when the ranks' compute in steps with side work is more than 2%
     * slower than in steps without (medians of the last 16 of each within the last 64 steps,
     * and a rank test of the pairs saying so beyond chance), side work runs in only a fraction
     * 2% / that cost of the steps; one step after 10 with side work runs without, to keep the
     * baseline (unless the caller pauses some: harvest_pause). */
    bool backoff;
} harvest_policy;
harvest_policy harvest_policy_default(void);
/* The policy up to this change: fixed rule at wait_q 0.25, the median step, no roaming. */
harvest_policy harvest_policy_fixed(void);
/* Between steps. */
void harvest_set_policy(harvest *h, const harvest_policy *p);

/* An empty harvester; tasks are added, then started (harvest_start). */
void harvest_create(harvest **out);
/* Takes t (owned from now on, freed by harvest_free). Its rank: t->rank, or if -1 the next
 * world rank in turn (round-robin from 0) as its home, and it roams (harvest_policy.roam) over
 * the ranks of the home's process. Returns the task's index. */
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
/* Whether the next iteration runs without side work: the main job first (policy.backoff: a
 * baseline step, or backed off). Between iterations. */
int harvest_resting(const harvest *h);
/* The executor's wait hook: pass harvest_on_wait and h as run_opts.on_wait / wait_user. */
int harvest_on_wait(void *user, run_wait *w);
/* After each training step, on every process (collective over world when non-NULL, MPI): root
 * (tl: the step's merged timeline, times from its start, send links set) measures the waits
 * and the side work (into *out) and updates the predictions; every process gets them, runs its
 * tasks' done(), measures tasks that have no step time yet (one step now), and queues notes.
 * -1 only when world's communication fails. */
int harvest_after_step(harvest *h, const timeline *tl, comm *world, harvest_stats *out);
/* From now on, harvest_after_step writes one line per wait of the step to f (root; NULL: off):
 * step, rank, action, predicted and measured idle, whether offered, side steps and seconds, why
 * the harvester gave the rank back, the step that did not fit, the idle left after that, the
 * overrun (ms). For finding where unused bubble goes (bench/bench_harvest.c --waits). */
void harvest_set_log(harvest *h, FILE *f);
/* The next queued note (1), or 0 when none. */
int harvest_next_note(harvest *h, harvest_note *out);
/* Task i roams over the ranks of its process (added without a rank, a process with more than
 * one rank, and the policy lets it); its rank is then its home, where it is reported. */
int harvest_task_roams(const harvest *h, int i);
/* The sums of every harvest_after_step's numbers so far (root's; steps while paused included). */
void harvest_run_totals(const harvest *h, harvest_stats *out);
/* Over the run, per task: steps, seconds of steps, median step seconds (kind 0; -1: none). */
void harvest_task_totals(const harvest *h, int i, long *steps, double *secs, double *median);
/* Over the run, per task: the CPU seconds its steps received (slot.cpu_s or the thread's). */
double harvest_task_cpu(const harvest *h, int i);
/* Frees every task (killing their processes) and the harvester. NULL is fine. */
void harvest_free(harvest *h);

#endif
