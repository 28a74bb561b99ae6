/* The replay behind `simulate --adapt` (sim_adapt_run in sim_adapt.h): iterations one at a time
 * under faults that switch on and off, the online policy reading each iteration's timeline and
 * switching schedules at the boundary. The loop lives here, not in the CLI. Not the policy or the
 * estimate themselves (sim_adapt.c), not the engine (sim.c). Legend: P ranks, S stages, N iterations. */
#include "sim/sim_adapt.h"
#include "util/pt.h"
#include <stdlib.h>
#include <string.h>

typedef struct {
    const sim_adapt_opts *o;
    const sim_costs *c;         /* with its faults */
    sim_costs healthy;          /* c without them: what the policy expects */
    double mean_f;              /* healthy mean F: the scale of the policy's thresholds */
    sched *start, *cur;         /* lowered; cur is start or an adaptive one (owned) */
    sched_params shape;         /* with the memory limit the adaptive schedules get */
    sim_policy pol;
    sim_estimate est;
} replay;

/* The starting schedule, generated for the healthy costs (the rows that read costs get them). */
static sched *replay_start(replay *R) {
    const sched_generator *g = sched_generator_find(R->o->start);
    if (!g) { pt_seterr("unknown schedule '%s' (known: %s)", R->o->start, sched_generator_list()); return NULL; }
    if (g->pipes != 1 || g->async || g->chunks != 1 || R->o->shape.chunks > 1) {
        pt_seterr("--adapt switches between schedules of one stage per rank; %s has %s", g->name,
                  g->pipes != 1 ? "two pipes" : g->async ? "no flush (asynchronous)" : "several stages per rank");
        return NULL;
    }
    double *buf = pt_calloc(2 * (size_t)R->o->shape.ranks, sizeof(double));
    sched_params p = R->o->shape;
    p.chunks = 1;
    if (g->stage_costs) sim_adaptive_params(&R->healthy, p.ranks, &p, buf);
    sched *s = sched_generate(g->name, &p), *low = s ? sched_lower(s) : NULL;
    free(buf);
    sched_free(s);
    return low;
}

/* The memory limit of the adaptive schedules: the caller's, else the starting schedule's peak. */
static int replay_limit(const replay *R) {
    if (R->o->shape.mem_limit > 0) return R->o->shape.mem_limit;
    int *pk = pt_calloc((size_t)R->start->n_stages, sizeof(int)), peak = 1;
    sched_peak_activations(R->start, pk);
    for (int g = 0; g < R->start->n_stages; g++) peak = pk[g] > peak ? pk[g] : peak;
    free(pk);
    return peak;
}

static int replay_init(replay *R, const sim_adapt_opts *o, const sim_costs *c) {
    memset(R, 0, sizeof *R);
    R->o = o, R->c = c;
    sim_costs_copy(c, &R->healthy);
    R->healthy.n_faults = 0;
    for (int g = 0; g < c->n_stages; g++) R->mean_f += c->f[g] / c->n_stages;
    sim_policy_init(&R->pol, o->shape.ranks, c->n_stages);
    sim_estimate_init(&R->est, o->shape.ranks, c->n_stages);
    if (o->iterations < 1) return pt_seterr("--iterations must be >= 1 (got %d)", o->iterations);
    if (c->n_stages != o->shape.ranks)
        return pt_seterr("--adapt: the costs have %d stages for %d ranks (one stage per rank)", c->n_stages,
                         o->shape.ranks);
    if (!(R->start = replay_start(R))) return -1;
    R->cur = R->start;
    R->shape = o->shape;
    R->shape.chunks = 1;
    R->shape.mem_limit = replay_limit(R);
    return 0;
}

static void replay_free(replay *R) {
    if (R->cur != R->start) sched_free(R->cur);
    sched_free(R->start);
    sim_costs_free(&R->healthy);
    sim_policy_free(&R->pol);
    sim_estimate_free(&R->est);
}

/* Switches to the adaptive schedule built for the estimate; note says what and why. */
static int replay_adapt(replay *R, char *note, int n) {
    sim_costs est;
    sim_costs_apply_estimate(&R->healthy, &R->est, &est);
    sched_adaptive_info info;
    sched *s = sim_adaptive_schedule(&R->shape, &est, &info), *low = s ? sched_lower(s) : NULL;
    double was = low ? sim_schedule_score(R->cur, &est) : -1;
    sched_free(s);
    sim_costs_free(&est);
    if (!low) return -1;
    char what[160];
    sim_estimate_describe(&R->est, &R->o->policy, R->mean_f, what, sizeof what);
    snprintf(note, (size_t)n, "%s; adaptive (%s, peak %d of limit %d), predicted %.4g, was %.4g", what, info.winner,
             info.peak, R->shape.mem_limit, info.score, was);
    if (R->cur != R->start) sched_free(R->cur);
    R->cur = low;
    return 0;
}

/* Appends iteration i's events (timeline of a one-iteration run) to out, shifted by t0. */
static void append_events(timeline *out, const timeline *tl, int i, double t0) {
    int base = out->n;
    for (int k = 0; k < tl->n; k++) {
        tl_event e = tl->ev[k];
        e.iter = i, e.ready += t0, e.start += t0, e.end += t0;
        if (e.link >= 0) e.link += base;
        timeline_push(out, &e);
    }
}

/* Runs iteration i (0-based) with the schedule in force, then lets the policy decide. */
static int replay_iteration(replay *R, int i, sim_adapt_result *out) {
    sim_costs now;
    sim_result r;
    sim_costs_at(R->c, i + 1, &now);
    int rc = sim_run(R->cur, &now, &(sim_opts){ 1, false }, &r);
    sim_costs_free(&now);
    if (rc < 0) return pt_adderr("iteration %d (%s): ", i + 1, R->cur->name);
    out->time[i] = r.iteration_time;
    snprintf(out->name[i], sizeof out->name[i], "%s", R->cur->name);
    append_events(&out->tl, &r.tl, i, out->total);
    out->total += r.iteration_time;
    rc = sim_estimate_timeline(&r.tl, &R->healthy, 0, &R->est);
    sim_result_free(&r);
    if (rc < 0) return -1;
    switch (sim_policy_step(&R->pol, &R->o->policy, &R->est, R->mean_f)) {
    case SIM_POLICY_ADAPT: return replay_adapt(R, out->note[i], (int)sizeof out->note[i]);
    case SIM_POLICY_REVERT:
        if (R->cur != R->start) sched_free(R->cur);
        R->cur = R->start;
        snprintf(out->note[i], sizeof out->note[i], "healthy; back to %s", R->start->name);
        return 0;
    default: return 0;
    }
}

int sim_adapt_run(const sim_adapt_opts *o, const sim_costs *c, sim_adapt_result *out) {
    memset(out, 0, sizeof *out);
    replay R;
    int rc = replay_init(&R, o, c);
    if (rc == 0) {
        int N = o->iterations;
        out->n = N;
        out->time = pt_calloc((size_t)N, sizeof(double));
        out->name = pt_calloc((size_t)N, sizeof *out->name);
        out->note = pt_calloc((size_t)N, sizeof *out->note);
        out->mem_limit = R.shape.mem_limit;
        timeline_init(&out->tl, R.start, c->act_bytes, N);
        for (int i = 0; i < N && rc == 0; i++) rc = replay_iteration(&R, i, out);
    }
    replay_free(&R);
    if (rc < 0) sim_adapt_result_free(out);
    return rc;
}

void sim_adapt_result_free(sim_adapt_result *r) {
    free(r->time), free(r->name), free(r->note);
    timeline_free(&r->tl);
    memset(r, 0, sizeof *r);
}
