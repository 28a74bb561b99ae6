/* Oases' two features on the sharded layers (docs/tensor-parallel.md), one thread per TP rank
 * over an in-test collective whose non-blocking all-reduce is summed by a helper thread per rank
 * (optionally slow) or deferred to the wait:
 * - overlap (gpt_set_tp_overlap): the loss and gradients of the path without it (within
 *   OVERLAP_TOL: not bitwise with OpenBLAS, printed), bitwise equal on every rank; a block's
 *   all-reduces issued as two halves in ping-pong order, each half's sum in flight while the
 *   other half computes (a slow helper shows it: starts made while a sum is in flight, and
 *   their times); B = 1 falls back; a failed start or wait leaves nothing in flight.
 * - communication-free recomputation (gpt_layer_keep_floats, gpt_layer_recompute): from the
 *   keep prefix alone, in another buffer, the F part bitwise as F wrote it, with no all-reduce,
 *   and then bitwise the gradients of the path without it, at tp 1, 2, 4, with and without
 *   overlap; the cost rows' keep_bytes. */
#include "model/gpt.h"
#include "test.h"
#include "util/pt.h"
#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#define MAX_TP 4
#define MAX_LAYERS 8
#include "tp_group.h"
#define MAX_N 256        /* B*T of any run here */
#define LOG_MAX 64       /* collective events of one layer's phase */
#define SLOW_US 50000    /* a slow helper's delay before each sum: long beside a half's compute at
                          * these sizes (microseconds), so its start-while-in-flight is certain */
#define OVERLAP_TOL(c) (5e-6 * ((c)->n_layer + 1))   /* overlap vs not: OpenBLAS rounds a row's
                          * product differently at another row count (the halves' matmuls have
                          * half the rows), a few ulps of the same sums per matmul, compounding
                          * once per block the gradient passes down through (measured: under
                          * 1.6e-6 here at L 1 to 3) */

/* Small configs (a vocabulary not divisible by tp; one head per rank at tp 4) and a wider one. */
static const gpt_config cfgs[] = {
    {.n_layer = 2, .n_head = 4, .n_embd = 32, .vocab_size = 67, .n_positions = 16},
    {.n_layer = 3, .n_head = 8, .n_embd = 24, .vocab_size = 40, .n_positions = 8},
    {.n_layer = 1, .n_head = 4, .n_embd = 256, .vocab_size = 50, .n_positions = 64},
};

/* ---- the in-test collective ------------------------------------------------------------------
 * A sum over the group in rank order: every rank's buffer read between two barriers. The
 * blocking all-reduce runs it on the caller's thread; iallreduce queues it for the rank's helper
 * thread (COLL_HELPER, summing in start order, SLOW_US late when slow) or for the wait
 * (COLL_DEFERRED, as a transport that progresses only when asked). */
enum { COLL_BLOCKING, COLL_HELPER, COLL_DEFERRED };

typedef struct {
    tp_group tg;                /* the ranks' sum in rank order */
    int mode, slow;
    double t0;                  /* the run's start (timestamps relative to it) */
} group;

typedef struct pending {
    float *buf;
    size_t n;
    int done, rc;
    double t_start, t_done;     /* seconds since the group's t0 */
    struct pending *next;
} pending;

typedef struct {
    group *g;
    int rank;
    pthread_t helper;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pending *head, *tail;       /* the helper's queue, in start order */
    int stop, in_flight;        /* started, not yet summed */
    int fail_start, fail_wait;  /* injected: the n-th start (wait) fails, counted from 1; 0 never */
    int starts, waits;
    size_t floats;
    /* events: 'a' blocking all-reduce, 's' start, 'o' start while another sum is in flight, 'w'
     * wait; and the times of the starts and sums of the slow run's first block F */
    char log[16 * LOG_MAX];
    int nlog;
    double t_ev[16 * LOG_MAX];
} member;

static double now(const group *g) { return pt_now() - g->t0; }

static void log_event(member *me, char c) {
    if (me->nlog + 1 < (int)sizeof me->log) {
        me->t_ev[me->nlog] = now(me->g);
        me->log[me->nlog++] = c;
        me->log[me->nlog] = 0;
    }
}

