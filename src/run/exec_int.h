/* Internal to the executor (src/run/exec_*.c, executor.c): one rank's state and the functions
 * its files share. Not public API: run/executor.h is. Each concern has its file:
 *   exec_state.c    stages (each with its own partial model), activation sets, boundary
 *                   buffers, tied copies, sub-communicators
 *   exec_group.c    reduction groups: what is reduced together, their buckets and moments
 *   exec_compute.c  F, B, W of a stage's layers on one microbatch (and recomputation)
 *   exec_stash.c    weight stashing for asynchronous schedules
 *   exec_lend.c     --balance-memory: activations lent to a lighter rank and fetched back
 *   exec_comm.c     posting, completing and dropping sends and receives
 *   exec_reduce.c   gradient reduction (posting, completing), the norm, AdamW (ZeRO), zeroing
 *   exec_mode.c     the modes (sync, overlap, async): hooks the walk calls, chosen once per job
 *   exec_tp.c       tensor parallelism: the TP group's collective for the stage models, and
 *                   whole tensors from a TP group's shards (checkpoints, the gradient file)
 *   executor.c      the walk over the action list, the timeline, the public calls
 *
 * The executor knows layers only through the model's kind table (gpt_layer_ops_of: what a layer
 * reads, its act size, F/B/W) and its tied tensors (gpt_tie_at): a stage that holds a tie's
 * user layer while the owner layer's stage is on another rank keeps a private copy.
 *
 * Legend: S stages, K chunks per pipe, M microbatches, b rows per microbatch, T time, C channels,
 * N = b*T positions per microbatch, NT tied tensors. */
#ifndef PT_RUN_EXEC_INT_H
#define PT_RUN_EXEC_INT_H
#include "run/executor.h"
#include <stdint.h>
#include "util/pt.h"

/* A private copy of tied tensor `tie` held by a stage without its owner layer. */
typedef struct {
    float *w, *dw;                    /* (count) copy and its gradient; NULL: no copy of this tie */
    size_t count;
    adamw_state opt;                  /* --zero 0: its moments when it is its group's home here */
} exec_tie_copy;

typedef struct exec_lend_out exec_lend_out;

