/* A program as a side task (train --side-command "[RANK:]CMD"): CMD runs through /bin/sh -c in
 * its own process group at the lowest priority (nice 19, SCHED_IDLE), stopped (SIGSTOP) except
 * inside the bubbles of its rank: a step places the group on the core the rank's thread runs on
 * (the core the rank is about to leave idle), resumes it (SIGCONT), sleeps in the transport's
 * wait until the awaited message (or the slot's deadline), and stops it again; the CPU the
 * group's processes received in between (their CPU clocks, and what the leader reaped from
 * children that ended) is the step's cpu_s. Between training steps: its exit is reaped and reported (exit status or
 * signal), and its resident memory (the process and its descendants) is checked against
 * --side-mem: over it, the group stays stopped and the task fails (reported). Freeing the task
 * kills the group (SIGKILL) and reaps it (this process is a child subreaper: CMD's orphans come
 * back to it); so do SIGINT, SIGTERM, SIGHUP and SIGQUIT to this process (handlers installed while
 * commands live, when nothing else handles them), and the shell dies with its parent
 * (PR_SET_PDEATHSIG). A process that leaves the group (setsid) is beyond reach. Not here: when bubbles are (harvest.c). Linux only (/proc, prctl). */
#include "harvest/cmd_group.h"
#include "harvest/harvest.h"
#include "util/pt.h"
#include <ctype.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CMD_POLL_S 50e-6          /* the rank checks for its message this often while CMD runs */
#define CMD_MEM_EVERY_S 0.02      /* resident memory is read at most this often (at boundaries) */
#define CMD_MAX_LIVE 64           /* process groups the signal handlers know of */
#define CMD_NICE 19               /* the lowest priority: the main job's threads come first */

typedef struct {
    char *cmd;                    /* owned */
    pid_t pid;                    /* the shell: leader of its own process group; 0 before init */
    int alive;                    /* not yet reaped */
    int execd;                    /* the shell runs (no longer a copy of this process) */
    int slot;                     /* its entry in cmd_live, -1: none */
    double mem_cap;               /* bytes (0: none) */
    double last_check, peak_rss;
    cmd_group g;                  /* its processes' CPU and placement (cmd_group.h) */
} cmd_task;

/* ---- killing what is left when this process dies ------------------------------------------- */

static volatile sig_atomic_t cmd_live[CMD_MAX_LIVE];   /* process groups to kill, 0: free */
static const int cmd_sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT };
#define CMD_N_SIGS ((int)(sizeof cmd_sigs / sizeof cmd_sigs[0]))
static struct sigaction cmd_old[CMD_N_SIGS];
static int cmd_installed[CMD_N_SIGS], cmd_n_live;

/* Kills every live group, then the signal takes its default course (SA_RESETHAND; re-raised). */
static void cmd_on_signal(int sig) {
    for (int i = 0; i < CMD_MAX_LIVE; i++)
        if (cmd_live[i] > 0) kill(-(pid_t)cmd_live[i], SIGKILL);
    raise(sig);
}

static void cmd_handlers(int on) {
    for (int k = 0; k < CMD_N_SIGS; k++) {
        if (on && !cmd_installed[k]) {
            struct sigaction cur;
            sigaction(cmd_sigs[k], NULL, &cur);
            if (cur.sa_handler != SIG_DFL) continue;   /* someone else's: leave it */
            struct sigaction sa = { .sa_handler = cmd_on_signal, .sa_flags = SA_RESETHAND };
            sigemptyset(&sa.sa_mask);
            cmd_installed[k] = sigaction(cmd_sigs[k], &sa, &cmd_old[k]) == 0;
        } else if (!on && cmd_installed[k]) {
            sigaction(cmd_sigs[k], &cmd_old[k], NULL);
            cmd_installed[k] = 0;
        }
    }
}

/* Every member of group pgid that is this process's child (with the subreaper on: all that
 * were left behind) is reaped; block: wait for them to die (after a SIGKILL). */
static void cmd_reap_group(pid_t pgid, int block) {
    while (waitpid(-pgid, NULL, block ? 0 : WNOHANG) > 0) {}
}

static int cmd_register(pid_t pgid) {
    for (int i = 0; i < CMD_MAX_LIVE; i++)
        if (cmd_live[i] == 0) {
            cmd_live[i] = pgid;
            if (cmd_n_live++ == 0) cmd_handlers(1);
            return i;
        }
    return -1;
}

static void cmd_unregister(cmd_task *c) {
    if (c->slot < 0) return;
    cmd_live[c->slot] = 0;
    c->slot = -1;
    if (--cmd_n_live == 0) cmd_handlers(0);
}

/* ---- checking the command before anything runs --------------------------------------------- */

