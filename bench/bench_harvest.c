/* Side work in the bubbles, measured iteration by iteration inside one job (make bench): P=2 rank
 * threads, model 4 x 128 (vocab 256), batch 16 x 64, in a bubble-heavy layout (1f1b, M=2) and a
 * zero-bubble one (zb-h2, M=4); side tasks: (a) a CPU-bound program (sh's busy loop, stopped
 * and resumed), (b) a second model (2 x 64) trained in the bubbles, batch 4 x 64, (c) held-out
 * evaluation (8 batches; restarted whenever a pass completes), (d) busy:200, an iterative task
 * of 200 us steps. Each job rotates its iterations over three modes: no side work, side work
 * under the fixed policy (harvest_policy_fixed: the policy before the conditional rule) and
 * under the default policy, so the shared machine's slow spells hit all three; the first
 * iterations warm up and measure the tasks.
 *   slowdown     median iteration of the mode / median without side work - 1
 *   harvested    CPU seconds side work received (side_cpu_s) / the idle seconds of the waits
 *                offered to it (harvest_stats.idle_s, train's wait_idle_s: docs/harvesting.md)
 *   slots        side seconds inside the waits' idle / the waits' idle (harvest_stats: every
 *                wait of the schedule, from reaching the action to its input's arrival): the
 *                time side work was allowed (a program's slots), not what it got
 *   overrun      side seconds past the awaited input's arrival / iteration seconds
 *   side CPU     side_cpu_s per second of those iterations: the fraction of a core it got
 *   unused by reason  harvest_stats.lost_s over the waits' idle (harvest.h)
 * Goal (issue 10): slowdown <= 2%, >= 60% of the bubble used, overrun <= 1% of step time.
 * Not a test: nothing asserted. Usage: bench_harvest [iterations per mode, default 20]
 * [--waits FILE: one line per wait of the measured iterations (harvest_set_log)]
 * [--only LAYOUT:VARIANT, e.g. 1f1b:busy]; bench_harvest --programs [ROUNDS [ITERATIONS]]:
 * issue 20's case and goal; bench_harvest --signals [ROUNDS]: what a SIGCONT/SIGSTOP round
 * costs (bench_harvest_programs.h). */
#include "bench_harvest_programs.h"
#include "harvest/harvest_tasks.h"
#include "harvest/task_eval.h"
#include "run/run.h"
#include "util/pt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { BATCH = 16, SEQ = 64, WARM = 8, MODES = 3 };
enum { OFF, FIXED, COND };   /* the modes, in rotation */
static const char *const MODE_NAME[MODES] = { "off", "fixed", "default" };
static const gpt_config CFG = { .n_layer = 4, .n_head = 4, .n_embd = 128, .vocab_size = 256,
                                .n_positions = 64 };
static char side_cfg[128], side_data[128];
static FILE *waits_log;

/* One mode's sums over its iterations. */
typedef struct {
    double *iter;               /* [iters] iteration seconds */
    int n;
    double t, side, over, idle, used, lost[HARVEST_LOST_N], cpu, bubble;
} bench_mode;

/* The task of a variant, added to h; *ev set for the evaluation. */
static int add_task(harvest *h, const char *variant, harvest_eval **ev) {
    harvest_env env = { .R = 2, .flag = variant };
    harvest_task *t = NULL;
    *ev = NULL;
    if (!strcmp(variant, "program")) {
        if (harvest_command_create(&t, "while :; do :; done", &env) < 0) return -1;
    } else if (!strcmp(variant, "train")) {
        harvest_train_opts o = { .config = side_cfg, .data = side_data, .B = 4, .T = SEQ, .rank = -1 };
        if (harvest_train_new(&t, &o, &env) < 0) return -1;
    } else if (!strcmp(variant, "eval")) {
        harvest_eval_opts o = { .path = side_data, .every = 1, .batches = 8, .cfg = &CFG, .B = BATCH,
                                .T = SEQ, .R = 2 };
        return harvest_eval_create(ev, h, &o);
    } else if (harvest_busy_create(&t, "200", &env) < 0) return -1;
    harvest_add(h, t);
    return 0;
}

/* Restarts the evaluation on the current weights whenever a pass has completed. */
static int eval_again(run_job *j, harvest_eval *ev) {
    long k;
    double loss;
    if (!ev || harvest_eval_busy(ev)) return 0;
    harvest_eval_take(ev, &k, &loss);
    if (run_job_gather(j, harvest_eval_weights(ev)) < 0) return -1;
    harvest_eval_begin(ev, 0);
    return 0;
}

