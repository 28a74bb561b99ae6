/* The simulator's cost model: construction, the --cost spec, the costs JSON file, slow links and
 * slow stages (for good or over a window of iterations), and the costs as they stand in one
 * iteration. Only parsing and storage; how costs turn into time is sim.c's business. */
#include "sim/sim.h"
#include "io/json.h"
#include "util/pt.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static double *fill(int n, double v) {
    double *x = pt_malloc(sizeof(double) * (size_t)(n ? n : 1));
    for (int i = 0; i < n; i++) x[i] = v;
    return x;
}

void sim_costs_init(sim_costs *c, int n_stages, double f, double b, double w) {
    memset(c, 0, sizeof *c);
    c->n_stages = n_stages;
    c->f = fill(n_stages, f);
    c->b = fill(n_stages, b);
    c->w = fill(n_stages, w);
    c->bw = fill(n_stages, -1);
    c->act_bytes = fill(n_stages, 0);
    c->param_bytes = fill(n_stages, 0);
    c->reduce = fill(n_stages, 0);
    c->tp = 1;
    c->tp_f = fill(n_stages, 0);
    c->tp_b = fill(n_stages, 0);
}

void sim_costs_free(sim_costs *c) {
    free(c->f); free(c->b); free(c->w); free(c->bw); free(c->act_bytes); free(c->param_bytes); free(c->reduce); free(c->links);
    free(c->faults); free(c->tp_f); free(c->tp_b);
    free(c->att_f); free(c->att_b); free(c->kv_bytes);
    memset(c, 0, sizeof *c);
}

static double *dup_doubles(const double *x, int n) {
    double *y = pt_malloc(sizeof(double) * (size_t)(n ? n : 1));
    if (n) memcpy(y, x, sizeof(double) * (size_t)n);
    return y;
}

void sim_costs_copy(const sim_costs *c, sim_costs *out) {
    int S = c->n_stages;
    *out = *c;
    out->f = dup_doubles(c->f, S), out->b = dup_doubles(c->b, S), out->w = dup_doubles(c->w, S);
    out->bw = dup_doubles(c->bw, S), out->act_bytes = dup_doubles(c->act_bytes, S);
    out->reduce = dup_doubles(c->reduce, S), out->param_bytes = dup_doubles(c->param_bytes, S);
    out->tp_f = dup_doubles(c->tp_f, S), out->tp_b = dup_doubles(c->tp_b, S);
    out->att_f = c->att_f ? dup_doubles(c->att_f, S) : NULL;
    out->att_b = c->att_b ? dup_doubles(c->att_b, S) : NULL;
    out->kv_bytes = c->kv_bytes ? dup_doubles(c->kv_bytes, S) : NULL;
    out->links = pt_malloc(sizeof(sim_link) * (size_t)(c->n_links ? c->n_links : 1));
    if (c->n_links) memcpy(out->links, c->links, sizeof(sim_link) * (size_t)c->n_links);
    out->faults = pt_malloc(sizeof(sim_fault) * (size_t)(c->n_faults ? c->n_faults : 1));
    if (c->n_faults) memcpy(out->faults, c->faults, sizeof(sim_fault) * (size_t)c->n_faults);
}

static void scale_stage(sim_costs *c, int g, double k) {
    c->f[g] *= k; c->b[g] *= k; c->w[g] *= k;
    if (c->bw[g] >= 0) c->bw[g] *= k;
    if (c->att_f) { c->att_f[g] *= k; c->att_b[g] *= k; }
}

void sim_costs_seq_chunks(sim_costs *c) {
    if (c->att_f) return;
    c->att_f = fill(c->n_stages, 0);
    c->att_b = fill(c->n_stages, 0);
    c->kv_bytes = fill(c->n_stages, 0);
}

bool sim_fault_active(const sim_fault *x, int iter) {
    return iter >= x->from && (x->to == 0 || iter <= x->to);
}

static bool link_is(const sim_link *l, int a, int b) {
    return (l->a == a && l->b == b) || (l->a == b && l->b == a);
}

/* The slower of two rates (0: none). */
static double slower_rate(double x, double y) {
    return x > 0 && (y <= 0 || x < y) ? x : y;
}

