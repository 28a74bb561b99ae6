/* Placeholder generators until they land: each fails with a message. */
#include "sched/gen.h"
#include "util/pt.h"

sched *gen_zb_h1(const sched_params *p) {
    (void)p;
    pt_seterr("schedule zb_h1: not implemented yet");
    return NULL;
}

sched *gen_zb_h2(const sched_params *p) {
    (void)p;
    pt_seterr("schedule zb_h2: not implemented yet");
    return NULL;
}

sched *gen_zb_v(const sched_params *p) {
    (void)p;
    pt_seterr("schedule zb_v: not implemented yet");
    return NULL;
}
