/* The planner: per-layer costs (analytic model or profiled on this machine), cluster descriptions,
 * the exact min-max layer split, the search over D x P x microbatching x schedule x split x
 * recompute judged by the simulator, and plan files. Not here: running a plan (run/), the
 * simulator itself (sim/), schedule generators (sched/). Formats: docs/planner.md.
 *
 * Legend: L blocks, B microbatch size, T sequence, C channels, V vocab, P pipeline ranks,
 * D data-parallel replicas, M microbatches per replica, v chunks per rank, K = P * v chunks,
 * tp tensor-parallel ranks per pipeline rank (world = tp x D x P devices).
 * Times in seconds, memory in bytes, compute in FLOPs. */
#ifndef PT_PLAN_H
#define PT_PLAN_H
#include "model/gpt.h"
#include "sched/sched.h"
#include "sim/sim.h"
#include <stdbool.h>

/* ---- per-layer costs ------------------------------------------------------------------------ */
/* Layer kinds and their costs are the model's (model/gpt.h's kind table); the planner names them. */
typedef enum { PLAN_EMBED = GPT_LAYER_EMBED, PLAN_BLOCK = GPT_LAYER_BLOCK, PLAN_HEAD = GPT_LAYER_HEAD,
               PLAN_N_KINDS = GPT_N_LAYER_KINDS } plan_kind;
typedef enum { PLAN_F, PLAN_B, PLAN_W, PLAN_N_PHASES } plan_phase;

/* One layer on one microbatch of B x T tokens: FLOPs per phase (indexed by plan_phase), bytes. */
typedef gpt_layer_cost plan_layer_cost;

/* Analytic cost of one layer kind on one of tp tensor-parallel ranks (docs/planner.md for the FLOP
 * formulas; tp 1: no TP). B, T, tp >= 1. */
void plan_layer_model(const gpt_config *cfg, plan_kind kind, int B, int T, int tp, plan_layer_cost *out);
/* The same with sequence parallelism (sp: the kind's cost_sp row, gpt_kind_cost; at tp 1 or sp
 * false it is plan_layer_model's row). */
void plan_layer_model_sp(const gpt_config *cfg, plan_kind kind, int B, int T, int tp, bool sp, plan_layer_cost *out);
/* A cost row's collectives of one phase by how they cross the link (docs/tensor-parallel.md
 * "Sequence parallelism in the cost model"): all-reduces (ar_*) and reduce-scatters /
 * all-gathers (sg_*), payload bytes and counts. Without sp every collective is an all-reduce.
 * Under sp (tp >= 2) every collective of the cost_sp rows is a reduce-scatter or all-gather of
 * the whole (N,C) buffer, but the head's per-token all-reduces in F (the non-sp row's F
 * collectives, which sp leaves as they are). */
typedef struct {
    double ar_bytes, sg_bytes;
    int ar_coll, sg_coll;
} plan_tp_parts;
void plan_tp_parts_of(const gpt_config *cfg, plan_kind kind, int B, int T, int tp, bool sp, plan_phase ph,
                      plan_tp_parts *out);
/* Seconds of those on a ring of tp ranks over (bw, lat): sim_allreduce_time of the all-reduces +
 * sim_rsag_time of the reduce-scatters and all-gathers. */
double plan_tp_parts_time(const plan_tp_parts *pt, int tp, double bw, double lat);
/* Layer-norm gradient bytes one rank all-reduces over its TP group once per step per block under
 * sp (ln_1 and ln_2 weight and bias, gpt_param_info.tp_sum: 4C floats); 0 without sp or at tp 1. */
double plan_sp_ln_bytes(const gpt_config *cfg, int tp, bool sp);
/* Seconds of a layer's TP all-reduces in phase ph on a group of tp ranks over a link of bw bytes/s
 * and lat s (sim_allreduce_time of its tp_bytes and tp_collectives; 0 at tp 1 and in W). */
