/* The GPT-2 model as an ordered list of layers over one flat parameter buffer and one flat
 * gradient buffer: the embedding, the L transformer blocks, the final layernorm + tied LM head
 * (and any layers of run-time kinds the config inserts between blocks: the layer sequence below). Each layer can run forward (F), backward-input (B) and backward-weight
 * (W) on its own, on any microbatch, with caller-owned activation storage, so pipeline stages can
 * own any subset of layers. Not here: the optimizer, file I/O, scheduling.
 *
 * Legend: B batch (microbatch size), T time, C channels, NH heads, V vocab, L blocks,
 * maxT = n_positions, N = B*T.
 *
 * Memory contract for one (layer, microbatch):
 *   act      gpt_layer_act_floats(m, layer, B, T) floats, owned by the caller, kept from the F of
 *            that microbatch until its W has run. F fills it (it copies its input x, so the caller
 *            may reuse x right after F); B reads it and stores there what W needs (the gradients at
 *            each matmul/layernorm output, so the caller may reuse dout right after B); W only
 *            reads it. F, B, W of one microbatch must use the same B and T. After W the buffer is
 *            free for another microbatch. Never shared by two microbatches in flight.
 *            Under communication-free recomputation only its first gpt_layer_keep_floats need
 *            be kept from F to B: gpt_layer_recompute rebuilds the rest before B (in any buffer
 *            of the full size holding that prefix), which is then kept until W.
 *   scratch  gpt_scratch_floats(m, B, T) floats, one per thread, contents not kept between calls.
 * F/B/W of different layers, or of different microbatches, only touch their own act, the scratch
 * given, their outputs, and (W) their own gradient span, so stages can run them in threads. */
#ifndef PT_MODEL_GPT_H
#define PT_MODEL_GPT_H
#include <stddef.h>
#include <stdint.h>
#include "model/config.h"
#include "nn/nn_bf16.h"

/* Named pointers into one transformer block's span (of params or of grads). */
typedef struct {
    float *ln1w, *ln1b;         /* (C), (C)          h.i.ln_1.{weight,bias} */
    float *qkvw, *qkvb;         /* (C,3C), (3C)      h.i.attn.c_attn.{weight,bias} */
    float *attprojw, *attprojb; /* (C,C), (C)        h.i.attn.c_proj.{weight,bias} */
    float *ln2w, *ln2b;         /* (C), (C)          h.i.ln_2.{weight,bias} */
    float *fcw, *fcb;           /* (C,4C), (4C)      h.i.mlp.c_fc.{weight,bias} */
    float *fcprojw, *fcprojb;   /* (4C,C), (C)       h.i.mlp.c_proj.{weight,bias} */
} gpt_block_tensors;

/* Named pointers into a whole flat buffer (params or grads), in layout order. */
typedef struct {
    float *wte;                 /* (V,C)     layer 0: wte.weight (also the tied LM head) */
    float *wpe;                 /* (maxT,C)  layer 0: wpe.weight */
    gpt_block_tensors *h;       /* [L]       layers 1..L */
    float *lnfw, *lnfb;         /* (C), (C)  layer L+1: ln_f.{weight,bias} */
} gpt_tensors;

/* One parameter tensor, for checkpoint I/O and the optimizer. */
typedef struct {
    char name[48];      /* Hugging Face name without "transformer.", e.g. "h.0.attn.c_attn.weight" */
    int ndim;           /* 1 or 2 */
    int shape[2];       /* as HF stores it: c_attn.weight is (C,3C) = (in,out); shape[1]=0 if 1-D */
    size_t offset;      /* first float in the flat buffer */
    size_t count;       /* floats */
    int layer;          /* the layer whose span holds it (gpt_config_num_layers' order) */
    int decay;          /* 1 if AdamW applies weight decay (2-D weights, embeddings) */
    /* Tensor parallelism (below): how the tensor is split over a TP group. count is the floats
     * this model holds of it (its rank's shard; the whole tensor when tp_size is 1), full the
     * floats of the whole tensor (shape[0] * shape[1]). */
    int split;          /* GPT_SPLIT_* */
    int segs;           /* GPT_SPLIT_COLS / _VEC: the split dimension is segs equal segments,
                         * each split (c_attn: 3, q k v); else 1 */
    size_t full;
    /* 1 when each TP rank's gradient of this replicated tensor is a partial sum that the group
     * must add up (over the TP ranks, every rank getting the sum) before the optimizer: under
     * sequence parallelism (gpt_set_tp_sp) the layer norms of the blocks, ln_1 and ln_2, whose
     * W sees only the rank's rows. 0 otherwise (a split tensor is the rank's own; another
     * replicated one is already whole, bitwise the same on every rank). */
    int tp_sum;
} gpt_param_info;

/* How a tensor is split over the TP group (gpt_param_info.split). Rank r of t holds, of a
 * dimension of n (per segment), the part [n*r/t, n*(r+1)/t) (n divisible by t, checked at init;
 * wte's rows are padded first: see gpt_init_layers_tp). */
enum {
    GPT_SPLIT_NONE = 0, /* replicated: every TP rank holds all of it (layer norms, wpe, the
                         * biases of the row-parallel projections) */
    GPT_SPLIT_ROWS,     /* 2-D, along shape[0]: attn.c_proj.weight, mlp.c_proj.weight (rows =
                         * inputs: row-parallel), wte.weight (vocabulary rows, padded) */
    GPT_SPLIT_COLS,     /* 2-D, along shape[1] in segs segments: attn.c_attn.weight (3),
                         * mlp.c_fc.weight (1) (columns = outputs: column-parallel) */
    GPT_SPLIT_VEC,      /* 1-D, in segs segments: attn.c_attn.bias (3), mlp.c_fc.bias (1) */
};