static int group_sum(group *g, int rank, float *buf, size_t n) { return tp_group_sum(&g->tg, rank, buf, n); }

static int coll_allreduce(void *ctx, float *buf, size_t n) {
    member *me = ctx;
    log_event(me, 'a');
    me->floats += n;
    return group_sum(me->g, me->rank, buf, n) < 0 ? pt_seterr("ranks all-reduce different lengths") : 0;
}

static void *helper_main(void *arg) {
    member *me = arg;
    pthread_mutex_lock(&me->mu);
    for (;;) {
        while (!me->head && !me->stop) pthread_cond_wait(&me->cv, &me->mu);
        if (!me->head) break;
        pending *p = me->head;
        pthread_mutex_unlock(&me->mu);
        if (me->g->slow) usleep(SLOW_US);
        int rc = group_sum(me->g, me->rank, p->buf, p->n);
        pthread_mutex_lock(&me->mu);
        me->head = p->next;
        if (!me->head) me->tail = NULL;
        p->rc = rc;
        p->t_done = now(me->g);
        p->done = 1;
        me->in_flight--;
        pthread_cond_broadcast(&me->cv);
    }
    pthread_mutex_unlock(&me->mu);
    return NULL;
}

static int coll_iallreduce(void *ctx, float *buf, size_t n, void **req) {
    member *me = ctx;
    pthread_mutex_lock(&me->mu);
    int k = ++me->starts;
    if (k == me->fail_start) {
        pthread_mutex_unlock(&me->mu);
        return pt_seterr("injected start failure");
    }
    pending *p = pt_calloc(1, sizeof *p);
    *p = (pending){ .buf = buf, .n = n, .t_start = now(me->g) };
    log_event(me, me->in_flight > 0 ? 'o' : 's');
    me->floats += n;
    me->in_flight++;
    if (me->g->mode == COLL_HELPER) {
        if (me->tail) me->tail->next = p;
        else me->head = p;
        me->tail = p;
        pthread_cond_broadcast(&me->cv);
    }
    pthread_mutex_unlock(&me->mu);
    *req = p;
    return 0;
}

static int coll_wait(void *ctx, void *req) {
    member *me = ctx;
    pending *p = req;
    pthread_mutex_lock(&me->mu);
    log_event(me, 'w');
    int k = ++me->waits;
    if (me->g->mode == COLL_DEFERRED) {
        pthread_mutex_unlock(&me->mu);
        p->rc = group_sum(me->g, me->rank, p->buf, p->n);
        pthread_mutex_lock(&me->mu);
        p->t_done = now(me->g);
        me->in_flight--;
    } else {
        while (!p->done) pthread_cond_wait(&me->cv, &me->mu);
    }
    pthread_mutex_unlock(&me->mu);
    int rc = p->rc;
    free(p);
    if (rc < 0) return pt_seterr("ranks all-reduce different lengths");
    return k == me->fail_wait ? pt_seterr("injected wait failure") : 0;
}

static void member_start(member *me, group *g, int rank) {
    *me = (member){ .g = g, .rank = rank };
    pthread_mutex_init(&me->mu, NULL);
    pthread_cond_init(&me->cv, NULL);
    if (g->mode == COLL_HELPER) pthread_create(&me->helper, NULL, helper_main, me);
}

static void member_stop(member *me) {
    if (me->g->mode == COLL_HELPER) {
        pthread_mutex_lock(&me->mu);
        me->stop = 1;
        pthread_cond_broadcast(&me->cv);
        pthread_mutex_unlock(&me->mu);
        pthread_join(me->helper, NULL);
    }
    pthread_mutex_destroy(&me->mu);
    pthread_cond_destroy(&me->cv);
}

/* ---- one rank's training step through the layer API ------------------------------------------ */
enum { PH_F, PH_B, PH_W, PH_R, N_PH };   /* the phases, and the recompute before B */