double plan_tp_time(const plan_layer_cost *c, plan_phase ph, int tp, double bw, double lat);
/* Overlap (--tp-overlap, docs/tensor-parallel.md "Overlap in the cost model"): a block's phase
 * runs as two halves of the microbatch in ping-pong, each all-reduce split in two half-sums, one in
 * flight while the other half computes. plan_tp_block_pieces: the FLOPs of phase ph (F or B) of
 * the whole microbatch before its first all-reduce (piece[0]) and between the two (piece[1]), from
 * the block's cost row: F = [ln_1, c_attn, attention, attn.c_proj: a third of the matmuls +
 * attention] then [c_fc, mlp.c_proj: two thirds]; B the reverse ([the MLP's], then [the
 * attention's]). W and other kinds: zeros. */
void plan_tp_block_pieces(const plan_layer_cost *blk, plan_phase ph, double piece[2]);
/* Exposed seconds of one phase's ping-pong on one link (the half-sums queue on it), given one
 * half-sum's time `half` and one half's compute c0 (before the first sum) and c1 (between):
 * max(0, half - c0) + 2 max(0, half - c1) + half. The last half-sum is always exposed. */
double plan_tp_overlap_exposed(double half, double c0, double c1);
/* Bytes sent between consecutive layers per microbatch: B*T*C*4 (per TP rank: under sp each rank
 * sends its N/tp rows, plan_p2p_bytes / tp). */
double plan_p2p_bytes(const gpt_config *cfg, int B, int T);

/* Profiled costs of this machine (the costs file). rate = model FLOPs / measured seconds. */
#define PLAN_MAX_BATCHES 8
typedef struct {
    gpt_config cfg;
    int T;                                    /* sequence length profiled */
    int repeats;                              /* timed repeats per median */
    int n_batch;                              /* microbatch sizes measured */
    int batch[PLAN_MAX_BATCHES];
    double sec[PLAN_MAX_BATCHES][PLAN_N_KINDS][PLAN_N_PHASES];   /* median seconds */
    double step_per_param;                    /* seconds per parameter of the optimizer step (the
                                               * gradient norm, AdamW, zeroing); 0: not measured */
    int busy_cores;                           /* other cores running the same layer meanwhile */
} plan_costs;

/* Measures F, B, W of the embedding, one block and the head for each microbatch size in
 * batch[n_batch] at sequence T, and the optimizer step per parameter: `repeats` timed runs after
 * one warm-up, medians, one BLAS thread (restored after), every other online core running the
 * same layer meanwhile (busy_cores of them; each its own copy). Allocates a one-block model of cfg
 * (blocks are identical) per core. Returns 0, or -1 with an error. */
int plan_profile_run(plan_costs *out, const gpt_config *cfg, const int *batch, int n_batch, int T,
                     int repeats);
/* Writes / reads the costs JSON (docs/planner.md). Errors name the file and field. */
int plan_costs_save(const plan_costs *c, const char *path);
/* The costs JSON as a malloc'd string (caller frees), or NULL with an error. */
char *plan_costs_to_json(const plan_costs *c);
int plan_costs_load(plan_costs *c, const char *path);
/* Achieved FLOP/s of (kind, phase) at the measured size nearest to B (0 when not measured). */
double plan_costs_rate(const plan_costs *c, plan_kind kind, plan_phase ph, int B);

/* ---- a rank's memory ------------------------------------------------------------------------ */
/* One pipeline rank's memory, the planner's and train --adapt's model (bytes). */
typedef struct {
    double fixed;   /* held whatever the schedule: parameters, gradients, AdamW moments, buffers */
    double act;     /* one microbatch's activations, held from its F to its last backward */
    double extra;   /* held besides while a microbatch is in its backward (recomputation) */
    /* Sequence chunks (K > 1): `held` counts units (chunks; act is one chunk's) and each
     * microbatch they belong to keeps kv bytes (its keys and values): at most ceil((held-1)/K) + 1
     * microbatches. K 0 or 1: none. */
    double kv;
    int K;
} plan_mem_model;
/* Bytes a rank of model m needs holding `held` microbatches (units): fixed + held * act + extra
 * (+ the kept keys and values of their microbatches). */
