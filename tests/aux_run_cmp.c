/* Helper for tests/test_run_cli.sh and test_run_mpi.sh: compares two safetensors files tensor by
 * tensor (same names, same sizes). Not a test by itself; it prints one line and sets the exit.
 *
 * usage: aux_run_cmp [--prefix P] A.safetensors B.safetensors TOL [EXACT_EXCEPT...]
 *   TOL: largest whole-tensor normalised error allowed (max|a-b| / max|b|); 0 means bitwise.
 *   With names after TOL: every tensor must be bitwise equal except those named, which get TOL.
 *   --prefix P: every tensor of A (but "loss") against B's tensor P + its name without
 *   "transformer." (a PyTorch fixture's "grad/..." tensors), instead of every tensor of B against A's of the same name.
 * Prints "max err E (tensor NAME)" and exits 0 when within, 1 when not, 2 on a read error. */
#include "io/safetensors.h"
#include "util/pt.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double tensor_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > num) num = d;
        if (fabs((double)b[i]) > den) den = fabs((double)b[i]);
    }
    return den > 0 ? num / den : num;
}

static int excepted(const char *name, int argc, char **argv) {
    for (int i = 4; i < argc; i++)
        if (!strcmp(name, argv[i])) return 1;
    return 0;
}

/* --prefix P: A's tensors (but "loss") against B's P + name, within tol. */
static int cmp_prefixed(const char *pre, const char *pa, const char *pb, double tol) {
    st_file *fa, *fb;
    if (st_open(&fa, pa) < 0 || st_open(&fb, pb) < 0) { fprintf(stderr, "%s\n", pt_err()); return 2; }
    double worst = 0;
    char worst_name[160] = "", key[160];
    int bad = 0, n = 0;
    for (int i = 0; i < st_count(fa); i++) {
        const st_tensor *ta = st_at(fa, i);
        if (!strcmp(ta->name, "loss")) continue;
        const char *name = strncmp(ta->name, "transformer.", 12) ? ta->name : ta->name + 12;
        snprintf(key, sizeof key, "%s%s", pre, name);
        const st_tensor *tb = st_find(fb, key);
        if (!tb || ta->numel != tb->numel) { printf("tensor %s missing or resized\n", key); return 1; }
        float *a = pt_malloc(ta->numel * sizeof(float)), *b = pt_malloc(tb->numel * sizeof(float));
        st_tensor_f32(fa, ta, a);
        st_tensor_f32(fb, tb, b);
        double e = tensor_err(a, b, tb->numel);
        if (e > worst) { worst = e; snprintf(worst_name, sizeof worst_name, "%s", key); }
        bad |= e > tol;
        n++;
        free(a);
        free(b);
    }
    printf("max err %.3g (tensor %s) over %d tensors%s\n", worst, worst_name, n, bad ? ": NOT within" : "");
    st_close(fa);
    st_close(fb);
    return bad || n == 0;
}

int main(int argc, char **argv) {
    if (argc >= 6 && !strcmp(argv[1], "--prefix")) return cmp_prefixed(argv[2], argv[3], argv[4], atof(argv[5]));
    if (argc < 4) { fprintf(stderr, "usage: aux_run_cmp [--prefix P] A B TOL [EXACT_EXCEPT...]\n"); return 2; }
    st_file *fa, *fb;
    if (st_open(&fa, argv[1]) < 0 || st_open(&fb, argv[2]) < 0) { fprintf(stderr, "%s\n", pt_err()); return 2; }
    double tol = atof(argv[3]), worst = 0;
    int bad = 0;
    const char *worst_name = "";
    for (int i = 0; i < st_count(fb); i++) {
        const st_tensor *tb = st_at(fb, i), *ta = st_find(fa, tb->name);
        if (!ta || ta->numel != tb->numel) { printf("tensor %s missing or resized\n", tb->name); return 1; }
        float *a = pt_malloc(ta->numel * sizeof(float)), *b = pt_malloc(tb->numel * sizeof(float));
        st_tensor_f32(fa, ta, a);
        st_tensor_f32(fb, tb, b);
        double e = tensor_err(a, b, tb->numel);
        int exact = argc > 4 && !excepted(tb->name, argc, argv);
        if ((exact || tol == 0) && memcmp(a, b, tb->numel * sizeof(float))) { bad = 1; worst_name = tb->name; }
        if (e > worst) { worst = e; if (!bad) worst_name = tb->name; }
        if (e > tol) bad = 1;
        free(a);
        free(b);
    }
    printf("max err %.3g (tensor %s)%s\n", worst, worst_name, bad ? ": NOT within" : "");
    st_close(fa);
    st_close(fb);
    return bad;
}
