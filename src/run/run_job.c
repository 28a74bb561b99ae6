/* A pipelined job on this process: rank threads (threads transport) or this process's rank (MPI),
 * their executors, the merged timeline of each iteration, measured bubble and profiled costs,
 * and gathering the model back to the root. Not here: the per-rank walk (executor.c), the
 * training loop (src/train/trainer.c).
 *
 * Each rank's executor holds its own stages' models (under tensor parallelism, its TP shards).
 * OpenBLAS's thread count is process-wide, so it is set to 1 once before the rank threads start
 * (each rank computes on one core); MPI mode sets it to 1 per process too (the CLI's --threads
 * raises it there). */
#include "run/run_job_int.h"
#include "run/move.h"
#include "util/pt.h"
#include <cblas.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#define JOB_CLOCK_ROUNDS 16     /* pings per rank for its clock offset: the best of 16 (docs/comm.md) */

/* ---- rank threads ------------------------------------------------------------------------- */

typedef struct { run_job *j; int r; run_job_fn fn; } job_arg;

/* Rank r's failure: keeps its message, tells the others to stop. */
static void job_fail(run_job *j, int r) {
    free(j->errs[r]);
    j->errs[r] = pt_strdup(pt_err());
    int expect = -1;
    atomic_compare_exchange_strong(&j->first_fail, &expect, r);
    comm_abort(j->comms[r], pt_err());
}

static void *job_thread(void *p) {
    job_arg *a = p;
    if (a->fn(a->j, a->r) < 0) job_fail(a->j, a->r);
    return NULL;
}

/* Runs fn on every local rank (threads, or inline for MPI); -1 with the first failure's error. */
int run_job_run_all(run_job *j, run_job_fn fn) {
    atomic_store(&j->first_fail, -1);
    if (j->n_local == 1) {
        if (fn(j, 0) == 0) return 0;
        job_fail(j, 0);
        return -1;
    }
    pthread_t *th = pt_malloc(sizeof *th * (size_t)j->n_local);
    job_arg *args = pt_malloc(sizeof *args * (size_t)j->n_local);
    for (int r = 0; r < j->n_local; r++) {
        args[r] = (job_arg){ j, r, fn };
        pthread_create(&th[r], NULL, job_thread, &args[r]);
    }
    for (int r = 0; r < j->n_local; r++) pthread_join(th[r], NULL);
    free(th);
    free(args);
    int f = atomic_load(&j->first_fail);
    if (f < 0) return 0;
    pt_seterr("%s", j->errs[f]);
    return -1;
}

/* ---- set-up ------------------------------------------------------------------------------- */

int run_job_world_rank(const run_job *j, int r) { return j->mpi ? j->comms[0]->rank : r; }

static int job_exec_init(run_job *j, int r) {
    const run_plan *pl = j->pl;
    int w = run_job_world_rank(j, r);
    run_exec_cfg c = { .s = j->s, .lo = &pl->lo, .world_rank = w, .world = j->comms[r],
                       .src = j->src[r], .B = pl->B, .T = pl->T, .mb_rows = pl->mb_rows,
                       .timeout = pl->o.timeout, .recompute = pl->o.recompute, .zero = pl->o.zero,
                       .tp_overlap = pl->o.tp_overlap, .tp_recompute = pl->o.tp_recompute, .tp_sp = pl->o.tp_sp,
                       .overlap = !pl->o.no_overlap, .bucket = pl->o.bucket, .wire = pl->o.wire,
                       .async_fix = pl->o.async_fix, .defer_tie = pl->o.defer_tie, .tie_owner = pl->o.tie_owner, .window = pl->o.async_window, .on_wait = pl->o.on_wait, .wait_user = pl->o.wait_user,
                       .dp_sync = pl->o.dp_sync, .outer_lr = pl->o.outer_lr, .outer_momentum = pl->o.outer_momentum,
                       .balance_memory = pl->o.balance_memory };
    return run_exec_init(&j->ex[r], &c);
}

/* What every rank holds, and the busiest rank's activation sets (MPI: every rank's numbers in
 * its own slots, summed). */
