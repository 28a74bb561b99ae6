/* Internal to sched/: one function per generator, dispatched by sched_generate() (sched_gen.c).
 * Each validates its parameters (error naming the parameter) and returns a compute-only schedule
 * or NULL. */
#ifndef PT_SCHED_GEN_H
#define PT_SCHED_GEN_H
#include "sched/sched.h"

/* Checks what every generator needs (p not NULL, ranks >= 1, microbatches >= 1, chunks >= 0);
 * sched_generate() calls it before any generator. Returns 0, or -1 with an error naming the
 * parameter and the schedule. */
int gen_check_common(const char *name, const sched_params *p);
/* Helpers for generators live in sched.h: sched_new, sched_push, sched_append_sync_tail. */

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
