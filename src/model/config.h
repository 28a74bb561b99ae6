/* GPT-2 model configuration, with Hugging Face GPT2Config key names. Parsing from JSON lives in
 * io/config_json.c; this header is only the struct and its validation. */
#ifndef PT_MODEL_CONFIG_H
#define PT_MODEL_CONFIG_H

typedef struct {
    int n_layer;      /* L: transformer blocks */
    int n_head;       /* NH: attention heads */
    int n_embd;       /* C: channels; divisible by n_head */
    int vocab_size;   /* V */
    int n_positions;  /* maxT: longest sequence the position embedding covers */
} gpt_config;

/* Checks sizes are positive and n_embd % n_head == 0. Returns 0, or -1 with an error naming the
 * key (e.g. "n_embd (10) is not divisible by n_head (3)"). `where` prefixes the message (a file
 * name), may be NULL. */
int gpt_config_validate(const gpt_config *c, const char *where);

#endif
