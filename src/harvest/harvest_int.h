/* Inside the harvester (src/harvest only): its state, shared by harvest.c (policy, tasks,
 * upkeep) and harvest_predict.c (measured and simulated waits, predictions). Not an API:
 * harvest.h is. */
#ifndef PT_HARVEST_HARVEST_INT_H
#define PT_HARVEST_HARVEST_INT_H
#include "harvest/harvest.h"
#include <stdarg.h>
#include <stdatomic.h>

#define HV_WINDOW 32            /* step durations per task and kind the quantiles read */
#define HV_HISTORY 16           /* training steps of measured waits the conditional rule reads */
#define HV_FIXED_STEPS 8        /* ... and the fixed rule (policy.conditional = 0) */
#define HV_MAX_RANK_TASKS 64    /* tasks per rank */
/* The default policy (harvest_policy_default): a step starts while at least HV_SURVIVE of the
 * wait's past instances that lasted this long lasted a step longer; a step's need is the
 * HV_STEP_Q quantile of its kind's recent durations. */
#define HV_SURVIVE 0.75
#define HV_STEP_Q 0.75
/* ... controlled toward an overrun of HV_OVERRUN_TARGET of the iteration (the goal is 1%), within
 * [HV_SURVIVE_MIN, HV_SURVIVE_MAX], from the HV_FIXED_STEPS-th step on: each step the risk
 * (1 - survive) is multiplied by HV_RISK_DOWN when the smoothed overrun (EMA, weight HV_EMA of
 * the newest) is above target, else by HV_RISK_UP (a slow climb, a fast retreat). Above 1/2,
 * what the rule says of a wait longer than all its past instances: never start there. */
#define HV_OVERRUN_TARGET 0.0075
#define HV_SURVIVE_MIN 0.6
#define HV_SURVIVE_MAX 0.9
#define HV_EMA 0.1
#define HV_RISK_DOWN 0.8
#define HV_RISK_UP 1.1
#define HV_PROBE_STEPS 32       /* steps a boundary runs to measure a task's unknown kinds... */
#define HV_PROBE_S 2e-3         /* ...and at most this long */
/* A process task is stopped this long before the predicted end of the bubble: the signal's
 * delivery and the rank thread's wake-up (tens of microseconds on Linux) with room to spare. */
#define HV_STOP_MARGIN_S 150e-6
/* The shortest bubble a process is resumed for. A round of SIGCONT, sleep, SIGSTOP costs the
 * program about 20 us of the slot and the rank about 3 us (bench_harvest --signals, docs/
 * harvesting.md): from 100 us on, the program gets 80% of the slot or more; shorter waits are
 * left to C tasks (their step lengths decide). */
#define HV_MIN_SLOT_S 100e-6
/* A process's slot under the conditional rule lasts until the arrival, re-decided after this
 * long (a bound: the transport's wait wakes the rank at the arrival). */
#define HV_SLOT_MAX_S 0.25
/* A roaming task held by another rank (its wait just ended: it is giving the task back) is
 * looked for again every HV_HELD_POLL_S (asleep in the transport's wait meanwhile: the arrival
 * wakes the rank), for at most HV_HELD_MAX_S of a wait. */
#define HV_HELD_POLL_S 20e-6
#define HV_HELD_MAX_S 1e-3

/* The main job first (harvest_backoff.c): side work's cost to a step's compute is estimated
 * from the medians of the last HV_BO_N steps with and without it (once HV_BO_MIN of each,
 * after the first HV_BO_SKIP);
 * above HV_SLOW_MAX, it runs in a fraction HV_SLOW_MAX / cost of the steps (at least
 * HV_DUTY_MIN) when the pairs (with, without) say with is slower beyond chance (Mann-Whitney's U
 * at least HV_BO_Z standard deviations above its mean: a fixed share of the pairs would be met by
 * noise alone in some 4% of the steps' comparisons, every step compared again); a step rests
 * after HV_BO_CONTROL in a row with side work (the baseline). */
#define HV_BO_N 16
#define HV_BO_MIN 4
#define HV_BO_SKIP 3            /* the first steps warm up (caches, pages): not compared */
#define HV_SLOW_MAX 0.02
#define HV_DUTY_MIN 0.125
#define HV_BO_CONTROL 10
#define HV_BO_Z 2.33         /* one-sided p < 0.01 */
/* Only the steps of the last HV_BO_AGE are compared: a slow spell of the machine, or a cost that
 * is gone, stops counting after that (backed off to 1 step in 8, the ring of 16 with side work
 * alone holds a step for up to 128). Long enough to hold 5 baseline steps (one in
 * HV_BO_CONTROL + 1), the fewest the rank test can be sure of, when nothing rests. */
#define HV_BO_AGE 64

enum { HV_ACTIVE, HV_FINISHED, HV_FAILED, HV_ELSEWHERE };

