/* Validation of gpt_config: every size positive, heads divide channels, inserted layers in places
 * that exist and of kind ids past the built-ins. */
#include "model/config.h"
#include "model/gpt.h"   /* GPT_N_LAYER_KINDS, GPT_MAX_KINDS (no call: gpt_layers.c calls back) */
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
    if (c->n_insert < 0 || c->n_insert > GPT_MAX_INSERTS)
        return pt_seterr("%s%s%d inserted layers: between 0 and %d", w, sep, c->n_insert, GPT_MAX_INSERTS);
    for (int i = 0; i < c->n_insert; i++)
        if (c->insert_after[i] < -1 || c->insert_after[i] >= c->n_layer ||
            (i > 0 && c->insert_after[i] < c->insert_after[i - 1]))
            return pt_seterr("%s%sinserted layer %d after block %d: blocks are 0..%d (-1: after the "
                             "embedding), in non-decreasing order", w, sep, i, c->insert_after[i],
                             c->n_layer - 1);
    for (int i = 0; i < c->n_insert; i++)   /* a registered kind: gpt_kind_ops asserts when used */
        if (c->insert_kind[i] < GPT_N_LAYER_KINDS || c->insert_kind[i] >= GPT_MAX_KINDS)
            return pt_seterr("%s%sinserted layer %d is of kind %d: not a registered kind (an id "
                             "gpt_kind_register returned, %d..%d)", w, sep, i, c->insert_kind[i],
                             GPT_N_LAYER_KINDS, GPT_MAX_KINDS - 1);
    return 0;
}
