/* The trainer's side of recovery (docs/recovery.md): --kill-at checked against the layout, the
 * "save" kill point of a checkpoint, and the snapshot hook: each step a heartbeat per rank and,
 * every --snapshot-every steps, each rank's chunks copied into its snapshot's buffers (the only
 * cost on the compute path) and handed to its writer thread (ckpt/snapshot.h). Not here: the
 * writer and the restore (src/ckpt/snapshot*.c), the supervisor that restarts (src/launch). */
#include "train/trainer_int.h"
#include "ckpt/snapshot.h"
#include "comm/comm.h"
#include "run/executor.h"
#include "util/killat.h"
#include "util/pt.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Generations each rank keeps: the newest may be half a step ahead of another rank's, and one of
 * those may be damaged; three leave a step every rank has in both cases. */
#define SNAP_KEEP 3

enum { TAKE_NONE, TAKE_SPLIT, TAKE_OVERLAP };   /* the worker's mode (below) */

struct train_recover {
    ckpt_snap **snap;       /* [n] one per local rank */
    run_exec **ex;          /* [n] pipelined: the local ranks' executors; NULL: one process */
    int n;
    double step_s;          /* seconds of the steps run (the overhead's denominator) */
    /* One worker thread takes snapshots off the trainer's thread, in a mode fixed at init:
     * TAKE_SPLIT: at a step boundary, local ranks [half, n) while the trainer's thread takes
     *   [0, half) (every rank thread is idle there: with a second core half the wall time);
     * TAKE_OVERLAP (pipelined synchronous jobs without --adapt): every local rank's take of step S
     *   during step S + 1, each rank's STEP of S + 1 waiting for its own (the executor's step
     *   gate), so no update can change what is being copied.
     * Posted ranks [first, n); done[r] once rank r's is whole; busy until all are. */
    pthread_t wk;
    int mode, half;
    int go, busy, stop, first, wk_rc;
    int *done;              /* [n] */
    ckpt_manifest man;
    train_ctx *wt;
    char err[512];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    long gate_waits;        /* STEPs that found their rank's take still running, and how long */
    double gate_wait_s;
    int *world;             /* [n] the local ranks' world ranks */
    int ended;              /* the run reached its end (train_recover_end): marked finished at free */
};

/* World ranks of the job (1: one process). */
static int job_ranks(train_ctx *t) {
    const run_plan *pl = train_engine_plan(t->e);
    return pl ? run_layout_ranks(&pl->lo) : 1;
}

/* --kill-at against the layout: a rank that exists, a reduction only where there is one. */
static int check_kill_at(train_ctx *t) {
    int max_rank;
    long max_step;
    if (pt_killat_count(&max_rank, &max_step) == 0) return 0;
    int R = job_ranks(t);
    if (max_rank >= R)
        return pt_seterr("--kill-at: rank %d does not exist: the job has %d rank%s (0..%d)", max_rank, R,
                         R == 1 ? "" : "s", R - 1);
    if (!train_engine_job(t->e) && pt_killat_has_phase(PT_KILL_REDUCE))
        return pt_seterr("--kill-at ...:reduce: one process has no reduction; give a pipelined layout "
                         "(--stages, --dp) or another phase (forward, save)");
    return 0;
}

/* The manifest fields a generation carries: the run's, the step, AdamW's count, the layout. */
static int snap_manifest(train_ctx *t, long step, ckpt_manifest *man) {
    const train_opts *o = &t->o;
    const run_plan *pl = train_engine_plan(t->e);
    *man = (ckpt_manifest){ .cfg = t->m.cfg, .step = step, .batch = o->batch, .seq = o->seq,
                            .shuffle_seed = (uint64_t)o->shuffle, .init_seed = (uint64_t)o->seed };
    snprintf(man->data_path, sizeof man->data_path, "%s", o->data);
    ckpt_manifest_set_optim(man, &o->oc);
    if (!pl) {
        int cf[2] = { 0, gpt_num_layers(&t->m) };
        man->adam_t = t->opt.t;
        return ckpt_manifest_set_layout(man, 1, 1, 1, 1, NULL, cf);
    }
    man->adam_t = (int)step;   /* as the pipelined engine's save: one AdamW step per step */
    /* --zero 1: the moments in shard files, but under TP in the chunk files (the checkpoint's way) */
    if (pl->o.zero && pl->lo.tp == 1 && ckpt_manifest_set_shards(man, run_layout_ranks(&pl->lo)) < 0) return -1;
    man->tp = pl->lo.tp;
    return ckpt_manifest_set_layout(man, pl->o.P, pl->o.D, pl->s->stages_per_pipe, pl->s->n_pipes,
                                    pl->s->name, pl->lo.chunk_first);
}