/* The collective a tensor-parallel layer calls (the runtime provides it; the model knows no
 * transport). */
typedef struct {
    int rank, size;     /* this rank in its TP group */
    /* In-place sum of buf (n floats) over the group's ranks in a fixed rank order, so every rank
     * gets bitwise the same result. 0, or -1 with pt_seterr. */
    int (*allreduce)(void *ctx, float *buf, size_t n);
    void *ctx;
    /* Optional (NULL: not available), for overlap (gpt_set_tp_overlap): the same sum started
     * without waiting, bitwise what allreduce gives. iallreduce returns 0 and sets *req, or -1
     * with pt_seterr (*req unset). buf is the collective's until wait(req) returns; several may
     * be in flight, and every rank starts them in the same order. wait returns 0 once buf holds
     * the sum, or -1 with pt_seterr; either way req is finished (freed) by it. */
    int (*iallreduce)(void *ctx, float *buf, size_t n, void **req);
    int (*wait)(void *ctx, void *req);
    /* Optional (NULL: not available), for sequence parallelism (gpt_set_tp_sp). Slices: of n
     * floats, rank r's are [n*r/size, n*(r+1)/size) (comm_slice's rule); the model calls both
     * on (N,C) buffers with N divisible by size, so rank r's slice is rows [N*r/size,
     * N*(r+1)/size). Both in place and blocking, every rank calling them in the same order.
     * reduce_scatter: the sum of buf over the group in the fixed rank order allreduce uses
     * (bitwise its elements) into this rank's slice; the rest of buf unspecified afterwards.
     * allgather: every rank's slice of its buf into that slice of every rank's buf.
     * 0, or -1 with pt_seterr. */
    int (*reduce_scatter)(void *ctx, float *buf, size_t n);
    int (*allgather)(void *ctx, float *buf, size_t n);
} gpt_tp;

/* Tied tensors: a parameter tensor that lives in one layer's span (its owner) and is read by
 * another layer too (its user). GPT-2 has one: wte, owned by the embedding (layer 0) and read by
 * the head (layer L+1) as the LM head. A pipeline stage that holds the user but not the owner
 * keeps its own copy of the tensor and a gradient buffer for it, and the copies' gradients are
 * reduced with the owner's: the model says which tensors are tied, the runtime does the rest
 * without knowing what they are. */
typedef struct {
    int param;          /* index of the tensor in the parameter table (gpt_param_info_at) */
    int owner;          /* layer whose parameter span holds it */
    int user;           /* the other layer that reads it (and adds to its gradient in W) */
} gpt_tie;
#define GPT_MAX_TIES 2

/* A model may hold every layer (gpt_init) or only a contiguous range of them (gpt_init_layers: a
 * pipeline stage's share). Its tables always describe every tensor of the whole model, but
 * offsets (gpt_param_info.offset, layer_off, gpt_layers_param_span) index its own buffers and
 * mean something only for the layers it holds (gpt_holds_layer); the named pointers of a tensor
 * it does not hold are NULL. A whole model is the range [0, gpt_num_layers). */
typedef struct {
    gpt_config cfg;
    size_t num_params;          /* floats in the whole model (every layer, held or not, unsharded) */
    size_t n_held;              /* floats in params (and in grads): num_params for a whole model
                                 * of tp 1; a shard model's held layers' shards */
    int first_layer, end_layer; /* layers [first_layer, end_layer) are held */
    float *params;              /* (n_held) flat, 64-byte aligned, owned */
    float *grads;               /* (n_held) flat, owned */
    gpt_tensors w;              /* named pointers into params */
    gpt_tensors g;              /* named pointers into grads */
    size_t *layer_off;          /* [layers+1]: held layer i spans [layer_off[i], layer_off[i+1]) */
    gpt_param_info *info;       /* [n_info] in layout order */
    int n_info;
    gpt_tie ties[GPT_MAX_TIES]; /* [n_ties] tied tensors (gpt_tie_at) */
    int n_ties;
    int tp_rank, tp_size;       /* this model's shard (gpt_init_layers_tp); 0, 1 unsharded */
    int vocab_padded;           /* wte rows over the TP group: V rounded up to tp_size */
    gpt_tp tp;                  /* the group's collective (gpt_set_tp); unused when tp_size 1 */
    int tp_overlap;             /* 1: blocks overlap their all-reduces (gpt_set_tp_overlap) */
    int tp_sp;                  /* 1: sequence parallelism (gpt_set_tp_sp; only when tp_size > 1) */
    nn_precision precision;     /* the matmuls' number format (gpt_set_precision) */
    /* Private: buffers of gpt_forward_backward / gpt_forward, grown on demand. */
    float *fb_act, *fb_scratch, *fb_x;
    size_t fb_act_cap, fb_scratch_cap, fb_x_cap;
} gpt_model;


/* The buffers a user layer reads for each tie (gpt_tie above): an array of gpt_tie_count entries, or NULL. A NULL
 * array or NULL fields mean the model's own tensor and gradient. */
typedef struct {
    const float *w;     /* the tensor (wte: (V,C)), read by the user's F and B; of a TP shard
                         * model its shard (wte: (vocab_padded/tp, C), info[param].count floats) */
    float *dw;          /* the user's W adds its gradient of the tensor here (same size) */
} gpt_tied;

/* The built-in kinds; kinds registered at run time (gpt_kind_register) follow them, up to
 * GPT_MAX_KINDS in all. */
typedef enum { GPT_LAYER_EMBED, GPT_LAYER_BLOCK, GPT_LAYER_HEAD, GPT_N_LAYER_KINDS } gpt_layer_kind;
#define GPT_MAX_KINDS 8

