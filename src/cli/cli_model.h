/* CLI-side setup shared by the verbs that need a model: config + weights (file or seeded init). */
#ifndef PT_CLI_MODEL_H
#define PT_CLI_MODEL_H
#include "model/gpt.h"
#include <stdint.h>

/* Loads the config JSON, allocates m, then loads init_path (safetensors with HF names) or, when
 * init_path is NULL, initialises GPT-2 style from seed. *prefixed (may be NULL) says whether the
 * weight file used the "transformer." prefix. -1 with the error set (file and field). */
int cli_model_setup(gpt_model *m, const char *config_path, const char *init_path, uint64_t seed,
                    int *prefixed);
/* The same for a checkpoint folder (its manifest.json's config and model.safetensors). */
int cli_model_from_checkpoint(gpt_model *m, const char *dir);

#endif