/* --zero 1: the moment slices the rank updates, as its shard file. */
static int snap_take_shard(ckpt_snap *sn, run_exec *ex) {
    ckpt_slice *sl = NULL;
    int n = run_exec_moment_slices(ex, -1, &sl);
    int rc = n < 0 ? -1 : ckpt_snap_stage_shard(sn, sl, n);
    free(sl);
    return rc;
}

/* Whether any of slices x[0..n) is of a tensor in layers [first, end) (m: the table). */
static int slices_in(const gpt_model *m, const ckpt_slice *x, int n, int first, int end) {
    for (int s = 0; s < n; s++)
        for (int i = 0; i < gpt_param_count(m); i++) {
            const gpt_param_info *pi = gpt_param_info_at(m, i);
            if (!strcmp(pi->name, x[s].name) && pi->layer >= first && pi->layer < end) return 1;
        }
    return 0;
}

/* --zero 1 under TP: per chunk, a file with the stage's parameters when the rank holds it and
 * the rank's moment slices of it (a tied tensor's slices may be of another stage's chunk), then
 * handed over. */
static int snap_take_slices(train_ctx *t, int r, const ckpt_manifest *man, int d, int tr) {
    struct train_recover *rc = t->recover;
    const run_plan *pl = train_engine_plan(t->e);
    const gpt_model *any = run_exec_first_model(rc->ex[r]);
    ckpt_slice *sl = NULL;
    int n = run_exec_moment_slices(rc->ex[r], -1, &sl), rcode = n < 0 ? -1 : 0;
    for (int c = 0; c < pl->s->stages_per_pipe && rcode == 0; c++) {
        int first = pl->lo.chunk_first[c], end = pl->lo.chunk_first[c + 1];
        const gpt_model *m = NULL;
        for (int g = 0; g < pl->s->n_stages && !m; g++) {
            const adamw_state *opt;
            int cc, f0, e0;
            const gpt_model *mg;
            if (run_exec_stage_state(rc->ex[r], g, &mg, &opt, &cc, &f0, &e0) == 0 && cc == c) m = mg;
        }
        if (m || slices_in(any, sl, n, first, end))
            rcode = ckpt_snap_stage_slices(rc->snap[r], c, first, end, m ? m : any, m != NULL, sl, n, tr,
                                           pl->lo.tp, d, run_layout_ranks(&pl->lo));
    }
    free(sl);
    if (rcode == 0) ckpt_snap_commit(rc->snap[r], man);
    return rcode;
}

/* The rank's own state (asynchronous versions, corrections, --dp-sync: run_exec_rank_state). */
static int snap_take_state(ckpt_snap *sn, run_exec *ex, const ckpt_manifest *man, int world) {
    ckpt_state *st;
    int rc = run_exec_rank_state(ex, man->step, &st);
    if (rc == 1) rc = ckpt_snap_stage_state(sn, st, world);
    free(st);
    return rc < 0 ? -1 : 0;
}

