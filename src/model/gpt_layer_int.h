/* Internal to model/: what the layer kinds' files (gpt_embed.c, gpt_block.c, gpt_head.c) share:
 * carving act storage into views, the per-rank widths under tensor and sequence parallelism,
 * the TP group's collectives with their errors (gpt_layer_util.c), and the built-in rows the
 * registry (gpt_layers.c) starts with. Not a public header: other modules use model/gpt.h. */
#ifndef PT_MODEL_GPT_LAYER_INT_H
#define PT_MODEL_GPT_LAYER_INT_H
#include "model/gpt.h"
#include <stddef.h>

/* Carves base into consecutive regions of rows: returns the row n0 of a region of N rows of
 * `width` floats (NULL when base is NULL, which measures sizes only) and advances *off past the
 * region. */
static inline float *take_rows(float *base, size_t *off, size_t N, size_t width, size_t n0) {
    float *r = base ? base + *off + n0 * width : NULL;
    *off += N * width;
    return r;
}

/* A region of n floats, whole. */
static inline float *take(float *base, size_t *off, size_t n) { return take_rows(base, off, n, 1, 0); }

/* The per-rank widths of a block (gpt_init_layers_tp): the whole ones at tp 1. */
typedef struct { int C, Cl, NHl; } block_dims;   /* channels; the rank's channels and heads */

static inline block_dims block_dims_of(const gpt_model *m) {
    return (block_dims){ m->cfg.n_embd, m->cfg.n_embd / m->tp_size, m->cfg.n_head / m->tp_size };
}

/* Sequence parallelism (gpt_set_tp_sp): of N rows of the stream the rank holds sp_rows, from
 * row sp_first of a whole (N,C) buffer (all of them from 0 without sp). N divisible by tp
 * (gpt_layer_forward checks). */
static inline size_t sp_rows(const gpt_model *m, size_t N) { return m->tp_sp ? N / (size_t)m->tp_size : N; }
static inline size_t sp_first(const gpt_model *m, size_t N) { return m->tp_sp ? (size_t)m->tp_rank * sp_rows(m, N) : 0; }

/* Width of a block's B scratch rows: c_fc's (4C/tp), or under sp C, for the (N,C) buffer that
 * every all-gather fills and every reduce-scatter sums (B's (N,4C/tp) intermediates go into the
 * act's dfch there: block_b_sp). */
static inline size_t block_scratch_width(const gpt_model *m) {
    size_t w = 4 * (size_t)block_dims_of(m).Cl, C = (size_t)m->cfg.n_embd;
    return m->tp_sp ? C : w;
}

/* Vocabulary rows of wte (and logit columns) a rank holds: V at tp 1. */
static inline int vocab_local(const gpt_model *m) {
    return m->tp_size == 1 ? m->cfg.vocab_size : m->vocab_padded / m->tp_size;
}


/* wte rows one TP rank holds: V padded up to a multiple of tp, divided. */
static inline double gpt_vocab_shard(const gpt_config *g, int tp) {
    return (double)((g->vocab_size + tp - 1) / tp);
}


_Static_assert(sizeof(int) == sizeof(float), "token ids are stored in float-sized act slots");


/* bf16 storage of acts (gpt_act16.h): the fp32 work area in scratch (sized for (B,T)) where a
 * layer runs when its act of act32 fp32 floats is stored in bf16, or NULL (fp32 precision, or an
 * act larger than the area). gpt_layers.c; the chunk path (gpt_chunk.c) uses it too. */
float *gpt_act16_work(const gpt_model *m, float *scratch, int B, int T, size_t act32);
int gpt_act16_fits(const gpt_model *m, int B, int T, size_t act32);   /* whether it would give one */
size_t gpt_kinds_scratch_floats(const gpt_model *m, int B, int T);    /* the scratch before that area */

/* The built-in kinds' rows (gpt_embed.c, gpt_block.c, gpt_head.c). */
extern const gpt_layer_ops gpt_embed_row, gpt_block_row, gpt_head_row;

/* ---- shared by the kinds (gpt_layer_util.c) ---- */
/* Checks ids are in [0,V): -1 naming the first bad one, its (b,t) and what it was for. */
int gpt_check_tokens(const gpt_model *m, const int *tok, int B, int T, const char *what);
/* The head reads tie 0 (wte, set up by gpt_init): the tie's buffers, or the model's own. */
const float *gpt_tied_wte(const gpt_model *m, const gpt_tied *tied);
float *gpt_tied_dwte(const gpt_model *m, const gpt_tied *tied);
/* The group's in-place sum of buf (n floats); nothing at tp 1. -1 with the collective's error. */
int gpt_tp_allreduce(const gpt_model *m, float *buf, size_t n, const char *what);
/* The group's collective of a kind (TP_*) on buf (n floats; gpt_tp): the all-reduce, or sequence
 * parallelism's on a whole (N,C) buffer: the sum into the rank's rows (reduce-scatter), every
 * rank's rows to every rank (all-gather). -1 with the collective's error, or when it has none. */
enum { TP_ALLREDUCE, TP_REDUCE_SCATTER, TP_ALLGATHER };
int gpt_tp_collective(const gpt_model *m, int kind, float *buf, size_t n, const char *what);
/* Starts the group's sum of buf without waiting (gpt_tp.iallreduce): *req for gpt_tp_wait. */
int gpt_tp_start(const gpt_model *m, float *buf, size_t n, void **req, const char *what);
/* Waits for a sum gpt_tp_start started; *req is NULL after, whatever the outcome. */
int gpt_tp_wait(const gpt_model *m, void **req, const char *what);
/* After a failure: waits for the n requests still in flight (the non-NULL ones), keeping the
 * first error's message. */
void gpt_tp_drain(const gpt_model *m, void **req, int n);
/* The vocabulary shard of m: ids [*v0, *v0 + *nv) are real rows of its wte (the rest of its
 * vocab_local rows are padding). */
void gpt_vocab_range(const gpt_model *m, int *v0, int *nv);
/* The recompute of a kind that keeps its whole F part: nothing to rebuild. */
int gpt_keep_all_recompute(const gpt_model *m, int l, const gpt_tied *tied, float *act,
                           float *scratch, int B, int T);
/* bf16 storage (gpt_act16.h): the spans of an act made of n regions in order, of len[i] floats
 * flagged f[i], into s; returns n. A kind lists its regions as its view lays them out, and size
 * is that view's size: the lengths must add up to it (a programmer error otherwise: it says
 * which kind and stops), so a view that grows a region the list lacks is caught. */
struct gpt_act_span;
int gpt_act16_spans_of(struct gpt_act_span *s, const size_t *len, const unsigned *f, int n,
                       size_t size, const char *kind);

#endif
