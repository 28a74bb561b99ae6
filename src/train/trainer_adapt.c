/* Straggler adaptation at the step boundary (train --adapt; docs/stragglers.md): an ADAPT hook
 * that reads each step's measured timeline (the same on every rank: every rank decides the same
 * thing, with no coordinator), estimates each link's delay and each stage's slowdown against the
 * costs of recent healthy steps (sim_estimate_timeline), lets the simulator's policy decide with
 * its hysteresis (sim_policy_step), and switches the engine to the adaptive schedule built for the
 * estimate under the memory limit (sim_adaptive_schedule), or back to the starting schedule when
 * the straggler clears. Each switch is a log line and an "adapt" event. Only the order of work
 * changes: parameters, moments and the split stay. A slow link between replicas (their gradient
 * reductions wait) is said at onset and recovery, never adapted to. Not here: the estimate, the policy and the
 * generator (sim/sim_adapt.h, sched/), switching (run_job_replan).
 * Legend: P ranks, S stages (one per rank), M microbatches, D replicas. */
#include "train/trainer_int.h"
#include "plan/plan.h"
#include "sim/sim_adapt.h"
#include "util/pt.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ADAPT_BASELINE 8      /* the expected costs are medians over this many recent healthy steps */
#define ADAPT_MIN_GAIN 0.03   /* switch only to a schedule predicted at least 3% faster */
#define K_KINDS 5             /* per stage: F, B, W, BW, and (stage 0 only) STEP */
/* A stage is slow from 1.5 x the others (and healthy again below 1.25): measured compute on cores
 * shared with other work varies by 30-40% from step to step (the simulator's 1.2 / 1.1 would see
 * stragglers that are not there); a real straggler is 2x or more. */
#define ADAPT_STAGE_ON 1.5
#define ADAPT_STAGE_OFF 1.25
/* A link's delay is what its fastest message of the step took from the send to the receive (the
 * healthy cost model expects free links: the delay includes a slow link's whole transfer, so a
 * link slow from the first step on, or slow in bandwidth, is seen too). Below 1 ms it is jitter
 * (thread wake-ups, copies), not a slow link: for a model whose F takes 0.1 ms the simulator's
 * thresholds of 0.5 and 0.25 x F alone would see one in every wake-up. */
#define ADAPT_LINK_FLOOR 1e-3
/* A receive that returned within 50 us did not wait: its message was there before (it bounds the
 * delay from above only, and says nothing of a link that is slow only where nobody waits). */
#define ADAPT_WAIT_EPS 50e-6

typedef struct train_adapt train_adapt;

/* The last ADAPT_BASELINE healthy steps' measurements, `width` values a step (a ring). */
typedef struct {
    double *v;                      /* [ADAPT_BASELINE][width] */
    int width, n, next;
} adapt_ring;

/* Links between replicas, read from each step's gradient reductions: per pipeline rank p, how long
 * the reduction over the replicas took from the last member's post to the first member seeing it
 * complete (the wait), against the same over recent healthy steps. */
typedef struct {
    adapt_ring base;                /* healthy steps' waits, P a step */
    double *prev;                   /* [P] the last step's excess over the baseline (unfiltered) */
    int *slow;                      /* [P] reported slow (said once per onset and recovery) */
} replica_links;

struct train_adapt {
    int P, S, M, D, mem_limit;
    int overlap;                    /* reductions overlapped (the simulator is told so) */
    sched *start;                   /* the starting schedule (a lowered copy) */
    int switched;                   /* an adaptive schedule is in force */
    sim_policy pol;
    sim_policy_opts po;
    adapt_ring base;                /* healthy steps' values: S * K_KINDS stage medians a step */
    double *prev_slow;              /* [S] the last step's relative stage slowdowns (unfiltered) */
    double *prev_link;              /* [P-1] the last step's link delays (unfiltered) */
    double *prev_busy;              /* [P-1] and the part of them that queued (a link slow in bandwidth) */
    double act_bytes;               /* bytes of one microbatch's activation message (rows x seq x C floats) */
    long first_step;                /* a step not measured: the run's first (a warm-up), or the
                                     * first after a re-split (a new job's first touches) */
    int *split_start, *split_now;   /* [S] blocks per stage: at the start, in force */
    double fl[GPT_MAX_KINDS][3];    /* analytic flops of one microbatch through a layer of each
                                     * kind (gpt_layer_ops' cost): [kind][F, B, W] */
    gpt_config cfg;                 /* the model: which layers a stage holds (gpt_config_*) */
    int said_keep;                  /* a straggler was reported without a switch (since the last
                                     * switch or revert) */
    replica_links rl;               /* links between replicas (D >= 2): seen, said, not adapted to */
};

/* ---- measuring ---------------------------------------------------------------------------- */

static int kind_slot(sched_kind k) {
    return k == ACT_F ? 0 : k == ACT_B ? 1 : k == ACT_W ? 2 : k == ACT_BW ? 3 : k == ACT_STEP ? 4 : -1;
}

/* This step's median duration of each (stage, kind) over every rank and replica, into v[S * K]
 * (-1: none ran); STEP goes to stage 0's slot. */
