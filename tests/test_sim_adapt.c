/* Tests of the simulator's straggler side: the judge and the adaptive schedule for a cost model (a
 * golden with a slow link), the memory it needs, the estimate of link delays and stage slowdowns
 * from a timeline, the policy's hysteresis, and the replay of `simulate --adapt` (which schedule
 * runs in which iteration). Not the generator's own tests (test_sched_adaptive.c), not the fault
 * model or the engine (test_sim.c).
 * PT_WRITE_GOLDEN=1 rewrites this file's golden (check it by hand before committing).
 * Legend: P ranks, M microbatches, N iterations. */
#include "sched/sched.h"
#include "sim/sim.h"
#include "sim/sim_adapt.h"
#include "util/pt.h"
#include "test.h"
#include "test_sched_util.h"
#include <string.h>

/* Unit costs and integer delays sum exactly in doubles. */
#define TIME_EPS 1e-9

/* ---- the judge and the adaptive schedule for a cost model ---- */

static void test_judge_and_golden(void) {
    sim_costs c;
    sim_costs_init(&c, 8, 1, 1, 1);
    sim_costs_add_slow_link(&c, "3-4:6", 8);
    sched_params p = { .ranks = 8, .microbatches = 32, .mem_limit = 16 };
    sched_adaptive_info info;
    sched *s = sim_adaptive_schedule(&p, &c, &info);
    double t = s ? sim_schedule_score(s, &c) : -1;
    CHECK("sim_adaptive_worked_example_109", t == 109 && info.score == 109 && info.peak <= 16, "%g (%s)", t, pt_err());
    sched *z = gen("zb-h1", 8, 32, 0);
    CHECK("sim_schedule_score_is_iteration_time", sim_schedule_score(z, &c) == 271, "%g", sim_schedule_score(z, &c));
    double unl;
    int peak, need = sim_adaptive_mem_needed(&(sched_params){ .ranks = 8, .microbatches = 32, .mem_limit = 8 }, &c,
                                             0.05, &unl, &peak);
    CHECK("sim_adaptive_mem_needed_within_5pct", need > 8 && need <= 16 && unl == 109, "need %d, unlimited %g", need, unl);
    sched_free(z), sched_free(s);
    sim_costs_free(&c);
    /* a golden: P = 4, M = 8, delay 3 on link 1-2, limit 8 */
    sim_costs_init(&c, 4, 1, 1, 1);
    sim_costs_add_slow_link(&c, "1-2:3", 4);
    s = sim_adaptive_schedule(&(sched_params){ .ranks = 4, .microbatches = 8, .mem_limit = 8 }, &c, &info);
    const char *path = "tests/golden/adaptive-p4-m8-link1-2-delay3-lim8.txt";
    char *got = s ? print_str(s) : NULL;
    if (got && getenv("PT_WRITE_GOLDEN")) {
        FILE *f = fopen(path, "w");
        if (f) fputs(got, f), fclose(f);
    }
    char *want = pt_read_file(path, NULL);
    CHECK("golden_adaptive-p4-m8-link1-2-delay3-lim8.txt", got && want && !strcmp(got, want),
          "differs from %s; got:\n%s", path, got ? got : pt_err());
    free(got), free(want);
    sched_free(s);
    sim_costs_free(&c);
}

/* The bench's case in the simulator: P = 2, M = 8, a slow link of 1 and 3 x F, at zb-h2's memory
 * (3 a stage). No schedule there beats zb-h2 by much (each microbatch holds stage 0's memory for
 * F + 2c + F + B + B + W), so adaptive ties or wins; where it ties, sim_schedule_robust picks the
 * one that loses least when the costs are a little off: never worse than zb-h2 under them. */
