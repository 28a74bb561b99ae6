/* Going on in place after a rank dies (train --recycle; docs/recovery.md "In place"): the
 * supervisor (pipetrain launch --recycle) notices a dead rank, writes its decision to
 * <snapshot-dir>/recycle ("<n> <dead world rank>...") and sends SIGUSR1 to the ranks left. Here a
 * watcher thread reads it and breaks the MPI endpoints (comm_mpi_interrupt): the step under way
 * fails on every survivor. train_recycle_next then drops every replica that lost a rank: the
 * other replicas' ranks make a new world of themselves (comm_mpi_survivors), its rank 0 restores
 * the newest step every chunk is in a snapshot of (a stage that stepped in the failed step goes
 * back), and the same processes start the job again from it with D' replicas, each running
 * D/D' times the microbatches (the same global batch and microbatch size), a 1f1b pipeline as
 * zb-h1 (the longer pipeline's weight-gradient passes fill its bubbles). The ranks of a lost
 * replica stand by (they leave the job and end with it). */
#include "train/trainer.h"
#include "ckpt/snapshot.h"
#include "comm/comm.h"
#include "util/killat.h"
#include "util/pt.h"
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RECYCLE_MAX_DEAD 64      /* dead ranks in a decision, and replicas */
#define RECYCLE_MAX_RANKS 1024

static int wake_pipe[2] = { -1, -1 };
static char snap_dir[1024], decision_path[1100], done_path[1100], restore_dir[1100];
static int n_seen;                       /* decisions acted on */
static int dead[RECYCLE_MAX_DEAD], n_dead;   /* the last decision's dead world ranks */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void on_usr1(int sig) {
    (void)sig;
    char b = 1;
    if (write(wake_pipe[1], &b, 1) < 0) { /* nothing to do in a handler */ }
}

/* Reads the decision file: its number and dead ranks. 0, or -1 when absent or malformed. */
static int read_decision(int *num, int *d, int *nd) {
    FILE *f = fopen(decision_path, "r");
    if (!f) return -1;
    *nd = 0;
    int ok = fscanf(f, "%d", num) == 1;
    while (ok && *nd < RECYCLE_MAX_DEAD && fscanf(f, "%d", &d[*nd]) == 1) (*nd)++;
    fclose(f);
    return ok && *nd > 0 ? 0 : -1;
}

/* Waits for the supervisor's signal; a new decision breaks the endpoints. */
static void *watcher(void *arg) {
    (void)arg;
    int last = 0;
    for (;;) {
        char b;
        ssize_t n = read(wake_pipe[0], &b, 1);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return NULL;
        int num, d[RECYCLE_MAX_DEAD], nd;
        if (read_decision(&num, d, &nd) < 0 || num <= last) continue;
        last = num;
        pthread_mutex_lock(&mu);
        memcpy(dead, d, sizeof *d * (size_t)nd);
        n_dead = nd;
        pthread_mutex_unlock(&mu);
        char why[200];
        snprintf(why, sizeof why, "rank %d died (the supervisor's decision %d): going on without its replica", d[0], num);
        comm_mpi_interrupt(why);
    }
}

int train_recycle_arm(const train_opts *o) {
    const run_opts *r = &o->ro;
    if (!o->world) return pt_seterr("--recycle goes on in place over MPI only: give --transport mpi (under mpirun --enable-recovery)");
    if (r->D < 2)
        return pt_seterr("--recycle needs data-parallel replicas (--dp 2 or more): with --dp %d a lost rank's "
                         "stage has no other copy; the supervisor's restart is the way back", r->D);
    if (r->zero) return pt_seterr("--recycle with --zero 1: a lost rank held the only copy of its moment slices; drop one");
    if (r->tp > 1) return pt_seterr("--recycle with --tp %d: a TP group missing a shard cannot compute; drop one", r->tp);
    if (r->dp_sync > 1) return pt_seterr("--recycle with --dp-sync %d: the outer step's state in the snapshots is kept for "
                                         "the whole replica count, which going on in place changes; the supervisor's "
                                         "restart resumes it", r->dp_sync);
    if (o->snapshot_every <= 0 || !o->snapshot_dir)
        return pt_seterr("--recycle goes back to the newest snapshot: give --snapshot-every K and --snapshot-dir DIR");
    snprintf(snap_dir, sizeof snap_dir, "%s", o->snapshot_dir);
    snprintf(decision_path, sizeof decision_path, "%s/recycle", o->snapshot_dir);
    snprintf(done_path, sizeof done_path, "%s/recycled", o->snapshot_dir);
    if (comm_mpi_recover_arm() < 0) return -1;
    if (pipe(wake_pipe) < 0) return pt_seterr("--recycle: pipe: %s", strerror(errno));
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGUSR1, &sa, NULL) < 0) return pt_seterr("--recycle: sigaction: %s", strerror(errno));
    pthread_t th;
    if (pthread_create(&th, NULL, watcher, NULL) != 0) return pt_seterr("--recycle: cannot start the watcher thread");
    pthread_detach(th);
    return 0;
}

