/* Straggler adaptation at the step boundary of a pipelined run (train --adapt; docs/stragglers.md):
 * each step's measured timeline (the same on every rank: every rank decides the same thing, with
 * no coordinator) is read against the costs of recent healthy steps (each link's delay and queue,
 * each stage's slowdown), the simulator's policy decides with its hysteresis, and the run switches
 * to the adaptive schedule built for the estimate within the memory limit (by default what the
 * ranks' memory holds), re-splits a slow stage's layers, undoes a switch that did not pay, says a
 * slow link between replicas, and switches back when the straggler clears. Only the order of work
 * and the split change: the numbers never do.
 *
 * The module: adapt.c (deciding and switching), adapt_measure.c (the estimate), adapt_say.c (lines
 * and events), adapt_split.c (re-splits), adapt_replica.c (links between replicas), adapt_mem.c (the
 * memory limit), adapt_pay.c (switches that pay); adapt_int.h is their shared inside. What it
 * drives comes in through adapt_host (the trainer's engine, train/trainer_adapt.c). Not here, each
 * in the module whose rule it is: the estimator, the policy and the adaptive schedule judged by the
 * simulator (sim/sim_adapt.h: `simulate --adapt` uses them too), the generator (a schedule is one
 * file and a registry row: sched/sched_gen_adaptive.c), moving state for a re-split (an engine
 * operation: run/move.c).
 *
 * Legend: P ranks, S stages (one per rank), M microbatches, D replicas. */
#ifndef PT_ADAPT_ADAPT_H
#define PT_ADAPT_ADAPT_H
#include "comm/comm.h"
#include "model/gpt.h"
#include "run/run.h"
#include "sched/sched.h"
#include "trace/timeline.h"
#include <cjson/cJSON.h>
#include <stdbool.h>

#define ADAPT_MEM_LIMIT_SCHEDULE (-1)   /* --mem-limit schedule: the starting schedule's peak */

/* --mem-limit's value: "N" (>= 1) or "schedule" into *out. 0, or -1 with an error that says
 * what it takes. */
int adapt_parse_mem_limit(const char *text, int *out);

/* What adaptation reads and drives: a pipelined engine of one stage per rank (every callback gets
 * user). timeline: the last step's events of every rank, merged, on every rank; schedule: the one
 * in force; replan: another schedule of the same shape from the next step on, state kept
 * (collective under MPI; 0 or -1); resplit: another split (blocks per stage), state moved
 * (collective; 0 or -1; NULL: the engine cannot); layout and job: the run's in force; event: one
 * event for the run's report (kind, step, fields taken over, with "message"). */
typedef struct {
    void *user;
    const timeline *(*timeline)(void *user);
    const sched *(*schedule)(void *user);
    int (*replan)(void *user, const sched *s);
    int (*resplit)(void *user, const int *split, int n);
    const run_layout *(*layout)(void *user);
    run_job *(*job)(void *user);
    void (*event)(void *user, const char *kind, long step, cJSON *fields);
    int root;                   /* this rank prints the lines (threads: always) */
} adapt_host;

typedef struct {
    int mem_limit;              /* N >= 1; 0: from memory; ADAPT_MEM_LIMIT_SCHEDULE */
    const char *cluster;        /* with mem_limit 0: device memory from this cluster file, or NULL */
    comm *world;                /* MPI endpoint (hosts share their memory numbers), or NULL: threads */
    int D;                      /* replicas */
    bool overlap;               /* reductions overlapped (the simulator is told so) */
    int batch, seq;             /* B sequences per step, T tokens each */
    const gpt_config *cfg;      /* the model's */
    int n_ties;                 /* tied tensors (the embedding's reduction spans both ends) */
    long step0;                 /* steps done before this run (resume) */
} adapt_opts;

typedef struct adapt_state adapt_state;

/* Checks that h's engine can adapt (one stage per rank, P >= 2, one pipe, a flush), and sets up
 * the state: the starting schedule, the memory limit (collective under MPI). 0 and *out, or -1
 * naming what cannot adapt (*out NULL). */
int adapt_init(adapt_state **out, const adapt_opts *o, const adapt_host *h);
/* After step `step` (split: the blocks per stage it ran, "2,2"; iter_time: its measured
 * iteration, the same on every rank): measures, decides, switches and says. Collective under MPI
 * (every rank calls it). 0, or -1 with the error ("step N: --adapt: ..."). */
int adapt_step(adapt_state *A, long step, const char *split, double iter_time);
/* NULL is fine. */
void adapt_free(adapt_state *A);

#endif
