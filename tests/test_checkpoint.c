/* Distributed checkpoints: chunk files written concurrently, re-split loads under other layouts
 * (bitwise), sharded moments, the single-process API, export, crash safety (a forked child
 * aborts mid-save), a save root (its newest complete checkpoint, a crash's leftovers removed,
 * --keep), rank state files and moment shards of 1100 ranks, tensor-parallel
 * chunk files filled in place (bitwise the whole model's; a kill -9 amid the writers), and every
 * kind of corrupt or partial checkpoint giving an error that names the file. */
#include "test.h"
#include "io/safetensors.h"
#include "model/gpt_io.h"
#include "ckpt/checkpoint.h"
#include "ckpt/ckpt_state.h"
#include "train/train.h"
#include "util/pt.h"
#include <cjson/cJSON.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Tiny model: 6 blocks, so 8 layers (embedding, 6 blocks, head). */
static const gpt_config CFG = {.n_layer = 6, .n_head = 2, .n_embd = 16, .vocab_size = 64,
                               .n_positions = 16};
static char root[256];

typedef struct {
    gpt_model m;
    adamw_state opt;
} state;

/* Random params (seeded) and distinct random moments, so a misplaced tensor shows. */
static void state_init(state *s, uint64_t seed) {
    gpt_init(&s->m, &CFG);
    gpt_init_random(&s->m, seed);
    adamw_init(&s->opt, s->m.num_params);
    pt_rng r;
    pt_rng_seed(&r, seed + 1000);
    for (size_t i = 0; i < s->opt.n; i++) {
        s->opt.m[i] = (float)pt_rng_normal(&r);
        s->opt.v[i] = (float)pt_rng_uniform(&r);
    }
    s->opt.t = 7;
}

static void state_zero(state *s) {
    gpt_init(&s->m, &CFG);
    adamw_init(&s->opt, s->m.num_params);
}

static void state_free(state *s) {
    gpt_free(&s->m);
    adamw_free(&s->opt);
}

static int same(const float *a, const float *b, size_t n) { return !memcmp(a, b, n * sizeof *a); }

static int same_state(const state *a, const state *b) {
    size_t n = a->m.num_params;
    return same(a->m.params, b->m.params, n) && same(a->opt.m, b->opt.m, n) &&
           same(a->opt.v, b->opt.v, n);
}

static ckpt_manifest base_manifest(long step) {
    ckpt_manifest man;
    memset(&man, 0, sizeof man);
    man.cfg = CFG;
    man.step = step;
    man.adam_t = 7;
    man.batch = 4;
    man.seq = 8;
    man.shuffle_seed = 18446744073709551615ULL;   /* beyond 2^53: must survive as a string */
    man.init_seed = 1337;
    snprintf(man.data_path, sizeof man.data_path, "tests/fixtures/none.bin");
    return man;
}

typedef struct {
    const char *tmp;
    int chunk, first, end;
    const state *s;
    int rc;
} writer_arg;

static void *writer_main(void *p) {
    writer_arg *a = p;
    a->rc = ckpt_write_chunk(a->tmp, a->chunk, a->first, a->end, &a->s->m, &a->s->opt);
    return NULL;
}

/* Saves s under a K-chunk split (chunk_first[K+1]) the distributed way: one thread per chunk. */
static int save_split(const char *dir, const state *s, int K, const int *chunk_first, long step) {
    char tmp[1100];
    ckpt_manifest man = base_manifest(step);
    if (ckpt_manifest_set_layout(&man, K, 1, K, 1, "1f1b", chunk_first) < 0) return -1;
    if (ckpt_begin(dir, tmp, sizeof tmp) < 0) return -1;
    pthread_t th[CKPT_MAX_CHUNKS];
    writer_arg wa[CKPT_MAX_CHUNKS];
    for (int c = 0; c < K; c++) {
        wa[c] = (writer_arg){tmp, c, chunk_first[c], chunk_first[c + 1], s, 0};
        pthread_create(&th[c], NULL, writer_main, &wa[c]);
    }
    int rc = 0;
    for (int c = 0; c < K; c++) {
        pthread_join(th[c], NULL);
        if (wa[c].rc < 0) rc = -1;
    }
    if (rc < 0) { ckpt_abandon(tmp); return -1; }
    return ckpt_commit(dir, tmp, &man);
}

/* Loads a whole state chunk by chunk under another split (as the ranks of that layout would). */
static int load_split(const char *dir, state *s, int K, const int *chunk_first) {
    ckpt_manifest man;
    if (ckpt_read_manifest(&man, dir) < 0) return -1;
    for (int c = 0; c < K; c++)
        if (ckpt_load_layers(dir, &man, &s->m, &s->opt, chunk_first[c], chunk_first[c + 1]) < 0)
            return -1;
    s->opt.t = man.adam_t;
    return 0;
}

static void path_of(char *out, size_t n, const char *name) { snprintf(out, n, "%s/%s", root, name); }