typedef struct {
    gpt_model *m;
    member *me;
    const int *tok, *tgt;
    int B, T;
    int overlap, recompute;
    int rc, rc_overlap;             /* the run's; gpt_set_tp_overlap's */
    float loss;
    float *grads;                   /* (n_held) owned */
    char ev[MAX_LAYERS][N_PH][LOG_MAX];   /* collective events per layer and phase */
    size_t floats[MAX_LAYERS][N_PH];
    int same_part;                  /* recompute: the F part rebuilt bitwise as F wrote it */
    char err[256];
} rank_job;

/* Runs one phase call, noting its collective events. */
#define NOTED(j, l, ph, call) do { \
    int e0 = (j)->me->nlog; size_t f0 = (j)->me->floats; \
    if ((j)->rc == 0 && (call) < 0) { (j)->rc = -1; snprintf((j)->err, sizeof (j)->err, "%s", pt_err()); } \
    snprintf((j)->ev[l][ph], LOG_MAX, "%s", (j)->me->log + e0); \
    (j)->floats[l][ph] += (j)->me->floats - f0; } while (0)

/* With recompute: after F, only the keep prefix of each layer's act is kept (in a buffer of its
 * own); before B, one spare act of another microbatch's contents gets the prefix back and the
 * recompute rebuilds the rest. */
static float *kept_part(rank_job *j, int l, float *act, float *saved_copy) {
    gpt_model *m = j->m;
    size_t keep = gpt_layer_keep_floats(m, l, j->B, j->T), saved = gpt_layer_act_saved_floats(m, l, j->B, j->T);
    float *k = pt_falloc(keep);
    memcpy(k, act, keep * sizeof *k);
    memcpy(saved_copy, act, saved * sizeof *act);
    return k;
}

/* F of every layer; then from the head down B and W of each layer (with recompute: the
 * recompute first, into a spare act holding garbage but the kept prefix). */
static void *rank_thread(void *arg) {
    rank_job *j = arg;
    gpt_model *m = j->m;
    int nl = gpt_num_layers(m), C = m->cfg.n_embd, B = j->B, T = j->T, N = B * T;
    float *act[MAX_LAYERS], *x[MAX_LAYERS], *keep[MAX_LAYERS], *saved[MAX_LAYERS], dloss = 0.5f;
    float *scratch = pt_falloc(gpt_scratch_floats(m, B, T));
    size_t amax = 0;
    for (int l = 0; l < nl; l++) {
        size_t n = gpt_layer_act_floats(m, l, B, T);
        amax = n > amax ? n : amax;
        act[l] = pt_falloc(n);
        saved[l] = pt_falloc(gpt_layer_act_saved_floats(m, l, B, T));
        x[l] = pt_falloc((size_t)N * C);
        keep[l] = NULL;
    }
    gpt_tp tp = { .rank = m->tp_rank, .size = m->tp_size, .allreduce = coll_allreduce, .ctx = j->me };
    if (j->me->g->mode != COLL_BLOCKING) { tp.iallreduce = coll_iallreduce; tp.wait = coll_wait; }
    gpt_set_tp(m, &tp);
    j->rc_overlap = gpt_set_tp_overlap(m, j->overlap);
    gpt_zero_grad(m);
    for (int l = 0; l < nl; l++)
        NOTED(j, l, PH_F, gpt_layer_forward(m, l, NULL, act[l], scratch, l == nl - 1 ? &j->loss : x[l],
                                            l ? x[l - 1] : NULL, l == 0 ? j->tok : l == nl - 1 ? j->tgt : NULL, B, T));
    float *spare = pt_falloc(amax);
    for (size_t i = 0; i < amax; i++) spare[i] = NAN;
    j->same_part = 1;
    for (int l = 0; j->recompute && l < nl; l++) {
        keep[l] = kept_part(j, l, act[l], saved[l]);
        free(act[l]);
        act[l] = NULL;
    }
    for (int l = nl - 1; l >= 0; l--) {
        float *a = act[l];
        if (j->recompute) {
            size_t nk = gpt_layer_keep_floats(m, l, B, T), ns = gpt_layer_act_saved_floats(m, l, B, T);
            memcpy(spare, keep[l], nk * sizeof *spare);
            NOTED(j, l, PH_R, gpt_layer_recompute(m, l, NULL, spare, scratch, B, T));
            j->same_part &= memcmp(spare, saved[l], ns * sizeof *spare) == 0;
            a = spare;
        }
        NOTED(j, l, PH_B, gpt_layer_backward_input(m, l, NULL, a, scratch, l ? x[l - 1] : NULL,
                                                   l == nl - 1 ? &dloss : x[l], B, T));
        NOTED(j, l, PH_W, gpt_layer_backward_weight(m, l, NULL, a, scratch, B, T));
    }
    j->grads = pt_falloc(m->n_held);
    memcpy(j->grads, m->grads, m->n_held * sizeof *m->grads);
    for (int l = 0; l < nl; l++) { free(act[l]); free(x[l]); free(keep[l]); free(saved[l]); }
    free(spare);
    free(scratch);
    return NULL;
}

