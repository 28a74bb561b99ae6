/* A re-split moves a job's state rank to rank (run_job_resplit, threads transport): two equal
 * jobs train two steps, one moves to another layer split, both train two more; every loss and
 * the gathered parameters must be bitwise equal (wrong moments would change the updates). For
 * layouts the trainer's --adapt never makes too: several stages per rank, two pipes, replicas
 * with and without --zero 1, tensor parallelism. Not here: MPI and the trainer's policy
 * (tests/test_straggler.sh). */
#include "model/gpt.h"
#include "run/run.h"
#include "optim/optim.h"
#include "util/pt.h"
#include "test.h"
#include <stdio.h>
#include <string.h>

enum { BATCH = 16, SEQ = 8, STEPS = 4, MOVE_AT = 2 };
static const gpt_config CFG = { .n_layer = 8, .n_head = 4, .n_embd = 32, .vocab_size = 64,
                                .n_positions = 8 };
static int g_tok[BATCH * SEQ], g_tgt[BATCH * SEQ];
static gpt_model g_init;

static void make_data(void) {
    pt_rng r;
    pt_rng_seed(&r, 11);
    for (int i = 0; i < BATCH * SEQ; i++) g_tok[i] = (int)(pt_rng_next(&r) % 64);
    for (int i = 0; i < BATCH * SEQ; i++) g_tgt[i] = (int)(pt_rng_next(&r) % 64);
}

/* Jobs a (stays) and b (moves to split to[n] after step MOVE_AT) from one init; *same gets
 * whether every loss and the final parameters are bitwise equal. 0, or -1 (error set). */
static int resplit_run(const run_opts *o, const int *to, int n, int *same) {
    run_plan pa, pb, pn;
    run_job *a = NULL, *b = NULL;
    run_stats sa, sb;
    optim_config oc = optim_config_default();
    oc.lr = 1e-2;
    oc.grad_clip = 0;   /* the norm's summation order follows the split; unclipped, it changes nothing */
    memset(&pn, 0, sizeof pn);
    int rc = run_plan_init(&pa, o, &CFG, BATCH, SEQ);
    if (rc == 0) rc = run_plan_init(&pb, o, &CFG, BATCH, SEQ);
    if (rc < 0) return -1;
    if (run_job_init(&a, &pa, &g_init, NULL, NULL) < 0 || run_job_init(&b, &pb, &g_init, NULL, NULL) < 0) rc = -1;
    *same = 1;
    for (int t = 1; t <= STEPS && rc == 0; t++) {
        if (t == MOVE_AT + 1) {
            rc = run_plan_resplit(&pn, &pb, &CFG, to, n);
            if (rc == 0) rc = run_job_resplit(&b, &pn);
            if (rc < 0) break;
        }
        rc = run_job_iteration(a, g_tok, g_tgt, &oc, t, &sa);
        if (rc == 0) rc = run_job_iteration(b, g_tok, g_tgt, &oc, t, &sb);
        *same &= sa.loss == sb.loss;
    }
    gpt_model ga, gb;
    gpt_init(&ga, &CFG);
    gpt_init(&gb, &CFG);
    if (rc == 0) rc = run_job_gather(a, &ga);
    if (rc == 0) rc = run_job_gather(b, &gb);
    *same &= !memcmp(ga.params, gb.params, ga.num_params * sizeof(float));
    gpt_free(&ga);
    gpt_free(&gb);
    run_job_free(a);
    run_job_free(b);
    if (pn.s) run_plan_free(&pn);
    run_plan_free(&pa);
    run_plan_free(&pb);
    return rc;
}

static void resplit_case(const char *what, run_opts o, const int *to, int n) {
    int same = 0, rc = resplit_run(&o, to, n, &same);
    CHECK(what, rc == 0 && same, "%s", rc < 0 ? pt_err() : "losses or parameters differ from the job that stayed");
}

int main(void) {
    make_data();
    gpt_init(&g_init, &CFG);
    gpt_init_random(&g_init, 3);
    resplit_case("1f1b P=2: 4,4 -> 7,1", (run_opts){ .P = 2, .D = 1, .schedule = "1f1b", .M = 4 },
                 (int[]){ 7, 1 }, 2);
    resplit_case("1f1b P=4: 2,2,2,2 -> 1,3,3,1", (run_opts){ .P = 4, .D = 1, .schedule = "1f1b", .M = 4 },
                 (int[]){ 1, 3, 3, 1 }, 4);
    resplit_case("zb-h1 P=2 D=2: 4,4 -> 2,6 (each replica its own moments)",
                 (run_opts){ .P = 2, .D = 2, .schedule = "zb-h1", .M = 4 }, (int[]){ 2, 6 }, 2);
    resplit_case("zb-h1 P=2 D=2 --zero 1: 4,4 -> 6,2 (moment shards to their new ranks)",
                 (run_opts){ .P = 2, .D = 2, .schedule = "zb-h1", .M = 4, .zero = 1 }, (int[]){ 6, 2 }, 2);
    resplit_case("interleaved-1f1b P=2, 2 chunks per rank: 2,2,2,2 -> 3,1,1,3",
                 (run_opts){ .P = 2, .D = 1, .schedule = "interleaved-1f1b", .M = 4, .chunks = 2 },
                 (int[]){ 3, 1, 1, 3 }, 4);
    resplit_case("chimera P=2 (two pipes) --zero 1: 4,4 -> 5,3",
                 (run_opts){ .P = 2, .D = 1, .schedule = "chimera", .M = 4, .zero = 1 }, (int[]){ 5, 3 }, 2);
    resplit_case("1f1b P=2 --tp 2: 4,4 -> 1,7 (each TP rank its shards)",
                 (run_opts){ .P = 2, .D = 1, .tp = 2, .schedule = "1f1b", .M = 4 }, (int[]){ 1, 7 }, 2);
    resplit_case("1f1b P=2 D=2 --tp 2 --zero 1: 4,4 -> 6,2",
                 (run_opts){ .P = 2, .D = 2, .tp = 2, .schedule = "1f1b", .M = 4, .zero = 1 }, (int[]){ 6, 2 }, 2);
    gpt_free(&g_init);
    TEST_DONE();
}
