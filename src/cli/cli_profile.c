/* pipetrain profile: placeholder until the verb lands; says so and fails. */
#include "cli/cli.h"
#include <stdio.h>

int cli_profile(int argc, char **argv) {
    fprintf(stderr, "pipetrain profile: not implemented yet\n");
    return 1;
}
