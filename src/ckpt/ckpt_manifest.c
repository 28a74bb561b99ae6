/* The manifest of a checkpoint folder: the layout fields (chunks tiling the model's layers,
 * shards), its JSON written and read back with every field checked and every file's checksum
 * verified. Not here: the chunk files' contents. */
#include "ckpt/ckpt_int.h"
#include "ckpt/ckpt_state.h"
#include "io/io.h"
#include "io/json.h"
#include "util/pt.h"
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* ---- layout ------------------------------------------------------------------------------ */

int ckpt_manifest_set_layout(ckpt_manifest *man, int P, int D, int K, int n_pipes,
                             const char *schedule, const int *chunk_first) {
    if (K < 1 || K > CKPT_MAX_CHUNKS)
        return pt_seterr("checkpoint layout: %d chunks, must be 1..%d", K, CKPT_MAX_CHUNKS);
    man->P = P; man->D = D; man->K = K; man->n_pipes = n_pipes;
    snprintf(man->schedule, sizeof man->schedule, "%s", schedule ? schedule : "");
    man->n_chunks = K;
    for (int c = 0; c < K; c++) {
        man->chunks[c].first_layer = chunk_first[c];
        man->chunks[c].end_layer = chunk_first[c + 1];
    }
    return 0;
}

int ckpt_manifest_set_shards(ckpt_manifest *man, int n_ranks) {
    if (n_ranks < 1)
        return pt_seterr("checkpoint with sharded moments (--zero 1): %d ranks (a bug: must be >= 1)", n_ranks);
    man->zero = 1;
    man->n_shards = n_ranks;
    return 0;
}

int ckpt_manifest_set_states(ckpt_manifest *man, int n_ranks) {
    if (n_ranks < 0) return pt_seterr("checkpoint with rank state: %d ranks (a bug: must be >= 0)", n_ranks);
    man->n_states = n_ranks;
    return 0;
}

/* Chunk ranges must tile the model's layers in order, each non-empty. `where` names the source. */
int ckpt_check_tiling(const ckpt_manifest *man, const char *where) {
    int n_layers = gpt_config_num_layers(&man->cfg);
    if (man->n_chunks < 1 || man->n_chunks > CKPT_MAX_CHUNKS)
        return pt_seterr("%s: %d chunks, must be 1..%d", where, man->n_chunks, CKPT_MAX_CHUNKS);
    int next = 0;
    for (int c = 0; c < man->n_chunks; c++) {
        const ckpt_chunk *ch = &man->chunks[c];
        if (ch->first_layer != next || ch->end_layer <= ch->first_layer)
            return pt_seterr("%s: chunk %d covers layers [%d, %d), expected a non-empty range "
                             "starting at layer %d (chunks must cover every layer once, in order)",
                             where, c, ch->first_layer, ch->end_layer, next);
        next = ch->end_layer;
    }
    if (next != n_layers)
        return pt_seterr("%s: chunks cover layers [0, %d), the model has %d layers (embedding, "
                         "%d blocks, head)", where, next, n_layers, man->cfg.n_layer);
    return 0;
}

/* Index of the chunk holding layer, or -1. */
int ckpt_chunk_of_layer(const ckpt_manifest *man, int layer) {
    for (int c = 0; c < man->n_chunks; c++)
        if (layer >= man->chunks[c].first_layer && layer < man->chunks[c].end_layer) return c;
    return -1;
}

static cJSON *manifest_layout_json(const ckpt_manifest *man, cJSON *shards, cJSON *states) {
    char s[64];
    cJSON *lo = cJSON_CreateObject(), *chunks;
    cJSON_AddNumberToObject(lo, "P", man->P);
    cJSON_AddNumberToObject(lo, "D", man->D);
    cJSON_AddNumberToObject(lo, "K", man->K);
    cJSON_AddNumberToObject(lo, "pipes", man->n_pipes);
    cJSON_AddNumberToObject(lo, "tp", man->tp > 1 ? man->tp : 1);
    cJSON_AddStringToObject(lo, "schedule", man->schedule);
    chunks = cJSON_AddArrayToObject(lo, "chunks");
    for (int c = 0; c < man->n_chunks; c++) {
        cJSON *e = cJSON_CreateObject();
        snprintf(s, sizeof s, "chunk-%d.safetensors", c);
        cJSON_AddStringToObject(e, "file", s);
        cJSON_AddNumberToObject(e, "first_layer", man->chunks[c].first_layer);
        cJSON_AddNumberToObject(e, "end_layer", man->chunks[c].end_layer);
        cJSON_AddNumberToObject(e, "bytes", (double)man->chunks[c].bytes);
        snprintf(s, sizeof s, "%016" PRIx64, man->chunks[c].fnv1a64);
        cJSON_AddStringToObject(e, "fnv1a64", s);
        cJSON_AddItemToArray(chunks, e);
    }
    cJSON_AddNumberToObject(lo, "zero", man->zero);
    cJSON_AddItemToObject(lo, "shards", shards);
    cJSON_AddItemToObject(lo, "states", states);
    return lo;
}

