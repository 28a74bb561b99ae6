/* Model setup for the CLI verbs: from a config and optional weights, or from a checkpoint. */
#include "cli/cli_model.h"
#include "model/gpt_io.h"
#include "ckpt/checkpoint.h"
#include "util/pt.h"
#include <stdio.h>

int cli_model_from_checkpoint(gpt_model *m, const char *dir) {
    ckpt_manifest man;
    if (ckpt_read_manifest(&man, dir) < 0) return -1;
    if (gpt_init(m, &man.cfg) < 0) return -1;
    if (ckpt_load_params(m, dir, &man) < 0) {
        gpt_free(m);
        return -1;
    }
    return 0;
}
