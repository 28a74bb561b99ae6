/* Internal to run/: the job's state (struct run_job), shared by run_job.c (set-up, iterations,
 * timeline, profile) and run_job_save.c (gathering the model to the root, checkpoints). Not a
 * public header: other modules use run/run.h. */
#ifndef PT_RUN_RUN_JOB_INT_H
#define PT_RUN_RUN_JOB_INT_H
#include "run/executor.h"
#include "run/run.h"
#include "run/run_link.h"
#include <stdatomic.h>

typedef struct { int iter; double dur; } job_sample;
typedef struct { job_sample *v; int n, cap; } job_samples;

struct run_job {
    const run_plan *pl;
    const sched *s;                  /* the schedule in force: pl->s, or own after a replan */
    sched *own;                      /* the schedule run_job_replan switched to (owned), or NULL */
    int share_tl;                    /* every rank gets the merged timeline (run_job_share_timeline) */
    int R, n_local, mpi;             /* world size, ranks in this process, MPI mode */
    int wrapped;                     /* MPI: comms[0] is a faulty wrapper of the caller's world */
    comm *world;                     /* MPI: the caller's world (not owned); NULL: threads */
    const run_source *const *src;    /* [n_local] each rank's source, during init only */
    run_mem *mem;                    /* [R] what each world rank holds */
    comm **comms;                    /* [n_local]; MPI: the caller's world (not owned) */
    run_exec **ex;                   /* [n_local] */
    run_exec_stats *rst;             /* [n_local] */
    char **errs;                     /* [n_local] error of each rank thread */
    atomic_int first_fail;
    timeline tl;                     /* merged events of the last iteration (root) */
    double *clock;                   /* [R] MPI: each world rank's clock ahead of rank 0's, seconds
                                      * (comm_clock_offsets at init); NULL: one clock (threads) */
    int tl_linked, n_iters;
    size_t act_max;                  /* largest activation storage of any rank, bytes */
    job_samples *prof;               /* [S*5 + 1] F, B, W, BW, REDUCE per stage; STEP (root) */
    /* arguments of the call the rank threads run */
    const int *tok, *tgt;
    const optim_config *oc;
    int t;
    gpt_model *gather_out;           /* run_job_gather under tensor parallelism (root) */
    const run_job *move_from;        /* run_job_resplit: the job moved from, */
    const run_source_reqs *move_want;   /* and each local rank's requests */
    const char *save_tmp;            /* run_job_save under tensor parallelism: the folder, */
    const ckpt_manifest *save_man;   /* and its layout */
    run_links links;                 /* the pipeline links as measured (run/run_link.h) */
    int probe_phase;                 /* the start probe's phase the rank threads run */
};

/* Runs fn(j, r) for every local rank r (threads: one thread each, joined; MPI: this process's
 * one rank), and returns 0, or -1 with the first failing rank's error. */
typedef int (*run_job_fn)(run_job *j, int r);
int run_job_run_all(run_job *j, run_job_fn fn);
/* The world rank of local rank r. */
int run_job_world_rank(const run_job *j, int r);

#endif
