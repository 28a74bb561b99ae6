/* The report page: a summary table (layout, model, machine, measured against simulated step),
 * one chart per series present, the events, and each run's last-step timeline, in one HTML file
 * that is also well-formed XML (inline SVG and CSS, no script, nothing fetched). Not here: the
 * charts (report_svg.c), reading runs (report_load.c). */
#include "report/report_int.h"
#include "io/io.h"
#include "util/pt.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_EVENT_ROWS 200   /* more events than this: the table shows the first ones and a count */

static const char *const SERIES_TITLE[REP_N_SERIES] = {
    "training loss (cross-entropy, nats per token)", "evaluation loss (nats per token)",
    "learning rate", "gradient norm (global L2, before clipping)", "throughput (tokens/s)",
    "step time (ms)", "pipeline bubble (idle fraction of the step, all ranks)",
    "bubble harvested (side_cpu_s / wait_idle_s: CPU side work received over the idle seconds of the waits offered to it)",
};

/* CSS: no '<' or '&', so the page stays XML-clean. */
static const char *const STYLE =
    "body{font-family:system-ui,sans-serif;margin:24px;max-width:1000px;color:#222}"
    "h1{font-size:22px}h2{font-size:17px;margin-top:28px}"
    "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 8px;"
    "text-align:left;vertical-align:top}th{background:#f4f4f4}"
    "svg.chart{max-width:100%;height:auto;display:block;margin:6px 0}"
    ".plot{fill:#fff;stroke:#bbb}.grid{stroke:#eee}.yt{font-size:11px;text-anchor:end;fill:#555}"
    ".xt{font-size:11px;text-anchor:middle;fill:#555}.title{font-size:13px;font-weight:600}"
    ".lg{font-size:12px}.note{font-size:11px;fill:#888}"
    ".ln{fill:none;stroke-width:1.4;stroke-linecap:round}"
    ".raw{fill:none;stroke-width:0.8;opacity:0.35;stroke-linecap:round}"
    ".ev{stroke-width:1;stroke-dasharray:3,3;opacity:0.8}"
    "table.sum{display:block;overflow-x:auto}.swatch{display:inline-block;width:12px;height:12px;margin-right:6px;vertical-align:middle}"
    ".tl{overflow-x:auto;border:1px solid #eee}.muted{color:#888}";

static void text(FILE *f, const char *s) { report_xml_escape(f, s); }

/* Whole numbers in full (a token count), others short. */
static void num_text(double v, char *buf, size_t n) {
    if (v == floor(v) && fabs(v) < 1e15) snprintf(buf, n, "%.0f", v);
    else snprintf(buf, n, "%.4g", v);
}

/* A member of the start / end event as text ("" when absent): strings as they are, numbers
 * printed short, arrays as "a,b,c". */
static void member_text(const cJSON *o, const char *key, char *buf, size_t n) {
    const cJSON *v = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
    buf[0] = 0;
    if (cJSON_IsString(v)) snprintf(buf, n, "%s", v->valuestring);
    else if (cJSON_IsNumber(v)) num_text(v->valuedouble, buf, n);
    else if (cJSON_IsArray(v)) {
        const cJSON *e;
        cJSON_ArrayForEach(e, v) {
            size_t len = strlen(buf);
            if (cJSON_IsNumber(e)) snprintf(buf + len, n - len, "%s%.15g", len ? "," : "", e->valuedouble);
        }
    } else if (cJSON_IsObject(v)) {
        const cJSON *e;
        cJSON_ArrayForEach(e, v) {
            size_t len = strlen(buf);
            if (cJSON_IsNumber(e)) {
                char num[32];
                num_text(e->valuedouble, num, sizeof num);
                snprintf(buf + len, n - len, "%s%s %s", len ? ", " : "", e->string, num);
            }
            else if (cJSON_IsString(e)) snprintf(buf + len, n - len, "%s%s %s", len ? ", " : "", e->string, e->valuestring);
        }
    }
}

/* The last finite value of series k, and the smallest. */
static void last_and_min(const report_run *r, report_series k, double *last, double *mn) {
    *last = NAN; *mn = NAN;
    for (int i = 0; i < r->n; i++) {
        double v = r->val[k][i];
        if (!isfinite(v)) continue;
        *last = v;
        if (!(v >= *mn)) *mn = v;
    }
}

typedef void (*row_fn)(const report_run *r, char *buf, size_t n);

