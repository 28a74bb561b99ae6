/* Schedules over sequence chunks (sched.seq_chunks, --seq-chunks): 1f1b and zb-h1 in seq1F1B's
 * order are valid (compute-only and lowered) for many shapes, run each microbatch's chunks
 * forward in order and backward in reverse on every stage, hold P + K - 1 units on stage 0; the
 * validator refuses a chunk out of order (the rule's extra dependencies) and units that are not
 * whole microbatches; generators without chunk support refuse. */
#include "sched/sched.h"
#include "test.h"
#include "util/pt.h"
#include <string.h>

/* On every stage: F units in increasing order within a microbatch, backward units (B or BW) in
 * decreasing order within it. */
static int chunk_order_ok(const sched *s) {
    int K = s->seq_chunks;
    for (int r = 0; r < s->n_ranks; r++) {
        int lastf = -1, lastb = -1;
        for (int i = 0; i < s->len[r]; i++) {
            const sched_action *a = &s->acts[r][i];
            if (a->kind == ACT_F) {
                if (a->mb % K && a->mb != lastf + 1) return 0;
                lastf = a->mb;
            } else if (a->kind == ACT_B || a->kind == ACT_BW) {
                if (a->mb % K != K - 1 && a->mb != lastb - 1) return 0;
                lastb = a->mb;
            }
        }
    }
    return 1;
}

static void test_generators(void) {
    const char *names[] = { "1f1b", "zb-h1" };
    int bad = 0, n = 0;
    char why[600] = "";
    for (int gi = 0; gi < 2; gi++)
        for (int P = 1; P <= 4; P++)
            for (int M = 1; M <= 5; M++)
                for (int K = 1; K <= 4; K++) {
                    sched_params p = { .ranks = P, .microbatches = M, .seq_chunks = K };
                    sched *s = sched_generate(names[gi], &p), *l = s ? sched_lower(s) : NULL;
                    int peak = s ? sched_stage_peak_slots(s, 0, false) : -1;
                    int want = M * K < P + K - 1 ? M * K : P + K - 1;
                    int ok = s && l && s->n_mb == M * K && s->seq_chunks == K &&
                             sched_validate(s, NULL) == 0 && sched_validate(l, NULL) == 0 &&
                             chunk_order_ok(s) && peak == want;
                    n++;
                    if (!ok && !bad++)
                        snprintf(why, sizeof why, "%s P %d M %d K %d: peak %d (want %d), %s",
                                 names[gi], P, M, K, peak, want, pt_err());
                    sched_free(s);
                    sched_free(l);
                }
    printf("# %d schedules over chunks\n", n);
    CHECK("seq1f1b_zbh1_valid_ordered_peak", !bad, "%d bad; first: %s", bad, why);
}

/* Swapping two cells of one stage breaks a chunk dependency: the validator names the cell. */
static void test_validator_refuses(void) {
    sched_params p = { .ranks = 2, .microbatches = 2, .seq_chunks = 2 };
    sched *s = sched_generate("1f1b", &p);
    /* rank 1 (last stage) runs F0 F1 BW1 BW0 ...: swap its first two F's (chunk 1 before 0) */
    sched_action t = s->acts[1][0];
    s->acts[1][0] = s->acts[1][1];
    s->acts[1][1] = t;
    int rc = sched_validate(s, NULL);
    CHECK("validator_refuses_forward_chunks_out_of_order", rc < 0 && strstr(pt_err(), "1F0"),
          "rc %d: %s", rc, pt_err());
    sched_free(s);
    s = sched_generate("1f1b", &p);
    for (int i = 0; i + 1 < s->len[1]; i++)   /* swap rank 1's first two BWs (chunk 0 first) */
        if (s->acts[1][i].kind == ACT_BW) {
            int j = i + 1;
            while (s->acts[1][j].kind != ACT_BW) j++;
            t = s->acts[1][i];
            s->acts[1][i] = s->acts[1][j];
            s->acts[1][j] = t;
            break;
        }
    rc = sched_validate(s, NULL);
    CHECK("validator_refuses_backward_chunks_in_order", rc < 0 && strstr(pt_err(), "1BW1"),
          "rc %d: %s", rc, pt_err());
    s->seq_chunks = 3;   /* 4 units are no whole microbatches of 3 chunks */
    rc = sched_validate(s, NULL);
    CHECK("validator_refuses_partial_microbatch", rc < 0 && strstr(pt_err(), "not whole microbatches"),
          "rc %d: %s", rc, pt_err());
    sched_free(s);
    /* the same order without chunks is valid: the dependencies are the chunks' alone */
    s = sched_generate("1f1b", &p);
    t = s->acts[1][0]; s->acts[1][0] = s->acts[1][1]; s->acts[1][1] = t;
    s->seq_chunks = 1;
    CHECK("same_swap_valid_without_chunks", sched_validate(s, NULL) == 0, "%s", pt_err());
    sched_free(s);
}

static void test_refusals(void) {
    sched_params p = { .ranks = 2, .microbatches = 2, .seq_chunks = 2 };
    sched *s = sched_generate("gpipe", &p);
    CHECK("gpipe_refuses_chunks", !s && strstr(pt_err(), "use 1f1b or zb-h1"), "%s", pt_err());
    sched_free(s);
    p.seq_chunks = -1;
    s = sched_generate("1f1b", &p);
    CHECK("negative_chunks_refused", !s && strstr(pt_err(), "seq_chunks must be >= 0"), "%s", pt_err());
    sched_free(s);
}

int main(void) {
    test_generators();
    test_validator_refuses();
    test_refusals();
    TEST_DONE();
}
