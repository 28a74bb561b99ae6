/* The discrete-event engine behind sim_run(). Each rank walks its action list in order; an action
 * starts at max(rank free, dependencies done); a rank blocked on a dependency parks on that
 * dependency's waiter list and is woken when it resolves (a worklist, no global event queue,
 * no scans: O(actions)). Cost-model parsing lives in sim_costs.c, not here.
 *
 * What an action waits for is sched's dependency rule (sched_action_deps); here each prerequisite
 * becomes a key per (kind, stage, virtual mb), virtual mb = iteration * M + mb:
 * F_END, B_END (B or BW done), W_END (W or BW done), MSG_F (forward input of a stage arrived on
 * its rank), MSG_B (input gradient arrived); plus one barrier per iteration. */
#include "sim/sim.h"
#include "util/pt.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { K_FEND, K_BEND, K_WEND, K_MSGF, K_MSGB, K_N };

typedef struct {
    const sched *s;
    const sim_costs *c;
    sim_opts o;
    int P, S, M, K, N, MM;
    long n_keys;            /* K_N * S * MM + N barriers */
    double *ktime;          /* [n_keys] resolution time, < 0 unknown */
    int *ksrc;              /* [n_keys] event that resolved it */
    int *whead;             /* [n_keys] first rank waiting on it, -1 */
    int *wnext;             /* [P] next rank on the same waiter list */
    long *blocked;          /* [P] key the rank waits on, -1 */
    long *pos;              /* [P] index into the rank's list repeated N times */
    double *t;              /* [P] compute stream free */
    double *comm_free;      /* [P] send stream free */
    int n_q;                /* shaped links (a rate in the costs or a fault): 2 queues each */
    int *q_a, *q_b;         /* [n_q / 2] the ranks of each; queue 2i is q_a -> q_b, 2i+1 back */
    double *q_free;         /* [n_q] when the queue is free of the messages before */
    int *q_ev;              /* [n_q] the send of the last message in it, -1 */
    int *last_ev, *last_send;   /* [P] event that set t / comm_free */
    int *work, n_work;      /* worklist of ranks */
    char *in_work;          /* [P] */
    int *bar_count;         /* [N] ranks done with iteration i */
    int *bar_ev;            /* [N] event that finished iteration i last */
    int *cnt;               /* [S] activations held now */
    double *rank_bytes;     /* [P] bytes held now */
    double *w_end;          /* [S] reduce_overlap: end of stage g's latest W or BW */
    double *red_free;       /* [P] reduce_overlap: the rank's reduction stream free */
    int *red_ev;            /* [P] reduce_overlap: event that set red_free */
    int *pred;              /* [events] critical-path predecessor (grows with the timeline) */
    int pred_cap;
    sim_result *r;
} sim_state;

static long key_of(const sim_state *st, int k, int g, int vmb) {
    return ((long)k * st->S + g) * st->MM + vmb;
}

static long key_barrier(const sim_state *st, int iter) {
    return (long)K_N * st->S * st->MM + iter;
}

static void work_push(sim_state *st, int r) {
    if (st->in_work[r]) return;
    st->in_work[r] = 1;
    st->work[st->n_work++] = r;
}

/* Marks key resolved at time t by event ev and wakes every rank waiting on it. */
static void key_resolve(sim_state *st, long key, double t, int ev) {
    st->ktime[key] = t;
    st->ksrc[key] = ev;
    for (int r = st->whead[key]; r >= 0; r = st->wnext[r]) {
        st->blocked[r] = -1;
        work_push(st, r);
    }
    st->whead[key] = -1;
}

/* Records an event with its critical-path predecessor; returns its index. */
static int push_event(sim_state *st, const tl_event *e, int pred) {
    int i = timeline_push(&st->r->tl, e);
    if (i >= st->pred_cap) {
        st->pred_cap = st->r->tl.cap;
        int *p = pt_malloc(sizeof(int) * (size_t)st->pred_cap);
        if (i) memcpy(p, st->pred, sizeof(int) * (size_t)i);
        free(st->pred);
        st->pred = p;
    }
    st->pred[i] = pred;
    return i;
}

/* Whether fault x is active in iteration iter (0-based here; windows count from 1). */
static bool fault_on(const sim_fault *x, int iter) {
    return iter + 1 >= x->from && (x->to == 0 || iter + 1 <= x->to);
}

static bool joins(int x, int y, int a, int b) { return (x == a && y == b) || (x == b && y == a); }