static int job_measure(run_job *j) {
    enum { NV = 11 };   /* run_mem's ten numbers and run_exec_act_bytes */
    double *v = pt_calloc((size_t)j->R * NV, sizeof *v);
    for (int r = 0; r < j->n_local; r++) {
        int w = run_job_world_rank(j, r);
        run_mem m;
        run_exec_mem(j->ex[r], &m);
        double x[NV] = { m.params, m.grads, m.optim, m.acts, m.act_sets, m.act_mb, m.lent, m.borrowed, m.parts,
                         m.pass_mb, (double)run_exec_act_bytes(j->ex[r]) };
        memcpy(v + (size_t)w * NV, x, sizeof x);
    }
    int rc = j->mpi ? comm_allreduce_f64(j->comms[0], v, (size_t)j->R * NV) : 0;
    free(j->mem);
    j->mem = pt_calloc((size_t)j->R, sizeof *j->mem);
    j->act_max = 0;
    for (int w = 0; w < j->R; w++) {
        const double *x = v + (size_t)w * NV;
        j->mem[w] = (run_mem){ x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7], x[8], x[9] };
        if (x[10] > j->act_max) j->act_max = (size_t)x[10];
    }
    free(v);
    return rc;
}

int run_job_init(run_job **out, const run_plan *pl, const gpt_model *init,
                 const adamw_state *init_opt, comm *world) {
    run_source src;
    run_source_model(&src, init, init_opt);
    return run_job_init_src(out, pl, &src, world);
}

/* Starts a job (run_job_init_src) whose local rank r fills from src[r]. */
static int job_apply_faults(run_job *j, int t);

/* The start probe of rank r's pipeline links, in this phase (run_links_probe). */
static int job_probe_rank(run_job *j, int r) {
    return run_links_probe(&j->links, j->comms[r], &j->pl->lo, run_job_world_rank(j, r), j->probe_phase,
                           run_exec_msg_bytes(j->ex[r]), j->pl->o.timeout);
}

/* The links as step 1's faults leave them, probed in two phases (each rank one link at a time),
 * every rank getting every link's numbers. */
static int job_probe_links(run_job *j) {
    if (job_apply_faults(j, 1) < 0) return -1;
    for (j->probe_phase = 0; j->probe_phase < 2; j->probe_phase++)
        if (run_job_run_all(j, job_probe_rank) < 0) return -1;
    return j->mpi ? run_links_share(&j->links, j->comms[0]) : 0;
}

static int job_start(run_job **out, const run_plan *pl, const run_source *const *src, comm *world, int probe) {
    run_job *j = pt_calloc(1, sizeof *j);
    *out = j;
    j->pl = pl;
    j->s = pl->s;
    j->src = src;
    j->R = run_layout_ranks(&pl->lo);
    j->mpi = world != NULL;
    j->world = world;
    if (j->mpi && world->size != j->R)
        return pt_seterr("the MPI world has %d processes, but --dp %d x --stages %d x --tp %d needs %d "
                         "(mpirun -np %d)", world->size, pl->o.D, pl->o.P, pl->lo.tp, j->R, j->R);
    j->n_local = j->mpi ? 1 : j->R;
    j->comms = pt_calloc((size_t)j->n_local, sizeof *j->comms);
    j->ex = pt_calloc((size_t)j->n_local, sizeof *j->ex);
    j->rst = pt_calloc((size_t)j->n_local, sizeof *j->rst);
    j->errs = pt_calloc((size_t)j->n_local, sizeof *j->errs);
    j->prof = pt_calloc((size_t)pl->s->n_stages * 5 + 1, sizeof *j->prof);
    timeline_init(&j->tl, j->s, NULL, 1);
    j->tl.n_ranks = j->R;            /* events carry world ranks: every replica gets its row */
    openblas_set_num_threads(1);     /* one core per rank (MPI: per process; the caller may raise it) */
    if (j->mpi) {
        j->comms[0] = world;
        if (pl->n_faults && comm_faulty_borrow(world, -1, &j->comms[0]) < 0) return -1;
        j->wrapped = pl->n_faults > 0;
        j->clock = pt_calloc((size_t)j->R, sizeof *j->clock);   /* hosts' clocks differ */
        if (comm_clock_offsets(world, JOB_CLOCK_ROUNDS, pl->o.timeout, j->clock, NULL) < 0) return -1;
    } else {
        const comm_transport *t = comm_transport_find(pl->o.transport);
        if (!t) return -1;
        if (!t->create)
            return pt_seterr("--transport %s joins a world of processes: start the job with one "
                             "(run_job_init's world), not as threads", t->name);
        if (t->create(j->R, j->comms) < 0) return -1;
        int fr = pl->o.fail_rank, fail = pl->o.fail_after > 0 && fr >= 0 && fr < j->R;
        for (int r = 0; r < j->R; r++)   /* faults: every rank's endpoint; the test hook: its rank's */
            if ((pl->n_faults || (fail && r == fr)) &&
                comm_faulty_wrap(j->comms[r], -1, 0, fail && r == fr ? pl->o.fail_after : -1, &j->comms[r]) < 0)
                return -1;
    }
    int rc = run_job_run_all(j, job_exec_init);
    j->src = NULL;
    run_links_init(&j->links, &pl->lo);
    if (rc == 0 && probe) rc = job_probe_links(j);
    return rc < 0 ? -1 : job_measure(j);
}

