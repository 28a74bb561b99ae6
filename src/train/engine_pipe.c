/* The pipelined engine: each step is one iteration of the run/ job (P stages x D replicas x tp
 * TP ranks on threads or MPI ranks); it records each step's measured iteration time and bubble, and at the
 * end reports them next to the simulator's prediction from costs profiled in the same run, with
 * the last step's trace and picture. Not here: the executor (run/), the loop (trainer.c). */
#include "optim/async_fix.h"
#include "train/engine.h"
#include "sim/sim.h"
#include "trace/svg.h"
#include "trace/trace.h"
#include "util/half.h"
#include "util/pt.h"
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    train_engine base;
    train_pipe_opts o;
    run_plan *pl;               /* the plan in force (a re-split replaces it) */
    run_job *job;
    gpt_config cfg;             /* the model's (a re-split plans with it) */
    int share_tl;               /* the job shares each step's timeline (adapt) */
    long last_step;             /* the step last run */
    double *iter_t, *bubble;    /* (n_cap) measured per step of this run, n recorded */
    int n, n_cap;
    /* report's results: medians measured, the simulator's prediction (-1: none) */
    double it_med, bub_med, sim_it, sim_bub;
    double *rss;                /* [processes] peak RSS at the end, bytes (run_job_peak_rss) */
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

/* Transformer blocks per chunk (the layout's split), "2,2", into buf. */
static void pipe_split_text(const pipe_engine *p, char *buf, size_t n) {
    const run_layout *lo = &p->pl->lo;
    size_t at = 0;
    buf[0] = 0;
    for (int c = 0; c < lo->K && at < n; c++)
        at += (size_t)snprintf(buf + at, n - at, "%s%d", c ? "," : "", lo->chunk_blocks[c]);
}

