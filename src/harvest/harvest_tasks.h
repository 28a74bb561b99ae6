/* The constructors of the built-in side tasks (the registry's rows read them; so may a program
 * that makes tasks directly). Each: a task from its ARGS (harvest_kind.create's contract). */
#ifndef PT_HARVEST_TASKS_H
#define PT_HARVEST_TASKS_H
#include "harvest/harvest.h"

/* task_busy.c: "US[,fail=N][,steps=N][,rank=R]" */
int harvest_busy_create(harvest_task **out, const char *args, const harvest_env *env);
/* task_command.c: "[RANK:]CMD" */
int harvest_command_create(harvest_task **out, const char *args, const harvest_env *env);

/* task_train.c: a second model trained in the bubbles. */
typedef struct {
    const char *config, *data;    /* its config JSON (seeded GPT-2 init), its training tokens */
    long steps;                   /* optimizer steps, then it finishes (0: as long as the run) */
    int B, T;                     /* its batch (default 4) and sequence (default 64, at most its
                                   * n_positions) */
    double lr;                    /* AdamW's (<= 0: pipetrain train's default) */
    long seed;                    /* its init seed (0: 1337, pipetrain train's default) */
    int rank;                     /* world rank (-1: the harvester's turn) */
    const char *metrics;          /* its own metrics file (one line per step), or NULL */
} harvest_train_opts;
/* -1 naming --side-train (its config: a file that does not parse) or --side-data. */
int harvest_train_new(harvest_task **out, const harvest_train_opts *o, const harvest_env *env);
/* "CONFIG,DATA[,steps=N][,batch=B][,seq=T][,lr=X][,seed=S][,rank=R][,metrics=FILE]" */
int harvest_train_create(harvest_task **out, const char *args, const harvest_env *env);

#endif
