/* A rank's own state in checkpoints and snapshots (ckpt/ckpt_state.h), so that a resumed
 * asynchronous or --dp-sync run continues exactly where the saved one was:
 *   2bw       each stage's older weight version ("2bw/older.<i>")
 *   pipemare  the velocity estimate ("pipemare/velocity.<i>")
 *   predict   the last step ("predict/last_step.<i>"), and the update count (before the first
 *             update nothing is predicted)
 *   dp-sync   theta_start, the outer momentum, the base of a change posted and not yet applied
 *             ("outer/start", "outer/buf", "outer/snap"), and the replica's own weights and
 *             moments ("replica/..."): inside an H-cycle the replicas differ, and their moments
 *             always do, while the chunk files hold replica 0's
 * pipedream's stashes and a step's microbatches live inside a step: a save at a step boundary
 * has none in flight, and nesterov's state is AdamW's moments (in the chunk files).
 * The state belongs to its layout (split, schedule, ranks: the "sig"); resumed under another, or
 * from a checkpoint without it (written before it existed), the run starts that state as a fresh
 * run does, with a note. Not here: the file (ckpt/ckpt_state.c), what the state does
 * (exec_async.c, exec_outer.c). */
#include "run/exec_int.h"
#include "ckpt/ckpt_state.h"
#include "optim/async_fix.h"
#include "util/pt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The layout the state belongs to. */
static void rankstate_sig(const run_exec *e, char *sig, size_t n) {
    const run_layout *lo = e->c.lo;
    size_t k = (size_t)snprintf(sig, n, "%s P%d D%d tp%d pipes%d split", e->c.s->name, lo->P, lo->D,
                                lo->tp, lo->n_pipes);
    for (int c = 0; c <= lo->K && k < n; c++) k += (size_t)snprintf(sig + k, n - k, "%s%d", c ? "," : " ", lo->chunk_first[c]);
}

static const char *ver_name(const run_exec *e) {
    if (e->c.s->weight_versions == 2) return "2bw/older";
    return e->fix == ASYNC_FIX_PIPEMARE ? "pipemare/velocity" : "predict/last_step";
}

/* --dp-sync: the replica's weights (span, tied copies) and moments of every stage it holds. */
static int replica_items(run_exec *e, ckpt_state *s) {
    char nm[40];
    int rc = 0;
    for (int i = 0; i < e->n_stages && rc == 0; i++) {
        run_stage *st = &e->st[i];
        snprintf(nm, sizeof nm, "replica/w.%d", i);
        rc = ckpt_state_add(s, nm, st->m.params + st->span_off, st->span_n, 0);
        if (rc == 0 && st->opt.m) {
            snprintf(nm, sizeof nm, "replica/m.%d", i);
            rc = ckpt_state_add(s, nm, st->opt.m, st->opt.n, 0);
            snprintf(nm, sizeof nm, "replica/v.%d", i);
            if (rc == 0) rc = ckpt_state_add(s, nm, st->opt.v, st->opt.n, 0);
        }
        for (int t = 0; t < e->n_ties && rc == 0; t++) {
            exec_tie_copy *cp = &st->copy[t];
            if (!cp->w) continue;
            snprintf(nm, sizeof nm, "replica/tie%d.%d", t, i);
            rc = ckpt_state_add(s, nm, cp->w, cp->count, 0);
            if (rc < 0 || !cp->opt.m) continue;
            snprintf(nm, sizeof nm, "replica/tie%d_m.%d", t, i);
            rc = ckpt_state_add(s, nm, cp->opt.m, cp->opt.n, 0);
            snprintf(nm, sizeof nm, "replica/tie%d_v.%d", t, i);
            if (rc == 0) rc = ckpt_state_add(s, nm, cp->opt.v, cp->opt.n, 0);
        }
    }
    return rc;
}

/* The items of this rank's state into s (sig, counts too); 0 when it keeps none, 1, or -1.
 * load: "outer/snap" is always given its buffer (to read into), else only when pending. */