/* ---- a run of the group ---------------------------------------------------------------------- */
typedef struct {
    int tp, B, T, mode, slow, overlap, recompute;
    int fail_start, fail_wait;      /* injected on every rank alike */
} run_opts;

typedef struct {
    gpt_model sh[MAX_TP];
    member me[MAX_TP];
    rank_job jobs[MAX_TP];
    group g;
} run_state;

/* The whole model's seeded and perturbed weights, cut into tp shards; every rank's step. The
 * caller reads s and frees it with run_free. */
static void run_group(run_state *s, const gpt_config *c, const run_opts *o) {
    static int tok[MAX_N], tgt[MAX_N];
    gpt_model whole;
    gpt_init(&whole, c);
    gpt_init_random(&whole, 3);
    pt_rng r;
    pt_rng_seed(&r, 4);
    double scale = 0.3 * sqrt(32.0 / c->n_embd);   /* larger than GPT-2's, so gradients stand
                                                    * above rounding; not saturating when wide */
    for (size_t i = 0; i < whole.num_params; i++) whole.params[i] += (float)(scale * pt_rng_normal(&r));
    tp_make_batch(tok, tgt, o->B * o->T, c->vocab_size, 6, 0);
    s->g = (group){ .mode = o->mode, .slow = o->slow, .t0 = pt_now() };
    tp_group_init(&s->g.tg, o->tp);
    for (int q = 0; q < o->tp; q++) {
        tp_shard_of(&s->sh[q], &whole, q, o->tp);
        member_start(&s->me[q], &s->g, q);
        s->me[q].fail_start = o->fail_start;
        s->me[q].fail_wait = o->fail_wait;
        s->jobs[q] = (rank_job){ .m = &s->sh[q], .me = &s->me[q], .tok = tok, .tgt = tgt, .B = o->B,
                                 .T = o->T, .overlap = o->overlap, .recompute = o->recompute };
    }
    tp_run_threads(o->tp, rank_thread, s->jobs, sizeof *s->jobs);
    gpt_free(&whole);
}

static void run_free(run_state *s) {
    for (int q = 0; q < s->g.tg.size; q++) {
        member_stop(&s->me[q]);
        free(s->jobs[q].grads);
        gpt_free(&s->sh[q]);
    }
    tp_group_destroy(&s->g.tg);
}

/* Every rank's run went through, and every sum started was waited for. */
static int run_ok(const run_state *s, char *why, size_t n) {
    for (int q = 0; q < s->g.tg.size; q++) {
        const rank_job *j = &s->jobs[q];
        if (j->rc || j->rc_overlap) { snprintf(why, n, "rank %d: %s", q, j->rc ? j->err : pt_err()); return 0; }
        if (s->me[q].in_flight) { snprintf(why, n, "rank %d: %d sums in flight", q, s->me[q].in_flight); return 0; }
    }
    return 1;
}

/* Loss and gradients of two runs bitwise equal (rank by rank); *err the largest relative
 * difference of a gradient to its run's largest magnitude. */
static int same_bits(const run_state *a, const run_state *b, double *err) {
    int same = 1;
    *err = 0;
    for (int q = 0; q < a->g.tg.size; q++) {
        size_t n = a->sh[q].n_held;
        same &= a->jobs[q].loss == b->jobs[q].loss && memcmp(a->jobs[q].grads, b->jobs[q].grads, n * sizeof(float)) == 0;
        double e = test_tensor_relerr(b->jobs[q].grads, a->jobs[q].grads, n);
        *err = e > *err ? e : *err;
        e = test_relerr(b->jobs[q].loss, a->jobs[q].loss, 1e-6);
        *err = e > *err ? e : *err;
    }
    return same;
}

