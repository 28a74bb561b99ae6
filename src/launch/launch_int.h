/* Inside the supervisor (src/launch only): command lines and hosts (launch_args.c) for the loop
 * (launch.c). */
#ifndef PT_LAUNCH_LAUNCH_INT_H
#define PT_LAUNCH_LAUNCH_INT_H
#include "launch/launch.h"

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

#endif