static void test_at_zb_h2_memory(void) {
    static const double fbw[3][3] = { { 1, 1, 1 }, { 1, 1.1, 0.8 }, { 1, 0.9, 1.2 } };
    sched *h2 = gen("zb-h2", 2, 8, 0);
    int ok = 1, ties = 0;
    char msg[200] = "";
    for (int k = 0; k < 3; k++)
        for (int c = 1; c <= 3; c += 2) {
            sim_costs cost;
            sim_costs_init(&cost, 2, fbw[k][0], fbw[k][1], fbw[k][2]);
            sim_costs_set_link(&cost, 0, 1, -1, -1, c);
            sched_adaptive_info info;
            sched *a = sim_adaptive_schedule(&(sched_params){ .ranks = 2, .microbatches = 8, .mem_limit = 3 }, &cost,
                                             &info);
            double ta = a ? sim_schedule_score(a, &cost) : -1, th = sim_schedule_score(h2, &cost);
            double ra = a ? sim_schedule_robust(a, &cost) : -1, rh = sim_schedule_robust(h2, &cost);
            int tie = fabs(ta - th) < TIME_EPS;
            ties += tie;
            if (ta < 0 || ta > th + TIME_EPS || (tie && ra > rh + TIME_EPS))
                ok = 0, snprintf(msg, sizeof msg, "f,b,w %g,%g,%g c=%d: adaptive %g (robust %g, %s), zb-h2 %g (%g)",
                                 fbw[k][0], fbw[k][1], fbw[k][2], c, ta, ra, info.winner, th, rh);
            sched_free(a);
            sim_costs_free(&cost);
        }
    CHECK("sim_adaptive_at_zb_h2_memory_never_worse_nor_less_robust", ok && ties > 0, "%s (%d ties)", msg, ties);
    sched_free(h2);
}

/* A link slow in bandwidth (its messages queue): the adaptive schedule is built for the queue
 * (the list scheduler queues messages as the simulator does) and beats every fixed schedule that
 * fits its limit, and beats the adaptive schedule built as if the same per-message time were a
 * pure delay (which also mispredicts its own time). P = 8, M = 32, link 3-4 passing one message per
 * 6 F: no schedule can beat 215 (the 32nd forward reaches stage 4 at 4 + 32 x 6, then 4 F and 4 B
 * on stages 4..7, the gradient's 6, 4 B and a W on stages 3..0), and adaptive reaches it at 1F1B's
 * memory. P = 4, M = 16, link 1-2 one message per 3 F, limit 8. */
static void test_bandwidth_adaptive(void) {
    static const struct { int P, M, L; double busy, bound; } cases[] = { { 8, 32, 8, 6, 215 }, { 4, 16, 8, 3, 0 } };
    for (int k = 0; k < 2; k++) {
        int P = cases[k].P, r = (P - 1) / 2, ok = 1;
        sim_costs q, d;
        sim_costs_init(&q, P, 1, 1, 1), sim_costs_init(&d, P, 1, 1, 1);
        for (int g = 0; g < P; g++) q.act_bytes[g] = d.act_bytes[g] = 1e6 * cases[k].busy;
        char spec[32];
        snprintf(spec, sizeof spec, "%d-%d:1MB/s", r, r + 1);
        sim_costs_add_slow_link(&q, spec, P);
        sim_costs_set_link(&d, r, r + 1, -1, -1, cases[k].busy);   /* the same time per message, no queue */
        sched_params sh = { .ranks = P, .microbatches = cases[k].M, .mem_limit = cases[k].L };
        sched_adaptive_info iq, id;
        sched *aq = sim_adaptive_schedule(&sh, &q, &iq), *ad = sim_adaptive_schedule(&sh, &d, &id);
        double t = aq ? sim_schedule_score(aq, &q) : -1, t_blind = ad ? sim_schedule_score(ad, &q) : -1;
        char msg[300] = "";
        static const char *const fixed[] = { "gpipe", "1f1b", "zb-h1", "zb-h2" };
        for (int i = 0; i < 4; i++) {
            sched *s = gen(fixed[i], P, cases[k].M, 0);
            int pk[8], peak = 0;
            sched_peak_activations(s, pk);
            for (int g = 0; g < P; g++) peak = pk[g] > peak ? pk[g] : peak;
            double tf = sim_schedule_score(s, &q);
            if (peak <= cases[k].L && !(t < tf - TIME_EPS))
                ok = 0, snprintf(msg, sizeof msg, "%s %g", fixed[i], tf);
            sched_free(s);
        }
        CHECK(k ? "bandwidth_adaptive_beats_fixed_p4" : "bandwidth_adaptive_beats_fixed_p8_at_the_bound",
              t > 0 && ok && (cases[k].bound == 0 || fabs(t - cases[k].bound) < TIME_EPS) && fabs(iq.score - t) < TIME_EPS,
              "adaptive %g (predicted %g); %s", t, iq.score, msg);
        CHECK(k ? "bandwidth_adaptive_beats_one_built_as_pure_delay_p4" : "bandwidth_adaptive_beats_one_built_as_pure_delay_p8",
              t > 0 && t < t_blind - TIME_EPS && id.score < t_blind - TIME_EPS,
              "queue-aware %g; built as pure delay %g under the queue (it predicted %g)", t, t_blind, id.score);
        sched_free(aq), sched_free(ad);
        sim_costs_free(&q), sim_costs_free(&d);
    }
}

