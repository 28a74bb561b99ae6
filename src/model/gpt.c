/* GPT-2 model storage: the flat parameter and gradient buffers (of every layer, or of a range of
 * them: a partial model), their per-layer contiguous layout, the tensor table (Hugging Face
 * names, shapes, decay flags), the tied tensors, and GPT-2 initialisation. Not here: the layer
 * computations (gpt_layers.c), the single-process drivers (gpt_run.c), file I/O (gpt_io.c). */
#include "model/gpt.h"
#include "util/pt.h"
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INIT_STD 0.02   /* GPT-2's weight init standard deviation */

/* Floats of parameters in each layer kind on one of tp TP ranks (the split tensors divided, the
 * replicated ones whole; gpt_init_layers_tp). */
static size_t vocab_padded(const gpt_config *c, int tp) {
    return ((size_t)c->vocab_size + tp - 1) / tp * tp;
}
static size_t embed_floats(const gpt_config *c, int tp) {
    return vocab_padded(c, tp) / tp * c->n_embd + (size_t)c->n_positions * c->n_embd;
}
static size_t block_floats(const gpt_config *c, int tp) {
    size_t C = (size_t)c->n_embd;
    /* ln 4C, qkv 3C^2+3C, proj C^2+C, fc 4C^2+4C, fcproj 4C^2+C: split 12C^2+7C, replicated 6C */
    return (12 * C * C + 7 * C) / tp + 6 * C;
}

/* Offset of a tensor or layer a partial model does not hold: far outside any buffer, so a use
 * that forgot to ask gpt_holds_layer faults instead of reading another tensor. */
#define OFF_NONE ((size_t)1 << 60)

/* First float of layer i (0..layers) in the layout of a model holding every layer (of one of tp
 * ranks' shards): the embedding's, the blocks' before it, and ln_f's past the head. Inserted
 * layers have no parameters. */
static size_t layer_start(const gpt_config *c, int i, int tp) {
    if (i == 0) return 0;
    size_t off = embed_floats(c, tp) + (size_t)gpt_config_blocks_before(c, i) * block_floats(c, tp);
    return i > gpt_config_head_layer(c) ? off + 2 * (size_t)c->n_embd : off;
}

/* How each tensor is split over a TP group, by the end of its name (the rest: replicated). */
static const struct { const char *suffix; int split, segs; } tp_splits[] = {
    { "wte.weight", GPT_SPLIT_ROWS, 1 },
    { "attn.c_attn.weight", GPT_SPLIT_COLS, 3 },
    { "attn.c_attn.bias", GPT_SPLIT_VEC, 3 },
    { "attn.c_proj.weight", GPT_SPLIT_ROWS, 1 },
    { "mlp.c_fc.weight", GPT_SPLIT_COLS, 1 },
    { "mlp.c_fc.bias", GPT_SPLIT_VEC, 1 },
    { "mlp.c_proj.weight", GPT_SPLIT_ROWS, 1 },
};

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static void set_split(gpt_param_info *pi) {
    pi->split = GPT_SPLIT_NONE;
    pi->segs = 1;
    for (size_t k = 0; k < sizeof tp_splits / sizeof *tp_splits; k++)
        if (ends_with(pi->name, tp_splits[k].suffix)) {
            pi->split = tp_splits[k].split;
            pi->segs = tp_splits[k].segs;
        }
}

/* Appends one tensor to the table at the cursor (the layout of a model of m's TP shard holding
 * every layer); a held tensor gets its offset in m's buffers and its param/grad pointers,
 * another OFF_NONE and NULL. */
