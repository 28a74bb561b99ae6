/* Pipeline schedules as data: the action IR, its text and CSV forms, generators, lowering (adding
 * communication) and the validator. Pure data and pure functions: no threads, no model code.
 * Timing with costs lives in sim/; running actions on real layers lives in run/.
 *
 * Legend: P ranks (pipeline positions), S stages (model chunks, S = P * chunks * pipes),
 * M microbatches.
 *
 * Stages and pipes. A stage id g is global. The model is cut into `stages_per_pipe` consecutive
 * stages; `n_pipes` is 1 except for chimera (2: two model replicas, pipe 0 runs stages 0..K-1 on
 * ranks 0..P-1, pipe 1 runs stages K..2K-1 on ranks P-1..0). Stage g belongs to pipe g / K and
 * is at position g % K of the model; its forward successor is g+1 within the same pipe. Each
 * microbatch belongs to one pipe (mb_pipe[mb]) and visits exactly that pipe's stages.
 *
 * Text form (torch.distributed.pipelining style): "<stage><KIND><mb>", e.g. 2F0, 1B3, 0W2, 1BW0,
 * 3SEND_F1, 4RECV_F1. B is the input-gradient backward, W the weight-gradient backward, BW both at
 * once. SEND_F on stage g sends g's forward output to g+1; RECV_F on stage g receives g-1's output;
 * SEND_B on g sends g's input gradient to g-1; RECV_B on g receives it from g+1.
 * REDUCE_GRAD and STEP are written "<stage>REDUCE_GRAD" and "STEP" (no stage, no microbatch; mb
 * and stage are -1). On parse, "I" is accepted as B (torch's name for the input-gradient backward).
 */
#ifndef PT_SCHED_H
#define PT_SCHED_H
#include <stdbool.h>
#include <stdio.h>

typedef enum {
    ACT_F, ACT_B, ACT_W, ACT_BW,
    ACT_SEND_F, ACT_RECV_F, ACT_SEND_B, ACT_RECV_B,
    ACT_REDUCE_GRAD, ACT_STEP,
    ACT_N_KINDS
} sched_kind;

typedef struct {
    int stage;        /* global stage id, -1 for STEP */
    int mb;           /* microbatch, -1 for REDUCE_GRAD and STEP */
    sched_kind kind;
} sched_action;

typedef struct {
    int n_ranks;            /* P */
    int n_stages;           /* S, all pipes together */
    int n_pipes;            /* 1, or 2 for chimera */
    int stages_per_pipe;    /* K = S / n_pipes */
    int n_mb;               /* M */
    int *stage_rank;        /* [S] rank that runs stage g */
    int *mb_pipe;           /* [M] pipe that microbatch mb goes through */
    int *len;               /* [P] actions per rank */
    int *cap;               /* [P] allocated slots per rank (internal) */
    sched_action **acts;    /* [P][len[r]] ordered actions of rank r */
    bool lowered;           /* communication actions present */
    bool async;             /* pipedream: weights update per microbatch, no flush */
    int weight_versions;    /* async: weight copies each stage keeps, when fixed by the schedule's
                             * rule (2bw: 2, the live one and the one in-flight microbatches use);
                             * 0: one per in-flight microbatch plus the live one (pipedream's
                             * stashing, and any async CSV). Synchronous: unused (one copy) */
    char name[32];          /* generator name, or "csv" */
    /* Sequence chunks (train --seq-chunks K; TeraPipe, seq1F1B): 1, or K > 1 when each
     * microbatch's sequences run as K chunks, each a unit of its own: n_mb counts units, unit u
     * is chunk u % K of microbatch u / K. The rule (sched_action_deps) then adds that a stage
     * runs a microbatch's chunks' forwards in order and their backwards in reverse. */
    int seq_chunks;
} sched;

/* A judge of candidate schedules for the adaptive generator: lower is better (the simulator's
 * iteration time under the real costs, sim_schedule_score in sim/), a negative value rejects the
 * candidate (pt_err says why). sched/ cannot time a given schedule itself (the simulator sits
 * above it), so the judge comes from the caller. */