static void step_medians(const timeline *tl, int S, double *v) {
    double *d = pt_malloc(sizeof *d * (size_t)(tl->n + 1));
    for (int g = 0; g < S; g++)
        for (int k = 0; k < K_KINDS; k++) {
            int n = 0;
            for (int i = 0; i < tl->n; i++) {
                const tl_event *x = &tl->ev[i];
                if (kind_slot(x->act.kind) == k && (k == 4 ? g == 0 : x->act.stage == g)) d[n++] = x->end - x->start;
            }
            v[g * K_KINDS + k] = n ? pt_median(d, n) : -1;
        }
    free(d);
}

static void ring_init(adapt_ring *r, int width) {
    r->v = pt_calloc((size_t)ADAPT_BASELINE * (size_t)width, sizeof *r->v);
    r->width = width, r->n = r->next = 0;
}

static void ring_add(adapt_ring *r, const double *v) {
    memcpy(r->v + (size_t)r->next * (size_t)r->width, v, sizeof *v * (size_t)r->width);
    r->next = (r->next + 1) % ADAPT_BASELINE;
    if (r->n < ADAPT_BASELINE) r->n++;
}

/* The median over the ring's steps of value k (-1 when none has it: values < 0 are missing). */
static double ring_median(const adapt_ring *r, int k) {
    double x[ADAPT_BASELINE];
    int n = 0;
    for (int i = 0; i < r->n; i++) {
        double y = r->v[(size_t)i * (size_t)r->width + (size_t)k];
        if (y >= 0) x[n++] = y;
    }
    return n ? pt_median(x, n) : -1;
}

/* The healthy costs: medians over the baseline steps (a fused BW's halves stand for B and W),
 * links free, messages of their real size (a link slow in bandwidth is a rate on them). */
static void base_costs(const train_adapt *A, sim_costs *c) {
    double m[K_KINDS];
    sim_costs_init(c, A->S, 0, 0, 0);
    c->reduce_overlap = A->overlap;
    for (int g = 0; g < A->S; g++) c->act_bytes[g] = A->act_bytes;
    for (int g = 0; g < A->S; g++) {
        for (int k = 0; k < K_KINDS; k++) m[k] = ring_median(&A->base, g * K_KINDS + k);
        c->f[g] = m[0] > 0 ? m[0] : 0;
        c->b[g] = m[1] >= 0 ? m[1] : m[3] > 0 ? m[3] / 2 : 0;
        c->w[g] = m[2] >= 0 ? m[2] : m[3] > 0 ? m[3] / 2 : 0;
        c->bw[g] = m[3] >= 0 ? m[3] : -1;
        if (g == 0 && m[4] > 0) c->step = m[4];
    }
}

/* The events of one lane, replica d's TP rank t (its pipeline ranks exchange the stream's
 * messages among themselves), as a timeline of P ranks (world rank of (d, p, t) -> p), links
 * kept. */
static void lane_timeline(const timeline *tl, const sched *s, const run_layout *lo, int d, int t,
                          timeline *out) {
    int *idx = pt_malloc(sizeof *idx * (size_t)(tl->n + 1));
    timeline_init(out, s, NULL, 1);
    for (int i = 0; i < tl->n; i++) {
        const tl_event *x = &tl->ev[i];
        int xd, xp, xt, pd, pp, pt;
        idx[i] = -1;
        run_layout_coords(lo, x->rank, &xd, &xp, &xt);
        if (xd != d || xt != t) continue;
        tl_event y = *x;
        y.rank = xp;
        if (y.peer >= 0) {
            run_layout_coords(lo, y.peer, &pd, &pp, &pt);
            y.peer = pp;
        }
        idx[i] = timeline_push(out, &y);
    }
    for (int i = 0; i < out->n; i++)
        if (out->ev[i].link >= 0) out->ev[i].link = idx[out->ev[i].link];
    free(idx);
}

/* The estimate of the step against the healthy costs: per lane, each replica's TP rank (each
 * link's slower direction, from the messages a receiver waited for), then the largest delay and
 * slowdown of each link and stage over the lanes (every lane runs the one schedule). Stage
 * slowdowns are taken relative to the fastest stage, so a machine-wide slowdown (other jobs on
 * the cores) is no straggler. */
static int step_estimate(train_adapt *A, const timeline *tl, const sched *s, const run_layout *layout,
                         const sim_costs *healthy, sim_estimate *est) {
    sim_estimate one;
    sim_estimate_init(&one, A->P, A->S);
    one.directed = true;   /* a measured link may be slow one way (tc shapes a host's egress) */
    one.wait_eps = ADAPT_WAIT_EPS;
    for (int r = 0; r + 1 < A->P; r++) est->link_delay[r] = est->link_busy[r] = 0;
    for (int g = 0; g < A->S; g++) est->stage_slow[g] = 0;
    int rc = 0;
    for (int lane = 0; lane < A->D * layout->tp && rc == 0; lane++) {
        timeline sub;
        lane_timeline(tl, s, layout, lane / layout->tp, lane % layout->tp, &sub);
        rc = sim_estimate_timeline(&sub, healthy, 0, &one);
        timeline_free(&sub);
        for (int r = 0; r + 1 < A->P && rc == 0; r++) {
            est->link_delay[r] = fmax(est->link_delay[r], one.link_delay[r]);
            est->link_busy[r] = fmax(est->link_busy[r], one.link_busy[r]);
            est->link_told[r] |= one.link_told[r];
        }
        for (int g = 0; g < A->S && rc == 0; g++) est->stage_slow[g] = fmax(est->stage_slow[g], one.stage_slow[g]);
    }
    double lo = INFINITY;
    for (int g = 0; g < A->S; g++) lo = fmin(lo, est->stage_slow[g]);
    for (int g = 0; g < A->S && lo > 0 && isfinite(lo); g++) est->stage_slow[g] /= lo;
    for (int g = 0; g < A->S; g++) {   /* two steps in a row: one slow step of a busy core is noise
                                        * (a sender that lost its core for a while makes one slow
                                        * step of a link too: the hook filters links the same way) */
        double now = est->stage_slow[g];
        est->stage_slow[g] = fmin(now, A->prev_slow[g]);
        A->prev_slow[g] = now;
    }
    sim_estimate_free(&one);
    return rc;
}

