/* The planner's per-layer cost model (FLOPs and bytes from the config) and the costs file that
 * profiling writes (measured seconds per layer, phase and microbatch size). Not the measuring
 * itself (plan_profile.c) and not how costs become stage times (plan_eval.c).
 * Legend: B microbatch size, T sequence, N = B*T tokens, C channels, NH heads, V vocab. */
#include "plan/plan_int.h"
#include "io/io.h"
#include "io/json.h"
#include "sim/sim.h"
#include "util/pt.h"
#include <cjson/cJSON.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define PLAN_COSTS_FORMAT "pipetrain-costs/1"   /* the "format" a profile writes and a plan reads */

static const char *const PHASE_NAME[PLAN_N_PHASES] = { "f", "b", "w" };

/* The analytic cost of a layer kind is the model's (its row of the kind registry: model/gpt_layers.c). */
void plan_layer_model(const gpt_config *cfg, plan_kind kind, int B, int T, int tp, plan_layer_cost *out) {
    memset(out, 0, sizeof *out);
    gpt_kind_ops((gpt_layer_kind)kind)->cost(cfg, B, T, tp, out);
}

void plan_layer_model_sp(const gpt_config *cfg, plan_kind kind, int B, int T, int tp, bool sp, plan_layer_cost *out) {
    memset(out, 0, sizeof *out);
    gpt_kind_cost((gpt_layer_kind)kind, cfg, B, T, tp, sp && tp > 1, out);
}

/* The model's tp_bytes convention under sp counts a collective's whole buffer (a reduce-scatter's
 * input, an all-gather's output); what is not an (N,C) reduce-scatter or all-gather there is the
 * head's per-token all-reduces in F, which the row without sp holds alone. */
void plan_tp_parts_of(const gpt_config *cfg, plan_kind kind, int B, int T, int tp, bool sp, plan_phase ph,
                      plan_tp_parts *out) {
    plan_layer_cost row, plain;
    sp = sp && tp > 1;
    plan_layer_model_sp(cfg, kind, B, T, tp, sp, &row);
    memset(out, 0, sizeof *out);
    if (!sp) {
        out->ar_bytes = row.tp_bytes[ph];
        out->ar_coll = row.tp_collectives[ph];
        return;
    }
    if (kind == PLAN_HEAD && ph == PLAN_F) {
        plan_layer_model(cfg, kind, B, T, tp, &plain);
        out->ar_bytes = plain.tp_bytes[ph];
        out->ar_coll = plain.tp_collectives[ph];
    }
    out->sg_bytes = row.tp_bytes[ph] - out->ar_bytes;
    out->sg_coll = row.tp_collectives[ph] - out->ar_coll;
}

double plan_tp_parts_time(const plan_tp_parts *pt, int tp, double bw, double lat) {
    return sim_allreduce_time(tp, pt->ar_bytes, pt->ar_coll, bw, lat) + sim_rsag_time(tp, pt->sg_bytes, pt->sg_coll, bw, lat);
}

double plan_sp_ln_bytes(const gpt_config *cfg, int tp, bool sp) {
    return sp && tp > 1 ? 4.0 * 4.0 * cfg->n_embd : 0;
}

double plan_tp_time(const plan_layer_cost *c, plan_phase ph, int tp, double bw, double lat) {
    return sim_allreduce_time(tp, c->tp_bytes[ph], c->tp_collectives[ph], bw, lat);
}

/* The matmuls split 4C^2 : 8C^2 at the first all-reduce (qkv 3C^2 + attn.c_proj C^2, then c_fc
 * and mlp.c_proj 4C^2 each); W's FLOPs are the matmuls' alone, and attention is F's (and B's)
 * excess over them: 2NTC/t in F, twice that in B. */
void plan_tp_block_pieces(const plan_layer_cost *blk, plan_phase ph, double piece[2]) {
    double mm = blk->flops[PLAN_W], att = blk->flops[ph] - mm;
    piece[0] = piece[1] = 0;
    if (ph == PLAN_F) { piece[0] = mm / 3 + att; piece[1] = 2 * mm / 3; }
    if (ph == PLAN_B) { piece[0] = 2 * mm / 3; piece[1] = mm / 3 + att; }
}

/* The ping-pong A0 B0 A1 B1 A2 B2 with sums AR1(A) AR1(B) AR2(A) AR2(B) on one link: AR1(A) hides
 * behind B0 (c0), AR1(B) behind A1 and AR2(A) behind B1 (c1 each), AR2(B) behind nothing (X2 is
 * element-wise, not modelled). A sum that outlasts its cover delays the next one on the link and
 * the half that waits for it by the excess: the excesses add (each case checked against the
 * event order in tests/test_plan_tp_oases.c). */
double plan_tp_overlap_exposed(double half, double c0, double c1) {
    return fmax(0, half - c0) + 2 * fmax(0, half - c1) + half;
}

