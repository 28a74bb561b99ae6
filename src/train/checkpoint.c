/* Checkpoint folders: write into a temporary folder, checksum, rename; read back with checks. */
#include "train/checkpoint.h"
#include "io/io.h"
#include "io/safetensors.h"
#include "model/gpt_io.h"
#include "util/pt.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const ckpt_files[] = {"model.safetensors", "optim.safetensors"};

/* FNV-1a 64 of a whole file; -1 with an error on read failure. */
static int file_fnv(const char *path, uint64_t *hash, size_t *len) {
    char *buf = pt_read_file(path, len);
    if (!buf) return -1;
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < *len; i++) h = (h ^ (uint8_t)buf[i]) * 0x100000001b3ULL;
    free(buf);
    *hash = h;
    return 0;
}

static int write_optim(const char *path, const gpt_model *m, const adamw_state *opt) {
    st_writer *w = st_writer_new();
    int rc = gpt_add_to_writer(m, w, opt->m, "m/");
    if (rc == 0) rc = gpt_add_to_writer(m, w, opt->v, "v/");
    if (rc == 0) rc = st_write(w, path);
    st_writer_free(w);
    return rc;
}

/* manifest.json: config, progress, and one {name, bytes, fnv1a64} entry per file in tmpdir. */
static int write_manifest(const char *tmpdir, const ckpt_manifest *man, int n_files) {
    char path[1200], hex[32];
    cJSON *root = cJSON_CreateObject(), *files = cJSON_AddArrayToObject(root, "files");
    cJSON_AddItemToObject(root, "config", config_to_cjson(&man->cfg));
    cJSON_AddNumberToObject(root, "step", (double)man->step);
    cJSON_AddNumberToObject(root, "adam_t", man->adam_t);
    cJSON_AddNumberToObject(root, "batch", man->batch);
    cJSON_AddNumberToObject(root, "seq", man->seq);
    snprintf(hex, sizeof hex, "%" PRIu64, man->shuffle_seed);
    cJSON_AddStringToObject(root, "shuffle_seed", hex);
    snprintf(hex, sizeof hex, "%" PRIu64, man->init_seed);
    cJSON_AddStringToObject(root, "init_seed", hex);
    cJSON_AddStringToObject(root, "data", man->data_path);
    cJSON *layout = cJSON_AddObjectToObject(root, "layout");
    cJSON_AddNumberToObject(layout, "stages", 1);
    cJSON_AddNumberToObject(layout, "dp", 1);
    int rc = 0;
    for (int i = 0; i < n_files && rc == 0; i++) {
        uint64_t h;
        size_t len;
        snprintf(path, sizeof path, "%s/%s", tmpdir, ckpt_files[i]);
        if ((rc = file_fnv(path, &h, &len)) < 0) break;
        cJSON *f = cJSON_CreateObject();
        cJSON_AddStringToObject(f, "name", ckpt_files[i]);
        cJSON_AddNumberToObject(f, "bytes", (double)len);
        snprintf(hex, sizeof hex, "%016" PRIx64, h);
        cJSON_AddStringToObject(f, "fnv1a64", hex);
        cJSON_AddItemToArray(files, f);
    }
    if (rc == 0) {
        char *text = cJSON_Print(root);
        io_atomic_file a;
        snprintf(path, sizeof path, "%s/manifest.json", tmpdir);
        rc = io_atomic_open(&a, path);
        if (rc == 0) { fputs(text, a.f); fputc('\n', a.f); rc = io_atomic_commit(&a); }
        free(text);
    }
    cJSON_Delete(root);
    return rc;
}

/* Removes a checkpoint-shaped folder (only the files we write, then the folder). */
static void remove_ckpt_dir(const char *dir) {
    char path[1200];
    for (unsigned i = 0; i < sizeof ckpt_files / sizeof *ckpt_files; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, ckpt_files[i]);
        unlink(path);
    }
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    unlink(path);
    rmdir(dir);
}

/* mkdir -p of the folder that will hold dir. */
static int make_parents(const char *dir) {
    char path[1100];
    snprintf(path, sizeof path, "%s", dir);
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(path, 0755) < 0 && errno != EEXIST)
            return pt_seterr("%s: cannot create folder: %s", path, strerror(errno));
        *p = '/';
    }
    return 0;
}

