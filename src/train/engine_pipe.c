/* The pipelined engine: each step is one iteration of the run/ job (P stages x D replicas on
 * threads or MPI ranks); it records each step's measured iteration time and bubble, and at the
 * end reports them next to the simulator's prediction from costs profiled in the same run, with
 * the last step's trace and picture. Not here: the executor (run/), the loop (trainer.c). */
#include "train/engine.h"
#include "sim/sim.h"
#include "trace/svg.h"
#include "trace/trace.h"
#include "util/pt.h"
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    train_engine base;
    train_pipe_opts o;
    run_plan pl;
    run_job *job;
    double *iter_t, *bubble;    /* (n_cap) measured per step of this run, n recorded */
    int n, n_cap;
    /* report's results: medians measured, the simulator's prediction (-1: none) */
    double it_med, bub_med, sim_it, sim_bub;
} pipe_engine;

/* v[0..n) moved into a new buffer of cap entries (v freed). */
static double *grow(double *v, int n, int cap) {
    double *w = pt_malloc(sizeof *w * (size_t)cap);
    if (n) memcpy(w, v, sizeof *w * (size_t)n);
    free(v);
    return w;
}

/* Keeps this step's measurements for the report. */
static void pipe_record(pipe_engine *p, double iter_time, double bubble) {
    if (p->n == p->n_cap) {
        p->n_cap = p->n_cap ? 2 * p->n_cap : 64;
        p->iter_t = grow(p->iter_t, p->n, p->n_cap);
        p->bubble = grow(p->bubble, p->n, p->n_cap);
    }
    p->iter_t[p->n] = iter_time;
    p->bubble[p->n++] = bubble;
}

/* One iteration of the job; its stats as the trainer's, kept for the report. */
static int pipe_step(train_engine *e, const int *tokens, const int *targets,
                     const optim_config *oc, long t, train_step_stats *st) {
    pipe_engine *p = (pipe_engine *)e;
    run_stats rs;
    if (run_job_iteration(p->job, tokens, targets, oc, (int)t, &rs) < 0) return -1;
    st->opt = (train_stats){ .loss = rs.loss, .grad_norm = rs.grad_norm, .lr = rs.lr,
                             .clip_scale = rs.clip_scale };
    st->iter_time = rs.iter_time;
    st->bubble = rs.bubble;
    st->act_bytes = run_job_act_bytes(p->job);
    pipe_record(p, rs.iter_time, rs.bubble);
    return 0;
}

/* Each chunk written by its holder (run_job_save); AdamW has taken one step per step. */
static int pipe_save(train_engine *e, const char *dir, const ckpt_manifest *man) {
    pipe_engine *p = (pipe_engine *)e;
    ckpt_manifest full = *man;
    full.adam_t = (int)man->step;
    return run_job_save(p->job, dir, &full);
}

/* "pipeline: <schedule>, P stages x D replicas, ..." (the run header's line). */
static void pipe_describe(const train_engine *e) {
    const pipe_engine *p = (const pipe_engine *)e;
    printf("pipeline: %s, %d stages x %d replicas, %d microbatches of %d sequences, %s transport; "
           "activations %.2f MB on the busiest rank%s\n", p->pl.s->name, p->pl.o.P, p->pl.o.D,
           p->pl.s->n_mb, p->pl.mb_rows, p->o.world ? "mpi" : "threads",
           run_job_act_bytes(p->job) / 1e6, p->o.ro.recompute ? " (recomputing)" : "");
}

/* The simulator's iteration for the schedule, from the F/B/W costs profiled in this run, next
 * to the measured medians it and bub. */
static void pipe_print_simulated(pipe_engine *p, double it, double bub) {
    const sched *s = p->pl.s;
    sim_costs c;
    sim_result res;
    sim_opts so = { .iterations = 1 };
    sim_costs_init(&c, s->n_stages, 0, 0, 0);
    run_job_profile(p->job, &c);
    int rc = sim_run(s, &c, &so, &res);
    sim_costs_free(&c);
    p->it_med = it;
    p->bub_med = bub;
    p->sim_it = rc < 0 ? -1 : res.iteration_time;
    p->sim_bub = rc < 0 ? -1 : res.bubble_fraction;
    printf("measured:  iteration %.3f ms, bubble %.1f%% (%s, P=%d, D=%d, M=%d; median of steps)\n",
           it * 1e3, bub * 100, s->name, p->pl.o.P, p->pl.o.D, s->n_mb);
    if (rc < 0) {
        printf("simulated: not available: %s\n", pt_err());
        return;
    }
    printf("simulated: iteration %.3f ms, bubble %.1f%% (from F/B/W costs profiled in this run; "
           "measured/simulated %.2f)\n", res.iteration_time * 1e3, res.bubble_fraction * 100,
           res.iteration_time > 0 ? it / res.iteration_time : 0);
    sim_result_free(&res);
}

