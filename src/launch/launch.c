/* The supervisor's loop (launch.h): an attempt is one start of the job; the watch reads the
 * heartbeats and the exit every 20 ms; a failure is killed through, logged, the hosts checked and
 * the layout re-planned, the newest complete step restored, and the job started again from it.
 * Not here: command lines and hosts (launch_args.c). */
#include "launch/launch_int.h"
#include "ckpt/snapshot.h"
#include "report/report.h"
#include "train/trainer.h"
#include "util/pt.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LAUNCH_POLL_S 0.02      /* how often the watch looks */
#define LAUNCH_MAX_RANKS 1024
#define LAUNCH_START_S 120.0    /* the least a job may take to its first heartbeat (MPI start-up
                                 * and model init on a loaded machine), whatever --timeout */
#define LAUNCH_END_GRACE_S 2.0 /* --recycle: an mpirun whose ranks all ended is ended this late */
#define LAUNCH_FINISH_S 30.0    /* ... and one whose ranks beat the last step but do not end */
#define LAUNCH_END_S 0.2        /* a restart's ending, priced (bench_recover: 0.12 to 0.2 s) */
#define LAUNCH_GRACE_S 5.0      /* a launcher that does not end by itself this long after a rank
                                 * died is ended */

typedef struct {
    const launch_opts *o;
    char snapdir[1024], restore[1100], hostfile[1100], events[4200];
    char resume[1100];          /* what the next attempt resumes from (restore, or a checkpoint) */
    launch_host hosts[LAUNCH_MAX_HOSTS];
    int n_hosts;
    int np, P, dp;              /* MPI processes, stages, replicas of the attempt (np 0: threads) */
    long restored;              /* the step the attempt started from */
    long reached;               /* the newest step a heartbeat showed */
    long kill_upto;             /* --kill-at steps up to this one have fired: dropped on restart */
    double noticed_at;          /* when the last failure was noticed (recovery pending), or 0 */
    double ended_s, restart_at; /* of the pending recovery: seconds to end the old job; when the
                                 * new one was started */
    long lost_steps;            /* of the pending recovery */
    char from[64];              /* snapshot | checkpoint | the start */
    char lost[300];             /* the hosts the last re-plan found lost ("" none) */
    /* in place (--recycle): the attempt goes on without a replica that lost a rank */
    int live_np, live_dp;       /* the ranks and replicas going on (0: the attempt's own) */
    int n_decided, pending;     /* decisions written this attempt; the one awaiting its answer */
    long retired[LAUNCH_MAX_RANKS];   /* pids dropped in place (dead, standing by): no failure */
    int n_retired;
    double all_done_at;         /* every rank going on at the last step and gone: when */
    int recycle;                /* this attempt can go on in place (train --recycle, --enable-recovery) */
    double start_s;             /* the last attempt's start to its first heartbeat advancing */
    double attempt_t;           /* when the attempt (layout) started */
    double beat0_t, beat_t;     /* the attempt's (layout's) first step seen and newest: when, */
    long beat0_step;            /* ... and the first's step: seconds per step between them */
    launch_result res;
} launch_state;

/* What the watch saw end an attempt. */
typedef struct {
    int ok;                     /* the job exited 0 */
    char who[160];              /* "rank 1", "the process", "host 10.77.0.2" */
    const char *noticed;        /* "exit", "heartbeat", "timeout" */
    int status;                 /* the launcher's wait status (when it exited) */
    long pids[LAUNCH_MAX_RANKS];/* each rank's pid from its heartbeat (0: unknown) */
    int local[LAUNCH_MAX_RANKS];/* 1 when that rank's heartbeat says this host */
    long steps[LAUNCH_MAX_RANKS];/* each rank's heartbeat step */
    long last;                  /* the run's last step (train's --steps) */
} launch_watch;

static void say(const launch_state *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const launch_state *s, const char *fmt, ...) {
    if (s->o->quiet) return;
    va_list ap;
    va_start(ap, fmt);
    printf("launch: ");
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
    va_end(ap);
}

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* An event in the run's events file (when the job has --metrics or --save); fields taken. */
static void event(launch_state *s, const char *kind, long step, cJSON *fields) {
    if (s->events[0] && report_event_append(s->events, kind, step, fields) < 0)
        fprintf(stderr, "launch: warning: %s\n", pt_err());
    cJSON_Delete(fields);
}

