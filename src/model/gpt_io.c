/* Loading and saving GPT-2 parameters as safetensors with Hugging Face names. */
#include "model/gpt_io.h"
#include "util/pt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define HF_PREFIX "transformer."

/* Tensors a Hugging Face GPT-2 file may hold that are not parameters of ours: the causal-mask
 * buffers "h.N.attn.bias" and "h.N.attn.masked_bias". */
static int is_ignorable(const char *name) {
    int layer, end = 0;
    char rest[32];
    if (sscanf(name, "h.%d.attn.%31[a-z_]%n", &layer, rest, &end) != 2 || name[end]) return 0;
    return !strcmp(rest, "bias") || !strcmp(rest, "masked_bias");
}

/* lm_head.weight, if present, must be the tied wte (a TP shard model: its rows of it). */
static int check_lm_head(const gpt_model *m, const st_file *f, const st_tensor *t) {
    size_t n = (size_t)m->cfg.vocab_size * m->cfg.n_embd, held = m->info[0].count;
    if (t->numel != n || t->ndim != 2)
        return pt_seterr("%s: tensor 'lm_head.weight' has the wrong shape for vocab_size %d, n_embd %d",
                         st_path(f), m->cfg.vocab_size, m->cfg.n_embd);
    float *tmp = pt_falloc(n);
    int rc = st_tensor_f32(f, t, tmp);
    if (rc == 0 && m->tp_size > 1) {
        float *cut = pt_falloc(held);
        gpt_shard_extract(&m->cfg, &m->info[0], m->tp_rank, m->tp_size, tmp, cut);
        free(tmp);
        tmp = cut;
    }
    if (rc == 0 && memcmp(tmp, m->w.wte, held * sizeof *tmp) != 0)
        rc = pt_seterr("%s: 'lm_head.weight' differs from 'wte.weight'; pipetrain ties the LM head "
                       "to the token embedding", st_path(f));
    free(tmp);
    return rc;
}

/* Tensor pi of the file into m's params: a TP shard model reads the whole tensor into a
 * transient buffer (one tensor at a time) and keeps its shard. */
static int read_tensor(gpt_model *m, const st_file *f, const char *name, const gpt_param_info *pi,
                       const int64_t *shape) {
    if (pi->count == pi->full) return st_read_f32(f, name, m->params + pi->offset, pi->ndim, shape);
    float *whole = pt_falloc(pi->full);
    int rc = st_read_f32(f, name, whole, pi->ndim, shape);
    if (rc == 0) gpt_shard_extract(&m->cfg, pi, m->tp_rank, m->tp_size, whole, m->params + pi->offset);
    free(whole);
    return rc;
}

int gpt_load_st(gpt_model *m, const st_file *f, int *prefixed) {
    int pref = st_find(f, HF_PREFIX "wte.weight") != NULL;
    char name[128];
    for (int i = 0; i < gpt_param_count(m); i++) {
        const gpt_param_info *pi = gpt_param_info_at(m, i);
        int64_t shape[2] = {pi->shape[0], pi->shape[1]};
        if (!gpt_holds_layer(m, pi->layer)) continue;   /* a partial model: its layers only */
        snprintf(name, sizeof name, "%s%s", pref ? HF_PREFIX : "", pi->name);
        if (read_tensor(m, f, name, pi, shape) < 0) return -1;
    }
    const st_tensor *lm = NULL;
    for (int i = 0; i < st_count(f); i++) {
        const st_tensor *t = st_at(f, i);
        const char *n = t->name;
        if (!strncmp(n, HF_PREFIX, strlen(HF_PREFIX))) n += strlen(HF_PREFIX);
        if (!strcmp(n, "lm_head.weight")) { lm = t; continue; }
        if (n != t->name && st_find(f, n))
            return pt_seterr("%s: both '%s' and '%s': which one is the model's is ambiguous",
                             st_path(f), t->name, n);
        if (gpt_param_find(m, n) >= 0 || is_ignorable(n)) continue;
        return pt_seterr("%s: unexpected tensor '%s' (not a GPT-2 parameter of this config)",
                         st_path(f), t->name);
    }
    if (lm && m->w.wte && check_lm_head(m, f, lm) < 0) return -1;
    if (prefixed) *prefixed = pref;
    return 0;
}

int gpt_load_safetensors(gpt_model *m, const char *path, int *prefixed) {
    st_file *f;
    if (st_open(&f, path) < 0) return -1;
    int rc = gpt_load_st(m, f, prefixed);
    st_close(f);
    return rc;
}

int gpt_add_to_writer(const gpt_model *m, st_writer *w, const float *buf, const char *prefix) {
    char name[160];
    if (m->tp_size > 1)
        return pt_seterr("TP rank %d of %d holds shards, not whole tensors: gather them first "
                         "(gpt_shard_place) into a model of tp 1", m->tp_rank, m->tp_size);
    for (int i = 0; i < gpt_param_count(m); i++) {
        const gpt_param_info *pi = gpt_param_info_at(m, i);
        int64_t shape[2] = {pi->shape[0], pi->shape[1]};
        if (!gpt_holds_layer(m, pi->layer)) continue;
        snprintf(name, sizeof name, "%s%s", prefix ? prefix : "", pi->name);
        if (st_writer_add(w, name, ST_F32, pi->ndim, shape, buf + pi->offset) < 0) return -1;
    }
    return 0;
}

int gpt_save_safetensors(const gpt_model *m, const char *path) {
    st_writer *w = st_writer_new();
    int rc = st_writer_meta(w, "format", "pt");
    if (rc == 0) rc = gpt_add_to_writer(m, w, m->params, "");
    if (rc == 0) rc = st_write(w, path);
    st_writer_free(w);
    return rc;
}

int gpt_model_load(gpt_model *m, const char *config_path, const char *init_path, uint64_t seed,
                   int *prefixed) {
    gpt_config cfg;
    if (!config_path) return pt_seterr("--config is required (a JSON file with n_layer, n_head, "
                                       "n_embd, vocab_size, n_positions)");
    if (config_load_json(&cfg, config_path) < 0) return -1;
    if (gpt_init(m, &cfg) < 0) return -1;
    if (prefixed) *prefixed = 0;
    if (!init_path) {
        gpt_init_random(m, seed);
        return 0;
    }
    if (gpt_load_safetensors(m, init_path, prefixed) < 0) {
        gpt_free(m);
        return -1;
    }
    return 0;
}