typedef struct {
    int g, chunk, pipe, first, end;   /* layers [first, end) */
    int prev, next;                   /* neighbour stages in the pipe, -1 at the ends */
    int prev_rank, next_rank;         /* world ranks of the neighbours (-1: none or local) */
    gpt_model m;                      /* the stage's own model: layers [first, end) only */
    adamw_state opt;                  /* --zero 0: moments laid out like m.params, when the stage
                                       * is the home of its chunk's group on this rank; else empty */
    exec_tie_copy copy[GPT_MAX_TIES]; /* [NT] private copies of tied tensors */
    gpt_tied tied[GPT_MAX_TIES];      /* [NT] what the stage's layers read (copies, a local
                                       * owner stage's tensor, or NULL) */
    int has_tied;                     /* any of them: pass tied to the layers */
    float ***act;                     /* [end-first][n_sets] activation sets of each layer */
    int n_slots;                      /* sets held at once (the schedule's peak for this stage;
                                       * --tp-recompute: from B to W, 0 when it has no lone B) */
    int n_sets;                       /* n_slots, + 1 with --recompute (the forward's spare) */
    int *slot_of;                     /* [M] set of each microbatch, -1: none */
    int *slot_mb;                     /* [n_slots] microbatch in each set, -1: free */
    /* --tp-recompute, where it holds fewer bytes than whole sets (rebuild): what each layer keeps
     * of a microbatch from F to B (its act's first gpt_layer_keep_floats), in n_keep kept sets:
     * the schedule's peak from F to W, a bound on the microbatches between F and B */
    int rebuild;
    float ***keep;                    /* [end-first][n_keep] */
    int n_keep;
    int *keep_of;                     /* [M] kept set of each microbatch, -1: none */
    int *keep_mb;                     /* [n_keep] microbatch in each kept set, -1: free */
    /* --seq-chunks: each layer's kept keys and values and their gradients (a block's; NULL for
     * other layers), per microbatch in flight from its chunk 0's F to its chunk 0's B: n_kv sets
     * (sched_stage_peak_kv), kv_of[M/K] the set of each microbatch, kv_mb[n_kv] the microbatch
     * in each set (-1: none, free) */
    float ***kv, ***dkv;              /* [end-first][n_kv] */
    int n_kv;
    int *kv_of, *kv_mb;
    /* the stream at the stage's ends, (Ns,C): all N rows, or this TP rank's under --sp */
    float **out;                      /* [M] (Ns,C) forward output (NULL for the last stage) */
    float **xin;                      /* [M] (Ns,C) received input (prev on another rank) */
    float **dxo;                      /* [M] (Ns,C) input gradient (NULL at the first stage) */
    float **dyin;                     /* [M] (Ns,C) received output gradient (next remote) */
    float *loss;                      /* [M] last stage: mean loss of each microbatch */
    size_t span_off, span_n;          /* the stage's parameter span in m (0, m.n_held) */
    int last_w;                       /* index of its last W or BW in the rank's list, -1 */
    int *writes, n_writes;            /* groups its W adds to (indices into e->grp) */
    double w_end;                     /* when its last W ended this iteration */
    double slow;                      /* injected slowdown: each F, B, W, BW takes this many times
                                       * its compute time (--slow-stage; 1: none) */
    /* asynchronous schedules (pipedream): the weights each microbatch's F used */
    float **stash;                    /* [M] (span_n + copies) params at F */
    double *stash_sum;                /* [M] checksum of the stashed weights */
    /* asynchronous modes of exec_async.c (2bw, --async-fix pipemare | predict) */
    float *ver;                       /* (span_n + copies) 2bw: the older weight version;
                                       * pipemare: the velocity estimate; predict: the last step */
    int *stale;                       /* [M] STEPs of the rank between F(mb) and its backward */
    int *f_upd;                       /* [M] pipemare: the stage's updates before F(mb) */
    int n_upd;                        /* updates of the stage since the job started */
    int tau;                          /* the stage's delay: the largest stale[mb] */
    /* --balance-memory: per layer its lender's side (NULL: the layer keeps n_sets sets; else
     * act[l] has the plan's cap of buffers, mapped to microbatches there), and the stage's
     * compute actions so far this iteration (the plan's positions) */
    exec_lend_out **lout;
    int lend_k;
} run_stage;

/* A tensor inside a group's region: floats [off, off + n) of it, region-relative. replicated:
 * every TP rank holds all of it (GPT_SPLIT_NONE), so the norm counts it on TP rank 0 only. */
typedef struct { int param; size_t off, n; int decay, replicated; } exec_span;

/* One reduction unit of a group: floats [off, off + n) of its region. This rank updates the
 * slice [lo, hi) of it (--zero 1: comm_slice of its group rank; else all of it), with moments
 * mm, vv of hi - lo floats (owned with --zero 1, else inside a stage's or copy's adamw_state). */
typedef struct {
    size_t off, n, lo, hi;
    float *mm, *vv;
    int owned;
    comm_req *req;                    /* the reduction in flight, NULL when none */
} exec_bucket;

/* A reduction group: a region of gradients that every member rank holds, reduced over cm as one
 * (the rank's own copies added in stage order first) and updated as one. Chunk c's group is its
 * stages' span without the tied tensors they own (one group per contiguous piece); tie t's is
 * the tensor, over its owner and every copy. Groups are kept in one global order (chunks 0..K-1,
 * then ties), so collectives on the sub-communicators never cross. */
