/* The plan of a pipelined job, built and checked before anything runs: schedule (generated or
 * read), lowering, validation, layer split, microbatch size. Pure: every rank gets the same plan
 * or the same error. Not here: running it (run_job.c, executor.c). */
#include "run/run.h"
#include "optim/async_fix.h"
#include "optim/outer.h"
#include "sched/sched_lend.h"
#include "util/pt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RUN_DEFAULT_TIMEOUT 60.0
#define RUN_MAX_RANKS 65536     /* world ranks a job may have (P x D stays an int with room) */

/* The --schedule-file schedule: read, checked against P and M, validated, given the synchronous
 * tail when it has none at all (torch.distributed.pipelining's notation: no REDUCE_GRAD, no STEP),
 * then checked runnable (a partial tail is an error naming the rank). */
static sched *run_plan_read_file(const run_opts *o) {
    if (o->async_window > 1) {
        pt_seterr("--async-window %d: not with --schedule-file (the file's lists are one step; "
                  "give --async-window 1 or generate the schedule)", o->async_window);
        return NULL;
    }
    sched *s = sched_read_csv(o->schedule_file, o->pipes);
    if (!s) return NULL;
    if (s->n_ranks != o->P) {
        pt_seterr("--schedule-file %s has %d ranks (rows), --stages is %d", o->schedule_file, s->n_ranks, o->P);
        goto bad;
    }
    s->seq_chunks = o->seq_chunks > 1 ? o->seq_chunks : 1;   /* the file's units are chunks */
    if (o->M > 0 && s->n_mb != o->M * s->seq_chunks) {
        pt_seterr("--schedule-file %s has %d microbatches, --microbatches is %d", o->schedule_file, s->n_mb, o->M);
        goto bad;
    }
    if (sched_validate(s, NULL) < 0) { pt_adderr("--schedule-file %s: ", o->schedule_file); goto bad; }
    sched_append_missing_tail(s);
    if (sched_check_runnable(s, o->schedule_file) < 0) goto bad;
    return s;
bad:
    sched_free(s);
    return NULL;
}

/* The schedule from the file or the generator, checked against P and M. */
static sched *run_plan_schedule(const run_opts *o) {
    if (o->schedule_file) return run_plan_read_file(o);
    if (!o->schedule) { pt_seterr("--schedule NAME or --schedule-file S.csv is required"); return NULL; }
    if (o->M < 1) { pt_seterr("--microbatches must be >= 1 (got %d)", o->M); return NULL; }
    int W = o->async_window > 1 ? o->async_window : 1;   /* --async-window: W steps a pass */
    sched_params p = { .ranks = o->P, .microbatches = o->M * W, .chunks = o->chunks,
                       .seq_chunks = o->seq_chunks, .async_depth = o->async_depth,
                       .cost_f = 1, .cost_b = 1, .cost_w = 1 };
    const sched_generator *g = sched_generator_find(o->schedule);
    if (o->async_depth && g && !g->async) {
        pt_seterr("--async-depth %d: only for the asynchronous schedules (pipedream, 2bw), not %s", o->async_depth,
                  o->schedule);
        return NULL;
    }
    if (W > 1 && (!g || !g->async)) {
        pt_seterr("--async-window %d: only for the asynchronous schedules (pipedream, 2bw), not %s (a "
                  "synchronous schedule flushes at every step; give --async-window 1 or leave it out)", W, o->schedule);
        return NULL;
    }
    if (W > 1) {   /* a step's own M must make whole updates (2bw: M divisible by P), not only the pass's W x M */
        sched_params p1 = p;
        p1.microbatches = o->M;
        sched *one = sched_generate(o->schedule, &p1);
        if (!one) {
            pt_adderr("--schedule %s --stages %d --microbatches %d (each step of --async-window %d): ", o->schedule,
                      o->P, o->M, W);
            return NULL;
        }
        sched_free(one);
    }
    sched *s = sched_generate(o->schedule, &p);
    if (!s) pt_adderr("--schedule %s --stages %d --microbatches %d: ", o->schedule, o->P, p.microbatches);
    if (s && s->async && sched_check_runnable(s, "--schedule") < 0) {
        sched_free(s);
        return NULL;
    }
    return s;
}

