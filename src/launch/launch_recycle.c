/* When the supervisor goes on in place (launch_int.h; docs/recovery.md "In place, by default"):
 * whether the job's flags let it at all (launch_recycle_able), and, by default, whether going on
 * with the replicas left pays at a given failure (launch_recycle_pays): the rest of the run at
 * D'/D of the replicas against one restart, both as measured by the supervisor. */
#include "launch/launch_int.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The value of train flag `flag` as a whole number, or dflt when absent. */
static int flag_int(const launch_opts *o, const char *flag, int dflt) {
    const char *v = launch_flag(o->train_args, o->n_train_args, flag);
    return v ? atoi(v) : dflt;
}

int launch_recycle_able(const launch_opts *o, int dp, char *why, size_t n) {
    const char *pp = getenv("PT_MPI_PROGRESS");
    const char *no = !o->np                                                   ? "no --np: rank threads die with their process"
                     : dp < 2                                                 ? "no replicas (--dp 1): a stage's only copy is gone"
                     : flag_int(o, "--tp", 1) > 1                             ? "--tp > 1: a TP group missing a shard cannot compute"
                     : flag_int(o, "--zero", 0) > 0                           ? "--zero 1: the dead rank held the only copy of its moment slices"
                     : flag_int(o, "--dp-sync", 1) > 1                        ? "--dp-sync > 1: the outer state is kept per replica count (a restart brings it back)"
                     : flag_int(o, "--snapshot-every", 0) < 1                 ? "no --snapshot-every: nothing in memory to go back to"
                     : launch_flag(o->train_args, o->n_train_args, "--plan")  ? "--plan: the replicas are the plan's (give --recycle to go on in place)"
                     : o->hostfile                                            ? "--hostfile: the supervisor sees only this host's ranks (give --recycle where the hosts share this machine's /dev/shm)"
                     : pp && !strcmp(pp, "0")                                 ? "PT_MPI_PROGRESS=0: the recovery mode needs MPI's progress thread"
                                                                              : NULL;
    snprintf(why, n, "%s", no ? no : "");
    return no == NULL;
}

/* The share of a core each of n ranks gets on `cores` cores. */
static double core_share(int n, int cores) { return n <= cores ? 1.0 : (double)cores / n; }

int launch_recycle_pays(const launch_recycle_cost *c, char *why, size_t n) {
    if (c->step_s <= 0 || c->D2 < 1 || c->D <= c->D2 || c->R2 < 1 || c->cores < 1) {
        snprintf(why, n, "no step time measured yet: a restart brings the whole layout back");
        return 0;
    }
    /* the replicas left run D/D' times the microbatches each, on the cores the dropped ranks
     * leave them: with a core per rank D/D' times as long a step, on oversubscribed cores less */
    double slow = (double)c->D / c->D2 * core_share(c->R, c->cores) / core_share(c->R2, c->cores);
    double more = (double)c->steps_left * c->step_s * (slow - 1);
    int pays = more < c->restart_s;
    snprintf(why, n, "the %ld step%s left at %d of %d replicas (%d ranks on %d cores): about %.2f s more at %.3f s a step "
             "(x%.2f), %s a restart's %.2f s", c->steps_left, c->steps_left == 1 ? "" : "s", c->D2, c->D, c->R2, c->cores,
             more > 0 ? more : 0, c->step_s, slow, pays ? "less than" : "not less than", c->restart_s);
    return pays;
}
