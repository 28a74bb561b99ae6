/* A simulated run's summary, JSON, CSV, side-step fill and --adapt replay (sim_report.h). */
#include "sim/sim_report.h"
#include <stdlib.h>

cJSON *sim_report_doubles(const double *x, int n) {
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(x[i]));
    return arr;
}

static cJSON *json_critical_path(const sim_result *r) {
    static const char *stream[TL_N_STREAMS] = { "compute", "send", "recv", "side" };
    cJSON *arr = cJSON_CreateArray();
    char act[48];
    for (int i = 0; i < r->n_crit; i++) {
        const tl_event *e = &r->tl.ev[r->crit[i].ev];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "rank", e->rank);
        cJSON_AddStringToObject(o, "action", sched_action_str(&e->act, act, sizeof act));
        cJSON_AddStringToObject(o, "stream", stream[e->stream]);
        cJSON_AddNumberToObject(o, "iter", e->iter);
        cJSON_AddNumberToObject(o, "start", e->start);
        cJSON_AddNumberToObject(o, "end", e->end);
        cJSON_AddNumberToObject(o, "waited", r->crit[i].waited);
        cJSON_AddItemToArray(arr, o);
    }
    return arr;
}

/* --side-step: per rank, the idle time, what side steps of that length fill, in how many waits. */
void sim_report_side_print(FILE *f, const sim_side *sd) {
    fprintf(f, "side steps of %.6g (--side-step): bubble usable per rank\n", sd->step);
    fprintf(f, "  rank        idle      usable   used   steps  waits used\n");
    for (int p = 0; p < sd->n_ranks; p++)
        fprintf(f, "  rank %-4d %10.6g %10.6g %5.1f%% %7ld  %d of %d\n", p, sd->idle[p], sd->usable[p],
               sd->idle[p] > 0 ? 100 * sd->usable[p] / sd->idle[p] : 0, sd->steps[p], sd->used[p], sd->waits[p]);
    fprintf(f, "  all       %10.6g %10.6g %5.1f%%\n", sd->idle_total, sd->usable_total,
           sd->idle_total > 0 ? 100 * sd->usable_total / sd->idle_total : 0);
}

cJSON *sim_report_side_json(const sim_side *sd) {
    cJSON *o = cJSON_CreateObject(), *per = cJSON_AddArrayToObject(o, "per_rank");
    cJSON_AddNumberToObject(o, "step", sd->step);
    cJSON_AddNumberToObject(o, "idle", sd->idle_total);
    cJSON_AddNumberToObject(o, "usable", sd->usable_total);
    cJSON_AddNumberToObject(o, "usable_fraction", sd->idle_total > 0 ? sd->usable_total / sd->idle_total : 0);
    for (int p = 0; p < sd->n_ranks; p++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "idle", sd->idle[p]);
        cJSON_AddNumberToObject(x, "usable", sd->usable[p]);
        cJSON_AddNumberToObject(x, "steps", (double)sd->steps[p]);
        cJSON_AddNumberToObject(x, "waits", sd->waits[p]);
        cJSON_AddNumberToObject(x, "waits_used", sd->used[p]);
        cJSON_AddItemToArray(per, x);
    }
    return o;
}

void sim_report_print(FILE *f, const sched *s, const sim_result *r, const sim_report_opts *o) {
    const sched_adaptive_info *ad = o->adaptive;
    fprintf(f, "schedule %s  ranks %d  stages %d  microbatches %d  iterations %d%s\n", s->name, s->n_ranks,
           s->n_stages, s->n_mb, r->n_iters, o->post_validation ? " (post-validation)" : "");
    fprintf(f, "iteration time   %.6g%s\n", r->iteration_time, r->n_iters > 1 ? "  (steady state)" : "");
    if (r->n_iters > 1) fprintf(f, "total time       %.6g\n", r->makespan);
    if (ad && ad->n_judged)
        fprintf(f, "adaptive         %s (best of %d candidates)\n", ad->winner, ad->n_judged);
    fprintf(f, "ideal time       %.6g  (busiest rank's compute per iteration)\n", r->ideal_time);
    fprintf(f, "bubble fraction  %.4f  (%.2f%% of rank time idle)\n", r->bubble_fraction, 100 * r->bubble_fraction);
    if (r->n_iters > 1) fprintf(f, "steady bubble    %.4f\n", r->steady_bubble);
    fprintf(f, "per rank         busy        idle\n");
    for (int i = 0; i < r->n_ranks; i++)
        fprintf(f, "  rank %-4d  %10.6g  %10.6g\n", i, r->busy[i], r->idle[i]);
    fprintf(f, "peak activations per stage (microbatches, bytes)\n");
    for (int g = 0; g < r->n_stages; g++)
        fprintf(f, "  stage %-4d %4d  %.6g\n", g, r->peak_mb[g], r->peak_bytes[g]);
    if (s->async) {
        fprintf(f, "weight versions kept beyond the live one, per stage (bytes)\n");
        for (int g = 0; g < r->n_stages; g++) fprintf(f, "  stage %-4d %.6g\n", g, r->stash_bytes[g]);
    }
    if (o->crit) { fprintf(f, "critical path\n"); sim_print_critical_path(r, f); }
}

