/* Tests of the lend plan of --balance-memory (sched/sched_lend.h): over 1f1b, gpipe and zb-h1 at
 * P 2..6 and several M, an independent check of every unit (never more than cap buffers held,
 * windows inside each microbatch's life, the partner's buffers never shared by two windows at
 * once, the largest rank never grows), the balance it reaches (1f1b, one layer per stage, P=4:
 * every rank within 10% of the mean), and the schedules it refuses. Legend: P ranks = stages, M microbatches, K compute actions. */
#include "sched/sched_lend.h"
#include "util/pt.h"
#include "test.h"
#include <string.h>

/* The balance goal of issue 25: every rank's activation bytes within this of the mean. */
#define BALANCE_TOL 0.10

/* Re-walks the stage's compute actions: microbatches held at each action (alive, not away) never
 * exceed cap; a window starts at or after its F and is fetched before its first backward. */
static int unit_ok(const sched *s, const sched_lend_unit *u, char *why, size_t n) {
    int r = s->stage_rank[u->stage], k = 0, M = s->n_mb, f_at[64], b_at[64], w_at[64], wl[64], wf[64];
    int kinds[512], mbs[512];
    for (int j = 0; j < M; j++) f_at[j] = b_at[j] = w_at[j] = wl[j] = wf[j] = -1;
    for (int i = 0; i < s->len[r]; i++) {
        sched_action a = s->acts[r][i];
        if (a.stage != u->stage || a.kind == ACT_SEND_F || a.kind == ACT_SEND_B || a.kind == ACT_RECV_F ||
            a.kind == ACT_RECV_B || a.kind == ACT_REDUCE_GRAD || a.kind == ACT_STEP) continue;
        kinds[k] = a.kind, mbs[k] = a.mb;
        if (a.kind == ACT_F) f_at[a.mb] = k;
        if ((a.kind == ACT_B || a.kind == ACT_BW) && b_at[a.mb] < 0) b_at[a.mb] = k;
        if (a.kind == ACT_W || a.kind == ACT_BW) w_at[a.mb] = k;
        k++;
    }
    (void)kinds; (void)mbs;
    for (int i = 0; i < u->n_win; i++) {
        const sched_lend_window *w = &u->win[i];
        if (w->lend_at < f_at[w->mb] || w->fetch_at >= b_at[w->mb] || w->lend_at > w->fetch_at)
            return snprintf(why, n, "stage %d layer %d: window of mb %d [%d, %d] outside F %d .. B %d", u->stage,
                            u->layer, w->mb, w->lend_at, w->fetch_at, f_at[w->mb], b_at[w->mb]), -1;
        if (w->slot < 0 || w->slot >= u->pool) return snprintf(why, n, "slot %d of pool %d", w->slot, u->pool), -1;
        for (int j = 0; j < i; j++)
            if (u->win[j].slot == w->slot && u->win[j].fetch_at >= w->lend_at)
                return snprintf(why, n, "slot %d shared by mbs %d and %d", w->slot, u->win[j].mb, w->mb), -1;
        wl[w->mb] = w->lend_at, wf[w->mb] = w->fetch_at;
    }
    for (int a = 0; u->part < u->bytes && a < k; a++) {   /* in parts: a head buffer for each away */
        int away = 0;
        for (int i = 0; i < u->n_win; i++) away += u->win[i].lend_at < a && a <= u->win[i].fetch_at;
        if (away > u->heads) return snprintf(why, n, "stage %d layer %d: %d away at action %d, %d head buffers",
                                             u->stage, u->layer, away, a, u->heads), -1;
    }
    if (u->part <= 0 || u->part > u->bytes || (u->part < u->bytes) != (u->heads > 0))
        return snprintf(why, n, "stage %d layer %d: part %g of %g, %d heads", u->stage, u->layer, u->part, u->bytes,
                        u->heads), -1;
    for (int a = 0; a < k; a++) {
        int held = 0;
        for (int j = 0; j < M; j++)
            held += f_at[j] <= a && a <= w_at[j] && !(wl[j] >= 0 && wl[j] < a && a <= wf[j]);
        if (held > u->cap) return snprintf(why, n, "stage %d layer %d holds %d > cap %d at action %d", u->stage,
                                           u->layer, held, u->cap, a), -1;
    }
    return 0;
}

