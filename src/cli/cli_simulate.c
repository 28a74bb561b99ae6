/* pipetrain simulate: builds or loads a schedule, builds the cost model from flags or a costs
 * file, or from a model config on a cluster (--config, --cluster: the planner's cost model, with
 * tensor parallelism and memory), runs the simulator and prints a summary (human, --json, or --csv
 * events), optionally a Chrome trace and an SVG timeline; with --adapt it replays the straggler
 * policy over the iterations instead; with --side-step, how much of each rank's bubble a side task
 * can use. Thin: the work lives in sim/, plan/ and io/. */
#include "cli/cli.h"
#include "cli/cli_layout.h"
#include "plan/plan.h"
#include "trace/svg.h"
#include "trace/trace.h"
#include "sched/sched.h"
#include "sim/sim.h"
#include "sim/sim_adapt.h"
#include "sim/sim_report.h"
#include "util/pt.h"
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *USAGE =
    "(--schedule NAME --stages P --microbatches M [--chunks V] | --schedule-file S.csv [--pipes N])\n"
    "       [--cost f=1,b=1,w=1[,bw=X][,act=BYTES][,params=BYTES] | --costs FILE.json] [--latency S] [--bandwidth B]\n"
    "       [--act-bytes N] [--slow-link I-J:(SECONDS|RATE)[@FROM-TO]]... [--slow-stage I:FACTOR[@FROM-TO]]...\n"
    "       [--iterations N] [--mem-limit N] [--adapt] [--post-validation] [--trace out.json] [--svg out.svg]\n"
    "       [--json | --csv] [--critical-path] [--side-step SECONDS] [--balance-memory]\n"
    "   or: --config C.json --cluster K.json (--plan P.json | --schedule NAME --stages P --microbatches M\n"
    "       [--chunks V] [--tp T] [--dp D] [--zero 0|1] [--microbatch-size B] [--seq T] [--split a,b,..]\n"
    "       [--recompute] [--tp-overlap] [--tp-recompute] [--async-window W]) [the output, fault and iteration\n"
    "       flags above]";

#define UNSET (-1e300)   /* a number flag not given */
#define MAX_EVENTS 2e7   /* actions x iterations kept as timeline events (about 64 bytes each) */

typedef struct {
    const char *name, *file, *cost, *costs, *trace, *svg;
    int stages, mb, chunks, pipes, iters, mem_limit;
    double latency, bandwidth, act_bytes, side_step;
    bool post_validation, json, csv, crit, adapt, balance_memory;
    const char **slow_links, **slow_stages;
    int n_slow_links, n_slow_stages;
    /* a model on a cluster (the planner's cost model) */
    const char *config, *cluster, *plan, *split;
    int tp, dp, zero, mb_size, seq;
    bool recompute, tp_overlap, tp_recompute, sp;
    int seq_chunks;
    int async_depth;            /* pipedream, 2bw: forwards each stage admits (sched_params) */
    int async_window;           /* with --config: the asynchronous window whose memory is priced */
} sim_args;

/* A model on a cluster: the layout simulated, and its memory per pipeline rank. */
typedef struct {
    bool on;                /* --config / --cluster given */
    plan_layout pl;
    double *need, *have;    /* [P] bytes per device of each rank, and the least memory among them */
    int over;               /* ranks that need more than they have */
} model_run;

/* Takes the repeatable --slow-link / --slow-stage out of argv (cli_parse has no lists); the rest
 * stays in rest[] for cli_parse. Returns the new argc, or -1 when a value is missing. */
static int take_repeated(int argc, char **argv, char **rest, sim_args *a) {
    int n = 0;
    rest[n++] = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        bool link = !strncmp(s, "--slow-link", 11), stage = !strncmp(s, "--slow-stage", 12);
        size_t k = link ? 11 : 12;
        if ((!link && !stage) || (s[k] != 0 && s[k] != '=')) { rest[n++] = argv[i]; continue; }
        const char *v = s[k] == '=' ? s + k + 1 : i + 1 < argc ? argv[++i] : NULL;
        if (!v) { fprintf(stderr, "pipetrain simulate: %s needs a value\n", link ? "--slow-link" : "--slow-stage"); return -1; }
        if (link) a->slow_links[a->n_slow_links++] = v;
        else a->slow_stages[a->n_slow_stages++] = v;
    }
    return n;
}

