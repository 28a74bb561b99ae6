/* The report's memory per rank: from the start event's layout.memory_bytes (params, grads,
 * optimizer, activations per world rank; with --balance-memory also activations_held, _lent,
 * _borrowed), one bar per rank: parameters + gradients + optimizer, then the activations; with
 * lending the activations split into the rank's own kept sets, the buffers it keeps for other
 * ranks' lent sets, and, above the bar, a dashed outline of what it lent (what it would hold more
 * without lending). Not here: the numbers (the trainer's start event), the page (report_html.c). */
#include "report/report_int.h"
#include <cjson/cJSON.h>
#include <math.h>

#define MEM_MAX_RANKS 64   /* a chart draws up to this many ranks */
#define BAR_H 150          /* px of the tallest bar (with its lent outline) */

/* Entry w of array `key` of memory_bytes, MB (0 when absent). */
static double mem_at(const cJSON *mb, const char *key, int w) {
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(mb, key), *v = cJSON_GetArrayItem(a, w);
    return cJSON_IsNumber(v) ? v->valuedouble / 1e6 : 0;
}

static const cJSON *mem_of(const report_run *r, int *ranks) {
    const cJSON *lo = r->start ? cJSON_GetObjectItemCaseSensitive(r->start, "layout") : NULL;
    const cJSON *mb = lo ? cJSON_GetObjectItemCaseSensitive(lo, "memory_bytes") : NULL;
    int n = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(mb, "activations"));
    *ranks = n < MEM_MAX_RANKS ? n : MEM_MAX_RANKS;
    return *ranks > 0 ? mb : NULL;
}

/* One rectangle of a bar: [y0, y0 + h) px from the bottom, in `fill` (dashed outline: none). */
static void mem_rect(FILE *f, double x, double w, double bottom, double y0, double h, const char *fill, int dashed) {
    if (!(h > 0)) return;
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" %s/>\n", x, bottom - y0 - h, w, h,
            dashed ? "fill=\"none\" stroke=\"#c33\" stroke-dasharray=\"4,3\"" : fill);
}

/* One rank's bar at x: fixed, own activations (all of them without lending), borrowed, lent. */
static void mem_bar(FILE *f, const cJSON *mb, int w, double x, double bw, double bottom, double scale, int lends) {
    double fixed = mem_at(mb, "params", w) + mem_at(mb, "grads", w) + mem_at(mb, "optimizer", w);
    double acts = mem_at(mb, "activations", w), borrowed = lends ? mem_at(mb, "activations_borrowed", w) : 0;
    double lent = lends ? mem_at(mb, "activations_lent", w) : 0, y = 0;
    mem_rect(f, x, bw, bottom, y, fixed * scale, "fill=\"#999\"", 0), y += fixed * scale;
    mem_rect(f, x, bw, bottom, y, (acts - borrowed) * scale, "fill=\"#4a7fc1\"", 0), y += (acts - borrowed) * scale;
    mem_rect(f, x, bw, bottom, y, borrowed * scale, "fill=\"#e0a030\"", 0), y += borrowed * scale;
    mem_rect(f, x, bw, bottom, y, lent * scale, NULL, 1);
    fprintf(f, "<text class=\"xt\" x=\"%.1f\" y=\"%.1f\">r%d</text>\n", x + bw / 2, bottom + 14, w);
    fprintf(f, "<text class=\"xt\" x=\"%.1f\" y=\"%.1f\">%.1f</text>\n", x + bw / 2, bottom - y - lent * scale - 4,
            fixed + acts);
}

/* One run's chart: the bars, a legend, the largest rank over the mean. */
static void mem_chart(FILE *f, const cJSON *mb, int R) {
    int lends = cJSON_GetObjectItemCaseSensitive(mb, "activations_lent") != NULL;
    double top = 0, sum = 0, mx = 0;
    for (int w = 0; w < R; w++) {
        double t = mem_at(mb, "params", w) + mem_at(mb, "grads", w) + mem_at(mb, "optimizer", w) +
                   mem_at(mb, "activations", w);
        double up = t + (lends ? mem_at(mb, "activations_lent", w) : 0);
        top = up > top ? up : top;
        mx = t > mx ? t : mx;
        sum += t;
    }
    double bottom = BAR_H + 24, scale = top > 0 ? BAR_H / top : 0, slot = (REPORT_CHART_W - 40.0) / R;
    double bw = slot * 0.6 < 80 ? slot * 0.6 : 80;
    fprintf(f, "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%.0f\" "
               "viewBox=\"0 0 %d %.0f\">\n", REPORT_CHART_W, bottom + 40, REPORT_CHART_W, bottom + 40);
    for (int w = 0; w < R; w++) mem_bar(f, mb, w, 20 + w * slot + (slot - bw) / 2, bw, bottom, scale, lends);
    fprintf(f, "<text class=\"lg\" x=\"20\" y=\"%.0f\"><tspan fill=\"#999\">&#9632;</tspan> parameters, gradients, "
               "optimizer  <tspan fill=\"#4a7fc1\">&#9632;</tspan> activations%s (MB; largest %.2fx the mean)</text>\n",
            bottom + 34, lends ? "  <tspan fill=\"#e0a030\">&#9632;</tspan> kept for others  "
                                 "<tspan fill=\"#c33\">- -</tspan> lent out" : "", sum > 0 ? mx / (sum / R) : 0);
    fputs("</svg>\n", f);
}

void report_memory(FILE *f, const report_run *runs, int n) {
    int any = 0, R;
    for (int i = 0; i < n; i++) any |= mem_of(&runs[i], &R) != NULL;
    if (!any) return;
    fputs("<h2>Memory per rank</h2>\n", f);
    for (int i = 0; i < n; i++) {
        const cJSON *mb = mem_of(&runs[i], &R);
        char lb[256];
        if (!mb) continue;
        if (n > 1) { fputs("<p>", f); report_xml_escape(f, report_run_label(runs, n, i, lb, sizeof lb)); fputs("</p>\n", f); }
        mem_chart(f, mb, R);
    }
}