/* A plan for s with nl layers of 1 byte each per stage (the last layer of every stage weighing w). */
static int plan_of(const sched *s, int nl, double w, sched_lend_plan *p) {
    int n[16];
    double b[16][8];
    const double *rows[16];
    for (int g = 0; g < s->n_stages; g++) {
        n[g] = nl;
        for (int l = 0; l < nl; l++) b[g][l] = l == nl - 1 ? w : 1;
        rows[g] = b[g];
    }
    return sched_lend_balance(s, n, rows, NULL, p);
}

static double spread(const sched_lend_plan *p) {
    double mx = 0, sum = 0;
    for (int r = 0; r < p->P; r++) {
        double v = sched_lend_rank_bytes(p, r);
        mx = v > mx ? v : mx;
        sum += v;
    }
    return mx / (sum / p->P) - 1;
}

static void test_units_valid(void) {
    const char *names[] = { "1f1b", "gpipe", "zb-h1" };
    int bad = 0, plans = 0, lending = 0;
    char why[256] = "";
    for (int n = 0; n < 3; n++)
        for (int P = 2; P <= 6; P++)
            for (int M = P; M <= 3 * P; M += P) {
                sched_params sp = { .ranks = P, .microbatches = M };
                sched *s = sched_generate(names[n], &sp);
                for (int nl = 1; s && nl <= 3; nl++) {
                    sched_lend_plan p;
                    if (plan_of(s, nl, 1.5, &p) < 0) { bad++; snprintf(why, sizeof why, "%s", pt_err()); continue; }
                    plans++;
                    lending += p.n_units > 0;
                    for (int i = 0; i < p.n_units && !bad; i++)
                        bad += unit_ok(s, &p.unit[i], why, sizeof why) < 0;
                    double before = 0, after = 0;
                    for (int r = 0; r < P; r++) {
                        before = p.plain[r] > before ? p.plain[r] : before;
                        after = sched_lend_rank_bytes(&p, r) > after ? sched_lend_rank_bytes(&p, r) : after;
                    }
                    if (after > before) { bad++; snprintf(why, sizeof why, "%s P=%d M=%d: largest rank grew", names[n], P, M); }
                    sched_lend_plan_free(&p);
                }
                sched_free(s);
            }
    CHECK("lend: every unit holds <= cap, windows in each life, slots unshared", bad == 0 && plans > 0, "%s", why);
    CHECK("lend: some plans lend", lending > 0, "%d of %d lend", lending, plans);
}

static void test_balance_p4(void) {
    sched_params sp = { .ranks = 4, .microbatches = 8 };
    sched *s = sched_generate("1f1b", &sp);
    sched_lend_plan p;
    int rc = plan_of(s, 1, 1, &p);
    CHECK("lend: 1f1b P=4 M=8 plans", rc == 0, "%s", pt_err());
    if (rc == 0) {
        double sp_ = spread(&p);
        CHECK("lend: 1f1b P=4, 1 layer per stage: every rank within 10% of the mean", sp_ <= BALANCE_TOL,
              "largest %.0f%% over the mean (r0 %.1f r1 %.1f r2 %.1f r3 %.1f)", sp_ * 100, sched_lend_rank_bytes(&p, 0),
              sched_lend_rank_bytes(&p, 1), sched_lend_rank_bytes(&p, 2), sched_lend_rank_bytes(&p, 3));
        CHECK("lend: stage 0 lends, the last stage borrows", p.lent[0] > 0 && p.borrowed[3] > 0 && p.lent[3] == 0,
              "lent r0 %.1f borrowed r3 %.1f lent r3 %.1f", p.lent[0], p.borrowed[3], p.lent[3]);
        sched_lend_plan_free(&p);
    }
    sched_free(s);
}

/* Ranks whose fixed bytes differ: 1f1b P=4 M=8, one layer of 1 byte per stage, rank 3 holding
 * 2.5 besides (a head with a large table; totals 4, 3, 2, 3.5 without lending): the plan
 * balances each rank's total, so nothing goes to rank 3 and the largest total is rank 3's own
 * 3.5; a plan blind to the fixed bytes lends to rank 3 (its activations are the fewest), whose
 * total then grows past 3.5. */
