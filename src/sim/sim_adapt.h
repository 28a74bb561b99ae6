/* Straggler resilience in the simulator: the judge the adaptive generator needs (sched/ cannot
 * time a schedule), the adaptive schedule for a cost model, the estimate of per-link delays and
 * per-stage slowdowns from a timeline, the online policy that decides when to switch, and the
 * replay of that policy over iterations with faults that come and go (simulate --adapt).
 *
 * The estimate and the policy are pure functions of a timeline and the expected costs, so the
 * runtime can feed them its measured timelines (trace/timeline.h is the type both write).
 * Not the generator (sched/sched_gen_adaptive.c), not the runtime's switch (run/, train/).
 * Design and measurements: docs/stragglers.md.
 * Legend: P ranks, S stages, M microbatches, N iterations. */
#ifndef PT_SIM_ADAPT_H
#define PT_SIM_ADAPT_H
#include "sim/sim.h"

/* ---- the judge and the adaptive schedule for a cost model ---- */

/* A sched_score_fn: the iteration time of s (one iteration) simulated under the sim_costs that
 * user points to (faults as sim_run applies them in iteration 1), or -1 with pt_err set. */
double sim_schedule_score(const sched *s, void *user);

/* A sched_params.tiebreak for schedules the judge scores equal: the mean simulated iteration time
 * of s under four variants of the sim_costs user points to (its faults of iteration 1 applied):
 * every link's extra delay and queue time 20% lower, 20% higher, the even stages 20% slower, the odd ones. The
 * lower, the less s loses when the estimate it was built for is a little off. -1 on an error. */
double sim_schedule_robust(const sched *s, void *user);

/* Fills p's costs, delays and judge from c (as it stands: apply sim_costs_at first for a window):
 * per-stage f, b, w (c's arrays, kept by pointer), link_busy[r] = the time a message of stage r's
 * activation bytes holds link r-r+1's queue (sim_costs_link_busy: a link slow in bandwidth) and
 * link_delay[r] = the rest of its time on the link (sim_costs_message_time minus that); buf holds
 * both, [2P]; score = sim_schedule_score and tiebreak = sim_schedule_robust on c. p's other
 * fields are left as they are. */
void sim_adaptive_params(const sim_costs *c, int n_ranks, sched_params *p, double *buf);

/* The adaptive schedule for p's shape (P, M, mem_limit) under costs c: sim_adaptive_params, then
 * sched_adaptive (what won goes into *info, may be NULL). Caller frees. */
sched *sim_adaptive_schedule(const sched_params *p, const sim_costs *c, sched_adaptive_info *info);

/* What memory the adaptive schedule needs under c: its time with no limit (*unlimited, holding
 * *unlimited_peak microbatches on its fullest stage) and the smallest per-stage limit, bisected
 * between p->mem_limit and that peak, at which it comes within tol (0.05: 5%) of that time.
 * Returns that limit (p->mem_limit when it is already enough), or -1 with an error. */
int sim_adaptive_mem_needed(const sched_params *p, const sim_costs *c, double tol, double *unlimited,
                            int *unlimited_peak);

/* ---- the estimate ---- */

typedef struct {
    int n_ranks, n_stages;
    double *link_delay;     /* [P-1] extra seconds per message on link r-r+1 beyond what the
                             * expected costs say (>= 0; one value for both directions): what a
                             * message takes when nothing is queued before it */
    double *link_busy;      /* [P-1] the part of link_delay a message holds the link for, when the
                             * link is slow in bandwidth (messages sent closer together than this
                             * queued behind each other: sim_link.rate); 0: a pure delay */
    bool *link_told;        /* [P-1] whether the messages told a queue from a delay (else
                             * link_busy is 0 for want of a sign of a queue: a caller that
                             * knows the link from before may keep what it knew) */
    double *stage_slow;     /* [S] measured / expected compute time of stage g (median over its
                             * actions; 1 where it ran nothing) */
    /* How links are read (sim_estimate_init: false, 0): the simulator's links are equally slow
     * both ways, and every message bounds the delay from above. A measured link may be slow one
     * way only (tc shapes one host's egress), and a message that arrived before its receiver
     * looked for it says nothing: with `directed`, each direction is the smallest delay of the
     * messages whose receive waited at least wait_eps (0 when none did: the delay hid itself),
     * measured from the send's start (a measured send may lose its core for a while), and the
     * link's delay is the larger direction's. */
    bool directed;
    double wait_eps;
    double *link_dir;       /* [2(P-1)] each direction's delay (sim_estimate_directions) */
} sim_estimate;

void sim_estimate_init(sim_estimate *e, int n_ranks, int n_stages);
/* (directed) A link's two directions as estimated by the last sim_estimate_timeline: out[2r] is
 * r -> r+1, out[2r+1] is r+1 -> r (symmetric estimates: both the link's). */
