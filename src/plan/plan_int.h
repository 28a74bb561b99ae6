/* Internal to plan/: one candidate's context (ranks' speeds, memory caps and links for a device
 * placement; the schedule's activations in flight) shared by the evaluator and the search.
 * Legend as in plan.h. */
#ifndef PT_PLAN_INT_H
#define PT_PLAN_INT_H
#include "plan/plan.h"
#include "sched/sched.h"

/* Per-layer numbers of one microbatch size, in chain items (blocks; every other layer folded
 * into the item of the block it travels with, gpt_config_layer_item: the embedding item 0, the
 * head item L-1). work is in "reference FLOPs": time = work / rank rate. */
typedef struct {
    int n;                        /* L */
    int tp;                       /* TP ranks: every number here is one rank's share */
    double *work, *mem_fixed;     /* [L] F+B+W (+F again with recompute) reference FLOPs; bytes */
    double *mem_act;              /* [L] bytes per microbatch in flight */
    double *ph[PLAN_N_PHASES];    /* [L] reference FLOPs of F, B (with recompute's F), W */
    double *grad;                 /* [L] gradient bytes (what data parallelism reduces) */
    /* Sequence chunks (K > 1): every number above per unit (a chunk: the mean of the K), att[F],
     * att[B] the attention's reference FLOPs within ph[F], ph[B] (a chunk's grow with its place:
     * sim_costs.att_f), mem_kv the kept keys and values per microbatch in flight. */
    int K;
    double *att[2], *mem_kv;
    double *opt;                  /* [L] reference FLOPs of the optimizer step's share of the item
                                   * (profiled seconds per parameter; 0 without costs) */
    double *tp_bytes[PLAN_N_PHASES];  /* [L] bytes one rank all-reduces over its TP group per
                                       * microbatch in F, B (with recompute's F), W (always 0) */
    double *tp_coll[PLAN_N_PHASES];   /* [L] how many all-reduces those are */
    /* Sequence parallelism: the reduce-scatters and all-gathers (payload bytes as the model
     * counts them, plan_tp_parts; sim_rsag_time) of item i in F, B (with recompute's F, or
     * tp_recompute's all-gathers), W (0). Zero without sp. */
    double *sg_bytes[PLAN_N_PHASES], *sg_coll[PLAN_N_PHASES];
    bool sp;
    double ln_bytes;              /* per block: the layer-norm gradients all-reduced once per step
                                   * over the TP group under sp (plan_sp_ln_bytes) */
    /* mem_extra under recomputation: a block's act (0: nothing rebuilt), and the act of each
     * other layer (n_extra of them, layer order) with the item (block) it travels with */
    double extra_mid;
    int n_extra;
    int extra_item[GPT_MAX_INSERTS + 2];
    double extra_bytes[GPT_MAX_INSERTS + 2];
    /* Overlap (plan_tp_pingpong): when on (tp >= 2, B >= 2), the blocks' all-reduces are not in
     * tp_bytes / tp_coll above; each item's one block adds its ping-pong's exposed time, computed
     * per rank from these (B also F's again under recompute). */
    bool overlap, recompute;
    bool balance;                 /* --balance-memory: activations priced by the lend plan */
    /* Asynchronous schedules (--async-window W): what each microbatch of the pass of W steps keeps
     * for the whole pass (run/executor.c: boundary buffers of p2p bytes each, a float of loss on
     * the last chunk, pipedream's stash) */
    int window;                   /* W >= 1 */
    double p2p;                   /* bytes of one boundary buffer (plan_p2p_bytes, one TP rank's) */
    double blk_piece[PLAN_N_PHASES][2];   /* reference FLOPs of a block before / between its sums */
    double blk_tp_bytes[PLAN_N_PHASES];   /* one block's all-reduce bytes per phase */
    int blk_tp_coll[PLAN_N_PHASES];       /* and how many all-reduces (each run as two halves) */
} plan_items;

