/* Encoding: special tokens cut out, the rest cut into pieces (tok_split_next), each piece merged
 * by BPE. A piece seen before comes from the encoder's cache; a new one is merged either by
 * rescanning its pairs for the lowest rank (short pieces: Python's encoder.py exactly, every
 * occurrence of the best pair merged left to right) or with a heap of (rank, position) over a
 * linked list (long pieces: O(n log n)). For merges learned in order (GPT-2's, any BPE trainer's:
 * a merge's rank is above those of the merges that made its halves) both give the same ids.
 * Nothing here allocates per piece: the cache and the scratch only grow. */
#include "tok/tok_impl.h"
#include "tok/tok_unicode.h"
#include "util/pt.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CACHE_SLOTS (1u << 16)     /* per encoder; cleared when 3/4 full */
#define CACHE_PIECE_MAX 64         /* longer pieces are not cached (rarely repeated) */
#define CACHE_KEY_BYTES (1u << 21)
#define CACHE_IDS (1u << 19)
#define HEAP_MIN_DEFAULT 64

typedef struct {
    uint64_t hash;                 /* 0: free */
    uint32_t key, ids;             /* offsets into the byte and id arenas */
    uint16_t klen, nids;
} cache_slot;

struct tok_enc {
    const tok *t;
    cache_slot *slot;
    size_t used;
    uint8_t *keys;
    size_t keys_used;
    int *ids;
    size_t ids_used;
    size_t cap;                    /* scratch room in symbols */
    int *sym, *mid, *prv, *nxt;
    uint32_t *rank;
    uint64_t *heap;
    size_t heap_min;
};

tok_enc *tok_enc_new(const tok *t) {
    tok_enc *e = pt_calloc(1, sizeof *e);
    e->t = t;
    e->slot = pt_calloc(CACHE_SLOTS, sizeof *e->slot);
    e->keys = pt_malloc(CACHE_KEY_BYTES);
    e->ids = pt_malloc(CACHE_IDS * sizeof *e->ids);
    e->heap_min = HEAP_MIN_DEFAULT;
    return e;
}

void tok_enc_free(tok_enc *e) {
    if (!e) return;
    free(e->slot); free(e->keys); free(e->ids);
    free(e->sym); free(e->mid); free(e->prv); free(e->nxt); free(e->rank); free(e->heap);
    free(e);
}

void tok_enc_set_heap_min(tok_enc *e, size_t n) { e->heap_min = n < 2 ? 2 : n; }

static void scratch_reserve(tok_enc *e, size_t n) {
    if (n <= e->cap) return;
    size_t cap = e->cap ? e->cap : 256;
    while (cap < n) cap *= 2;
    free(e->sym); free(e->mid); free(e->prv); free(e->nxt); free(e->rank); free(e->heap);
    e->sym = pt_malloc(cap * sizeof *e->sym);
    e->mid = pt_malloc(cap * sizeof *e->mid);
    e->prv = pt_malloc(cap * sizeof *e->prv);
    e->nxt = pt_malloc(cap * sizeof *e->nxt);
    e->rank = pt_malloc(cap * sizeof *e->rank);
    e->heap = pt_malloc(3 * cap * sizeof *e->heap);
    e->cap = cap;
}

static uint64_t piece_hash(const uint8_t *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 0x100000001b3ull;
    h ^= h >> 32;
    return h ? h : 1;
}

/* The cached ids of piece s[0..n) (its hash h) copied to out: their count, or 0 on a miss. */
static size_t cache_get(const tok_enc *e, uint64_t h, const uint8_t *s, size_t n, int *out) {
    for (size_t i = h & (CACHE_SLOTS - 1);; i = (i + 1) & (CACHE_SLOTS - 1)) {
        const cache_slot *c = &e->slot[i];
        if (!c->hash) return 0;
        if (c->hash == h && c->klen == n && !memcmp(e->keys + c->key, s, n)) {
            memcpy(out, e->ids + c->ids, c->nids * sizeof *out);
            return c->nids;
        }
    }
}