typedef struct {
    comm *cm;                         /* the members (not owned); NULL or size 1: this rank alone */
    int chunk, tie;                   /* chunk c's piece (tie -1), or tie t's (chunk -1) */
    int n_copies;
    float **g, **w;                   /* [n_copies] each local copy's gradient, parameters */
    int *copy_stage;                  /* [n_copies] index into e->st of each copy's stage */
    size_t n;                         /* floats of the region */
    exec_span *ts;                    /* [n_ts] the tensors in it, in order */
    int n_ts;
    exec_bucket *bk;                  /* [n_bk] in order */
    int n_bk;
    int n_writers, n_left;            /* local stages whose W adds to it; not yet done this step */
    int posted;                       /* this iteration's reduction is posted */
    int next_bk;                      /* buckets posted so far (one in flight at a time) */
    double post_t, done_t;            /* when it was posted, seen complete */
    struct exec_tie_lag *lag;         /* --defer-tie: a shared tie's sums in flight (exec_tie_lag.c);
                                       * NULL: reduced at each REDUCE_GRAD */
    struct exec_tie_owner *own;       /* --tie-owner: the first holder updates it, the others'
                                       * copies are refreshed K updates late (exec_tie_owner.c) */
} exec_group;

/* exec_mode.c: what differs between the executor's modes (sync, overlap, async), chosen once
 * per job. The walk calls each hook at its action; a hook's status: 0, 1 when it recorded the
 * action in the timeline itself, or -1. */
typedef struct exec_mode {
    const char *name;
    void (*before_f)(run_exec *e, run_stage *st, int mb);   /* before an F; NULL: nothing */
    void (*before_b)(run_exec *e, run_stage *st, int mb);   /* before a B, W, BW; NULL: nothing */
    int (*after_b)(run_exec *e, int i, sched_action a, run_stage *st, double t0);   /* after one */
    int (*reduce)(run_exec *e, int i, sched_action a, run_stage *st, double t0);    /* REDUCE_GRAD */
    int (*step)(run_exec *e, const optim_config *oc, int t, run_exec_stats *rs);    /* STEP */
    int (*finish)(run_exec *e, run_exec_stats *rs);     /* the walk ended without a STEP */
    int (*poll)(run_exec *e);                            /* after each action until the STEP; NULL */
    void (*after_f)(run_exec *e, run_stage *st, int mb);    /* after an F; NULL: nothing */
} exec_mode;
const exec_mode *exec_mode_of(const run_exec *e);
/* exec_async.c: the asynchronous modes besides plain stashing (2bw's two versions, PipeMare,
 * prediction), NULL when the job runs plain stashing (pipedream with none or nesterov). */
const exec_mode *exec_async_mode(const run_exec *e);
/* Their buffers and per-microbatch counts, after the stages and groups exist (the weights are
 * the starting ones then); freed with the stages. 0, or -1. */
int exec_async_init(run_exec *e);
void exec_async_free(run_exec *e);
/* Floats a stage holds for them (ver), for run_exec_mem. */
size_t exec_async_floats(const run_exec *e, const run_stage *st);
/* Update u of every group, each stage's gradient clipped at --grad-clip / sqrt(P) (tied tensors:
 * the smallest factor of their holders); PipeMare's lr factor over `warm` updates. 0, or -1. */
int exec_async_update(run_exec *e, const optim_config *oc, int u, double lr, int warm);
/* The next STEP of an iteration starting at step t: its update number, its step into *step. */
int exec_async_next(run_exec *e, int t, int *step);