static int parse_args(int argc, char **argv, sim_args *a) {
    cli_opt opts[] = {
        {"--schedule", OPT_STR, &a->name, "generator name (pipetrain schedule --help describes each)"},
        {"--stages", OPT_INT, &a->stages, "P, the number of ranks"},
        {"--microbatches", OPT_INT, &a->mb, "M, microbatches per iteration"},
        {"--chunks", OPT_INT, &a->chunks, "V, model chunks per rank (interleaved-1f1b)"},
        {"--seq-chunks", OPT_INT, &a->seq_chunks, "K, each microbatch's sequences as K chunks, the schedule's units "
                                                  "(1f1b, zb-h1; with --config priced per chunk)"},
        {"--async-depth", OPT_INT, &a->async_depth, "D, pipedream | 2bw: each stage admits max(P-g, D) forwards before "
                                                    "its first backward (their stashes priced with params=BYTES)"},
        {"--async-window", OPT_INT, &a->async_window, "W, pipedream | 2bw with --config: price the memory of train "
                                                      "--async-window W (default 4: W x M stashes, boundary buffers)"},
        {"--schedule-file", OPT_STR, &a->file, "simulate this CSV schedule instead (one row per rank)"},
        {"--pipes", OPT_INT, &a->pipes, "pipes of the --schedule-file (2 for a chimera CSV; default 1)"},
        {"--cost", OPT_STR, &a->cost, "per-stage times for every stage: f=1,b=1,w=1[,bw=X][,act=BYTES][,params=BYTES]"},
        {"--costs", OPT_STR, &a->costs, "costs JSON file (docs/simulator.md); --cost and the flags below override it"},
        {"--latency", OPT_DOUBLE, &a->latency, "seconds per message, every link"},
        {"--bandwidth", OPT_DOUBLE, &a->bandwidth, "bytes per second, every link (0: infinite)"},
        {"--act-bytes", OPT_DOUBLE, &a->act_bytes, "activation bytes per microbatch, every stage"},
        {"--slow-link", OPT_STR, NULL, "I-J:SECONDS[@FROM-TO] extra delay per message between ranks I and J, in "
                                       "iterations FROM..TO (1-based, inclusive; @FROM-: to the end); I-J:RATE with "
                                       "a unit (30Mbit, 4MB/s): slow in bandwidth, messages queue each way "
                                       "(repeatable)"},
        {"--slow-stage", OPT_STR, NULL, "I:FACTOR[@FROM-TO] multiplies stage I's compute times (>= 1) (repeatable)"},
        {"--iterations", OPT_INT, &a->iters, "N iterations back to back (default 1)"},
        {"--mem-limit", OPT_INT, &a->mem_limit, "greedy, adaptive: most microbatches of activations a stage may hold "
                                                "(0: no limit; --adapt: the starting schedule's peak)"},
        {"--balance-memory", OPT_FLAG, &a->balance_memory, "price train --balance-memory: heavy stages lend activations "
                                                           "to lighter ranks (memory per rank; with --mem-limit N: "
                                                           "whether every rank fits N microbatches)"},
        {"--adapt", OPT_FLAG, &a->adapt, "replay the straggler policy: switch to the adaptive schedule after a slow "
                                         "iteration, back when healthy (docs/stragglers.md)"},
        {"--post-validation", OPT_FLAG, &a->post_validation, "no global sync between iterations"},
        {"--trace", OPT_STR, &a->trace, "write a Chrome trace JSON (Perfetto)"},
        {"--svg", OPT_STR, &a->svg, "write an SVG timeline"},
        {"--json", OPT_FLAG, &a->json, "print one JSON object instead of the summary"},
        {"--csv", OPT_FLAG, &a->csv, "print every simulated event as CSV instead of the summary"},
        {"--critical-path", OPT_FLAG, &a->crit, "also print the critical path"},
        {"--side-step", OPT_DOUBLE, &a->side_step, "how much of each rank's bubble a side task of steps this "
                                                   "long can use (docs/harvesting.md)"},
        {"--config", OPT_STR, &a->config, "model config: costs from the planner's model on --cluster (docs/planner.md)"},
        {"--cluster", OPT_STR, &a->cluster, "cluster JSON for --config (examples/cluster-*.json)"},
        {"--plan", OPT_STR, &a->plan, "with --config: simulate this plan file's layout (pipetrain plan --out)"},
        {"--tp", OPT_INT, &a->tp, "with --config: tensor-parallel ranks per stage (default 1)"},
        {"--dp", OPT_INT, &a->dp, "with --config: data-parallel replicas (default 1)"},
        {"--zero", OPT_INT, &a->zero, "with --config: 1 splits AdamW moments over the replicas (memory)"},
        {"--microbatch-size", OPT_INT, &a->mb_size, "with --config: sequences per microbatch (default 1)"},
        {"--seq", OPT_INT, &a->seq, "with --config: sequence length (default n_positions)"},
        {"--split", OPT_STR, &a->split, "with --config: blocks per chunk, e.g. 3,5,4,4 (default even)"},
        {"--recompute", OPT_FLAG, &a->recompute, "with --config: activation recomputation"},
        {"--tp-overlap", OPT_FLAG, &a->tp_overlap, "with --config and --tp 2+: blocks' all-reduces in ping-pong "
                                                    "with the other half microbatch (train --tp-overlap)"},
        {"--tp-recompute", OPT_FLAG, &a->tp_recompute, "with --config and --tp 2+: communication-free "
                                                        "recomputation (train --tp-recompute)"},
        {"--sp", OPT_FLAG, &a->sp, "with --config and --tp 2+: sequence parallelism, the stream between layers "
                                   "and stages split by rows over the TP group (train --sp)"},
    };
    char **rest = pt_malloc(sizeof(char *) * (size_t)(argc + 1));
    a->slow_links = pt_malloc(sizeof(char *) * (size_t)argc);
    a->slow_stages = pt_malloc(sizeof(char *) * (size_t)argc);
    int n = take_repeated(argc, argv, rest, a), rc = -1;
    if (n >= 0) rc = cli_parse(n, rest, "simulate", USAGE, opts, (int)(sizeof opts / sizeof opts[0]));
    free(rest);
    return rc;
}

