/* Held-out evaluation in pieces (eval.h): the set, a pass's unit slots, a worker's walk through
 * one sequence's layers. Not here: scheduling the pieces (task_eval.c). */
#include "harvest/eval.h"
#include "util/pt.h"
#include <stdlib.h>
#include <string.h>

struct eval_set {
    data_set *d;
    int B, T, N;
};

int eval_set_open(eval_set **out, const char *path, int vocab, int B, int T, int batches,
                  const char *flag) {
    data_set *d = NULL;
    *out = NULL;
    if (data_open(&d, path, vocab) < 0) return pt_adderr("%s: ", flag);
    return eval_set_from(out, d, B, T, batches, flag);
}

int eval_set_from(eval_set **out, data_set *d, int B, int T, int batches, const char *flag) {
    eval_set *s = pt_calloc(1, sizeof *s);
    s->d = d;
    *out = NULL;
    if (data_check_batch(s->d, B, T) < 0) {
        eval_set_close(s);
        return pt_adderr("%s: ", flag);
    }
    s->B = B;
    s->T = T;
    s->N = batches > 0 ? batches : (int)((data_ntokens(s->d) - 1) / ((size_t)B * T));
    if (s->N < 1) s->N = 1;
    *out = s;
    return 0;
}

void eval_set_close(eval_set *s) {
    if (!s) return;
    data_close(s->d);
    free(s);
}

int eval_set_batches(const eval_set *s) { return s->N; }
int eval_set_units(const eval_set *s) { return s->N * s->B; }

void eval_pass_init(eval_pass *p, const eval_set *s) {
    memset(p, 0, sizeof *p);
    p->set = s;
    p->n = eval_set_units(s);
    p->loss = pt_calloc((size_t)p->n, sizeof *p->loss);
    atomic_init(&p->next, p->n);        /* nothing to claim before a begin */
    atomic_init(&p->done, p->n);
}

void eval_pass_begin(eval_pass *p, const gpt_model *m) {
    p->m = m;
    atomic_store(&p->done, 0);
    atomic_store(&p->next, 0);
}

int eval_pass_complete(const eval_pass *p) { return atomic_load(&p->done) == p->n; }

double eval_pass_loss(const eval_pass *p) {
    double sum = 0;
    for (int u = 0; u < p->n; u++) sum += p->loss[u];
    return sum / p->n;
}

void eval_pass_free(eval_pass *p) {
    free(p->loss);
    p->loss = NULL;
}

struct eval_worker {
    const gpt_model *m;                 /* the model it was sized for */
    int T, unit, layer, n_layers;
    float *act, *scratch, *x, *y;       /* act: the largest layer's (1,T); x, y: (T,C) */
    int *tok, *tgt;                     /* (T) */
    size_t floats;
};

void eval_worker_create(eval_worker **out, const gpt_model *m, int T) {
    eval_worker *w = pt_calloc(1, sizeof *w);
    size_t act = 0, xc = (size_t)T * m->cfg.n_embd;
    w->m = m;
    w->n_layers = gpt_num_layers(m);
    for (int l = 0; l < w->n_layers; l++) {
        size_t a = gpt_layer_act_floats(m, l, 1, T);
        if (a > act) act = a;
    }
    size_t sc = gpt_scratch_floats(m, 1, T);
    w->act = pt_falloc(act);
    w->scratch = pt_falloc(sc);
    w->x = pt_falloc(xc);
    w->y = pt_falloc(xc);
    w->tok = pt_malloc(sizeof(int) * (size_t)T);
    w->tgt = pt_malloc(sizeof(int) * (size_t)T);
    w->floats = act + sc + 2 * xc + 2 * (size_t)T;
    w->T = T;
    w->unit = -1;
    *out = w;
}

void eval_worker_free(eval_worker *w) {
    if (!w) return;
    free(w->act); free(w->scratch); free(w->x); free(w->y); free(w->tok); free(w->tgt);
    free(w);
}

double eval_worker_bytes(const eval_worker *w) { return (double)w->floats * sizeof(float); }

int eval_worker_next_kind(const eval_worker *w) {
    return gpt_layer_kind_of(w->m, w->unit < 0 ? 0 : w->layer);
}

/* Claims the next unit of p and reads its tokens; 0 when none is left. */
static int eval_claim(eval_worker *w, eval_pass *p) {
    int u = atomic_fetch_add(&p->next, 1);
    if (u >= p->n) return 0;
    if (data_batch(p->set->d, u, 1, w->T, w->tok, w->tgt) < 0) return -1;
    w->unit = u;
    w->layer = 0;
    return 1;
}

int eval_worker_step(eval_worker *w, eval_pass *p) {
    if (w->unit < 0) {
        int c = eval_claim(w, p);
        if (c <= 0) return c;
    }
    const gpt_model *m = p->m;
    int l = w->layer, T = w->T, rc;
    unsigned io = gpt_layer_ops_of(m, l)->io;   /* the embedding reads tokens, the head targets */
    if (io & GPT_IO_TOKENS) rc = gpt_layer_forward(m, l, NULL, w->act, w->scratch, w->x, NULL, w->tok, 1, T);
    else if (!(io & GPT_IO_TARGETS)) {
        rc = gpt_layer_forward(m, l, NULL, w->act, w->scratch, w->y, w->x, NULL, 1, T);
        float *t = w->x; w->x = w->y; w->y = t;
    } else {
        float loss = 0;
        rc = gpt_layer_forward(m, l, NULL, w->act, w->scratch, &loss, w->x, w->tgt, 1, T);
        p->loss[w->unit] = loss;
        w->unit = -1;
        atomic_fetch_add(&p->done, 1);
        return rc < 0 ? -1 : 1;
    }
    w->layer++;
    return rc < 0 ? -1 : 1;
}

int eval_model(const gpt_model *m, const eval_set *s, double *loss) {
    eval_pass p;
    eval_worker *w;
    int rc;
    eval_pass_init(&p, s);
    eval_worker_create(&w, m, s->T);
    eval_pass_begin(&p, m);
    while ((rc = eval_worker_step(w, &p)) > 0) {}
    if (rc == 0) *loss = eval_pass_loss(&p);
    eval_worker_free(w);
    eval_pass_free(&p);
    return rc;
}
