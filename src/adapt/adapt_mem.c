/* --adapt's memory limit (docs/stragglers.md "The memory limit"): the microbatches of activations
 * a stage may hold under the adaptive schedules. --mem-limit N is N; --mem-limit schedule the
 * starting schedule's peak; by default what the ranks can hold: each host's available memory
 * (/proc/meminfo MemAvailable) shared by the ranks on it (threads of one process share it; MPI
 * ranks on one host by hostname), or with --cluster each rank's device memory (world rank w on
 * the file's device w), less each rank's own state (run_job_mem: parameters,
 * gradients, AdamW moments, buffers), in microbatches of that rank's activations, through the
 * planner's memory model (plan_mem_held_max), the smallest over the ranks, at most M (no stage
 * holds more) and at least the starting schedule's peak (it runs already). Every rank computes
 * the same number (MPI: one all-reduce). Not here: the generator that honours it (sched/). */
#include "adapt/adapt_int.h"
#include "plan/plan.h"
#include "util/pt.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define GIB (1024.0 * 1024.0 * 1024.0)

/* "21.3 GiB", or under 1 GiB "45.0 MiB", into buf. Returns buf. */
static char *mem_text(double bytes, char *buf, size_t n) {
    if (bytes >= GIB) snprintf(buf, n, "%.1f GiB", bytes / GIB);
    else snprintf(buf, n, "%.1f MiB", bytes / (1024.0 * 1024.0));
    return buf;
}

int adapt_parse_mem_limit(const char *text, int *out) {
    if (!strcmp(text, "schedule")) return *out = ADAPT_MEM_LIMIT_SCHEDULE, 0;
    char *end;
    long n = strtol(text, &end, 10);
    if (end != text && !*end && n == 0)
        return pt_seterr("--mem-limit 0: a stage holds at least 1 microbatch (give N >= 1, 'schedule' for the "
                         "starting schedule's peak, or leave it out for what memory holds)");
    if (end == text || *end || n < 1 || n > 1000000)
        return pt_seterr("--mem-limit '%s': give microbatches of activations a stage may hold (N >= 1), "
                         "'schedule' (the starting schedule's peak), or leave it out (what memory holds)", text);
    *out = (int)n;
    return 0;
}

/* Bytes of MemAvailable in the meminfo file (PIPETRAIN_MEMINFO, a test hook, else /proc/meminfo),
 * or -1 when it has none. */
static double mem_available(void) {
    const char *path = getenv("PIPETRAIN_MEMINFO");
    FILE *f = fopen(path && *path ? path : "/proc/meminfo", "r");
    char line[256];
    double kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %lf kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb >= 0 ? kb * 1024.0 : -1;
}

/* This host's name as a number (FNV-1a, 32 bits: exact in a double). */
static double host_id(void) {
    char name[256] = "";
    gethostname(name, sizeof name - 1);
    unsigned h = 2166136261u;
    for (const char *c = name; *c; c++) h = (h ^ (unsigned char)*c) * 16777619u;
    return (double)h;
}

/* Per world rank w: have[w] its host's available bytes, host[w] its host (world NULL, threads:
 * this process's for all). MPI: each rank fills its slot, one all-reduce. 0, or -1 with the error. */
static int hosts_read(comm *world, int R, double *have, double *host) {
    double a = mem_available(), h = host_id();
    for (int w = 0; w < R; w++) have[w] = world ? 0 : a, host[w] = world ? 0 : h;
    if (!world) return 0;
    have[world->rank] = a, host[world->rank] = h;
    double *v = pt_malloc(sizeof *v * (size_t)(2 * R));
    memcpy(v, have, sizeof *v * (size_t)R), memcpy(v + R, host, sizeof *v * (size_t)R);
    int rc = comm_allreduce_f64(world, v, (size_t)(2 * R));
    memcpy(have, v, sizeof *v * (size_t)R), memcpy(host, v + R, sizeof *v * (size_t)R);
    free(v);
    return rc < 0 ? pt_adderr("--adapt: sharing each host's memory: ") : 0;
}

/* --cluster: per world rank w, device w's memory (file order) into have[R] (each rank its own
 * device: host[w] is its node, and the caller divides by 1); the cluster's line into why. 0, or
 * -1 naming the file. */