static int build_costs(const sim_args *a, int n_stages, int n_ranks, sim_costs *c);

/* What the adaptive generator chose, for the summary (n_judged 0: another generator). */
static sched_adaptive_info adaptive_info;

/* Generators that order by costs (greedy, adaptive) get the costs being simulated as they stand
 * in iteration 1 (per stage, slow stages included), those that read link delays the time a
 * message takes on each link, the judged one (adaptive) the simulator under those costs, and
 * those that take a memory limit --mem-limit; the others ignore all of it. */
static sched *generate(const sim_args *a, sched_params *p) {
    const sched_generator *g = sched_generator_find(a->name);
    if (g && g->mem_limit) p->mem_limit = a->mem_limit;
    if (!g || !g->stage_costs) return sched_generate(a->name, p);
    sim_costs gc = { 0 }, now = { 0 };
    sched *s = NULL;
    int S = a->stages * (a->chunks > 0 ? a->chunks : g->chunks) * g->pipes;
    double *delay = pt_calloc(2 * (size_t)a->stages, sizeof(double));
    if (build_costs(a, S, a->stages, &gc) == 0) {
        sim_costs_at(&gc, 1, &now);
        sim_adaptive_params(&now, a->stages, p, delay);
        if (!g->link_delays) p->link_delay = p->link_busy = NULL;
        if (!g->scored) p->score = NULL;
        s = g->scored ? sched_adaptive(p, &adaptive_info) : sched_generate(a->name, p);
    }
    sim_costs_free(&now);
    sim_costs_free(&gc);
    free(delay);
    return s;
}

/* Prefixes a validation error of a file read as one pipe with a hint when the file is valid as
 * two pipes (a chimera CSV without --pipes 2); the error itself is kept after it. */
static void hint_pipes(const sim_args *a, const sched *s) {
    if (a->pipes > 0 || s->n_stages % 2) return;
    char err[2048];
    snprintf(err, sizeof err, "%s", pt_err());
    sched *two = sched_read_csv(a->file, 2);
    bool fits = two && sched_validate(two, NULL) == 0;
    sched_free(two);
    pt_seterr("%s", err);
    if (fits) pt_adderr("valid as 2 pipes: a chimera CSV needs --pipes 2; read as 1 pipe, ");
}

/* Bounds a generated schedule before it is built (a huge one would exhaust memory first): every
 * microbatch runs at least an F and a backward on each of the P x V stages it visits, each an
 * event per iteration. The exact count is checked again after generation. */
static int check_size(const sim_args *a) {
    const sched_generator *g = sched_generator_find(a->name);
    int v = a->chunks > 0 ? a->chunks : g ? g->chunks : 1;
    double actions = 2.0 * a->stages * a->mb * v;
    if (actions * a->iters <= MAX_EVENTS) return 0;
    return pt_seterr("too large to simulate: --stages %d x --microbatches %d x %d chunk%s x 2 (F and "
                     "backward) x %d iteration%s = %.3g actions at least; the limit is %.0f (actions x "
                     "iterations): use fewer stages, microbatches or iterations", a->stages, a->mb, v,
                     v > 1 ? "s" : "", a->iters, a->iters > 1 ? "s" : "", actions * a->iters, MAX_EVENTS);
}