void sim_costs_at(const sim_costs *c, int iter, sim_costs *out) {
    sim_costs_copy(c, out);
    out->n_faults = 0;
    for (int i = 0; i < c->n_faults; i++) {
        const sim_fault *x = &c->faults[i];
        if (!sim_fault_active(x, iter)) continue;
        if (x->link && x->rate > 0) {
            double now = 0;
            for (int k = 0; k < out->n_links; k++)
                if (link_is(&out->links[k], x->a, x->b)) now = out->links[k].rate;
            sim_costs_set_link_rate(out, x->a, x->b, slower_rate(now, x->rate));
        } else if (x->link) {
            sim_costs_set_link(out, x->a, x->b, -1, -1, x->amount);
        } else {
            scale_stage(out, x->a, x->amount);
        }
    }
}

double sim_costs_link_busy(const sim_costs *c, int a, int b, double bytes) {
    double rate = 0;
    for (int i = 0; i < c->n_links; i++)
        if (link_is(&c->links[i], a, b)) rate = slower_rate(rate, c->links[i].rate);
    return rate > 0 && bytes > 0 ? bytes / rate : 0;
}

double sim_costs_message_time(const sim_costs *c, int a, int b, double bytes) {
    double lat = c->latency, bw = c->bandwidth, extra = 0;
    for (int i = 0; i < c->n_links; i++) {
        const sim_link *l = &c->links[i];
        if (!link_is(l, a, b)) continue;
        if (l->latency >= 0) lat = l->latency;
        if (l->bandwidth >= 0) bw = l->bandwidth;
        extra += l->extra;
    }
    return lat + (bw > 0 && bytes > 0 ? bytes / bw : 0) + sim_costs_link_busy(c, a, b, bytes) + extra;
}

double sim_allreduce_time(int n, double bytes, int collectives, double bandwidth, double latency) {
    if (n <= 1) return 0;
    return 2.0 * (n - 1) / n * bytes / bandwidth + collectives * 2.0 * (n - 1) * latency;
}

double sim_rsag_time(int n, double bytes, int collectives, double bandwidth, double latency) {
    if (n <= 1) return 0;
    return (n - 1.0) / n * bytes / bandwidth + collectives * (n - 1.0) * latency;
}

void sim_costs_set_link(sim_costs *c, int a, int b, double latency, double bandwidth, double extra) {
    for (int i = 0; i < c->n_links; i++) {
        sim_link *l = &c->links[i];
        if ((l->a == a && l->b == b) || (l->a == b && l->b == a)) {
            if (latency >= 0) l->latency = latency;
            if (bandwidth >= 0) l->bandwidth = bandwidth;
            l->extra += extra;
            return;
        }
    }
    sim_link *links = pt_malloc(sizeof *links * (size_t)(c->n_links + 1));
    if (c->n_links) memcpy(links, c->links, sizeof *links * (size_t)c->n_links);
    free(c->links);
    c->links = links;
    c->links[c->n_links++] = (sim_link){ a, b, latency, bandwidth, extra, 0 };
}

void sim_costs_set_link_rate(sim_costs *c, int a, int b, double rate) {
    sim_costs_set_link(c, a, b, -1, -1, 0);     /* the override, if the link had none */
    for (int i = 0; i < c->n_links; i++)
        if (link_is(&c->links[i], a, b)) c->links[i].rate = rate > 0 ? rate : 0;
}

/* Strict number: the whole string, finite. */
static int parse_num(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) return -1;
    *out = v;
    return 0;
}

static int parse_int(const char *s, int *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < 0 || v > 1000000000L) return -1;
    *out = (int)v;
    return 0;
}

/* One "key=value" of a --cost spec, applied to every stage. */
static int spec_item(sim_costs *c, const char *item) {
    const char *eq = strchr(item, '=');
    double v;
    if (!eq || parse_num(eq + 1, &v) || v < 0 || v > SIM_COST_MAX)
        return pt_seterr("--cost: '%s' should be KEY=NUMBER in 0..%g with KEY one of f, b, w, bw, act, params", item,
                         SIM_COST_MAX);
    size_t k = (size_t)(eq - item);
    double *dst = !strncmp(item, "f", k) && k == 1 ? c->f : !strncmp(item, "b", k) && k == 1 ? c->b
                : !strncmp(item, "w", k) && k == 1 ? c->w : !strncmp(item, "bw", k) && k == 2 ? c->bw
                : !strncmp(item, "act", k) && k == 3 ? c->act_bytes
                : !strncmp(item, "params", k) && k == 6 ? c->param_bytes : NULL;
    if (!dst) return pt_seterr("--cost: unknown key in '%s' (known: f, b, w, bw, act, params)", item);
    for (int g = 0; g < c->n_stages; g++) dst[g] = v;
    return 0;
}

