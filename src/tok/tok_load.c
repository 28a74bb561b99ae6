/* Loading a tokenizer: GPT-2's encoder.json + vocab.bpe, or a Hugging Face tokenizer.json of the
 * same kind, into the tables tok_bpe.c encodes with (tok_impl.h). Token strings in these files
 * are GPT-2's printable stand-ins for bytes (bytes_to_unicode in OpenAI's encoder.py): each
 * character is turned back into its byte here, once. Not here: finding "gpt2" (tok_find.c). */
#include "tok/tok_impl.h"
#include "io/io.h"
#include "io/json.h"
#include "util/pt.h"
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define ALPHABET 324          /* bytes_to_unicode's code points are all below 256 + 68 */

/* A byte map being built: token bytes -> id, for resolving merges and specials at load time. */
typedef struct {
    tok *t;
    int *slot;                /* open addressing over ids; -1 free */
    size_t mask;
    size_t blob_len, blob_cap;
    size_t idcap;             /* ids t->off and t->len have room for */
    const char *file;         /* for errors */
} builder;

/* bytes_to_unicode inverted: the byte each code point stands for, or -1. */
static void alphabet(int *byte_of) {
    for (int c = 0; c < ALPHABET; c++) byte_of[c] = -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        bool self = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        byte_of[self ? b : 256 + n++] = b;
    }
}

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001b3ull;
    return h ^ (h >> 29);
}

/* The id of bytes s[0..n), or -1. */
static int builder_find(const builder *b, const char *s, size_t n) {
    for (size_t i = hash_bytes(s, n) & b->mask;; i = (i + 1) & b->mask) {
        int id = b->slot[i];
        if (id < 0) return -1;
        if (b->t->len[id] == n && !memcmp(b->t->blob + b->t->off[id], s, n)) return id;
    }
}

static void builder_grow_ids(builder *b, int id) {
    tok *t = b->t;
    if ((size_t)id >= b->idcap) {
        size_t cap = b->idcap ? b->idcap : 1024;
        while (cap <= (size_t)id) cap *= 2;
        t->off = realloc(t->off, cap * sizeof *t->off);
        t->len = realloc(t->len, cap * sizeof *t->len);
        if (!t->off || !t->len) { fprintf(stderr, "out of memory\n"); abort(); }
        for (size_t i = b->idcap; i < cap; i++) t->len[i] = UINT32_MAX;
        b->idcap = cap;
    }
    if (id >= t->nvocab) t->nvocab = id + 1;
}

/* Adds token id with bytes s[0..n). Refuses a second token of the same id or the same bytes. */
static int builder_add(builder *b, int id, const char *s, size_t n, const char *shown) {
    tok *t = b->t;
    int old = builder_find(b, s, n);
    if (old >= 0)
        return pt_seterr("%s: token \"%s\" appears twice (ids %d and %d)", b->file, shown, old, id);
    builder_grow_ids(b, id);
    if (t->len[id] != UINT32_MAX)
        return pt_seterr("%s: id %d is given to two tokens (\"%s\" and another)", b->file, id, shown);
    while (b->blob_len + n + 1 > b->blob_cap) {
        b->blob_cap = b->blob_cap ? b->blob_cap * 2 : 1 << 20;
        t->blob = realloc(t->blob, b->blob_cap);
        if (!t->blob) { fprintf(stderr, "out of memory\n"); abort(); }
    }
    memcpy(t->blob + b->blob_len, s, n);
    t->off[id] = (uint32_t)b->blob_len;
    t->len[id] = (uint32_t)n;
    b->blob_len += n;
    size_t i = hash_bytes(s, n) & b->mask;
    while (b->slot[i] >= 0) i = (i + 1) & b->mask;
    b->slot[i] = id;
    return 0;
}

/* A token string of the files (UTF-8 of GPT-2's byte stand-ins) into bytes; out holds len bytes.
 * -1 naming the token and the character outside the alphabet. */