/* The last step's events as a Chrome trace and an SVG timeline, when asked. */
static int pipe_write_pictures(pipe_engine *p, double last_it, double last_bub) {
    const timeline *tl = run_job_timeline(p->job);
    const sched *s = p->pl.s;
    if (p->o.trace && trace_write(tl, p->o.trace) < 0) return -1;
    if (!p->o.svg) return 0;
    char title[96], sub[96];
    snprintf(title, sizeof title, "%s  P=%d  D=%d  M=%d  (measured)", s->name, p->pl.o.P,
             p->pl.o.D, s->n_mb);
    snprintf(sub, sizeof sub, "last step  %.2f ms  bubble %.1f%%", last_it * 1e3, last_bub * 100);
    svg_opts so = { title, sub, 0 };
    return svg_write(tl, &so, p->o.svg);
}

/* Medians over the steps after the first (the warm-up) when there were several. */
static int pipe_report(train_engine *e) {
    pipe_engine *p = (pipe_engine *)e;
    if (!p->base.root || p->n == 0) return 0;
    double last_it = p->iter_t[p->n - 1], last_bub = p->bubble[p->n - 1];
    int skip = p->n > 1;
    double it = pt_median(p->iter_t + skip, p->n - skip);      /* sorts the records: done last */
    double bub = pt_median(p->bubble + skip, p->n - skip);
    pipe_print_simulated(p, it, bub);
    return pipe_write_pictures(p, last_it, last_bub);
}

static cJSON *pipe_layout(const train_engine *e) {
    const pipe_engine *p = (const pipe_engine *)e;
    const run_layout *lo = &p->pl.lo;
    cJSON *o = cJSON_CreateObject(), *split = cJSON_CreateArray();
    cJSON_AddStringToObject(o, "engine", "pipelined");
    cJSON_AddNumberToObject(o, "stages", p->pl.o.P);
    cJSON_AddNumberToObject(o, "dp", p->pl.o.D);
    cJSON_AddNumberToObject(o, "tp", 1);
    cJSON_AddStringToObject(o, "schedule", p->pl.s->name);
    cJSON_AddNumberToObject(o, "microbatches", p->pl.s->n_mb);
    cJSON_AddNumberToObject(o, "microbatch_rows", p->pl.mb_rows);
    for (int c = 0; c < lo->K; c++)   /* transformer blocks per chunk (the embedding and head aside) */
        cJSON_AddItemToArray(split, cJSON_CreateNumber(lo->chunk_first[c + 1] - lo->chunk_first[c]
                                                       - (c == 0) - (c == lo->K - 1)));
    cJSON_AddItemToObject(o, "split", split);
    cJSON_AddStringToObject(o, "transport", p->o.world ? "mpi" : "threads");
    if (p->pl.o.recompute) cJSON_AddTrueToObject(o, "recompute");
    return o;
}

static cJSON *pipe_summary(const train_engine *e) {
    const pipe_engine *p = (const pipe_engine *)e;
    if (p->n == 0) return NULL;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "measured_ms", p->it_med * 1e3);
    cJSON_AddNumberToObject(o, "bubble", p->bub_med);
    if (p->sim_it > 0) {
        cJSON_AddNumberToObject(o, "simulated_ms", p->sim_it * 1e3);
        cJSON_AddNumberToObject(o, "simulated_bubble", p->sim_bub);
    }
    if (p->o.svg) cJSON_AddStringToObject(o, "svg", p->o.svg);
    return o;
}

/* The job, the plan and the records; takes a half-made engine (init's failure path). */
static void pipe_free(train_engine *e) {
    pipe_engine *p = (pipe_engine *)e;
    run_job_free(p->job);
    if (p->pl.s) run_plan_free(&p->pl);
    free(p->iter_t);
    free(p->bubble);
    free(p);
}

static const train_engine_vt pipe_vt = {
    .name = "pipelined", .step = pipe_step, .save = pipe_save, .describe = pipe_describe,
    .report = pipe_report, .layout = pipe_layout, .summary = pipe_summary, .free = pipe_free,
};

int train_engine_pipe_init(train_engine **out, const train_pipe_opts *o, const gpt_model *m,
                           const adamw_state *opt, int B, int T) {
    pipe_engine *p = pt_calloc(1, sizeof *p);
    p->base.vt = &pipe_vt;
    p->o = *o;
    p->o.ro.split = NULL;          /* read by run_plan_init only; not kept past it */
    *out = NULL;
    if (run_plan_init(&p->pl, &o->ro, &m->cfg, B, T) < 0) goto free_engine;
    if (run_job_init(&p->job, &p->pl, m, opt, o->world) < 0) goto free_engine;
    p->base.root = run_job_is_root(p->job);
    if (o->world && o->threads > 0) openblas_set_num_threads(o->threads);   /* per process */
    *out = &p->base;
    return 0;
free_engine:
    pipe_free(&p->base);
    return -1;
}