/* Local rank r's chunks into its snapshot (when its writer is idle), handed over as `step`. */
static int snap_take(train_ctx *t, int r, const ckpt_manifest *man) {
    struct train_recover *rc = t->recover;
    ckpt_snap_ready(rc->snap[r]);
    int rcode = 0;
    if (!rc->ex) {
        rcode = ckpt_snap_stage(rc->snap[r], 0, 0, gpt_num_layers(&t->m), &t->m, &t->opt);
    } else {
        const run_plan *pl = train_engine_plan(t->e);
        int d, p, tr;
        run_exec_coords(rc->ex[r], &d, &p, &tr);
        if (pl->o.zero && pl->lo.tp > 1) return snap_take_slices(t, r, man, d, tr) < 0 ? -1 : 0;
        for (int g = 0; g < pl->s->n_stages && rcode == 0; g++) {
            const gpt_model *m;
            const adamw_state *opt;
            int c, first, end;
            /* --zero 0: a stage copy without moments is not its chunk's home, which has them */
            if (run_exec_stage_state(rc->ex[r], g, &m, &opt, &c, &first, &end) == 0 && (opt || pl->o.zero))
                rcode = ckpt_snap_stage_tp(rc->snap[r], c, first, end, m, pl->o.zero ? NULL : opt, tr, pl->lo.tp);
        }
        if (rcode == 0 && pl->o.zero) rcode = snap_take_shard(rc->snap[r], rc->ex[r]);
        if (rcode == 0) rcode = snap_take_state(rc->snap[r], rc->ex[r], man, run_layout_ranks(&pl->lo));
    }
    if (rcode == 0) ckpt_snap_commit(rc->snap[r], man);
    return rcode;
}

/* The worker: each posted set of takes, rank by rank (after a failure the rest are marked done
 * untaken; the first error is kept for worker_wait and the gate). */
static void *worker_main(void *arg) {
    struct train_recover *rc = arg;
    pthread_mutex_lock(&rc->mu);
    for (;;) {
        while (!rc->go && !rc->stop) pthread_cond_wait(&rc->cv, &rc->mu);
        if (rc->stop) break;
        rc->go = 0;
        for (int r = rc->first; r < rc->n; r++) {
            int failed = rc->wk_rc < 0;   /* read under the lock */
            pthread_mutex_unlock(&rc->mu);
            int rcode = failed ? -1 : snap_take(rc->wt, r, &rc->man);
            pthread_mutex_lock(&rc->mu);
            if (rcode < 0 && rc->wk_rc == 0) {
                rc->wk_rc = -1;
                snprintf(rc->err, sizeof rc->err, "%s", pt_err());
            }
            rc->done[r] = 1;
            pthread_cond_broadcast(&rc->cv);
        }
        rc->busy = 0;
        pthread_cond_broadcast(&rc->cv);
    }
    pthread_mutex_unlock(&rc->mu);
    return NULL;
}

/* Local ranks [first, n)'s takes of generation man->step handed to the worker (idle: waited). */
static void worker_post(train_ctx *t, const ckpt_manifest *man, int first) {
    struct train_recover *rc = t->recover;
    pthread_mutex_lock(&rc->mu);
    rc->man = *man;
    rc->wt = t;
    rc->first = first;
    for (int r = first; r < rc->n; r++) rc->done[r] = 0;
    rc->busy = rc->go = 1;
    pthread_cond_broadcast(&rc->cv);
    pthread_mutex_unlock(&rc->mu);
}

/* Waits until the posted takes are whole; their error, if one failed (reported once). */
static int worker_wait(struct train_recover *rc) {
    if (rc->mode == TAKE_NONE) return 0;
    pthread_mutex_lock(&rc->mu);
    while (rc->busy) pthread_cond_wait(&rc->cv, &rc->mu);
    int rcode = rc->wk_rc;
    rc->wk_rc = 0;
    pthread_mutex_unlock(&rc->mu);
    return rcode < 0 ? pt_seterr("%s", rc->err) : 0;
}

/* Every local rank's snapshot taken as generation man->step, now: TAKE_SPLIT's upper half by the
 * worker. The trainer thread's own error first. */
static int take_all(train_ctx *t, const ckpt_manifest *man) {
    struct train_recover *rc = t->recover;
    int split = rc->mode == TAKE_SPLIT, rcode = 0, half = split ? rc->half : rc->n;
    if (split) worker_post(t, man, half);
    for (int r = 0; r < half && rcode == 0; r++) rcode = snap_take(t, r, man);
    if (!split) return rcode;
    char own[512];
    snprintf(own, sizeof own, "%s", rcode < 0 ? pt_err() : "");
    int wr = worker_wait(rc);
    return rcode < 0 ? pt_seterr("%s", own) : wr;
}

