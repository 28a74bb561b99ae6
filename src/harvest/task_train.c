/* Training a second, small model in the bubbles (train --side-train CONFIG --side-data FILE
 * [--side-steps N], or --side-task train:CONFIG,DATA[,...]): FreeRide's showcase side task. One
 * optimizer step of the side model is cut into pieces that fit a bubble: the forward of one
 * layer, the backward (B then W) of one layer, the AdamW update; the pieces do exactly what
 * `pipetrain train` does in one process (train_step: the same layers in the same order, the
 * same clipping and AdamW), so the side model's losses equal that run's on one OpenBLAS thread.
 * Each finished step appends a line {"step","loss","lr","grad_norm","s"} to its own metrics file,
 * written at step boundaries (never in a bubble). Not here: when pieces run (harvest.c).
 *
 * Legend: B sequences, T tokens, C channels, L blocks, N = B*T. */
#include "harvest/harvest_tasks.h"
#include "io/data.h"
#include "model/gpt_io.h"
#include "optim/optim.h"
#include "util/pt.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The kinds of piece, each with its own median length in the harvester. */
enum { TK_EMBED_F, TK_BLOCK_F, TK_HEAD_F, TK_HEAD_B, TK_BLOCK_B, TK_EMBED_B, TK_UPDATE };
enum { PH_FORWARD, PH_BACKWARD, PH_UPDATE };

typedef struct {
    gpt_model m;
    adamw_state opt;
    optim_config oc;
    data_set *d;
    int B, T, nl;                  /* nl = gpt_num_layers */
    long steps_max, t;             /* finish after steps_max optimizer steps (0: never); done so far */
    int phase, layer;
    float **acts, *act_buf, *scratch, *x, *y;   /* acts[l]: layer l's (B,T); x, y: (N,C) ping-pong */
    int *inp, *tgt;                /* (B,T) */
    float loss;
    char *metrics;                 /* its metrics file, or NULL */
    char *lines;                   /* finished steps' lines not yet written */
    size_t n_lines, cap_lines;
    double t_start;
    char cfg_path[512], data_path[512];
} side_train;

static void st_append_line(side_train *s, double norm, double lr) {
    char line[256];
    int n = snprintf(line, sizeof line, "{\"step\":%ld,\"loss\":%.6f,\"lr\":%.6e,\"grad_norm\":%.6f,\"s\":%.6f}\n",
                     s->t, s->loss, lr, norm, pt_now() - s->t_start);
    if (s->n_lines + (size_t)n + 1 > s->cap_lines) {
        s->cap_lines = 2 * (s->cap_lines + (size_t)n) + 1024;
        char *v = pt_malloc(s->cap_lines);
        if (s->n_lines) memcpy(v, s->lines, s->n_lines);
        free(s->lines);
        s->lines = v;
    }
    memcpy(s->lines + s->n_lines, line, (size_t)n);
    s->n_lines += (size_t)n;
}

static int st_forward(side_train *s) {
    int l = s->layer, rc;
    unsigned io = gpt_layer_ops_of(&s->m, l)->io;   /* the embedding reads tokens, the head targets */
    if (io & GPT_IO_TOKENS) {
        gpt_zero_grad(&s->m);
        if (data_batch(s->d, s->t, s->B, s->T, s->inp, s->tgt) < 0) return -1;
        rc = gpt_layer_forward(&s->m, l, NULL, s->acts[l], s->scratch, s->x, NULL, s->inp, s->B, s->T);
    } else if (!(io & GPT_IO_TARGETS)) {
        rc = gpt_layer_forward(&s->m, l, NULL, s->acts[l], s->scratch, s->y, s->x, NULL, s->B, s->T);
        float *t = s->x; s->x = s->y; s->y = t;
    } else {
        rc = gpt_layer_forward(&s->m, l, NULL, s->acts[l], s->scratch, &s->loss, s->x, s->tgt, s->B, s->T);
        s->phase = PH_BACKWARD;       /* x and y are free again: dx and dy now */
        return rc;
    }
    s->layer++;
    return rc;
}

/* Layer l's B then W, as gpt_forward_backward runs them (x: its dx, y: the dout it reads). */
static int st_backward(side_train *s) {
    int l = s->layer;
    unsigned io = gpt_layer_ops_of(&s->m, l)->io;
    gpt_layer_backward_input(&s->m, l, NULL, s->acts[l], s->scratch, io & GPT_IO_TOKENS ? NULL : s->x,
                             io & GPT_IO_TARGETS ? NULL : s->y, s->B, s->T);
    gpt_layer_backward_weight(&s->m, l, NULL, s->acts[l], s->scratch, s->B, s->T);
    float *t = s->x; s->x = s->y; s->y = t;
    if (--s->layer < 0) s->phase = PH_UPDATE;
    return 0;
}

