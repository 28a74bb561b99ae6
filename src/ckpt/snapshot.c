/* Snapshots (snapshot.h): the per-rank writer. At a step boundary the compute thread copies its
 * chunks straight into the mapped chunk files of a slot (snapshot_slot.c: keep + 1 folders
 * refilled in place), summing them on the way, then writes snap.json (the sums) and renames the
 * folder to "gen-<step>" (ckpt_snap_commit): a generation is whole before the rank's next step.
 * A helper thread then offers it to the peer, drops other processes' old generations and makes
 * the next slot's files; a boundary that finds it still busy waits for it (ckpt_snap_ready). A
 * writer or slot error is said once, at the next boundary, and returned by ckpt_snap_close.
 * Not here: the restore (snapshot_restore.c). */
#include "ckpt/snapshot.h"
#include "ckpt/ckpt_int.h"
#include "ckpt/ckpt_state.h"
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

#define SNAP_PEER_BUDGET 0.01  /* --snapshot-peer-every 0: the peer copy's CPU (both ends) aims at this
                                * share of the wall time for the generations it may leave out (those of
                                * even multiples of K always go, whatever they cost) */
#define SNAP_WRITER_NICE 10   /* the writer thread's nice value, above the compute threads' */

#define SNAP_KEEP_MAX 8
#define SNAP_SLOTS_MAX (SNAP_KEEP_MAX + 2)   /* keep + 1 slots, + 1 under the peer copy's budget */

struct ckpt_snap {
    char dir[1024];             /* root/rank-<w> */
    int rank, keep, hb_fd;
    /* keep + 1 slots used in turn: the compute thread fills slot `cur`, the writer finishes the
     * one handed over before it; ckpt_snap_ready waits for the writer, so a commit always finds
     * it idle and the two never touch the same slot */
    snap_slot slot[SNAP_SLOTS_MAX];
    int n_slots, cur, n_pc, bad;    /* bad: this generation failed to stage (not handed over) */
    ckpt_manifest man;          /* the handed-over generation's */
    int w_slot;                 /* the slot the writer works on (installed already) */
    int w_peer;                 /* it goes to the peer */
    int w_must;                 /* ... whatever the copy's budget says (an even multiple of k) */
    char *w_json;               /* its snap.json text (the writer frees it) */
    uint64_t w_sums[CKPT_SNAP_PIECES];
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int busy, stop;
    char err[512];              /* the writer's (or a stage's) first error ("" none) */
    int err_said;               /* err already printed at a step boundary */
    ckpt_snap_stats st;
    snap_peer *peer;            /* the peer copy, or NULL */
    int peer_every;             /* every peer_every-th generation written goes to the peer (0: none) */
    int peer_k;                 /* the run's snapshot interval: the budget's generations that must go
                                 * are those of the even multiples of it (the same on every rank) */
    int peer_budget;            /* the copy keeps within its CPU budget (--snapshot-peer-every 0) */
    int peer_sums;              /* the peer is a replica: sums only (snap_peer_sums_to) */
    long peer_count;            /* generations written since the sending started */
    int world;                  /* --zero 1 under TP: the job's ranks (all needed by a restore) */
    long slow_ms;               /* test hook: each take sleeps this long before it copies */
    int state_world;            /* this generation holds the rank's own state file (ckpt_state.h)
                                 * of a job of that many ranks; 0: none */
    size_t state_bytes;
    uint64_t state_sum;
};

static void *snap_writer_main(void *arg);
static void prune_gens(const ckpt_snap *s, int spare_slots);

/* Test hook: PIPETRAIN_TEST_SNAP_SLOW="MS:R,R,..." makes the takes of world ranks R sleep MS
 * milliseconds before they copy (a take starved on a loaded machine, made certain: with takes
 * overlapped with the next step, that step's updates must wait for it; tests/test_recover_mpi.sh).
 * 0 for every other rank, or without it. */
