/* The pipelined job: a plan (schedule + layer split + microbatching, checked up front) and a job
 * that runs iterations of it on every rank, as threads of this process or as one MPI process per
 * rank. This is an engine: the training loop around it (data, logging, checkpoints) is the
 * trainer's (src/train/trainer.h).
 * Not here: the per-rank action walk (run/executor.h), transports (comm/).
 *
 * Legend: P pipeline ranks, D replicas, tp tensor-parallel ranks per (replica, pipeline rank),
 * S stages, K chunks per pipe, M microbatches,
 * B global batch (sequences per step), T time, b = B/(D*M) rows per microbatch. */
#ifndef PT_RUN_RUN_H
#define PT_RUN_RUN_H
#include "comm/comm.h"
#include <stdbool.h>
#include "model/gpt.h"
#include "run/layout.h"
#include "sched/sched.h"
#include "sim/sim.h"
#include "trace/timeline.h"
#include "ckpt/checkpoint.h"
#include "optim/optim.h"
#include "run/executor.h"
#include "run/run_link.h"

typedef struct {
    int P, D;                   /* --stages, --dp */
    int tp;                     /* --tp: tensor-parallel ranks sharing each stage's layers
                                 * (0 or 1: none); world = D x P x tp (docs/runtime.md) */
    const char *schedule;       /* generator name (NULL when schedule_file is given) */
    const char *schedule_file;  /* CSV schedule, or NULL */
    int pipes;                  /* pipes of the CSV schedule (0: 1; chimera: 2) */
    int chunks;                 /* --chunks (0: the generator's default) */
    int M;                      /* --microbatches (0 with a file: the file's count) */
    int seq_chunks;             /* --seq-chunks K (0 or 1: none): each microbatch's sequences run
                                 * as K chunks, the schedule's units (sched.seq_chunks; 1f1b and
                                 * zb-h1; not with recompute, --sp, --tp-overlap) */
    const int *split;           /* [n_split] blocks per chunk (--split 3,5,4,4), or NULL for even;
                                 * read by run_plan_init only (the caller keeps it) */
    int n_split;
    bool recompute;             /* drop activations after F, recompute them at B */
    bool tp_overlap;            /* --tp-overlap (tp > 1): each sharded block's all-reduces in
                                 * flight while the other half of its microbatch computes */
    bool tp_sp;                 /* --sp (tp > 1): sequence parallelism (gpt_set_tp_sp): the
                                 * activation stream between layers and stages split by rows over
                                 * each TP group; not with tp_overlap */
    bool tp_recompute;          /* --tp-recompute (tp > 1): layers keep gpt_layer_keep_floats
                                 * from F to B and rebuild the rest before B, no collective */
    int zero;                   /* --zero: 0, or 1: AdamW moments and update split over each
                                 * reduction group (ZeRO-1; docs/runtime.md) */
    bool balance_memory;        /* --balance-memory: heavy stages lend stashed activations to
                                 * lighter ranks (run_exec_cfg.balance_memory; docs/longseq.md) */
    bool no_overlap;            /* --no-overlap: reduce at the rank's last REDUCE_GRAD, not at
                                 * each stage's last W (the same numbers) */
    size_t bucket;              /* floats per gradient-reduction bucket (0: the default) */
    int wire;                   /* --wire: how activations and gradients cross stage boundaries
                                 * (pt_wire of util/half.h: 0 fp32, 1 bf16, 2 fp16; lossy when
                                 * not 0, compute stays fp32) */
    double timeout;             /* seconds a receive or collective may wait (<= 0: 60) */
    int async_fix;              /* --async-fix (optim/async_fix.h; 0 none): asynchronous only */
    bool async_fix_default;     /* async_fix is the schedule's default (async_fix_default), not
                                 * given: the run's header says so */
    bool defer_tie;             /* --defer-tie (pipedream): tied tensors' sums applied K updates
                                 * later (K: stage 0's admission), in the background (run_exec_cfg.defer_tie) */
    int async_depth;            /* --async-depth D (pipedream, 2bw): each stage admits max(P-g, D)
                                 * forwards before its first backward (sched_params; 0: P-g) */
    int async_window;           /* --async-window W (generated pipedream, 2bw; 0 or 1: one step):
                                 * an iteration runs W steps as one continuous stream of W x M
                                 * microbatches (the schedule's; the plan's B is W x the given
                                 * batch), each STEP still the update of its step (lr, index),
                                 * the loss reported per step (run_stats.win_loss) */
    const char *transport;      /* threads mode: the in-process transport of the job's endpoints,
                                 * a name of the registry (comm_transport_find; NULL: threads) */
    /* Test hook (threads mode): world rank fail_rank dies after fail_after sends (0: never),
     * through comm_faulty_wrap. */
    int fail_rank, fail_after;
    /* Side work in the ranks' waits (run_exec_cfg.on_wait; NULL: none). Called on the rank's
     * thread (threads mode) or process (MPI). */
    run_wait_fn on_wait;
    void *wait_user;
    /* Fault injection, simulate's syntax over steps (docs/stragglers.md): --slow-link
     * "I-J:SECONDS[@FROM-TO]" (world ranks I, J: pipeline neighbours in one replica, or the same
     * pipeline rank of two replicas) and --slow-stage "I:FACTOR[@FROM-TO]" (stage I). Read by
     * run_plan_init only (the caller keeps them). */
    const char *const *slow_link, *const *slow_stage;
    int n_slow_link, n_slow_stage;
    /* --dp-sync H (0 or 1: plain data parallelism), --outer-lr, --outer-momentum: replicas that
     * average their change every H steps (run_exec_cfg.dp_sync; docs/async.md) */
    int dp_sync;
    double outer_lr, outer_momentum;
} run_opts;