typedef void (*rank_path_fn)(char *out, size_t n, const char *dir, int rank);

/* layout.shards or layout.states: rank r's file "<prefix>-<r>.safetensors" (path_of) in dir for
 * r < n, its size and checksum taken now (the manifest holds none: any number of ranks). NULL
 * naming the file that cannot be read. */
static cJSON *manifest_files_json(const char *dir, int n, const char *prefix, rank_path_fn path_of) {
    char s[64], path[CKPT_PATH_MAX];
    cJSON *files = cJSON_CreateArray();
    for (int r = 0; r < n; r++) {
        ckpt_chunk f;
        path_of(path, sizeof path, dir, r);
        if (ckpt_file_fnv(path, &f.fnv1a64, &f.bytes) < 0) {
            cJSON_Delete(files);
            return NULL;
        }
        cJSON *e = cJSON_CreateObject();
        snprintf(s, sizeof s, "%s-%d.safetensors", prefix, r);
        cJSON_AddStringToObject(e, "file", s);
        cJSON_AddNumberToObject(e, "bytes", (double)f.bytes);
        snprintf(s, sizeof s, "%016" PRIx64, f.fnv1a64);
        cJSON_AddStringToObject(e, "fnv1a64", s);
        cJSON_AddItemToArray(files, e);
    }
    return files;
}

static cJSON *manifest_json(const ckpt_manifest *man, cJSON *shards, cJSON *states) {
    char s[32];
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "format", CKPT_FORMAT);
    cJSON_AddNumberToObject(root, "version", CKPT_VERSION);
    cJSON_AddItemToObject(root, "config", config_to_cjson(&man->cfg));
    cJSON_AddNumberToObject(root, "step", (double)man->step);
    cJSON_AddNumberToObject(root, "adam_t", man->adam_t);
    cJSON_AddNumberToObject(root, "batch", man->batch);
    cJSON_AddNumberToObject(root, "seq", man->seq);
    snprintf(s, sizeof s, "%" PRIu64, man->shuffle_seed);
    cJSON_AddStringToObject(root, "shuffle_seed", s);
    snprintf(s, sizeof s, "%" PRIu64, man->init_seed);
    cJSON_AddStringToObject(root, "init_seed", s);
    cJSON_AddStringToObject(root, "data", man->data_path);
    cJSON_AddBoolToObject(root, "optimizer", man->has_optim);
    cJSON_AddItemToObject(root, "layout", manifest_layout_json(man, shards, states));
    ckpt_optim_to_json(root, man);
    return root;
}

int ckpt_write_manifest(const char *tmpdir, const ckpt_manifest *man) {
    char path[CKPT_PATH_MAX];
    snprintf(path, sizeof path, "%s/manifest.json", tmpdir);
    cJSON *shards = manifest_files_json(tmpdir, man->zero ? man->n_shards : 0, "optim", ckpt_shard_path);
    cJSON *states = shards ? manifest_files_json(tmpdir, man->n_states, "state", ckpt_state_path) : NULL;
    if (!states) {
        cJSON_Delete(shards);
        return -1;
    }
    cJSON *root = manifest_json(man, shards, states);
    int rc = io_write_json(root, path);
    cJSON_Delete(root);
    return rc;
}

/* Moves the complete tmpdir to dir. An existing dir (which must be a checkpoint) is swapped
 * out atomically where the filesystem can (renameat2 RENAME_EXCHANGE), else moved aside first;
 * either way it is deleted only once the new folder has the real name. */
/* ---- manifest reading ------------------------------------------------------------------- */

