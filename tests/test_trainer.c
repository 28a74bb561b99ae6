/* The trainer's loop and its step-boundary hooks (src/train/trainer.h), on a tiny model for 3
 * steps: hooks run after every step in the fixed slot order (adapt, harvest, evaluate, save,
 * log; within a slot in the order added, built-ins first), with the step's stats, for both
 * engines; a failing hook stops the run with its error; a resumed run's hooks see only its
 * steps. Not here: the numerics of a step (test_run.c, test_train_torch.c), the CLI's output
 * (test_cli_train.sh, test_run_cli.sh). */
#include "train/trainer.h"
#include "util/pt.h"
#include "test.h"
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { STEPS = 3, MAX_CALLS = 64 };

static char tmpdir[64];                     /* this binary's scratch folder */
static char cfg_path[128], data_path[128];   /* in it: the model config, the text */

static void write_file(const char *path, const char *text, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(text, 1, n, f) != n) { perror(path); exit(2); }
    fclose(f);
}

/* What the hooks saw, in call order. */
typedef struct {
    char tag[MAX_CALLS];        /* 'A'dapt, 'H'arvest, 'E'/'e' evaluate (1st/2nd), 'S'ave, 'L'og */
    long step[MAX_CALLS];
    int n;
    int bad_stats;              /* calls whose stats were not a finished step's */
    int saved_before_user_save; /* SAVE: the built-in had written ckpt-<step> when due */
    int logged_before_user_log; /* LOG: the built-in had written this step's metrics line */
    int pipelined;
    long fail_at;               /* the HARVEST hook fails at this step (0: never) */
} record;

static record g_rec;

static int count_lines(const char *path) {
    FILE *f = fopen(path, "r");
    int n = 0, c;
    while (f && (c = fgetc(f)) != EOF) n += c == '\n';
    if (f) fclose(f);
    return n;
}

static void note(char tag, long step, const train_step_stats *st) {
    record *r = &g_rec;
    if (r->n < MAX_CALLS) { r->tag[r->n] = tag; r->step[r->n++] = step; }
    if (!isfinite(st->opt.loss) || st->opt.lr <= 0 || st->step_time <= 0 ||
        (r->pipelined ? st->bubble < 0 : st->bubble != -1))
        r->bad_stats++;
}

static int hook(train_ctx *t, long step, const train_step_stats *st, void *user) {
    char tag = *(const char *)user;
    note(tag, step, st);
    if (tag == 'H' && step == g_rec.fail_at) return pt_seterr("harvest hook: stop at step %ld", step);
    if (tag == 'S' && step % 2 == 0) {
        char path[600];
        snprintf(path, sizeof path, "%s/ckpt-%ld/manifest.json", train_ctx_opts(t)->save, step);
        g_rec.saved_before_user_save += access(path, F_OK) == 0;
    }
    if (tag == 'L') g_rec.logged_before_user_log += count_lines(train_ctx_opts(t)->metrics) == step;
    return 0;
}

static train_opts base_opts(const char *name) {
    train_opts o = { .config = cfg_path, .data = data_path, .batch = 4, .seq = 8,
                     .steps = STEPS, .seed = 1, .oc = optim_config_default(), .threads = 1,
                     .log_every = 100, .save_every = 2 };
    static char metrics[8][600], save[8][600];
    static int k;
    snprintf(metrics[k % 8], 600, "%s/%s.jsonl", tmpdir, name);
    snprintf(save[k % 8], 600, "%s/%s", tmpdir, name);
    o.metrics = metrics[k % 8];
    o.save = save[k++ % 8];
    o.oc.total_steps = STEPS;
    return o;
}

/* Adds the test's hooks in an order unlike the slots', two of them in EVALUATE. */
static int add_hooks(train_ctx *t) {
    int rc = 0;
    rc |= train_add_hook(t, TRAIN_HOOK_LOG, hook, "L");
    rc |= train_add_hook(t, TRAIN_HOOK_SAVE, hook, "S");
    rc |= train_add_hook(t, TRAIN_HOOK_EVALUATE, hook, "E");
    rc |= train_add_hook(t, TRAIN_HOOK_EVALUATE, hook, "e");
    rc |= train_add_hook(t, TRAIN_HOOK_HARVEST, hook, "H");
    rc |= train_add_hook(t, TRAIN_HOOK_ADAPT, hook, "A");
    return rc;
}

/* A run of o with the test's hooks; returns train_run's status (-2: setup failed). */
static int run_with_hooks(const train_opts *o, long fail_at) {
    memset(&g_rec, 0, sizeof g_rec);
    g_rec.pipelined = o->ro.P > 0;
    g_rec.fail_at = fail_at;
    train_ctx *t;
    if (train_init(&t, o) < 0) return -2;
    int rc = add_hooks(t) < 0 ? -2 : train_run(t);
    train_free(t);
    return rc;
}

