/* --dp-sync H > 1: DiLoCo's replicas over slow links (arXiv 2311.08105). Each replica (a whole
 * pipeline) steps on its own gradients: its reduction groups are the replica's alone
 * (exec_state.c splits them per replica; tied copies inside a replica still reduce together),
 * its loss gradient the mean over its own rows (exec_compute.c), its clipping norm its own. At
 * every H-th step, and at the last, a rank averages its weights' change since theta_start with
 * the same pipeline (and TP) rank of every other replica in one all-reduce and takes the outer
 * Nesterov step of optim/outer.h from theta_start.
 *
 * Overlap (the default; --no-overlap: none). The all-reduce of step t (t a multiple of H) is
 * posted and the replicas go on with inner step t + 1 on their own weights; after that step's
 * update the sum is waited for (by then a slow link has had a whole step to carry it) and
 * applied one step late, keeping the step the replica took meanwhile:
 *   theta_start' = outer(theta_start, mean change);  theta <- theta_start' + (theta - snap)
 * where snap is the weights the change was taken from (step t's). The replicas are then equal
 * up to their own step t + 1, which the next sync's change carries (theta_start' is its start),
 * so nothing is lost or counted twice. The last step's sync is always blocking: the run ends
 * with every replica holding the same weights. With --no-overlap the sum is waited for at once
 * and theta <- theta_start' (the paper's algorithm).
 *
 * State per rank: theta_start, the outer momentum, the change being summed and the snapshot:
 * four copies of the weights it holds (its stages' spans and tied copies, laid end to end).
 * Not here: the outer arithmetic (optim/outer.c), when STEP runs (exec_mode.c). */
#include "run/exec_int.h"
#include "optim/outer.h"
#include "util/pt.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct { float *w; size_t n; } exec_outer_seg;

typedef struct exec_outer {
    comm *cm;                 /* this pipeline and TP rank in every replica, by replica */
    exec_outer_seg *seg;      /* [n_seg] the weights the rank holds: spans, then tied copies */
    int n_seg;
    size_t n;                 /* their floats, end to end */
    float *start, *buf;       /* (n) theta_start, the outer momentum */
    float *sum, *snap;        /* (n) the change in the all-reduce, the weights it was taken from */
    comm_req *req;            /* the all-reduce in flight (posted at the last sync), or NULL */
    int pending;              /* a change posted and not yet applied (overlap: at the next step) */
} exec_outer;

/* The weights this rank holds, end to end, into dst (to = 1: from src into them). */
static void outer_copy(exec_outer *o, float *buf, int to) {
    size_t at = 0;
    for (int i = 0; i < o->n_seg; i++) {
        if (to) memcpy(o->seg[i].w, buf + at, o->seg[i].n * sizeof(float));
        else memcpy(buf + at, o->seg[i].w, o->seg[i].n * sizeof(float));
        at += o->seg[i].n;
    }
}

static void outer_segments(run_exec *e, exec_outer *o) {
    o->seg = pt_calloc((size_t)e->n_stages * (GPT_MAX_TIES + 1), sizeof *o->seg);
    for (int i = 0; i < e->n_stages; i++) {
        run_stage *st = &e->st[i];
        o->seg[o->n_seg++] = (exec_outer_seg){ st->m.params + st->span_off, st->span_n };
        for (int t = 0; t < e->n_ties; t++)
            if (st->copy[t].w) o->seg[o->n_seg++] = (exec_outer_seg){ st->copy[t].w, st->copy[t].count };
    }
    for (int i = 0; i < o->n_seg; i++) o->n += o->seg[i].n;
}

int exec_outer_init(run_exec *e) {
    if (e->c.dp_sync <= 1) return 0;
    if (e->async || e->c.zero)
        return pt_seterr("--dp-sync %d: needs a synchronous schedule and --zero 0", e->c.dp_sync);
    exec_outer *o = pt_calloc(1, sizeof *o);
    e->outer = o;
    if (comm_split(e->c.world, e->p * e->tp + e->t, &o->cm) < 0) return pt_adderr("--dp-sync: replicas' communicator: ");
    outer_segments(e, o);
    o->start = pt_falloc(o->n);
    o->buf = pt_falloc(o->n);
    o->sum = pt_falloc(o->n);
    o->snap = pt_falloc(o->n);
    memset(o->buf, 0, o->n * sizeof(float));
    outer_copy(o, o->start, 0);
    return 0;
}