static void gpt_add_tensor(gpt_model *m, size_t *cur, const char *name, int s0, int s1,
                           int layer, int decay, float **pw, float **pg) {
    gpt_param_info *pi = &m->info[m->n_info++];
    snprintf(pi->name, sizeof pi->name, "%s", name);
    pi->ndim = s1 ? 2 : 1;
    pi->shape[0] = s0;
    pi->shape[1] = s1;
    pi->full = (size_t)s0 * (s1 ? s1 : 1);
    set_split(pi);
    pi->count = gpt_shard_count(&m->cfg, pi, m->tp_size);
    pi->layer = layer;
    pi->decay = decay;
    pi->tp_sum = 0;
    pi->offset = OFF_NONE;
    *pw = *pg = NULL;
    if (gpt_holds_layer(m, layer)) {
        pi->offset = *cur - layer_start(&m->cfg, m->first_layer, m->tp_size);
        *pw = m->params + pi->offset;
        *pg = m->grads + pi->offset;
    }
    *cur += pi->count;
}

/* Lays out one block's twelve tensors at the cursor. */
static void gpt_add_block(gpt_model *m, size_t *cur, int i) {
    int C = m->cfg.n_embd;
    gpt_block_tensors *w = &m->w.h[i], *g = &m->g.h[i];
    int layer = gpt_config_block_layer(&m->cfg, i);
    char n[48];
#define ADD(suffix, s0, s1, decay, field) \
    (snprintf(n, sizeof n, "h.%d.%s", i, suffix), \
     gpt_add_tensor(m, cur, n, s0, s1, layer, decay, &w->field, &g->field))
    ADD("ln_1.weight", C, 0, 0, ln1w);
    ADD("ln_1.bias", C, 0, 0, ln1b);
    ADD("attn.c_attn.weight", C, 3 * C, 1, qkvw);
    ADD("attn.c_attn.bias", 3 * C, 0, 0, qkvb);
    ADD("attn.c_proj.weight", C, C, 1, attprojw);
    ADD("attn.c_proj.bias", C, 0, 0, attprojb);
    ADD("ln_2.weight", C, 0, 0, ln2w);
    ADD("ln_2.bias", C, 0, 0, ln2b);
    ADD("mlp.c_fc.weight", C, 4 * C, 1, fcw);
    ADD("mlp.c_fc.bias", 4 * C, 0, 0, fcb);
    ADD("mlp.c_proj.weight", 4 * C, C, 1, fcprojw);
    ADD("mlp.c_proj.bias", C, 0, 0, fcprojb);
#undef ADD
}

size_t gpt_config_num_params(const gpt_config *cfg) {
    return layer_start(cfg, gpt_config_num_layers(cfg), 1);
}

int gpt_init(gpt_model *m, const gpt_config *cfg) {
    return gpt_init_layers(m, cfg, 0, gpt_config_num_layers(cfg));
}

int gpt_init_layers(gpt_model *m, const gpt_config *cfg, int first, int end) {
    return gpt_init_layers_tp(m, cfg, first, end, 0, 1);
}

/* params and grads of n floats; -1 naming the model and what it asked for. */
static int gpt_alloc(gpt_model *m, size_t n) {
    if (n == 0) return 0;
    m->params = pt_falloc_try(n);
    m->grads = m->params ? pt_falloc_try(n) : NULL;
    if (m->grads) return 0;
    const gpt_config *c = &m->cfg;
    double gib = 2.0 * n * sizeof(float) / (1 << 30);
    char shard[48] = "";
    if (m->tp_size > 1) snprintf(shard, sizeof shard, ", TP rank %d of %d", m->tp_rank, m->tp_size);
    return pt_seterr("model of %d layers, %d channels, vocab %d (layers %d..%d here%s): %.3g GiB for "
                     "parameters and gradients cannot be allocated (a smaller config, or more "
                     "pipeline stages over MPI)", c->n_layer, c->n_embd, c->vocab_size,
                     m->first_layer, m->end_layer - 1, shard, gib);
}