/* Loss on every rank the same, and the replicated tensors' gradients. */
static int ranks_agree(const run_state *s) {
    int ok = 1;
    const gpt_model *m0 = &s->sh[0];
    for (int q = 1; q < s->g.tg.size; q++) {
        ok &= s->jobs[q].loss == s->jobs[0].loss;
        for (int k = 0; k < gpt_param_count(m0); k++) {
            const gpt_param_info *pi = &m0->info[k];
            if (pi->split == GPT_SPLIT_NONE)
                ok &= memcmp(s->jobs[q].grads + pi->offset, s->jobs[0].grads + pi->offset, pi->count * sizeof(float)) == 0;
        }
    }
    return ok;
}

/* A block's events in F and B: the ping-pong's with overlap ('o' read as 's' unless slow: a fast
 * helper may or may not have finished), two blocking all-reduces without; and its floats the
 * cost row's bytes. */
static int block_events_ok(const run_state *s, int overlap, int slow) {
    const char *want = overlap ? (slow ? "sowowoww" : "sswswsww") : "aa";
    int ok = 1;
    for (int q = 0; q < s->g.tg.size; q++) {
        const rank_job *j = &s->jobs[q];
        const gpt_model *m = j->m;
        gpt_layer_cost k;
        gpt_layer_ops_of(m, 1)->cost(&m->cfg, j->B, j->T, m->tp_size, &k);
        for (int l = 1; l <= m->cfg.n_layer; l++)
            for (int ph = PH_F; ph <= PH_B; ph++) {
                char got[LOG_MAX];
                snprintf(got, sizeof got, "%s", j->ev[l][ph]);
                for (char *p = got; !slow && *p; p++) if (*p == 'o') *p = 's';
                ok &= strcmp(got, want) == 0 && 4.0 * j->floats[l][ph] == k.tp_bytes[ph];
            }
    }
    return ok;
}

/* ---- overlap ------------------------------------------------------------------------------- */
/* The ping-pong against the plain path (blocking collective, overlap off) at tp 2 and 4, with
 * a helper thread and with deferred sums, on B = 2 and 3 sequences (halves of 1+1 and 1+2). */
static void test_overlap(const gpt_config *c, int tp, int B, int T) {
    char name[200], why[300] = "";
    run_state ref, ov;
    run_group(&ref, c, &(run_opts){ .tp = tp, .B = B, .T = T, .mode = COLL_BLOCKING });
#define NAMED(what) (snprintf(name, sizeof name, "tp overlap L%d C%d tp %d B %d T %d: %s", c->n_layer, \
                              c->n_embd, tp, B, T, what), name)
    CHECK(NAMED("the plain run"), run_ok(&ref, why, sizeof why), "%s", why);
    for (int mode = COLL_HELPER; mode <= COLL_DEFERRED; mode++) {
        const char *mn = mode == COLL_HELPER ? "helper thread" : "deferred sums";
        char what[120];
        double err = 0;
        run_group(&ov, c, &(run_opts){ .tp = tp, .B = B, .T = T, .mode = mode, .overlap = 1 });
        int ok = run_ok(&ov, why, sizeof why), bits = ok && same_bits(&ref, &ov, &err);
        printf("# L%d C%d tp %d B %d, %s: overlap vs plain %s (largest relative difference %.3g)\n",
               c->n_layer, c->n_embd, tp, B, mn, bits ? "bitwise equal" : "not bitwise", ok ? err : -1.0);
        snprintf(what, sizeof what, "%s: every rank's F, B, W ran, nothing left in flight", mn);
        CHECK(NAMED(what), ok, "%s", why);
        snprintf(what, sizeof what, "%s: loss and gradients equal the plain path's", mn);
        CHECK(NAMED(what), ok && err < OVERLAP_TOL(c), "relative difference %g", err);
        snprintf(what, sizeof what, "%s: loss and replicated gradients bitwise equal on every rank", mn);
        CHECK(NAMED(what), ok && ranks_agree(&ov), "differ");
        snprintf(what, sizeof what, "%s: each block's F and B all-reduce two halves in ping-pong order", mn);
        CHECK(NAMED(what), ok && block_events_ok(&ov, 1, 0), "rank 0 block 1 F '%s' B '%s'",
              ov.jobs[0].ev[1][PH_F], ov.jobs[0].ev[1][PH_B]);
        run_free(&ov);
    }
    run_free(&ref);
}

