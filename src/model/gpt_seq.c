/* The layer sequence of a config: which kind each layer is, where the blocks are, and which
 * layers a pipeline chunk holds. The one place that knows the order "embedding, blocks (each
 * followed by its inserted layers), head"; every other module asks here (model/gpt.h). Not
 * here: what a kind computes (gpt_layers.c), the parameter layout (gpt.c). */
#include "model/gpt.h"
#include "util/pt.h"
#include <assert.h>
#include <stdlib.h>

int gpt_config_num_layers(const gpt_config *cfg) { return cfg->n_layer + 2 + cfg->n_insert; }

int gpt_config_head_layer(const gpt_config *cfg) { return gpt_config_num_layers(cfg) - 1; }

/* Layer `layer`'s kind, and in *block the block it is or follows (the embedding and the layers
 * inserted before block 0: -1; the head: the last block). A walk of the sequence, or its closed
 * form when nothing is inserted. */
static int walk(const gpt_config *cfg, int layer, int *block) {
    int L = cfg->n_layer;
    assert(layer >= 0 && layer < gpt_config_num_layers(cfg) && "layer outside the model");
    if (layer == 0) { *block = -1; return GPT_LAYER_EMBED; }
    if (layer == gpt_config_head_layer(cfg)) { *block = L - 1; return GPT_LAYER_HEAD; }
    if (cfg->n_insert == 0) { *block = layer - 1; return GPT_LAYER_BLOCK; }
    int l = 1, ins = 0;
    for (int b = -1; b < L; b++) {
        if (b >= 0 && l++ == layer) { *block = b; return GPT_LAYER_BLOCK; }
        for (; ins < cfg->n_insert && cfg->insert_after[ins] == b; ins++)
            if (l++ == layer) { *block = b; return cfg->insert_kind[ins]; }
    }
    assert(0 && "walk: the sequence is shorter than gpt_config_num_layers");
    return -1;
}

gpt_layer_kind gpt_config_layer_kind(const gpt_config *cfg, int layer) {
    int b;
    return (gpt_layer_kind)walk(cfg, layer, &b);
}

int gpt_config_block_of(const gpt_config *cfg, int layer) {
    int b, kind = walk(cfg, layer, &b);
    return kind == GPT_LAYER_BLOCK ? b : -1;
}

int gpt_config_layer_item(const gpt_config *cfg, int layer) {
    int b;
    walk(cfg, layer, &b);
    return b < 0 ? 0 : b;
}

int gpt_config_block_layer(const gpt_config *cfg, int b) {
    assert(b >= 0 && b < cfg->n_layer && "gpt_config_block_layer: no such block");
    int ins = 0;
    while (ins < cfg->n_insert && cfg->insert_after[ins] < b) ins++;
    return 1 + b + ins;
}

int gpt_config_blocks_before(const gpt_config *cfg, int layer) {
    if (cfg->n_insert == 0) return layer <= 0 ? 0 : layer - 1 < cfg->n_layer ? layer - 1 : cfg->n_layer;
    int n = 0;
    for (int b = 0; b < cfg->n_layer && gpt_config_block_layer(cfg, b) < layer; b++) n++;
    return n;
}

void gpt_config_even_split(const gpt_config *cfg, int K, int *blocks) {
    int L = cfg->n_layer;
    for (int c = 0; c < K; c++) blocks[c] = L / K + (c < L % K);
}

void gpt_config_chunk_layers(const gpt_config *cfg, int K, const int *split, int *first) {
    int block = 0, *even = NULL;
    if (!split) {
        even = pt_malloc(sizeof *even * (size_t)K);
        gpt_config_even_split(cfg, K, even);
        split = even;
    }
    for (int c = 0; c < K; c++) {
        first[c] = c == 0 ? 0 : gpt_config_block_layer(cfg, block);
        block += split[c];
    }
    free(even);
    first[K] = gpt_config_num_layers(cfg);
}

void gpt_config_chunk_kinds(const gpt_config *cfg, int K, const int *split, int c, int *count) {
    int first[K + 1];
    gpt_config_chunk_layers(cfg, K, split, first);
    for (int k = 0; k < GPT_MAX_KINDS; k++) count[k] = 0;
    for (int l = first[c]; l < first[c + 1]; l++) count[gpt_config_layer_kind(cfg, l)]++;
}

void gpt_config_item_kinds(const gpt_config *cfg, int item, int *count) {
    for (int k = 0; k < GPT_MAX_KINDS; k++) count[k] = 0;
    for (int l = 0; l < gpt_config_num_layers(cfg); l++)
        if (gpt_config_layer_item(cfg, l) == item) count[gpt_config_layer_kind(cfg, l)]++;
}