/* ---- the estimate ---- */

static void test_estimate(void) {
    sched *s = gen("zb-h1", 8, 16, 0), *low = sched_lower(s);
    sim_costs c, healthy;
    sim_costs_init(&c, 8, 1, 1, 1);
    sim_costs_init(&healthy, 8, 1, 1, 1);
    c.latency = healthy.latency = 0.1;
    sim_costs_add_slow_link(&c, "3-4:6", 8);
    sim_costs_add_slow_stage(&c, "6:2");
    int ok = 1;
    for (int lowered = 0; lowered <= 1; lowered++) {
        sim_result r;
        sim_estimate e;
        sim_estimate_init(&e, 8, 8);
        if (sim_run(lowered ? low : s, &c, &(sim_opts){ 1, false }, &r) < 0) { ok = 0; break; }
        ok = ok && sim_estimate_timeline(&r.tl, &healthy, 0, &e) == 0;
        for (int k = 0; k < 7; k++) ok = ok && fabs(e.link_delay[k] - (k == 3 ? 6 : 0)) < TIME_EPS;
        for (int g = 0; g < 8; g++) ok = ok && fabs(e.stage_slow[g] - (g == 6 ? 2 : 1)) < TIME_EPS;
        char buf[200];
        sim_policy_opts o = sim_policy_defaults();
        sim_estimate_describe(&e, &o, 1, buf, sizeof buf);
        ok = ok && !strcmp(buf, "link 3-4 +6 per message; stage 6 x2");
        if (!ok) printf("# lowered %d: %s; link3 %g stage6 %g\n", lowered, buf, e.link_delay[3], e.stage_slow[6]);
        sim_estimate_free(&e);
        sim_result_free(&r);
    }
    CHECK("estimate_exact_link_and_stage_compute_only_and_lowered", ok, "see the # line above");
    sim_costs_free(&c), sim_costs_free(&healthy);
    sched_free(s), sched_free(low);
}

/* A link slow in bandwidth: the estimate finds its whole time per message and the part of it that
 * queues, exactly, with or without a delay on top and latency; a pure delay with a slow consumer
 * behind it (messages got late, but not because they queued) is no queue. zb-h1 and 1f1b, P = 8,
 * M = 16, messages of 1e6 bytes, compute-only and lowered. */
