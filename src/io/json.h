/* Checked getters for the members of a parsed JSON object, shared by the readers of plans, costs,
 * clusters, checkpoint manifests and safetensors headers: type, range and presence checked in
 * one place, the error worded by the caller. Not a parser and not a schema: each reader still
 * walks its own file and says what its fields mean. */
#ifndef PT_IO_JSON_H
#define PT_IO_JSON_H
#include <stdbool.h>
#include <stddef.h>
#include <cjson/cJSON.h>

/* What a getter does when the member is absent. */
typedef enum {
    IO_JSON_OPTIONAL,   /* return 1, set no error */
    IO_JSON_REQUIRED,   /* an error like a wrong value: return -1 with the caller's message */
} io_json_need;

/* Each getter reads obj[key] (case-sensitive; the first of duplicate keys, as cJSON does) and
 * returns
 *    0  present and valid: *out set;
 *    1  absent with IO_JSON_OPTIONAL: *out untouched, no error set;
 *   -1  present but invalid (wrong type; a number not finite, not whole or outside [lo, hi]; a
 *       string of cap bytes or more), or absent with IO_JSON_REQUIRED: *out untouched and the
 *       error set from the caller's printf format `fmt`, which names the file and the field
 *       ("%s: %s must be a whole number >= 1", path, key). The wording is the caller's because
 *       each file's errors have their own, which users and tests grep. */

/* A whole number in [lo, hi]. */
int io_json_int(int *out, const cJSON *obj, const char *key, io_json_need need, int lo, int hi,
                const char *fmt, ...) __attribute__((format(printf, 7, 8)));
/* A whole number in [lo, hi]; |lo| and |hi| at most 2^53, where JSON numbers stop being exact. */
int io_json_long(long *out, const cJSON *obj, const char *key, io_json_need need, long lo, long hi,
                 const char *fmt, ...) __attribute__((format(printf, 7, 8)));
/* A finite number in [lo, hi] (cJSON reads 1e999 as inf; that is refused). For "> 0" pass
 * lo = DBL_TRUE_MIN. */
int io_json_num(double *out, const cJSON *obj, const char *key, io_json_need need, double lo, double hi,
                const char *fmt, ...) __attribute__((format(printf, 7, 8)));
/* A string shorter than cap bytes (cap 0: any length). *out points into obj: copy it before
 * deleting obj. */
int io_json_str(const char **out, const cJSON *obj, const char *key, io_json_need need, size_t cap,
                const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* true or false. */
int io_json_bool(bool *out, const cJSON *obj, const char *key, io_json_need need,
                 const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* The same checks for a value at hand (an array element, a member read some other way); false
 * for NULL. No error is set. */
bool io_json_is_whole(const cJSON *v, double lo, double hi);   /* a number, whole, in [lo, hi] */
bool io_json_is_num(const cJSON *v, double lo, double hi);     /* a finite number in [lo, hi] */

#endif