/* The world ranks of the attempt (threads: the layout's, read from the flags). */
static int n_ranks(const launch_state *s) {
    if (s->live_np) return s->live_np;
    if (s->np) return s->np;
    const char *st = launch_flag(s->o->train_args, s->o->n_train_args, "--stages");
    const char *dp = launch_flag(s->o->train_args, s->o->n_train_args, "--dp");
    const char *tp = launch_flag(s->o->train_args, s->o->n_train_args, "--tp");
    int r = (st ? atoi(st) : 1) * (dp ? atoi(dp) : 1) * (tp ? atoi(tp) : 1);
    return r > 0 && r <= LAUNCH_MAX_RANKS ? r : 1;
}

/* Whether the mpirun arguments name MCA parameter `name`. */
static int mpirun_sets(const launch_opts *o, const char *name) {
    for (int i = 0; i < o->n_mpirun_args; i++)
        if (strstr(o->mpirun_args[i], name)) return 1;
    return 0;
}

/* The attempt's full command line. */
static void attempt_argv(launch_state *s, launch_argv *a) {
    const launch_opts *o = s->o;
    char num[32];
    if (s->np) {
        launch_argv_push(a, o->mpirun);
        if (geteuid() == 0) launch_argv_push(a, "--allow-run-as-root");
        if (s->recycle) {
            launch_argv_push(a, "--enable-recovery");   /* the survivors of a dead rank live on */
            if (!mpirun_sets(o, "odls_base_sigkill_timeout")) {
                /* told to end, mpirun then waits 1 s per host for each rank's SIGTERM to work
                 * before its SIGKILL (their ranks are dead already: launch killed them) */
                launch_argv_push(a, "--mca");
                launch_argv_push(a, "odls_base_sigkill_timeout");
                launch_argv_push(a, "0");
            }
        }
        launch_argv_push(a, "--oversubscribe");
        launch_argv_push(a, "-np");
        snprintf(num, sizeof num, "%d", s->np);
        launch_argv_push(a, num);
        if (s->n_hosts) {
            launch_argv_push(a, "--hostfile");
            launch_argv_push(a, s->hostfile);
        }
        for (int i = 0; i < o->n_mpirun_args; i++) launch_argv_push(a, o->mpirun_args[i]);
    }
    launch_argv_push(a, o->self);
    launch_train_argv(a, o, s->restored > 0 ? s->resume : NULL, s->kill_upto, s->np ? s->dp : 0, s->snapdir);
    if (s->recycle) launch_argv_push(a, "--recycle");
}

static pid_t attempt_start(launch_state *s) {
    launch_argv a = { 0 };
    attempt_argv(s, &a);
    if (s->np && s->n_hosts && launch_hosts_write(s->hostfile, s->hosts, s->n_hosts) < 0) {
        launch_argv_free(&a);
        return -1;
    }
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);   /* the job is a group of its own: ended as one */
        execvp(a.v[0], a.v);
        fprintf(stderr, "launch: cannot run %s: %s\n", a.v[0], strerror(errno));
        _exit(127);
    }
    launch_argv_free(&a);
    if (pid < 0) return pt_seterr("launch: fork failed: %s", strerror(errno));
    setpgid(pid, pid);
    return pid;
}

/* Reads every rank's heartbeat: the newest step, the oldest beat's rank and time, pids. */
static void read_beats(launch_state *s, launch_watch *w, int R, double *newest_t, int *oldest_r,
                       double *oldest_t) {
    char me[65] = "", host[65];
    gethostname(me, sizeof me - 1);
    *newest_t = 0;
    *oldest_r = -1;
    *oldest_t = 1e300;
    for (int r = 0; r < R; r++) {
        long step, pid;
        double when;
        if (ckpt_snap_read_heartbeat(s->snapdir, r, &step, &pid, &when, host) < 0) continue;
        w->pids[r] = pid;
        w->steps[r] = step;
        w->local[r] = !strcmp(host, me);
        if (step > s->reached) s->reached = step;
        if (when > *newest_t) *newest_t = when;
        if (when < *oldest_t) { *oldest_t = when; *oldest_r = r; }
    }
}

