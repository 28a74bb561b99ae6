/* --adapt --adapt-wire: turns bf16 on the wire (--wire bf16) when the links as measured
 * (run/run_link.h) make the step link-bound: the simulator, fed the run's profiled compute and
 * its measured links, predicts the schedule in force at least WIRE_MIN_GAIN faster with half the
 * bytes on every pipeline link. One way (bf16 stays on): the numbers change a little (lossy,
 * docs/comm.md), so it switches once, says so, and does not flap. Not here: the schedule policy
 * (trainer_adapt.c, which may call train_wire_decide), the conversion (util/half.h). */
#include "sim/sim_adapt.h"
#include "train/trainer_int.h"
#include "util/half.h"
#include "util/pt.h"
#include <stdio.h>
#include <stdlib.h>

#define WIRE_MIN_GAIN 0.10   /* a switch must promise 10%: less is within the profile's noise */
#define WIRE_FIRST_STEP 3    /* step 1 warms up (first touches), step 2 is the first measured */

/* The iteration of s simulated under profile (copied) with every pipeline link of L carrying
 * messages of `bytes`; -1 on an error. */
static double wire_predict(const sched *s, const sim_costs *profile, const run_links *L, double bytes) {
    sim_costs c;
    sim_costs_copy(profile, &c);
    for (int g = 0; g < c.n_stages; g++) c.act_bytes[g] = 0;   /* sized by the apply below */
    for (int r = 0; r + 1 < L->P; r++) run_links_apply(L, &c, r, bytes);
    double t = sim_schedule_score(s, &c);
    sim_costs_free(&c);
    return t;
}

int train_wire_decide(const sched *s, const sim_costs *profile, const run_links *L, double bytes, int wire_now,
                      double *t_now, double *t_bf16) {
    *t_now = *t_bf16 = -1;
    if (wire_now != PT_WIRE_F32 || L->P < 2) return wire_now;
    for (int g = 0; g < profile->n_stages; g++)   /* a profile with every stage's compute in it (a
                                                    * re-split job starts its profile again) */
        if (!(profile->f[g] > 0) || !(profile->b[g] > 0 || profile->bw[g] > 0)) return wire_now;
    for (int r = 0; r + 1 < L->P; r++)   /* only links measured */
        for (int k = 0; k < 2; k++)
            if (run_links_at(L, 0, 0, r, k)->bandwidth <= 0) return wire_now;
    *t_now = wire_predict(s, profile, L, bytes);
    *t_bf16 = wire_predict(s, profile, L, bytes / 2);
    if (*t_now <= 0 || *t_bf16 <= 0) return wire_now;
    return *t_bf16 <= *t_now * (1 - WIRE_MIN_GAIN) ? PT_WIRE_BF16 : wire_now;
}

/* The root's decision, on every rank (MPI: the others add 0). */
static int wire_agree(train_ctx *t, int *wire, double *v) {
    if (!t->o.world) return 0;
    double x[3] = { t->root ? *wire : 0, t->root ? v[0] : 0, t->root ? v[1] : 0 };
    if (comm_allreduce_f64(t->o.world, x, 3) < 0) return -1;
    *wire = (int)x[0];
    v[0] = x[1], v[1] = x[2];
    return 0;
}

int train_hook_wire(train_ctx *t, long step, const train_step_stats *st, void *user) {
    int *wire = user;   /* the format in force */
    run_job *j = train_engine_job(t->e);
    if (!j || *wire != PT_WIRE_F32 || step < t->step0 + WIRE_FIRST_STEP) return 0;
    const sched *s = run_job_schedule(j);
    int next = *wire;
    double v[2] = { -1, -1 };
    if (t->root) {   /* the profile is the root's */
        sim_costs prof;
        sim_costs_init(&prof, s->n_stages, 0, 0, 0);
        run_job_profile_mean(j, &prof);
        prof.reduce_overlap = !t->o.ro.no_overlap;
        next = train_wire_decide(s, &prof, run_job_links(j), (double)run_job_msg_bytes(j), *wire, &v[0], &v[1]);
        sim_costs_free(&prof);
    }
    if (wire_agree(t, &next, v) < 0) return pt_adderr("step %ld: --adapt-wire: ", step);
    if (next == *wire) return 0;
    run_job_set_wire(j, next);
    *wire = next;
    char line[320], links[256];
    snprintf(line, sizeof line, "wire bf16 from the next step (--adapt-wire): the step is link-bound (%s); "
             "predicted %.0f ms per step in 16 bits, %.0f ms in fp32", run_links_describe(run_job_links(j), links,
             sizeof links), v[1] * 1e3, v[0] * 1e3);
    cJSON *f = cJSON_CreateObject();
    cJSON_AddStringToObject(f, "action", "wire");
    cJSON_AddStringToObject(f, "wire", "bf16");
    cJSON_AddNumberToObject(f, "predicted_s", v[1]);
    cJSON_AddNumberToObject(f, "was_s", v[0]);
    if (t->root) {
        printf("step %ld: %s\n", step, line);
        fflush(stdout);
    }
    train_report_adapt(t, step, line, f);
    (void)st;
    return 0;
}

int train_wire_init(train_ctx *t) {
    if (!t->o.adapt) return pt_seterr("--adapt-wire lets --adapt turn on bf16 on a slow link: give --adapt too");
    if (!train_engine_job(t->e)) return pt_seterr("--adapt-wire: the run has no pipeline links (give --stages P >= 2)");
    t->wire_state = t->o.ro.wire;
    return 0;
}