struct run_exec {
    run_exec_cfg c;
    int (*step_gate)(void *, int);   /* run_exec_set_step_gate: before each synchronous STEP */
    void *gate_user;
    const exec_mode *mode;            /* exec_mode_of(this), set once by run_exec_init */
    int d, p, t, M, N, C, n_stages;   /* replica, pipeline rank, TP rank, sizes (M: the
                                       * schedule's units, N: rows of one) */
    int K;                            /* --seq-chunks: a unit is chunk u % K of microbatch u / K */
    int *ctok[2];                     /* K > 1: a chunk's tokens, targets (b, T/K) */
    int Ns;                           /* rows of the stream a stage takes and gives per
                                       * microbatch: N, or N/tp under --sp (gpt_stream_rows; set
                                       * by exec_tp_set) */
    int tp;                           /* TP ranks per (replica, pipeline rank); 1: none */
    comm *tp_comm;                    /* this rank's TP group (NULL at tp 1) */
    run_tp_stats tps;                 /* its all-reduces so far (exec_tp.c) */
    int n_ties;                       /* NT, the model's tied tensors */
    run_stage *st;                    /* [n_stages] stages of this rank, in stage order */
    int *loc;                         /* [S] index into st, or -1 */
    float *scratch, *tmp[2];          /* per-thread scratch, (Ns,C) ping-pong buffers */
    float *work;                      /* --tp-recompute: one act of the rank's largest layer, where
                                       * F runs a layer and a fused BW rebuilds, B's and W's it */
    size_t work_n;                    /* its floats */
    comm **chunk_comm;                /* [K] ranks holding chunk c (NULL: not a member) */
    comm *tie_comm[GPT_MAX_TIES];     /* [NT] ranks holding tie t's owner or a copy */
    exec_group *grp;                  /* [n_grp] this rank's groups, in the global order */
    int n_grp;
    int all;                          /* this iteration reduces whole gradients (not slices) */
    comm_req **recv_req;              /* [len] request of each RECV action, posted early */
    comm_req **send_req;              /* [len] pending sends */
    int *pend, n_pend;                /* indices of the pending sends, oldest first */
    uint16_t **wire_buf;              /* [n_stages*M*4] --wire bf16/fp16: each message's 16-bit
                                       * copy (send F, send B, receive F, receive B), or NULL */
    int n_reduce, last_reduce;        /* REDUCE_GRAD actions; index of the last */
    double loss_sum, sumsq;
    int stepped;
    int async;                        /* weights update per microbatch, with weight stashing */
    int n_step_acts, step_idx;        /* async: STEPs per iteration, STEPs done in this one */
    int win;                          /* async: steps per iteration (run_exec_cfg.window, >= 1) */
    double win_loss[RUN_MAX_WINDOW];  /* win > 1: each step's loss sum on this rank */
    float *live;                      /* async: the current weights while stashed ones run */
    int fix;                          /* async_fix (optim/async_fix.h) */
    int stashing;                     /* async with a stash per microbatch (pipedream's rule) */
    int swapped;                      /* exec_async.c: other weights are in, live holds the current */
    int tau_max;                      /* exec_async.c: the largest delay of any stage of the pipe */
    struct exec_outer *outer;         /* --dp-sync H > 1: the outer step's state (exec_outer.c) */
    int stash_checked, stash_bad, stash_stale;   /* run_exec_stash_stats */
    struct exec_lend *lend;           /* --balance-memory: the plan and the pools kept for others */
    timeline tl;
};

/* Action a on stream sm, begun at t0 (ready then), ending now, into the rank's timeline (the
 * walk's and the modes' record: inline, so that neither file calls the other). */
static inline void exec_record(run_exec *e, sched_action a, tl_stream sm, int peer, double ready, double t0) {
    tl_event ev = { .act = a, .rank = e->c.world_rank, .iter = 0, .stream = sm, .peer = peer,
                    .link = -1, .ready = ready, .start = t0, .end = pt_now() };
    timeline_push(&e->tl, &ev);
}

/* exec_tie_lag.c (--defer-tie; all do nothing without it): a shared tied tensor's sum of
 * microbatch k applied at update k + M on every holder. init after the groups exist, 0 or -1;
 * free completes what is in flight. */
typedef struct exec_tie_lag exec_tie_lag;
int exec_tie_lag_init(run_exec *e);
void exec_tie_lag_free(run_exec *e);
size_t exec_tie_lag_floats(const run_exec *e);
/* At the REDUCE_GRAD of group gr (gr->lag set): this microbatch's part posted, the sum due now
 * (or zeros) into g[0]. 0, or -1. */