/* Clipping by the global norm and AdamW step t, as train_step does. */
static void st_update(side_train *s) {
    long t = ++s->t;
    double norm = sqrt(optim_sumsq(s->m.grads, s->m.num_params));
    double scale = optim_clip_scale(norm, s->oc.grad_clip), lr = optim_lr_at(&s->oc, (int)t);
    for (int i = 0; i < gpt_param_count(&s->m); i++) {
        const gpt_param_info *pi = gpt_param_info_at(&s->m, i);
        adamw_update_span(&s->opt, s->m.params, s->m.grads, pi->offset, pi->count, lr, scale,
                          pi->decay != 0, (int)t, &s->oc);
    }
    s->opt.t = (int)t;
    st_append_line(s, norm, lr);
    s->phase = PH_FORWARD;
    s->layer = 0;
}

static int st_step(harvest_task *t, const harvest_slot *sl) {
    side_train *s = t->self;
    if (s->steps_max > 0 && s->t >= s->steps_max) return HARVEST_IDLE;
    int rc = 0;
    if (s->phase == PH_FORWARD) rc = st_forward(s);
    else if (s->phase == PH_BACKWARD) rc = st_backward(s);
    else st_update(s);
    return rc < 0 ? pt_adderr("side training of %s at step %ld: ", s->cfg_path, s->t + 1) : HARVEST_MORE;
}

static int st_kind(const harvest_task *t) {
    const side_train *s = t->self;
    if (s->phase == PH_UPDATE) return TK_UPDATE;
    gpt_layer_kind k = gpt_layer_kind_of(&s->m, s->layer);
    int embed = k == GPT_LAYER_EMBED, head = k == GPT_LAYER_HEAD;
    if (s->phase == PH_FORWARD) return embed ? TK_EMBED_F : head ? TK_HEAD_F : TK_BLOCK_F;
    return embed ? TK_EMBED_B : head ? TK_HEAD_B : TK_BLOCK_B;
}

/* Main thread: the finished steps' lines to the metrics file; done after steps_max steps. */
static int st_done(harvest_task *t) {
    side_train *s = t->self;
    if (s->n_lines && s->metrics) {
        FILE *f = fopen(s->metrics, "a");
        if (!f || fwrite(s->lines, 1, s->n_lines, f) != s->n_lines) {
            if (f) fclose(f);
            return pt_seterr("side training: %s: cannot write: %s", s->metrics, strerror(errno));
        }
        fclose(f);
    }
    s->n_lines = 0;
    if (s->steps_max > 0 && s->t >= s->steps_max) {
        snprintf(t->report, sizeof t->report, "%ld steps, last loss %.4f", s->t, s->loss);
        return 1;
    }
    return 0;
}

static void st_free(harvest_task *t) {
    if (!t) return;
    side_train *s = t->self;
    if (s) {
        gpt_free(&s->m);
        adamw_free(&s->opt);
        data_close(s->d);
        free(s->acts); free(s->act_buf); free(s->scratch); free(s->x); free(s->y);
        free(s->inp); free(s->tgt); free(s->metrics); free(s->lines);
    }
    free(s);
    free(t);
}

/* Buffers for (B,T): every layer's activations, scratch, the ping-pong pair; their bytes. */
static double st_buffers(side_train *s) {
    size_t total = 0, N = (size_t)s->B * s->T, xc = N * s->m.cfg.n_embd;
    s->nl = gpt_num_layers(&s->m);
    s->acts = pt_calloc((size_t)s->nl, sizeof *s->acts);
    for (int l = 0; l < s->nl; l++) total += gpt_layer_act_floats(&s->m, l, s->B, s->T);
    s->act_buf = pt_falloc(total);
    for (int l = 0, off = 0; l < s->nl; off += (int)gpt_layer_act_floats(&s->m, l, s->B, s->T), l++)
        s->acts[l] = s->act_buf + off;
    size_t sc = gpt_scratch_floats(&s->m, s->B, s->T);
    s->scratch = pt_falloc(sc);
    s->x = pt_falloc(xc);
    s->y = pt_falloc(xc);
    s->inp = pt_malloc(sizeof(int) * N);
    s->tgt = pt_malloc(sizeof(int) * N);
    return 4.0 * ((double)total + sc + 2.0 * xc + 4.0 * s->m.num_params);
}

