/* Tests of the schedule IR: action text round-trip, goldens of gpipe / 1f1b / interleaved-1f1b /
 * pipedream, every generator through the validator (compute-only and lowered), lowering, peak
 * activations, validator rejections with the failing cell, CSV round-trip and CSV errors.
 * Not the simulator's tests (test_sim*). PT_WRITE_GOLDEN=1 rewrites the goldens (then check them
 * by hand). */
#include "sched/sched.h"
#include "test.h"
#include "test_sched_util.h"
#include "util/pt.h"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- helpers ---- */

static int count_kind(const sched *s, sched_kind k) {
    int n = 0;
    for (int r = 0; r < s->n_ranks; r++)
        for (int i = 0; i < s->len[r]; i++) n += s->acts[r][i].kind == k;
    return n;
}

/* Removes action i of rank r. */
static void drop_action(sched *s, int r, int i) {
    memmove(&s->acts[r][i], &s->acts[r][i + 1], (size_t)(s->len[r] - i - 1) * sizeof(sched_action));
    s->len[r]--;
}

static int find_action(const sched *s, int r, const char *tok) {
    char buf[48];
    for (int i = 0; i < s->len[r]; i++)
        if (strcmp(sched_action_str(&s->acts[r][i], buf, sizeof buf), tok) == 0) return i;
    return -1;
}

static bool same_sched(const sched *a, const sched *b) {
    if (a->n_ranks != b->n_ranks || a->n_stages != b->n_stages || a->n_mb != b->n_mb ||
        a->n_pipes != b->n_pipes || a->lowered != b->lowered || a->async != b->async) return false;
    for (int g = 0; g < a->n_stages; g++) if (a->stage_rank[g] != b->stage_rank[g]) return false;
    for (int m = 0; m < a->n_mb; m++) if (a->mb_pipe[m] != b->mb_pipe[m]) return false;
    for (int r = 0; r < a->n_ranks; r++) {
        if (a->len[r] != b->len[r]) return false;
        if (a->len[r] && memcmp(a->acts[r], b->acts[r], (size_t)a->len[r] * sizeof(sched_action))) return false;
    }
    return true;
}

/* ---- action text ---- */

static void test_action_text(void) {
    char buf[48], name[64];
    for (int k = 0; k < ACT_N_KINDS; k++) {
        sched_action a = { .stage = 12, .mb = 345, .kind = (sched_kind)k }, b;
        if (k == ACT_REDUCE_GRAD) a.mb = -1;
        if (k == ACT_STEP) a.stage = a.mb = -1;
        sched_action_str(&a, buf, sizeof buf);
        snprintf(name, sizeof name, "action_roundtrip_%s", sched_kind_name((sched_kind)k));
        int rc = sched_action_parse(buf, &b);
        CHECK(name, rc == 0 && b.kind == a.kind && b.stage == a.stage && b.mb == a.mb, "'%s' -> rc %d %s", buf, rc, pt_err());
    }
    sched_action a;
    CHECK("action_parse_I_is_B", sched_action_parse("3I7", &a) == 0 && a.kind == ACT_B && a.stage == 3 && a.mb == 7, "%s", pt_err());
    const char *bad[] = { "XF1", "2F", "F1", "2F1x", "", "2SEND1", "1STEP", "-1F0", "2BWW0" };
    for (int i = 0; i < (int)(sizeof bad / sizeof bad[0]); i++) {
        snprintf(name, sizeof name, "action_parse_rejects_'%s'", bad[i]);
        int rc = sched_action_parse(bad[i], &a);
        CHECK(name, rc < 0 && strstr(pt_err(), "bad action"), "rc %d err '%s'", rc, pt_err());
    }
    CHECK("action_parse_huge_microbatch_says_so", sched_action_parse("0F200000000", &a) < 0 &&
          strstr(pt_err(), "microbatch above"), "%s", pt_err());
}

/* ---- goldens ---- */

