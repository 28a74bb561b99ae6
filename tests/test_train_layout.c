/* The layout a run gets without layout flags (train_layout_choose): data parallelism over
 * threads when the cores are several, the batch divides and the replicas fit in memory; else one
 * process; and it says which and why. The CLI side (a `layout:` line, --threads keeping one
 * process) is tests/test_cli_train.sh's. */
#include "train/train.h"
#include "util/pt.h"
#include "test.h"
#include <string.h>

static gpt_model m;

/* The layout for (batch, cores, mem) and its note. */
static run_opts choose(int batch, int cores, double mem, char *why, size_t n) {
    run_opts ro;
    memset(&ro, 0, sizeof ro);
    ro.P = ro.D = ro.M = -7;   /* garbage: every branch must set them */
    train_layout_choose(&ro, &m, batch, 16, cores, mem, why, n);
    return ro;
}

int main(void) {
    gpt_config cfg = { .n_layer = 2, .n_head = 2, .n_embd = 32, .vocab_size = 256, .n_positions = 32 };
    if (gpt_init(&m, &cfg) < 0) { printf("FAIL gpt_init: %s\n", pt_err()); return 1; }
    char why[320];
    run_opts ro = choose(8, 2, 16e9, why, sizeof why);
    CHECK("two cores, batch 8: dp 2 over threads", ro.P == 1 && ro.D == 2 && ro.M == 1 && ro.schedule &&
          !strcmp(ro.schedule, "1f1b") && strstr(why, "data parallel over 2 threads"), "P %d D %d: %s", ro.P, ro.D, why);
    ro = choose(12, 8, 16e9, why, sizeof why);
    CHECK("eight cores, batch 12: dp 6 (the largest divisor that fits the cores)", ro.P == 1 && ro.D == 6,
          "P %d D %d: %s", ro.P, ro.D, why);
    ro = choose(7, 2, 16e9, why, sizeof why);
    CHECK("batch 7 on two cores: one process, saying the batch does not divide", ro.P == 0 && ro.D == 0 &&
          strstr(why, "does not divide"), "P %d: %s", ro.P, why);
    ro = choose(8, 1, 16e9, why, sizeof why);
    CHECK("one core: one process", ro.P == 0 && strstr(why, "one core"), "P %d: %s", ro.P, why);
    ro = choose(8, 2, 1e6, why, sizeof why);
    CHECK("replicas that do not fit in memory: one process, saying so", ro.P == 0 && strstr(why, "GB"),
          "P %d: %s", ro.P, why);
    ro = choose(8, 2, 0, why, sizeof why);
    CHECK("memory unknown: not checked", ro.P == 1 && ro.D == 2, "P %d: %s", ro.P, why);
    gpt_free(&m);
    TEST_DONE();
}
