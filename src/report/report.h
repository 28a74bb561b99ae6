/* The run report: one self-contained HTML page (inline SVG and CSS, no script, XML-clean) that
 * shows one or several training runs: the curves of every per-step metric on a shared step axis
 * with the run's events marked, the layout, model and machine, measured against simulated step
 * time, and the timeline of the last step. Also the run's event log, which the trainer writes
 * beside the metrics and the report reads. Not here: writing the metrics (the trainer), the
 * timeline picture itself (trace/svg.c; the report inlines the file).
 *
 * Files of one run (PATH = the metrics file, one JSON line per step; a save folder DIR means
 * DIR/metrics.jsonl):
 *   PATH                        {"step":..,"loss":..,"lr":..,"grad_norm":..,"tokens_per_s":..,
 *                                "step_ms":..[,"bubble_fraction":..][,"eval_loss":..,"eval_step":..]}
 *                               (eval_loss is drawn at eval_step, the step whose weights it
 *                               measured, not at the step whose line it came in; without
 *                               eval_step, at the line's step)
 *   PATH less .jsonl + .events.jsonl   one JSON line per event: {"event":KIND,"step":N,...}
 *   PATH less .jsonl + .html           the report the trainer writes
 * Event kinds: "start" (layout, model, machine; metrics_offset: the metrics file's size when the
 * run began), "resume", "save", "adapt", "side_task", "error", "end" (measured vs simulated step,
 * the timeline SVG's path). */
#ifndef PT_REPORT_REPORT_H
#define PT_REPORT_REPORT_H
#include <cjson/cJSON.h>
#include <stddef.h>

/* The per-step series a report draws, in page order. */
typedef enum {
    REP_LOSS, REP_EVAL_LOSS, REP_LR, REP_GRAD_NORM, REP_TOKENS_S, REP_STEP_MS, REP_BUBBLE,
    REP_HARVESTED,              /* side_cpu_s / wait_idle_s of the step (side work's CPU received) */
    REP_N_SERIES
} report_series;

#define REPORT_PATH_MAX 4200   /* paths of the run's files (PATH_MAX and a suffix) */

typedef struct {
    long step, step_end;        /* the step (a range for consecutive non-finite losses) */
    char kind[16];              /* "start", "save", "resume", "adapt", "side_task", "error", "end", "nan" */
    char text[240];             /* what to show on hover */
} report_event;

typedef struct {
    char name[256];             /* the path given, for the legend */
    long *step;                 /* [n] increasing, unique (a resumed run's later line wins) */
    double *val[REP_N_SERIES];  /* [n] each; NAN where a line lacks the key, -INFINITY where its
                                 * value is not a finite number (drawn as a gap) */
    int n, cap;
    long *eval_at;              /* [n_eval] while loading: held-out losses and the steps whose */
    double *eval_val;           /* weights they measured (placed at those steps, then freed) */
    int n_eval, cap_eval;
    report_event *ev;           /* [n_ev] in file order, then the ones found in the metrics */
    int n_ev, cap_ev;
    cJSON *start;               /* the last "start" event (layout, model, machine), or NULL */
    cJSON *end;                 /* the last "end" event, or NULL */
    char *svg;                  /* the last step's timeline (SVG text, prolog removed), or NULL */
    int n_dup;                  /* step lines that repeated an earlier step (resumes) */
    int n_bad;                  /* lines skipped: cut short by a crash */
    long n_skipped;             /* lines of an earlier run before the last fresh start */
} report_run;

/* Loads a run from a metrics file or a folder holding metrics.jsonl, with its events file and
 * timeline picture when they exist. Tolerates nan/inf numbers (drawn as gaps, marked as events),
 * repeated steps (the later line wins; a "resume" is marked where the steps go back), lines cut
 * short by a crash (an object never closed), and a file reused by a fresh run (the "start" event's
 * metrics_offset: the earlier run's lines are skipped). -1 naming the file (and line) when it
 * cannot be read, holds no step, or a line is neither a metrics line, an event nor cut short;
 * nothing is left to free then. Free with report_run_free. */
int report_run_load(report_run *r, const char *path);
void report_run_free(report_run *r);

/* Writes the page for runs[0..n) (overlaid, one colour each) to out, atomically. title may be
 * NULL. -1 naming the path on failure. */
int report_write_html(const report_run *runs, int n, const char *title, const char *out);

/* Writes one standalone SVG chart to out, atomically: series k (REP_LOSS or REP_EVAL_LOSS) of
 * runs[0..n) overlaid against wall time (each run's step_ms summed, in seconds). -1 naming the
 * path, or when no run has step times. */
int report_write_time_svg(const report_run *runs, int n, report_series k, const char *out);

/* The metrics file of a run: run itself, or run/metrics.jsonl when run is a folder. Returns buf,
 * or NULL if it does not fit in n bytes. */
char *report_metrics_path(const char *run, char *buf, size_t n);
/* The events file and the page that belong to a metrics file: PATH less ".jsonl" (if it ends so)
 * plus ".events.jsonl" / ".html", into buf (n bytes). Returns buf, or NULL if it does not fit. */
char *report_events_path(const char *metrics, char *buf, size_t n);
char *report_html_path(const char *metrics, char *buf, size_t n);

/* Appends one event line {"event":kind,"step":step, ...fields} to the events file (created with
 * its folder if needed). fields may be NULL; it is not freed. -1 naming the file on failure. */
int report_event_append(const char *events_path, const char *kind, long step, const cJSON *fields);

#endif