typedef double (*sched_score_fn)(const sched *s, void *user);

/* Parameters of a generator call. chunks: stages per rank per pipe (interleaved: v; zb-v: 2;
 * others 1). costs, delays and mem_limit are only read by the greedy and adaptive generators
 * (the registry row says which), score only by adaptive. */
typedef struct {
    int ranks;              /* P */
    int microbatches;       /* M */
    int chunks;             /* v, default 1 (0 means the generator's default) */
    double cost_f, cost_b, cost_w;      /* greedy: default per-stage times when per_stage is NULL */
    const double *stage_cost_f, *stage_cost_b, *stage_cost_w;  /* greedy: [S] or NULL */
    int mem_limit;          /* greedy: max microbatches of activations per stage (0: no limit) */
    int async_depth;        /* pipedream, 2bw: forwards stage g admits before its first backward,
                             * max(P - g, async_depth) capped at M (0: P - g, the 1f1b order);
                             * more microbatches in flight hide link latency (docs/async.md) */
    int seq_chunks;         /* K chunks per microbatch (0 or 1: none): the schedule's units are
                             * microbatches * K (sched.seq_chunks); generators whose row says
                             * seq_chunks only */
    const double *link_delay;       /* greedy, adaptive: [P-1] time a message between ranks r and
                                     * r+1 takes (either way), or NULL: none; >= 0 */
    const double *link_busy;        /* greedy, adaptive: [P-1] time a message holds link r-r+1 (a
                                     * link slow in bandwidth: bytes / rate) before its link_delay;
                                     * each direction is a FIFO queue, so messages sent closer
                                     * together than this wait for each other; NULL: none; >= 0 */
    const double *stage_slowdown;   /* greedy, adaptive: [S] factor > 0 on stage g's f, b, w, or NULL */
    sched_score_fn score;   /* adaptive: the judge of candidates, or NULL (see sched_adaptive) */
    void *score_user;       /* passed to score and tiebreak */
    sched_score_fn tiebreak;/* adaptive: between candidates the judge scores equal and that hold as
                             * many activations, the lower of this wins (the simulator's mean time
                             * under costs a little off the estimate, sim_schedule_robust: the one
                             * that loses least when the estimate is wrong); NULL: the first */
} sched_params;

/* ---- allocation and editing ---- */
/* New empty schedule (no actions). stage_rank defaults to g % n_ranks (callers set it otherwise),
 * mb_pipe to 0, stages_per_pipe to n_stages / n_pipes, name to "". Caller frees with sched_free. */
sched *sched_new(int n_ranks, int n_stages, int n_pipes, int n_mb);
void sched_free(sched *s);                                  /* NULL is fine */
/* Appends one action to rank's list (grows as needed). Sets lowered for communication kinds. */
void sched_push(sched *s, int rank, sched_kind kind, int stage, int mb);
sched *sched_copy(const sched *s);                         /* deep copy; caller frees */
/* Forward neighbours of stage g inside its pipe: g-1 / g+1, or -1 at the pipe's first / last stage. */
int sched_stage_prev(const sched *s, int g);
int sched_stage_next(const sched *s, int g);
/* True for F, B, W, BW; true for the four SEND/RECV kinds. */
bool sched_kind_is_compute(sched_kind k);
bool sched_kind_is_comm(sched_kind k);
/* Total actions over all ranks. */
long sched_total_actions(const sched *s);

/* ---- text ---- */
const char *sched_kind_name(sched_kind k);                 /* "F", "SEND_F", ... */
/* Formats one action into buf ("2F0", "STEP"); returns buf. */
char *sched_action_str(const sched_action *a, char *buf, int n);
/* Parses one action token. Returns 0 or -1 with an error quoting the token. */
int sched_action_parse(const char *tok, sched_action *out);
/* Prints the schedule as a grid: one line per rank, "rank r: 0F0 0F1 ...". */
void sched_print(const sched *s, FILE *f);
/* Formats a window of the grid into buf (always NUL-terminated, truncated to n): columns
 * [step-half, step+half] of up to 8 ranks around mark_rank, cell (mark_rank, mark_step) written
 * as [1B3]. mark_rank < 0: the first columns of the first ranks, nothing marked. Returns buf. */
