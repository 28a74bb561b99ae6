/* pipetrain tokenize: text files to an llm.c token file with GPT-2's tokenizer (src/tok), one
 * document per file with "<|endoftext|>" between them, on every core; and --decode, a token file
 * back to text on stdout. Flags only; the work is the library's. */
#include "cli/cli.h"
#include "io/data.h"
#include "tok/tok.h"
#include "util/pt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROGRESS_MIN_BYTES (16u << 20)   /* a progress line only for inputs at least this big */

/* Moves the input files (arguments that are neither a flag nor a flag's value) to files[];
 * argv keeps the flags. Returns the count of files. */
static int take_files(int *argc, char **argv, const char **files) {
    static const char *valued[] = {"--tokenizer", "--out", "--decode", "--threads"};
    int n = 0, k = 1;
    for (int i = 1; i < *argc; i++) {
        const char *a = argv[i];
        if (a[0] != '-' || !a[1]) { files[n++] = a; continue; }
        argv[k++] = argv[i];
        for (size_t v = 0; v < sizeof valued / sizeof *valued; v++)
            if (!strcmp(a, valued[v]) && i + 1 < *argc) { argv[k++] = argv[++i]; break; }
    }
    *argc = k;
    return n;
}

static void show_progress(void *user, size_t done, size_t total, double s) {
    if (total < PROGRESS_MIN_BYTES) return;
    fprintf(stderr, "\rtokenize: %.1f of %.1f MB (%.0f%%), %.1f MB/s   %s", done / 1e6, total / 1e6,
            100.0 * done / total, s > 0 ? done / 1e6 / s : 0.0, done == total ? "\n" : "");
}

static int decode_file(const char *path, const char *spec) {
    tok *t = NULL;
    data_set *d = NULL;
    int rc = tok_load(&t, spec);
    if (rc == 0) rc = data_open(&d, path, tok_vocab_size(t));
    if (rc == 0 && data_is_text(d))
        rc = pt_seterr("%s: not an llm.c token file (no magic %d at its start)", path, DATA_MAGIC);
    for (size_t i = 0; rc == 0 && i < data_ntokens(d); i++) {
        size_t len;
        const char *s = tok_token_bytes(t, data_token(d, i), &len);
        if (!s) rc = pt_seterr("%s: token %d at position %zu has no text in %s", path, data_token(d, i), i, tok_source(t));
        else fwrite(s, 1, len, stdout);
    }
    data_close(d);
    tok_free(t);
    return rc;
}

static int encode_files(const char **files, int n, const char *spec, const char *out, int threads) {
    tok *t = NULL;
    int *ids = NULL;
    size_t nids = 0;
    double start = pt_now();
    int rc = tok_load(&t, spec);
    if (rc == 0) rc = tok_encode_docs(t, files, n, threads, show_progress, NULL, &ids, &nids);
    if (rc == 0) rc = data_write_tokens(out, ids, nids);
    if (rc == 0)
        printf("tokenize: %d file%s -> %zu tokens in %.2f s (%s) -> %s\n", n, n == 1 ? "" : "s", nids,
               pt_now() - start, tok_source(t), out);
    free(ids);
    tok_free(t);
    return rc;
}

int cli_tokenize(int argc, char **argv) {
    const char *spec = "gpt2", *out = NULL, *decode = NULL;
    int threads = 0;
    const cli_opt opts[] = {
        {"--tokenizer", OPT_STR, &spec, "gpt2 (GPT-2's files, $" TOK_GPT2_ENV " or build/npm), a folder with "
                                        "encoder.json + vocab.bpe or tokenizer.json, or a tokenizer.json"},
        {"--out", OPT_STR, &out, "the llm.c token file to write (uint16 tokens)"},
        {"--threads", OPT_INT, &threads, "encoding threads (default 0: every core; the ids are the same)"},
        {"--decode", OPT_STR, &decode, "print the text of this token file instead"},
    };
    const char **files = pt_malloc((size_t)argc * sizeof *files);
    int nfiles = take_files(&argc, argv, files);
    int rc = cli_parse(argc, argv, "tokenize", "--tokenizer DIR|gpt2 IN.txt... --out OUT.bin | --decode IN.bin",
                       opts, sizeof opts / sizeof *opts);
    if (rc) { free(files); return rc < 0 ? 2 : 0; }
    if (decode ? nfiles > 0 || out : nfiles == 0 || !out) {
        fprintf(stderr, "pipetrain tokenize: give IN.txt... --out OUT.bin, or --decode IN.bin alone\n");
        free(files);
        return 2;
    }
    rc = decode ? decode_file(decode, spec) : encode_files(files, nfiles, spec, out, threads);
    free(files);
    return rc < 0 ? cli_fail("tokenize") : 0;
}
