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
    "side_cpu_s",   /* over wait_idle_s: report_add_step */
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

#define REPORT_MAX_ABS 1e150   /* larger values are not drawn (their differences overflow) */

/* A marker for consecutive non-finite losses: extends the previous one when it ended at the
 * step before, so a run that stays nan for 100k steps is one marker, not 100k. */
static void report_mark_nan(report_run *r, long step) {
    report_event *e = r->n_ev ? &r->ev[r->n_ev - 1] : NULL;
    if (e && !strcmp(e->kind, "nan") && e->step_end == step - 1) {
        e->step_end = step;
        snprintf(e->text, sizeof e->text, "steps %ld..%ld: the loss is not a finite number", e->step, step);
        return;
    }
    char t[96];
    snprintf(t, sizeof t, "step %ld: the loss is not a finite number", step);
    report_add_event(r, step, "nan", t);
    r->ev[r->n_ev - 1].step_end = step;
}

#define REPORT_MAX_STEP 9007199254740992.0   /* 2^53: steps are whole numbers below it */

/* The value of key in o when it is a whole number in [0, 2^53), else -1. */
static long report_whole(const cJSON *o, const char *key) {
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(st) || !(st->valuedouble >= 0 && st->valuedouble < REPORT_MAX_STEP) ||
        st->valuedouble != floor(st->valuedouble))
        return -1;
    return (long)st->valuedouble;
}

/* The value of a series' key: NAN when absent, -INFINITY when not a finite number. */
static double report_value(const cJSON *v) {
    if (!v) return NAN;
    return cJSON_IsNumber(v) && fabs(v->valuedouble) <= REPORT_MAX_ABS ? v->valuedouble : -INFINITY;
}

/* A held-out loss of the weights of step `at`, kept until the steps are sorted (report_place_evals). */
static void report_add_eval(report_run *r, long at, double v) {
    if (r->n_eval == r->cap_eval) {
        r->cap_eval = r->cap_eval ? 2 * r->cap_eval : 16;
        long *a = pt_malloc(sizeof *a * (size_t)r->cap_eval);
        double *x = pt_malloc(sizeof *x * (size_t)r->cap_eval);
        if (r->n_eval) {
            memcpy(a, r->eval_at, sizeof *a * (size_t)r->n_eval);
            memcpy(x, r->eval_val, sizeof *x * (size_t)r->n_eval);
        }
        free(r->eval_at);
        free(r->eval_val);
        r->eval_at = a;
        r->eval_val = x;
    }
    r->eval_at[r->n_eval] = at;
    r->eval_val[r->n_eval++] = v;
}

/* One step line into the run (in file order; sorted and de-duplicated later). A key that is
 * absent is NAN (skipped when drawn); one that is not a finite number is -INFINITY (a gap). An
 * eval_loss with its eval_step waits to be drawn at that step (the evaluation completes steps
 * after the weights it measured). */
static void report_add_step(report_run *r, const cJSON *o, long step) {
    report_grow(r);
    r->step[r->n] = step;
    for (int k = 0; k < REP_N_SERIES; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, SERIES_KEY[k]);
        r->val[k][r->n] = report_value(v);
        if (k == REP_LOSS && v && !isfinite(r->val[k][r->n])) report_mark_nan(r, step);
    }
    double waits = report_value(cJSON_GetObjectItemCaseSensitive(o, "wait_idle_s"));
    double *h = &r->val[REP_HARVESTED][r->n];
    if (!isnan(*h)) *h = isfinite(*h) && waits > 0 ? *h / waits : NAN;
    long at = report_whole(o, "eval_step");
    if (at >= 0 && !isnan(r->val[REP_EVAL_LOSS][r->n])) {
        report_add_eval(r, at, r->val[REP_EVAL_LOSS][r->n]);
        r->val[REP_EVAL_LOSS][r->n] = NAN;
    }
    r->n++;
}

/* Line order of two step indices: by step, then by file order (so the sort is stable). */
static const long *report_sort_steps;
static int report_cmp_idx(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    long u = report_sort_steps[i], v = report_sort_steps[j];
    return u < v ? -1 : u > v ? 1 : (i > j) - (i < j);
}