/* --seq-chunks K: K divides T, and none of the modes a chunk's layers do not run. */
static int run_plan_check_chunks(const run_opts *o, const sched *s, int T) {
    int K = s->seq_chunks;
    if (K == 1) return 0;
    if (T % K) return pt_seterr("--seq-chunks %d must divide --seq %d", K, T);
    if (o->recompute || o->tp_recompute || o->tp_sp || o->tp_overlap)
        return pt_seterr("--seq-chunks %d: not with %s (a chunk keeps its whole act from F to W; "
                         "drop one)", K, o->recompute ? "--recompute" : o->tp_recompute ? "--tp-recompute"
                         : o->tp_sp ? "--sp" : "--tp-overlap");
    return 0;
}

static int run_plan_check(run_plan *pl, const gpt_config *cfg, int B, int T) {
    const run_opts *o = &pl->o;
    const sched *s = pl->s;
    int M = s->n_mb / s->seq_chunks;              /* microbatches (the units are their chunks) */
    long long dm = (long long)o->D * M;           /* in 64 bits: --dp 65536 x 65536 overflows int */
    if (dm > B || B % dm)
        return pt_seterr("--batch %d is not divisible by dp x microbatches = %d x %d", B, o->D, M);
    if (run_plan_check_chunks(o, s, T) < 0) return -1;
    if ((long)s->n_stages * s->n_mb * 2 >= COMM_TAG_EXEC_LIMIT)
        return pt_seterr("%d stages x %d microbatches is too many messages to tag (limit %d)",
                         s->n_stages, s->n_mb, COMM_TAG_EXEC_LIMIT / 2);
    if (T < 1 || T > cfg->n_positions)
        return pt_seterr("--seq %d must be in 1..n_positions (%d)", T, cfg->n_positions);
    pl->B = B;
    pl->T = T;
    pl->mb_rows = (int)(B / dm);
    if (o->tp_sp && gpt_sp_check_rows(pl->mb_rows, T, o->tp) < 0)   /* B*T of a microbatch */
        return pt_adderr("--sp with --batch %d over dp x microbatches = %d x %d (microbatches of %d "
                         "sequences) and --seq %d: ", B, o->D, s->n_mb, pl->mb_rows, T);
    if (run_layout_init(&pl->lo, o->P, o->D, s->stages_per_pipe, s->n_pipes, cfg, o->split, o->n_split) < 0)
        return -1;
    pl->lo.tp = o->tp;
    return 0;
}

/* --tp: >= 1, and a split the model can make (tp dividing n_head: the model's own check, on
 * its tables alone), so every rank refuses it before anything runs. */
static int run_plan_check_tp(const run_opts *o, const gpt_config *cfg) {
    if (o->tp < 1) return pt_seterr("--tp must be >= 1 (got %d)", o->tp);
    if (o->tp == 1) return 0;
    gpt_model m;
    memset(&m, 0, sizeof m);
    int rc = gpt_init_layers_tp(&m, cfg, 0, 0, 0, o->tp);
    gpt_free(&m);
    return rc < 0 ? pt_adderr("--tp %d: ", o->tp) : 0;
}

/* --tp-overlap, --tp-recompute and --sp work on the TP group's collectives: they need one,
 * --tp-recompute replaces --recompute's way (both at once would recompute twice), and the
 * model overlaps only all-reduces, so not under --sp. */
static int run_plan_check_tp_modes(const run_opts *o) {
    const char *flag = o->tp_overlap ? "--tp-overlap" : "--tp-recompute";
    if ((o->tp_overlap || o->tp_recompute) && o->tp < 2)
        return pt_seterr("%s needs --tp 2 or more (it works on the all-reduces of a tensor-parallel "
                         "group; --tp is %d)", flag, o->tp);
    if (o->tp_recompute && o->recompute)
        return pt_seterr("--tp-recompute and --recompute: give one (--tp-recompute keeps each block's "
                         "input and res2 and rebuilds the rest without all-reduces; --recompute keeps "
                         "each stage's input and repeats all of F, all-reduces included)");
    if (o->tp_sp && o->tp < 2)
        return pt_seterr("--sp needs --tp 2 or more (sequence parallelism splits the activation stream "
                         "over the ranks of a tensor-parallel group; --tp is %d)", o->tp);
    if (o->tp_sp && o->tp_overlap)
        return pt_seterr("--sp and --tp-overlap: give one (under --sp a block reduce-scatters and "
                         "all-gathers; --tp-overlap overlaps all-reduces only)");
    return 0;
}

