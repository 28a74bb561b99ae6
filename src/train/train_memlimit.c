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

/* "try --seq-chunks 4 or --balance-memory, more --stages, or a limit of at least X" into buf
 * (asynchronous schedules run neither: "try more --stages, ..."). */
static void what_fits(const train_opts *o, int async, double most, char *buf, size_t n) {
    char sc[48] = "", bm[32] = "";
    if (!async && o->ro.seq_chunks <= 1 && o->seq % 4 == 0) snprintf(sc, sizeof sc, "--seq-chunks 4 or ");
    if (!async && !o->ro.balance_memory) snprintf(bm, sizeof bm, "--balance-memory, ");
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

/* Rank w's predicted peak at W2 steps a pass, the job running W: each microbatch of the pass keeps
 * pass_mb bytes for the whole pass (boundary buffers, loss, pipedream's stash), so n_mb x (W -
 * W2) / W of them go; the activation sets at the peak in flight are kept (they shrink, if at all,
 * only when M is under P: then this is over, never under). */
static double rank_need_at(const run_mem *m, int n_mb, int W, int W2) {
    return rank_need(m) - (double)n_mb * (double)(W - W2) / W * m->pass_mb;
}

/* The job's busiest rank at W2 steps a pass: its world rank (*worst) and peak (returned). */
static double job_need_at(run_job *job, int R, int n_mb, int W, int W2, int *worst) {
    double most = -1;
    run_mem m;
    for (int w = 0; w < R; w++) {
        run_job_mem(job, w, &m);
        double need = rank_need_at(&m, n_mb, W, W2);
        if (need > most) most = need, *worst = w;
    }
    return most;
}

/* "stage 0" or "stages 0, 4" of world rank w into buf. */
static void rank_stages(const run_plan *pl, int w, char *buf, size_t n) {
    int d, p, t, k = 0;
    size_t at = 0;
    run_layout_coords(&pl->lo, w, &d, &p, &t);
    for (int g = 0; g < pl->s->n_stages; g++) k += pl->s->stage_rank[g] == p;
    at += (size_t)snprintf(buf, n, "stage%s", k > 1 ? "s" : "");
    for (int g = 0, i = 0; g < pl->s->n_stages && at < n; g++)
        if (pl->s->stage_rank[g] == p) at += (size_t)snprintf(buf + at, n - at, "%s %d", i++ ? "," : "", g);
}

/* The largest window under W whose busiest rank is predicted within the limit (*W2, its peak
 * *need and rank *w; 1), or 1 step a pass over it (0). */
static int smaller_window(train_ctx *t, run_job *job, int R, int n_mb, int W, int *W2, double *need, int *w) {
    *W2 = W;
    do {
        *W2 = train_window_below(t, *W2);
        *need = job_need_at(job, R, n_mb, W, *W2, w);
    } while (*W2 > 1 && *need > t->o.mem_bytes);
    return *need <= t->o.mem_bytes;
}

/* The asynchronous window's advice into buf ("" without a window of W > 1): the largest smaller
 * window that fits and its peak, or that none does. */
static void window_fits(train_ctx *t, run_job *job, int R, int n_mb, int W, char *buf, size_t n) {
    int w, W2;
    double need;
    buf[0] = 0;
    if (W < 2) return;
    if (smaller_window(t, job, R, n_mb, W, &W2, &need, &w))
        snprintf(buf, n, "give a smaller --async-window: %d is predicted at %.1f MiB on its busiest rank%s; or ", W2,
                 need / MIB, t->o.async_window ? " (left out, the default window shrinks to fit)" : "");
    else snprintf(buf, n, "even --async-window 1 is predicted at %.1f MiB (rank %d); ", need / MIB, w);
}

/* The refusal: what (rank's bytes, the limit, the window's share), where (rank, stages), what to do. */
static int refuse(train_ctx *t, run_job *job, int R, int n_mb, int W, int worst, double most) {
    const train_opts *o = &t->o;
    const run_plan *pl = t->e->vt->plan(t->e);
    run_mem wm;
    run_job_mem(job, worst, &wm);
    char fit[160], win[224], where[64], share[160] = "";
    int w1;
    double least = o->async_window ? most : job_need_at(job, R, n_mb, W, 1, &w1);   /* the default shrinks */
    what_fits(o, pl->s->async, least, fit, sizeof fit);
    window_fits(t, job, R, n_mb, W, win, sizeof win);
    rank_stages(pl, worst, where, sizeof where);
    if (W > 1)
        snprintf(share, sizeof share, ", of which the asynchronous window's %d steps x %d microbatches keep %.1f MiB "
                 "(stashed weights, boundary buffers)", W, n_mb / W, n_mb * wm.pass_mb / MIB);
    return pt_seterr("--mem-limit %.0fMiB: rank %d is predicted to hold %.1f MiB at its peak (%s: parameters, "
                     "gradients, optimizer %.1f MiB + activations %.1f MiB%s), over the limit; %s%s",
                     o->mem_bytes / MIB, worst, most / MIB, where, (wm.params + wm.grads + wm.optim) / MIB,
                     wm.acts / MIB, share, win, fit);
}

/* The defaulted window over the limit: the largest smaller one predicted to fit, for the engine to
 * start again with (train_memlimit_apply's 1). 1 when shrunk, 0 when none fits. */
static int shrink_window(train_ctx *t, run_job *job, int R, int n_mb, int W, double most) {
    int w, W2;
    double need;
    if (!smaller_window(t, job, R, n_mb, W, &W2, &need, &w)) return 0;
    char why[128];
    snprintf(why, sizeof why, "--mem-limit %.0f MiB: %d steps a pass were predicted at %.1f MiB, %d at %.1f MiB",
             t->o.mem_bytes / MIB, W, most / MIB, W2, need / MIB);
    train_window_shrink(t, W2, why);
    return 1;
}

int train_memlimit_apply(train_ctx *t) {
    const train_opts *o = &t->o;
    if (!(o->mem_bytes > 0)) return 0;
    run_job *job = t->e->vt->job ? t->e->vt->job(t->e) : NULL;
    if (!job) return pt_seterr("--mem-limit %.0fMiB prices a pipelined job's ranks: give --stages P", o->mem_bytes / MIB);
    const run_plan *pl = t->e->vt->plan(t->e);
    int R = run_layout_ranks(&pl->lo), W = train_window_steps(t), n_mb = pl->s->n_mb, worst = 0;
    double most = job_need_at(job, R, n_mb, W, W, &worst);
    if (most > o->mem_bytes && W > 1 && !o->async_window && shrink_window(t, job, R, n_mb, W, most)) return 1;
    if (most > o->mem_bytes) return refuse(t, job, R, n_mb, W, worst, most);
    int mine = o->world ? 1 : R;   /* MPI: a process per rank; threads: all of them */
    if (set_rlimit(o->mem_bytes, mine) < 0) return -1;
    if (t->root)
        printf("memory limit: --mem-limit %.0f MiB per rank; the busiest rank is predicted at %.1f MiB; this "
               "process's RLIMIT_DATA %d x %.0f MiB + %.0f MiB allowance (its data segment now %.0f MiB)\n",
               o->mem_bytes / MIB, most / MIB, mine, o->mem_bytes / MIB, TRAIN_MEMLIMIT_ALLOWANCE / MIB,
               data_now() / MIB);
    return 0;
}
