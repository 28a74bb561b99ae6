/* The trainer's built-in step-boundary hooks: SAVE (the checkpoint policy: DIR/ckpt-<step> every
 * save_every steps and after the last, the newest --keep of them kept) and LOG (one metrics JSON
 * line per step, a progress line every log_every steps); and calling a step's hooks and its loss
 * check (the loop's, trainer.c and trainer_window.c). Not here: how a checkpoint is written
 * (the engine, ckpt/), when hooks run (trainer.c). */
#include "train/trainer_int.h"
#include "ckpt/checkpoint.h"
#include "run/executor.h"
#include "util/killat.h"
#include "util/pt.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

/* --kill-at R@S:save: every rank of this process whose kill is due dies at its save. */
static void kill_point_save(train_ctx *t, long step) {
    run_job *j = train_engine_job(t->e);
    if (!j) {
        pt_killat_point(0, step, PT_KILL_SAVE);
        return;
    }
    for (int r = 0; r < run_job_local_count(j); r++)
        pt_killat_point(run_exec_world_rank(run_job_local_exec(j, r)), step, PT_KILL_SAVE);
}

int train_hook_save(train_ctx *t, long step, const train_step_stats *st, void *user) {
    const train_opts *o = &t->o;
    if (!((o->save_every > 0 && step % o->save_every == 0) || step == o->steps)) return 0;
    char dir[1100];
    ckpt_manifest man = {.cfg = t->m.cfg, .step = step, .batch = o->batch, .seq = o->seq,
                         .shuffle_seed = (uint64_t)o->shuffle, .init_seed = (uint64_t)o->seed};
    snprintf(man.data_path, sizeof man.data_path, "%s", o->data);
    ckpt_manifest_set_optim(&man, &o->oc);
    snprintf(dir, sizeof dir, "%s/ckpt-%ld", o->save, step);
    kill_point_save(t, step);   /* --kill-at R@S:save */
    if (train_engine_save(t->e, dir, &man) < 0) return -1;
    if (t->root) printf("saved %s\n", dir);
    train_report_saved(t, step, dir);
    if (t->root && o->keep > 0 && ckpt_prune(o->save, o->keep, dir) < 0)   /* not fatal: said */
        fprintf(stderr, "warning: --keep %d: %s\n", o->keep, pt_err());
    return 0;
}

/* {"step":..,"loss":..,"lr":..,"grad_norm":..,"tokens_per_s":..,"step_ms":..[,"bubble_fraction":
 * ..,"act_bytes_max_rank":..][,"schedule":"zb-h1","split":"2,2" (pipelined: the schedule that ran the
 * step and the blocks per chunk, so a run that adapts shows when it switched)][, the keys hooks added with train_metric: side work's "bubble_s",
 * "side_s", "side_cpu_s", "side_overrun_s", "side_steps", "side_sync_s"; "eval_loss", "eval_step"]} */
void train_metric(train_ctx *t, const char *key, double value) {
    size_t n = strlen(t->extra);
    snprintf(t->extra + n, sizeof t->extra - n, ",\"%s\":%.9g", key, value);
}

static void log_metrics(FILE *f, long step, const train_step_stats *st, double tok_s, const char *extra) {
    fprintf(f, "{\"step\":%ld,\"loss\":%.6f,\"lr\":%.6e,\"grad_norm\":%.6f,\"tokens_per_s\":%.1f,"
            "\"step_ms\":%.3f", step, st->opt.loss, st->opt.lr, st->opt.grad_norm, tok_s,
            st->step_time * 1e3);
    if (st->schedule[0]) fprintf(f, ",\"schedule\":\"%s\",\"split\":\"%s\"", st->schedule, st->split);
    if (st->bubble >= 0)
        fprintf(f, ",\"bubble_fraction\":%.4f,\"act_bytes_max_rank\":%zu", st->bubble, st->act_bytes);
    fprintf(f, "%s}\n", extra);
    fflush(f);
}

int train_hook_log(train_ctx *t, long step, const train_step_stats *st, void *user) {
    const train_opts *o = &t->o;
    double tok_s = (double)o->batch * o->seq / st->step_time, elapsed = pt_now() - t->t_start;
    long done = step - t->step0, left = o->steps - step;
    if (t->metrics) log_metrics(t->metrics, step, st, tok_s, t->extra);
    t->extra[0] = 0;
    if (!t->root) return 0;
    if (step % o->log_every && step != o->steps && step != t->step0 + 1) return 0;
    double eta = done > 0 ? elapsed / done * left : 0;
    printf("step %5ld/%d | loss %.4f | lr %.2e | norm %.3f | %.0f tok/s | %.0f ms | left %dm%02ds\n",
           step, o->steps, st->opt.loss, st->opt.lr, st->opt.grad_norm, tok_s, st->step_time * 1e3,
           (int)eta / 60, (int)eta % 60);
    fflush(stdout);
    return 0;
}

/* Every hook of every slot, in order; the first failure stops them. */
int train_call_hooks(train_ctx *t, long step, const train_step_stats *st) {
    for (int s = 0; s < TRAIN_HOOK_SLOTS; s++)
        for (int i = 0; i < t->n_hooks[s]; i++)
            if (t->hooks[s][i].fn(t, step, st, t->hooks[s][i].user) < 0) return -1;
    return 0;
}

/* A diverged step is an error, not a run that goes on computing NaN. */
int train_check_loss(float loss, long step) {
    if (isfinite(loss)) return 0;
    return pt_seterr("step %ld: the loss is %f: training diverged (lower --lr, keep --grad-clip, or "
                     "check the data and weights)", step, loss);
}
