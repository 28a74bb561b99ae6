/* pipetrain train: placeholder until the verb lands; says so and fails. */
#include "cli/cli.h"
#include <stdio.h>

int cli_train(int argc, char **argv) {
    fprintf(stderr, "pipetrain train: not implemented yet\n");
    return 1;
}
