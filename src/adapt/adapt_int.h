/* Inside the adapt module (src/adapt/adapt*.c only; not an API: adapt/adapt.h is): the state of a run's
 * adaptation and the functions its files share. adapt.c: deciding, switching and switching back;
 * adapt_say.c: the lines and events; adapt_measure.c: each step's measurements and the estimate
 * against healthy steps; adapt_split.c: re-splitting a slow stage's layers; adapt_replica.c: links
 * between replicas (seen and said, not adapted to); adapt_mem.c: the memory limit; adapt_pay.c:
 * whether a switch paid (undone when not).
 * Legend: P ranks, S stages (one per rank), M microbatches, D replicas. */
#ifndef PT_ADAPT_ADAPT_INT_H
#define PT_ADAPT_ADAPT_INT_H
#include "adapt/adapt.h"
#include "sim/sim_adapt.h"
#include <stddef.h>

#define ADAPT_BASELINE 8      /* the expected costs are medians over this many recent healthy steps */
/* The first measured steps seed them, all of them: one step on a loaded machine may have a stage
 * that lost its core (seen 20x slow for a whole step), and a baseline of it alone hides a stage 8x
 * slow after it, or shows a healthy one slow. Stage slowdowns are judged from the step after the
 * seed (links from the first step after the first seed step: their delays need no baseline). */
#define ADAPT_SEED 3
#define ADAPT_MIN_GAIN 0.03   /* switch only to a schedule predicted at least 3% faster */
#define K_KINDS 5             /* per stage: F, B, W, BW, and (stage 0 only) STEP */
/* A stage is slow from 1.5 x the others (and healthy again below 1.25): measured compute on cores
 * shared with other work varies by 30-40% from step to step (the simulator's 1.2 / 1.1 would see
 * stragglers that are not there); a real straggler is 2x or more. */
#define ADAPT_STAGE_ON 1.5
#define ADAPT_STAGE_OFF 1.25
/* A link's delay is what its fastest message of the step took from the send to the receive (the
 * healthy cost model expects free links: the delay includes a slow link's whole transfer, so a
 * link slow from the first step on, or slow in bandwidth, is seen too). Below 1 ms it is jitter
 * (thread wake-ups, copies), not a slow link: for a model whose F takes 0.1 ms the simulator's
 * thresholds of 0.5 and 0.25 x F alone would see one in every wake-up. */
#define ADAPT_LINK_FLOOR 1e-3
/* A receive that returned within 50 us did not wait: its message was there before (it bounds the
 * delay from above only, and says nothing of a link that is slow only where nobody waits). */
#define ADAPT_WAIT_EPS 50e-6

/* Whether a switch paid (trainer_adapt_pay.c): the steps before it against those after it. */
#define ADAPT_PAY_BEFORE 2    /* the steps that saw the straggler (the policy's two) */
#define ADAPT_PAY_SKIP 1      /* steps after a switch not judged (the new schedule's first allocations) */
#define ADAPT_PAY_STEPS 3     /* steps judged (their median) */
#define ADAPT_PAY_HOLD 8      /* steps an undone switch is held off (doubled at each undo of one straggler) */

typedef struct adapt_state adapt_state;

typedef struct {
    double recent[ADAPT_PAY_BEFORE];   /* the last steps' measured iteration times (a ring) */
    int n_recent;
    int on;                            /* a switch is on trial */
    long at;                           /* the step whose hook switched */
    double before, predicted, was;     /* measured before it; the simulator's after and before */
    double after[ADAPT_PAY_STEPS];
    int n;
    long hold_until;                   /* after an undone switch: the step the hold-off ends (0: none) */
    int undone;                        /* switches undone for this straggler */
} adapt_pay;

/* The last ADAPT_BASELINE healthy steps' measurements, `width` values a step (a ring). */
typedef struct {
    double *v;                      /* [ADAPT_BASELINE][width] */
    int width, n, next;
} adapt_ring;

/* Links between replicas, read from each step's gradient reductions: per pipeline rank p, how long
 * the reduction over the replicas took from the last member's post to the first member seeing it
 * complete (the wait), against the same over recent healthy steps. */
typedef struct {
    adapt_ring base;                /* healthy steps' waits, P a step */
    double *prev;                   /* [P] the last step's excess over the baseline (unfiltered) */
    int *slow;                      /* [P] reported slow (said once per onset and recovery) */
} replica_links;

struct adapt_state {
    adapt_host h;                   /* what it drives */
    adapt_opts o;                   /* as given (o.cfg points at cfg) */
    gpt_config cfg;
    int P, S, M, D, mem_limit;
    int mem_flag;                   /* mem_limit is --mem-limit N's */
    char mem_why[160];              /* where mem_limit came from ("memory: 21.3 GiB available / ...") */
    int mem_R;                      /* from memory: world ranks, and per world rank (one buffer): */
    double *mem_fixed, *mem_act, *mem_have;   /* its own state, one microbatch's activations, its
                                     * share of its host's available memory (bytes); else NULL */
    int overlap;                    /* reductions overlapped (the simulator is told so) */
    sched *start;                   /* the starting schedule (a lowered copy) */
    int switched;                   /* an adaptive schedule is in force */
    sim_policy pol;
    sim_policy_opts po;
    adapt_ring base;                /* healthy steps' values: S * K_KINDS stage medians a step */
    int seeded;                     /* the measured steps that seeded base (ADAPT_SEED at most) */
    double *prev_slow;              /* [S] the last step's relative stage slowdowns (unfiltered) */
    double *prev_link;              /* [P-1] the last step's link delays (unfiltered) */
    double *prev_busy;              /* [P-1] and the part of them that queued (a link slow in bandwidth) */
    double act_bytes;               /* bytes of one microbatch's activation message (rows x seq x C floats) */
    long first_step;                /* a step not measured: the run's first (a warm-up), or the
                                     * first after a re-split (a new job's first touches) */
    int *split_start, *split_now;   /* [S] blocks per stage: at the start, in force */
    double fl[GPT_MAX_KINDS][3];    /* analytic flops of one microbatch through a layer of each
                                     * kind (gpt_layer_ops' cost): [kind][F, B, W] */
    int said_keep;                  /* a straggler was reported without a switch (since the last
                                     * switch or revert) */
    adapt_pay pay;                  /* the switch on trial, the hold-off after an undone one */
    replica_links rl;               /* links between replicas (D >= 2): seen, said, not adapted to */
};