static int unmap_token(const char *str, char *out, size_t *n, const int *byte_of, const char *file) {
    const uint8_t *s = (const uint8_t *)str;
    size_t k = 0;
    for (size_t i = 0; s[i];) {
        uint32_t cp = s[i];
        int len = cp < 0xC0 ? 1 : cp < 0xE0 ? 2 : cp < 0xF0 ? 3 : 4;
        if (len > 1) cp &= 0x3F >> (len - 1);
        for (int j = 1; j < len; j++) {
            if ((s[i + j] & 0xC0) != 0x80) { len = j; cp = UINT32_MAX; break; }   /* cJSON gave bad UTF-8 */
            cp = cp << 6 | (s[i + j] & 0x3F);
        }
        if (cp >= ALPHABET || byte_of[cp] < 0)
            return pt_seterr("%s: token \"%s\" has a character (U+%04X) that stands for no byte in GPT-2's "
                             "byte alphabet (bytes_to_unicode): not a byte-level BPE vocabulary", file, str, cp);
        out[k++] = (char)byte_of[cp];
        i += (size_t)len;
    }
    *n = k;
    return 0;
}

/* The vocabulary: a JSON object token -> id (encoder.json, or tokenizer.json's model.vocab). */
static int load_vocab(builder *b, const cJSON *vocab, const int *byte_of) {
    if (!cJSON_IsObject(vocab)) return pt_seterr("%s: the vocabulary is not a JSON object of token: id", b->file);
    int count = cJSON_GetArraySize(vocab);
    if (count < 256) return pt_seterr("%s: %d tokens, fewer than the 256 single bytes", b->file, count);
    size_t slots = 1;
    while (slots < (size_t)count * 3) slots *= 2;
    b->slot = pt_malloc(slots * sizeof *b->slot);
    memset(b->slot, 0xff, slots * sizeof *b->slot);
    b->mask = slots - 1;
    char buf[1024];
    for (const cJSON *e = vocab->child; e; e = e->next) {
        if (!io_json_is_whole(e, 0, (1 << 24) - 1))
            return pt_seterr("%s: token \"%s\": id is not a whole number in [0, 2^24)", b->file, e->string);
        size_t n = 0;
        if (strlen(e->string) >= sizeof buf)
            return pt_seterr("%s: token \"%.40s...\" is longer than %zu bytes", b->file, e->string, sizeof buf);
        if (unmap_token(e->string, buf, &n, byte_of, b->file) < 0) return -1;
        if (n == 0) return pt_seterr("%s: an empty token (\"\") in the vocabulary", b->file);
        if (builder_add(b, (int)e->valuedouble, buf, n, e->string) < 0) return -1;
    }
    return 0;
}

static void merges_alloc(tok *t, size_t count) {
    size_t slots = 1;
    while (slots < count * 2 + 16) slots *= 2;
    t->merges = pt_malloc(slots * sizeof *t->merges);
    for (size_t i = 0; i < slots; i++) t->merges[i] = (tok_merge){TOK_EMPTY_KEY, TOK_NO_RANK, -1};
    t->mmask = slots - 1;
}

/* Merge number `rank`: tokens left and right (file strings) make left+right. A pair given twice
 * keeps its first rank. */
static int add_merge(builder *b, const char *left, const char *right, uint32_t rank, const int *byte_of,
                     const char *where) {
    char l[1024], r[1024], both[2048];
    size_t nl = 0, nr = 0;
    if (strlen(left) >= sizeof l || strlen(right) >= sizeof r)
        return pt_seterr("%s: merge is longer than %zu bytes", where, sizeof l);
    if (unmap_token(left, l, &nl, byte_of, where) < 0 || unmap_token(right, r, &nr, byte_of, where) < 0) return -1;
    int a = builder_find(b, l, nl), c = builder_find(b, r, nr);
    memcpy(both, l, nl);
    memcpy(both + nl, r, nr);
    int m = builder_find(b, both, nl + nr);
    if (a < 0 || c < 0)
        return pt_seterr("%s: merge \"%s %s\": \"%s\" is not in the vocabulary (merges and vocabulary "
                         "from different tokenizers?)", where, left, right, a < 0 ? left : right);
    if (m < 0)
        return pt_seterr("%s: merge \"%s %s\": what it makes, \"%s%s\", is not in the vocabulary (merges "
                         "and vocabulary from different tokenizers?)", where, left, right, left, right);
    tok_merge *s = (tok_merge *)tok_merge_find(b->t, a, c);
    if (s->key == TOK_EMPTY_KEY) *s = (tok_merge){(uint64_t)(uint32_t)a << 32 | (uint32_t)c, rank, m};
    return 0;
}