/* The arguments of gpt_init_layers_tp: 0, or -1 saying which is wrong. */
static int check_range(const gpt_config *cfg, int first, int end, int tp_rank, int tp_size) {
    int nl = gpt_config_num_layers(cfg);
    if (first < 0 || end < first || end > nl)
        return pt_seterr("gpt_init_layers: layers [%d, %d) outside [0, %d)", first, end, nl);
    if (tp_size < 1)
        return pt_seterr("tensor parallelism: tp (%d) must be at least 1", tp_size);
    if (cfg->n_head % tp_size != 0)
        return pt_seterr("tensor parallelism: n_head (%d) is not divisible by tp (%d); the heads are "
                         "split over the TP ranks (a tp that divides n_head)", cfg->n_head, tp_size);
    if (tp_rank < 0 || tp_rank >= tp_size)
        return pt_seterr("tensor parallelism: tp_rank %d outside [0, %d) (tp %d)", tp_rank, tp_size,
                         tp_size);
    return 0;
}

/* Written once by the CLI before any model exists (gpt_set_default_precision), read by every
 * model's init after. */
static nn_precision default_precision = NN_FP32;

void gpt_set_default_precision(nn_precision p) { default_precision = p; }
nn_precision gpt_default_precision(void) { return default_precision; }
void gpt_set_precision(gpt_model *m, nn_precision p) { m->precision = p; }

int gpt_init_layers_tp(gpt_model *m, const gpt_config *cfg, int first, int end, int tp_rank,
                       int tp_size) {
    memset(m, 0, sizeof *m);
    m->precision = default_precision;
    if (gpt_config_validate(cfg, NULL) < 0 || check_range(cfg, first, end, tp_rank, tp_size) < 0)
        return -1;
    int L = cfg->n_layer, C = cfg->n_embd, tp = tp_size, nl = gpt_config_num_layers(cfg);
    int head = gpt_config_head_layer(cfg);
    m->cfg = *cfg;
    m->first_layer = first;
    m->end_layer = end;
    m->tp_rank = tp_rank;
    m->tp_size = tp;
    m->tp = (gpt_tp){ .rank = tp_rank, .size = tp };
    m->vocab_padded = (int)vocab_padded(cfg, tp);
    m->num_params = gpt_config_num_params(cfg);
    m->n_held = layer_start(cfg, end, tp) - layer_start(cfg, first, tp);
    if (gpt_alloc(m, m->n_held) < 0) {
        gpt_free(m);
        return -1;
    }
    m->w.h = pt_calloc((size_t)L, sizeof *m->w.h);
    m->g.h = pt_calloc((size_t)L, sizeof *m->g.h);
    m->info = pt_calloc((size_t)12 * L + 4, sizeof *m->info);
    m->layer_off = pt_calloc((size_t)nl + 1, sizeof *m->layer_off);
    for (int i = 0; i <= nl; i++)
        m->layer_off[i] = i >= first && i <= end ?
                          layer_start(cfg, i, tp) - layer_start(cfg, first, tp) : OFF_NONE;
    size_t cur = 0;
    gpt_add_tensor(m, &cur, "wte.weight", cfg->vocab_size, C, 0, 1, &m->w.wte, &m->g.wte);
    gpt_add_tensor(m, &cur, "wpe.weight", cfg->n_positions, C, 0, 1, &m->w.wpe, &m->g.wpe);
    for (int i = 0; i < L; i++) gpt_add_block(m, &cur, i);
    gpt_add_tensor(m, &cur, "ln_f.weight", C, 0, head, 0, &m->w.lnfw, &m->g.lnfw);
    gpt_add_tensor(m, &cur, "ln_f.bias", C, 0, head, 0, &m->w.lnfb, &m->g.lnfb);
    m->ties[m->n_ties++] = (gpt_tie){ .param = 0, .owner = 0, .user = head };   /* wte = LM head */
    return 0;
}

void gpt_set_tp(gpt_model *m, const gpt_tp *tp) {
    assert(tp->rank == m->tp_rank && tp->size == m->tp_size && "gpt_set_tp: not this model's group");
    m->tp = *tp;
}