/* The schedule from --schedule-file (validated) or from the generator flags. */
static sched *read_schedule(const sim_args *a) {
    if (a->file) {
        if (a->pipes < 0) { pt_seterr("--pipes must be >= 1 (got %d)", a->pipes); return NULL; }
        sched *s = sched_read_csv(a->file, a->pipes);
        if (!s) return NULL;
        if (a->stages > 0 && a->stages != s->n_ranks) {
            pt_seterr("--stages %d does not match %s, which has %d rows (ranks)", a->stages, a->file, s->n_ranks);
            sched_free(s);
            return NULL;
        }
        if (sched_validate(s, NULL)) {
            hint_pipes(a, s);
            pt_adderr("%s: ", a->file);
            sched_free(s);
            return NULL;
        }
        return s;
    }
    if (!a->name) { pt_seterr("--schedule NAME or --schedule-file S.csv is required"); return NULL; }
    if (a->stages < 1) { pt_seterr("--stages must be >= 1 (got %d)", a->stages); return NULL; }
    if (a->mb < 1) { pt_seterr("--microbatches must be >= 1 (got %d)", a->mb); return NULL; }
    if (a->chunks < 0) { pt_seterr("--chunks must be >= 0 (got %d)", a->chunks); return NULL; }
    if (a->mem_limit < 0) { pt_seterr("--mem-limit must be >= 0 (got %d)", a->mem_limit); return NULL; }
    if (check_size(a) < 0) return NULL;
    sched_params p = { .ranks = a->stages, .microbatches = a->mb, .chunks = a->chunks,
                       .seq_chunks = a->seq_chunks, .async_depth = a->async_depth,
                       .cost_f = 1, .cost_b = 1, .cost_w = 1 };
    const sched_generator *g = sched_generator_find(a->name);
    if (a->async_depth && g && !g->async) {
        pt_seterr("--async-depth %d: only for the asynchronous schedules (pipedream, 2bw), not %s", a->async_depth, a->name);
        return NULL;
    }
    return generate(a, &p);
}

/* Every action of every iteration is kept as an event: bounded by MAX_EVENTS. */
static int check_events(const sim_args *a, const sched *s) {
    if ((double)a->iters * (double)sched_total_actions(s) <= MAX_EVENTS) return 0;
    return pt_seterr("too large to simulate: --iterations %d x %ld actions%s is more than the %.0f events "
                     "the simulator keeps", a->iters, sched_total_actions(s),
                     s->lowered ? "" : " (before adding sends and receives)", MAX_EVENTS);
}

/* s (taken) lowered (so the trace and picture show each RECV and its wait), within the event
 * bound (checked before lowering too: lowering adds up to four actions per edge). */
static sched *lower_checked(const sim_args *a, sched *s) {
    sched *l = NULL;
    if (!s || check_events(a, s) < 0) goto done;
    if (s->lowered) return s;
    if ((l = sched_lower(s)) && check_events(a, l) < 0) { sched_free(l); l = NULL; }
done:
    sched_free(s);
    return l;
}

static sched *load_schedule(const sim_args *a) { return lower_checked(a, read_schedule(a)); }

/* A cost flag's value: finite, >= 0 and at most SIM_COST_MAX (NaN fails every comparison). */
static bool cost_ok(double v) { return v >= 0 && v <= SIM_COST_MAX; }

/* --slow-link and --slow-stage into c. */
static int add_faults(const sim_args *a, sim_costs *c, int n_ranks) {
    for (int i = 0; i < a->n_slow_links; i++)
        if (sim_costs_add_slow_link(c, a->slow_links[i], n_ranks)) return -1;
    for (int i = 0; i < a->n_slow_stages; i++)
        if (sim_costs_add_slow_stage(c, a->slow_stages[i])) return -1;
    return 0;
}


/* Costs: defaults f=b=w=1, then --costs file, --cost spec, uniform flags, slow links/stages. */
static int build_costs(const sim_args *a, int n_stages, int n_ranks, sim_costs *c) {
    sim_costs_init(c, n_stages, 1, 1, 1);
    if (a->costs && sim_costs_load_json(c, a->costs, n_ranks)) return -1;
    if (a->cost && sim_costs_parse_spec(c, a->cost)) return -1;
    if (a->latency != UNSET && !cost_ok(a->latency))
        return pt_seterr("--latency must be in 0..%g seconds (got %g)", SIM_COST_MAX, a->latency);
    if (a->bandwidth != UNSET && !cost_ok(a->bandwidth))
        return pt_seterr("--bandwidth must be in 0..%g bytes/s (got %g)", SIM_COST_MAX, a->bandwidth);
    if (a->act_bytes != UNSET && !cost_ok(a->act_bytes))
        return pt_seterr("--act-bytes must be in 0..%g (got %g)", SIM_COST_MAX, a->act_bytes);
    if (a->latency != UNSET) c->latency = a->latency;
    if (a->bandwidth != UNSET) c->bandwidth = a->bandwidth;
    if (a->act_bytes != UNSET) for (int g = 0; g < c->n_stages; g++) c->act_bytes[g] = a->act_bytes;
    return add_faults(a, c, n_ranks);
}