static long slow_writer_ms(int rank) {
    const char *v = getenv("PIPETRAIN_TEST_SNAP_SLOW");
    char *e;
    long ms = v ? strtol(v, &e, 10) : 0;
    if (!v || *e != ':' || ms <= 0) return 0;
    for (const char *q = e + 1; *q;) {
        long r = strtol(q, &e, 10);
        if (e == q) return 0;
        if (r == rank) return ms;
        q = *e == ',' ? e + 1 : e;
    }
    return 0;
}

int ckpt_snap_open(ckpt_snap **out, const char *root, int rank, int keep) {
    ckpt_snap *s = pt_calloc(1, sizeof *s);
    *out = NULL;
    snprintf(s->dir, sizeof s->dir, "%s/rank-%d", root, rank);
    s->rank = rank;
    s->slow_ms = slow_writer_ms(rank);
    s->keep = keep < 1 ? 1 : keep > SNAP_KEEP_MAX ? SNAP_KEEP_MAX : keep;
    s->n_slots = s->keep + 1;
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

/* The first error (pt_err) kept, to be said at the next boundary and returned at close. */
static void note_error(ckpt_snap *s) {
    pthread_mutex_lock(&s->mu);
    if (!s->err[0]) snprintf(s->err, sizeof s->err, "%s", pt_err());
    pthread_mutex_unlock(&s->mu);
}

int ckpt_snap_ready(ckpt_snap *s) {
    if (s->slow_ms > 0) {   /* test hook: the take starts late (before it copies anything) */
        struct timespec ts = { s->slow_ms / 1000, s->slow_ms % 1000 * 1000000L };
        nanosleep(&ts, NULL);
    }
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
    pthread_mutex_unlock(&s->mu);
    s->n_pc = 0;   /* the writer is idle: the slots are the compute thread's until the commit */
    s->state_world = 0;
    s->bad = snap_slot_prepare(&s->slot[s->cur], s->dir, s->cur) < 0;
    if (s->bad) note_error(s);
    return 1;
}

/* After a piece's copy into the slot began at t0 (fill_rc: the copy's result): a failed copy marks
 * the generation bad (said at the next boundary; the run goes on), a good one counts the piece
 * and its time. Always 0. */
static int piece_done(ckpt_snap *s, int fill_rc, double t0) {
    if (fill_rc < 0) {
        s->bad = 1;
        note_error(s);
        return 0;
    }
    s->n_pc++;
    s->st.copy_s += pt_now() - t0;
    if (s->st.taken == 0) s->st.first_copy_s += pt_now() - t0;
    return 0;
}

int ckpt_snap_stage(ckpt_snap *s, int chunk, int first, int end, const gpt_model *m,
                    const adamw_state *opt) {
    return ckpt_snap_stage_tp(s, chunk, first, end, m, opt, 0, 1);
}

int ckpt_snap_stage_tp(ckpt_snap *s, int chunk, int first, int end, const gpt_model *m,
                       const adamw_state *opt, int tp_rank, int tp) {
    if (s->n_pc == CKPT_SNAP_PIECES)
        return pt_seterr("snapshot of rank %d: more than %d chunks on one rank", s->rank, CKPT_SNAP_PIECES);
    if (opt && (!opt->m || opt->n != m->n_held))
        return pt_seterr("snapshot of rank %d: chunk %d: the AdamW moments are not laid out like its "
                         "parameters (%zu floats, the model holds %zu)", s->rank, chunk, opt->n, m->n_held);
    if (s->bad) return 0;   /* said at the next boundary; the run goes on */
    double t0 = pt_now();
    if (tp < 1 || tp_rank < 0 || tp_rank >= tp)
        return pt_seterr("snapshot of rank %d: TP rank %d of %d", s->rank, tp_rank, tp);
    return piece_done(s, snap_slot_fill(&s->slot[s->cur], s->n_pc, chunk, first, end, m, opt, tp_rank, tp), t0);
}

int ckpt_snap_stage_slices(ckpt_snap *s, int chunk, int first, int end, const gpt_model *m, int with_params,
                           const ckpt_slice *x, int n, int tp_rank, int tp, int replica, int world) {
    if (s->n_pc == CKPT_SNAP_PIECES)
        return pt_seterr("snapshot of rank %d: more than %d files on one rank", s->rank, CKPT_SNAP_PIECES);
    if (tp < 1 || tp_rank < 0 || tp_rank >= tp || replica < 0 || world < 1)
        return pt_seterr("snapshot of rank %d: TP rank %d of %d, replica %d, %d ranks", s->rank, tp_rank, tp, replica, world);
    s->world = world;
    if (s->bad) return 0;
    double t0 = pt_now();
    return piece_done(s, snap_slot_fill_slices(&s->slot[s->cur], s->n_pc, chunk, first, end, m, with_params, x, n,
                                               tp_rank, tp, replica), t0);
}

int ckpt_snap_stage_shard(ckpt_snap *s, const ckpt_slice *sl, int n) {
    if (s->n_pc == CKPT_SNAP_PIECES)
        return pt_seterr("snapshot of rank %d: more than %d files on one rank", s->rank, CKPT_SNAP_PIECES);
    if (s->bad) return 0;
    double t0 = pt_now();
    return piece_done(s, snap_slot_fill_shard(&s->slot[s->cur], s->n_pc, s->rank, sl, n), t0);
}

static int install_gen(ckpt_snap *s, snap_slot *sl, uint64_t *sums, char **json);

int ckpt_snap_stage_state(ckpt_snap *s, const ckpt_state *st, int world) {
    if (s->bad) return 0;
    double t0 = pt_now();
    if (snap_state_fill(&s->slot[s->cur], s->rank, st, &s->state_sum, &s->state_bytes) < 0) {
        s->bad = 1;
        note_error(s);
        return 0;
    }
    s->state_world = world;
    s->st.copy_s += pt_now() - t0;
    return 0;
}

void ckpt_snap_commit(ckpt_snap *s, const ckpt_manifest *man) {
    if (s->bad) return;
    double t0 = pt_now();
    snap_slot *sl = &s->slot[s->cur];
    uint64_t sums[CKPT_SNAP_PIECES];
    char *json = NULL;
    s->man = *man;
    sl->n_f = s->n_pc;   /* the pieces of this generation (a slot may hold more files) */
    int rc = install_gen(s, sl, sums, &json);
    if (rc < 0) note_error(s);
    pthread_mutex_lock(&s->mu);
    s->st.copy_s += pt_now() - t0;
    if (s->st.taken++ == 0) s->st.first_copy_s += pt_now() - t0;
    if (rc == 0) {
        s->st.written++;
        s->st.last_step = man->step;
    }
    /* the rest to the writer, idle (ckpt_snap_ready waited): the peer copy, and in the first
     * generations the next slot's files and an earlier process's generations (after those all
     * slots are in use and older generations are this process's own: nothing to do, no wake-up) */
    int to_peer = rc == 0 && s->peer_every && ++s->peer_count % s->peer_every == 0;
    if (rc == 0 && (to_peer || s->st.taken <= s->n_slots + 1)) {
        s->w_peer = to_peer;
        int k = s->peer_k > 0 ? s->peer_k : 1;
        s->w_must = s->peer_budget && man->step % k == 0 && (man->step / k) % 2 == 0;
        s->w_slot = s->cur;
        s->w_json = json;
        memcpy(s->w_sums, sums, sizeof sums);
        s->busy = 1;
        pthread_cond_broadcast(&s->cv);
    } else {
        cJSON_free(json);
    }
    s->cur = (s->cur + 1) % s->n_slots;
    pthread_mutex_unlock(&s->mu);
    if (rc == 0 && s->peer) snap_peer_own_written(s->peer, man->step);   /* a replica's sums wait for it */
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
    out->peer_rank = -1;
    if (!s->peer) return;
    snap_peer_stats ps;
    snap_peer_get_stats(s->peer, &ps);
    out->peer_rank = ps.peer_rank;
    out->peer_sent = ps.sent;
    out->peer_skipped = ps.skipped;
    out->peer_thinned = ps.thinned;
    out->peer_failed = ps.failed;
    out->peer_received = ps.received;
    out->peer_dropped = ps.dropped;
    out->peer_send_s = ps.send_s;
    out->peer_send_cpu_s = ps.send_cpu_s;
    out->peer_recv_cpu_s = ps.recv_cpu_s;
    out->peer_sums = s->peer_sums;
    out->peer_sums_only = ps.sums_only;
    out->peer_whole_after = ps.whole_after;
    out->peer_received_sums = ps.received_sums;
    out->peer_payload_bytes = ps.payload_bytes;
}

/* every >= 1: every every-th generation to the peer; < 1: each offered, within the copy's CPU
 * budget (SNAP_PEER_BUDGET: the sender thins them), but those of the even multiples of the
 * snapshot interval k always go (every rank's at the same steps: a host's lost ranks' copies and
 * the others' own newest 4 generations always share a step). */
static void peer_every_set(ckpt_snap *s, int every, int k) {
    s->peer_every = every < 1 ? 1 : every;
    s->peer_k = k < 1 ? 1 : k;
    s->peer_budget = every < 1;
    snap_peer_budget(s->peer, every < 1 ? SNAP_PEER_BUDGET : 0);
    /* one generation more, before the first take: while a take refills the oldest slot, the
     * newest 4 still hold the forced step 2K before the newest forced one (its copy may be in
     * flight when the next forced one is taken) */
    if (s->peer_budget && s->st.taken == 0 && s->n_slots == s->keep + 1) s->n_slots++;
}

int ckpt_snap_peer_route(ckpt_snap *s, const double *table, int R, int me, int every, int interval) {
    const double *mine = table + 3 * me;
    if (mine[1] <= 0) return -1;   /* not listening: it sends nowhere either */
    for (int pass = mine[2] > 0 ? 0 : 1; pass < 2; pass++)
        for (int k = 1; k < R; k++) {
            const double *q = table + 3 * ((me + k) % R);
            if (q[1] <= 0 || (uint32_t)q[0] == (uint32_t)mine[0] || (pass == 0 && q[2] != mine[2])) continue;
            if (!s->peer) s->peer = snap_peer_new(s->dir, s->rank);
            peer_every_set(s, every, interval);
            s->peer_sums = pass == 0;
            int rc = pass == 0 ? snap_peer_sums_to(s->peer, (uint32_t)q[0], (int)q[1], (me + k) % R)
                               : snap_peer_send_to(s->peer, (uint32_t)q[0], (int)q[1], (me + k) % R);
            return rc < 0 ? -2 : (me + k) % R;
        }
    return -1;
}

int ckpt_snap_peer_listen(ckpt_snap *s, uint32_t *addr, int *port) {
    if (!s->peer) s->peer = snap_peer_new(s->dir, s->rank);
    return snap_peer_listen(s->peer, addr, port);
}

int ckpt_snap_peer_send_to(ckpt_snap *s, uint32_t addr, int port, int peer_rank, int every) {
    if (!s->peer) s->peer = snap_peer_new(s->dir, s->rank);
    peer_every_set(s, every, 1);
    return snap_peer_send_to(s->peer, addr, port, peer_rank);
}

int ckpt_snap_close(ckpt_snap *s) {
    if (!s) return 0;
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->th, NULL);
    snap_peer_free(s->peer);   /* before the slots' files are unmapped: the sender reads them */
    int rc = s->err[0] ? pt_seterr("%s", s->err) : 0;
    for (int k = 0; k < s->n_slots; k++) {   /* a slot being filled is no generation: gone */
        snap_slot_free(&s->slot[k]);
        if (s->slot[k].step == 0 && s->slot[k].dir[0]) snap_remove_dir(s->slot[k].dir);
    }
    prune_gens(s, 0);   /* the newest keep, no more */
    close(s->hb_fd);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
    return rc;
}

