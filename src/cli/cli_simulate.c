/* pipetrain simulate: placeholder until the verb lands; says so and fails. */
#include "cli/cli.h"
#include <stdio.h>

int cli_simulate(int argc, char **argv) {
    fprintf(stderr, "pipetrain simulate: not implemented yet\n");
    return 1;
}
