/* Inside the harvester (src/harvest only): its state, shared by harvest.c (policy, tasks,
 * upkeep) and harvest_predict.c (measured and simulated waits, predictions). Not an API:
 * harvest.h is. */
#ifndef PT_HARVEST_HARVEST_INT_H
#define PT_HARVEST_HARVEST_INT_H
#include "harvest/harvest.h"
#include <stdarg.h>

#define HV_WINDOW 32            /* step durations per task and kind the median reads */
#define HV_HISTORY 8            /* training steps of measured waits a correction reads */
/* Which of them: a low quantile, so a wait that comes out shorter than most (a side step then
 * runs past the arrival) is the exception; 0.5 would be the median. */
#define HV_QUANTILE 0.25
#define HV_MAX_RANK_TASKS 64    /* tasks per rank */
#define HV_PROBE_STEPS 32       /* steps a boundary runs to measure a task's unknown kinds... */
#define HV_PROBE_S 2e-3         /* ...and at most this long */
/* A process task is stopped this long before the predicted end of the bubble: the signal's
 * delivery and the rank thread's wake-up (tens of microseconds on Linux) with room to spare. */
#define HV_STOP_MARGIN_S 150e-6
/* The shortest bubble a process is resumed for: its stop margin and a slice worth the switch. */
#define HV_MIN_SLOT_S 400e-6

enum { HV_ACTIVE, HV_FINISHED, HV_FAILED, HV_ELSEWHERE };

typedef struct {
    harvest_task *t;            /* owned */
    int state;                  /* HV_ACTIVE, ... (HV_ELSEWHERE: another process's rank) */
    int local, inited, noted;
    char err[320];              /* a step's failure (kept on the rank's thread), for the note */
    double dur[HARVEST_KINDS][HV_WINDOW];   /* recent step durations per kind (ring) */
    int n_dur[HARVEST_KINDS], at[HARVEST_KINDS];
    double med[HARVEST_KINDS];  /* their median; -1: none yet */
    long steps;                 /* over the run: steps that did work, their seconds */
    double secs;
} hv_task;

struct harvest {
    hv_task *tk;
    int n, cap;
    int R, P, lo, hi, started;
    int paused;                 /* harvest_pause */
    int **rank_tasks, *n_rank_tasks;   /* [R] each rank's tasks (indices into tk) */
    int *rr;                    /* [R] whose turn it is next on each rank */
    int *offered, *used;        /* [R] waits offered, and with steps run, since the last step */
    const sched *s;             /* the job's lowered schedule (borrowed), NULL until bound */
    int L;                      /* longest action list */
    double *pred;               /* [R*L] predicted idle of each (world rank, action), seconds */
    double *sim;                /* [P*L] the simulator's wait of each (pipeline rank, action) */
    double *hist;               /* [R*L*HV_HISTORY] measured idle - sim, the last steps */
    int n_hist;                 /* steps measured so far */
    long n_after;               /* harvest_after_step calls */
    double sync_s;              /* side work at this boundary */
    harvest_note *notes;
    int n_notes, cap_notes, note_at;
};

/* Queues a note about task `task` (main thread). */
void hv_note(harvest *h, int task, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* harvest_predict.c */
/* Root: the step's waits and side work from its merged timeline into h->hist and *out. */
void hv_measure(harvest *h, const timeline *tl, harvest_stats *out);
/* Root: the simulator's waits from profiled costs (every few steps) into h->sim. */
void hv_simulate(harvest *h, const sim_costs *c);
/* h->pred from sim and history (root), then shared over world (MPI). */
int hv_predict(harvest *h, int root, comm *world);
void hv_predict_free(harvest *h);

#endif
