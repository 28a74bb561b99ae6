/* The links of a job as they are: the start probe's numbers, the run's own messages timed from
 * each iteration's merged timeline, and the cost model's links from both. Contract in
 * run/run_link.h. */
#include "run/run_link.h"
#include "util/pt.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void run_links_init(run_links *L, const run_layout *lo) {
    L->P = lo->P;
    L->D = lo->D;
    L->tp = lo->tp > 1 ? lo->tp : 1;
    int n = L->D * L->tp * (L->P > 1 ? L->P - 1 : 0) * 2;
    L->dir = pt_calloc((size_t)(n ? n : 1), sizeof *L->dir);
}

void run_links_free(run_links *L) {
    free(L->dir);
    L->dir = NULL;
}

run_link_dir *run_links_at(const run_links *L, int d, int t, int r, int back) {
    return &L->dir[(((size_t)d * L->tp + (size_t)t) * (size_t)(L->P - 1) + (size_t)r) * 2 + (size_t)back];
}

int run_links_probe(run_links *L, comm *c, const run_layout *lo, int w, int phase, size_t bytes, double timeout) {
    int d, p, t;
    run_layout_coords(lo, w, &d, &p, &t);
    int r = p % 2 == phase ? p : p - 1;   /* this phase's link of w: r -> r+1 */
    if (r < 0 || r + 1 >= L->P) return 0;
    int peer = run_layout_world_rank(lo, d, r == p ? p + 1 : p - 1, t);
    comm_link_dir out[2];
    if (comm_link_probe(c, peer, bytes < RUN_LINK_PROBE_MAX ? bytes : RUN_LINK_PROBE_MAX, RUN_LINK_PROBE_ROUNDS,
                        timeout, out) < 0) return -1;
    if (r != p) return 0;                 /* the lower rank keeps the numbers */
    for (int k = 0; k < 2; k++) {
        run_link_dir *x = run_links_at(L, d, t, r, k);
        x->latency = out[k].latency;
        x->probe_bw = x->bandwidth = out[k].bandwidth;
    }
    return 0;
}

int run_links_share(run_links *L, comm *c) {
    int n = L->D * L->tp * (L->P - 1) * 2;
    if (n <= 0) return 0;
    double *v = pt_calloc((size_t)n * 2, sizeof *v);
    for (int i = 0; i < n; i++) v[2 * i] = L->dir[i].latency, v[2 * i + 1] = L->dir[i].probe_bw;
    int rc = comm_allreduce_f64(c, v, (size_t)n * 2);
    for (int i = 0; i < n && rc == 0; i++) {
        L->dir[i].latency = v[2 * i];
        L->dir[i].probe_bw = v[2 * i + 1];
        if (L->dir[i].n == 0) L->dir[i].bandwidth = v[2 * i + 1];
    }
    free(v);
    return rc;
}

/* ---- the run's messages ------------------------------------------------------------------- */

/* One message of a direction: posted, got by its receiver, whether the receiver waited for it. */
typedef struct { double post, got; int waited; } link_msg;

static int cmp_post(const void *a, const void *b) {
    double x = ((const link_msg *)a)->post, y = ((const link_msg *)b)->post;
    return x < y ? -1 : x > y;
}

static void dir_add(run_link_dir *x, double bw) {
    x->ring[x->n % RUN_LINK_RING] = bw;
    x->n++;
    int k = x->n < RUN_LINK_RING ? x->n : RUN_LINK_RING;
    double inv = 0;   /* the mean time a message held the link, not the median: a step pays the
                       * slow ones (sent while the other direction was busy) as they come */
    for (int i = 0; i < k; i++) inv += 1 / x->ring[i];
    x->bandwidth = k / inv;
}

/* The messages m[0..n) of one direction, in the order sent: a queue (docs/comm.md). */
static void dir_time(run_link_dir *x, link_msg *m, int n, double bytes) {
    qsort(m, (size_t)n, sizeof *m, cmp_post);
    for (int k = 0; k < n; k++) {
        if (!m[k].waited) continue;
        double from = m[k].post;
        if (k > 0 && m[k - 1].waited && m[k - 1].got - x->latency > from) from = m[k - 1].got - x->latency;
        else if (k > 0 && !m[k - 1].waited && m[k - 1].got > from) continue;   /* when it left is not known */
        double held = m[k].got - x->latency - from;
        if (held > 0) dir_add(x, bytes / held);
    }
}