/* Iteration t's mode: side work under the default policy while warming up, then in rotation. */
static int mode_of(int t) { return t <= WARM ? COND : (t - WARM) % MODES; }

static void mode_add(bench_mode *m, const run_stats *st, const harvest_stats *hs) {
    m->iter[m->n++] = st->iter_time;
    m->t += st->iter_time;
    m->side += hs->side_s;
    m->cpu += hs->side_cpu_s;
    m->bubble += st->bubble * 2 * st->iter_time;
    m->over += hs->overrun_s;
    m->idle += hs->idle_s;
    m->used += hs->used_s;
    for (int k = 0; k < HARVEST_LOST_N; k++) m->lost[k] += hs->lost_s[k];
}

/* One job of `iters` iterations per mode after the warm-up; its modes' sums into m[MODES]. */
static int bench_job(const char *sched_name, int M, const char *variant, const gpt_model *init,
                     const int *tok, int iters, bench_mode *m) {
    harvest *h;
    harvest_eval *ev = NULL;
    run_plan pl = { 0 };
    run_job *j = NULL;
    optim_config oc = optim_config_default();
    harvest_policy pol[MODES] = { harvest_policy_default(), harvest_policy_fixed(), harvest_policy_default() };
    harvest_create(&h);
    int rc = add_task(h, variant, &ev) < 0 || harvest_start(h, 2, 0, 2) < 0 ? -1 : 0;
    run_opts o = { .P = 2, .D = 1, .schedule = sched_name, .M = M, .on_wait = harvest_on_wait, .wait_user = h };
    if (rc == 0) rc = run_plan_init(&pl, &o, &CFG, BATCH, SEQ);
    if (rc == 0) rc = run_job_init(&j, &pl, init, NULL, NULL);
    if (rc == 0) harvest_bind(h, pl.s, 2);
    if (waits_log) fprintf(waits_log, "# %s M=%d %s (step rank action ... ms)\n", sched_name, M, variant);
    for (int t = 1; rc == 0 && t <= WARM + MODES * iters; t++) {
        int mode = mode_of(t);
        run_stats st;
        harvest_stats hs;
        harvest_pause(h, mode == OFF);
        harvest_set_policy(h, &pol[mode]);
        if (waits_log && t > WARM) fprintf(waits_log, "# iteration %d: %s\n", t, MODE_NAME[mode]);
        harvest_set_log(h, t > WARM ? waits_log : NULL);
        if ((rc = eval_again(j, ev)) < 0 || (rc = run_job_iteration(j, tok, tok + 1, &oc, t, &st)) < 0) break;
        rc = harvest_after_step(h, run_job_timeline(j), NULL, &hs);
        harvest_note n;
        while (harvest_next_note(h, &n))
            if (strcmp(n.what, "start")) printf("  (%s: %s)\n", variant, n.text);
        if (t > WARM) mode_add(&m[mode], &st, &hs);
    }
    harvest_free(h);
    harvest_eval_free(ev);
    run_job_free(j);
    if (pl.s) run_plan_free(&pl);
    return rc;
}

static double median_of(double *v, int n) { return n ? pt_median(v, n) : 0; }

/* The job's lines: per policy its slowdown against the iterations without side work, the
 * bubble used, the overrun, the side rate, and where the unused bubble went. */
static void print_job(const char *variant, bench_mode *m) {
    double off = median_of(m[OFF].iter, m[OFF].n), load[3] = { -1, -1, -1 };
    if (getloadavg(load, 3) < 0) load[0] = -1;
    for (int k = FIXED; k < MODES; k++) {
        const bench_mode *x = &m[k];
        double med = median_of(m[k].iter, m[k].n);
        printf("  %-8s %-8s %+7.1f%%  %8.1f%%  %6.1f%%  %7.2f%%  %6.1f%%  (%.2f ms alone, waits idle %.1f%%, load %.2f)\n",
               k == FIXED ? variant : "", MODE_NAME[k], off > 0 ? 100 * (med / off - 1) : 0,
               x->idle > 0 ? 100 * x->cpu / x->idle : 0, x->idle > 0 ? 100 * x->used / x->idle : 0,
               x->t > 0 ? 100 * x->over / x->t : 0, x->t > 0 ? 100 * x->cpu / x->t : 0, off * 1e3,
               x->t > 0 ? 100 * x->idle / (2 * x->t) : 0, load[0]);
        printf("  %-17s unused:", "");
        for (int r = 0; r < HARVEST_LOST_N; r++)
            if (x->idle > 0 && x->lost[r] / x->idle >= 0.0005) printf(" %s %.1f%%", harvest_lost_name(r), 100 * x->lost[r] / x->idle);
        printf("\n");
    }
    fflush(stdout);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0) { perror(path); exit(2); }
    fclose(f);
}