/* The executors' step gate (TAKE_OVERLAP): local rank `world_rank`'s STEP waits for its posted take. */
static int take_gate(void *user, int world_rank) {
    struct train_recover *rc = user;
    int r = 0;
    while (r < rc->n && run_exec_world_rank(rc->ex[r]) != world_rank) r++;
    pthread_mutex_lock(&rc->mu);
    if (rc->busy && r < rc->n && !rc->done[r]) {
        double t0 = pt_now();
        while (rc->busy && !rc->done[r]) pthread_cond_wait(&rc->cv, &rc->mu);
        rc->gate_waits++;
        rc->gate_wait_s += pt_now() - t0;
    }
    int rcode = rc->wk_rc;
    pthread_mutex_unlock(&rc->mu);
    return rcode < 0 ? pt_seterr("snapshot: %s", rc->err) : 0;
}

int train_hook_snapshot(train_ctx *t, long step, const train_step_stats *st, void *user) {
    struct train_recover *rc = t->recover;
    const train_opts *o = &t->o;
    rc->step_s += st->step_time;
    if (o->snapshot_every > 0 && (step % o->snapshot_every == 0 || step == o->steps)) {
        ckpt_manifest man;
        /* each rank's generation of S is whole when its take returns (ckpt_snap_commit), and
         * every step ends with a reduction over the world: no rank finishes step S + 1 (and
         * beats it) before every rank has started it, past its take of S. So no barrier here:
         * a heartbeat of S + 1 says every rank's generation of S is written, whatever the load
         * (tests/test_recover_mpi.sh, slow writers) */
        if (snap_manifest(t, step, &man) < 0 || worker_wait(rc) < 0) return -1;
        if (rc->mode == TAKE_OVERLAP && step != o->steps) worker_post(t, &man, 0);   /* whole before each rank's next STEP */
        else if (take_all(t, &man) < 0) return -1;
    }
    /* without the thread, after the take: a heartbeat of step S says this rank's generation of S
     * is whole and every rank's of S - 1, so a recovery repeats at most one step at K = 1. With
     * it, every rank's STEP of S waited for its take of S - 1 before that step's world sums, so
     * a heartbeat of S (any rank's) still says every rank's generation of S - 1 is whole */
    for (int r = 0; r < rc->n; r++) ckpt_snap_heartbeat(rc->snap[r], step);
    return 0;
}

/* A snapshot interval that makes sense, before the first step. */
static int check_snapshot(train_ctx *t) {
    if (t->o.snapshot_every < 0) return pt_seterr("--snapshot-every %d: give K >= 1 (a snapshot every K steps)",
                                                  t->o.snapshot_every);
    if (t->o.snapshot_peer_every < 0)
        return pt_seterr("--snapshot-peer-every %d: give N >= 1 (every N-th snapshot copied to another host), or 0 "
                         "(the default: each one within 1%% of the time's CPU)",
                         t->o.snapshot_peer_every);
    return 0;
}

/* MPI: every rank listens for peer copies, the addresses go round (a sum over the world of a
 * table each rank fills its row of: address, port, and which ranks hold the same bytes: the
 * same stage and TP rank of each replica, without --zero 1), and ckpt_snap_peer_route picks
 * where each rank's generations go: the same stage's rank of a replica on another host (sums
 * only, whole where they differ), else the first rank after it on another host (whole: the
 * next stage's, when stages span hosts). One host only: nothing to send. A collective: every
 * rank calls it alike. */