/* ---- a model on a cluster (--config, --cluster) ---- */

/* The model flags need --config and --cluster; with them the costs come from the model, so the
 * other cost flags are refused, and --plan sets the whole layout. */
static int model_flags_check(const sim_args *a) {
    bool layout = a->tp || a->dp || a->zero || a->mb_size || a->seq || a->split || a->recompute || a->tp_overlap ||
                  a->tp_recompute || a->sp || a->async_window;
    if (!a->config && !a->cluster) {
        if (!layout && !a->plan) return 0;
        return pt_seterr("--tp, --dp, --zero, --plan, --microbatch-size, --seq, --split, --recompute, --tp-overlap, "
                         "--tp-recompute, --sp and --async-window need --config "
                         "and --cluster (the costs then come from the model on the cluster: its FLOPs, its TP "
                         "all-reduce bytes over the cluster's links, its memory)");
    }
    if (!a->config || !a->cluster) return pt_seterr("--config and --cluster go together (a model on a cluster)");
    if (a->cost || a->costs || a->latency != UNSET || a->bandwidth != UNSET || a->act_bytes != UNSET || a->file ||
        a->adapt)
        return pt_seterr("with --config the costs come from the model on --cluster: drop --cost, --costs, --latency, "
                         "--bandwidth, --act-bytes, --schedule-file and --adapt");
    if (a->plan && (layout || a->name || a->stages || a->mb || a->chunks))
        return pt_seterr("--plan sets the layout: drop --schedule/--stages/--microbatches/--chunks/--tp/--dp/--zero/"
                         "--microbatch-size/--seq/--split/--recompute/--tp-overlap/--tp-recompute/--sp, or drop --plan");
    return 0;
}

/* The layout from --plan, or from the flags (defaults: tp 1, dp 1, zero 0, microbatch size 1, seq
 * n_positions, the generator's chunks, an even split). */
static int model_layout(const sim_args *a, const gpt_config *cfg, plan_layout *p) {
    memset(p, 0, sizeof *p);
    if (a->plan) return plan_read(a->plan, p);
    const sched_generator *g = a->name ? sched_generator_find(a->name) : NULL;
    if (!g) return pt_seterr("--schedule NAME (a generator: pipetrain schedule --help) or --plan is required with --config");
    if (g->pipes != 1) return pt_seterr("--config simulates one-pipe schedules; %s runs %d pipes", g->name, g->pipes);
    *p = (plan_layout){ .P = a->stages, .M = a->mb, .chunks = a->chunks > 0 ? a->chunks : g->chunks,
                        .D = a->dp ? a->dp : 1, .tp = a->tp ? a->tp : 1, .zero = a->zero,
                        .mb_size = a->mb_size ? a->mb_size : 1, .T = a->seq ? a->seq : cfg->n_positions,
                        .recompute = a->recompute, .tp_overlap = a->tp_overlap, .tp_recompute = a->tp_recompute,
                        .sp = a->sp, .seq_chunks = a->seq_chunks, .balance_memory = a->balance_memory,
                        .async_window = a->async_window };
    snprintf(p->schedule, sizeof p->schedule, "%s", g->name);
    snprintf(p->placement, sizeof p->placement, "node");
    if (p->P < 1 || p->M < 1) return pt_seterr("--stages and --microbatches must be >= 1 (got %d, %d)", p->P, p->M);
    if (!a->split) { plan_layout_even_split(p, cfg->n_layer); return 0; }
    int n;
    if (cli_layout_split(a->split, &p->split, &n) < 0) return -1;
    p->K = p->P * p->chunks;
    if (n != p->K) return pt_seterr("--split '%s' lists %d chunks, the layout has %d (stages x chunks)", a->split, n, p->K);
    return 0;
}

/* The model's costs of the layout on the cluster (TP all-reduces in F and B), its lowered schedule
 * and its memory per rank. */
static int model_load(const sim_args *a, model_run *m, sched **s, sim_costs *c) {
    gpt_config cfg;
    plan_cluster k;
    if (config_load_json(&cfg, a->config) < 0 || plan_cluster_load(&k, a->cluster) < 0) return -1;
    sched *raw = NULL;
    int rc = model_layout(a, &cfg, &m->pl);
    if (rc == 0 && m->pl.K > cfg.n_layer)
        rc = pt_seterr("%d chunks (stages x chunks) for %d blocks: every chunk needs a block", m->pl.K, cfg.n_layer);
    if (rc == 0) rc = plan_evaluate(&cfg, &k, NULL, &m->pl);
    if (rc == 0) {
        m->need = pt_malloc(sizeof(double) * (size_t)m->pl.P);
        m->have = pt_malloc(sizeof(double) * (size_t)m->pl.P);
        rc = (m->over = plan_rank_memory(&k, &m->pl, m->need, m->have)) < 0 ? -1 : 0;
    }
    if (rc == 0) rc = plan_sim_costs(&cfg, &k, NULL, &m->pl, c, &raw);
    plan_cluster_free(&k);
    if (rc < 0) return -1;
    return (*s = lower_checked(a, raw)) ? add_faults(a, c, (*s)->n_ranks) : -1;
}

