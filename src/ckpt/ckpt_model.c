/* A whole model from a checkpoint (ckpt/ckpt_model.h). */
#include "ckpt/ckpt_model.h"
#include "ckpt/checkpoint.h"
#include <stdio.h>

#define MODEL_DIR_MAX 1200   /* a checkpoint folder's path */

int ckpt_model_load(gpt_model *m, const char *path, char *dir, size_t n) {
    char found[MODEL_DIR_MAX];
    ckpt_manifest man;
    if (ckpt_resolve(path, found, sizeof found) < 0 || ckpt_read_manifest(&man, found) < 0) return -1;
    if (gpt_init(m, &man.cfg) < 0) return -1;
    if (ckpt_load_params(m, found, &man) < 0) {
        gpt_free(m);
        return -1;
    }
    if (dir) snprintf(dir, n, "%s", found);
    return 0;
}