char *sched_format_grid(const sched *s, int mark_rank, int mark_step, int half, char *buf, int n);
/* CSV: one row per rank, one action per cell; an empty cell is an idle slot (ignored on load).
 * Lines that are blank or start with '#' are skipped (they are not ranks). */
void sched_write_csv(const sched *s, FILE *f);
/* Loads a CSV. Stage-to-rank map is inferred (each stage must appear on one rank), microbatch
 * count is 1 + the largest mb, pipes inferred as 1 unless given (n_pipes > 0 overrides).
 * lowered is set when any communication action appears. Errors name file, row and column. */
sched *sched_read_csv(const char *path, int n_pipes);
/* Same from a string; `where` names the source in errors (e.g. the path). */
sched *sched_parse_csv(const char *text, const char *where, int n_pipes);
/* Reads the grid sched_print writes ("rank r: 0F0 0F1 ...", cells split by spaces; the "rank r:"
 * label is optional but must match the row). Same inference and errors as the CSV loader. */
sched *sched_parse_text(const char *text, const char *where, int n_pipes);

/* ---- generators (pure) and their registry ----
 * Names: gpipe, 1f1b, interleaved-1f1b, zb-h1, zb-h2, zb-v, chimera, pipedream, 2bw, greedy.
 * Return a compute-only schedule (F, B, W, BW actions, then REDUCE_GRAD per stage and STEP unless
 * async), or NULL with an error naming the bad parameter. Async (pipedream): each BW(g, mb) is
 * followed at once by gREDUCE_GRAD and STEP, a weight update per microbatch, no flush.
 *
 * The registry has one row per generator (sched_registry.c); sched_generate, the CLI's help and
 * flags and the planner's search all read it. A new schedule is a generator file (its function
 * declared in gen.h), one row and a golden file (tests/golden). */
typedef struct {
    const char *name;                           /* what --schedule takes: "1f1b" */
    sched *(*generate)(const sched_params *p);  /* called by sched_generate after common checks */
    int chunks;         /* stages per rank per pipe when params.chunks is 0 (interleaved, zb-v: 2) */
    bool more_chunks;   /* takes other chunk counts too (interleaved-1f1b: any >= 2; greedy: 2) */
    int pipes;          /* model replicas pipelined at once: 1, or 2 (chimera) */
    bool async;         /* weights update after every microbatch, no flush (pipedream) */
    bool stage_costs;   /* orders by sched_params' costs (stage_cost_*, cost_*): greedy, adaptive */
    bool mem_limit;     /* reads sched_params.mem_limit: greedy, adaptive */
    bool link_delays;   /* reads link_delay and stage_slowdown: greedy, adaptive */
    bool scored;        /* searches candidates judged by sched_params.score: adaptive */
    bool seq_chunks;    /* runs over sequence chunks in seq1F1B's order (1f1b, zb-h1) */
    const char *help;   /* one line for --help */
} sched_generator;

/* Runs the generator named `name` (a registry row) on p. Unknown name: NULL with an error that
 * lists the known ones. */
sched *sched_generate(const char *name, const sched_params *p);
/* The registry: *n rows, in the order help lists them. Static storage; never freed. */
const sched_generator *sched_generator_rows(int *n);
/* The row named `name`, or NULL. */
const sched_generator *sched_generator_find(const char *name);
/* "gpipe, 1f1b, ...": every row's name, comma-separated (static storage). */
const char *sched_generator_list(void);
/* Writes one line per row, "  NAME  help", under a "schedules:" heading (for --help). */
void sched_print_generators(FILE *f);
/* Every row's name, NULL-terminated (static storage, built from the registry on first use). */
const char *const *sched_generator_name_array(void);
#define sched_generator_names (sched_generator_name_array())

