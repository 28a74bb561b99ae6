/* Checkpoints: a folder with one safetensors file per model chunk, "chunk-<c>.safetensors"
 * (that chunk's parameters under Hugging Face GPT-2 names, wte only in chunk 0's file, and the
 * AdamW moments "m/<name>", "v/<name>"), or, when the moments were sharded (--zero 1), one file
 * of moment slices per rank, "optim-<rank>.safetensors" ("m/<name>@<start>"); and manifest.json
 * (config, progress, data position, seeds, the layout it was saved under, each file's bytes and
 * FNV-1a checksum). Every rank writes its own files: nothing is gathered.
 * The folder is written under a temporary name and renamed only when complete: under its real
 * name it is complete or absent, and a crash mid-save never touches an older checkpoint.
 * Loading reads tensors (and slices of them) by name from whichever file holds them, so a
 * checkpoint saved under one layout (split, dp, zero) loads under any other. A save root (the
 * folder of "ckpt-<step>" folders) can be resumed from its newest checkpoint, cleared of a
 * crashed save's leftovers, and pruned to the newest N. Not here: deciding when to save, who
 * writes what. Format details: docs/checkpoints.md. */
#ifndef PT_TRAIN_CHECKPOINT_H
#define PT_TRAIN_CHECKPOINT_H
#include <stddef.h>
#include <stdint.h>
#include "model/gpt.h"
#include "optim/optim.h"

#define CKPT_MAX_CHUNKS 256

/* One model chunk's file: layers [first_layer, end_layer) (0 embedding, 1..L blocks, L+1 head). */
typedef struct {
    int first_layer, end_layer;
    size_t bytes;           /* file size, filled by ckpt_commit, checked by ckpt_read_manifest */
    uint64_t fnv1a64;       /* FNV-1a 64 of the whole file, likewise */
} ckpt_chunk;

typedef struct {
    gpt_config cfg;
    long step;              /* optimizer updates done; training resumes at step + 1 */
    int adam_t;             /* AdamW's bias-correction step count */
    int batch, seq;         /* B, T */
    uint64_t shuffle_seed;  /* 0: sequential batches; data position = step (see io/data.h) */
    uint64_t init_seed;
    char data_path[1024];   /* training data, as given on the command line */
    /* The layout it was saved under (informational: loading works under any layout). All zero
     * in a manifest given to ckpt_save means one process: P = D = K = 1, one chunk. */
    int P, D, K, n_pipes;
    int tp;                 /* tensor-parallel ranks (0 or 1: none); the files hold whole
                             * tensors all the same (each TP rank's shard written in place) */
    char schedule[32];      /* schedule name, "" when none */
    int n_chunks;           /* == K; chunk c is in file "chunk-<c>.safetensors" */
    ckpt_chunk chunks[CKPT_MAX_CHUNKS];
    int zero;               /* 1: the moments are in the shard files, not the chunk files */
    int n_shards;           /* --zero 1: ranks; shard r is "optim-<r>.safetensors". Their sizes
                             * and checksums go from the files to the manifest's JSON and back,
                             * never held here: any number of ranks */
    int has_optim;          /* 1 when the files hold AdamW moments (set by commit / read) */
    /* The rule the moments belong to (ckpt_optim.c): "optim" and "nadam_mu_product" in the
     * manifest only for NAdam, so AdamW manifests are as before; absent reads as AdamW. */
    optim_kind optim;
    double nadam_beta1, nadam_momentum_decay;   /* to write NAdam's mu product at adam_t (NaN when
                                                 * read back: then the stored product is written) */
    double nadam_mu_product;                    /* as read back (NAdam) */
    int n_states;           /* ranks whose own state is in "state-<r>.safetensors" (ckpt/ckpt_state.h:
                             * asynchronous versions, corrections, --dp-sync); 0: none (version < 4).
                             * Their sizes and checksums go from the files to the manifest's JSON
                             * and back, never held here: any number of ranks */
} ckpt_manifest;

/* One slice of a tensor's AdamW moments: elements [start, start + n) of tensor `name`. */
typedef struct {
    const char *name;       /* Hugging Face name */
    size_t start, n;
    const float *m, *v;     /* (n) each */
} ckpt_slice;