static void model_free(model_run *m) {
    plan_layout_free(&m->pl);
    free(m->need); free(m->have);
}

#define GIB (1024.0 * 1024.0 * 1024.0)

static void model_print_human(const model_run *m, const sim_costs *c) {
    const plan_layout *p = &m->pl;
    char split[1024];
    printf("model            tp %d x dp %d x stages %d, microbatches %d x %d, seq %d, recompute %s%s%s, zero %d, split %s\n",
           p->tp, p->D, p->P, p->M, p->mb_size, p->T, p->recompute ? "yes" : p->tp_recompute ? "comm-free" : "no",
           p->tp_overlap ? (p->mb_size > 1 ? ", tp-overlap" : ", tp-overlap (no effect: microbatches of one sequence)")
                         : "", p->sp ? ", sp" : "", p->zero, plan_layout_split_str(p, split, sizeof split));
    if (c->tp > 1) {
        printf("TP %s per stage (seconds within F and B)\n",
               p->sp ? "collectives (reduce-scatters, all-gathers, all-reduces)" : "all-reduce");
        for (int g = 0; g < c->n_stages; g++) printf("  stage %-4d F %.6g of %.6g  B %.6g of %.6g\n", g, c->tp_f[g],
                                                     c->f[g], c->tp_b[g], c->b[g]);
    }
    printf("memory per device of each rank (GiB: needs / has)\n");
    for (int r = 0; r < p->P; r++)
        printf("  rank %-4d %8.4g / %-8.4g%s\n", r, m->need[r] / GIB, m->have[r] / GIB,
               m->need[r] > m->have[r] ? "  does not fit" : "");
    if (m->over)
        fprintf(stderr, "pipetrain simulate: note: %d of %d ranks need more memory than their devices have (try "
                "--recompute, --zero 1 with --dp, more --tp or --stages)\n", m->over, p->P);
}

static cJSON *model_json(const model_run *m, const sim_costs *c) {
    const plan_layout *p = &m->pl;
    char split[1024];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "dp", p->D);
    cJSON_AddNumberToObject(o, "zero", p->zero);
    cJSON_AddNumberToObject(o, "microbatch_size", p->mb_size);
    cJSON_AddNumberToObject(o, "seq", p->T);
    cJSON_AddBoolToObject(o, "recompute", p->recompute);
    cJSON_AddBoolToObject(o, "tp_overlap", p->tp_overlap);
    cJSON_AddBoolToObject(o, "tp_recompute", p->tp_recompute);
    cJSON_AddBoolToObject(o, "sp", p->sp);
    cJSON_AddStringToObject(o, "split", plan_layout_split_str(p, split, sizeof split));
    cJSON_AddItemToObject(o, "tp_time_f", sim_report_doubles(c->tp_f, c->n_stages));
    cJSON_AddItemToObject(o, "tp_time_b", sim_report_doubles(c->tp_b, c->n_stages));
    cJSON_AddItemToObject(o, "stage_memory", sim_report_doubles(p->stage_mem, p->K));
    cJSON_AddItemToObject(o, "rank_memory", sim_report_doubles(m->need, p->P));
    cJSON_AddItemToObject(o, "device_memory", sim_report_doubles(m->have, p->P));
    cJSON_AddBoolToObject(o, "fits", m->over == 0);
    return o;
}

/* The run's result with --side-step (json: an object added to o; else the lines), or nothing. */
static int side_report(const sim_result *r, const sim_args *a, cJSON *o) {
    if (a->side_step == UNSET) return 0;
    sim_side sd;
    if (sim_side_fit(r, a->side_step, &sd) < 0) return -1;
    if (o) cJSON_AddItemToObject(o, "side_step", sim_report_side_json(&sd));
    else sim_report_side_print(stdout, &sd);
    sim_side_free(&sd);
    return 0;
}

/* Trace and SVG files of a timeline, when asked for. */
static int write_pictures(const timeline *tl, const char *title, const char *sub, const sim_args *a) {
    if (a->trace && trace_write(tl, a->trace)) return -1;
    if (!a->svg) return 0;
    svg_opts o = { title, sub, 0 };
    return svg_write(tl, &o, a->svg);
}