int run_job_init_src(run_job **out, const run_plan *pl, const run_source *src, comm *world) {
    int n = world ? 1 : run_layout_ranks(&pl->lo);
    const run_source **each = pt_malloc(sizeof *each * (size_t)n);
    for (int r = 0; r < n; r++) each[r] = src;
    int rc = job_start(out, pl, each, world, 1);
    free(each);
    return rc;
}

/* Rank r's part of a re-split: its requests in the new job served from the old one's ranks. */
static int job_move_rank(run_job *j, int r) {
    return run_move(j->move_from->ex[r], &j->move_want[r], j->comms[r], &j->pl->lo, j->pl->o.timeout);
}

int run_job_resplit(run_job **jp, const run_plan *pl) {
    run_job *old = *jp, *j = NULL;
    run_source *src = pt_calloc((size_t)old->n_local, sizeof *src);
    const run_source **each = pt_calloc((size_t)old->n_local, sizeof *each);
    run_source_reqs *want = pt_calloc((size_t)old->n_local, sizeof *want);
    for (int r = 0; r < old->n_local; r++) {
        run_source_defer(&src[r], &run_exec_first_model(old->ex[0])->cfg, &want[r]);
        each[r] = &src[r];
    }
    int rc = job_start(&j, pl, each, old->world, 0);   /* the links stay what the old job measured */
    if (rc == 0) {
        memcpy(j->links.dir, old->links.dir, sizeof *j->links.dir * (size_t)(2 * pl->lo.D * j->links.tp * (pl->lo.P - 1)));
        j->move_from = old;
        j->move_want = want;
        rc = run_job_run_all(j, job_move_rank);
        j->move_from = NULL;
        j->move_want = NULL;
    }
    for (int r = 0; r < old->n_local; r++) free(want[r].v);
    free(want);
    free(each);
    free(src);
    if (rc < 0) {
        run_job_free(j);
        return pt_adderr("re-split: ");
    }
    run_job_free(old);
    *jp = j;
    return 0;
}

void run_job_free(run_job *j) {
    if (!j) return;
    for (int r = 0; r < j->n_local; r++) {
        run_exec_free(j->ex ? j->ex[r] : NULL);
        if ((!j->mpi || j->wrapped) && j->comms) comm_free(j->comms[r]);   /* a borrowing wrapper */
        free(j->errs ? j->errs[r] : NULL);
    }
    if (j->prof)
        for (int i = 0; i < j->pl->s->n_stages * 5 + 1; i++) free(j->prof[i].v);
    free(j->prof);
    free(j->mem); free(j->comms); free(j->ex); free(j->rst); free(j->errs); free(j->clock);
    timeline_free(&j->tl);
    run_links_free(&j->links);
    sched_free(j->own);
    free(j);
}

void run_job_stash_stats(const run_job *j, int out[3]) {
    out[0] = out[1] = out[2] = 0;
    for (int r = 0; r < j->n_local; r++) {
        int v[3];
        run_exec_stash_stats(j->ex[r], v);
        for (int k = 0; k < 3; k++) out[k] += v[k];
    }
}