int exec_tie_lag_reduce(run_exec *e, exec_group *gr);
/* The tied tensor's clipping factor for this update, the same on every holder (cap > 0). */
double exec_tie_lag_factor(const exec_group *gr, double cap);
/* exec_tie_ring.c: what the two share. The forwards stage 0 runs before its first backward in
 * its rank's list: the lag K of both. */
int exec_tie_k(const sched *s);
/* Whether gr holds a tied tensor shared with other ranks (the groups both handle). */
int exec_tie_shared(const exec_group *gr);
/* K slots of `per` point-to-point requests each (NULL: none) for a shared tie's group: H
 * members, this rank me among them, a tensor of n floats. */
typedef struct {
    int K, H, me, per;
    size_t n;
    comm_req **req;                   /* [K][per] */
} exec_tie_ring;
/* r laid out for gr (K = exec_tie_k of e's schedule), no request in flight. */
void exec_tie_ring_init(exec_tie_ring *r, const run_exec *e, const exec_group *gr, int per);
/* Slot s's requests complete, each waited (exec_req_wait: a failed one stays in its place) even
 * after another failed. 0, or -1 with "rank R: <what> of tied tensor T: " put before the error. */
int exec_tie_ring_wait(exec_tie_ring *r, run_exec *e, exec_group *gr, int s, const char *what);
void exec_tie_ring_free(exec_tie_ring *r);
/* exec_tie_owner.c (--tie-owner; nothing without it): init after the groups, 0 or -1; free
 * completes what is in flight; reduce at the REDUCE_GRAD of gr (gr->own set): another holder
 * sends its part and zeroes it, the owner adds the parts into g[0], 0 or -1; at the update:
 * refresh first: 0 on the owner (the caller updates gr), 1 on another holder (its copy set to
 * the owner's of K updates before; no update), or -1; publish after the owner's update: the new
 * weights sent, 0 or -1. */
typedef struct exec_tie_owner exec_tie_owner;
int exec_tie_owner_init(run_exec *e);
void exec_tie_owner_free(run_exec *e);
size_t exec_tie_owner_floats(const run_exec *e);
int exec_tie_owner_reduce(run_exec *e, exec_group *gr);
int exec_tie_owner_refresh(run_exec *e, exec_group *gr);
int exec_tie_owner_publish(run_exec *e, exec_group *gr);
/* exec_state.c */
int exec_state_init(run_exec *e);              /* stages, buffers, copies, comms; collective */
void exec_state_free(run_exec *e);
/* Another schedule of the same shape from the next iteration on: what follows from the action
 * list (request slots, last W's, the reduce and step actions, the timeline) and activation sets
 * sized for its peaks. Models, moments, groups and communicators stay. Between iterations only. */
int exec_state_replan(run_exec *e, const sched *s);
/* Stage st holds tie t's owner layer. */
int exec_owns_tie(const run_exec *e, const run_stage *st, int t);
/* Floats of the weights a stage reads: its span, then its private copies in tie order. */
size_t exec_weights_n(const run_stage *st, int n_ties);

/* Floats of layer l's act of one unit (a microbatch's, or with --seq-chunks a chunk's). */
size_t exec_act_floats(const run_exec *e, const run_stage *st, int l);

/* exec_group.c */
int exec_groups_init(run_exec *e);             /* groups, buckets, moments (from the source) */
void exec_groups_free(run_exec *e);

/* exec_compute.c */
int exec_forward_action(run_exec *e, run_stage *st, int mb, const int *tok, const int *tgt);
int exec_backward(run_exec *e, run_stage *st, int mb, int input, int weight, const int *tok,
                  const int *tgt);

/* exec_stash.c */
void exec_stash(run_exec *e, run_stage *st, int mb);
/* The stage's weights (span, then its private copies in tie order) into dst, and back. */
void exec_weights_get(const run_exec *e, const run_stage *st, float *dst);
void exec_weights_put(const run_exec *e, run_stage *st, const float *src);
void exec_unstash(run_exec *e, run_stage *st, int mb);
void exec_restash(run_exec *e, run_stage *st);

