/* pipetrain sample: placeholder until the verb lands; says so and fails. */
#include "cli/cli.h"
#include <stdio.h>

int cli_sample(int argc, char **argv) {
    fprintf(stderr, "pipetrain sample: not implemented yet\n");
    return 1;
}