/* The slower of two rates (0: none). */
static double slower(double x, double y) { return x > 0 && (y <= 0 || x < y) ? x : y; }

/* Link a-b's parameters in iteration iter: the overrides, plus the slow-link faults active then
 * (delays add up; of several rates the slowest holds, 0: not shaped). */
static void link_params(const sim_costs *c, int a, int b, int iter, double *lat, double *bw, double *extra,
                        double *rate) {
    *lat = c->latency; *bw = c->bandwidth; *extra = 0; *rate = 0;
    for (int i = 0; i < c->n_links; i++) {
        const sim_link *l = &c->links[i];
        if (!joins(l->a, l->b, a, b)) continue;
        if (l->latency >= 0) *lat = l->latency;
        if (l->bandwidth >= 0) *bw = l->bandwidth;
        *extra += l->extra;
        *rate = slower(*rate, l->rate);
    }
    for (int i = 0; i < c->n_faults; i++) {
        const sim_fault *x = &c->faults[i];
        if (!x->link || !joins(x->a, x->b, a, b) || !fault_on(x, iter)) continue;
        *extra += x->amount;
        *rate = slower(*rate, x->rate);
    }
}

/* The queue of shaped link from -> to (a link with a rate in the costs or a fault), or -1. */
static int queue_of(const sim_state *st, int from, int to) {
    for (int i = 0; i < st->n_q / 2; i++)
        if (joins(st->q_a[i], st->q_b[i], from, to)) return 2 * i + (from != st->q_a[i]);
    return -1;
}

/* Puts a message from stage g (rank r) on r's send stream at time post, then, on a shaped link,
 * in the link's queue for that direction (after the messages before it, bytes / rate); it
 * resolves the MSG key of the destination stage. fwd: F output to g+1, else input gradient to g-1. */
static void issue_send(sim_state *st, int r, int g, int mb, int iter, bool fwd, double post, int pred) {
    int dst_g = fwd ? g + 1 : g - 1, dst = st->s->stage_rank[dst_g];
    double bytes = st->c->act_bytes[fwd ? g : dst_g], lat, bw, extra, rate;
    link_params(st->c, r, dst, iter, &lat, &bw, &extra, &rate);
    double start = post > st->comm_free[r] ? post : st->comm_free[r];
    if (st->comm_free[r] > post && st->last_send[r] >= 0) pred = st->last_send[r];
    double end = start + (bw > 0 && bytes > 0 ? bytes / bw : 0), out = end;
    int q = rate > 0 && bytes > 0 ? queue_of(st, r, dst) : -1;
    if (q >= 0) {
        if (st->q_free[q] > end && st->q_ev[q] >= 0) pred = st->q_ev[q];   /* it waited for the one before */
        out = (st->q_free[q] > end ? st->q_free[q] : end) + bytes / rate;
        st->q_free[q] = out;
    }
    tl_event e = { .act = { g, mb, fwd ? ACT_SEND_F : ACT_SEND_B }, .rank = r, .iter = iter,
                   .stream = TL_SEND, .peer = dst, .link = -1, .ready = post, .start = start, .end = end };
    int ev = push_event(st, &e, pred);
    st->comm_free[r] = end;
    st->last_send[r] = ev;
    if (q >= 0) st->q_ev[q] = ev;
    key_resolve(st, key_of(st, fwd ? K_MSGF : K_MSGB, dst_g, iter * st->M + mb), out + lat + extra, ev);
}

/* Adds link a-b to the shaped ones unless it is there. */
static void queue_add(sim_state *st, int a, int b) {
    if (queue_of(st, a, b) >= 0) return;
    int i = st->n_q / 2;
    st->q_a[i] = a, st->q_b[i] = b, st->n_q += 2;
}

/* The queues of every link with a rate (in the costs or a fault), all free. */
static void queues_init(sim_state *st) {
    const sim_costs *c = st->c;
    size_t n = (size_t)(c->n_links + c->n_faults + 1);
    st->q_a = pt_malloc(n * sizeof(int)), st->q_b = pt_malloc(n * sizeof(int));
    st->q_free = pt_calloc(2 * n, sizeof(double)), st->q_ev = pt_malloc(2 * n * sizeof(int));
    for (size_t i = 0; i < 2 * n; i++) st->q_ev[i] = -1;
    for (int i = 0; i < c->n_links; i++)
        if (c->links[i].rate > 0) queue_add(st, c->links[i].a, c->links[i].b);
    for (int i = 0; i < c->n_faults; i++)
        if (c->faults[i].link && c->faults[i].rate > 0) queue_add(st, c->faults[i].a, c->faults[i].b);
}

