/* Helpers shared by the planner's tensor-parallel tests (test_plan_tp, test_plan_tp_oases): a
 * small GPT config, tolerances, and a plan file's text written out. */
#ifndef PT_TEST_PLAN_TP_UTIL_H
#define PT_TEST_PLAN_TP_UTIL_H
#include "model/gpt.h"
#include "test.h"
#include <stdio.h>

#define SAME_SUM 1e-12      /* the same terms summed in another order */
#define BIG_MEMORY 1e15     /* a cap nothing reaches */

static inline gpt_config small_cfg(int L, int C, int NH, int V, int maxT) {
    return (gpt_config){ .n_layer = L, .n_head = NH, .n_embd = C, .vocab_size = V, .n_positions = maxT };
}

static inline int write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fputs(text, f);
    return fclose(f);
}

#endif