static int rankstate_items(run_exec *e, ckpt_state *s, int load) {
    char nm[40];
    float *start, *buf, *snap;
    int pending = 0;
    size_t n = exec_outer_state(e, &start, &buf, &snap, &pending);
    memset(s, 0, sizeof *s);
    rankstate_sig(e, s->sig, sizeof s->sig);
    int rc = 0, any = 0;
    for (int i = 0; i < e->n_stages && rc == 0; i++) {
        run_stage *st = &e->st[i];
        if (!st->ver) continue;
        snprintf(nm, sizeof nm, "%s.%d", ver_name(e), i);
        rc = ckpt_state_add(s, nm, st->ver, exec_weights_n(st, e->n_ties), 0);
        s->n_upd = st->n_upd;   /* asynchronous: one stage per rank */
        any = 1;
    }
    if (n && rc == 0) {
        s->pending = pending;
        rc = ckpt_state_add(s, "outer/start", start, n, 0) < 0 || ckpt_state_add(s, "outer/buf", buf, n, 0) < 0 ||
             ckpt_state_add(s, "outer/snap", load || pending ? snap : NULL, n, 1) < 0 ? -1 : replica_items(e, s);
        any = 1;
    }
    return rc < 0 ? -1 : any;
}

int run_exec_rank_state(run_exec *e, long step, ckpt_state **out) {
    *out = pt_calloc(1, sizeof **out);
    int rc = rankstate_items(e, *out, 0);
    if (rc <= 0) {
        free(*out);
        *out = NULL;
        return rc;
    }
    (*out)->step = step;
    return 1;
}

int run_exec_write_rank_state(run_exec *e, const char *tmpdir, long step) {
    ckpt_state *s;
    int rc = run_exec_rank_state(e, step, &s);
    if (rc == 1 && ckpt_state_write(tmpdir, e->c.world_rank, s) < 0) rc = -1;
    free(s);
    return rc;
}

/* Why the state is not loaded, once (world rank 0: every rank's reason is the same kind). */
static void rankstate_note(const run_exec *e, const char *why) {
    if (e->c.world_rank != 0) return;
    printf("note: %s: this run's own state (%s%s) is not in the checkpoint (%s): it starts as a fresh "
           "run's does, so the run does not continue the saved trajectory exactly\n", e->c.src->ckpt_dir,
           e->outer ? "--dp-sync's outer state and the replicas' own weights and moments" : ver_name(e),
           e->outer ? "" : ", the update count", why);
    fflush(stdout);
}

/* The loaded state in force: the update count, a pending change posted again. */
static int rankstate_apply(run_exec *e, const ckpt_state *s, const char *dir) {
    for (int i = 0; i < e->n_stages; i++)
        if (e->st[i].ver) e->st[i].n_upd = (int)s->n_upd;
    if (!e->outer) return 0;
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->it[i].name, "outer/snap") && s->pending && !s->it[i].found)
            return pt_seterr("%s/state-%d.safetensors: tensor \"state/nums\" says a change is pending but "
                             "tensor \"outer/snap\" is missing (damaged rank state)", dir, e->c.world_rank);
    return exec_outer_resume(e, s->pending);
}

int exec_rankstate_load(run_exec *e) {
    const run_source *src = e->c.src;
    if (!src || !src->ckpt_dir) return 0;
    ckpt_state *s = pt_calloc(1, sizeof *s);
    char why[700];
    int rc = rankstate_items(e, s, 1);
    if (rc == 1 && src->n_states == 0) {
        rankstate_note(e, "it was saved without rank state: by an older pipetrain, or by a run that keeps none");
        rc = 0;
    } else if (rc == 1) {
        rc = ckpt_state_read(src->ckpt_dir, e->c.world_rank, s, why, sizeof why);
        if (rc == 0) rankstate_note(e, why);
        if (rc == 1) rc = rankstate_apply(e, s, src->ckpt_dir);
    }
    free(s);
    return rc < 0 ? -1 : 0;
}