/* The key that resolves prerequisite d of action a (virtual mb vmb) on rank r: a compute action
 * on r resolves when it ends; one on another rank, and a SEND or RECV, when its message has
 * arrived at a's stage (what a RECV waits for, or the implicit send of a compute-only schedule). */
static long dep_key(const sim_state *st, int r, const sched_action *a, const sched_action *d, int vmb) {
    bool fwd = d->kind == ACT_F || d->kind == ACT_SEND_F || d->kind == ACT_RECV_F;
    int dv = vmb + (a->mb >= 0 ? d->mb - a->mb : 0);   /* d's own unit: another chunk's with --seq-chunks */
    if (!sched_kind_is_compute(d->kind) || st->s->stage_rank[d->stage] != r)
        return key_of(st, fwd ? K_MSGF : K_MSGB, a->stage, dv);
    return key_of(st, d->kind == ACT_F ? K_FEND : d->kind == ACT_W ? K_WEND : K_BEND, d->stage, dv);
}

/* Fills keys[] with what action a (virtual mb vmb) on rank r needs before it can start: the
 * dependency rule (sched_action_deps), each prerequisite as its key. Returns how many. */
static int action_deps(const sim_state *st, int r, const sched_action *a, int vmb, long *keys) {
    sched_action d[SCHED_MAX_DEPS];
    int n = sched_action_deps(st->s, a, d);
    for (int i = 0; i < n; i++) keys[i] = dep_key(st, r, a, &d[i], vmb);
    return n;
}

/* Stage g's slowdown in iteration iter: the product of its slow-stage faults active then. */
static double stage_factor(const sim_costs *c, int g, int iter) {
    double k = 1;
    for (int i = 0; i < c->n_faults; i++)
        if (!c->faults[i].link && c->faults[i].a == g && fault_on(&c->faults[i], iter)) k *= c->faults[i].amount;
    return k;
}

/* With sequence chunks, what chunk mb % K's attention adds to (or takes from) a unit's mean
 * time in phase att (sim_costs.att_f or att_b): its share (2c+1)/K of the whole's against 1/K. */
static double chunk_shift(const sim_costs *c, const sched *s, const sched_action *a, const double *att) {
    int K = s->seq_chunks;
    if (K < 2 || !att || a->mb < 0) return 0;
    return att[a->stage] * (2.0 * (a->mb % K) + 1.0 - K) / K;
}

static double compute_time(const sim_costs *c, const sched *s, const sched_action *a, int iter) {
    int g = a->stage;
    double df = chunk_shift(c, s, a, c->att_f), db = chunk_shift(c, s, a, c->att_b);
    switch (a->kind) {
    case ACT_F: return (c->f[g] + df) * stage_factor(c, g, iter);
    case ACT_B: return (c->b[g] + db) * stage_factor(c, g, iter);
    case ACT_W: return c->w[g] * stage_factor(c, g, iter);
    case ACT_BW: return ((c->bw[g] >= 0 ? c->bw[g] : c->b[g] + c->w[g]) + db) * stage_factor(c, g, iter);
    case ACT_REDUCE_GRAD: return g >= 0 ? c->reduce[g] : 0;
    case ACT_STEP: return c->step;
    default: return 0;
    }
}

static void mem_change(sim_state *st, int r, int g, int d) {
    sim_result *res = st->r;
    st->cnt[g] += d;
    st->rank_bytes[r] += d * st->c->act_bytes[g];
    if (st->cnt[g] > res->peak_mb[g]) res->peak_mb[g] = st->cnt[g];
    if (st->rank_bytes[r] > res->rank_peak_bytes[r]) res->rank_peak_bytes[r] = st->rank_bytes[r];
}

/* A microbatch's kept keys and values taken (d 1, at its chunk 0's F) or given back (-1, at its
 * chunk 0's backward): in the rank's bytes, not in the stage's count of units. */
static void kv_change(sim_state *st, int r, int g, int d) {
    st->rank_bytes[r] += d * st->c->kv_bytes[g];
    if (st->rank_bytes[r] > st->r->rank_peak_bytes[r]) st->r->rank_peak_bytes[r] = st->rank_bytes[r];
}

