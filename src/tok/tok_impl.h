/* Inside the tokenizer: the loaded vocabulary and merges (tok_load.c fills them, tok_bpe.c reads
 * them). Not a public header: other modules include tok/tok.h. */
#ifndef PT_TOK_TOK_IMPL_H
#define PT_TOK_TOK_IMPL_H
#include "tok/tok.h"
#include <stdint.h>

#define TOK_NO_RANK UINT32_MAX

/* One merge: the pair (left id, right id) packed in key, its rank, the id it makes. */
typedef struct {
    uint64_t key;       /* left << 32 | right; TOK_EMPTY_KEY when the slot is free */
    uint32_t rank;
    int32_t id;
} tok_merge;
#define TOK_EMPTY_KEY UINT64_MAX

typedef struct {
    char *text;         /* its bytes (NUL-terminated) */
    size_t len;
    int id;
} tok_special;

struct tok {
    char *source;       /* where it was read from */
    int nvocab;         /* largest id + 1 */
    char *blob;         /* every token's bytes, back to back */
    uint32_t *off, *len;/* [nvocab] token id's bytes: blob + off[id], len[id]; len UINT32_MAX: none */
    int byte_id[256];   /* the id of each single byte */
    tok_merge *merges;  /* open addressing, mmask + 1 slots (a power of two) */
    size_t mmask;
    tok_special *special;   /* cut out of text before the rule: "<|endoftext|>" */
    int nspecial;
    int eot;            /* id of "<|endoftext|>", or -1 */
};

/* The slot of pair (a, b): its merge, or a free slot (key TOK_EMPTY_KEY). */
static inline const tok_merge *tok_merge_find(const tok *t, int a, int b) {
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    size_t i = (size_t)((key * 0x9E3779B97F4A7C15ull) >> 40) & t->mmask;
    while (t->merges[i].key != key && t->merges[i].key != TOK_EMPTY_KEY) i = (i + 1) & t->mmask;
    return &t->merges[i];
}

/* Finds GPT-2's files for spec "gpt2": a folder holding encoder.json and vocab.bpe, written into
 * dir (cap bytes). -1 with an error listing every place looked. */
int tok_find_gpt2(char *dir, size_t cap);

#endif