/* ---- the layer sequence (gpt_seq.c) ---------------------------------------------------------
 * A model's layers in order: the embedding (layer 0), the n_layer blocks, each followed by the
 * layers its config inserts after it (gpt_config.insert_*), and the head (the last layer).
 * Other modules ask these instead of counting: with nothing inserted, block b is layer b + 1 and
 * the head layer n_layer + 1, but nothing outside model/ may rely on it. */
int gpt_config_num_layers(const gpt_config *cfg);           /* n_layer + 2 + n_insert */
int gpt_config_head_layer(const gpt_config *cfg);           /* the last layer */
gpt_layer_kind gpt_config_layer_kind(const gpt_config *cfg, int layer);
/* The block index (0..n_layer-1) of a block layer, -1 for a layer of another kind. */
int gpt_config_block_of(const gpt_config *cfg, int layer);
/* The layer of block b (0 <= b < n_layer). */
int gpt_config_block_layer(const gpt_config *cfg, int b);
/* How many block layers come before `layer`. */
int gpt_config_blocks_before(const gpt_config *cfg, int layer);
/* The block a layer travels with when blocks are split over pipeline chunks: a block itself; a
 * layer inserted after block b, b; the embedding and what is inserted before block 0, block 0;
 * the head, the last block. */
int gpt_config_layer_item(const gpt_config *cfg, int layer);
/* Layers of K pipeline chunks whose blocks are split as split[K] (blocks per chunk; NULL: even,
 * the first n_layer % K chunks one more): chunk c holds layers [first[c], first[c+1]) (first:
 * K + 1 entries), each layer with its block (gpt_config_layer_item). split must sum to n_layer,
 * each >= 1 (run_layout checks). */
void gpt_config_chunk_layers(const gpt_config *cfg, int K, const int *split, int *first);
/* The even split of n_layer blocks over K chunks (the first n_layer % K one more): blocks[K]. */
void gpt_config_even_split(const gpt_config *cfg, int K, int *blocks);
/* How many layers of each kind (count[GPT_MAX_KINDS], by kind id) chunk c of that split holds,
 * and travel with block `item` (gpt_config_layer_item). */
void gpt_config_chunk_kinds(const gpt_config *cfg, int K, const int *split, int c, int *count);
void gpt_config_item_kinds(const gpt_config *cfg, int item, int *count);

/* ---- layer kinds: the seam a new kind plugs into -------------------------------------------
 * Every layer kind is one row of a table (gpt_layers.c): what it reads from the batch, its
 * activation size, F, B, W, and its analytic cost. The runtime and the planner use only this
 * table and the parameter spans; a new kind (a tensor-parallel block) is one new row. */

/* What a layer reads besides the activation stream x: the batch's tokens (the embedding: no x),
 * or the targets, returning the mean loss instead of an activation (the head). */
enum { GPT_IO_TOKENS = 1u, GPT_IO_TARGETS = 2u };

/* Analytic cost of one layer on one microbatch of B x T tokens (docs/planner.md). */
typedef struct {
    double flops[3];        /* F, B (input grad), W (weight grad) */
    double act_bytes;       /* held from F to W (act_floats * 4) */
    double input_bytes;     /* the layer's input, kept per microbatch under recompute */
    double param_bytes;     /* fp32 parameters stored by the stage holding the layer */
    double grad_bytes;      /* fp32 gradients */
    double optim_bytes;     /* AdamW m and v (0 for a tied copy: its state lives with the owner) */
    /* Tensor parallelism over tp ranks (the cost functions' tp; 1: none): everything above is
     * one rank's share, and tp_bytes[F, B, W] is what one rank's collectives over its group
     * carry in that phase: the payload of each, summed (0 at tp 1, and always 0 in W). A
     * collective's payload is the buffer it is called on, 4 bytes a float: an all-reduce's, a
     * reduce-scatter's whole input, an all-gather's whole output (sequence parallelism). On a
     * ring a rank sends 2(tp-1)/tp of an all-reduce's payload and (tp-1)/tp of the other two's,
     * so a reduce-scatter and an all-gather of one (N,C) buffer move what one all-reduce of it
     * does, with twice its payload counted here. */
    double tp_bytes[3];
    int tp_collectives[3];  /* how many collectives those bytes are in (with overlap a block
                             * issues each all-reduce as two, of half the rows each: the same
                             * bytes) */
    /* Communication-free recomputation (gpt_layer_recompute): the bytes held from F to B
     * (4 * gpt_layer_keep_floats; the act is whole again only from the recompute to W), and
     * the FLOPs the recompute repeats before B (0 for kinds that keep their whole F part). The
     * other modes: act_bytes held (none repeated), or input_bytes held and flops[F] repeated
     * with F's all-reduces (tp_bytes[F]). */
    double keep_bytes;
    double recompute_flops;
    /* The collectives the recompute makes (payload bytes, count): 0 but under sequence
     * parallelism, where a block's keep prefix is its rows of x and res2 and the recompute
     * all-gathers ln_1's and ln_2's outputs again (F's two all-gathers). */
    double recompute_tp_bytes;
    int recompute_tp_collectives;
    /* Sequence chunks (gpt_chunk), for pricing a microbatch run as K chunks: att_flops[0], [1]
     * the attention's part of flops[F], flops[B] (the chunks of a microbatch do as much in all,
     * chunk c of K the share (2c+1)/K^2 of it; a chunk's B also recomputes the scores, half of
     * att_flops[0]); att_act_bytes the part of act_bytes a chunk does not keep (the attention
     * probabilities: a chunk's act is (act_bytes - att_act_bytes) / K); kv_bytes the kept keys
     * and values and their gradients per microbatch in flight. 0 in a kind without attention. */
    double att_flops[2];
    double att_act_bytes;
    double kv_bytes;
} gpt_layer_cost;

