/* The simulator's price of train --balance-memory: the lend plan (sched/sched_lend.h) over the
 * stages' activation sizes, as each rank's peak memory. Timing is not modelled: lending's messages
 * run beside the compute (docs/longseq.md says what the runtime measures). Not the plan itself. */
#include "sim/sim.h"
#include "sched/sched_lend.h"
#include "util/pt.h"
#include <stdlib.h>

int sim_balance_memory(const sched *s, const sim_costs *c, sim_result *r) {
    int P = s->n_stages, *nl = pt_malloc(sizeof(int) * (size_t)P);
    double *b = pt_malloc(sizeof(double) * (size_t)P);
    const double **rows = pt_malloc(sizeof *rows * (size_t)P);
    for (int g = 0; g < P; g++) {
        nl[g] = 1;
        b[g] = c->act_bytes && c->act_bytes[g] > 0 ? c->act_bytes[g] : 1;
        rows[g] = &b[g];
    }
    sched_lend_plan lp;
    int rc = sched_lend_balance(s, nl, rows, NULL, &lp);
    if (rc == 0) {
        free(r->rank_lent); free(r->rank_borrowed);
        r->rank_lent = pt_calloc((size_t)P, sizeof(double));
        r->rank_borrowed = pt_calloc((size_t)P, sizeof(double));
        for (int g = 0; g < P; g++) {
            r->rank_lent[g] = lp.lent[g];
            r->rank_borrowed[g] = lp.borrowed[g];
            r->rank_peak_bytes[g] = sched_lend_rank_bytes(&lp, g) + (r->stash_bytes ? r->stash_bytes[g] : 0);
        }
        sched_lend_plan_free(&lp);
    }
    free(nl); free(b); free(rows);
    return rc;
}