static double mean_f(const sim_costs *c) {
    double m = 0;
    for (int g = 0; g < c->n_stages; g++) m += c->f[g] / c->n_stages;
    return m;
}

/* Healthy by the `off` thresholds, as this step measured it (prev_*: unfiltered, so the first
 * slow step of a straggler never joins the baseline). */
static int estimate_healthy(const train_adapt *A, const sim_estimate *e, double mf) {
    for (int r = 0; r + 1 < A->P; r++)
        if (A->prev_link[r] >= A->po.link_off * mf) return 0;
    for (int g = 0; g < A->S; g++)
        if (A->prev_slow[g] >= A->po.stage_off) return 0;
    return 1;
}

/* ---- switching ---------------------------------------------------------------------------- */

/* "link 0-1 +48 ms per message; stage 1 x2.0", or "healthy", into buf. */
static void describe(const train_adapt *A, const sim_estimate *e, double mf, char *buf, size_t n) {
    size_t at = 0;
    buf[0] = 0;
    for (int r = 0; r + 1 < A->P && at < n; r++)
        if (e->link_delay[r] >= A->po.link_off * mf)
            at += (size_t)snprintf(buf + at, n - at, "%slink %d-%d +%.0f ms per message", at ? "; " : "", r, r + 1,
                                   e->link_delay[r] * 1e3);
    for (int g = 0; g < A->S && at < n; g++)
        if (e->stage_slow[g] >= A->po.stage_off)
            at += (size_t)snprintf(buf + at, n - at, "%sstage %d x%.2f", at ? "; " : "", g, e->stage_slow[g]);
    if (!at) snprintf(buf, n, "healthy");
}

/* The links of e slow in bandwidth ("link 0-1 slow in bandwidth: each message holds it 40 ms of its
 * 44 (1.2 MB/s), those sent closer together queue"), or "" when none is, into buf. */
static void queue_text(const train_adapt *A, const sim_estimate *e, double mf, char *buf, size_t n) {
    size_t at = 0;
    buf[0] = 0;
    for (int r = 0; r + 1 < A->P && at < n; r++)
        if (e->link_delay[r] >= A->po.link_off * mf && e->link_busy[r] > 0)
            at += (size_t)snprintf(buf + at, n - at, "%slink %d-%d slow in bandwidth: each message holds it %.0f ms "
                                   "of its %.0f (%.3g MB/s), those sent closer together queue", at ? "; " : "", r,
                                   r + 1, e->link_busy[r] * 1e3, e->link_delay[r] * 1e3,
                                   A->act_bytes / e->link_busy[r] / 1e6);
}

/* Forwards each rank runs before its first backward ("5,4,2,1"), into buf. */
static void warmup_text(const sched *s, char *buf, size_t n) {
    size_t at = 0;
    for (int r = 0; r < s->n_ranks && at < n; r++) {
        int w = 0;
        for (int i = 0; i < s->len[r]; i++) {
            sched_kind k = s->acts[r][i].kind;
            if (k == ACT_B || k == ACT_BW) break;
            w += k == ACT_F;
        }
        at += (size_t)snprintf(buf + at, n - at, "%s%d", r ? "," : "", w);
    }
}

/* The event's fields: the estimate, what runs now, the predictions (seconds per step). */
static cJSON *adapt_fields(const train_adapt *A, const sim_estimate *e, const char *action, const char *schedule,
                           double predicted, double was) {
    cJSON *o = cJSON_CreateObject(), *links = cJSON_CreateArray(), *stages = cJSON_CreateArray();
    cJSON *busy = cJSON_CreateArray();
    cJSON_AddStringToObject(o, "action", action);
    cJSON_AddStringToObject(o, "schedule", schedule);
    for (int r = 0; r + 1 < A->P; r++) cJSON_AddItemToArray(links, cJSON_CreateNumber(e->link_delay[r]));
    for (int r = 0; r + 1 < A->P; r++) cJSON_AddItemToArray(busy, cJSON_CreateNumber(e->link_busy[r]));
    for (int g = 0; g < A->S; g++) cJSON_AddItemToArray(stages, cJSON_CreateNumber(e->stage_slow[g]));
    cJSON_AddItemToObject(o, "link_delay_s", links);
    cJSON_AddItemToObject(o, "link_queue_s", busy);
    cJSON_AddItemToObject(o, "stage_slowdown", stages);
    if (predicted > 0) cJSON_AddNumberToObject(o, "predicted_s", predicted);
    if (was > 0) cJSON_AddNumberToObject(o, "was_s", was);
    cJSON_AddNumberToObject(o, "mem_limit", A->mem_limit);
    return o;
}

static void say(train_ctx *t, long step, const char *line, cJSON *fields) {
    if (t->root) {
        printf("step %ld: %s\n", step, line);
        fflush(stdout);
    }
    train_report_adapt(t, step, line, fields);
}