static void test_resplit(void) {
    char dir[512];
    path_of(dir, sizeof dir, "k4");
    state src, dst;
    state_init(&src, 42);
    int k4[] = {0, 3, 4, 6, 8};   /* embed + 2 blocks | 1 block | 2 blocks | 1 block + head */
    CHECK("save K=4 (chunks written by 4 threads)", save_split(dir, &src, 4, k4, 10) == 0, "%s", pt_err());
    ckpt_manifest man;
    int rc = ckpt_read_manifest(&man, dir);
    CHECK("manifest reads back", rc == 0, "%s", pt_err());
    CHECK("manifest fields", man.step == 10 && man.adam_t == 7 && man.batch == 4 && man.seq == 8 &&
          man.shuffle_seed == 18446744073709551615ULL && man.init_seed == 1337 &&
          !strcmp(man.data_path, "tests/fixtures/none.bin") && man.has_optim,
          "step %ld adam_t %d seed %llu", man.step, man.adam_t, (unsigned long long)man.shuffle_seed);
    CHECK("manifest layout", man.P == 4 && man.D == 1 && man.K == 4 && man.n_pipes == 1 &&
          !strcmp(man.schedule, "1f1b") && man.n_chunks == 4 && man.chunks[1].first_layer == 3 &&
          man.chunks[3].end_layer == 8, "P %d K %d chunks %d", man.P, man.K, man.n_chunks);
    const int *splits[] = {(int[]){0, 4, 8}, (int[]){0, 8}, (int[]){0, 1, 2, 7, 8}};
    const int ks[] = {2, 1, 4};
    const char *names[] = {"load K=4 under K=2: params and moments bitwise",
                           "load K=4 under K=1: params and moments bitwise",
                           "load K=4 under uneven 1,1,5,1 split: params and moments bitwise"};
    for (int i = 0; i < 3; i++) {
        state_zero(&dst);
        rc = load_split(dir, &dst, ks[i], splits[i]);
        CHECK(names[i], rc == 0 && same_state(&src, &dst) && dst.opt.t == 7, "rc %d %s", rc, pt_err());
        state_free(&dst);
    }
    /* A partial load touches only its layers: blocks 2..4 = layers [3, 6). */
    state_zero(&dst);
    rc = ckpt_load_layers(dir, &man, &dst.m, &dst.opt, 3, 6);
    size_t off, cnt, off_end, cnt_end;
    gpt_layer_param_span(&src.m, 3, &off, &cnt);
    gpt_layer_param_span(&src.m, 5, &off_end, &cnt_end);
    size_t span = off_end + cnt_end - off;
    int only = rc == 0 && same(dst.m.params + off, src.m.params + off, span) &&
               same(dst.opt.v + off, src.opt.v + off, span) && dst.m.params[off - 1] == 0 &&
               dst.m.params[off + span] == 0;
    CHECK("load of layers [3,6) fills exactly their spans", only, "rc %d %s", rc, pt_err());
    /* The head holder's tied wte copy, with its moments. */
    size_t nw = (size_t)CFG.vocab_size * CFG.n_embd;
    float *w = pt_falloc(nw), *wm = pt_falloc(nw), *wv = pt_falloc(nw);
    rc = ckpt_load_tensor(dir, &man, "wte.weight", nw, w, wm, wv);
    CHECK("tied wte copy loads by name", rc == 0 && same(w, src.m.w.wte, nw) &&
          same(wm, src.opt.m, nw) && same(wv, src.opt.v, nw), "%s", pt_err());
    rc = ckpt_load_tensor(dir, &man, "h.9.ln_1.weight", 16, w, NULL, NULL);
    CHECK("unknown tensor name is an error", rc < 0 && strstr(pt_err(), "h.9.ln_1.weight"), "%s", pt_err());
    free(w); free(wm); free(wv);
    state_free(&dst);
    /* wte only in chunk 0's file. */
    char path[600];
    snprintf(path, sizeof path, "%s/chunk-3.safetensors", dir);
    st_file *f;
    rc = st_open(&f, path);
    CHECK("head chunk has ln_f and no wte", rc == 0 && st_find(f, "ln_f.weight") &&
          st_find(f, "v/ln_f.bias") && !st_find(f, "wte.weight") && !st_find(f, "h.0.ln_1.weight"),
          "%s", pt_err());
    st_close(f);
    state_free(&src);
}

static int count_tmp_leftovers(const char *prefix) {
    char cmd[700];
    snprintf(cmd, sizeof cmd, "ls -d %s.tmp.* 2>/dev/null | grep -q .", prefix);
    return system(cmd) == 0;
}

static void test_single_process(void) {
    char dir[512], out[600];
    path_of(dir, sizeof dir, "single/ckpt-5");
    state src, dst;
    state_init(&src, 7);
    ckpt_manifest man = base_manifest(5), back;
    int rc = ckpt_save(dir, &src.m, &src.opt, &man, 0);
    CHECK("ckpt_save (creates parent folders)", rc == 0, "%s", pt_err());
    state_zero(&dst);
    rc = ckpt_read_manifest(&back, dir);
    if (rc == 0) rc = ckpt_load_params(&dst.m, dir, &back);
    if (rc == 0) rc = ckpt_load_optim(&dst.opt, &dst.m, dir);
    CHECK("ckpt_save / load_params / load_optim round trip bitwise",
          rc == 0 && same_state(&src, &dst) && back.K == 1 && back.n_chunks == 1, "%s", pt_err());
    rc = ckpt_save(dir, &src.m, &src.opt, &man, 0);
    CHECK("ckpt_save refuses to overwrite", rc < 0 && strstr(pt_err(), "already exists"), "%s", pt_err());
    man.step = 6;
    src.m.params[0] += 1;
    rc = ckpt_save(dir, &src.m, &src.opt, &man, 1);
    if (rc == 0) rc = ckpt_read_manifest(&back, dir);
    if (rc == 0) rc = ckpt_load_params(&dst.m, dir, &back);
    CHECK("ckpt_save overwrite replaces the folder", rc == 0 && back.step == 6 &&
          same(dst.m.params, src.m.params, src.m.num_params), "%s", pt_err());
    CHECK("no temporary folders left", !count_tmp_leftovers(dir), "leftover %s.tmp.*", dir);
    /* Replacing without an atomic exchange (filesystems without RENAME_EXCHANGE). */
    ckpt_test_crash_at("no-exchange", 0);
    man.step = 7;
    rc = ckpt_save(dir, &src.m, &src.opt, &man, 1);
    ckpt_test_crash_at(NULL, 0);
    if (rc == 0) rc = ckpt_read_manifest(&back, dir);
    CHECK("overwrite by moving the old folder aside", rc == 0 && back.step == 7 &&
          !count_tmp_leftovers(dir), "%s", pt_err());
    /* A trailing slash: the temporary folder is a sibling, the result is the same folder. */
    snprintf(out, sizeof out, "%s/", dir);
    man.step = 8;
    rc = ckpt_save(out, &src.m, &src.opt, &man, 1);
    if (rc == 0) rc = ckpt_read_manifest(&back, dir);
    CHECK("dir with a trailing slash", rc == 0 && back.step == 8 && !count_tmp_leftovers(dir), "%s",
          pt_err());
    snprintf(out, sizeof out, "%s/exported.safetensors", root);
    rc = ckpt_export_params(dir, out);
    gpt_model m;
    gpt_init(&m, &CFG);
    if (rc == 0) rc = gpt_load_safetensors(&m, out, NULL);
    CHECK("export to one model.safetensors loads as a plain GPT-2 file",
          rc == 0 && same(m.params, src.m.params, m.num_params), "%s", pt_err());
    gpt_free(&m);
    /* Without optimizer state. */
    snprintf(out, sizeof out, "%s/single/noopt", root);
    rc = ckpt_save(out, &src.m, NULL, &man, 0);
    if (rc == 0) rc = ckpt_read_manifest(&back, out);
    CHECK("save without optimizer state", rc == 0 && !back.has_optim, "%s", pt_err());
    rc = ckpt_load_optim(&dst.opt, &dst.m, out);
    CHECK("loading moments from a checkpoint without them is an error",
          rc < 0 && strstr(pt_err(), "no optimizer state"), "%s", pt_err());
    state_free(&src);
    state_free(&dst);
}

