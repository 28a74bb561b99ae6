/* safetensors reader (mmap + full header validation) and writer (Hugging Face layout, atomic
 * rename). Every error names the file and the tensor or field. Not a model loader: no knowledge
 * of GPT-2 names here. Little-endian hosts only (the format is little-endian). */
#include "io/safetensors.h"
#include "io/io.h"
#include "io/json.h"
#include "util/pt.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes a little-endian host");

#define ST_MAX_HEADER (100u << 20)        /* Hugging Face's own limit on the header JSON */
#define ST_MAX_INT    9007199254740992.0  /* 2^53: JSON numbers are doubles in cJSON */

struct st_file {
    char *path;
    unsigned char *map;       /* whole file, read-only */
    size_t map_len;
    const unsigned char *data;  /* data section */
    size_t data_len;
    int n;
    st_tensor *t;             /* header order */
    int *by_name;             /* indices into t sorted by name, for st_find */
    int n_meta;
    char **meta_key, **meta_val;
};

static const struct { const char *name; size_t size; } dtypes[ST_DTYPE_COUNT] = {
    [ST_F64] = {"F64", 8}, [ST_F32] = {"F32", 4}, [ST_F16] = {"F16", 2}, [ST_BF16] = {"BF16", 2},
    [ST_I64] = {"I64", 8}, [ST_I32] = {"I32", 4}, [ST_I16] = {"I16", 2}, [ST_I8] = {"I8", 1},
    [ST_U64] = {"U64", 8}, [ST_U32] = {"U32", 4}, [ST_U16] = {"U16", 2}, [ST_U8] = {"U8", 1},
    [ST_BOOL] = {"BOOL", 1}, [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_F8_E5M2] = {"F8_E5M2", 1},
};

size_t st_dtype_size(st_dtype dt) { return (unsigned)dt < ST_DTYPE_COUNT ? dtypes[dt].size : 0; }
const char *st_dtype_name(st_dtype dt) { return (unsigned)dt < ST_DTYPE_COUNT ? dtypes[dt].name : "?"; }

int st_dtype_parse(const char *s, st_dtype *out) {
    for (int i = 0; i < ST_DTYPE_COUNT; i++)
        if (strcmp(s, dtypes[i].name) == 0) { *out = (st_dtype)i; return 0; }
    return -1;
}

/* ---------------------------------------------------------------- reading: header entries */

/* A JSON number that is a non-negative integer below 2^53, else -1 with the error set. */
static int json_size(const cJSON *v, size_t *out, const char *path, const char *name, const char *field) {
    *out = 0;
    if (!io_json_is_whole(v, 0, ST_MAX_INT))
        return pt_seterr("%s: tensor '%s': %s must hold non-negative integers", path, name, field);
    *out = (size_t)v->valuedouble;
    return 0;
}

static int entry_dtype(st_tensor *t, const cJSON *e, const char *path) {
    const char *dtype;
    if (io_json_str(&dtype, e, "dtype", IO_JSON_REQUIRED, 0, "%s: tensor '%s': dtype is missing or not a string",
                    path, t->name) < 0)
        return -1;
    if (st_dtype_parse(dtype, &t->dtype) != 0)
        return pt_seterr("%s: tensor '%s': unknown dtype \"%s\"", path, t->name, dtype);
    return 0;
}

static int entry_shape(st_tensor *t, const cJSON *e, const char *path) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, "shape"), *d;
    if (!cJSON_IsArray(v))
        return pt_seterr("%s: tensor '%s': shape is missing or not an array", path, t->name);
    int nd = cJSON_GetArraySize(v);
    if (nd > ST_MAX_DIMS)
        return pt_seterr("%s: tensor '%s': shape has %d dimensions (at most %d supported)",
                         path, t->name, nd, ST_MAX_DIMS);
    size_t numel = 1;
    t->ndim = 0;
    cJSON_ArrayForEach(d, v) {
        size_t dim;
        if (json_size(d, &dim, path, t->name, "shape") != 0) return -1;
        if (__builtin_mul_overflow(numel, dim, &numel))
            return pt_seterr("%s: tensor '%s': shape overflows (too many elements)", path, t->name);
        t->shape[t->ndim++] = (int64_t)dim;
    }
    if (__builtin_mul_overflow(numel, st_dtype_size(t->dtype), &t->nbytes))
        return pt_seterr("%s: tensor '%s': shape overflows (too many bytes)", path, t->name);
    t->numel = numel;
    return 0;
}

