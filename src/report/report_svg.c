/* The report's charts: one SVG line chart per series, every run overlaid on a shared step axis,
 * with ticks, units, a legend and the runs' events as vertical markers. Long runs are drawn from
 * at most one minimum and one maximum per pixel column, so a 100k-step run stays light and its
 * spikes stay visible. Not here: the page around the charts (report_html.c). */
#include "report/report_int.h"
#include "util/pt.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define CH_W 960        /* chart width, px */
#define CH_H 210
#define CH_L 74         /* left margin: tick labels */
#define CH_R 16
#define CH_T 28         /* title and legend */
#define CH_B 34         /* x tick labels and axis name */
#define PLOT_W (CH_W - CH_L - CH_R)
#define PLOT_H (CH_H - CH_T - CH_B)

static const char *const PALETTE[] = { "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e",
                                       "#17becf", "#8c564b", "#e377c2" };
#define N_PALETTE ((int)(sizeof PALETTE / sizeof *PALETTE))

const char *report_colour(int run) { return PALETTE[run % N_PALETTE]; }

static const char *event_colour(const char *kind) {
    if (!strcmp(kind, "save")) return "#7f7f7f";
    if (!strcmp(kind, "resume")) return "#2ca02c";
    if (!strcmp(kind, "adapt")) return "#9467bd";
    if (!strcmp(kind, "side_task")) return "#17becf";
    if (!strcmp(kind, "error") || !strcmp(kind, "nan")) return "#d62728";
    return "#bcbd22";
}

void report_xml_escape(FILE *f, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default:
            if ((unsigned char)*s >= 0x20 || *s == '\n' || *s == '\t') fputc(*s, f);
        }
    }
}

/* A "nice" tick spacing (1, 2 or 5 times a power of ten) giving about `want` ticks over span. */
static double nice_step(double span, int want) {
    double raw = span / want, p = pow(10, floor(log10(raw))), m = raw / p;
    return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

typedef struct {
    double x0, x1, y0, y1;      /* data ranges */
    report_series k;
} chart;

static double px_x(const chart *c, double step) {
    return CH_L + (c->x1 > c->x0 ? (step - c->x0) / (c->x1 - c->x0) : 0.5) * PLOT_W;
}

static double px_y(const chart *c, double v) {
    return CH_T + PLOT_H - (c->y1 > c->y0 ? (v - c->y0) / (c->y1 - c->y0) : 0.5) * PLOT_H;
}

/* Tick label of value v for series k, with its unit. */
static void tick_label(char *buf, size_t n, report_series k, double v, double step) {
    switch (k) {
    case REP_LR: snprintf(buf, n, "%.1e", v); break;
    case REP_BUBBLE: snprintf(buf, n, "%.*f%%", step * 100 < 1 ? 1 : 0, v * 100); break;
    case REP_STEP_MS: snprintf(buf, n, "%g ms", v); break;
    case REP_TOKENS_S: if (fabs(v) >= 1e4) snprintf(buf, n, "%gk", v / 1e3); else snprintf(buf, n, "%g", v); break;
    default: snprintf(buf, n, "%g", v);
    }
}

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
    char lab[32];
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" class=\"plot\"/>\n", CH_L, CH_T, PLOT_W, PLOT_H);
    for (double v = ceil(c->y0 / sy) * sy; v <= c->y1 + sy * 1e-9; v += sy) {
        double y = px_y(c, v);
        tick_label(lab, sizeof lab, c->k, fabs(v) < sy * 1e-9 ? 0 : v, sy);
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" class=\"grid\"/>"
                "<text x=\"%d\" y=\"%.1f\" class=\"yt\">%s</text>\n", CH_L, y, CH_L + PLOT_W, y, CH_L - 6, y + 4, lab);
    }
    for (double v = ceil(c->x0 / sx) * sx; v <= c->x1 + sx * 1e-9; v += sx) {
        double x = px_x(c, v);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" class=\"grid\"/>"
                "<text x=\"%.1f\" y=\"%d\" class=\"xt\">%.0f</text>\n", x, CH_T, x, CH_T + PLOT_H, x,
                CH_T + PLOT_H + 14, v);
    }
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"xt\">step</text>\n", CH_L + PLOT_W / 2, CH_H - 4);
}

/* One polyline of v over steps: at most a min and a max per pixel column (in the order they
 * occur), a gap at each non-finite value. */
static void draw_line(FILE *f, const chart *c, const long *step, const double *v, int n,
                      const char *colour, const char *cls) {
    fprintf(f, "<path class=\"%s\" stroke=\"%s\" d=\"", cls, colour);
    int pen = 0, j = 0;
    while (j < n) {
        int col = (int)px_x(c, (double)step[j]), lo = -1, hi = -1, k = j;
        for (; k < n && (int)px_x(c, (double)step[k]) == col; k++) {
            if (!isfinite(v[k])) break;
            if (lo < 0 || v[k] < v[lo]) lo = k;
            if (hi < 0 || v[k] > v[hi]) hi = k;
        }
        int a = lo < hi ? lo : hi, b = lo < hi ? hi : lo;
        for (int t = 0; t < 2 && a >= 0; t++) {
            int q = t ? b : a;
            if (t && b == a) break;
            fprintf(f, "%c%.1f %.1f ", pen ? 'L' : 'M', px_x(c, (double)step[q]), px_y(c, v[q]));
            pen = 1;
        }
        if (k < n && !isfinite(v[k])) { pen = 0; k++; }   /* a gap */
        j = k > j ? k : j + 1;
    }
    fputs("\"/>\n", f);
}

