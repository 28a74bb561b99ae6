/* The simulator's cost model: construction, the --cost spec, the costs JSON file, slow links and
 * slow stages. Only parsing and storage; how costs turn into time is sim.c's business. */
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
    c->reduce = fill(n_stages, 0);
}

void sim_costs_free(sim_costs *c) {
    free(c->f); free(c->b); free(c->w); free(c->bw); free(c->act_bytes); free(c->reduce); free(c->links);
    memset(c, 0, sizeof *c);
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
    c->links[c->n_links++] = (sim_link){ a, b, latency, bandwidth, extra };
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
        return pt_seterr("--cost: '%s' should be KEY=NUMBER in 0..%g with KEY one of f, b, w, bw, act", item,
                         SIM_COST_MAX);
    size_t k = (size_t)(eq - item);
    double *dst = !strncmp(item, "f", k) && k == 1 ? c->f : !strncmp(item, "b", k) && k == 1 ? c->b
                : !strncmp(item, "w", k) && k == 1 ? c->w : !strncmp(item, "bw", k) && k == 2 ? c->bw
                : !strncmp(item, "act", k) && k == 3 ? c->act_bytes : NULL;
    if (!dst) return pt_seterr("--cost: unknown key in '%s' (known: f, b, w, bw, act)", item);
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

int sim_costs_add_slow_link(sim_costs *c, const char *spec, int n_ranks) {
    char buf[128];
    const char *colon = strchr(spec, ':'), *dash = strchr(spec, '-');
    int a, b;
    double extra;
    if (!colon || !dash || dash > colon || strlen(spec) >= sizeof buf) goto bad;
    memcpy(buf, spec, (size_t)(dash - spec)); buf[dash - spec] = 0;
    if (parse_int(buf, &a)) goto bad;
    memcpy(buf, dash + 1, (size_t)(colon - dash - 1)); buf[colon - dash - 1] = 0;
    if (parse_int(buf, &b) || parse_num(colon + 1, &extra) || extra < 0 || extra > SIM_COST_MAX) goto bad;
    if (a >= n_ranks || b >= n_ranks || a == b)
        return pt_seterr("--slow-link '%s': ranks must be two different ranks in 0..%d", spec, n_ranks - 1);
    sim_costs_set_link(c, a, b, -1, -1, extra);
    return 0;
bad:
    return pt_seterr("--slow-link '%s': expected I-J:SECONDS (ranks I, J; extra seconds per message in 0..%g)",
                     spec, SIM_COST_MAX);
}

int sim_costs_add_slow_stage(sim_costs *c, const char *spec) {
    char buf[64];
    const char *colon = strchr(spec, ':');
    int g;
    double k;
    if (!colon || (size_t)(colon - spec) >= sizeof buf) goto bad;
    memcpy(buf, spec, (size_t)(colon - spec)); buf[colon - spec] = 0;
    if (parse_int(buf, &g) || parse_num(colon + 1, &k) || k <= 0 || k > SIM_COST_MAX) goto bad;
    if (g >= c->n_stages) return pt_seterr("--slow-stage '%s': stage %d out of range 0..%d", spec, g, c->n_stages - 1);
    c->f[g] *= k; c->b[g] *= k; c->w[g] *= k;
    if (c->bw[g] >= 0) c->bw[g] *= k;
    return 0;
bad:
    return pt_seterr("--slow-stage '%s': expected I:FACTOR (stage I, factor > 0 and <= %g)", spec, SIM_COST_MAX);
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

/* "links": [{"a":0,"b":1,"latency":..,"bandwidth":..,"extra":..}, ...] */
static int json_links(sim_costs *c, const cJSON *root, int n_ranks, const char *path) {
    static const char *const known[] = { "a", "b", "latency", "bandwidth", "extra" };
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
        if (json_known_keys(l, known, 5, label, path) || json_link_rank(l, "a", i, n_ranks, path, &a) ||
            json_link_rank(l, "b", i, n_ranks, path, &b))
            return -1;
        if (a == b)
            return pt_seterr("%s: links[%d] joins rank %d to itself; a link needs two different ranks", path, i, a);
        double lat = -1, bw = -1, extra = 0;
        char l_lat[40], l_bw[40], l_ex[40];
        snprintf(l_lat, sizeof l_lat, "links[%d].latency", i);
        snprintf(l_bw, sizeof l_bw, "links[%d].bandwidth", i);
        snprintf(l_ex, sizeof l_ex, "links[%d].extra", i);
        if (json_scalar_as(l, "latency", l_lat, &lat, path) || json_scalar_as(l, "bandwidth", l_bw, &bw, path) ||
            json_scalar_as(l, "extra", l_ex, &extra, path))
            return -1;
        sim_costs_set_link(c, a, b, lat, bw, extra);
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
