/* The planner's pruning against its exhaustive search: on small models and clusters (tensor
 * parallelism winning and losing, memory-tight devices, two device generations, ZeRO-1) the
 * default search must return exactly the layouts the exhaustive one does (plan_opts.exhaustive:
 * every candidate simulated and polished with every move), same layout, same split, same
 * predicted step, in the same order; and every lower bound it prunes by must hold. Run from the
 * repo root. */
#include "plan/plan.h"
#include "plan_tp_util.h"
#include "test.h"
#include "util/pt.h"
#include <stdio.h>
#include <string.h>

#define TOP 3
#define ALL 100000           /* top for keeping every candidate's result */
#define BOUND_ROUNDING 1e-12 /* a bound sums the simulator's terms in another order */

typedef struct {
    const char *name;
    gpt_config cfg;
    long G;
    int T;
    int nodes, per_node;     /* two generations when slow_nodes > 0: the last slow_nodes nodes */
    int slow_nodes;
    double memory;           /* bytes per device (the slow generation has half) */
    double intra_bw, inter_bw;
    int zero;
} prune_case;

/* A cluster of `nodes` nodes of `per_node` devices (speed 1; the last slow_nodes at speed 0.5 with
 * half the memory), reference 1e12 FLOP/s. */
static int case_cluster(const prune_case *c, plan_cluster *k) {
    char text[2048];
    int n = 0, fast = c->nodes - c->slow_nodes;
    n += snprintf(text + n, sizeof text - (size_t)n, "{\"nodes\":[");
    if (fast > 0)
        n += snprintf(text + n, sizeof text - (size_t)n,
                      "{\"repeat\":%d,\"devices\":{\"count\":%d,\"name\":\"new\",\"speed\":1,\"memory\":%.17g},"
                      "\"link\":{\"bandwidth\":%g,\"latency\":2e-6}}", fast, c->per_node, c->memory, c->intra_bw);
    if (c->slow_nodes > 0)
        n += snprintf(text + n, sizeof text - (size_t)n,
                      "%s{\"repeat\":%d,\"devices\":{\"count\":%d,\"name\":\"old\",\"speed\":0.5,\"memory\":%.17g},"
                      "\"link\":{\"bandwidth\":%g,\"latency\":4e-6}}", fast > 0 ? "," : "", c->slow_nodes, c->per_node,
                      c->memory / 2, c->intra_bw / 2);
    snprintf(text + n, sizeof text - (size_t)n, "],\"network\":{\"bandwidth\":%g,\"latency\":1e-5},"
             "\"reference_flops\":1e12}", c->inter_bw);
    return plan_cluster_parse(k, text, c->name);
}

static int search(const prune_case *c, const plan_cluster *k, bool exhaustive, int top, plan_result *r) {
    plan_opts o = { .global_batch = c->G, .T = c->T, .top = top, .zero = c->zero, .exhaustive = exhaustive };
    return plan_search(&c->cfg, k, &o, r);
}

/* Whether two layouts are the same in every field the search chooses and predicts. */
static bool same_layout(const plan_layout *a, const plan_layout *b) {
    if (a->P != b->P || a->D != b->D || a->tp != b->tp || a->zero != b->zero || a->M != b->M ||
        a->mb_size != b->mb_size || a->chunks != b->chunks || a->K != b->K || strcmp(a->schedule, b->schedule) ||
        strcmp(a->placement, b->placement) || a->recompute != b->recompute || a->tp_overlap != b->tp_overlap ||
        a->tp_recompute != b->tp_recompute || a->sp != b->sp || a->step_time != b->step_time)
        return false;
    for (int g = 0; g < a->K; g++)
        if (a->split[g] != b->split[g]) return false;
    return true;
}

static void describe(const plan_layout *p, char *buf, size_t n) {
    char split[256];
    snprintf(buf, n, "tp %d x dp %d x P %d %s v=%d %d x %d rc %d tprc %d ov %d sp %d %s split %s: %.17g s", p->tp,
             p->D, p->P, p->schedule, p->chunks, p->M, p->mb_size, p->recompute, p->tp_recompute, p->tp_overlap,
             p->sp, p->placement, plan_layout_split_str(p, split, sizeof split), p->step_time);
}

