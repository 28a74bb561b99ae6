/* Checked JSON member getters (io/json.h): one verdict function says 0, 1 or -1 for every type;
 * each getter adds only its own validity test and the conversion to *out. */
#include "io/json.h"
#include "util/pt.h"
#include <math.h>
#include <stdarg.h>
#include <string.h>

bool io_json_is_whole(const cJSON *v, double lo, double hi) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    return d >= lo && d <= hi && d == floor(d);   /* NaN fails every comparison */
}

bool io_json_is_num(const cJSON *v, double lo, double hi) {
    return cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble >= lo && v->valuedouble <= hi;
}

/* The getters' common ending: 0 when v is present and valid, 1 when absent and optional, else
 * -1 with the caller's message. */
static int verdict(const cJSON *v, bool valid, io_json_need need, const char *fmt, va_list ap) {
    if (!v && need == IO_JSON_OPTIONAL) return 1;
    if (v && valid) return 0;
    return pt_vseterr(fmt, ap);
}

int io_json_int(int *out, const cJSON *obj, const char *key, io_json_need need, int lo, int hi,
                const char *fmt, ...) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    va_list ap;
    va_start(ap, fmt);
    int rc = verdict(v, io_json_is_whole(v, lo, hi), need, fmt, ap);
    va_end(ap);
    if (rc == 0) *out = (int)v->valuedouble;
    return rc;
}

int io_json_long(long *out, const cJSON *obj, const char *key, io_json_need need, long lo, long hi,
                 const char *fmt, ...) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    va_list ap;
    va_start(ap, fmt);
    int rc = verdict(v, io_json_is_whole(v, (double)lo, (double)hi), need, fmt, ap);
    va_end(ap);
    if (rc == 0) *out = (long)v->valuedouble;
    return rc;
}

int io_json_num(double *out, const cJSON *obj, const char *key, io_json_need need, double lo, double hi,
                const char *fmt, ...) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    va_list ap;
    va_start(ap, fmt);
    int rc = verdict(v, io_json_is_num(v, lo, hi), need, fmt, ap);
    va_end(ap);
    if (rc == 0) *out = v->valuedouble;
    return rc;
}

int io_json_str(const char **out, const cJSON *obj, const char *key, io_json_need need, size_t cap,
                const char *fmt, ...) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    bool valid = cJSON_IsString(v) && (cap == 0 || strlen(v->valuestring) < cap);
    va_list ap;
    va_start(ap, fmt);
    int rc = verdict(v, valid, need, fmt, ap);
    va_end(ap);
    if (rc == 0) *out = v->valuestring;
    return rc;
}

int io_json_bool(bool *out, const cJSON *obj, const char *key, io_json_need need, const char *fmt, ...) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    va_list ap;
    va_start(ap, fmt);
    int rc = verdict(v, cJSON_IsBool(v), need, fmt, ap);
    va_end(ap);
    if (rc == 0) *out = cJSON_IsTrue(v);
    return rc;
}
