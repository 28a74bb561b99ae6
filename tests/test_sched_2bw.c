/* PipeDream-2BW (sched_gen_2bw.c): every P 1..8 and M = P..4P in steps of P through the validator,
 * compute-only and lowered; the 1f1b order of F and BW on every rank; one REDUCE_GRAD + STEP
 * right after the backward of each batch's last microbatch (M / P per rank); M not a multiple of P
 * and chunks > 1 refused; --async-depth (more forwards admitted) valid for both; goldens; the
 * simulator pricing its second weight version (one copy of the weights per stage, whatever P and
 * M) against pipedream's per-microbatch stashes and 1f1b's none. Its runs are checked against
 * its update rule in tests/test_async.c.
 * PT_WRITE_GOLDEN=1 rewrites the goldens (check them by hand before committing). */
#include "sched/sched.h"
#include "sim/sim.h"
#include "util/pt.h"
#include "test.h"
#include "test_sched_util.h"
#include <string.h>

static int valid_both(sched *s, char *msg, size_t n) {
    if (sched_validate(s, NULL) < 0) { snprintf(msg, n, "compute-only: %.300s", pt_err()); return -1; }
    sched *lo = sched_lower(s);
    int rc = lo ? sched_validate(lo, NULL) : -1;
    if (rc < 0) snprintf(msg, n, "lowered: %.300s", pt_err());
    else if (!lo->async || lo->weight_versions != 2) { snprintf(msg, n, "lowering lost async/versions"); rc = -1; }
    sched_free(lo);
    return rc;
}

/* Rank r's compute actions equal 1f1b's, and its STEPs sit right after BW of mb kP-1. */
static int shape_ok(const sched *s, const sched *ref, int r, int P, char *msg, size_t n) {
    int j = 0, steps = 0;
    for (int i = 0; i < s->len[r]; i++) {
        const sched_action *a = &s->acts[r][i];
        if (a->kind == ACT_REDUCE_GRAD || a->kind == ACT_STEP) {
            const sched_action *prev = &s->acts[r][i - (a->kind == ACT_STEP ? 2 : 1)];
            if (prev->kind != ACT_BW || (prev->mb + 1) % P) {
                snprintf(msg, n, "rank %d step %d: update not after a batch's last BW", r, i);
                return -1;
            }
            steps += a->kind == ACT_STEP;
            continue;
        }
        while (j < ref->len[r] && !sched_kind_is_compute(ref->acts[r][j].kind)) j++;
        const sched_action *b = &ref->acts[r][j++];
        if (b->kind != a->kind || b->mb != a->mb) { snprintf(msg, n, "rank %d step %d: not 1f1b's order", r, i); return -1; }
    }
    if (steps != s->n_mb / P) { snprintf(msg, n, "rank %d: %d STEPs, want %d", r, steps, s->n_mb / P); return -1; }
    return 0;
}

static void test_valid_every_p(void) {
    char msg[512] = "", tname[64];
    for (int P = 1; P <= 8; P++) {
        int bad = 0;
        for (int M = P; M <= 4 * P && !bad; M += P) {
            sched *s = gen("2bw", P, M, 0), *ref = gen("1f1b", P, M, 0);
            if (!s || !ref) { snprintf(msg, sizeof msg, "M=%d: %s", M, pt_err()); bad = 1; }
            else if (valid_both(s, msg, sizeof msg) < 0) bad = 1;
            for (int r = 0; r < P && !bad; r++) bad = shape_ok(s, ref, r, P, msg, sizeof msg) < 0;
            if (bad) snprintf(msg + strlen(msg), sizeof msg - strlen(msg), " (M=%d)", M);
            sched_free(s);
            sched_free(ref);
        }
        snprintf(tname, sizeof tname, "2bw valid, 1f1b order, a STEP per batch: P=%d", P);
        CHECK(tname, !bad, "%s", msg);
    }
}

static void test_refusals(void) {
    sched *s = gen("2bw", 4, 6, 0);
    CHECK("2bw: M % P != 0 refused", !s && strstr(pt_err(), "divisible by ranks"), "%s", s ? "accepted" : pt_err());
    sched_free(s);
    s = gen("2bw", 2, 4, 2);
    CHECK("2bw: chunks 2 refused", !s && strstr(pt_err(), "chunks must be 1"), "%s", s ? "accepted" : pt_err());
    sched_free(s);
    s = gen("2bw", 2, 4, 0);
    CHECK("2bw: runnable (a REDUCE_GRAD/STEP pair per batch of P)", s && sched_check_runnable(s, "t") == 0, "%s", pt_err());
    if (s) {   /* a pair per microbatch is not 2bw's pattern */
        sched_push(s, 0, ACT_REDUCE_GRAD, 0, -1);
        sched_push(s, 0, ACT_STEP, -1, -1);
        CHECK("2bw: an extra pair on one rank refused", sched_check_runnable(s, "t") < 0 &&
              strstr(pt_err(), "one per batch of P microbatches"), "%s", pt_err());
    }
    sched_free(s);
    s = gen("pipedream", 2, 4, 0);
    CHECK("pipedream stays runnable", s && sched_check_runnable(s, "t") == 0, "%s", pt_err());
    sched_free(s);
}

