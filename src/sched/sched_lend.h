/* Balanced stage memory (train --balance-memory, BPipe's idea): under 1F1B stage 0 holds P
 * microbatches of activations and the last stage one. A lend plan moves part of what the heavy
 * stages hold to the light ones: a layer of a stage keeps fewer buffers than its peak (its cap),
 * and for the stretches of the schedule where more of its microbatches are alive than the cap
 * allows, one of them (the one whose backward is furthest) is lent: sent to a partner rank after
 * a compute action of the stage and fetched back after a later one, before its backward (whole,
 * or in parts: only its tail goes, its head waits on the lender). The plan balances each rank's
 * total (fixed bytes + activations) and is a pure function of the schedule, the layers' act
 * sizes and the ranks' fixed bytes, so every rank computes the same one: the lender knows when
 * to send and fetch, the partner which messages come and how many buffers it keeps for them.
 * The planner and the simulator price memory with it.
 * Not here: the messages and buffers (run/exec_lend.c), the bytes of a layer (the model's).
 * Positions are a stage's compute actions (F, B, W, BW) in its rank's order, 0-based. */
#ifndef PT_SCHED_LEND_H
#define PT_SCHED_LEND_H
#include "sched/sched.h"

/* One lent microbatch of one layer: away from after compute action `lend_at` to after `fetch_at`
 * (lend_at < fetch_at's following action; fetch_at < its first backward), in the partner's buffer
 * `slot`. */
typedef struct {
    int mb, lend_at, fetch_at, slot;
} sched_lend_window;

/* A layer of a stage that lends: its buffers, where what it lends goes, and when. */
typedef struct {
    int stage, layer;          /* layer: index within the stage, 0..n_layers[stage]-1 */
    int peak, cap;             /* buffers without lending (the stage's peak) and with (< peak) */
    int partner;               /* the stage (= pipeline rank) that holds what it lends */
    int pool;                  /* buffers the partner keeps for it (of `part` bytes each) */
    double bytes;              /* one microbatch of the layer */
    double part;               /* what of each lent microbatch goes: its act's last `part` bytes
                                * (bytes: all of it; less: the first bytes - part stay behind) */
    int heads;                 /* the lender's buffers for what stays (of bytes - part; 0 when
                                * part = bytes): a lent microbatch's head waits in one */
    int n_win;
    sched_lend_window *win;    /* [n_win] in order of lend_at */
} sched_lend_unit;

typedef struct {
    int P;                     /* stages = pipeline ranks */
    int n_units;
    sched_lend_unit *unit;     /* the layers that lend, stage by stage */
    double *plain;             /* [P] activation bytes per rank without lending (peak sets) */
    double *held;              /* [P] bytes of its own activations a rank keeps (caps, heads) */
    double *lent;              /* [P] plain - held: what it moved out */
    double *borrowed;          /* [P] the buffers it keeps for others (pools) */
} sched_lend_plan;

/* The steps a lent microbatch is cut in: a unit lends `parts` of LEND_PARTS of each act away. */
#define LEND_PARTS 16

/* Whether s can lend: synchronous, one pipe, one stage per rank, every stage with an F. 0, or -1
 * with an error that says what --balance-memory needs. */
int sched_lend_check(const sched *s);
/* The plan for s (sched_lend_check must pass) whose stage g has n_layers[g] layers of bytes[g][l]
 * bytes per microbatch, on ranks that hold fixed[g] bytes besides (parameters, gradients, moments,
 * buffers; NULL: none): starting from no lending, a layer of a rank with the largest total
 * (fixed + held + borrowed) lends one part (LEND_PARTS) of one microbatch to any other rank, or,
 * lending already, one part more of each microbatch away or one microbatch more, as long as that
 * lowers the largest total (ties: the sum of squares). Returns 0, or -1 (sched_lend_check's
 * error). Free with sched_lend_plan_free. */
int sched_lend_balance(const sched *s, const int *n_layers, const double *const *bytes, const double *fixed,
                       sched_lend_plan *out);
void sched_lend_plan_free(sched_lend_plan *p);
/* held + borrowed of rank r: the activation bytes it holds with the plan (not its fixed bytes). */
double sched_lend_rank_bytes(const sched_lend_plan *p, int r);
/* The unit of (stage, layer), or NULL when that layer does not lend. */
const sched_lend_unit *sched_lend_find(const sched_lend_plan *p, int stage, int layer);

#endif
