/* Checkpoints: a folder holding model.safetensors (parameters, Hugging Face GPT-2 names, so the
 * file alone loads anywhere), optim.safetensors (AdamW moments "m/<name>", "v/<name>"), and
 * manifest.json (config, step, data position, RNG seed, layout, file sizes and FNV-1a checksums).
 * The folder is written under "<dir>.tmp.<pid>" and renamed only when complete, so a crash
 * mid-save never leaves a half checkpoint under the real name and never touches older ones.
 * Single-process layout for now: one stage owning every layer. */
#ifndef PT_TRAIN_CHECKPOINT_H
#define PT_TRAIN_CHECKPOINT_H
#include <stdint.h>
#include "model/gpt.h"
#include "train/optim.h"

typedef struct {
    gpt_config cfg;
    long step;              /* optimizer updates done; training resumes at step + 1 */
    int adam_t;             /* AdamW's bias-correction step count */
    int batch, seq;         /* B, T */
    uint64_t shuffle_seed;  /* 0: sequential batches; data position = step (see io/data.h) */
    uint64_t init_seed;
    char data_path[1024];   /* training data, as given on the command line */
} ckpt_manifest;

/* Writes the checkpoint folder dir (must not exist yet unless overwrite is set; replaced
 * atomically then). opt may be NULL (no optimizer state saved). Returns 0 or -1 naming the path. */
int ckpt_save(const char *dir, const gpt_model *m, const adamw_state *opt, const ckpt_manifest *man,
              int overwrite);
/* Reads and checks dir/manifest.json and verifies the size and checksum of every file it lists.
 * Errors name the file and field ("run/ckpt-10/model.safetensors: checksum mismatch (file
 * changed or corrupt)"). */
int ckpt_read_manifest(ckpt_manifest *man, const char *dir);
/* Loads parameters from dir/model.safetensors into m (allocated with man->cfg). */
int ckpt_load_params(gpt_model *m, const char *dir, const ckpt_manifest *man);
/* Loads AdamW moments into s (allocated for m->num_params). -1 if the checkpoint has none. */
int ckpt_load_optim(adamw_state *s, const gpt_model *m, const char *dir);

#endif
