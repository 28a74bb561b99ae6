/* What a simulated run says to a reader: the summary lines, the JSON object, the events as CSV,
 * side steps' fill, and the --adapt replay, exactly as `pipetrain simulate` prints them (its
 * keys are a contract: docs/simulator.md). Not here: running the simulator (sim.h), parsing
 * flags (cli/cli_simulate.c). */
#ifndef PT_SIM_SIM_REPORT_H
#define PT_SIM_SIM_REPORT_H
#include "sim/sim.h"
#include "sim/sim_adapt.h"
#include <cjson/cJSON.h>
#include <stdio.h>

/* What a summary adds to the run itself. */
typedef struct {
    int post_validation;            /* the run was --post-validation */
    int crit;                       /* the summary lists the critical path */
    const sched_adaptive_info *adaptive;   /* the adaptive generator's pick (n_judged 0, or NULL:
                                            * another generator) */
    int mem_limit;                  /* --mem-limit the adaptive schedule ran under */
    int mem_needed;                 /* > 0: the limit that would come within 5% of unlimited */
    double unlimited_time;          /* and the time with no limit */
} sim_report_opts;

/* The summary lines of run r of schedule s. */
void sim_report_print(FILE *f, const sched *s, const sim_result *r, const sim_report_opts *o);
/* The JSON object of run r (schedule, ranks, tp, [model], stages, ... critical_path): a new
 * object the caller owns; model (taken, may be NULL) goes under "model" after "tp". */
cJSON *sim_report_json(const sched *s, const sim_result *r, const sim_costs *c, const sim_report_opts *o,
                       cJSON *model);
/* Every event as a CSV row (rank,stream,action,stage,mb,iter,ready,start,end). */
void sim_report_events_csv(FILE *f, const timeline *tl);
/* Side steps' fill (sim_side_fit): lines, or a JSON object the caller owns. */
void sim_report_side_print(FILE *f, const sim_side *sd);
cJSON *sim_report_side_json(const sim_side *sd);
/* The --adapt replay: lines, or its JSON object (the caller owns it). */
void sim_report_adapt_print(FILE *f, const sim_adapt_opts *o, const sim_adapt_result *r);
cJSON *sim_report_adapt_json(const sim_adapt_opts *o, const sim_adapt_result *r);
/* A JSON array of n numbers. */
cJSON *sim_report_doubles(const double *x, int n);
/* Prints a JSON object on one line and frees it. */
void sim_report_json_print(FILE *f, cJSON *o);

#endif
