/* GPT-2 parameters <-> safetensors files with Hugging Face GPT2LMHeadModel names, so real GPT-2
 * checkpoints load and our files load in Hugging Face. Names are read with or without the
 * "transformer." prefix; "lm_head.weight" must equal wte (tied) and is otherwise ignored; the
 * causal-mask buffers "h.N.attn.bias" / "h.N.attn.masked_bias" are ignored. */
#ifndef PT_MODEL_GPT_IO_H
#define PT_MODEL_GPT_IO_H
#include "io/safetensors.h"
#include "model/gpt.h"

/* Loads every parameter of m from the open file (converting F16/BF16/F64 to float), checking
 * each shape against m's config (a partial model: those of its layers; the others must still be
 * GPT-2 names; a TP shard model: its shards of the whole tensors, one whole tensor in memory at
 * a time). A missing tensor, a wrong shape, an unknown tensor name or an
 * untied lm_head: -1 with an error naming the file and tensor. *prefixed (may be NULL) is set to
 * 1 when the file used the "transformer." prefix. */
int gpt_load_st(gpt_model *m, const st_file *f, int *prefixed);
/* The same, opening path first. */
int gpt_load_safetensors(gpt_model *m, const char *path, int *prefixed);

/* A model from files: the config JSON (required: the error says so), then init_path's weights or,
 * when init_path is NULL, GPT-2 initialisation from seed. *prefixed (may be NULL) as above (0 for
 * the seeded init). -1 with the error naming the file and field; m is then freed. */
int gpt_model_load(gpt_model *m, const char *config_path, const char *init_path, uint64_t seed,
                   int *prefixed);

/* Adds one tensor per parameter (of the layers m holds) to w, with data taken from buf (a flat
 * buffer laid out like m->params: the params themselves, the grads, an AdamW moment), named
 * prefix + HF name ("transformer.h.0.ln_1.weight" with prefix "transformer."). buf must outlive
 * st_write. A TP shard model (tp_size > 1) holds no whole tensor: -1. */
int gpt_add_to_writer(const gpt_model *m, st_writer *w, const float *buf, const char *prefix);
/* Writes m->params to path (names without prefix, metadata format=pt), atomically. */
int gpt_save_safetensors(const gpt_model *m, const char *path);

#endif
