/* The constructors of the built-in side tasks (the registry's rows read them; so may a program
 * that makes tasks directly). Each: a task from its ARGS (harvest_kind.create's contract). */
#ifndef PT_HARVEST_TASKS_H
#define PT_HARVEST_TASKS_H
#include "harvest/harvest.h"

/* task_busy.c: "US[,fail=N][,steps=N][,rank=R]" */
int harvest_busy_create(harvest_task **out, const char *args, const harvest_env *env);
/* task_command.c: "[RANK:]CMD" */
int harvest_command_create(harvest_task **out, const char *args, const harvest_env *env);

#endif