/* Runs a compute action (F/B/W/BW/REDUCE_GRAD/STEP) that is ready at `start`; returns its event. */
static int run_compute(sim_state *st, int r, const sched_action *a, int iter, double ready,
                        double start, int pred) {
    double end = start + compute_time(st->c, st->s, a, iter);
    tl_event e = { .act = *a, .rank = r, .iter = iter, .stream = TL_COMPUTE, .peer = -1, .link = -1,
                   .ready = ready, .start = start, .end = end };
    int ev = push_event(st, &e, pred), g = a->stage, vmb = iter * st->M + a->mb;
    st->t[r] = end;
    st->last_ev[r] = ev;
    st->r->busy[r] += end - start;
    if (a->kind == ACT_F) mem_change(st, r, g, +1);
    if (a->kind == ACT_W || a->kind == ACT_BW) mem_change(st, r, g, -1);
    if (st->c->kv_bytes && st->s->seq_chunks > 1 && a->mb % st->s->seq_chunks == 0)   /* kept K/V */
        kv_change(st, r, g, a->kind == ACT_F ? 1 : a->kind == ACT_B || a->kind == ACT_BW ? -1 : 0);
    if (a->kind == ACT_F) key_resolve(st, key_of(st, K_FEND, g, vmb), end, ev);
    if (a->kind == ACT_B || a->kind == ACT_BW) key_resolve(st, key_of(st, K_BEND, g, vmb), end, ev);
    if (a->kind == ACT_W || a->kind == ACT_BW) key_resolve(st, key_of(st, K_WEND, g, vmb), end, ev);
    if (a->kind == ACT_W || a->kind == ACT_BW) st->w_end[g] = end;
    if (st->s->lowered) return ev;
    int pos = g % st->K;     /* compute-only: the implicit SEND sched_lower would place here */
    if (a->kind == ACT_F && pos < st->K - 1 && st->s->stage_rank[g + 1] != r)
        issue_send(st, r, g, a->mb, iter, true, end, ev);
    if ((a->kind == ACT_B || a->kind == ACT_BW) && pos > 0 && st->s->stage_rank[g - 1] != r)
        issue_send(st, r, g, a->mb, iter, false, end, ev);
    return ev;
}

/* reduce_overlap: stage g's REDUCE_GRAD on the rank's reduction stream, from its last W (after
 * the rank's earlier reductions); the compute stream goes on. */
static void run_reduce_overlapped(sim_state *st, int r, const sched_action *a, int iter) {
    int g = a->stage;
    double start = st->w_end[g] > st->red_free[r] ? st->w_end[g] : st->red_free[r];
    tl_event e = { .act = *a, .rank = r, .iter = iter, .stream = TL_SEND, .peer = -1, .link = -1,
                   .ready = st->w_end[g], .start = start, .end = start + compute_time(st->c, st->s, a, iter) };
    st->red_ev[r] = push_event(st, &e, st->w_end[g] >= st->red_free[r] ? st->last_ev[r] : st->red_ev[r]);
    st->red_free[r] = e.end;
}

/* A RECV: the rank stands still until the data has arrived. */
static void run_recv(sim_state *st, int r, const sched_action *a, int iter, long key) {
    double ready = st->t[r], arr = st->ktime[key];
    double end = arr > ready ? arr : ready;
    int src = st->ksrc[key];
    int from = st->s->stage_rank[a->kind == ACT_RECV_F ? a->stage - 1 : a->stage + 1];
    tl_event e = { .act = *a, .rank = r, .iter = iter, .stream = TL_RECV, .peer = from, .link = -1,
                   .ready = ready, .start = ready, .end = end };
    int ev = push_event(st, &e, arr > ready ? src : st->last_ev[r]);
    st->r->tl.ev[src].link = ev;
    st->t[r] = end;
    st->last_ev[r] = ev;
}

/* Ranks done with iteration `iter` count towards its barrier (the optimizer's synchronisation). */
static void iteration_done(sim_state *st, int r, int iter) {
    long kb = key_barrier(st, iter);
    if (st->t[r] >= st->r->iter_end[iter]) { st->r->iter_end[iter] = st->t[r]; st->bar_ev[iter] = st->last_ev[r]; }
    if (++st->bar_count[iter] == st->P) key_resolve(st, kb, st->r->iter_end[iter], st->bar_ev[iter]);
}

/* Compute event ev consumed a message without a RECV (compute-only schedule): the send links to
 * it, so the trace can draw the arrow. */