/* ---- measuring (adapt_measure.c) ---- */
/* This step's median duration of each (stage, kind) over every rank and replica, into v[S * K_KINDS]
 * (-1: none ran); STEP goes to stage 0's slot. */
void adapt_step_medians(const timeline *tl, int S, double *v);
void adapt_ring_init(adapt_ring *r, int width);
void adapt_ring_add(adapt_ring *r, const double *v);
/* The median over the ring's steps of value k (-1 when none has it: values < 0 are missing). */
double adapt_ring_median(const adapt_ring *r, int k);
/* The healthy costs (new: free with sim_costs_free): medians over the baseline steps. */
void adapt_base_costs(const adapt_state *A, sim_costs *c);
/* The estimate of the step against the healthy costs (every lane; stage slowdowns relative to the
 * fastest stage, two steps running). 0, or -1 when the timeline does not match. */
int adapt_step_estimate(adapt_state *A, const timeline *tl, const sched *s, const run_layout *layout,
                        const sim_costs *healthy, sim_estimate *est);
double adapt_mean_f(const sim_costs *c);
/* Healthy by the `off` thresholds, as this step measured it. */
int adapt_estimate_healthy(const adapt_state *A, const sim_estimate *e, double mf);

/* ---- saying (trainer_adapt_say.c) ---- */
/* The links of e slow in bandwidth in words, or "" when none is, into buf. */
void adapt_queue_text(const adapt_state *A, const sim_estimate *e, double mf, char *buf, size_t n);
/* Forwards each rank runs before its first backward ("5,4,2,1"), into buf. */
void adapt_warmup_text(const sched *s, char *buf, size_t n);
/* "link 0-1 +48 ms per message; stage 1 x2.0", or "healthy", into buf. */
void adapt_describe(const adapt_state *A, const sim_estimate *e, double mf, char *buf, size_t n);
/* The event's fields (a new object): the estimate, what runs now, the predictions (s/step; <= 0:
 * left out), the memory limit and where it came from. */
cJSON *adapt_fields(const adapt_state *A, const sim_estimate *e, const char *action, const char *schedule,
                    double predicted, double was);
/* The line on stdout (root) and an "adapt" event with fields (taken over). */
void adapt_say(adapt_state *A, long step, const char *line, cJSON *fields);
/* The schedule in force (the host's). */
const sched *adapt_schedule(const adapt_state *A);

/* ---- re-splitting (adapt_split.c) ---- */
/* "2,2" into out[S] (blocks per stage); -1 when it does not have S counts. */
int adapt_parse_split(const char *text, int S, int *out);
int adapt_same_split(const int *a, const int *b, int S);
void adapt_split_text(const int *v, int S, char *buf, size_t n);
/* Moves to split `to` (the engine's resplit) and rescales the expected costs. 0 or -1. */
int adapt_move_split(adapt_state *A, long step, sim_costs *healthy, const int *to);
/* A slow stage: re-split by measured speed when the simulator predicts it faster. 1 when it
 * moved (and said so), 0 when not, -1 on an error. */
int adapt_split(adapt_state *A, long step, sim_costs *healthy, const sim_estimate *est, double mf);

/* ---- the memory limit (trainer_adapt_mem.c) ---- */
/* A->mem_limit, mem_flag and mem_why from --mem-limit (A->o.mem_limit), or from memory by default;
 * peak: the starting schedule's. Collective under MPI. 0, or -1 with the error. */
int adapt_mem_limit(adapt_state *A, int peak);

/* ---- switches that pay (trainer_adapt_pay.c) ---- */
/* Notes a step's measured iteration time (every step). */
void adapt_pay_note(adapt_state *A, double iter_time);
/* The prediction as the policy uses it (the test hook PIPETRAIN_TEST_PREDICT=K scales it by K). */
double adapt_pay_predicted(const adapt_state *A, double predicted);
/* A switch at `step` predicted to take `predicted` s/step instead of `was`: on trial from now. */
void adapt_pay_start(adapt_state *A, long step, double predicted, double was);
/* The straggler cleared: no trial, no hold-off. */
void adapt_pay_reset(adapt_state *A);
/* 1 while an undone switch's hold-off lasts (no switch at this step). */
int adapt_pay_held(const adapt_state *A, long step);
/* 1 when a hold-off ends at this step (the caller may try the switch again). */
int adapt_pay_retry(adapt_state *A, long step);
/* A step of the trial: after ADAPT_PAY_STEPS steps, a switch that gained less than half of its
 * predicted gain is undone and said. 1 when undone, 0 when not, -1 on an error. */
int adapt_pay_judge(adapt_state *A, long step, double iter_time, const sim_estimate *est);

/* ---- links between replicas (trainer_adapt_replica.c) ---- */
void adapt_replica_init(adapt_state *A);
void adapt_replica_free(adapt_state *A);
/* The step's reductions between replicas against their healthy waits: onset and recovery said. */
void adapt_replicas(adapt_state *A, long step, const timeline *tl, const sim_estimate *est, double mf);

#endif
