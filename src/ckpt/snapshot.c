/* Snapshots (snapshot.h): the per-rank writer. The compute thread copies its chunks into buffers
 * at a step boundary (ckpt_snap_stage) and hands them over (ckpt_snap_commit); a helper thread
 * writes them as a generation folder of chunk files (ckpt_write_chunk, the checkpoint's format)
 * with a snap.json, renames it into place and drops old generations. A boundary that finds the
 * writer still busy waits for it (ckpt_snap_ready), so every commit finds the writer idle. A
 * writer error is said once, at the next boundary, and returned by ckpt_snap_close. Not here: the
 * restore (snapshot_restore.c). */
#include "ckpt/snapshot.h"
#include "ckpt/ckpt_int.h"
#include "ckpt/snapshot_int.h"
#include "io/io.h"
#include "model/config.h"
#include "util/killat.h"
#include "util/pt.h"
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define SNAP_WRITER_NICE 10   /* the writer thread's nice value, above the compute threads' */

/* One staged chunk: its own copy of the parameters, moments and the model's tables. */
typedef struct {
    int chunk, first, end;
    gpt_model shadow;           /* the live model's tables over the copies below */
    adamw_state opt;            /* m, v: the copies */
    size_t cap;                 /* floats allocated in each of params, m, v */
    int info_cap, off_cap;
} snap_piece;

struct ckpt_snap {
    char dir[1024];             /* root/rank-<w> */
    int rank, keep, hb_fd;
    /* two sets of buffers: the compute thread stages into set `stage`, the writer writes set
     * 1 - stage; ckpt_snap_ready waits for the writer, so a commit always finds it idle */
    snap_piece pc[2][CKPT_SNAP_PIECES];
    int n_pc[2];
    ckpt_manifest man[2];
    int stage;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int busy, stop;
    char err[512];              /* the writer's first error ("" none) */
    int err_said;               /* err already printed at a step boundary */
    ckpt_snap_stats st;
};

static void *snap_writer_main(void *arg);

int ckpt_snap_open(ckpt_snap **out, const char *root, int rank, int keep) {
    ckpt_snap *s = pt_calloc(1, sizeof *s);
    *out = NULL;
    snprintf(s->dir, sizeof s->dir, "%s/rank-%d", root, rank);
    s->rank = rank;
    s->keep = keep > 0 ? keep : 1;
    char hb[1100];
    snprintf(hb, sizeof hb, "%s/heartbeat", s->dir);
    if (pt_make_parents(hb) < 0 || (s->hb_fd = open(hb, O_RDWR | O_CREAT | O_CLOEXEC, 0644)) < 0) {
        free(s);
        return pt_seterr("snapshot folder %s: cannot create it: %s (give --snapshot-dir a writable "
                         "folder, e.g. under /dev/shm)", root, strerror(errno));
    }
    snap_clean_tmp(s->dir);
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_create(&s->th, NULL, snap_writer_main, s);
    *out = s;
    return 0;
}

int ckpt_snap_ready(ckpt_snap *s) {
    pthread_mutex_lock(&s->mu);
    if (s->busy) {   /* the writer is still at the previous generation */
        double t0 = pt_now();
        while (s->busy) pthread_cond_wait(&s->cv, &s->mu);
        s->st.wait_s += pt_now() - t0;
        s->st.waits++;
    }
    if (s->err[0] && !s->err_said) {   /* once, at the first boundary after it */
        fprintf(stderr, "pipetrain: warning: snapshot of rank %d failed: %s (the run goes on; the newest "
                "generation on disk may be older than the heartbeat suggests)\n", s->rank, s->err);
        s->err_said = 1;
    }
    s->n_pc[s->stage] = 0;
    pthread_mutex_unlock(&s->mu);
    return 1;
}

/* Room for n floats in each of the piece's three buffers, and its tables. */
static void piece_reserve(snap_piece *p, const gpt_model *m) {
    size_t n = m->n_held;
    if (p->cap < n) {
        free(p->shadow.params); free(p->opt.m); free(p->opt.v);
        p->shadow.params = pt_falloc(n);
        p->opt.m = pt_falloc(n);
        p->opt.v = pt_falloc(n);
        p->cap = n;
    }
    int n_off = gpt_num_layers(m) + 1;   /* layer_off's entries */
    if (p->info_cap < m->n_info) {
        free(p->shadow.info);
        p->shadow.info = pt_malloc(sizeof *m->info * (size_t)m->n_info);
        p->info_cap = m->n_info;
    }
    if (p->off_cap < n_off) {
        free(p->shadow.layer_off);
        p->shadow.layer_off = pt_malloc(sizeof *m->layer_off * (size_t)n_off);
        p->off_cap = n_off;
    }
}

