/* The trainer: pipetrain's one training loop, for every layout (one process, or P stages x D
 * replicas as threads of this process or MPI ranks), over one step interface (engine.h), with
 * hooks at each step boundary. It owns the run's setup (config and weights, or a checkpoint to
 * resume), the data order, the divergence check, checkpoints, metrics and the progress line.
 * Not here: flags (cli/cli_train.c), how a step is computed (engine_*.c, train.h, run/).
 *
 * Use: train_init, then train_add_hook for any extra hooks, then train_run, then train_free.
 * Every rank of an MPI job makes the same calls with the same options.
 *
 * Legend: B sequences per step, T tokens per sequence. */
#ifndef PT_TRAIN_TRAINER_H
#define PT_TRAIN_TRAINER_H
#include "comm/comm.h"
#include "optim/optim.h"
#include "run/run.h"
#include "train/engine.h"

/* `train`'s optimizer steps when --steps is not given (cli_train.c; launch counts on it too). */
#define TRAIN_DEFAULT_STEPS 100
#define TRAIN_STR_(x) #x
#define TRAIN_STR(x) TRAIN_STR_(x)

typedef struct {
    /* the model and where it starts */
    const char *config;     /* model config JSON; with resume optional (must describe its model) */
    const char *init;       /* starting weights (safetensors, HF GPT-2 names); NULL: GPT-2 init */
    long seed;              /* init seed (without init); kept in checkpoints */
    const char *resume;     /* checkpoint folder to continue from (weights, moments, step), or
                             * a --save folder: its newest complete checkpoint; or NULL */
    /* data and optimization */
    const char *data;       /* raw text (bytes) or an llm.c token file; required */
    const char *tokenizer;  /* NULL, or tok_load's spec ("gpt2", DIR): data is text tokenised by it */
    int batch, seq;         /* B, T (> 0); a resumed run must keep the checkpoint's */
    long shuffle;           /* batch-order seed (0: sequential); a resumed run keeps it too */
    int steps;              /* the run ends after optimizer step `steps` (counting resumed ones) */
    optim_config oc;        /* AdamW, clipping, LR schedule, as given (validated by train_init) */
    int threads;            /* OpenBLAS threads (0: OpenBLAS's default); MPI: per process */
    /* outputs (written by the root rank) */
    const char *metrics;    /* append one JSON line per step here, or NULL */
    int log_every;          /* progress line every N steps (<= 0: about 50 lines in all) */
    const char *save;       /* write checkpoints DIR/ckpt-<step> here, or NULL */
    int save_every;         /* also every K steps (<= 0: only after the last step) */
    int keep;               /* keep the newest N checkpoints of `save` (and the one just written);
                             * 0: keep them all */
    const char *trace, *svg;/* pipelined: the last step's measured trace / picture, or NULL */
    /* side work in the pipeline's bubbles (src/harvest, docs/harvesting.md); all optional */
    const char *const *side_commands;   /* [n_side_commands] "[RANK:]CMD": programs run in bubbles */
    int n_side_commands;
    const char *const *side_tasks;      /* [n_side_tasks] "KIND[:ARGS]" from the side-task registry */
    int n_side_tasks;
    double side_mem;        /* --side-mem: bytes a side task may hold (0: no cap) */
    const char *eval_data;  /* held-out loss of the weights of every eval_every-th step, or NULL */
    int eval_every;         /* K (0 with eval_data: the last step only) */
    int eval_batches;       /* batches of (batch, seq) (<= 0: the whole file) */
    const char *side_train; /* config JSON of a second model trained in the bubbles, or NULL */
    const char *side_data;  /* its training tokens (required with side_train) */
    long side_steps;        /* its optimizer steps (0: as long as this run) */
    /* layout */
    run_opts ro;            /* ro.P == 0: one process (train_step); else the pipelined job */
    int auto_layout;        /* with ro.P == 0: let train_init pick the layout for this machine's
                             * cores (train_layout_choose) and say why; 0: one process */
    comm *world;            /* MPI endpoint (borrowed; NULL: this process only) */
    /* straggler adaptation (docs/stragglers.md): an ADAPT hook that measures each step, and
     * switches to the adaptive schedule while a link is slow and back when it clears */
    bool adapt;             /* --adapt (pipelined, one stage per rank) */
    int mem_limit;          /* --mem-limit: microbatches of activations per stage the adaptive
                             * schedules may hold (N >= 1); 0: what memory holds (the default);
                             * ADAPT_MEM_LIMIT_SCHEDULE (adapt/adapt.h): the starting
                             * schedule's peak */
    double mem_bytes;       /* --mem-limit SIZE (with a unit): each rank's memory limit in bytes,
                             * checked before the first step and set as RLIMIT_DATA
                             * (train_memlimit.h); 0: none */
    const char *cluster;    /* --cluster K.json: with mem_limit 0, each rank's memory is device w's
                             * of this cluster file (world rank w, file order), not this machine's */
    bool adapt_wire;        /* --adapt-wire (with adapt): bf16 on the wire once the measured links
                             * make the step link-bound (trainer_wire.c) */
    /* recovery (docs/recovery.md) */
    int snapshot_every;     /* --snapshot-every K: each rank's state into snapshot_dir every K
                             * steps (and at the last), written off the compute path; 0: none */
    const char *snapshot_dir;   /* --snapshot-dir: memory that outlives the process (/dev/shm/..);
                             * with it every rank also beats a heartbeat there each step */
    int snapshot_peer_every;    /* --snapshot-peer-every N: every N-th snapshot also copied to a
                             * rank on another host (0, the default: each whose share of a CPU
                             * budget has come: the copy uses at most 1% of the time's CPU) */
    int async_window;       /* --async-window W: steps a pass of pipedream or 2bw (trainer_window.c;
                             * 0: the default, 4 or the largest below that divides the boundaries) */
    bool recycle;           /* --recycle: a lost rank's replica is dropped in place, the other
                             * replicas go on (trainer_recycle.c; MPI under --enable-recovery) */
} train_opts;