/* The first rank of this host whose process is gone before the run's last step; -1 when none
 * (a rank that finished may end before the launcher does). */
static int retired(const launch_state *s, long pid) {
    for (int i = 0; i < s->n_retired; i++)
        if (s->retired[i] == pid) return 1;
    return 0;
}

static int dead_rank(const launch_state *s, const launch_watch *w, int R) {
    for (int r = 0; r < R; r++)
        if (w->pids[r] > 0 && w->local[r] && w->steps[r] < w->last && !retired(s, w->pids[r]) &&
            kill((pid_t)w->pids[r], 0) < 0 && errno == ESRCH)
            return r;
    return -1;
}

/* Once the restarted job completes a step past the one it started from: the "recovered" event. */
static void check_recovered(launch_state *s) {
    if (!s->noticed_at || s->pending || s->reached <= s->restored) return;
    double sec = wall_now() - s->noticed_at;
    cJSON *f = cJSON_CreateObject();
    char lay[96];
    int np = s->live_np ? s->live_np : s->np, dp = s->live_np ? s->live_dp : s->dp;
    snprintf(lay, sizeof lay, s->np ? "%d ranks (%d stages x %d replicas)" : "one process (threads)", np, s->P, dp);
    cJSON_AddStringToObject(f, "layout", lay);
    cJSON_AddStringToObject(f, "from", s->from);
    if (s->live_np) cJSON_AddBoolToObject(f, "in_place", 1);
    cJSON_AddNumberToObject(f, "from_step", (double)s->restored);
    cJSON_AddNumberToObject(f, "steps_lost", (double)s->lost_steps);
    cJSON_AddNumberToObject(f, "seconds_lost", sec);
    cJSON_AddNumberToObject(f, "end_s", s->ended_s);   /* where they went: ending the old job, */
    cJSON_AddNumberToObject(f, "restore_s", s->restart_at - s->noticed_at - s->ended_s);   /* restoring, */
    cJSON_AddNumberToObject(f, "start_s", wall_now() - s->restart_at);   /* starting to the first step */
    char msg[300];
    snprintf(msg, sizeof msg, "%s from %s at step %ld, %ld step%s repeated, %.2f s from noticing to this step", lay,
             s->from, s->restored, s->lost_steps, s->lost_steps == 1 ? "" : "s", sec);
    cJSON_AddStringToObject(f, "message", msg);
    event(s, "recovered", s->reached, f);
    say(s, "recovered: step %ld done %.2f s after the failure was noticed (%s, from %s at step %ld, %ld step%s repeated)",
        s->reached, sec, lay, s->from, s->restored, s->lost_steps, s->lost_steps == 1 ? "" : "s");
    if (sec > s->res.recover_s_max) s->res.recover_s_max = sec;
    if (s->lost_steps > s->res.lost_steps_max) s->res.lost_steps_max = s->lost_steps;
    s->noticed_at = 0;
}

static void log_failure(launch_state *s, launch_watch *w);
static void end_attempt(launch_state *s, pid_t pid, const launch_watch *w);

/* By default: whether going on with dp - 1 replicas costs less than a restart (said either way). */
static int in_place_pays(const launch_state *s, const launch_watch *w, int dp) {
    const char *t = getenv("PIPETRAIN_TEST_RESTART_S");   /* tests: a restart priced as given */
    launch_recycle_cost c = { .steps_left = w->last > s->reached ? w->last - s->reached : 0, .D = dp, .D2 = dp - 1,
                              .R = s->P * dp, .R2 = s->P * (dp - 1), .cores = (int)sysconf(_SC_NPROCESSORS_ONLN),
                              .restart_s = t ? atof(t) : s->start_s + LAUNCH_END_S };
    if (s->beat_t > s->beat0_t && s->reached > s->beat0_step)
        c.step_s = (s->beat_t - s->beat0_t) / (double)(s->reached - s->beat0_step);
    else if (s->beat_t > 0 && s->reached > s->restored)   /* one beat seen: with the start, more than a step */
        c.step_s = (s->beat_t - s->attempt_t) / (double)(s->reached - s->restored);
    char why[300];
    int pays = launch_recycle_pays(&c, why, sizeof why);
    say(s, "%s: %s", pays ? "going on in place pays" : "a restart instead of going on in place", why);
    return pays;
}