static int peer_setup(train_ctx *t, struct train_recover *rc) {
    const run_plan *pl = train_engine_plan(t->e);
    comm *w = t->o.world;
    if (!w || !pl || rc->n != 1) return 0;
    int R = run_layout_ranks(&pl->lo), me = run_exec_world_rank(rc->ex[0]), d, p, tr;
    double *v = pt_calloc((size_t)(3 * R), sizeof *v);
    uint32_t addr = 0;
    int port = 0;
    run_layout_coords(&pl->lo, me, &d, &p, &tr);
    if (ckpt_snap_peer_listen(rc->snap[0], &addr, &port) == 0) {
        v[3 * me] = addr;
        v[3 * me + 1] = port;
        v[3 * me + 2] = pl->o.D > 1 && !pl->o.zero ? p * pl->lo.tp + tr + 1 : 0;
    } else {
        fprintf(stderr, "pipetrain: warning: %s (rank %d's generations stay on its host only)\n", pt_err(), me);
    }
    int rcode = comm_allreduce_f64(w, v, (size_t)(3 * R));
    if (rcode == 0 &&
        ckpt_snap_peer_route(rc->snap[0], v, R, me, t->o.snapshot_peer_every, t->o.snapshot_every) == -2) rcode = -1;
    free(v);
    return rcode;
}

/* The worker in `mode`; TAKE_OVERLAP sets every local executor's gate first. -1 (mode
 * TAKE_NONE, no gate set) where a rank's schedule is asynchronous (an update per microbatch: its
 * take stays at the boundary) or the thread cannot start. */
static int worker_start(struct train_recover *rc, int mode) {
    for (int r = 0; mode == TAKE_OVERLAP && r < rc->n; r++)
        if (run_exec_set_step_gate(rc->ex[r], take_gate, rc) < 0) {
            while (r-- > 0) run_exec_set_step_gate(rc->ex[r], NULL, NULL);
            return -1;
        }
    rc->done = pt_calloc((size_t)rc->n, sizeof *rc->done);
    rc->mode = mode;
    if (pthread_create(&rc->wk, NULL, worker_main, rc) == 0) return 0;
    rc->mode = TAKE_NONE;
    for (int r = 0; mode == TAKE_OVERLAP && r < rc->n; r++) run_exec_set_step_gate(rc->ex[r], NULL, NULL);
    return -1;
}

int train_recover_init(train_ctx *t) {
    const train_opts *o = &t->o;
    if (check_kill_at(t) < 0) return -1;
    if (o->snapshot_every && !o->snapshot_dir)
        return pt_seterr("--snapshot-every needs --snapshot-dir DIR (memory that outlives the process, "
                         "e.g. /dev/shm/NAME; `pipetrain launch` gives one)");
    if (!o->snapshot_dir) return 0;
    if (check_snapshot(t) < 0) return -1;
    struct train_recover *rc = pt_calloc(1, sizeof *rc);
    pthread_mutex_init(&rc->mu, NULL);
    pthread_cond_init(&rc->cv, NULL);
    t->recover = rc;
    run_job *j = train_engine_job(t->e);
    rc->n = j ? run_job_local_count(j) : 1;
    rc->snap = pt_calloc((size_t)rc->n, sizeof *rc->snap);
    if (j) rc->ex = pt_calloc((size_t)rc->n, sizeof *rc->ex);
    rc->world = pt_calloc((size_t)rc->n, sizeof *rc->world);
    for (int r = 0; r < rc->n; r++) {
        if (j) rc->ex[r] = run_job_local_exec(j, r);
        rc->world[r] = j ? run_exec_world_rank(rc->ex[r]) : 0;
        ckpt_snap_mark_finished(o->snapshot_dir, rc->world[r], 0);   /* an earlier run's mark */
        if (ckpt_snap_open(&rc->snap[r], o->snapshot_dir, rc->world[r], SNAP_KEEP) < 0) return -1;
    }
    if (o->snapshot_every && j && !o->adapt && worker_start(rc, TAKE_OVERLAP) == 0) {
        /* overlapped: the takes leave the step boundary */
    } else if (o->snapshot_every && rc->n > 1 && sysconf(_SC_NPROCESSORS_ONLN) > 1) {
        rc->half = (rc->n + 1) / 2;
        worker_start(rc, TAKE_SPLIT);
    }
    return o->snapshot_every ? peer_setup(t, rc) : 0;
}

