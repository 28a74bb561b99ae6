/* Model setup for the CLI verbs: from a config and optional weights, or from a checkpoint. */
#include "cli/cli_model.h"
#include "io/io.h"
#include "model/gpt_io.h"
#include "ckpt/checkpoint.h"
#include "util/pt.h"
#include <stdio.h>

int cli_model_setup(gpt_model *m, const char *config_path, const char *init_path, uint64_t seed,
                    int *prefixed) {
    gpt_config cfg;
    if (!config_path) return pt_seterr("--config is required (a JSON file with n_layer, n_head, "
                                       "n_embd, vocab_size, n_positions)");
    if (config_load_json(&cfg, config_path) < 0) return -1;
    if (gpt_init(m, &cfg) < 0) return -1;
    if (prefixed) *prefixed = 0;
    if (!init_path) {
        gpt_init_random(m, seed);
        return 0;
    }
    if (gpt_load_safetensors(m, init_path, prefixed) < 0) {
        gpt_free(m);
        return -1;
    }
    return 0;
}

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