static void row_steps(const report_run *r, char *b, size_t n) {
    snprintf(b, n, "%ld .. %ld (%d logged)", r->step[0], r->step[r->n - 1], r->n);
}
static void row_loss(const report_run *r, char *b, size_t n) {
    double last, mn;
    last_and_min(r, REP_LOSS, &last, &mn);
    snprintf(b, n, "%.4f (lowest %.4f)", last, mn);
}
static void row_layout(const report_run *r, char *b, size_t n) { member_text(r->start, "layout", b, n); }
static void row_model(const report_run *r, char *b, size_t n) { member_text(r->start, "model", b, n); }
static void row_machine(const report_run *r, char *b, size_t n) { member_text(r->start, "machine", b, n); }
static void row_data(const report_run *r, char *b, size_t n) { member_text(r->start, "data", b, n); }
static void row_sim(const report_run *r, char *b, size_t n) {
    const cJSON *m = r->end ? cJSON_GetObjectItemCaseSensitive(r->end, "measured_ms") : NULL;
    const cJSON *s = r->end ? cJSON_GetObjectItemCaseSensitive(r->end, "simulated_ms") : NULL;
    if (!cJSON_IsNumber(m)) { snprintf(b, n, "-"); return; }
    if (cJSON_IsNumber(s) && s->valuedouble > 0)
        snprintf(b, n, "%.2f ms measured, %.2f ms simulated (measured/simulated %.2f), median of steps",
                 m->valuedouble, s->valuedouble, m->valuedouble / s->valuedouble);
    else snprintf(b, n, "%.2f ms measured (median of steps)", m->valuedouble);
}
static void row_notes(const report_run *r, char *b, size_t n) {
    int nan = 0;
    for (int e = 0; e < r->n_ev; e++) nan += !strcmp(r->ev[e].kind, "nan");
    int len = snprintf(b, n, "%d repeated step lines (resumed), %d non-finite losses, %d lines cut short",
                       r->n_dup, nan, r->n_bad);
    if (r->n_skipped > 0 && len > 0 && (size_t)len < n)
        snprintf(b + len, n - (size_t)len, "; %ld lines of an earlier run in the same file not shown", r->n_skipped);
}

static void summary_table(FILE *f, const report_run *runs, int n) {
    static const struct { const char *name; row_fn fn; } rows[] = {
        { "steps", row_steps }, { "loss (last)", row_loss }, { "layout", row_layout },
        { "model", row_model }, { "data", row_data }, { "machine", row_machine },
        { "step time", row_sim }, { "notes", row_notes },
    };
    char buf[1024];
    fputs("<table class=\"sum\">\n<tr><th>run</th>", f);
    for (int i = 0; i < n; i++) {
        char lb[256];
        fprintf(f, "<th title=\"");
        text(f, runs[i].name);
        fprintf(f, "\"><span class=\"swatch\" style=\"background:%s\"></span>", report_colour(i));
        text(f, report_run_label(runs, n, i, lb, sizeof lb));
        fputs("</th>", f);
    }
    fputs("</tr>\n", f);
    for (size_t k = 0; k < sizeof rows / sizeof *rows; k++) {
        fprintf(f, "<tr><th>%s</th>", rows[k].name);
        for (int i = 0; i < n; i++) {
            rows[k].fn(&runs[i], buf, sizeof buf);
            fputs("<td>", f);
            text(f, buf[0] ? buf : "-");
            fputs("</td>", f);
        }
        fputs("</tr>\n", f);
    }
    fputs("</table>\n", f);
}

static void events_table(FILE *f, const report_run *runs, int n) {
    int total = 0, shown = 0;
    for (int i = 0; i < n; i++) total += runs[i].n_ev;
    fputs("<h2>Events</h2>\n", f);
    if (total == 0) { fputs("<p class=\"muted\">none</p>\n", f); return; }
    fputs("<table>\n<tr><th>run</th><th>step</th><th>event</th><th>what</th></tr>\n", f);
    for (int i = 0; i < n && shown < MAX_EVENT_ROWS; i++)
        for (int e = 0; e < runs[i].n_ev && shown < MAX_EVENT_ROWS; e++, shown++) {
            const report_event *ev = &runs[i].ev[e];
            char lb[256];
            fprintf(f, "<tr><td><span class=\"swatch\" style=\"background:%s\"></span>", report_colour(i));
            text(f, report_run_label(runs, n, i, lb, sizeof lb));
            fprintf(f, "</td><td>%ld</td><td>", ev->step);
            text(f, ev->kind);
            fputs("</td><td>", f);
            text(f, ev->text);
            fputs("</td></tr>\n", f);
        }
    fputs("</table>\n", f);
    if (shown < total) fprintf(f, "<p class=\"muted\">and %d more</p>\n", total - shown);
}

