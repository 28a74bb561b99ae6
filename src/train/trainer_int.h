/* Inside the trainer (src/train only): its state, shared by trainer.c (setup, loop, hooks),
 * trainer_model.c (the model a run starts from) and trainer_hooks.c (the built-in save and log
 * hooks). Not an API: code outside src/train uses trainer.h. */
#ifndef PT_TRAIN_TRAINER_INT_H
#define PT_TRAIN_TRAINER_INT_H
#include "adapt/adapt.h"
#include "io/data.h"
#include "model/gpt.h"
#include "optim/optim.h"
#include "run/source.h"
#include "train/trainer.h"
#include "harvest/harvest.h"
#include "harvest/task_eval.h"
#include <stdio.h>

typedef struct {
    train_hook_fn fn;
    void *user;
} train_hook;

/* The run report's files (root; on when the run has --metrics or --save). */
typedef struct {
    int on;
    char metrics[4096];     /* --metrics, or <save>/metrics.jsonl */
    char events[4112];      /* metrics less .jsonl + .events.jsonl */
    char html[4112];        /* metrics less .jsonl + .html */
    char svg[4128];         /* pipelined without --svg: the last step's timeline for the page */
    long saved_step;        /* the step of the last checkpoint (the page is rewritten after it) */
    long n_logged;          /* steps this run has logged */
} train_report;

/* Side work over the run (trainer_harvest.c): the harvester, the evaluation, totals. */
typedef struct {
    harvest *h;             /* NULL: no side work */
    harvest_eval *ev;       /* --eval-data, or NULL */
    double bubble_s, wait_idle_s, side_s, side_cpu_s, overrun_s, sync_s, step_s, eval_sync_s;   /* sums over logged steps */
    long steps, offered, used, n_steps, rested;
    double slow;        /* the harvester's last estimate of side work's cost to a step (NaN: none) */
} train_side;

struct train_ctx {
    train_opts o;           /* as given, log_every filled in */
    gpt_model m;            /* one process: trained in place; pipelined: the tables only (no
                             * layers held: each rank of the job holds its own) */
    adamw_state opt;        /* one process: AdamW's state; pipelined: unused */
    run_source src;         /* pipelined: where the job's ranks read their start (freed once the
                             * engine started) */
    char resume_dir[1100];  /* --resume resolved to a checkpoint folder (o.resume points here) */
    long step0;             /* optimizer steps already done (resume), else 0 */
    data_set *d;
    train_engine *e;
    int root;               /* prints and writes files */
    FILE *metrics;          /* root, with o.metrics */
    int *inp, *tgt;         /* (B, T) this step's batch */
    double t_start;         /* pt_now() when the first step began */
    train_report rep;
    char layout_note[320];  /* auto_layout: the layout chosen and why (printed with the header) */
    train_hook hooks[TRAIN_HOOK_SLOTS][TRAIN_MAX_HOOKS];
    int n_hooks[TRAIN_HOOK_SLOTS];
    train_side side;
    char extra[1024];       /* this step's metrics keys added by hooks (",\"key\":value..."), or "" */
    adapt_state *adapt;     /* --adapt's state (adapt/adapt.h, through trainer_adapt.c), or NULL */
    int wire_state;         /* --adapt-wire: the wire format in force (trainer_wire.c) */
    struct train_recover *recover;  /* snapshots and heartbeats (trainer_recover.c), or NULL */
    struct train_window *win;       /* --async-window W > 1 (trainer_window.c), or NULL */
    char win_note[160];     /* asynchronous: the window chosen and why (printed with the header) */
};

/* The loop's pieces a pass of several steps reuses (trainer_hooks.c): a diverged loss is an error;
 * every hook of every slot for one step. 0, or -1. */
int train_check_loss(float loss, long step);
int train_call_hooks(train_ctx *t, long step, const train_step_stats *st);

/* The asynchronous window (trainer_window.c). choose: after the model (step0), before the
 * engine: W from o.async_window (0: the default) and the boundaries a pass must not cross, into
 * o.ro.async_window; -1 on a window that is out of range, given to a synchronous schedule, or
 * does not divide a boundary. steps: W (1 without). pass: steps first..first + W - 1 as one
 * engine iteration, each reported on its own; 0, or -1 with *failed the step that failed (its
 * batch, its loss or its hooks; first when the engine's iteration did). free: its buffers. */
int train_window_choose(train_ctx *t);
int train_window_steps(const train_ctx *t);
int train_window_pass(train_ctx *t, long first, long *failed);
void train_window_free(train_ctx *t);
/* below: the largest window under `below` that divides every boundary (1 at least). shrink: the
 * defaulted window becomes W (before the engine is started again), its note saying why (`why`:
 * "--mem-limit 28 MiB (...)"). */