/* ---- the writer thread ------------------------------------------------------------------ */

/* snap.json of the handed-over generation: the manifest's fields and each chunk file's sum
 * (sums[i], bytes of the mapped file). */
static cJSON *gen_json(const ckpt_snap *s, const snap_slot *sl, const uint64_t *sums) {
    const ckpt_manifest *man = &s->man;
    char v[32];
    cJSON *o = cJSON_CreateObject(), *lay = cJSON_CreateObject(), *cf = cJSON_CreateArray();
    cJSON *ch = cJSON_CreateArray();
    cJSON_AddStringToObject(o, "format", "pipetrain-snapshot");
    cJSON_AddNumberToObject(o, "version", 2);   /* 2: sum64 of 32 lanes */
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
    cJSON_AddNumberToObject(lay, "shards", man->zero ? man->n_shards : 0);   /* --zero 1: ranks */
    cJSON_AddNumberToObject(lay, "tp", man->tp > 1 ? man->tp : 1);
    int slices = 0;
    for (int i = 0; i < sl->n_f; i++) slices |= sl->f[i].replica >= 0;
    cJSON_AddNumberToObject(lay, "moment_slices", slices);   /* every rank's files needed: */
    if (slices) cJSON_AddNumberToObject(lay, "world", s->world);   /* these ranks' */
    for (int c = 0; c < man->n_chunks; c++) cJSON_AddItemToArray(cf, cJSON_CreateNumber(man->chunks[c].first_layer));
    if (man->n_chunks) cJSON_AddItemToArray(cf, cJSON_CreateNumber(man->chunks[man->n_chunks - 1].end_layer));
    cJSON_AddItemToObject(lay, "chunk_first", cf);
    cJSON_AddItemToObject(o, "layout", lay);
    ckpt_optim_to_json(o, man);   /* --optim nadam: "optim", "nadam_mu_product" */
    for (int i = 0; i < sl->n_f; i++) {
        const snap_file *f = &sl->f[i];
        cJSON *e = cJSON_CreateObject();
        if (f->kind == SNAP_FILE_SHARD) {
            cJSON_AddNumberToObject(e, "shard", f->chunk);
        } else {
            cJSON_AddNumberToObject(e, "chunk", f->chunk);
            cJSON_AddNumberToObject(e, "first_layer", f->first);
            cJSON_AddNumberToObject(e, "end_layer", f->end);
            cJSON_AddNumberToObject(e, "optim", f->has_optim);
            if (f->tp > 1) cJSON_AddNumberToObject(e, "tp_rank", f->tp_rank);
            if (f->replica >= 0) cJSON_AddNumberToObject(e, "replica", f->replica);
        }
        cJSON_AddNumberToObject(e, "bytes", (double)f->bytes);
        snprintf(v, sizeof v, "%016" PRIx64, sums[i]);
        cJSON_AddStringToObject(e, "sum64", v);
        cJSON_AddItemToArray(ch, e);
    }
    cJSON_AddItemToObject(o, "chunks", ch);
    if (s->state_world) {   /* the rank's own state (snapshot_state.c) */
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "world", s->state_world);
        cJSON_AddNumberToObject(e, "bytes", (double)s->state_bytes);
        snprintf(v, sizeof v, "%016" PRIx64, s->state_sum);
        cJSON_AddStringToObject(e, "sum64", v);
        cJSON_AddItemToObject(o, "state", e);
    }
    return o;
}