static const harvest_task_vt train_vt = {
    .kind = "train", .step = st_step, .done = st_done, .next_kind = st_kind, .free = st_free,
};

/* "CONFIG,DATA[,steps=N][,batch=B][,seq=T][,lr=X][,seed=S][,rank=R][,metrics=FILE]" */
static int st_parse(harvest_train_opts *o, const char *args, const char *flag, char *cfg, char *data, char *metrics) {
    const char *comma = strchr(args, ',');
    if (!comma) return pt_seterr("%s '%s': expected CONFIG,DATA[,steps=N][,batch=B][,seq=T][,lr=X][,seed=S][,rank=R][,metrics=FILE]", flag, args);
    snprintf(cfg, 512, "%.*s", (int)(comma - args), args);
    const char *p = comma + 1, *end = strchr(p, ',');
    snprintf(data, 512, "%.*s", end ? (int)(end - p) : (int)strlen(p), p);
    o->config = cfg;
    o->data = data;
    for (p = end; p && *p;) {
        int n = 0;
        if (sscanf(p, ",steps=%ld%n", &o->steps, &n) == 1 && n > 0) p += n;
        else if (sscanf(p, ",batch=%d%n", &o->B, &n) == 1 && n > 0) p += n;
        else if (sscanf(p, ",seq=%d%n", &o->T, &n) == 1 && n > 0) p += n;
        else if (sscanf(p, ",lr=%lf%n", &o->lr, &n) == 1 && n > 0) p += n;
        else if (sscanf(p, ",seed=%ld%n", &o->seed, &n) == 1 && n > 0) p += n;
        else if (sscanf(p, ",rank=%d%n", &o->rank, &n) == 1 && n > 0) p += n;
        else if (sscanf(p, ",metrics=%511[^,]%n", metrics, &n) == 1 && n > 0) { o->metrics = metrics; p += n; }
        else return pt_seterr("%s '%s': unknown part '%s'", flag, args, p);
    }
    return 0;
}

int harvest_train_create(harvest_task **out, const char *args, const harvest_env *env) {
    char cfg[512], data[512], metrics[512];
    harvest_train_opts o = { .rank = -1 };
    *out = NULL;
    if (st_parse(&o, args, env->flag ? env->flag : "--side-task train", cfg, data, metrics) < 0) return -1;
    return harvest_train_new(out, &o, env);
}

int harvest_train_new(harvest_task **out, const harvest_train_opts *o, const harvest_env *env) {
    harvest_task *t = pt_calloc(1, sizeof *t);
    side_train *s = pt_calloc(1, sizeof *s);
    t->vt = &train_vt;
    t->self = s;
    *out = NULL;
    s->oc = optim_config_default();
    if (o->lr > 0) s->oc.lr = o->lr;
    s->B = o->B > 0 ? o->B : 4;
    s->T = o->T > 0 ? o->T : 64;
    s->steps_max = o->steps;
    snprintf(s->cfg_path, sizeof s->cfg_path, "%s", o->config);
    snprintf(s->data_path, sizeof s->data_path, "%s", o->data);
    if (o->metrics) s->metrics = pt_strdup(o->metrics);
    if (o->steps < 0) {
        pt_seterr("--side-steps %ld: give N >= 1 (or leave it out: as long as the training)", o->steps);
        goto free_task;
    }
    if (gpt_model_load(&s->m, o->config, NULL, (uint64_t)(o->seed ? o->seed : 1337), NULL) < 0) {
        pt_adderr("--side-train: ");
        goto free_task;
    }
    if (s->T > s->m.cfg.n_positions) s->T = s->m.cfg.n_positions;
    if (data_open(&s->d, o->data, s->m.cfg.vocab_size) < 0 || data_check_batch(s->d, s->B, s->T) < 0) {
        pt_adderr("--side-data: ");
        goto free_task;
    }
    if (o->rank >= env->R) {
        pt_seterr("--side-train: rank %d is not in the job (0..%d)", o->rank, env->R - 1);
        goto free_task;
    }
    s->oc.total_steps = (int)s->steps_max;
    adamw_init(&s->opt, s->m.num_params);
    t->mem_bytes = st_buffers(s);
    t->rank = o->rank;
    s->t_start = pt_now();
    snprintf(t->name, sizeof t->name, "train (%.40s, batch %d x %d)", s->cfg_path, s->B, s->T);
    *out = t;
    return 0;
free_task:
    st_free(t);
    return -1;
}