int ckpt_snap_stage(ckpt_snap *s, int chunk, int first, int end, const gpt_model *m,
                    const adamw_state *opt) {
    if (s->n_pc[s->stage] == CKPT_SNAP_PIECES)
        return pt_seterr("snapshot of rank %d: more than %d chunks on one rank", s->rank, CKPT_SNAP_PIECES);
    if (!opt || !opt->m || opt->n != m->n_held)
        return pt_seterr("snapshot of rank %d: chunk %d has no whole AdamW moments (--zero 1 and "
                         "--tp > 1 are not snapshotted yet)", s->rank, chunk);
    double t0 = pt_now();
    snap_piece *p = &s->pc[s->stage][s->n_pc[s->stage]++];
    piece_reserve(p, m);
    float *params = p->shadow.params, *mm = p->opt.m, *vv = p->opt.v;
    gpt_param_info *info = p->shadow.info;
    size_t *off = p->shadow.layer_off;
    p->shadow = *m;                      /* the sizes and layer range; pointers replaced below */
    memset(&p->shadow.w, 0, sizeof p->shadow.w);
    memset(&p->shadow.g, 0, sizeof p->shadow.g);
    p->shadow.grads = NULL;
    p->shadow.fb_act = p->shadow.fb_scratch = p->shadow.fb_x = NULL;
    p->shadow.params = params;
    p->shadow.info = memcpy(info, m->info, sizeof *info * (size_t)m->n_info);
    p->shadow.layer_off = memcpy(off, m->layer_off, sizeof *off * (size_t)(gpt_num_layers(m) + 1));
    memcpy(params, m->params, sizeof *params * m->n_held);
    memcpy(mm, opt->m, sizeof *mm * m->n_held);
    memcpy(vv, opt->v, sizeof *vv * m->n_held);
    p->opt.n = m->n_held;
    p->opt.t = opt->t;
    p->chunk = chunk;
    p->first = first;
    p->end = end;
    s->st.copy_s += pt_now() - t0;
    return 0;
}

void ckpt_snap_commit(ckpt_snap *s, const ckpt_manifest *man) {
    pthread_mutex_lock(&s->mu);
    s->man[s->stage] = *man;
    s->st.taken++;
    /* the writer is idle (ckpt_snap_ready waited): the staged set becomes the writer's, the
     * writer's the next to stage */
    s->stage = 1 - s->stage;
    s->busy = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void ckpt_snap_heartbeat(ckpt_snap *s, long step) {
    char line[160], host[65] = "";
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    gethostname(host, sizeof host - 1);
    int n = snprintf(line, sizeof line, "%ld %ld %.3f %s", step, (long)getpid(), ts.tv_sec + ts.tv_nsec * 1e-9,
                     host[0] ? host : "-");
    if (n >= (int)sizeof line - 1) n = (int)sizeof line - 2;
    memset(line + n, ' ', sizeof line - 1 - (size_t)n);   /* fixed width: one pwrite overwrites all */
    line[sizeof line - 1] = '\n';
    if (pwrite(s->hb_fd, line, sizeof line, 0) < 0) { /* best effort: the supervisor says when it is stale */ }
}

void ckpt_snap_get_stats(ckpt_snap *s, ckpt_snap_stats *out) {
    pthread_mutex_lock(&s->mu);
    *out = s->st;
    pthread_mutex_unlock(&s->mu);
}

int ckpt_snap_close(ckpt_snap *s) {
    if (!s) return 0;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->th, NULL);
    int rc = s->err[0] ? pt_seterr("%s", s->err) : 0;
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < CKPT_SNAP_PIECES; i++) {
            snap_piece *p = &s->pc[k][i];
            free(p->shadow.params); free(p->opt.m); free(p->opt.v);
            free(p->shadow.info); free(p->shadow.layer_off);
        }
    close(s->hb_fd);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
    return rc;
}

/* ---- the writer thread ------------------------------------------------------------------ */