int sim_costs_parse_spec(sim_costs *c, const char *spec) {
    char buf[256];
    if (strlen(spec) >= sizeof buf) return pt_seterr("--cost: spec too long");
    strcpy(buf, spec);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
        if (spec_item(c, tok)) return -1;
    return 0;
}

/* Splits "BODY[@FROM-TO]" into body (copied into buf) and the window (counted in `unit`, e.g.
 * "iterations"); *from = 0 when there is none. Returns 0, or -1 with an error naming flag and spec. */
static int parse_window(const char *flag, const char *spec, const char *unit, char *buf, size_t n, int *from,
                        int *to) {
    const char *at = strchr(spec, '@');
    size_t len = at ? (size_t)(at - spec) : strlen(spec);
    if (len >= n) return pt_seterr("%s '%s': too long", flag, spec);
    memcpy(buf, spec, len), buf[len] = 0;
    *from = *to = 0;
    if (!at) return 0;
    char w[64];
    const char *dash = strchr(at + 1, '-');
    if (!dash || strlen(at + 1) >= sizeof w) goto bad;
    memcpy(w, at + 1, (size_t)(dash - at - 1)), w[dash - at - 1] = 0;
    if (parse_int(w, from) || (dash[1] && parse_int(dash + 1, to))) goto bad;
    if (*from < 1)
        return pt_seterr("%s '%s': %s count from 1 (got FROM %d)", flag, spec, unit, *from);
    if (*to && *from > *to)
        return pt_seterr("%s '%s': FROM %d is after TO %d (the window FROM-TO is inclusive; \"@%d-\" runs to "
                         "the end)", flag, spec, *from, *to, *from);
    return 0;
bad:
    return pt_seterr("%s '%s': the window after '@' must be FROM-TO or FROM- (%s, 1-based, inclusive)",
                     flag, spec, unit);
}

/* Keeps fault f (its window: from 0 means none, i.e. 1 to the end) with its flag's text. */
static void add_fault(sim_costs *c, sim_fault f, const char *spec) {
    sim_fault *x = pt_malloc(sizeof *x * (size_t)(c->n_faults + 1));
    if (c->n_faults) memcpy(x, c->faults, sizeof *x * (size_t)c->n_faults);
    free(c->faults);
    c->faults = x;
    if (!f.from) f.from = 1, f.to = 0;
    snprintf(f.spec, sizeof f.spec, "%s", spec);
    c->faults[c->n_faults++] = f;
}

/* Units of a --slow-link RATE: the factor to bytes per second of the text after the prefix. */
static const struct { const char *name; double bytes; } rate_units[] = {
    { "bit", 0.125 }, { "bit/s", 0.125 }, { "B/s", 1 },
};

/* "30Mbit", "4MB/s": a number, an optional decimal prefix (k, M, G, either case) and a unit of
 * rate_units. Returns 1 with *rate in bytes per second, 0 when text has no unit (a plain number:
 * SECONDS), -1 on a unit not known. */
static int parse_rate(const char *text, double *rate) {
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || !*end || !isfinite(v)) return 0;
    double k = 1;
    if (strchr("kK", *end)) k = 1e3, end++;
    else if (strchr("mM", *end)) k = 1e6, end++;
    else if (strchr("gG", *end)) k = 1e9, end++;
    for (size_t i = 0; i < sizeof rate_units / sizeof rate_units[0]; i++)
        if (!strcmp(end, rate_units[i].name)) {
            *rate = v * k * rate_units[i].bytes;
            return 1;
        }
    return -1;
}

/* --slow-link's spec into a fault: SECONDS or a RATE (the simulator's and the runtime's flag alike;
 * windows counted in `unit`). */