static void link_messages(sim_state *st, const long *keys, int n, int ev) {
    for (int i = 0; i < n; i++) {
        long k = keys[i] / ((long)st->S * st->MM);
        if (k != K_MSGF && k != K_MSGB) continue;
        tl_event *send = &st->r->tl.ev[st->ksrc[keys[i]]];
        if (send->link < 0) send->link = ev;
    }
}

/* Parks rank r on key's waiter list until the key resolves. Returns 0 (did not run). */
static int park(sim_state *st, int r, long key) {
    st->blocked[r] = key;
    st->wnext[r] = st->whead[key];
    st->whead[key] = r;
    return 0;
}

/* Tries to run rank r's next action. Returns 1 if it ran, 0 if r is blocked or finished. */
static int step_rank(sim_state *st, int r) {
    int len = st->s->len[r];
    if (st->pos[r] >= (long)len * st->N) return 0;
    int iter = (int)(st->pos[r] / len), step = (int)(st->pos[r] % len);
    const sched_action *a = &st->s->acts[r][step];
    if (step == 0 && iter > 0 && !st->o.post_validation) {   /* wait for every rank's STEP */
        long kb = key_barrier(st, iter - 1);
        if (st->ktime[kb] < 0) return park(st, r, kb);
        if (st->ktime[kb] > st->t[r]) { st->t[r] = st->ktime[kb]; st->last_ev[r] = st->ksrc[kb]; }
    }
    long keys[SCHED_MAX_DEPS];
    int n = action_deps(st, r, a, iter * st->M + (a->mb >= 0 ? a->mb : 0), keys);
    double ready = st->t[r], start = ready;
    int pred = st->last_ev[r];
    for (int i = 0; i < n; i++) {
        if (st->ktime[keys[i]] < 0) return park(st, r, keys[i]);
        if (st->ktime[keys[i]] > start) { start = st->ktime[keys[i]]; pred = st->ksrc[keys[i]]; }
    }
    int overlap = st->c->reduce_overlap && !st->s->async;
    if (overlap && a->kind == ACT_STEP && st->red_free[r] > start) { start = st->red_free[r]; pred = st->red_ev[r]; }
    if (a->kind == ACT_SEND_F || a->kind == ACT_SEND_B)
        issue_send(st, r, a->stage, a->mb, iter, a->kind == ACT_SEND_F, ready, st->last_ev[r]);
    else if (overlap && a->kind == ACT_REDUCE_GRAD)
        run_reduce_overlapped(st, r, a, iter);
    else if (a->kind == ACT_RECV_F || a->kind == ACT_RECV_B)
        run_recv(st, r, a, iter, keys[0]);
    else {
        int ev = run_compute(st, r, a, iter, ready, start, pred);
        link_messages(st, keys, n, ev);
    }
    st->pos[r]++;
    if (step == len - 1) iteration_done(st, r, iter);
    return 1;
}

/* "rank R step I (ACTION): " of an action check_input refuses, into buf (named only on an error:
 * formatting every action's name cost the planner's search a third of its time). */
static const char *bad_at(const sched_action *a, int r, int i, char *buf, size_t n) {
    char act[48];
    sched_action_str(a, act, sizeof act);
    snprintf(buf, n, "rank %d step %d (%s)", r, i, act);
    return buf;
}

/* Every action must name a stage and microbatch in range, on the rank that owns the stage. */
static int check_input(const sched *s, const sim_costs *c) {
    if (c->n_stages != s->n_stages)
        return pt_seterr("the costs have %d stages, the schedule %d", c->n_stages, s->n_stages);
    if (s->n_stages % s->n_pipes || s->stages_per_pipe != s->n_stages / s->n_pipes)
        return pt_seterr("stages_per_pipe %d does not match %d stages in %d pipes",
                         s->stages_per_pipe, s->n_stages, s->n_pipes);
    char at[96];
    for (int r = 0; r < s->n_ranks; r++)
        for (int i = 0; i < s->len[r]; i++) {
            const sched_action *a = &s->acts[r][i];
            if (a->kind == ACT_STEP) continue;
            if (a->stage < 0 || a->stage >= s->n_stages)
                return pt_seterr("%s: stage out of range 0..%d", bad_at(a, r, i, at, sizeof at), s->n_stages - 1);
            if (s->stage_rank[a->stage] != r)
                return pt_seterr("%s: stage %d runs on rank %d", bad_at(a, r, i, at, sizeof at), a->stage,
                                 s->stage_rank[a->stage]);
            if (a->kind == ACT_REDUCE_GRAD) continue;
            if (a->mb < 0 || a->mb >= s->n_mb)
                return pt_seterr("%s: microbatch out of range 0..%d", bad_at(a, r, i, at, sizeof at), s->n_mb - 1);
            int pos = a->stage % s->stages_per_pipe;
            bool edge = (a->kind == ACT_SEND_F && pos == s->stages_per_pipe - 1) || (a->kind == ACT_RECV_F && pos == 0)
                     || (a->kind == ACT_SEND_B && pos == 0) || (a->kind == ACT_RECV_B && pos == s->stages_per_pipe - 1);
            if (edge) return pt_seterr("%s: no neighbouring stage to talk to", bad_at(a, r, i, at, sizeof at));
        }
    return 0;
}