/* exec_lend.c (all do nothing without --balance-memory) */
int exec_lend_prepare(run_exec *e, run_stage *st);   /* the plan (first call), st's lending layers */
int exec_lend_cap(const run_stage *st, int layer);   /* buffers of a lending layer, -1: not one */
void exec_lend_bind(run_stage *st, int layer, float **bufs, size_t n);   /* its buffers (act[layer], n floats) */
float *exec_lend_act(const run_stage *st, int layer, int mb);  /* mb's act of a lending layer */
size_t exec_lend_head_floats(const run_stage *st, int layer); /* its head buffers (lent in part) */
int exec_lend_init(run_exec *e);                     /* the pools this rank keeps for others */
void exec_lend_stage_free(run_stage *st);
void exec_lend_free(run_exec *e);
void exec_lend_begin(run_exec *e);                   /* a new iteration */
int exec_lend_take(run_exec *e, run_stage *st, int mb);     /* before F: buffers for mb */
int exec_lend_ready(run_exec *e, run_stage *st, int mb);    /* before B, W, BW: mb's acts here */
int exec_lend_after(run_exec *e, run_stage *st, sched_kind kind, int mb);  /* after a compute action */
int exec_lend_poll(run_exec *e);                     /* serves the pools, never blocks */
/* Blocks until *req completes, serving the pools meanwhile; `what` names it in errors; count:
 * the time is lending's wait (run_exec_lend_wait), not a pipeline receive's. */
int exec_lend_wait(run_exec *e, comm_req **req, const char *what, int count);
int exec_lend_drain(run_exec *e);                    /* before the reduction and step */
void exec_lend_mem(const run_exec *e, double *lent, double *borrowed);
int exec_lend_parts(const run_exec *e);               /* least 16ths its lending layers send, 0: none */
double exec_lend_wait_s(const run_exec *e);

/* exec_comm.c */
int exec_post_recvs(run_exec *e);
int exec_poll_sends(run_exec *e);
int exec_send(run_exec *e, int i, sched_action a, int *peer);
int exec_recv(run_exec *e, int i, sched_action a, int *peer);
int exec_finish_sends(run_exec *e);
void exec_wire_free(run_exec *e);              /* the 16-bit message copies */
/* exec_wait.c (exec_groups_arrived: exec_reduce.c) */
/* Side work in a rank's waits (cfg.on_wait): what one offered wait waits for (run_wait.priv),
 * read by its arrived test. */
typedef struct {
    run_exec *e;
    comm_req **req;     /* messages: req[0..n), each set to NULL when a test completed it */
    int n;
    run_stage *st;      /* reductions: this stage's groups, or NULL: every group */
} exec_waiting;
/* The arrived tests: every request of x->req is done; every posted reduction of x->st's groups
 * (every group's when NULL) is complete (testing progresses them). 1, 0, or -1 on failure. */
int exec_reqs_arrived(run_wait *w);
int exec_groups_arrived(run_wait *w);
/* The same, asleep in the transport's wait until then or the deadline (pt_now time): 1, 0 (the
 * deadline passed; requests stay pending), -1 on failure (run_wait.block). */
int exec_reqs_block(run_wait *w, double deadline);
int exec_groups_block(run_wait *w, double deadline);
/* One request: *req completes (set to NULL) by the deadline (1), or not (0), or failed (-1). */
int exec_req_block(comm *c, comm_req **req, double deadline);
/* One test of *req (NULL: over already, 1): 1 over, 0 pending, -1 failed. *req is set to NULL
 * exactly when the transport freed it (comm.h: who owns a request), failed or not, so a slot
 * never names a freed request and the failure path (exec_drop_requests) tests only live ones. */
int exec_req_test(comm *c, comm_req **req);
/* *req (NULL: nothing) waited within timeout seconds: 0 and *req NULL when it completed; -1 when
 * the wait failed or timed out, *req left set (the caller's, for exec_req_test or comm_free: a
 * holder frees the buffer under it only once every slot is NULL). */
