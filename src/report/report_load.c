/* Reading a run for the report: the metrics file (one JSON line per step), its events file and
 * the timeline picture, tolerant of what real runs leave behind (nan numbers, resumed runs that
 * repeat steps, a last line cut by a crash), strict about what is really wrong. Not here: drawing
 * (report_svg.c, report_html.c). */
#include "report/report.h"
#include "io/io.h"
#include "util/pt.h"
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

static const char *const SERIES_KEY[REP_N_SERIES] = {
    "loss", "eval_loss", "lr", "grad_norm", "tokens_per_s", "step_ms", "bubble_fraction",
};

/* PATH less a ".jsonl" ending plus suffix. */
static char *report_sibling(const char *metrics, const char *suffix, char *buf, size_t n) {
    size_t len = strlen(metrics);
    if (len >= 6 && strcmp(metrics + len - 6, ".jsonl") == 0) len -= 6;
    if (len + strlen(suffix) + 1 > n) return NULL;
    memcpy(buf, metrics, len);
    strcpy(buf + len, suffix);
    return buf;
}

char *report_events_path(const char *metrics, char *buf, size_t n) {
    return report_sibling(metrics, ".events.jsonl", buf, n);
}

char *report_html_path(const char *metrics, char *buf, size_t n) {
    return report_sibling(metrics, ".html", buf, n);
}

/* A copy of s with bare nan / inf / infinity tokens outside strings (what printf writes for
 * them) replaced by null, so a JSON parser takes the line. Caller frees. */
static char *report_null_nonfinite(const char *s) {
    char *out = pt_malloc(2 * strlen(s) + 1), *o = out;   /* "nan" -> "null" grows by one */
    int in_str = 0;
    for (const char *p = s; *p;) {
        if (in_str) {
            if (*p == '\\' && p[1]) *o++ = *p++;
            else if (*p == '"') in_str = 0;
            *o++ = *p++;
            continue;
        }
        const char *t = p + (*p == '-' || *p == '+');
        size_t k = 0;
        while (isalpha((unsigned char)t[k])) k++;
        int word_start = p == s || !isalnum((unsigned char)p[-1]);
        if (word_start && ((k == 3 && (!strncasecmp(t, "nan", 3) || !strncasecmp(t, "inf", 3))) ||
                           (k == 8 && !strncasecmp(t, "infinity", 8)))) {
            memcpy(o, "null", 4);
            o += 4;
            p = t + k;
            continue;
        }
        if (*p == '"') in_str = 1;
        *o++ = *p++;
    }
    *o = 0;
    return out;
}

static void report_add_event(report_run *r, long step, const char *kind, const char *text) {
    if (r->n_ev == r->cap_ev) {
        r->cap_ev = r->cap_ev ? 2 * r->cap_ev : 16;
        report_event *v = pt_malloc(sizeof *v * (size_t)r->cap_ev);
        if (r->n_ev) memcpy(v, r->ev, sizeof *v * (size_t)r->n_ev);
        free(r->ev);
        r->ev = v;
    }
    report_event *e = &r->ev[r->n_ev++];
    e->step = step;
    snprintf(e->kind, sizeof e->kind, "%s", kind);
    snprintf(e->text, sizeof e->text, "%s", text);
}

static void report_grow(report_run *r) {
    if (r->n < r->cap) return;
    r->cap = r->cap ? 2 * r->cap : 1024;
    long *st = pt_malloc(sizeof *st * (size_t)r->cap);
    if (r->n) memcpy(st, r->step, sizeof *st * (size_t)r->n);
    free(r->step);
    r->step = st;
    for (int k = 0; k < REP_N_SERIES; k++) {
        double *v = pt_malloc(sizeof *v * (size_t)r->cap);
        if (r->n) memcpy(v, r->val[k], sizeof *v * (size_t)r->n);
        free(r->val[k]);
        r->val[k] = v;
    }
}