/* Removes the generations of s->dir beyond the newest s->keep, but for this rank's slots when
 * spare_slots (the writer: the slots' own are refilled, never removed while open). */
static void prune_gens(const ckpt_snap *s, int spare_slots) {
    long *steps;
    int n = snap_list_gens(s->dir, &steps);
    for (int i = s->keep; i < n; i++) {
        int mine = 0;
        for (int k = 0; spare_slots && k < s->n_slots; k++) mine |= s->slot[k].step == steps[i];
        if (mine) continue;
        char g[1100];
        snprintf(g, sizeof g, "%s/gen-%ld", s->dir, steps[i]);
        snap_remove_dir(g);
    }
    free(steps);
}

/* The generation just installed from slot sl to the peer's sender (its files' names, maps, sums). */
static void offer_peer(ckpt_snap *s, const snap_slot *sl, const uint64_t *sums, const char *text, int must) {
    snap_peer_file f[SNAP_PEER_FILES];
    for (int i = 0; i < sl->n_f; i++) {
        const snap_file *x = &sl->f[i];
        if (x->kind == SNAP_FILE_SHARD) snprintf(f[i].name, sizeof f[i].name, "optim-%d.safetensors", x->chunk);
        else snprintf(f[i].name, sizeof f[i].name, "chunk-%d.safetensors", x->chunk);
        f[i].map = x->map;
        f[i].bytes = x->bytes;
        f[i].sum = sums[i];
        f[i].whole = 0;
    }
    int n = sl->n_f;
    if (s->state_world && sl->st.map) {   /* the rank's own state (f has room for it) */
        snprintf(f[n].name, sizeof f[n].name, "state-%d.safetensors", s->rank);
        f[n].map = sl->st.map;
        f[n].whole = 1;   /* this rank's alone: whole also to a replica (sums only) */
        f[n].bytes = sl->st.bytes;
        f[n++].sum = s->state_sum;
    }
    snap_peer_offer(s->peer, s->man.step, text, f, n, must);
}