/* ---- the adaptive generator (sched_gen_adaptive.c) ----
 * A schedule for a pipeline with slow links and slow stages, within a memory limit: the best of a
 * set of candidates (the list scheduler made aware of the message delays, with zero bubble's and
 * greedy's priorities, in-flight caps from one round trip, from PipeMorph's warm-up depths and from
 * the limit, and built for assumed delays 0, 1/2, 1 and 2 times the real ones; and, when judged by
 * a scorer, gpipe, 1f1b, zb-h1, zb-h2 where they fit the limit; the list candidates for the real
 * delays again under limits of 2P and P, where below the limit or without one; and what a local
 * search of adjacent swaps in each rank's order, timed like the list scheduler's timeline, makes
 * of each list candidate built for the real delays and limit and, at the end, of the best: a
 * bounded amount of work). With p->score each candidate is
 * judged by it (the simulator under the real costs: then the result is never worse than any of the
 * hand-made ones nor greedy); without, only the list candidates built for the real delays are
 * compared, by the list scheduler's own timeline (an upper bound of the simulated time). Ties go to
 * the candidate holding fewer activations, then to the lower p->tiebreak (when given). One stage
 * per rank (chunks 0 or 1); mem_limit is per stage, 0 means none; any limit >= 1 can be met. */
typedef struct {
    double score;       /* the winner's: the scorer's value, or the list scheduler's makespan */
    int peak;           /* the winner's largest per-stage activations (microbatches) */
    int n_judged;       /* candidates judged */
    char winner[64];    /* which candidate won, e.g. "list b-first cap=round-trip delays x1" */
} sched_adaptive_info;
/* The adaptive schedule (named "adaptive") for p, with what was chosen in *info (may be NULL).
 * NULL with an error naming the parameter, or when the scorer rejected every candidate. */
sched *sched_adaptive(const sched_params *p, sched_adaptive_info *info);
/* PipeMorph's warm-up depths for p's costs and delays: w[P-1] = 1, w[i] = w[i+1] +
 * ceil(delay(i, i+1) / f[i]) + 2, into w[P]. Returns 0, or -1 with an error on bad p. */
int sched_adaptive_warmup(const sched_params *p, int *w);

/* ---- lowering and validation ---- */
/* Returns a new schedule with SEND/RECV actions added in an order that cannot deadlock; stages
 * that hand over on the same rank need no communication. Returns NULL with an error if the input
 * is invalid. For each cross-rank edge: SEND_F / SEND_B right after the producing F / B or BW on
 * the producer's rank, RECV_F / RECV_B right before the consuming action on the consumer's rank.
 * An already lowered (valid) schedule comes back as a copy. Caller frees. */
sched *sched_lower(const sched *s);

typedef struct {
    int rank, step, stage, mb;   /* the failing cell (-1 where not applicable) */
    char msg[512];
} sched_error;
/* Checks: every (stage, mb) of the mb's pipe has exactly one F and its backward (BW, or B then W);
 * F < B < W per (stage, mb); dependencies across stages; each stage on one rank; sends matched by
 * receives; no deadlock (unit-cost execution). Returns 0, or -1 filling err (may be NULL) and
 * setting pt_err to a message that names rank, step, stage, mb and includes the grid with the
 * failing cell marked. */
int sched_validate(const sched *s, sched_error *err);

/* ---- the optimizer's tail (sched_tail.c) ---- */
/* Pushes, at the end of each rank's list, one REDUCE_GRAD per stage on that rank (in the order
 * the stages' last backward work appears) and a STEP: the synchronous tail every generator adds. */
void sched_append_sync_tail(sched *s);
/* A schedule in torch.distributed.pipelining's own notation has no REDUCE_GRAD and no STEP cell
 * (torch reduces and steps outside the schedule). When s is synchronous and has neither kind
 * anywhere, appends the synchronous tail (sched_append_sync_tail) and returns true; otherwise
 * leaves s as it is and returns false (a partial tail is the file's to fix: sched_check_runnable
 * names what is missing). Call it on a valid schedule; the result stays valid. */