static void check_golden(const char *name, int P, int M, int v) {
    char *want, tname[160];
    sched *s = golden_check(name, P, M, v, &want);
    if (!s) return;
    if (v) snprintf(tname, sizeof tname, "text_parse_golden_%s-p%d-m%d-v%d.txt", name, P, M, v);
    else snprintf(tname, sizeof tname, "text_parse_golden_%s-p%d-m%d.txt", name, P, M);
    sched *back = want ? sched_parse_text(want, tname, 1) : NULL;
    CHECK(tname, back && same_sched(s, back), "%s", back ? "parsed grid differs" : pt_err());
    sched_free(back);
    free(want);
    sched_free(s);
}

static void test_goldens(void) {
    for (int P = 2; P <= 4; P++) {
        check_golden("gpipe", P, 4, 0);
        check_golden("1f1b", P, 4, 0);
        check_golden("1f1b", P, 2 * P + 1, 0);
        check_golden("pipedream", P, 4, 0);
        check_golden("interleaved-1f1b", P, 2 * P, 2);
    }
    check_golden("1f1b", 4, 2, 0);
    check_golden("interleaved-1f1b", 2, 4, 3);
}

/* ---- every generator validates ---- */

/* A synchronous schedule ends each rank with its stages' REDUCE_GRAD then STEP. */
static bool has_sync_tail(const sched *s) {
    for (int r = 0; r < s->n_ranks; r++) {
        int n = 0;
        for (int g = 0; g < s->n_stages; g++) n += s->stage_rank[g] == r;
        if (s->len[r] < n + 1 || s->acts[r][s->len[r] - 1].kind != ACT_STEP) return false;
        for (int i = s->len[r] - 1 - n; i < s->len[r] - 1; i++)
            if (s->acts[r][i].kind != ACT_REDUCE_GRAD) return false;
    }
    return true;
}

/* Lowered: one RECV per SEND, and a send for every cross-rank edge (F and backward). */
static bool comm_balanced(const sched *lo) {
    int edges = 0;
    for (int g = 0; g < lo->n_stages; g++) {
        int nx = sched_stage_next(lo, g);
        if (nx < 0 || lo->stage_rank[nx] == lo->stage_rank[g]) continue;
        for (int m = 0; m < lo->n_mb; m++) edges += lo->mb_pipe[m] == g / lo->stages_per_pipe;
    }
    return count_kind(lo, ACT_SEND_F) == count_kind(lo, ACT_RECV_F) && count_kind(lo, ACT_SEND_F) == edges &&
           count_kind(lo, ACT_SEND_B) == count_kind(lo, ACT_RECV_B) && count_kind(lo, ACT_SEND_B) == edges;
}

/* One (generator, P, M): 1 ok, 0 rejected parameters, -1 failure (message in why). */
static int check_one_generated(const char *name, int P, int M, char *why, int n) {
    sched *s = gen(name, P, M, 0);
    if (!s) return 0;
    int rc = -1;
    sched *lo = NULL;
    if (sched_validate(s, NULL) < 0) snprintf(why, (size_t)n, "P=%d M=%d: %s", P, M, pt_err());
    else if (!s->async && !has_sync_tail(s)) snprintf(why, (size_t)n, "P=%d M=%d: no REDUCE_GRAD/STEP tail", P, M);
    else if (!(lo = sched_lower(s))) snprintf(why, (size_t)n, "P=%d M=%d lower: %s", P, M, pt_err());
    else if (sched_validate(lo, NULL) < 0) snprintf(why, (size_t)n, "P=%d M=%d lowered: %s", P, M, pt_err());
    else if (!comm_balanced(lo)) snprintf(why, (size_t)n, "P=%d M=%d: sends and receives unbalanced", P, M);
    else rc = 1;
    sched_free(lo);
    sched_free(s);
    return rc;
}

/* Tries M in a spread of counts plus P, 2P, 3P; one check per (generator, P). A P for which the
 * generator rejects every M (a documented limit, e.g. an even rank count) is reported, not failed. */