static void test_estimate_bandwidth(void) {
    static const struct { const char *faults[2]; double latency, delay, busy; } cases[] = {
        { { "3-4:166666.666666666667B/s", "" }, 0, 6, 6 },   /* 1e6 bytes at 1e6/6 B/s: 6 each */
        { { "3-4:250kB/s", "3-4:2" }, 0.1, 6, 4 },
        { { "3-4:6", "" }, 0, 6, 0 },
    };
    static const char *const names[] = { "zb-h1", "1f1b" };
    int ok = 1;
    char msg[300] = "";
    for (int k = 0; k < 3; k++)
        for (int i = 0; i < 2; i++)
            for (int lowered = 0; lowered <= 1; lowered++) {
                sched *s = gen(names[i], 8, 16, 0), *run = lowered ? sched_lower(s) : s;
                sim_costs c, healthy;
                sim_costs_init(&c, 8, 1, 1, 1), sim_costs_init(&healthy, 8, 1, 1, 1);
                for (int g = 0; g < 8; g++) c.act_bytes[g] = healthy.act_bytes[g] = 1e6;
                c.latency = healthy.latency = cases[k].latency;
                for (int f = 0; f < 2; f++)
                    if (cases[k].faults[f][0]) sim_costs_add_slow_link(&c, cases[k].faults[f], 8);
                if (k == 2) sim_costs_add_slow_stage(&c, "4:2");   /* a slow consumer behind a pure delay */
                sim_result r;
                sim_estimate e;
                sim_estimate_init(&e, 8, 8);
                int rc = sim_run(run, &c, &(sim_opts){ 1, false }, &r);
                rc = rc || sim_estimate_timeline(&r.tl, &healthy, 0, &e);
                bool good = !rc && fabs(e.link_delay[3] - cases[k].delay) < 1e-6 && fabs(e.link_busy[3] - cases[k].busy) < 1e-6;
                for (int l = 0; l < 7; l++) good = good && (l == 3 || (e.link_delay[l] == 0 && e.link_busy[l] == 0));
                if (!good)
                    ok = 0, snprintf(msg, sizeof msg, "case %d %s lowered %d: delay %g busy %g (want %g, %g)", k, names[i],
                                     lowered, e.link_delay[3], e.link_busy[3], cases[k].delay, cases[k].busy);
                sim_estimate_free(&e);
                if (!rc) sim_result_free(&r);
                sim_costs_free(&c), sim_costs_free(&healthy);
                if (lowered) sched_free(run);
                sched_free(s);
            }
    CHECK("estimate_bandwidth_delay_and_queue_exact", ok, "%s", msg);
    /* applied: the queue becomes a rate on the link (the rest a delay), and the describe line says so */
    sim_costs h, out;
    sim_costs_init(&h, 3, 1, 1, 1);
    h.act_bytes[1] = 2e6;
    sim_estimate e;
    sim_estimate_init(&e, 3, 3);
    e.link_delay[1] = 6, e.link_busy[1] = 4;
    sim_costs_apply_estimate(&h, &e, &out);
    char buf[200];
    sim_policy_opts o = sim_policy_defaults();
    sim_estimate_describe(&e, &o, 1, buf, sizeof buf);
    CHECK("estimate_bandwidth_applied_as_rate_and_delay", fabs(sim_costs_link_busy(&out, 1, 2, 2e6) - 4) < 1e-12 &&
          fabs(sim_costs_message_time(&out, 2, 1, 2e6) - 6) < 1e-12 &&
          !strcmp(buf, "link 1-2 +6 per message (4 of it in a queue: slow in bandwidth)"), "busy %g, time %g, '%s'",
          sim_costs_link_busy(&out, 1, 2, 2e6), sim_costs_message_time(&out, 2, 1, 2e6), buf);
    sim_costs_free(&out), sim_costs_free(&h);
    sim_estimate_free(&e);
}

/* A measured link direction for the hand-built timelines below: each message takes `time` from its
 * post, `busy` of it in a FIFO queue (what --slow-link RATE injects: a message holds the link
 * bytes / rate behind the ones before it), the rest a delay. */
typedef struct { double time, busy, free; } test_link;

static double test_link_arrival(test_link *l, double post) {
    double start = post > l->free ? post : l->free;
    l->free = start + l->busy;
    return start + l->time;
}

/* Pushes one message as the runtime records it: the send on `from` at post (its copy takes
 * 10 us), the receive on the other rank from 1 ms before the arrival (it waited) to the arrival. */
static void push_message(timeline *tl, int from, int mb, double post, double arrival) {
    sched_action ra = { .stage = 1 - from, .kind = from ? ACT_RECV_B : ACT_RECV_F, .mb = mb };
    sched_action sa = { .stage = from, .kind = from ? ACT_SEND_B : ACT_SEND_F, .mb = mb };
    tl_event recv = { .act = ra, .rank = 1 - from, .stream = TL_RECV, .peer = from, .link = -1,
                      .ready = arrival - 1e-3, .start = arrival - 1e-3, .end = arrival };
    int at = timeline_push(tl, &recv);
    tl_event send = { .act = sa, .rank = from, .stream = TL_SEND, .peer = 1 - from, .link = at,
                      .ready = post, .start = post, .end = post + 1e-5 };
    timeline_push(tl, &send);
}

/* A measured step of a 1F1B-like pipeline over one link, P = 2, M microbatches, as train --adapt
 * timed it at 40 kB/s: rank 0 sends two forwards back to back, then one each time a gradient came
 * back and its backward ran (`gap`); rank 1 sends each gradient `gap` after its forward came. So
 * the forwards bunch once, at the start, and the gradients never do: sent one link time apart,
 * they tell a queue from a delay not at all. late[2][M] (or NULL): how much later than the link
 * let it each forward and gradient was got (a busy machine's delivery thread or receiver woke
 * late), in link times. Into tl (initialised for the shape). */
