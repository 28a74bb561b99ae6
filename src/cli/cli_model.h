/* CLI-side setup shared by the verbs that need a model from a checkpoint (from a config and
 * weights: gpt_model_load in model/gpt_io.h). */
#ifndef PT_CLI_MODEL_H
#define PT_CLI_MODEL_H
#include "model/gpt.h"
#include <stdint.h>

/* A model from a checkpoint folder (its manifest.json's config and parameter files). -1 with the
 * error set; m is then freed. */
int cli_model_from_checkpoint(gpt_model *m, const char *dir);

#endif
