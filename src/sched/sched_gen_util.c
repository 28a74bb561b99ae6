/* What the generators share and nothing else: the parameter checks every generator makes and
 * the linear placement (stage g on rank g).
 * It calls no generator (the registry and dispatch are sched_registry.c), so generators and
 * dispatch never call each other in a loop. Pure: no I/O. */
#include "sched/gen.h"
#include "util/pt.h"

int gen_check_common(const char *name, const sched_params *p) {
    if (!p) return pt_seterr("schedule %s: no parameters", name);
    if (p->ranks < 1) return pt_seterr("schedule %s: ranks must be >= 1 (got %d)", name, p->ranks);
    if (p->microbatches < 1)
        return pt_seterr("schedule %s: microbatches must be >= 1 (got %d)", name, p->microbatches);
    if (p->chunks < 0) return pt_seterr("schedule %s: chunks must be >= 0 (got %d)", name, p->chunks);
    return 0;
}

sched *gen_new_linear(const char *name, const sched_params *p) {
    sched *s = sched_new(p->ranks, p->ranks, 1, p->microbatches);
    snprintf(s->name, sizeof s->name, "%s", name);
    return s;
}