double plan_tp_pingpong(int tp, double bytes, int coll, const double piece[2], double rate, double bw, double lat) {
    double half = sim_allreduce_time(tp, bytes / (2.0 * coll), 1, bw, lat);
    return plan_tp_overlap_exposed(half, piece[0] / 2 / rate, piece[1] / 2 / rate);
}

double plan_p2p_bytes(const gpt_config *cfg, int B, int T) {
    return 4.0 * B * T * cfg->n_embd;
}

double plan_costs_rate(const plan_costs *c, plan_kind kind, plan_phase ph, int B) {
    int best = -1;
    for (int i = 0; i < c->n_batch; i++)
        if (best < 0 || abs(c->batch[i] - B) < abs(c->batch[best] - B)) best = i;
    if (best < 0 || !(c->sec[best][kind][ph] > 0)) return 0;
    plan_layer_cost lc;
    plan_layer_model(&c->cfg, kind, c->batch[best], c->T, 1, &lc);
    return lc.flops[ph] / c->sec[best][kind][ph];
}

/* ---- the costs file ------------------------------------------------------------------------ */
static cJSON *layer_json(const plan_costs *c, int i, plan_kind k) {
    cJSON *o = cJSON_CreateObject();
    plan_layer_cost lc;
    plan_layer_model(&c->cfg, k, c->batch[i], c->T, 1, &lc);
    for (int ph = 0; ph < PLAN_N_PHASES; ph++) cJSON_AddNumberToObject(o, PHASE_NAME[ph], c->sec[i][k][ph]);
    cJSON_AddNumberToObject(o, "act_bytes", lc.act_bytes);
    cJSON_AddNumberToObject(o, "param_bytes", lc.param_bytes);
    cJSON_AddNumberToObject(o, "optimizer_bytes", lc.optim_bytes);
    cJSON_AddNumberToObject(o, "flops_f", lc.flops[PLAN_F]);
    cJSON_AddNumberToObject(o, "flops_b", lc.flops[PLAN_B]);
    cJSON_AddNumberToObject(o, "flops_w", lc.flops[PLAN_W]);
    return o;
}

char *plan_costs_to_json(const plan_costs *c) {
    cJSON *root = cJSON_CreateObject(), *cfg = config_to_cjson(&c->cfg);
    if (!cfg) { cJSON_Delete(root); return NULL; }
    cJSON_AddStringToObject(root, "format", PLAN_COSTS_FORMAT);
    cJSON_AddItemToObject(root, "config", cfg);
    cJSON_AddNumberToObject(root, "seq", c->T);
    cJSON_AddNumberToObject(root, "repeats", c->repeats);
    cJSON_AddNumberToObject(root, "blas_threads", 1);
    cJSON_AddNumberToObject(root, "busy_cores", c->busy_cores);
    cJSON_AddNumberToObject(root, "step_per_param", c->step_per_param);
    cJSON *arr = cJSON_AddArrayToObject(root, "batches");
    for (int i = 0; i < c->n_batch; i++) {
        cJSON *b = cJSON_CreateObject(), *layers = cJSON_CreateObject();
        cJSON_AddNumberToObject(b, "batch", c->batch[i]);
        cJSON_AddNumberToObject(b, "p2p_bytes", plan_p2p_bytes(&c->cfg, c->batch[i], c->T));
        for (int k = 0; k < PLAN_N_KINDS; k++) cJSON_AddItemToObject(layers, gpt_kind_ops((gpt_layer_kind)k)->name, layer_json(c, i, k));
        cJSON_AddItemToObject(b, "layers", layers);
        cJSON_AddItemToArray(arr, b);
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    return text;
}

int plan_costs_save(const plan_costs *c, const char *path) {
    char *text = plan_costs_to_json(c);
    if (!text) return -1;
    io_atomic_file f;
    int rc = io_atomic_open(&f, path);
    if (rc == 0) { fprintf(f.f, "%s\n", text); rc = io_atomic_commit(&f); }
    free(text);
    return rc;
}

/* A positive whole number field (< 2^31); errors call it `field`. Returns as io_json_int does. */
static int get_count(const cJSON *o, const char *key, io_json_need need, const char *where, const char *field,
                     int *out) {
    return io_json_int(out, o, key, need, 1, INT_MAX, "%s: %s must be a whole number >= 1", where, field);
}

static int load_layer(plan_costs *c, int i, plan_kind k, const cJSON *layers, const char *where) {
    const cJSON *l = cJSON_GetObjectItemCaseSensitive(layers, gpt_kind_ops((gpt_layer_kind)k)->name);
    if (!cJSON_IsObject(l))
        return pt_seterr("%s: batches[%d].layers.%s must be an object with f, b, w (seconds)", where, i, gpt_kind_ops((gpt_layer_kind)k)->name);
    for (int ph = 0; ph < PLAN_N_PHASES; ph++) {
        double *sec = &c->sec[i][k][ph];
        if (io_json_num(sec, l, PHASE_NAME[ph], IO_JSON_REQUIRED, 0, DBL_MAX,
                        "%s: batches[%d].layers.%s.%s must be a number of seconds >= 0", where, i, gpt_kind_ops((gpt_layer_kind)k)->name,
                        PHASE_NAME[ph]) < 0)
            return -1;
        /* the planner takes FLOP/s from these; a 0 would quietly fall back to the analytic model */
        if (*sec == 0)
            return pt_seterr("%s: batches[%d].layers.%s.%s is 0: a measured time is > 0 (profile again "
                             "with pipetrain profile, or plan without --costs for the analytic model)",
                             where, i, gpt_kind_ops((gpt_layer_kind)k)->name, PHASE_NAME[ph]);
    }
    return 0;
}

static int load_batches(plan_costs *c, const cJSON *arr, const char *where) {
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) < 1 || cJSON_GetArraySize(arr) > PLAN_MAX_BATCHES)
        return pt_seterr("%s: batches must be an array of 1 to %d entries", where, PLAN_MAX_BATCHES);
    int i = 0;
    char field[64];
    for (const cJSON *b = arr->child; b; b = b->next, i++) {
        snprintf(field, sizeof field, "batches[%d].batch", i);
        if (get_count(b, "batch", IO_JSON_REQUIRED, where, field, &c->batch[i]) < 0) return -1;
        for (int j = 0; j < i; j++)
            if (c->batch[j] == c->batch[i])
                return pt_seterr("%s: batches[%d].batch = %d repeats batches[%d].batch (one entry per "
                                 "microbatch size)", where, i, c->batch[i], j);
        const cJSON *layers = cJSON_GetObjectItemCaseSensitive(b, "layers");
        if (!cJSON_IsObject(layers)) return pt_seterr("%s: batches[%d].layers must be an object", where, i);
        for (int k = 0; k < PLAN_N_KINDS; k++)
            if (load_layer(c, i, k, layers, where) < 0) return -1;
    }
    c->n_batch = i;
    return 0;
}

