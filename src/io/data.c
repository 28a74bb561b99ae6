/* Token data: llm.c token files and byte-level text, mmap'd and checked once at open; batches
 * with wrap-around; a stateless seeded batch order. Not a tokenizer, not a loader thread.
 * Little-endian hosts only (token files are little-endian). */
#include "io/data.h"
#include "io/io.h"
#include "util/pt.h"
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "token files assume a little-endian host");

#define HEADER_BYTES (DATA_HEADER_INTS * 4)

struct data_set {
    char *path;
    unsigned char *map;       /* whole file */
    size_t map_len;
    const uint16_t *tok16;    /* token file: tokens after the header */
    const uint8_t *tok8;      /* text: the bytes */
    uint16_t *owned;          /* data_from_ids: the tokens (tok16 points here) */
    size_t n;
};

static int map_file(data_set *d) {
    if (io_map_file(d->path, &d->map, &d->map_len) < 0) return -1;
    if (d->map_len == 0) return pt_seterr("%s: file is empty (no tokens)", d->path);
    return 0;
}

/* A token file is recognised by its magic; a file that must be one (a .bin name, or NUL bytes
 * near the start, which text never has) but lacks the magic is an error, not text. */
static bool has_magic(const data_set *d) {
    int32_t m;
    if (d->map_len < 4) return false;
    memcpy(&m, d->map, 4);
    return m == DATA_MAGIC;
}

static bool has_bin_name(const data_set *d) {
    size_t len = strlen(d->path);
    return len >= 4 && strcmp(d->path + len - 4, ".bin") == 0;
}

static bool must_be_token_file(const data_set *d) {
    size_t head = d->map_len < HEADER_BYTES ? d->map_len : HEADER_BYTES;
    return has_bin_name(d) || memchr(d->map, 0, head) != NULL;
}

static int check_tokens(const data_set *d, int vocab) {
    for (size_t i = 0; i < d->n; i++)
        if (d->tok16[i] >= vocab)
            return pt_seterr("%s: token %d at position %zu is out of the vocabulary (vocab_size %d)",
                             d->path, d->tok16[i], i, vocab);
    return 0;
}

static int open_token_file(data_set *d, int vocab) {
    if (d->map_len < HEADER_BYTES)
        return pt_seterr("%s: file is %zu bytes, shorter than the %d-byte header of an llm.c token file",
                         d->path, d->map_len, HEADER_BYTES);
    int32_t h[3];
    memcpy(h, d->map, sizeof h);
    bool bin = has_bin_name(d);
    if (h[0] != DATA_MAGIC)
        return pt_seterr("%s: bad magic %d (expected %d, an llm.c token file)%s", d->path, h[0],
                         DATA_MAGIC, bin ? "" : "; not text either: it has NUL bytes near the start");
    if (h[1] != DATA_VERSION)
        return pt_seterr("%s: header version %d, expected %d (uint16 tokens)", d->path, h[1], DATA_VERSION);
    if (h[2] < 0) return pt_seterr("%s: header token count %d is negative", d->path, h[2]);
    size_t want = (size_t)h[2] * 2, have = d->map_len - HEADER_BYTES;
    if (have != want)
        return pt_seterr("%s: header says %d tokens (%zu bytes) but %zu bytes follow the header (%s)",
                         d->path, h[2], want, have, have < want ? "truncated" : "trailing bytes");
    if (h[2] == 0) return pt_seterr("%s: token file holds no tokens", d->path);
    d->tok16 = (const uint16_t *)(d->map + HEADER_BYTES);   /* mmap is page-aligned */
    d->n = (size_t)h[2];
    return check_tokens(d, vocab);
}

static int open_text(data_set *d, int vocab) {
    if (vocab < 256)
        return pt_seterr("%s: read as byte-level text (no llm.c magic %d), which needs vocab_size >= "
                         "256, got %d", d->path, DATA_MAGIC, vocab);
    d->tok8 = d->map;
    d->n = d->map_len;
    return 0;
}

int data_open(data_set **out, const char *path, int vocab_size) {
    *out = NULL;
    if (vocab_size <= 0) return pt_seterr("%s: vocab_size must be positive, got %d", path, vocab_size);
    data_set *d = pt_calloc(1, sizeof *d);
    d->path = pt_strdup(path);
    int rc = map_file(d);
    if (rc == 0)
        rc = has_magic(d) || must_be_token_file(d) ? open_token_file(d, vocab_size)
                                                   : open_text(d, vocab_size);
    if (rc != 0) {
        data_close(d);
        return -1;
    }
    *out = d;
    return 0;
}

int data_from_ids(data_set **out, const char *name, const int *ids, size_t n, int vocab_size) {
    *out = NULL;
    if (n == 0) return pt_seterr("%s: no tokens (an empty file?)", name);
    int lim = vocab_size < 65536 ? vocab_size : 65536;
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= lim)
            return pt_seterr("%s: token %d at position %zu is out of the vocabulary (vocab_size %d)", name,
                             ids[i], i, vocab_size);
    data_set *d = pt_calloc(1, sizeof *d);
    d->path = pt_strdup(name);
    d->owned = pt_malloc(n * sizeof *d->owned);
    for (size_t i = 0; i < n; i++) d->owned[i] = (uint16_t)ids[i];
    d->tok16 = d->owned;
    d->n = n;
    *out = d;
    return 0;
}

