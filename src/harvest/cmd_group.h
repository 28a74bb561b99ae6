/* A side program's process group as the harvester sees it (task_command.c): the CPU its
 * processes received during a slot, and its placement on the core of the rank whose bubble it
 * runs in. The processes and threads are listed between training steps (the main thread,
 * /proc), read in slots (the rank's thread: CPU clocks and affinity calls, no /proc). What a
 * slot counts: each listed process's CPU clock from the resume to the stop; a process found
 * between steps brings all its CPU so far (the group runs only in slots); the children the
 * leader reaped bring theirs (/proc/PID/stat cutime + cstime, clock ticks) less what was
 * counted of them while they lived. Not here: starting, stopping, killing (task_command.c).
 * Linux only. */
#ifndef PT_HARVEST_CMD_GROUP_H
#define PT_HARVEST_CMD_GROUP_H
#include <sched.h>
#include <sys/types.h>

#define CMD_MAX_PROCS 32          /* processes of a group whose CPU is counted, threads placed */

typedef struct {
    pid_t leader;
    pid_t procs[CMD_MAX_PROCS], tids[CMD_MAX_PROCS];
    int n_procs, n_tids;
    double cpu0[CMD_MAX_PROCS];   /* each process's CPU clock at the slot's resume (-1: unread) */
    double seen[CMD_MAX_PROCS];   /* ... its clock as last counted */
    double reaped_s;              /* the leader's reaped children's CPU seen so far */
    double carry_s;               /* CPU found between steps, counted with the next slot */
    double vanished_s;            /* what was counted of processes gone since (their CPU comes
                                   * back in the leader's reaped time: not twice) */
    int pin;                      /* place the group on the rank's core (PT_SIDE_PIN=0: no) */
    int placed;                   /* the core it was placed on, -1: none */
    cpu_set_t allowed;            /* this process's cores when the group started */
} cmd_group;

/* The group of a just-started leader (stopped). */
void cmd_group_init(cmd_group *g, pid_t leader);
/* Between steps: its processes and threads as they are now, new and ended ones accounted. */
void cmd_group_refresh(cmd_group *g);
/* In a slot, before the resume: the threads onto the core this thread runs on (the core the
 * rank is about to leave idle) when they are elsewhere; then the CPU clocks read. */
void cmd_group_place(cmd_group *g);
void cmd_group_mark(cmd_group *g);
/* After the stop: the CPU seconds received since cmd_group_mark, with what was carried. */
double cmd_group_take(cmd_group *g);

#endif