/* "AHEeSL" per step, for steps from..to. */
static int order_ok(long from, long to) {
    const char *per = "AHEeSL";
    int k = 0;
    for (long s = from; s <= to; s++)
        for (const char *c = per; *c; c++, k++)
            if (k >= g_rec.n || g_rec.tag[k] != *c || g_rec.step[k] != s) return 0;
    return k == g_rec.n;
}

static void test_order(const char *engine, const train_opts *o) {
    char nm[128];
    int rc = run_with_hooks(o, 0);
    snprintf(nm, sizeof nm, "%s: 3 steps run", engine);
    CHECK(nm, rc == 0, "rc %d: %s", rc, pt_err());
    snprintf(nm, sizeof nm, "%s: hooks run adapt, harvest, evaluate (in the order added), save, log "
             "after each step", engine);
    CHECK(nm, order_ok(1, STEPS), "%d calls, first '%.*s'", g_rec.n, g_rec.n, g_rec.tag);
    snprintf(nm, sizeof nm, "%s: hooks get the finished step's stats", engine);
    CHECK(nm, g_rec.bad_stats == 0, "%d calls with bad stats", g_rec.bad_stats);
    snprintf(nm, sizeof nm, "%s: the built-in save runs before a save hook added later", engine);
    CHECK(nm, g_rec.saved_before_user_save == 1, "ckpt-2 seen %d times", g_rec.saved_before_user_save);
    snprintf(nm, sizeof nm, "%s: the built-in log runs before a log hook added later", engine);
    CHECK(nm, g_rec.logged_before_user_log == STEPS, "%d of %d", g_rec.logged_before_user_log, STEPS);
}

static void test_failing_hook(void) {
    train_opts o = base_opts("fail");
    int rc = run_with_hooks(&o, 2);
    CHECK("a failing hook stops the run with its error", rc == -1 &&
          !strcmp(pt_err(), "harvest hook: stop at step 2"), "rc %d: '%s'", rc, pt_err());
    CHECK("a failing hook: later hooks of that step and later steps do not run",
          g_rec.n == 8 && g_rec.tag[7] == 'H' && g_rec.step[7] == 2, "%d calls", g_rec.n);
}

static void test_resume(void) {
    train_opts o = base_opts("resume");
    char ck[600];
    snprintf(ck, sizeof ck, "%s/single/ckpt-2", tmpdir);    /* from test_order's single run */
    o.resume = ck;
    o.config = NULL;
    int rc = run_with_hooks(&o, 0);
    CHECK("resume: hooks see only the steps after the checkpoint's", rc == 0 && order_ok(3, 3),
          "rc %d (%s), %d calls", rc, rc ? pt_err() : "", g_rec.n);
}

static void test_add_hook_limits(void) {
    train_opts o = base_opts("limits");
    train_ctx *t;
    if (train_init(&t, &o) < 0) { CHECK("limits: init", 0, "%s", pt_err()); return; }
    int rc = 0;
    for (int i = 0; i < TRAIN_MAX_HOOKS; i++)     /* EVALUATE has no built-in */
        rc |= train_add_hook(t, TRAIN_HOOK_EVALUATE, hook, "E");
    CHECK("train_add_hook: a slot takes TRAIN_MAX_HOOKS", rc == 0, "%s", pt_err());
    rc = train_add_hook(t, TRAIN_HOOK_EVALUATE, hook, "E");
    CHECK("train_add_hook: one more is an error", rc < 0 && strstr(pt_err(), "already holds"), "rc %d", rc);
    rc = train_add_hook(t, TRAIN_HOOK_SLOTS, hook, "L");
    CHECK("train_add_hook: no such slot is an error", rc < 0 && strstr(pt_err(), "no hook slot"), "rc %d", rc);
    train_free(t);
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    return remove(path);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/test_trainerXXXXXX");
    if (!mkdtemp(tmpdir)) { perror("mkdtemp"); return 2; }
    const char *cfg = "{\"n_layer\": 2, \"n_head\": 2, \"n_embd\": 16, \"vocab_size\": 256, "
                      "\"n_positions\": 16}";
    snprintf(cfg_path, sizeof cfg_path, "%s/cfg.json", tmpdir);
    snprintf(data_path, sizeof data_path, "%s/text.txt", tmpdir);
    write_file(cfg_path, cfg, strlen(cfg));
    char text[2048];
    for (int i = 0; i < (int)sizeof text; i++) text[i] = "the quick brown fox "[i % 20];
    write_file(data_path, text, sizeof text);
    train_opts single = base_opts("single"), pipe = base_opts("pipe");
    pipe.ro = (run_opts){ .P = 2, .D = 1, .schedule = "1f1b", .M = 2 };
    test_order("single process", &single);
    test_order("pipelined", &pipe);
    test_failing_hook();
    test_resume();
    test_add_hook_limits();
    nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    TEST_DONE();
}