static int cluster_read(const char *path, int R, double *have, double *host, char *why, size_t n) {
    plan_cluster k;
    if (plan_cluster_load(&k, path) < 0) return pt_adderr("--cluster: ");
    if (k.n_devices < R) {
        pt_seterr("--cluster %s: %d devices for the run's %d ranks (world rank w is device w, in the file's order)",
                  path, k.n_devices, R);
        plan_cluster_free(&k);
        return -1;
    }
    double least = INFINITY;
    int nodes = 0;
    for (int w = 0; w < R; w++) {
        have[w] = k.dev[w].memory, host[w] = w, least = fmin(least, have[w]);
        nodes += w == 0 || k.dev[w].node != k.dev[w - 1].node;
    }
    char m[32];
    snprintf(why, n, "cluster %s: %s device memory / %d node%s x %d rank%s, a device each", path,
             mem_text(least, m, sizeof m), nodes, nodes == 1 ? "" : "s", R, R == 1 ? "" : "s");
    plan_cluster_free(&k);
    return 0;
}

/* The limit from memory into A (mem_limit, mem_why); peak: the starting schedule's. */
static int limit_from_memory(adapt_state *A, int peak) {
    run_job *job = A->h.job(A->h.user);
    int R = run_layout_ranks(A->h.layout(A->h.user)), lim = A->M, hosts = 0, most = 0, unknown = 0;
    double *have = pt_malloc(sizeof *have * (size_t)(2 * R)), *host = have + R, least = INFINITY;
    char cl[sizeof A->mem_why] = "", mt[32];
    if (A->o.cluster ? cluster_read(A->o.cluster, R, have, host, cl, sizeof cl) < 0 : hosts_read(A->o.world, R, have, host) < 0) {
        free(have);
        return -1;
    }
    A->mem_R = R;
    A->mem_fixed = pt_malloc(sizeof *A->mem_fixed * (size_t)(3 * R));
    A->mem_act = A->mem_fixed + R, A->mem_have = A->mem_fixed + 2 * R;
    for (int w = 0; w < R; w++) {
        int on = 0, first = 1;
        for (int x = 0; x < R; x++) on += host[x] == host[w], first &= !(x < w && host[x] == host[w]);
        hosts += first, most = on > most ? on : most;
        unknown |= have[w] < 0;   /* no MemAvailable on w's host */
        least = fmin(least, have[w]);
        run_mem m;
        run_job_mem(job, w, &m);
        plan_mem_model mm = { .fixed = m.params + m.grads + m.optim + m.acts - m.act_sets, .act = m.act_mb };
        A->mem_fixed[w] = mm.fixed, A->mem_act[w] = mm.act, A->mem_have[w] = have[w] / on;
        int h = plan_mem_held_max(&mm, have[w] / on, A->M);
        lim = h < lim ? h : lim;
    }
    free(have);
    if (unknown) {
        A->mem_limit = peak;
        snprintf(A->mem_why, sizeof A->mem_why, "the starting schedule's peak: this machine says no MemAvailable");
        return 0;
    }
    size_t at = cl[0] ? (size_t)snprintf(A->mem_why, sizeof A->mem_why, "%s", cl)
              : (size_t)snprintf(A->mem_why, sizeof A->mem_why, "memory: %s available / %d host%s x %d rank%s",
                                 mem_text(least, mt, sizeof mt), hosts, hosts == 1 ? "" : "s", most, most == 1 ? "" : "s");
    at = at < sizeof A->mem_why ? at : sizeof A->mem_why - 1;
    if (lim < peak)
        snprintf(A->mem_why + at, sizeof A->mem_why - at, ", %d microbatches: less than the starting schedule "
                 "holds, so its peak", lim < 0 ? 0 : lim);
    else if (lim == A->M)
        snprintf(A->mem_why + at, sizeof A->mem_why - at, ", capped at M = %d", A->M);
    A->mem_limit = lim < peak ? peak : lim;
    return 0;
}

int adapt_mem_limit(adapt_state *A, int peak) {
    int o = A->o.mem_limit;
    A->mem_flag = o > 0;
    if (o > 0) {
        A->mem_limit = o;
        snprintf(A->mem_why, sizeof A->mem_why, "--mem-limit %d", o);
        return 0;
    }
    if (o == ADAPT_MEM_LIMIT_SCHEDULE) {
        A->mem_limit = peak;
        snprintf(A->mem_why, sizeof A->mem_why, "--mem-limit schedule: the starting schedule's peak");
        return 0;
    }
    if (o != 0) return pt_seterr("--mem-limit must be >= 1 or 'schedule' (got %d)", o);
    return limit_from_memory(A, peak);
}