/* On the compute thread, at commit: slot sl made generation man.step: its files' sums (the copy's,
 * else taken here), snap.json written (*json: its text, allocated, for the peer), the folder
 * renamed into place. When this returns, the generation is whole on this host: a rank that
 * starts its next step has its generation of this one written, and since every step ends with a
 * reduction over the world (the loss and the gradient's norm, src/run), no rank finishes a step
 * before every rank's generation of the step before it is written. 0, or -1 naming the error
 * (the folder stays a free slot's). */
static int install_gen(ckpt_snap *s, snap_slot *sl, uint64_t *sums, char **json) {
    long step = s->man.step;
    for (int i = 0; i < sl->n_f; i++) {
        /* summed by the copy (snapshot_slot.c), else here */
        sums[i] = sl->f[i].summed ? sl->f[i].sum : snap_sum_mem(sl->f[i].map, sl->f[i].bytes);
        if (i == 0) pt_killat_point(s->rank, step, PT_KILL_SAVE);   /* half written: no snap.json */
    }
    cJSON *j = gen_json(s, sl, sums);
    *json = j ? cJSON_PrintUnformatted(j) : NULL;
    cJSON_Delete(j);
    if (!*json) return pt_seterr("snapshot %s: cannot build snap.json", sl->dir);
    /* written in place: the folder's rename below is what makes the generation whole */
    char jp[1300];
    snprintf(jp, sizeof jp, "%s/snap.json", sl->dir);
    FILE *f = fopen(jp, "wb");
    int ok = f && fputs(*json, f) >= 0;
    if ((f && fclose(f) != 0) || !ok) {
        cJSON_free(*json);
        *json = NULL;
        return pt_seterr("snapshot %s: cannot write: %s", jp, strerror(errno));
    }
    if (snap_slot_install(sl, s->dir, step) == 0) return 0;
    cJSON_free(*json);
    *json = NULL;
    return -1;
}

/* The writer, after a generation is installed: offered to the peer, other processes' old
 * generations dropped, the compute thread's next slot given its files. */
static void after_gen(ckpt_snap *s) {
    snap_slot *sl = &s->slot[s->w_slot];
    if (s->w_peer) offer_peer(s, sl, s->w_sums, s->w_json, s->w_must);
    cJSON_free(s->w_json);
    s->w_json = NULL;
    prune_gens(s, 1);
    int next = (s->w_slot + 1) % s->n_slots;   /* the compute thread's next: ready before it is */
    if (snap_slot_clone(&s->slot[next], sl, s->dir, next) < 0) { /* the compute thread makes it then */ }
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
        pthread_mutex_unlock(&s->mu);
        double t0 = pt_now(), c0 = thread_cpu_s();
        after_gen(s);
        pthread_mutex_lock(&s->mu);
        s->st.write_s += pt_now() - t0;
        s->st.write_cpu_s += thread_cpu_s() - c0;
        s->busy = 0;
        pthread_cond_broadcast(&s->cv);   /* a compute thread in ready */
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}