int gpt_set_tp_overlap(gpt_model *m, int on) {
    if (on && m->tp_sp)
        return pt_seterr("TP rank %d of %d: overlap and sequence parallelism cannot be combined "
                         "(a block under sp reduce-scatters and all-gathers; the ping-pong "
                         "overlaps all-reduces only): turn one off", m->tp_rank, m->tp_size);
    if (on && m->tp_size > 1 && (!m->tp.iallreduce || !m->tp.wait))
        return pt_seterr("TP rank %d of %d: overlapping all-reduces needs a collective with "
                         "iallreduce and wait (gpt_set_tp gave none)", m->tp_rank, m->tp_size);
    m->tp_overlap = on != 0;
    return 0;
}

/* The replicated tensors whose gradients are partial per rank under sequence parallelism: the
 * blocks' layer norms, which run on the rank's rows only (gpt_param_info.tp_sum). */
static int sp_partial(const gpt_param_info *pi) {
    static const char *const suffixes[] = { "ln_1.weight", "ln_1.bias", "ln_2.weight", "ln_2.bias" };
    for (size_t k = 0; k < sizeof suffixes / sizeof *suffixes; k++)
        if (ends_with(pi->name, suffixes[k])) return 1;
    return 0;
}

int gpt_set_tp_sp(gpt_model *m, int on) {
    if (on && m->tp_size > 1 && (!m->tp.reduce_scatter || !m->tp.allgather))
        return pt_seterr("TP rank %d of %d: sequence parallelism needs a collective with "
                         "reduce_scatter and allgather (gpt_set_tp gave none)", m->tp_rank, m->tp_size);
    if (on && m->tp_overlap)
        return pt_seterr("TP rank %d of %d: sequence parallelism and overlap cannot be combined "
                         "(the ping-pong overlaps all-reduces; a block under sp reduce-scatters "
                         "and all-gathers): turn one off", m->tp_rank, m->tp_size);
    m->tp_sp = on && m->tp_size > 1;
    for (int i = 0; i < m->n_info; i++) m->info[i].tp_sum = m->tp_sp && sp_partial(&m->info[i]);
    return 0;
}

int gpt_sp_check_rows(int B, int T, int tp) {
    long long N = (long long)B * T;
    if (tp > 1 && N % tp != 0)
        return pt_seterr("sequence parallelism: a microbatch of N = B*T = %d*%d = %lld rows is not "
                         "divisible by tp %d (each TP rank holds N/tp rows of the activation "
                         "stream: a batch or sequence length that makes B*T a multiple of %d)",
                         B, T, N, tp, tp);
    return 0;
}

size_t gpt_stream_rows(const gpt_model *m, int B, int T) {
    size_t N = (size_t)B * T, tp = (size_t)m->tp_size;
    if (!m->tp_sp) return N;
    return N % tp ? 0 : N / tp;
}

/* ---- shards ------------------------------------------------------------------------------
 * A shard, read in its own order, is a sequence of runs each contiguous in the whole tensor
 * (row-major, HF layout), at increasing whole offsets: so copying, and drawing the seeded init
 * while streaming the whole tensor's numbers, go run by run. */
#define RUN_PAD GPT_SHARD_PAD   /* a run of padding rows (wte past V): zeros, in no whole tensor */

/* The run of the shard of rank `rank` of `size` that starts at shard element k: returns its
 * length (to the run's end) and sets *w to its first whole element, or RUN_PAD. */
