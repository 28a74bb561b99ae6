/* Inside the supervisor (src/launch only): command lines and hosts (launch_args.c) for the loop
 * (launch.c). */
#ifndef PT_LAUNCH_LAUNCH_INT_H
#define PT_LAUNCH_LAUNCH_INT_H
#include "launch/launch.h"
#include <stddef.h>

#define LAUNCH_MAX_HOSTS 64

/* A growing NULL-terminated argument vector (strings owned). */
typedef struct { char **v; int n, cap; } launch_argv;
void launch_argv_push(launch_argv *a, const char *s);
void launch_argv_free(launch_argv *a);

/* The value of flag in args ("--flag V" or "--flag=V"), the last one given; NULL when absent. */
const char *launch_flag(char *const *args, int n, const char *flag);

/* A host of the hostfile: its name and slots (ranks), whether it is in use, lost. */
typedef struct { char name[256]; int slots, used, lost; } launch_host;

/* Reads "NAME [slots=N]" lines (# comments) of path: every host, the last `spares` not used.
 * -1 naming the file and line. */
int launch_hosts_read(const char *path, int spares, launch_host *h, int *n);
/* Writes the hosts in use as a hostfile to path. -1 naming it. */
int launch_hosts_write(const char *path, const launch_host *h, int n);
/* The host in use that world rank w runs on (ranks fill the hosts in use in order, by slots),
 * or -1. */
int launch_host_of(const launch_host *h, int n, int w);
/* 1 when host answers on the network within a second (a TCP connection accepted or refused),
 * 0 when it does not (unreachable, no route, no answer). */
int launch_host_alive(const char *name);

/* The job's train arguments for an attempt: the user's, less --resume/--init when resume is
 * given (then "--resume resume" added), less each --kill-at whose step is <= drop_kill_upto,
 * with --dp set to dp when dp > 0, with --snapshot-dir snapdir. */
void launch_train_argv(launch_argv *out, const launch_opts *o, const char *resume, long drop_kill_upto,
                       int dp, const char *snapdir);

/* Going on in place (launch_recycle.c). Whether the job's flags let a replica be dropped in place
 * (with --np: replicas, no TP, no --zero 1, no --dp-sync, snapshots, no --plan, every rank on this
 * host's /dev/shm: no --hostfile, MPI's progress thread): 1, or 0 with why (a phrase). */
int launch_recycle_able(const launch_opts *o, int dp, char *why, size_t n);
/* What going on in place costs at a failure against a restart, as the supervisor measured them. */
typedef struct {
    long steps_left;    /* the run's last step less the newest step a heartbeat showed */
    double step_s;      /* seconds per step of the attempt so far (heartbeats) */
    int D, D2;          /* replicas now, and after dropping the one that lost a rank */
    int R, R2, cores;   /* their ranks, and this host's cores (every rank on it) */
    double restart_s;   /* a restart: the attempt's start to its first heartbeat, and its ending */
} launch_recycle_cost;
/* 1 when the rest of the run at D2 of D replicas (each step D/D2 times the work per rank, on the
 * cores the dropped ranks leave) costs less time than a restart, which brings the whole layout
 * back; why says the numbers either way. */
int launch_recycle_pays(const launch_recycle_cost *c, char *why, size_t n);

#endif