/* Rank 0 of the new world: the newest complete step into restore_dir, the snapshots after it
 * dropped, the decision's outcome for the supervisor. The step (> 0), or -1. */
static long restore_newest(int num, int D2) {
    ckpt_snap_found f;
    int rc = ckpt_snap_restore(snap_dir, NULL, 0, restore_dir, &f);
    if (rc <= 0) return rc == 0 ? pt_seterr("--recycle: no step is complete in the snapshots of %s", snap_dir), -1 : -1;
    ckpt_snap_reset(snap_dir, f.step);   /* the generations after it, and the old world's heartbeats */
    FILE *o = fopen(done_path, "w");
    if (o) {
        fprintf(o, "%d %ld %d\n", num, f.step, D2);
        fclose(o);
    }
    return f.step;
}

/* The ranks going on (keep[*nk], increasing: every replica without a dead rank) and their
 * replicas *D2, from the last decision; *first the dead rank it named. */
static int plan_survivors(const train_opts *o, int *keep, int *nk, int *D2, int *first) {
    int P = o->ro.P, D = o->ro.D, lost[RECYCLE_MAX_DEAD] = { 0 };
    if (P * D > RECYCLE_MAX_RANKS || D > RECYCLE_MAX_DEAD)
        return pt_seterr("--recycle: %d ranks in %d replicas: more than this build goes on with (%d, %d)", P * D, D,
                         RECYCLE_MAX_RANKS, RECYCLE_MAX_DEAD);
    pthread_mutex_lock(&mu);
    for (int i = 0; i < n_dead; i++)
        if (dead[i] >= 0 && dead[i] < P * D) lost[dead[i] / P] = 1;
    *first = n_dead ? dead[0] : -1;
    pthread_mutex_unlock(&mu);
    *nk = *D2 = 0;
    for (int d = 0; d < D; d++)
        if (!lost[d]) {
            for (int p = 0; p < P; p++) keep[(*nk)++] = d * P + p;
            (*D2)++;
        }
    return *D2 ? 0 : pt_seterr("--recycle: every replica lost a rank: nothing left to go on with");
}

int train_recycle_next(train_opts *o, int *standby) {
    *standby = 0;
    if (!o->world || !o->ro.D || comm_mpi_interrupts() == n_seen) return 0;
    n_seen = comm_mpi_interrupts();
    int D = o->ro.D, keep[RECYCLE_MAX_RANKS], nk = 0, D2 = 0, first = -1;
    if (plan_survivors(o, keep, &nk, &D2, &first) < 0) return -1;
    double t0 = pt_now();
    comm *nw = NULL;
    if (comm_mpi_survivors(keep, nk, &nw) < 0) return -1;
    if (!nw) {
        printf("rank %d: its replica lost rank %d: stands by (the job goes on with %d replica%s)\n", o->world->rank,
               first, D2, D2 == 1 ? "" : "s");
        fflush(stdout);
        *standby = 1;
        return 1;
    }
    snprintf(restore_dir, sizeof restore_dir, "%s/recycle-restore-%d", snap_dir, n_seen);
    double step = nw->rank == 0 ? (double)restore_newest(n_seen, D2) : 0;
    if (comm_allreduce_f64(nw, &step, 1) < 0) return -1;
    if (step <= 0) return pt_adderr("--recycle: rank 0 of the survivors could not restore: ");
    if (o->ro.M > 0 && (o->ro.M * D) % D2 == 0) o->ro.M = o->ro.M * D / D2;   /* the lost replicas' microbatches */
    /* into the bubbles: a 1f1b pipeline's weight-gradient passes deferred into its idle slots
     * (zb-h1: the same peak of activations, the same sums in the same order) */
    if (o->ro.schedule && !strcmp(o->ro.schedule, "1f1b") && o->ro.P > 1) o->ro.schedule = "zb-h1";
    o->ro.D = D2;
    o->world = nw;
    o->resume = restore_dir;
    o->init = NULL;
    pt_killat_renumber(keep, nk);   /* --kill-at named the old world's ranks */
    if (nw->rank == 0) {
        printf("recycle: rank %d lost; going on in place with %d stages x %d replicas (%d microbatches each, %s) "
               "from step %ld (%.2f s to agree and restore)\n", first, o->ro.P, D2, o->ro.M,
               o->ro.schedule ? o->ro.schedule : "its schedule file", (long)step, pt_now() - t0);
        fflush(stdout);
    }
    return 1;
}