static void state_init(sim_state *st, const sched *s, const sim_costs *c, const sim_opts *o, sim_result *res) {
    memset(st, 0, sizeof *st);
    st->s = s; st->c = c; st->r = res;
    st->o.iterations = o && o->iterations > 0 ? o->iterations : 1;
    st->o.post_validation = o && o->post_validation;
    st->P = s->n_ranks; st->S = s->n_stages; st->M = s->n_mb; st->K = s->stages_per_pipe;
    st->N = st->o.iterations; st->MM = st->N * st->M;
    st->n_keys = (long)K_N * st->S * st->MM + st->N;
    st->ktime = pt_malloc(sizeof(double) * (size_t)st->n_keys);
    st->ksrc = pt_malloc(sizeof(int) * (size_t)st->n_keys);
    st->whead = pt_malloc(sizeof(int) * (size_t)st->n_keys);
    for (long k = 0; k < st->n_keys; k++) { st->ktime[k] = -1; st->ksrc[k] = -1; st->whead[k] = -1; }
    size_t P = (size_t)st->P;
    st->wnext = pt_malloc(sizeof(int) * P);
    st->blocked = pt_malloc(sizeof(long) * P);
    st->pos = pt_calloc(P, sizeof(long));
    st->t = pt_calloc(P, sizeof(double));
    st->comm_free = pt_calloc(P, sizeof(double));
    st->last_ev = pt_malloc(sizeof(int) * P);
    st->last_send = pt_malloc(sizeof(int) * P);
    for (size_t r = 0; r < P; r++) { st->blocked[r] = -1; st->last_ev[r] = -1; st->last_send[r] = -1; }
    st->work = pt_malloc(sizeof(int) * P);
    st->in_work = pt_calloc(P, 1);
    st->bar_count = pt_calloc((size_t)st->N, sizeof(int));
    st->bar_ev = pt_malloc(sizeof(int) * (size_t)st->N);
    for (int i = 0; i < st->N; i++) st->bar_ev[i] = -1;
    st->cnt = pt_calloc((size_t)st->S, sizeof(int));
    st->rank_bytes = pt_calloc(P, sizeof(double));
    st->w_end = pt_calloc((size_t)st->S, sizeof(double));
    st->red_free = pt_calloc(P, sizeof(double));
    st->red_ev = pt_malloc(sizeof(int) * P);
    for (size_t r = 0; r < P; r++) st->red_ev[r] = -1;
    queues_init(st);
}

static void state_free(sim_state *st) {
    free(st->ktime); free(st->ksrc); free(st->whead); free(st->wnext); free(st->blocked);
    free(st->pos); free(st->t); free(st->comm_free); free(st->last_ev); free(st->last_send);
    free(st->work); free(st->in_work); free(st->bar_count); free(st->bar_ev);
    free(st->cnt); free(st->rank_bytes); free(st->pred);
    free(st->w_end); free(st->red_free); free(st->red_ev);
    free(st->q_a); free(st->q_b); free(st->q_free); free(st->q_ev);
}

static void result_init(sim_result *res, const sched *s, const sim_costs *c, int n_iters) {
    memset(res, 0, sizeof *res);
    res->n_ranks = s->n_ranks; res->n_stages = s->n_stages; res->n_iters = n_iters;
    res->iter_end = pt_calloc((size_t)n_iters, sizeof(double));
    res->busy = pt_calloc((size_t)s->n_ranks, sizeof(double));
    res->idle = pt_calloc((size_t)s->n_ranks, sizeof(double));
    res->peak_mb = pt_calloc((size_t)s->n_stages, sizeof(int));
    res->peak_bytes = pt_calloc((size_t)s->n_stages, sizeof(double));
    res->rank_peak_bytes = pt_calloc((size_t)s->n_ranks, sizeof(double));
    res->stash_bytes = pt_calloc((size_t)s->n_stages, sizeof(double));
    timeline_init(&res->tl, s, c->act_bytes, n_iters);
}

