/* What --defer-tie (exec_tie_lag.c) and --tie-owner (exec_tie_owner.c) share: which groups they
 * handle (a tied tensor held on more than one rank), their lag K, and a ring of K slots of
 * point-to-point requests, each slot waited whole before it is reused. Not here: what the
 * messages carry or when they go. */
#include "run/exec_int.h"
#include "util/pt.h"
#include <stdlib.h>

int exec_tie_k(const sched *s) {
    int r = s->stage_rank[0], n = 0;
    for (int i = 0; i < s->len[r]; i++) {
        sched_action a = s->acts[r][i];
        if (a.stage != 0) continue;
        if (a.kind == ACT_B || a.kind == ACT_BW) break;
        n += a.kind == ACT_F;
    }
    return n > 0 ? n : 1;
}

int exec_tie_shared(const exec_group *gr) { return gr->tie >= 0 && gr->cm && gr->cm->size > 1; }

void exec_tie_ring_init(exec_tie_ring *r, const run_exec *e, const exec_group *gr, int per) {
    r->K = exec_tie_k(e->c.s);
    r->H = gr->cm->size;
    r->me = gr->cm->rank;
    r->n = gr->n;
    r->per = per;
    r->req = pt_calloc((size_t)r->K * (size_t)per, sizeof *r->req);
}

int exec_tie_ring_wait(exec_tie_ring *r, run_exec *e, exec_group *gr, int s, const char *what) {
    int rc = 0;
    for (int i = 0; i < r->per; i++)
        if (exec_req_wait(gr->cm, &r->req[(size_t)s * (size_t)r->per + (size_t)i], e->c.timeout) < 0) rc = -1;
    return rc < 0 ? pt_adderr("rank %d: %s of tied tensor %d: ", e->c.world_rank, what, gr->tie) : 0;
}

void exec_tie_ring_free(exec_tie_ring *r) {
    free(r->req);
    r->req = NULL;
}
