/* One rank's executor: walks the rank's lowered action list on real layers. It holds the rank's
 * stages, each with its own partial model (its layers' parameters and gradients only, filled
 * from a run_source), AdamW moments (all of them, or with --zero 1 its shards), per (stage,
 * layer, microbatch) activations, boundary buffers, scratch, private copies of tied tensors (the
 * model's gpt_tie list: a stage holding a tie's user layer while its owner layer is on another
 * rank), and the sub-communicators for gradient reduction. Nothing in it is sized by the whole
 * model. It sees layers only through the model's kind table.
 * Not here: threads, data loading, writing files (the caller: run_job.c).
 * The files: run/exec_int.h.
 *
 * Summation order (what makes results reproducible): a stage's parameter gradients accumulate
 * (+=) in the order its W (or BW) actions run; at the reduction, a rank first adds its own copies
 * of a chunk (stage order), then the transport sums ranks in rank order. A tied tensor (wte) is
 * reduced over its owner and all copies in one group per tie. When the reduction starts (at a
 * stage's last W, or deferred) and how it is cut (buckets, --zero 1 slices) do not change a bit.
 *
 * Legend: S stages, K chunks per pipe, M microbatches, b rows per microbatch, T time, C channels. */
#ifndef PT_RUN_EXECUTOR_H
#define PT_RUN_EXECUTOR_H
#include "comm/comm.h"
#include "model/gpt.h"
#include "run/layout.h"
#include "sched/sched.h"
#include "trace/timeline.h"
#include "optim/optim.h"
#include "run/source.h"
#include "ckpt/ckpt_state.h"

typedef struct run_exec run_exec;

/* A wait the executor offers to side work (bubble harvesting: src/harvest registers the
 * callback from above; the executor knows nothing of it). The rank's next action cannot run
 * yet: a receive whose message has not arrived, or a stage's gradient reduction that waits for
 * other ranks (the end of its iteration before the others). The callee may run work on this
 * thread until it returns, asking arrived() between pieces of work and returning as soon as it
 * says 1; the executor then completes the action as it would have. */
typedef struct run_wait run_wait;
struct run_wait {
    int world_rank;
    int action;                 /* index in the rank's action list of the action that waits */
    sched_action act;           /* RECV_F / RECV_B (its message) or REDUCE_GRAD (its groups) */
    double since;               /* pt_now() when the rank reached the wait */
    /* 1 when what the action waits for is there, 0 not yet; -1 when the job failed (error set:
     * return -1 at once). Cheap: a comm_test. */
    int (*arrived)(run_wait *w);
    /* Sleeps until what the action waits for is there or `deadline` (a pt_now() time) passes,
     * in the transport's own wait (woken by the arrival itself: no spinning, no polling here).
     * 1 arrived, 0 the deadline passed first, -1 the job failed (error set). */
    int (*block)(run_wait *w, double deadline);
    /* Records side work of task `task` over [t0, t1] (pt_now times) that received cpu_s seconds
     * of CPU, in the rank's timeline, on its own stream (TL_SIDE); woke: when block() returned
     * with the arrival during it (0: none). */
    void (*record)(run_wait *w, int task, double t0, double t1, double cpu_s, double woke);
    void *priv;                 /* the executor's */
};
/* Returns 0, or -1 when arrived() said -1 (the error stays set). */
typedef int (*run_wait_fn)(void *user, run_wait *w);

