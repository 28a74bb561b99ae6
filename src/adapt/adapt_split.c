/* --adapt's re-split: a slow stage's layers moved to its neighbours by measured speed (the
 * planner's exact split, plan_split), when the simulator predicts the schedule in force faster
 * with it; the expected costs rescaled by analytic flops. Not here: moving the state (run/move.c). */
#include "adapt/adapt_int.h"
#include "util/pt.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "plan/plan.h"

/* ---- re-splitting a slow stage's layers -------------------------------------------------- */

/* "2,2" into out[S] (blocks per stage); -1 when it does not have S counts. */
int adapt_parse_split(const char *text, int S, int *out) {
    int n = 0;
    for (const char *q = text; *q && n < S; n++) {
        char *end;
        out[n] = (int)strtol(q, &end, 10);
        q = *end == ',' ? end + 1 : end;
    }
    return n == S ? 0 : -1;
}

int adapt_same_split(const int *a, const int *b, int S) { return !memcmp(a, b, sizeof *a * (size_t)S); }

void adapt_split_text(const int *v, int S, char *buf, size_t n) {
    size_t at = 0;
    for (int g = 0; g < S && at < n; g++) at += (size_t)snprintf(buf + at, n - at, "%s%d", g ? "," : "", v[g]);
}

/* Analytic flops of stage g under split v (blocks per stage) in phase ph (0 F, 1 B, 2 W): its
 * blocks, and the embedding on the first stage, the head on the last. */
static double stage_flops(const adapt_state *A, int g, const int *v, int ph) {
    int count[GPT_MAX_KINDS];
    double f = 0;
    gpt_config_chunk_kinds(&A->cfg, A->S, v, g, count);
    for (int k = 0; k < GPT_MAX_KINDS; k++) f += count[k] * A->fl[k][ph];
    return f;
}

/* The factor stage g's kind k (F, B, W, BW) scales by from split `from` to `to`. */
static double stage_factor(const adapt_state *A, int g, const int *from, const int *to, int k) {
    double a = 0, b = 0;
    for (int ph = 0; ph < 3; ph++)
        if (ph == k || (k == 3 && ph > 0)) a += stage_flops(A, g, from, ph), b += stage_flops(A, g, to, ph);
    return a > 0 ? b / a : 1;
}

/* The planner's exact split of the blocks by measured speed (plan_split): each block costs its
 * analytic F + B + W, the first and last also the embedding's and the head's; stage g's speed is
 * 1 / its slowdown; no memory cap. out[S]. */
static int speed_split(const adapt_state *A, const sim_estimate *est, int *out) {
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
static void rescale_costs(const adapt_state *A, sim_costs *c, const int *from, const int *to) {
    for (int g = 0; g < c->n_stages; g++) {
        c->f[g] *= stage_factor(A, g, from, to, 0);
        c->b[g] *= stage_factor(A, g, from, to, 1);
        c->w[g] *= stage_factor(A, g, from, to, 2);
        if (c->bw[g] >= 0) c->bw[g] *= stage_factor(A, g, from, to, 3);
    }
}

/* The same for the baseline's steps, so they stay comparable with the steps to come. */
static void rescale_base(adapt_state *A, const int *from, const int *to) {
    for (int i = 0; i < A->base.n; i++)
        for (int g = 0; g < A->S; g++)
            for (int kind = 0; kind < 4; kind++) {
                double *v = &A->base.v[(size_t)i * (size_t)A->base.width + (size_t)g * K_KINDS + (size_t)kind];
                if (*v > 0) *v *= stage_factor(A, g, from, to, kind);
            }
}

/* Moves to split `to` (the engine's resplit) and rescales the expected costs; the next step is
 * not measured (a new job's first touches). */
int adapt_move_split(adapt_state *A, long step, sim_costs *healthy, const int *to) {
    if (A->h.resplit(A->h.user, to, A->S) < 0) return pt_adderr("step %ld: --adapt: ", step);
    rescale_costs(A, healthy, A->split_now, to);
    rescale_base(A, A->split_now, to);
    memcpy(A->split_now, to, sizeof *to * (size_t)A->S);
    A->first_step = step + 1;
    return 0;
}

/* A slow stage: the split by measured speed when the simulator, under the estimate, predicts the
 * schedule in force faster with it (at least ADAPT_MIN_GAIN); healthy is rescaled to it. 1 when
 * it moved (and said so), 0 when not, -1 on an error. */
int adapt_split(adapt_state *A, long step, sim_costs *healthy, const sim_estimate *est,
                       double mf) {
    int *want = pt_malloc(sizeof *want * (size_t)A->S), moved = 0, slow = 0;
    for (int g = 0; g < A->S; g++) slow |= est->stage_slow[g] >= A->po.stage_off;
    if (!slow || !A->h.resplit || speed_split(A, est, want) < 0 || adapt_same_split(want, A->split_now, A->S)) {
        free(want);
        return 0;
    }
    const sched *cur = adapt_schedule(A);
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
        adapt_describe(A, est, mf, what, sizeof what);
        adapt_split_text(A->split_now, A->S, from, sizeof from);
        adapt_split_text(want, A->S, to, sizeof to);
        if (adapt_move_split(A, step, healthy, want) < 0) { free(want); return -1; }
        snprintf(line, sizeof line, "%s; layers re-split %s -> %s by measured speed; predicted %.3g s/step, was %.3g",
                 what, from, to, will, was);
        cJSON *f = adapt_fields(A, est, "resplit", name, will, was);
        cJSON_AddStringToObject(f, "split", to);
        adapt_say(A, step, line, f);
        moved = 1;
    }
    free(want);
    return moved;
}