static int entry_offsets(st_tensor *t, const cJSON *e, const char *path, size_t data_len) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    size_t b, end;
    if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 2)
        return pt_seterr("%s: tensor '%s': data_offsets must be an array [begin, end]", path, t->name);
    if (json_size(cJSON_GetArrayItem(v, 0), &b, path, t->name, "data_offsets") != 0 ||
        json_size(cJSON_GetArrayItem(v, 1), &end, path, t->name, "data_offsets") != 0)
        return -1;
    if (b > end)
        return pt_seterr("%s: tensor '%s': data_offsets [%zu, %zu] has begin > end", path, t->name, b, end);
    if (end > data_len)
        return pt_seterr("%s: tensor '%s': data_offsets [%zu, %zu] run past the end of the data "
                         "section (%zu bytes; file truncated?)", path, t->name, b, end, data_len);
    if (end - b != t->nbytes)
        return pt_seterr("%s: tensor '%s': data_offsets [%zu, %zu] hold %zu bytes but shape and "
                         "dtype %s need %zu", path, t->name, b, end, end - b, st_dtype_name(t->dtype),
                         t->nbytes);
    t->offset = b;
    return 0;
}

static int parse_entry(st_tensor *t, const cJSON *e, const char *path, size_t data_len) {
    t->name = e->string;
    if (!cJSON_IsObject(e))
        return pt_seterr("%s: tensor '%s': entry is not a JSON object", path, t->name);
    if (entry_dtype(t, e, path) || entry_shape(t, e, path) || entry_offsets(t, e, path, data_len))
        return -1;
    return 0;
}

static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int parse_metadata(st_file *f, const cJSON *m) {
    if (!cJSON_IsObject(m))
        return pt_seterr("%s: __metadata__ is not a JSON object", f->path);
    int n = cJSON_GetArraySize(m);
    f->meta_key = pt_calloc((size_t)n, sizeof(char *));
    f->meta_val = pt_calloc((size_t)n, sizeof(char *));
    const cJSON *e;
    cJSON_ArrayForEach(e, m) {
        if (!cJSON_IsString(e))
            return pt_seterr("%s: __metadata__ \"%s\" is not a string", f->path, e->string);
        f->meta_key[f->n_meta] = pt_strdup(e->string);
        f->meta_val[f->n_meta++] = pt_strdup(e->valuestring);
    }
    char **sorted = pt_malloc(sizeof(char *) * (size_t)(n ? n : 1));   /* duplicates: sort, compare */
    memcpy(sorted, f->meta_key, sizeof(char *) * (size_t)n);
    qsort(sorted, (size_t)n, sizeof(char *), cmp_str_ptr);
    int rc = 0;
    for (int i = 1; i < n && rc == 0; i++)
        if (strcmp(sorted[i - 1], sorted[i]) == 0)
            rc = pt_seterr("%s: __metadata__ key \"%s\" appears twice", f->path, sorted[i]);
    free(sorted);
    return rc;
}

/* ---------------------------------------------------------------- reading: whole-file checks */

static _Thread_local const st_tensor *sort_ctx;  /* qsort has no context argument */

static int cmp_name(const void *a, const void *b) {
    return strcmp(sort_ctx[*(const int *)a].name, sort_ctx[*(const int *)b].name);
}