/* A heartbeat advanced: the attempt's start cost (its first) and the step time. */
static void note_beat(launch_state *s, double attempt_start) {
    double now = wall_now();
    if (!s->beat0_t) {
        s->beat0_t = now;
        s->beat0_step = s->reached;
        s->attempt_t = attempt_start;
        if (!s->live_np) s->start_s = now - attempt_start;
    }
    s->beat_t = now;
}

/* --recycle: rank d of a replicated job died: the decision (its number and d) to
 * <snapdir>/recycle, SIGUSR1 to every other rank (train's watcher breaks its endpoints), d's
 * replica's ranks retired (the dead one, and the others standing by), the ranks going on watched
 * under their new numbering. 1 when so; 0 when this failure needs a restart. */
static int in_place(launch_state *s, launch_watch *w, int d) {
    int R = n_ranks(s), P = s->P, dp = s->live_np ? s->live_dp : s->dp;
    if (!s->recycle || !s->np || s->pending || dp < 2 || R != P * dp) return 0;
    for (int r = 0; r < R; r++)
        if (w->pids[r] <= 0 || !w->local[r]) return 0;   /* a rank not yet started, or out of sight */
    if (s->o->recycle == LAUNCH_RECYCLE_AUTO && !in_place_pays(s, w, dp)) return 0;
    char path[1200], tmp[1300];
    snprintf(path, sizeof path, "%s/recycle", s->snapdir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return 0;
    fprintf(f, "%d %d\n", ++s->n_decided, d);
    if (fclose(f) != 0 || rename(tmp, path) != 0) return 0;
    s->noticed_at = s->restart_at = wall_now();
    s->ended_s = 0;
    s->pending = s->n_decided;
    for (int r = 0; r < R; r++) {
        if (r / P == d / P && w->local[r] && s->n_retired < LAUNCH_MAX_RANKS) s->retired[s->n_retired++] = w->pids[r];
        if (r != d) kill((pid_t)w->pids[r], SIGUSR1);
    }
    snprintf(w->who, sizeof w->who, "rank %d", d);
    w->noticed = "exit";
    log_failure(s, w);
    s->res.failures++;
    s->res.in_place++;
    if (s->reached + 1 > s->kill_upto) s->kill_upto = s->reached + 1;
    s->live_dp = dp - 1;
    s->live_np = P * s->live_dp;
    say(s, "going on in place: replica %d (ranks %d..%d) dropped, %d replica%s left", d / P, d / P * P, d / P * P + P - 1,
        s->live_dp, s->live_dp == 1 ? "" : "s");
    memset(w->pids, 0, sizeof w->pids);
    memset(w->steps, 0, sizeof w->steps);
    memset(w->local, 0, sizeof w->local);
    return 1;
}

/* The ranks' answer to the pending decision (train: <snapdir>/recycled "<n> <step> <replicas>"):
 * the step they went back to. */
static void in_place_answer(launch_state *s) {
    if (!s->pending) return;
    char path[1200];
    snprintf(path, sizeof path, "%s/recycled", s->snapdir);
    FILE *f = fopen(path, "r");
    if (!f) return;
    int n = 0, D2 = 0;
    long step = 0;
    int ok = fscanf(f, "%d %ld %d", &n, &step, &D2) == 3;
    fclose(f);
    if (!ok || n != s->pending) return;
    s->pending = 0;
    s->lost_steps = s->reached > step ? s->reached - step : 0;
    s->restored = s->reached = step;
    s->restart_at = wall_now();
    s->beat0_t = s->beat_t = 0;   /* the layout left's own step time from here */
    snprintf(s->from, sizeof s->from, "snapshot, in place");
    say(s, "the ranks left went back to step %ld in place (%d replica%s), %.2f s after the failure was noticed", step,
        D2, D2 == 1 ? "" : "s", s->restart_at - s->noticed_at);
}

/* --recycle: every rank (going on) is at the last step and gone (their processes ended). Under
 * --enable-recovery Open MPI's mpirun may then not end by itself across hosts: given
 * LAUNCH_END_GRACE_S, then ended (ranks that beat the last step but stay, held in MPI_Finalize by
 * a lost peer: LAUNCH_FINISH_S). 1 when the job is so over. */
static int in_place_over(launch_state *s, launch_watch *w, int R, pid_t pid) {
    if (!s->recycle || s->pending) return 0;
    int alive = 0, held = 0;
    for (int r = 0; r < R; r++) {
        if (w->pids[r] <= 0 || w->steps[r] < w->last) return 0;
        int up = kill((pid_t)w->pids[r], 0) == 0;
        alive |= up;
        held |= up && !ckpt_snap_finished(s->snapdir, r);   /* not yet marked: still writing */
    }
    if (!s->all_done_at) s->all_done_at = wall_now();   /* every rank beat the last step: since */
    double limit = held ? LAUNCH_FINISH_S : LAUNCH_END_GRACE_S;   /* marked but alive: held in MPI_Finalize */
    if (pid > 0 && wall_now() - s->all_done_at < limit) return 0;
    if (!pid && alive) return 0;
    if (pid > 0) end_attempt(s, pid, w);
    return 1;
}

/* Watches pid until it exits or a failure shows; fills w. */
static void watch(launch_state *s, pid_t pid, launch_watch *w) {
    int R = n_ranks(s), st;
    double start = wall_now(), last_adv = start;
    long seen = s->reached;
    memset(w, 0, sizeof *w);
    const char *steps = launch_flag(s->o->train_args, s->o->n_train_args, "--steps");
    w->last = steps ? atol(steps) : TRAIN_DEFAULT_STEPS;
    for (;;) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        double newest, oldest_t;
        int oldest_r;
        in_place_answer(s);
        read_beats(s, w, R, &newest, &oldest_r, &oldest_t);
        if (s->reached > seen) { seen = s->reached; last_adv = wall_now(); note_beat(s, s->live_np ? s->restart_at : start); }
        check_recovered(s);
        if (r == pid) {
            w->status = st;
            w->ok = (WIFEXITED(st) && WEXITSTATUS(st) == 0) || in_place_over(s, w, R, 0);
            if (s->recycle && !in_place_over(s, w, R, 0)) w->ok = 0;   /* mpirun --enable-recovery exits 0 anyway */
            int d = s->np ? dead_rank(s, w, R) : -1;   /* threads: every rank is the one process */
            w->noticed = "exit";
            if (d >= 0) snprintf(w->who, sizeof w->who, "rank %d", d);
            else if (WIFSIGNALED(st)) snprintf(w->who, sizeof w->who, "the job (signal %d)", WTERMSIG(st));
            else snprintf(w->who, sizeof w->who, "the job (exit status %d)", WEXITSTATUS(st));
            return;
        }
        int d = s->np ? dead_rank(s, w, R) : -1;
        if (d >= 0 && in_place(s, w, d)) {
            R = n_ranks(s);
            last_adv = wall_now();
            continue;
        }
        if (d >= 0) {
            snprintf(w->who, sizeof w->who, "rank %d", d);
            w->noticed = "exit";
            return;
        }
        if (in_place_over(s, w, R, pid)) {
            w->ok = 1;
            w->noticed = "exit";
            return;
        }
        double limit = newest > 0 ? s->o->timeout : s->o->timeout > LAUNCH_START_S ? s->o->timeout : LAUNCH_START_S;
        if (wall_now() - last_adv > limit) {
            w->noticed = oldest_r >= 0 && newest - oldest_t > s->o->timeout ? "heartbeat" : "timeout";
            if (oldest_r >= 0) snprintf(w->who, sizeof w->who, "rank %d", oldest_r);
            else snprintf(w->who, sizeof w->who, "the job (no rank reached a step)");
            return;
        }
        struct timespec ts = { 0, (long)(LAUNCH_POLL_S * 1e9) };
        nanosleep(&ts, NULL);
    }
}