/* Child: save `s` at step under a crash hook; never returns. */
static void crash_child(const char *dir, const state *s, const char *point, int arg, long step) {
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    ckpt_test_crash_at(point, arg);
    int k3[] = {0, 3, 5, 8};
    ckpt_manifest man = base_manifest(step);
    ckpt_manifest_set_layout(&man, 3, 1, 3, 1, "gpipe", k3);
    ckpt_save(dir, &s->m, &s->opt, &man, 1);
    _exit(0);   /* the hook should have aborted before this */
}

/* Runs crash_child in a fork; 1 when it died of SIGABRT. Removes its temporary folder after. */
static int crash_save(const char *dir, const state *s, const char *point, int arg, long step) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) crash_child(dir, s, point, arg, step);
    int status = 0;
    waitpid(pid, &status, 0);
    char tmp[1100];
    ckpt_tmpdir_name(dir, (long)pid, tmp, sizeof tmp);
    ckpt_abandon(tmp);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

/* The checkpoint at dir loads completely and equals s at `step`. */
static int loads_as(const char *dir, const state *s, long step) {
    ckpt_manifest man;
    state got;
    state_zero(&got);
    int ok = ckpt_read_manifest(&man, dir) == 0 && man.step == step &&
             load_split(dir, &got, 1, (int[]){0, 8}) == 0 && same_state(s, &got);
    state_free(&got);
    return ok;
}

static void test_crash(void) {
    char dir[512], name[128];
    path_of(dir, sizeof dir, "crash/ckpt");
    state old, neu;
    state_init(&old, 1);
    state_init(&neu, 2);
    int k2[] = {0, 4, 8};
    int rc = save_split(dir, &old, 2, k2, 1);
    CHECK("crash: previous checkpoint saved", rc == 0, "%s", pt_err());
    const char *points[] = {"chunk", "manifest", "rename", "swap"};
    for (int i = 0; i < 4; i++) {
        int died = crash_save(dir, &neu, points[i], 1, 2);
        snprintf(name, sizeof name, "crash at '%s': child aborted mid-save", points[i]);
        CHECK(name, died, "child did not abort");
        /* Before the swap the old checkpoint stays; after it the new one is complete. */
        int want_new = !strcmp(points[i], "swap");
        snprintf(name, sizeof name, "crash at '%s': %s checkpoint loads intact", points[i],
                 want_new ? "new" : "previous");
        CHECK(name, loads_as(dir, want_new ? &neu : &old, want_new ? 2 : 1), "%s", pt_err());
        if (want_new) save_split(dir, &old, 2, k2, 1);   /* back to the old one */
    }
    path_of(dir, sizeof dir, "crash/fresh");
    int died = crash_save(dir, &neu, "rename", 0, 2);
    struct stat st;
    CHECK("crash before the first rename: no folder under the real name",
          died && stat(dir, &st) != 0, "died %d, exists %d", died, stat(dir, &st) == 0);
    path_of(dir, sizeof dir, "crash");
    CHECK("crash: no temporary folders left after cleanup", !count_tmp_leftovers(dir), "leftovers");
    state_free(&old);
    state_free(&neu);
}

/* Runs steps [from, to] of a fixed token stream, losses into loss[step]. */
static int run_steps(state *s, int from, int to, float *loss) {
    enum { B = 2, T = 8 };
    int inp[B * T], tgt[B * T];
    optim_config oc = optim_config_default();
    oc.lr = 1e-2;
    for (int t = from; t <= to; t++) {
        pt_rng r;
        pt_rng_seed(&r, (uint64_t)t);
        for (int i = 0; i < B * T; i++) {
            inp[i] = (int)(pt_rng_next(&r) % (uint64_t)CFG.vocab_size);
            tgt[i] = (int)(pt_rng_next(&r) % (uint64_t)CFG.vocab_size);
        }
        train_stats st;
        if (train_step(&s->m, &s->opt, &oc, t, inp, tgt, B, T, &st) < 0) return -1;
        loss[t] = st.loss;
    }
    return 0;
}

/* Resume equality: 2 steps, save under K=4, load under K=2, 2 more steps == 4 steps straight. */
static void test_resume(void) {
    char dir[512];
    path_of(dir, sizeof dir, "resume");
    float straight[5], resumed[5];
    state a, b;
    state_init(&a, 5);
    for (size_t i = 0; i < a.opt.n; i++) a.opt.m[i] = a.opt.v[i] = 0;
    a.opt.t = 0;
    int rc = run_steps(&a, 1, 2, straight);
    int k4[] = {0, 2, 4, 6, 8}, k2[] = {0, 5, 8};
    if (rc == 0) rc = save_split(dir, &a, 4, k4, 2);
    if (rc == 0) rc = run_steps(&a, 3, 4, straight);
    state_zero(&b);
    if (rc == 0) rc = load_split(dir, &b, 2, k2);
    if (rc == 0) rc = run_steps(&b, 3, 4, resumed);
    CHECK("resume under another split: losses and params equal the uninterrupted run (bitwise)",
          rc == 0 && straight[3] == resumed[3] && straight[4] == resumed[4] && same_state(&a, &b),
          "rc %d %s; step 4 loss %.9g vs %.9g", rc, pt_err(), straight[4], resumed[4]);
    state_free(&a);
    state_free(&b);
}

/* ---- corruption ---- */

static const state *corrupt_src;

/* A fresh 3-chunk checkpoint named `name` under root; its path in dir. */
static void fresh(char *dir, size_t n, const char *name) {
    int k3[] = {0, 3, 5, 8};
    snprintf(dir, n, "%s/bad/%s", root, name);
    if (save_split(dir, corrupt_src, 3, k3, 3) < 0) printf("# setup failed: %s\n", pt_err());
}

