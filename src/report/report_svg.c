/* The report's charts: one SVG line chart per series, every run overlaid on a shared step axis,
 * with ticks, units, a legend and the runs' events as vertical markers; and the loss against wall
 * time (each run's step times summed), where runs of different speeds compare. Long runs are drawn from
 * at most one minimum and one maximum per pixel column, so a 100k-step run stays light and its
 * spikes stay visible. Not here: the page around the charts (report_html.c). */
#include "report/report_int.h"
#include "util/pt.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CH_W REPORT_CHART_W
#define CH_H REPORT_CHART_H
#define CH_L 74         /* left margin: tick labels */
#define CH_R 16
#define CH_T 28         /* title and legend */
#define CH_B 34         /* x tick labels and axis name */
#define PLOT_W (CH_W - CH_L - CH_R)
#define PLOT_H (CH_H - CH_T - CH_B)

static const char *const PALETTE[] = { "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                                       "#17becf", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
                                       "#393b79", "#ad494a", "#637939", "#de9ed6", "#843c39",
                                       "#3182bd" };
#define N_PALETTE ((int)(sizeof PALETTE / sizeof *PALETTE))

const char *report_colour(int run) { return PALETTE[run % N_PALETTE]; }   /* 16: MAX_RUNS */

static const char *event_colour(const char *kind) {
    if (!strcmp(kind, "save")) return "#7f7f7f";
    if (!strcmp(kind, "resume")) return "#2ca02c";
    if (!strcmp(kind, "adapt") || !strcmp(kind, "adapt_revert")) return "#9467bd";
    if (!strcmp(kind, "side_task")) return "#17becf";
    if (!strcmp(kind, "error") || !strcmp(kind, "nan")) return "#d62728";
    if (!strcmp(kind, "failure")) return "#ff7f0e";     /* a rank or host lost (pipetrain launch) */
    if (!strcmp(kind, "recovered")) return "#8c564b";   /* the job going on after it */
    return "#bcbd22";
}

/* Length of the well-formed UTF-8 character at s that XML allows (1..4), or 0: a byte that is
 * not one (a sequence cut by a fixed-size buffer, Latin-1 text, U+FFFE/U+FFFF, surrogates). */
static int utf8_char(const unsigned char *s) {
    int n = s[0] < 0x80 ? 1 : (s[0] & 0xe0) == 0xc0 ? 2 : (s[0] & 0xf0) == 0xe0 ? 3 : (s[0] & 0xf8) == 0xf0 ? 4 : 0;
    if (n == 0) return 0;
    unsigned cp = n == 1 ? s[0] : s[0] & (0x7f >> n);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3f);
    }
    static const unsigned min_cp[5] = { 0, 0, 0x80, 0x800, 0x10000 };   /* no overlong forms */
    if (cp < min_cp[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) || cp == 0xfffe || cp == 0xffff)
        return 0;
    if (cp < 0x20 && cp != '\n' && cp != '\t') return 0;
    return n;
}

void report_xml_escape(FILE *f, const char *s) {
    const unsigned char *u = (const unsigned char *)s;
    while (*u) {
        int n = utf8_char(u);
        if (n == 0) {   /* U+FFFD for what XML cannot hold; control characters are dropped */
            if (*u >= 0x20) fputs("\xef\xbf\xbd", f);
            u++;
            continue;
        }
        switch (*u) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default: fwrite(u, 1, (size_t)n, f);
        }
        u += n;
    }
}

/* The short name of a run path: its last component, less "/metrics.jsonl" and a trailing '/'. */
static void short_name(const char *path, char *buf, size_t n) {
    size_t len = strlen(path);
    if (len > 14 && !strcmp(path + len - 14, "/metrics.jsonl")) len -= 14;
    while (len > 1 && path[len - 1] == '/') len--;
    size_t start = len;
    while (start > 0 && path[start - 1] != '/') start--;
    snprintf(buf, n, "%.*s", (int)(len - start), path + start);
}

const char *report_run_label(const report_run *runs, int n, int i, char *buf, size_t size) {
    char other[256];
    short_name(runs[i].name, buf, size);
    for (int j = 0; j < n; j++) {
        if (j == i) continue;
        short_name(runs[j].name, other, sizeof other);
        if (!strcmp(other, buf)) { snprintf(buf, size, "%s", runs[i].name); break; }   /* ambiguous */
    }
    return buf;
}

