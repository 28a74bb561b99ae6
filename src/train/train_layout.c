/* The layout of a run that asked for none (train_opts.auto_layout): what this machine's cores do
 * best with the batch. A pure function of the model, the batch and the machine, so a test can
 * hold each branch. Not the planner: pipelines over many devices are `pipetrain plan`'s. */
#include "train/train.h"
#include <stdio.h>

/* Bytes a replica keeps whatever its batch: parameters, gradients and AdamW's two moments. */
static double state_bytes(const gpt_model *m) { return 16.0 * (double)m->num_params; }

/* Bytes of the saved activations and scratch of one forward/backward over B x T. */
static double act_bytes(const gpt_model *m, int B, int T) {
    double f = (double)gpt_scratch_floats(m, B, T);
    for (int l = 0; l < gpt_num_layers(m); l++) f += (double)gpt_layer_act_floats(m, l, B, T);
    return 4.0 * f;
}

/* The largest D in [2, cores] that divides batch, or 0. */
static int dp_degree(int batch, int cores) {
    for (int d = cores; d >= 2; d--)
        if (batch % d == 0) return d;
    return 0;
}

void train_layout_choose(run_opts *ro, const gpt_model *m, int batch, int seq, int cores,
                         double mem_bytes, char *why, size_t n) {
    ro->P = ro->D = ro->M = 0;   /* one process unless data parallelism wins below */
    if (cores < 2) {
        snprintf(why, n, "one process (one core)");
        return;
    }
    int d = dp_degree(batch, cores);
    if (!d) {
        snprintf(why, n, "one process on %d OpenBLAS threads: --batch %d does not divide over %d "
                 "cores for data parallelism", cores, batch, cores);
        return;
    }
    /* the trainer's own model and moments stay; each replica adds its state, and the batch's
     * activations are split among the replicas */
    double need = (d + 1) * state_bytes(m) + act_bytes(m, batch, seq);
    if (mem_bytes > 0 && need > 0.5 * mem_bytes) {
        snprintf(why, n, "one process on %d OpenBLAS threads: %d replicas would need %.1f GB, over "
                 "half of this machine's %.1f GB", cores, d, need / 1e9, mem_bytes / 1e9);
        return;
    }
    ro->P = 1;
    ro->D = d;
    ro->M = 1;
    ro->schedule = "1f1b";
    snprintf(why, n, "data parallel over %d threads, batch %d = %d x %d (%d cores: a replica per "
             "core runs the whole step, not only its matmuls, in parallel; same math as one process "
             "up to float summation order; --threads N: one process)", d, batch, d, batch / d, cores);
}