/* The load of dir must fail with an error containing both needles. */
static void expect_load_error(const char *name, const char *dir, const char *n1, const char *n2) {
    ckpt_manifest man;
    state s;
    state_zero(&s);
    int rc = ckpt_read_manifest(&man, dir);
    if (rc == 0) rc = load_split(dir, &s, 1, (int[]){0, 8});
    const char *e = pt_err();
    CHECK(name, rc < 0 && strstr(e, n1) && (!n2 || strstr(e, n2)), "rc %d, error: %s", rc, e);
    state_free(&s);
}

static void damage_file(const char *path, long at, int truncate_to) {
    FILE *f = fopen(path, "r+b");
    if (!f) return;
    if (truncate_to) {
        if (ftruncate(fileno(f), at) != 0) printf("# ftruncate failed\n");
    } else {
        fseek(f, at, SEEK_END);
        int c = fgetc(f);
        fseek(f, at, SEEK_END);
        fputc(c ^ 0x40, f);
    }
    fclose(f);
}

/* Rewrites dir/manifest.json after edit(root) changed it. */
static void edit_manifest(const char *dir, void (*edit)(cJSON *root, const char *arg), const char *arg) {
    char path[600];
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    char *text = pt_read_file(path, NULL);
    cJSON *r = cJSON_Parse(text);
    free(text);
    edit(r, arg);
    text = cJSON_Print(r);
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    free(text);
    cJSON_Delete(r);
}

static void drop_key(cJSON *r, const char *key) {
    if (!strcmp(key, "layout.chunks")) cJSON_DeleteItemFromObject(cJSON_GetObjectItem(r, "layout"), "chunks");
    else if (!strcmp(key, "first_layer"))
        cJSON_DeleteItemFromObject(cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "layout"),
                                                                           "chunks"), 1), "first_layer");
    else cJSON_DeleteItemFromObject(r, key);
}

/* arg "gap", "overlap", "short": break the chunk ranges. */
static void break_ranges(cJSON *r, const char *how) {
    cJSON *chunks = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "layout"), "chunks");
    cJSON *c1 = cJSON_GetArrayItem(chunks, 1), *c2 = cJSON_GetArrayItem(chunks, 2);
    if (!strcmp(how, "gap")) cJSON_SetNumberValue(cJSON_GetObjectItem(c1, "end_layer"), 4);
    if (!strcmp(how, "overlap")) cJSON_SetNumberValue(cJSON_GetObjectItem(c2, "first_layer"), 4);
    if (!strcmp(how, "short")) cJSON_SetNumberValue(cJSON_GetObjectItem(c2, "end_layer"), 7);
}

/* arg "bytes": a number too large for any integer; "first_layer": not an integer. */
static void bad_number(cJSON *r, const char *key) {
    cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "layout"), "chunks"), 0);
    cJSON_SetNumberValue(cJSON_GetObjectItem(c0, key), !strcmp(key, "bytes") ? 1e300 : 0.5);
}

static void test_corrupt_files(void) {
    char dir[512], path[700];
    fresh(dir, sizeof dir, "missing");
    snprintf(path, sizeof path, "%s/chunk-1.safetensors", dir);
    unlink(path);
    expect_load_error("missing chunk file: error names it", dir, "chunk-1.safetensors", NULL);
    fresh(dir, sizeof dir, "flip");
    snprintf(path, sizeof path, "%s/chunk-2.safetensors", dir);
    damage_file(path, -5, 0);
    expect_load_error("flipped byte: checksum error names the file", dir, "chunk-2.safetensors", "checksum");
    fresh(dir, sizeof dir, "trunc");
    snprintf(path, sizeof path, "%s/chunk-0.safetensors", dir);
    damage_file(path, 100, 1);
    expect_load_error("truncated chunk file: error names it", dir, "chunk-0.safetensors", "truncated");
    fresh(dir, sizeof dir, "nomanifest");
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    unlink(path);
    expect_load_error("missing manifest: error names it", dir, "manifest.json", NULL);
    fresh(dir, sizeof dir, "badjson");
    snprintf(path, sizeof path, "%s/manifest.json", dir);
    damage_file(path, 40, 1);
    expect_load_error("malformed manifest: error names it", dir, "manifest.json", NULL);
}

static void test_corrupt_manifest(void) {
    char dir[512], name[128];
    const char *keys[] = {"step", "adam_t", "batch", "shuffle_seed", "init_seed", "data", "optimizer",
                          "config", "layout", "layout.chunks", "first_layer", "format"};
    for (unsigned i = 0; i < sizeof keys / sizeof *keys; i++) {
        fresh(dir, sizeof dir, keys[i]);
        edit_manifest(dir, drop_key, keys[i]);
        snprintf(name, sizeof name, "manifest without \"%s\": error names file and field", keys[i]);
        const char *field = !strcmp(keys[i], "config") ? "config" : keys[i];
        expect_load_error(name, dir, "manifest.json", field);
    }
    const char *nums[] = {"bytes", "first_layer"};
    for (int i = 0; i < 2; i++) {
        snprintf(name, sizeof name, "num-%s", nums[i]);
        fresh(dir, sizeof dir, name);
        edit_manifest(dir, bad_number, nums[i]);
        snprintf(name, sizeof name, "manifest with a bad number in \"%s\": error names the field", nums[i]);
        expect_load_error(name, dir, "manifest.json", nums[i]);
    }
    const char *hows[] = {"gap", "overlap", "short"};
    for (int i = 0; i < 3; i++) {
        fresh(dir, sizeof dir, hows[i]);
        edit_manifest(dir, break_ranges, hows[i]);
        snprintf(name, sizeof name, "chunk ranges with a %s: error names the manifest", hows[i]);
        expect_load_error(name, dir, "manifest.json", "chunk");
    }
}

