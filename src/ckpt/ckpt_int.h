/* Internal to ckpt/: the names, limits and helpers the checkpoint files share. Not a public
 * header: other modules use ckpt/checkpoint.h. */
#ifndef PT_CKPT_CKPT_INT_H
#define PT_CKPT_CKPT_INT_H
#include "ckpt/checkpoint.h"
#include <stddef.h>
#include <stdint.h>
#include "io/safetensors.h"
#include <cjson/cJSON.h>

#define CKPT_PATH_MAX 1200   /* a file in a checkpoint folder */
#define CKPT_DIR_MAX 1100    /* a checkpoint folder (leaves room for the file name) */
#define CKPT_FORMAT "pipetrain-checkpoint"
#define CKPT_VERSION 4       /* 4 added layout.states, 3 layout.zero and layout.shards; 2 and 3 still read */
#define JSON_LONG_MAX 9007199254740992L   /* 2^53: larger JSON numbers are not exact */
#define CKPT_STR_(x) #x
#define CKPT_STR(x) CKPT_STR_(x)

/* ---- ckpt_optim.c ---- */
/* The optimizer fields into / out of manifest.json (NAdam only; absent: AdamW). */
void ckpt_optim_to_json(cJSON *root, const ckpt_manifest *man);
int ckpt_optim_from_json(ckpt_manifest *man, const cJSON *root, const char *mpath);

/* ---- ckpt_util.c ---- */
/* The crash test hook (ckpt_test_crash_at): aborts (at "place": SIGKILL) when point, and arg
 * unless negative, are the armed ones; nothing when unarmed. */
void ckpt_crash_maybe(const char *point, int arg);
#define CRASH_POINT(p, arg) ckpt_crash_maybe(p, arg)
/* 1 when "no-exchange" is armed: it aborts nothing, it makes the install take its fallback
 * path (rename aside, not the atomic exchange), for tests. */
int ckpt_crash_no_exchange(void);
#define NO_EXCHANGE() ckpt_crash_no_exchange()
/* dir without trailing slashes ("run/ckpt-1/" -> "run/ckpt-1"), so "<dir>.tmp.<pid>" is a
 * sibling of dir, never a child. -1 naming dir when it does not fit. */
int ckpt_trim_dir(char *out, size_t n, const char *dir);
/* The path of chunk file c, and of moment shard file r, in dir. */
void ckpt_chunk_path(char *out, size_t n, const char *dir, int c);
void ckpt_shard_path(char *out, size_t n, const char *dir, int r);
/* FNV-1a 64 and size of a whole file, streamed; -1 naming the path on read failure. */
int ckpt_file_fnv(const char *path, uint64_t *hash, size_t *len);
/* The step of a complete checkpoint folder root/name ("ckpt-<step>" holding manifest.json), or -1. */
long ckpt_folder_step(const char *root, const char *name);

/* ---- ckpt_manifest.c ---- */
/* Chunk ranges must tile the model's layers in order, each non-empty. `where` names the source. */
int ckpt_check_tiling(const ckpt_manifest *man, const char *where);
/* Index of the chunk holding layer, or -1. */
int ckpt_chunk_of_layer(const ckpt_manifest *man, int layer);
/* Writes man as tmpdir/manifest.json. 0, or -1 naming the file. */
int ckpt_write_manifest(const char *tmpdir, const ckpt_manifest *man);
/* Parses dir/manifest.json into man; verify: also check every chunk file's size and checksum. */
int ckpt_manifest_read(ckpt_manifest *man, const char *dir, int verify);

/* ---- ckpt_write.c ---- */
/* The one description of a chunk file, whoever writes it: metadata, the parameters of layers
 * [first, end), then "m/" and "v/" of the same tensors when has_optim. params, mm, vv laid out
 * like m->params, or NULL: reserved (filled in place). NULL on failure (error set). */
st_writer *ckpt_chunk_writer(int chunk, int first, int end, const gpt_model *m, int has_optim,
                             const float *params, const float *mm, const float *vv);
/* The one description of a moment-shard file (--zero 1) of world rank `rank`: metadata, then
 * per slice "m/<name>@<start>" and "v/<name>@<start>". reserve: no data (filled in place, the
 * snapshots' slots). NULL on failure (error set). */
st_writer *ckpt_shard_writer(int rank, const ckpt_slice *sl, int n, int reserve);

#endif