struct gpt_act_span;        /* bf16 storage of an act (model/gpt_act16.h, private to model/) */
struct gpt_chunk_ops;       /* a kind's F, B, W on sequence chunks (below) */

typedef struct {
    const char *name;       /* "embedding", "block", "head": the costs file's keys */
    unsigned io;            /* GPT_IO_* flags */
    size_t (*act_floats)(const gpt_model *m, int B, int T);
    /* The three below are gpt_layer_forward / _backward_input / _backward_weight for this kind
     * (contracts there), without the argument checks. */
    int (*forward)(const gpt_model *m, int layer, const gpt_tied *tied, float *act, float *scratch,
                   float *out, const float *x, const int *tokens, int B, int T);
    int (*backward_input)(const gpt_model *m, int layer, const gpt_tied *tied, float *act,
                          float *scratch, float *dx, const float *dout, int B, int T);
    int (*backward_weight)(const gpt_model *m, int layer, const gpt_tied *tied, const float *act,
                           float *scratch, int B, int T);
    void (*cost)(const gpt_config *cfg, int B, int T, int tp, gpt_layer_cost *out);
    /* The same with sequence parallelism on (gpt_set_tp_sp; at tp 1 it is cost's row). */
    void (*cost_sp)(const gpt_config *cfg, int B, int T, int tp, gpt_layer_cost *out);
    /* gpt_layer_keep_floats and gpt_layer_recompute for this kind (without the checks). */
    size_t (*keep_floats)(const gpt_model *m, int B, int T);
    int (*recompute)(const gpt_model *m, int layer, const gpt_tied *tied, float *act,
                     float *scratch, int B, int T);
    /* gpt_layer_act_saved_floats for this kind. */
    size_t (*saved_floats)(const gpt_model *m, int B, int T);
    /* At --precision bf16: the regions of its fp32 act in order, with how each is stored
     * (gpt_act16.h, private to model/), into s; returns how many. NULL: the act stays fp32. */
    int (*act16_spans)(const gpt_model *m, int B, int T, struct gpt_act_span *s);
    /* Sequence chunks (gpt_chunk, below): NULL for a kind whose F, B and W are row-wise (they
     * run on a chunk's rows as on a microbatch of sequences of T/K tokens), else its own. */
    const struct gpt_chunk_ops *chunk;
} gpt_layer_ops;

/* Registers a new layer kind (its row is borrowed: keep it alive) and returns its id, for
 * gpt_config.insert_kind; -1 when GPT_MAX_KINDS kinds exist. Call before any model uses it,
 * from one thread. A registered kind has no parameters (its layers add no tensors to the
 * parameter table), and reads the activation stream: io 0 (GPT_IO_* belong to the built-in
 * embedding and head). Its F, B and W get the whole (N,C) stream (N = B*T; under sequence
 * parallelism the rank's rows, gpt_stream_rows); W may do nothing. */
int gpt_kind_register(const gpt_layer_ops *ops);
/* Kinds registered so far (ids 0 .. gpt_kind_count() - 1; the built-ins first). */
int gpt_kind_count(void);
/* The row of a kind, and of a layer of m. */
const gpt_layer_ops *gpt_kind_ops(gpt_layer_kind kind);
const gpt_layer_ops *gpt_layer_ops_of(const gpt_model *m, int layer);
/* The cost row of a kind at tp ranks, with sequence parallelism (sp 1: the row's cost_sp) or
 * without (sp 0: its cost). */
void gpt_kind_cost(gpt_layer_kind kind, const gpt_config *cfg, int B, int T, int tp, int sp,
                   gpt_layer_cost *out);

/* ---- lifetime ---------------------------------------------------------------------------- */
/* Validates cfg and allocates params and grads (zeroed) and the tables. Returns 0, or -1 with
 * the config error. Free with gpt_free (also safe on a zeroed struct after a failed init). */
int gpt_init(gpt_model *m, const gpt_config *cfg);
/* The same for a partial model holding layers [first, end) only (0 <= first <= end <= L+2; an
 * empty range holds nothing: the config and tables alone). Its buffers hold n_held floats. */
int gpt_init_layers(gpt_model *m, const gpt_config *cfg, int first, int end);
void gpt_free(gpt_model *m);
/* Tensor parallelism (Megatron-LM's split; docs/tensor-parallel.md): a model of layers
 * [first, end) holding TP rank tp_rank's shard of a tp_size-rank group (tp_size 1: the same as
 * gpt_init_layers). tp_size must divide n_head (the error names both numbers); the heads, the
 * columns of c_attn and c_fc, the rows of both c_proj weights and the vocabulary rows of wte
 * (V padded up to a multiple of tp_size, vocab_padded; the padding rows are zero, get zero
 * gradients and stay zero) are split, the rest replicated (gpt_param_info.split). Every table
 * entry keeps its Hugging Face name and whole shape; count and the buffers are the shard's.
 * Before F/B of a sharded layer runs, gpt_set_tp must have given the group's collective.
 * Sharded layers: embedding F all-reduces its (N,C) output (rank 0 adds wpe); block F
 * all-reduces after each row-parallel projection and B after each column-parallel one's input
 * gradient (two each), W never; head F all-reduces per-token maxima, sums of exponentials and
 * target logits (vocab-parallel cross-entropy; loss equal on every rank), B its input gradient.
 * Without targets (logits only) a sharded head is an error. */
int gpt_init_layers_tp(gpt_model *m, const gpt_config *cfg, int first, int end, int tp_rank,
                       int tp_size);