/* B = 1: overlap on runs the plain path (two blocking all-reduces a block), bitwise. */
static void test_overlap_one_row(const gpt_config *c) {
    char name[200], why[300] = "";
    int tp = 2, B = 1, T = 7;
    double err;
    run_state ref, ov;
    run_group(&ref, c, &(run_opts){ .tp = tp, .B = B, .T = T, .mode = COLL_BLOCKING });
    run_group(&ov, c, &(run_opts){ .tp = tp, .B = B, .T = T, .mode = COLL_HELPER, .overlap = 1 });
    int ok = run_ok(&ref, why, sizeof why) && run_ok(&ov, why, sizeof why);
    CHECK(NAMED("one sequence: overlap on runs the plain path, bitwise"),
          ok && same_bits(&ref, &ov, &err) && block_events_ok(&ov, 0, 0), "%s; block 1 F '%s'", why, ov.jobs[0].ev[1][PH_F]);
    run_free(&ov);
    run_free(&ref);
}

/* A slow collective: each sum waits SLOW_US on the helper before it starts. The other half's
 * stage runs while a sum is in flight: three of a block phase's four starts find one in flight
 * (the order "s o w o w o w w"), and each is made before the sum in flight ends. Behaviour, not
 * speed: no time is asserted but the order of events. */
static void test_overlap_slow(const gpt_config *c) {
    char name[200], why[300] = "";
    int tp = 2, B = 2, T = 7;
    run_state s;
    run_group(&s, c, &(run_opts){ .tp = tp, .B = B, .T = T, .mode = COLL_HELPER, .slow = 1, .overlap = 1 });
    int ok = run_ok(&s, why, sizeof why);
    CHECK(NAMED("slow collective: every rank's F, B, W ran"), ok, "%s", why);
    CHECK(NAMED("slow collective: the other half computes and starts its sum while one is in flight"),
          ok && block_events_ok(&s, 1, 1), "rank 0 block 1 F '%s' B '%s'", s.jobs[0].ev[1][PH_F], s.jobs[0].ev[1][PH_B]);
    /* the first block F's events on rank 0, with times: its log starts after the embedding's 'a' */
    const member *me = &s.me[0];
    const char *ev = strchr(me->log, 'a');
    int at = ev ? (int)(ev - me->log) + 1 : 0;
    printf("# slow collective (each sum %.0f ms late), rank 0, block 1 F:", SLOW_US / 1e3);
    for (int i = at; i < at + 8 && i < me->nlog; i++) printf(" %c@%.1fms", me->log[i], 1e3 * (me->t_ev[i] - me->t_ev[at]));
    printf("\n");
    run_free(&s);
}

/* A failed start, and a failed wait, in a block's F and in its B: -1 naming the layer, and
 * every sum started waited for (the helper's queue empty) before the layer returns. */