/* ---- distributed save: begin (one rank), write_chunk (each chunk once), commit (one rank) --- */

/* Fills man's layout fields: P, D, K chunks, n_pipes, schedule (may be NULL), and chunk c =
 * layers [chunk_first[c], chunk_first[c+1]) for c < K. -1 if K is out of 1..CKPT_MAX_CHUNKS. */
int ckpt_manifest_set_layout(ckpt_manifest *man, int P, int D, int K, int n_pipes,
                             const char *schedule, const int *chunk_first);
/* --zero 1: the moments are in n_ranks shard files (ckpt_write_shard), one per world rank,
 * and the chunk files hold parameters only. -1 if n_ranks < 1. */
int ckpt_manifest_set_shards(ckpt_manifest *man, int n_ranks);
/* Every one of n_ranks world ranks writes its state file (ckpt_state_write into the temporary
 * folder) before the commit, which checksums them. -1 if n_ranks is negative. */
int ckpt_manifest_set_states(ckpt_manifest *man, int n_ranks);
/* The optimizer rule of the run (--optim) into a manifest about to be saved. */
void ckpt_manifest_set_optim(ckpt_manifest *man, const optim_config *oc);
/* Resuming with oc from checkpoint dir (manifest man): -1 when the rule differs (the moments
 * belong to the saved one) or, for NAdam, when the saved mu product is not the one oc's --beta1
 * and --momentum-decay give at adam_t; the error says which flags to give. */
int ckpt_check_optim(const ckpt_manifest *man, const optim_config *oc, const char *dir);
/* The temporary folder name for dir written by process `pid`: "<dir>.tmp.<pid>". Ranks that are
 * other processes (MPI) get rank 0's pid from it (e.g. by a reduction) and call this to learn
 * where to write. -1 if it does not fit in n. */
int ckpt_tmpdir_name(const char *dir, long pid, char *tmpdir, size_t n);
/* World rank 0, before any chunk is written: creates "<dir>.tmp.<getpid()>" fresh (a stale one
 * of that name is removed first, and so are a crashed save's leftovers next to dir:
 * ckpt_clean_stale), and dir's parent folders; puts the name in tmpdir[n]. dir itself is not
 * touched. Returns 0, or -1 naming the path. */
int ckpt_begin(const char *dir, char *tmpdir, size_t n);
/* Writes tmpdir/chunk-<chunk>.safetensors with the parameters of layers [first_layer,
 * end_layer) from m->params (m whole, or partial holding them), and their AdamW moments from
 * opt (laid out like m->params; opt NULL: no moments; every chunk of one checkpoint must
 * agree). The embedding's wte goes only into the file of the chunk holding layer 0; a head
 * holder's tied copy is not saved.
 * Reads m and opt only: any rank or thread may write its chunk concurrently with the others.
 * Each chunk must be written exactly once (with two pipes, by one of its holders). Atomic per
 * file. Returns 0, or -1 naming the file. */
int ckpt_write_chunk(const char *tmpdir, int chunk, int first_layer, int end_layer,
                     const gpt_model *m, const adamw_state *opt);
/* Writes tmpdir/optim-<rank>.safetensors with the moment slices sl[0..n) of world rank `rank`
 * (every element of every tensor must be in exactly one rank's file; n may be 0). Reads sl only;
 * atomic per file. Returns 0, or -1 naming the file. */
int ckpt_write_shard(const char *tmpdir, int rank, const ckpt_slice *sl, int n);
/* ---- chunk files filled in place (tensor parallelism: each TP rank writes its shard) ------
 * No rank gathers: the creator makes the file (header, final size), and after a barrier every
 * writer pwrites its elements at their places; after another barrier commit hashes the file.
 * The bytes are those ckpt_write_chunk writes from the whole tensors. Every element must be
 * written by exactly one writer (the padding rows of a TP shard of wte are in no file). */

/* The creator of chunk `chunk` (layers [first_layer, end_layer); m: any model of the config,
 * whole or a shard, for its tensor table): tmpdir/chunk-<chunk>.safetensors with its header,
 * parameters (and moments when has_optim) reserved, at its final size; fsynced. Not atomic
 * per file: the folder is (commit). 0, or -1 naming the file. */
int ckpt_chunk_create(const char *tmpdir, int chunk, int first_layer, int end_layer,
                      const gpt_model *m, int has_optim);
