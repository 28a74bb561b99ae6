/* Layout flags shared by train and grad, their defaults, and the MPI world. */
#include "cli/cli_layout.h"
#include "sched/sched.h"
#include "util/pt.h"
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "pipeline schedule (gpipe, 1f1b, ...)": the registry's names (static: the help outlives us). */
static const char *schedule_help(void) {
    static char help[320];
    snprintf(help, sizeof help, "pipeline schedule (%s; pipetrain schedule --help describes each)",
             sched_generator_list());
    return help;
}

void cli_layout_opts(cli_opt *out, run_opts *ro, const char **transport, const char **split_text) {
    const cli_opt opts[CLI_LAYOUT_N_OPTS] = {
        {"--stages", OPT_INT, &ro->P, "P, pipeline ranks (default 1: no pipeline)"},
        {"--dp", OPT_INT, &ro->D, "D, data-parallel replicas (default 1)"},
        {"--tp", OPT_INT, &ro->tp, "T, tensor-parallel ranks sharing each stage's layers (default 1; world = D x P x T)"},
        {"--schedule", OPT_STR, &ro->schedule, schedule_help()},
        {"--chunks", OPT_INT, &ro->chunks, "V, stages per rank (interleaved; default: the schedule's)"},
        {"--microbatches", OPT_INT, &ro->M, "M, microbatches per replica (default: P)"},
        {"--seq-chunks", OPT_INT, &ro->seq_chunks, "K, split each sequence into K chunks that travel the pipeline "
                                                   "as units (seq1F1B; 1f1b or zb-h1; K divides --seq; default 1)"},
        {"--schedule-file", OPT_STR, &ro->schedule_file, "CSV schedule (one row per rank) instead of --schedule"},
        {"--pipes", OPT_INT, &ro->pipes, "pipes of the --schedule-file schedule (2 for a chimera; default 1)"},
        {"--split", OPT_STR, split_text, "blocks per stage, e.g. 3,5,4,4 (default: even)"},
        {"--transport", OPT_STR, transport, "threads (default) | mpi (run under mpirun) | a registered transport"},
        {"--timeout", OPT_DOUBLE, &ro->timeout, "seconds a rank waits for a message (default 60)"},
        {"--recompute", OPT_FLAG, &ro->recompute, "drop activations after F, recompute them at B (less memory)"},
        {"--tp-overlap", OPT_FLAG, &ro->tp_overlap, "with --tp: each block's all-reduces in flight while the other half of its "
                                                    "microbatch computes (two halves of B/2 sequences)"},
        {"--sp", OPT_FLAG, &ro->tp_sp, "with --tp: sequence parallelism, each TP rank holds 1/T of the rows of the "
                                       "activations between layers and stages (B x seq divisible by T; not with --tp-overlap)"},
        {"--tp-recompute", OPT_FLAG, &ro->tp_recompute, "with --tp: blocks keep only their input and res2 from F to B and rebuild "
                                                        "the rest before B, without all-reduces (less memory)"},
        {"--zero", OPT_INT, &ro->zero, "1: shard AdamW moments and the update over the ranks that reduce together (ZeRO-1; default 0)"},
        {"--balance-memory", OPT_FLAG, &ro->balance_memory, "lend stashed activations of the heavy stages (stage 0 holds P "
                                                            "microbatches under 1f1b) to lighter ranks between F and backward "
                                                            "(one stage per rank; the same numbers; docs/longseq.md)"},
        {"--no-overlap", OPT_FLAG, &ro->no_overlap, "reduce gradients after each rank's whole schedule, not from each stage's last W"},
        {"--slow-link", OPT_STR, NULL, "I-J:SECONDS[@FROM-TO] fault injection: every message between world ranks I and J "
                                       "SECONDS late (not blocking the sender), in steps FROM..TO (repeatable); "
                                       "I-J:RATE[@FROM-TO] (30Mbit, 4MB/s): slow in bandwidth, each direction a queue"},
        {"--slow-stage", OPT_STR, NULL, "I:FACTOR[@FROM-TO] fault injection: stage I's compute takes FACTOR (>= 1) times "
                                        "as long, in steps FROM..TO (repeatable)"},
    };
    memcpy(out, opts, sizeof opts);
}