/* Commit refuses a layout that does not cover the model and a missing chunk file. */
static void test_commit_errors(void) {
    char dir[512], tmp[1100];
    path_of(dir, sizeof dir, "commit/ckpt");
    ckpt_manifest man = base_manifest(1);
    int k2[] = {0, 4, 8}, bad[] = {0, 4, 7};
    ckpt_manifest_set_layout(&man, 2, 1, 2, 1, "gpipe", bad);
    int rc = ckpt_begin(dir, tmp, sizeof tmp);
    if (rc == 0) rc = ckpt_write_chunk(tmp, 0, 0, 4, &corrupt_src->m, &corrupt_src->opt);
    if (rc == 0) rc = ckpt_write_chunk(tmp, 1, 4, 7, &corrupt_src->m, &corrupt_src->opt);
    if (rc == 0) rc = ckpt_commit(dir, tmp, &man);
    struct stat st;
    CHECK("commit: ranges not covering the model are refused", rc < 0 && strstr(pt_err(), "layers") &&
          stat(dir, &st) != 0 && stat(tmp, &st) != 0, "%s", pt_err());
    ckpt_manifest_set_layout(&man, 2, 1, 2, 1, "gpipe", k2);
    rc = ckpt_begin(dir, tmp, sizeof tmp);
    if (rc == 0) rc = ckpt_write_chunk(tmp, 0, 0, 4, &corrupt_src->m, &corrupt_src->opt);
    if (rc == 0) rc = ckpt_commit(dir, tmp, &man);
    CHECK("commit: a missing chunk file is named", rc < 0 && strstr(pt_err(), "chunk-1.safetensors") &&
          stat(dir, &st) != 0, "%s", pt_err());
    rc = ckpt_begin(dir, tmp, sizeof tmp);
    if (rc == 0) rc = ckpt_write_chunk(tmp, 0, 0, 3, &corrupt_src->m, &corrupt_src->opt);
    if (rc == 0) rc = ckpt_write_chunk(tmp, 1, 3, 8, &corrupt_src->m, &corrupt_src->opt);
    if (rc == 0) rc = ckpt_commit(dir, tmp, &man);
    CHECK("commit: a chunk file with other layers than the manifest is named",
          rc < 0 && strstr(pt_err(), "chunk-0.safetensors") && strstr(pt_err(), "layers"), "%s", pt_err());
    man.P = 0;
    rc = ckpt_save(dir, &corrupt_src->m, NULL, &man, 0);
    CHECK("commit: a layout without P is refused", rc < 0 && strstr(pt_err(), "P 0") &&
          stat(dir, &st) != 0, "%s", pt_err());
    man.P = 2;
    path_of(dir, sizeof dir, "commit");
    rc = ckpt_save(dir, &corrupt_src->m, NULL, &man, 1);
    CHECK("commit: refuses to replace a folder that is not a checkpoint",
          rc < 0 && strstr(pt_err(), "not a checkpoint"), "%s", pt_err());
}

/* ---- sharded moments (--zero 1) ----------------------------------------------------------- */

enum { N_SHARD_RANKS = 3 };

/* Saves s with parameters in 2 chunk files and the moments in N_SHARD_RANKS shard files: rank r
 * holds the r-th third of every tensor (so slices cut tensors anywhere). skip_last leaves the
 * last element of h.2.mlp.c_fc.bias out (a hole). */
static int save_sharded(const char *dir, const state *s, int skip_last) {
    char tmp[1100];
    int k2[] = {0, 4, 8};
    ckpt_manifest man = base_manifest(3);
    if (ckpt_manifest_set_layout(&man, 2, 1, 2, 1, "1f1b", k2) < 0 ||
        ckpt_manifest_set_shards(&man, N_SHARD_RANKS) < 0 || ckpt_begin(dir, tmp, sizeof tmp) < 0)
        return -1;
    int rc = ckpt_write_chunk(tmp, 0, 0, 4, &s->m, NULL) | ckpt_write_chunk(tmp, 1, 4, 8, &s->m, NULL);
    ckpt_slice *sl = pt_malloc(sizeof *sl * (size_t)gpt_param_count(&s->m));
    for (int r = 0; r < N_SHARD_RANKS && rc == 0; r++) {
        int n = 0;
        for (int i = 0; i < gpt_param_count(&s->m); i++) {
            const gpt_param_info *pi = gpt_param_info_at(&s->m, i);
            size_t lo = pi->count * (size_t)r / N_SHARD_RANKS, hi = pi->count * (size_t)(r + 1) / N_SHARD_RANKS;
            if (skip_last && r == N_SHARD_RANKS - 1 && !strcmp(pi->name, "h.2.mlp.c_fc.bias")) hi--;
            if (hi > lo)
                sl[n++] = (ckpt_slice){ pi->name, lo, hi - lo, s->opt.m + pi->offset + lo, s->opt.v + pi->offset + lo };
        }
        rc = ckpt_write_shard(tmp, r, sl, n);
    }
    free(sl);
    if (rc < 0) { ckpt_abandon(tmp); return -1; }
    return ckpt_commit(dir, tmp, &man);
}

static void test_shards(void) {
    char dir[512], path[700];
    state src, dst;
    state_init(&src, 5);
    path_of(dir, sizeof dir, "shards/ckpt-3");
    int rc = save_sharded(dir, &src, 0);
    ckpt_manifest man;
    if (rc == 0) rc = ckpt_read_manifest(&man, dir);
    CHECK("sharded moments: saved, the manifest lists the shard files", rc == 0 && man.zero == 1 &&
          man.n_shards == N_SHARD_RANKS && man.has_optim, "%s", pt_err());
    snprintf(path, sizeof path, "%s/chunk-0.safetensors", dir);
    st_file *f;
    rc = st_open(&f, path);
    CHECK("sharded moments: chunk files hold parameters only", rc == 0 && st_find(f, "wte.weight") &&
          !st_find(f, "m/wte.weight"), "%s", pt_err());
    st_close(f);
    state_zero(&dst);
    rc = load_split(dir, &dst, 4, (int[]){0, 2, 4, 6, 8});
    CHECK("sharded moments: load under another split equals the saved state bitwise",
          rc == 0 && same_state(&src, &dst), "%s", pt_err());
    state_free(&dst);
    ckpt_reader *r;
    float sl[5], slm[5];
    rc = ckpt_reader_open(&r, dir, &man);
    if (rc == 0) rc = ckpt_reader_read(r, "h.1.attn.c_attn.weight", 100, 5, sl, slm, NULL);
    int q = gpt_param_find(&src.m, "h.1.attn.c_attn.weight");
    size_t off = gpt_param_info_at(&src.m, q)->offset + 100;
    CHECK("reader: a slice of a tensor and its moments", rc == 0 && same(sl, src.m.params + off, 5) &&
          same(slm, src.opt.m + off, 5), "%s", pt_err());
    ckpt_reader_close(r);
    snprintf(path, sizeof path, "%s/optim-1.safetensors", dir);
    damage_file(path, -5, 0);
    expect_load_error("sharded moments: a flipped byte in a shard file names it", dir, "optim-1.safetensors", "checksum");
    path_of(dir, sizeof dir, "shards/hole");
    rc = save_sharded(dir, &src, 1);
    state_zero(&dst);
    if (rc == 0) rc = ckpt_load_optim(&dst.opt, &dst.m, dir);
    CHECK("sharded moments: a slice missing from every shard is an error naming the tensor",
          rc < 0 && strstr(pt_err(), "h.2.mlp.c_fc.bias") && strstr(pt_err(), "not all"), "%s", pt_err());
    state_free(&dst);
    state_free(&src);
}