/* --balance-memory: a schedule the lend plan knows (sched_lend_check), whole activation sets. */
static int run_plan_check_balance(const run_plan *pl) {
    if (!pl->o.balance_memory) return 0;
    if (pl->o.recompute || pl->o.tp_recompute)
        return pt_seterr("--balance-memory does not go with --recompute or --tp-recompute (they keep other "
                         "buffers than whole activation sets; give one)");
    return sched_lend_check(pl->s);
}

/* --async-fix: a known correction, only on an asynchronous schedule; pipemare and predict
 * replace pipedream's stashes, so not with 2bw's two versions. */
static int run_plan_check_fix(const run_plan *pl) {
    int f = pl->o.async_fix;
    if (f < ASYNC_FIX_NONE || f > ASYNC_FIX_PREDICT) return pt_seterr("--async-fix: unknown correction %d", f);
    if (f && !pl->s->async)
        return pt_seterr("--async-fix %s needs an asynchronous schedule (pipedream or 2bw): %s flushes "
                         "before each update, so no gradient is stale", async_fix_name(f), pl->s->name);
    if (pl->o.defer_tie && (!pl->s->async || pl->s->weight_versions == 2 || pl->lo.tp > 1))
        return pt_seterr("--defer-tie works on pipedream's per-microbatch updates, one TP rank (got %s%s); "
                         "2bw and the synchronous schedules reduce tied tensors once per update already",
                         pl->s->name, pl->lo.tp > 1 ? ", --tp > 1" : "");
    if (pl->o.tie_owner && (pl->o.defer_tie || !pl->s->async || pl->s->weight_versions == 2 || pl->lo.tp > 1 ||
                            pl->o.D > 1 || f == ASYNC_FIX_PIPEMARE || f == ASYNC_FIX_PREDICT))
        return pt_seterr("--tie-owner works on pipedream's stashed per-microbatch updates (--async-fix none or "
                         "nesterov), one replica, one TP rank, without --defer-tie (got %s%s%s%s%s)", pl->s->name,
                         pl->o.defer_tie ? ", --defer-tie" : "", pl->o.D > 1 ? ", --dp > 1" : "",
                         pl->lo.tp > 1 ? ", --tp > 1" : "", f ? (f == ASYNC_FIX_NESTEROV ? "" : ", a fix that drops the stash") : "");
    if ((f == ASYNC_FIX_PIPEMARE || f == ASYNC_FIX_PREDICT) && pl->s->weight_versions == 2)
        return pt_seterr("--async-fix %s works on pipedream's per-microbatch updates; %s's one-update "
                         "delay is fixed by its two weight versions (use none or nesterov with it)",
                         async_fix_name(f), pl->s->name);
    return 0;
}

/* --zero: 0 or 1, and 1 only with a synchronous schedule. */
static int run_plan_check_zero(const run_plan *pl) {
    int z = pl->o.zero;
    if (z == 2)
        return pt_seterr("--zero 2 (sharded gradients) is not supported: a stage's gradients add up "
                         "over all its microbatches in one whole buffer before any reduction, so "
                         "sharding them afterwards would not lower the peak; use --zero 1");
    if (z != 0 && z != 1) return pt_seterr("--zero must be 0 or 1, got %d", z);
    if (z && pl->s->async)
        return pt_seterr("--zero 1 needs a synchronous schedule: %s updates each stage after every "
                         "microbatch, with no step to gather the shards at", pl->s->name);
    return 0;
}

/* A slow link must join ranks that exchange something: pipeline neighbours of one replica (the
 * simulator's check, on pipeline ranks), the same pipeline rank of two replicas (their gradient
 * reductions), or two ranks of one TP group (their all-reduces). */