size_t run_job_act_bytes(const run_job *j) { return j->act_max; }

void run_job_tp_stats(const run_job *j, run_tp_stats *out, int *ranks) {
    memset(out, 0, sizeof *out);
    for (int r = 0; r < j->n_local; r++) {
        run_tp_stats s;
        run_exec_tp_stats(j->ex[r], &s);
        out->calls += s.calls;
        out->floats += s.floats;
        out->seconds += s.seconds;
    }
    *ranks = j->n_local;
}

int run_job_local_count(const run_job *j) { return j->n_local; }
run_exec *run_job_local_exec(run_job *j, int r) { return r >= 0 && r < j->n_local ? j->ex[r] : NULL; }

int run_job_is_root(const run_job *j) { return !j->mpi || j->comms[0]->rank == 0; }

/* ---- iteration ---------------------------------------------------------------------------- */

static int job_iter_rank(run_job *j, int r) {
    return run_exec_iteration(j->ex[r], j->tok, j->tgt, j->oc, j->t, &j->rst[r]);
}

/* Appends rank timeline src to the merged one. */
static void job_merge(run_job *j, const timeline *src) {
    timeline_reserve(&j->tl, j->tl.n + src->n);
    for (int i = 0; i < src->n; i++) timeline_push(&j->tl, &src->ev[i]);
}

/* MPI: the merged events on world rank 0's clock (each rank stamped its own; a host's clock may
 * be seconds off another's), before anything compares events of two ranks. */
static void job_align(run_job *j) {
    for (int i = 0; i < j->tl.n && j->clock; i++) {
        tl_event *e = &j->tl.ev[i];
        double off = j->clock[e->rank];
        e->ready -= off; e->start -= off; e->end -= off;
        if (e->woke > 0) e->woke -= off;
    }
}

/* MPI: every rank's events to the root (count, then the events as bytes). */
static int job_gather_events(run_job *j) {
    comm *w = j->comms[0];
    const timeline *mine = run_exec_timeline(j->ex[0]);
    if (w->rank != 0) {
        int n = mine->n;
        comm_req *r1, *r2;
        if (comm_isend(w, 0, COMM_TAG_GATHER, &n, sizeof n, &r1) < 0 ||
            comm_isend(w, 0, COMM_TAG_GATHER + 1, mine->ev, sizeof(tl_event) * (size_t)n, &r2) < 0 ||
            comm_wait(w, r1, j->pl->o.timeout) < 0 || comm_wait(w, r2, j->pl->o.timeout) < 0)
            return -1;
        return 0;
    }
    job_merge(j, mine);
    for (int src = 1; src < w->size; src++) {
        int n = 0;
        comm_req *rq;
        if (comm_irecv(w, src, COMM_TAG_GATHER, &n, sizeof n, &rq) < 0 || comm_wait(w, rq, j->pl->o.timeout) < 0)
            return -1;
        timeline_reserve(&j->tl, j->tl.n + n);
        if (comm_irecv(w, src, COMM_TAG_GATHER + 1, j->tl.ev + j->tl.n, sizeof(tl_event) * (size_t)n, &rq) < 0 ||
            comm_wait(w, rq, j->pl->o.timeout) < 0)
            return -1;
        j->tl.n += n;
    }
    return 0;
}

#define TL_FIELDS 13   /* an event as doubles: stage, mb, kind, rank, iter, stream, peer, link, times,
                        * a side event's CPU and wake-up */

static void ev_pack(const tl_event *e, double *v) {
    double x[TL_FIELDS] = { e->act.stage, e->act.mb, e->act.kind, e->rank, e->iter, e->stream, e->peer, e->link,
                            e->ready, e->start, e->end, e->cpu, e->woke };
    memcpy(v, x, sizeof x);
}

static tl_event ev_unpack(const double *v) {
    tl_event e = { .act = { .stage = (int)v[0], .mb = (int)v[1], .kind = (sched_kind)(int)v[2] },
                   .rank = (int)v[3], .iter = (int)v[4], .stream = (tl_stream)(int)v[5], .peer = (int)v[6],
                   .link = (int)v[7], .ready = v[8], .start = v[9], .end = v[10], .cpu = v[11], .woke = v[12] };
    return e;
}