static void cache_put(tok_enc *e, uint64_t h, const uint8_t *s, size_t n, const int *ids, size_t k) {
    if (e->used >= CACHE_SLOTS / 4 * 3 || e->keys_used + n > CACHE_KEY_BYTES || e->ids_used + k > CACHE_IDS) {
        memset(e->slot, 0, CACHE_SLOTS * sizeof *e->slot);
        e->used = e->keys_used = e->ids_used = 0;
    }
    size_t i = h & (CACHE_SLOTS - 1);
    while (e->slot[i].hash) i = (i + 1) & (CACHE_SLOTS - 1);
    memcpy(e->keys + e->keys_used, s, n);
    memcpy(e->ids + e->ids_used, ids, k * sizeof *ids);
    e->slot[i] = (cache_slot){h, (uint32_t)e->keys_used, (uint32_t)e->ids_used, (uint16_t)n, (uint16_t)k};
    e->keys_used += n;
    e->ids_used += k;
    e->used++;
}

/* rank[i], mid[i]: the merge of the pair at i, i + 1 (TOK_NO_RANK when none). */
static inline void pair_at(const tok *t, tok_enc *e, size_t i) {
    const tok_merge *m = tok_merge_find(t, e->sym[i], e->sym[i + 1]);
    e->rank[i] = m->rank;
    e->mid[i] = m->id;
}

/* Short pieces: find the lowest-ranked pair, merge each of its occurrences left to right, repeat. */
static size_t bpe_rescan(tok_enc *e, const uint8_t *s, size_t n, int *out) {
    const tok *t = e->t;
    int *sym = e->sym;
    for (size_t i = 0; i < n; i++) sym[i] = t->byte_id[s[i]];
    for (size_t i = 0; i + 1 < n; i++) pair_at(t, e, i);
    for (;;) {
        uint32_t best = TOK_NO_RANK;
        size_t at = 0;
        for (size_t i = 0; i + 1 < n; i++)
            if (e->rank[i] < best) { best = e->rank[i]; at = i; }
        if (best == TOK_NO_RANK) break;
        int a = sym[at], b = sym[at + 1], m = e->mid[at];
        size_t j = at;
        for (size_t i = at; i < n;) {
            if (i + 1 < n && sym[i] == a && sym[i + 1] == b) { sym[j++] = m; i += 2; }
            else sym[j++] = sym[i++];
        }
        n = j;
        for (size_t i = at ? at - 1 : 0; i + 1 < n; i++) pair_at(t, e, i);
    }
    memcpy(out, sym, n * sizeof *out);
    return n;
}

/* A binary min-heap of rank << 32 | position. */
static void heap_push(uint64_t *h, size_t *n, uint64_t v) {
    size_t i = (*n)++;
    while (i && h[(i - 1) / 2] > v) { h[i] = h[(i - 1) / 2]; i = (i - 1) / 2; }
    h[i] = v;
}

static uint64_t heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], v = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1] < h[c]) c++;
        if (h[c] >= v) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = v;
    return top;
}

static void push_pair(tok_enc *e, size_t *hn, int left) {
    int right = e->nxt[left];
    if (right < 0) return;
    const tok_merge *m = tok_merge_find(e->t, e->sym[left], e->sym[right]);
    if (m->rank != TOK_NO_RANK) heap_push(e->heap, hn, (uint64_t)m->rank << 32 | (uint32_t)left);
}