int cli_layout_split(const char *text, int **split, int *n) {
    *split = NULL;
    *n = 0;
    if (!text) return 0;
    int *counts = pt_malloc(sizeof *counts * (strlen(text) / 2 + 1));   /* non-NULL even for "" */
    for (const char *s = text; *s;) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || (*end && *end != ',') || (*end == ',' && !end[1])) {
            pt_seterr("--split '%s': expected blocks per stage like 3,5,4,4 (numbers joined by "
                      "single commas, none at either end)", text);
            goto free_counts;
        }
        if (v < 1 || v > INT_MAX) {
            pt_seterr(v < 1 ? "--split '%s': stage %d has %ld blocks; every stage needs at least 1"
                            : "--split '%s': stage %d has %ld blocks, more than any model has",
                      text, *n, v);
            goto free_counts;
        }
        counts[(*n)++] = (int)v;
        s = *end ? end + 1 : end;
    }
    *split = counts;
    return 0;
free_counts:
    free(counts);
    *n = 0;
    return -1;
}

int cli_layout_take_faults(int *argc, char **argv, run_opts *ro) {
    const char **link = pt_malloc(sizeof *link * (size_t)(*argc + 1));
    const char **stage = pt_malloc(sizeof *stage * (size_t)(*argc + 1));
    int n = 1, nl = 0, ns = 0;
    ro->slow_link = link, ro->slow_stage = stage;
    for (int i = 1; i < *argc; i++) {
        const char *s = argv[i];
        int is_link = !strncmp(s, "--slow-link", 11), is_stage = !strncmp(s, "--slow-stage", 12);
        size_t k = is_link ? 11 : 12;
        if ((!is_link && !is_stage) || (s[k] != 0 && s[k] != '=')) { argv[n++] = argv[i]; continue; }
        const char *v = s[k] == '=' ? s + k + 1 : i + 1 < *argc ? argv[++i] : NULL;
        if (!v) return pt_seterr("%s needs a value (%s)", is_link ? "--slow-link" : "--slow-stage",
                                 is_link ? "I-J:SECONDS[@FROM-TO]" : "I:FACTOR[@FROM-TO]");
        if (is_link) link[nl++] = v;
        else stage[ns++] = v;
    }
    ro->n_slow_link = nl, ro->n_slow_stage = ns;
    *argc = n;
    argv[n] = NULL;
    return 0;
}

void cli_layout_faults_free(run_opts *ro) {
    free((void *)ro->slow_link);
    free((void *)ro->slow_stage);
    ro->slow_link = ro->slow_stage = NULL;
    ro->n_slow_link = ro->n_slow_stage = 0;
}

const char *cli_layout_transport(const char *given) {
    if (given) return given;
    const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
    for (unsigned i = 0; i < sizeof vars / sizeof *vars; i++) {
        const char *v = getenv(vars[i]);
        if (v && atoi(v) > 1) return "mpi";
    }
    return NULL;
}

void cli_layout_init(run_opts *ro) {
    ro->P = ro->D = ro->M = ro->tp = CLI_UNSET;
}

int cli_layout_given(const run_opts *o, const char *transport) {
    return o->P != CLI_UNSET || o->D != CLI_UNSET || o->M != CLI_UNSET || o->tp != CLI_UNSET || o->schedule ||
           o->schedule_file || transport || o->split || o->recompute || o->zero || o->no_overlap ||
           o->seq_chunks > 1 || o->balance_memory ||
           o->tp_overlap || o->tp_recompute || o->tp_sp ||
           o->n_slow_link || o->n_slow_stage || o->dp_sync > 1;
}

/* An explicit count must be >= 1; not given: the default. */
static int layout_count(int *v, int dflt, const char *flag) {
    if (*v == CLI_UNSET) { *v = dflt; return 0; }
    if (*v < 1) return pt_seterr("%s must be >= 1 (got %d)", flag, *v);
    return 0;
}

void cli_layout_stop(const char *transport, comm *world) {
    if (world) comm_transport_stop(comm_transport_find(transport), world);
}

int cli_layout_start(run_opts *o, const char *transport, int *argc, char ***argv, comm **world) {
    *world = NULL;
    if (!cli_layout_given(o, transport)) {
        o->P = o->D = o->M = o->tp = 0;
        return 0;
    }
    if (layout_count(&o->P, 1, "--stages") < 0 || layout_count(&o->D, 1, "--dp") < 0 ||
        layout_count(&o->tp, 1, "--tp") < 0 ||
        layout_count(&o->M, o->schedule_file ? 0 : o->P, "--microbatches") < 0)
        return -1;
    if (!o->schedule && !o->schedule_file) o->schedule = "1f1b";
    const comm_transport *t = comm_transport_find(transport);
    if (!t) return -1;
    if (t->create) o->transport = transport;   /* the job makes its endpoints with it */
    return comm_transport_start(t, argc, argv, world);
}