static void test_overlap_errors(const gpt_config *c) {
    char name[200];
    int tp = 2, B = 2, T = 7;
    /* the embedding's and the head's blocking all-reduces are no starts: a block's F makes starts
     * 1-4, B makes the last block's first */
    const struct { int start, wait; const char *what, *in; } cases[] = {
        {2, 0, "a failed start in F (one sum in flight)", "layer 1 forward"},
        {0, 1, "a failed wait in F (one sum in flight)", "layer 1 forward"},
        {4 * c->n_layer + 3, 0, "a failed start in B", "layer 2 backward"},
        {0, 4 * c->n_layer + 3, "a failed wait in B", "layer 2 backward"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        run_state s;
        run_group(&s, c, &(run_opts){ .tp = tp, .B = B, .T = T, .mode = COLL_HELPER, .overlap = 1,
                                      .fail_start = cases[i].start, .fail_wait = cases[i].wait });
        int ok = 1;
        for (int q = 0; q < tp; q++)
            ok &= s.jobs[q].rc < 0 && strstr(s.jobs[q].err, "injected") && strstr(s.jobs[q].err, cases[i].in) &&
                  s.me[q].in_flight == 0;
        CHECK(NAMED(cases[i].what), ok, "rc %d in flight %d: %s", s.jobs[0].rc, s.me[0].in_flight, s.jobs[0].err);
        run_free(&s);
    }
    /* overlap asked of a collective without iallreduce */
    gpt_model m;
    gpt_init_layers_tp(&m, c, 0, c->n_layer + 2, 0, 2);
    member me = {0};
    gpt_set_tp(&m, &(gpt_tp){ .rank = 0, .size = 2, .allreduce = coll_allreduce, .ctx = &me });
    int rc = gpt_set_tp_overlap(&m, 1);
    CHECK("tp overlap: refused for a collective without iallreduce", rc < 0 && strstr(pt_err(), "iallreduce") &&
          !m.tp_overlap, "rc %d: %s", rc, pt_err());
    gpt_free(&m);
    gpt_init_layers_tp(&m, c, 0, c->n_layer + 2, 0, 1);
    CHECK("tp overlap: accepted at tp 1 (nothing to overlap)", gpt_set_tp_overlap(&m, 1) == 0, "%s", pt_err());
    gpt_free(&m);
}

/* ---- communication-free recomputation ------------------------------------------------------ */
/* At tp 1, 2, 4, with and without overlap: each layer's act dropped after F but its keep
 * prefix, rebuilt in another buffer before B: no all-reduce, the F part bitwise, the gradients
 * bitwise the plain path's. */
static void test_recompute(const gpt_config *c, int tp, int overlap) {
    char name[200], why[300] = "";
    int B = 3, T = 7;
    double err;
    run_state ref, rc;
    int mode = overlap ? COLL_HELPER : COLL_BLOCKING;
    run_group(&ref, c, &(run_opts){ .tp = tp, .B = B, .T = T, .mode = mode, .overlap = overlap });
    run_group(&rc, c, &(run_opts){ .tp = tp, .B = B, .T = T, .mode = mode, .overlap = overlap, .recompute = 1 });
#undef NAMED
#define NAMED(what) (snprintf(name, sizeof name, "tp recompute L%d C%d tp %d%s: %s", c->n_layer, \
                              c->n_embd, tp, overlap ? " overlap" : "", what), name)
    int ok = run_ok(&ref, why, sizeof why) && run_ok(&rc, why, sizeof why), none = 1, part = 1, keep = 1;
    for (int q = 0; ok && q < tp; q++) {
        const gpt_model *m = &rc.sh[q];
        part &= rc.jobs[q].same_part;
        for (int l = 0; l < gpt_num_layers(m); l++) {
            none &= rc.jobs[q].ev[l][PH_R][0] == 0;
            size_t k = gpt_layer_keep_floats(m, l, B, T), saved = gpt_layer_act_saved_floats(m, l, B, T);
            keep &= gpt_layer_kind_of(m, l) == GPT_LAYER_BLOCK ? k == 2 * (size_t)B * T * c->n_embd : k == saved;
        }
    }
    CHECK(NAMED("every rank's F, recompute, B, W ran"), ok, "%s", why);
    CHECK(NAMED("recompute made no all-reduce"), ok && none, "rank 0 block 1: '%s'", rc.jobs[0].ev[1][PH_R]);
    CHECK(NAMED("the F part rebuilt from the keep prefix, bitwise"), ok && part, "differs");
    CHECK(NAMED("keep floats: a block's 2*N*C, the embedding's and head's F part"), keep, "differ");
    CHECK(NAMED("loss and gradients bitwise the path's without recompute"), ok && same_bits(&ref, &rc, &err),
          "relative difference %g", err);
    run_free(&rc);
    run_free(&ref);
}

/* keep_bytes = 4 * keep floats and recompute_flops of every kind at tp 1, 2, 4 (act_bytes = 4 *
 * act floats is test_tp_model's); the recompute's argument check; GPT-2 124M's block in the
 * three modes, printed. */