static int cmp_offset(const void *a, const void *b) {
    const st_tensor *x = &sort_ctx[*(const int *)a], *y = &sort_ctx[*(const int *)b];
    if (x->offset != y->offset) return x->offset < y->offset ? -1 : 1;
    return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

static int check_names(st_file *f) {
    f->by_name = pt_malloc(sizeof(int) * (size_t)(f->n ? f->n : 1));
    for (int i = 0; i < f->n; i++) f->by_name[i] = i;
    sort_ctx = f->t;
    qsort(f->by_name, (size_t)f->n, sizeof(int), cmp_name);
    for (int i = 1; i < f->n; i++)
        if (strcmp(f->t[f->by_name[i]].name, f->t[f->by_name[i - 1]].name) == 0)
            return pt_seterr("%s: tensor '%s' appears twice in the header", f->path, f->t[f->by_name[i]].name);
    return 0;
}

/* The tensors must tile the data section: sorted by offset, each begins where the last ended. */
static int check_tiling(st_file *f) {
    int *ord = pt_malloc(sizeof(int) * (size_t)(f->n ? f->n : 1)), rc = 0;
    for (int i = 0; i < f->n; i++) ord[i] = i;
    sort_ctx = f->t;
    qsort(ord, (size_t)f->n, sizeof(int), cmp_offset);
    size_t at = 0;
    const char *prev = NULL;
    for (int i = 0; i < f->n && rc == 0; i++) {
        const st_tensor *t = &f->t[ord[i]];
        if (t->offset < at)
            rc = pt_seterr("%s: tensor '%s' data_offsets [%zu, %zu] overlap tensor '%s' (ends at %zu)",
                           f->path, t->name, t->offset, t->offset + t->nbytes, prev, at);
        else if (t->offset > at)
            rc = pt_seterr("%s: tensor '%s' data_offsets begin at %zu, leaving bytes %zu..%zu of the "
                           "data section unused", f->path, t->name, t->offset, at, t->offset);
        at = t->offset + t->nbytes;
        prev = t->name;
    }
    if (rc == 0 && at != f->data_len)
        rc = pt_seterr("%s: %zu bytes after the last tensor's data (data section is %zu bytes, "
                       "tensors cover %zu)", f->path, f->data_len - at, f->data_len, at);
    free(ord);
    return rc;
}

/* The members of the header object: __metadata__ and one entry per tensor, in header order. */
static int parse_members(st_file *f, const cJSON *root) {
    int n = cJSON_GetArraySize(root), seen_meta = 0;
    f->t = pt_calloc((size_t)(n ? n : 1), sizeof(st_tensor));
    const cJSON *e;
    cJSON_ArrayForEach(e, root) {
        if (strcmp(e->string, "__metadata__") == 0) {
            if (seen_meta++) return pt_seterr("%s: __metadata__ appears twice", f->path);
            if (parse_metadata(f, e) != 0) return -1;
            continue;
        }
        st_tensor *t = &f->t[f->n];
        if (parse_entry(t, e, f->path, f->data_len) != 0) return -1;
        t->name = pt_strdup(e->string);       /* the JSON tree is freed by our caller */
        t->data = f->data + t->offset;
        f->n++;
    }
    return 0;
}

static int parse_header(st_file *f, const char *json, size_t len) {
    char *text = pt_malloc(len + 1);   /* NUL-terminated copy: the parser never reads past it */
    memcpy(text, json, len);
    text[len] = 0;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    size_t at = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
    int rc;
    if (!root) {
        char near[40];
        io_text_position(text, len, at, near, sizeof near);
        rc = pt_seterr("%s: header JSON parse error at header byte %zu near '%s'", f->path, at, near);
    } else if (!cJSON_IsObject(root)) {
        rc = pt_seterr("%s: header is not a JSON object", f->path);
    } else if (at + strspn(text + at, " \t\r\n") < len) {    /* only padding may follow */
        rc = pt_seterr("%s: header has stray bytes after its JSON object, at header byte %zu",
                       f->path, at + strspn(text + at, " \t\r\n"));
    } else {
        rc = parse_members(f, root);
    }
    cJSON_Delete(root);
    free(text);
    return rc;
}

static int map_file(st_file *f) {
    if (io_map_file(f->path, &f->map, &f->map_len) < 0) return -1;
    if (f->map_len < 8)
        return pt_seterr("%s: file is %lld bytes, too short for a safetensors file (at least 8)",
                         f->path, (long long)f->map_len);
    return 0;
}

static int check_header_length(st_file *f, uint64_t *hlen) {
    memcpy(hlen, f->map, 8);
    if (*hlen > f->map_len - 8)
        return pt_seterr("%s: header length %llu exceeds the %zu bytes after it (truncated, or not "
                         "a safetensors file)", f->path, (unsigned long long)*hlen, f->map_len - 8);
    if (*hlen > ST_MAX_HEADER)
        return pt_seterr("%s: header length %llu is over the 100 MiB limit", f->path,
                         (unsigned long long)*hlen);
    if (*hlen < 2 || f->map[8] != '{')
        return pt_seterr("%s: header does not start with a JSON object '{' (not a safetensors file?)",
                         f->path);
    return 0;
}

int st_open(st_file **out, const char *path) {
    *out = NULL;
    st_file *f = pt_calloc(1, sizeof *f);
    f->path = pt_strdup(path);
    uint64_t hlen;
    if (map_file(f) != 0 || check_header_length(f, &hlen) != 0) goto fail;
    f->data = f->map + 8 + hlen;
    f->data_len = f->map_len - 8 - (size_t)hlen;
    if (parse_header(f, (const char *)f->map + 8, (size_t)hlen) != 0) goto fail;
    if (check_names(f) != 0 || check_tiling(f) != 0) goto fail;
    *out = f;
    return 0;
fail:
    st_close(f);
    return -1;
}

void st_close(st_file *f) {
    if (!f) return;
    if (f->map) munmap(f->map, f->map_len);
    for (int i = 0; i < f->n; i++) free((char *)f->t[i].name);
    for (int i = 0; i < f->n_meta; i++) { free(f->meta_key[i]); free(f->meta_val[i]); }
    free(f->meta_key);
    free(f->meta_val);
    free(f->t);
    free(f->by_name);
    free(f->path);
    free(f);
}

/* ---------------------------------------------------------------- reading: lookups */

const char *st_path(const st_file *f) { return f->path; }
int st_count(const st_file *f) { return f->n; }
const st_tensor *st_at(const st_file *f, int i) { return i >= 0 && i < f->n ? &f->t[i] : NULL; }
int st_meta_count(const st_file *f) { return f->n_meta; }

void st_meta_at(const st_file *f, int i, const char **key, const char **value) {
    *key = f->meta_key[i];
    *value = f->meta_val[i];
}

const char *st_meta(const st_file *f, const char *key) {
    for (int i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta_key[i], key) == 0) return f->meta_val[i];
    return NULL;
}

