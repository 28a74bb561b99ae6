/* Plan files: the chosen layout and its predictions as JSON (docs/planner.md), written atomically,
 * read back for `pipetrain train --plan`. Not the search (plan_search.c). */
#include "plan/plan.h"
#include "io/io.h"
#include "io/json.h"
#include "util/pt.h"
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void plan_layout_free(plan_layout *p) {
    free(p->split); free(p->devices); free(p->stage_mem); free(p->stage_time); free(p->stage_inflight);
    memset(p, 0, sizeof *p);
}

void plan_layout_even_split(plan_layout *p, int n_layer) {
    p->K = p->P * p->chunks;
    free(p->split);
    p->split = pt_malloc(sizeof(int) * (size_t)(p->K > 0 ? p->K : 1));
    for (int k = 0; k < p->K; k++) p->split[k] = n_layer / p->K + (k < n_layer % p->K);
}

/* TP ranks of a layout: 0 (not set) is 1. */
static int layout_tp(const plan_layout *p) { return p->tp > 0 ? p->tp : 1; }

char *plan_layout_split_str(const plan_layout *p, char *buf, int n) {
    int at = 0;
    buf[0] = 0;
    for (int k = 0; k < p->K && at < n; k++) at += snprintf(buf + at, (size_t)(n - at), "%s%d", k ? "," : "", p->split[k]);
    return buf;
}

static cJSON *doubles(const double *x, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(x[i]));
    return a;
}

static cJSON *predicted_json(const plan_layout *p) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "step_time", p->step_time);
    cJSON_AddNumberToObject(o, "tokens_per_s", p->tokens_per_s);
    cJSON_AddNumberToObject(o, "bubble", p->bubble);
    if (p->stage_mem) cJSON_AddItemToObject(o, "stage_memory", doubles(p->stage_mem, p->K));
    if (p->stage_time) cJSON_AddItemToObject(o, "stage_time", doubles(p->stage_time, p->K));
    if (p->stage_inflight) cJSON_AddItemToObject(o, "stage_inflight", cJSON_CreateIntArray(p->stage_inflight, p->K));
    return o;
}

/* The plan as a cJSON object (caller deletes). */
static cJSON *plan_to_json(const plan_layout *p) {
    cJSON *o = cJSON_CreateObject();
    char split[1024];
    cJSON_AddStringToObject(o, "format", "pipetrain-plan/1");
    cJSON_AddNumberToObject(o, "stages", p->P);
    cJSON_AddNumberToObject(o, "dp", p->D);
    cJSON_AddNumberToObject(o, "tp", layout_tp(p));
    cJSON_AddNumberToObject(o, "zero", p->zero);
    cJSON_AddNumberToObject(o, "microbatches", p->M);
    cJSON_AddNumberToObject(o, "microbatch_size", p->mb_size);
    cJSON_AddNumberToObject(o, "seq", p->T);
    cJSON_AddStringToObject(o, "schedule", p->schedule);
    cJSON_AddNumberToObject(o, "chunks", p->chunks);
    cJSON_AddBoolToObject(o, "recompute", p->recompute);
    cJSON_AddBoolToObject(o, "tp_overlap", p->tp_overlap);
    cJSON_AddBoolToObject(o, "tp_recompute", p->tp_recompute);
    cJSON_AddBoolToObject(o, "sp", p->sp);
    if (p->seq_chunks > 1) cJSON_AddNumberToObject(o, "seq_chunks", p->seq_chunks);
    if (p->balance_memory) cJSON_AddTrueToObject(o, "balance_memory");
    if (p->async_window > 0) cJSON_AddNumberToObject(o, "async_window", p->async_window);
    cJSON_AddStringToObject(o, "placement", p->placement);
    cJSON_AddItemToObject(o, "split", cJSON_CreateIntArray(p->split, p->K));
    cJSON_AddStringToObject(o, "split_text", plan_layout_split_str(p, split, sizeof split));
    if (p->devices) cJSON_AddItemToObject(o, "devices", cJSON_CreateIntArray(p->devices, p->P * p->D * layout_tp(p)));
    cJSON_AddItemToObject(o, "predicted", predicted_json(p));
    return o;
}

int plan_write(const plan_layout *p, const char *path) {
    cJSON *o = plan_to_json(p);
    int rc = io_write_json(o, path);
    cJSON_Delete(o);
    return rc;
}

#define PLAN_INT_MAX 1000000000   /* a sanity bound on the whole numbers of a plan file */

static int get_int(const cJSON *o, const char *key, const char *path, int lo, int *out) {
    return io_json_int(out, o, key, IO_JSON_REQUIRED, lo, PLAN_INT_MAX, "%s: %s must be a whole number >= %d",
                       path, key, lo);
}

/* An int array of exactly n entries >= lo. */
static int get_ints(const cJSON *o, const char *key, const char *path, int n, int lo, int **out) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsArray(a) || cJSON_GetArraySize(a) != n)
        return pt_seterr("%s: %s must be an array of %d whole numbers", path, key, n);
    *out = pt_malloc(sizeof(int) * (size_t)n);
    int i = 0;
    for (const cJSON *x = a->child; x; x = x->next, i++) {
        if (!io_json_is_whole(x, lo, PLAN_INT_MAX))
            return pt_seterr("%s: %s[%d] must be a whole number >= %d", path, key, i, lo);
        (*out)[i] = (int)x->valuedouble;
    }
    return 0;
}