/* What one writer did (ckpt_placer_close): bytes and pwrite calls, files opened, and the largest
 * buffer the placing allocated (a file's header and offset table: never a tensor). */
typedef struct { size_t bytes, writes, max_alloc; int files; } ckpt_place_stats;
typedef struct ckpt_placer ckpt_placer;
/* A writer into the chunk files of tmpdir (created by ckpt_chunk_create, behind a barrier),
 * laid out by man's chunk ranges (ckpt_manifest_set_layout) and m's tensor table (kept: must
 * outlive the placer); has_optim as the creators'. Files open on first use. 0. */
int ckpt_placer_open(ckpt_placer **out, const char *tmpdir, const ckpt_manifest *man,
                     const gpt_model *m, int has_optim);
/* Writes elements [start, start + n) of TP rank `rank`'s shard (of `size`; 1: the whole tensor)
 * of tensor `param` (m's table) from src (n floats) where the whole tensor has them: what 0 the
 * parameters, 1 "m/", 2 "v/". Runs contiguous in the file go in one pwrite (a row split is one
 * run; a column split one per row and segment); padding rows are skipped. A replicated tensor
 * (GPT_SPLIT_NONE: every TP rank holds the same) is written by rank 0 only: the others' puts
 * of it do nothing. -1 naming the file. */
int ckpt_placer_put(ckpt_placer *p, int what, int param, int rank, int size, size_t start,
                    size_t n, const float *src);
/* The moments of one slice (start, n index the shard of `rank` of `size`): its m and v. */
int ckpt_placer_put_slice(ckpt_placer *p, const ckpt_slice *sl, int rank, int size);
/* fsyncs and closes the files this writer opened (each writer its own: on a shared filesystem
 * the data is on disk before the barrier that precedes commit's checksum); *stats (may be NULL)
 * gets what it did. Frees p (NULL is fine). 0, or -1 naming the file. */
int ckpt_placer_close(ckpt_placer *p, ckpt_place_stats *stats);

/* World rank 0, after every chunk (and shard) file is written (a barrier): checks each chunk
 * file of man->chunks exists and holds the layer range the manifest says, that the ranges tile
 * layers [0, L+2) in order, that each shard file is there, fills bytes and checksums, writes
 * manifest.json, fsyncs, and renames tmpdir to dir. An existing dir is replaced only after the
 * new folder is complete (an atomic exchange where the filesystem has one). On failure tmpdir
 * is removed, dir is untouched, and -1 names the file. man is not modified. */
int ckpt_commit(const char *dir, const char *tmpdir, const ckpt_manifest *man);
/* Removes a temporary folder after a failed save (only the files a checkpoint holds). */
void ckpt_abandon(const char *tmpdir);

/* ---- load ------------------------------------------------------------------------------- */

/* Reads and checks dir/manifest.json (every field present and well typed, chunk ranges tiling
 * the model's layers exactly) and verifies the size and checksum of every chunk file. Errors
 * name the file and field ("run/ckpt-10/chunk-1.safetensors: checksum mismatch (file changed
 * or corrupt)", "run/ckpt-10/manifest.json: field \"step\" missing ..."). */
int ckpt_read_manifest(ckpt_manifest *man, const char *dir);
/* Loads the parameters of layers [first_layer, end_layer) into m->params (m allocated with
 * man->cfg) and, when opt is not NULL, their AdamW moments into opt->m, opt->v (opt->n ==
 * m->num_params; -1 if the checkpoint has none). Tensors are read from whichever chunk file
 * holds their layer, whatever split the checkpoint was saved with. Does not set opt->t (use
 * man->adam_t) and does not load a head holder's tied wte copy (see ckpt_load_tensor). Safe to
 * call from several threads at once for disjoint layer ranges of one model. Call after
 * ckpt_read_manifest (which verified the files). Returns 0, or -1 naming file and tensor. */
int ckpt_load_layers(const char *dir, const ckpt_manifest *man, gpt_model *m, adamw_state *opt,
                     int first_layer, int end_layer);
/* Loads one tensor by Hugging Face name (e.g. "wte.weight") of count floats: the parameter into
 * param and its moments into mom_m, mom_v (each may be NULL; moments need has_optim). For the
 * head holder's own copy of the tied wte and its moments. Returns 0, or -1 naming the file. */