/* Why nothing helps: a slow stage (only moving layers would: not done), or the memory limit (the
 * limit that would help and what it would give), into buf ("" when neither says more). */
static void memory_hint(const train_adapt *A, const sim_costs *healthy, const sim_estimate *est, double was,
                        char *buf, size_t n) {
    int slow_link = 0;
    buf[0] = 0;
    for (int r = 0; r + 1 < A->P; r++) slow_link |= est->link_delay[r] > 0;
    sim_costs c;
    sim_costs_apply_estimate(healthy, est, &c);
    sched_params shape = { .ranks = A->P, .microbatches = A->M, .chunks = 1, .mem_limit = A->mem_limit };
    double t = 0;
    int peak = 0, need = slow_link ? sim_adaptive_mem_needed(&shape, &c, 0.05, &t, &peak) : -1;
    sim_costs_free(&c);
    if (need > A->mem_limit && t < was * (1 - ADAPT_MIN_GAIN))
        snprintf(buf, n, " (--mem-limit %d would give %.3g s/step)", need, t);
    else if (!slow_link)
        snprintf(buf, n, " (no split of the layers helps either)");
}

/* ---- re-splitting a slow stage's layers -------------------------------------------------- */

/* "2,2" into out[S] (blocks per stage); -1 when it does not have S counts. */
static int parse_split(const char *text, int S, int *out) {
    int n = 0;
    for (const char *q = text; *q && n < S; n++) {
        char *end;
        out[n] = (int)strtol(q, &end, 10);
        q = *end == ',' ? end + 1 : end;
    }
    return n == S ? 0 : -1;
}

static int same_split(const int *a, const int *b, int S) { return !memcmp(a, b, sizeof *a * (size_t)S); }

static void split_text(const int *v, int S, char *buf, size_t n) {
    size_t at = 0;
    for (int g = 0; g < S && at < n; g++) at += (size_t)snprintf(buf + at, n - at, "%s%d", g ? "," : "", v[g]);
}

/* Analytic flops of stage g under split v (blocks per stage) in phase ph (0 F, 1 B, 2 W): its
 * blocks, and the embedding on the first stage, the head on the last. */
static double stage_flops(const train_adapt *A, int g, const int *v, int ph) {
    int count[GPT_MAX_KINDS];
    double f = 0;
    gpt_config_chunk_kinds(&A->cfg, A->S, v, g, count);
    for (int k = 0; k < GPT_MAX_KINDS; k++) f += count[k] * A->fl[k][ph];
    return f;
}

/* The factor stage g's kind k (F, B, W, BW) scales by from split `from` to `to`. */
static double stage_factor(const train_adapt *A, int g, const int *from, const int *to, int k) {
    double a = 0, b = 0;
    for (int ph = 0; ph < 3; ph++)
        if (ph == k || (k == 3 && ph > 0)) a += stage_flops(A, g, from, ph), b += stage_flops(A, g, to, ph);
    return a > 0 ? b / a : 1;
}

/* The planner's exact split of the blocks by measured speed (plan_split): each block costs its
 * analytic F + B + W, the first and last also the embedding's and the head's; stage g's speed is
 * 1 / its slowdown; no memory cap. out[S]. */
static int speed_split(const train_adapt *A, const sim_estimate *est, int *out) {
    int L = 0, S = A->S, rc;
    for (int g = 0; g < S; g++) L += A->split_now[g];
    double *work = pt_calloc((size_t)L, sizeof *work), *zero = pt_calloc((size_t)L + (size_t)S, sizeof *zero);
    double *speed = pt_malloc(sizeof *speed * (size_t)S);
    int *first = pt_malloc(sizeof *first * (size_t)(S + 1));
    for (int i = 0; i < L; i++) {
        int count[GPT_MAX_KINDS];
        gpt_config_item_kinds(&A->cfg, i, count);
        for (int ph = 0; ph < 3; ph++) {
            double f = 0;
            for (int k = 0; k < GPT_MAX_KINDS; k++) f += count[k] * A->fl[k][ph];
            work[i] += f;
        }
    }
    for (int g = 0; g < S; g++) speed[g] = 1 / (est->stage_slow[g] > 0 ? est->stage_slow[g] : 1);
    plan_chain c = { .n = L, .K = S, .work = work, .mem_fixed = zero, .mem_act = zero, .speed = speed,
                     .cap = zero, .inflight = zero };
    double x;
    rc = plan_split(&c, first, &x);
    for (int g = 0; g < S && rc == 0; g++) out[g] = first[g + 1] - first[g];
    free(work), free(zero), free(speed), free(first);
    return rc;
}

/* The costs of each stage under split `to` from those under `from`: each kind scales with the
 * stage's analytic flops of it (the measured time per flop of a stage is kept). */
static void rescale_costs(const train_adapt *A, sim_costs *c, const int *from, const int *to) {
    for (int g = 0; g < c->n_stages; g++) {
        c->f[g] *= stage_factor(A, g, from, to, 0);
        c->b[g] *= stage_factor(A, g, from, to, 1);
        c->w[g] *= stage_factor(A, g, from, to, 2);
        if (c->bw[g] >= 0) c->bw[g] *= stage_factor(A, g, from, to, 3);
    }
}