bool sched_append_missing_tail(sched *s);
/* Whether the runtime can train with s (its tail; the order of its cells is sched_validate's):
 * synchronous: every rank has a STEP and each stage a REDUCE_GRAD on its rank; asynchronous: one
 * stage per rank and, on every rank, one REDUCE_GRAD then one STEP per microbatch (each
 * collective must be issued by every rank alike). Returns 0, or -1 with an error that starts
 * with `where` (e.g. the file), names the rank and says what to add. */
int sched_check_runnable(const sched *s, const char *where);

/* ---- the dependency rule (sched_deps.c): the one copy; the validator, the simulator and the
 * list scheduler read it, and the executor's slot count is sched_stage_peak_slots ---- */
#define SCHED_MAX_DEPS 3
/* Writes into out[] the actions that must finish before a may start and returns how many (0..3).
 * A prerequisite of kind B stands for the input-gradient backward of (stage, mb): its B, or its
 * BW where the schedule fuses the two (callers look up whichever the schedule has). The rule, for
 * stage g of a pipe (g-1, g+1: sched_stage_prev/next, absent at the pipe's ends):
 *   F(g,mb)      F(g-1,mb)
 *   B, BW(g,mb)  F(g,mb), then B(g+1,mb)
 *   W(g,mb)      B(g,mb)
 *   SEND_F(g,mb) F(g,mb)               SEND_B(g,mb) B(g,mb)
 *   RECV_F(g,mb) SEND_F(g-1,mb)        RECV_B(g,mb) SEND_B(g+1,mb)
 * In a lowered schedule a neighbour on another rank is waited for through the receive: F(g,mb)
 * needs RECV_F(g,mb) instead of F(g-1,mb), B and BW need RECV_B(g,mb) instead of B(g+1,mb). In a
 * compute-only one the neighbour's action itself is the prerequisite (its message is implied).
 * With sequence chunks (s->seq_chunks K > 1; unit mb is chunk mb % K of a microbatch) a stage's
 * F(g,mb) also needs F(g,mb-1) (the chunk before: its keys and values) when mb % K > 0, and B,
 * BW(g,mb) also B(g,mb+1) (the chunk after: its gradients of this chunk's keys and values) when
 * mb % K < K-1.
 * REDUCE_GRAD and STEP have none here: what they wait for is on their own rank, earlier in its
 * list, so the rank's order is their rule. Synchronous: gREDUCE_GRAD after every W or BW of stage
 * g, STEP after the rank's REDUCE_GRADs, one STEP and no compute after it (sched_validate checks
 * this order). Asynchronous: a REDUCE_GRAD and a STEP right after each BW they update. */
int sched_action_deps(const sched *s, const sched_action *a, sched_action out[SCHED_MAX_DEPS]);
/* Activation sets stage g must hold at once when its rank runs its list in order, at least 1:
 *   n = 0, peak = 1; for each action of stage g on rank s->stage_rank[g], in order:
 *     if kind == (recompute ? B : F) n++; if kind == BW && recompute n++;
 *     peak = max(peak, n); if kind == W or BW n--;
 * Without recomputation a set is held from F until W or BW; with it, from the backward's
 * recompute (at B or BW) until W or BW. The executor sizes each stage's activation buffers by
 * this. */
int sched_stage_peak_slots(const sched *s, int g, bool recompute);
/* With sequence chunks (s->seq_chunks K > 1): the microbatches whose kept keys and values stage g
 * holds at once following its rank's order (from its chunk 0's F to its chunk 0's B or BW), at
 * least 1. */
int sched_stage_peak_kv(const sched *s, int g);
/* Peak activations held per stage, in microbatches (F ran, W or BW not yet) following each rank's
 * order: out[S] (0 for a stage with no F; otherwise sched_stage_peak_slots(s, g, false)). */
void sched_peak_activations(const sched *s, int *out);

#endif