/* ---- a save root: newest complete checkpoint, crashed leftovers, --keep -------------------- */

/* A fork that dies (SIGABRT, like a kill) mid-save of dir at `point`, leaving what it wrote. */
static int crash_leave(const char *dir, const state *s, const char *point, long step) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) crash_child(dir, s, point, -1, step);
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT;
}

static int exists(const char *path) { struct stat st; return stat(path, &st) == 0; }

static void test_root(void) {
    char rt[512], dir[600], out[700];
    state s;
    state_init(&s, 3);
    path_of(rt, sizeof rt, "root");
    int k2[] = {0, 4, 8}, rc = 0;
    long steps[] = {2, 10, 5};
    for (int i = 0; i < 3 && rc == 0; i++) {
        snprintf(dir, sizeof dir, "%s/ckpt-%ld", rt, steps[i]);
        rc = save_split(dir, &s, 2, k2, steps[i]);
    }
    snprintf(dir, sizeof dir, "%s/ckpt-12", rt);
    int died = crash_leave(dir, &s, "manifest", 12);   /* a save cut short: ckpt-12.tmp.<pid> */
    rc |= ckpt_resolve(rt, out, sizeof out);
    snprintf(dir, sizeof dir, "%s/ckpt-10", rt);
    CHECK("root: --resume DIR picks the newest complete checkpoint, not a crashed save", rc == 0 && died &&
          !strcmp(out, dir), "rc %d died %d: %s (%s)", rc, died, out, pt_err());
    rc = ckpt_resolve(dir, out, sizeof out);
    CHECK("root: a checkpoint folder resolves to itself", rc == 0 && !strcmp(out, dir), "%s", out);
    path_of(dir, sizeof dir, "shards");
    snprintf(out, sizeof out, "%s/nothing", rt);
    mkdir(out, 0755);
    rc = ckpt_resolve(out, dir, sizeof dir);
    CHECK("root: a folder without checkpoints is an error naming it", rc < 0 &&
          strstr(pt_err(), "no complete checkpoint folder"), "%s", pt_err());
    /* stale temporaries: the crashed one goes; a live process's and a half-replaced one stay */
    snprintf(dir, sizeof dir, "%s/ckpt-20.tmp.%ld", rt, (long)getppid());
    mkdir(dir, 0755);
    snprintf(dir, sizeof dir, "%s/ckpt-30.tmp.999999999", rt);
    mkdir(dir, 0755);
    snprintf(out, sizeof out, "%s.old", dir);
    mkdir(out, 0755);
    int n = ckpt_clean_stale(rt);
    snprintf(dir, sizeof dir, "ls -d %s/ckpt-12.tmp.* 2>/dev/null | grep -q .", rt);
    CHECK("root: a crashed save's temporary folder is removed by the next save", n == 1 && system(dir) != 0,
          "removed %d", n);
    snprintf(dir, sizeof dir, "%s/ckpt-20.tmp.%ld", rt, (long)getppid());
    CHECK("root: a live process's temporary folder and a half-replaced one stay", exists(dir) && exists(out),
          "gone");
    /* --keep 2 after saving ckpt-5 again: it and the newest other (ckpt-10) stay */
    snprintf(dir, sizeof dir, "%s/ckpt-5", rt);
    n = ckpt_prune(rt, 2, dir);
    snprintf(out, sizeof out, "%s/ckpt-2", rt);
    int kept = exists(dir) && !exists(out);
    snprintf(out, sizeof out, "%s/ckpt-10", rt);
    CHECK("keep 2: the checkpoint just saved and the newest other stay, the rest go", n == 1 && kept &&
          exists(out), "removed %d", n);
    n = ckpt_prune(rt, 1, dir);
    CHECK("keep 1: only the checkpoint just saved stays", n == 1 && exists(dir) && !exists(out), "removed %d", n);
    state_free(&s);
}

/* A version 2 manifest (no layout.zero, no layout.shards) still reads. */
static void set_v2(cJSON *r, const char *arg) {
    cJSON_SetNumberValue(cJSON_GetObjectItem(r, "version"), 2);
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(r, "layout"), "zero");
    cJSON_DeleteItemFromObject(cJSON_GetObjectItem(r, "layout"), "shards");
}

static void test_version2(void) {
    char dir[512];
    ckpt_manifest man;
    fresh(dir, sizeof dir, "v2");
    edit_manifest(dir, set_v2, NULL);
    int rc = ckpt_read_manifest(&man, dir);
    CHECK("a version 2 manifest still reads (moments in the chunk files)", rc == 0 && !man.zero &&
          man.has_optim, "%s", pt_err());
}

/* ---- tensor parallelism: chunk files filled in place ------------------------------------ */

#define TP 2   /* CFG's n_head and vocab split over 2 */

/* Every TP rank's shard of s (params, and moments cut into three uneven slices, as --zero 1
 * cuts them) placed into chunk files made by ckpt_chunk_create in tmpdir; *tot sums the writers'
 * stats (max_alloc: the largest of theirs). 0, or -1. */
