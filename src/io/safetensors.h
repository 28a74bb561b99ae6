/* safetensors files (Hugging Face's format): a reader that maps a file and validates every byte of
 * its header, and a writer that lays tensors out as Hugging Face does and renames into place.
 * Not a model loader: mapping names such as "h.0.attn.c_attn.weight" onto layers is model code.
 *
 * Format: u64 little-endian header length N, N bytes of JSON ({"name": {"dtype": "F32",
 * "shape": [..], "data_offsets": [begin, end]}, ..., optional "__metadata__": {str: str}}),
 * then the data section; offsets are relative to its start. Hosts are little-endian. */
#ifndef PT_IO_SAFETENSORS_H
#define PT_IO_SAFETENSORS_H
#include <stddef.h>
#include <stdint.h>

typedef enum {
    ST_F64, ST_F32, ST_F16, ST_BF16,
    ST_I64, ST_I32, ST_I16, ST_I8,
    ST_U64, ST_U32, ST_U16, ST_U8,
    ST_BOOL, ST_F8_E4M3, ST_F8_E5M2,
    ST_DTYPE_COUNT
} st_dtype;

#define ST_MAX_DIMS 8

/* One tensor of an open file. Scalars have ndim 0 and numel 1. `data` points into the mapped
 * file (valid until st_close), aligned only as the file aligned it: read it with memcpy or
 * st_tensor_f32 unless you know the layout (files from st_write are naturally aligned). */
typedef struct {
    const char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t numel;
    size_t nbytes;           /* numel * st_dtype_size(dtype) */
    size_t offset;           /* begin, relative to the data section */
    const void *data;
} st_tensor;

typedef struct st_file st_file;

/* Bytes per element (BOOL and F8 are 1). */
size_t st_dtype_size(st_dtype dt);
/* "F32", "BF16", ... as the format spells it. */
const char *st_dtype_name(st_dtype dt);
/* Parses a dtype name; returns 0, or -1 (no error message set) when unknown. */
int st_dtype_parse(const char *s, st_dtype *out);

/* Opens and validates a safetensors file: header length against the file size, the JSON, each
 * entry's dtype, shape and data_offsets (types, ranges, begin <= end, end - begin equal to
 * numel * dtype size, no shape overflow), duplicate names, and that the tensors tile the data
 * section exactly (no overlap, gap or trailing bytes, as Hugging Face's reader demands). The file
 * is mmap'd: nothing is read until a tensor is used. On success *out owns the mapping; free with
 * st_close. On failure returns -1 with an error naming the file and the tensor or field. */
int st_open(st_file **out, const char *path);
/* Unmaps and frees; NULL is fine. Pointers from st_at/st_find/st_meta die with it. */
void st_close(st_file *f);

/* The path given to st_open. */
const char *st_path(const st_file *f);
/* Number of tensors (excluding __metadata__). */
int st_count(const st_file *f);
/* Tensor i (0 <= i < st_count), in the order the header lists them. */
const st_tensor *st_at(const st_file *f, int i);
/* Tensor by exact name, or NULL (no error set). O(log n). */
const st_tensor *st_find(const st_file *f, const char *name);

/* Metadata value for key, or NULL when absent. */
const char *st_meta(const st_file *f, const char *key);
/* Number of metadata entries, and entry i (header order). */
int st_meta_count(const st_file *f);
void st_meta_at(const st_file *f, int i, const char **key, const char **value);

/* Copies tensor t into dst (numel floats), converting F32 (a memcpy), F16, BF16 and F64 to
 * float. Other dtypes: -1 with an error naming file, tensor and dtype. */
int st_tensor_f32(const st_file *f, const st_tensor *t, float *dst);
/* Finds `name`, checks its shape equals shape[0..ndim) and copies it into dst as floats (see
 * st_tensor_f32). Errors name the file and tensor: "model.safetensors: tensor
 * 'h.0.attn.c_attn.weight' has shape (24, 72), expected (24, 96)", or "... has no tensor 'x'". */
int st_read_f32(const st_file *f, const char *name, float *dst, int ndim, const int64_t *shape);

/* ---- writing ---- */
typedef struct st_writer st_writer;

/* A new, empty list of tensors and metadata. Free with st_writer_free. */
st_writer *st_writer_new(void);
void st_writer_free(st_writer *w);
/* Adds a tensor. The name is copied; `data` (numel * dtype size bytes; may be NULL when numel is
 * 0) is NOT copied and must stay valid until st_write returns. ndim 0 is a scalar. Fails (-1)
 * on a duplicate or reserved name ("__metadata__"), ndim outside 0..ST_MAX_DIMS, a negative
 * dimension, or a size that overflows. */
int st_writer_add(st_writer *w, const char *name, st_dtype dt, int ndim, const int64_t *shape,
                  const void *data);
/* Adds a tensor without data, to be written in place by others after st_create (a file several
 * writers fill: each pwrites its byte ranges at the offsets st_writer_layout gives). Same
 * checks as st_writer_add. st_write refuses a writer with reserved tensors. */
int st_writer_reserve(st_writer *w, const char *name, st_dtype dt, int ndim, const int64_t *shape);
/* Number of tensors added (reserved included). */
int st_writer_count(const st_writer *w);
/* Where st_write / st_create put each tensor: off[i] (st_writer_count entries) gets the absolute
 * file offset of tensor i's data (insertion order), *header_bytes (may be NULL) the 8-byte length
 * plus the padded header; returns the file's size. Pure: the same on every process. */
size_t st_writer_layout(const st_writer *w, size_t *off, size_t *header_bytes);
/* Adds (or replaces) a metadata string pair; both are copied. */
int st_writer_meta(st_writer *w, const char *key, const char *value);
/* Writes the file: header lists tensors in insertion order; the data section holds them by
 * decreasing element size, insertion order among equals, with no gaps, so every tensor is
 * naturally aligned (the header is space-padded to a multiple of 8 bytes, as Hugging Face does)
 * and Hugging Face's reader accepts the file. Writes "<path>.tmp.<pid>", fsyncs, renames over
 * path: a crash never leaves a half-written file under the real name. -1 on I/O errors, naming
 * the path; the temporary is removed. */
int st_write(const st_writer *w, const char *path);
/* Creates path (truncating it) with w's header and its final size (st_writer_layout): the
 * tensors with data are written, the reserved ones left zero for their writers to fill in
 * place; fsynced. Not atomic (others write into it next): put it in a folder that is renamed
 * when complete. -1 naming the path; the file is removed. */
int st_create(const st_writer *w, const char *path);

#endif