/* One step line into the run (in file order; sorted and de-duplicated later). */
static void report_add_step(report_run *r, const cJSON *o, long step) {
    report_grow(r);
    r->step[r->n] = step;
    for (int k = 0; k < REP_N_SERIES; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, SERIES_KEY[k]);
        r->val[k][r->n] = cJSON_IsNumber(v) && isfinite(v->valuedouble) ? v->valuedouble : NAN;
        if (k == REP_LOSS && v && !(cJSON_IsNumber(v) && isfinite(v->valuedouble))) {
            char t[64];
            snprintf(t, sizeof t, "step %ld: the loss is not finite", step);
            report_add_event(r, step, "nan", t);
        }
    }
    r->n++;
}

/* Sorts the steps (stable: file order within a step) and keeps the last line of each step. */
static void report_dedup(report_run *r) {
    int *idx = pt_malloc(sizeof *idx * (size_t)(r->n + 1)), n = 0;
    for (int i = 0; i < r->n; i++) idx[i] = i;
    for (int i = 1; i < r->n; i++) {   /* insertion sort: the lines are nearly sorted already */
        int v = idx[i], j = i;
        while (j > 0 && r->step[idx[j - 1]] > r->step[v]) { idx[j] = idx[j - 1]; j--; }
        idx[j] = v;
    }
    for (int i = 0; i < r->n; i++) {
        if (i + 1 < r->n && r->step[idx[i + 1]] == r->step[idx[i]]) { r->n_dup++; continue; }
        idx[n++] = idx[i];
    }
    long *st = pt_malloc(sizeof *st * (size_t)(n + 1));
    for (int i = 0; i < n; i++) st[i] = r->step[idx[i]];
    free(r->step);
    r->step = st;
    for (int k = 0; k < REP_N_SERIES; k++) {
        double *v = pt_malloc(sizeof *v * (size_t)(n + 1));
        for (int i = 0; i < n; i++) v[i] = r->val[k][idx[i]];
        free(r->val[k]);
        r->val[k] = v;
    }
    r->n = r->cap = n;
    free(idx);
}

/* Parses one line. NULL when it is not a JSON object. */
static cJSON *report_parse_line(const char *line) {
    char *clean = report_null_nonfinite(line);
    cJSON *o = cJSON_Parse(clean);
    free(clean);
    if (o && !cJSON_IsObject(o)) { cJSON_Delete(o); o = NULL; }
    return o;
}

/* The metrics lines. A line that is not JSON is an error unless it is the last (a crash cut
 * it); a step that goes back marks a resume. */
static int report_read_metrics(report_run *r, const char *path) {
    size_t len;
    char *text = pt_read_file(path, &len);
    if (!text) return -1;
    int lineno = 0, rc = 0;
    long prev = -1;
    for (char *line = text, *next; line && *line && rc == 0; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        lineno++;
        if (strspn(line, " \t\r") == strlen(line)) continue;
        cJSON *o = report_parse_line(line);
        const cJSON *st = o ? cJSON_GetObjectItemCaseSensitive(o, "step") : NULL;
        if (!cJSON_IsNumber(st)) {
            if (next && *next) rc = pt_seterr("%s: line %d is not a metrics line (a JSON object with a "
                                              "\"step\" number): %.60s", path, lineno, line);
            else r->n_bad++;
        } else {
            long s = (long)st->valuedouble;
            if (s <= prev) {
                char t[96];
                snprintf(t, sizeof t, "resumed at step %ld (steps %ld..%ld logged again)", s, s, prev);
                report_add_event(r, s, "resume", t);
            }
            prev = s;
            report_add_step(r, o, s);
        }
        cJSON_Delete(o);
    }
    free(text);
    if (rc == 0 && r->n == 0) rc = pt_seterr("%s: no steps in it (%s)", path, len ? "no metrics line" : "the file is empty");
    return rc;
}

/* A resume the metrics already showed (their steps went back) at this step: one marker, both
 * texts. 1 when merged. */
static int report_merge_resume(report_run *r, long step, const char *text) {
    for (int i = 0; i < r->n_ev; i++) {
        report_event *e = &r->ev[i];
        if (e->step != step || strcmp(e->kind, "resume")) continue;
        size_t len = strlen(e->text);
        snprintf(e->text + len, sizeof e->text - len, "; %s", text);
        return 1;
    }
    return 0;
}

