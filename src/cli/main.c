/* pipetrain entry point: dispatches `pipetrain <verb>` to cli_<verb>(). */
#include "cli/cli.h"
#include <stdio.h>
#include <string.h>

static const struct { const char *name; int (*fn)(int, char **); const char *what; } verbs[] = {
    {"train",    cli_train,    "train a GPT on a text or token file"},
    {"grad",     cli_grad,     "loss and every parameter gradient of one batch, as safetensors"},
    {"sample",   cli_sample,   "generate text from a checkpoint"},
    {"eval",     cli_eval,     "held-out loss of a checkpoint over a token file (train --eval-data's)"},
    {"schedule", cli_schedule, "print a pipeline schedule (text grid or CSV)"},
    {"simulate", cli_simulate, "simulate a schedule with a cost model; trace and SVG timeline"},
    {"profile",  cli_profile,  "measure per-layer F/B/W times and memory on this machine"},
    {"plan",     cli_plan,     "choose the layout (dp x pipeline x microbatches x schedule x split)"},
    {"tokenize", cli_tokenize, "text files to an llm.c token file with GPT-2's tokenizer (--decode: back)"},
    {"launch",   cli_launch,   "run a training job under a supervisor that restarts it from snapshots when a rank dies"},
    {"report",   cli_report,   "one HTML page of one or several training runs (curves, events, timeline)"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: pipetrain <verb> [flags]   (pipetrain <verb> --help for its flags)\n");
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        fprintf(f, "  %-10s %s\n", verbs[i].name, verbs[i].what);
}

int main(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        if (!strcmp(argv[1], verbs[i].name)) return verbs[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "pipetrain: unknown verb '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