void sim_estimate_directions(const sim_estimate *e, double *out);
void sim_estimate_free(sim_estimate *e);
/* Estimates from the events of iteration `iter` of tl (a lowered or compute-only run, simulated or
 * measured) against the expected costs (the healthy cost model: no faults). A message's delay is
 * when its consumer got it (the RECV's end, or the compute action's start) minus the send's end,
 * minus the expected latency: never less than the link's true delay, equal when the consumer
 * waited for the data. The link's estimate is the smallest over its messages in both directions
 * (a link is modelled as equally slow both ways), exact since the first forward over each link in
 * an iteration is always waited for.
 * Queueing: per direction, with the messages in the order they were sent, the delay is fitted as
 * a queue (each message holds the link s after the one before it left, then takes the rest of the
 * delay): s is the largest that keeps every message's predicted arrival at or before when it was
 * got. A direction says the link queues when at that s some message whose consumer waited for it
 * took at least a quarter of the delay longer than the fastest and spent at least half of that
 * in the queue; that it is a delay when a queue of the whole delay does not fit (messages sent
 * closer together arrived sooner than it would have let them) and none queued; else nothing
 * (messages sent a link time apart, or late for other reasons). link_busy is s when a direction
 * read says the link queues (the smallest s of those read), else 0; link_told whether a
 * direction read said either. The simulator reads both directions; directed, the slower one, and
 * the other too when it is at least half as slow (one link shaped both ways: which measures a
 * hair slower is chance, and one direction may be paced by the other's replies). In the
 * simulator it is exact once two messages queued and the second was waited for.
 * A stage's slowdown is the median of measured / expected over its compute actions. Returns 0, or
 * -1 when tl does not match e's shape. */
int sim_estimate_timeline(const timeline *tl, const sim_costs *expected, int iter, sim_estimate *e);

/* ---- the policy ---- */

typedef struct {
    double link_on;     /* a link turns slow when its delay reaches link_on x the mean F (0.5) */
    double link_off;    /* ... and healthy again below link_off x the mean F (0.25) */
    double stage_on;    /* a stage turns slow at this slowdown (1.2) */
    double stage_off;   /* ... and healthy again below this one (1.1) */
    int onset;          /* iterations seen slow in a row before adapting (1) */
    int recovery;       /* iterations seen healthy in a row before switching back (1) */
    double regen;       /* adapted: rebuild when a delay or slowdown moves by more than this
                         * fraction of the one the schedule was built for (0.25) */
} sim_policy_opts;

/* The defaults above. */
sim_policy_opts sim_policy_defaults(void);

typedef struct {
    bool adapted;           /* the adaptive schedule is in force */
    int slow_seen, healthy_seen;
    sim_estimate basis;     /* what the schedule in force was built for (adapted only) */
} sim_policy;

typedef enum {
    SIM_POLICY_KEEP,        /* run the next iteration as this one */
    SIM_POLICY_ADAPT,       /* (re)build the adaptive schedule from the estimate and switch to it */
    SIM_POLICY_REVERT,      /* the straggler cleared: switch back to the starting schedule */
} sim_policy_action;

void sim_policy_init(sim_policy *pol, int n_ranks, int n_stages);
void sim_policy_free(sim_policy *pol);
/* One decision at an iteration boundary from the last iteration's estimate e; mean_f is the
 * expected mean F time (the scale delays are compared with). Updates pol (the state with its
 * hysteresis: a straggler turns on above the `on` thresholds for `onset` iterations, off below the
 * `off` ones for `recovery` iterations). Pure: no I/O, no clock. */
sim_policy_action sim_policy_step(sim_policy *pol, const sim_policy_opts *o, const sim_estimate *e, double mean_f);
/* out = healthy (the costs without faults) with estimate e applied: stage g's times x
 * e->stage_slow[g], link r-r+1's extra + e->link_delay[r] - e->link_busy[r] and, when link_busy
 * > 0, a queue of rate act_bytes[r] / link_busy[r] (messages the healthy costs give no size get
 * 1 byte); the costs the adaptive schedule is built for. out is new (free with sim_costs_free). */
void sim_costs_apply_estimate(const sim_costs *healthy, const sim_estimate *e, sim_costs *out);
/* One line for a log: the slow links and stages in e ("link 3-4 +6 per message; stage 2 x2"; a link
 * slow in bandwidth: "link 3-4 +6 per message (4 of it in a queue: slow in bandwidth)"), or "healthy",
 * into buf. Returns buf. */
char *sim_estimate_describe(const sim_estimate *e, const sim_policy_opts *o, double mean_f, char *buf, int n);

/* ---- the replay: simulate --adapt ---- */

typedef struct {
    const char *start;      /* the starting schedule (a registry row, one stage per rank) */
    sched_params shape;     /* ranks, microbatches, mem_limit (0: the starting schedule's peak) */
    int iterations;         /* N >= 1 */
    sim_policy_opts policy;
} sim_adapt_opts;

typedef struct {
    int n;                  /* N */
    double *time;           /* [N] each iteration's time */
    char (*name)[32];       /* [N] the schedule in force in each */
    char (*note)[320];      /* [N] what the policy did after it ("" when it kept the schedule) */
    double total;           /* sum of time */
    int mem_limit;          /* the limit the adaptive schedules were built under */
    timeline tl;            /* every iteration, back to back (iteration i's events carry iter i) */
} sim_adapt_result;

/* Runs N iterations of o->start under c (its faults switch on and off by iteration), one at a time
 * with the optimizer's barrier between them (as sim_run does without post-validation). After each
 * the policy reads that iteration's timeline against c's healthy costs (c without its faults) and
 * may switch, for the next iteration, to the adaptive schedule built from its estimate under the
 * memory limit, or back to o->start. Returns 0, or -1 with an error (a bad schedule, a deadlock). */
int sim_adapt_run(const sim_adapt_opts *o, const sim_costs *c, sim_adapt_result *out);
void sim_adapt_result_free(sim_adapt_result *r);

#endif