static void check_generator_p(const char *name, int P) {
    const int ms[] = { 1, 2, 3, 4, 5, 7, 8, 12, 16 };
    const int n_ms = (int)(sizeof ms / sizeof ms[0]);
    char tname[96], why[2400] = "", rejected[256] = "";
    int made = 0, bad = 0;
    for (int j = 0; j < n_ms + 3 && !bad; j++) {
        int M = j < n_ms ? ms[j] : P * (j - n_ms + 1);
        int rc = check_one_generated(name, P, M, why, sizeof why);
        if (rc == 0 && !rejected[0]) snprintf(rejected, sizeof rejected, "%s", pt_err());
        made += rc == 1;
        bad = rc < 0;
    }
    snprintf(tname, sizeof tname, "generator_valid_%s_p%d", name, P);
    if (!bad && made == 0) printf("# note: %s rejects every M for P=%d: %s\n", name, P, rejected);
    else CHECK(tname, !bad, "%s", why);
}

static void test_all_generators(void) {
    char tname[96];
    for (int gi = 0; sched_generator_names[gi]; gi++) {
        const char *name = sched_generator_names[gi];
        sched *probe = gen(name, 2, 4, 0);
        if (!probe && strstr(pt_err(), "not implemented")) {
            printf("# skipped %s: %s\n", name, pt_err());
            continue;
        }
        snprintf(tname, sizeof tname, "generator_runs_%s_p2_m4", name);
        CHECK(tname, probe != NULL, "%s", pt_err());
        sched_free(probe);
        for (int P = 1; P <= 8; P++) check_generator_p(name, P);
    }
}

/* ---- generator specifics and parameter errors ---- */

static void test_gen_errors(void) {
    sched *s = gen("interleaved-1f1b", 4, 6, 2);
    CHECK("interleaved_rejects_m_not_divisible", !s && strstr(pt_err(), "interleaved-1f1b needs microbatches divisible by ranks (got M=6, P=4)"), "%s", pt_err());
    s = gen("interleaved-1f1b", 2, 4, 1);
    CHECK("interleaved_rejects_one_chunk", !s && strstr(pt_err(), "chunks"), "%s", pt_err());
    s = gen("1f1b", 0, 4, 0);
    CHECK("rejects_zero_ranks", !s && strstr(pt_err(), "ranks"), "%s", pt_err());
    s = gen("gpipe", 2, 0, 0);
    CHECK("rejects_zero_microbatches", !s && strstr(pt_err(), "microbatches"), "%s", pt_err());
    s = gen("gpipe", 2, 4, 2);
    CHECK("gpipe_rejects_chunks", !s && strstr(pt_err(), "chunks"), "%s", pt_err());
    s = gen("nope", 2, 4, 0);
    CHECK("unknown_generator_lists_names", !s && strstr(pt_err(), "nope") && strstr(pt_err(), "interleaved-1f1b") &&
          strstr(pt_err(), "greedy"), "%s", pt_err());
}

/* Each registry row generates what it declares: P * chunks * pipes stages, its pipes, async or
 * not; every row is found by name, listed in the help list and the names array. */
static void test_registry(void) {
    int n, bad = 0, names = 0;
    const sched_generator *g = sched_generator_rows(&n);
    for (int i = 0; i < n; i++) {
        sched *s = gen(g[i].name, 2, 4, 0);
        if (!s || sched_generator_find(g[i].name) != &g[i] || !strstr(sched_generator_list(), g[i].name) ||
            !g[i].help || s->n_stages != 2 * g[i].chunks * g[i].pipes || s->n_pipes != g[i].pipes ||
            s->async != g[i].async || strcmp(s->name, g[i].name)) {
            printf("# row %s: %s\n", g[i].name, s ? "differs from what it generates" : pt_err());
            bad++;
        }
        sched_free(s);
    }
    while (sched_generator_names[names]) names++;
    CHECK("registry_rows_generate_what_they_declare", n >= 9 && bad == 0, "%d of %d rows differ", bad, n);
    CHECK("registry_names_array_lists_every_row", names == n && !strcmp(sched_generator_names[0], g[0].name),
          "%d names, %d rows", names, n);
    CHECK("registry_find_unknown_is_null", !sched_generator_find("nope") && !sched_generator_find(NULL), "found");
}

