/* pipetrain plan: placeholder until the verb lands; says so and fails. */
#include "cli/cli.h"
#include <stdio.h>

int cli_plan(int argc, char **argv) {
    fprintf(stderr, "pipetrain plan: not implemented yet\n");
    return 1;
}
