/* The plan of a pipelined job, built and checked before anything runs: schedule (generated or
 * read), lowering, validation, layer split, microbatch size. Pure: every rank gets the same plan
 * or the same error. Not here: running it (run_job.c, executor.c). */
#include "run/run.h"
#include "util/pt.h"
#include <stdlib.h>
#include <string.h>

#define RUN_TAG_LIMIT 32000     /* MPI guarantees tags up to 32767; the rest is for gathers */
#define RUN_DEFAULT_TIMEOUT 60.0
#define RUN_MAX_RANKS 65536     /* world ranks a job may have (P x D stays an int with room) */

/* The --schedule-file schedule: read, checked against P and M, validated, given the synchronous
 * tail when it has none at all (torch.distributed.pipelining's notation: no REDUCE_GRAD, no STEP),
 * then checked runnable (a partial tail is an error naming the rank). */
static sched *run_plan_read_file(const run_opts *o) {
    sched *s = sched_read_csv(o->schedule_file, o->pipes);
    if (!s) return NULL;
    if (s->n_ranks != o->P) {
        pt_seterr("--schedule-file %s has %d ranks (rows), --stages is %d", o->schedule_file, s->n_ranks, o->P);
        goto bad;
    }
    if (o->M > 0 && s->n_mb != o->M) {
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
    sched_params p = { .ranks = o->P, .microbatches = o->M, .chunks = o->chunks,
                       .cost_f = 1, .cost_b = 1, .cost_w = 1 };
    sched *s = sched_generate(o->schedule, &p);
    if (!s) pt_adderr("--schedule %s --stages %d --microbatches %d: ", o->schedule, o->P, o->M);
    return s;
}

static int run_plan_check(run_plan *pl, const gpt_config *cfg, int B, int T) {
    const run_opts *o = &pl->o;
    const sched *s = pl->s;
    long long dm = (long long)o->D * s->n_mb;     /* in 64 bits: --dp 65536 x 65536 overflows int */
    if (dm > B || B % dm)
        return pt_seterr("--batch %d is not divisible by dp x microbatches = %d x %d", B, o->D, s->n_mb);
    if ((long)s->n_stages * s->n_mb * 2 >= RUN_TAG_LIMIT)
        return pt_seterr("%d stages x %d microbatches is too many messages to tag (limit %d)",
                         s->n_stages, s->n_mb, RUN_TAG_LIMIT / 2);
    if (T < 1 || T > cfg->n_positions)
        return pt_seterr("--seq %d must be in 1..n_positions (%d)", T, cfg->n_positions);
    pl->B = B;
    pl->T = T;
    pl->mb_rows = (int)(B / dm);
    return run_layout_init(&pl->lo, o->P, o->D, s->stages_per_pipe, s->n_pipes, cfg->n_layer, o->split, o->n_split);
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

int run_plan_init(run_plan *pl, const run_opts *o, const gpt_config *cfg, int B, int T) {
    memset(pl, 0, sizeof *pl);
    pl->o = *o;
    if (pl->o.timeout <= 0) pl->o.timeout = RUN_DEFAULT_TIMEOUT;
    if (o->P < 1) return pt_seterr("--stages must be >= 1 (got %d)", o->P);
    if (o->D < 1) return pt_seterr("--dp must be >= 1 (got %d)", o->D);
    if ((long long)o->P * o->D > RUN_MAX_RANKS)
        return pt_seterr("--stages %d x --dp %d is more than %d ranks", o->P, o->D, RUN_MAX_RANKS);
    if (o->chunks < 0) return pt_seterr("--chunks must be >= 0 (got %d)", o->chunks);
    sched *s = run_plan_schedule(o);
    if (!s) return -1;
    if (!s->lowered) {
        sched *l = sched_lower(s);
        sched_free(s);
        if (!l) return -1;
        s = l;
    }
    pl->s = s;
    if (run_plan_check(pl, cfg, B, T) < 0 || run_plan_check_zero(pl) < 0) { run_plan_free(pl); return -1; }
    return 0;
}

void run_plan_free(run_plan *pl) {
    sched_free(pl->s);
    run_layout_free(&pl->lo);
    pl->s = NULL;
}
