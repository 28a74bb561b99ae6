/* A side program's processes: CPU received in slots, placement on the rank's core
 * (cmd_group.h). */
#include "harvest/cmd_group.h"
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

void cmd_group_init(cmd_group *g, pid_t leader) {
    memset(g, 0, sizeof *g);
    g->leader = leader;
    g->procs[0] = g->tids[0] = leader;
    g->n_procs = g->n_tids = 1;
    g->placed = -1;
    const char *pin = getenv("PT_SIDE_PIN");
    g->pin = !(pin && !strcmp(pin, "0"));
    if (sched_getaffinity(0, sizeof g->allowed, &g->allowed) != 0 || CPU_COUNT(&g->allowed) < 2) g->pin = 0;
}

/* A process's CPU clock (all its threads), seconds; -1 when it is gone. */
static double cg_proc_cpu(pid_t pid) {
    clockid_t id;
    struct timespec ts;
    if (clock_getcpuclockid(pid, &id) != 0 || clock_gettime(id, &ts) != 0) return -1;
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void cmd_group_mark(cmd_group *g) {
    for (int k = 0; k < g->n_procs; k++) g->cpu0[k] = cg_proc_cpu(g->procs[k]);
}

/* A process gone meanwhile counts up to its last reading (the rest comes with the reaped time). */
double cmd_group_take(cmd_group *g) {
    double s = g->carry_s;
    g->carry_s = 0;
    for (int k = 0; k < g->n_procs; k++) {
        double now = g->cpu0[k] >= 0 ? cg_proc_cpu(g->procs[k]) : -1;
        if (now > g->cpu0[k]) s += now - g->cpu0[k], g->seen[k] = now;
    }
    return s;
}

/* A task at SCHED_IDLE waits for a core nothing else wants, and the scheduler rarely moves it to
 * the one that just fell idle: placed there, it runs as soon as the rank sleeps, not queued
 * behind the other rank. One call per thread per change of core (they keep it while stopped). */
void cmd_group_place(cmd_group *g) {
    int cpu = sched_getcpu();
    if (!g->pin || cpu < 0 || cpu == g->placed || !CPU_ISSET(cpu, &g->allowed)) return;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    for (int k = 0; k < g->n_tids; k++) sched_setaffinity(g->tids[k], sizeof one, &one);
    g->placed = cpu;
}

/* The threads of process pid into g->tids (/proc/PID/task). */
static void cg_list_threads(cmd_group *g, pid_t pid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    struct dirent *de;
    while (d && (de = readdir(d)) && g->n_tids < CMD_MAX_PROCS)
        if (de->d_name[0] != '.') g->tids[g->n_tids++] = (pid_t)atoi(de->d_name);
    if (d) closedir(d);
}

/* Processes new since the last look: all their CPU so far was received in slots (the group runs
 * only there); processes gone: what was counted of them. */
static void cg_account(cmd_group *g, const pid_t *old, const double *seen, int n_old) {
    for (int k = 0; k < g->n_procs; k++) {
        int j = 0;
        while (j < n_old && old[j] != g->procs[k]) j++;
        double now = cg_proc_cpu(g->procs[k]);
        g->seen[k] = j < n_old ? seen[j] : now > 0 ? now : 0;
        if (j == n_old && now > 0) g->carry_s += now;
    }
    for (int j = 0; j < n_old; j++) {
        int k = 0;
        while (k < g->n_procs && g->procs[k] != old[j]) k++;
        if (k == g->n_procs) g->vanished_s += seen[j];
    }
}

/* The leader's children that ended (reaped by it): their CPU, less what was counted of them. */
static void cg_reaped(cmd_group *g) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)g->leader);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    unsigned long long cut = 0, cst = 0;
    if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %llu %llu", &cut, &cst) != 2)
        return;
    double s = (double)(cut + cst) / (double)sysconf(_SC_CLK_TCK), add = s - g->reaped_s;
    if (add <= 0) return;
    g->reaped_s = s;
    g->carry_s += add > g->vanished_s ? add - g->vanished_s : 0;
    g->vanished_s = add > g->vanished_s ? 0 : g->vanished_s - add;
}

void cmd_group_refresh(cmd_group *g) {
    pid_t old_tids[CMD_MAX_PROCS], old_procs[CMD_MAX_PROCS];
    double old_seen[CMD_MAX_PROCS];
    int n_old_tids = g->n_tids, n_old_procs = g->n_procs;
    memcpy(old_tids, g->tids, sizeof old_tids);
    memcpy(old_procs, g->procs, sizeof old_procs);
    memcpy(old_seen, g->seen, sizeof old_seen);
    g->n_procs = g->n_tids = 0;
    g->procs[g->n_procs++] = g->leader;
    for (int k = 0; k < g->n_procs; k++) {
        char path[96];
        snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)g->procs[k], (int)g->procs[k]);
        FILE *f = fopen(path, "r");
        int child;
        while (f && g->n_procs < CMD_MAX_PROCS && fscanf(f, "%d", &child) == 1) g->procs[g->n_procs++] = child;
        if (f) fclose(f);
        cg_list_threads(g, g->procs[k]);
    }
    if (n_old_tids != g->n_tids || memcmp(old_tids, g->tids, sizeof(pid_t) * (size_t)n_old_tids)) g->placed = -1;
    cg_account(g, old_procs, old_seen, n_old_procs);
    cg_reaped(g);
}
