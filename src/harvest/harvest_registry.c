/* The side-task registry: one row per kind a user can name (train --side-task KIND[:ARGS]; the
 * CLI's help lists them). Everything that creates a task by name reads these rows. Not the
 * tasks themselves (task_*.c). The held-out evaluation is made by the trainer (it needs the
 * run's weights), not through a row. */
#include "harvest/harvest_tasks.h"
#include "util/pt.h"
#include <string.h>

static const harvest_kind registry[] = {
    { .name = "busy", .create = harvest_busy_create, .args = "US[,fail=N][,steps=N][,rank=R]",
      .help = "computes US microseconds per step (a test and calibration task)" },
    { .name = "command", .create = harvest_command_create, .args = "[RANK:]CMD",
      .help = "any program (sh -c CMD), stopped outside its rank's bubbles (= --side-command)" },
    { .name = "train", .create = harvest_train_create,
      .args = "CONFIG,DATA[,steps=N][,batch=B][,seq=T][,lr=X][,seed=S][,rank=R][,metrics=FILE]",
      .help = "trains a second model in the bubbles (= --side-train), a line per step in its metrics" },
};
#define N_ROWS ((int)(sizeof registry / sizeof registry[0]))

const harvest_kind *harvest_kind_rows(int *n) {
    *n = N_ROWS;
    return registry;
}

const harvest_kind *harvest_kind_find(const char *name) {
    for (int i = 0; name && i < N_ROWS; i++)
        if (!strcmp(name, registry[i].name)) return &registry[i];
    return NULL;
}

int harvest_task_create(harvest_task **out, const char *spec, const harvest_env *env) {
    char name[32];
    const char *colon = strchr(spec, ':');
    size_t n = colon ? (size_t)(colon - spec) : strlen(spec);
    snprintf(name, sizeof name, "%.*s", (int)(n < sizeof name ? n : sizeof name - 1), spec);
    const harvest_kind *k = harvest_kind_find(name);
    *out = NULL;
    if (!k) {
        char known[256] = "";
        for (int i = 0; i < N_ROWS; i++) {
            strncat(known, i ? ", " : "", sizeof known - strlen(known) - 1);
            strncat(known, registry[i].name, sizeof known - strlen(known) - 1);
        }
        return pt_seterr("%s '%s': unknown side task kind '%s' (known: %s)",
                         env->flag ? env->flag : "--side-task", spec, name, known);
    }
    return k->create(out, colon ? colon + 1 : "", env);
}

void harvest_print_kinds(FILE *f) {
    fprintf(f, "side tasks (--side-task KIND:ARGS):\n");
    for (int i = 0; i < N_ROWS; i++)
        fprintf(f, "  %-8s %-32s %s\n", registry[i].name, registry[i].args, registry[i].help);
}