typedef struct train_ctx train_ctx;

/* Going on in place after a rank dies (--recycle; trainer_recycle.c, docs/recovery.md "In
 * place"). arm: before train_init, checks the layout can (MPI, --dp >= 2, no --zero 1, --tp,
 * --dp-sync; snapshots on) and starts listening for the supervisor's decision. next: after
 * train_init or train_run failed: 0 when the failure was not the supervisor's interrupt (the
 * error stands); 1 when this process goes on: o updated for the next train_init (the survivors'
 * world, D', microbatches, --resume of the newest complete snapshot), or *standby (its replica
 * was lost: it leaves the job); -1 when going on failed (the error says why). */
int train_recycle_arm(const train_opts *o);
int train_recycle_next(train_opts *o, int *standby);

/* Sets up a run: OpenBLAS threads, checks of the options (batch, seq, data, optimizer), the
 * model (resume: weights, AdamW moments and step from the checkpoint, refusing another model,
 * batch, seq or shuffle), the data, the engine (single process, or the pipelined job:
 * collective under MPI), the metrics file, and the output paths tried before any training.
 * Registers the built-in hooks: harvest (side work: side_commands, side_tasks), evaluate
 * (eval_data), save (when o->save) and log. Copies o (its strings are
 * borrowed: keep them until train_free). Returns 0, or -1 with an error naming the flag, file
 * or rank and *out NULL. */
int train_init(train_ctx **out, const train_opts *o);
/* Runs the steps after the model's step up to o->steps ("nothing to do" when there are none):
 * prints the header, then for each step reads its batch, runs the engine's step, stops on a
 * non-finite loss, and calls the hooks; after the last step the engine's report. Returns 0, or
 * -1 with the error of the step or hook that failed ("step N: ..."). Call once. */
int train_run(train_ctx *t);
/* Frees everything train_init made (NULL is fine); closes the metrics file. */
void train_free(train_ctx *t);

/* ---- step-boundary hooks ---------------------------------------------------------------------
 * After each step the loop calls the hooks of each slot, slots in this fixed order, hooks of one
 * slot in the order they were added (built-ins first: train_init adds them):
 *   ADAPT     may change how later steps run (re-plan, switch the schedule or split, through the
 *             engine), never what they compute: the same loss and gradients.
 *   HARVEST   side work in the time the step left idle; must not touch the model, the
 *             optimizer state or the data order.
 *   EVALUATE  measures the model (e.g. a held-out loss); reads, never updates, the parameters.
 *   SAVE      checkpoints (built-in: DIR/ckpt-<step> every save_every steps and after the last).
 *   LOG       reports the step (built-in: the metrics JSON line and the progress line).
 * When: after step `step` (1-based, counting resumed steps) has updated the weights and its loss
 * was found finite, before the next batch is read; on every rank, at the same step, in the same
 * order, so a hook that communicates (a checkpoint under MPI) must do so on every rank. st (the
 * step's stats) lives for the call only. A hook may print (on the root only:
 * train_ctx_is_root), write files, and use the engine through train_ctx_engine; it must not add
 * hooks, call train_run or train_free, or change the options.
 * Returns: 0 to go on; -1 with pt_seterr to stop the run: train_run returns -1 with that error
 * as it is (the hook names what failed), the later hooks of this step do not run. */
typedef enum {
    TRAIN_HOOK_ADAPT, TRAIN_HOOK_HARVEST, TRAIN_HOOK_EVALUATE, TRAIN_HOOK_SAVE, TRAIN_HOOK_LOG,
    TRAIN_HOOK_SLOTS
} train_hook_slot;

typedef int (*train_hook_fn)(train_ctx *t, long step, const train_step_stats *st, void *user);

#define TRAIN_MAX_HOOKS 8   /* per slot */

/* Adds fn (called with user) to the end of slot's list; between train_init and train_run.
 * -1 when the slot already holds TRAIN_MAX_HOOKS hooks or the slot is not one of the above. */
int train_add_hook(train_ctx *t, train_hook_slot slot, train_hook_fn fn, void *user);

/* For hooks: the options the run was set up with (log_every filled in), whether this rank
 * prints and writes files, and the engine. */
const train_opts *train_ctx_opts(const train_ctx *t);
int train_ctx_is_root(const train_ctx *t);
train_engine *train_ctx_engine(train_ctx *t);

#endif
