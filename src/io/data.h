/* Token data for training: llm.c token files (256 x int32 header: magic 20240520, version 1,
 * token count; then uint16 tokens) or any other file as byte-level text (tokens = bytes, vocab
 * 256); batch extraction with wrap-around and an optional seeded batch order. Not a tokenizer.
 *
 * Batches: batch k takes the B*T+1 tokens starting at (k*B*T) mod n, wrapping past the end;
 * inputs are the first B*T, targets the last B*T, both (B, T) row-major int arrays.
 * Checkpoints: the data position is the step counter. data_batch_index(d, B, T, seed, step) is a
 * pure function, so (seed, step) with the same file, B and T resumes exactly. */
#ifndef PT_IO_DATA_H
#define PT_IO_DATA_H
#include <stddef.h>
#include <stdint.h>

#define DATA_MAGIC 20240520
#define DATA_VERSION 1
#define DATA_HEADER_INTS 256

typedef struct data_set data_set;

/* Opens path as a token file (if its first int32 is DATA_MAGIC) or as byte-level text (anything
 * else; needs vocab_size >= 256). A file that cannot be text (name ending in ".bin", or a NUL
 * byte in its first 1024 bytes) but lacks the magic is a "bad magic" error, not text. Checks the header (magic, version, count against the file size)
 * and every token < vocab_size. The file is mmap'd and stays open until data_close. Errors name
 * the file and what is wrong: "x.bin: token 70000 at position 1234 is out of the vocabulary
 * (vocab_size 50257)". An empty file is an error. */
int data_open(data_set **out, const char *path, int vocab_size);
/* A data set over ids already in memory (a tokenizer's output for the text file `name`, which
 * errors name): the ids are copied as uint16; each must be in 0..min(vocab_size, 65536)-1. An
 * empty list is an error, as an empty file is. */
int data_from_ids(data_set **out, const char *name, const int *ids, size_t n, int vocab_size);
/* Unmaps and frees; NULL is fine. */
void data_close(data_set *d);

/* Number of tokens. */
size_t data_ntokens(const data_set *d);
/* 1 when the file was read as byte-level text, 0 for a token file. */
int data_is_text(const data_set *d);
/* Token i (0 <= i < data_ntokens). */
int data_token(const data_set *d, size_t i);
/* The path given to data_open. */
const char *data_path(const data_set *d);

/* Checks there are at least B*T+1 tokens and B, T positive; else -1 with an error naming the
 * file and the numbers. */
int data_check_batch(const data_set *d, int B, int T);
/* Number of distinct batch starts per epoch: ceil(n / (B*T)). */
int64_t data_batches_per_epoch(const data_set *d, int B, int T);
/* The batch index to train on at `step` (from 0). seed 0: sequential (returns step). Otherwise
 * each epoch (data_batches_per_epoch steps) visits every batch index 0..nb-1 once, in an order
 * that is a seeded permutation, different per epoch. Pure; O(1) time and memory. Returns -1
 * (error set) when the batch does not fit (see data_check_batch) or step < 0. */
int64_t data_batch_index(const data_set *d, int B, int T, uint64_t seed, int64_t step);
/* Fills inputs and targets (B, T) with batch k (k >= 0). -1 with an error when the data are too
 * few (data_check_batch) or k < 0. */
int data_batch(const data_set *d, int64_t k, int B, int T, int *inputs, int *targets);

/* Writes an llm.c token file (version 1) atomically (temporary name, fsync, rename). Every token
 * must be in 0..65535 and n <= INT32_MAX; else -1 with an error naming the file and position. */
int data_write_tokens(const char *path, const int *tokens, size_t n);

#endif
