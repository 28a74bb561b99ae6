/* Layer splits and rank coordinates of a pipelined, data-parallel layout. */
#include "run/layout.h"
#include "util/pt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* split[n] as --split text ("3,5,4,4") into buf[size], for error messages. */
static const char *split_text(const int *split, int n, char *buf, size_t size) {
    size_t at = 0;
    buf[0] = 0;
    for (int c = 0; c < n && at < size; c++)
        at += (size_t)snprintf(buf + at, size - at, "%s%d", c ? "," : "", split[c]);
    return buf;
}

/* split[n] must give each of K chunks at least one block and use every block exactly once. */
static int check_split(const int *split, int n, int K, int n_blocks) {
    char text[512];
    long long sum = 0;
    split_text(split, n, text, sizeof text);
    for (int c = 0; c < n; c++) {
        if (split[c] < 1)
            return pt_seterr("--split '%s': stage %d has %d blocks; every stage needs at least 1",
                             text, c, split[c]);
        sum += split[c];
    }
    if (n > K) return pt_seterr("--split '%s' lists more than %d stages", text, K);
    if (n != K) return pt_seterr("--split '%s' lists %d stages, the layout has %d", text, n, K);
    if (sum != n_blocks)
        return pt_seterr("--split '%s' covers %lld blocks, the model has %d (a split must use every "
                         "block exactly once)", text, sum, n_blocks);
    return 0;
}

int run_layout_init(run_layout *lo, int P, int D, int K, int n_pipes, const gpt_config *cfg,
                    const int *split, int n_split) {
    int n_blocks = cfg->n_layer;
    memset(lo, 0, sizeof *lo);
    if (P < 1 || D < 1 || K < 1 || n_pipes < 1)
        return pt_seterr("layout: stages, dp and chunks must be >= 1 (got P=%d D=%d K=%d)", P, D, K);
    if (K > n_blocks)
        return pt_seterr("layout: %d model chunks but the model has only %d transformer blocks "
                         "(n_layer); use fewer stages or chunks", K, n_blocks);
    if (split && check_split(split, n_split, K, n_blocks) < 0) return -1;
    lo->P = P; lo->D = D; lo->tp = 1; lo->K = K; lo->n_pipes = n_pipes;
    lo->n_layers = gpt_config_num_layers(cfg);
    lo->chunk_blocks = pt_calloc((size_t)K, sizeof *lo->chunk_blocks);
    if (split) memcpy(lo->chunk_blocks, split, sizeof *split * (size_t)K);
    else gpt_config_even_split(cfg, K, lo->chunk_blocks);
    lo->chunk_first = pt_calloc((size_t)K + 1, sizeof *lo->chunk_first);
    gpt_config_chunk_layers(cfg, K, lo->chunk_blocks, lo->chunk_first);
    return 0;
}

void run_layout_free(run_layout *lo) {
    free(lo->chunk_first);
    free(lo->chunk_blocks);
    lo->chunk_first = lo->chunk_blocks = NULL;
}

int run_layout_chunk_of(const run_layout *lo, int g) { return g % lo->K; }

void run_layout_stage_layers(const run_layout *lo, int g, int *first, int *end) {
    int c = run_layout_chunk_of(lo, g);
    *first = lo->chunk_first[c];
    *end = lo->chunk_first[c + 1];
}

int run_layout_world_rank(const run_layout *lo, int d, int p, int t) { return (d * lo->P + p) * lo->tp + t; }

void run_layout_coords(const run_layout *lo, int w, int *d, int *p, int *t) {
    *t = w % lo->tp;
    *p = w / lo->tp % lo->P;
    *d = w / lo->tp / lo->P;
}

int run_layout_ranks(const run_layout *lo) { return lo->D * lo->P * lo->tp; }