/* The same for the baseline's steps, so they stay comparable with the steps to come. */
static void rescale_base(train_adapt *A, const int *from, const int *to) {
    for (int i = 0; i < A->base.n; i++)
        for (int g = 0; g < A->S; g++)
            for (int kind = 0; kind < 4; kind++) {
                double *v = &A->base.v[(size_t)i * (size_t)A->base.width + (size_t)g * K_KINDS + (size_t)kind];
                if (*v > 0) *v *= stage_factor(A, g, from, to, kind);
            }
}

/* Moves to split `to` (the engine's resplit) and rescales the expected costs; the next step is
 * not measured (a new job's first touches). */
static int move_split(train_ctx *t, train_adapt *A, long step, sim_costs *healthy, const int *to) {
    if (t->e->vt->resplit(t->e, to, A->S) < 0) return pt_adderr("step %ld: --adapt: ", step);
    rescale_costs(A, healthy, A->split_now, to);
    rescale_base(A, A->split_now, to);
    memcpy(A->split_now, to, sizeof *to * (size_t)A->S);
    A->first_step = step + 1;
    return 0;
}

/* A slow stage: the split by measured speed when the simulator, under the estimate, predicts the
 * schedule in force faster with it (at least ADAPT_MIN_GAIN); healthy is rescaled to it. 1 when
 * it moved (and said so), 0 when not, -1 on an error. */
static int adapt_split(train_ctx *t, train_adapt *A, long step, sim_costs *healthy, const sim_estimate *est,
                       double mf) {
    int *want = pt_malloc(sizeof *want * (size_t)A->S), moved = 0, slow = 0;
    for (int g = 0; g < A->S; g++) slow |= est->stage_slow[g] >= A->po.stage_off;
    if (!slow || !t->e->vt->resplit || speed_split(A, est, want) < 0 || same_split(want, A->split_now, A->S)) {
        free(want);
        return 0;
    }
    const sched *cur = t->e->vt->schedule(t->e);
    sim_costs now, then, h2;
    sim_costs_apply_estimate(healthy, est, &now);
    sim_costs_copy(healthy, &h2);
    rescale_costs(A, &h2, A->split_now, want);
    sim_costs_apply_estimate(&h2, est, &then);
    double was = sim_schedule_score(cur, &now), will = sim_schedule_score(cur, &then);
    sim_costs_free(&now), sim_costs_free(&then), sim_costs_free(&h2);
    if (was > 0 && will > 0 && will < was * (1 - ADAPT_MIN_GAIN)) {
        char what[200], from[64], to[64], line[512], name[32];
        snprintf(name, sizeof name, "%s", cur->name);   /* cur goes with the old job */
        describe(A, est, mf, what, sizeof what);
        split_text(A->split_now, A->S, from, sizeof from);
        split_text(want, A->S, to, sizeof to);
        if (move_split(t, A, step, healthy, want) < 0) { free(want); return -1; }
        snprintf(line, sizeof line, "%s; layers re-split %s -> %s by measured speed; predicted %.3g s/step, was %.3g",
                 what, from, to, will, was);
        cJSON *f = adapt_fields(A, est, "resplit", name, will, was);
        cJSON_AddStringToObject(f, "split", to);
        say(t, step, line, f);
        moved = 1;
    }
    free(want);
    return moved;
}

/* Builds the adaptive schedule for the healthy costs with the estimate applied, within the memory
 * limit, and switches to it when it is predicted faster than the schedule in force. */
static int adapt_switch(train_ctx *t, train_adapt *A, long step, sim_costs *healthy, const sim_estimate *est,
                        double mf) {
    train_engine *e = t->e;
    int moved = adapt_split(t, A, step, healthy, est, mf);
    if (moved < 0) return -1;
    sim_costs c;
    sim_costs_apply_estimate(healthy, est, &c);
    sched_params shape = { .ranks = A->P, .microbatches = A->M, .chunks = 1, .mem_limit = A->mem_limit };
    sched_adaptive_info info;
    sched *s = sim_adaptive_schedule(&shape, &c, &info);
    double was = s ? sim_schedule_score(e->vt->schedule(e), &c) : -1;
    sim_costs_free(&c);
    if (!s || was < 0) { sched_free(s); return pt_adderr("step %ld: --adapt: ", step); }
    char what[200], line[640], wu[96], queue[400];
    describe(A, est, mf, what, sizeof what);
    warmup_text(s, wu, sizeof wu);
    queue_text(A, est, mf, queue, sizeof queue);
    if (queue[0] && t->root) printf("step %ld: %s\n", step, queue);   /* its own line: the switch's keeps its form */
    if (info.score > was * (1 - ADAPT_MIN_GAIN)) {
        if (!A->said_keep && !A->switched && !moved) {   /* said once; an adaptive one in force stays quietly */
            char hint[160];
            memory_hint(A, healthy, est, was, hint, sizeof hint);
            snprintf(line, sizeof line, "%s; no schedule within --mem-limit %d is faster (adaptive %.3g s/step, %s "
                     "%.3g): keeping %s%s", what, A->mem_limit, info.score, e->vt->schedule(e)->name, was,
                     e->vt->schedule(e)->name, hint);
            say(t, step, line, adapt_fields(A, est, "keep", e->vt->schedule(e)->name, info.score, was));
        }
        A->said_keep = 1;
        sched_free(s);
        return 0;
    }
    int rc = e->vt->replan(e, s);
    sched_free(s);
    if (rc < 0) return pt_adderr("step %ld: --adapt: ", step);
    A->switched = 1;
    A->said_keep = 0;
    snprintf(line, sizeof line, "%s; adaptive warm-up %s (peak %d of limit %d); predicted %.3g s/step, was %.3g", what,
             wu, info.peak, A->mem_limit, info.score, was);
    say(t, step, line, adapt_fields(A, est, "adapt", "adaptive", info.score, was));
    return 0;
}