/* Interleaved rank r starts with min((P-r-1)*2 + (v-1)*P, v*M) forwards (Megatron-LM's warm-up). */
static void test_interleaved_warmup(void) {
    const int cases[][3] = { { 4, 8, 2 }, { 4, 4, 2 }, { 3, 9, 3 }, { 2, 8, 4 } };
    for (int c = 0; c < 4; c++) {
        int P = cases[c][0], M = cases[c][1], v = cases[c][2], ok = 1;
        sched *s = gen("interleaved-1f1b", P, M, v);
        for (int r = 0; s && r < P; r++) {
            int want = (P - r - 1) * 2 + (v - 1) * P, n = 0;
            if (want > v * M) want = v * M;
            while (s->acts[r][n].kind == ACT_F) n++;
            if (n != want + (want < v * M)) ok = 0;    /* the steady phase opens with one more F */
        }
        char tname[64];
        snprintf(tname, sizeof tname, "interleaved_warmup_p%d_m%d_v%d", P, M, v);
        CHECK(tname, s && ok && s->n_stages == P * v && s->stage_rank[P + 1] == 1, "%s", s ? "warm-up length" : pt_err());
        sched_free(s);
    }
}

static void test_peak_activations(void) {
    int out[8], ok1 = 1, okg = 1;
    for (int P = 1; P <= 6; P++)
        for (int M = 1; M <= 10; M++) {
            sched *s = gen("1f1b", P, M, 0);
            sched_peak_activations(s, out);
            if (out[0] != (P < M ? P : M)) ok1 = 0;
            sched_free(s);
            s = gen("gpipe", P, M, 0);
            sched_peak_activations(s, out);
            if (out[0] != M || out[P - 1] != M) okg = 0;
            sched_free(s);
        }
    CHECK("peak_activations_1f1b_stage0_min_p_m", ok1, "1f1b stage 0 peak != min(P, M)");
    CHECK("peak_activations_gpipe_m", okg, "gpipe peak != M");
}

/* ---- the dependency rule ---- */

/* The prerequisites of `tok` in s, as text joined by spaces ("" when none). */
static const char *deps_str(const sched *s, const char *tok, char *out, int n) {
    sched_action a, d[SCHED_MAX_DEPS];
    char b[48];
    out[0] = 0;
    if (sched_action_parse(tok, &a) < 0) return "bad token";
    int k = sched_action_deps(s, &a, d);
    for (int j = 0; j < k; j++)
        snprintf(out + strlen(out), (size_t)n - strlen(out), "%s%s", j ? " " : "", sched_action_str(&d[j], b, sizeof b));
    return out;
}

static void test_action_deps(void) {
    const char *want[][3] = {   /* schedule (c: compute-only 1f1b P=3, l: lowered), action, prerequisites */
        { "c", "0F0", "" }, { "c", "1F0", "0F0" }, { "c", "1BW0", "1F0 2B0" }, { "c", "2B1", "2F1" },
        { "c", "1W1", "1B1" }, { "c", "0REDUCE_GRAD", "" }, { "c", "STEP", "" },
        { "l", "1F0", "1RECV_F0" }, { "l", "1BW0", "1F0 1RECV_B0" }, { "l", "1RECV_F0", "0SEND_F0" },
        { "l", "1RECV_B0", "2SEND_B0" }, { "l", "1SEND_F0", "1F0" }, { "l", "1SEND_B0", "1B0" },
        { "l", "0RECV_F0", "" }, { "l", "2RECV_B0", "" },
    };
    sched *c = gen("1f1b", 3, 2, 0), *l = sched_lower(c);
    char got[128], tname[64];
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const char *g = deps_str(want[i][0][0] == 'c' ? c : l, want[i][1], got, sizeof got);
        snprintf(tname, sizeof tname, "action_deps_%s_%s", want[i][0][0] == 'c' ? "compute" : "lowered", want[i][1]);
        CHECK(tname, !strcmp(g, want[i][2]), "got '%s', want '%s'", g, want[i][2]);
    }
    sched_free(l);
    sched_free(c);
    /* zb-v P=2: stages 1 and 2 share rank 1, so the V's turn needs no receive; 2-3 crosses ranks */
    sched *v = gen("zb-v", 2, 4, 0), *vl = sched_lower(v), *ch = gen("chimera", 2, 2, 0);
    CHECK("action_deps_lowered_v_turn_same_rank", !strcmp(deps_str(vl, "2F0", got, sizeof got), "1F0") &&
          !strcmp(deps_str(vl, "1B0", got, sizeof got), "1F0 2B0"), "%s", got);
    CHECK("action_deps_lowered_v_cross_rank", !strcmp(deps_str(vl, "3F0", got, sizeof got), "3RECV_F0") &&
          !strcmp(deps_str(vl, "2B0", got, sizeof got), "2F0 2RECV_B0"), "%s", got);
    CHECK("action_deps_chimera_pipe_start", !strcmp(deps_str(ch, "2F1", got, sizeof got), "") &&
          !strcmp(deps_str(ch, "3F1", got, sizeof got), "2F1"), "%s", got);
    sched_free(ch);
    sched_free(vl);
    sched_free(v);
}

