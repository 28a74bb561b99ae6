/* pipetrain plan: reads the model config, the cluster (and optionally profiled costs), searches
 * layouts with plan_search and prints the best N (human or --json); --out writes the best as a
 * plan file. Thin: the work lives in plan/. */
#include "cli/cli.h"
#include "io/io.h"
#include "plan/plan.h"
#include "sched/sched.h"
#include "util/pt.h"
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *USAGE =
    "--config C.json --cluster K.json --global-batch G [--seq T] [--costs costs.json] [--top N]\n"
    "       [--out plan.json] [--schedules a,b,...] [--no-recompute] [--max-sims N] [--tp N]\n"
    "       [--tp-across-nodes] [--no-tp-overlap] [--no-tp-recompute] [--zero 0|1] [--async] [--async-window W] [--json]";

#define GIB (1024.0 * 1024.0 * 1024.0)
#define SHOW_STAGES 12   /* stages listed per layout in the human output */

typedef struct {
    const char *config, *cluster, *costs, *out, *schedules;
    long global_batch;
    int T, top, max_sims, tp, zero, seq_chunks, async_window;
    bool no_recompute, json, tp_across_nodes, no_tp_overlap, no_tp_recompute, no_sp, balance_memory, async;
} plan_args;

/* Device of pipeline 0's rank r, TP rank t. */
static int dev0(const plan_layout *p, int r, int t) {
    int i = r * p->tp + t;
    return p->devices ? p->devices[i] : i;
}

/* One rank's TP group: "5", or "8-15" when consecutive, else "8,10,...". */
static void print_group(const plan_layout *p, int r) {
    bool run = true;
    for (int t = 1; t < p->tp; t++) run = run && dev0(p, r, t) == dev0(p, r, 0) + t;
    if (p->tp == 1) printf(" %d", dev0(p, r, 0));
    else if (run) printf(" %d-%d", dev0(p, r, 0), dev0(p, r, p->tp - 1));
    else printf(" %d,%d,...", dev0(p, r, 0), dev0(p, r, 1));
}

/* "pipeline 0: devices 0-7 (gpu x8)": the first replica's devices (TP groups) and their names, in
 * rank order. */
static void print_pipeline0(const plan_layout *p, const plan_cluster *k) {
    printf("    pipeline 0 devices%s:", p->tp > 1 ? " (a TP group per rank)" : "");
    for (int r = 0; r < p->P && r < SHOW_STAGES; r++) print_group(p, r);
    printf("%s (", p->P > SHOW_STAGES ? " ..." : "");
    for (int r = 0, run = 0; r < p->P; r++) {   /* runs of one device name */
        const char *nm = k->dev[dev0(p, r, 0)].name;
        run++;
        if (r + 1 == p->P || strcmp(nm, k->dev[dev0(p, r + 1, 0)].name)) {
            printf("%s%s x%d", r + 1 - run ? ", " : "", nm, run);
            run = 0;
        }
    }
    printf(")\n");
}

/* "yes" (whole stage, --recompute), "comm-free" (--tp-recompute) or "no". */
static const char *recompute_word(const plan_layout *p) {
    return p->recompute ? "yes" : p->tp_recompute ? "comm-free" : "no";
}

/* True for a layout whose schedule is asynchronous (the registry's row says). */
static bool layout_async(const plan_layout *p) {
    const sched_generator *g = sched_generator_find(p->schedule);
    return g && g->async;
}

static void print_layout(int i, const plan_layout *p, const plan_cluster *cl) {
    char split[1024];
    printf("#%d  step %.6g s  %.6g tokens/s  bubble %.1f%%\n", i + 1, p->step_time, p->tokens_per_s, 100 * p->bubble);
    printf("    tp %d x dp %d x stages %d  %s%s%.0d  microbatches %d x %d%s%.0d  recompute %s%s%s%s  zero %d  placement %s\n",
           p->tp, p->D, p->P, p->schedule, p->chunks > 1 ? " v=" : "", p->chunks > 1 ? p->chunks : 0, p->M,
           p->mb_size, p->seq_chunks > 1 ? "  seq chunks " : "", p->seq_chunks > 1 ? p->seq_chunks : 0,
           recompute_word(p), p->tp_overlap ? "  tp-overlap" : "", p->sp ? "  sp" : "",
           p->balance_memory ? "  balance-memory" : "", p->zero, p->placement);
    printf("    split %s\n    peak memory GiB per chunk:", plan_layout_split_str(p, split, sizeof split));
    for (int k = 0; k < p->K && k < SHOW_STAGES; k++) printf(" %.3g", p->stage_mem[k] / GIB);
    printf("%s\n", p->K > SHOW_STAGES ? " ..." : "");
    print_pipeline0(p, cl);
    if (layout_async(p))
        printf("    asynchronous: no flush, %s (it changes the math, not only the speed: a step is not a synchronous "
               "step; the memory above is train --async-window %d's: %d x %d microbatches' stashed weights and "
               "boundary buffers; docs/async.md)\n",
               p->schedule[0] == '2' ? "every update on a gradient one update old (two weight versions)"
               : "an update per microbatch on its stage's stashed weights (train runs --async-fix nesterov by default)",
               p->async_window, p->async_window, p->M);
}

