/* train --mem-limit SIZE: the per-rank byte limit, predicted before the first step and enforced
 * by RLIMIT_DATA (train_memlimit.h). Not here: --adapt's microbatch limit (adapt/adapt_mem.c). */
#include "train/train_memlimit.h"
#include "plan/plan.h"
#include "train/trainer_int.h"
#include "util/pt.h"
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>

#define MIB (1024.0 * 1024.0)

int train_memlimit_is_size(const char *text) {
    if (!text) return 0;
    char *end;
    strtod(text, &end);
    size_t n = strlen(end);
    if (end == text || !n || toupper((unsigned char)end[n - 1]) != 'B') return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalpha((unsigned char)end[i])) return 0;
    return 1;   /* a number and letters ending in B: a size, its unit good or bad */
}

int train_memlimit_parse(const char *text, double *bytes) {
    static const struct { const char *unit; double scale; } units[] = {
        { "B", 1 }, { "KiB", 1024.0 }, { "MiB", MIB }, { "GiB", MIB * 1024 }, { "TiB", MIB * MIB },
        { "kB", 1e3 }, { "MB", 1e6 }, { "GB", 1e9 }, { "TB", 1e12 },
    };
    char *end;
    double v = strtod(text, &end);
    if (end == text || !isfinite(v))
        return pt_seterr("--mem-limit '%s': give a size with a unit, like 512MiB, 2GiB or 1.5GB (or a bare N: "
                         "--adapt's microbatches)", text);
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcasecmp(end, units[i].unit)) continue;
        if (!(v > 0))
            return pt_seterr("--mem-limit '%s': a memory limit must be more than 0 bytes", text);
        *bytes = v * units[i].scale;
        if (*bytes < 1) return pt_seterr("--mem-limit '%s': under one byte", text);
        return 0;
    }
    return pt_seterr("--mem-limit '%s': unknown unit '%s' (give B, KiB, MiB, GiB, TiB, kB, MB, GB or TB, "
                     "like 512MiB, 2GiB, 1.5GB)", text, end);
}

/* Rank w's predicted peak: what it holds whatever the schedule, plus its activation sets at the
 * schedule's peak in flight (plan_mem_need with held = act_sets / act_mb). */
static double rank_need(const run_mem *m) {
    double sets = m->act_sets > 0 ? m->act_sets : 0;
    plan_mem_model mm = { .fixed = m->params + m->grads + m->optim + m->acts - sets, .act = m->act_mb };
    double held = m->act_mb > 0 ? sets / m->act_mb : 0;
    if (!(m->act_mb > 0)) mm.fixed += sets;
    return plan_mem_need(&mm, held);
}

/* "try --seq-chunks 4 or --balance-memory, more --stages, or a limit of at least X" into buf. */
static void what_fits(const train_opts *o, double most, char *buf, size_t n) {
    char sc[48] = "", bm[32] = "";
    if (o->ro.seq_chunks <= 1 && o->seq % 4 == 0) snprintf(sc, sizeof sc, "--seq-chunks 4 or ");
    if (!o->ro.balance_memory) snprintf(bm, sizeof bm, "--balance-memory, ");
    snprintf(buf, n, "try %s%smore --stages, or --mem-limit of at least %.0fMiB", sc, bm, ceil(most / MIB));
}

/* This process's data segment now (VmData of /proc/self/status), bytes, or -1. */
static double data_now(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmData: %lf kB", &kb) == 1) break;
    if (f) fclose(f);
    return kb >= 0 ? kb * 1024 : -1;
}

/* RLIMIT_DATA = ranks x limit + allowance, unless the process holds more already. */
static int set_rlimit(double limit, int ranks) {
    double cap = ranks * limit + TRAIN_MEMLIMIT_ALLOWANCE, now = data_now();
    if (now > cap)
        return pt_seterr("--mem-limit: this process holds %.0f MiB of data already, over %d x %.0f MiB + %.0f MiB "
                         "allowance for the program and runtime: give a larger limit", now / MIB, ranks, limit / MIB,
                         TRAIN_MEMLIMIT_ALLOWANCE / MIB);
    struct rlimit rl = { .rlim_cur = (rlim_t)cap, .rlim_max = (rlim_t)cap };
    if (setrlimit(RLIMIT_DATA, &rl) < 0)
        return pt_seterr("--mem-limit: setrlimit(RLIMIT_DATA, %.0f MiB) failed", cap / MIB);
    pt_set_oom_note("under --mem-limit (RLIMIT_DATA: the ranks' limit plus the program's allowance)");
    if (getenv("PIPETRAIN_MEMLIMIT_PROBE")) {   /* test hook: one allocation of the whole cap must fail */
        void *p = pt_malloc((size_t)cap);
        free(p);
        return pt_seterr("--mem-limit: PIPETRAIN_MEMLIMIT_PROBE: %.0f MiB were allocated under RLIMIT_DATA %.0f MiB: "
                         "the OS does not enforce the limit here", cap / MIB, cap / MIB);
    }
    return 0;
}

int train_memlimit_apply(train_ctx *t) {
    const train_opts *o = &t->o;
    if (!(o->mem_bytes > 0)) return 0;
    run_job *job = t->e->vt->job ? t->e->vt->job(t->e) : NULL;
    if (!job) return pt_seterr("--mem-limit %.0fMiB prices a pipelined job's ranks: give --stages P", o->mem_bytes / MIB);
    int R = run_layout_ranks(&t->e->vt->plan(t->e)->lo), worst = -1;
    double most = 0, worst_need = 0;
    run_mem m, wm = { 0 };
    for (int w = 0; w < R; w++) {
        run_job_mem(job, w, &m);
        double need = rank_need(&m);
        most = fmax(most, need);
        if (need > o->mem_bytes && (worst < 0 || need > worst_need)) worst = w, worst_need = need, wm = m;
    }
    if (worst >= 0) {
        char fit[160];
        what_fits(o, most, fit, sizeof fit);
        return pt_seterr("--mem-limit %.0fMiB: rank %d is predicted to hold %.1f MiB at its peak (parameters, "
                         "gradients, optimizer %.1f MiB + activations %.1f MiB), over the limit; %s",
                         o->mem_bytes / MIB, worst, worst_need / MIB, (wm.params + wm.grads + wm.optim) / MIB,
                         wm.acts / MIB, fit);
    }
    int mine = o->world ? 1 : R;   /* MPI: a process per rank; threads: all of them */
    if (set_rlimit(o->mem_bytes, mine) < 0) return -1;
    if (t->root)
        printf("memory limit: --mem-limit %.0f MiB per rank; the busiest rank is predicted at %.1f MiB; this "
               "process's RLIMIT_DATA %d x %.0f MiB + %.0f MiB allowance (its data segment now %.0f MiB)\n",
               o->mem_bytes / MIB, most / MIB, mine, o->mem_bytes / MIB, TRAIN_MEMLIMIT_ALLOWANCE / MIB,
               data_now() / MIB);
    return 0;
}