/* The executor's slot count, written out here as the reference sched_stage_peak_slots must equal. */
static int ref_slots(const sched *s, int g, bool recompute) {
    int r = s->stage_rank[g], n = 0, peak = 1;
    for (int i = 0; i < s->len[r]; i++) {
        sched_action a = s->acts[r][i];
        if (a.stage != g) continue;
        if (a.kind == (recompute ? ACT_B : ACT_F)) n++;
        if (a.kind == ACT_BW && recompute) n++;
        if (n > peak) peak = n;
        if (a.kind == ACT_W || a.kind == ACT_BW) n--;
    }
    return peak;
}

static void test_stage_peak_slots(void) {
    int n, bad = 0, cases = 0;
    const sched_generator *rows = sched_generator_rows(&n);
    for (int i = 0; i < n; i++)
        for (int P = 2; P <= 4; P += 2)
            for (int M = P; M <= 3 * P; M += P) {
                sched *s = gen(rows[i].name, P, M, 0), *l = s ? sched_lower(s) : NULL;
                int peak[64];
                if (!s) continue;
                sched_peak_activations(s, peak);
                for (int g = 0; g < s->n_stages; g++, cases++)
                    for (int rc = 0; rc < 2; rc++)
                        if (sched_stage_peak_slots(s, g, rc) != ref_slots(s, g, rc) ||
                            sched_stage_peak_slots(l, g, rc) != ref_slots(s, g, rc) ||
                            (!rc && sched_stage_peak_slots(s, g, false) != peak[g])) {
                            printf("# %s P=%d M=%d stage %d recompute %d: %d, want %d\n", rows[i].name, P, M, g, rc,
                                   sched_stage_peak_slots(s, g, rc), ref_slots(s, g, rc));
                            bad++;
                        }
                sched_free(l);
                sched_free(s);
            }
    CHECK("stage_peak_slots_equal_the_executors_count", bad == 0 && cases > 50, "%d of %d differ", bad, cases);
    sched *s = gen("1f1b", 4, 8, 0), *z = gen("zb-h1", 4, 8, 0);
    CHECK("stage_peak_slots_1f1b", sched_stage_peak_slots(s, 0, false) == 4 && sched_stage_peak_slots(s, 3, false) == 1 &&
          sched_stage_peak_slots(s, 0, true) == 1, "%d %d %d", sched_stage_peak_slots(s, 0, false),
          sched_stage_peak_slots(s, 3, false), sched_stage_peak_slots(s, 0, true));
    /* zb-h1 rank 3 defers 3 W's: with recomputation a set is held from B to W */
    CHECK("stage_peak_slots_recompute_b_to_w", sched_stage_peak_slots(z, 3, true) == 4, "%d",
          sched_stage_peak_slots(z, 3, true));
    sched_free(z);
    sched_free(s);
}

/* ---- the optimizer's tail ---- */