/* Whether process pid descends from ancestor (its parents read from /proc, up to 8 levels). */
static int descends_from(long pid, long ancestor) {
    for (int up = 0; up < 8 && pid > 1; up++) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%ld/stat", pid);
        FILE *f = fopen(path, "r");
        if (!f) return 0;
        long ppid = 0;
        int ok = fscanf(f, "%*d (%*[^)]) %*c %ld", &ppid) == 1;
        fclose(f);
        if (!ok) return 0;
        if (ppid == ancestor) return 1;
        pid = ppid;
    }
    return 0;
}

/* The ranks dropped in place that still stand by (in MPI_Finalize, this host; mpirun's own
 * children or its daemons'): killed. Left alone, mpirun under --enable-recovery waits for them
 * when told to end (1 to 4 s across namespace hosts). */
static void kill_standby(const launch_state *s, pid_t launcher) {
    for (int i = 0; i < s->n_retired; i++)
        if (descends_from(s->retired[i], (long)launcher)) kill((pid_t)s->retired[i], SIGKILL);
}

/* Ends what is left of the attempt: the launcher by itself within the grace, else its group,
 * and every rank process this host knows of (those going on, and those dropped in place). */
static void end_attempt(launch_state *s, pid_t pid, const launch_watch *w) {
    int R = n_ranks(s), st;
    for (int r = 0; r < R; r++)
        if (w->pids[r] > 0 && w->local[r] && w->pids[r] != pid) kill((pid_t)w->pids[r], SIGKILL);
    kill_standby(s, pid);
    if (waitpid(pid, &st, WNOHANG) != 0) return;
    double t0 = wall_now();
    int sent_term = 0;
    while (waitpid(pid, &st, WNOHANG) == 0) {
        double el = wall_now() - t0;
        if (el > 0.1 && !sent_term) { kill(pid, SIGTERM); sent_term = 1; }   /* mpirun: end the daemons */
        if (el > LAUNCH_GRACE_S) { kill(-pid, SIGKILL); kill(pid, SIGKILL); waitpid(pid, &st, 0); return; }
        struct timespec ts = { 0, 20 * 1000 * 1000 };
        nanosleep(&ts, NULL);
    }
    kill(-pid, SIGKILL);   /* stragglers of the group */
}