static void print_json(const plan_result *r) {
    cJSON *o = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(o, "plans");
    cJSON_AddNumberToObject(o, "considered", (double)r->considered);
    cJSON_AddNumberToObject(o, "infeasible", (double)r->infeasible);
    cJSON_AddNumberToObject(o, "simulated", (double)r->candidates_simulated);
    cJSON_AddNumberToObject(o, "simulator_runs", (double)r->simulated);
    for (int i = 0; i < r->n_best; i++) {
        const plan_layout *p = &r->best[i];
        char split[1024];
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "step_time", p->step_time);
        cJSON_AddNumberToObject(x, "tokens_per_s", p->tokens_per_s);
        cJSON_AddNumberToObject(x, "bubble", p->bubble);
        cJSON_AddNumberToObject(x, "tp", p->tp);
        cJSON_AddNumberToObject(x, "dp", p->D);
        cJSON_AddNumberToObject(x, "stages", p->P);
        cJSON_AddNumberToObject(x, "microbatches", p->M);
        cJSON_AddNumberToObject(x, "microbatch_size", p->mb_size);
        cJSON_AddStringToObject(x, "schedule", p->schedule);
        if (layout_async(p)) cJSON_AddTrueToObject(x, "asynchronous");
        if (layout_async(p)) cJSON_AddNumberToObject(x, "async_window", p->async_window);
        cJSON_AddNumberToObject(x, "chunks", p->chunks);
        cJSON_AddBoolToObject(x, "recompute", p->recompute);
        cJSON_AddBoolToObject(x, "tp_overlap", p->tp_overlap);
        cJSON_AddBoolToObject(x, "tp_recompute", p->tp_recompute);
        cJSON_AddBoolToObject(x, "sp", p->sp);
        if (p->seq_chunks > 1) cJSON_AddNumberToObject(x, "seq_chunks", p->seq_chunks);
        if (p->balance_memory) cJSON_AddTrueToObject(x, "balance_memory");
        cJSON_AddNumberToObject(x, "zero", p->zero);
        cJSON_AddStringToObject(x, "placement", p->placement);
        cJSON_AddStringToObject(x, "split", plan_layout_split_str(p, split, sizeof split));
        cJSON *mem = cJSON_AddArrayToObject(x, "stage_memory");
        for (int k = 0; k < p->K; k++) cJSON_AddItemToArray(mem, cJSON_CreateNumber(p->stage_mem[k]));
        cJSON_AddItemToArray(arr, x);
    }
    char *text = cJSON_PrintUnformatted(o);
    printf("%s\n", text);
    free(text);
    cJSON_Delete(o);
}

/* "a,b,c" into a NULL-terminated list of pointers into buf (which it edits). */
static const char **split_names(char *buf) {
    int n = 1;
    for (char *c = buf; *c; c++) n += *c == ',';
    const char **names = pt_calloc((size_t)n + 1, sizeof *names);
    n = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) names[n++] = t;
    return names;
}