static void test_tail(void) {
    /* 1f1b without its tail (torch's notation) gets exactly the generator's tail back */
    sched *g = gen("1f1b", 3, 4, 0), *s = sched_copy(g);
    for (int r = 0; r < s->n_ranks; r++)
        while (s->len[r] && (s->acts[r][s->len[r] - 1].kind == ACT_STEP || s->acts[r][s->len[r] - 1].kind == ACT_REDUCE_GRAD))
            s->len[r]--;
    CHECK("tail_compute_only_not_runnable", sched_check_runnable(s, "x.csv") < 0 &&
          strstr(pt_err(), "x.csv: rank 0 has no STEP"), "%s", pt_err());
    bool added = sched_append_missing_tail(s);
    CHECK("tail_missing_appended_as_generated", added && same_sched(s, g) && sched_validate(s, NULL) == 0 &&
          sched_check_runnable(s, "x.csv") == 0, "%s", pt_err());
    CHECK("tail_present_left_alone", !sched_append_missing_tail(s) && same_sched(s, g), "changed");
    drop_action(s, 1, s->len[1] - 1);                        /* rank 1 loses its STEP */
    CHECK("tail_partial_left_alone", !sched_append_missing_tail(s) && sched_check_runnable(s, "x.csv") < 0 &&
          strstr(pt_err(), "x.csv: rank 1 has no STEP"), "%s", pt_err());
    drop_action(s, 1, s->len[1] - 1);                        /* and its REDUCE_GRAD */
    CHECK("tail_partial_names_the_rank", !sched_append_missing_tail(s) && sched_check_runnable(s, "x.csv") < 0 &&
          strstr(pt_err(), "x.csv: rank 1 has no STEP"), "%s", pt_err());
    sched_free(s);
    sched_free(g);
    sched *pd = gen("pipedream", 2, 3, 0);
    CHECK("tail_async_runnable", sched_check_runnable(pd, "p.csv") == 0 && !sched_append_missing_tail(pd), "%s", pt_err());
    drop_action(pd, 0, pd->len[0] - 1);
    CHECK("tail_async_pairs_named", sched_check_runnable(pd, "p.csv") < 0 &&
          strstr(pt_err(), "p.csv: rank 0 has 2 REDUCE_GRAD/STEP pairs"), "%s", pt_err());
    sched_free(pd);
}

/* ---- lowering ---- */

static void test_lowering_shape(void) {
    sched *s = gen("1f1b", 3, 2, 0), *lo = sched_lower(s);
    char *got = lo ? print_str(lo) : NULL;
    /* last stage sends no forward output; its BW needs no RECV_B */
    const char *want2 =
        "rank 0: 0F0 0SEND_F0 0F1 0SEND_F1 0RECV_B0 0BW0 0RECV_B1 0BW1 0REDUCE_GRAD STEP\n"
        "rank 1: 1RECV_F0 1F0 1SEND_F0 1RECV_F1 1F1 1SEND_F1 1RECV_B0 1BW0 1SEND_B0 1RECV_B1 1BW1 1SEND_B1 1REDUCE_GRAD STEP\n"
        "rank 2: 2RECV_F0 2F0 2BW0 2SEND_B0 2RECV_F1 2F1 2BW1 2SEND_B1 2REDUCE_GRAD STEP\n";
    CHECK("lower_1f1b_p3_m2", got && strcmp(got, want2) == 0 && lo->lowered, "got:\n%s", got ? got : pt_err());
    free(got);
    sched_free(lo);
    sched_free(s);
    /* interleaved with P=1: every handover is on one rank, so nothing to send */
    s = gen("interleaved-1f1b", 1, 3, 2);
    lo = s ? sched_lower(s) : NULL;
    CHECK("lower_same_rank_no_comm", lo && count_kind(lo, ACT_SEND_F) == 0 && count_kind(lo, ACT_RECV_B) == 0, "%s", pt_err());
    sched_free(lo);
    sched_free(s);
}

/* ---- validator rejections ---- */

static void check_reject(const char *name, const sched *s, int rank, int step, const char *msg, const char *cell) {
    sched_error e;
    int rc = s ? sched_validate(s, &e) : 0;
    CHECK(name, s && rc < 0 && e.rank == rank && e.step == step && strstr(e.msg, msg) && strstr(pt_err(), cell),
          "rc %d cell (%d,%d) want (%d,%d); err: %s", rc, s ? e.rank : -9, s ? e.step : -9, rank, step, pt_err());
}