/* Pruned == exhaustive for one case; *tp_best gets the winner's TP degree (0: nothing fits). */
static void check_case(const prune_case *c, int *tp_best) {
    plan_cluster k;
    char name[128], da[512], db[512];
    *tp_best = 0;
    if (case_cluster(c, &k) < 0) { CHECK(c->name, 0, "cluster: %s", pt_err()); return; }
    plan_result pr, ex;
    int rc = search(c, &k, false, TOP, &pr) | search(c, &k, true, TOP, &ex);
    bool same = rc == 0 && pr.n_best == ex.n_best;
    int differ = -1;
    for (int i = 0; same && i < pr.n_best; i++)
        if (!same_layout(&pr.best[i], &ex.best[i])) { same = false; differ = i; }
    if (differ >= 0) {
        describe(&pr.best[differ], da, sizeof da);
        describe(&ex.best[differ], db, sizeof db);
    }
    snprintf(name, sizeof name, "plan_prune_same_as_exhaustive_%s", c->name);
    CHECK(name, same, "rc %d, %d vs %d layouts; #%d pruned %s, exhaustive %s", rc, pr.n_best, ex.n_best, differ + 1,
          differ >= 0 ? da : "-", differ >= 0 ? db : "-");
    snprintf(name, sizeof name, "plan_prune_fewer_runs_%s", c->name);
    CHECK(name, rc == 0 && pr.simulated <= ex.simulated, "pruned %ld simulator runs, exhaustive %ld", pr.simulated,
          ex.simulated);
    if (rc == 0 && pr.n_best > 0) {
        *tp_best = pr.best[0].tp;
        describe(&pr.best[0], da, sizeof da);
        printf("# %s: %s; %ld of %ld layouts fit; runs %ld pruned, %ld exhaustive\n", c->name, da,
               pr.considered - pr.infeasible, pr.considered, pr.simulated, ex.simulated);
    } else if (rc == 0) {
        printf("# %s: nothing fits (%s)\n", c->name, pr.advice);
    }
    plan_result_free(&pr);
    plan_result_free(&ex);
    /* every candidate's polished step against the bound it was sorted and pruned by */
    plan_result all;
    rc = search(c, &k, true, ALL, &all);
    int bad = -1;
    for (int i = 0; rc == 0 && i < all.n_best && bad < 0; i++)
        if (all.best[i].bound > all.best[i].step_time * (1 + BOUND_ROUNDING)) bad = i;
    if (bad >= 0) describe(&all.best[bad], da, sizeof da);
    snprintf(name, sizeof name, "plan_prune_bound_holds_%s", c->name);
    CHECK(name, rc == 0 && bad < 0, "rc %d; bound %.17g above %s", rc, bad >= 0 ? all.best[bad].bound : 0,
          bad >= 0 ? da : "-");
    plan_result_free(&all);
    plan_cluster_free(&k);
}

int main(void) {
    /* memory: a C=256 block's parameters, gradients and moments are about 12.6 MB in all */
    const prune_case cases[] = {
        /* wide model, fast node links: TP pays */
        { "tp_wins", small_cfg(8, 512, 8, 256, 64), 16, 64, 2, 4, 0, 1e12, 2e11, 1e9, 0 },
        /* narrow model, slow links: TP's all-reduces cost more than they save */
        { "tp_loses", small_cfg(8, 64, 4, 128, 64), 16, 64, 2, 4, 0, 1e12, 1e9, 1e8, 0 },
        /* devices that hold only part of the model: recomputation, TP or ZeRO must make room */
        { "memory_tight", small_cfg(8, 256, 8, 256, 128), 16, 128, 2, 4, 0, 3e7, 5e10, 5e9, 0 },
        { "memory_tight_zero", small_cfg(8, 256, 8, 256, 128), 16, 128, 2, 4, 0, 2e7, 5e10, 5e9, 1 },
        /* two generations: mixed placement, uneven splits */
        { "heterogeneous", small_cfg(12, 256, 8, 256, 64), 16, 64, 2, 4, 1, 1e12, 1e11, 2e9, 0 },
        { "heterogeneous_tight", small_cfg(12, 256, 8, 256, 128), 32, 128, 4, 2, 2, 1.2e8, 5e10, 5e9, 0 },
    };
    int n = (int)(sizeof cases / sizeof cases[0]), with_tp = 0, without_tp = 0;
    for (int i = 0; i < n; i++) {
        int tp;
        check_case(&cases[i], &tp);
        with_tp += tp > 1;
        without_tp += tp == 1;
    }
    CHECK("plan_prune_cases_cover_tp_winning_and_losing", with_tp > 0 && without_tp > 0,
          "%d cases won with tp > 1, %d with tp 1", with_tp, without_tp);
    TEST_DONE();
}