static int run_plan_check_link(const run_plan *pl, const sim_fault *x) {
    const run_layout *lo = &pl->lo;
    int da, pa, ta, db, pb, tb;
    run_layout_coords(lo, x->a, &da, &pa, &ta);
    run_layout_coords(lo, x->b, &db, &pb, &tb);
    if (ta != tb && da == db && pa == pb) return 0;   /* one TP group */
    if (ta != tb) {
        int same = run_layout_world_rank(lo, db, pb, ta);   /* b's place at a's TP rank */
        char eg[48] = "";
        if (same != x->a) snprintf(eg, sizeof eg, " (e.g. %d-%d)", x->a, same);
        return pt_seterr("--slow-link '%s': ranks %d and %d are TP ranks %d and %d of different pipeline ranks "
                         "or replicas: a pipeline or replica link joins the same TP rank of two pipeline ranks or "
                         "replicas%s, a TP link two ranks of one TP group (e.g. %d-%d)", x->spec, x->a, x->b, ta, tb,
                         eg, x->a, run_layout_world_rank(lo, da, pa, tb));
    }
    if (da != db) {
        if (pa == pb) return 0;
        return pt_seterr("--slow-link '%s': ranks %d and %d are in replicas %d and %d at pipeline ranks %d and "
                         "%d: they exchange nothing (a link between replicas joins the same pipeline rank, e.g. "
                         "%d-%d)", x->spec, x->a, x->b, da, db, pa, pb, x->a, run_layout_world_rank(lo, db, pa, ta));
    }
    sim_costs c;
    sim_costs_init(&c, pl->s->n_stages, 1, 1, 1);
    sim_fault f = *x;
    f.a = pa, f.b = pb;
    f.rate = 0;   /* the runtime's messages have their real size: no "0 bytes" to refuse */
    c.faults = &f, c.n_faults = 1;
    int rc = sim_costs_check_faults(&c, pl->s, 1 << 30);
    c.faults = NULL, c.n_faults = 0;
    sim_costs_free(&c);
    return rc;
}

/* --slow-link and --slow-stage: parsed by the simulator's parser (world ranks, stages; windows in
 * steps), then checked against the layout. */
static int run_plan_faults(run_plan *pl) {
    const run_opts *o = &pl->o;
    sim_costs c;
    sim_costs_init(&c, pl->s->n_stages, 1, 1, 1);
    int rc = 0;
    for (int i = 0; i < o->n_slow_link && rc == 0; i++)
        rc = sim_costs_add_slow_link_in(&c, o->slow_link[i], run_layout_ranks(&pl->lo), "steps");
    for (int i = 0; i < o->n_slow_stage && rc == 0; i++)
        rc = sim_costs_add_slow_stage_in(&c, o->slow_stage[i], "steps");
    for (int i = 0; i < c.n_faults && rc == 0; i++)
        if (c.faults[i].link) rc = run_plan_check_link(pl, &c.faults[i]);
    if (rc == 0 && c.n_faults) {
        pl->faults = pt_malloc(sizeof *pl->faults * (size_t)c.n_faults);
        memcpy(pl->faults, c.faults, sizeof *pl->faults * (size_t)c.n_faults);
        pl->n_faults = c.n_faults;
    }
    sim_costs_free(&c);
    return rc;
}

int run_plan_check_fault_steps(const run_plan *pl, long last_step) {
    for (int i = 0; i < pl->n_faults; i++) {
        const sim_fault *x = &pl->faults[i];
        if (x->from > last_step)
            return pt_seterr("%s '%s': starts at step %d, after the last (%ld)", x->link ? "--slow-link" : "--slow-stage",
                             x->spec, x->from, last_step);
    }
    return 0;
}

double run_plan_link_delay(const run_plan *pl, int a, int b, long t) {
    double d = 0;
    for (int i = 0; i < pl->n_faults; i++) {
        const sim_fault *x = &pl->faults[i];
        if (x->link && ((x->a == a && x->b == b) || (x->a == b && x->b == a)) && sim_fault_active(x, (int)t))
            d += x->amount;
    }
    return d;
}

double run_plan_link_rate(const run_plan *pl, int a, int b, long t) {
    double k = 0;
    for (int i = 0; i < pl->n_faults; i++) {
        const sim_fault *x = &pl->faults[i];
        if (x->link && x->rate > 0 && ((x->a == a && x->b == b) || (x->a == b && x->b == a)) &&
            sim_fault_active(x, (int)t) && (k == 0 || x->rate < k))
            k = x->rate;
    }
    return k;
}

double run_plan_stage_factor(const run_plan *pl, int g, long t) {
    double k = 1;
    for (int i = 0; i < pl->n_faults; i++) {
        const sim_fault *x = &pl->faults[i];
        if (!x->link && x->a == g && sim_fault_active(x, (int)t)) k *= x->amount;
    }
    return k;
}