static int place_tp(const char *tmpdir, const ckpt_manifest *man, const state *s, ckpt_place_stats *tot) {
    int rc = 0;
    memset(tot, 0, sizeof *tot);
    for (int c = 0; c < man->n_chunks && rc == 0; c++)   /* the table of the whole model will do */
        rc = ckpt_chunk_create(tmpdir, c, man->chunks[c].first_layer, man->chunks[c].end_layer, &s->m, 1);
    for (int r = 0; r < TP && rc == 0; r++) {
        gpt_model sm;
        ckpt_placer *pc;
        ckpt_place_stats ps;
        if (gpt_init_layers_tp(&sm, &CFG, 0, CFG.n_layer + 2, r, TP) < 0) return -1;
        float *mm = pt_falloc(sm.n_held), *vv = pt_falloc(sm.n_held);
        ckpt_placer_open(&pc, tmpdir, man, &sm, 1);
        for (int i = 0; i < gpt_param_count(&sm) && rc == 0; i++) {
            const gpt_param_info *pi = gpt_param_info_at(&sm, i), *wi = gpt_param_info_at(&s->m, i);
            gpt_shard_extract(&CFG, pi, r, TP, s->m.params + wi->offset, sm.params + pi->offset);
            gpt_shard_extract(&CFG, pi, r, TP, s->opt.m + wi->offset, mm + pi->offset);
            gpt_shard_extract(&CFG, pi, r, TP, s->opt.v + wi->offset, vv + pi->offset);
            rc = ckpt_placer_put(pc, 0, i, r, TP, 0, pi->count, sm.params + pi->offset);
            size_t cut[4] = {0, pi->count / 3, pi->count / 2 + 1, pi->count};
            for (int k = 0; k < 3 && rc == 0; k++) {
                if (cut[k + 1] <= cut[k]) continue;
                ckpt_slice sl = {pi->name, cut[k], cut[k + 1] - cut[k], mm + pi->offset + cut[k], vv + pi->offset + cut[k]};
                rc = ckpt_placer_put_slice(pc, &sl, r, TP);
            }
        }
        if (ckpt_placer_close(pc, &ps) < 0) rc = -1;
        tot->bytes += ps.bytes;
        tot->writes += ps.writes;
        if (ps.max_alloc > tot->max_alloc) tot->max_alloc = ps.max_alloc;
        free(mm);
        free(vv);
        gpt_free(&sm);
    }
    return rc;
}

/* 1 when files a and b hold the same bytes. */
static int same_file(const char *a, const char *b) {
    size_t na = 0, nb = 0;
    char *x = pt_read_file(a, &na), *y = pt_read_file(b, &nb);
    int ok = x && y && na == nb && !memcmp(x, y, na);
    free(x);
    free(y);
    return ok;
}

/* Bytes of a chunk file's data section (size less the 8-byte length and the header). */
static size_t data_bytes(const char *path) {
    size_t n = 0;
    char *x = pt_read_file(path, &n);
    uint64_t h = 0;
    if (x && n >= 8) memcpy(&h, x, 8);
    free(x);
    return n >= 8 + h ? n - 8 - (size_t)h : 0;
}

static void test_tp_place(void) {
    char whole[512], tmp[1100], a[1200], b[1200];
    state s;
    state_init(&s, 7);
    int k2[] = {0, 4, 8};
    ckpt_manifest man = base_manifest(5);
    ckpt_manifest_set_layout(&man, 2, 1, 2, 1, "1f1b", k2);
    path_of(whole, sizeof whole, "tp/whole");
    int rc = ckpt_save(whole, &s.m, &s.opt, &man, 0);
    CHECK("tp place: the whole model's checkpoint", rc == 0, "%s", pt_err());
    path_of(tmp, sizeof tmp, "tp/placed");
    mkdir(tmp, 0755);
    ckpt_place_stats st;
    rc = place_tp(tmp, &man, &s, &st);
    CHECK("tp place: 2 TP ranks place their shards", rc == 0, "%s", pt_err());
    int same = 1;
    size_t data = 0, smallest = (size_t)-1;
    for (int c = 0; c < 2; c++) {
        snprintf(a, sizeof a, "%s/chunk-%d.safetensors", whole, c);
        snprintf(b, sizeof b, "%s/chunk-%d.safetensors", tmp, c);
        same &= same_file(a, b);
        data += data_bytes(a);
        if (data_bytes(a) < smallest) smallest = data_bytes(a);
    }
    CHECK("tp place: chunk files bitwise those written from the whole model", same, "files differ");
    CHECK("tp place: every data byte written once (no overlap, no gap)", st.bytes == data,
          "%zu bytes written, the files hold %zu", st.bytes, data);
    CHECK("tp place: no writer allocates more than a header (not a tensor, not a chunk)",
          st.max_alloc < smallest / 8, "largest buffer %zu bytes, smallest chunk data %zu", st.max_alloc, smallest);
    ckpt_abandon(tmp);
    state_free(&s);
}

/* kill -9 while TP ranks fill the chunk files: no folder under the real name, the folder's
 * newest complete checkpoint is the previous one, and the next save removes the leftovers. */
static void test_tp_kill(void) {
    char dir[600], rootdir[512], got[1200];
    state old, neu;
    state_init(&old, 11);
    state_init(&neu, 12);
    int k2[] = {0, 4, 8};
    ckpt_manifest man = base_manifest(1);
    ckpt_manifest_set_layout(&man, 2, 1, 2, 1, "1f1b", k2);
    path_of(rootdir, sizeof rootdir, "tpkill");
    snprintf(dir, sizeof dir, "%s/ckpt-1", rootdir);
    CHECK("tp kill: previous checkpoint saved", ckpt_save(dir, &old.m, &old.opt, &man, 0) == 0, "%s", pt_err());
    snprintf(dir, sizeof dir, "%s/ckpt-2", rootdir);
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        char tmp[1100];
        ckpt_manifest m2 = man;
        m2.step = 2;
        ckpt_place_stats st;
        ckpt_test_crash_at("place", 1);
        if (ckpt_begin(dir, tmp, sizeof tmp) == 0) place_tp(tmp, &m2, &neu, &st);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK("tp kill: the child was killed (SIGKILL) mid-save", WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
          "status %d", status);
    struct stat sb;
    CHECK("tp kill: no checkpoint under the real name", stat(dir, &sb) != 0, "%s exists", dir);
    int rc = ckpt_resolve(rootdir, got, sizeof got);
    CHECK("tp kill: the folder's newest complete checkpoint is the previous one",
          rc == 0 && strstr(got, "ckpt-1") && loads_as(got, &old, 1), "%s", rc == 0 ? got : pt_err());
    CHECK("tp kill: the cut folder is removed by the next save", ckpt_clean_stale(rootdir) == 1, "not removed");
    state_free(&old);
    state_free(&neu);
}

