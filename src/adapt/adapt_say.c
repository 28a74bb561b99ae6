/* --adapt's words: the estimate in a line, the adaptive schedule's warm-up, a link's queue, and
 * the fields of the "adapt" events; each decision said as a line (root) and an event. Not here:
 * deciding (trainer_adapt.c). */
#include "adapt/adapt_int.h"
#include <stdio.h>

/* "link 0-1 +48 ms per message; stage 1 x2.0", or "healthy", into buf. */
void adapt_describe(const adapt_state *A, const sim_estimate *e, double mf, char *buf, size_t n) {
    size_t at = 0;
    buf[0] = 0;
    for (int r = 0; r + 1 < A->P && at < n; r++)
        if (e->link_delay[r] >= A->po.link_off * mf)
            at += (size_t)snprintf(buf + at, n - at, "%slink %d-%d +%.0f ms per message", at ? "; " : "", r, r + 1,
                                   e->link_delay[r] * 1e3);
    for (int g = 0; g < A->S && at < n; g++)
        if (e->stage_slow[g] >= A->po.stage_off)
            at += (size_t)snprintf(buf + at, n - at, "%sstage %d x%.2f", at ? "; " : "", g, e->stage_slow[g]);
    if (!at) snprintf(buf, n, "healthy");
}

/* The links of e slow in bandwidth ("link 0-1 slow in bandwidth: each message holds it 40 ms of its
 * 44 (1.2 MB/s), those sent closer together queue"), or "" when none is, into buf. */
void adapt_queue_text(const adapt_state *A, const sim_estimate *e, double mf, char *buf, size_t n) {
    size_t at = 0;
    buf[0] = 0;
    for (int r = 0; r + 1 < A->P && at < n; r++)
        if (e->link_delay[r] >= A->po.link_off * mf && e->link_busy[r] > 0)
            at += (size_t)snprintf(buf + at, n - at, "%slink %d-%d slow in bandwidth: each message holds it %.0f ms "
                                   "of its %.0f (%.3g MB/s), those sent closer together queue", at ? "; " : "", r,
                                   r + 1, e->link_busy[r] * 1e3, e->link_delay[r] * 1e3,
                                   A->act_bytes / e->link_busy[r] / 1e6);
}

/* Forwards each rank runs before its first backward ("5,4,2,1"), into buf. */
void adapt_warmup_text(const sched *s, char *buf, size_t n) {
    size_t at = 0;
    for (int r = 0; r < s->n_ranks && at < n; r++) {
        int w = 0;
        for (int i = 0; i < s->len[r]; i++) {
            sched_kind k = s->acts[r][i].kind;
            if (k == ACT_B || k == ACT_BW) break;
            w += k == ACT_F;
        }
        at += (size_t)snprintf(buf + at, n - at, "%s%d", r ? "," : "", w);
    }
}

/* The event's fields: the estimate, what runs now, the predictions (seconds per step). */
cJSON *adapt_fields(const adapt_state *A, const sim_estimate *e, const char *action, const char *schedule,
                           double predicted, double was) {
    cJSON *o = cJSON_CreateObject(), *links = cJSON_CreateArray(), *stages = cJSON_CreateArray();
    cJSON *busy = cJSON_CreateArray();
    cJSON_AddStringToObject(o, "action", action);
    cJSON_AddStringToObject(o, "schedule", schedule);
    for (int r = 0; r + 1 < A->P; r++) cJSON_AddItemToArray(links, cJSON_CreateNumber(e->link_delay[r]));
    for (int r = 0; r + 1 < A->P; r++) cJSON_AddItemToArray(busy, cJSON_CreateNumber(e->link_busy[r]));
    for (int g = 0; g < A->S; g++) cJSON_AddItemToArray(stages, cJSON_CreateNumber(e->stage_slow[g]));
    cJSON_AddItemToObject(o, "link_delay_s", links);
    cJSON_AddItemToObject(o, "link_queue_s", busy);
    cJSON_AddItemToObject(o, "stage_slowdown", stages);
    if (predicted > 0) cJSON_AddNumberToObject(o, "predicted_s", predicted);
    if (was > 0) cJSON_AddNumberToObject(o, "was_s", was);
    cJSON_AddNumberToObject(o, "mem_limit", A->mem_limit);
    cJSON_AddStringToObject(o, "mem_limit_from", A->mem_why);
    if (A->mem_fixed) {
        cJSON_AddItemToObject(o, "mem_rank_fixed_bytes", cJSON_CreateDoubleArray(A->mem_fixed, A->mem_R));
        cJSON_AddItemToObject(o, "mem_rank_act_bytes", cJSON_CreateDoubleArray(A->mem_act, A->mem_R));
        cJSON_AddItemToObject(o, "mem_rank_available_bytes", cJSON_CreateDoubleArray(A->mem_have, A->mem_R));
    }
    return o;
}

void adapt_say(adapt_state *A, long step, const char *line, cJSON *fields) {
    if (A->h.root) {
        printf("step %ld: %s\n", step, line);
        fflush(stdout);
    }
    cJSON_AddStringToObject(fields, "message", line);
    A->h.event(A->h.user, "adapt", step, fields);
}

const sched *adapt_schedule(const adapt_state *A) { return A->h.schedule(A->h.user); }