int train_window_below(const train_ctx *t, int below);
void train_window_shrink(train_ctx *t, int W, const char *why);

/* For hooks before LOG: adds "key":value to this step's metrics line (trainer_hooks.c). */
void train_metric(train_ctx *t, const char *key, double value);

/* Side work (trainer_harvest.c): the harvester and its tasks from the options, checked, before
 * the engine starts (its wait hook goes into o.ro); once the engine runs, its schedule; the
 * HARVEST hook (with t->side.h) and the EVALUATE hook (with t->side.ev) that train_init adds; at
 * the end, the summary (root prints); free. */
int train_side_setup(train_ctx *t);
void train_side_start(train_ctx *t);
int train_hook_side(train_ctx *t, long step, const train_step_stats *st, void *user);
int train_hook_eval(train_ctx *t, long step, const train_step_stats *st, void *user);
void train_side_end(train_ctx *t);
void train_side_free(train_ctx *t);

/* An event in the run's events file (root, with a report; trainer_report.c). Takes fields. */
void train_report_event(train_ctx *t, const char *kind, long step, cJSON *fields);

/* The model, AdamW state and step0 of t from t->o: --resume's checkpoint (checked against
 * config, batch, seq and shuffle), else config + init weights or the seeded init; pipelined:
 * the tables and t->src instead. -1 with the error set; what was allocated is left for
 * train_free. (trainer_model.c) */
int train_setup_model(train_ctx *t);

/* The built-in hooks (trainer_hooks.c): SAVE writes DIR/ckpt-<step> every save_every steps and
 * after the last, LOG the metrics line and the progress line. */
int train_hook_save(train_ctx *t, long step, const train_step_stats *st, void *user);
int train_hook_log(train_ctx *t, long step, const train_step_stats *st, void *user);

/* --adapt (trainer_adapt.c): init checks the engine and schedule and sets up t->adapt, the policy's
 * state (-1 naming what cannot adapt); train_hook_adapt (the ADAPT hook, user = t->adapt) measures
 * each step, decides, switches and logs. free: NULL is fine. */
int train_adapt_init(train_ctx *t);
int train_hook_adapt(train_ctx *t, long step, const train_step_stats *st, void *user);
void train_adapt_free(train_ctx *t);

/* --adapt-wire (trainer_wire.c): init checks --adapt and the pipeline (train_init then adds the
 * ADAPT hook train_hook_wire, user = &t->wire_state, after --adapt's), which turns bf16 on once the links as measured make the step
 * link-bound. train_wire_decide is the rule, for any policy: under the profile (per-stage costs,
 * no links) with every pipeline link of L carrying messages of `bytes` (*t_now) and of bytes / 2
 * (*t_bf16), the schedule s simulated; PT_WIRE_BF16 when the second is at least 10% shorter,
 * every link of replica 0 is measured and the profile has every stage's F and B, else wire_now (also when wire_now is
 * not fp32). Pure: no I/O. */
int train_wire_init(train_ctx *t);
int train_hook_wire(train_ctx *t, long step, const train_step_stats *st, void *user);
int train_wire_decide(const sched *s, const sim_costs *profile, const run_links *L, double bytes, int wire_now,
                      double *t_now, double *t_bf16);

/* The run report (trainer_report.c; root only, each a no-op without --metrics or --save): its
 * paths (before the engine and the metrics file); the start (and resume) event after the header;
 * a save event; a LOG hook that rewrites the page after a checkpoint's step is logged; the end
 * event and the page after the engine's report; an error event and the page when a step fails
 * (keeping the run's error). */
int train_report_paths(train_ctx *t);
void train_report_start(train_ctx *t);
void train_report_saved(train_ctx *t, long step, const char *dir);
int train_hook_report(train_ctx *t, long step, const train_step_stats *st, void *user);
void train_report_end(train_ctx *t, long step);
void train_report_error(train_ctx *t, long step);
/* An "adapt" event (root, with a report): message, plus fields (taken over; may be NULL). */
void train_report_adapt(train_ctx *t, long step, const char *message, cJSON *fields);

/* Recovery (trainer_recover.c): init checks --kill-at against the layout and, with a snapshot
 * folder, opens a snapshot per local rank into t->recover (-1 naming the flag); the SAVE hook
 * (added by train_init when t->recover is set) beats the heartbeats and takes the snapshots; at
 * the end the snapshots' costs (root prints); free waits for the writers (NULL state is fine). */
int train_recover_init(train_ctx *t);
int train_hook_snapshot(train_ctx *t, long step, const train_step_stats *st, void *user);
void train_recover_end(train_ctx *t);
void train_recover_free(train_ctx *t);

#endif