int exec_req_wait(comm *c, comm_req **req, double timeout);
/* Offers the wait of action i to cfg.on_wait unless arrived(x) says it is over already; side
 * steps go into the rank's timeline. 0, or -1 when the job failed meanwhile. */
int exec_offer_wait(run_exec *e, int i, int (*arrived)(run_wait *), int (*block)(run_wait *, double),
                    exec_waiting *x);
int exec_drop_requests(run_exec *e);

/* exec_reduce.c */
int exec_post_group(run_exec *e, exec_group *gr);      /* add copies, post its buckets */
int exec_post_all(run_exec *e);                        /* every group not yet posted, in order */
int exec_wait_group(run_exec *e, exec_group *gr);      /* its buckets complete, copies back */
int exec_wait_all(run_exec *e);
int exec_poll_groups(run_exec *e);                     /* progress without blocking */
int exec_reduce_stage(run_exec *e, run_stage *st);     /* async: st's groups, now, blocking */
int exec_norm(run_exec *e);                            /* adds the groups' sum of squares */
int exec_reduce_world(run_exec *e, run_exec_stats *rs);
int exec_update(run_exec *e, const optim_config *oc, int t, double lr, double scale);
/* The same for group gr alone (exec_update: every group in order). */
int exec_update_group(run_exec *e, exec_group *gr, const optim_config *oc, int t, double lr, double scale);
void exec_zero_grads(run_exec *e);

/* exec_outer.c: --dp-sync H > 1 (cfg.dp_sync; nothing at 0 or 1) */
int exec_outer_init(run_exec *e);              /* the replicas' communicator, theta_start; collective */
void exec_outer_free(run_exec *e);
/* After inner step t's update (oc: its config, total_steps the last step): completes an outer
 * all-reduce posted at step t - 1 and applies it; at t a multiple of H (or the last) posts the
 * next (blocking with --no-overlap and at the last step). 0, or -1. */
int exec_outer_step(run_exec *e, const optim_config *oc, int t);
/* exec_reduce_world under --dp-sync H > 1: the loss over the world, the norm per replica. */
int exec_outer_reduce_world(run_exec *e, run_exec_stats *rs);
/* The outer state for a checkpoint (n floats each, pointers into it): theta_start, the outer
 * momentum, the weights a change was taken from (meaningful when *pending: posted, not yet
 * applied). Returns n, 0 without --dp-sync H > 1. */
size_t exec_outer_state(run_exec *e, float **start, float **buf, float **snap, int *pending);
/* After exec_outer_state's buffers were loaded (a resume): with pending, the change is taken
 * again from them and posted, to be applied at the next step as in the saved run. 0, or -1. */
int exec_outer_resume(run_exec *e, int pending);
/* exec_rankstate.c: the rank's own state in checkpoints and snapshots (ckpt/ckpt_state.h); at
 * init, after every other part: loaded from the source's checkpoint when it has it (else a
 * note on world rank 0). 0, or -1 naming the file. */
int exec_rankstate_load(run_exec *e);

/* exec_tp.c */
int exec_tp_init(run_exec *e);                         /* the TP communicator; collective */
/* st's model gets the group's collectives (blocking and non-blocking, reduce-scatter and
 * all-gather) and, with --tp-overlap, overlaps its blocks' all-reduces, with --sp splits its
 * stream (e->Ns its rows). 0, or -1 (the model refused). */
int exec_tp_set(run_exec *e, run_stage *st);
/* --sp, after stage st's last W of an iteration (an asynchronous schedule: before each of its
 * reductions): the gradients of its tensors marked tp_sum summed over the TP group, every rank
 * getting the sum (then replicated like the others). Collective over the TP group. 0, or -1. */
int exec_tp_sum_grads(run_exec *e, run_stage *st);
void exec_tp_free(run_exec *e);

#endif