/* The TP group's collective for m's layers (copied; tp->rank/size must be m's). */
void gpt_set_tp(gpt_model *m, const gpt_tp *tp);
/* Overlap of a sharded block's all-reduces with its own compute (Oases' two-sub-batch
 * ping-pong; docs/tensor-parallel.md): on (1) or off (0, the default). When on, a block's F and
 * B on a microbatch of B >= 2 sequences run on two halves (the first B/2 sequences, then the
 * rest), each half's all-reduce started (gpt_tp.iallreduce) while the other half computes:
 * F: half 0 to attn.c_proj's product, its sum started; half 1 the same; wait half 0's, finish
 * res2 and go on to mlp.c_proj's product, its sum started; wait half 1's, the same; then the
 * outputs. B alike with the two input-gradient sums. Each of a block's all-reduces is then two
 * of half the rows; W, the embedding and the head are unchanged, and B = 1 runs as without.
 * Results equal the path without overlap up to float rounding (every op is row-wise, but
 * OpenBLAS rounds a row's product differently at another row count, so not bitwise:
 * docs/tensor-parallel.md) and are bitwise equal on every rank. Call after gpt_set_tp: returns
 * -1 when on is asked of a sharded model whose collective has no iallreduce or wait; at tp 1 it
 * is accepted and changes nothing. Every rank of the group must use the same setting. */
int gpt_set_tp_overlap(gpt_model *m, int on);
/* Sequence parallelism (Megatron-LM's, Korthikanti et al. 2022; docs/tensor-parallel.md): on
 * (1) or off (0, the default). The (N,C) stream between layers, and so between pipeline stages,
 * is split by rows over the TP group: rank r holds rows [N*r/tp, N*(r+1)/tp) of every microbatch
 * (gpt_stream_rows; N = B*T must be divisible by tp, gpt_sp_check_rows), and the row-wise parts
 * of a block (layer norms, bias and residual adds) run on those rows only. Where a block
 * all-reduced, it reduce-scatters (after each row-parallel projection in F, each column-parallel
 * input gradient in B) and all-gathers before the matmuls that need every row (ln_1's and ln_2's
 * outputs in F; the stream's gradient, res2's and again ln_1's and ln_2's outputs in B): F two
 * of each, B two reduce-scatters and four all-gathers, W none. A block keeps only its rows of
 * every (N,C) activation (its act is 1/tp of the act at tp 1), so under sp a block's B also
 * computes the four matmuls' weight gradients (c_attn, attn.c_proj, c_fc, mlp.c_proj, weights
 * and biases: they need all rows of ln1, ln2 and of the gradients at the projections' outputs,
 * which B gathers and W, having no collective, could not), and W only the layer norms' partial
 * ones. Schedules keep their order (W after B), but a zero-bubble schedule's W has little left
 * to fill bubbles with under sp (the cost rows say so: cost_sp's B FLOPs hold the matmuls' dW,
 * W's none). The
 * embedding reduce-scatters its output (F) and all-gathers its output gradient (B, for wte's and
 * wpe's W); the head all-gathers its input (F) and B gives its rows of the input gradient. Every
 * layer's x, out, dout and dx are then (gpt_stream_rows, C). Results: bitwise those of the
 * model without it (the same sums in the same order, row by row), but the gradients of the
 * tensors marked tp_sum (gpt_param_info), partial per rank: their sum over the group, which the
 * caller takes before the optimizer, equals the gradient without sp up to float rounding.
 * Sizes change (gpt_layer_act_floats, gpt_layer_keep_floats, gpt_scratch_floats): ask them
 * after this call. Call after gpt_set_tp: returns -1 when on is asked of a sharded model whose
 * collective has no reduce_scatter or allgather, or that overlaps (gpt_set_tp_overlap: not
 * with sp). At tp 1 it is accepted and changes nothing. Every rank of the group the same. */
int gpt_set_tp_sp(gpt_model *m, int on);
/* The number format of m's matmuls (`--precision`; nn_bf16.h): NN_FP32, or NN_BF16 (inputs
 * rounded to bf16, fp32 sums; parameters, gradients, layer norms, softmax and the loss stay
 * fp32). A model starts with the process's default (gpt_set_default_precision), which the CLI
 * sets once from `--precision` before any model exists, so that every model of a run (stages,
 * replicas, TP shards, eval copies) agrees without each layer of the runtime passing it on. */
void gpt_set_precision(gpt_model *m, nn_precision p);
void gpt_set_default_precision(nn_precision p);
nn_precision gpt_default_precision(void);
/* Rows of the (N,C) activation stream this rank's layers take and give on a microbatch of (B,T)
 * (x, out, dout, dx of gpt_layer_forward and gpt_layer_backward_input): N = B*T, or N/tp under
 * sequence parallelism; 0 when sp is on and tp does not divide N (the layers refuse it). */
size_t gpt_stream_rows(const gpt_model *m, int B, int T);
/* 0 when a microbatch of (B,T) can run under sequence parallelism over tp ranks (tp divides
 * B*T), else -1 with an error naming N, B, T and tp. */
int gpt_sp_check_rows(int B, int T, int tp);
/* Floats of tensor pi held by each rank of a group of `size` (the same for every rank): ROWS
 * ceil(shape[0]/size) * shape[1] (rows padded), COLS and VEC full/size, NONE full. cfg may be
 * NULL (pi says all). */
size_t gpt_shard_count(const gpt_config *cfg, const gpt_param_info *pi, int size);
/* Rank `rank`'s shard of a whole tensor: whole (pi->full floats, HF layout) -> shard
 * (gpt_shard_count floats; padding rows zero), and back (place: the shard's elements into whole;
 * padding dropped, the rest of whole untouched). size 1: a copy. */
void gpt_shard_extract(const gpt_config *cfg, const gpt_param_info *pi, int rank, int size,
                       const float *whole, float *shard);