static int add_slow_link(sim_costs *c, const char *spec, int n_ranks, const char *unit) {
    char body[128], buf[128];
    int a, b, from, to;
    double extra = 0, rate = 0;
    if (parse_window("--slow-link", spec, unit, body, sizeof body, &from, &to)) return -1;
    const char *colon = strchr(body, ':'), *dash = strchr(body, '-');
    if (!colon || !dash || dash > colon) goto bad;
    memcpy(buf, body, (size_t)(dash - body)); buf[dash - body] = 0;
    if (parse_int(buf, &a)) goto bad;
    memcpy(buf, dash + 1, (size_t)(colon - dash - 1)); buf[colon - dash - 1] = 0;
    if (parse_int(buf, &b)) goto bad;
    int kind = parse_rate(colon + 1, &rate);
    if (kind < 0)
        return pt_seterr("--slow-link '%s': unknown unit in '%s' (SECONDS is a plain number; a RATE ends in bit, "
                         "kbit, Mbit, Gbit or B/s, kB/s, MB/s, GB/s)", spec, colon + 1);
    if (kind == 1 && !(rate > 0 && rate <= SIM_COST_MAX))
        return pt_seterr("--slow-link '%s': RATE must be above 0 and at most %g bytes/s (got %g)", spec, SIM_COST_MAX,
                         rate);
    if (kind == 0 && parse_num(colon + 1, &extra)) goto bad;
    if (extra < 0 || extra > SIM_COST_MAX)
        return pt_seterr("--slow-link '%s': SECONDS must be in 0..%g (got %g)", spec, SIM_COST_MAX, extra);
    if (a >= n_ranks || b >= n_ranks)
        return pt_seterr("--slow-link '%s': rank %d is not in the pipeline (ranks must be in 0..%d)", spec,
                         a >= n_ranks ? a : b, n_ranks - 1);
    if (a == b) return pt_seterr("--slow-link '%s': a link joins two different ranks (ranks must differ)", spec);
    add_fault(c, (sim_fault){ .link = true, .a = a, .b = b, .amount = extra, .rate = rate, .from = from, .to = to },
              spec);
    return 0;
bad:
    return pt_seterr("--slow-link '%s': expected I-J:SECONDS[@FROM-TO] or I-J:RATE[@FROM-TO] (e.g. 30Mbit, "
                     "4MB/s) (ranks I, J; extra seconds per message in 0..%g; %s FROM..TO)", spec, SIM_COST_MAX, unit);
}

int sim_costs_add_slow_link(sim_costs *c, const char *spec, int n_ranks) {
    return add_slow_link(c, spec, n_ranks, "iterations");
}

int sim_costs_add_slow_link_in(sim_costs *c, const char *spec, int n_ranks, const char *unit) {
    return add_slow_link(c, spec, n_ranks, unit);
}

int sim_costs_add_slow_stage(sim_costs *c, const char *spec) {
    return sim_costs_add_slow_stage_in(c, spec, "iterations");
}

int sim_costs_add_slow_stage_in(sim_costs *c, const char *spec, const char *unit) {
    char body[64], buf[64];
    int g, from, to;
    double k;
    if (parse_window("--slow-stage", spec, unit, body, sizeof body, &from, &to)) return -1;
    const char *colon = strchr(body, ':');
    if (!colon) goto bad;
    memcpy(buf, body, (size_t)(colon - body)); buf[colon - body] = 0;
    if (parse_int(buf, &g) || parse_num(colon + 1, &k)) goto bad;
    if (!(k >= 1) || k > SIM_COST_MAX)
        return pt_seterr("--slow-stage '%s': FACTOR must be in 1..%g (a slow stage takes FACTOR times as long; "
                         "got %g)", spec, SIM_COST_MAX, k);
    if (g >= c->n_stages) return pt_seterr("--slow-stage '%s': stage %d out of range 0..%d", spec, g, c->n_stages - 1);
    add_fault(c, (sim_fault){ .link = false, .a = g, .b = -1, .amount = k, .from = from, .to = to }, spec);
    return 0;
bad:
    return pt_seterr("--slow-stage '%s': expected I:FACTOR[@FROM-TO] (stage I, factor in 1..%g; %s "
                     "FROM..TO)", spec, SIM_COST_MAX, unit);
}

/* Whether a message of s goes between ranks a and b (either way); *bytes gets the most bytes one
 * of them carries under c (a message across g -> g+1, either way, carries act_bytes[g]). */
static bool sched_talks(const sched *s, const sim_costs *c, int a, int b, double *bytes) {
    bool talks = false;
    *bytes = 0;
    for (int g = 0; g < s->n_stages; g++) {
        int n = sched_stage_next(s, g);
        if (n < 0) continue;
        int x = s->stage_rank[g], y = s->stage_rank[n];
        if (!((x == a && y == b) || (x == b && y == a))) continue;
        talks = true;
        if (g < c->n_stages && c->act_bytes[g] > *bytes) *bytes = c->act_bytes[g];
    }
    return talks;
}