/* One event line: kept for the markers, and start / end kept whole. */
static void report_take_event(report_run *r, cJSON *o) {
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(o, "event");
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "step");
    if (!cJSON_IsString(k)) return;
    long step = cJSON_IsNumber(s) ? (long)s->valuedouble : 0;
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(o, "message");
    char t[240];
    snprintf(t, sizeof t, "step %ld: %s%s%s", step, k->valuestring, cJSON_IsString(msg) ? ": " : "",
             cJSON_IsString(msg) ? msg->valuestring : "");
    if (!strcmp(k->valuestring, "resume") && report_merge_resume(r, step, t)) return;
    if (strcmp(k->valuestring, "start") && strcmp(k->valuestring, "end"))
        report_add_event(r, step, k->valuestring, t);
    cJSON **keep = !strcmp(k->valuestring, "start") ? &r->start : !strcmp(k->valuestring, "end") ? &r->end : NULL;
    if (!keep) return;
    cJSON_Delete(*keep);
    *keep = cJSON_Duplicate(o, 1);
}

/* The events file, when there is one; its bad lines are skipped (the page is still useful). */
static void report_read_events(report_run *r, const char *metrics) {
    char path[1200];
    size_t len;
    if (!report_events_path(metrics, path, sizeof path)) return;
    char *text = pt_read_file(path, &len);
    if (!text) return;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        cJSON *o = report_parse_line(line);
        if (o) report_take_event(r, o);
        cJSON_Delete(o);
    }
    free(text);
}

/* The timeline SVG named by the end event, without its XML prolog, when it can be read. */
static void report_read_svg(report_run *r) {
    const cJSON *p = r->end ? cJSON_GetObjectItemCaseSensitive(r->end, "svg") : NULL;
    size_t len;
    if (!cJSON_IsString(p)) return;
    char *text = pt_read_file(p->valuestring, &len);
    if (!text) return;
    char *svg = strstr(text, "<svg");
    if (svg) r->svg = pt_strdup(svg);
    free(text);
}

char *report_metrics_path(const char *run, char *buf, size_t n) {
    struct stat sb;
    int dir = stat(run, &sb) == 0 && S_ISDIR(sb.st_mode);
    int len = snprintf(buf, n, dir ? "%s/metrics.jsonl" : "%s", run);
    return len >= 0 && (size_t)len < n ? buf : NULL;
}

int report_run_load(report_run *r, const char *path) {
    memset(r, 0, sizeof *r);
    char metrics[1100];
    if (!report_metrics_path(path, metrics, sizeof metrics)) return pt_seterr("%s: path too long", path);
    snprintf(r->name, sizeof r->name, "%s", path);
    if (report_read_metrics(r, metrics) < 0) return -1;
    report_read_events(r, metrics);
    report_dedup(r);
    report_read_svg(r);
    return 0;
}

void report_run_free(report_run *r) {
    free(r->step);
    for (int k = 0; k < REP_N_SERIES; k++) free(r->val[k]);
    free(r->ev);
    cJSON_Delete(r->start);
    cJSON_Delete(r->end);
    free(r->svg);
    memset(r, 0, sizeof *r);
}

int report_event_append(const char *events_path, const char *kind, long step, const cJSON *fields) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "event", kind);
    cJSON_AddNumberToObject(o, "step", (double)step);
    const cJSON *e;
    cJSON_ArrayForEach(e, fields) cJSON_AddItemToObject(o, e->string, cJSON_Duplicate(e, 1));
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    int rc = pt_make_parents(events_path);
    FILE *f = rc == 0 ? fopen(events_path, "a") : NULL;
    if (rc == 0 && !f) rc = pt_seterr("%s: cannot append an event: %s", events_path, strerror(errno));
    if (f && fprintf(f, "%s\n", text) < 0) rc = pt_seterr("%s: cannot append an event: %s", events_path, strerror(errno));
    if (f && fclose(f) != 0 && rc == 0) rc = pt_seterr("%s: cannot append an event: %s", events_path, strerror(errno));
    free(text);
    return rc;
}
