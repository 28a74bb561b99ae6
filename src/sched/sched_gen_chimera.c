/* Placeholder generators until they land: each fails with a message. */
#include "sched/gen.h"
#include "util/pt.h"

sched *gen_chimera(const sched_params *p) {
    (void)p;
    pt_seterr("schedule chimera: not implemented yet");
    return NULL;
}