/* A "nice" tick spacing (1, 2 or 5 times a power of ten) giving about `want` ticks over span. */
static double nice_step(double span, int want) {
    double raw = span / want, p = pow(10, floor(log10(raw))), m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

typedef struct {
    double x0, x1, y0, y1;      /* data ranges */
    report_series k;
    const char *xname;          /* the x axis: "step", or "seconds" (time charts: no events) */
} chart;

static double px_x(const chart *c, double step) {
    return CH_L + (c->x1 > c->x0 ? (step - c->x0) / (c->x1 - c->x0) : 0.5) * PLOT_W;
}

static double px_y(const chart *c, double v) {
    return CH_T + PLOT_H - (c->y1 > c->y0 ? (v - c->y0) / (c->y1 - c->y0) : 0.5) * PLOT_H;
}

/* Tick label of value v for series k, with its unit, with the digits that tell ticks `step`
 * apart. */
static void tick_label(char *buf, size_t n, report_series k, double v, double step, double mag) {
    int sig = (int)ceil(log10(mag / step + 1e-300)) + 1;   /* significant digits needed */
    if (sig < 2) sig = 2;
    if (sig > 12) sig = 12;
    switch (k) {
    case REP_LR: snprintf(buf, n, "%.*e", sig - 1, v); break;
    case REP_BUBBLE:
    case REP_HARVESTED: {
        int dec = step * 100 >= 1 ? 0 : (int)ceil(-log10(step * 100));
        snprintf(buf, n, "%.*f%%", dec > 6 ? 6 : dec, v * 100);
        break;
    }
    case REP_STEP_MS: snprintf(buf, n, "%.*g ms", sig, v); break;
    case REP_TOKENS_S:
        if (fabs(v) >= 1e4 && step >= 1e3) snprintf(buf, n, "%.*gk", sig, v / 1e3);
        else snprintf(buf, n, "%.*g", sig, v);
        break;
    default: snprintf(buf, n, "%.*g", sig, v);
    }
}

#define MAX_TICKS 24   /* a bound on every tick loop, whatever the floats do */

/* The series' range over all runs (finite values only); 0 when it has none. */
static int series_range(const report_run *runs, int n, report_series k, double *lo, double *hi) {
    int any = 0;
    *lo = INFINITY; *hi = -INFINITY;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < runs[i].n; j++) {
            double v = runs[i].val[k][j];
            if (!isfinite(v)) continue;
            any = 1;
            if (v < *lo) *lo = v;
            if (v > *hi) *hi = v;
        }
    return any;
}

int report_series_present(const report_run *runs, int n, report_series k) {
    double lo, hi;
    return series_range(runs, n, k, &lo, &hi);
}

static void draw_axes(FILE *f, const chart *c) {
    double sx = nice_step(c->x1 - c->x0 > 0 ? c->x1 - c->x0 : 1, 8);
    double sy = nice_step(c->y1 - c->y0 > 0 ? c->y1 - c->y0 : 1, 4);
    double mag = fmax(fabs(c->y0), fabs(c->y1));
    char lab[48];
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" class=\"plot\"/>\n", CH_L, CH_T, PLOT_W, PLOT_H);
    double y0 = ceil(c->y0 / sy) * sy, x0 = ceil(c->x0 / sx) * sx;
    for (int i = 0; i < MAX_TICKS; i++) {
        double v = y0 + i * sy, y = px_y(c, v);
        if (v > c->y1 + sy * 1e-9) break;
        tick_label(lab, sizeof lab, c->k, fabs(v) < sy * 1e-9 ? 0 : v, sy, mag);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" class=\"grid\"/>"
                "<text x=\"%d\" y=\"%.1f\" class=\"yt\">%s</text>\n", CH_L, y, CH_L + PLOT_W, y, CH_L - 6, y + 4, lab);
    }
    for (int i = 0; i < MAX_TICKS; i++) {
        double v = x0 + i * sx, x = px_x(c, v);
        if (v > c->x1 + sx * 1e-9) break;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" class=\"grid\"/>"
                "<text x=\"%.1f\" y=\"%d\" class=\"xt\">%.*f</text>\n", x, CH_T, x, CH_T + PLOT_H, x,
                CH_T + PLOT_H + 14, sx >= 1 ? 0 : (int)ceil(-log10(sx) - 1e-9), fabs(v) < sx * 1e-9 ? 0 : v);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"xt\">%s</text>\n", CH_L + PLOT_W / 2, CH_H - 4, c->xname);
}

/* One polyline of v over steps: at most a min and a max per pixel column (in the order they
 * occur); NAN (no value at that step) is stepped over, -INFINITY (not a finite number) breaks
 * the line. A point alone between breaks is a dot (a zero-length segment with round caps). */