static int adapt_revert(train_ctx *t, train_adapt *A, long step, sim_costs *healthy, const sim_estimate *est) {
    train_engine *e = t->e;
    char line[256], sp[64] = "";
    int moved = !same_split(A->split_now, A->split_start, A->S);
    if (!A->switched && !A->said_keep && !moved) return 0;
    if (A->switched && e->vt->replan(e, A->start) < 0) return pt_adderr("step %ld: --adapt: ", step);
    if (moved) {
        if (move_split(t, A, step, healthy, A->split_start) < 0) return -1;
        split_text(A->split_start, A->S, sp, sizeof sp);
    }
    snprintf(line, sizeof line, "healthy again; %s %s%s%s", A->switched ? "back to" : "still", A->start->name,
             moved ? ", layers back to " : "", sp);
    A->switched = A->said_keep = 0;
    say(t, step, line, adapt_fields(A, est, "revert", A->start->name, -1, -1));
    return 0;
}

/* ---- links between replicas ------------------------------------------------------------- */

/* A reduction between replicas is slow once it waits this much longer than when healthy, two
 * steps running (as a pipeline link: the link floor or link_on x mean F, whichever is larger),
 * and healthy again below half of it (hysteresis). */
static double replica_on(const train_adapt *A, double mf) { return fmax(ADAPT_LINK_FLOOR, A->po.link_on * mf); }

static void replica_init(train_adapt *A) {
    replica_links *L = &A->rl;
    ring_init(&L->base, A->P);
    L->prev = pt_calloc((size_t)A->P, sizeof *L->prev);
    L->slow = pt_calloc((size_t)A->P, sizeof *L->slow);
}

static void replica_free(train_adapt *A) {
    free(A->rl.base.v), free(A->rl.prev), free(A->rl.slow);
}

/* Per pipeline rank p, this step's wait of the gradient reduction over the replicas into w[P]:
 * per TP rank (each reduces over its own group of replicas), the first member's end of its
 * REDUCE_GRAD event minus the last member's start; the largest over the TP ranks (-1: none ran).
 * An overlapped reduction's event runs from its post (the stage's last W) to when the rank saw it
 * complete; --no-overlap's from the rank's last REDUCE_GRAD (where it posts) to its wait's end. */
static void replica_waits(const train_adapt *A, const timeline *tl, const run_layout *lo, double *w) {
    int T = lo->tp;
    double *post = pt_malloc(sizeof *post * (size_t)(2 * A->P * T)), *done = post + A->P * T;
    for (int g = 0; g < A->P * T; g++) post[g] = -INFINITY, done[g] = INFINITY;
    for (int i = 0; i < tl->n; i++) {
        const tl_event *x = &tl->ev[i];
        int xd, xp, xt;
        if (x->act.kind != ACT_REDUCE_GRAD) continue;
        run_layout_coords(lo, x->rank, &xd, &xp, &xt);
        post[xp * T + xt] = fmax(post[xp * T + xt], x->start), done[xp * T + xt] = fmin(done[xp * T + xt], x->end);
    }
    for (int p = 0; p < A->P; p++) {
        w[p] = -1;
        for (int t = 0; t < T; t++) {
            double a = post[p * T + t], b = done[p * T + t];
            if (isfinite(a) && isfinite(b)) w[p] = fmax(w[p], fmax(0, b - a));
        }
    }
    free(post);
}

