/* pipetrain profile: times the embedding, one block and the head (F, B, W) on this machine with
 * one BLAS thread and writes the costs JSON the planner reads (docs/planner.md). Thin: the work
 * lives in plan/. */
#include "cli/cli.h"
#include "io/io.h"
#include "plan/plan.h"
#include "util/pt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *USAGE = "--config C.json --batch B[,B2,...] --seq T [--out costs.json] [--repeats N]";

/* "1,2,4" into sizes[]; -1 naming the flag on a malformed list. */
static int parse_sizes(const char *list, int *sizes, int *n) {
    const char *s = list;
    *n = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || (*end && *end != ',') || v < 1 || v > 1 << 20)
            return pt_seterr("--batch '%s': expected microbatch sizes >= 1 like 1,2,4", list);
        if (*n == PLAN_MAX_BATCHES) return pt_seterr("--batch: at most %d sizes", PLAN_MAX_BATCHES);
        sizes[(*n)++] = (int)v;
        s = *end ? end + 1 : end;
    }
    if (*n == 0) return pt_seterr("--batch needs at least one microbatch size");
    return 0;
}

static void print_table(const plan_costs *c) {
    static const char *kind[PLAN_N_KINDS] = { "embedding", "block", "head" };
    printf("profile  seq %d  repeats %d  (median seconds per microbatch, one BLAS thread)\n", c->T, c->repeats);
    printf("  batch  layer            F            B            W\n");
    for (int i = 0; i < c->n_batch; i++)
        for (int k = 0; k < PLAN_N_KINDS; k++)
            printf("  %5d  %-9s %12.6g %12.6g %12.6g\n", c->batch[i], kind[k], c->sec[i][k][PLAN_F],
                   c->sec[i][k][PLAN_B], c->sec[i][k][PLAN_W]);
}

int cli_profile(int argc, char **argv) {
    const char *config = NULL, *batch = NULL, *out = NULL;
    int T = 0, repeats = 5;
    cli_opt opts[] = {
        {"--config", OPT_STR, &config, "model config JSON (Hugging Face GPT-2 keys)"},
        {"--batch", OPT_STR, &batch, "microbatch size(s) to measure, e.g. 4 or 1,2,4"},
        {"--seq", OPT_INT, &T, "T, sequence length"},
        {"--out", OPT_STR, &out, "write the costs JSON here (default: print it)"},
        {"--repeats", OPT_INT, &repeats, "timed runs per median after one warm-up (default 5)"},
    };
    int rc = cli_parse(argc, argv, "profile", USAGE, opts, (int)(sizeof opts / sizeof opts[0]));
    if (rc) return rc > 0 ? 0 : 2;
    if (!config) return pt_seterr("--config is required"), cli_fail("profile");
    if (!batch) return pt_seterr("--batch is required (microbatch size, e.g. --batch 4)"), cli_fail("profile");
    if (T < 1) return pt_seterr("--seq is required and must be >= 1 (got %d)", T), cli_fail("profile");
    int sizes[PLAN_MAX_BATCHES], n;
    gpt_config cfg;
    plan_costs c;
    if (parse_sizes(batch, sizes, &n) < 0 || config_load_json(&cfg, config) < 0 ||
        plan_profile_run(&c, &cfg, sizes, n, T, repeats) < 0)
        return cli_fail("profile");
    if (!out) {
        char *text = plan_costs_to_json(&c);
        if (!text) return cli_fail("profile");
        printf("%s\n", text);
        free(text);
        return 0;
    }
    if (plan_costs_save(&c, out) < 0) return cli_fail("profile");
    print_table(&c);
    printf("wrote %s\n", out);
    return 0;
}