static int get_str(const cJSON *o, const char *key, const char *path, char *dst, size_t n) {
    const char *s;
    if (io_json_str(&s, o, key, IO_JSON_REQUIRED, n, "%s: %s must be a string (shorter than %zu)", path, key, n) < 0)
        return -1;
    strcpy(dst, s);
    return 0;
}

static void read_predicted(const cJSON *o, plan_layout *p) {
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(o, "predicted"), *v;
    if (!cJSON_IsObject(pr)) return;
    if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(pr, "step_time"))) p->step_time = v->valuedouble;
    if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(pr, "tokens_per_s"))) p->tokens_per_s = v->valuedouble;
    if (cJSON_IsNumber(v = cJSON_GetObjectItemCaseSensitive(pr, "bubble"))) p->bubble = v->valuedouble;
}

static int plan_from_json(const cJSON *o, const char *path, plan_layout *p) {
    if (!cJSON_IsObject(o)) return pt_seterr("%s: not a JSON object (a plan from pipetrain plan --out)", path);
    if (get_int(o, "stages", path, 1, &p->P) || get_int(o, "dp", path, 1, &p->D) ||
        get_int(o, "microbatches", path, 1, &p->M) || get_int(o, "microbatch_size", path, 1, &p->mb_size) ||
        get_int(o, "seq", path, 1, &p->T) || get_int(o, "chunks", path, 1, &p->chunks) ||
        get_str(o, "schedule", path, p->schedule, sizeof p->schedule))
        return -1;
    p->tp = 1;
    if (io_json_int(&p->tp, o, "tp", IO_JSON_OPTIONAL, 1, PLAN_INT_MAX, "%s: tp must be a whole number >= 1 (tensor-"
                    "parallel ranks per pipeline rank)", path) < 0 ||
        io_json_int(&p->zero, o, "zero", IO_JSON_OPTIONAL, 0, 1, "%s: zero must be 0 or 1 (ZeRO-1)", path) < 0)
        return -1;
    p->recompute = false;
    p->tp_overlap = p->tp_recompute = p->sp = p->balance_memory = false;
    if (io_json_bool(&p->recompute, o, "recompute", IO_JSON_OPTIONAL, "%s: recompute must be true or false", path) < 0 ||
        io_json_bool(&p->tp_overlap, o, "tp_overlap", IO_JSON_OPTIONAL, "%s: tp_overlap must be true or false "
                     "(train --tp-overlap)", path) < 0 ||
        io_json_bool(&p->tp_recompute, o, "tp_recompute", IO_JSON_OPTIONAL, "%s: tp_recompute must be true or false "
                     "(train --tp-recompute)", path) < 0 ||
        io_json_bool(&p->sp, o, "sp", IO_JSON_OPTIONAL, "%s: sp must be true or false (train --sp, sequence "
                     "parallelism)", path) < 0 ||
        io_json_bool(&p->balance_memory, o, "balance_memory", IO_JSON_OPTIONAL, "%s: balance_memory must be true or "
                     "false (train --balance-memory)", path) < 0)
        return -1;
    p->seq_chunks = p->async_window = 0;
    if (io_json_int(&p->seq_chunks, o, "seq_chunks", IO_JSON_OPTIONAL, 1, PLAN_INT_MAX, "%s: seq_chunks must be a "
                    "whole number >= 1 (train --seq-chunks)", path) < 0 ||
        io_json_int(&p->async_window, o, "async_window", IO_JSON_OPTIONAL, 1, PLAN_ASYNC_WINDOW_MAX, "%s: async_window "
                    "must be a whole number in 1..%d (train --async-window)", path, PLAN_ASYNC_WINDOW_MAX) < 0)
        return -1;
    if (cJSON_GetObjectItemCaseSensitive(o, "placement") && get_str(o, "placement", path, p->placement, sizeof p->placement))
        return -1;
    p->K = p->P * p->chunks;
    if (get_ints(o, "split", path, p->K, 1, &p->split) < 0) return -1;
    long n_dev = (long)p->P * p->D * p->tp;
    if (n_dev > PLAN_INT_MAX)
        return pt_seterr("%s: tp %d x dp %d x stages %d = %ld devices is not a plan (at most %d)", path, p->tp, p->D,
                         p->P, n_dev, PLAN_INT_MAX);
    if (cJSON_GetObjectItemCaseSensitive(o, "devices") && get_ints(o, "devices", path, (int)n_dev, 0, &p->devices) < 0)
        return -1;
    read_predicted(o, p);
    return 0;
}

int plan_read(const char *path, plan_layout *out) {
    memset(out, 0, sizeof *out);
    size_t len;
    char *text = pt_read_file(path, &len);
    if (!text) return -1;
    cJSON *o = cJSON_ParseWithLength(text, len);
    free(text);
    int rc = o ? plan_from_json(o, path, out) : pt_seterr("%s: JSON parse error (a plan from pipetrain plan --out)", path);
    cJSON_Delete(o);
    if (rc < 0) plan_layout_free(out);
    return rc;
}