static void draw_line(FILE *f, const chart *c, const double *step, const double *v, int n,
                      const char *colour, const char *cls) {
    fprintf(f, "<path class=\"%s\" stroke=\"%s\" d=\"", cls, colour);
    int pen = 0, j = 0;
    while (j < n) {
        int col = (int)px_x(c, step[j]), lo = -1, hi = -1, k = j, gap = 0;
        for (; k < n && (int)px_x(c, step[k]) == col; k++) {
            if (isnan(v[k])) continue;
            if (!isfinite(v[k])) { gap = 1; break; }
            if (lo < 0 || v[k] < v[lo]) lo = k;
            if (hi < 0 || v[k] > v[hi]) hi = k;
        }
        int a = lo < hi ? lo : hi, b = lo < hi ? hi : lo;
        for (int t = 0; t < 2 && a >= 0; t++) {
            int q = t ? b : a;
            if (t && b == a) break;
            if (pen) fprintf(f, "L%.1f %.1f ", px_x(c, step[q]), px_y(c, v[q]));
            else fprintf(f, "M%.1f %.1f l0 0 ", px_x(c, step[q]), px_y(c, v[q]));
            pen = 1;
        }
        if (gap) { pen = 0; k++; }
        j = k > j ? k : j + 1;
    }
    fputs("\"/>\n", f);
}

/* One direction of the smoothing: exponential moving average with TensorBoard's debiasing,
 * over the finite values, from i0 by di. */
static void ema_pass(const double *v, int n, double w, int backward, double *out) {
    double acc = 0, norm = 0;
    for (int t = 0; t < n; t++) {
        int i = backward ? n - 1 - t : t;
        if (!isfinite(v[i])) { out[i] = NAN; continue; }
        acc = w * acc + (1 - w) * v[i];
        norm = w * norm + (1 - w);
        out[i] = acc / norm;
    }
}

/* Smoothed loss without lag: the mean of a forward and a backward moving average; the window is
 * about 1/25 of the run (at least 3 steps from 10 steps on, at most 500). Gaps stay gaps. */
static double *smooth(const double *v, int n) {
    double *s = pt_malloc(sizeof *s * (size_t)(n + 1)), *b = pt_malloc(sizeof *b * (size_t)(n + 1));
    double win = n / 25.0;
    if (win < 3) win = n >= 10 ? 3 : 1;
    if (win > 500) win = 500;
    ema_pass(v, n, 1 - 1 / win, 0, s);
    ema_pass(v, n, 1 - 1 / win, 1, b);
    for (int i = 0; i < n; i++) s[i] = isfinite(v[i]) ? 0.5 * (s[i] + b[i]) : v[i];
    free(b);
    return s;
}

/* The runs' events as dashed vertical lines with their text on hover: one line per run, kind and
 * pixel column (a 100k-step run with an event every step stays light). */
static void draw_events(FILE *f, const chart *c, const report_run *runs, int n) {
    for (int i = 0; i < n && !strcmp(c->xname, "step"); i++) {
        int last_col = -1;
        const char *last_kind = "";
        for (int e = 0; e < runs[i].n_ev; e++) {
            const report_event *ev = &runs[i].ev[e];
            if (ev->step < c->x0 || ev->step > c->x1) continue;
            double x = px_x(c, (double)ev->step);
            if ((int)x == last_col && !strcmp(ev->kind, last_kind)) continue;
            last_col = (int)x;
            last_kind = ev->kind;
            fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" class=\"ev\" stroke=\"%s\"><title>",
                    x, CH_T, x, CH_T + PLOT_H, event_colour(ev->kind));
            if (n > 1) { char lb[256]; report_xml_escape(f, report_run_label(runs, n, i, lb, sizeof lb)); fputs(": ", f); }
            report_xml_escape(f, ev->text);
            fputs("</title></line>\n", f);
        }
    }
}

/* In-chart legend for up to LEGEND_MAX runs (more: the page's table names each colour). */
#define LEGEND_MAX 4
static void draw_legend(FILE *f, const report_run *runs, int n, report_series k) {
    int x = CH_L + PLOT_W;
    for (int i = (n <= LEGEND_MAX ? n : 0) - 1; i >= 0; i--) {
        char lb[256];
        const char *name = report_run_label(runs, n, i, lb, sizeof lb);
        int w = 16 + 7 * (int)strlen(name);
        x -= w + 12;
        if (x < CH_L + 260) break;
        fprintf(f, "<rect x=\"%d\" y=\"8\" width=\"12\" height=\"4\" fill=\"%s\"/><text x=\"%d\" y=\"14\" class=\"lg\">",
                x, report_colour(i), x + 16);
        report_xml_escape(f, name);
        fputs("</text>\n", f);
    }
    if (k == REP_LOSS)
        fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"note\">faint: every step; solid: smoothed</text>\n",
                CH_L + 4, CH_T + PLOT_H - 6);
}