/* Appends printf-style text to buf[n] at *at, cutting it at the end of buf (*at stays below n). */
static void line_add(char *buf, size_t n, size_t *at, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void line_add(char *buf, size_t n, size_t *at, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = *at < n ? vsnprintf(buf + *at, n - *at, fmt, ap) : 0;
    va_end(ap);
    *at = k > 0 && *at + (size_t)k < n ? *at + (size_t)k : n - 1;
}

/* "link between replicas 0-1 (ranks 0-2)", or with D > 2 "link between replicas of pipeline rank
 * 0 (ranks 0,2,4)" (the wait does not say which pair), appended to buf[n] at *at. */
static void replica_name(const train_adapt *A, const run_layout *lo, int p, char *buf, size_t n, size_t *at) {
    if (A->D == 2) {
        line_add(buf, n, at, "link between replicas 0-1 (ranks %d-%d)", run_layout_world_rank(lo, 0, p, 0),
                 run_layout_world_rank(lo, 1, p, 0));
        return;
    }
    line_add(buf, n, at, "link between replicas of pipeline rank %d (ranks ", p);
    for (int d = 0; d < A->D; d++) line_add(buf, n, at, "%s%d", d ? "," : "", run_layout_world_rank(lo, d, p, 0));
    line_add(buf, n, at, ")");
}

/* The adapt event of the pipeline ranks whose reduction between replicas changed (`change` +1: turned
 * slow, -1: healthy again): the estimate's fields and, per rank, its replicas, world ranks and
 * the reduction's wait beyond its healthy one (replica_links). */
static cJSON *replica_fields(const train_adapt *A, const run_layout *lo, const sim_estimate *est, const char *action,
                             const char *schedule, const int *change, int sign, const double *excess) {
    cJSON *o = adapt_fields(A, est, action, schedule, -1, -1), *arr = cJSON_CreateArray();
    for (int p = 0; p < A->P; p++) {
        if (change[p] != sign) continue;
        cJSON *l = cJSON_CreateObject(), *reps = cJSON_CreateArray(), *ranks = cJSON_CreateArray();
        cJSON_AddNumberToObject(l, "pipeline_rank", p);
        for (int d = 0; d < A->D; d++) cJSON_AddItemToArray(reps, cJSON_CreateNumber(d));
        for (int d = 0; d < A->D; d++) cJSON_AddItemToArray(ranks, cJSON_CreateNumber(run_layout_world_rank(lo, d, p, 0)));
        cJSON_AddItemToObject(l, "replicas", reps);
        cJSON_AddItemToObject(l, "ranks", ranks);
        cJSON_AddNumberToObject(l, "wait_s", excess[p]);
        cJSON_AddItemToArray(arr, l);
    }
    cJSON_AddItemToObject(o, "replica_links", arr);
    return o;
}

/* Says the pipeline ranks of `change` equal to sign in one line and event: turned slow (+1, with
 * each one's wait beyond its healthy one) or healthy again (-1). */
static void replica_say(train_ctx *t, train_adapt *A, long step, const sim_estimate *est, const int *change,
                        int sign, const double *excess) {
    const char *name = t->e->vt->schedule(t->e)->name;
    const run_layout *lo = &train_engine_plan(t->e)->lo;   /* world ranks named: TP rank 0's */
    char line[1024] = "";
    size_t at = 0, n = sizeof line;
    int first = 0, last = 0;
    for (int p = 0; p < A->P; p++) {
        if (change[p] != sign) continue;
        first |= p == 0, last |= p == A->P - 1;
        if (at) line_add(line, n, &at, "; ");
        replica_name(A, lo, p, line, n, &at);
        if (sign > 0) line_add(line, n, &at, " +%.0f ms per reduction", excess[p] * 1e3);
        else line_add(line, n, &at, " healthy again");
    }
    if (first && last && t->m.n_ties > 0)   /* the tied embedding is one group over both ends */
        line_add(line, n, &at, " (pipeline ranks 0 and %d share the tied embedding's reduction: a slow link at "
                 "either shows at both)", A->P - 1);
    if (sign > 0) line_add(line, n, &at, "; no schedule change helps a gradient reduction: keeping %s", name);
    say(t, step, line, replica_fields(A, lo, est, sign > 0 ? "replica_slow" : "replica_healthy", name, change, sign, excess));
}

/* The step's reductions between replicas against their healthy waits: the pipeline ranks whose
 * reduction turned slow (replica_on, two steps running: the smaller of this step's excess and the
 * last's) or healthy again (under half of it), each said once per onset and recovery. The
 * schedule stays: no order of one pipeline's work changes what a reduction waits for. A step with
 * no rank over half of replica_on joins the baseline. */
static void adapt_replicas(train_ctx *t, train_adapt *A, long step, const timeline *tl, const sim_estimate *est,
                           double mf) {
    replica_links *L = &A->rl;
    double *w = pt_malloc(sizeof *w * (size_t)A->P * 2), *excess = w + A->P, on = replica_on(A, mf);
    int *change = pt_calloc((size_t)A->P, sizeof *change), quiet = 1, any_on = 0, any_off = 0;
    replica_waits(A, tl, &train_engine_plan(t->e)->lo, w);
    for (int p = 0; p < A->P; p++) {
        double b = ring_median(&L->base, p), now = w[p] >= 0 && b >= 0 ? fmax(0, w[p] - b) : 0;
        excess[p] = fmin(now, L->prev[p]);
        L->prev[p] = now;
        quiet &= now < on / 2;
        if (!L->slow[p] && excess[p] >= on) L->slow[p] = 1, change[p] = 1, any_on = 1;
        else if (L->slow[p] && now < on / 2) L->slow[p] = 0, change[p] = -1, any_off = 1, excess[p] = now;
    }
    if (quiet) ring_add(&L->base, w);
    if (any_on) replica_say(t, A, step, est, change, 1, excess);
    if (any_off) replica_say(t, A, step, est, change, -1, excess);
    free(w), free(change);
}

/* ---- the hook ----------------------------------------------------------------------------- */

int train_hook_adapt(train_ctx *t, long step, const train_step_stats *st, void *user) {
    train_adapt *A = user;
    train_engine *e = t->e;
    const timeline *tl = e->vt->timeline(e);
    if (!tl) return pt_seterr("step %ld: --adapt: no timeline of the step on this rank", step);
    if (!A->split_start) {   /* the split the run started with (blocks per stage) */
        A->split_start = pt_malloc(sizeof *A->split_start * (size_t)A->S);
        A->split_now = pt_malloc(sizeof *A->split_now * (size_t)A->S);
        if (parse_split(st->split, A->S, A->split_start) < 0)
            return pt_seterr("step %ld: --adapt: the split '%s' has not %d stages", step, st->split, A->S);
        memcpy(A->split_now, A->split_start, sizeof *A->split_now * (size_t)A->S);
    }
    double *now = pt_malloc(sizeof *now * (size_t)A->base.width);
    step_medians(tl, A->S, now);
    sim_costs healthy;
    sim_estimate est;
    base_costs(A, &healthy);
    sim_estimate_init(&est, A->P, A->S);
    int rc = step_estimate(A, tl, e->vt->schedule(e), &train_engine_plan(e)->lo, &healthy, &est);
    for (int r = 0; r + 1 < A->P; r++) {   /* jitter is no slow link; nor is one slow step (nor queue); a
                                            * step whose messages told no queue from a delay keeps the last */
        double d = est.link_delay[r] >= ADAPT_LINK_FLOOR ? est.link_delay[r] : 0;
        double q = d <= 0 ? 0 : est.link_told[r] ? est.link_busy[r] : A->prev_busy[r];
        est.link_delay[r] = fmin(d, A->prev_link[r]);
        est.link_busy[r] = fmin(fmin(q, A->prev_busy[r]), est.link_delay[r]);
        A->prev_link[r] = d, A->prev_busy[r] = q;
    }
    if (rc < 0 || step == A->first_step) goto free_all;             /* the warm-up: first touches, caches */
    if (A->D > 1) adapt_replicas(t, A, step, tl, &est, mean_f(&healthy));
    if (A->base.n == 0) { ring_add(&A->base, now); goto free_all; }       /* the first measured step sets the costs */
    double mf = mean_f(&healthy);
    sim_policy_action act = sim_policy_step(&A->pol, &A->po, &est, mf);
    if (!A->pol.adapted && act == SIM_POLICY_KEEP && estimate_healthy(A, &est, mf)) ring_add(&A->base, now);
    if (act == SIM_POLICY_ADAPT) rc = adapt_switch(t, A, step, &healthy, &est, mf);
    if (act == SIM_POLICY_REVERT) rc = adapt_revert(t, A, step, &healthy, &est);
free_all:
    sim_estimate_free(&est);
    sim_costs_free(&healthy);
    free(now);
    return rc;
}

/* The largest activations any stage of s holds (microbatches). */
static int sched_peak(const sched *s) {
    int *pk = pt_calloc((size_t)s->n_stages, sizeof *pk), peak = 1;
    sched_peak_activations(s, pk);
    for (int g = 0; g < s->n_stages; g++) peak = pk[g] > peak ? pk[g] : peak;
    free(pk);
    return peak;
}

int train_adapt_init(train_ctx *t) {
    const train_opts *o = &t->o;
    train_engine *e = t->e;
    if (!e->vt->replan || !e->vt->timeline || !e->vt->schedule)
        return pt_seterr("--adapt switches the schedule of a pipelined run: give --stages P (P >= 2)");
    const sched *s = e->vt->schedule(e);
    if (s->n_ranks < 2) return pt_seterr("--adapt: --stages 1 has no link or stage to adapt to (give --stages >= 2)");
    if (s->n_pipes != 1 || s->async || s->n_stages != s->n_ranks)
        return pt_seterr("--adapt switches between schedules of one stage per rank; %s has %s", s->name,
                         s->n_pipes != 1 ? "two pipes" : s->async ? "no flush (asynchronous)" : "several stages per rank");
    if (o->mem_limit < 0) return pt_seterr("--mem-limit must be >= 0 (got %d)", o->mem_limit);
    train_adapt *A = pt_calloc(1, sizeof *A);
    t->adapt = A;
    A->P = s->n_ranks, A->S = s->n_stages, A->M = s->n_mb, A->D = o->ro.D > 0 ? o->ro.D : 1;
    A->overlap = !o->ro.no_overlap;
    A->start = sched_copy(s);
    A->mem_limit = o->mem_limit > 0 ? o->mem_limit : sched_peak(s);
    A->po = sim_policy_defaults();
    A->po.stage_on = ADAPT_STAGE_ON, A->po.stage_off = ADAPT_STAGE_OFF;
    sim_policy_init(&A->pol, A->P, A->S);
    if (A->D > 1) replica_init(A);
    ring_init(&A->base, A->S * K_KINDS);
    A->prev_slow = pt_malloc(sizeof *A->prev_slow * (size_t)A->S);
    A->prev_link = pt_calloc((size_t)A->P, sizeof *A->prev_link);
    A->prev_busy = pt_calloc((size_t)A->P, sizeof *A->prev_busy);
    for (int g = 0; g < A->S; g++) A->prev_slow[g] = 1;
    A->first_step = t->step0 + 1;
    int rows = o->batch / (A->D * A->M);   /* a microbatch: rows x seq tokens */
    A->act_bytes = (double)(rows > 0 ? rows : 1) * o->seq * t->m.cfg.n_embd * sizeof(float);
    A->cfg = t->m.cfg;
    for (int k = 0; k < gpt_kind_count(); k++) {
        gpt_layer_cost c;
        gpt_kind_ops((gpt_layer_kind)k)->cost(&t->m.cfg, rows > 0 ? rows : 1, o->seq, 1, &c);
        for (int ph = 0; ph < 3; ph++) A->fl[k][ph] = c.flops[ph];
    }
    return 0;
}

void train_adapt_free(train_ctx *t) {
    train_adapt *A = t ? t->adapt : NULL;
    if (!A) return;
    sched_free(A->start);
    sim_policy_free(&A->pol);
    replica_free(A);
    free(A->base.v);
    free(A->prev_slow);
    free(A->prev_link);
    free(A->prev_busy);
    free(A->split_start);
    free(A->split_now);
    free(A);
    t->adapt = NULL;
}
