/* Internal to src/report: the pieces the page (report_html.c) takes from the charts
 * (report_svg.c). Not public API: report/report.h is. */
#ifndef PT_REPORT_INT_H
#define PT_REPORT_INT_H
#include "report/report.h"
#include <stdio.h>

#define REPORT_CHART_W 960   /* a chart's size, px */
#define REPORT_CHART_H 210

/* Writes s with &, <, >, " and ' escaped (and control characters dropped): safe in XML text and
 * attribute values. */
void report_xml_escape(FILE *f, const char *s);
/* The colour of run i (a fixed palette, repeating after 8). */
const char *report_colour(int run);
/* A short label for run i that tells it from the others (its folder or file name; the whole path
 * when two share it), written into buf (size bytes). Returns buf. */
const char *report_run_label(const report_run *runs, int n, int i, char *buf, size_t size);
/* 1 when any run has a finite value of series k. */
int report_series_present(const report_run *runs, int n, report_series k);
/* One chart of series k over runs[0..n) (n >= 1, each with at least one step), as inline SVG. */
void report_chart(FILE *f, const report_run *runs, int n, report_series k, const char *title);
/* The same against wall time: each run's step_ms summed, in seconds (no event markers). */
void report_chart_time(FILE *f, const report_run *runs, int n, report_series k, const char *title);
/* "Memory per rank" (report_mem.c): a bar per rank of each run whose start event has
 * layout.memory_bytes, with what --balance-memory lent and keeps for others; nothing when none has. */
void report_memory(FILE *f, const report_run *runs, int n);

#endif