/* MPI: every rank's events to every rank, in rank order, with no root: the counts, then the
 * events (each rank fills its own slots, zeros elsewhere) summed over the world (x + 0 = x). */
static int job_share_events(run_job *j) {
    comm *w = j->comms[0];
    const timeline *mine = run_exec_timeline(j->ex[0]);
    double *cnt = pt_calloc((size_t)j->R, sizeof *cnt);
    cnt[w->rank] = mine->n;
    int rc = comm_allreduce_f64(w, cnt, (size_t)j->R);
    size_t total = 0, off = 0;
    for (int r = 0; r < j->R; r++) {
        if (r == w->rank) off = total;
        total += (size_t)cnt[r];
    }
    double *v = pt_calloc(total * TL_FIELDS + 1, sizeof *v);
    for (int i = 0; i < mine->n; i++) ev_pack(&mine->ev[i], v + (off + (size_t)i) * TL_FIELDS);
    if (rc == 0) rc = comm_allreduce_f64(w, v, total * TL_FIELDS);
    if (rc == 0) {
        timeline_reserve(&j->tl, (int)total);
        for (size_t i = 0; i < total; i++) {
            tl_event e = ev_unpack(v + i * TL_FIELDS);
            timeline_push(&j->tl, &e);
        }
    }
    free(v);
    free(cnt);
    return rc;
}

static void samples_add(job_samples *s, int iter, double dur) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        job_samples t = { pt_malloc(sizeof *s->v * (size_t)s->cap), s->n, s->cap };
        if (s->n) memcpy(t.v, s->v, sizeof *s->v * (size_t)s->n);
        free(s->v);
        *s = t;
    }
    s->v[s->n++] = (job_sample){ iter, dur };
}

static int cmp_interval(const void *a, const void *b) {
    double x = ((const double *)a)[0], y = ((const double *)b)[0];
    return x < y ? -1 : x > y;
}

/* Busy time of each rank: the union of its F/B/W/BW, REDUCE_GRAD and STEP intervals (what the
 * simulator counts as busy), so an overlapped reduction under compute counts once. */
static void job_busy(const run_job *j, double *busy) {
    const timeline *tl = &j->tl;
    double *iv = pt_malloc(sizeof(double) * 2 * (size_t)(tl->n + 1));
    for (int r = 0; r < j->R; r++) {
        int n = 0;
        for (int i = 0; i < tl->n; i++) {
            const tl_event *e = &tl->ev[i];
            sched_kind k = e->act.kind;
            if (e->rank != r || !(sched_kind_is_compute(k) || k == ACT_REDUCE_GRAD || k == ACT_STEP)) continue;
            iv[2 * n] = e->start;
            iv[2 * n++ + 1] = e->end;
        }
        qsort(iv, (size_t)n, 2 * sizeof(double), cmp_interval);
        double lo = 0, hi = -1;
        busy[r] = 0;
        for (int k = 0; k < n; k++) {
            if (iv[2 * k] > hi) { busy[r] += hi > lo ? hi - lo : 0; lo = iv[2 * k]; hi = iv[2 * k + 1]; }
            else if (iv[2 * k + 1] > hi) hi = iv[2 * k + 1];
        }
        busy[r] += hi > lo ? hi - lo : 0;
    }
    free(iv);
}

/* An overlapped reduction (on the communication stream): how much of its span lies under the
 * rank's compute, which the iteration did not pay for. Its cost for the simulator is the rest:
 * the span runs from the stage's last W to when the rank saw it complete (between actions),
 * so only the exposed part is a cost the run paid. 0 for one on the compute stream. */
static double job_hidden(const timeline *tl, const tl_event *red) {
    double hidden = 0;
    if (red->stream != TL_SEND) return 0;
    for (int i = 0; i < tl->n; i++) {
        const tl_event *c = &tl->ev[i];
        if (c->rank != red->rank || c->stream != TL_COMPUTE || !sched_kind_is_compute(c->act.kind)) continue;
        double a = c->start > red->start ? c->start : red->start, z = c->end < red->end ? c->end : red->end;
        if (z > a) hidden += z - a;
    }
    return hidden;
}

