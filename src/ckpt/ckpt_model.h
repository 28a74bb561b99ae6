/* A whole model from a checkpoint for the one-process verbs (sample, eval): the folder resolved
 * once, by ckpt_resolve (a run folder's newest complete checkpoint), then its config and
 * parameters. Not for training's resume (train/trainer_model.c reads each rank's share). */
#ifndef PT_CKPT_MODEL_H
#define PT_CKPT_MODEL_H
#include "model/gpt.h"
#include <stddef.h>

/* path: a checkpoint folder, or a run folder holding "ckpt-<step>" ones (the newest complete
 * one: an incomplete folder, no manifest.json or a crashed save's temporary name, is never
 * picked). Allocates m with the manifest's config and loads every parameter; dir (n bytes, may
 * be NULL) gets the folder used. -1 naming the path or file; m is then not allocated. */
int ckpt_model_load(gpt_model *m, const char *path, char *dir, size_t n);

#endif
