/* Small file helpers of the io module: GPT-2 configs as JSON (Hugging Face GPT2Config keys) and
 * atomic file writing (temporary name, fsync, rename). Safetensors and token data have their own
 * headers (io/safetensors.h, io/data.h); traces are not here. */
#ifndef PT_IO_IO_H
#define PT_IO_IO_H
#include <stdio.h>
#include <cjson/cJSON.h>
#include "model/config.h"

/* Reads a Hugging Face GPT-2 config: n_layer, n_head, n_embd, vocab_size, n_positions (n_ctx is
 * accepted when n_positions is missing). Unknown keys are ignored, except n_inner, which must be
 * null or 4 * n_embd (the only MLP width the model has). Values must be JSON integers (12 or 12.0;
 * not 2.5, "12" or true). Errors name the file and key: "gpt.json: missing key \"n_head\"",
 * "gpt.json: n_embd (10) is not divisible by n_head (3)", "gpt.json: line 3: parse error near
 * ...". On failure *c is unchanged. */
int config_load_json(gpt_config *c, const char *path);
/* The same from a parsed JSON object (a checkpoint manifest may embed the config); `where` names
 * the source in errors (a file name, "manifest.json: config"). */
int config_from_cjson(gpt_config *c, const cJSON *obj, const char *where);
/* A new cJSON object with the config's keys (n_ctx mirrors n_positions, model_type "gpt2");
 * the caller owns it. NULL with an error if the config is invalid. */
cJSON *config_to_cjson(const gpt_config *c);
/* Validates c and writes it as pretty JSON, atomically (see io_atomic_open). */
int config_save_json(const gpt_config *c, const char *path);

/* Writes a JSON value as pretty text plus a newline, atomically (see io_atomic_open). -1 with an
 * error naming the path. */
int io_write_json(const cJSON *value, const char *path);
/* Atomic file writing: write through `f`, then commit. Until commit the real path is untouched;
 * after a crash at most a stale "<path>.tmp.<pid>" is left. Not for two threads of one process
 * writing the same path at once (they would share the temporary name). */
typedef struct {
    FILE *f;          /* write here */
    char *path;       /* final name */
    char *tmp;        /* "<path>.tmp.<pid>" */
} io_atomic_file;

/* Creates the temporary file. -1 with an error naming the path on failure (a is then empty). */
int io_atomic_open(io_atomic_file *a, const char *path);
/* Flushes, fsyncs, closes, renames over the real path and fsyncs its folder. Any write error
 * seen since open (ferror) fails here. On failure the temporary is removed and -1 returned
 * with an error naming the path. Always releases a. */
int io_atomic_commit(io_atomic_file *a);
/* Closes and removes the temporary without touching the real path. Releases a; empty a is fine. */
void io_atomic_abort(io_atomic_file *a);

/* For parse errors: the 1-based line of byte `at` in text[0..len), and in `near` (cap bytes) a
 * printable excerpt of that line around it (a few characters before, some after). */
int io_text_position(const char *text, size_t len, size_t at, char *near, size_t cap);

#endif