static size_t shard_run(const gpt_param_info *pi, int rank, int size, size_t k, size_t *w) {
    size_t count = gpt_shard_count(NULL, pi, size);
    if (size == 1 || pi->split == GPT_SPLIT_NONE) {
        *w = k;
        return count - k;
    }
    if (pi->split == GPT_SPLIT_ROWS) {   /* rows padded up to a multiple of size */
        size_t W = (size_t)pi->shape[1], real = (size_t)pi->shape[0] * W;
        size_t first = (size_t)rank * (count / W) * W, at = first + k;   /* whole element */
        size_t end = first + count < real ? first + count : real;
        *w = at < real ? at : RUN_PAD;
        return at < real ? end - at : count - k;
    }
    /* COLS / VEC: (R, segs * n) row-major; the shard is (R, segs * n/size) */
    size_t W = (size_t)(pi->split == GPT_SPLIT_COLS ? pi->shape[1] : pi->shape[0]);
    size_t n = W / pi->segs, np = n / size, Ws = W / size;
    size_t i = k / Ws, c = k % Ws, s = c / np, cc = c % np;
    *w = i * W + s * n + (size_t)rank * np + cc;
    return np - cc;
}

size_t gpt_shard_run(const gpt_param_info *pi, int rank, int size, size_t k, size_t *whole_at) {
    return shard_run(pi, rank, size, k, whole_at);
}

size_t gpt_shard_count(const gpt_config *cfg, const gpt_param_info *pi, int size) {
    size_t s = (size_t)size;
    switch (pi->split) {
    case GPT_SPLIT_ROWS: return ((size_t)pi->shape[0] + s - 1) / s * (size_t)pi->shape[1];
    case GPT_SPLIT_COLS: return pi->full / s;
    case GPT_SPLIT_VEC:  return pi->full / s;
    default:             return pi->full;
    }
}

void gpt_shard_extract(const gpt_config *cfg, const gpt_param_info *pi, int rank, int size,
                       const float *whole, float *shard) {
    size_t count = gpt_shard_count(cfg, pi, size), w, len;
    for (size_t k = 0; k < count; k += len) {
        len = shard_run(pi, rank, size, k, &w);
        if (w == RUN_PAD) memset(shard + k, 0, len * sizeof *shard);
        else memcpy(shard + k, whole + w, len * sizeof *shard);
    }
}

void gpt_shard_place(const gpt_config *cfg, const gpt_param_info *pi, int rank, int size,
                     const float *shard, float *whole) {
    size_t count = gpt_shard_count(cfg, pi, size), w, len;
    for (size_t k = 0; k < count; k += len) {
        len = shard_run(pi, rank, size, k, &w);
        if (w != RUN_PAD) memcpy(whole + w, shard + k, len * sizeof *shard);
    }
}

void gpt_free(gpt_model *m) {
    free(m->params);
    free(m->grads);
    free(m->w.h);
    free(m->g.h);
    free(m->info);
    free(m->layer_off);
    free(m->fb_act);
    free(m->fb_scratch);
    free(m->fb_x);
    memset(m, 0, sizeof *m);
}

/* Advances rng past n normals without computing them (pt_rng_normal takes two uniforms). */
static void rng_skip_normals(pt_rng *rng, size_t n) {
    for (size_t k = 0; k < 2 * n; k++) (void)pt_rng_uniform(rng);
}

/* Elements [start, start+n) of m's shard of tensor pi into p, with rng at the whole tensor's
 * first number; leaves rng past the whole tensor's numbers (it draws the shard's, skips the
 * rest), so tensors can be drawn one after another. */
static void init_tensor(const gpt_model *m, const gpt_param_info *pi, pt_rng *rng, size_t start,
                        size_t n, float *p) {
    if (pi->ndim == 1) {   /* biases 0, layernorm weights 1; no numbers drawn */
        float v = ends_with(pi->name, ".weight") ? 1.0f : 0.0f;
        for (size_t k = 0; k < n; k++) p[k] = v;
        return;
    }
    double sd = ends_with(pi->name, "c_proj.weight") ? INIT_STD / sqrt(2.0 * m->cfg.n_layer) : INIT_STD;
    size_t at = 0, w, len;   /* whole elements drawn or skipped so far */
    for (size_t k = start; k < start + n; k += len, p += len) {
        len = shard_run(pi, m->tp_rank, m->tp_size, k, &w);
        if (len > start + n - k) len = start + n - k;
        if (w == RUN_PAD) {
            memset(p, 0, len * sizeof *p);
            continue;
        }
        rng_skip_normals(rng, w - at);
        for (size_t j = 0; j < len; j++) p[j] = (float)(sd * pt_rng_normal(rng));
        at = w + len;
    }
    rng_skip_normals(rng, pi->full - at);
}