/* An integer field in [min, max] of obj (max <= 2^53, where doubles stop being exact); errors
 * name the manifest and the field's path. */
static int json_int(const cJSON *obj, const char *key, long min, long max, long *out,
                    const char *mpath, const char *field) {
    return io_json_long(out, obj, key, IO_JSON_REQUIRED, min, max,
                        "%s: field \"%s\" missing or not an integer in [%ld, %ld]", mpath, field, min, max);
}

/* A string field (pointing into obj), or NULL with the error set. */
static const char *json_str(const cJSON *obj, const char *key, const char *mpath, const char *field) {
    const char *s = NULL;
    io_json_str(&s, obj, key, IO_JSON_REQUIRED, 0, "%s: field \"%s\" missing or not a string", mpath, field);
    return s;
}

/* A decimal uint64 stored as a string (JSON numbers lose bits past 2^53). */
static int json_u64(const cJSON *obj, const char *key, uint64_t *out, const char *mpath) {
    const char *s = json_str(obj, key, mpath, key);
    char *end;
    if (!s) return -1;
    errno = 0;
    *out = strtoull(s, &end, 10);
    if (end == s || *end || errno || *s == '-')
        return pt_seterr("%s: field \"%s\" is not a decimal unsigned integer: '%s'", mpath, key, s);
    return 0;
}

static int manifest_progress(ckpt_manifest *man, const cJSON *root, const char *mpath) {
    long v[4];
    const char *keys[] = {"step", "adam_t", "batch", "seq"};
    for (int i = 0; i < 4; i++)
        if (json_int(root, keys[i], i < 2 ? 0 : 1, i == 0 ? JSON_LONG_MAX : INT_MAX, &v[i], mpath, keys[i]) < 0) return -1;
    man->step = v[0]; man->adam_t = (int)v[1]; man->batch = (int)v[2]; man->seq = (int)v[3];
    if (json_u64(root, "shuffle_seed", &man->shuffle_seed, mpath) < 0 ||
        json_u64(root, "init_seed", &man->init_seed, mpath) < 0)
        return -1;
    const char *data = json_str(root, "data", mpath, "data");
    if (!data) return -1;
    snprintf(man->data_path, sizeof man->data_path, "%s", data);
    bool opt;
    if (io_json_bool(&opt, root, "optimizer", IO_JSON_REQUIRED, "%s: field \"optimizer\" missing or not a boolean",
                     mpath) < 0)
        return -1;
    man->has_optim = opt;
    return 0;
}

/* The fields every file entry of the manifest has: layout.<list>[i].file must be
 * <prefix>-<i>.safetensors (never a path), bytes, fnv1a64 (16 hex digits). */
static int manifest_file(ckpt_chunk *ch, const cJSON *e, const char *list, const char *prefix, int i,
                         const char *mpath) {
    char field[64], want[48], *stop;
    long bytes = 0;
    snprintf(field, sizeof field, "layout.%s[%d].file", list, i);
    const char *file = json_str(e, "file", mpath, field);
    snprintf(want, sizeof want, "%s-%d.safetensors", prefix, i);
    if (!file) return -1;
    if (strcmp(file, want)) return pt_seterr("%s: field \"%s\" is '%s', expected '%s'", mpath, field, file, want);
    snprintf(field, sizeof field, "layout.%s[%d].bytes", list, i);
    if (json_int(e, "bytes", 0, JSON_LONG_MAX, &bytes, mpath, field) < 0) return -1;
    snprintf(field, sizeof field, "layout.%s[%d].fnv1a64", list, i);
    const char *sum = json_str(e, "fnv1a64", mpath, field);
    if (!sum) return -1;
    ch->fnv1a64 = strtoull(sum, &stop, 16);
    if (strlen(sum) != 16 || *stop) return pt_seterr("%s: field \"%s\" is not 16 hex digits", mpath, field);
    ch->bytes = (size_t)bytes;
    return 0;
}

/* One layout.chunks[c] entry: chunk-<c>.safetensors and its layer range. */
static int manifest_chunk(ckpt_chunk *ch, const cJSON *e, int c, const char *mpath) {
    char field[64];
    long first = 0, end = 0;
    if (manifest_file(ch, e, "chunks", "chunk", c, mpath) < 0) return -1;
    snprintf(field, sizeof field, "layout.chunks[%d].first_layer", c);
    if (json_int(e, "first_layer", 0, INT_MAX, &first, mpath, field) < 0) return -1;
    snprintf(field, sizeof field, "layout.chunks[%d].end_layer", c);
    if (json_int(e, "end_layer", 0, INT_MAX, &end, mpath, field) < 0) return -1;
    ch->first_layer = (int)first; ch->end_layer = (int)end;
    return 0;
}