double plan_mem_need(const plan_mem_model *m, double held);
/* The most microbatches (0..cap) a rank of model m can hold in `have` bytes (plan_mem_need <=
 * have; cap when act is 0), or -1 when not even its fixed part fits. */
int plan_mem_held_max(const plan_mem_model *m, double have, int cap);

/* ---- cluster --------------------------------------------------------------------------------- */
typedef struct {
    char name[32];
    double rate;        /* achieved FLOP/s (flops * efficiency), or 0 when given as speed */
    double speed;       /* relative speed (1 = the profiled device), or 0 when given as flops */
    double memory;      /* bytes */
    int node;           /* node index */
    int cls;            /* device class: same name, rate, speed and memory */
} plan_device;

typedef struct {
    int n_nodes, n_devices, n_classes;
    plan_device *dev;                 /* [n_devices] node-major */
    double *intra_bw, *intra_lat;     /* [n_nodes] link inside each node */
    double inter_bw, inter_lat;       /* between nodes */
    double reference_flops;           /* FLOP/s of speed 1 when no costs file is given */
} plan_cluster;

/* The link a TP group of devices dev[n] (cluster indices) all-reduces over: its node's link when
 * all n share a node, else the network (the slowest hop of a ring that leaves a node). */
void plan_cluster_group_link(const plan_cluster *k, const int *dev, int n, double *bw, double *lat);
/* Whether tp consecutive devices (file order) always share a node: tp divides every node's
 * device count. */
bool plan_cluster_tp_fits_nodes(const plan_cluster *k, int tp);

/* Parses a cluster JSON file (schema in docs/planner.md). Errors name the file and field:
 * "k.json: nodes[3].devices.memory must be a positive number". */
int plan_cluster_load(plan_cluster *c, const char *path);
/* The same from text; `where` names the source in errors. */
int plan_cluster_parse(plan_cluster *c, const char *text, const char *where);
void plan_cluster_free(plan_cluster *c);

/* ---- the exact split ------------------------------------------------------------------------- */
/* A chain of n items (layers, in order) onto K stages (in order), each stage >= 1 item.
 * Stage k holding items [i, j) takes sum work / speed[k] (+ sum extra[k*n + i..j)) and needs
 * sum mem_fixed + inflight[k] * sum mem_act + mem_extra[k] bytes <= cap[k]. */
typedef struct {
    int n, K;
    const double *work, *mem_fixed, *mem_act;  /* [n], all >= 0 */
    const double *speed, *cap, *inflight;      /* [K]; cap <= 0 means unlimited */
    const double *mem_extra;                   /* [K] or NULL */
    const double *extra;                       /* [K*n] or NULL: seconds item i adds on stage k
                                                * (extra[k*n + i]) besides work / speed[k]: its
                                                * tensor-parallel all-reduces on k's group link */
} plan_chain;

/* Minimises the largest stage time subject to the memory caps, exactly: bisection on the
 * bottleneck with an exact O(K n) feasibility check (reachability of cut positions), then
 * stepping down through achieved bottlenecks until the next lower one is infeasible.
 * first[K+1] gets the item ranges; *bottleneck the optimum. Returns 0, or -1 when nothing fits
 * (no error set: the caller words it). */
int plan_split(const plan_chain *c, int *first, double *bottleneck);
/* Whether any split fits the memory caps (plan_split's test at no time limit, O(K n)): 1 or 0. */
int plan_split_fits(const plan_chain *c);
/* The same by dynamic programming, O(K n^2): the reference the tests compare plan_split with. */
int plan_split_dp(const plan_chain *c, int *first, double *bottleneck);
/* Among the splits whose stages all take <= X (pass plan_split's bottleneck): the one with the
 * least total stage time, then the most even (least sum of squares), by dynamic programming,
 * O(K n^2). Fast devices then carry all the work they can, which shortens the pipeline's fill
 * and drain. first[K+1]. Returns 0, or -1 when no split meets X. */
int plan_split_refine(const plan_chain *c, double X, int *first);

/* ---- plans ----------------------------------------------------------------------------------- */
#define PLAN_ASYNC_WINDOW_DEFAULT 4   /* train's default --async-window (train/trainer_window.c), before
                                       * it shrinks to divide --steps and the save/eval boundaries */
