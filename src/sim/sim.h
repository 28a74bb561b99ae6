/* Discrete-event simulator of pipeline schedules: runs every rank's action list with durations
 * from a cost model (per-stage F/B/W times, link latency/bandwidth, slow links and stages,
 * compute and communication overlapping on separate streams) and reports iteration time, bubble,
 * memory and the critical path. Not a validator (see sched_validate) and not a runtime.
 *
 * Time unit: whatever the costs are in (seconds for real costs; 1 per action for unit costs).
 * Legend: P ranks, S stages, M microbatches, N iterations. */
#ifndef PT_SIM_H
#define PT_SIM_H
#include "sched/sched.h"
#include "trace/timeline.h"
#include <stdbool.h>
#include <stdio.h>

/* The "format" of the simulator's costs file (optional in the file, for files written before it
 * had one). Not the profile's costs file ("pipetrain-costs/1", for `plan --costs`): each reader
 * recognises the other's format and says so. */
#define SIM_COSTS_FORMAT "pipetrain-sim-costs/1"

/* Largest cost value accepted (seconds, bytes, bytes/s, factors): far above any real one, and
 * sums and products of millions of them stay finite (no inf or null iteration time). */
#define SIM_COST_MAX 1e15

/* Per-link override between ranks a and b (either direction). A negative latency or bandwidth
 * keeps the uniform value; extra is added to every message on the link (a slow link). rate > 0
 * shapes the link itself (a slow link in bandwidth, tc's tbf): each direction is a FIFO queue
 * that a message of `bytes` holds for bytes / rate after it leaves its sender's send stream, so
 * messages sent close together wait for each other; 0: no queue of its own. */
typedef struct {
    int a, b;
    double latency, bandwidth, extra;
    double rate;            /* bytes per second of the link's own queue, each direction; 0: none */
} sim_link;

/* A fault (--slow-link, --slow-stage) over a window of iterations (1-based, inclusive; to = 0:
 * to the last one): a slow link adds `amount` seconds to every message between ranks a and b
 * (either way) or, given in bandwidth, queues them at `rate` bytes per second each way; a slow
 * stage multiplies stage a's f, b, w and bw by `amount`. sim_run applies each in the iterations
 * of its window; without a window a fault runs from 1 to the end. */
typedef struct {
    bool link;              /* a slow link (ranks a, b), else a slow stage (stage a; b = -1) */
    int a, b;
    double amount;          /* link: extra seconds per message (>= 0); stage: factor (>= 1) */
    double rate;            /* link: > 0 for a link slow in bandwidth (bytes per second of its
                             * queue: sim_link.rate) instead of in delay (then amount is 0) */
    int from, to;           /* iterations, 1-based, inclusive; to = 0: open-ended */
    char spec[64];          /* the flag's value, for errors */
} sim_fault;

typedef struct {
    int n_stages;           /* S */
    double *f, *b, *w;      /* [S] compute times of F, B (input grad), W (weight grad) */
    double *bw;             /* [S] time of a fused BW; a negative entry means b + w */
    double *act_bytes;      /* [S] activation bytes per microbatch: memory held and message size */
    double *param_bytes;    /* [S] bytes of one copy of a stage's weights: priced per extra weight
                             * version an asynchronous schedule keeps (0, sim_costs_init: unpriced) */
    double *reduce;         /* [S] time of REDUCE_GRAD (0: free) */
    bool reduce_overlap;    /* a synchronous schedule's REDUCE_GRAD of stage g runs on the rank's
                             * communication stream from g's last W (the runtime's overlapped
                             * reduction), not on the compute stream at its place in the list;
                             * STEP waits for it; busy time counts compute and reductions once.
                             * false (sim_costs_init): in the list, as written */
    double step;            /* time of STEP */
    double latency;         /* seconds per message, every link */
    double bandwidth;       /* bytes per second, every link; 0 means infinite */
    sim_link *links;        /* [n_links] overrides */
    int n_links;
    sim_fault *faults;      /* [n_faults] slow links and stages, each over its iterations (sim_run
                             * applies them; the arrays and links above hold none of them) */
    int n_faults;
    /* Tensor parallelism (docs/tensor-parallel.md): each stage runs on a group of tp ranks that
     * all-reduce inside its F and B (never W). f, b and bw above already include the part of that
     * time the compute stream waits for (all of it, or under --tp-overlap what the ping-pong leaves
     * exposed: docs/tensor-parallel.md); tp_f and tp_b say how much of f and b it is, for reports. tp 1 (sim_costs_init): none, and both arrays 0. */
    int tp;
    double *tp_f, *tp_b;    /* [S] seconds of TP all-reduces within f[g] and b[g] */
    /* Sequence chunks (sched.seq_chunks K > 1): f, b, bw and act_bytes above are a unit's (a
     * chunk's mean); att_f[g], att_b[g] the attention's part of f[g], b[g], which grows with the
     * chunk's place: chunk c of K takes f - att_f + att_f * (2c+1)/K (its queries see (c + 1/2)
     * T/K keys on average), b (and bw's b part) alike; kv_bytes[g] what a stage holds per
     * microbatch from its chunk 0's F to its chunk 0's backward (kept keys and values), counted
     * in the memory peak. NULL (sim_costs_init): every unit the same, nothing kept. */
    double *att_f, *att_b, *kv_bytes;
} sim_costs;