/* Long pieces: the lowest (rank, position) first; a popped pair that no longer exists is skipped. */
static size_t bpe_heap(tok_enc *e, const uint8_t *s, size_t n, int *out) {
    size_t hn = 0;
    for (size_t i = 0; i < n; i++) {
        e->sym[i] = e->t->byte_id[s[i]];
        e->prv[i] = (int)i - 1;
        e->nxt[i] = i + 1 < n ? (int)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n; i++) push_pair(e, &hn, (int)i);
    while (hn) {
        uint64_t top = heap_pop(e->heap, &hn);
        int i = (int)(uint32_t)top, j = e->nxt[i];
        if (e->sym[i] < 0 || j < 0) continue;
        const tok_merge *m = tok_merge_find(e->t, e->sym[i], e->sym[j]);
        if (m->rank != (uint32_t)(top >> 32)) continue;
        e->sym[i] = m->id;
        e->sym[j] = -1;
        e->nxt[i] = e->nxt[j];
        if (e->nxt[j] >= 0) e->prv[e->nxt[j]] = i;
        if (e->prv[i] >= 0) push_pair(e, &hn, e->prv[i]);
        push_pair(e, &hn, i);
    }
    size_t k = 0;
    for (int i = 0; i >= 0; i = e->nxt[i]) out[k++] = e->sym[i];
    return k;
}

static size_t encode_piece(tok_enc *e, const uint8_t *s, size_t n, int *out) {
    if (n == 1) { out[0] = e->t->byte_id[s[0]]; return 1; }
    uint64_t h = 0;
    if (n <= CACHE_PIECE_MAX) {
        h = piece_hash(s, n);
        size_t k = cache_get(e, h, s, n, out);
        if (k) return k;
    }
    scratch_reserve(e, n);
    size_t k = n >= e->heap_min ? bpe_heap(e, s, n, out) : bpe_rescan(e, s, n, out);
    if (n <= CACHE_PIECE_MAX) cache_put(e, h, s, n, out, k);
    return k;
}

/* Text without special tokens: piece by piece. */
static size_t encode_ordinary(tok_enc *e, const uint8_t *s, size_t n, int *out) {
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        size_t end = tok_split_next(s, n, i);
        k += encode_piece(e, s + i, end - i, out + k);
        i = end;
    }
    return k;
}

/* The first special token at or after s[from] (the longest of those starting there): its
 * position (n when none) and index in *which. next[] caches each special's next occurrence
 * (SIZE_MAX: not looked for yet). */
static size_t next_special(const tok *t, const uint8_t *s, size_t n, size_t from, size_t *next, int *which) {
    size_t best = n;
    *which = -1;
    for (int k = 0; k < t->nspecial; k++) {
        if (next[k] == SIZE_MAX || next[k] < from) {
            const void *p = memmem(s + from, n - from, t->special[k].text, t->special[k].len);
            next[k] = p ? (size_t)((const uint8_t *)p - s) : n;
        }
        if (next[k] < best || (next[k] == best && best < n && t->special[k].len > t->special[*which].len)) {
            best = next[k];
            *which = k;
        }
    }
    return best;
}

size_t tok_encode(tok_enc *e, const char *text, size_t n, int *out) {
    const tok *t = e->t;
    const uint8_t *s = (const uint8_t *)text;
    size_t stack_next[8], *next = t->nspecial <= 8 ? stack_next : pt_malloc((size_t)t->nspecial * sizeof *next);
    for (int k = 0; k < t->nspecial; k++) next[k] = SIZE_MAX;
    size_t k = 0, i = 0;
    while (i < n) {
        int which = -1;
        size_t at = t->nspecial ? next_special(t, s, n, i, next, &which) : n;
        k += encode_ordinary(e, s + i, at - i, out + k);
        if (at >= n) break;
        out[k++] = t->special[which].id;
        i = at + t->special[which].len;
    }
    if (next != stack_next) free(next);
    return k;
}

char *tok_encode_csv(const tok *t, const char *text) {
    if (!text[0] && t->eot >= 0) text = "<|endoftext|>";
    size_t n = strlen(text);
    int *ids = pt_malloc((n + 1) * sizeof *ids);
    tok_enc *e = tok_enc_new(t);
    size_t k = tok_encode(e, text, n, ids);
    tok_enc_free(e);
    char *csv = pt_malloc(k * 12 + 1);
    size_t at = 0;
    csv[0] = 0;
    for (size_t i = 0; i < k; i++) at += (size_t)sprintf(csv + at, "%s%d", i ? "," : "", ids[i]);
    free(ids);
    return csv;
}