/* vocab.bpe: a "#version" line, then one merge "LEFT RIGHT" per line, highest priority first. */
static int load_merges_text(builder *b, char *text, const int *byte_of, const char *file) {
    size_t lines = 1;
    for (char *p = text; *p; p++) lines += *p == '\n';
    merges_alloc(b->t, lines);
    uint32_t rank = 0;
    int lineno = 0;
    for (char *line = text, *next; line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        lineno++;
        size_t n = strlen(line);
        if (n && line[n - 1] == '\r') line[--n] = 0;
        if (n == 0 || (lineno == 1 && !strncmp(line, "#version", 8))) continue;
        char *sp = strchr(line, ' ');
        if (!sp || sp == line || !sp[1] || strchr(sp + 1, ' '))
            return pt_seterr("%s line %d: \"%.60s\" is not a merge (two tokens and one space between)",
                             file, lineno, line);
        *sp = 0;
        char where[600];
        snprintf(where, sizeof where, "%.500s line %d", file, lineno);
        if (add_merge(b, line, sp + 1, rank++, byte_of, where) < 0) return -1;
    }
    if (rank == 0) return pt_seterr("%s: no merges in it", file);
    return 0;
}

/* tokenizer.json's model.merges: strings "LEFT RIGHT" or pairs ["LEFT", "RIGHT"]. */
static int load_merges_json(builder *b, const cJSON *merges, const int *byte_of) {
    if (!cJSON_IsArray(merges) || cJSON_GetArraySize(merges) == 0)
        return pt_seterr("%s: model.merges is missing or not a non-empty array", b->file);
    merges_alloc(b->t, (size_t)cJSON_GetArraySize(merges));
    uint32_t rank = 0;
    for (const cJSON *m = merges->child; m; m = m->next, rank++) {
        char where[600], buf[2100];
        snprintf(where, sizeof where, "%s: model.merges[%u]", b->file, rank);
        const char *l = NULL, *r = NULL;
        if (cJSON_IsString(m) && strlen(m->valuestring) < sizeof buf) {
            strcpy(buf, m->valuestring);
            char *sp = strchr(buf, ' ');
            if (sp && sp != buf && sp[1] && !strchr(sp + 1, ' ')) { *sp = 0; l = buf; r = sp + 1; }
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(m->child) &&
                   cJSON_IsString(m->child->next)) {
            l = m->child->valuestring;
            r = m->child->next->valuestring;
        }
        if (!l) return pt_seterr("%s is not a merge (\"LEFT RIGHT\" or [\"LEFT\", \"RIGHT\"])", where);
        if (add_merge(b, l, r, rank, byte_of, where) < 0) return -1;
    }
    return 0;
}

static void add_special(tok *t, const char *text, int id) {
    t->special = realloc(t->special, (size_t)(t->nspecial + 1) * sizeof *t->special);
    if (!t->special) { fprintf(stderr, "out of memory\n"); abort(); }
    t->special[t->nspecial++] = (tok_special){pt_strdup(text), strlen(text), id};
    if (!strcmp(text, "<|endoftext|>")) t->eot = id;
}

/* Every single byte must be a token: BPE starts from them. */
static int finish(builder *b) {
    tok *t = b->t;
    for (int c = 0; c < 256; c++) {
        char s = (char)c;
        t->byte_id[c] = builder_find(b, &s, 1);
        if (t->byte_id[c] < 0)
            return pt_seterr("%s: byte 0x%02X has no token of its own: not a byte-level BPE vocabulary", b->file, c);
    }
    return 0;
}