static int parse_args(int argc, char **argv, plan_args *a) {
    cli_opt opts[] = {
        {"--config", OPT_STR, &a->config, "model config JSON (Hugging Face GPT-2 keys)"},
        {"--cluster", OPT_STR, &a->cluster, "cluster JSON (docs/planner.md; examples/cluster-*.json)"},
        {"--global-batch", OPT_LONG, &a->global_batch, "G, sequences per optimizer step"},
        {"--seq", OPT_INT, &a->T, "T, sequence length (default n_positions)"},
        {"--costs", OPT_STR, &a->costs, "profiled costs from pipetrain profile (override the analytic model)"},
        {"--top", OPT_INT, &a->top, "N best layouts to print (default 5)"},
        {"--out", OPT_STR, &a->out, "write the best layout as a plan JSON"},
        {"--schedules", OPT_STR, &a->schedules, "only these schedules (comma list; default all the planner knows)"},
        {"--no-recompute", OPT_FLAG, &a->no_recompute, "do not consider activation recomputation"},
        {"--max-sims", OPT_INT, &a->max_sims, "simulate at most N candidates (default 400)"},
        {"--tp", OPT_INT, &a->tp, "only this tensor-parallel degree (default: every divisor of n_head whose "
                                  "groups fit in a node)"},
        {"--tp-across-nodes", OPT_FLAG, &a->tp_across_nodes, "also search TP groups that span nodes"},
        {"--no-tp-overlap", OPT_FLAG, &a->no_tp_overlap, "do not consider --tp-overlap (all-reduces in ping-pong)"},
        {"--no-tp-recompute", OPT_FLAG, &a->no_tp_recompute, "do not consider --tp-recompute (communication-free "
                                                             "recomputation)"},
        {"--no-sp", OPT_FLAG, &a->no_sp, "do not consider --sp (sequence parallelism)"},
        {"--balance-memory", OPT_FLAG, &a->balance_memory, "price memory with train --balance-memory where a layout "
                                                           "allows it (one stage per rank, no recomputation)"},
        {"--zero", OPT_INT, &a->zero, "1: AdamW moments split over the data-parallel replicas (train --zero 1)"},
        {"--seq-chunks", OPT_INT, &a->seq_chunks, "K: every layout runs each sequence as K chunks (train --seq-chunks; "
                                                  "1f1b and zb-h1, priced per chunk)"},
        {"--async", OPT_FLAG, &a->async, "also search the asynchronous schedules pipedream and 2bw (no flush: they "
                                          "change the math; stashed weight copies priced; docs/async.md)"},
        {"--async-window", OPT_INT, &a->async_window, "W: price the asynchronous layouts' memory at train "
                                                      "--async-window W (default 4, train's: W x M stashes and "
                                                      "boundary buffers per rank)"},
        {"--json", OPT_FLAG, &a->json, "print one JSON object instead of the summary"},
    };
    return cli_parse(argc, argv, "plan", USAGE, opts, (int)(sizeof opts / sizeof opts[0]));
}

static int run_plan(const plan_args *a, const gpt_config *cfg, const plan_cluster *k, const plan_costs *costs) {
    char *names_buf = a->schedules ? pt_strdup(a->schedules) : NULL;
    const char **names = names_buf ? split_names(names_buf) : NULL;
    plan_opts o = { .global_batch = a->global_batch, .T = a->T ? a->T : cfg->n_positions, .top = a->top,
                    .costs = costs, .schedules = names, .max_sims = a->max_sims, .no_recompute = a->no_recompute,
                    .tp = a->tp, .tp_across_nodes = a->tp_across_nodes, .zero = a->zero,
                    .no_tp_overlap = a->no_tp_overlap, .no_tp_recompute = a->no_tp_recompute,
                    .no_sp = a->no_sp, .seq_chunks = a->seq_chunks, .balance_memory = a->balance_memory,
                    .async = a->async, .async_window = a->async_window };
    plan_result r;
    int rc = plan_search(cfg, k, &o, &r);
    free(names); free(names_buf);
    if (rc < 0) return cli_fail("plan");
    if (r.n_best == 0) {
        fprintf(stderr, "pipetrain plan: %s\n", r.advice);
        plan_result_free(&r);
        return 1;
    }
    if (a->json) print_json(&r);
    else {
        printf("plan: %d devices, global batch %ld x seq %d: %ld layouts considered, %ld do not fit, %ld simulated "
               "(%ld simulator runs with local search)\n", k->n_devices, a->global_batch, o.T, r.considered, r.infeasible,
               r.candidates_simulated, r.simulated);
        for (int i = 0; i < r.n_best; i++) print_layout(i, &r.best[i], k);
    }
    rc = a->out && plan_write(&r.best[0], a->out) < 0 ? cli_fail("plan") : 0;
    if (rc == 0 && a->out && !a->json) printf("wrote %s\n", a->out);
    plan_result_free(&r);
    return rc;
}

int cli_plan(int argc, char **argv) {
    plan_args a = { .top = 5 };
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc > 0 ? 0 : 2;
    if (!a.config) return pt_seterr("--config is required"), cli_fail("plan");
    if (!a.cluster) return pt_seterr("--cluster is required (see examples/cluster-*.json)"), cli_fail("plan");
    if (a.global_batch < 1) return pt_seterr("--global-batch is required and must be >= 1 (got %ld)", a.global_batch), cli_fail("plan");
    if (a.tp < 0) return pt_seterr("--tp must be >= 1 (got %d)", a.tp), cli_fail("plan");
    if (a.tp && a.tp_across_nodes) return pt_seterr("--tp-across-nodes widens the search of tp; with --tp N drop it"), cli_fail("plan");
    gpt_config cfg;
    plan_cluster k;
    plan_costs costs;
    if (config_load_json(&cfg, a.config) < 0) return cli_fail("plan");
    if (a.costs && plan_costs_load(&costs, a.costs) < 0) return cli_fail("plan");
    if (plan_cluster_load(&k, a.cluster) < 0) return cli_fail("plan");
    rc = run_plan(&a, &cfg, &k, a.costs ? &costs : NULL);
    plan_cluster_free(&k);
    return rc;
}