static int write_result_pictures(const sched *s, const sim_result *r, const sim_args *a) {
    char title[160], sub[160], extra[32] = "";
    if (s->n_stages != s->n_ranks) snprintf(extra, sizeof extra, " | S=%d stages", s->n_stages);
    snprintf(title, sizeof title, "%s | P=%d | M=%d%s", s->name, s->n_ranks, s->n_mb, extra);
    snprintf(sub, sizeof sub, "iteration time %.6g | bubble %.1f%% | ideal %.6g | %d iteration%s%s",
             r->iteration_time, 100 * r->bubble_fraction, r->ideal_time, r->n_iters, r->n_iters > 1 ? "s" : "",
             a->post_validation ? " (post-validation)" : "");
    return write_pictures(&r->tl, title, sub, a);
}

/* With --schedule adaptive under a limit: when the limit keeps it more than 5% from its time with
 * unlimited memory, says on stderr (and in *needed) which limit would come within 5%. */
#define NEED_TOL 0.05
static int note_mem_needed(const sim_args *a, const sim_costs *c, const sim_result *r, int *needed, double *unl) {
    *needed = 0;
    if (!adaptive_info.n_judged || a->mem_limit <= 0) return 0;
    sched_params p = { .ranks = a->stages, .microbatches = a->mb, .mem_limit = a->mem_limit };
    int peak;
    *needed = sim_adaptive_mem_needed(&p, c, NEED_TOL, unl, &peak);
    if (*needed < 0) return -1;
    if (*needed > a->mem_limit && !a->json && !a->csv)
        fprintf(stderr, "pipetrain simulate: note: --mem-limit %d holds the adaptive schedule to %.6g; with no limit "
                "it takes %.6g (holding %d); it needs --mem-limit %d to come within %.0f%% of that\n", a->mem_limit,
                r->iteration_time, *unl, peak, *needed, 100 * NEED_TOL);
    return 0;
}

/* --balance-memory: each rank's activations with the lend plan, in microbatches of its stage's
 * size, next to its stage's peak without; with --mem-limit N whether each way fits N (a limit
 * the plain schedule misses may fit balanced). Into obj (--json) or printed. */
static void balance_report(const sched *s, const sim_costs *c, const sim_result *r, const sim_args *a, cJSON *obj) {
    int P = s->n_stages, worst = 0;
    double top = 0;
    cJSON *o = obj ? cJSON_AddObjectToObject(obj, "balance_memory") : NULL, *h = o ? cJSON_AddArrayToObject(o, "held_mb") : NULL;
    if (!obj) printf("memory with --balance-memory (microbatches of activations per rank: held = own + borrowed; "
                     "without):\n");
    for (int g = 0; g < P; g++) {
        double unit = c->act_bytes && c->act_bytes[g] > 0 ? c->act_bytes[g] : 1;
        double held = r->rank_peak_bytes[g] / unit, borrowed = r->rank_borrowed[g] / unit;
        if (held > top) top = held;
        if (r->peak_mb[g] > worst) worst = r->peak_mb[g];
        if (h) cJSON_AddItemToArray(h, cJSON_CreateNumber(held));
        else printf("  rank %-3d %5.2f = %.2f + %.2f   (%d)\n", g, held, held - borrowed, borrowed, r->peak_mb[g]);
    }
    if (a->mem_limit <= 0) return;
    int fits = top <= a->mem_limit + 1e-9, fits_plain = worst <= a->mem_limit;
    if (o) {
        cJSON_AddNumberToObject(o, "mem_limit", a->mem_limit);
        cJSON_AddBoolToObject(o, "fits", fits);
        cJSON_AddBoolToObject(o, "fits_without", fits_plain);
    } else
        printf("--mem-limit %d: %s with --balance-memory (largest rank %.2f); %s without (largest stage %d)\n",
               a->mem_limit, fits ? "fits" : "does not fit", top, fits_plain ? "fits" : "does not fit", worst);
}

/* ---- --adapt: the replay of the straggler policy ---- */


/* simulate --adapt: the starting schedule from --schedule, faults by iteration, the policy's
 * defaults (sim_policy_defaults). */
