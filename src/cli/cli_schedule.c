/* pipetrain schedule: placeholder until the verb lands; says so and fails. */
#include "cli/cli.h"
#include <stdio.h>

int cli_schedule(int argc, char **argv) {
    fprintf(stderr, "pipetrain schedule: not implemented yet\n");
    return 1;
}