static void log_failure(launch_state *s, launch_watch *w) {
    cJSON *f = cJSON_CreateObject();
    if (s->lost[0]) {   /* a host that no longer answers: it, more than the rank seen first */
        char who[sizeof w->who];
        snprintf(who, sizeof who, "%s", w->who);
        snprintf(w->who, sizeof w->who, "%.100s (%.50s there)", s->lost, who);
    }
    cJSON_AddStringToObject(f, "who", w->who);
    cJSON_AddStringToObject(f, "noticed", w->noticed);
    cJSON_AddNumberToObject(f, "attempt", s->res.restarts + 1);
    if (s->pending) cJSON_AddBoolToObject(f, "in_place", 1);
    char msg[300];
    snprintf(msg, sizeof msg, "%s (noticed by %s)", w->who, w->noticed);
    cJSON_AddStringToObject(f, "message", msg);
    event(s, "failure", s->reached, f);
    say(s, "failure: %s after step %ld (noticed by %s)", w->who, s->reached, w->noticed);
}

/* MPI with a hostfile: hosts that no longer answer are lost; a spare takes a lost host's place,
 * else the job shrinks to the replicas the hosts left can hold (the same stages, schedule,
 * microbatches and global batch). skip gets the old ranks of lost hosts (their memory is gone).
 * -1 when no layout fits. */