static void paced_step(timeline *tl, int M, double gap, test_link fwd, test_link bwd, const double (*late)[8]) {
    double a0[8], a1[8], p1 = 0;
    for (int i = 0; i < M && i < 8; i++) {
        double p0 = i < 2 ? i * 1e-4 : a1[i - 2] + gap;
        a0[i] = test_link_arrival(&fwd, p0) + (late ? late[0][i] * fwd.time : 0);
        push_message(tl, 0, i, p0, a0[i]);
        p1 = (a0[i] > p1 ? a0[i] : p1) + gap;
        a1[i] = test_link_arrival(&bwd, p1) + (late ? late[1][i] * bwd.time : 0);
        push_message(tl, 1, i, p1, a1[i]);
    }
}

/* The estimate of measured steps (directed, as train --adapt reads them) of back-to-back messages
 * through a queue, a pure delay and a mix of the two, small messages (51 ms each, a backward of
 * 0.2 ms between them: the tiny model at 40 kB/s) and large ones (0.5 s, 20 ms); the gradients'
 * direction a hair slower than the forwards' or a hair faster (both ways shaped alike: which
 * measures slower is chance), or healthy (shaped one way); on a quiet machine and on a busy one
 * (messages got up to half a link time late, as the 40 kB/s run measured under load). The queue
 * is its whole time, 0, or the mix's part of it, within the fit's tolerance (5% of the delay:
 * EST_JITTER); the delay exact. */
static void test_estimate_measured_queue(void) {
    static const struct { const char *name; double busy; } kinds[] = { { "queue", 1 }, { "delay", 0 }, { "mix", 0.6 } };
    static const struct { double time, gap; } sizes[] = { { 0.0512, 2e-4 }, { 0.5, 0.02 } };
    static const double back[] = { 1 + 1e-4, 1 - 1e-4, 0 };   /* the gradients' time / the forwards' */
    /* late messages on a busy machine, each direction keeping some on time (the delay is the
     * fastest message's: a step where every message was late reads the smallest lateness too) */
    static const double busy_machine[2][8] = { { 0, 0, 0, 0.5, 0.15, 0.15, 0.1, 0 }, { 0.2, 0, 0.25, 0, 0.17, 0, 0.1, 0.2 } };
    sched *s = gen("zb-h1", 2, 8, 0);
    sim_costs healthy;
    sim_costs_init(&healthy, 2, 1e-3, 1e-3, 1e-3);
    int bad = 0;
    char msg[300] = "";
    for (int k = 0; k < 3; k++)
        for (int z = 0; z < 2; z++)
            for (int b = 0; b < 3; b++)
                for (int busy = 0; busy < 2; busy++) {
                    double c = sizes[z].time, q = kinds[k].busy * c, cb = back[b] ? c * back[b] : 20e-6;
                    timeline tl;
                    timeline_init(&tl, s, NULL, 1);
                    paced_step(&tl, 8, sizes[z].gap, (test_link){ c, q, 0 }, (test_link){ cb, back[b] ? q * back[b] : 0, 0 },
                               busy ? busy_machine : NULL);
                    sim_estimate e;
                    sim_estimate_init(&e, 2, 2);
                    e.directed = true, e.wait_eps = 50e-6;
                    int rc = sim_estimate_timeline(&tl, &healthy, 0, &e);
                    double delay = c > cb ? c : cb, want = q * (cb > c ? back[b] : 1);
                    if (rc || !e.link_told[0] || fabs(e.link_delay[0] - delay) > 1e-9 ||
                        fabs(e.link_busy[0] - want) > 0.05 * delay + 1e-9)
                        bad++, snprintf(msg, sizeof msg, "%s, %g s a message, gradients x%g%s: delay %g busy %g (want %g, %g)",
                                        kinds[k].name, c, back[b], busy ? ", busy machine" : "", e.link_delay[0],
                                        e.link_busy[0], delay, want);
                    sim_estimate_free(&e);
                    timeline_free(&tl);
                }
    CHECK("estimate_measured_back_to_back_queue_delay_and_mix", !bad, "%d of 36 cases; the last: %s", bad, msg);
    /* A step that tells nothing (a busy machine: rank 0's sender lost its core before each of
     * the two forwards it sent together, so they left 2.7 and 5.4 link times after their sends
     * began; every other message sent a link time apart): not told, no queue, the delay the
     * fastest message's. The runtime keeps its last reading then (train --adapt). */
    timeline tl;
    timeline_init(&tl, s, NULL, 1);
    double c = 0.0512, t = 0;
    push_message(&tl, 0, 0, 0, 2.7 * c), push_message(&tl, 0, 1, 1e-4, 5.4 * c);
    for (int i = 0; i < 6; i++, t += c + 2e-4) push_message(&tl, 1, i, 2.7 * c + t, 3.7 * c + t);
    for (int i = 2; i < 8; i++) push_message(&tl, 0, i, 10 * c + (i - 2) * (c + 2e-4), 11 * c + (i - 2) * (c + 2e-4));
    sim_estimate e;
    sim_estimate_init(&e, 2, 2);
    e.directed = true, e.wait_eps = 50e-6;
    int rc = sim_estimate_timeline(&tl, &healthy, 0, &e);
    CHECK("estimate_measured_step_that_tells_nothing", !rc && !e.link_told[0] && e.link_busy[0] == 0 &&
          fabs(e.link_delay[0] - c) < 1e-9, "told %d, delay %g, busy %g", e.link_told[0], e.link_delay[0], e.link_busy[0]);
    sim_estimate_free(&e);
    timeline_free(&tl);
    sim_costs_free(&healthy);
    sched_free(s);
}

