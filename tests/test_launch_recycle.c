/* launch's default for going on in place (src/launch/launch_recycle.c; docs/recovery.md "In
 * place"): which train flags allow it, and the price of a failure: the rest of the run at the
 * replicas left against a restart, with a core per rank and on oversubscribed cores. */
#include "launch/launch_int.h"
#include "test.h"
#include <string.h>

/* launch_recycle_able over `train` flags (NULL-terminated), np ranks, dp replicas, hostfile. */
static int able(char **args, int np, int dp, const char *hostfile, char *why) {
    int n = 0;
    while (args[n]) n++;
    launch_opts o = { .np = np, .hostfile = hostfile, .train_args = args, .n_train_args = n };
    return launch_recycle_able(&o, dp, why, 200);
}

static void check_able(void) {
    char why[200];
    char *ok[] = { "train", "--dp", "2", "--snapshot-every", "1", NULL };
    CHECK("able: --np, --dp 2, snapshots", able(ok, 4, 2, NULL, why) && !why[0], "refused: %s", why);
    CHECK("able: no --np (threads)", !able(ok, 0, 2, NULL, why) && strstr(why, "no --np"), "%s", why);
    CHECK("able: --dp 1", !able(ok, 2, 1, NULL, why) && strstr(why, "no replicas"), "%s", why);
    CHECK("able: --hostfile", !able(ok, 4, 2, "hf", why) && strstr(why, "--hostfile"), "%s", why);
    char *tp[] = { "train", "--tp=2", "--snapshot-every", "1", NULL };
    CHECK("able: --tp=2", !able(tp, 4, 2, NULL, why) && strstr(why, "--tp > 1"), "%s", why);
    char *zero[] = { "train", "--zero", "1", "--snapshot-every", "1", NULL };
    CHECK("able: --zero 1", !able(zero, 4, 2, NULL, why) && strstr(why, "--zero 1"), "%s", why);
    char *sync[] = { "train", "--dp-sync", "4", "--snapshot-every", "1", NULL };
    CHECK("able: --dp-sync 4", !able(sync, 4, 2, NULL, why) && strstr(why, "--dp-sync"), "%s", why);
    char *nosnap[] = { "train", "--dp", "2", NULL };
    CHECK("able: no snapshots", !able(nosnap, 4, 2, NULL, why) && strstr(why, "--snapshot-every"), "%s", why);
    char *plan[] = { "train", "--plan", "p.json", "--snapshot-every", "1", NULL };
    CHECK("able: --plan", !able(plan, 4, 2, NULL, why) && strstr(why, "--plan"), "%s", why);
}

static void check_pays(void) {
    char why[300];
    /* a core per rank: 2 x 2 -> 2 x 1 doubles each step: 100 steps of 0.1 s cost 10 s more */
    launch_recycle_cost c = { .steps_left = 100, .step_s = 0.1, .D = 2, .D2 = 1, .R = 4, .R2 = 2, .cores = 8,
                              .restart_s = 1.0 };
    CHECK("pays: a core per rank, 10 s more against a 1 s restart: restart", !launch_recycle_pays(&c, why, sizeof why),
          "%s", why);
    CHECK("pays: says the numbers", strstr(why, "about 10.00 s more") && strstr(why, "x2.00"), "%s", why);
    c.steps_left = 5;   /* 0.5 s more */
    CHECK("pays: a core per rank, 0.5 s more against 1 s: in place", launch_recycle_pays(&c, why, sizeof why), "%s", why);
    c.steps_left = 100;
    c.cores = 2;   /* 4 ranks on 2 cores: the 2 left take the dropped ones' cores, the same step */
    CHECK("pays: oversubscribed cores, the step unchanged: in place", launch_recycle_pays(&c, why, sizeof why) &&
          strstr(why, "x1.00"), "%s", why);
    c.cores = 3;   /* 4 on 3 (0.75 each) -> 2 on 3 (1 each): x1.5, 5 s more */
    CHECK("pays: 3 cores, x1.5: restart", !launch_recycle_pays(&c, why, sizeof why) && strstr(why, "x1.50"), "%s", why);
    c = (launch_recycle_cost){ .steps_left = 100, .step_s = 0.1, .D = 3, .D2 = 2, .R = 6, .R2 = 4, .cores = 8,
                               .restart_s = 6.0 };
    CHECK("pays: 3 -> 2 replicas, x1.5, 5 s more against 6 s: in place", launch_recycle_pays(&c, why, sizeof why) &&
          strstr(why, "x1.50"), "%s", why);
    c.step_s = 0;
    CHECK("pays: no step time yet: restart", !launch_recycle_pays(&c, why, sizeof why) && strstr(why, "no step time"),
          "%s", why);
    c = (launch_recycle_cost){ .steps_left = 0, .step_s = 0.1, .D = 2, .D2 = 1, .R = 4, .R2 = 2, .cores = 8,
                               .restart_s = 0.5 };
    CHECK("pays: no step left: in place", launch_recycle_pays(&c, why, sizeof why), "%s", why);
    c.restart_s = 0;
    CHECK("pays: a free restart: restart", !launch_recycle_pays(&c, why, sizeof why), "%s", why);
}

int main(void) {
    check_able();
    check_pays();
    TEST_DONE();
}