/* Why the harvester gave a wait back to its rank. */
enum { HV_WHY_HELD = -1,    /* (while picking) a task is held by another rank: look again */
       HV_WHY_NONE,         /* not offered (over when the executor looked) */
       HV_WHY_NOTASK,       /* no active task on the rank, or paused */
       HV_WHY_ARRIVED,      /* what it waited for arrived */
       HV_WHY_FIT,          /* no next step fitted in the predicted rest (need: the shortest) */
       HV_WHY_IDLE,         /* the tasks had nothing to do */
       HV_WHY_REST };       /* the step rests (harvest_backoff.c) */

/* One wait of the last step as the harvester saw it (rank thread writes, main thread reads
 * after the step). */
typedef struct {
    double since, stop;         /* the offer, when the rank was given back */
    double pred, need;          /* predicted idle; the shortest step that did not fit */
    int steps, why;
} hv_offer;

typedef struct {
    harvest_task *t;            /* owned */
    int state;                  /* HV_ACTIVE, ... (HV_ELSEWHERE: another process's rank) */
    int local, inited, noted;
    int roams;                  /* added without a rank: may run on any rank of this process */
    atomic_int held;            /* a rank thread is deciding on it or running its step */
    char err[320];              /* a step's failure (kept on the rank's thread), for the note */
    double dur[HARVEST_KINDS][HV_WINDOW];   /* recent step durations per kind (ring) */
    int n_dur[HARVEST_KINDS], at[HARVEST_KINDS];
    double med[HARVEST_KINDS];  /* their median; -1: none yet */
    double need[HARVEST_KINDS]; /* their policy.step_q quantile: what the next step is taken to
                                 * need; -1: none yet */
    long steps;                 /* over the run: steps that did work, their seconds, */
    double secs, cpu;           /* and the CPU seconds they received */
} hv_task;

struct harvest {
    hv_task *tk;
    int n, cap;
    int R, P, lo, hi, started;
    int paused;                 /* harvest_pause */
    int resting;                /* this step runs without side work (harvest_backoff.c; shared) */
    double bo_on[HV_BO_N], bo_off[HV_BO_N];   /* root: steps' compute seconds with and without, */
    long bo_on_at[HV_BO_N], bo_off_at[HV_BO_N];   /* and when (harvest_after_step's count) */
    int bo_n_on, bo_n_off, bo_since_off;
    double bo_duty, bo_acc, bo_slow;          /* root: the fraction of steps with side work,
                                               * its accumulator, the estimated cost (NaN: none) */
    harvest_policy pol;         /* harvest_set_policy */
    int **rank_tasks, *n_rank_tasks;   /* [R] each rank's tasks (indices into tk) */
    int *rr;                    /* [R] whose turn it is next on each rank */
    int *offered, *used;        /* [R] waits offered, and with steps run, since the last step */
    const sched *s;             /* the job's lowered schedule (borrowed), NULL until bound */
    int L;                      /* longest action list */
    /* What the ranks read (shared after each step, harvest_predict.c), per (world rank, action): */
    double *pred;               /* [R*L] the fixed rule's predicted idle, seconds; then samp: */
    double *samp;               /* [R*L*HV_HISTORY] its measured idle of the last steps,
                                 * ascending, NaN past the last (inside pred's allocation) */
    double *hist;               /* [R*L*HV_HISTORY] measured idle, a ring over steps (root) */
    double survive;             /* the conditional rule's threshold in force (controlled) */
    double ema_over;            /* root: smoothed overrun per second of iteration (-1: none) */
    double ctl_over;            /* root, this step: the overrun (side seconds past arrivals) */
    hv_offer *offers;           /* [R*L] this step's waits as offered (why HV_WHY_NONE: not) */
    FILE *log;                  /* harvest_set_log */
    int n_hist;                 /* steps measured so far */
    long n_after;               /* harvest_after_step calls */
    double sync_s;              /* side work at this boundary */
    harvest_stats total;        /* harvest_run_totals */
    harvest_note *notes;
    int n_notes, cap_notes, note_at;
};

/* Queues a note about task `task` (main thread). */
void hv_note(harvest *h, int task, const char *what, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* harvest_backoff.c: root, after each step's measure (ran: it was offered to side work); whether
 * the next step rests. */
void hv_backoff_step(harvest *h, const timeline *tl, int ran);
int hv_backoff_rest(harvest *h);

/* harvest_predict.c */
/* Root: the step's waits and side work from its merged timeline into h->hist and *out.
 * Returns the iteration's length (its events start at 0). */
double hv_measure(harvest *h, const timeline *tl, harvest_stats *out);
/* Every wait of the next step starts as not offered (between steps). */
void hv_offers_reset(harvest *h);
/* Root, after a step with side work under a controlled policy: h->survive from the step's
 * overrun (h->ctl_over) and its length. */
void hv_control(harvest *h, double iter_s);
/* h->pred, h->samp and h->survive from the history (root), then shared over world (MPI). */
int hv_predict(harvest *h, int root, comm *world);
void hv_predict_free(harvest *h);

#endif