static void test_validator_rejects(void) {
    sched *s = sched_parse_csv("0F0,0B0,0W0\n1F0,1B0\n", "t", 1);
    check_reject("validate_rejects_missing_W", s, 1, 1, "missing 1W0", "[1B0]");
    sched_free(s);
    s = sched_parse_csv("0F0,0F1,0BW0,0BW1\n1F0,1BW1,1BW0,1F1\n", "t", 1);
    check_reject("validate_rejects_B_before_F", s, 1, 1, "1BW1 on rank 1 step 1 runs before 1F1", "[1BW1]");
    sched_free(s);
    s = gen("1f1b", 4, 4, 0);
    int i = find_action(s, 3, "3F2");
    s->acts[3][i].stage = 2;
    check_reject("validate_rejects_stage_on_two_ranks", s, 3, i, "stage 2 appears on ranks 2 and 3", "[2F2]");
    sched_free(s);
    sched *c = gen("gpipe", 3, 2, 0);
    s = sched_lower(c);
    drop_action(s, 2, find_action(s, 2, "2RECV_F0"));
    check_reject("validate_rejects_send_without_recv", s, 1, find_action(s, 1, "1SEND_F0"),
                 "1SEND_F0 on rank 1 step 2 has no matching 2RECV_F0 on rank 2", "[1SEND_F0]");
    sched_free(s);
    sched_free(c);
    s = sched_parse_csv("0RECV_B0,0F0,0SEND_F0,0BW0\n1RECV_F0,1F0,1BW0,1SEND_B0\n", "t", 1);
    check_reject("validate_rejects_cyclic_wait", s, 0, 0,
                 "deadlock: every rank waits: rank 0 at step 0 (0RECV_B0) waits for 1SEND_B0 (rank 1); "
                 "rank 1 at step 0 (1RECV_F0) waits for 0SEND_F0 (rank 0)", "[0RECV_B0]");
    sched_free(s);
    /* compute-only deadlock: 0BW0 needs 1BW0, which rank 1 runs after 1F1, which needs 0F1 */
    s = sched_parse_csv("0F0,0BW0,0F1,0BW1\n1F1,1BW1,1F0,1BW0\n", "t", 1);
    check_reject("validate_rejects_compute_deadlock", s, 0, 1, "deadlock: every rank waits: rank 0 at step 1 (0BW0) "
                 "waits for 1BW0 (rank 1); rank 1 at step 0 (1F1) waits for 0F1 (rank 0)", "[0BW0]");
    sched_free(s);
    s = sched_parse_csv("0F0,0BW0,STEP,0F1,0BW1\n", "t", 1);
    check_reject("validate_rejects_compute_after_step", s, 0, 3, "0F1 on rank 0 step 3 runs after STEP", "[0F1]");
    sched_free(s);
    s = sched_parse_csv("0F0,0F1,0BW0,0REDUCE_GRAD,0BW1,STEP\n", "t", 1);
    check_reject("validate_rejects_reduce_before_backward", s, 0, 3, "0REDUCE_GRAD on rank 0 step 3 runs before 0BW1", "[0REDUCE_GRAD]");
    sched_free(s);
    /* a big schedule: the error shows a window of the grid around the cell, not all of it */
    s = gen("1f1b", 16, 64, 0);
    i = find_action(s, 9, "9BW40");
    s->acts[9][i].kind = ACT_B;
    check_reject("validate_big_grid_window", s, 9, i, "missing 9W40", "[9B40]");
    CHECK("validate_big_grid_window_short", strlen(pt_err()) < 1800 && strstr(pt_err(), "... ranks 0-5") &&
          strstr(pt_err(), "... ranks 14-15"), "%zu chars: %s", strlen(pt_err()), pt_err());
    sched_free(s);
    s = sched_parse_csv("0F0,0BW0,0F0,0BW1\n", "t", 1);
    check_reject("validate_rejects_duplicate", s, 0, 2, "runs twice", "[0F0]");
    sched_free(s);
}

/* ---- CSV ---- */

static void check_csv_roundtrip(const char *tname, sched *s, int n_pipes) {
    char path[64];
    snprintf(path, sizeof path, "/tmp/pt_test_sched_%d.csv", (int)getpid());
    FILE *f = fopen(path, "w");
    sched_write_csv(s, f);
    fclose(f);
    sched *b = sched_read_csv(path, n_pipes);
    CHECK(tname, b && same_sched(s, b), "%s", b ? "differs after read" : pt_err());
    sched_free(b);
    remove(path);
}

