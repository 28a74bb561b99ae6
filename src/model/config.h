/* GPT-2 model configuration, with Hugging Face GPT2Config key names: the struct, its validation,
 * and its JSON form (model/config_json.c). */
#ifndef PT_MODEL_CONFIG_H
#define PT_MODEL_CONFIG_H
#include <cjson/cJSON.h>

#define GPT_MAX_INSERTS 8

typedef struct {
    int n_layer;      /* L: transformer blocks */
    int n_head;       /* NH: attention heads */
    int n_embd;       /* C: channels; divisible by n_head */
    int vocab_size;   /* V */
    int n_positions;  /* maxT: longest sequence the position embedding covers */
    /* Extra layers between the blocks, of kinds registered at run time (gpt_kind_register in
     * model/gpt.h): layer insert_kind[i] right after block insert_after[i] (-1: right after the
     * embedding), insert_after non-decreasing. Not in the JSON form: 0 for a config read from a
     * file, so a GPT-2 config is exactly the model it was. */
    int n_insert;
    int insert_after[GPT_MAX_INSERTS], insert_kind[GPT_MAX_INSERTS];
} gpt_config;

/* Checks sizes are positive, n_embd % n_head == 0, and each inserted layer's place and kind (an
 * id past the built-ins, below GPT_MAX_KINDS). Returns 0, or -1 with an error naming the
 * key (e.g. "n_embd (10) is not divisible by n_head (3)"). `where` prefixes the message (a file
 * name), may be NULL. */
int gpt_config_validate(const gpt_config *c, const char *where);

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

#endif