/* ---- the policy ---- */

static sim_policy_action step_with(sim_policy *pol, const sim_policy_opts *o, double delay, double slow) {
    sim_estimate e;
    sim_estimate_init(&e, 3, 3);
    e.link_delay[1] = delay, e.stage_slow[2] = slow;
    sim_policy_action a = sim_policy_step(pol, o, &e, 1);
    sim_estimate_free(&e);
    return a;
}

static void test_policy(void) {
    sim_policy pol;
    sim_policy_opts o = sim_policy_defaults();
    sim_policy_init(&pol, 3, 3);
    /* healthy, a small delay under link_on, then slow: adapt at once (onset 1) */
    int ok = step_with(&pol, &o, 0, 1) == SIM_POLICY_KEEP && step_with(&pol, &o, 0.4, 1) == SIM_POLICY_KEEP &&
             step_with(&pol, &o, 3, 1) == SIM_POLICY_ADAPT && pol.adapted;
    /* same delay: keep; between off and on: still adapted; grown by more than regen: rebuild */
    ok = ok && step_with(&pol, &o, 3, 1) == SIM_POLICY_KEEP && step_with(&pol, &o, 0.3, 1) == SIM_POLICY_ADAPT &&
         step_with(&pol, &o, 0.3, 1) == SIM_POLICY_KEEP;
    /* under link_off: healthy, switch back */
    ok = ok && step_with(&pol, &o, 0.1, 1) == SIM_POLICY_REVERT && !pol.adapted;
    CHECK("policy_adapts_keeps_rebuilds_reverts", ok, "adapted %d", pol.adapted);
    /* onset 2, recovery 2: one slow iteration is not enough, nor one healthy one */
    o.onset = o.recovery = 2;
    ok = step_with(&pol, &o, 0, 1.5) == SIM_POLICY_KEEP && step_with(&pol, &o, 0, 1) == SIM_POLICY_KEEP &&
         step_with(&pol, &o, 0, 1.5) == SIM_POLICY_KEEP && step_with(&pol, &o, 0, 1.5) == SIM_POLICY_ADAPT &&
         step_with(&pol, &o, 0, 1) == SIM_POLICY_KEEP && step_with(&pol, &o, 0, 1) == SIM_POLICY_REVERT;
    CHECK("policy_hysteresis_onset_and_recovery_2", ok, "adapted %d", pol.adapted);
    sim_policy_free(&pol);
}

/* ---- the replay ---- */

/* zb-h1, P = 8, M = 32, link 3-4 slow by 6 in iterations 3..6 of 10: the policy sees iteration 3
 * and switches for 4; iteration 7 is healthy again and 8 runs zb-h1. */