typedef struct {
    const sched *s;            /* lowered, validated; not owned */
    const run_layout *lo;      /* not owned */
    int world_rank;            /* w = (d*P + p)*tp + t (run_layout_world_rank) */
    comm *world;               /* this rank's endpoint; not owned */
    const run_source *src;     /* starting parameters and moments, read during init only */
    int B, T;                  /* global batch, sequence length */
    int mb_rows;               /* b = B / (D*M) */
    double timeout;            /* seconds a receive may wait */
    int recompute;             /* drop activations after F, recompute them at B */
    int tp_overlap;            /* sharded blocks overlap their all-reduces (gpt_set_tp_overlap) */
    int tp_sp;                 /* sequence parallelism (gpt_set_tp_sp): the stream's buffers and
                                * messages are this TP rank's rows, and the tp_sum gradients are
                                * summed over the TP group at each stage's last W */
    int tp_recompute;          /* communication-free recomputation: each layer keeps its
                                * gpt_layer_keep_floats from F to B and gpt_layer_recompute
                                * rebuilds the rest before B (not with recompute) */
    int zero;                  /* 1: AdamW moments and update split over each reduction group */
    int overlap;               /* a stage's reduction starts at its last W (else at the rank's
                                * last REDUCE_GRAD): the same numbers either way */
    size_t bucket;             /* floats per reduction bucket (0: RUN_BUCKET_DEFAULT) */
    int async_fix;             /* asynchronous schedules: the correction (optim/async_fix.h) */
    int defer_tie;             /* pipedream: a tied tensor's holders sum microbatch k's gradient in
                                * the background and apply it P updates later (run/exec_tie_lag.c) */
    int tie_owner;             /* pipedream: a tied tensor updated by its first holder, the other
                                * copies refreshed K updates late (run/exec_tie_owner.c) */
    int window;                /* asynchronous: steps an iteration holds (run_opts.async_window;
                                * 0 or 1: one); iteration t's k-th STEP is step t + (k-1)/(STEPs a step) */
    int wire;                  /* messages between stages in pt_wire format w (0: fp32 as
                                * computed; bf16 or fp16: packed at the send, unpacked at the
                                * receive, round to nearest even) */
    int balance_memory;        /* --balance-memory: layers of heavy stages keep fewer activation
                                * buffers and lend microbatches to a lighter rank between their F
                                * and their backward (sched/sched_lend.h; the same numbers) */
    run_wait_fn on_wait;       /* side work in this rank's waits (NULL: it just waits) */
    void *wait_user;           /* on_wait's first argument */
    int dp_sync;               /* --dp-sync H: 0 or 1, gradients reduced over the replicas every
                                * step; H > 1 (DiLoCo, run/exec_outer.c): each replica steps on
                                * its own gradients, and at every H-th step (and the last) the
                                * replicas average their change since the last sync and take an
                                * outer Nesterov step (optim/outer.h); synchronous schedules */
    double outer_lr, outer_momentum;   /* that step's learning rate and momentum */
} run_exec_cfg;

#define RUN_BUCKET_DEFAULT ((size_t)1 << 22)   /* 16 MB of fp32 gradients per collective */

/* What a rank holds, in bytes. */
typedef struct {
    double params;             /* its stages' parameters and tied copies */
    double grads;              /* their gradients */
    double optim;              /* AdamW moments (its shards with --zero 1) */
    double acts;               /* activation sets, boundary buffers, scratch, weight stashes */
    double act_sets;           /* the activation sets within acts (the schedule's peak in flight) */
    double act_mb;             /* one microbatch's activation set (what one more in flight costs) */
    double lent;               /* --balance-memory: act_sets it would hold more without lending */
    double borrowed;           /* --balance-memory: buffers it keeps for others' lent activations
                                * (within acts) */
    double parts;              /* --balance-memory: of the acts it lends, the least part sent away,
                                * in 16ths (sched_lend.h's LEND_PARTS; 16: whole; 0: lends none) */
    double pass_mb;            /* within acts: what each microbatch of the schedule holds for the
                                * whole pass, in flight or not (its boundary buffers, its loss,
                                * pipedream's stash), x the schedule's n_mb: --async-window W
                                * runs W x M of them (train/train_memlimit.c) */
} run_mem;

/* A rank's tensor-parallel collectives (the ones its layers call through gpt_tp: all-reduces,
 * and under --sp reduce-scatters and all-gathers), since init: how many, their floats (each
 * call's whole buffer), and the seconds the rank spent inside them (a blocking one: the whole
 * call; an overlapped one: its wait, the part compute did not hide). All zero at tp 1. Not
 * counted: --sp's sum of the layer norms' gradients at the step. */
typedef struct {
    long calls;
    double floats, seconds;
} run_tp_stats;

