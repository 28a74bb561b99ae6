/* The supervisor behind `pipetrain launch`: starts a training job (one process with rank
 * threads, or `mpirun -np N` of processes), watches it (the process's exit, each rank's heartbeat
 * file in the snapshot folder, a hang past the timeout), and when it dies before its last step,
 * re-plans the layout for the hosts left (or takes a spare), restores the newest step every chunk
 * of the model can be found at (the ranks' snapshots, else the newest disk checkpoint) and starts
 * it again from there, until the run ends or the restarts run out. Each failure and recovery is
 * an event in the run's events file (the report marks them). Not here: the training itself
 * (src/train), the snapshots' format (src/ckpt/snapshot.h), flags (src/cli/cli_launch.c).
 * docs/recovery.md says what each failure costs and what is not covered. */
#ifndef PT_LAUNCH_LAUNCH_H
#define PT_LAUNCH_LAUNCH_H

typedef struct {
    const char *self;           /* the pipetrain binary the job runs (e.g. /proc/self/exe's) */
    int np;                     /* MPI processes (0: one process, the threads transport) */
    const char *hostfile;       /* mpirun's hostfile ("HOST slots=N" lines), or NULL */
    int spares;                 /* the hostfile's last `spares` hosts stand by for lost ones */
    int max_restarts;           /* restarts before giving up */
    double timeout;             /* seconds without a heartbeat advancing: a hang */
    const char *snapshot_dir;   /* where the ranks' snapshots and heartbeats go (NULL: the
                                 * train flags' --snapshot-dir, else /dev/shm/pipetrain-<pid>) */
    const char *mpirun;         /* the launcher ("mpirun") */
    char *const *mpirun_args;   /* [n_mpirun_args] passed to mpirun as they are */
    int n_mpirun_args;
    char *const *train_args;    /* [n_train_args] "train" and its flags */
    int n_train_args;
    int quiet;                  /* 1: no "launch: ..." lines on stdout */
    int recycle;                /* MPI with replicas: a dead rank's replica dropped in place, the
                                 * other replicas going on without a restart (train --recycle under
                                 * mpirun --enable-recovery; docs/recovery.md "In place"):
                                 * LAUNCH_RECYCLE_AUTO (the default: where the flags allow, at each
                                 * failure where it costs less than a restart), _ON (--recycle:
                                 * always), _OFF (--no-recycle) */
} launch_opts;

enum { LAUNCH_RECYCLE_AUTO = 0, LAUNCH_RECYCLE_ON = 1, LAUNCH_RECYCLE_OFF = 2 };

/* What a supervised run came to. */
typedef struct {
    int failures, restarts;
    long last_step;             /* the last step a heartbeat showed */
    double recover_s_max;       /* the longest time from noticing a failure to the next step */
    long lost_steps_max;        /* the most steps any recovery repeated */
    int in_place;               /* failures gone on from in place (--recycle), not restarted */
} launch_result;

/* Runs the job under supervision until it exits 0 (returns 0) or fails past max_restarts, or
 * cannot restart (returns -1 naming why: the restarts spent, no layout for the ranks left, a
 * flag the job refused at its start). *res (may be NULL) gets the counts. */
int launch_run(const launch_opts *o, launch_result *res);

#endif
