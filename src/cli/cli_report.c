/* pipetrain report: one HTML page for one or several training runs (report/report.h): curves on a
 * shared step axis, events, layout, machine, the last step's timeline. Flags only; the page is the
 * library's. */
#include "cli/cli.h"
#include "report/report.h"
#include "util/pt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_RUNS 16   /* runs overlaid on one page (colours repeat after 8) */

/* Splits argv into flags (for cli_parse; argv[0] kept) and the RUN paths. */
static int split_args(int argc, char **argv, char **flags, int *n_flags, const char **runs, int *n_runs) {
    *n_flags = 1;
    *n_runs = 0;
    flags[0] = argv[0];
    for (int i = 1; i < argc; i++) {
        int takes_value = !strcmp(argv[i], "--out") || !strcmp(argv[i], "--title") || !strcmp(argv[i], "--svg") ||
                          !strcmp(argv[i], "--svg-series");
        if (argv[i][0] == '-') {
            flags[(*n_flags)++] = argv[i];
            if (takes_value && i + 1 < argc) flags[(*n_flags)++] = argv[++i];
        } else if (*n_runs == MAX_RUNS) {
            return pt_seterr("at most %d runs on one page (got more)", MAX_RUNS);
        } else runs[(*n_runs)++] = argv[i];
    }
    return 0;
}

/* path and other name the same existing file. */
static int same_file(const char *path, const char *other) {
    struct stat a, b;
    return stat(path, &a) == 0 && stat(other, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/* --out must not overwrite a run's own metrics or events. */
static int check_out(const char *out, const char *const *paths, int n) {
    char m[REPORT_PATH_MAX], e[REPORT_PATH_MAX];
    for (int i = 0; i < n; i++) {
        if (!report_metrics_path(paths[i], m, sizeof m) || !report_events_path(m, e, sizeof e)) continue;
        if (same_file(out, m) || same_file(out, e))
            return pt_seterr("--out %s is a file of the run %s (its metrics or events): give another name",
                             out, paths[i]);
    }
    return 0;
}

/* --svg: the loss (or --svg-series eval_loss) against wall time, overlaid. 0, or 1 failed. */
static int write_svg(const report_run *runs, int n, const char *const *paths, const char *svg, const char *series) {
    report_series k = REP_LOSS;
    if (series && !strcmp(series, "eval_loss")) k = REP_EVAL_LOSS;
    else if (series && strcmp(series, "loss"))
        return pt_seterr("--svg-series '%s': give loss or eval_loss", series), 1;
    if (check_out(svg, paths, n) < 0 || report_write_time_svg(runs, n, k, svg) < 0) return 1;
    printf("report: %s\n", svg);
    return 0;
}

int cli_report(int argc, char **argv) {
    const char *out = NULL, *title = NULL, *svg = NULL, *svg_series = NULL;
    const cli_opt opts[] = {
        {"--out", OPT_STR, &out, "the HTML file to write (default: beside the first run's metrics, .html)"},
        {"--title", OPT_STR, &title, "the page's title (default: pipetrain training report)"},
        {"--svg", OPT_STR, &svg, "also write the runs' loss against wall time (step times summed), overlaid, as this SVG file"},
        {"--svg-series", OPT_STR, &svg_series, "--svg's series: loss (default) | eval_loss"},
    };
    char **flags = pt_malloc(sizeof *flags * (size_t)(argc + 1));
    const char *paths[MAX_RUNS];
    int n_flags, n_runs, rc = split_args(argc, argv, flags, &n_flags, paths, &n_runs);
    if (rc == 0) rc = cli_parse(n_flags, flags, "report", "RUN [RUN2 ...] [--out report.html]   "
                                "(RUN: a metrics file or a save folder holding metrics.jsonl)", opts, 4);
    free(flags);
    if (rc < 0 && pt_err()[0]) return cli_fail("report");
    if (rc) return rc < 0 ? 2 : 0;
    if (n_runs == 0) { pt_seterr("give one or more runs: a metrics file or a save folder"); return cli_fail("report"); }
    report_run runs[MAX_RUNS];
    char def[REPORT_PATH_MAX];
    int loaded = 0;
    for (; loaded < n_runs; loaded++)
        if (report_run_load(&runs[loaded], paths[loaded]) < 0) break;
    char metrics[REPORT_PATH_MAX];
    if (loaded == n_runs && !out && report_metrics_path(paths[0], metrics, sizeof metrics))
        out = report_html_path(metrics, def, sizeof def);
    if (loaded == n_runs && !out) pt_seterr("%s: path too long", paths[0]);
    rc = loaded < n_runs || !out || check_out(out, paths, n_runs) < 0 ||
         report_write_html(runs, n_runs, title, out) < 0;
    if (!rc) printf("report: %s\n", out);
    if (!rc && svg) rc = write_svg(runs, n_runs, paths, svg, svg_series);
    for (int i = 0; i < loaded; i++) report_run_free(&runs[i]);
    return rc ? cli_fail("report") : 0;
}