#define RUN_MAX_WINDOW 64   /* steps one iteration may hold (--async-window) */

/* Iteration results on this rank: partial sums before the world reduction. */
typedef struct {
    float loss;                /* mean loss over all positions (after the world reduction) */
    double grad_norm, clip_scale, lr;
    float win_loss[RUN_MAX_WINDOW];   /* window > 1: each step's mean loss (after the reduction) */
} run_exec_stats;

/* Allocates the rank's state, fills its stages and tied copies from cfg->src, and splits the
 * reduction communicators: collective over world (every rank calls it, in any order relative to
 * other work). Returns 0 or -1. */
int run_exec_init(run_exec **out, const run_exec_cfg *cfg);
void run_exec_free(run_exec *e);
/* Runs one iteration on the global batch (tokens, targets) (B,T): zeroes this rank's gradient
 * spans, walks the action list, reduces gradients (at the rank's last REDUCE_GRAD), and at STEP
 * (when oc != NULL) clips and applies AdamW step t. Every rank of the world must call it.
 * Returns 0 or -1; on -1 the caller should comm_abort so the other ranks stop. */
int run_exec_iteration(run_exec *e, const int *tokens, const int *targets, const optim_config *oc,
                       int t, run_exec_stats *st);
/* Asynchronous schedules, the direct check of weight stashing, since init: out[0] backwards run,
 * out[1] backwards whose weights differed from those their F used (a bug if > 0), out[2]
 * backwards whose F's weights differed from the current ones (stashing mattered). */
void run_exec_stash_stats(const run_exec *e, int out[3]);
/* Bytes of activation storage this rank holds: per stage, the schedule's peak number of
 * microbatches in flight (from F, or recomputing from B, until W), plus (recomputing) one set
 * for a forward; with --tp-recompute, each layer's kept prefix for the peak from F to W, whole
 * sets only from a lone B to its W, and one act of the rank's largest layer (its work buffer). */
size_t run_exec_act_bytes(const run_exec *e);
/* --balance-memory: seconds this rank's actions waited on lent activations since init (a lend's
 * send or a fetch not done when needed, or serving a partner before the reduction); 0 without. */
double run_exec_lend_wait(const run_exec *e);
/* This iteration's events (times from pt_now; iter 0). Owned by the executor. */
const timeline *run_exec_timeline(const run_exec *e);
/* What this rank holds (allocated by init, the same for the whole run). */
void run_exec_mem(const run_exec *e, run_mem *out);
/* From the next iteration on, runs schedule s (not owned: it must outlive its use), which must
 * have the shape of the one in force (stages on the same ranks, microbatches, synchronous): the
 * activation sets follow its peaks; parameters, moments and gradient groups stay. Between
 * iterations only. Returns 0. */
int run_exec_replan(run_exec *e, const sched *s);
/* From the next iteration on, messages between stages go in pt_wire format `wire` (0 fp32, 1 bf16,
 * 2 fp16). Every rank of the job must switch at the same step boundary (a receiver reads the
 * sender's format). Between iterations only. */
void run_exec_set_wire(run_exec *e, int wire);
/* Bytes of one message between stages as sent now (the stream of a microbatch, 4 or 2 per element). */
size_t run_exec_msg_bytes(const run_exec *e);
/* Fault injection (--slow-stage): from the next action on, each compute action of stage g (if
 * this rank runs it) takes k times as long (k >= 1; the rank sleeps out the extra after the
 * compute, so the numbers are the same). */
void run_exec_set_slowdown(run_exec *e, int g, double k);
/* Stage g's model on this rank (its layers' parameters and gradients), or NULL. */
const gpt_model *run_exec_stage_model(const run_exec *e, int g);
/* The model of this rank's first stage (every rank holds one): the config and tensor table. */
const gpt_model *run_exec_first_model(const run_exec *e);
/* A gate before every update: gate(user, world rank) runs at the start of each STEP of a
 * synchronous schedule, before the step's reductions (so a rank past step S's world sums knows
 * every rank has passed its gate of S); < 0 fails the step with the gate's error. NULL removes
 * it. Returns -1 (nothing set) for an asynchronous schedule, whose updates follow every
 * microbatch. Between iterations only. */