void exec_outer_free(run_exec *e) {
    exec_outer *o = e->outer;
    if (!o) return;
    if (o->req) {   /* a job that failed with a sum in flight: drop it */
        int done = 0;
        comm_test(o->cm, o->req, &done);
    }
    comm_free(o->cm);
    free(o->seg);
    free(o->start);
    free(o->buf);
    free(o->sum);
    free(o->snap);
    free(o);
    e->outer = NULL;
}

/* The change since theta_start into sum (the weights kept in snap), its all-reduce posted. */
static int outer_post(run_exec *e, exec_outer *o) {
    outer_copy(o, o->snap, 0);
    outer_delta(o->sum, o->start, o->snap, o->n);
    if (o->cm->size == 1) return 0;
    if (comm_ireduce_f32(o->cm, o->sum, o->n, 1, &o->req) < 0)
        return pt_adderr("rank %d: --dp-sync: posting the replicas' change: ", e->c.world_rank);
    o->pending = 1;
    return 0;
}

/* The posted sum complete, the outer step on theta_start; the weights become theta_start plus
 * what the rank did since snap (nothing when it is applied at once). */
static int outer_apply(run_exec *e, exec_outer *o) {
    if (exec_req_wait(o->cm, &o->req, e->c.timeout) < 0)   /* failed: o->req stays for exec_outer_free */
        return pt_adderr("rank %d: --dp-sync: the replicas' change: ", e->c.world_rank);
    o->pending = 0;
    outer_nesterov(o->start, o->buf, o->sum, o->n, o->cm->size, e->c.outer_lr, e->c.outer_momentum);
    outer_copy(o, o->sum, 0);   /* sum is free now: the weights as they are */
    for (size_t i = 0; i < o->n; i++) o->sum[i] = o->start[i] + (o->sum[i] - o->snap[i]);
    outer_copy(o, o->sum, 1);
    return 0;
}

int exec_outer_step(run_exec *e, const optim_config *oc, int t) {
    exec_outer *o = e->outer;
    int last = t >= oc->total_steps, late = o->pending;
    if (late && outer_apply(e, o) < 0) return -1;
    if (t % e->c.dp_sync != 0 && !last) return 0;
    if (outer_post(e, o) < 0) return -1;
    if (e->c.overlap && !last) {
        if (o->cm->size == 1) return outer_apply(e, o);   /* nothing to wait for */
        return 0;
    }
    return outer_apply(e, o);
}

size_t exec_outer_state(run_exec *e, float **start, float **buf, float **snap, int *pending) {
    exec_outer *o = e->outer;
    if (!o) return 0;
    *start = o->start;
    *buf = o->buf;
    *snap = o->snap;
    *pending = o->pending;
    return o->n;
}

/* The pending change is start - snap on every replica alike, so posting it again gives the sum
 * the saved run was waiting for, bit for bit (the same operands, the same reduction order). */
int exec_outer_resume(run_exec *e, int pending) {
    exec_outer *o = e->outer;
    if (!o || !pending) return 0;
    outer_delta(o->sum, o->start, o->snap, o->n);
    o->pending = 1;
    if (o->cm->size == 1) return 0;
    if (comm_ireduce_f32(o->cm, o->sum, o->n, 1, &o->req) < 0)
        return pt_adderr("rank %d: --dp-sync: posting the resumed change: ", e->c.world_rank);
    return 0;
}

int exec_outer_reduce_world(run_exec *e, run_exec_stats *rs) {
    int D = e->c.lo->D;
    double *v = pt_calloc((size_t)D + 1, sizeof *v);
    v[0] = e->t == 0 ? e->loss_sum : 0;
    v[1 + e->d] = e->sumsq;
    int rc = comm_allreduce_f64(e->c.world, v, (size_t)D + 1);
    if (rc == 0) {
        rs->grad_norm = sqrt(v[1 + e->d]);   /* this replica's: it clips its own step */
        rs->loss = (float)(v[0] / (e->M * D));
        if (e->async) rs->clip_scale = 1;
    }
    free(v);
    return rc < 0 ? pt_adderr("rank %d: loss/norm: ", e->c.world_rank) : 0;
}