typedef struct {
    run_opts o;
    sched *s;                   /* lowered and validated, owned */
    run_layout lo;
    int B, T, mb_rows;          /* global batch, sequence, rows per microbatch (b) */
    sim_fault *faults;          /* [n_faults] parsed --slow-link / --slow-stage, windows in steps */
    int n_faults;
} run_plan;

/* Builds and checks the plan for a model config and a (B,T) batch: the schedule (generated or
 * read, lowered, validated; the file's rank count must equal P and each row must hold its stages'
 * REDUCE_GRAD and a STEP, so weights update), the layer split, B divisible by
 * D*M. Pure (no communication): every rank computes the same plan and the same error.
 * Returns 0, or -1 naming the flag at fault. Free with run_plan_free. */
int run_plan_init(run_plan *pl, const run_opts *o, const gpt_config *cfg, int B, int T);
void run_plan_free(run_plan *pl);
/* The plan pl with another layer split (blocks per chunk, split[n]; cfg: the model's): the same
 * options, schedule and faults. 0, or -1 naming what does not fit (run_layout_init's errors). */
int run_plan_resplit(run_plan *out, const run_plan *pl, const gpt_config *cfg, const int *split, int n);
/* The faults' windows against a run whose last step is last_step: one that starts after it is an
 * error naming the flag and its value. */
int run_plan_check_fault_steps(const run_plan *pl, long last_step);
/* At step t (1-based): the extra seconds of every message between world ranks a and b (the
 * active --slow-link faults, added), the bytes per second of that link, each direction (the
 * slowest active --slow-link RATE fault; 0 when none), and stage g's compute factor (the active
 * --slow-stage faults, multiplied; 1 when none). */
double run_plan_link_delay(const run_plan *pl, int a, int b, long t);
double run_plan_link_rate(const run_plan *pl, int a, int b, long t);
double run_plan_stage_factor(const run_plan *pl, int g, long t);

/* Per-iteration results, equal on every rank. */
typedef struct {
    float loss;             /* mean cross-entropy over all B*T positions */
    float win_loss[RUN_MAX_WINDOW];   /* --async-window W > 1: each step's mean loss ([0, W)) */
    double grad_norm;       /* global L2 norm before clipping */
    double clip_scale, lr;  /* factor applied, learning rate used (0 without a step) */
    double iter_time;       /* seconds from the first rank's start to the last rank's end */
    double bubble;          /* sum over ranks of idle time / (ranks * iter_time); busy = in
                             * F, B, W, BW, REDUCE_GRAD or STEP, as the simulator counts it (the
                             * union of those intervals: an overlapped reduction counts once) */
} run_stats;