static void test_replay(void) {
    sim_costs c;
    sim_costs_init(&c, 8, 1, 1, 1);
    sim_costs_add_slow_link(&c, "3-4:6@3-6", 8);
    sim_adapt_opts o = { .start = "zb-h1", .iterations = 10, .policy = sim_policy_defaults(),
                         .shape = { .ranks = 8, .microbatches = 32, .mem_limit = 16 } };
    sim_adapt_result r;
    int rc = sim_adapt_run(&o, &c, &r);
    const char *want[10] = { "zb-h1", "zb-h1", "zb-h1", "adaptive", "adaptive", "adaptive", "adaptive", "zb-h1",
                             "zb-h1", "zb-h1" };
    double want_t[10] = { 103, 103, 271, 109, 109, 109, 103, 103, 103, 103 };
    int ok = rc == 0 && r.n == 10;
    for (int i = 0; ok && i < 10; i++) ok = !strcmp(r.name[i], want[i]) && fabs(r.time[i] - want_t[i]) < TIME_EPS;
    CHECK("replay_switches_after_onset_and_back_after_recovery", ok, "rc %d %s; iteration 4: %s %g", rc, pt_err(),
          rc ? "" : r.name[3], rc ? 0 : r.time[3]);
    CHECK("replay_notes_say_why", !rc && strstr(r.note[2], "link 3-4 +6 per message; adaptive") &&
          strstr(r.note[2], "predicted 109, was 271") && strstr(r.note[6], "back to zb-h1") && !r.note[3][0],
          "%s | %s", rc ? "" : r.note[2], rc ? "" : r.note[6]);
    CHECK("replay_timeline_has_every_iteration", !rc && r.tl.n > 0 && r.tl.ev[r.tl.n - 1].iter == 9 &&
          fabs(timeline_end(&r.tl) - r.total) < TIME_EPS, "end %g total %g", rc ? 0 : timeline_end(&r.tl), r.total);
    if (!rc) sim_adapt_result_free(&r);
    /* the default limit is the starting schedule's peak (P for zb-h1) */
    o.shape.mem_limit = 0;
    rc = sim_adapt_run(&o, &c, &r);
    CHECK("replay_default_limit_is_start_peak", !rc && r.mem_limit == 8 && r.time[3] == 145, "limit %d, %g",
          rc ? -1 : r.mem_limit, rc ? -1 : r.time[3]);
    if (!rc) sim_adapt_result_free(&r);
    /* the same link slow in bandwidth (6e6-byte messages at 1 MB/s: 6 each, queued): the policy sees
     * the queue and the schedule built for it reaches the link's bound, 215 (zb-h1: 295) */
    sim_costs q;
    sim_costs_init(&q, 8, 1, 1, 1);
    for (int g = 0; g < 8; g++) q.act_bytes[g] = 6e6;
    sim_costs_add_slow_link(&q, "3-4:1MB/s@3-6", 8);
    o.shape.mem_limit = 16;
    rc = sim_adapt_run(&o, &q, &r);
    CHECK("replay_bandwidth_switches_to_the_queue_aware_schedule", !rc && r.time[2] == 295 && r.time[3] == 215 &&
          !strcmp(r.name[3], "adaptive") && strstr(r.note[2], "+6 per message (6 of it in a queue") &&
          strstr(r.note[2], "predicted 215, was 295") && !strcmp(r.name[7], "zb-h1"), "rc %d %s; %g %g; %s", rc,
          pt_err(), rc ? -1 : r.time[2], rc ? -1 : r.time[3], rc ? "" : r.note[2]);
    if (!rc) sim_adapt_result_free(&r);
    sim_costs_free(&q);
    o.start = "zb-v";
    rc = sim_adapt_run(&o, &c, &r);
    CHECK("replay_err_two_chunk_start", rc < 0 && strstr(pt_err(), "one stage per rank"), "%s", pt_err());
    sim_costs_free(&c);
}

int main(void) {
    test_judge_and_golden();
    test_at_zb_h2_memory();
    test_bandwidth_adaptive();
    test_estimate();
    test_estimate_bandwidth();
    test_estimate_measured_queue();
    test_policy();
    test_replay();
    TEST_DONE();
}
