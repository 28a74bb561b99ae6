/* GPT-2 configs as JSON with Hugging Face GPT2Config key names: load (strict about the keys we
 * use, silent about the rest) and save. Validation of the numbers is gpt_config_validate's. */
#include "model/config.h"
#include "io/io.h"
#include "io/json.h"
#include "util/pt.h"
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Number of members of obj named key (cJSON keeps duplicates; a config must not have them). */
static int count_key(const cJSON *obj, const char *key) {
    int n = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, obj) n += e->string && strcmp(e->string, key) == 0;
    return n;
}

/* Reads obj[key] as an int: 0 ok, 1 absent, -1 error (present but not an integer, duplicated). */
static int get_int(const cJSON *obj, const char *key, int *out, const char *where) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) return 1;
    if (count_key(obj, key) > 1) return pt_seterr("%s: key \"%s\" appears more than once", where, key);
    if (!cJSON_IsNumber(v)) {
        const char *what = cJSON_IsString(v) ? "a string" : cJSON_IsBool(v) ? "a boolean"
                         : cJSON_IsNull(v) ? "null" : "not a number";
        return pt_seterr("%s: %s must be an integer, got %s", where, key, what);
    }
    if (!io_json_is_whole(v, INT_MIN, INT_MAX))
        return pt_seterr("%s: %s must be an integer, got %g", where, key, v->valuedouble);
    *out = (int)v->valuedouble;
    return 0;
}

/* n_inner is GPT2Config's MLP width; the model only has 4 * n_embd. */
static int check_n_inner(const cJSON *obj, const gpt_config *c, const char *where) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, "n_inner");
    if (!v || cJSON_IsNull(v)) return 0;
    int n_inner;
    if (get_int(obj, "n_inner", &n_inner, where) != 0) return -1;
    if (n_inner != 4 * c->n_embd)
        return pt_seterr("%s: n_inner (%d) must be null or 4 * n_embd (%d): other MLP widths are "
                         "not supported", where, n_inner, 4 * c->n_embd);
    return 0;
}

int config_from_cjson(gpt_config *out, const cJSON *obj, const char *where) {
    if (!cJSON_IsObject(obj)) return pt_seterr("%s: expected a JSON object", where);
    gpt_config c = { 0 };   /* nothing inserted: the JSON form has no insert_* */
    const char *keys[] = {"n_layer", "n_head", "n_embd", "vocab_size", "n_positions"};
    int *dst[] = {&c.n_layer, &c.n_head, &c.n_embd, &c.vocab_size, &c.n_positions};
    for (int i = 0; i < 5; i++) {
        int rc = get_int(obj, keys[i], dst[i], where);
        if (rc == 1 && dst[i] == &c.n_positions) rc = get_int(obj, "n_ctx", dst[i], where);  /* alias */
        if (rc == 1) return pt_seterr("%s: missing key \"%s\"", where, keys[i]);
        if (rc < 0) return -1;
    }
    if (gpt_config_validate(&c, where) != 0 || check_n_inner(obj, &c, where) != 0) return -1;
    *out = c;
    return 0;
}

/* "line N: parse error near '...'" for a cJSON failure at byte `at` of text. */
static int parse_error(const char *path, const char *text, size_t len, size_t at) {
    char near[40];
    int line = io_text_position(text, len, at, near, sizeof near);
    if (!near[0]) return pt_seterr("%s: line %d: parse error (unexpected end of input)", path, line);
    return pt_seterr("%s: line %d: parse error near '%s'", path, line, near);
}

int config_load_json(gpt_config *c, const char *path) {
    size_t len;
    char *text = pt_read_file(path, &len);
    if (!text) return -1;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    size_t at = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
    if (root) at += strspn(text + at, " \t\r\n");        /* only whitespace may follow */
    int rc;
    if (!root || at < len) rc = parse_error(path, text, len, at);
    else rc = config_from_cjson(c, root, path);
    cJSON_Delete(root);
    free(text);
    return rc;
}

cJSON *config_to_cjson(const gpt_config *c) {
    if (gpt_config_validate(c, "config_to_cjson") != 0) return NULL;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model_type", "gpt2");
    cJSON_AddNumberToObject(o, "n_layer", c->n_layer);
    cJSON_AddNumberToObject(o, "n_head", c->n_head);
    cJSON_AddNumberToObject(o, "n_embd", c->n_embd);
    cJSON_AddNumberToObject(o, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(o, "n_positions", c->n_positions);
    cJSON_AddNumberToObject(o, "n_ctx", c->n_positions);
    return o;
}

int config_save_json(const gpt_config *c, const char *path) {
    if (gpt_config_validate(c, path) != 0) return -1;
    cJSON *o = config_to_cjson(c);
    int rc = io_write_json(o, path);
    cJSON_Delete(o);
    return rc;
}