int sim_costs_check_faults(const sim_costs *c, const sched *s, int n_iters) {
    for (int i = 0; i < c->n_faults; i++) {
        const sim_fault *x = &c->faults[i];
        const char *flag = x->link ? "--slow-link" : "--slow-stage";
        double bytes = 0;
        if (x->link && !sched_talks(s, c, x->a, x->b, &bytes))
            return pt_seterr("%s '%s': ranks %d and %d exchange no messages in %s (messages go between the "
                             "ranks of neighbouring stages); a slow link there changes nothing", flag, x->spec,
                             x->a, x->b, s->name[0] ? s->name : "this schedule");
        if (x->link && x->rate > 0 && bytes <= 0)
            return pt_seterr("%s '%s': the messages between ranks %d and %d carry 0 bytes in this cost model, so a "
                             "bandwidth changes nothing (give their size: --act-bytes N, --cost ...,act=N or a "
                             "costs file's act_bytes)", flag, x->spec, x->a, x->b);
        if (x->from > n_iters)
            return pt_seterr("%s '%s': starts at iteration %d, after the last (--iterations %d)", flag, x->spec,
                             x->from, n_iters);
    }
    return 0;
}

/* Every key of obj must be one of known[n]; the error names the key, where it is (`label`) and
 * the known ones. */
static int json_known_keys(const cJSON *obj, const char *const *known, int n, const char *label, const char *path) {
    for (const cJSON *x = obj->child; x; x = x->next) {
        int i = 0;
        while (i < n && strcmp(x->string, known[i])) i++;
        if (i < n) continue;
        char list[256] = "";
        for (int j = 0; j < n; j++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", j ? ", " : "", known[j]);
        return pt_seterr("%s: unknown field '%s'%s (known: %s)", path, x->string, label, list);
    }
    return 0;
}

/* Reads field `name` of obj into dst[S]: a number (every stage) or an array of S numbers in
 * 0..SIM_COST_MAX. Absent: dst unchanged. */
static int json_stage_field(const cJSON *obj, const char *name, double *dst, int S, const char *path) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (!v) return 0;
    if (cJSON_IsNumber(v)) {
        if (!io_json_is_num(v, 0, SIM_COST_MAX))
            return pt_seterr("%s: field '%s' = %g must be a finite number in 0..%g", path, name, v->valuedouble,
                             SIM_COST_MAX);
        for (int g = 0; g < S; g++) dst[g] = v->valuedouble;
        return 0;
    }
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != S)
        return pt_seterr("%s: field '%s' must be a number or an array of %d numbers (one per stage)", path, name, S);
    int g = 0;
    for (const cJSON *x = v->child; x; x = x->next, g++) {
        if (!io_json_is_num(x, 0, SIM_COST_MAX))
            return pt_seterr("%s: field '%s'[%d] must be a finite number in 0..%g", path, name, g, SIM_COST_MAX);
        dst[g] = x->valuedouble;
    }
    return 0;
}

/* Reads an optional scalar in 0..SIM_COST_MAX; errors call it `label` (e.g. "links[1].latency"). */
static int json_scalar_as(const cJSON *obj, const char *name, const char *label, double *dst, const char *path) {
    int rc = io_json_num(dst, obj, name, IO_JSON_OPTIONAL, 0, SIM_COST_MAX,
                         "%s: field '%s' must be a finite number in 0..%g", path, label, SIM_COST_MAX);
    return rc < 0 ? -1 : 0;
}

static int json_scalar(const cJSON *obj, const char *name, double *dst, const char *path) {
    return json_scalar_as(obj, name, name, dst, path);
}

/* links[i].a or .b: a whole number, a rank in 0..n_ranks-1 (n_ranks <= 0: any >= 0). */
static int json_link_rank(const cJSON *l, const char *name, int i, int n_ranks, const char *path, int *out) {
    if (io_json_int(out, l, name, IO_JSON_REQUIRED, 0, 1000000000,
                    "%s: links[%d].%s must be a rank (a whole number >= 0)", path, i, name) < 0)
        return -1;
    if (n_ranks > 0 && *out >= n_ranks)
        return pt_seterr("%s: links[%d].%s = %g is not a rank (ranks 0..%d)", path, i, name, (double)*out,
                         n_ranks - 1);
    return 0;
}