void gpt_shard_place(const gpt_config *cfg, const gpt_param_info *pi, int rank, int size,
                     const float *shard, float *whole);
/* The index map under those two, run by run: rank `rank`'s shard element k (< gpt_shard_count)
 * starts a run of the returned length, contiguous in the whole tensor from element *whole_at
 * (GPT_SHARD_PAD: padding rows, in no whole tensor). For writers that place a shard without
 * the whole tensor (checkpoint files filled in place). */
#define GPT_SHARD_PAD ((size_t)-1)
size_t gpt_shard_run(const gpt_param_info *pi, int rank, int size, size_t k, size_t *whole_at);
/* The layer holding a parameter of a config's model, by its Hugging Face name without
 * "transformer." (wte, wpe: the embedding; h.i.*: block i's layer; ln_f.*: the head), or -1. */
int gpt_config_param_layer(const gpt_config *cfg, const char *name);
/* Floats of every parameter of a config's model (what gpt_init's num_params will be). */
size_t gpt_config_num_params(const gpt_config *cfg);
/* GPT-2 initialisation from pt_rng(seed): weights and embeddings normal(0, 0.02), residual
 * projections (attn.c_proj.weight, mlp.c_proj.weight) normal(0, 0.02/sqrt(2L)), biases 0,
 * layernorm weights 1. Deterministic for a seed; draws tensors in layout order, so a partial
 * model gets exactly the values the whole model has in its layers (it draws, and drops, the
 * numbers of the layers before them). */
void gpt_init_random(gpt_model *m, uint64_t seed);
/* Elements [start, start + n) of tensor `param` as gpt_init_random(seed) makes them (for a
 * tensor a partial model does not hold, e.g. a tied copy). Of a sharded model (tp_size > 1):
 * elements of m's shard of the tensor (start + n <= its count), as gpt_shard_extract would cut
 * them from the whole tensor's init. A sharded model's gpt_init_random gives every held shard
 * exactly the values the whole model's init has there. */
void gpt_init_random_slice(const gpt_model *m, uint64_t seed, int param, size_t start, size_t n,
                           float *out);
/* grads = 0 (the held layers'). */
void gpt_zero_grad(gpt_model *m);

/* ---- layers ------------------------------------------------------------------------------ */
int gpt_num_layers(const gpt_model *m);                     /* gpt_config_num_layers */
gpt_layer_kind gpt_layer_kind_of(const gpt_model *m, int layer);
/* 1 when m holds layer's parameters (a whole model holds every layer). */
int gpt_holds_layer(const gpt_model *m, int layer);
/* Layer's span of params and grads: floats [*offset, *offset + *count). The spans of the held
 * layers tile [0, n_held) in order. The head's span is ln_f only (its wte is layer 0's).
 * The layer must be held (an assert says so otherwise). */
void gpt_layer_param_span(const gpt_model *m, int layer, size_t *offset, size_t *count);
/* The span of layers [first, end) (contiguous, since layer spans tile the buffer in order); every
 * one of them held (first == end: an empty span). */
void gpt_layers_param_span(const gpt_model *m, int first, int end, size_t *offset, size_t *count);
/* Tied tensors (see gpt_tie above): how many, and the i-th (NULL if out of range). */
int gpt_tie_count(const gpt_model *m);
const gpt_tie *gpt_tie_at(const gpt_model *m, int i);
/* Floats of act storage one microbatch of (B,T) needs for this layer (see the contract above):
 * B*T times, per token: embedding 1 + C; block 27C + 4 + NH*T (16C + 4 + NH*T saved by F,
 * 11C stored by B for W); head 3C + 3 + V. Of a TP shard model (tp ranks): block
 * 8C + 19C/tp + 4 + NH/tp*T, head 3C + 3 + vocab_padded/tp (what the cost rows' act_bytes say);
 * under sequence parallelism a block 27C/tp + 4/tp + NH/tp*T, 1/tp of tp 1's (every (N,C)
 * region the rank's rows: B all-gathers ln_1's and ln_2's outputs and the gradients at the
 * projections' outputs into scratch where it needs them whole, and computes the matmuls' weight
 * gradients there), the others the same. */
size_t gpt_layer_act_floats(const gpt_model *m, int layer, int B, int T);
/* The first floats of that storage, the part F fills (per token: embedding 1, block 16C + 4 +
 * NH*T, head 2C + 3 + V; a TP shard's: block 4C + 12C/tp + 4 + NH/tp*T, head 2C + 3 +
 * vocab_padded/tp; under sp a block 16C/tp + 4/tp + NH/tp*T); the rest B writes (and W
 * reads; under sp a block's W reads only the layer norms' input gradients). A caller
 * that runs each layer's B and W back to back, the last layer first (gpt_forward_backward), may
 * let that rest overlap the next layer's act: it is written only after the next layer's W. */
size_t gpt_layer_act_saved_floats(const gpt_model *m, int layer, int B, int T);
/* Communication-free recomputation (Oases' fine-grained recomputation; docs/tensor-parallel.md):
 * the first floats of the act that must be kept from F to B when the rest of the F part is
 * rebuilt by gpt_layer_recompute: a block's input x and res2 (x + the summed attention
 * projection), 2*N*C at any tp, the rank's rows 2*N/tp*C under sequence parallelism (the
 * block's output is the next layer's input, kept there); the embedding's and the head's whole F
 * part (gpt_layer_act_saved_floats: not recomputed). */
