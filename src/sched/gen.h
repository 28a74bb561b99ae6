/* Internal to sched/: one function per generator, each named by a row of the registry
 * (sched_registry.c, which dispatches sched_generate()), and the helpers they share
 * (sched_gen_util.c, which calls no generator). Each generator validates its parameters (error
 * naming the parameter) and returns a compute-only schedule or NULL. */
#ifndef PT_SCHED_GEN_H
#define PT_SCHED_GEN_H
#include "sched/sched.h"

/* Checks what every generator needs (p not NULL, ranks >= 1, microbatches >= 1, chunks >= 0);
 * sched_generate() calls it before any generator. Returns 0, or -1 with an error naming the
 * parameter and the schedule. */
int gen_check_common(const char *name, const sched_params *p);
/* New empty schedule named `name` with P = p->ranks ranks, S = P stages, stage g on rank g,
 * M = p->microbatches. Caller frees. Other helpers live in sched.h: sched_new, sched_push,
 * sched_append_sync_tail. */
sched *gen_new_linear(const char *name, const sched_params *p);
/* Sequence chunks (sched.seq_chunks): gen_new_linear's schedule then has microbatches * K units
 * (the forward order of a stage: units 0, 1, ...: a microbatch's chunks in order). K of p (1
 * without), and the unit of a stage's i-th backward in seq1F1B's order: each microbatch's chunks
 * in reverse (K-1 first), microbatches in order. */
int gen_seq_chunks(const sched_params *p);
int gen_seq_backward_unit(int i, int K);
/* Per-stage costs for the cost-aware generators: f, b, w [S] from p's per-stage arrays or its
 * uniform costs (0 means 1), times p->stage_slowdown. Returns 0, or -1 with an error naming the
 * schedule and the parameter (a cost <= 0, a slowdown <= 0). */
int gen_stage_costs(const char *name, const sched_params *p, int S, double *f, double *b, double *w);
/* Message delay per stage edge for the list scheduler: out[g] = scale * p->link_delay[r] when
 * stages g and g+1 run on neighbouring ranks r and r+1 (either order), else 0; all 0 without
 * link_delay. Returns 0, or -1 with an error naming the bad delay (negative or not finite). */
int gen_edge_delays(const char *name, const sched_params *p, const int *stage_rank, int S, double scale,
                    double *out);
/* The same from p->link_busy: the time a message across edge g holds its link's queue. */
int gen_edge_busy(const char *name, const sched_params *p, const int *stage_rank, int S, double scale,
                  double *out);

sched *gen_gpipe(const sched_params *p);
sched *gen_1f1b(const sched_params *p);
sched *gen_interleaved(const sched_params *p);
sched *gen_pipedream(const sched_params *p);
sched *gen_2bw(const sched_params *p);
sched *gen_zb_h1(const sched_params *p);
sched *gen_zb_h2(const sched_params *p);
sched *gen_zb_v(const sched_params *p);
sched *gen_chimera(const sched_params *p);
sched *gen_greedy(const sched_params *p);
sched *gen_adaptive(const sched_params *p);

#endif