/* Shifts the merged events to start at 0; measures iteration time and bubble; adds samples. */
static void job_analyse(run_job *j, run_stats *st) {
    timeline *tl = &j->tl;
    double t0 = 1e300, t1 = -1e300;
    double *busy = pt_calloc((size_t)j->R, sizeof *busy);
    for (int i = 0; i < tl->n; i++) {
        if (tl->ev[i].ready < t0) t0 = tl->ev[i].ready;
        if (tl->ev[i].end > t1) t1 = tl->ev[i].end;
    }
    for (int i = 0; i < tl->n; i++) {
        tl_event *e = &tl->ev[i];
        e->ready -= t0; e->start -= t0; e->end -= t0;
        if (e->woke > 0) e->woke -= t0;   /* a side program's wake-up, on the same clock */
    }
    for (int i = 0; i < tl->n; i++) {
        tl_event *e = &tl->ev[i];
        int S = j->s->n_stages;
        if (e->act.kind == ACT_STEP) samples_add(&j->prof[S * 5], j->n_iters, e->end - e->start);
        if (e->act.kind == ACT_REDUCE_GRAD)
            samples_add(&j->prof[e->act.stage * 5 + 4], j->n_iters, e->end - e->start - job_hidden(tl, e));
        if (!sched_kind_is_compute(e->act.kind)) continue;
        int k = e->act.kind == ACT_BW ? 3 : (int)e->act.kind;   /* F 0, B 1, W 2, BW 3 */
        samples_add(&j->prof[e->act.stage * 5 + k], j->n_iters, e->end - e->start);
    }
    job_busy(j, busy);
    st->iter_time = tl->n ? t1 - t0 : 0;
    double idle = 0;
    for (int r = 0; r < j->R; r++) idle += st->iter_time - busy[r];
    st->bubble = st->iter_time > 0 ? idle / (j->R * st->iter_time) : 0;
    free(busy);
}

/* Step t's faults on this process's ranks: the delay and the rate (bytes per second, this rank's
 * direction) of each slow link to its other end (a link between replicas delays and queues their
 * gradient reductions too, a link within a TP group its all-reduces), each slow stage's factor. */
static int job_apply_faults(run_job *j, int t) {
    const run_plan *pl = j->pl;
    for (int r = 0; r < j->n_local && pl->n_faults; r++) {
        int w = run_job_world_rank(j, r);
        for (int i = 0; i < pl->n_faults; i++) {
            const sim_fault *x = &pl->faults[i];
            if (!x->link || (x->a != w && x->b != w)) continue;
            int peer = x->a == w ? x->b : x->a, dw, dpeer, pp, tw, tpeer;
            run_layout_coords(&pl->lo, w, &dw, &pp, &tw);
            run_layout_coords(&pl->lo, peer, &dpeer, &pp, &tpeer);
            int reductions = dpeer != dw || tpeer != tw;
            if (comm_faulty_set_delay(j->comms[r], peer, run_plan_link_delay(pl, w, peer, t), reductions) < 0 ||
                comm_faulty_set_rate(j->comms[r], peer, run_plan_link_rate(pl, w, peer, t), reductions) < 0)
                return -1;
        }
        for (int g = 0; g < pl->s->n_stages; g++) run_exec_set_slowdown(j->ex[r], g, run_plan_stage_factor(pl, g, t));
    }
    return 0;
}

