/* One pipeline rank's memory model, the one both the planner (a split's fit, a plan's stage
 * memory) and train --adapt (its memory limit) use: what a rank holds whatever the schedule, plus
 * one activation set per microbatch in flight, plus what a backward holds besides. Not here:
 * where the numbers come from (plan_eval.c's layer costs, the runtime's run_mem). */
#include "plan/plan.h"
#include <math.h>

double plan_mem_need(const plan_mem_model *m, double held) {
    double kv_mb = m->K > 1 && held > 0 ? ceil((held - 1) / m->K) + 1 : 0;
    return m->fixed + held * m->act + m->extra + kv_mb * m->kv;
}

int plan_mem_held_max(const plan_mem_model *m, double have, int cap) {
    if (!(plan_mem_need(m, 0) <= have)) return -1;
    if (!(m->act > 0)) return cap;
    double h = floor((have - m->fixed - m->extra) / m->act);
    int n = h >= cap ? cap : (int)h;
    while (n > 0 && plan_mem_need(m, n) > have) n--;   /* the rounding of the division, not the rule */
    while (n < cap && plan_mem_need(m, n + 1) <= have) n++;
    return n;
}