static void test_recompute_cost(const gpt_config *c) {
    char name[200];
    int ok = 1;
    for (int tp = 1; tp <= 4; tp *= 2) {
        gpt_model m;
        gpt_init_layers_tp(&m, c, 0, c->n_layer + 2, 0, tp);
        for (int l = 0; l < gpt_num_layers(&m); l++) {
            gpt_layer_cost k;
            gpt_layer_ops_of(&m, l)->cost(c, 3, 5, tp, &k);
            double C = c->n_embd, N = 15, mm = 2.0 * N * 7.0 * C * C / tp, att = 2.0 * N * 5 * C / tp;
            ok &= k.keep_bytes == 4.0 * gpt_layer_keep_floats(&m, l, 3, 5) &&
                  k.act_bytes == 4.0 * gpt_layer_act_floats(&m, l, 3, 5) &&
                  k.recompute_flops == (gpt_layer_kind_of(&m, l) == GPT_LAYER_BLOCK ? mm + att : 0) &&
                  k.keep_bytes <= k.act_bytes;
        }
        gpt_free(&m);
    }
    snprintf(name, sizeof name, "tp recompute L%d C%d: cost rows' keep_bytes = 4 * keep floats, "
             "recompute_flops F's without the projections, at tp 1, 2, 4", c->n_layer, c->n_embd);
    CHECK(name, ok, "differ");

    gpt_model m;
    gpt_init_layers_tp(&m, c, 0, c->n_layer + 2, 0, 1);
    int rc = gpt_layer_recompute(&m, 1, NULL, NULL, NULL, 1, c->n_positions + 1);
    CHECK("tp recompute: T past n_positions is refused", rc < 0 && strstr(pt_err(), "layer 1 recompute"),
          "rc %d: %s", rc, pt_err());
    gpt_free(&m);

}

/* GPT-2 124M's block at B 4, T 256 in the three modes, per rank (the tables of a model holding
 * no layer: the sizes need only the config and tp). */
static void print_gpt2_memory(void) {
    gpt_config g = {.n_layer = 12, .n_head = 12, .n_embd = 768, .vocab_size = 50257, .n_positions = 1024};
    for (int tp = 1; tp <= 4; tp *= 2) {
        gpt_layer_cost k;
        gpt_model m;
        gpt_init_layers_tp(&m, &g, 1, 1, 0, tp);
        gpt_kind_ops(GPT_LAYER_BLOCK)->cost(&g, 4, 256, tp, &k);
        printf("# GPT-2 124M block, B 4, T 256, tp %d, per rank: full act %.2f MB (F part %.2f MB); "
               "comm-free recompute keeps %.2f MB (F again: %.0f%% of its FLOPs, no all-reduce); "
               "--recompute keeps %.2f MB (F again, all of it, with %d all-reduces)\n", tp,
               k.act_bytes / 1e6, 4e-6 * gpt_layer_act_saved_floats(&m, 1, 4, 256), k.keep_bytes / 1e6,
               100.0 * k.recompute_flops / k.flops[0], k.input_bytes / 1e6, k.tp_collectives[0]);
        gpt_free(&m);
    }
}

int main(void) {
    openblas_set_num_threads(1);   /* one core per rank, as the runtime's ranks (run_job.c); and
                                    * no OpenBLAS pool, whose threads TSan cannot see into */
    print_gpt2_memory();
    test_overlap_errors(&cfgs[0]);
    test_overlap_one_row(&cfgs[0]);
    test_overlap_slow(&cfgs[0]);
    for (size_t i = 0; i < sizeof cfgs / sizeof *cfgs; i++) {
        int T = cfgs[i].n_positions < 32 ? 7 : 32;
        for (int tp = 2; tp <= MAX_TP; tp *= 2)
            for (int B = 2; B <= 3; B++) test_overlap(&cfgs[i], tp, B, T);
        test_recompute_cost(&cfgs[i]);
        for (int tp = 1; tp <= MAX_TP; tp *= 2) {
            test_recompute(&cfgs[i], tp, 0);
            if (tp > 1) test_recompute(&cfgs[i], tp, 1);
        }
    }
    TEST_DONE();
}