void sim_result_free(sim_result *r) {
    free(r->iter_end); free(r->busy); free(r->idle); free(r->peak_mb); free(r->peak_bytes);
    free(r->rank_peak_bytes); free(r->stash_bytes); free(r->crit);
    free(r->rank_lent); free(r->rank_borrowed);
    timeline_free(&r->tl);
    memset(r, 0, sizeof *r);
}

/* Describes what key waits for, in words, into buf. */
static void key_describe(const sim_state *st, long key, char *buf, size_t n) {
    if (key < 0) { snprintf(buf, n, "nothing (not started)"); return; }
    if (key >= (long)K_N * st->S * st->MM) {
        snprintf(buf, n, "every rank's STEP of iteration %d", (int)(key - (long)K_N * st->S * st->MM));
        return;
    }
    int vmb = (int)(key % st->MM), g = (int)(key / st->MM % st->S), k = (int)(key / st->MM / st->S);
    int mb = vmb % st->M;
    static const char *what[K_N] = { "%dF%d to finish", "%dB%d (or BW) to finish", "%dW%d (or BW) to finish",
                                     "forward input of %dF%d", "input gradient of %dB%d" };
    int len = snprintf(buf, n, what[k], g, mb);
    if (k == K_MSGF && len >= 0 && (size_t)len < n)
        snprintf(buf + len, n - (size_t)len, " (%dSEND_F%d on rank %d never issued)", g - 1, mb, st->s->stage_rank[g - 1]);
    if (k == K_MSGB && len >= 0 && (size_t)len < n)
        snprintf(buf + len, n - (size_t)len, " (%dSEND_B%d on rank %d never issued)", g + 1, mb, st->s->stage_rank[g + 1]);
}

/* Error naming every stuck rank (first 8), its step, action and what it waits for. */
static int deadlock_error(const sim_state *st) {
    char msg[1900], what[160], act[48];
    int n_stuck = 0, len = 0;
    for (int r = 0; r < st->P; r++) n_stuck += st->pos[r] < (long)st->s->len[r] * st->N;
    len = snprintf(msg, sizeof msg, "deadlock, %d of %d ranks stuck:", n_stuck, st->P);
    for (int r = 0, shown = 0; r < st->P && shown < 8; r++) {
        int len_r = st->s->len[r];
        if (st->pos[r] >= (long)len_r * st->N) continue;
        shown++;
        int step = (int)(st->pos[r] % len_r), iter = (int)(st->pos[r] / len_r);
        sched_action_str(&st->s->acts[r][step], act, sizeof act);
        key_describe(st, st->blocked[r], what, sizeof what);
        if (len < (int)sizeof msg)
            len += snprintf(msg + len, sizeof msg - (size_t)len, " rank %d at step %d (%s, iteration %d) waits for %s;",
                            r, step, act, iter, what);
    }
    return pt_seterr("%s", msg);
}

/* Walks predecessors back from the last-ending event. */
static void critical_path(sim_state *st) {
    sim_result *res = st->r;
    int last = -1, n = 0;
    for (int i = 0; i < res->tl.n; i++)
        if (last < 0 || res->tl.ev[i].end > res->tl.ev[last].end ||
            (res->tl.ev[i].end == res->tl.ev[last].end && res->tl.ev[i].stream == TL_COMPUTE)) last = i;
    for (int i = last; i >= 0; i = st->pred[i]) n++;
    res->crit = pt_malloc(sizeof(sim_crit) * (size_t)(n ? n : 1));
    res->n_crit = n;
    for (int i = last; i >= 0; i = st->pred[i]) {
        const tl_event *e = &res->tl.ev[i];
        double waited = e->stream == TL_RECV ? e->end - e->ready : e->start - e->ready;   /* a RECV's span is its wait */
        res->crit[--n] = (sim_crit){ i, waited };
    }
}

static int cmp_start(const void *a, const void *b) {
    double x = ((const double *)a)[0], y = ((const double *)b)[0];
    return x < y ? -1 : x > y;
}

/* reduce_overlap: busy[r] = the union of r's compute and reduction intervals (a reduction under
 * compute counts once). */