cJSON *sim_report_json(const sched *s, const sim_result *r, const sim_costs *c, const sim_report_opts *opt,
                       cJSON *model) {
    const sched_adaptive_info *ad = opt->adaptive;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "schedule", s->name);
    cJSON_AddNumberToObject(o, "ranks", s->n_ranks);
    cJSON_AddNumberToObject(o, "tp", c->tp);
    if (model) cJSON_AddItemToObject(o, "model", model);
    cJSON_AddNumberToObject(o, "stages", s->n_stages);
    cJSON_AddNumberToObject(o, "microbatches", s->n_mb);
    cJSON_AddNumberToObject(o, "iterations", r->n_iters);
    cJSON_AddBoolToObject(o, "post_validation", opt->post_validation);
    cJSON_AddNumberToObject(o, "iteration_time", r->iteration_time);
    cJSON_AddNumberToObject(o, "makespan", r->makespan);
    cJSON_AddNumberToObject(o, "bubble_fraction", r->bubble_fraction);
    cJSON_AddNumberToObject(o, "steady_bubble_fraction", r->steady_bubble);
    cJSON_AddNumberToObject(o, "ideal_time", r->ideal_time);
    cJSON_AddItemToObject(o, "iteration_end", sim_report_doubles(r->iter_end, r->n_iters));
    cJSON *per_it = cJSON_AddArrayToObject(o, "per_iteration");
    for (int i = 0; i < r->n_iters; i++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "time", r->iter_end[i] - (i ? r->iter_end[i - 1] : 0));
        cJSON_AddStringToObject(x, "schedule", s->name);
        cJSON_AddItemToArray(per_it, x);
    }
    if (ad && ad->n_judged) {
        cJSON *x_ad = cJSON_AddObjectToObject(o, "adaptive");
        cJSON_AddStringToObject(x_ad, "winner", ad->winner);
        cJSON_AddNumberToObject(x_ad, "candidates", ad->n_judged);
        cJSON_AddNumberToObject(x_ad, "mem_limit", opt->mem_limit);
        if (opt->mem_needed > 0) cJSON_AddNumberToObject(x_ad, "mem_needed", opt->mem_needed);
        if (opt->mem_needed > 0) cJSON_AddNumberToObject(x_ad, "unlimited_time", opt->unlimited_time);
    }
    cJSON_AddItemToObject(o, "peak_activations", cJSON_CreateIntArray(r->peak_mb, r->n_stages));
    cJSON_AddItemToObject(o, "peak_activation_bytes", sim_report_doubles(r->peak_bytes, r->n_stages));
    cJSON_AddItemToObject(o, "rank_peak_bytes", sim_report_doubles(r->rank_peak_bytes, r->n_ranks));
    if (s->async) cJSON_AddItemToObject(o, "weight_stash_bytes", sim_report_doubles(r->stash_bytes, r->n_stages));
    cJSON *per = cJSON_AddArrayToObject(o, "per_rank");
    for (int i = 0; i < r->n_ranks; i++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "busy", r->busy[i]);
        cJSON_AddNumberToObject(x, "idle", r->idle[i]);
        cJSON_AddItemToArray(per, x);
    }
    cJSON_AddItemToObject(o, "critical_path", json_critical_path(r));
    return o;
}

void sim_report_events_csv(FILE *f, const timeline *tl) {
    static const char *stream[TL_N_STREAMS] = { "compute", "send", "recv", "side" };
    char act[48];
    fprintf(f, "rank,stream,action,stage,mb,iter,ready,start,end\n");
    for (int i = 0; i < tl->n; i++) {
        const tl_event *e = &tl->ev[i];
        fprintf(f, "%d,%s,%s,%d,%d,%d,%.9g,%.9g,%.9g\n", e->rank, stream[e->stream],
               sched_action_str(&e->act, act, sizeof act), e->act.stage, e->act.mb, e->iter, e->ready, e->start, e->end);
    }
}

void sim_report_adapt_print(FILE *f, const sim_adapt_opts *o, const sim_adapt_result *r) {
    fprintf(f, "adapt: starting schedule %s  ranks %d  microbatches %d  iterations %d  adaptive under --mem-limit %d\n",
           o->start, o->shape.ranks, o->shape.microbatches, r->n, r->mem_limit);
    fprintf(f, "iteration  %-12s %-10s  after it\n", "time", "schedule");
    for (int i = 0; i < r->n; i++) fprintf(f, "  %-8d %-12.6g %-10s  %s\n", i + 1, r->time[i], r->name[i], r->note[i]);
    fprintf(f, "total time       %.6g\n", r->total);
}

cJSON *sim_report_adapt_json(const sim_adapt_opts *o, const sim_adapt_result *r) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "schedule", o->start);
    cJSON_AddBoolToObject(j, "adapt", true);
    cJSON_AddNumberToObject(j, "ranks", o->shape.ranks);
    cJSON_AddNumberToObject(j, "microbatches", o->shape.microbatches);
    cJSON_AddNumberToObject(j, "iterations", r->n);
    cJSON_AddNumberToObject(j, "mem_limit", r->mem_limit);
    cJSON_AddNumberToObject(j, "total_time", r->total);
    cJSON *per = cJSON_AddArrayToObject(j, "per_iteration");
    for (int i = 0; i < r->n; i++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "iteration", i + 1);
        cJSON_AddNumberToObject(x, "time", r->time[i]);
        cJSON_AddStringToObject(x, "schedule", r->name[i]);
        cJSON_AddStringToObject(x, "note", r->note[i]);
        cJSON_AddItemToArray(per, x);
    }
    return j;
}


void sim_report_json_print(FILE *f, cJSON *o) {
    char *text = cJSON_PrintUnformatted(o);
    fprintf(f, "%s\n", text);
    free(text);
    cJSON_Delete(o);
}