#define PLAN_ASYNC_WINDOW_MAX 64      /* the largest window a plan prices (train's RUN_MAX_WINDOW) */
typedef struct {
    int P, D, M, mb_size;     /* ranks, replicas, microbatches per replica, microbatch size B */
    int tp;                   /* tensor-parallel ranks per pipeline rank (0 is read as 1) */
    int zero;                 /* 1: AdamW moments split over the D replicas (ZeRO-1, train --zero 1) */
    int T;                    /* sequence length */
    char schedule[32];        /* generator name */
    int chunks;               /* v, chunks per rank */
    int K;                    /* chunks in all = P * v */
    bool recompute;           /* activation recomputation (keep block inputs, redo F before B) */
    bool tp_overlap;          /* --tp-overlap (tp >= 2): blocks' all-reduces in ping-pong with the
                               * other half microbatch's compute (no effect at microbatch size 1) */
    bool tp_recompute;        /* --tp-recompute (tp >= 2, not with recompute): blocks keep x and
                               * res2 and rebuild the rest before B with no collective */
    bool sp;                  /* --sp (tp >= 2, not with tp_overlap, tp dividing mb_size * T):
                               * sequence parallelism, the stream between layers and stages split
                               * by rows over the TP group (run_opts.tp_sp) */
    int seq_chunks;           /* --seq-chunks K (0 or 1: none): each microbatch's sequences run as K
                               * chunks, the schedule's units (1f1b, zb-h1; K dividing T; not with
                               * recompute, tp_overlap, tp_recompute, sp); stage_inflight then
                               * counts units */
    bool balance_memory;      /* --balance-memory (one chunk per rank, no recomputation): each rank
                               * holds the lend plan's activations (sched/sched_lend.h: its own kept
                               * sets plus what it keeps for others), not its stage's peak */
    int async_window;         /* asynchronous schedules: train --async-window W whose memory is priced
                               * (W x M stashes and boundary buffers: docs/async.md "The window's
                               * memory"); 0: train's default, PLAN_ASYNC_WINDOW_DEFAULT */
    char placement[16];       /* "node" or "mixed" (how devices form pipelines) */
    int *split;               /* [K] blocks per chunk ("--split" of run/layout.h) */
    int *devices;             /* [D*P*tp] cluster device of (replica d, rank p, TP rank t) at
                               * (d*P + p)*tp + t, or NULL */
    double step_time;         /* predicted seconds per optimizer step (simulator) */
    double tokens_per_s;      /* global batch * T / step_time */
    double bubble;            /* simulator's bubble fraction */
    double bound;             /* analytic lower bound on step_time used for pruning */
    double *stage_mem;        /* [K] peak bytes per chunk on one TP rank (params, grads, AdamW
                               * (/ D under zero 1), activations) */
    double *stage_time;       /* [K] F+B+W seconds per microbatch of each chunk */
    int *stage_inflight;      /* [K] peak microbatches held per chunk */
} plan_layout;

void plan_layout_free(plan_layout *p);
/* "3,5,4,4" into buf (n bytes); returns buf. */
char *plan_layout_split_str(const plan_layout *p, char *buf, int n);
/* Writes / reads a plan JSON (docs/planner.md), atomically on write. plan_read fills *out (free
 * with plan_layout_free); errors name the file and field. */
int plan_write(const plan_layout *p, const char *path);
int plan_read(const char *path, plan_layout *out);