int plan_costs_load(plan_costs *c, const char *path) {
    size_t len;
    char *text = pt_read_file(path, &len);
    if (!text) return -1;
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    int rc = -1;
    memset(c, 0, sizeof *c);
    if (!cJSON_IsObject(root)) { pt_seterr("%s: not a JSON object (a costs file from pipetrain profile)", path); goto done; }
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (cJSON_IsString(fmt) && !strcmp(fmt->valuestring, SIM_COSTS_FORMAT)) {
        pt_seterr("%s is a simulator costs file (" SIM_COSTS_FORMAT ") for `simulate --costs`; plan --costs "
                  "takes a profile costs file (format \"" PLAN_COSTS_FORMAT "\", written by pipetrain profile)", path);
        goto done;
    }
    if (fmt && !(cJSON_IsString(fmt) && !strcmp(fmt->valuestring, PLAN_COSTS_FORMAT))) {
        pt_seterr("%s: format is %s%s%s, not \"" PLAN_COSTS_FORMAT "\" (plan --costs takes a costs file from "
                  "pipetrain profile)", path, cJSON_IsString(fmt) ? "\"" : "",
                  cJSON_IsString(fmt) ? fmt->valuestring : "not a string", cJSON_IsString(fmt) ? "\"" : "");
        goto done;
    }
    const cJSON *cfg = cJSON_GetObjectItemCaseSensitive(root, "config");
    if (!cJSON_IsObject(cfg)) {
        pt_seterr("%s: config must be an object (the model config profiled; plan --costs takes a costs file "
                  "from pipetrain profile, not the simulator's costs file)", path);
        goto done;
    }
    char where[300];
    snprintf(where, sizeof where, "%s: config", path);
    if (config_from_cjson(&c->cfg, cfg, where) < 0) goto done;
    if (get_count(root, "seq", IO_JSON_REQUIRED, path, "seq", &c->T) < 0) goto done;
    c->repeats = 1;
    if (get_count(root, "repeats", IO_JSON_OPTIONAL, path, "repeats", &c->repeats) < 0) goto done;
    /* files from before the step was measured: no step term */
    if (io_json_num(&c->step_per_param, root, "step_per_param", IO_JSON_OPTIONAL, 0, 1,
                    "%s: step_per_param must be a number of seconds per parameter in [0, 1]", path) < 0)
        goto done;
    if (io_json_int(&c->busy_cores, root, "busy_cores", IO_JSON_OPTIONAL, 0, INT_MAX,
                    "%s: busy_cores must be a whole number >= 0", path) < 0)
        goto done;
    rc = load_batches(c, cJSON_GetObjectItemCaseSensitive(root, "batches"), path);
done:
    cJSON_Delete(root);
    return rc;
}