static int run_adapt(const sim_args *a) {
    if (!a->name) return pt_seterr("--adapt needs --schedule NAME (the starting schedule; not a --schedule-file)");
    if (a->file) return pt_seterr("--adapt takes --schedule NAME, not --schedule-file");
    if (a->post_validation) return pt_seterr("--adapt switches schedules at the optimizer's barrier; drop --post-validation");
    if (a->stages < 1 || a->mb < 1) return pt_seterr("--adapt needs --stages >= 1 and --microbatches >= 1");
    if (a->mem_limit < 0) return pt_seterr("--mem-limit must be >= 0 (got %d)", a->mem_limit);
    if (check_size(a) < 0) return -1;
    sim_costs c;
    sim_adapt_result r;
    sim_adapt_opts o = { .start = a->name, .iterations = a->iters, .policy = sim_policy_defaults(),
                         .shape = { .ranks = a->stages, .microbatches = a->mb, .chunks = a->chunks,
                                    .mem_limit = a->mem_limit } };
    int rc = build_costs(a, a->stages, a->stages, &c);
    sched *s = rc == 0 ? sched_generate("1f1b", &o.shape) : NULL;   /* the shape, to check the faults on */
    if (s) snprintf(s->name, sizeof s->name, "%s", a->name);
    if (rc == 0 && (!s || sim_costs_check_faults(&c, s, a->iters) < 0)) rc = -1;
    sched_free(s);
    if (rc == 0) rc = sim_adapt_run(&o, &c, &r);
    sim_costs_free(&c);
    if (rc < 0) return -1;
    char title[160], sub[160];
    snprintf(title, sizeof title, "%s with --adapt | P=%d | M=%d", a->name, a->stages, a->mb);
    snprintf(sub, sizeof sub, "total time %.6g | %d iterations", r.total, r.n);
    rc = write_pictures(&r.tl, title, sub, a);
    if (rc == 0 && a->json) sim_report_json_print(stdout, sim_report_adapt_json(&o, &r));
    else if (rc == 0 && a->csv) sim_report_events_csv(stdout, &r.tl);
    else if (rc == 0) sim_report_adapt_print(stdout, &o, &r);
    sim_adapt_result_free(&r);
    return rc;
}

int cli_simulate(int argc, char **argv) {
    sim_args a = { .latency = UNSET, .bandwidth = UNSET, .act_bytes = UNSET, .side_step = UNSET, .iters = 1 };
    int rc = parse_args(argc, argv, &a), status = 1, needed = 0;
    double unlimited = 0;
    sched *s = NULL;
    sim_costs c = { 0 };
    sim_result r = { 0 };
    model_run m = { 0 };
    if (rc) { status = rc > 0 ? 0 : 2; goto free_args; }
    if (model_flags_check(&a) < 0) goto fail;
    m.on = a.config != NULL;
    if (a.iters < 1) { pt_seterr("--iterations must be >= 1 (got %d)", a.iters); goto fail; }
    if (a.json && a.csv) { pt_seterr("--json and --csv exclude each other"); goto fail; }
    if (a.side_step != UNSET && !(a.side_step > 0)) { pt_seterr("--side-step must be > 0 seconds (got %g)", a.side_step); goto fail; }
    if (a.side_step != UNSET && (a.adapt || a.csv)) { pt_seterr("--side-step goes with the summary or --json, not --adapt or --csv"); goto fail; }
    if (a.adapt) {
        if (run_adapt(&a) < 0) goto fail;
        status = 0;
        goto done;
    }
    if (m.on ? model_load(&a, &m, &s, &c) < 0
             : !(s = load_schedule(&a)) || build_costs(&a, s->n_stages, s->n_ranks, &c) < 0)
        goto fail;
    if (sim_costs_check_faults(&c, s, a.iters)) goto fail;
    sim_opts o = { a.iters, a.post_validation };
    if (sim_run(s, &c, &o, &r) || write_result_pictures(s, &r, &a) || note_mem_needed(&a, &c, &r, &needed, &unlimited))
        goto fail;
    if (a.balance_memory && !m.on && sim_balance_memory(s, &c, &r) < 0) goto fail;
    sim_report_opts ro = { .post_validation = a.post_validation, .crit = a.crit, .adaptive = &adaptive_info,
                           .mem_limit = a.mem_limit, .mem_needed = needed, .unlimited_time = unlimited };
    if (a.json) {
        cJSON *obj = sim_report_json(s, &r, &c, &ro, m.on ? model_json(&m, &c) : NULL);
        side_report(&r, &a, obj);   /* checked before printing */
        if (a.balance_memory && !m.on) balance_report(s, &c, &r, &a, obj);
        sim_report_json_print(stdout, obj);
    } else if (a.csv) sim_report_events_csv(stdout, &r.tl);
    else {
        sim_report_print(stdout, s, &r, &ro);
        if (a.balance_memory && !m.on) balance_report(s, &c, &r, &a, NULL);
        if (m.on) model_print_human(&m, &c);
        if (side_report(&r, &a, NULL) < 0) goto fail;
    }
    status = 0;
    goto done;
fail:
    cli_fail("simulate");
done:
    sim_result_free(&r);
    sim_costs_free(&c);
    sched_free(s);
    model_free(&m);
free_args:
    free(a.slow_links);
    free(a.slow_stages);
    return status;
}