static cJSON *read_json(const char *path) {
    size_t len;
    char *text = pt_read_file(path, &len);
    if (!text) return NULL;
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!j) {
        char near[80];
        size_t at = end ? (size_t)(end - text) : 0;
        int line = io_text_position(text, len, at, near, sizeof near);
        pt_seterr("%s line %d: not valid JSON near \"%s\" (a corrupt or truncated file?)", path, line, near);
    }
    free(text);
    return j;
}

/* GPT-2's pair of files in dir. */
static int load_gpt2_files(builder *b, const char *dir, const int *byte_of) {
    char path[1100];
    snprintf(path, sizeof path, "%s/encoder.json", dir);
    b->file = path;
    cJSON *enc = read_json(path);
    if (!enc) return -1;
    int rc = load_vocab(b, enc, byte_of);
    cJSON_Delete(enc);
    if (rc < 0) return -1;
    snprintf(path, sizeof path, "%s/vocab.bpe", dir);
    size_t len;
    char *text = pt_read_file(path, &len);
    if (!text) return -1;
    if (strlen(text) != len) rc = pt_seterr("%s: has NUL bytes: not a vocab.bpe merges file", path);
    if (rc == 0) rc = load_merges_text(b, text, byte_of, path);
    free(text);
    char eot[] = "<|endoftext|>";
    int id = rc == 0 ? builder_find(b, eot, strlen(eot)) : -1;
    if (id >= 0) add_special(b->t, eot, id);
    return rc == 0 ? finish(b) : -1;
}

/* tokenizer.json must be GPT-2's kind: no normalizer, a ByteLevel pre-tokenizer with GPT-2's
 * regex and no prefix space, a BPE model without word suffixes or byte fallback. */
static int check_hf_kind(const cJSON *j, const char *file) {
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(j, "normalizer");
    if (norm && !cJSON_IsNull(norm))
        return pt_seterr("%s: has a normalizer; only GPT-2's kind (no normalizer) is supported", file);
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(j, "pre_tokenizer");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(pre, "type");
    if (!cJSON_IsString(type) || strcmp(type->valuestring, "ByteLevel"))
        return pt_seterr("%s: pre_tokenizer is not {\"type\": \"ByteLevel\"}; only GPT-2's kind is supported", file);
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(pre, "add_prefix_space")))
        return pt_seterr("%s: pre_tokenizer.add_prefix_space is true; GPT-2 adds no space before the text", file);
    if (cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(pre, "use_regex")))
        return pt_seterr("%s: pre_tokenizer.use_regex is false; GPT-2 cuts text by its regex", file);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (!cJSON_IsObject(model) || (mt && (!cJSON_IsString(mt) || strcmp(mt->valuestring, "BPE"))))
        return pt_seterr("%s: model is not a BPE model (model.type \"BPE\")", file);
    const char *bad[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(model, bad[i]);
        if (cJSON_IsString(v) && v->valuestring[0])
            return pt_seterr("%s: model.%s is set; GPT-2's BPE has none", file, bad[i]);
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback")) ||
        cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "ignore_merges")))
        return pt_seterr("%s: model.byte_fallback or model.ignore_merges is true; GPT-2's BPE has neither", file);
    return 0;
}

/* added_tokens: cut out of the text like "<|endoftext|>"; one not in the vocabulary joins it. */
static int load_added(builder *b, const cJSON *added) {
    if (added && !cJSON_IsArray(added)) return pt_seterr("%s: added_tokens is not an array", b->file);
    int k = 0;
    for (const cJSON *a = added ? added->child : NULL; a; a = a->next, k++) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(a, "id");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(a, "content");
        if (!io_json_is_whole(id, 0, (1 << 24) - 1) || !cJSON_IsString(content) || !content->valuestring[0])
            return pt_seterr("%s: added_tokens[%d] needs a whole \"id\" and a non-empty \"content\"", b->file, k);
        const char *s = content->valuestring;
        int have = builder_find(b, s, strlen(s));
        if (have >= 0 && have != (int)id->valuedouble)
            return pt_seterr("%s: added_tokens[%d] \"%s\" has id %d, the vocabulary %d", b->file, k, s,
                             (int)id->valuedouble, have);
        if (have < 0 && builder_add(b, (int)id->valuedouble, s, strlen(s), s) < 0) return -1;
        add_special(b->t, s, (int)id->valuedouble);
    }
    return 0;
}