static void busy_union(sim_state *st) {
    const timeline *tl = &st->r->tl;
    double *iv = pt_malloc(sizeof(double) * 2 * (size_t)(tl->n + 1));
    for (int r = 0; r < st->P; r++) {
        int n = 0;
        for (int i = 0; i < tl->n; i++) {
            const tl_event *e = &tl->ev[i];
            if (e->rank != r || (e->stream != TL_COMPUTE && e->act.kind != ACT_REDUCE_GRAD)) continue;
            iv[2 * n] = e->start;
            iv[2 * n++ + 1] = e->end;
        }
        qsort(iv, (size_t)n, 2 * sizeof(double), cmp_start);
        double busy = 0, lo = 0, hi = -1;
        for (int k = 0; k < n; k++) {
            if (iv[2 * k] > hi) { busy += hi > lo ? hi - lo : 0; lo = iv[2 * k]; hi = iv[2 * k + 1]; }
            else if (iv[2 * k + 1] > hi) hi = iv[2 * k + 1];
        }
        st->r->busy[r] = busy + (hi > lo ? hi - lo : 0);
    }
    free(iv);
}

/* The weight copies an asynchronous schedule keeps beyond the live one (sim_result.stash_bytes),
 * held all along: added to their rank's peak. */
static void price_weight_versions(const sched *s, const sim_costs *c, sim_result *res) {
    for (int g = 0; s->async && g < s->n_stages; g++) {
        int extra = s->weight_versions > 0 ? s->weight_versions - 1 : res->peak_mb[g];
        res->stash_bytes[g] = extra * c->param_bytes[g];
        res->rank_peak_bytes[s->stage_rank[g]] += res->stash_bytes[g];
    }
}

static void summarise(sim_state *st) {
    sim_result *res = st->r;
    int P = st->P, N = st->N;
    double busy_sum = 0, busy_max = 0;
    if (st->c->reduce_overlap && !st->s->async) busy_union(st);
    res->makespan = timeline_end(&res->tl);
    for (int r = 0; r < P; r++) {
        res->idle[r] = res->makespan - res->busy[r];
        busy_sum += res->busy[r];
        if (res->busy[r] > busy_max) busy_max = res->busy[r];
    }
    res->ideal_time = busy_max / N;
    res->bubble_fraction = res->makespan > 0 ? 1 - busy_sum / (P * res->makespan) : 0;
    res->iteration_time = N > 1 ? (res->iter_end[N - 1] - res->iter_end[0]) / (N - 1) : res->makespan;
    res->steady_bubble = res->iteration_time > 0 ? 1 - busy_sum / N / (P * res->iteration_time) : 0;
    for (int g = 0; g < st->S; g++) res->peak_bytes[g] = res->peak_mb[g] * st->c->act_bytes[g];
    price_weight_versions(st->s, st->c, res);
}

int sim_run(const sched *s, const sim_costs *c, const sim_opts *o, sim_result *out) {
    memset(out, 0, sizeof *out);
    if (check_input(s, c)) return -1;
    sim_state st;
    sim_result res;
    state_init(&st, s, c, o, &res);
    result_init(&res, s, c, st.N);
    long n_ev = 2 * sched_total_actions(s) * st.N + 16;   /* actions plus at most one implicit send each */
    if (n_ev < 1L << 30) timeline_reserve(&res.tl, (int)n_ev);
    for (int r = 0; r < st.P; r++) {
        if (s->len[r] == 0) for (int i = 0; i < st.N; i++) iteration_done(&st, r, i);
        work_push(&st, r);
    }
    while (st.n_work) {
        int r = st.work[--st.n_work];
        st.in_work[r] = 0;
        while (step_rank(&st, r)) {}
    }
    for (int r = 0; r < st.P; r++)
        if (st.pos[r] < (long)s->len[r] * st.N) {
            deadlock_error(&st);
            state_free(&st);
            sim_result_free(&res);
            return -1;
        }
    summarise(&st);
    critical_path(&st);
    state_free(&st);
    *out = res;
    return 0;
}

void sim_print_critical_path(const sim_result *r, FILE *f) {
    static const char *stream[TL_N_STREAMS] = { "compute", "send", "recv", "side" };
    char act[48];
    for (int i = 0; i < r->n_crit; i++) {
        const tl_event *e = &r->tl.ev[r->crit[i].ev];
        sched_action_str(&e->act, act, sizeof act);
        fprintf(f, "  rank %-3d %-8s %-14s iter %d  %10.4g .. %-10.4g", e->rank, stream[e->stream], act,
                e->iter, e->start, e->end);
        if (r->crit[i].waited > 0) fprintf(f, "  waited %.4g", r->crit[i].waited);
        fprintf(f, "\n");
    }
}