static int replan(launch_state *s, int *skip, int *n_skip) {
    *n_skip = 0;
    s->lost[0] = 0;
    if (!s->np || !s->n_hosts) return 0;
    int old[LAUNCH_MAX_RANKS];
    for (int w = 0; w < s->np && w < LAUNCH_MAX_RANKS; w++) old[w] = launch_host_of(s->hosts, s->n_hosts, w);
    int lost = 0;
    for (int i = 0; i < s->n_hosts; i++)
        if (s->hosts[i].used && !s->hosts[i].lost && !launch_host_alive(s->hosts[i].name)) {
            s->hosts[i].lost = 1;
            lost++;
            size_t n = strlen(s->lost);
            snprintf(s->lost + n, sizeof s->lost - n, "%shost %s", n ? ", " : "", s->hosts[i].name);
            say(s, "host %s does not answer: lost", s->hosts[i].name);
            for (int k = 0; k < s->n_hosts; k++)
                if (!s->hosts[k].used && !s->hosts[k].lost && launch_host_alive(s->hosts[k].name)) {
                    s->hosts[k].used = 1;
                    say(s, "spare host %s takes its place", s->hosts[k].name);
                    break;
                }
        }
    for (int w = 0; w < s->np && w < LAUNCH_MAX_RANKS; w++)
        if (old[w] >= 0 && s->hosts[old[w]].lost) skip[(*n_skip)++] = w;
    if (!lost) return 0;
    int slots = 0;
    for (int i = 0; i < s->n_hosts; i++)
        if (s->hosts[i].used && !s->hosts[i].lost) slots += s->hosts[i].slots;
    if (slots >= s->np) return 0;
    int dp = slots / s->P;
    if (dp < 1)
        return pt_seterr("launch: %d rank slot%s left on the hosts that answer, fewer than the %d stages: "
                         "no layout fits (add hosts or spares)", slots, slots == 1 ? "" : "s", s->P);
    say(s, "re-planned: %d stages x %d replicas on %d ranks (was %d replicas), the same global batch",
        s->P, dp, s->P * dp, s->dp);
    s->dp = dp;
    s->np = s->P * dp;
    return 0;
}

/* The newest step to restart from: the snapshots' (every chunk found) or the --save folder's
 * newest checkpoint, whichever is newer; s->restored, s->from. */
static int restore(launch_state *s, const int *skip, int n_skip) {
    ckpt_snap_found f;
    long disk = 0;
    char ck[1100] = "";
    const char *save = launch_flag(s->o->train_args, s->o->n_train_args, "--save");
    ckpt_manifest *man = pt_malloc(sizeof *man);
    if (save && ckpt_resolve(save, ck, sizeof ck) == 0 && ckpt_read_manifest(man, ck) == 0) disk = man->step;
    free(man);
    int rc = ckpt_snap_restore(s->snapdir, skip, n_skip, s->restore, &f);
    if (rc < 0) say(s, "snapshots unusable: %s", pt_err());
    if (rc == 1 && f.step >= disk) {
        s->restored = f.step;
        snprintf(s->resume, sizeof s->resume, "%s", s->restore);
        snprintf(s->from, sizeof s->from, "snapshot");
        if (f.n_bad) say(s, "%d damaged snapshot generation%s skipped", f.n_bad, f.n_bad == 1 ? "" : "s");
    } else if (disk > 0) {
        s->restored = disk;
        snprintf(s->resume, sizeof s->resume, "%s", ck);
        snprintf(s->from, sizeof s->from, "checkpoint");
    } else {
        s->restored = 0;
        snprintf(s->from, sizeof s->from, "the start");
    }
    s->lost_steps = s->reached - s->restored;
    if (s->reached + 1 > s->kill_upto) s->kill_upto = s->reached + 1;   /* the step that was running */
    ckpt_snap_reset(s->snapdir, s->restored);
    s->reached = s->restored;
    return 0;
}

/* The state from the options: folders, events, hosts, layout. */
static int state_init(launch_state *s, const launch_opts *o) {
    memset(s, 0, sizeof *s);
    s->o = o;
    const char *sd = o->snapshot_dir ? o->snapshot_dir : launch_flag(o->train_args, o->n_train_args, "--snapshot-dir");
    if (sd) snprintf(s->snapdir, sizeof s->snapdir, "%s", sd);
    else snprintf(s->snapdir, sizeof s->snapdir, "/dev/shm/pipetrain-launch-%ld", (long)getpid());
    snprintf(s->restore, sizeof s->restore, "%s/restore", s->snapdir);
    snprintf(s->hostfile, sizeof s->hostfile, "%s/hostfile", s->snapdir);
    if (pt_make_parents(s->restore) < 0) return -1;
    const char *m = launch_flag(o->train_args, o->n_train_args, "--metrics");
    const char *save = launch_flag(o->train_args, o->n_train_args, "--save");
    char mp[4096];
    if (m || save) {
        snprintf(mp, sizeof mp, m ? "%s" : "%s/metrics.jsonl", m ? m : save);
        report_events_path(mp, s->events, sizeof s->events);
    }
    s->np = o->np;
    const char *st = launch_flag(o->train_args, o->n_train_args, "--stages");
    const char *dp = launch_flag(o->train_args, o->n_train_args, "--dp");
    s->P = st ? atoi(st) : 1;
    s->dp = dp ? atoi(dp) : 1;
    if (o->hostfile && launch_hosts_read(o->hostfile, o->spares, s->hosts, &s->n_hosts) < 0) return -1;
    if (!launch_flag(o->train_args, o->n_train_args, "--snapshot-every"))
        say(s, "note: no --snapshot-every in the train flags: a restart goes back to the newest --save "
            "checkpoint, or the start");
    return 0;
}

