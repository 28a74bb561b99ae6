/* Layer splits and rank coordinates of a pipelined, data-parallel layout. */
#include "run/layout.h"
#include "util/pt.h"
#include <stdlib.h>
#include <string.h>

/* Parses "3,5,4,4" into counts[K]; errors name the flag. */
static int parse_split(const char *split, int K, int *counts, int n_blocks) {
    const char *s = split;
    int n = 0, sum = 0;
    while (*s) {
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s || (*end && *end != ',') || (*end == ',' && !end[1]))
            return pt_seterr("--split '%s': expected blocks per stage like 3,5,4,4 (numbers joined by "
                             "single commas, none at either end)", split);
        if (v < 1) return pt_seterr("--split '%s': stage %d has %ld blocks; every stage needs at least 1",
                                    split, n, v);
        if (n == K) return pt_seterr("--split '%s' lists more than %d stages", split, K);
        counts[n++] = (int)v;
        sum += (int)v;
        s = *end ? end + 1 : end;
    }
    if (n != K) return pt_seterr("--split '%s' lists %d stages, the layout has %d", split, n, K);
    if (sum != n_blocks)
        return pt_seterr("--split '%s' covers %d blocks, the model has %d (a split must use every "
                         "block exactly once)", split, sum, n_blocks);
    return 0;
}

int run_layout_init(run_layout *lo, int P, int D, int K, int n_pipes, int n_blocks, const char *split) {
    memset(lo, 0, sizeof *lo);
    if (P < 1 || D < 1 || K < 1 || n_pipes < 1)
        return pt_seterr("layout: stages, dp and chunks must be >= 1 (got P=%d D=%d K=%d)", P, D, K);
    if (K > n_blocks)
        return pt_seterr("layout: %d model chunks but the model has only %d transformer blocks "
                         "(n_layer); use fewer stages or chunks", K, n_blocks);
    int *counts = pt_calloc((size_t)K, sizeof *counts);
    if (split && parse_split(split, K, counts, n_blocks) < 0) { free(counts); return -1; }
    if (!split) for (int c = 0; c < K; c++) counts[c] = n_blocks / K + (c < n_blocks % K);
    lo->P = P; lo->D = D; lo->K = K; lo->n_pipes = n_pipes; lo->n_layers = n_blocks + 2;
    lo->chunk_first = pt_calloc((size_t)K + 1, sizeof *lo->chunk_first);
    int layer = 1;                         /* block b is layer b; the embedding joins chunk 0 */
    for (int c = 0; c < K; c++) { lo->chunk_first[c] = c == 0 ? 0 : layer; layer += counts[c]; }
    lo->chunk_first[K] = n_blocks + 2;     /* the head joins the last chunk */
    free(counts);
    return 0;
}

void run_layout_free(run_layout *lo) {
    free(lo->chunk_first);
    lo->chunk_first = NULL;
}

int run_layout_chunk_of(const run_layout *lo, int g) { return g % lo->K; }

void run_layout_stage_layers(const run_layout *lo, int g, int *first, int *end) {
    int c = run_layout_chunk_of(lo, g);
    *first = lo->chunk_first[c];
    *end = lo->chunk_first[c + 1];
}

int run_layout_world_rank(const run_layout *lo, int d, int p) { return d * lo->P + p; }

void run_layout_coords(const run_layout *lo, int w, int *d, int *p) {
    *d = w / lo->P;
    *p = w % lo->P;
}