typedef struct run_job run_job;

/* Starts a job: threads mode (world == NULL: P*D*tp rank threads) or MPI mode (world: this
 * process's endpoint of a world of exactly P*D*tp ranks). Each rank allocates and fills from src
 * only what it runs: its stages' layers (their parameters, gradients and AdamW moments: all of
 * them, or its shards with --zero 1; under tensor parallelism its TP shard of each tensor), tied
 * copies, activation buffers. src is read during this
 * call only. Sets OpenBLAS to one thread (process-wide: one core per rank). Collective in MPI
 * mode. -1 on a bad world size, or naming the file src could not read. */
int run_job_init_src(run_job **out, const run_plan *pl, const run_source *src, comm *world);
/* The same from a whole model in memory: init's parameters, init_opt's moments (NULL: zeros). */
int run_job_init(run_job **out, const run_plan *pl, const gpt_model *init,
                 const adamw_state *init_opt, comm *world);
void run_job_free(run_job *j);
/* *j under plan pl, another layer split of its plan (run_plan_resplit: the same ranks, transport
 * and faults): a new job whose ranks take their layers' parameters and AdamW moments (their
 * shards with --zero 1 or tensor parallelism) from the old job's ranks, rank to rank
 * (run/move.h: a rank copies what it keeps; a layer that changes rank is sent by an old holder
 * in the same replica and TP rank), no file; then the old job is freed and *j is the new one.
 * The values move as they are (bitwise); the schedule is pl's; the measured profile and
 * timeline start again. Both jobs' state is held while it runs. pl must outlive the new job,
 * the old plan this call. Collective in MPI mode (every rank, between iterations). 0, or -1
 * with *j unchanged (the old job as it was). */
int run_job_resplit(run_job **j, const run_plan *pl);
/* One iteration on batch (tokens, targets) (B,T) (every rank passes the whole batch): zeroes the
 * gradients, runs the schedule, reduces gradients, and when oc != NULL applies clipping and AdamW
 * step t (1-based; LR schedule as src/train/train.c). Asynchronous schedules (pipedream) update
 * each stage after each microbatch's backward (REDUCE_GRAD and STEP per microbatch) on the
 * gradient of that microbatch's mean loss, with the weights its forward used (weight stashing),
 * without clipping (there is no global moment to take a norm at); lr from step t, AdamW's bias
 * correction counts updates. Returns 0, or -1 with the first failing rank's error (the other
 * ranks stop within the timeout). */
int run_job_iteration(run_job *j, const int *tokens, const int *targets, const optim_config *oc,
                      int t, run_stats *st);
/* Copies every layer's parameters and gradients (replica 0, pipe 0) into out (a model of the
 * same config) on the root (threads mode, or MPI rank 0); under tensor parallelism each chunk's
 * TP shards are made whole first (run_exec_gather_stage). Collective in MPI mode. */
int run_job_gather(run_job *j, gpt_model *out);
/* Saves a checkpoint folder dir (ckpt/checkpoint.h): one file per chunk, written by the chunk's
 * holder in replica 0, pipe 0 (under tensor parallelism created by its TP rank 0 and filled in
 * place by every rank with its own shard, moments included: no gather, no moment shard files
 * then); the root begins and commits. man gives config, step, data position and seeds; the
 * layout fields are filled here. Collective in MPI mode. */
int run_job_save(run_job *j, const char *dir, const ckpt_manifest *man);
/* Asynchronous schedules (pipedream), summed over this process's ranks: out[0] backwards run,
 * out[1] backwards that did not use the weights of their forward (0 unless broken), out[2]
 * backwards whose forward's weights had been updated since (where stashing mattered). */
