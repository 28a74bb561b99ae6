/* Deciding and switching (adapt/adapt.h): each step's estimate against the costs of recent
 * healthy steps (adapt_measure.c), the simulator's policy with its hysteresis (sim_policy_step),
 * then the switch to the adaptive schedule built for the estimate within the memory limit
 * (sim_adaptive_schedule; a slow stage's re-split first, adapt_split.c), on trial until it paid
 * (adapt_pay.c), or back to the starting schedule and split when the straggler clears. Not here:
 * the estimator, the policy and the generator (sim/sim_adapt.h, sched/), switching itself (the
 * host's replan and resplit). */
#include "adapt/adapt_int.h"
#include "util/pt.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- switching ---------------------------------------------------------------------------- */

/* Why nothing helps: a slow stage (only moving layers would: not done), or the memory limit (the
 * limit that would help and what it would give), into buf ("" when neither says more). */
static void memory_hint(const adapt_state *A, const sim_costs *healthy, const sim_estimate *est, double was,
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

/* Builds the adaptive schedule for the healthy costs with the estimate applied, within the memory
 * limit, and switches to it when it is predicted faster than the schedule in force. */
static int adapt_switch(adapt_state *A, long step, sim_costs *healthy, const sim_estimate *est,
                        double mf) {
    int moved = adapt_split(A, step, healthy, est, mf);
    if (moved < 0) return -1;
    sim_costs c;
    sim_costs_apply_estimate(healthy, est, &c);
    sched_params shape = { .ranks = A->P, .microbatches = A->M, .chunks = 1, .mem_limit = A->mem_limit };
    sched_adaptive_info info;
    sched *s = sim_adaptive_schedule(&shape, &c, &info);
    if (s) info.score = adapt_pay_predicted(A, info.score);
    double was = s ? sim_schedule_score(adapt_schedule(A), &c) : -1;
    sim_costs_free(&c);
    if (!s || was < 0) { sched_free(s); return pt_adderr("step %ld: --adapt: ", step); }
    char what[200], line[800], wu[96], queue[400];
    adapt_describe(A, est, mf, what, sizeof what);
    adapt_warmup_text(s, wu, sizeof wu);
    adapt_queue_text(A, est, mf, queue, sizeof queue);
    if (queue[0] && A->h.root) printf("step %ld: %s\n", step, queue);   /* its own line: the switch's keeps its form */
    if (info.score > was * (1 - ADAPT_MIN_GAIN)) {
        if (!A->said_keep && !A->switched && !moved) {   /* said once; an adaptive one in force stays quietly */
            char hint[160];
            memory_hint(A, healthy, est, was, hint, sizeof hint);
            char lim[200];
            if (A->mem_flag) snprintf(lim, sizeof lim, "--mem-limit %d", A->mem_limit);
            else snprintf(lim, sizeof lim, "the limit of %d microbatches (%s)", A->mem_limit, A->mem_why);
            snprintf(line, sizeof line, "%s; no schedule within %s is faster (adaptive %.3g s/step, %s %.3g): "
                     "keeping %s%s", what, lim, info.score, adapt_schedule(A)->name, was, adapt_schedule(A)->name, hint);
            adapt_say(A, step, line, adapt_fields(A, est, "keep", adapt_schedule(A)->name, info.score, was));
        }
        A->said_keep = 1;
        sched_free(s);
        return 0;
    }
    int rc = A->h.replan(A->h.user, s);
    sched_free(s);
    if (rc < 0) return pt_adderr("step %ld: --adapt: ", step);
    A->switched = 1;
    A->said_keep = 0;
    /* on trial unless one runs (a noisy estimate may rebuild the adaptive schedule every few
     * steps: the trial goes on) or layers moved with it (a re-split's gain is not the switch's);
     * a rebuild with none running is judged against the adaptive schedule it replaces */
    if (!moved && !A->pay.on) adapt_pay_start(A, step, info.score, was);
    snprintf(line, sizeof line, "%s; adaptive warm-up %s (peak %d of limit %d%s%s); predicted %.3g s/step, was %.3g",
             what, wu, info.peak, A->mem_limit, A->mem_flag ? "" : " microbatches; ", A->mem_flag ? "" : A->mem_why,
             info.score, was);
    adapt_say(A, step, line, adapt_fields(A, est, "adapt", "adaptive", info.score, was));
    return 0;
}

static int adapt_revert(adapt_state *A, long step, sim_costs *healthy, const sim_estimate *est) {
    char line[256], sp[64] = "";
    int moved = !adapt_same_split(A->split_now, A->split_start, A->S);
    adapt_pay_reset(A);
    if (!A->switched && !A->said_keep && !moved) return 0;
    if (A->switched && A->h.replan(A->h.user, A->start) < 0) return pt_adderr("step %ld: --adapt: ", step);
    if (moved) {
        if (adapt_move_split(A, step, healthy, A->split_start) < 0) return -1;
        adapt_split_text(A->split_start, A->S, sp, sizeof sp);
    }
    snprintf(line, sizeof line, "healthy again; %s %s%s%s", A->switched ? "back to" : "still", A->start->name,
             moved ? ", layers back to " : "", sp);
    A->switched = A->said_keep = 0;
    adapt_say(A, step, line, adapt_fields(A, est, "revert", A->start->name, -1, -1));
    return 0;
}

/* ---- the step ----------------------------------------------------------------------------- */

/* A step of the seed (after its first): its costs join the baseline whatever they are (its median
 * outvotes one noisy step), and no stage is judged on a baseline of fewer steps (as healthy: the
 * two-step filter starts afresh after it). Links are: their delays need no baseline. */
static void adapt_seed(adapt_state *A, sim_estimate *est, const double *now) {
    adapt_ring_add(&A->base, now);
    A->seeded++;
    for (int g = 0; g < A->S; g++) est->stage_slow[g] = A->prev_slow[g] = 1;
}

int adapt_step(adapt_state *A, long step, const char *split, double iter_time) {
    const timeline *tl = A->h.timeline(A->h.user);
    if (!tl) return pt_seterr("step %ld: --adapt: no timeline of the step on this rank", step);
    if (!A->split_start) {   /* the split the run started with (blocks per stage) */
        A->split_start = pt_malloc(sizeof *A->split_start * (size_t)A->S);
        A->split_now = pt_malloc(sizeof *A->split_now * (size_t)A->S);
        if (adapt_parse_split(split, A->S, A->split_start) < 0)
            return pt_seterr("step %ld: --adapt: the split '%s' has not %d stages", step, split, A->S);
        memcpy(A->split_now, A->split_start, sizeof *A->split_now * (size_t)A->S);
    }
    double *now = pt_malloc(sizeof *now * (size_t)A->base.width);
    adapt_step_medians(tl, A->S, now);
    sim_costs healthy;
    sim_estimate est;
    adapt_base_costs(A, &healthy);
    sim_estimate_init(&est, A->P, A->S);
    int rc = adapt_step_estimate(A, tl, adapt_schedule(A), A->h.layout(A->h.user), &healthy, &est);
    for (int r = 0; r + 1 < A->P; r++) {   /* jitter is no slow link; nor is one slow step (nor queue); a
                                            * step whose messages told no queue from a delay keeps the last */
        double d = est.link_delay[r] >= ADAPT_LINK_FLOOR ? est.link_delay[r] : 0;
        double q = d <= 0 ? 0 : est.link_told[r] ? est.link_busy[r] : A->prev_busy[r];
        est.link_delay[r] = fmin(d, A->prev_link[r]);
        est.link_busy[r] = fmin(fmin(q, A->prev_busy[r]), est.link_delay[r]);
        A->prev_link[r] = d, A->prev_busy[r] = q;
    }
    adapt_pay_note(A, iter_time);
    if (rc < 0 || step == A->first_step) goto free_all;             /* the warm-up: first touches, caches */
    if (adapt_pay_judge(A, step, iter_time, &est) < 0) { rc = -1; goto free_all; }
    if (A->D > 1) adapt_replicas(A, step, tl, &est, adapt_mean_f(&healthy));
    if (A->base.n == 0) { adapt_ring_add(&A->base, now); A->seeded = 1; goto free_all; }   /* the first seeds the costs */
    int seeding = A->seeded < ADAPT_SEED;
    if (seeding) adapt_seed(A, &est, now);   /* the seed's next steps: theirs too, no stage judged */
    double mf = adapt_mean_f(&healthy);
    sim_policy_action act = sim_policy_step(&A->pol, &A->po, &est, mf);
    if (!seeding && !A->pol.adapted && act == SIM_POLICY_KEEP && adapt_estimate_healthy(A, &est, mf))
        adapt_ring_add(&A->base, now);
    int held = adapt_pay_held(A, step);   /* an undone switch's hold-off: no switch, whatever the estimate */
    if ((act == SIM_POLICY_ADAPT && !held) ||
        (act == SIM_POLICY_KEEP && A->pol.adapted && !A->switched && adapt_pay_retry(A, step)))
        rc = adapt_switch(A, step, &healthy, &est, mf);   /* a hold-off's end tries again */
    if (act == SIM_POLICY_REVERT) rc = adapt_revert(A, step, &healthy, &est);
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

/* The state's buffers, the starting schedule and the flops of one microbatch per layer kind. */
static void state_init(adapt_state *A) {
    A->po = sim_policy_defaults();
    A->po.stage_on = ADAPT_STAGE_ON, A->po.stage_off = ADAPT_STAGE_OFF;
    sim_policy_init(&A->pol, A->P, A->S);
    if (A->D > 1) adapt_replica_init(A);
    adapt_ring_init(&A->base, A->S * K_KINDS);
    A->prev_slow = pt_malloc(sizeof *A->prev_slow * (size_t)A->S);
    A->prev_link = pt_calloc((size_t)A->P, sizeof *A->prev_link);
    A->prev_busy = pt_calloc((size_t)A->P, sizeof *A->prev_busy);
    for (int g = 0; g < A->S; g++) A->prev_slow[g] = 1;
    A->first_step = A->o.step0 + 1;
    adapt_pay_reset(A);
    int rows = A->o.batch / (A->D * A->M);   /* a microbatch: rows x seq tokens */
    A->act_bytes = (double)(rows > 0 ? rows : 1) * A->o.seq * A->cfg.n_embd * sizeof(float);
    for (int k = 0; k < gpt_kind_count(); k++) {
        gpt_layer_cost c;
        gpt_kind_ops((gpt_layer_kind)k)->cost(&A->cfg, rows > 0 ? rows : 1, A->o.seq, 1, &c);
        for (int ph = 0; ph < 3; ph++) A->fl[k][ph] = c.flops[ph];
    }
}

int adapt_init(adapt_state **out, const adapt_opts *o, const adapt_host *h) {
    *out = NULL;
    if (!h->replan || !h->timeline || !h->schedule)
        return pt_seterr("--adapt switches the schedule of a pipelined run: give --stages P (P >= 2)");
    const sched *s = h->schedule(h->user);
    if (s->n_ranks < 2) return pt_seterr("--adapt: --stages 1 has no link or stage to adapt to (give --stages >= 2)");
    if (s->n_pipes != 1 || s->async || s->n_stages != s->n_ranks)
        return pt_seterr("--adapt switches between schedules of one stage per rank; %s has %s", s->name,
                         s->n_pipes != 1 ? "two pipes" : s->async ? "no flush (asynchronous)" : "several stages per rank");
    adapt_state *A = pt_calloc(1, sizeof *A);
    A->h = *h, A->o = *o, A->cfg = *o->cfg, A->o.cfg = &A->cfg;
    A->P = s->n_ranks, A->S = s->n_stages, A->M = s->n_mb, A->D = o->D > 0 ? o->D : 1;
    A->overlap = o->overlap;
    A->start = sched_copy(s);
    state_init(A);
    if (adapt_mem_limit(A, sched_peak(s)) < 0) {
        adapt_free(A);
        return -1;
    }
    *out = A;
    return 0;
}

void adapt_free(adapt_state *A) {
    if (!A) return;
    sched_free(A->start);
    sim_policy_free(&A->pol);
    adapt_replica_free(A);
    free(A->base.v);
    free(A->prev_slow);
    free(A->prev_link);
    free(A->prev_busy);
    free(A->split_start);
    free(A->split_now);
    free(A->mem_fixed);
    free(A);
}
