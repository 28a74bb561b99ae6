/* TEMPORARY, until branch tp-model lands: weak stand-ins for the model's tensor-parallel seam
 * (model/gpt.h), unsharded only, so the runtime's plumbing builds and runs at tp 1. The model's
 * own definitions replace them at link time; this file goes when they exist. */
#include "model/gpt.h"
#include "util/pt.h"
#include <string.h>

__attribute__((weak)) int gpt_init_layers_tp(gpt_model *m, const gpt_config *cfg, int first, int end,
                                             int tp_rank, int tp_size) {
    if (tp_size != 1)
        return pt_seterr("this build's model has no tensor-parallel layers (tp %d asked)", tp_size);
    if (gpt_init_layers(m, cfg, first, end) < 0) return -1;
    m->tp_rank = 0;
    m->tp_size = 1;
    m->vocab_padded = cfg->vocab_size;
    return 0;
}

__attribute__((weak)) void gpt_set_tp(gpt_model *m, const gpt_tp *tp) { m->tp = *tp; }

__attribute__((weak)) size_t gpt_shard_count(const gpt_config *cfg, const gpt_param_info *pi, int size) {
    return pi->count;
}

__attribute__((weak)) void gpt_shard_extract(const gpt_config *cfg, const gpt_param_info *pi, int rank,
                                             int size, const float *whole, float *shard) {
    memcpy(shard, whole, pi->count * sizeof(float));
}

__attribute__((weak)) void gpt_shard_place(const gpt_config *cfg, const gpt_param_info *pi, int rank,
                                           int size, const float *shard, float *whole) {
    memcpy(whole, shard, pi->count * sizeof(float));
}