size_t gpt_layer_keep_floats(const gpt_model *m, int layer, int B, int T);
/* Rebuilds the F part of act after its keep prefix, which must hold what F wrote there (the
 * rest may hold anything, e.g. another microbatch's act), bitwise what F wrote: a block's ln_1,
 * c_attn, attention from x and ln_2, c_fc, GELU from res2, in the halves F ran in (same
 * overlap setting). No collective: the projections and their all-reduces are not needed, their
 * results being kept; but under sequence parallelism, where ln_1 and ln_2 run on the rank's
 * rows (the act keeps those rows only) and are all-gathered into scratch again as in F, for
 * c_attn and c_fc (two all-gathers of (N,C), in F's order:
 * every rank of the group must recompute the same layers in the same order). Embedding and head:
 * nothing to do. Then B and W on act give bitwise the gradients of the path without it. Same B,
 * T, tied as F; scratch as F's. Returns 0, or -1 (B, T out of range, or sp's rows not divisible;
 * a failed all-gather). */
int gpt_layer_recompute(const gpt_model *m, int layer, const gpt_tied *tied, float *act,
                        float *scratch, int B, int T);
/* The same as bytes per token at sequence length T (attention keeps NH*T floats per token). */
size_t gpt_layer_act_bytes_per_token(const gpt_model *m, int layer, int T);
/* Floats of per-thread scratch any layer needs for a (B,T) microbatch: B*T*4C/tp + T*T (a
 * block's B; under sequence parallelism B*T*C + T*T: the (N,C) buffer of its all-gathers and
 * reduce-scatters), or more for a sharded head's F when tp is large: B*T*(tp + 3). */
size_t gpt_scratch_floats(const gpt_model *m, int B, int T);
/* The scratch of chunked calls (gpt_layer_*_chunk, K chunks of (B,T)): gpt_scratch_floats, but at
 * --precision bf16 with K > 1 a work area of the largest chunk act instead of a whole one. */
size_t gpt_scratch_floats_chunks(const gpt_model *m, int B, int T, int K);

/* F of one layer on one microbatch. tied: the tie buffers (NULL = the model's own; only a tie's
 * user layer reads them).
 *   embedding: tokens (B,T) in [0,V), x unused (NULL), out (B,T,C).
 *   block:     x (B,T,C), tokens unused (NULL), out (B,T,C).
 *   head:      x (B,T,C), tokens = targets (B,T) in [0,V), out[0] = mean cross-entropy.
 *              With targets NULL it computes logits only: out (B,T,V) (no B/W possible then).
 * Under sequence parallelism (gpt_set_tp_sp) every (B,T,C) above is the rank's rows of it,
 * (gpt_stream_rows, C). Requires 1 <= T <= maxT (and under sp tp dividing B*T). Returns 0, or -1
 * naming the bad token, its position and the layer, or a failed collective. */
int gpt_layer_forward(const gpt_model *m, int layer, const gpt_tied *tied, float *act,
                      float *scratch, float *out, const float *x, const int *tokens, int B, int T);
/* B of one layer on one microbatch, after its F.
 *   embedding: dout (B,T,C) is kept in act for W; dx unused (NULL).
 *   block:     dout (B,T,C) -> dx (B,T,C) (written, =).
 *   head:      dout = NULL, or one float: the gradient of the objective w.r.t. this microbatch's
 *              mean loss (e.g. 1/M to average over M microbatches; NULL = 1). dx (B,T,C).
 * Under sequence parallelism the (B,T,C) are the rank's rows, as in F.
 * Returns 0, or -1 when a sharded layer's all-reduce failed (its error, prefixed with the layer). */
int gpt_layer_backward_input(const gpt_model *m, int layer, const gpt_tied *tied, float *act,
                             float *scratch, float *dx, const float *dout, int B, int T);
/* W of one layer on one microbatch, any time after its B: adds (+=) the parameter gradients to
 * the layer's span of m->grads (head: ln_f there, wte's to tied[0].dw or m->g.wte). Reads act
 * only; no collective, also when sharded. Under sequence parallelism a block's B has already
 * added its matmuls' weight gradients (they need rows that only B gathers: gpt_set_tp_sp), so
 * its W adds the layer norms' alone. Returns 0. */
int gpt_layer_backward_weight(const gpt_model *m, int layer, const gpt_tied *tied,
                              const float *act, float *scratch, int B, int T);

/* ---- sequence chunks (gpt_chunk.c; train --seq-chunks, TeraPipe / seq1F1B) ----------------
 * A microbatch of B sequences of T tokens runs as K chunks of Tc = T/K tokens (K divides T), each
 * an F, B and W of its own on the chunk's (B,Tc) rows: x, out, dout, dx (B,Tc,C), tokens and
 * targets (B,Tc) (columns [c*Tc, (c+1)*Tc) of the microbatch's). The embedding adds the
 * positions of the chunk; a block's attention reads the keys and values of chunks 0..c of the
 * microbatch from kv, where its F of chunk c writes the chunk's own (causal within the chunk);
 * its B adds to the key and value gradients of chunks 0..c in dkv and takes its own from there,
 * so B runs in reverse chunk order per microbatch (chunk K-1 first; the F of every chunk before
 * any B), and kv and dkv live from chunk 0's F to chunk 0's B. Each chunk's head loss is the
 * mean over its B*Tc tokens: with dloss 1/(K*M) per chunk the gradients are those of the
 * unchunked model (float tolerance: attention sums in another order). Acts are fp32 (no bf16
 * storage). The chunk calls need K >= 2 (K = 1 is the plain model). Not with sequence
 * parallelism, --tp-overlap or recompute (gpt_chunk_check). */
typedef struct {
    int c, K;           /* chunk c of K */
    float *kv;          /* block layers: (B,T,2C/tp) keys then values of each position (the
                         * rank's heads), gpt_layer_kv_floats; other kinds: unused */
    float *dkv;         /* the same shape: their gradients, zeroed by the caller before chunk
                         * K-1's B, added to by every chunk's B */
} gpt_chunk;