static void check_csv_error(const char *tname, const char *text, const char *want) {
    sched *s = sched_parse_csv(text, "s.csv", 1);
    CHECK(tname, !s && strstr(pt_err(), want), "want '%s', got '%s'", want, pt_err());
    sched_free(s);
}

static void test_csv(void) {
    const char *names[] = { "gpipe", "1f1b", "interleaved-1f1b", "pipedream" };
    char tname[80];
    for (int i = 0; i < 4; i++) {
        sched *s = gen(names[i], 4, 8, 0), *lo = sched_lower(s);
        snprintf(tname, sizeof tname, "csv_roundtrip_%s", names[i]);
        snprintf(s->name, sizeof s->name, "csv");
        check_csv_roundtrip(tname, s, 1);
        snprintf(tname, sizeof tname, "csv_roundtrip_lowered_%s", names[i]);
        snprintf(lo->name, sizeof lo->name, "csv");
        check_csv_roundtrip(tname, lo, 1);
        sched_free(lo);
        sched_free(s);
    }
    sched *ch = gen("chimera", 4, 8, 0);    /* two pipes: mb_pipe inferred from the stages used */
    if (ch) {
        snprintf(ch->name, sizeof ch->name, "csv");
        check_csv_roundtrip("csv_roundtrip_chimera_two_pipes", ch, 2);
    } else printf("# skipped csv_roundtrip_chimera_two_pipes: %s\n", pt_err());
    sched_free(ch);
    sched *s = sched_parse_csv("# comment\n0F0, 0BW0 ,,STEP\r\n\n1F0,1BW0,STEP\n", "s.csv", 1);
    CHECK("csv_blank_cells_comments_spaces", s && s->n_ranks == 2 && s->len[0] == 3 && s->stage_rank[1] == 1 &&
          sched_validate(s, NULL) == 0, "%s", pt_err());
    sched_free(s);
    check_csv_error("csv_error_bad_action", "0F0,0BW0\n1F0,1BW0,1F1,1BW1,XF1\n", "s.csv:2:5: bad action 'XF1'");
    check_csv_error("csv_error_stage_two_ranks", "0F0,0BW0\n1F0,0F1\n", "s.csv:2:2: stage 0 appears on ranks 0 and 1");
    check_csv_error("csv_error_missing_stage", "0F0,0BW0\n2F0,2BW0\n", "stage 1 appears in no row");
    check_csv_error("csv_error_empty", "\n# nothing\n", "s.csv: no rows");
    s = sched_parse_text("rank 0: 0F0 0BW0\nrank 2: 1F0 1BW0\n", "g.txt", 1);
    CHECK("text_error_row_label", !s && strstr(pt_err(), "g.txt:2: bad row label (expected 'rank 1:')"), "%s", pt_err());
    s = sched_parse_text("rank 0: 0F0 0BW0\nrank 1: 1F0 1QW0\n", "g.txt", 1);
    CHECK("text_error_bad_action", !s && strstr(pt_err(), "g.txt:2:2: bad action '1QW0'"), "%s", pt_err());
    s = sched_read_csv("/nonexistent/s.csv", 1);
    CHECK("csv_error_missing_file", !s && strstr(pt_err(), "/nonexistent/s.csv"), "%s", pt_err());
    s = sched_parse_csv("0F0,0BW0,0REDUCE_GRAD,STEP,0F1,0BW1,0REDUCE_GRAD,STEP\n", "s.csv", 1);
    CHECK("csv_infers_async", s && s->async && sched_validate(s, NULL) == 0, "%s", pt_err());
    sched_free(s);
}

static void test_copy(void) {
    sched *s = gen("interleaved-1f1b", 3, 6, 2), *c = sched_copy(s);
    CHECK("copy_equal", same_sched(s, c) && strcmp(c->name, "interleaved-1f1b") == 0, "copy differs");
    sched_free(c);
    sched_free(s);
}

int main(void) {
    test_action_text();
    test_goldens();
    test_all_generators();
    test_gen_errors();
    test_registry();
    test_interleaved_warmup();
    test_peak_activations();
    test_action_deps();
    test_stage_peak_slots();
    test_tail();
    test_lowering_shape();
    test_validator_rejects();
    test_csv();
    test_copy();
    TEST_DONE();
}