/* Words sh runs itself (or that start compound commands): nothing to find on PATH. */
static int cmd_is_builtin(const char *w) {
    static const char *const b[] = { "if", "for", "while", "until", "case", "{", "!", "exec", "eval",
        ".", ":", "true", "false", "cd", "export", "set", "trap", "ulimit", "umask", "command",
        "read", "echo", "printf", "test", "[", "wait", "kill", "sleep", "exit", NULL };
    for (int i = 0; b[i]; i++)
        if (!strcmp(w, b[i])) return 1;
    return 0;
}

/* The program `word` names: a path that must be executable, or a name found on PATH. */
static int cmd_findable(const char *word) {
    if (strchr(word, '/')) return access(word, X_OK) == 0;
    const char *path = getenv("PATH");
    char buf[4096];
    for (const char *p = path ? path : "/usr/bin:/bin"; p && *p;) {
        const char *end = strchr(p, ':');
        int n = end ? (int)(end - p) : (int)strlen(p);
        snprintf(buf, sizeof buf, "%.*s/%s", n, n ? p : ".", word);
        if (access(buf, X_OK) == 0) return 1;
        p = end ? end + 1 : NULL;
    }
    return 0;
}

/* The first word of CMD, when it is a plain word (no quotes, expansions or redirections), must
 * be a program sh can start: caught before training, naming the flag and the program. */
static int cmd_check(const char *cmd, const char *flag) {
    const char *p = cmd;
    char word[256];
    for (;;) {
        while (isspace((unsigned char)*p)) p++;
        int n = 0;
        while (p[n] && !isspace((unsigned char)p[n]) && !strchr(";&|<>()", p[n])) n++;
        if (n == 0) return *p ? 0 : pt_seterr("%s '%s': the command is empty", flag, cmd);
        snprintf(word, sizeof word, "%.*s", n < 255 ? n : 255, p);
        p += n;
        if (!strchr(word, '=')) break;                 /* VAR=value: the next word runs */
    }
    if (strpbrk(word, "\"'$`\\*?[~") || cmd_is_builtin(word) || cmd_findable(word)) return 0;
    return pt_seterr("%s '%s': cannot start %s: %s", flag, cmd, word,
                     strchr(word, '/') ? "no such executable file" : "not found on PATH");
}

/* ---- the task ---------------------------------------------------------------------------------- */

/* Starts CMD stopped: the child makes its own group, asks to die with this process, stops itself
 * before exec, and the parent waits until it has stopped. */
static int cmd_init(harvest_task *t) {
    cmd_task *c = t->self;
    pid_t parent = getpid();
    prctl(PR_SET_CHILD_SUBREAPER, 1);    /* CMD's orphans become ours to kill and reap */
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return pt_seterr("--side-command '%s': fork: %s", c->cmd, strerror(errno));
    if (pid == 0) {
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        setpriority(PRIO_PROCESS, 0, CMD_NICE);   /* a rank thread waking up preempts it at once */
        struct sched_param idle = { 0 };          /* and it takes only a core nothing else wants */
        sched_setscheduler(0, SCHED_IDLE, &idle);
        if (getppid() != parent) _exit(127);
        raise(SIGSTOP);
        execl("/bin/sh", "sh", "-c", c->cmd, (char *)NULL);
        _exit(127);
    }
    setpgid(pid, pid);
    c->pid = pid;
    c->alive = 1;
    cmd_group_init(&c->g, pid);
    c->slot = cmd_register(pid);
    int st;
    if (waitpid(pid, &st, WUNTRACED) != pid || !WIFSTOPPED(st)) {
        c->alive = 0;
        return pt_seterr("--side-command '%s': the process did not start", c->cmd);
    }
    return 0;
}

/* Until the deadline or the arrival, for a caller without slot.block: short naps. */
static void cmd_nap_until(const harvest_slot *sl) {
    prctl(PR_SET_TIMERSLACK, 1000UL);
    struct timespec poll = { 0, (long)(CMD_POLL_S * 1e9) };
    for (;;) {
        double left = sl->deadline - pt_now();
        if (left <= 0 || (sl->arrived && sl->arrived(sl->arg) != 0)) break;
        if (left < CMD_POLL_S) poll.tv_nsec = (long)(left * 1e9);
        nanosleep(&poll, NULL);
    }
}

static int cmd_step(harvest_task *t, const harvest_slot *sl) {
    cmd_task *c = t->self;
    if (!c->alive) return HARVEST_IDLE;
    cmd_group_place(&c->g);
    cmd_group_mark(&c->g);
    kill(-c->pid, SIGCONT);
    if (sl->block) sl->block(sl->arg, sl->deadline);   /* its failure: the harvester's to see */
    else cmd_nap_until(sl);
    kill(-c->pid, SIGSTOP);
    double cpu = cmd_group_take(&c->g);
    if (sl->cpu_s) *sl->cpu_s = cpu;
    return HARVEST_MORE;
}