/* Whether this attempt can go on in place (s->recycle), said when it changes. */
static void recycle_choose(launch_state *s) {
    const launch_opts *o = s->o;
    char why[200] = "--no-recycle";
    int was = s->recycle;
    s->recycle = o->recycle != LAUNCH_RECYCLE_OFF && launch_recycle_able(o, s->dp, why, sizeof why);
    if (o->recycle == LAUNCH_RECYCLE_ON && !s->recycle && (s->dp >= 2 || !s->res.restarts))
        s->recycle = 1;   /* asked for: train refuses what cannot work, saying why (after a shrink to one replica: off) */
    if (s->recycle == was && s->res.restarts) return;
    if (s->recycle) say(s, "in place: a replica that loses a rank is dropped and the others go on%s (--no-recycle: "
                        "restart instead)", o->recycle == LAUNCH_RECYCLE_AUTO ? " where that costs less than a restart" : "");
    else if (o->np) say(s, "no going on in place: %s", why);
}

/* A job that ended by itself, with no rank lost and no step made: it refused its flags. */
static int refused(const launch_state *s, const launch_watch *w, long before) {
    return !strcmp(w->noticed, "exit") && WIFEXITED(w->status) && (WEXITSTATUS(w->status) != 0 || s->recycle) &&
           strncmp(w->who, "rank", 4) && s->reached == before;
}

int launch_run(const launch_opts *o, launch_result *res) {
    launch_state *s = pt_calloc(1, sizeof *s);
    launch_watch *w = pt_calloc(1, sizeof *w);
    int rc = state_init(s, o), skip[LAUNCH_MAX_RANKS], n_skip;
    if (rc == 0) ckpt_snap_reset(s->snapdir, 0);   /* another job's heartbeats and generations */
    while (rc == 0) {
        long before = s->reached;
        s->restart_at = wall_now();
        s->live_np = s->live_dp = s->n_decided = s->pending = s->n_retired = 0;   /* the whole layout again */
        s->all_done_at = s->beat0_t = s->beat_t = 0;
        recycle_choose(s);
        char rp[1200];
        snprintf(rp, sizeof rp, "%s/recycle", s->snapdir);
        unlink(rp);
        snprintf(rp, sizeof rp, "%s/recycled", s->snapdir);
        unlink(rp);
        pid_t pid = attempt_start(s);
        if (pid < 0) { rc = -1; break; }
        watch(s, pid, w);
        s->res.last_step = s->reached;
        if (w->ok) {
            say(s, "the job ended at step %ld after %d restart%s and %d in place", s->reached, s->res.restarts,
                s->res.restarts == 1 ? "" : "s", s->res.in_place);
            break;
        }
        s->noticed_at = wall_now();
        end_attempt(s, pid, w);
        s->ended_s = wall_now() - s->noticed_at;
        s->res.failures++;
        int planned = replan(s, skip, &n_skip);   /* probes the hosts: the failure names a lost one */
        log_failure(s, w);
        if (refused(s, w, before)) rc = pt_seterr("launch: the job stopped before its first step (%s): see its error above", w->who);
        else if (s->res.restarts >= o->max_restarts)
            rc = pt_seterr("launch: %s failed after %d restart%s (--max-restarts %d)", w->who, s->res.restarts,
                           s->res.restarts == 1 ? "" : "s", o->max_restarts);
        if (rc < 0) break;
        if (planned < 0 || restore(s, skip, n_skip) < 0) { rc = -1; break; }
        s->res.restarts++;
        say(s, "restart %d from %s (step %ld)", s->res.restarts, s->from, s->restored);
    }
    if (res) *res = s->res;
    free(w);
    free(s);
    return rc;
}