/* Uniform costs for S stages: f, b, w per stage, fused bw = b + w, no bytes, free links. */
void sim_costs_init(sim_costs *c, int n_stages, double f, double b, double w);
void sim_costs_free(sim_costs *c);
/* Gives c the sequence chunks' arrays (att_f, att_b, kv_bytes), zeros, when it has none. */
void sim_costs_seq_chunks(sim_costs *c);
/* "--cost" spec "f=1,b=1,w=1[,bw=X][,act=BYTES]" applied to every stage. Error names the key. */
int sim_costs_parse_spec(sim_costs *c, const char *spec);
/* Loads a costs JSON file (format in docs/simulator.md) over c's current values; "format", when
 * present, must be SIM_COSTS_FORMAT (a profile's costs file is named as such, with what to use
 * instead); per-stage fields are a number (every stage) or an array of S numbers. Every value must be finite, >= 0
 * and at most 1e15; links must join two different ranks in 0..n_ranks-1 (n_ranks <= 0: not
 * bounded); an unknown key is an error listing the known ones. Errors name file and field. */
int sim_costs_load_json(sim_costs *c, const char *path, int n_ranks);
/* "I-J:SECONDS[@FROM-TO]": every message between ranks I and J (either way) takes SECONDS (>= 0)
 * longer, in iterations FROM..TO (1-based, inclusive; "@FROM-": to the end; no window: all), kept
 * as a sim_fault. "I-J:RATE[@FROM-TO]", a number with a unit of bandwidth (bits per second:
 * bit, kbit, Mbit, Gbit, as tc writes them, "/s" optional; bytes per second: B/s, kB/s, MB/s, GB/s;
 * prefixes k, M, G decimal, either case), makes the link slow in bandwidth instead: each direction a
 * queue of that many bytes per second (sim_link.rate). Two rates on one link: the slower holds.
 * n_ranks bounds I and J. Errors name the flag (--slow-link), quote the spec and say what is wrong
 * (a rank outside the pipeline, I = J, negative seconds, a rate not > 0, an unknown unit, FROM < 1
 * or FROM > TO). */
int sim_costs_add_slow_link(sim_costs *c, const char *spec, int n_ranks);
/* "I:FACTOR[@FROM-TO]": stage I's F, B, W, BW times multiplied by FACTOR (>= 1: a straggler is
 * never faster), with a window as above. Errors name --slow-stage and quote the spec. */
int sim_costs_add_slow_stage(sim_costs *c, const char *spec);
/* The same two with the window counted in `unit` in errors ("steps": the runtime's flags, which
 * inject a RATE too: comm_faulty_set_rate). */
int sim_costs_add_slow_link_in(sim_costs *c, const char *spec, int n_ranks, const char *unit);
int sim_costs_add_slow_stage_in(sim_costs *c, const char *spec, const char *unit);
/* Whether fault x is active in iteration (or step) iter, 1-based. */
bool sim_fault_active(const sim_fault *x, int iter);
/* Checks the faults against a schedule run for n_iters iterations: every slow link must join two
 * ranks that exchange messages in s (a link no message crosses changes nothing: `--slow-link
 * '0-2:1': ranks 0 and 2 exchange no messages in zb-h1 ...`), one slow in bandwidth must carry
 * messages of some bytes (act_bytes of a stage whose messages cross it), and every window must
 * start by iteration n_iters. Links from a costs file are not checked. Returns 0 or -1 with the
 * error. */
int sim_costs_check_faults(const sim_costs *c, const sched *s, int n_iters);
/* out = c as it stands in iteration iter (1-based): the faults active then applied to the
 * per-stage times and the links, none kept. out is new (free with sim_costs_free). */
void sim_costs_at(const sim_costs *c, int iter, sim_costs *out);
/* Deep copy of c (faults included); free with sim_costs_free. */
void sim_costs_copy(const sim_costs *c, sim_costs *out);
/* Time from the end of the action that produced a message of `bytes` on link a-b until it can be
 * consumed, when the sender's send stream and the link's queue are free: bytes / bandwidth +
 * bytes / rate (a shaped link) + latency + extra of the link (faults not included: use
 * sim_costs_at). */
double sim_costs_message_time(const sim_costs *c, int a, int b, double bytes);
/* The seconds a message of `bytes` holds link a-b's own queue: bytes / rate of the link (0 when the
 * link is not shaped; faults not included). Part of sim_costs_message_time. */
double sim_costs_link_busy(const sim_costs *c, int a, int b, double bytes);
/* Shapes link a-b to `rate` bytes per second each way (sim_link.rate; adds the override, keeping
 * the uniform latency and bandwidth, when the link has none; rate 0 removes the shaping). */