/* What the per-layer numbers depend on besides the config and the scale. */
typedef struct {
    int B, T, tp;
    int optim_div;                /* AdamW bytes are divided by this: D under ZeRO-1, else 1 */
    bool recompute;
    bool tp_overlap;              /* --tp-overlap: block all-reduces in ping-pong (B >= 2) */
    bool tp_recompute;            /* --tp-recompute: blocks keep keep_bytes, B adds recompute_flops */
    bool sp;                      /* --sp: the cost_sp rows, stream messages / tp */
    int seq_chunks;               /* --seq-chunks K (0, 1: none): the items are a unit's */
    bool balance;                 /* --balance-memory (not with recompute or tp_recompute) */
    int window;                   /* asynchronous schedules' --async-window W (0: the default) */
} plan_item_shape;

/* One placement: the pipeline ranks as the slowest replica (and TP rank) sees them. */
typedef struct {
    int P, D, tp;
    const int *devices;           /* [D*P*tp] device of (d, p, t) at (d*P + p)*tp + t */
    double *rate;                 /* [P] reference FLOP/s (min over replicas and TP ranks) */
    double *cap;                  /* [P] memory bytes (min over replicas and TP ranks) */
    double *tp_bw, *tp_lat;       /* [P] the TP group's all-reduce link (slowest over replicas) */
    double reduce_bw, reduce_lat; /* data-parallel gradient ring */
} plan_ranks;

/* Per-kind, per-phase efficiency relative to the profiled block (1 without costs) and the rate of
 * a speed-1 device. */
typedef struct {
    double eff[PLAN_N_KINDS][PLAN_N_PHASES];
    double ref_rate;
    double step_flops;            /* reference FLOPs per parameter of the optimizer step */
} plan_scale;

void plan_scale_init(plan_scale *s, const plan_costs *costs, const plan_cluster *k, int B);
void plan_items_init(plan_items *it, const gpt_config *cfg, const plan_scale *s, const plan_item_shape *sh);
void plan_items_free(plan_items *it);
/* The schedule `name` on P ranks with M microbatches, v chunks per rank and K sequence chunks
 * (0 or 1: none), unit costs; NULL with the generator's error. */
sched *plan_make_sched(const char *name, int P, int M, int v, int K);
/* devices NULL: replica d, rank p, TP rank t is device (d*P + p)*tp + t. */
void plan_ranks_init(plan_ranks *r, const plan_cluster *k, const plan_scale *s, int P, int D, int tp,
                     const int *devices);
void plan_ranks_free(plan_ranks *r);
/* Link between the devices of ranks a and b (slowest over replicas and TP ranks: TP rank t of a
 * sends to TP rank t of b). */
void plan_ranks_link(const plan_ranks *r, const plan_cluster *k, int a, int b, double *bw, double *lat);
/* Exposed seconds of a block phase's ping-pong: coll all-reduces of `bytes` in all, each run as
 * two half-sums, over compute pieces piece[0], piece[1] (FLOPs of the whole microbatch) at rate. */
double plan_tp_pingpong(int tp, double bytes, int coll, const double piece[2], double rate, double bw, double lat);
/* Seconds of item i's TP all-reduces in phase ph on rank p's group (0 at tp 1): exposed time
 * under overlap. */
double plan_item_tp_time(const plan_items *it, const plan_ranks *r, int p, int i, int ph);

/* Splits items over the schedule's K stages (rank caps divided among the rank's chunks), exactly
 * min-max; refine: then the least total time among those (plan_split_refine). first[K+1] chunk
 * item ranges. Returns 0, or -1 when nothing fits. */
int plan_split_candidate(const plan_items *it, const plan_ranks *r, const sched *s, bool refine, int *first,
                         double *bottleneck);

/* A lower bound on the simulated step of every split of the candidate (items it on ranks r,
 * schedule s, messages of p2p bytes between chunks: plan_p2p_bytes) that fits, so also on what
 * plan_score_polish finds: the path bounds of plan_eval.c ("lower bounds on a simulated step")
 * minimised over the splits that fit by dynamic programming, the items before a chunk priced on
 * the rank where they are quickest, and the total work spread over the ranks by rate. Returns it,
 * or -1 when no split fits in memory. */