void data_close(data_set *d) {
    if (!d) return;
    free(d->owned);
    if (d->map) munmap(d->map, d->map_len);
    free(d->path);
    free(d);
}

size_t data_ntokens(const data_set *d) { return d->n; }
int data_is_text(const data_set *d) { return d->tok8 != NULL; }
const char *data_path(const data_set *d) { return d->path; }
int data_token(const data_set *d, size_t i) { return d->tok8 ? d->tok8[i] : d->tok16[i]; }

int data_check_batch(const data_set *d, int B, int T) {
    if (B <= 0 || T <= 0)
        return pt_seterr("%s: batch %d x seq %d: both must be positive", d->path, B, T);
    uint64_t need = (uint64_t)B * (uint64_t)T + 1;
    if (d->n < need)
        return pt_seterr("%s: %zu tokens are too few for batch %d x seq %d (needs at least %llu)",
                         d->path, d->n, B, T, (unsigned long long)need);
    return 0;
}

int64_t data_batches_per_epoch(const data_set *d, int B, int T) {
    if (B <= 0 || T <= 0) return 0;
    uint64_t bt = (uint64_t)B * (uint64_t)T;
    return (int64_t)((d->n + bt - 1) / bt);
}

/* splitmix64's finaliser: a good 64-bit mixer. */
static uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* A keyed bijection of [0, nb): a 4-round balanced Feistel network on [0, 2^(2h)) >= nb,
 * cycle-walked until the value lands in range (at most ~4 rounds expected, since 2^(2h) < 4 nb). */
static uint64_t permute(uint64_t x, uint64_t nb, const uint64_t key[4]) {
    int bits = nb > 1 ? 64 - __builtin_clzll(nb - 1) : 1, h = (bits + 1) / 2;
    uint64_t mask = (1ULL << h) - 1;
    do {
        uint64_t l = x >> h, r = x & mask;
        for (int i = 0; i < 4; i++) {
            uint64_t t = l ^ (mix64(r ^ key[i]) & mask);
            l = r;
            r = t;
        }
        x = (l << h) | r;
    } while (x >= nb);
    return x;
}

int64_t data_batch_index(const data_set *d, int B, int T, uint64_t seed, int64_t step) {
    if (data_check_batch(d, B, T) != 0) return -1;
    if (step < 0) return pt_seterr("%s: step %lld is negative", d->path, (long long)step);
    if (seed == 0) return step;
    uint64_t nb = (uint64_t)data_batches_per_epoch(d, B, T), epoch = (uint64_t)step / nb;
    pt_rng r;
    pt_rng_seed(&r, mix64(seed) + epoch);   /* a fresh order every epoch */
    uint64_t key[4];
    for (int i = 0; i < 4; i++) key[i] = pt_rng_next(&r);
    return (int64_t)permute((uint64_t)step % nb, nb, key);
}

int data_batch(const data_set *d, int64_t k, int B, int T, int *inputs, int *targets) {
    if (data_check_batch(d, B, T) != 0) return -1;
    if (k < 0) return pt_seterr("%s: batch index %lld is negative", d->path, (long long)k);
    size_t n = d->n, bt = (size_t)B * (size_t)T;
    size_t pos = (size_t)(((unsigned __int128)((uint64_t)k % n) * (bt % n)) % n);   /* (k*B*T) mod n */
    int prev = data_token(d, pos);
    for (size_t i = 0; i < bt; i++) {
        if (++pos == n) pos = 0;
        int next = data_token(d, pos);
        inputs[i] = prev;
        targets[i] = next;
        prev = next;
    }
    return 0;
}

/* Tokens as uint16, in chunks; a short write shows up as ferror at commit. */
static void write_token_body(FILE *f, const int *tokens, size_t n) {
    uint16_t buf[4096];
    for (size_t i = 0; i < n; i += 4096) {
        size_t m = n - i < 4096 ? n - i : 4096;
        for (size_t j = 0; j < m; j++) buf[j] = (uint16_t)tokens[i + j];
        fwrite(buf, 2, m, f);
    }
}

int data_write_tokens(const char *path, const int *tokens, size_t n) {
    if (n > INT32_MAX)
        return pt_seterr("%s: %zu tokens do not fit a token file's int32 count", path, n);
    for (size_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] > 65535)
            return pt_seterr("%s: token %d at position %zu does not fit in uint16 (0..65535)",
                             path, tokens[i], i);
    int32_t h[DATA_HEADER_INTS] = {DATA_MAGIC, DATA_VERSION, (int32_t)n};
    io_atomic_file a;
    if (io_atomic_open(&a, path) != 0) return -1;
    fwrite(h, 4, DATA_HEADER_INTS, a.f);
    write_token_body(a.f, tokens, n);
    return io_atomic_commit(&a);
}