void run_links_observe(run_links *L, const timeline *tl, const run_layout *lo, double bytes) {
    int n_dir = L->D * L->tp * (L->P - 1) * 2;
    if (n_dir <= 0 || bytes <= 0) return;
    link_msg *m = pt_malloc(sizeof *m * (size_t)(tl->n + 1));
    int *idx = pt_malloc(sizeof *idx * (size_t)(tl->n + 1));
    for (int i = 0; i < tl->n; i++) {   /* each SEND's direction index, -1: not a pipeline link's */
        const tl_event *e = &tl->ev[i];
        idx[i] = -1;
        if ((e->act.kind != ACT_SEND_F && e->act.kind != ACT_SEND_B) || e->link < 0 || e->peer < 0) continue;
        const tl_event *r = &tl->ev[e->link];
        if (r->act.kind != ACT_RECV_F && r->act.kind != ACT_RECV_B) continue;
        int d, p, t, d2, p2, t2;
        run_layout_coords(lo, e->rank, &d, &p, &t);
        run_layout_coords(lo, e->peer, &d2, &p2, &t2);
        if (d != d2 || t != t2 || abs(p - p2) != 1) continue;   /* a wrap-around of an interleaved pipe */
        idx[i] = (int)(run_links_at(L, d, t, p < p2 ? p : p2, p2 < p) - L->dir);
    }
    for (int k = 0; k < n_dir; k++) {
        int n = 0;
        for (int i = 0; i < tl->n; i++) {
            if (idx[i] != k) continue;
            const tl_event *s = &tl->ev[i], *r = &tl->ev[s->link];
            m[n++] = (link_msg){ s->start, r->end, r->end - r->start > RUN_LINK_WAIT_EPS };
        }
        if (n) dir_time(&L->dir[k], m, n, bytes);
    }
    free(idx);
    free(m);
}

/* ---- into a cost model -------------------------------------------------------------------- */

/* The slower direction of link r over the replicas and TP ranks, for a message of bytes. */
static const run_link_dir *link_slowest(const run_links *L, int r, double bytes, double *time) {
    const run_link_dir *worst = NULL;
    *time = 0;
    for (int d = 0; d < L->D; d++)
        for (int t = 0; t < L->tp; t++)
            for (int k = 0; k < 2; k++) {
                const run_link_dir *x = run_links_at(L, d, t, r, k);
                if (x->bandwidth <= 0) continue;
                double tm = x->latency + bytes / x->bandwidth;
                if (tm > *time) *time = tm, worst = x;
            }
    return worst;
}

double run_links_message_time(const run_links *L, int r, double bytes) {
    double tm = 0;
    if (r < 0 || r + 1 >= L->P) return 0;
    link_slowest(L, r, bytes, &tm);
    return tm;
}

void run_links_apply(const run_links *L, sim_costs *c, int r, double bytes) {
    double tm;
    if (r < 0 || r + 1 >= L->P || bytes <= 0) return;
    const run_link_dir *x = link_slowest(L, r, bytes, &tm);
    if (!x) return;
    int unsized = 0;
    for (int g = 0; g < c->n_stages; g++) unsized |= !(c->act_bytes[g] > 0);
    for (int g = 0; g < c->n_stages && unsized; g++) c->act_bytes[g] = bytes;
    sim_costs_set_link(c, r, r + 1, x->latency, -1, 0);
    /* the model's message of act_bytes holds the queue as long as the run's message of bytes did */
    sim_costs_set_link_rate(c, r, r + 1, x->bandwidth * c->act_bytes[0] / bytes);
}

char *run_links_describe(const run_links *L, char *buf, int n) {
    int at = 0;
    buf[0] = 0;
    for (int r = 0; r + 1 < L->P && at < n - 1; r++) {
        const run_link_dir *f = run_links_at(L, 0, 0, r, 0), *b = run_links_at(L, 0, 0, r, 1);
        at += snprintf(buf + at, (size_t)(n - at), "%slink %d-%d: %.2f/%.2f MB/s, %.3f ms (probe %.2f/%.2f MB/s; "
                       "%d/%d messages timed)", r ? "; " : "", r, r + 1, f->bandwidth / 1e6, b->bandwidth / 1e6,
                       f->latency * 1e3, f->probe_bw / 1e6, b->probe_bw / 1e6, f->n, b->n);
        if (at > n) at = n;
    }
    return buf;
}