/* Forwards rank r runs before its first backward. */
static int admitted(const sched *s, int r) {
    int n = 0;
    for (int i = 0; i < s->len[r] && s->acts[r][i].kind != ACT_BW; i++) n += s->acts[r][i].kind == ACT_F;
    return n;
}

/* --async-depth D: pipedream and 2bw valid (compute-only and lowered) for every P 1..6, M = P..3P,
 * D 0..P (pipedream to M); rank r admits min(M, max(P-r, D)); 2bw's STEPs stay after each batch;
 * D > P refused by 2bw; the simulator prices pipedream's extra stashes (its peak grows). */
static void test_depth(void) {
    char msg[512] = "";
    int bad = 0;
    for (int P = 1; P <= 6 && !bad; P++)
        for (int M = P; M <= 3 * P && !bad; M += P)
            for (int D = 0; D <= M && !bad; D++)
                for (int k = 0; k < 2 && !bad; k++) {
                    if (k == 0 && D > P) continue;
                    sched_params p = { .ranks = P, .microbatches = M, .async_depth = D };
                    sched *s = sched_generate(k ? "pipedream" : "2bw", &p);
                    if (!s) { snprintf(msg, sizeof msg, "%s", pt_err()); bad = 1; }
                    else if (k == 0 ? valid_both(s, msg, sizeof msg) < 0 : sched_validate(s, NULL) < 0) bad = 1;
                    for (int r = 0; r < P && !bad; r++) {
                        int want = P - r > D ? P - r : D;
                        if (want > M) want = M;
                        if (admitted(s, r) != want)
                            snprintf(msg, sizeof msg, "rank %d admits %d, want %d", r, admitted(s, r), want), bad = 1;
                    }
                    if (bad) snprintf(msg + strlen(msg), sizeof msg - strlen(msg), " (%s P=%d M=%d D=%d)",
                                      k ? "pipedream" : "2bw", P, M, D);
                    sched_free(s);
                }
    CHECK("--async-depth: valid, each rank admits max(P-r, D)", !bad, "%s", msg);
    sched_params p = { .ranks = 4, .microbatches = 8, .async_depth = 5 };
    sched *s = sched_generate("2bw", &p);
    CHECK("2bw: --async-depth above P refused", !s && strstr(pt_err(), "async depth must be in 0..P=4"), "%s",
          s ? "accepted" : pt_err());
    sched_free(s);
    p.async_depth = 8;
    s = sched_generate("pipedream", &p);
    sim_costs c;
    sim_costs_init(&c, 4, 1, 1, 1);
    sim_result r;
    int rc = s ? sim_run(s, &c, &(sim_opts){ 1, false }, &r) : -1;
    CHECK("pipedream --async-depth 8: every stage holds 8 stashes (simulated peak)", rc == 0 && r.peak_mb[3] == 8 &&
          r.peak_mb[0] == 8, "%s peak %d", rc ? pt_err() : "", rc ? -1 : r.peak_mb[3]);
    if (rc == 0) sim_result_free(&r);
    sim_costs_free(&c);
    sched_free(s);
}

static void test_goldens(void) {
    char *want;
    sched *s = golden_check("2bw", 2, 4, 0, &want);
    free(want); sched_free(s);
    s = golden_check("2bw", 4, 8, 0, &want);
    free(want); sched_free(s);
}

/* Weight memory: 2bw one extra copy per stage, pipedream peak_mb copies, 1f1b none. */
static void test_sim_prices_versions(void) {
    const int P = 4, M = 8;
    const double PB = 1000, AB = 10;
    const char *names[] = { "2bw", "pipedream", "1f1b" };
    for (int i = 0; i < 3; i++) {
        sched *s = gen(names[i], P, M, 0);
        sim_costs c;
        sim_costs_init(&c, P, 1, 1, 1);
        for (int g = 0; g < P; g++) c.param_bytes[g] = PB, c.act_bytes[g] = AB;
        sim_result r;
        int rc = s ? sim_run(s, &c, &(sim_opts){ 1, false }, &r) : -1;
        char tname[80], why[160] = "";
        for (int g = 0; rc == 0 && g < P && !why[0]; g++) {
            double want = i == 0 ? PB : i == 1 ? r.peak_mb[g] * PB : 0;
            if (r.stash_bytes[g] != want) snprintf(why, sizeof why, "stage %d: %g, want %g", g, r.stash_bytes[g], want);
            else if (r.rank_peak_bytes[g] != r.peak_mb[g] * AB + want)
                snprintf(why, sizeof why, "rank %d peak %g, want %g", g, r.rank_peak_bytes[g], r.peak_mb[g] * AB + want);
        }
        snprintf(tname, sizeof tname, "simulator prices %s's weight versions", names[i]);
        CHECK(tname, rc == 0 && !why[0], "%s", rc ? pt_err() : why);
        if (rc == 0) sim_result_free(&r);
        sim_costs_free(&c);
        sched_free(s);
    }
}

int main(void) {
    test_valid_every_p();
    test_refusals();
    test_goldens();
    test_sim_prices_versions();
    test_depth();
    TEST_DONE();
}