/* Sorts the steps (stable: file order within a step) and keeps the last line of each step. */
static void report_dedup(report_run *r) {
    int *idx = pt_malloc(sizeof *idx * (size_t)(r->n + 1)), n = 0;
    for (int i = 0; i < r->n; i++) idx[i] = i;
    report_sort_steps = r->step;   /* not reentrant: one report is loaded at a time */
    qsort(idx, (size_t)r->n, sizeof *idx, report_cmp_idx);
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

/* Index of step s in the sorted steps [0, n), or -1. */
static int report_find_step(const report_run *r, int n, long s) {
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (r->step[mid] < s) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && r->step[lo] == s ? lo : -1;
}

/* After the steps are sorted: each held-out loss at the step whose weights it measured (a later
 * one of the same step wins: file order), a row of its own when no line has that step. */
static void report_place_evals(report_run *r) {
    int n0 = r->n, added = 0;
    for (int i = 0; i < r->n_eval; i++) {
        long at = r->eval_at[i];
        int j = report_find_step(r, n0, at);
        for (int k = n0; j < 0 && k < r->n; k++)
            if (r->step[k] == at) j = k;
        if (j < 0) {
            report_grow(r);
            j = r->n++;
            r->step[j] = at;
            for (int k = 0; k < REP_N_SERIES; k++) r->val[k][j] = NAN;
            added = 1;
        }
        r->val[REP_EVAL_LOSS][j] = r->eval_val[i];
    }
    free(r->eval_at);
    free(r->eval_val);
    r->eval_at = NULL;
    r->eval_val = NULL;
    r->n_eval = r->cap_eval = 0;
    if (added) report_dedup(r);   /* sorts the new rows in; no step repeats */
}

/* Parses one line. NULL when it is not a JSON object. */
static cJSON *report_parse_line(const char *line) {
    char *clean = report_null_nonfinite(line);
    cJSON *o = cJSON_Parse(clean);
    free(clean);
    if (o && !cJSON_IsObject(o)) { cJSON_Delete(o); o = NULL; }
    return o;
}

/* A line cut short by a crash: an object that was never closed. */
static int report_is_cut(const char *line) {
    size_t n = strlen(line);
    while (n && isspace((unsigned char)line[n - 1])) n--;
    return line[strspn(line, " \t")] == '{' && (n == 0 || line[n - 1] != '}');
}

/* The step of a metrics line, or -1 when it has none that is a whole number in [0, 2^53). */
static long report_line_step(const cJSON *o) { return report_whole(o, "step"); }

static void report_take_event(report_run *r, cJSON *o);

/* One line of the metrics: a step, an event (a line with an "event" key), or a line a crash cut
 * (counted); anything else is an error naming the line. */
static int report_metrics_line(report_run *r, char *line, int lineno, long *prev, const char *path) {
    if (strspn(line, " \t\r") == strlen(line)) return 0;
    cJSON *o = report_parse_line(line);
    long s = o ? report_line_step(o) : -1;
    int rc = 0;
    if (o && cJSON_GetObjectItemCaseSensitive(o, "event")) report_take_event(r, o);
    else if (s >= 0) {
        if (s <= *prev) {
            char t[128];
            snprintf(t, sizeof t, "resumed at step %ld (steps %ld..%ld logged again)", s, s, *prev);
            report_add_event(r, s, "resume", t);
        }
        *prev = s;
        report_add_step(r, o, s);
    } else if (!o && report_is_cut(line)) r->n_bad++;
    else rc = pt_seterr("%s: line %d is not a metrics line (a JSON object with a whole \"step\" "
                        "number >= 0): %.60s", path, lineno, line);
    cJSON_Delete(o);
    return rc;
}

/* The metrics lines from byte `from` on (the last fresh start in the file); a step that goes
 * back marks a resume. */
static int report_read_metrics(report_run *r, const char *path, long from) {
    size_t len;
    char *text = pt_read_file(path, &len);
    if (!text) return -1;
    for (size_t i = 0; i < len; i++) if (!text[i]) text[i] = ' ';   /* a NUL ends nothing */
    if (from < 0 || (size_t)from > len) from = 0;
    for (long i = 0; i < from; i++) r->n_skipped += text[i] == '\n';
    int lineno = (int)r->n_skipped, rc = 0;
    long prev = -1;
    for (char *line = text + from, *next; line && *line && rc == 0; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        rc = report_metrics_line(r, line, ++lineno, &prev, path);
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

/* The same event (kind, step, text) is there already. */
static int report_has_event(const report_run *r, long step, const char *kind, const char *text) {
    for (int i = 0; i < r->n_ev; i++)
        if (r->ev[i].step == step && !strcmp(r->ev[i].kind, kind) && !strcmp(r->ev[i].text, text)) return 1;
    return 0;
}

/* One event line: kept for the markers, and start / end kept whole. */
static void report_take_event(report_run *r, cJSON *o) {
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(o, "event");
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(o, "step");
    if (!cJSON_IsString(k)) return;
    long step = cJSON_IsNumber(s) && fabs(s->valuedouble) < REPORT_MAX_STEP ? (long)s->valuedouble : 0;
    const cJSON *msg = cJSON_GetObjectItemCaseSensitive(o, "message");
    char t[240], prefix[40];
    const char *m = cJSON_IsString(msg) ? msg->valuestring : "";
    snprintf(prefix, sizeof prefix, "step %ld: ", step);
    if (!strncmp(m, prefix, strlen(prefix))) m += strlen(prefix);   /* said once */
    snprintf(t, sizeof t, "%s%s%s%s", prefix, k->valuestring, *m ? ": " : "", m);
    if (report_has_event(r, step, k->valuestring, t)) return;   /* a checkpoint saved again */
    long at = report_whole(o, "eval_step");   /* an evaluation reported as an event */
    const cJSON *ev = cJSON_GetObjectItemCaseSensitive(o, "eval_loss");
    if (at >= 0 && ev) report_add_eval(r, at, report_value(ev));
    if (!strcmp(k->valuestring, "resume") && report_merge_resume(r, step, t)) return;
    if (strcmp(k->valuestring, "start") && strcmp(k->valuestring, "end"))
        report_add_event(r, step, k->valuestring, t);
    cJSON **keep = !strcmp(k->valuestring, "start") ? &r->start : !strcmp(k->valuestring, "end") ? &r->end : NULL;
    if (!keep) return;
    cJSON_Delete(*keep);
    *keep = cJSON_Duplicate(o, 1);
}

/* The events file, when there is one (its bad lines are skipped: the page is still useful).
 * Returns the metrics offset of the last fresh start (a run from step 0 that reused the file:
 * the lines before it belong to an earlier run), else 0. */
static long report_read_events(report_run *r, const char *metrics) {
    char path[REPORT_PATH_MAX];
    size_t len;
    long from = 0;
    if (!report_events_path(metrics, path, sizeof path)) return 0;
    char *text = pt_read_file(path, &len);
    if (!text) return 0;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        cJSON *o = report_parse_line(line);
        const cJSON *k = o ? cJSON_GetObjectItemCaseSensitive(o, "event") : NULL;
        const cJSON *off = o ? cJSON_GetObjectItemCaseSensitive(o, "metrics_offset") : NULL;
        if (cJSON_IsString(k) && !strcmp(k->valuestring, "start") && report_line_step(o) == 0 &&
            cJSON_IsNumber(off) && off->valuedouble >= 0) {
            from = (long)off->valuedouble;   /* a fresh run: forget the earlier run's events */
            r->n_ev = 0;
            r->n_eval = 0;
        }
        if (o) report_take_event(r, o);
        cJSON_Delete(o);
    }
    free(text);
    return from;
}

/* The timeline SVG named by the end event, without its XML prolog: as given, else beside the
 * metrics (the trainer's default place, when the report runs from another folder). An SVG with
 * a script or event handlers is not inlined: the page runs no script. */
static void report_read_svg(report_run *r, const char *metrics) {
    const cJSON *p = r->end ? cJSON_GetObjectItemCaseSensitive(r->end, "svg") : NULL;
    char alt[REPORT_PATH_MAX];
    size_t len;
    if (!cJSON_IsString(p)) return;
    const char *base = strrchr(p->valuestring, '/'), *dir = strrchr(metrics, '/');
    snprintf(alt, sizeof alt, "%.*s%s", dir ? (int)(dir - metrics + 1) : 0, metrics,
             base ? base + 1 : p->valuestring);
    char *text = p->valuestring[0] == '/' ? pt_read_file(p->valuestring, &len) : NULL;
    if (!text) text = pt_read_file(alt, &len);
    if (!text) text = pt_read_file(p->valuestring, &len);
    if (!text) return;
    char *svg = strstr(text, "<svg");
    if (svg && !strstr(svg, "<script") && !strstr(svg, "javascript:") && !strstr(svg, " on") &&
        !strstr(svg, "foreignObject"))
        r->svg = pt_strdup(svg);
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
    char metrics[REPORT_PATH_MAX];
    if (!report_metrics_path(path, metrics, sizeof metrics)) return pt_seterr("%s: path too long", path);
    snprintf(r->name, sizeof r->name, "%s", path);
    long from = report_read_events(r, metrics);
    if (report_read_metrics(r, metrics, from) < 0) {
        report_run_free(r);
        return -1;
    }
    report_dedup(r);
    report_place_evals(r);
    report_read_svg(r, metrics);
    return 0;
}

void report_run_free(report_run *r) {
    free(r->step);
    for (int k = 0; k < REP_N_SERIES; k++) free(r->val[k]);
    free(r->ev);
    free(r->eval_at);
    free(r->eval_val);
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