void run_job_stash_stats(const run_job *j, int out[3]);
/* Largest activation storage of any rank of the job, in bytes (run_exec_act_bytes). */
size_t run_job_act_bytes(const run_job *j);
/* What world rank w holds (on every rank, measured at init). */
void run_job_mem(const run_job *j, int w, run_mem *out);
/* The TP all-reduces of this process's ranks since the job started (run_tp_stats), summed over
 * them; *ranks gets how many that is (threads: every rank; MPI: 1). Local: no communication. */
void run_job_tp_stats(const run_job *j, run_tp_stats *out, int *ranks);
/* Peak resident set size so far (getrusage), bytes: *out (malloc'd, the caller frees) gets one
 * entry per process: MPI, every world rank's (collective); threads, the one process's. */
int run_job_peak_rss(run_job *j, double **out);
/* --balance-memory: seconds each world rank's actions waited on lent activations since the job
 * began (*out: [ranks], malloc'd; MPI: gathered). Collective over the job, like run_job_peak_rss. */
int run_job_lend_waits(run_job *j, double **out);
/* This process's ranks (threads: every rank of the job; MPI: one) and local rank r's executor
 * (NULL when r is out of range), for step-boundary work that reads each rank's state between
 * iterations (snapshots: run_exec_stage_state). */
int run_job_local_count(const run_job *j);
run_exec *run_job_local_exec(run_job *j, int r);
/* 1 on the rank that prints and writes files (always in threads mode, MPI world rank 0). */
int run_job_is_root(const run_job *j);
/* The last iteration's events of every rank, merged (root only, NULL elsewhere; every rank after
 * run_job_share_timeline): times in seconds from that iteration's start, send -> receive links
 * set. Owned by the job. */
const timeline *run_job_timeline(run_job *j);
/* From the next iteration on (on = 1), every rank gets the merged timeline (MPI: each rank's
 * events summed into everyone's copy by one allreduce, no root), so every rank can compute the
 * same thing from it (the straggler policy). Call on every rank. */
void run_job_share_timeline(run_job *j, int on);
/* The schedule in force (the plan's, or the last run_job_replan's). */
const sched *run_job_schedule(const run_job *j);
/* Switches to schedule s (compute-only or lowered; copied) from the next iteration on: lowered,
 * validated, checked runnable and of the same shape as the one in force (stages on the same
 * ranks, microbatches, pipes; synchronous), and (MPI) the same on every rank. Parameters, AdamW
 * moments, gradient groups and the layer split stay; activation sets follow the new peaks.
 * Collective under MPI (every rank, between iterations). Returns 0, or -1 naming what is wrong
 * (the old schedule stays in force). */
int run_job_replan(run_job *j, const sched *s);
/* Costs profiled from the iterations run so far (medians of the recorded durations, after the
 * first iteration when there was more than one), into c (sim_costs_init'ed for S stages): per
 * stage F, B, W (B and W from a fused BW split in half when only BW ran), BW, REDUCE_GRAD, and
 * STEP; links free. Root only (elsewhere c is left as it is). */
void run_job_profile(run_job *j, sim_costs *c);
/* The same with means instead of medians: what a step pays on average (on a machine shared
 * with other work a compute action has a long tail of preemptions that a median drops). */
void run_job_profile_mean(run_job *j, sim_costs *c);
/* The pipeline links as measured (run/run_link.h): the start probe's numbers on every rank, the
 * run's own messages timed on the root (every rank after run_job_share_timeline), updated after
 * each iteration; MPI only (threads: a message is a copy in memory, and one that came late came
 * late for want of a core: the probe's numbers stand). Owned by the job. */
const run_links *run_job_links(const run_job *j);
/* Bytes of one message between stages as the job sends it now (--wire: 2 per element). */
size_t run_job_msg_bytes(const run_job *j);
/* From the next iteration on, messages between stages in pt_wire format `wire` (util/half.h: 0
 * fp32, 1 bf16, 2 fp16) on this process's ranks. Every rank of the job must switch at the same
 * step boundary (MPI: each process calls it with the same value). */
void run_job_set_wire(run_job *j, int wire);

#endif