static int load_hf_file(builder *b, const char *path, const int *byte_of) {
    b->file = path;
    cJSON *j = read_json(path);
    if (!j) return -1;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    int rc = check_hf_kind(j, path);
    if (rc == 0) rc = load_vocab(b, cJSON_GetObjectItemCaseSensitive(model, "vocab"), byte_of);
    if (rc == 0) rc = load_merges_json(b, cJSON_GetObjectItemCaseSensitive(model, "merges"), byte_of);
    if (rc == 0) rc = load_added(b, cJSON_GetObjectItemCaseSensitive(j, "added_tokens"));
    cJSON_Delete(j);
    return rc == 0 ? finish(b) : -1;
}

static bool is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* spec into the loader that reads it: "gpt2", a folder, or a tokenizer.json file. */
static int load_spec(builder *b, const char *spec, const int *byte_of) {
    char dir[1024], path[1100];
    struct stat st;
    if (!strcmp(spec, "gpt2")) {
        if (tok_find_gpt2(dir, sizeof dir) < 0) return -1;
        b->t->source = pt_strdup(dir);
        return load_gpt2_files(b, dir, byte_of);
    }
    b->t->source = pt_strdup(spec);
    if (stat(spec, &st) != 0)
        return pt_seterr("--tokenizer %s: no such file or folder (give gpt2, a folder with encoder.json and "
                         "vocab.bpe or with tokenizer.json, or a tokenizer.json file)", spec);
    if (S_ISREG(st.st_mode)) return load_hf_file(b, spec, byte_of);
    snprintf(path, sizeof path, "%s/encoder.json", spec);
    if (is_file(path)) return load_gpt2_files(b, spec, byte_of);
    snprintf(path, sizeof path, "%s/tokenizer.json", spec);
    if (is_file(path)) return load_hf_file(b, path, byte_of);
    return pt_seterr("--tokenizer %s: the folder holds neither encoder.json + vocab.bpe nor tokenizer.json", spec);
}

int tok_load(tok **out, const char *spec) {
    int byte_of[ALPHABET];
    alphabet(byte_of);
    tok *t = pt_calloc(1, sizeof *t);
    t->eot = -1;
    builder b = {.t = t};
    int rc = load_spec(&b, spec, byte_of);
    free(b.slot);
    *out = NULL;
    if (rc < 0) {
        tok_free(t);
        return -1;
    }
    *out = t;
    return 0;
}

void tok_free(tok *t) {
    if (!t) return;
    for (int i = 0; i < t->nspecial; i++) free(t->special[i].text);
    free(t->special);
    free(t->merges);
    free(t->blob);
    free(t->off);
    free(t->len);
    free(t->source);
    free(t);
}

int tok_vocab_size(const tok *t) { return t->nvocab; }
int tok_eot(const tok *t) { return t->eot; }
const char *tok_source(const tok *t) { return t->source; }

const char *tok_token_bytes(const tok *t, int id, size_t *len) {
    if (id < 0 || id >= t->nvocab || t->len[id] == UINT32_MAX) return NULL;
    *len = t->len[id];
    return t->blob + t->off[id];
}

long tok_decode(const tok *t, const int *ids, size_t n, char *buf, size_t cap) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        size_t len;
        const char *s = tok_token_bytes(t, ids[i], &len);
        if (!s) return pt_seterr("token %d at position %zu is not in the vocabulary (%d ids) of %s", ids[i], i,
                                 t->nvocab, t->source);
        if (k + len <= cap) memcpy(buf + k, s, len);
        k += len;
    }
    return (long)k;
}
