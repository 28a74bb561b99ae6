/* Helpers shared by the planner's tensor-parallel tests (test_plan_tp, test_plan_tp_oases,
 * test_plan_tp_sp): a small GPT config, tolerances, one node of devices, a layout, and a plan
 * file's text written out. */
#ifndef PT_TEST_PLAN_TP_UTIL_H
#define PT_TEST_PLAN_TP_UTIL_H
#include "model/gpt.h"
#include "plan/plan.h"
#include "test.h"
#include "util/pt.h"
#include <stdio.h>

#define SAME_SUM 1e-12      /* the same terms summed in another order */
#define BIG_MEMORY 1e15     /* a cap nothing reaches */

static inline gpt_config small_cfg(int L, int C, int NH, int V, int maxT) {
    return (gpt_config){ .n_layer = L, .n_head = NH, .n_embd = C, .vocab_size = V, .n_positions = maxT };
}

/* One node of `n` devices of 1 TFLOP/s (efficiency 1) and `mem` bytes on a link of bw, lat. */
static inline int node_cluster(plan_cluster *k, int n, double mem, double bw, double lat) {
    char text[768];
    snprintf(text, sizeof text,
             "{\"nodes\":[{\"devices\":{\"count\":%d,\"flops\":1e12,\"efficiency\":1,\"memory\":%.17g},"
             "\"link\":{\"bandwidth\":%.17g,\"latency\":%.17g}}],\"network\":{\"bandwidth\":%.17g,\"latency\":%.17g}}",
             n, mem, bw, lat, bw, lat);
    if (plan_cluster_parse(k, text, "test-cluster") == 0) return 0;
    printf("# cluster: %s\n", pt_err());
    return -1;
}

/* P stages of 1f1b, one replica, tp ranks each, M microbatches of B sequences of T, split. */
static inline plan_layout tp_layout(int P, int tp, int M, int B, int T, int *split) {
    plan_layout p = { .P = P, .D = 1, .tp = tp, .M = M, .mb_size = B, .T = T, .chunks = 1, .K = P, .split = split };
    snprintf(p.schedule, sizeof p.schedule, "1f1b");
    return p;
}

static inline int write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

#endif