/* --dp-sync H > 1: the outer step's numbers, a synchronous schedule (an asynchronous one updates
 * with microbatches in flight: no step boundary for the outer step), no ZeRO (its slices span the replicas,
 * which no longer reduce together). */
static int run_plan_check_dp_sync(const run_plan *pl) {
    const run_opts *o = &pl->o;
    if (o->dp_sync <= 1) return o->dp_sync < 0 ? outer_config_validate(o->dp_sync, 1, 0) : 0;
    if (outer_config_validate(o->dp_sync, o->outer_lr, o->outer_momentum) < 0) return -1;
    if (pl->s->async)
        return pt_seterr("--dp-sync %d needs a synchronous schedule: %s updates while microbatches are in "
                         "flight, with no step boundary for the outer step (use 1f1b, zb-h1, ..., or --dp-sync 1)",
                         o->dp_sync, pl->s->name);
    if (o->zero)
        return pt_seterr("--dp-sync %d with --zero %d: ZeRO shards the update over replicas that no longer "
                         "reduce together every step; drop --zero", o->dp_sync, o->zero);
    return 0;
}

int run_plan_init(run_plan *pl, const run_opts *o, const gpt_config *cfg, int B, int T) {
    memset(pl, 0, sizeof *pl);
    pl->o = *o;
    if (pl->o.timeout <= 0) pl->o.timeout = RUN_DEFAULT_TIMEOUT;
    if (pl->o.tp == 0) pl->o.tp = 1;
    o = &pl->o;
    if (o->P < 1) return pt_seterr("--stages must be >= 1 (got %d)", o->P);
    if (o->D < 1) return pt_seterr("--dp must be >= 1 (got %d)", o->D);
    if (o->tp < 1) return pt_seterr("--tp must be >= 1 (got %d)", o->tp);
    if ((long long)o->P * o->D * o->tp > RUN_MAX_RANKS)
        return pt_seterr("--stages %d x --dp %d x --tp %d is more than %d ranks", o->P, o->D, o->tp, RUN_MAX_RANKS);
    if (run_plan_check_tp(o, cfg) < 0 || run_plan_check_tp_modes(o) < 0) return -1;
    if (o->chunks < 0) return pt_seterr("--chunks must be >= 0 (got %d)", o->chunks);
    if (o->async_window < 0 || o->async_window > RUN_MAX_WINDOW)
        return pt_seterr("--async-window must be in 0..%d (steps per pass; got %d)", RUN_MAX_WINDOW, o->async_window);
    if (o->async_window > 1) B *= o->async_window;   /* the pass's rows: W steps' batches */
    sched *s = run_plan_schedule(o);
    if (!s) return -1;
    if (!s->lowered) {
        sched *l = sched_lower(s);
        sched_free(s);
        if (!l) return -1;
        s = l;
    }
    pl->s = s;
    if (run_plan_check(pl, cfg, B, T) < 0 || run_plan_check_zero(pl) < 0 || run_plan_check_fix(pl) < 0 ||
        run_plan_check_dp_sync(pl) < 0 || run_plan_check_balance(pl) < 0 ||
        run_plan_faults(pl) < 0) {
        run_plan_free(pl);
        return -1;
    }
    pl->o.slow_link = pl->o.slow_stage = NULL;   /* read here only */
    pl->o.n_slow_link = pl->o.n_slow_stage = 0;
    return 0;
}

void run_plan_free(run_plan *pl) {
    sched_free(pl->s);
    run_layout_free(&pl->lo);
    free(pl->faults);
    pl->faults = NULL;
    pl->n_faults = 0;
    pl->s = NULL;
}

int run_plan_resplit(run_plan *out, const run_plan *pl, const gpt_config *cfg, const int *split, int n) {
    run_opts o = pl->o;
    o.split = split, o.n_split = n;
    int W = o.async_window > 1 ? o.async_window : 1;
    if (run_plan_init(out, &o, cfg, pl->B / W, pl->T) < 0) return pt_adderr("re-split: ");
    if (pl->n_faults) {
        out->faults = pt_malloc(sizeof *out->faults * (size_t)pl->n_faults);
        memcpy(out->faults, pl->faults, sizeof *out->faults * (size_t)pl->n_faults);
        out->n_faults = pl->n_faults;
    }
    return 0;
}
