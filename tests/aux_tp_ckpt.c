/* Re-saves a checkpoint under another layout without a step, for tests/test_tp_ckpt.sh (not a
 * test binary on its own): loads SRC into a pipelined job of the layout given and saves it at
 * once with run_job_save, so the files written at --tp T can be compared byte for byte with
 * those written at --tp 1 (the same state, whatever the layout).
 *   aux_tp_ckpt SRC OUT STAGES DP TP ZERO [mpi]
 * Under mpirun with "mpi": one process per world rank (STAGES x DP x TP). Exits 0 when saved;
 * else prints the error and exits 1. PT_CKPT_DEBUG: each rank prints what it wrote. */
#include "ckpt/checkpoint.h"
#include "comm/comm.h"
#include "run/run.h"
#include "run/source.h"
#include "util/pt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AUX_TIMEOUT_S 60.0   /* a hang is a failure; a save of a test model takes milliseconds */

/* Loads src into a job of the layout o and saves it to out. */
static int resave(const char *src_dir, const char *out, run_opts *o, comm *world) {
    ckpt_manifest *man = pt_malloc(sizeof *man);
    run_source src;
    run_plan pl;
    run_job *j = NULL;
    int rc = ckpt_read_manifest(man, src_dir), have_src = 0, have_plan = 0;
    if (rc == 0) rc = run_source_checkpoint(&src, src_dir, man), have_src = rc == 0;
    if (rc == 0) rc = run_plan_init(&pl, o, &man->cfg, man->batch, man->seq), have_plan = rc == 0;
    if (rc == 0) rc = run_job_init_src(&j, &pl, &src, world);
    if (rc == 0) rc = run_job_save(j, out, man);
    if (j) run_job_free(j);
    if (have_plan) run_plan_free(&pl);
    if (have_src) run_source_free(&src);
    free(man);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: %s SRC OUT STAGES DP TP ZERO [mpi]\n", argv[0]);
        return 2;
    }
    run_opts o = { .P = atoi(argv[3]), .D = atoi(argv[4]), .tp = atoi(argv[5]), .zero = atoi(argv[6]),
                   .schedule = "1f1b", .M = 1, .timeout = AUX_TIMEOUT_S };
    comm *world = NULL;
    int mpi = argc > 7 && !strcmp(argv[7], "mpi");
    if (mpi && comm_mpi_init(&argc, &argv, &world) < 0) {
        fprintf(stderr, "aux_tp_ckpt: %s\n", pt_err());
        return 1;
    }
    int rc = resave(argv[1], argv[2], &o, world);
    if (rc < 0) fprintf(stderr, "aux_tp_ckpt: %s\n", pt_err());
    if (mpi) {
        comm_free(world);
        comm_mpi_finalize();
    }
    return rc < 0;
}
