/* pipetrain schedule: generates a pipeline schedule and prints it as a text grid or CSV
 * (optionally lowered, with its SEND/RECV actions). Thin: generation and printing live in sched/;
 * a generator that searches by timing (adaptive) gets the simulator, with unit costs, as judge. */
#include "cli/cli.h"
#include "sched/sched.h"
#include "sim/sim_adapt.h"
#include "util/pt.h"
#include <stdio.h>

static const char *USAGE = "--schedule NAME --stages P --microbatches M [--chunks V] [--mem-limit N] [--csv] [--lower]";

int cli_schedule(int argc, char **argv) {
    const char *name = NULL;
    int stages = 0, mb = 0, chunks = 0, mem_limit = 0;
    bool csv = false, lower = false;
    cli_opt opts[] = {
        {"--schedule", OPT_STR, &name, "generator (one of the schedules below)"},
        {"--stages", OPT_INT, &stages, "P, the number of ranks (pipeline positions)"},
        {"--microbatches", OPT_INT, &mb, "M, microbatches per iteration"},
        {"--chunks", OPT_INT, &chunks, "V, model chunks per rank (interleaved-1f1b; 0: the generator's default)"},
        {"--mem-limit", OPT_INT, &mem_limit, "greedy, adaptive: most microbatches of activations a stage may hold (0: no limit; unit costs: `pipetrain simulate` takes real ones)"},
        {"--csv", OPT_FLAG, &csv, "print CSV (one row per rank) instead of the grid"},
        {"--lower", OPT_FLAG, &lower, "add the SEND/RECV actions before printing"},
    };
    int rc = cli_parse(argc, argv, "schedule", USAGE, opts, (int)(sizeof opts / sizeof opts[0]));
    if (rc > 0) sched_print_generators(stdout);
    if (rc) return rc > 0 ? 0 : 2;
    if (!name) return pt_seterr("--schedule is required (e.g. --schedule 1f1b)"), cli_fail("schedule");
    if (stages < 1) return pt_seterr("--stages must be >= 1 (got %d)", stages), cli_fail("schedule");
    if (mb < 1) return pt_seterr("--microbatches must be >= 1 (got %d)", mb), cli_fail("schedule");
    if (chunks < 0) return pt_seterr("--chunks must be >= 0 (got %d)", chunks), cli_fail("schedule");
    if (mem_limit < 0) return pt_seterr("--mem-limit must be >= 0 (got %d)", mem_limit), cli_fail("schedule");
    sched_params p = { .ranks = stages, .microbatches = mb, .chunks = chunks, .cost_f = 1, .cost_b = 1,
                       .cost_w = 1, .mem_limit = mem_limit };
    const sched_generator *row = sched_generator_find(name);
    sim_costs unit;
    sim_costs_init(&unit, stages, 1, 1, 1);
    if (row && row->scored) p.score = sim_schedule_score, p.score_user = &unit;
    sched *s = sched_generate(name, &p);
    sim_costs_free(&unit);
    if (!s) return cli_fail("schedule");
    if (lower) {
        sched *l = sched_lower(s);
        sched_free(s);
        if (!l) return cli_fail("schedule");
        s = l;
    }
    if (csv) sched_write_csv(s, stdout);
    else sched_print(s, stdout);
    sched_free(s);
    return 0;
}
