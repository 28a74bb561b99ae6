/* Cluster descriptions for the planner: nodes of devices (FLOP/s or relative speed, memory),
 * links inside a node and between nodes, read from JSON (schema in docs/planner.md). Only parsing
 * and storage; placing pipelines on devices is plan_search.c's business. */
#include "plan/plan.h"
#include "io/json.h"
#include "util/pt.h"
#include <cjson/cJSON.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEVICES 1048576   /* a sanity bound on nodes x repeat x count */

void plan_cluster_free(plan_cluster *c) {
    free(c->dev); free(c->intra_bw); free(c->intra_lat);
    memset(c, 0, sizeof *c);
}

/* Number field: absent leaves *out (an error when required); present must be finite and > 0
 * (>= 0 when zero_ok). 0 or -1. */
static int num_field(const cJSON *o, const char *key, const char *where, const char *path, bool zero_ok,
                     bool required, double *out) {
    int rc = io_json_num(out, o, key, required ? IO_JSON_REQUIRED : IO_JSON_OPTIONAL, zero_ok ? 0 : DBL_TRUE_MIN,
                         DBL_MAX, "%s: %s.%s must be a %s number", where, path, key,
                         zero_ok ? "non-negative" : "positive");
    return rc < 0 ? -1 : 0;
}

static int whole_field(const cJSON *o, const char *key, const char *where, const char *path, bool required,
                       int *out) {
    double v = *out;
    if (num_field(o, key, where, path, false, required, &v) < 0) return -1;
    if (v != floor(v) || v > MAX_DEVICES)
        return pt_seterr("%s: %s.%s must be a whole number from 1 to %d", where, path, key, MAX_DEVICES);
    *out = (int)v;
    return 0;
}

/* A link object {"bandwidth": bytes/s, "latency": s}. */
static int link_field(const cJSON *o, const char *key, const char *where, const char *path, double *bw,
                      double *lat) {
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(o, key);
    char sub[96];
    snprintf(sub, sizeof sub, "%s%s%s", path, *path ? "." : "", key);
    if (!cJSON_IsObject(l))
        return pt_seterr("%s: %s must be an object {\"bandwidth\": bytes/s, \"latency\": seconds}", where, sub);
    if (num_field(l, "bandwidth", where, sub, false, true, bw) < 0) return -1;
    return num_field(l, "latency", where, sub, true, true, lat);
}

/* One device description: the template every device of the node copies. */
static int device_field(const cJSON *node, const char *where, const char *path, plan_device *d, int *count) {
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(node, "devices");
    char sub[96];
    snprintf(sub, sizeof sub, "%s.devices", path);
    if (!cJSON_IsObject(o))
        return pt_seterr("%s: %s must be an object {count, name, flops or speed, memory}", where, sub);
    memset(d, 0, sizeof *d);
    *count = 1;
    double flops = 0, eff = 0.5;
    if (whole_field(o, "count", where, sub, true, count) < 0) return -1;
    if (num_field(o, "memory", where, sub, false, true, &d->memory) < 0) return -1;
    if (num_field(o, "flops", where, sub, false, false, &flops) < 0) return -1;
    if (num_field(o, "efficiency", where, sub, false, false, &eff) < 0) return -1;
    if (num_field(o, "speed", where, sub, false, false, &d->speed) < 0) return -1;
    if (eff > 1) return pt_seterr("%s: %s.efficiency must be in (0, 1] (achieved fraction of peak)", where, sub);
    if ((flops > 0) == (d->speed > 0))
        return pt_seterr("%s: %s needs exactly one of flops (peak FLOP/s) and speed (relative)", where, sub);
    d->rate = flops * eff;
    const char *name = "device";
    if (io_json_str(&name, o, "name", IO_JSON_OPTIONAL, 0, "%s: %s.name must be a string", where, sub) < 0) return -1;
    snprintf(d->name, sizeof d->name, "%s", name);
    return 0;
}

/* Class id: devices with the same name, rate, speed and memory share one. */
static int class_of(plan_cluster *c, const plan_device *d, int n_before) {
    for (int i = 0; i < n_before; i++) {
        const plan_device *e = &c->dev[i];
        if (!strcmp(e->name, d->name) && e->rate == d->rate && e->speed == d->speed && e->memory == d->memory)
            return e->cls;
    }
    return c->n_classes++;
}