int run_exec_set_step_gate(run_exec *e, int (*gate)(void *user, int world_rank), void *user);
/* The world rank this executor runs. */
int run_exec_world_rank(const run_exec *e);
/* Stage g's state as it is between iterations, for a copy (snapshots): its model, its AdamW
 * state laid out like the model's parameters (NULL when the rank holds none whole: --zero 1),
 * its chunk and layer range [first, end). -1 when stage g is not on this rank. */
int run_exec_stage_state(const run_exec *e, int g, const gpt_model **m, const adamw_state **opt,
                         int *chunk, int *first, int *end);
/* Checkpoint writes (ckpt/checkpoint.h) into tmpdir: stage g's chunk file (parameters, and with
 * --zero 0 its moments); and with --zero 1 this rank's file of moment shards. Read the state
 * only: any rank may write while the others do. */
int run_exec_write_chunk(const run_exec *e, const char *tmpdir, int g);
int run_exec_write_shards(const run_exec *e, const char *tmpdir);
/* The AdamW moments this rank saves, as slices of tensors as it holds them (under tensor
 * parallelism start and n index its TP shard): g >= 0 (--zero 0), all of stage g's (the chunk's
 * home: the holder in pipe 0), one slice per tensor; g < 0 (--zero 1), every slice this rank
 * updates, of every reduction group. *out (malloc'd, the caller frees) points into the state:
 * read it before the next iteration. Returns the count, or -1 (a stage without its moments). */
int run_exec_moment_slices(const run_exec *e, int g, ckpt_slice **out);
/* This rank's own state beyond the chunk files (ckpt/ckpt_state.h): 2bw's older weight version,
 * --async-fix pipemare's velocity or predict's last step and the update count; with --dp-sync
 * H > 1 theta_start, the outer momentum, a posted change's base, and the replica's own weights
 * and moments (replicas differ inside an H-cycle). As it is between iterations, after step
 * `step`. Returns 1 with *out (allocated, free it; it points into the state: read it before
 * the next iteration), or 0 when the job keeps none (synchronous, pipedream's stashing: *out
 * NULL). Every rank of a job answers alike. */
int run_exec_rank_state(run_exec *e, long step, ckpt_state **out);
/* That state as tmpdir's state-<world rank>.safetensors. 1 written, 0 none kept, -1 naming the
 * file. */
int run_exec_write_rank_state(run_exec *e, const char *tmpdir, long step);
/* A piece of a rank's state: n floats of tensor `param` from element `start` (indices of its TP
 * shard), its parameters w, or (moments) its AdamW moments m and v. Points into the state. */
typedef struct {
    int param, moments;
    size_t start, n;
    const float *w, *m, *v;
} run_piece;
/* What a job of another layer split starts from on this rank (run/move.h): every moment slice
 * it updates, of every reduction group (with --zero 0 the groups' whole moments), then each of
 * its stages' tensors' parameters. *out (malloc'd, the caller frees) points into the state:
 * read it before the next iteration. Returns the count. */
int run_exec_pieces(const run_exec *e, run_piece **out);
/* Tensor parallelism, for a file of whole tensors (the gradient file; checkpoints write shards
 * in place instead): stage g's layers whole on TP rank 0 of this rank's TP group, from every TP
 * rank's shards (gathered tensor by tensor: no rank holds more than one whole tensor besides
 * `whole`). Collective over the TP group: its ranks call it with the same g and grads, in the
 * same order. whole (TP rank 0; NULL elsewhere): a model of stage g's layers at tp 1
 * (gpt_init_layers); its params are filled, and with grads its grads. At tp 1 a copy. 0, or -1. */
int run_exec_gather_stage(run_exec *e, int g, int grads, gpt_model *whole);
/* This rank's TP all-reduces since init (run_tp_stats). */
void run_exec_tp_stats(const run_exec *e, run_tp_stats *out);
/* This rank's replica, pipeline rank and TP rank. */
void run_exec_coords(const run_exec *e, int *d, int *p, int *t);

#endif