/* Version 3: layout.zero and layout.shards (one entry per rank when zero is 1, else none), each
 * entry checked (not kept: verify_listed reads them again from the JSON; any number of ranks). */
static int manifest_shards(ckpt_manifest *man, const cJSON *lo, const char *mpath) {
    long zero = 0;
    if (json_int(lo, "zero", 0, 1, &zero, mpath, "layout.zero") < 0) return -1;
    const cJSON *shards = cJSON_GetObjectItemCaseSensitive(lo, "shards"), *e;
    int n = cJSON_IsArray(shards) ? cJSON_GetArraySize(shards) : -1;
    if (n < 0 || (zero && n < 1) || (!zero && n > 0))
        return pt_seterr("%s: field \"layout.shards\" missing or not an array of %s entries", mpath,
                         zero ? "1 or more" : "0 (layout.zero is 0)");
    man->zero = (int)zero;
    man->n_shards = 0;
    cJSON_ArrayForEach(e, shards) {
        ckpt_chunk f;
        if (manifest_file(&f, e, "shards", "optim", man->n_shards, mpath) < 0) return -1;
        man->n_shards++;
    }
    return 0;
}

/* Version 4: layout.states, one entry per rank that wrote its own state (ckpt/ckpt_state.h), or
 * none; each entry checked (not kept: verify_listed reads them again from the JSON). */
static int manifest_states(ckpt_manifest *man, const cJSON *lo, const char *mpath) {
    const cJSON *states = cJSON_GetObjectItemCaseSensitive(lo, "states"), *e;
    if (!cJSON_IsArray(states))
        return pt_seterr("%s: field \"layout.states\" missing or not an array", mpath);
    man->n_states = 0;
    cJSON_ArrayForEach(e, states) {
        ckpt_chunk f;
        if (manifest_file(&f, e, "states", "state", man->n_states, mpath) < 0) return -1;
        man->n_states++;
    }
    return 0;
}

static int manifest_layout(ckpt_manifest *man, const cJSON *root, const char *mpath, long version) {
    const cJSON *lo = cJSON_GetObjectItemCaseSensitive(root, "layout");
    if (!cJSON_IsObject(lo)) return pt_seterr("%s: field \"layout\" missing or not an object", mpath);
    long v[4];
    const char *keys[] = {"P", "D", "K", "pipes"};
    char field[64];
    for (int i = 0; i < 4; i++) {
        snprintf(field, sizeof field, "layout.%s", keys[i]);
        if (json_int(lo, keys[i], 1, INT_MAX, &v[i], mpath, field) < 0) return -1;
    }
    man->P = (int)v[0]; man->D = (int)v[1]; man->K = (int)v[2]; man->n_pipes = (int)v[3];
    long tp = 1;   /* optional: written since tensor parallelism (informational) */
    if (cJSON_GetObjectItemCaseSensitive(lo, "tp") && json_int(lo, "tp", 1, INT_MAX, &tp, mpath, "layout.tp") < 0)
        return -1;
    man->tp = (int)tp;
    const char *sched = json_str(lo, "schedule", mpath, "layout.schedule");
    if (!sched) return -1;
    snprintf(man->schedule, sizeof man->schedule, "%s", sched);
    const cJSON *chunks = cJSON_GetObjectItemCaseSensitive(lo, "chunks"), *e;
    if (!cJSON_IsArray(chunks) || cJSON_GetArraySize(chunks) != man->K || man->K > CKPT_MAX_CHUNKS)
        return pt_seterr("%s: field \"layout.chunks\" missing or not an array of K = %d entries "
                         "(at most %d)", mpath, man->K, CKPT_MAX_CHUNKS);
    man->n_chunks = 0;
    cJSON_ArrayForEach(e, chunks) {
        if (manifest_chunk(&man->chunks[man->n_chunks], e, man->n_chunks, mpath) < 0) return -1;
        man->n_chunks++;
    }
    if (version >= 3 && manifest_shards(man, lo, mpath) < 0) return -1;
    if (version >= 4 && manifest_states(man, lo, mpath) < 0) return -1;
    return ckpt_check_tiling(man, mpath);
}