/* snap.json of generation man->step: the manifest's fields and each chunk file's sum. */
static cJSON *gen_json(const ckpt_snap *s, int w, const char *tmp) {
    const ckpt_manifest *man = &s->man[w];
    const snap_piece *pc = s->pc[w];
    char v[32];
    cJSON *o = cJSON_CreateObject(), *lay = cJSON_CreateObject(), *cf = cJSON_CreateArray();
    cJSON *ch = cJSON_CreateArray();
    cJSON_AddStringToObject(o, "format", "pipetrain-snapshot");
    cJSON_AddNumberToObject(o, "version", 1);
    cJSON_AddNumberToObject(o, "rank", s->rank);
    cJSON_AddNumberToObject(o, "step", (double)man->step);
    cJSON_AddNumberToObject(o, "adam_t", man->adam_t);
    cJSON_AddNumberToObject(o, "batch", man->batch);
    cJSON_AddNumberToObject(o, "seq", man->seq);
    snprintf(v, sizeof v, "%" PRIu64, man->shuffle_seed);
    cJSON_AddStringToObject(o, "shuffle_seed", v);
    snprintf(v, sizeof v, "%" PRIu64, man->init_seed);
    cJSON_AddStringToObject(o, "init_seed", v);
    cJSON_AddStringToObject(o, "data", man->data_path);
    cJSON_AddItemToObject(o, "config", config_to_cjson(&man->cfg));
    cJSON_AddNumberToObject(lay, "P", man->P);
    cJSON_AddNumberToObject(lay, "D", man->D);
    cJSON_AddNumberToObject(lay, "pipes", man->n_pipes);
    cJSON_AddStringToObject(lay, "schedule", man->schedule);
    for (int c = 0; c < man->n_chunks; c++) cJSON_AddItemToArray(cf, cJSON_CreateNumber(man->chunks[c].first_layer));
    if (man->n_chunks) cJSON_AddItemToArray(cf, cJSON_CreateNumber(man->chunks[man->n_chunks - 1].end_layer));
    cJSON_AddItemToObject(lay, "chunk_first", cf);
    cJSON_AddItemToObject(o, "layout", lay);
    ckpt_optim_to_json(o, man);   /* --optim nadam: "optim", "nadam_mu_product" */
    for (int i = 0; i < s->n_pc[w]; i++) {
        char path[1300];
        uint64_t h;
        size_t len;
        snprintf(path, sizeof path, "%s/chunk-%d.safetensors", tmp, pc[i].chunk);
        if (snap_file_sum(path, &h, &len) < 0) { cJSON_Delete(o); cJSON_Delete(ch); return NULL; }
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "chunk", pc[i].chunk);
        cJSON_AddNumberToObject(e, "first_layer", pc[i].first);
        cJSON_AddNumberToObject(e, "end_layer", pc[i].end);
        cJSON_AddNumberToObject(e, "bytes", (double)len);
        snprintf(v, sizeof v, "%016" PRIx64, h);
        cJSON_AddStringToObject(e, "sum64", v);
        cJSON_AddItemToArray(ch, e);
    }
    cJSON_AddItemToObject(o, "chunks", ch);
    return o;
}

/* Removes the generations of s->dir beyond the newest s->keep. */
static void prune_gens(const ckpt_snap *s) {
    long *steps;
    int n = snap_list_gens(s->dir, &steps);
    for (int i = s->keep; i < n; i++) {
        char g[1100];
        snprintf(g, sizeof g, "%s/gen-%ld", s->dir, steps[i]);
        snap_remove_dir(g);
    }
    free(steps);
}

/* The handed-over generation: chunk files and snap.json in a temporary folder, then renamed. */
static int write_gen(ckpt_snap *s, int w) {
    char tmp[1200], fin[1100];
    const snap_piece *pc = s->pc[w];
    long step = s->man[w].step;
    snprintf(fin, sizeof fin, "%s/gen-%ld", s->dir, step);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", fin, (long)getpid());
    snap_remove_dir(tmp);
    if (mkdir(tmp, 0755) < 0) return pt_seterr("snapshot %s: cannot create: %s", tmp, strerror(errno));
    int rc = 0;
    for (int i = 0; i < s->n_pc[w] && rc == 0; i++) {
        rc = ckpt_write_chunk(tmp, pc[i].chunk, pc[i].first, pc[i].end, &pc[i].shadow, &pc[i].opt);
        if (i == 0) pt_killat_point(s->rank, step, PT_KILL_SAVE);   /* half written */
    }
    cJSON *j = rc == 0 ? gen_json(s, w, tmp) : NULL;
    char jp[1300];
    snprintf(jp, sizeof jp, "%s/snap.json", tmp);
    if (rc == 0) rc = j ? io_write_json(j, jp) : -1;
    cJSON_Delete(j);
    if (rc == 0) {
        snap_remove_dir(fin);   /* the same step again (a restarted run): the newer one wins */
        if (rename(tmp, fin) < 0) rc = pt_seterr("snapshot %s: cannot rename to %s: %s", tmp, fin, strerror(errno));
    }
    if (rc < 0) return -1;
    prune_gens(s);
    return 0;
}

/* CPU seconds this thread has used (what the writer takes from the cores, whatever the load). */
static double thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *snap_writer_main(void *arg) {
    ckpt_snap *s = arg;
    /* below the compute threads: on a machine with no idle core the writer takes what they leave
     * (best effort: a nice value per thread is Linux's; elsewhere this does nothing) */
    if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), SNAP_WRITER_NICE) < 0) { /* keep going */ }
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->busy && !s->stop) pthread_cond_wait(&s->cv, &s->mu);
        if (!s->busy) break;                    /* stop, nothing handed over */
        int w = 1 - s->stage;
        pthread_mutex_unlock(&s->mu);
        double t0 = pt_now(), c0 = thread_cpu_s();
        int rc = write_gen(s, w);
        pthread_mutex_lock(&s->mu);
        s->st.write_s += pt_now() - t0;
        s->st.write_cpu_s += thread_cpu_s() - c0;
        if (rc == 0) {
            s->st.written++;
            s->st.last_step = s->man[w].step;
        } else if (!s->err[0]) {
            snprintf(s->err, sizeof s->err, "%s", pt_err());
        }
        s->busy = 0;
        pthread_cond_broadcast(&s->cv);   /* a compute thread in ready */
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}