/* The side model's config and tokens in dir. */
static void write_inputs(const char *dir, pt_rng *rng) {
    snprintf(side_cfg, sizeof side_cfg, "%s/side.json", dir);
    snprintf(side_data, sizeof side_data, "%s/side.txt", dir);
    write_file(side_cfg, "{\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 64, \"vocab_size\": 256, \"n_positions\": 64}");
    char *text = pt_malloc(200001);
    for (int i = 0; i < 200000; i++) text[i] = (char)('a' + pt_rng_next(rng) % 26);
    text[200000] = 0;
    write_file(side_data, text);
    free(text);
}

int main(int argc, char **argv) {
    int iters = 20;
    const char *only = NULL;
    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--programs")) return bench_programs(argc - a - 1, argv + a + 1);
        if (!strcmp(argv[a], "--signals")) return bench_signals(argc - a - 1, argv + a + 1);
        if (!strcmp(argv[a], "--waits") && a + 1 < argc) waits_log = fopen(argv[++a], "w");
        else if (!strcmp(argv[a], "--only") && a + 1 < argc) only = argv[++a];
        else iters = atoi(argv[a]);
    }
    char dir[] = "/tmp/bench_harvestXXXXXX";
    if (iters < 2 || !mkdtemp(dir)) {
        fprintf(stderr, "usage: bench_harvest [iterations per mode >= 2] [--waits FILE] [--only LAYOUT:VARIANT]\n");
        return 2;
    }
    pt_rng rng;
    pt_rng_seed(&rng, 7);
    write_inputs(dir, &rng);
    gpt_model m;
    if (gpt_init(&m, &CFG) < 0) return 1;
    gpt_init_random(&m, 1);
    int *tok = pt_malloc(sizeof(int) * (BATCH * SEQ + 1));
    for (int i = 0; i <= BATCH * SEQ; i++) tok[i] = (int)(pt_rng_next(&rng) % 256);
    pt_machine mc;
    pt_machine_info(&mc);
    double load[3] = { 0 };
    if (getloadavg(load, 3) < 0) load[0] = -1;
    printf("bench_harvest: %s (%s), %d cores, load average %.2f; P=2 threads, 4 x 128, batch %d x %d; "
           "%d iterations per mode after %d warm-up, rotating: no side work, fixed policy, default policy\n",
           mc.cpu, mc.isa, mc.cores, load[0], BATCH, SEQ, iters, WARM);
    const char *layouts[2][2] = { { "1f1b", "2" }, { "zb-h2", "4" } };
    const char *variants[] = { "program", "train", "eval", "busy" };
    int status = 0;
    for (int l = 0; l < 2; l++) {
        printf("%-5s M=%s variant policy  slowdown  harvested   slots  overrun  side CPU\n", layouts[l][0], layouts[l][1]);
        for (int v = 0; v < 4; v++) {
            char name[64];
            snprintf(name, sizeof name, "%s:%s", layouts[l][0], variants[v]);
            if (only && strcmp(only, name)) continue;
            bench_mode md[MODES] = { { 0 } };
            for (int k = 0; k < MODES; k++) md[k].iter = pt_calloc((size_t)iters + 1, sizeof(double));
            if (bench_job(layouts[l][0], atoi(layouts[l][1]), variants[v], &m, tok, iters, md) < 0) {
                printf("  %s: failed: %s\n", variants[v], pt_err());
                status = 1;
            } else print_job(variants[v], md);
            for (int k = 0; k < MODES; k++) free(md[k].iter);
        }
    }
    char rm[80];
    snprintf(rm, sizeof rm, "rm -rf %s", dir);
    if (system(rm) != 0) status = 1;
    if (waits_log) fclose(waits_log);
    gpt_free(&m);
    free(tok);
    return status;
}