const st_tensor *st_find(const st_file *f, const char *name) {
    int lo = 0, hi = f->n;
    while (lo < hi) {
        int mid = (lo + hi) / 2, c = strcmp(f->t[f->by_name[mid]].name, name);
        if (c == 0) return &f->t[f->by_name[mid]];
        if (c < 0) lo = mid + 1; else hi = mid;
    }
    return NULL;
}

/* ---------------------------------------------------------------- reading: conversion */

static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, bits;
    if (exp == 0x1f) bits = sign | 0x7f800000u | (man << 13);          /* inf, nan */
    else if (exp != 0) bits = sign | ((exp + 112) << 23) | (man << 13); /* rebias 15 -> 127 */
    else {                                                              /* zero, subnormal */
        float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    }
    float v;
    memcpy(&v, &bits, 4);
    return v;
}

static float bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float v;
    memcpy(&v, &bits, 4);
    return v;
}

/* Maps the pages of [p, p+n) in one call rather than one fault per 4 KiB page: a 500 MB tensor
 * then loads at memcpy speed. Advice only; failure (older kernels) changes nothing. */
static void prefault(const void *p, size_t n) {
#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22   /* Linux 5.14; older kernels return EINVAL */
#endif
    if (n < (1u << 20)) return;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)p & ~(page - 1);
    size_t len = (size_t)((uintptr_t)p + n - a);
    if (madvise((void *)a, len, MADV_POPULATE_READ) != 0) (void)madvise((void *)a, len, MADV_WILLNEED);
}

