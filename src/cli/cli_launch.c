/* pipetrain launch: flags only. `pipetrain launch [--np N] [--hostfile F] [--spares K]
 * [--max-restarts R] [--timeout S] [--snapshot-dir D] [MPIRUN-ARGS] -- train TRAIN-ARGS` runs the
 * job under the supervisor of src/launch (launch.h): threads without --np, else mpirun. Flags it
 * does not know before "--" go to mpirun as they are. Not here: the supervision. */
#include "cli/cli.h"
#include "launch/launch.h"
#include "util/pt.h"
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *usage_line = "pipetrain launch [--np N] [--hostfile F] [--spares K] [--max-restarts R] "
                                "[--timeout S] [--snapshot-dir D] [--recycle | --no-recycle] [MPIRUN-ARGS] -- train TRAIN-ARGS";

static void launch_help(void) {
    printf("usage: %s\n"
           "  --np N            MPI processes (mpirun -np N); without it: one process, rank threads\n"
           "  --hostfile F      mpirun's hostfile (\"HOST slots=N\" lines)\n"
           "  --spares K        the hostfile's last K hosts stand by for a lost one\n"
           "  --max-restarts R  restarts before giving up (default 10)\n"
           "  --timeout S       seconds without a step on every rank before the job counts as hung (default 60;\n"
           "                    before its first step the job has at least 120 s)\n"
           "  --snapshot-dir D  the ranks' snapshots and heartbeats (default: the train flags' --snapshot-dir,\n"
           "                    else /dev/shm/pipetrain-launch-<pid>)\n"
           "  --recycle         with --np and --dp >= 2: a replica that loses a rank is always dropped in place\n"
           "                    and the others go on without a restart (mpirun --enable-recovery, train --recycle);\n"
           "                    the default does so where the flags allow (--dp >= 2, --snapshot-every, no --tp,\n"
           "                    --zero 1, --dp-sync, --plan or --hostfile) and the rest of the run at the replicas\n"
           "                    left costs less than a restart (measured as it goes)\n"
           "  --no-recycle      never: a lost rank always restarts the whole layout\n"
           "  other flags before \"--\" go to mpirun as they are (with --np only)\n"
           "Give train --snapshot-every K to restart from at most K steps back (docs/recovery.md).\n",
           usage_line);
}

/* A whole number >= lo from flag's value; -1 naming the flag. */
static int int_value(const char *flag, const char *v, int lo, int *out) {
    char *end;
    long x = v ? strtol(v, &end, 10) : 0;
    if (!v || end == v || *end || x < lo || x > INT_MAX)
        return pt_seterr("%s needs a whole number >= %d, got '%s'", flag, lo, v ? v : "");
    *out = (int)x;
    return 0;
}

/* The flags before "--" (at sep) into o; unknown ones to mpirun_args. */
static int parse_front(int sep, char **argv, launch_opts *o, char **mpi, int *n_mpi) {
    for (int i = 1; i < sep; i++) {
        const char *f = argv[i], *v = i + 1 < sep ? argv[i + 1] : NULL;
        int rc = 0;
        if (!strcmp(f, "--np")) rc = int_value(f, v, 1, &o->np), i++;
        else if (!strcmp(f, "--spares")) rc = int_value(f, v, 0, &o->spares), i++;
        else if (!strcmp(f, "--max-restarts")) rc = int_value(f, v, 0, &o->max_restarts), i++;
        else if (!strcmp(f, "--recycle") || !strcmp(f, "--no-recycle")) {
            int want = f[2] == 'n' ? LAUNCH_RECYCLE_OFF : LAUNCH_RECYCLE_ON;
            if (o->recycle != LAUNCH_RECYCLE_AUTO && o->recycle != want)
                rc = pt_seterr("--recycle and --no-recycle together: give one (neither: in place where it pays)");
            o->recycle = want;
        }
        else if (!strcmp(f, "--hostfile")) { if (!v) rc = pt_seterr("--hostfile needs a file"); o->hostfile = v; i++; }
        else if (!strcmp(f, "--snapshot-dir")) { if (!v) rc = pt_seterr("--snapshot-dir needs a folder"); o->snapshot_dir = v; i++; }
        else if (!strcmp(f, "--timeout")) {
            char *end;
            o->timeout = v ? strtod(v, &end) : 0;
            if (!v || end == v || *end || !(o->timeout > 0)) rc = pt_seterr("--timeout needs seconds > 0, got '%s'", v ? v : "");
            i++;
        } else mpi[(*n_mpi)++] = argv[i];
        if (rc < 0) return -1;
    }
    return 0;
}

/* What the flags cannot mean together. */
static int check_opts(const launch_opts *o, int sep, int argc, char **argv) {
    if (sep == argc) return pt_seterr("no \"--\": give the job after it (%s)", usage_line);
    if (o->n_train_args == 0 || strcmp(o->train_args[0], "train"))
        return pt_seterr("after \"--\" comes the job: train and its flags (got '%s')",
                         o->n_train_args ? o->train_args[0] : "");
    if (o->n_mpirun_args && !o->np)
        return pt_seterr("'%s' is not a launch flag, and without --np there is no mpirun to pass it to",
                         o->mpirun_args[0]);
    if (o->recycle == LAUNCH_RECYCLE_ON && !o->np) return pt_seterr("--recycle needs --np (an MPI job: rank threads die with their process)");
    if (o->hostfile && !o->np) return pt_seterr("--hostfile needs --np (an MPI job)");
    if (o->spares && !o->hostfile) return pt_seterr("--spares %d needs --hostfile (the spares are its last hosts)", o->spares);
    for (int i = 0; i < o->n_train_args; i++)
        if (!strcmp(o->train_args[i], "--transport"))
            return pt_seterr("the train flags give --transport: launch picks it (threads, or mpi with --np)");
    return 0;
}

int cli_launch(int argc, char **argv) {
    static char self[PATH_MAX];
    launch_opts o = { .max_restarts = 10, .timeout = 60, .mpirun = "mpirun" };
    int sep = 1;
    while (sep < argc && strcmp(argv[sep], "--")) sep++;
    for (int i = 1; i < sep; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) { launch_help(); return 0; }
    char **mpi = pt_calloc((size_t)argc + 1, sizeof *mpi);
    int rc = parse_front(sep, argv, &o, mpi, &o.n_mpirun_args);
    o.mpirun_args = mpi;
    o.train_args = sep < argc ? argv + sep + 1 : NULL;
    o.n_train_args = sep < argc ? argc - sep - 1 : 0;
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) self[n] = 0;
    else snprintf(self, sizeof self, "%s", "pipetrain");
    o.self = self;
    if (rc == 0) rc = check_opts(&o, sep, argc, argv);
    if (rc == 0) rc = launch_run(&o, NULL);
    free(mpi);
    return rc < 0 ? cli_fail("launch") : 0;
}