/* A checkpoint with 1100 ranks' own state files (more than CKPT_MAX_SHARDS: the manifest holds
 * no per-rank table for them): saved, read back with every file checked, a rank's state loads,
 * a flipped byte in one of the last files is named. */
static void test_many_states(void) {
    enum { R = 1100 };
    char dir[512], tmp[1100], path[1300];
    state src;
    state_init(&src, 11);
    path_of(dir, sizeof dir, "states/ckpt-2");
    ckpt_manifest man = base_manifest(2);
    int rc = ckpt_manifest_set_layout(&man, 1, 1, 1, 1, "1f1b", (int[]){0, 8}) < 0 ||
             ckpt_manifest_set_states(&man, R) < 0 || ckpt_begin(dir, tmp, sizeof tmp) < 0 ||
             ckpt_write_chunk(tmp, 0, 0, 8, &src.m, &src.opt) < 0 ? -1 : 0;
    float x[4];
    for (int r = 0; rc == 0 && r < R; r++) {
        ckpt_state st;
        memset(&st, 0, sizeof st);
        snprintf(st.sig, sizeof st.sig, "many");
        st.step = 2;
        for (int i = 0; i < 4; i++) x[i] = (float)(r * 10 + i);
        ckpt_state_add(&st, "x", x, 4, 0);
        rc = ckpt_state_write(tmp, r, &st);
    }
    if (rc == 0) rc = ckpt_commit(dir, tmp, &man);
    ckpt_manifest back;
    if (rc == 0) rc = ckpt_read_manifest(&back, dir);
    ckpt_state st;
    char why[200] = "";
    memset(&st, 0, sizeof st);
    snprintf(st.sig, sizeof st.sig, "many");
    ckpt_state_add(&st, "x", x, 4, 0);
    int got = rc == 0 ? ckpt_state_read(dir, R - 1, &st, why, sizeof why) : -1;
    CHECK("1100 ranks' state files: saved, every one checked when read back, one loads",
          rc == 0 && back.n_states == R && got == 1 && x[0] == (float)((R - 1) * 10) &&
          x[3] == (float)((R - 1) * 10 + 3),
          "rc %d states %d read %d: %s %s", rc, rc == 0 ? back.n_states : -1, got, pt_err(), why);
    ckpt_state_path(path, sizeof path, dir, 1050);
    damage_file(path, -5, 0);
    rc = ckpt_read_manifest(&back, dir);
    CHECK("1100 ranks' state files: a flipped byte in rank 1050's is named", rc < 0 &&
          strstr(pt_err(), "state-1050.safetensors") && strstr(pt_err(), "checksum"), "%s", pt_err());
    state_free(&src);
}

/* --zero 1 with 1100 ranks' moment shards (the manifest holds no per-rank table for them, as
 * for the state files; the format unchanged): rank r holds the flat moments [N r / R, N (r+1) / R)
 * cut at the tensors' edges; saved, read back with every shard checked, the moments load
 * bitwise under another split; a flipped byte in rank 1050's shard is named. */
static void test_many_shards(void) {
    enum { R = 1100 };
    char dir[512], tmp[1100], path[1300];
    state src, dst;
    state_init(&src, 13);
    path_of(dir, sizeof dir, "shards/many");
    ckpt_manifest man = base_manifest(3);
    int rc = ckpt_manifest_set_layout(&man, 2, 1, 2, 1, "1f1b", (int[]){0, 4, 8}) < 0 ||
             ckpt_manifest_set_shards(&man, R) < 0 || ckpt_begin(dir, tmp, sizeof tmp) < 0 ||
             (ckpt_write_chunk(tmp, 0, 0, 4, &src.m, NULL) | ckpt_write_chunk(tmp, 1, 4, 8, &src.m, NULL)) < 0 ? -1 : 0;
    ckpt_slice *sl = pt_malloc(sizeof *sl * (size_t)gpt_param_count(&src.m));
    size_t N = src.m.num_params;
    for (int r = 0; r < R && rc == 0; r++) {
        size_t a = N * (size_t)r / R, b = N * (size_t)(r + 1) / R;
        int n = 0;
        for (int i = 0; i < gpt_param_count(&src.m); i++) {
            const gpt_param_info *pi = gpt_param_info_at(&src.m, i);
            size_t lo = a > pi->offset ? a - pi->offset : 0, hi = b - pi->offset < pi->count ? b - pi->offset : pi->count;
            if (b > pi->offset && a < pi->offset + pi->count && hi > lo)
                sl[n++] = (ckpt_slice){ pi->name, lo, hi - lo, src.opt.m + pi->offset + lo, src.opt.v + pi->offset + lo };
        }
        rc = ckpt_write_shard(tmp, r, sl, n);
    }
    free(sl);
    if (rc == 0) rc = ckpt_commit(dir, tmp, &man);
    else ckpt_abandon(tmp);
    ckpt_manifest back;
    if (rc == 0) rc = ckpt_read_manifest(&back, dir);
    state_zero(&dst);
    if (rc == 0) rc = load_split(dir, &dst, 4, (int[]){0, 2, 4, 6, 8});
    CHECK("1100 ranks' moment shards (--zero 1): saved, every one checked when read back, loaded bitwise",
          rc == 0 && back.n_shards == R && back.zero == 1 && same_state(&src, &dst), "rc %d: %s", rc, pt_err());
    snprintf(path, sizeof path, "%s/optim-1050.safetensors", dir);
    damage_file(path, -5, 0);
    rc = ckpt_read_manifest(&back, dir);
    CHECK("1100 ranks' moment shards: a flipped byte in rank 1050's is named", rc < 0 &&
          strstr(pt_err(), "optim-1050.safetensors") && strstr(pt_err(), "checksum"), "%s", pt_err());
    state_free(&dst);
    state_free(&src);
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/pt_ckpt_XXXXXX");
    if (!mkdtemp(root)) { printf("FAIL mkdtemp\n"); return 1; }
    test_resplit();
    test_single_process();
    test_crash();
    test_resume();
    state src;
    state_init(&src, 99);
    corrupt_src = &src;
    test_corrupt_files();
    test_corrupt_manifest();
    test_commit_errors();
    test_version2();
    test_shards();
    test_many_states();
    test_many_shards();
    test_root();
    test_tp_place();
    test_tp_kill();
    state_free(&src);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0) printf("# could not remove %s\n", root);
    TEST_DONE();
}