/* A kind's own chunk path (gpt_layer_ops.chunk): act floats of chunk c (ck->kv unused), and F,
 * B, W as gpt_layer_forward_chunk & co. without the checks. */
typedef struct gpt_chunk_ops {
    size_t (*act_floats)(const gpt_model *m, int B, int T, const gpt_chunk *ck);
    size_t (*kv_floats)(const gpt_model *m, int B, int T);
    int (*forward)(const gpt_model *m, int layer, const gpt_tied *tied, const gpt_chunk *ck,
                   float *act, float *scratch, float *out, const float *x, const int *tokens,
                   int B, int T);
    int (*backward_input)(const gpt_model *m, int layer, const gpt_tied *tied, const gpt_chunk *ck,
                          float *act, float *scratch, float *dx, const float *dout, int B, int T);
    int (*backward_weight)(const gpt_model *m, int layer, const gpt_tied *tied,
                           const gpt_chunk *ck, const float *act, float *scratch, int B, int T);
    /* Optional, for bf16 storage of a chunk's act (--precision bf16; NULL: it stays fp32): the
     * fp32 act's F part (the plain row's saved_floats) and its regions (act16_spans). */
    size_t (*saved_floats)(const gpt_model *m, int B, int T, const gpt_chunk *ck);
    int (*act16_spans)(const gpt_model *m, int B, int T, const gpt_chunk *ck, struct gpt_act_span *out);
} gpt_chunk_ops;

/* 0 when m can run microbatches of (B,T) in K chunks (K >= 1 divides T; no sp, overlap), else -1
 * with an error naming K, T and what to change. */
int gpt_chunk_check(const gpt_model *m, int B, int T, int K);
/* Floats of layer's act for chunk c of K (T the whole length): the act of (B,T/K) rows, but a
 * block keeps no attention probabilities (its B recomputes them from q and the kept k, v: one
 * more product of the scores, flash attention's trade), so every chunk's act is the same, 1/K
 * of a microbatch's rows. */
size_t gpt_layer_chunk_act_floats(const gpt_model *m, int layer, int B, int T, int c, int K);
/* Floats of layer's kept keys and values per microbatch (kv, and dkv alike): a block B*T*2C/tp,
 * other kinds 0. */
size_t gpt_layer_kv_floats(const gpt_model *m, int layer, int B, int T);
/* F, B, W of one layer on chunk ck of a microbatch of (B,T) (the contracts of gpt_layer_forward &
 * co. on the chunk's rows, with the order and buffers above; W reads the act alone: its ck needs
 * no kv); scratch as gpt_scratch_floats(m, B, T). Return 0, or -1 (bad chunk, token, or a failed
 * collective). */
int gpt_layer_forward_chunk(const gpt_model *m, int layer, const gpt_tied *tied, const gpt_chunk *ck,
                            float *act, float *scratch, float *out, const float *x,
                            const int *tokens, int B, int T);
int gpt_layer_backward_input_chunk(const gpt_model *m, int layer, const gpt_tied *tied,
                                   const gpt_chunk *ck, float *act, float *scratch, float *dx,
                                   const float *dout, int B, int T);
int gpt_layer_backward_weight_chunk(const gpt_model *m, int layer, const gpt_tied *tied,
                                    const gpt_chunk *ck, const float *act, float *scratch, int B,
                                    int T);
/* gpt_forward_backward in K chunks (every F in chunk order, then B and W in reverse chunk order),
 * one process: gradients += those of the batch (equal to gpt_forward_backward's up to float
 * rounding), *loss its mean cross-entropy. Needs a model of every layer. Allocates per call. */
int gpt_forward_backward_chunks(gpt_model *m, const int *tokens, const int *targets, int B, int T,
                                int K, float *loss);

/* ---- whole model, one process ------------------------------------------------------------ */
/* These three need a model of every layer (gpt_init). F, then B and W of every layer on one
 * batch; gradients accumulate (+=) into m->grads, *loss gets the mean cross-entropy. tokens,
 * targets (B,T). Not reentrant on one model (it keeps its buffers in m). Returns 0, or -1 (bad
 * token, T > maxT, a failed TP collective). gpt_forward_backward also runs one TP rank's shard
 * of every layer (gpt_init_layers_tp, gpt_set_tp, optionally gpt_set_tp_sp: the tp_sum
 * gradients are then the rank's partial sums) when every rank of the group calls it on the
 * same batch; the two logits functions need tp 1 (-1 otherwise). */
int gpt_forward_backward(gpt_model *m, const int *tokens, const int *targets, int B, int T,
                         float *loss);
/* Forward only: logits (B,T,V) for tokens (B,T). Same reentrancy and errors as above. */
int gpt_forward(gpt_model *m, float *logits, const int *tokens, int B, int T);
/* Forward only, for sampling: logits (B,V) of the last position (t = T-1) of each row; skips the
 * head's work on the other positions. Same reentrancy and errors as above. */
int gpt_forward_last(gpt_model *m, float *logits, const int *tokens, int B, int T);

/* ---- tables ------------------------------------------------------------------------------ */
int gpt_param_count(const gpt_model *m);                    /* number of tensors */
const gpt_param_info *gpt_param_info_at(const gpt_model *m, int i);   /* NULL if out of range */
/* Index of the tensor with this HF name (with or without "transformer."), or -1. */
int gpt_param_find(const gpt_model *m, const char *name);
/* Model FLOPs of one training step (F+B+W) on B x T tokens: 6*N*B*T + 6*L*B*T*T*C, with N the
 * whole model's parameter count without the position embedding. */
double gpt_flops_per_step(const gpt_model *m, int B, int T);

#endif