/* The x range of the runs (xs[i]: run i's x at each of its steps), with their events on a step
 * axis (a run's error comes after its last logged step). */
static void x_range(const chart *c, const report_run *runs, int n, double *const *xs, double *x0, double *x1) {
    *x0 = 1e300; *x1 = -1e300;
    for (int i = 0; i < n; i++) {
        *x0 = fmin(*x0, xs[i][0]);
        *x1 = fmax(*x1, xs[i][runs[i].n - 1]);
        for (int e = 0; e < runs[i].n_ev && !strcmp(c->xname, "step"); e++) *x1 = fmax(*x1, (double)runs[i].ev[e].step);
    }
}

/* One chart of series k over runs[0..n) against xs[i] (run i's x at each of its steps). */
static void chart_draw(FILE *f, const report_run *runs, int n, report_series k, const char *title,
                       double *const *xs, const char *xname) {
    chart c = { .k = k, .xname = xname };
    x_range(&c, runs, n, xs, &c.x0, &c.x1);
    if (c.x1 - c.x0 < 1e-9 || (!strcmp(xname, "step") && c.x1 - c.x0 < 1)) { c.x0 -= 0.5; c.x1 += 0.5; }
    series_range(runs, n, k, &c.y0, &c.y1);
    double pad = (c.y1 - c.y0) * 0.05, mid = 0.5 * (c.y0 + c.y1);
    if (pad < fabs(mid) * 1e-9 || pad == 0) pad = fabs(mid) * 0.05 + 1e-12;   /* flat: a band */
    c.y0 -= pad; c.y1 += pad;
    if (k == REP_BUBBLE || k == REP_HARVESTED || k == REP_LR || k == REP_TOKENS_S || k == REP_STEP_MS ||
        k == REP_GRAD_NORM)
        if (c.y0 < 0 && c.y0 + pad >= 0) c.y0 = 0;   /* non-negative quantities start at 0 */
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" viewBox=\"0 0 %d %d\" "
            "width=\"%d\" height=\"%d\" role=\"img\">\n<text x=\"%d\" y=\"16\" class=\"title\">", CH_W, CH_H,
            CH_W, CH_H, CH_L);
    report_xml_escape(f, title);
    fputs("</text>\n", f);
    draw_axes(f, &c);
    draw_events(f, &c, runs, n);
    for (int i = 0; i < n; i++) {
        if (k != REP_LOSS) { draw_line(f, &c, xs[i], runs[i].val[k], runs[i].n, report_colour(i), "ln"); continue; }
        double *sm = smooth(runs[i].val[k], runs[i].n);
        draw_line(f, &c, xs[i], runs[i].val[k], runs[i].n, report_colour(i), "raw");
        draw_line(f, &c, xs[i], sm, runs[i].n, report_colour(i), "ln");
        free(sm);
    }
    draw_legend(f, runs, n, k);
    fputs("</svg>\n", f);
}

/* Run r's x at each step: the step, or (time) its step times summed in seconds (a line without
 * step_ms adds nothing). */
static double *run_xs(const report_run *r, int time) {
    double *x = pt_malloc(sizeof *x * (size_t)(r->n + 1)), acc = 0;
    for (int j = 0; j < r->n; j++) {
        double ms = r->val[REP_STEP_MS][j];
        if (time && isfinite(ms) && ms > 0) acc += ms / 1e3;
        x[j] = time ? acc : (double)r->step[j];
    }
    return x;
}

static void chart_runs(FILE *f, const report_run *runs, int n, report_series k, const char *title, int time) {
    double **xs = pt_malloc(sizeof *xs * (size_t)n);
    for (int i = 0; i < n; i++) xs[i] = run_xs(&runs[i], time);
    chart_draw(f, runs, n, k, title, xs, time ? "seconds (the run's step times summed)" : "step");
    for (int i = 0; i < n; i++) free(xs[i]);
    free(xs);
}

void report_chart(FILE *f, const report_run *runs, int n, report_series k, const char *title) {
    chart_runs(f, runs, n, k, title, 0);
}

void report_chart_time(FILE *f, const report_run *runs, int n, report_series k, const char *title) {
    chart_runs(f, runs, n, k, title, 1);
}