int ckpt_load_tensor(const char *dir, const ckpt_manifest *man, const char *name, size_t count,
                     float *param, float *mom_m, float *mom_v);

/* ---- slices of tensors, for one rank's share -------------------------------------------- */

typedef struct ckpt_reader ckpt_reader;
/* Opens the files of checkpoint dir (its manifest man read and checked by ckpt_read_manifest)
 * for reading slices. The files are mapped, not read: a rank touches only what it reads. Reads
 * may run on several threads at once. -1 naming the file. */
int ckpt_reader_open(ckpt_reader **out, const char *dir, const ckpt_manifest *man);
/* Elements [start, start + n) of tensor `name` (Hugging Face name, e.g. "h.3.attn.c_attn.weight",
 * flattened): its parameters into w and its AdamW moments into mm, vv (each may be NULL; moments
 * need man->has_optim), from whichever file holds them. -1 naming the file and tensor. */
int ckpt_reader_read(const ckpt_reader *r, const char *name, size_t start, size_t n, float *w,
                     float *mm, float *vv);
void ckpt_reader_close(ckpt_reader *r);

/* ---- a save root: the folder of "ckpt-<step>" checkpoints --------------------------------- */

/* path is a checkpoint folder (it has manifest.json): copies it to out. Else, when path holds
 * checkpoint folders "ckpt-<step>", the one with the largest step (only complete ones bear
 * that name; a crashed save's "ckpt-<step>.tmp.<pid>" is skipped). -1 naming path when it is
 * neither. */
int ckpt_resolve(const char *path, char *out, size_t n);
/* Removes the temporary folders "<name>.tmp.<pid>" a crashed save left in root (those whose
 * process is gone; one with a ".old" sibling is left: see docs/checkpoints.md). Returns how
 * many it removed. */
int ckpt_clean_stale(const char *root);
/* Keeps the newest `keep` (>= 1) checkpoints "ckpt-<step>" of root by step, and `saved` (the
 * one just written) whatever its step; removes the others. Returns how many it removed, or -1
 * naming the folder it could not remove. */
int ckpt_prune(const char *root, int keep, const char *saved);

/* ---- one process ------------------------------------------------------------------------ */

/* Writes the checkpoint folder dir as one chunk holding every layer (or, when man's layout
 * fields are set, with the chunks they name, all written from m and opt). dir must not exist
 * unless overwrite is set (then it is replaced atomically). opt may be NULL (no moments).
 * Returns 0 or -1 naming the path. */
int ckpt_save(const char *dir, const gpt_model *m, const adamw_state *opt, const ckpt_manifest *man,
              int overwrite);
/* Loads every parameter from dir into m (allocated with man->cfg). */
int ckpt_load_params(gpt_model *m, const char *dir, const ckpt_manifest *man);
/* Loads every AdamW moment into s (allocated for m->num_params). -1 if the checkpoint has none.
 * Reads the manifest again but does not re-verify checksums (ckpt_read_manifest did). */
int ckpt_load_optim(adamw_state *s, const gpt_model *m, const char *dir);
/* Writes every parameter of checkpoint dir into one Hugging Face style model.safetensors at path
 * (atomically), for use outside pipetrain. */
int ckpt_export_params(const char *dir, const char *path);

/* ---- tests ------------------------------------------------------------------------------ */

/* Test hook: makes the save abort() at a named point, to test crash safety in a forked child.
 * Points: "chunk" (inside ckpt_write_chunk, after its file is written, for chunk index `arg`),
 * "shard" (inside ckpt_write_shard, after rank `arg`'s file), "place" (a ckpt_placer's
 * first pwrite into chunk `arg`: the process kills itself with SIGKILL, files half filled),
 * "manifest" (in ckpt_commit before manifest.json is written), "rename" (manifest written,
 * before the rename), "swap" (after the new folder took the real name, before the old one is
 * deleted). "no-exchange" aborts nothing: it makes the replace of an existing folder take the
 * fallback path (old folder renamed aside first) used where the filesystem has no atomic
 * exchange. NULL clears. Costs one pointer test per call when unset. */
void ckpt_test_crash_at(const char *point, int arg);

#endif