static void timelines(FILE *f, const report_run *runs, int n) {
    int any = 0;
    for (int i = 0; i < n; i++) any |= runs[i].svg != NULL;
    if (!any) return;
    fputs("<h2>The last step, as measured</h2>\n", f);
    for (int i = 0; i < n; i++) {
        if (!runs[i].svg) continue;
        char lb[256];
        if (n > 1) { fputs("<p>", f); text(f, report_run_label(runs, n, i, lb, sizeof lb)); fputs("</p>\n", f); }
        fprintf(f, "<div class=\"tl\">%s</div>\n", runs[i].svg);
    }
}

static void page(FILE *f, const report_run *runs, int n, const char *title) {
    fputs("<!DOCTYPE html>\n<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n"
          "<meta charset=\"utf-8\"/>\n<meta name=\"viewport\" content=\"width=device-width\"/>\n<title>", f);
    text(f, title);
    fprintf(f, "</title>\n<style>%s</style>\n</head>\n<body>\n<h1>", STYLE);
    text(f, title);
    fputs("</h1>\n", f);
    summary_table(f, runs, n);
    fputs("<h2>Curves</h2>\n<p class=\"muted\">Dashed lines mark events (hover for what): saves grey, "
          "resumes green, adaptations purple, side tasks cyan, errors and non-finite losses red, "
          "failures orange and recoveries brown (pipetrain launch).</p>\n", f);
    for (int k = 0; k < REP_N_SERIES; k++)
        if (report_series_present(runs, n, (report_series)k))
            report_chart(f, runs, n, (report_series)k, SERIES_TITLE[k]);
    if (report_series_present(runs, n, REP_STEP_MS)) {   /* runs of different speeds compare here */
        report_chart_time(f, runs, n, REP_LOSS, "loss against wall time");
        if (report_series_present(runs, n, REP_EVAL_LOSS))
            report_chart_time(f, runs, n, REP_EVAL_LOSS, "held-out loss against wall time");
    }
    report_memory(f, runs, n);
    events_table(f, runs, n);
    timelines(f, runs, n);
    fputs("<p class=\"muted\">Written by pipetrain report.</p>\n</body>\n</html>\n", f);
}

int report_write_html(const report_run *runs, int n, const char *title, const char *out) {
    io_atomic_file a;
    if (n < 1) return pt_seterr("report: no runs");
    if (pt_make_parents(out) < 0 || io_atomic_open(&a, out) < 0) return -1;
    page(a.f, runs, n, title ? title : "pipetrain training report");
    return io_atomic_commit(&a);
}

int report_write_time_svg(const report_run *runs, int n, report_series k, const char *out) {
    io_atomic_file a;
    if (n < 1) return pt_seterr("report: no runs");
    if (!report_series_present(runs, n, REP_STEP_MS))
        return pt_seterr("--svg %s: no run has step_ms (the step times a time axis is summed from)", out);
    if (pt_make_parents(out) < 0 || io_atomic_open(&a, out) < 0) return -1;
    /* the chart inside an SVG that carries the page's style (its lines are drawn by class), and
     * below it a legend of every run, four to a row (the chart's own legend stops at four runs) */
    int h = REPORT_CHART_H + 20 * ((n + 3) / 4) + 6;
    fprintf(a.f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" "
            "width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\">\n<style><![CDATA[%s]]></style>\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n", REPORT_CHART_W, h, REPORT_CHART_W, h, STYLE);
    report_chart_time(a.f, runs, n, k, k == REP_EVAL_LOSS ? "held-out loss against wall time" : "loss against wall time");
    for (int i = 0; i < n; i++) {
        char lb[256];
        int x = 74 + (i % 4) * 220, y = REPORT_CHART_H + 20 * (i / 4) + 8;
        fprintf(a.f, "<rect x=\"%d\" y=\"%d\" width=\"12\" height=\"4\" fill=\"%s\"/><text x=\"%d\" y=\"%d\" "
                "class=\"lg\">", x, y + 4, report_colour(i), x + 16, y + 9);
        text(a.f, report_run_label(runs, n, i, lb, sizeof lb));
        fputs("</text>\n", a.f);
    }
    fputs("</svg>\n", a.f);
    return io_atomic_commit(&a);
}