static void push_node(plan_cluster *c, const plan_device *tmpl, int count, double bw, double lat) {
    int n = c->n_nodes++;
    c->intra_bw = pt_realloc(c->intra_bw, sizeof(double) * (size_t)c->n_nodes);
    c->intra_lat = pt_realloc(c->intra_lat, sizeof(double) * (size_t)c->n_nodes);
    c->intra_bw[n] = bw; c->intra_lat[n] = lat;
    c->dev = pt_realloc(c->dev, sizeof(plan_device) * (size_t)(c->n_devices + count));
    int cls = class_of(c, tmpl, c->n_devices);
    for (int i = 0; i < count; i++) {
        plan_device *d = &c->dev[c->n_devices++];
        *d = *tmpl;
        d->node = n;
        d->cls = cls;
    }
}

static int parse_node(plan_cluster *c, const cJSON *node, int i, const char *where) {
    char path[32];
    snprintf(path, sizeof path, "nodes[%d]", i);
    if (!cJSON_IsObject(node)) return pt_seterr("%s: %s must be an object", where, path);
    plan_device tmpl;
    int count = 1, repeat = 1;
    double bw = 0, lat = 0;
    if (device_field(node, where, path, &tmpl, &count) < 0) return -1;
    if (whole_field(node, "repeat", where, path, false, &repeat) < 0) return -1;
    if (link_field(node, "link", where, path, &bw, &lat) < 0) return -1;
    if ((double)c->n_devices + (double)repeat * count > MAX_DEVICES)
        return pt_seterr("%s: %s: more than %d devices in all", where, path, MAX_DEVICES);
    for (int r = 0; r < repeat; r++) push_node(c, &tmpl, count, bw, lat);
    return 0;
}

static int parse_root(plan_cluster *c, const cJSON *root, const char *where) {
    if (!cJSON_IsObject(root)) return pt_seterr("%s: not a JSON object (see docs/planner.md for the cluster schema)", where);
    const cJSON *nodes = cJSON_GetObjectItemCaseSensitive(root, "nodes");
    if (!cJSON_IsArray(nodes) || cJSON_GetArraySize(nodes) < 1)
        return pt_seterr("%s: nodes must be a non-empty array of nodes", where);
    int i = 0;
    for (const cJSON *n = nodes->child; n; n = n->next, i++)
        if (parse_node(c, n, i, where) < 0) return -1;
    c->reference_flops = 1e10;
    if (num_field(root, "reference_flops", where, "cluster", false, false, &c->reference_flops) < 0) return -1;
    if (c->n_nodes > 1) return link_field(root, "network", where, "", &c->inter_bw, &c->inter_lat);
    c->inter_bw = c->intra_bw[0];
    c->inter_lat = c->intra_lat[0];
    return 0;
}

void plan_cluster_group_link(const plan_cluster *k, const int *dev, int n, double *bw, double *lat) {
    int node = k->dev[dev[0]].node;
    bool one = true;
    for (int i = 1; i < n; i++) one = one && k->dev[dev[i]].node == node;
    *bw = one ? k->intra_bw[node] : k->inter_bw;
    *lat = one ? k->intra_lat[node] : k->inter_lat;
}

bool plan_cluster_tp_fits_nodes(const plan_cluster *k, int tp) {
    int start = 0;
    for (int i = 1; i <= k->n_devices; i++)   /* node-major: a node is a run of devices */
        if (i == k->n_devices || k->dev[i].node != k->dev[start].node) {
            if ((i - start) % tp) return false;
            start = i;
        }
    return true;
}

int plan_cluster_parse(plan_cluster *c, const char *text, const char *where) {
    memset(c, 0, sizeof *c);
    cJSON *root = cJSON_Parse(text);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        return pt_seterr("%s: JSON parse error near '%.20s'", where, at ? at : "?");
    }
    int rc = parse_root(c, root, where);
    cJSON_Delete(root);
    if (rc < 0) plan_cluster_free(c);
    return rc;
}

int plan_cluster_load(plan_cluster *c, const char *path) {
    size_t len;
    memset(c, 0, sizeof *c);
    char *text = pt_read_file(path, &len);
    if (!text) return -1;
    int rc = plan_cluster_parse(c, text, path);
    free(text);
    return rc;
}
