/* --adapt's check that a switch paid (docs/stragglers.md "Switches that pay"): the steps that saw
 * the straggler before a switch against the steps after it (medians of measured iteration
 * times, the same numbers on every rank), as a fraction of the gain the simulator predicted. A
 * switch that gained less than half of it is undone (back to the starting schedule: a line and an
 * "adapt_revert" event, with the share of its predicted gain it delivered), and held off: no switch
 * for ADAPT_PAY_HOLD steps (doubled at each undo of the same straggler), whatever the estimate
 * says, so it is not tried again at once; then one more try (a switch undone by a noisy
 * measurement is not lost for good). Not here: deciding to switch (adapt.c). */
#include "adapt/adapt_int.h"
#include "util/pt.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void adapt_pay_note(adapt_state *A, double iter_time) {
    A->pay.recent[A->pay.n_recent++ % ADAPT_PAY_BEFORE] = iter_time;
}

/* The median of the last ADAPT_PAY_BEFORE steps noted (-1: none). */
static double recent_median(const adapt_pay *p) {
    double v[ADAPT_PAY_BEFORE];
    int n = p->n_recent < ADAPT_PAY_BEFORE ? p->n_recent : ADAPT_PAY_BEFORE;
    memcpy(v, p->recent, sizeof v);
    return n ? pt_median(v, n) : -1;
}

double adapt_pay_predicted(const adapt_state *A, double predicted) {
    const char *f = getenv("PIPETRAIN_TEST_PREDICT");   /* test hook: a gain the run cannot deliver */
    double k = f && *f ? atof(f) : 1;
    return k > 0 ? predicted * k : predicted;
}

void adapt_pay_start(adapt_state *A, long step, double predicted, double was) {
    adapt_pay *p = &A->pay;
    p->before = recent_median(p);
    p->on = p->before > 0 && was > 0 && predicted > 0;
    p->at = step, p->predicted = predicted, p->was = was, p->n = 0;
}

void adapt_pay_reset(adapt_state *A) {
    A->pay.on = 0;
    A->pay.hold_until = 0;
    A->pay.undone = 0;
}

int adapt_pay_held(const adapt_state *A, long step) { return A->pay.hold_until && step < A->pay.hold_until; }

int adapt_pay_retry(adapt_state *A, long step) {
    if (!A->pay.hold_until || step < A->pay.hold_until) return 0;
    A->pay.hold_until = 0;
    return 1;
}

/* The undone switch's line and event. */
static void say_undo(adapt_state *A, long step, const sim_estimate *est, double after, double gm,
                     double gp, double delivered) {
    adapt_pay *p = &A->pay;
    char line[512];
    snprintf(line, sizeof line, "the switch at step %ld did not pay: %.3g s/step measured against %.3g before "
             "(%+.0f%%), predicted %.3g from %.3g (%+.0f%%): %.0f%% of its gain; back to %s, no switch before step %ld",
             p->at, after, p->before, -100 * gm, p->predicted, p->was, -100 * gp, 100 * delivered, A->start->name,
             A->pay.hold_until);
    if (A->h.root) {
        printf("step %ld: %s\n", step, line);
        fflush(stdout);
    }
    cJSON *f = adapt_fields(A, est, "undo", A->start->name, p->predicted, p->was);
    cJSON_AddNumberToObject(f, "switched_at", (double)p->at);
    cJSON_AddNumberToObject(f, "before_s", p->before);
    cJSON_AddNumberToObject(f, "measured_s", after);
    cJSON_AddNumberToObject(f, "delivered", delivered);
    cJSON_AddStringToObject(f, "message", line);
    A->h.event(A->h.user, "adapt_revert", step, f);
}

int adapt_pay_judge(adapt_state *A, long step, double iter_time, const sim_estimate *est) {
    adapt_pay *p = &A->pay;
    if (!p->on || !A->switched || step <= p->at + ADAPT_PAY_SKIP) return 0;
    p->after[p->n++] = iter_time;
    if (p->n < ADAPT_PAY_STEPS) return 0;
    p->on = 0;
    double after = pt_median(p->after, p->n);
    double gp = 1 - p->predicted / p->was, gm = 1 - after / p->before;
    if (gm >= 0.5 * gp) {
        if (A->h.root) printf("step %ld: the switch at step %ld paid: %.3g s/step measured against %.3g before (%+.0f%%; "
                            "predicted %+.0f%%)\n", step, p->at, after, p->before, -100 * gm, -100 * gp);
        return 0;
    }
    if (A->h.replan(A->h.user, A->start) < 0) return pt_adderr("step %ld: --adapt: undoing the switch: ", step);
    A->switched = 0;
    A->said_keep = 1;   /* the policy still sees the straggler: keeping is not said again */
    A->pay.hold_until = step + ((long)ADAPT_PAY_HOLD << (A->pay.undone < 4 ? A->pay.undone : 4));
    A->pay.undone++;
    say_undo(A, step, est, after, gm, gp, gp > 0 ? fmax(0, gm / gp) : 0);
    return 1;
}