void train_recover_end(train_ctx *t) {
    struct train_recover *rc = t->recover;
    if (rc) rc->ended = 1;
    if (!rc || !t->o.snapshot_every) return;
    if (worker_wait(rc) < 0) fprintf(stderr, "warning: snapshot: %s\n", pt_err());
    ckpt_snap_stats s;
    ckpt_snap_get_stats(rc->snap[0], &s);
    if (t->root)
        printf("snapshots (rank %d of %d here): %ld taken, copies %.2f ms each (the first, making the files: "
               "%.1f ms), %ld waits for the writer (%.1f ms in all): %.2f%% of the steps' time; writer %.1f ms "
               "per generation, %.2f ms of CPU (off the compute path)\n",
               rc->ex ? run_exec_world_rank(rc->ex[0]) : 0, rc->n, s.taken,
               s.taken > 1 ? (s.copy_s - s.first_copy_s) / (double)(s.taken - 1) * 1e3 : 0,
               s.first_copy_s * 1e3, s.waits, s.wait_s * 1e3,
               rc->step_s > 0 ? (s.copy_s + s.wait_s) / rc->step_s * 100 : 0,
               s.written ? s.write_s / (double)s.written * 1e3 : 0,
               s.written ? s.write_cpu_s / (double)s.written * 1e3 : 0);
    if (t->root && rc->mode == TAKE_OVERLAP)
        printf("snapshot takes overlapped with the next step (a thread of their own; each STEP waits for its "
               "rank's): %ld of %ld STEPs waited, %.2f ms in all\n", rc->gate_waits, s.taken * rc->n,
               rc->gate_wait_s * 1e3);
    long sent = s.peer_sent + s.peer_failed;
    if (t->root && s.peer_rank >= 0)
        printf("snapshot peer copies (rank %d to rank %d, on another host): %ld sent, %ld skipped (a newer one came), "
               "%ld left out (the copy's CPU budget), %ld failed, %.1f ms and %.2f ms of CPU each; "
               "held here for others: %ld, %ld dropped, %.2f ms of CPU each (off the compute path)\n", rc->ex ? run_exec_world_rank(rc->ex[0]) : 0,
               s.peer_rank, s.peer_sent, s.peer_skipped, s.peer_thinned, s.peer_failed,
               sent ? s.peer_send_s / (double)sent * 1e3 : 0,
               sent ? s.peer_send_cpu_s / (double)sent * 1e3 : 0, s.peer_received, s.peer_dropped,
               s.peer_received + s.peer_dropped ? s.peer_recv_cpu_s / (double)(s.peer_received + s.peer_dropped) * 1e3 : 0);
    if (t->root && s.peer_sums)
        printf("snapshot peer copies to a replica (the same stage's rank): %ld of the %ld sent were sums only (it "
               "holds the same bytes), %ld sent whole after its own differed or was not there; %.1f MB of files "
               "sent\n", s.peer_sums_only, s.peer_sent, s.peer_whole_after, s.peer_payload_bytes / 1e6);
}

void train_recover_free(train_ctx *t) {
    struct train_recover *rc = t->recover;
    if (!rc) return;
    if (rc->mode != TAKE_NONE) {   /* a take still running reads the executors: let it end first */
        worker_wait(rc);
        for (int r = 0; rc->mode == TAKE_OVERLAP && r < rc->n; r++) run_exec_set_step_gate(rc->ex[r], NULL, NULL);
        pthread_mutex_lock(&rc->mu);
        rc->stop = 1;
        pthread_cond_broadcast(&rc->cv);
        pthread_mutex_unlock(&rc->mu);
        pthread_join(rc->wk, NULL);
    }
    free(rc->done);
    pthread_mutex_destroy(&rc->mu);
    pthread_cond_destroy(&rc->cv);
    for (int r = 0; r < rc->n; r++)
        if (ckpt_snap_close(rc->snap[r]) < 0) fprintf(stderr, "warning: snapshot: %s\n", pt_err());
    for (int r = 0; r < rc->n && rc->ended; r++)   /* launch: only the transport's end is left */
        ckpt_snap_mark_finished(t->o.snapshot_dir, rc->world[r], 1);
    free(rc->world);
    free(rc->snap);
    free(rc->ex);
    free(rc);
    t->recover = NULL;
}