void gpt_init_random(gpt_model *m, uint64_t seed) {
    pt_rng rng;
    pt_rng_seed(&rng, seed);
    for (int i = 0; i < m->n_info && m->info[i].layer < m->end_layer; i++) {
        const gpt_param_info *pi = &m->info[i];
        if (gpt_holds_layer(m, pi->layer)) init_tensor(m, pi, &rng, 0, pi->count, m->params + pi->offset);
        else if (pi->ndim == 2) rng_skip_normals(&rng, pi->full);
    }
}

void gpt_init_random_slice(const gpt_model *m, uint64_t seed, int param, size_t start, size_t n,
                           float *out) {
    pt_rng rng;
    pt_rng_seed(&rng, seed);
    assert(start + n <= m->info[param].count && "gpt_init_random_slice: past the shard");
    for (int i = 0; i < param; i++)
        if (m->info[i].ndim == 2) rng_skip_normals(&rng, m->info[i].full);
    init_tensor(m, &m->info[param], &rng, start, n, out);
}

void gpt_zero_grad(gpt_model *m) {
    if (m->n_held) memset(m->grads, 0, m->n_held * sizeof *m->grads);
}

int gpt_num_layers(const gpt_model *m) { return gpt_config_num_layers(&m->cfg); }

gpt_layer_kind gpt_layer_kind_of(const gpt_model *m, int layer) {
    return gpt_config_layer_kind(&m->cfg, layer);
}

int gpt_holds_layer(const gpt_model *m, int layer) {
    return layer >= m->first_layer && layer < m->end_layer;
}

void gpt_layer_param_span(const gpt_model *m, int layer, size_t *offset, size_t *count) {
    gpt_layers_param_span(m, layer, layer + 1, offset, count);
}

void gpt_layers_param_span(const gpt_model *m, int first, int end, size_t *offset, size_t *count) {
    *offset = *count = 0;
    if (first == end) return;
    assert(first >= m->first_layer && end <= m->end_layer && first < end && "layers not held");
    *offset = m->layer_off[first];
    *count = m->layer_off[end] - m->layer_off[first];
}

int gpt_tie_count(const gpt_model *m) { return m->n_ties; }

const gpt_tie *gpt_tie_at(const gpt_model *m, int i) {
    return i >= 0 && i < m->n_ties ? &m->ties[i] : NULL;
}

int gpt_param_count(const gpt_model *m) { return m->n_info; }

const gpt_param_info *gpt_param_info_at(const gpt_model *m, int i) {
    return i >= 0 && i < m->n_info ? &m->info[i] : NULL;
}

int gpt_param_find(const gpt_model *m, const char *name) {
    if (strncmp(name, "transformer.", 12) == 0) name += 12;
    for (int i = 0; i < m->n_info; i++)
        if (strcmp(m->info[i].name, name) == 0) return i;
    return -1;
}

double gpt_flops_per_step(const gpt_model *m, int B, int T) {
    const gpt_config *c = &m->cfg;
    double N = (double)m->num_params - (double)c->n_positions * c->n_embd;
    return 6.0 * N * B * T + 6.0 * c->n_layer * (double)B * T * T * c->n_embd;
}

int gpt_config_param_layer(const gpt_config *cfg, const char *name) {
    int i;
    if (!strncmp(name, "wte.", 4) || !strncmp(name, "wpe.", 4)) return 0;
    if (!strncmp(name, "ln_f.", 5)) return gpt_config_head_layer(cfg);
    if (sscanf(name, "h.%d.", &i) == 1 && i >= 0 && i < cfg->n_layer) return gpt_config_block_layer(cfg, i);
    return -1;
}