int st_tensor_f32(const st_file *f, const st_tensor *t, float *dst) {
    const unsigned char *p = t->data;
    prefault(p, t->nbytes);
    switch (t->dtype) {
    case ST_F32:
        if (t->nbytes) memcpy(dst, p, t->nbytes);
        return 0;
    case ST_F16: case ST_BF16:
        for (size_t i = 0; i < t->numel; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = t->dtype == ST_F16 ? f16_to_f32(h) : bf16_to_f32(h);
        }
        return 0;
    case ST_F64:
        for (size_t i = 0; i < t->numel; i++) {
            double d;
            memcpy(&d, p + 8 * i, 8);
            dst[i] = (float)d;
        }
        return 0;
    default:
        return pt_seterr("%s: tensor '%s' has dtype %s, expected a float type (F32, F16, BF16, F64)",
                         f->path, t->name, st_dtype_name(t->dtype));
    }
}

/* "(24, 72)", "(24)", "()" */
static void shape_str(char *buf, size_t cap, int ndim, const int64_t *shape) {
    size_t k = (size_t)snprintf(buf, cap, "(");
    for (int i = 0; i < ndim && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < cap) snprintf(buf + k, cap - k, ")");
}

int st_read_f32(const st_file *f, const char *name, float *dst, int ndim, const int64_t *shape) {
    const st_tensor *t = st_find(f, name);
    if (!t) return pt_seterr("%s: has no tensor '%s'", f->path, name);
    bool same = t->ndim == ndim;
    for (int i = 0; same && i < ndim; i++) same = t->shape[i] == shape[i];
    if (!same) {
        char got[160], want[160];
        shape_str(got, sizeof got, t->ndim, t->shape);
        shape_str(want, sizeof want, ndim, shape);
        return pt_seterr("%s: tensor '%s' has shape %s, expected %s", f->path, name, got, want);
    }
    return st_tensor_f32(f, t, dst);
}

/* ---------------------------------------------------------------- writing */

typedef struct {
    char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t nbytes;
    const void *data;
    int reserved;            /* no data: written in place after st_create */
} st_entry;

typedef struct { char *key, *val; } st_pair;

struct st_writer {
    st_entry *e;
    int n, cap;
    st_pair *meta;
    int n_meta, cap_meta;
};

st_writer *st_writer_new(void) { return pt_calloc(1, sizeof(st_writer)); }

void st_writer_free(st_writer *w) {
    if (!w) return;
    for (int i = 0; i < w->n; i++) free(w->e[i].name);
    for (int i = 0; i < w->n_meta; i++) { free(w->meta[i].key); free(w->meta[i].val); }
    free(w->e);
    free(w->meta);
    free(w);
}

/* Returns p grown to hold `need` elements of `elem` bytes (cap doubled; pt_malloc aborts on OOM). */
static void *grow(void *p, int *cap, int need, size_t elem) {
    if (need <= *cap) return p;
    int old = *cap;
    *cap = old ? old * 2 : 16;
    if (*cap < need) *cap = need;
    void *q = pt_malloc((size_t)*cap * elem);
    if (old) memcpy(q, p, (size_t)old * elem);
    free(p);
    return q;
}

/* st_writer_add, or (reserve) an entry without data, written in place later (st_create). */
static int writer_add(st_writer *w, const char *name, st_dtype dt, int ndim, const int64_t *shape,
                      const void *data, int reserve) {
    if ((unsigned)dt >= ST_DTYPE_COUNT) return pt_seterr("st_writer_add: tensor '%s': bad dtype %d", name, (int)dt);
    if (strcmp(name, "__metadata__") == 0) return pt_seterr("st_writer_add: tensor name '__metadata__' is reserved");
    if (ndim < 0 || ndim > ST_MAX_DIMS)
        return pt_seterr("st_writer_add: tensor '%s': ndim %d outside 0..%d", name, ndim, ST_MAX_DIMS);
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->e[i].name, name) == 0) return pt_seterr("st_writer_add: tensor '%s' added twice", name);
    st_entry e = {.dtype = dt, .ndim = ndim, .data = data};
    size_t numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (double)shape[i] > ST_MAX_INT || __builtin_mul_overflow(numel, (size_t)shape[i], &numel))
            return pt_seterr("st_writer_add: tensor '%s': bad or overflowing dimension %lld",
                             name, (long long)shape[i]);
        e.shape[i] = shape[i];
    }
    if (__builtin_mul_overflow(numel, st_dtype_size(dt), &e.nbytes))
        return pt_seterr("st_writer_add: tensor '%s': size overflows", name);
    if (e.nbytes && !data && !reserve) return pt_seterr("st_writer_add: tensor '%s': data is NULL", name);
    e.reserved = reserve;
    e.name = pt_strdup(name);
    w->e = grow(w->e, &w->cap, w->n + 1, sizeof(st_entry));
    w->e[w->n++] = e;
    return 0;
}