int ckpt_save(const char *dir, const gpt_model *m, const adamw_state *opt, const ckpt_manifest *man,
              int overwrite) {
    char tmp[1100], path[1200];
    struct stat st;
    if (strlen(dir) > 1000) return pt_seterr("%s: checkpoint path too long", dir);
    if (!overwrite && stat(dir, &st) == 0) return pt_seterr("%s: already exists; not overwriting", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", dir, (long)getpid());
    remove_ckpt_dir(tmp);
    if (make_parents(dir) < 0) return -1;
    if (mkdir(tmp, 0755) < 0) return pt_seterr("%s: cannot create folder: %s", tmp, strerror(errno));
    snprintf(path, sizeof path, "%s/model.safetensors", tmp);
    int n_files = opt ? 2 : 1;
    int rc = gpt_save_safetensors(m, path);
    if (rc == 0 && opt) {
        snprintf(path, sizeof path, "%s/optim.safetensors", tmp);
        rc = write_optim(path, m, opt);
    }
    if (rc == 0) rc = write_manifest(tmp, man, n_files);
    if (rc == 0 && overwrite && stat(dir, &st) == 0) remove_ckpt_dir(dir);
    if (rc == 0 && rename(tmp, dir) < 0)
        rc = pt_seterr("%s: cannot rename %s into place: %s", dir, tmp, strerror(errno));
    if (rc < 0) remove_ckpt_dir(tmp);
    return rc;
}

/* Checks one manifest "files" entry against the file on disk. */
static int verify_file(const char *dir, const cJSON *f, const char *mpath) {
    const cJSON *name = cJSON_GetObjectItem(f, "name"), *bytes = cJSON_GetObjectItem(f, "bytes"),
                *sum = cJSON_GetObjectItem(f, "fnv1a64");
    if (!cJSON_IsString(name) || !cJSON_IsNumber(bytes) || !cJSON_IsString(sum) ||
        strchr(name->valuestring, '/'))
        return pt_seterr("%s: field \"files\": each entry needs name, bytes and fnv1a64", mpath);
    char path[1200], hex[32];
    snprintf(path, sizeof path, "%s/%s", dir, name->valuestring);
    uint64_t h;
    size_t len;
    if (file_fnv(path, &h, &len) < 0) return -1;
    if ((double)len != bytes->valuedouble)
        return pt_seterr("%s: %zu bytes, manifest says %.0f (truncated or replaced)", path, len,
                         bytes->valuedouble);
    snprintf(hex, sizeof hex, "%016" PRIx64, h);
    if (strcmp(hex, sum->valuestring))
        return pt_seterr("%s: checksum mismatch (file changed or corrupt)", path);
    return 0;
}

static int manifest_fields(ckpt_manifest *man, const cJSON *root, const char *mpath) {
    const char *keys[] = {"step", "adam_t", "batch", "seq"};
    double v[4];
    for (int i = 0; i < 4; i++) {
        const cJSON *it = cJSON_GetObjectItem(root, keys[i]);
        if (!cJSON_IsNumber(it) || it->valuedouble < 0)
            return pt_seterr("%s: field \"%s\" missing or not a non-negative number", mpath, keys[i]);
        v[i] = it->valuedouble;
    }
    man->step = (long)v[0]; man->adam_t = (int)v[1]; man->batch = (int)v[2]; man->seq = (int)v[3];
    const cJSON *s = cJSON_GetObjectItem(root, "shuffle_seed"), *i = cJSON_GetObjectItem(root, "init_seed"),
                *d = cJSON_GetObjectItem(root, "data");
    man->shuffle_seed = cJSON_IsString(s) ? strtoull(s->valuestring, NULL, 10) : 0;
    man->init_seed = cJSON_IsString(i) ? strtoull(i->valuestring, NULL, 10) : 0;
    snprintf(man->data_path, sizeof man->data_path, "%s", cJSON_IsString(d) ? d->valuestring : "");
    return 0;
}

int ckpt_read_manifest(ckpt_manifest *man, const char *dir) {
    char mpath[1200];
    snprintf(mpath, sizeof mpath, "%s/manifest.json", dir);
    char *text = pt_read_file(mpath, NULL);
    if (!text) return pt_adderr("not a checkpoint folder: ");
    memset(man, 0, sizeof *man);
    cJSON *root = cJSON_Parse(text);
    free(text);
    int rc = -1;
    if (!root) { pt_seterr("%s: not valid JSON (corrupt manifest)", mpath); goto done; }
    char where[1300];
    snprintf(where, sizeof where, "%s: config", mpath);
    if (config_from_cjson(&man->cfg, cJSON_GetObjectItem(root, "config"), where) < 0) goto done;
    if (manifest_fields(man, root, mpath) < 0) goto done;
    const cJSON *files = cJSON_GetObjectItem(root, "files"), *f;
    if (!cJSON_IsArray(files) || cJSON_GetArraySize(files) < 1) {
        pt_seterr("%s: field \"files\" missing or empty", mpath);
        goto done;
    }
    cJSON_ArrayForEach(f, files) if (verify_file(dir, f, mpath) < 0) goto done;
    rc = 0;
done:
    cJSON_Delete(root);
    return rc;
}

int ckpt_load_params(gpt_model *m, const char *dir, const ckpt_manifest *man) {
    char path[1200];
    (void)man;
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    return gpt_load_safetensors(m, path, NULL);
}

int ckpt_load_optim(adamw_state *s, const gpt_model *m, const char *dir) {
    char path[1200], name[160];
    snprintf(path, sizeof path, "%s/optim.safetensors", dir);
    st_file *f;
    if (st_open(&f, path) < 0) return -1;
    int rc = 0;
    for (int i = 0; i < gpt_param_count(m) && rc == 0; i++) {
        const gpt_param_info *pi = gpt_param_info_at(m, i);
        int64_t shape[2] = {pi->shape[0], pi->shape[1]};
        snprintf(name, sizeof name, "m/%s", pi->name);
        rc = st_read_f32(f, name, s->m + pi->offset, pi->ndim, shape);
        snprintf(name, sizeof name, "v/%s", pi->name);
        if (rc == 0) rc = st_read_f32(f, name, s->v + pi->offset, pi->ndim, shape);
    }
    st_close(f);
    return rc;
}