/* Exponential moving average with TensorBoard's debiasing, skipping non-finite values; the weight
 * gives an effective window of about 1/25 of the run (at least 3 steps from 10 steps on, at most
 * 500). */
static double *smooth(const double *v, int n) {
    double *s = pt_malloc(sizeof *s * (size_t)(n + 1)), win = n / 25.0;
    if (win < 3) win = n >= 10 ? 3 : 1;
    if (win > 500) win = 500;
    double w = 1 - 1 / win, acc = 0, norm = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(v[i])) { s[i] = NAN; continue; }
        acc = w * acc + (1 - w) * v[i];
        norm = w * norm + (1 - w);
        s[i] = acc / norm;
    }
    return s;
}

static void draw_events(FILE *f, const chart *c, const report_run *runs, int n) {
    for (int i = 0; i < n; i++)
        for (int e = 0; e < runs[i].n_ev; e++) {
            const report_event *ev = &runs[i].ev[e];
            double x = px_x(c, (double)ev->step);
            if (ev->step < c->x0 || ev->step > c->x1) continue;
            fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" class=\"ev\" stroke=\"%s\"><title>",
                    x, CH_T, x, CH_T + PLOT_H, event_colour(ev->kind));
            if (n > 1) { report_xml_escape(f, runs[i].name); fputs(": ", f); }
            report_xml_escape(f, ev->text);
            fputs("</title></line>\n", f);
        }
}

static void draw_legend(FILE *f, const report_run *runs, int n, report_series k) {
    int x = CH_L + PLOT_W;
    for (int i = n - 1; i >= 0; i--) {
        const char *name = strrchr(runs[i].name, '/') && strrchr(runs[i].name, '/')[1] ? strrchr(runs[i].name, '/') + 1 : runs[i].name;
        int w = 16 + 7 * (int)strlen(name);
        x -= w + 12;
        if (x < CH_L + 200) break;
        fprintf(f, "<rect x=\"%d\" y=\"8\" width=\"12\" height=\"4\" fill=\"%s\"/><text x=\"%d\" y=\"14\" class=\"lg\">",
                x, report_colour(i), x + 16);
        report_xml_escape(f, name);
        fputs("</text>\n", f);
    }
    if (k == REP_LOSS)
        fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"note\">faint: every step; solid: smoothed</text>\n",
                CH_L + 4, CH_T + PLOT_H - 6);
}

void report_chart(FILE *f, const report_run *runs, int n, report_series k, const char *title) {
    chart c = { .k = k };
    c.x0 = 1e300; c.x1 = -1e300;
    for (int i = 0; i < n; i++) {
        if (runs[i].step[0] < c.x0) c.x0 = (double)runs[i].step[0];
        if (runs[i].step[runs[i].n - 1] > c.x1) c.x1 = (double)runs[i].step[runs[i].n - 1];
    }
    series_range(runs, n, k, &c.y0, &c.y1);
    double pad = (c.y1 - c.y0) * 0.05;
    if (pad == 0) pad = fabs(c.y1) * 0.05 + 1e-12;
    c.y0 -= pad; c.y1 += pad;
    if (k == REP_BUBBLE || k == REP_LR || k == REP_TOKENS_S || k == REP_STEP_MS || k == REP_GRAD_NORM)
        if (c.y0 < 0 && c.y0 + pad >= 0) c.y0 = 0;   /* non-negative quantities start at 0 */
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"chart\" viewBox=\"0 0 %d %d\" "
            "width=\"%d\" height=\"%d\" role=\"img\">\n<text x=\"%d\" y=\"16\" class=\"title\">", CH_W, CH_H,
            CH_W, CH_H, CH_L);
    report_xml_escape(f, title);
    fputs("</text>\n", f);
    draw_axes(f, &c);
    draw_events(f, &c, runs, n);
    for (int i = 0; i < n; i++) {
        if (k != REP_LOSS) { draw_line(f, &c, runs[i].step, runs[i].val[k], runs[i].n, report_colour(i), "ln"); continue; }
        double *s = smooth(runs[i].val[k], runs[i].n);
        draw_line(f, &c, runs[i].step, runs[i].val[k], runs[i].n, report_colour(i), "raw");
        draw_line(f, &c, runs[i].step, s, runs[i].n, report_colour(i), "ln");
        free(s);
    }
    draw_legend(f, runs, n, k);
    fputs("</svg>\n", f);
}