int st_writer_add(st_writer *w, const char *name, st_dtype dt, int ndim, const int64_t *shape,
                  const void *data) {
    return writer_add(w, name, dt, ndim, shape, data, 0);
}

int st_writer_reserve(st_writer *w, const char *name, st_dtype dt, int ndim, const int64_t *shape) {
    return writer_add(w, name, dt, ndim, shape, NULL, 1);
}

int st_writer_count(const st_writer *w) { return w->n; }

int st_writer_meta(st_writer *w, const char *key, const char *value) {
    for (int i = 0; i < w->n_meta; i++)
        if (strcmp(w->meta[i].key, key) == 0) {
            free(w->meta[i].val);
            w->meta[i].val = pt_strdup(value);
            return 0;
        }
    w->meta = grow(w->meta, &w->cap_meta, w->n_meta + 1, sizeof(st_pair));
    w->meta[w->n_meta++] = (st_pair){pt_strdup(key), pt_strdup(value)};
    return 0;
}

/* A growable text buffer for the header. */
typedef struct { char *s; size_t len, cap; } strbuf;

static void sb_put(strbuf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *q = pt_malloc(cap);
        if (b->len) memcpy(q, b->s, b->len);
        free(b->s);
        b->s = q;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
}

static void sb_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(strbuf *b, const char *fmt, ...) {
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    sb_put(b, tmp, (size_t)n);   /* callers print only numbers and fixed words: fits */
}

/* A JSON string literal: quotes, backslashes and control characters escaped; UTF-8 passes. */
static void sb_json_str(strbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') { char e[2] = {'\\', (char)*p}; sb_put(b, e, 2); }
        else if (*p < 0x20) sb_printf(b, "\\u%04x", *p);
        else sb_put(b, (const char *)p, 1);
    }
    sb_put(b, "\"", 1);
}

/* Data layout: by decreasing element size, insertion order among equals. ord gets the order of
 * the data section, off[i] the offset of tensor i. */
static void layout_data(const st_writer *w, int *ord, size_t *off) {
    int k = 0;
    size_t at = 0;
    for (size_t sz = 8; sz >= 1; sz /= 2)
        for (int i = 0; i < w->n; i++)
            if (st_dtype_size(w->e[i].dtype) == sz) {
                ord[k++] = i;
                off[i] = at;
                at += w->e[i].nbytes;
            }
}

static void build_header(const st_writer *w, const size_t *off, strbuf *b) {
    sb_put(b, "{", 1);
    if (w->n_meta) {
        sb_put(b, "\"__metadata__\":{", 16);
        for (int i = 0; i < w->n_meta; i++) {
            if (i) sb_put(b, ",", 1);
            sb_json_str(b, w->meta[i].key);
            sb_put(b, ":", 1);
            sb_json_str(b, w->meta[i].val);
        }
        sb_put(b, "}", 1);
    }
    for (int i = 0; i < w->n; i++) {
        const st_entry *e = &w->e[i];
        if (i || w->n_meta) sb_put(b, ",", 1);
        sb_json_str(b, e->name);
        sb_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype_name(e->dtype));
        for (int d = 0; d < e->ndim; d++) sb_printf(b, "%s%lld", d ? "," : "", (long long)e->shape[d]);
        sb_printf(b, "],\"data_offsets\":[%zu,%zu]}", off[i], off[i] + e->nbytes);
    }
    sb_put(b, "}", 1);
    while (b->len % 8) sb_put(b, " ", 1);   /* data section starts 8-byte aligned */
}