int run_job_iteration(run_job *j, const int *tokens, const int *targets, const optim_config *oc,
                      int t, run_stats *st) {
    memset(st, 0, sizeof *st);
    if (j->s->async && !oc)
        return pt_seterr("schedule %s updates the weights during the step (asynchronous); the gradient of "
                         "a whole batch needs a synchronous schedule", j->s->name);
    j->tok = tokens; j->tgt = targets; j->oc = oc; j->t = t;
    if (job_apply_faults(j, t) < 0 || run_job_run_all(j, job_iter_rank) < 0) return -1;
    j->tl.n = 0;
    j->tl_linked = 0;
    if (j->mpi) {
        if ((j->share_tl ? job_share_events(j) : job_gather_events(j)) < 0) { comm_abort(j->comms[0], pt_err()); return -1; }
        job_align(j);
    } else {
        for (int r = 0; r < j->n_local; r++) job_merge(j, run_exec_timeline(j->ex[r]));
    }
    if (run_job_is_root(j) || j->share_tl) {   /* the same numbers on every rank */
        job_analyse(j, st);
        /* threads: a message is a copy in memory; one got late was late for want of a core,
         * which is no link (the probe's numbers stand) */
        if (j->mpi) run_links_observe(&j->links, run_job_timeline(j), &j->pl->lo, (double)run_exec_msg_bytes(j->ex[0]));
    }
    if (j->mpi && !j->share_tl) {   /* every rank reports the root's measurement */
        double v[2] = { st->iter_time, st->bubble };
        if (comm_allreduce_f64(j->comms[0], v, 2) < 0) return -1;
        st->iter_time = v[0];
        st->bubble = v[1];
    }
    st->loss = j->rst[0].loss;
    st->grad_norm = j->rst[0].grad_norm;
    st->clip_scale = oc ? j->rst[0].clip_scale : 1;
    st->lr = j->rst[0].lr;
    memcpy(st->win_loss, j->rst[0].win_loss, sizeof st->win_loss);
    j->n_iters++;
    return 0;
}

/* ---- timeline, profile, gather ------------------------------------------------------------ */

/* Slot of a receive in the lookup table: (world rank, stage, mb, direction). */
static size_t job_recv_slot(const run_job *j, int rank, int g, int mb, int dir) {
    return (((size_t)rank * (size_t)j->s->n_stages + (size_t)g) * (size_t)j->s->n_mb + (size_t)mb) * 2 + (size_t)dir;
}

/* Links every message's SEND event to the RECV that consumed it (the matching one on the peer),
 * through a table of the receives. */
static void job_link(run_job *j) {
    timeline *tl = &j->tl;
    const sched *s = j->s;
    size_t n = job_recv_slot(j, j->R, 0, 0, 0);
    int *at = pt_malloc(sizeof *at * (n ? n : 1));
    for (size_t k = 0; k < n; k++) at[k] = -1;
    for (int i = 0; i < tl->n; i++) {
        const tl_event *c = &tl->ev[i];
        if (c->act.kind == ACT_RECV_F || c->act.kind == ACT_RECV_B)
            at[job_recv_slot(j, c->rank, c->act.stage, c->act.mb, c->act.kind == ACT_RECV_B)] = i;
    }
    for (int i = 0; i < tl->n; i++) {   /* messages only: an overlapped reduction is on TL_SEND too */
        tl_event *e = &tl->ev[i];
        if (e->stream != TL_SEND || (e->act.kind != ACT_SEND_F && e->act.kind != ACT_SEND_B)) continue;
        int f = e->act.kind == ACT_SEND_F;
        int g = f ? sched_stage_next(s, e->act.stage) : sched_stage_prev(s, e->act.stage);
        e->link = e->peer >= 0 && g >= 0 ? at[job_recv_slot(j, e->peer, g, e->act.mb, !f)] : -1;
    }
    free(at);
}

const timeline *run_job_timeline(run_job *j) {
    if (!run_job_is_root(j) && !j->share_tl) return NULL;
    if (!j->tl_linked) job_link(j);
    j->tl_linked = 1;
    return &j->tl;
}

void run_job_share_timeline(run_job *j, int on) { j->share_tl = on != 0; }

const run_links *run_job_links(const run_job *j) { return &j->links; }

size_t run_job_msg_bytes(const run_job *j) { return run_exec_msg_bytes(j->ex[0]); }

void run_job_set_wire(run_job *j, int wire) {
    for (int r = 0; r < j->n_local; r++) run_exec_set_wire(j->ex[r], wire);
}

const sched *run_job_schedule(const run_job *j) { return j->s; }

/* s has the shape of the schedule in force: the same stages on the same ranks, microbatches,
 * pipes, sequence chunks, synchronous. */