typedef struct {
    long global_batch;        /* G sequences per optimizer step */
    int T;                    /* sequence length */
    int top;                  /* N best layouts to keep (>= 1) */
    const plan_costs *costs;  /* profiled costs, or NULL for the analytic model only */
    const char *const *schedules;  /* NULL-terminated names, or NULL for the default set */
    int max_sims;             /* candidates simulated at most (0: 400); each also gets a local search */
    bool no_recompute;        /* do not consider recomputation */
    bool no_tp_overlap;       /* do not consider tp_overlap (else tried at tp >= 2, B >= 2) */
    bool no_tp_recompute;     /* do not consider tp_recompute (else tried at tp >= 2) */
    bool no_sp;               /* do not consider sp (else tried at tp >= 2 where tp divides B*T,
                               * with every recomputation mode, never with tp_overlap) */
    int tp;                   /* only this TP degree; 0: every divisor of n_head that divides the
                               * devices and keeps each TP group inside a node (plus those that do
                               * not with tp_across_nodes) */
    bool tp_across_nodes;     /* with tp 0: also TP groups that span nodes (over the network) */
    int zero;                 /* 0, or 1: count AdamW moments / D (ZeRO-1) */
    int seq_chunks;           /* K > 1: every layout runs sequence chunks (plan_layout.seq_chunks):
                               * only the schedules that do, without recomputation, overlap or sp */
    bool balance_memory;      /* price memory with --balance-memory where a layout allows it (one
                               * stage per rank, no recomputation; plan_layout.balance_memory) */
    bool async;               /* plan --async: also search the asynchronous schedules (pipedream, 2bw;
                               * not with zero 1), their stashed weight copies priced in each
                               * chunk's memory; their step changes the math (docs/async.md) */
    int async_window;         /* their train --async-window W (0: PLAN_ASYNC_WINDOW_DEFAULT) */
    bool exhaustive;          /* tests: simulate every candidate (no max_sims, no bound, every move
                               * of the local search simulated), the reference the pruned search
                               * must match */
} plan_opts;

typedef struct {
    plan_layout *best;        /* [n_best] fastest first */
    int n_best;
    long considered, infeasible;  /* layouts (before the split's refinement), and those that do not fit */
    long candidates_simulated;    /* candidates judged by the simulator (at most max_sims) */
    long simulated;               /* simulator runs in all, local search included */
    char advice[512];         /* when n_best == 0: what would fit */
} plan_result;

/* Searches all layouts of cfg on cluster k (see docs/planner.md) and keeps the o->top fastest by
 * simulated step time. Returns 0 (n_best may be 0: then advice says what would fit), or -1 with
 * an error for bad options. Free with plan_result_free. */
int plan_search(const gpt_config *cfg, const plan_cluster *k, const plan_opts *o, plan_result *out);
void plan_result_free(plan_result *r);

/* Scores one layout (P, D, tp, zero, M, mb_size, T, schedule, chunks, recompute, tp_overlap,
 * tp_recompute, sp, split, devices
 * set; NULL devices: device (d*P + p)*tp + t) with the simulator: fills step_time, tokens_per_s,
 * bubble, stage_mem, stage_time, stage_inflight. Returns 0, or -1 with an error naming the numbers
 * (tp not dividing n_head, more devices than the cluster has, a device index outside it, a
 * schedule that does not exist for P, M). Memory caps are not checked here: stage_mem says what
 * it needs, plan_rank_memory compares it with the devices. */
int plan_evaluate(const gpt_config *cfg, const plan_cluster *k, const plan_costs *costs,
                  plan_layout *p);
/* The simulator's costs of layout p as plan_evaluate scores it (per-chunk F, B, W with the TP
 * all-reduces in F and B, messages, links, the data-parallel reduction) into out (free with
 * sim_costs_free) and its schedule into *s (free with sched_free). 0, or -1 as plan_evaluate. */
int plan_sim_costs(const gpt_config *cfg, const plan_cluster *k, const plan_costs *costs,
                   const plan_layout *p, sim_costs *out, sched **s);
/* After plan_evaluate: need[P] bytes pipeline rank p holds on each of its devices (its chunks'
 * stage_mem) and have[P] the smallest memory among them (over replicas and TP ranks). Returns how
 * many ranks need more than they have, or -1 with the schedule generator's error. */
int plan_rank_memory(const plan_cluster *k, const plan_layout *p, double *need, double *have);
/* Blocks of cfg split evenly over p's K = P * chunks chunks (the first L % K get one more, as
 * run_layout does) into a fresh p->split. */
void plan_layout_even_split(plan_layout *p, int n_layer);

#endif