/* Resident bytes of pid and its descendants (/proc; the main thread's children list). */
static double cmd_rss(pid_t pid, int depth) {
    char path[96];
    long pages = 0;
    snprintf(path, sizeof path, "/proc/%d/statm", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    long size = 0;
    if (fscanf(f, "%ld %ld", &size, &pages) != 2) pages = 0;
    fclose(f);
    double bytes = (double)pages * (double)sysconf(_SC_PAGESIZE);
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)pid, (int)pid);
    if (depth > 16 || !(f = fopen(path, "r"))) return bytes;
    int child;
    while (fscanf(f, "%d", &child) == 1) bytes += cmd_rss(child, depth + 1);
    fclose(f);
    return bytes;
}

/* The child has exec'd the shell: before, it is a stopped copy of this process, whose resident
 * pages are this process's (copy-on-write), not the command's. */
static int cmd_execd(pid_t pid) {
    char path[64], me[4096], it[4096];
    snprintf(path, sizeof path, "/proc/%d/exe", (int)pid);
    ssize_t a = readlink("/proc/self/exe", me, sizeof me - 1), b = readlink(path, it, sizeof it - 1);
    return a > 0 && b > 0 && (a != b || memcmp(me, it, (size_t)a));
}

/* Its exit (reaped, reported), and its memory against the cap. */
static int cmd_done(harvest_task *t) {
    cmd_task *c = t->self;
    int st;
    if (!c->alive) return 1;
    if (c->execd || (c->execd = cmd_execd(c->pid))) cmd_group_refresh(&c->g);
    if (waitpid(c->pid, &st, WNOHANG) == c->pid) {
        c->alive = 0;
        kill(-c->pid, SIGKILL);          /* what it left behind in its group */
        cmd_reap_group(c->pid, 1);
        cmd_unregister(c);
        if (WIFEXITED(st)) snprintf(t->report, sizeof t->report, "exit status %d", WEXITSTATUS(st));
        else snprintf(t->report, sizeof t->report, "killed by signal %d", WTERMSIG(st));
        return 1;
    }
    double now = pt_now();
    if (c->mem_cap <= 0 || now - c->last_check < CMD_MEM_EVERY_S) return 0;
    c->last_check = now;
    if (!c->execd) return 0;
    double rss = cmd_rss(c->pid, 0);
    if (rss > c->peak_rss) c->peak_rss = rss;
    if (rss <= c->mem_cap) return 0;
    return pt_seterr("resident memory %.1f MB is over --side-mem %.1f MB: stopped for good",
                     rss / 1e6, c->mem_cap / 1e6);
}

static void cmd_free(harvest_task *t) {
    if (!t) return;
    cmd_task *c = t->self;
    if (c && c->pid > 0) {
        kill(-c->pid, SIGKILL);
        if (c->alive) waitpid(c->pid, NULL, 0);
        cmd_reap_group(c->pid, 1);        /* its orphans came to us (the subreaper) */
        cmd_unregister(c);
    }
    if (c) free(c->cmd);
    free(c);
    free(t);
}

static const harvest_task_vt cmd_vt = {
    .kind = "command", .until_deadline = true, .init = cmd_init, .step = cmd_step,
    .done = cmd_done, .free = cmd_free,
};

/* "[RANK:]CMD": RANK pins it to that world rank. */
int harvest_command_create(harvest_task **out, const char *args, const harvest_env *env) {
    static int n_made;
    int rank = -1, used = 0;
    const char *flag = env->flag ? env->flag : "--side-command";
    *out = NULL;
    if (sscanf(args, "%d:%n", &rank, &used) >= 1 && used > 0 && isdigit((unsigned char)args[0]))
        args += used;
    else rank = -1;
    if (rank >= env->R)
        return pt_seterr("%s '%s': rank %d is not in the job (its ranks are 0..%d)", flag, args,
                         rank, env->R - 1);
    if (cmd_check(args, flag) < 0) return -1;
    harvest_task *t = pt_calloc(1, sizeof *t);
    cmd_task *c = pt_calloc(1, sizeof *c);
    c->cmd = pt_strdup(args);
    c->slot = -1;
    c->mem_cap = env->mem_cap;
    t->vt = &cmd_vt;
    t->self = c;
    t->rank = rank;
    t->mem_bytes = env->mem_cap;
    snprintf(t->name, sizeof t->name, "command %d (%.60s)", n_made++, args);
    *out = t;
    return 0;
}
