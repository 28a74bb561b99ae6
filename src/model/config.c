/* Validation of gpt_config: every size positive, heads divide channels. */
#include "model/config.h"
#include "util/pt.h"

int gpt_config_validate(const gpt_config *c, const char *where) {
    const char *w = where ? where : "config", *sep = ": ";
    struct { const char *key; int v; } keys[] = {
        {"n_layer", c->n_layer}, {"n_head", c->n_head}, {"n_embd", c->n_embd},
        {"vocab_size", c->vocab_size}, {"n_positions", c->n_positions},
    };
    for (unsigned i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (keys[i].v <= 0)
            return pt_seterr("%s%s%s must be a positive integer (got %d)", w, sep, keys[i].key, keys[i].v);
    if (c->n_embd % c->n_head != 0)
        return pt_seterr("%s%sn_embd (%d) is not divisible by n_head (%d)", w, sep, c->n_embd, c->n_head);
    return 0;
}