double plan_candidate_bound(const plan_cluster *k, const plan_items *it, const plan_ranks *r, const sched *s,
                            double p2p);

/* Simulator costs of split first[] (K + 1 entries) of a candidate, with messages of p2p bytes
 * between chunks (plan_p2p_bytes): per-chunk F, B, W with their TP collectives, messages, links,
 * the data-parallel reduction and the chunk's optimizer step. Free with sim_costs_free. */
void plan_score_costs(const plan_cluster *k, const plan_items *it, const plan_ranks *r, const sched *s,
                      const int *first, double p2p, sim_costs *c);

/* Simulates the split and fills p's predictions (step_time, bubble, stage_*) and split (in place
 * when p->split is given, K entries; else allocated). */
int plan_score(const gpt_config *cfg, const plan_cluster *k, const plan_items *it, const plan_ranks *r,
               const sched *s, const int *first, long global_batch, plan_layout *p);

/* Simulated times that differ by less than this fraction are a tie (rounding, not a gain). */
#define PLAN_TIE_REL 1e-9

/* Scores the split first[] into p (plan_score), then searches locally, judged by the simulator:
 * moves one block from a chunk to another (any pair for K <= 8 chunks, else neighbours and chunks
 * on one rank) while the simulated step improves and memory fits, at most `budget` moves tried.
 * Keeps first[] and p at the best found. The min-max split balances the chunks; with several
 * chunks per rank (interleaved, zb-v) the rank totals and the fill and drain matter too, which
 * only the simulator sees.
 * prune: nothing it returns changes, only simulations are saved (docs/planner.md "Search time"):
 * a move is not simulated when a lower bound on its step (the path bounds of
 * plan_candidate_bound for that split; the current split's critical path priced with the move)
 * is no better than the step so far, as it could not be taken; and the search gives up (returns
 * 1, p freed of nothing it needs: the caller frees it) when the critical path of first[], priced
 * for every split that fits, cannot come under give_up (INFINITY: never).
 * Returns 0, 1 (given up) or -1 (the simulator's error); *runs += simulations run. */
/* One candidate's context for scoring splits: the model, the cluster, the items on the ranks,
 * the schedule, and the global batch (sequences per step, for tokens/s). All borrowed. */
typedef struct {
    const gpt_config *cfg;
    const plan_cluster *k;
    const plan_items *it;
    const plan_ranks *r;
    const sched *s;
    long global_batch;
} plan_candidate;

/* How plan_score_polish searches: at most budget moves tried; prune and give_up as above. */
typedef struct {
    int budget;
    bool prune;
    double give_up;
} plan_polish_opts;

int plan_score_polish(const plan_candidate *c, int *first, plan_layout *p, const plan_polish_opts *o, long *runs);

/* Bytes a rank of the placement needs at peak for chunk layout first[] (max over ranks) and the
 * rank's cap; used for infeasibility advice. */
double plan_peak_need(const plan_items *it, const sched *s, const int *first, int *rank_out);
/* plan_mem.c: chunks' memory from their items. The extra (what recomputation rebuilds) of a chunk
 * holding items [first, end); of chunk k of K before the split is known (the items that travel
 * with the first and last blocks); chunk k's bytes at `held` microbatches in flight. */
double plan_chunk_extra(const plan_items *it, int first, int end);
double plan_chunk_extra_any_split(const plan_items *it, int k, int K);
double plan_chunk_mem(const plan_items *it, int K, const int *first, int k, int held);
/* Every chunk's bytes (out[K]) at its peak[k] in flight, or with it->balance where s can lend,
 * its fixed part plus the lend plan's activations of its rank (items as the plan's layers). */
void plan_chunks_need(const plan_items *it, const sched *s, const int *first, const int *peak, double *out);
/* --balance-memory before the split: each stage's activations under the lend plan of whole sets,
 * in microbatches ([K], malloc'd), or NULL when s cannot lend. */
double *plan_lend_units(const sched *s);

#endif