static double largest_total(const sched_lend_plan *p, const double *fixed) {
    double mx = 0;
    for (int r = 0; r < p->P; r++) mx = fixed[r] + sched_lend_rank_bytes(p, r) > mx ? fixed[r] + sched_lend_rank_bytes(p, r) : mx;
    return mx;
}

static void test_fixed_differs(void) {
    sched_params sp = { .ranks = 4, .microbatches = 8 };
    sched *s = sched_generate("1f1b", &sp);
    int n[4] = { 1, 1, 1, 1 };
    double b[4] = { 1, 1, 1, 1 }, fixed[4] = { 0, 0, 0, 2.5 }, with = -1, blind = -1;
    const double *rows[4] = { &b[0], &b[1], &b[2], &b[3] };
    sched_lend_plan p;
    int rc = sched_lend_balance(s, n, rows, fixed, &p);
    CHECK("lend: fixed bytes per rank plan", rc == 0, "%s", pt_err());
    if (rc == 0) {
        with = largest_total(&p, fixed);
        CHECK("lend: fixed bytes differ: rank 3 keeps nothing for others, the largest total is its own 3.5",
              p.borrowed[3] == 0 && p.lent[0] > 0 && with <= 3.5 + 1e-9, "largest %.3f, borrowed r3 %.3f, lent r0 %.3f",
              with, p.borrowed[3], p.lent[0]);
        sched_lend_plan_free(&p);
    }
    if (sched_lend_balance(s, n, rows, NULL, &p) == 0) {
        blind = largest_total(&p, fixed);
        sched_lend_plan_free(&p);
    }
    CHECK("lend: a plan blind to the fixed bytes ends with a larger total", blind > with + 0.5, "blind %.3f, with %.3f",
          blind, with);
    sched_free(s);
}

/* Parts of acts: 1f1b P=4 M=4, acts 1 per stage, fixed 0, 0, 0.9, 1.9 (totals 4, 3, 2.9, 2.9
 * without): a whole act of rank 0 would cost its partner two (to 4.9), so rank 0 lends part of
 * each act it lends (its head stays in a head buffer), and the top comes down below 4. */
static void test_parts(void) {
    sched_params sp = { .ranks = 4, .microbatches = 4 };
    sched *s = sched_generate("1f1b", &sp);
    int n[4] = { 1, 1, 1, 1 }, parts = 0, bad = 0;
    double b[4] = { 1, 1, 1, 1 }, fixed[4] = { 0, 0, 0.9, 1.9 }, mx = 0;
    const double *rows[4] = { &b[0], &b[1], &b[2], &b[3] };
    char why[256] = "";
    sched_lend_plan p;
    int rc = sched_lend_balance(s, n, rows, fixed, &p);
    CHECK("lend: a plan in parts", rc == 0, "%s", pt_err());
    if (rc == 0) {
        for (int i = 0; i < p.n_units; i++) {
            parts += p.unit[i].part < p.unit[i].bytes;
            bad += unit_ok(s, &p.unit[i], why, sizeof why) < 0;
        }
        for (int r = 0; r < 4; r++) mx = fixed[r] + sched_lend_rank_bytes(&p, r) > mx ? fixed[r] + sched_lend_rank_bytes(&p, r) : mx;
        CHECK("lend: where a whole act is too much, a unit lends part of each, valid", parts > 0 && !bad && mx < 4 - 1e-9,
              "%d units in parts, largest total %.3f; %s", parts, mx, why);
        sched_lend_plan_free(&p);
    }
    sched_free(s);
}

static void test_refused(void) {
    sched_params sp = { .ranks = 2, .microbatches = 4, .chunks = 2 };
    sched *s = sched_generate("interleaved-1f1b", &sp);
    sched_lend_plan p;
    int rc = s ? plan_of(s, 1, 1, &p) : 0;
    CHECK("lend: interleaved (2 stages per rank) refused, saying what it needs",
          s && rc < 0 && strstr(pt_err(), "one stage per pipeline rank"), "rc %d: %s", rc, pt_err());
    sched_free(s);
}

int main(void) {
    test_units_valid();
    test_balance_p4();
    test_fixed_differs();
    test_parts();
    test_refused();
    TEST_DONE();
}
