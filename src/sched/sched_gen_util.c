/* What the generators share and nothing else: the parameter checks every generator makes, the
 * linear placement (stage g on rank g), and the costs and delays of the cost-aware generators.
 * It calls no generator (the registry and dispatch are sched_registry.c), so generators and
 * dispatch never call each other in a loop. Pure: no I/O. */
#include "sched/gen.h"
#include "util/pt.h"
#include <math.h>

int gen_check_common(const char *name, const sched_params *p) {
    if (!p) return pt_seterr("schedule %s: no parameters", name);
    if (p->ranks < 1) return pt_seterr("schedule %s: ranks must be >= 1 (got %d)", name, p->ranks);
    if (p->microbatches < 1)
        return pt_seterr("schedule %s: microbatches must be >= 1 (got %d)", name, p->microbatches);
    if (p->chunks < 0) return pt_seterr("schedule %s: chunks must be >= 0 (got %d)", name, p->chunks);
    if (p->seq_chunks < 0)
        return pt_seterr("schedule %s: seq_chunks must be >= 0 (got %d)", name, p->seq_chunks);
    return 0;
}

sched *gen_new_linear(const char *name, const sched_params *p) {
    int K = gen_seq_chunks(p);
    sched *s = sched_new(p->ranks, p->ranks, 1, p->microbatches * K);
    s->seq_chunks = K;
    snprintf(s->name, sizeof s->name, "%s", name);
    return s;
}

int gen_seq_chunks(const sched_params *p) { return p->seq_chunks > 1 ? p->seq_chunks : 1; }

int gen_seq_backward_unit(int i, int K) { return i / K * K + K - 1 - i % K; }

int gen_stage_costs(const char *name, const sched_params *p, int S, double *f, double *b, double *w) {
    const double *arr[3] = { p->stage_cost_f, p->stage_cost_b, p->stage_cost_w };
    const double uni[3] = { p->cost_f, p->cost_b, p->cost_w };
    const char *nm[3] = { "f", "b", "w" };
    double *out[3] = { f, b, w };
    for (int g = 0; p->stage_slowdown && g < S; g++)
        if (!(p->stage_slowdown[g] > 0) || !isfinite(p->stage_slowdown[g]))
            return pt_seterr("schedule %s: stage_slowdown[%d] must be a finite factor > 0 (got %g)", name, g,
                             p->stage_slowdown[g]);
    for (int k = 0; k < 3; k++) {
        if (uni[k] < 0) return pt_seterr("schedule %s: cost_%s must be >= 0 (got %g)", name, nm[k], uni[k]);
        for (int g = 0; g < S; g++) {
            double c = arr[k] ? arr[k][g] : (uni[k] > 0 ? uni[k] : 1.0);
            if (!(c > 0) || !isfinite(c))
                return pt_seterr("schedule %s: stage_cost_%s[%d] must be > 0 (got %g)", name, nm[k], g, c);
            out[k][g] = c * (p->stage_slowdown ? p->stage_slowdown[g] : 1.0);
        }
    }
    return 0;
}

/* out[g] = scale * per_link[r] for stages g, g+1 on neighbouring ranks r, r+1 (either order), else
 * 0; all 0 without per_link, which must hold finite times >= 0 (the error calls it `what`). */
static int edge_values(const char *name, const char *what, const double *per_link, const sched_params *p,
                       const int *stage_rank, int S, double scale, double *out) {
    for (int r = 0; per_link && r + 1 < p->ranks; r++)
        if (!(per_link[r] >= 0) || !isfinite(per_link[r]))
            return pt_seterr("schedule %s: %s[%d] (ranks %d-%d) must be a finite time >= 0 (got %g)", name, what,
                             r, r, r + 1, per_link[r]);
    for (int g = 0; g < S; g++) {
        int a = stage_rank[g], b = g + 1 < S ? stage_rank[g + 1] : a;
        int lo = a < b ? a : b;
        out[g] = per_link && (a - b == 1 || b - a == 1) ? scale * per_link[lo] : 0;
    }
    return 0;
}

int gen_edge_delays(const char *name, const sched_params *p, const int *stage_rank, int S, double scale,
                    double *out) {
    return edge_values(name, "link_delay", p->link_delay, p, stage_rank, S, scale, out);
}

int gen_edge_busy(const char *name, const sched_params *p, const int *stage_rank, int S, double scale,
                  double *out) {
    return edge_values(name, "link_busy", p->link_busy, p, stage_rank, S, scale, out);
}