void sim_costs_set_link_rate(sim_costs *c, int a, int b, double rate);
/* Seconds of `collectives` ring all-reduces over n ranks carrying `bytes` in all (each rank's
 * payload, summed over the collectives) on a link of `bandwidth` bytes/s and `latency` s:
 * 2(n-1)/n x bytes / bandwidth + collectives x 2(n-1) x latency. 0 for n <= 1. */
double sim_allreduce_time(int n, double bytes, int collectives, double bandwidth, double latency);
/* Seconds of `collectives` ring reduce-scatters or all-gathers over n ranks whose payloads (the
 * whole buffer each is called on: a reduce-scatter's input, an all-gather's output) sum to
 * `bytes`: (n-1)/n x bytes / bandwidth + collectives x (n-1) x latency, half an all-reduce of the
 * same payload. A reduce-scatter and an all-gather of one buffer take what its all-reduce does.
 * 0 for n <= 1. */
double sim_rsag_time(int n, double bytes, int collectives, double bandwidth, double latency);
/* Adds or updates the override for link a-b (negative latency/bandwidth: keep uniform). */
void sim_costs_set_link(sim_costs *c, int a, int b, double latency, double bandwidth, double extra);

typedef struct {
    int iterations;         /* N >= 1 (0 means 1) */
    bool post_validation;   /* ranks start the next iteration right after their own STEP */
} sim_opts;

/* One link of the critical path: an event and how long it waited before starting. */
typedef struct {
    int ev;                 /* index into result.tl.ev */
    double waited;          /* start - ready (a RECV: end - ready, the time it blocked its rank) */
} sim_crit;

typedef struct {
    int n_ranks, n_stages, n_iters;
    double makespan;        /* end of the last action, all iterations */
    double iteration_time;  /* makespan for N = 1; steady-state time per iteration for N > 1 */
    double *iter_end;       /* [N] latest end of iteration i over ranks */
    double bubble_fraction; /* sum_r (makespan - busy_r) / (P * makespan) */
    double steady_bubble;   /* 1 - busy per iteration / (P * iteration_time); = bubble for N = 1 */
    double ideal_time;      /* busiest rank's compute time per iteration */
    double *busy, *idle;    /* [P] compute time and makespan - busy, all iterations */
    int *peak_mb;           /* [S] peak activations held, in microbatches */
    double *peak_bytes;     /* [S] peak_mb * act_bytes */
    double *rank_peak_bytes;/* [P] peak bytes held by all stages of the rank at once: activations,
                             * plus stash_bytes of its stages */
    double *stash_bytes;    /* [S] weight versions beyond the live one, x param_bytes: asynchronous
                             * only; s->weight_versions - 1 of them (2bw: 1), or with 0 there one
                             * per microbatch in flight at the peak, peak_mb (pipedream's stashes) */
    double *rank_lent, *rank_borrowed;   /* [P] --balance-memory (sim_balance_memory): activation
                             * bytes a rank moved out, and keeps for others; NULL without */
    sim_crit *crit;         /* [n_crit] critical path, first event to last */
    int n_crit;
    timeline tl;            /* every event; compute, send and recv */
} sim_result;

/* Simulates s (lowered, or compute-only: then each cross-rank edge is sent implicitly right
 * after the producing action, exactly as sched_lower would place SEND/RECV). c->n_stages must
 * equal s->n_stages. Fills out (free with sim_result_free). Returns -1 with an error on bad
 * input or deadlock (the error names every stuck rank, its step, action and what it waits for). */
int sim_run(const sched *s, const sim_costs *c, const sim_opts *o, sim_result *out);
void sim_result_free(sim_result *r);
/* train --balance-memory priced (sched/sched_lend.h): the lend plan of s with each stage one
 * layer of c->act_bytes[g] bytes (1 when 0: then bytes read as microbatches); rank_peak_bytes
 * becomes each rank's kept sets plus its borrowed buffers (plus stashes), rank_lent and
 * rank_borrowed are filled. Call after sim_run. 0, or -1 with sched_lend_check's error. */
int sim_balance_memory(const sched *s, const sim_costs *c, sim_result *r);
/* Writes the critical path, one line per event with its wait, to f. */
void sim_print_critical_path(const sim_result *r, FILE *f);

/* Side work in the bubbles (sim_side.c; what the runtime's harvester does, src/harvest): each
 * rank's idle time is cut into waits (the gaps between its compute-stream events, and before
 * the first and after the last up to the makespan); a side task whose steps take `step` seconds
 * runs floor(wait / step) of them back to back in each wait, never one that would not fit. */
typedef struct {
    int n_ranks;
    double step;            /* seconds per side step */
    double *idle;           /* [P] idle time of each rank (the sum of its waits) */
    double *usable;         /* [P] the part of it the side steps fill */
    long *steps;            /* [P] side steps that fit */
    int *waits, *used;      /* [P] waits, and waits with at least one step */
    double idle_total, usable_total;
} sim_side;

/* Fits side steps of `step` seconds (> 0) into r's waits. Free with sim_side_free. -1 on step <= 0. */
int sim_side_fit(const sim_result *r, double step, sim_side *out);
void sim_side_free(sim_side *s);

#endif