static int manifest_header(const cJSON *root, const char *mpath, long *version) {
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, CKPT_FORMAT))
        return pt_seterr("%s: field \"format\" missing or not \"" CKPT_FORMAT "\" (a checkpoint "
                         "from an older pipetrain, or not a checkpoint)", mpath);
    if (json_int(root, "version", 1, INT_MAX, version, mpath, "version") < 0) return -1;
    if (*version < 2 || *version > CKPT_VERSION)
        return pt_seterr("%s: checkpoint format version %ld, this pipetrain reads versions 2 to %d",
                         mpath, *version, CKPT_VERSION);
    return 0;
}

/* One file's size and checksum against the manifest's. */
static int verify_file(const char *path, const ckpt_chunk *want) {
    uint64_t h;
    size_t len;
    if (ckpt_file_fnv(path, &h, &len) < 0) return -1;
    if (len != want->bytes)
        return pt_seterr("%s: %zu bytes, manifest says %zu (truncated or replaced)", path, len, want->bytes);
    if (h != want->fnv1a64) return pt_seterr("%s: checksum mismatch (file changed or corrupt)", path);
    return 0;
}

/* Size and checksum of every chunk file against the manifest. */
static int verify_chunks(const ckpt_manifest *man, const char *dir) {
    char path[CKPT_PATH_MAX];
    for (int c = 0; c < man->n_chunks; c++) {
        ckpt_chunk_path(path, sizeof path, dir, c);
        if (verify_file(path, &man->chunks[c]) < 0) return -1;
    }
    return 0;
}

/* Size and checksum of the first n files (rank r's: path_of) listed in lo's layout.<list>
 * (layout.shards: optim-<r>, layout.states: state-<r>; checked by manifest_shards and
 * manifest_states) against the files in dir. */
static int verify_listed(const cJSON *lo, const char *list, const char *prefix, int n, rank_path_fn path_of,
                         const char *dir, const char *mpath) {
    char path[CKPT_PATH_MAX];
    const cJSON *e;
    int r = 0;
    cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(lo, list)) {
        ckpt_chunk want;
        if (r >= n) break;
        path_of(path, sizeof path, dir, r);
        if (manifest_file(&want, e, list, prefix, r++, mpath) < 0 || verify_file(path, &want) < 0) return -1;
    }
    return 0;
}

/* Parses dir/manifest.json into man; verify: also check every chunk file's size and checksum. */
int ckpt_manifest_read(ckpt_manifest *man, const char *dir, int verify) {
    char mpath[CKPT_PATH_MAX], where[CKPT_PATH_MAX + 16];
    snprintf(mpath, sizeof mpath, "%s/manifest.json", dir);
    char *text = pt_read_file(mpath, NULL);
    if (!text) return pt_adderr("not a checkpoint folder: ");
    memset(man, 0, sizeof *man);
    cJSON *root = cJSON_Parse(text);
    free(text);
    int rc = -1;
    if (!cJSON_IsObject(root)) { pt_seterr("%s: not a JSON object (corrupt manifest)", mpath); goto done; }
    snprintf(where, sizeof where, "%s: config", mpath);
    long version = 0;
    if (manifest_header(root, mpath, &version) < 0 ||
        config_from_cjson(&man->cfg, cJSON_GetObjectItemCaseSensitive(root, "config"), where) < 0 ||
        manifest_progress(man, root, mpath) < 0 || manifest_layout(man, root, mpath, version) < 0 ||
        ckpt_optim_from_json(man, root, mpath) < 0)
        goto done;
    const cJSON *lo = cJSON_GetObjectItemCaseSensitive(root, "layout");
    rc = verify && (verify_chunks(man, dir) < 0 ||
                    verify_listed(lo, "shards", "optim", man->zero ? man->n_shards : 0, ckpt_shard_path, dir, mpath) < 0 ||
                    verify_listed(lo, "states", "state", man->n_states, ckpt_state_path, dir, mpath) < 0) ? -1 : 0;
done:
    cJSON_Delete(root);
    return rc;
}

int ckpt_read_manifest(ckpt_manifest *man, const char *dir) {
    return ckpt_manifest_read(man, dir, 1);
}