/* "links": [{"a":0,"b":1,"latency":..,"bandwidth":..,"extra":..,"rate":..}, ...] */
static int json_links(sim_costs *c, const cJSON *root, int n_ranks, const char *path) {
    static const char *const known[] = { "a", "b", "latency", "bandwidth", "extra", "rate" };
    const cJSON *links = cJSON_GetObjectItemCaseSensitive(root, "links");
    if (!links) return 0;
    if (!cJSON_IsArray(links)) return pt_seterr("%s: field 'links' must be an array of objects", path);
    int i = 0;
    for (const cJSON *l = links->child; l; l = l->next, i++) {
        int a, b;
        char label[48];
        snprintf(label, sizeof label, " in links[%d]", i);
        if (!cJSON_IsObject(l))
            return pt_seterr("%s: links[%d] must be an object with ranks 'a' and 'b'", path, i);
        if (json_known_keys(l, known, 6, label, path) || json_link_rank(l, "a", i, n_ranks, path, &a) ||
            json_link_rank(l, "b", i, n_ranks, path, &b))
            return -1;
        if (a == b)
            return pt_seterr("%s: links[%d] joins rank %d to itself; a link needs two different ranks", path, i, a);
        double lat = -1, bw = -1, extra = 0, rate = 0;
        char l_lat[40], l_bw[40], l_ex[40], l_rate[40];
        snprintf(l_lat, sizeof l_lat, "links[%d].latency", i);
        snprintf(l_bw, sizeof l_bw, "links[%d].bandwidth", i);
        snprintf(l_ex, sizeof l_ex, "links[%d].extra", i);
        snprintf(l_rate, sizeof l_rate, "links[%d].rate", i);
        if (json_scalar_as(l, "latency", l_lat, &lat, path) || json_scalar_as(l, "bandwidth", l_bw, &bw, path) ||
            json_scalar_as(l, "extra", l_ex, &extra, path) || json_scalar_as(l, "rate", l_rate, &rate, path))
            return -1;
        sim_costs_set_link(c, a, b, lat, bw, extra);
        if (rate > 0) sim_costs_set_link_rate(c, a, b, rate);
    }
    return 0;
}

#define PROFILE_COSTS_FORMAT "pipetrain-costs/1"   /* plan_cost.c's; plan sits above sim */

/* The optional "format": SIM_COSTS_FORMAT. A profile's costs file is recognised by its format. */
static int json_check_format(const cJSON *root, const char *path) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, "format");
    const char *s = cJSON_IsString(f) ? f->valuestring : NULL;
    if (!f || (s && !strcmp(s, SIM_COSTS_FORMAT))) return 0;
    if (s && !strcmp(s, PROFILE_COSTS_FORMAT))
        return pt_seterr("%s is a profile costs file (" PROFILE_COSTS_FORMAT ") for `plan --costs`; simulate "
                         "--costs takes a simulator costs file (format \"" SIM_COSTS_FORMAT "\": per-stage f, "
                         "b, w, ..., see docs/simulator.md)", path);
    return pt_seterr("%s: format is %s%s%s, not \"" SIM_COSTS_FORMAT "\" (simulate --costs takes a simulator "
                     "costs file, see docs/simulator.md)", path, s ? "\"" : "", s ? s : "not a string", s ? "\"" : "");
}

int sim_costs_load_json(sim_costs *c, const char *path, int n_ranks) {
    static const char *const known[] = { "f", "b", "w", "bw", "act_bytes", "reduce", "step", "latency",
                                         "bandwidth", "links", "format" };
    size_t len;
    char *text = pt_read_file(path, &len);
    if (!text) return -1;
    cJSON *root = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return pt_seterr("%s: not a JSON object (see docs/simulator.md for the costs format)", path);
    }
    int S = c->n_stages, rc = -1;
    if (json_check_format(root, path) || json_known_keys(root, known, 11, "", path) ||
        json_stage_field(root, "f", c->f, S, path) || json_stage_field(root, "b", c->b, S, path) ||
        json_stage_field(root, "w", c->w, S, path) || json_stage_field(root, "bw", c->bw, S, path) ||
        json_stage_field(root, "act_bytes", c->act_bytes, S, path) ||
        json_stage_field(root, "reduce", c->reduce, S, path) || json_scalar(root, "step", &c->step, path) ||
        json_scalar(root, "latency", &c->latency, path) || json_scalar(root, "bandwidth", &c->bandwidth, path) ||
        json_links(c, root, n_ranks, path))
        goto done;
    rc = 0;
done:
    cJSON_Delete(root);
    return rc;
}