/* One iteration of the job; its stats as the trainer's, kept for the report. */
static int pipe_step(train_engine *e, const int *tokens, const int *targets,
                     const optim_config *oc, long t, train_step_stats *st) {
    pipe_engine *p = (pipe_engine *)e;
    run_stats rs;
    p->last_step = t;
    if (run_job_iteration(p->job, tokens, targets, oc, (int)t, &rs) < 0) return -1;
    st->opt = (train_stats){ .loss = rs.loss, .grad_norm = rs.grad_norm, .lr = rs.lr,
                             .clip_scale = rs.clip_scale };
    st->iter_time = rs.iter_time;
    memcpy(st->win_loss, rs.win_loss, sizeof st->win_loss);
    st->bubble = rs.bubble;
    st->act_bytes = run_job_act_bytes(p->job);
    snprintf(st->schedule, sizeof st->schedule, "%s", run_job_schedule(p->job)->name);
    pipe_split_text(p, st->split, sizeof st->split);
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

#define MEM_LINE_RANKS 8   /* the header lists each rank's memory up to this many ranks */

/* --balance-memory: "activation sets balanced (--balance-memory, MB per rank held/lent/borrowed):
 * r0 ..., r1 ...": its own sets a rank keeps, what it moved out (sets it would hold more without
 * lending; "in parts: n/16 of each act" where a layer sends only the tail of each act it lends)
 * and the buffers it keeps for other ranks' (within the activations above). */
static void pipe_print_lending(const pipe_engine *p, int R) {
    run_mem m;
    printf("activation sets balanced (--balance-memory, MB per rank held/lent/borrowed):");
    for (int w = 0; w < R && w < MEM_LINE_RANKS; w++) {
        run_job_mem(p->job, w, &m);
        printf(" r%d %.1f/%.1f/%.1f", w, m.act_sets / 1e6, m.lent / 1e6, m.borrowed / 1e6);
        if (m.parts > 0 && m.parts < 16) printf(" (in parts: %.0f/16 of each act)", m.parts);
        printf("%s", w + 1 < R && w + 1 < MEM_LINE_RANKS ? "," : "");
    }
    printf("%s\n", R > MEM_LINE_RANKS ? " ..." : "");
}

/* "memory per rank (MB, params/grads/optimizer/activations): r0 ..., r1 ..." (the busiest rank
 * of each kind beyond MEM_LINE_RANKS ranks). */
static void pipe_print_memory(const pipe_engine *p) {
    int R = run_layout_ranks(&p->pl->lo);
    run_mem m, mx = { 0 };
    printf("memory per rank (MB, params/grads/optimizer/activations):");
    for (int w = 0; w < R; w++) {
        run_job_mem(p->job, w, &m);
        if (R <= MEM_LINE_RANKS) printf(" r%d %.1f/%.1f/%.1f/%.1f%s", w, m.params / 1e6, m.grads / 1e6,
                                       m.optim / 1e6, m.acts / 1e6, w + 1 < R ? "," : "");
        mx.params = m.params > mx.params ? m.params : mx.params;
        mx.grads = m.grads > mx.grads ? m.grads : mx.grads;
        mx.optim = m.optim > mx.optim ? m.optim : mx.optim;
        mx.acts = m.acts > mx.acts ? m.acts : mx.acts;
    }
    if (R > MEM_LINE_RANKS)
        printf(" the largest of %d ranks %.1f/%.1f/%.1f/%.1f", R, mx.params / 1e6, mx.grads / 1e6,
               mx.optim / 1e6, mx.acts / 1e6);
    printf("%s%s\n", p->pl->o.zero ? " (--zero 1: moments sharded)" : "",
           gpt_default_precision() == NN_BF16 ? " (bf16: params are the one fp32 copy, the master weights, "
           "rounded to bf16 as the matmuls pack them; activations hold bf16 sets and one block's fp32 work area)" : "");
    if (p->pl->o.balance_memory) pipe_print_lending(p, R);
}

/* "pipeline: <schedule>, P stages x D replicas, ..." and the memory line (the run header's). */
static void pipe_describe(const train_engine *e) {
    const pipe_engine *p = (const pipe_engine *)e;
    char wire[80] = "";
    if (p->pl->o.wire == PT_WIRE_BF16 || p->pl->o.wire == PT_WIRE_F16)
        snprintf(wire, sizeof wire, "; wire %s (messages between stages in 16 bits: lossy)",
                 pt_wire_name(p->pl->o.wire));
    char chunks[64] = "";
    if (p->pl->s->seq_chunks > 1)
        snprintf(chunks, sizeof chunks, " in %d sequence chunks", p->pl->s->seq_chunks);
    printf("pipeline: %s, %d stages x %d replicas x tp %d, %d microbatches of %d sequences%s, %s transport; "
           "activations %.2f MB on the busiest rank%s%s%s%s%s%s\n", p->pl->s->name, p->pl->o.P, p->pl->o.D,
           p->pl->lo.tp, p->pl->s->n_mb / p->pl->s->seq_chunks, p->pl->mb_rows, chunks, p->o.world ? "mpi" : "threads",
           run_job_act_bytes(p->job) / 1e6, p->o.ro.recompute ? " (recomputing)" : "",
           !p->pl->o.tp_recompute ? "" : p->pl->o.tp_sp ? " (blocks keep their rows of x and res2, rebuilt before B "
           "with two all-gathers)" : " (blocks keep x and res2, rebuilt before B without all-reduces)",
           p->pl->o.tp_overlap ? "; TP all-reduces overlapped (two halves per microbatch)" : "",
           p->pl->o.tp_sp ? "; sequence parallel (each TP rank holds 1/tp of the rows between layers and stages)" : "",
           p->pl->o.no_overlap ? "; reduction after each rank's schedule" : "",
           wire);
    pipe_print_memory(p);
    if (p->pl->o.dp_sync > 1)   /* docs/async.md */
        printf("replicas: each steps alone, every %d steps (and at the last) their change averaged in one all-reduce "
               "and an outer Nesterov step (lr %g, momentum %g)%s\n", p->pl->o.dp_sync, p->pl->o.outer_lr,
               p->pl->o.outer_momentum, p->pl->o.no_overlap ? "" : ", applied one inner step late (overlapped)");
    if (p->pl->o.tp_overlap && p->pl->mb_rows < 2)
        printf("note: --tp-overlap splits a microbatch into two halves of sequences; microbatches of "
               "1 sequence run without it (use fewer microbatches or a larger batch)\n");
    if (p->pl->o.zero && p->pl->o.D == 1)
        printf("note: --zero 1 with --dp 1 shards only what several ranks hold: a tied tensor (wte, "
               "on the embedding's and the head's ranks) and, with two pipes, each chunk; a chunk "
               "on one rank keeps all its moments\n");
}

/* The injected slow links of the last step (replica 0's) into c: the simulator then predicts
 * what that step ran under. (A slow stage is in the profiled costs already: they are measured.) */
static void pipe_last_faults(const pipe_engine *p, sim_costs *c) {
    for (int r = 0; r + 1 < p->pl->o.P; r++) {   /* world ranks of replica 0, TP rank 0 */
        int a = run_layout_world_rank(&p->pl->lo, 0, r, 0), b = run_layout_world_rank(&p->pl->lo, 0, r + 1, 0);
        double d = run_plan_link_delay(p->pl, a, b, p->last_step);
        if (d > 0) sim_costs_set_link(c, r, r + 1, -1, -1, d);
    }
}

/* The links as the run measured them (run/run_link.h) into c, except a link the last step
 * delayed on purpose (--slow-link SECONDS: pipe_last_faults models that one as injected, and its
 * measured times would count the delay as bandwidth). Returns how many links went in. */
static int pipe_measured_links(pipe_engine *p, sim_costs *c) {
    const run_links *L = run_job_links(p->job);
    int n = 0;
    for (int r = 0; r + 1 < p->pl->o.P; r++) {
        int a = run_layout_world_rank(&p->pl->lo, 0, r, 0), b = run_layout_world_rank(&p->pl->lo, 0, r + 1, 0);
        if (run_plan_link_delay(p->pl, a, b, p->last_step) > 0 || run_links_message_time(L, r, 1) <= 0) continue;
        run_links_apply(L, c, r, (double)run_job_msg_bytes(p->job));
        n++;
    }
    return n;
}

/* "links: link 0-1: ..." (the measured links of replica 0), when the job has any. */
static void pipe_print_links(pipe_engine *p) {
    char buf[512];
    if (p->pl->o.P < 2) return;
    printf("links: %s\n", run_links_describe(run_job_links(p->job), buf, sizeof buf));
}

/* The simulator's iteration for the schedule in force, from the mean F/B/W costs profiled in this
 * run, the links as measured and the last step's injected faults, next to the measured medians
 * it and bub. */
static void pipe_print_simulated(pipe_engine *p, double it, double bub) {
    const sched *s = run_job_schedule(p->job);   /* the one in force at the end */
    sim_costs c;
    sim_result res;
    sim_opts so = { .iterations = 1 };
    sim_costs_init(&c, s->n_stages, 0, 0, 0);
    run_job_profile_mean(p->job, &c);
    c.reduce_overlap = !p->pl->o.no_overlap;   /* the reduction as the runtime ran it */
    int n_links = pipe_measured_links(p, &c);
    pipe_last_faults(p, &c);
    int rc = sim_run(s, &c, &so, &res);
    sim_costs_free(&c);
    p->it_med = it;
    p->bub_med = bub;
    p->sim_it = rc < 0 ? -1 : res.iteration_time;
    p->sim_bub = rc < 0 ? -1 : res.bubble_fraction;
    printf("measured:  iteration %.3f ms, bubble %.1f%% (%s, P=%d, D=%d, tp=%d, M=%d%s; median of steps)\n",
           it * 1e3, bub * 100, s->name, p->pl->o.P, p->pl->o.D, p->pl->lo.tp, s->n_mb / s->seq_chunks,
           s->seq_chunks > 1 ? " in sequence chunks" : "");
    if (rc < 0) {
        printf("simulated: not available: %s\n", pt_err());
        return;
    }
    printf("simulated: iteration %.3f ms, bubble %.1f%% (%s, from the mean F/B/W costs profiled in this run%s%s; "
           "measured/simulated %.2f)\n", res.iteration_time * 1e3, res.bubble_fraction * 100, s->name,
           n_links ? " and the links as measured" : "",
           p->pl->n_faults ? " and the last step's slow links" : "", res.iteration_time > 0 ? it / res.iteration_time : 0);
    sim_result_free(&res);
}

/* The last step's events as a Chrome trace and an SVG timeline, when asked. */
static int pipe_write_pictures(pipe_engine *p, double last_it, double last_bub) {
    const timeline *tl = run_job_timeline(p->job);
    const sched *s = p->pl->s;
    if (p->o.trace && trace_write(tl, p->o.trace) < 0) return -1;
    if (!p->o.svg) return 0;
    char title[96], sub[96];
    snprintf(title, sizeof title, "%s  P=%d  D=%d  tp=%d  M=%d  (measured)", s->name, p->pl->o.P,
             p->pl->o.D, p->pl->lo.tp, s->n_mb);
    snprintf(sub, sizeof sub, "last step  %.2f ms  bubble %.1f%%", last_it * 1e3, last_bub * 100);
    svg_opts so = { title, sub, 0 };
    return svg_write(tl, &so, p->o.svg);
}

/* "peak RSS per process (MB): r0 ..., r1 ..." (MPI: every process's, gathered; threads: the
 * one process's). */
static void pipe_print_rss(const pipe_engine *p) {
    int n = p->o.world ? run_layout_ranks(&p->pl->lo) : 1;
    if (n == 1) {
        printf("peak RSS: %.1f MB (the whole process%s)\n", p->rss[0] / 1e6, p->o.world ? "" : ", every rank thread");
        return;
    }
    printf("peak RSS per process (MB):");
    for (int w = 0; w < n; w++) printf(" r%d %.1f%s", w, p->rss[w] / 1e6, w + 1 < n ? "," : "\n");
}

/* "tensor parallel, per rank and step: N all-reduces (--sp: collectives) of X MB, Y ms inside
 * them (Z% of the iteration)": this process's ranks' TP collectives, averaged over them and the
 * steps run. */
static void pipe_print_tp(const pipe_engine *p, double it) {
    run_tp_stats s;
    int ranks;
    if (p->pl->lo.tp <= 1 || p->n == 0) return;
    run_job_tp_stats(p->job, &s, &ranks);
    double per = 1.0 / ((double)ranks * p->n), ms = s.seconds * per * 1e3;
    printf("tensor parallel, per rank and step: %.0f %s of %.2f MB in all, %.2f ms inside "
           "them (%.1f%% of the median iteration)\n", (double)s.calls * per,
           p->pl->o.tp_sp ? "collectives (all-reduces, reduce-scatters, all-gathers)" : "all-reduces",
           s.floats * 4 * per / 1e6,
           ms, it > 0 ? ms / 1e3 / it * 100 : 0);
}

/* Medians over the steps after the first (the warm-up) when there were several. */
/* --balance-memory: "lending waited (ms per step): r0 ..." (collective: every rank calls it). */
static int pipe_print_lend_waits(pipe_engine *p) {
    double *w = NULL;
    int R = run_layout_ranks(&p->pl->lo);
    if (!p->pl->o.balance_memory) return 0;
    if (run_job_lend_waits(p->job, &w) < 0) { free(w); return -1; }
    if (p->base.root && p->n > 0) {
        printf("lending waited (--balance-memory, ms per step: sends and fetches not done when needed):");
        for (int r = 0; r < R && r < MEM_LINE_RANKS; r++) printf(" r%d %.1f%s", r, w[r] * 1e3 / p->n, r + 1 < R && r + 1 < MEM_LINE_RANKS ? "," : "");
        printf("\n");
    }
    free(w);
    return 0;
}

static int pipe_report(train_engine *e) {
    pipe_engine *p = (pipe_engine *)e;
    if (run_job_peak_rss(p->job, &p->rss) < 0) return -1;   /* collective: every rank */
    if (pipe_print_lend_waits(p) < 0) return -1;
    if (!p->base.root) return 0;
    pipe_print_rss(p);
    if (p->n == 0) return 0;
    double last_it = p->iter_t[p->n - 1], last_bub = p->bubble[p->n - 1];
    int skip = p->n > 1;
    double it = pt_median(p->iter_t + skip, p->n - skip);      /* sorts the records: done last */
    double bub = pt_median(p->bubble + skip, p->n - skip);
    pipe_print_links(p);
    pipe_print_simulated(p, it, bub);
    pipe_print_tp(p, it);
    return pipe_write_pictures(p, last_it, last_bub);
}

/* {"params":[per world rank],"grads":[..],"optimizer":[..],"activations":[..]}, with
 * --balance-memory also "activations_held", "activations_lent", "activations_borrowed" */
static cJSON *pipe_memory_json(const pipe_engine *p) {
    int R = run_layout_ranks(&p->pl->lo), nk = p->pl->o.balance_memory ? 7 : 4;
    const char *keys[7] = { "params", "grads", "optimizer", "activations", "activations_held", "activations_lent",
                            "activations_borrowed" };
    cJSON *o = cJSON_CreateObject();
    for (int k = 0; k < nk; k++) {
        cJSON *a = cJSON_AddArrayToObject(o, keys[k]);
        for (int w = 0; w < R; w++) {
            run_mem m;
            run_job_mem(p->job, w, &m);
            double v[7] = { m.params, m.grads, m.optim, m.acts, m.act_sets, m.lent, m.borrowed };
            cJSON_AddItemToArray(a, cJSON_CreateNumber(v[k]));
        }
    }
    return o;
}

static cJSON *pipe_layout(const train_engine *e) {
    const pipe_engine *p = (const pipe_engine *)e;
    const run_layout *lo = &p->pl->lo;
    cJSON *o = cJSON_CreateObject(), *split = cJSON_CreateArray();
    cJSON_AddStringToObject(o, "engine", "pipelined");
    cJSON_AddNumberToObject(o, "stages", p->pl->o.P);
    cJSON_AddNumberToObject(o, "dp", p->pl->o.D);
    cJSON_AddNumberToObject(o, "tp", p->pl->lo.tp);
    cJSON_AddStringToObject(o, "schedule", p->pl->s->name);
    cJSON_AddNumberToObject(o, "microbatches", p->pl->s->n_mb / p->pl->s->seq_chunks);
    if (p->pl->s->seq_chunks > 1) cJSON_AddNumberToObject(o, "seq_chunks", p->pl->s->seq_chunks);
    cJSON_AddNumberToObject(o, "microbatch_rows", p->pl->mb_rows);
    for (int c = 0; c < lo->K; c++)   /* transformer blocks per chunk (the layout's split) */
        cJSON_AddItemToArray(split, cJSON_CreateNumber(lo->chunk_blocks[c]));
    cJSON_AddItemToObject(o, "split", split);
    cJSON_AddStringToObject(o, "transport", p->o.world ? "mpi" : "threads");
    if (p->pl->o.recompute) cJSON_AddTrueToObject(o, "recompute");
    if (p->pl->o.tp_overlap) cJSON_AddTrueToObject(o, "tp_overlap");
    if (p->pl->o.tp_recompute) cJSON_AddTrueToObject(o, "tp_recompute");
    if (p->pl->o.tp_sp) cJSON_AddTrueToObject(o, "sp");
    if (p->pl->o.async_fix) cJSON_AddStringToObject(o, "async_fix", async_fix_name(p->pl->o.async_fix));
    if (p->pl->o.balance_memory) cJSON_AddTrueToObject(o, "balance_memory");
    cJSON_AddNumberToObject(o, "zero", p->pl->o.zero);
    cJSON_AddBoolToObject(o, "overlap_reduce", !p->pl->o.no_overlap);
    if (p->pl->o.dp_sync > 1) {   /* --dp-sync (docs/async.md) */
        cJSON_AddNumberToObject(o, "dp_sync", p->pl->o.dp_sync);
        cJSON_AddNumberToObject(o, "outer_lr", p->pl->o.outer_lr);
        cJSON_AddNumberToObject(o, "outer_momentum", p->pl->o.outer_momentum);
    }
    cJSON_AddStringToObject(o, "wire", pt_wire_name(p->pl->o.wire));
    cJSON_AddItemToObject(o, "memory_bytes", pipe_memory_json(p));
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
    if (p->pl->o.P > 1) {   /* replica 0's links as measured, the prediction's */
        const run_links *L = run_job_links(p->job);
        cJSON *arr = cJSON_AddArrayToObject(o, "links");
        for (int r = 0; r + 1 < p->pl->o.P; r++) {
            const run_link_dir *f = run_links_at(L, 0, 0, r, 0), *b = run_links_at(L, 0, 0, r, 1);
            cJSON *l = cJSON_CreateObject();
            cJSON_AddItemToObject(l, "ranks", cJSON_CreateIntArray((int[]){ r, r + 1 }, 2));
            cJSON_AddNumberToObject(l, "latency_s", f->latency);
            cJSON_AddItemToObject(l, "bandwidth_Bps", cJSON_CreateDoubleArray((double[]){ f->bandwidth, b->bandwidth }, 2));
            cJSON_AddItemToObject(l, "probe_Bps", cJSON_CreateDoubleArray((double[]){ f->probe_bw, b->probe_bw }, 2));
            cJSON_AddItemToObject(l, "timed", cJSON_CreateIntArray((int[]){ f->n, b->n }, 2));
            cJSON_AddItemToArray(arr, l);
        }
    }
    if (p->o.svg) cJSON_AddStringToObject(o, "svg", p->o.svg);
    if (p->rss) {
        cJSON *a = cJSON_AddArrayToObject(o, "peak_rss_bytes");
        for (int w = 0; w < (p->o.world ? run_layout_ranks(&p->pl->lo) : 1); w++)
            cJSON_AddItemToArray(a, cJSON_CreateNumber(p->rss[w]));
    }
    return o;
}

/* The job, the plan and the records; takes a half-made engine (init's failure path). */
static void pipe_free(train_engine *e) {
    pipe_engine *p = (pipe_engine *)e;
    run_job_free(p->job);
    if (p->pl && p->pl->s) run_plan_free(p->pl);
    free(p->pl);
    free(p->iter_t);
    free(p->bubble);
    free(p->rss);
    free(p);
}

static run_job *pipe_job(train_engine *e) { return ((pipe_engine *)e)->job; }
static const run_plan *pipe_plan(const train_engine *e) { return ((const pipe_engine *)e)->pl; }
/* A new split, the job's state moved rank to rank (run_job_resplit: no file); the schedule in
 * force is kept. The numbers are the same: parameters and moments move as they are. */
static int pipe_resplit(train_engine *e, const int *split, int n) {
    pipe_engine *p = (pipe_engine *)e;
    run_plan *next = pt_calloc(1, sizeof *next);
    sched *cur = sched_copy(run_job_schedule(p->job));
    int rc = run_plan_resplit(next, p->pl, &p->cfg, split, n);
    if (rc == 0) rc = run_job_resplit(&p->job, next);
    if (rc == 0) {   /* the old job is gone: its plan goes too */
        run_plan_free(p->pl);
        free(p->pl);
        p->pl = next;
        next = NULL;
    }
    if (rc == 0 && strcmp(cur->name, p->pl->s->name)) rc = run_job_replan(p->job, cur);
    if (rc == 0) run_job_share_timeline(p->job, p->share_tl);
    if (next && next->s) run_plan_free(next);
    free(next);
    sched_free(cur);
    return rc < 0 ? pt_adderr("re-split to %d chunks: ", n) : 0;
}

static const timeline *pipe_timeline(train_engine *e) { return run_job_timeline(((pipe_engine *)e)->job); }

static const sched *pipe_schedule(const train_engine *e) { return run_job_schedule(((const pipe_engine *)e)->job); }

static int pipe_replan(train_engine *e, const sched *s) { return run_job_replan(((pipe_engine *)e)->job, s); }

static const train_engine_vt pipe_vt = {
    .name = "pipelined", .step = pipe_step, .save = pipe_save, .describe = pipe_describe,
    .report = pipe_report, .layout = pipe_layout, .summary = pipe_summary, .free = pipe_free,
    .job = pipe_job, .plan = pipe_plan,
    .timeline = pipe_timeline, .schedule = pipe_schedule, .replan = pipe_replan, .resplit = pipe_resplit,
};

int train_engine_pipe_init(train_engine **out, const train_pipe_opts *o, const run_source *src,
                           int B, int T) {
    pipe_engine *p = pt_calloc(1, sizeof *p);
    p->base.vt = &pipe_vt;
    p->o = *o;
    p->o.ro.split = NULL;          /* read by run_plan_init only; not kept past it */
    *out = NULL;
    p->pl = pt_calloc(1, sizeof *p->pl);
    if (run_plan_init(p->pl, &o->ro, &src->cfg, B, T) < 0) goto free_engine;
    if (o->last_step > 0 && run_plan_check_fault_steps(p->pl, o->last_step) < 0) goto free_engine;
    if (run_job_init_src(&p->job, p->pl, src, o->world) < 0) goto free_engine;
    p->base.root = run_job_is_root(p->job);
    p->cfg = src->cfg;
    p->share_tl = o->adapt;
    run_job_share_timeline(p->job, o->adapt);
    if (o->world && o->threads > 0) openblas_set_num_threads(o->threads);   /* per process */
    *out = &p->base;
    return 0;
free_engine:
    pipe_free(&p->base);
    return -1;
}