static int job_same_shape(const run_job *j, const sched *s) {
    const sched *c = j->s;
    int same = s->n_ranks == c->n_ranks && s->n_stages == c->n_stages && s->n_pipes == c->n_pipes &&
               s->n_mb == c->n_mb && s->async == c->async && !s->async && s->seq_chunks == c->seq_chunks;
    for (int g = 0; same && g < s->n_stages; g++) same = s->stage_rank[g] == c->stage_rank[g];
    if (same) return 0;
    return pt_seterr("replan: schedule %s (%d ranks, %d stages, %d microbatches%s) does not have the shape of %s "
                     "(%d, %d, %d): only the order of work may change", s->name, s->n_ranks, s->n_stages, s->n_mb,
                     s->async ? ", asynchronous" : "", c->name, c->n_ranks, c->n_stages, c->n_mb);
}

/* MPI: every rank switches to the same schedule (a hash of its actions, summed over the world,
 * must be the world size times this rank's). */
static int job_agree(run_job *j, const sched *s) {
    if (!j->mpi) return 0;
    unsigned h = 2166136261u;
    for (int r = 0; r < s->n_ranks; r++)
        for (int i = 0; i < s->len[r]; i++) {
            const sched_action *a = &s->acts[r][i];
            unsigned x[3] = { (unsigned)a->stage, (unsigned)a->mb, (unsigned)a->kind };
            for (int k = 0; k < 3; k++) h = (h ^ x[k]) * 16777619u;
        }
    double v[2] = { (double)(h >> 16), (double)(h & 0xffff) };
    if (comm_allreduce_f64(j->comms[0], v, 2) < 0) return -1;
    if (v[0] == (double)j->R * (double)(h >> 16) && v[1] == (double)j->R * (double)(h & 0xffff)) return 0;
    return pt_seterr("replan: the ranks chose different schedules (rank %d's %s differs from another's)",
                     j->comms[0]->rank, s->name);
}

int run_job_replan(run_job *j, const sched *s_in) {
    sched *s = s_in->lowered ? sched_copy(s_in) : sched_lower(s_in);
    if (!s) return pt_adderr("replan: ");
    if (sched_validate(s, NULL) < 0 || sched_check_runnable(s, "replan") < 0 || job_same_shape(j, s) < 0 ||
        job_agree(j, s) < 0) {
        sched_free(s);
        return -1;
    }
    for (int r = 0; r < j->n_local; r++) run_exec_replan(j->ex[r], s);
    sched_free(j->own);
    j->own = s;
    j->s = s;
    timeline_free(&j->tl);
    timeline_init(&j->tl, s, NULL, 1);
    j->tl.n_ranks = j->R;
    j->tl_linked = 0;
    return job_measure(j);
}

/* Median (mean = 0) or mean of the samples after the first iteration (all of them when only one
 * ran); -1 if none. */
static double samples_stat(const job_samples *s, int n_iters, int mean) {
    double *v = pt_malloc(sizeof *v * (size_t)(s->n + 1)), sum = 0;
    int n = 0;
    for (int i = 0; i < s->n; i++)
        if (n_iters < 2 || s->v[i].iter > 0) sum += v[n++] = s->v[i].dur;
    double m = !n ? -1 : mean ? sum / n : pt_median(v, n);
    free(v);
    return m;
}

static void job_profile(run_job *j, sim_costs *c, int mean) {
    if (!run_job_is_root(j)) return;
    int S = j->pl->s->n_stages;
    for (int g = 0; g < S; g++) {
        double v[5];
        for (int k = 0; k < 5; k++) v[k] = samples_stat(&j->prof[g * 5 + k], j->n_iters, mean);
        c->f[g] = v[0] > 0 ? v[0] : 0;
        c->b[g] = v[1] >= 0 ? v[1] : v[3] > 0 ? v[3] / 2 : 0;
        c->w[g] = v[2] >= 0 ? v[2] : v[3] > 0 ? v[3] / 2 : 0;
        c->bw[g] = v[3] >= 0 ? v[3] : -1;
        c->reduce[g] = v[4] > 0 ? v[4] : 0;
    }
    double st = samples_stat(&j->prof[S * 5], j->n_iters, mean);
    c->step = st > 0 ? st : 0;
}

void run_job_profile(run_job *j, sim_costs *c) { job_profile(j, c, 0); }

void run_job_profile_mean(run_job *j, sim_costs *c) { job_profile(j, c, 1); }