/* The header (padded) and the data offsets of w: ord[] the data order, off[] per tensor
 * (relative to the data section). The caller frees hdr->s. */
static void writer_plan(const st_writer *w, int *ord, size_t *off, strbuf *hdr) {
    layout_data(w, ord, off);
    build_header(w, off, hdr);
}

int st_write(const st_writer *w, const char *path) {
    for (int i = 0; i < w->n; i++)
        if (w->e[i].reserved && w->e[i].nbytes)
            return pt_seterr("%s: tensor '%s' has no data (reserved: write the file with st_create)",
                             path, w->e[i].name);
    size_t n = (size_t)(w->n ? w->n : 1);
    int *ord = pt_malloc(sizeof(int) * n);
    size_t *off = pt_malloc(sizeof(size_t) * n);
    strbuf hdr = {0};
    writer_plan(w, ord, off, &hdr);
    uint64_t hlen = hdr.len;
    io_atomic_file a;
    int rc = io_atomic_open(&a, path);
    if (rc == 0) {
        fwrite(&hlen, 8, 1, a.f);
        fwrite(hdr.s, 1, hdr.len, a.f);
        for (int i = 0; i < w->n; i++)
            if (w->e[ord[i]].nbytes) fwrite(w->e[ord[i]].data, 1, w->e[ord[i]].nbytes, a.f);
        rc = io_atomic_commit(&a);
    }
    free(hdr.s);
    free(off);
    free(ord);
    return rc;
}

size_t st_writer_layout(const st_writer *w, size_t *off, size_t *header_bytes) {
    size_t n = (size_t)(w->n ? w->n : 1), total;
    int *ord = pt_malloc(sizeof(int) * n);
    strbuf hdr = {0};
    writer_plan(w, ord, off, &hdr);
    total = 8 + hdr.len;
    for (int i = 0; i < w->n; i++) {
        off[i] += 8 + hdr.len;
        total += w->e[i].nbytes;
    }
    if (header_bytes) *header_bytes = 8 + hdr.len;
    free(hdr.s);
    free(ord);
    return total;
}

int st_create(const st_writer *w, const char *path) {
    size_t n = (size_t)(w->n ? w->n : 1), total;
    size_t *off = pt_malloc(sizeof(size_t) * n);
    int *ord = pt_malloc(sizeof(int) * n);
    strbuf hdr = {0};
    writer_plan(w, ord, off, &hdr);
    uint64_t len = hdr.len;
    total = 8 + hdr.len;
    for (int i = 0; i < w->n; i++) total += w->e[i].nbytes;
    int rc = 0, fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) rc = pt_seterr("%s: cannot create: %s", path, strerror(errno));
    if (rc == 0) rc = io_pwrite_all(fd, &len, 8, 0, path);
    if (rc == 0) rc = io_pwrite_all(fd, hdr.s, hdr.len, 8, path);
    for (int i = 0; rc == 0 && i < w->n; i++)   /* tensors with data go in now */
        if (!w->e[i].reserved && w->e[i].nbytes)
            rc = io_pwrite_all(fd, w->e[i].data, w->e[i].nbytes, 8 + hdr.len + off[i], path);
    if (rc == 0 && ftruncate(fd, (off_t)total) < 0)
        rc = pt_seterr("%s: cannot size it to %zu bytes: %s", path, total, strerror(errno));
    if (rc == 0 && fsync(fd) < 0) rc = pt_seterr("%s: fsync: %s", path, strerror(errno));
    if (fd >= 0 && close(fd) < 0 && rc == 0) rc = pt_seterr("%s: close: %s", path, strerror(errno));
    if (rc < 0 && fd >= 0) unlink(path);
    free(hdr.s);
    free(ord);
    free(off);
    return rc;
}
