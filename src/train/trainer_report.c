/* The trainer's side of the run report (report/report.h): where the run's files go, the events
 * it logs (start, resume, save, adapt, error, end), and the HTML page it writes beside the metrics at
 * each checkpoint and at the end. Root only; nothing when the run has neither --metrics nor
 * --save. Not here: the page itself (report/). */
#include "train/trainer_int.h"
#include "report/report.h"
#include "util/pt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A metrics file whose last line a crash cut short gets its newline back, so the lines this run
 * appends start on a line of their own. */
static void train_metrics_mend(const char *path) {
    FILE *f = fopen(path, "r+");
    if (!f) return;
    if (fseek(f, -1, SEEK_END) == 0 && fgetc(f) != '\n' && fseek(f, 0, SEEK_END) == 0) fputc('\n', f);
    fclose(f);
}

int train_report_paths(train_ctx *t) {
    const train_opts *o = &t->o;
    train_report *rp = &t->rep;
    if (!o->metrics && !o->save) return 0;
    int len = o->metrics ? snprintf(rp->metrics, sizeof rp->metrics, "%s", o->metrics)
                         : snprintf(rp->metrics, sizeof rp->metrics, "%s/metrics.jsonl", o->save);
    if (len < 0 || (size_t)len >= sizeof rp->metrics || !report_events_path(rp->metrics, rp->events, sizeof rp->events) ||
        !report_html_path(rp->metrics, rp->html, sizeof rp->html))
        return pt_seterr("%s %s: path too long (at most %d bytes)", o->metrics ? "--metrics" : "--save",
                         o->metrics ? o->metrics : o->save, (int)sizeof rp->metrics - 16);
    if (t->root) train_metrics_mend(rp->metrics);
    size_t n = strlen(rp->html) - 5;   /* less ".html" */
    snprintf(rp->svg, sizeof rp->svg, "%.*s.timeline.svg", (int)n, rp->html);
    rp->on = 1;
    return 0;
}

/* Appends an event (root, with a report); a failure to log is reported, not fatal. */
static void train_event(train_ctx *t, const char *kind, long step, cJSON *fields) {
    if (t->root && t->rep.on && report_event_append(t->rep.events, kind, step, fields) < 0)
        fprintf(stderr, "warning: %s\n", pt_err());
    cJSON_Delete(fields);
}

void train_report_event(train_ctx *t, const char *kind, long step, cJSON *fields) {
    train_event(t, kind, step, fields);
}

static cJSON *model_json(const gpt_model *m) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "n_layer", m->cfg.n_layer);
    cJSON_AddNumberToObject(o, "n_head", m->cfg.n_head);
    cJSON_AddNumberToObject(o, "n_embd", m->cfg.n_embd);
    cJSON_AddNumberToObject(o, "vocab_size", m->cfg.vocab_size);
    cJSON_AddNumberToObject(o, "n_positions", m->cfg.n_positions);
    cJSON_AddNumberToObject(o, "parameters", (double)m->num_params);
    return o;
}

static cJSON *machine_json(void) {
    pt_machine mc;
    pt_machine_info(&mc);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "cpu", mc.cpu);
    cJSON_AddStringToObject(o, "isa", mc.isa);
    cJSON_AddNumberToObject(o, "cores", mc.cores);
    return o;
}

static cJSON *data_json(const train_ctx *t) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "path", t->o.data);
    cJSON_AddNumberToObject(o, "batch", t->o.batch);
    cJSON_AddNumberToObject(o, "seq", t->o.seq);
    cJSON_AddNumberToObject(o, "tokens", (double)data_ntokens(t->d));
    cJSON_AddNumberToObject(o, "lr", t->o.oc.lr);
    return o;
}

void train_report_start(train_ctx *t) {
    if (!t->root || !t->rep.on) return;
    cJSON *o = cJSON_CreateObject();
    struct stat sb;   /* a fresh run in a used file: the report starts reading here */
    if (fflush(t->metrics) == 0 && stat(t->rep.metrics, &sb) == 0)
        cJSON_AddNumberToObject(o, "metrics_offset", (double)sb.st_size);
    cJSON *lay = train_engine_layout(t->e);
    if (lay) cJSON_AddItemToObject(o, "layout", lay);
    cJSON_AddItemToObject(o, "model", model_json(&t->m));
    cJSON_AddItemToObject(o, "data", data_json(t));
    cJSON_AddItemToObject(o, "machine", machine_json());
    train_event(t, "start", t->step0, o);
    if (t->step0 > 0) {
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "message", t->o.resume ? t->o.resume : "resumed");
        train_event(t, "resume", t->step0 + 1, r);
    }
}

void train_report_saved(train_ctx *t, long step, const char *dir) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "message", dir);
    train_event(t, "save", step, o);
    t->rep.saved_step = step;
}

/* Writes the page; a failure is a warning (the training itself went well). */
static void train_report_write(train_ctx *t, int say) {
    report_run r;
    if (t->rep.n_logged == 0 && t->step0 == 0) return;   /* no step yet: nothing to draw */
    if (report_run_load(&r, t->rep.metrics) < 0 || report_write_html(&r, 1, NULL, t->rep.html) < 0)
        fprintf(stderr, "warning: run report: %s\n", pt_err());
    else if (say) printf("report: %s\n", t->rep.html);
    report_run_free(&r);
}

int train_hook_report(train_ctx *t, long step, const train_step_stats *st, void *user) {
    t->rep.n_logged++;
    if (t->root && t->rep.on && t->rep.saved_step == step && step != t->o.steps) train_report_write(t, 0);
    return 0;
}

void train_report_end(train_ctx *t, long step) {
    if (!t->root || !t->rep.on) return;
    train_event(t, "end", step, train_engine_summary(t->e));
    train_report_write(t, 1);
}

void train_report_error(train_ctx *t, long step) {
    if (!t->root || !t->rep.on) return;
    char *msg = pt_strdup(pt_err());
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "message", msg);
    train_event(t, "error", step, o);
    train_report_write(t, 1);
    pt_seterr("%s", msg);   /* the run's error, not the report's */
    free(msg);
}

void train_report_adapt(train_ctx *t, long step, const char *message, cJSON *fields) {
    cJSON *o = fields ? fields : cJSON_CreateObject();
    cJSON_AddStringToObject(o, "message", message);
    train_event(t, "adapt", step, o);
}
