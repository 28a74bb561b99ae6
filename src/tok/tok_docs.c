/* Encoding whole files on every core: each file is cut into chunks at places where GPT-2's rule
 * always ends a piece, the chunks are encoded by a pool of threads (each with its own tok_enc) in
 * any order, and their ids joined in file order with "<|endoftext|>" between files, so the result
 * is the same for any number of threads. Also data sets tokenised on the fly (tok_data_open). */
#include "tok/tok_impl.h"
#include "io/io.h"
#include "util/pt.h"
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define CHUNK_BYTES (1u << 20)     /* about this much text per chunk */
#define PROGRESS_S 0.5

typedef struct {
    const uint8_t *s;
    size_t n;
    int *ids;
    size_t nids;
} chunk;

typedef struct {
    const tok *t;
    chunk *ch;
    size_t nch;
    atomic_size_t next, bytes_done;
    atomic_int running;
} job;

static int is_alpha(uint8_t c) { return (c | 0x20) >= 'a' && (c | 0x20) <= 'z'; }

static int is_graph(uint8_t c) { return c > ' ' && c < 0x7f; }

/* A cut at b is safe when the pieces on both sides are the same whether or not the text is cut
 * there: at a newline alone between two printable ASCII characters ("x\ny": the newline is a
 * piece of its own either way; after two white-space characters it would not be, since a run
 * that ends the text is one piece), or at a space between two ASCII letters (a letter run ends,
 * " y..." starts). Neither splits a UTF-8 character or "<|endoftext|>". The first safe
 * b >= from, or n. */
static size_t safe_cut(const uint8_t *s, size_t n, size_t from) {
    for (size_t b = from < 2 ? 2 : from; b + 1 < n; b++) {
        if (s[b - 1] == '\n' && is_graph(s[b]) && is_graph(s[b - 2])) return b;
        if (s[b] == ' ' && is_alpha(s[b - 1]) && is_alpha(s[b + 1])) return b;
    }
    return n;
}

static void add_chunks(chunk **ch, size_t *nch, size_t *cap, const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;) {
        size_t end = n - i <= CHUNK_BYTES ? n : safe_cut(s, n, i + CHUNK_BYTES);
        if (*nch == *cap) {
            *cap = *cap ? *cap * 2 : 64;
            *ch = realloc(*ch, *cap * sizeof **ch);
            if (!*ch) { fprintf(stderr, "out of memory\n"); abort(); }
        }
        (*ch)[(*nch)++] = (chunk){s + i, end - i, NULL, 0};
        i = end;
    }
}

static void *worker(void *arg) {
    job *j = arg;
    tok_enc *e = tok_enc_new(j->t);
    for (size_t k; (k = atomic_fetch_add(&j->next, 1)) < j->nch;) {
        chunk *c = &j->ch[k];
        c->ids = pt_malloc(c->n * sizeof *c->ids);
        c->nids = tok_encode(e, (const char *)c->s, c->n, c->ids);
        int *shrunk = realloc(c->ids, (c->nids ? c->nids : 1) * sizeof *c->ids);
        if (shrunk) c->ids = shrunk;
        atomic_fetch_add(&j->bytes_done, c->n);
    }
    tok_enc_free(e);
    atomic_fetch_sub(&j->running, 1);
    return NULL;
}

/* Runs the pool over j's chunks, reporting progress (when asked) from this thread. */
static void run_pool(job *j, int threads, size_t total, tok_progress_fn progress, void *user) {
    if (threads <= 0) threads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (threads < 1) threads = 1;
    if ((size_t)threads > j->nch) threads = j->nch ? (int)j->nch : 1;
    pthread_t *th = pt_malloc((size_t)threads * sizeof *th);
    atomic_store(&j->running, threads);
    for (int i = 0; i < threads; i++) pthread_create(&th[i], NULL, worker, j);
    double start = pt_now(), last = start;
    while (progress && atomic_load(&j->running) > 0) {
        usleep(20000);
        if (pt_now() - last >= PROGRESS_S) {
            last = pt_now();
            progress(user, atomic_load(&j->bytes_done), total, last - start);
        }
    }
    for (int i = 0; i < threads; i++) pthread_join(th[i], NULL);
    if (progress) progress(user, total, total, pt_now() - start);
    free(th);
}

/* The chunks' ids in order, "<|endoftext|>" after each file's last chunk but the last file's. */
static int *join_ids(const job *j, const size_t *file_end, int nfiles, int eot, size_t *n) {
    size_t total = (size_t)(nfiles - 1);
    for (size_t k = 0; k < j->nch; k++) total += j->ch[k].nids;
    int *out = pt_malloc((total ? total : 1) * sizeof *out);
    size_t at = 0, k = 0;
    for (int f = 0; f < nfiles; f++) {
        for (; k < file_end[f]; k++) {
            memcpy(out + at, j->ch[k].ids, j->ch[k].nids * sizeof *out);
            at += j->ch[k].nids;
        }
        if (f + 1 < nfiles) out[at++] = eot;
    }
    *n = at;
    return out;
}

int tok_encode_docs(const tok *t, const char *const *paths, int npaths, int threads,
                    tok_progress_fn progress, void *user, int **out, size_t *n) {
    *out = NULL;
    *n = 0;
    if (npaths > 1 && t->eot < 0)
        return pt_seterr("%s has no <|endoftext|> token to put between documents; give one file", t->source);
    unsigned char **map = pt_calloc((size_t)npaths, sizeof *map);
    size_t *len = pt_calloc((size_t)npaths, sizeof *len), *file_end = pt_calloc((size_t)npaths, sizeof *file_end);
    job j = {.t = t};
    size_t cap = 0, total = 0;
    int rc = 0;
    for (int f = 0; f < npaths && rc == 0; f++) {
        rc = io_map_file(paths[f], &map[f], &len[f]);
        if (rc == 0 && map[f]) madvise(map[f], len[f], MADV_SEQUENTIAL);
        add_chunks(&j.ch, &j.nch, &cap, map[f], len[f]);
        file_end[f] = j.nch;
        total += len[f];
    }
    if (rc == 0) {
        run_pool(&j, threads, total, progress, user);
        *out = join_ids(&j, file_end, npaths, t->eot, n);
    }
    for (size_t k = 0; k < j.nch; k++) free(j.ch[k].ids);
    for (int f = 0; f < npaths; f++)
        if (map[f]) munmap(map[f], len[f]);
    free(j.ch); free(map); free(len); free(file_end);
    return rc;
}

int tok_data_open(data_set **out, const char *path, const char *spec, int vocab_size) {
    if (!spec) return data_open(out, path, vocab_size);
    *out = NULL;
    tok *t = NULL;
    if (tok_load(&t, spec) < 0) return -1;
    int rc = 0, *ids = NULL;
    size_t n = 0;
    if (tok_vocab_size(t) > vocab_size)
        rc = pt_seterr("--tokenizer %s has %d tokens, more than the model's vocab_size %d", spec,
                       tok_vocab_size(t), vocab_size);
    if (rc == 0) rc = tok_encode_docs(t, &path, 1, 0, NULL, NULL, &ids, &n);
    if (rc == 0) rc = data_from_ids(out, path, ids, n, vocab_size);
    free(ids);
    tok_free(t);
    return rc;
}
