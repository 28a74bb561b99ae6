/* The main job first: side work backs off when it slows the ranks' own actions down. After each
 * step the root sums the step's compute (every F, B, W and BW of every rank, from the merged
 * timeline: the same work each step) into one of two rings, steps in which side work ran and
 * steps without (paused, resting: below, or none fitted). The ratio of their medians, less one, is what side work
 * costs a step with it (contention for caches, memory, the core's clock; not the overrun, which
 * delays an action's start, not its length, and has its own control: hv_control); the first
 * HV_BO_SKIP steps (warming up, slower with side work or without) are left out. When it is
 * above HV_SLOW_MAX, side work runs in a fraction HV_SLOW_MAX / cost of the steps (at least
 * HV_DUTY_MIN), so the main job loses about HV_SLOW_MAX on average, provided
 * the pairs (a step with, a step without) say that with is slower beyond chance (of all pairs,
 * those where with was slower: about half from a noisy machine's spread alone; Mann-Whitney's U
 * test at HV_BO_Z, which asks more of fewer steps: none with 4 of each, 94% of the pairs with 5,
 * 74% with 16); the other steps rest (no side work), and so does one step after HV_BO_CONTROL
 * steps in a row with side work, to keep the baseline current. Only the last HV_BO_AGE steps
 * count, so a slow spell or a cost that went away is forgotten within them (backed off to 1
 * step in 8 with side work, the rings alone kept it some 40 steps: test_harvest_backoff.c).
 * Which steps rest is the root's decision, shared with the predictions (hv_predict). Not
 * here: what a step with side work does (harvest.c). */
#include "harvest/harvest_int.h"
#include "util/pt.h"
#include <math.h>
#include <string.h>

/* The step's compute seconds, summed over ranks. */
static double hv_compute_s(const timeline *tl) {
    double s = 0;
    for (int i = 0; i < tl->n; i++) {
        const tl_event *e = &tl->ev[i];
        sched_kind k = e->act.kind;
        if (e->stream == TL_COMPUTE && (k == ACT_F || k == ACT_B || k == ACT_W || k == ACT_BW)) s += e->end - e->start;
    }
    return s;
}

/* The ring's entries from the last HV_BO_AGE steps into out; how many. */
static int hv_recent_of(const double *v, const long *at, int n, long now, double *out) {
    int m = 0;
    for (int i = 0; i < n && i < HV_BO_N; i++)
        if (now - at[i] < HV_BO_AGE) out[m++] = v[i];
    return m;
}

/* Of all pairs (a step with side work, a step without), how many standard deviations more of
 * them had the first slower than the half that noise alone gives (Mann-Whitney's U, normal
 * approximation; ties count a half). */
static double hv_pairs_z(const double *on, int n_on, const double *off, int n_off) {
    double u = 0, n1 = n_on, n2 = n_off;
    for (int i = 0; i < n_on; i++)
        for (int j = 0; j < n_off; j++) u += on[i] > off[j] ? 1 : on[i] == off[j] ? 0.5 : 0;
    return (u - n1 * n2 / 2) / sqrt(n1 * n2 * (n1 + n2 + 1) / 12);
}

void hv_backoff_step(harvest *h, const timeline *tl, int ran) {
    if (h->n_after < HV_BO_SKIP) return;                  /* warming up: slower either way */
    double cs = hv_compute_s(tl), on[HV_BO_N], off[HV_BO_N];
    if (cs > 0 && ran) {
        h->bo_on_at[h->bo_n_on % HV_BO_N] = h->n_after;
        h->bo_on[h->bo_n_on++ % HV_BO_N] = cs;
    } else if (cs > 0) {
        h->bo_off_at[h->bo_n_off % HV_BO_N] = h->n_after;
        h->bo_off[h->bo_n_off++ % HV_BO_N] = cs;
    }
    h->bo_since_off = ran ? h->bo_since_off + 1 : 0;
    int n_on = hv_recent_of(h->bo_on, h->bo_on_at, h->bo_n_on, h->n_after, on);
    int n_off = hv_recent_of(h->bo_off, h->bo_off_at, h->bo_n_off, h->n_after, off);
    if (n_on < HV_BO_MIN || n_off < HV_BO_MIN) {           /* no recent evidence: side work runs */
        h->bo_duty = 1;
        return;
    }
    int sure = hv_pairs_z(on, n_on, off, n_off) >= HV_BO_Z;   /* not a shared machine's noise */
    h->bo_slow = pt_median(on, n_on) / pt_median(off, n_off) - 1;
    h->bo_duty = sure && h->bo_slow > HV_SLOW_MAX ? fmax(HV_DUTY_MIN, HV_SLOW_MAX / h->bo_slow) : 1;
}

int hv_backoff_rest(harvest *h) {
    if (!h->pol.backoff) return 0;
    if (h->bo_since_off >= HV_BO_CONTROL) return 1;     /* a control step */
    h->bo_acc += h->bo_duty;
    if (h->bo_acc >= 1) {
        h->bo_acc -= 1;
        return 0;
    }
    return 1;
}
