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

sched *gen_gpipe(const sched_params *p);
sched *gen_1f1b(const sched_params *p);
sched *gen_interleaved(const sched_params *p);
sched *gen_pipedream(const sched_params *p);
sched *gen_zb_h1(const sched_params *p);
sched *gen_zb_h2(const sched_params *p);
sched *gen_zb_v(const sched_params *p);
sched *gen_chimera(const sched_params *p);
sched *gen_greedy(const sched_params *p);

#endif
