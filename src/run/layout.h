/* How a model is laid out over workers: P pipeline ranks x D data-parallel replicas, S stages
 * (model chunks) placed on ranks by a schedule, each stage owning a contiguous range of the
 * model's layers (the layer sequence of model/gpt.h: embedding, blocks, head). Pure data:
 * no threads, no communication.
 *
 * World ranks: w = (d * P + p) * tp + t for replica d, pipeline rank p and tensor-parallel rank t
 * (TP innermost, as Megatron-LM places it: a TP group is on neighbouring ranks, one host). Each
 * TP rank of a (replica, pipeline rank) runs the same schedule as its own pipeline lane, on its
 * shard of every stage's layers.
 * Splits count transformer blocks per model chunk: {3,5,4,4} (`--split 3,5,4,4`, parsed by the
 * CLI; a plan file's "split") gives chunk 0 blocks 0..2, chunk 1 blocks 3..7, ...; every other
 * layer travels with its block (gpt_config_chunk_layers: the embedding joins chunk 0, the head
 * the last chunk). With two pipes (chimera) stage g and g + K
 * hold the same layers (two replicas of the model). */
#ifndef PT_RUN_LAYOUT_H
#define PT_RUN_LAYOUT_H
#include "model/gpt.h"

typedef struct {
    int P, D;             /* pipeline ranks, data-parallel replicas */
    int tp;               /* tensor-parallel ranks per (replica, pipeline rank); 1: none
                           * (run_layout_init sets 1; the plan sets --tp) */
    int K;                /* model chunks (stages per pipe) */
    int n_pipes;          /* 1, or 2 for chimera */
    int n_layers;         /* the model's layers (gpt_config_num_layers) */
    int *chunk_first;     /* [K+1] chunk c owns layers [chunk_first[c], chunk_first[c+1]) */
    int *chunk_blocks;    /* [K] transformer blocks of chunk c (the split: --split's counts) */
} run_layout;

/* Even split of cfg's n_layer transformer blocks into K chunks (the first n_blocks % K chunks get one
 * more) when split is NULL, else split[n_split]: blocks per chunk, read only here (the caller
 * keeps it). Errors name the problem and show the split as --split would write it: more chunks
 * than blocks, a count < 1, another number of counts than K ("--split '3,5' lists 2 stages, the
 * layout has 4"), a sum that drops or repeats blocks ("--split '3,5,4' covers 12 blocks, the
 * model has 16"). Returns 0, or -1 with lo empty. */
int run_layout_init(run_layout *lo, int P, int D, int K, int n_pipes, const gpt_config *cfg,
                    const int *split, int n_split);
void run_layout_free(run_layout *lo);
/* Chunk of stage g (g % K), and the layer range of stage g. */
int run_layout_chunk_of(const run_layout *lo, int g);
void run_layout_stage_layers(const run_layout *lo, int g, int *first, int *end);
/* World rank of (replica d, pipeline rank p, TP rank t), and back; ranks of the whole job. */
int run_layout_world_rank(const run_layout *lo, int d, int p, int t);
void run_layout_coords(const run_layout *lo, int w, int *d, int *p, int *t);
int run_layout_ranks(const run_layout *lo);   /* D * P * tp */

#endif
