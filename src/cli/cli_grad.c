/* pipetrain grad: placeholder until the verb lands; says so and fails. */
#include "cli/cli.h"
#include <stdio.h>

int cli_grad(int argc, char **argv) {
    fprintf(stderr, "pipetrain grad: not implemented yet\n");
    return 1;
}
