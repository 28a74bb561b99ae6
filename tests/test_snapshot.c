/* Snapshots (ckpt/snapshot.h): two ranks' chunks written by their writer threads, restored into a
 * checkpoint folder that loads bitwise; the newest step every chunk has is chosen (a rank one
 * generation behind holds the others back); a damaged generation (one flipped byte) and a half
 * written one (a temporary folder) are never used; a lost rank's folder is skipped; only `keep`
 * generations stay; reset removes heartbeats and the generations after a step; a writer kept open
 * over many steps refills its slots in place without touching the generations it keeps; with
 * --zero 1 the moment shards of every rank are needed and restored; the checksum taken in pieces
 * (the copy's) equals the one-shot one; the peer copy of every N-th generation only. */
#include "test.h"
#include "ckpt/snapshot.h"
#include "ckpt/snapshot_int.h"
#include "util/pt.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <stdio.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

static const gpt_config CFG = {.n_layer = 4, .n_head = 2, .n_embd = 16, .vocab_size = 64, .n_positions = 16};
static char root[128], out[160];

typedef struct { gpt_model m; adamw_state opt; } state;

/* A whole model with parameters and moments that depend on seed (so each step's differ). */
static void state_fill(state *s, uint64_t seed) {
    gpt_init_random(&s->m, seed);
    for (size_t i = 0; i < s->opt.n; i++) {
        s->opt.m[i] = (float)i * 1e-3f + (float)seed;
        s->opt.v[i] = (float)seed * 0.5f + 1.0f;
    }
    s->opt.t = (int)seed;
}

/* Rank r (of 2, chunk r: layers [0,3) or [3,6)) snapshots state s as step `step`. */
static void take(ckpt_snap *sn, int r, const state *s, long step) {
    static const int cf[3] = { 0, 3, 6 };
    ckpt_manifest man = { .cfg = CFG, .step = step, .adam_t = (int)step, .batch = 4, .seq = 8 };
    snprintf(man.data_path, sizeof man.data_path, "data.txt");
    ckpt_manifest_set_layout(&man, 2, 1, 2, 1, "1f1b", cf);
    ckpt_snap_ready(sn);
    ckpt_snap_stage(sn, r, cf[r], cf[r + 1], &s->m, &s->opt);
    ckpt_snap_commit(sn, &man);
}

/* Loads the restored folder and compares it with s. */
static int restored_equals(const state *s) {
    ckpt_manifest man;
    state l;
    if (ckpt_read_manifest(&man, out) < 0) return 0;
    gpt_init(&l.m, &CFG);
    adamw_init(&l.opt, l.m.num_params);
    int ok = ckpt_load_layers(out, &man, &l.m, &l.opt, 0, 6) == 0 &&
             !memcmp(l.m.params, s->m.params, sizeof(float) * s->m.num_params) &&
             !memcmp(l.opt.m, s->opt.m, sizeof(float) * s->opt.n) && !memcmp(l.opt.v, s->opt.v, sizeof(float) * s->opt.n);
    gpt_free(&l.m);
    adamw_free(&l.opt);
    return ok;
}

static void flip_byte(const char *path) {
    FILE *f = fopen(path, "r+b");
    if (!f) return;
    fseek(f, -5, SEEK_END);
    int c = fgetc(f);
    fseek(f, -5, SEEK_END);
    fputc(c ^ 0x5a, f);
    fclose(f);
}

/* Rank 2's folder replaced by a file once open: its writer fails; the next boundary (ready)
 * says so on stderr, once, and close returns the error. */
static int writer_error_said(const state *s) {
    ckpt_snap *c;
    char p[300], ep[300], text[2048] = "";
    if (ckpt_snap_open(&c, root, 2, 1) < 0) return 0;
    snprintf(p, sizeof p, "rm -rf %s/rank-2 && touch %s/rank-2", root, root);
    if (system(p) != 0) return 0;
    snprintf(ep, sizeof ep, "%s/stderr.txt", root);
    fflush(stderr);
    int saved = dup(2), fd = open(ep, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    close(fd);
    for (long step = 1; step <= 3; step++) take(c, 0, s, step);
    ckpt_snap_ready(c);   /* the boundary after the third generation's failure */
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    int closed = ckpt_snap_close(c);
    FILE *f = fopen(ep, "r");
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[n] = 0;
    char *first = strstr(text, "snapshot of rank 2 failed");
    return closed < 0 && first && !strstr(first + 1, "snapshot of rank 2 failed");
}

/* Two ranks kept open over 6 steps (their slots refilled in place, files mapped once): the newest
 * step restores bitwise, and so does an older one still kept (its slot not refilled since); no
 * more than `keep` generations and no half-filled folder stay after close. */
static int slots_refilled(const state *s) {
    char r2[200], cmd[520], p[300];
    snprintf(r2, sizeof r2, "%s/slots", root);
    ckpt_snap *a, *b;
    if (ckpt_snap_open(&a, r2, 0, 3) < 0 || ckpt_snap_open(&b, r2, 1, 3) < 0) return 0;
    for (long step = 1; step <= 6; step++) {
        take(a, 0, &s[(step - 1) % 5], step);
        take(b, 1, &s[(step - 1) % 5], step);
    }
    ckpt_snap_close(a);
    ckpt_snap_close(b);
    ckpt_snap_found f;
    int ok = ckpt_snap_restore(r2, NULL, 0, out, &f) == 1 && f.step == 6 && restored_equals(&s[0]);
    snprintf(cmd, sizeof cmd, "rm -rf %s/rank-1/gen-6 %s/rank-1/gen-5", r2, r2);
    ok = ok && system(cmd) == 0 && ckpt_snap_restore(r2, NULL, 0, out, &f) == 1 && f.step == 4 &&
         restored_equals(&s[3]);
    long *steps;
    snprintf(p, sizeof p, "%s/rank-0", r2);
    int n = snap_list_gens(p, &steps);
    ok = ok && n == 3 && steps[0] == 6 && steps[2] == 4;
    free(steps);
    snprintf(cmd, sizeof cmd, "ls %s/rank-0 | grep -q tmp", r2);
    return ok && system(cmd) != 0;
}

/* A --zero 1 generation's manifest: 2 stages of 3 layers, step 2, R ranks' shards. 0, or -1. */
static const int zero_cf[3] = { 0, 3, 6 };   /* the zero tests' chunks: layers [0, 3), [3, 6) */

static int zero_manifest(ckpt_manifest *man, int R) {
    *man = (ckpt_manifest){ .cfg = CFG, .step = 2, .adam_t = 2, .batch = 4, .seq = 8 };
    snprintf(man->data_path, sizeof man->data_path, "data.txt");
    ckpt_manifest_set_layout(man, 2, 1, 2, 1, "1f1b", zero_cf);
    return ckpt_manifest_set_shards(man, R);
}

/* --zero 1: each rank snapshots its chunk's parameters only and its moment slices (here rank r
 * the whole of tensor r's moments) as a shard file; restore writes a checkpoint with both
 * shards and whose parameters load bitwise; without rank 1's folder no step is complete (the
 * dead rank held the only copy of its slices). */
static int zero_shards(const state *s) {
    char r2[200];
    snprintf(r2, sizeof r2, "%s/zero", root);
    ckpt_manifest man;
    zero_manifest(&man, 2);
    ckpt_snap *sn[2];
    for (int r = 0; r < 2; r++) {
        const gpt_param_info *pi = gpt_param_info_at(&s->m, r);
        ckpt_slice sl = { .name = pi->name, .start = 0, .n = pi->count, .m = s->opt.m + pi->offset,
                          .v = s->opt.v + pi->offset };
        if (ckpt_snap_open(&sn[r], r2, r, 3) < 0) return 0;
        ckpt_snap_ready(sn[r]);
        if (ckpt_snap_stage(sn[r], r, zero_cf[r], zero_cf[r + 1], &s->m, NULL) < 0 || ckpt_snap_stage_shard(sn[r], &sl, 1) < 0)
            return 0;
        ckpt_snap_commit(sn[r], &man);
        ckpt_snap_close(sn[r]);
    }
    ckpt_snap_found f;
    ckpt_manifest rm;
    state l;
    int skip[1] = { 1 };
    if (ckpt_snap_restore(r2, skip, 1, out, &f) != 0) return 0;
    if (ckpt_snap_restore(r2, NULL, 0, out, &f) != 1 || f.step != 2 || ckpt_read_manifest(&rm, out) < 0 ||
        !rm.zero || rm.n_shards != 2) return 0;
    gpt_init(&l.m, &CFG);
    int ok = ckpt_load_layers(out, &rm, &l.m, NULL, 0, 6) == 0 &&
             !memcmp(l.m.params, s->m.params, sizeof(float) * s->m.num_params);
    gpt_free(&l.m);
    return ok;
}

/* Ranks 0 and 1's snapshots under root/name (r2 gets the folder), rank 1 listening and rank 0
 * sending to it (every as ckpt_snap_peer_send_to). 1, or 0 when one could not be made. */
static int pair_open(const char *name, int every, ckpt_snap **a, ckpt_snap **b, char *r2, size_t n) {
    uint32_t addr;
    int port;
    snprintf(r2, n, "%s/%s", root, name);
    return ckpt_snap_open(a, r2, 0, 3) == 0 && ckpt_snap_open(b, r2, 1, 3) == 0 &&
           ckpt_snap_peer_listen(*b, &addr, &port) == 0 && ckpt_snap_peer_send_to(*a, addr, port, 1, every) == 0;
}

/* The peer copy: rank 1 listens, rank 0 sends its generations there (over TCP, this host's
 * address); once one arrived, rank 0's folder can go (a lost host) and the restore still finds
 * chunk 0, in rank-1/peer-0/, bitwise. Waits at most 10 s for the copy. */
static int peer_copied(const state *s) {
    char r2[200];
    ckpt_snap *a, *b;
    if (!pair_open("peer", 1, &a, &b, r2, sizeof r2)) return 0;
    take(a, 0, &s[1], 1);
    take(b, 1, &s[1], 1);
    ckpt_snap_stats st = {0};
    for (int i = 0; i < 1000 && st.peer_received < 1; i++) {
        usleep(10000);
        ckpt_snap_get_stats(b, &st);
    }
    ckpt_snap_stats sa;
    ckpt_snap_get_stats(a, &sa);
    ckpt_snap_close(a);
    ckpt_snap_close(b);
    ckpt_snap_found f;
    int skip[1] = { 0 };
    return st.peer_received == 1 && sa.peer_sent == 1 && sa.peer_rank == 1 &&
           ckpt_snap_restore(r2, skip, 1, out, &f) == 1 && f.step == 1 && f.from_rank[0] == 0 && restored_equals(&s[1]);
}

/* Waits (at most 10 s) until b has received n peer copies; their count. */
static long peer_wait(ckpt_snap *b, long n) {
    ckpt_snap_stats st = {0};
    for (int i = 0; i < 1000 && st.peer_received < n; i++) {
        usleep(10000);
        ckpt_snap_get_stats(b, &st);
    }
    return st.peer_received;
}

/* --snapshot-peer-every 2: of generations 1..4, only 2 and 4 go to the peer. */
static int peer_every_2(const state *s) {
    char r2[200], p[300];
    ckpt_snap *a, *b;
    int ok = 1;
    if (!pair_open("peer2", 2, &a, &b, r2, sizeof r2)) return 0;
    for (int g = 1; g <= 4; g++) {
        take(a, 0, &s[g], g);
        if (g % 2 == 0) ok &= peer_wait(b, g / 2) == g / 2;
    }
    ckpt_snap_close(a);
    ckpt_snap_close(b);
    for (int g = 1; g <= 4; g++) {
        snprintf(p, sizeof p, "%s/rank-1/peer-0/gen-%d", r2, g);
        ok &= (access(p, F_OK) == 0) == (g % 2 == 0);
    }
    return ok;
}

/* The peer copy's CPU budget (--snapshot-peer-every 0), its bookkeeping alone: 1% of the time, a
 * generation costing 1.75 ms of CPU, one offered every 73 ms (0.73 ms saved up per offer). Any
 * may be left out: the 4th, 7th, 10th, ... go (never two in a row, no credit past one
 * generation's cost). The even ones must go (every rank's the same steps): all even ones go and
 * no odd one, the forced ones using up what is saved. A cheap one (0.5 ms: sums only) goes each
 * time after the first; an unknown cost (<= 0) always. */
static int budget_thins(void) {
    double tok = 0, t = NAN;
    int sent = 0, ok = 1, last = -9;
    for (int i = 1; i <= 30; i++) {
        int go = snap_peer_budget_take(&tok, &t, 1.0 + 0.073 * i, 0.01, 1.75e-3, 0);
        if (go) { ok &= i % 3 == 1 && i > 1 && i - last >= 3; last = i; sent++; }
    }
    ok &= sent == 9;
    tok = 0, t = NAN;
    for (int i = 1; i <= 30; i++) ok &= snap_peer_budget_take(&tok, &t, 1.0 + 0.073 * i, 0.01, 1.75e-3, i % 2 == 0) == (i % 2 == 0);
    tok = 0, t = NAN;
    for (int i = 1; i <= 30; i++) ok &= snap_peer_budget_take(&tok, &t, 1.0 + 0.073 * i, 0.01, 5e-4, i % 2 == 0) == (i > 1);
    tok = 0, t = NAN;
    for (int i = 1; i <= 5; i++) ok &= snap_peer_budget_take(&tok, &t, 1.0 + 0.073 * i, 0.01, 0, 0) == 1;
    return ok;
}

/* The budget in a run (ckpt_snap_peer_send_to's every 0): of 6 generations taken back to back,
 * the first goes (its cost unknown yet) and the even steps' must (one may replace another still
 * waiting: skipped), so the last, 6, is held at the peer; every one is sent, skipped or left out
 * (thinned), none lost from the count. How many odd ones
 * are thinned depends on the machine's speed: not checked. */
static int budget_run(const state *s) {
    char r2[200];
    ckpt_snap *a, *b;
    if (!pair_open("peerb", 0, &a, &b, r2, sizeof r2)) return 0;
    take(a, 0, &s[1], 1);
    int ok = peer_wait(b, 1) == 1;
    for (int g = 2; g <= 6; g++) take(a, 0, &s[g % 5], g);
    ckpt_snap_stats sa = {0};
    for (int i = 0; i < 1000 && sa.peer_sent + sa.peer_skipped + sa.peer_thinned + sa.peer_failed < 6; i++) {
        usleep(10000);   /* at most 10 s for the sender to pick up the last */
        ckpt_snap_get_stats(a, &sa);
    }
    ckpt_snap_stats sb = {0};   /* every one sent arrived (kept, or dropped: refilled while sent) */
    for (int i = 0; i < 1000 && sb.peer_received + sb.peer_dropped < sa.peer_sent; i++) {
        usleep(10000);
        ckpt_snap_get_stats(b, &sb);
    }
    ckpt_snap_close(a);
    ckpt_snap_close(b);
    char p[300];
    snprintf(p, sizeof p, "%s/rank-1/peer-0/gen-6", r2);
    return ok && sa.peer_sent >= 2 && sa.peer_sent + sa.peer_skipped + sa.peer_thinned + sa.peer_failed == 6 &&
           sb.peer_received + sb.peer_dropped == sa.peer_sent && (sb.peer_dropped || access(p, F_OK) == 0);
}

/* stderr into file path (fflushed) until stderr_back(saved); the saved descriptor. */
static int stderr_to(const char *path) {
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    close(fd);
    return saved;
}

/* stderr back, and the text the file got (at most n - 1 bytes) in text. */
static void stderr_back(int saved, const char *path, char *text, size_t n) {
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    FILE *f = fopen(path, "r");
    size_t k = f ? fread(text, 1, n - 1, f) : 0;
    if (f) fclose(f);
    text[k] = 0;
}

/* Waits (at most 10 s) until a has sent n generations to its peer; its stats. */
static ckpt_snap_stats sent_wait(ckpt_snap *a, long n) {
    ckpt_snap_stats st = {0};
    ckpt_snap_get_stats(a, &st);
    for (int i = 0; i < 1000 && st.peer_sent + st.peer_failed < n; i++) {
        usleep(10000);
        ckpt_snap_get_stats(a, &st);
    }
    return st;
}

/* Replicas under root/<name>: ranks 0 and 1 hold chunk 0 (rank 0 "on another host": its row
 * says 127.0.0.2), rank 2 chunk 1; the table routes rank 0 to rank 1, sums only (same key). */
static int twin_open(const char *name, ckpt_snap **a, ckpt_snap **b, ckpt_snap **c, char *r2, size_t n) {
    snprintf(r2, n, "%s/%s", root, name);
    uint32_t addr[2];
    int port[2];
    if (ckpt_snap_open(a, r2, 0, 3) < 0 || ckpt_snap_open(b, r2, 1, 3) < 0 || ckpt_snap_open(c, r2, 2, 3) < 0 ||
        ckpt_snap_peer_listen(*a, &addr[0], &port[0]) < 0 || ckpt_snap_peer_listen(*b, &addr[1], &port[1]) < 0) return -1;
    double t[9] = { 0x7f000002, port[0], 1, addr[1], port[1], 1, addr[1], 0, 2 };
    return ckpt_snap_peer_route(*a, t, 3, 0, 1, 1) == 1 ? 0 : -1;
}

/* Rank 0 and its replica rank 1 take the same state for steps 1 and 2 (rank 2 the other
 * chunk): rank 0 sends sums only (no file bytes), rank 1 keeps its snap.json with "files_at"
 * and no chunk file; rank 0 lost, the restore takes chunk 0 from rank 1 and loads bitwise. Then
 * rank 1's own file of step 2 damaged: the sums-only copy is refused with a message naming it,
 * and step 1 is restored (the next source), bitwise. */
static int twin_equal(const state *s) {
    char r2[200], p[400], ep[300], text[4096];
    ckpt_snap *a, *b, *c;
    if (twin_open("twin", &a, &b, &c, r2, sizeof r2) < 0) return 0;
    ckpt_snap_stats sa = {0}, sb;
    for (int g = 1; g <= 2; g++) {
        take(a, 0, &s[g], g);
        take(b, 0, &s[g], g);
        take(c, 1, &s[g], g);
        sa = sent_wait(a, g);
    }
    ckpt_snap_get_stats(b, &sb);   /* its count follows its answer: at most 10 s later */
    for (int i = 0; i < 1000 && sb.peer_received_sums < 2; i++) { usleep(10000); ckpt_snap_get_stats(b, &sb); }
    ckpt_snap_close(a);
    ckpt_snap_close(b);
    ckpt_snap_close(c);
    int ok = sa.peer_sums && sa.peer_sent == 2 && sa.peer_sums_only == 2 && sa.peer_payload_bytes == 0 &&
             sb.peer_received_sums == 2;
    if (!ok) printf("# sums only: sent %ld, sums %ld, bytes %.0f, received %ld\n", sa.peer_sent, sa.peer_sums_only,
                    sa.peer_payload_bytes, sb.peer_received_sums);
    snprintf(p, sizeof p, "%s/rank-1/peer-0/gen-2/snap.json", r2);
    ok &= access(p, F_OK) == 0;
    snprintf(p, sizeof p, "%s/rank-1/peer-0/gen-2/chunk-0.safetensors", r2);
    ok &= access(p, F_OK) != 0;
    ckpt_snap_found f;
    int skip[1] = { 0 };
    ok &= ckpt_snap_restore(r2, skip, 1, out, &f) == 1 && f.step == 2 && f.n_bad == 0 && restored_equals(&s[2]);
    snprintf(p, sizeof p, "%s/rank-1/gen-2/chunk-0.safetensors", r2);
    flip_byte(p);
    snprintf(ep, sizeof ep, "%s/twin.err", root);
    int saved = stderr_to(ep);
    int rc = ckpt_snap_restore(r2, skip, 1, out, &f);
    stderr_back(saved, ep, text, sizeof text);
    if (!strstr(text, "rank 0's generation 2 (sums only, kept at rank 1) does not match")) printf("# said: %s\n", text);
    return ok && rc == 1 && f.step == 1 && f.n_bad >= 2 && restored_equals(&s[1]) &&
           strstr(text, "rank 0's generation 2 (sums only, kept at rank 1) does not match");
}

/* The replica holds other bytes (rank 1 takes another state at step 1): rank 0's sums are
 * answered 'D', so it sends generation 1 whole and every later one too (said once); rank 0 lost
 * and rank 1's own chunk of step 2 damaged, the restore takes chunk 0 from the whole copy held
 * at rank 1, bitwise rank 0's state. */
static int twin_unequal(const state *s) {
    char r2[200], p[400], ep[300], text[4096];
    ckpt_snap *a, *b, *c;
    snprintf(ep, sizeof ep, "%s/twin2.err", root);
    int saved = stderr_to(ep);
    if (twin_open("twin2", &a, &b, &c, r2, sizeof r2) < 0) { stderr_back(saved, ep, text, sizeof text); return 0; }
    ckpt_snap_stats sa = {0}, sb;
    for (int g = 1; g <= 2; g++) {
        take(a, 0, &s[g + 1], g);
        take(b, 0, &s[g == 1 ? 4 : g + 1], g);   /* step 1 differs, step 2 the same again */
        take(c, 1, &s[g + 1], g);
        sa = sent_wait(a, g);
    }
    long want = 0;
    for (int i = 0; i < 400 && want < 2; i++) { ckpt_snap_get_stats(b, &sb); want = sb.peer_received; usleep(10000); }
    ckpt_snap_get_stats(b, &sb);
    ckpt_snap_close(a);
    ckpt_snap_close(b);
    ckpt_snap_close(c);
    stderr_back(saved, ep, text, sizeof text);
    const char *said = strstr(text, "holds other bytes at step 1");
    int ok = sa.peer_sent == 2 && sa.peer_sums_only == 0 && sa.peer_whole_after == 1 && sa.peer_payload_bytes > 0 &&
             sb.peer_received == 2 && sb.peer_received_sums == 0 && said && !strstr(said + 1, "holds other bytes");
    if (!ok) printf("# whole: sent %ld, sums %ld, after %ld, received %ld: %s\n", sa.peer_sent, sa.peer_sums_only,
                    sa.peer_whole_after, sb.peer_received, text);
    snprintf(p, sizeof p, "%s/rank-1/gen-2/chunk-0.safetensors", r2);
    flip_byte(p);
    ckpt_snap_found f;
    int skip[1] = { 0 };
    return ok && ckpt_snap_restore(r2, skip, 1, out, &f) == 1 && f.step == 2 && f.from_rank[0] == 0 &&
           restored_equals(&s[3]);
}

/* Rank `rank` (of world) takes chunk c of s as step `step` with its own state (a tensor of 64
 * floats that depend on rank and step) in the generation. */
static void take_state_of(ckpt_snap *sn, int c, const state *s, long step, int rank, int world) {
    static const int cf[3] = { 0, 3, 6 };
    static float x[64];
    ckpt_manifest man = { .cfg = CFG, .step = step, .adam_t = (int)step, .batch = 4, .seq = 8 };
    snprintf(man.data_path, sizeof man.data_path, "data.txt");
    ckpt_manifest_set_layout(&man, 2, 1, 2, 1, "1f1b", cf);
    ckpt_state st;
    memset(&st, 0, sizeof st);
    snprintf(st.sig, sizeof st.sig, "test");
    st.step = step;
    for (int i = 0; i < 64; i++) x[i] = (float)(rank * 1000 + step * 10 + i);
    ckpt_state_add(&st, "x", x, 64, 0);
    ckpt_snap_ready(sn);
    ckpt_snap_stage(sn, c, cf[c], cf[c + 1], &s->m, &s->opt);
    ckpt_snap_stage_state(sn, &st, world);
    ckpt_snap_commit(sn, &man);
}

static void take_state(ckpt_snap *sn, int c, const state *s, long step, int rank) {
    take_state_of(sn, c, s, step, rank, 3);
}

/* r set up to read a state written by take_state_of (its signature, one tensor "x" into x[64]). */
static void state_probe(ckpt_state *r, float *x) {
    memset(r, 0, sizeof *r);
    snprintf(r->sig, sizeof r->sig, "test");
    ckpt_state_add(r, "x", x, 64, 0);
}

/* Rank `rank`'s state in the restored folder: 1 when it is there and holds step `step`'s
 * values (take_state_of's), 0 when absent, -1 when it differs. */
static int restored_state(int rank, long step) {
    ckpt_state r;
    float x[64];
    char why[200] = "";
    state_probe(&r, x);
    int rc = ckpt_state_read(out, rank, &r, why, sizeof why);
    if (rc != 1) return rc == 0 ? 0 : -1;
    for (int i = 0; i < 64; i++)
        if (x[i] != (float)(rank * 1000 + step * 10 + i)) return -1;
    return r.step == step ? 1 : -1;
}

/* Ranks 0 and 1 of a 2-rank job, each with its own state, steps 1..3 written under root/name
 * (r2 gets the folder) and closed. 1, or 0 when a snapshot could not be opened. */
static int two_with_state(const state *s, const char *name, char *r2, size_t n) {
    ckpt_snap *a, *b;
    snprintf(r2, n, "%s/%s", root, name);
    if (ckpt_snap_open(&a, r2, 0, 3) < 0 || ckpt_snap_open(&b, r2, 1, 3) < 0) return 0;
    for (int g = 1; g <= 3; g++) {
        take_state_of(a, 0, &s[g], g, 0, 2);
        take_state_of(b, 1, &s[g], g, 1, 2);
    }
    ckpt_snap_close(a);
    ckpt_snap_close(b);
    return 1;
}

/* Two ranks with their own state, steps 1..3: step 3 restored with both states; rank 1's state
 * file of step 3 damaged: step 2 restored, with step 2's states (never a state that fails its
 * sum); rank 0's of steps 2 and 1 damaged too (no step has every rank's): the newest whole step
 * (3) without any state file (the documented fallback), saying why. */
static int state_damaged(const state *s) {
    char r2[200], p[400];
    if (!two_with_state(s, "stdmg", r2, sizeof r2)) return 0;
    ckpt_snap_found f;
    ckpt_manifest man;
    int ok = ckpt_snap_restore(r2, NULL, 0, out, &f) == 1 && f.step == 3 && restored_equals(&s[3]) &&
             restored_state(0, 3) == 1 && restored_state(1, 3) == 1;
    if (!ok) printf("# all good: step %ld\n", f.step);
    snprintf(p, sizeof p, "%s/rank-1/gen-3/state-1.safetensors", r2);
    flip_byte(p);
    int rc = ckpt_snap_restore(r2, NULL, 0, out, &f);
    int ok2 = rc == 1 && f.step == 2 && restored_equals(&s[2]) && restored_state(0, 2) == 1 &&
              restored_state(1, 2) == 1 && ckpt_read_manifest(&man, out) == 0 && man.n_states == 2;
    if (!ok2) printf("# rank 1's state of step 3 damaged: rc %d step %ld\n", rc, f.step);
    for (int g = 1; g <= 2; g++) {
        snprintf(p, sizeof p, "%s/rank-0/gen-%d/state-0.safetensors", r2, g);
        flip_byte(p);
    }
    char ep[300], text[2048];
    snprintf(ep, sizeof ep, "%s/stdmg.err", root);
    int saved = stderr_to(ep);
    rc = ckpt_snap_restore(r2, NULL, 0, out, &f);
    stderr_back(saved, ep, text, sizeof text);
    int ok3 = rc == 1 && f.step == 3 && restored_equals(&s[3]) && restored_state(0, 3) == 0 &&
              restored_state(1, 3) == 0 && ckpt_read_manifest(&man, out) == 0 && man.n_states == 0 &&
              strstr(text, "step 3 restored without the ranks' own state") != NULL;
    if (!ok3) printf("# no step with every state: rc %d step %ld, said: %s\n", rc, f.step, text);
    return ok && ok2 && ok3;
}

/* Sums only with each rank's own state in its generations: the chunk goes as its sum, the state
 * file whole (it is rank 0's alone); rank 0 lost, the restore has its chunk from rank 1's files
 * and its state from rank 1's sums-only copy, both as rank 0 had them. A sums-only copy whose
 * holder no longer keeps its own generation of the step is passed over without a word. */
static int twin_state(const state *s) {
    char r2[200];
    ckpt_snap *a, *b, *c;
    if (twin_open("twin4", &a, &b, &c, r2, sizeof r2) < 0) return 0;
    ckpt_snap_stats sa = {0}, sb;
    for (int g = 1; g <= 2; g++) {
        take_state(a, 0, &s[g], g, 0);
        take_state(b, 0, &s[g], g, 1);
        take_state(c, 1, &s[g], g, 2);
        sa = sent_wait(a, g);
    }
    ckpt_snap_get_stats(b, &sb);
    for (int i = 0; i < 1000 && sb.peer_received_sums < 2; i++) { usleep(10000); ckpt_snap_get_stats(b, &sb); }
    ckpt_snap_close(a);
    ckpt_snap_close(b);
    ckpt_snap_close(c);
    ckpt_snap_found f;
    int skip[1] = { 0 };
    ckpt_state r;
    float x[64];
    char why[200] = "";
    state_probe(&r, x);
    int ok = sa.peer_sums_only == 2 && sa.peer_payload_bytes > 0 && sa.peer_payload_bytes < 2 * 64 * 4 + 8192 &&
             ckpt_snap_restore(r2, skip, 1, out, &f) == 1 && f.step == 2 && restored_equals(&s[2]) &&
             ckpt_state_read(out, 0, &r, why, sizeof why) == 1 && r.step == 2;
    for (int i = 0; ok && i < 64; i++) ok = x[i] == (float)(2 * 10 + i);
    if (!ok) printf("# state: sums %ld, bytes %.0f, step %ld: %s\n", sa.peer_sums_only, sa.peer_payload_bytes, f.step, why);
    /* the holder's own step 1 gone and step 2's chunk 1 damaged (so step 1 is looked at): the
     * sums-only copy of step 1 is no generation, not a damaged one; nothing is complete */
    char p[400], ep[300], text[2048];
    snprintf(p, sizeof p, "rm -rf %s/rank-1/gen-1", r2);
    snprintf(ep, sizeof ep, "%s/rank-2/gen-2/chunk-1.safetensors", r2);
    flip_byte(ep);
    snprintf(ep, sizeof ep, "%s/twin4.err", root);
    int saved = stderr_to(ep);
    int rc = system(p) == 0 ? ckpt_snap_restore(r2, skip, 1, out, &f) : -1;
    stderr_back(saved, ep, text, sizeof text);
    if (rc != 0 || f.n_bad != 1 || text[0]) printf("# rc %d bad %d: %s\n", rc, f.n_bad, text);
    return ok && rc == 0 && f.n_bad == 1 && !text[0];
}

/* A replica that takes the sums and never answers (its host gone without a reset): closing the
 * sender does not wait out the answer's timeout (10 s). */
static int twin_silent(const state *s) {
    char r2[200];
    snprintf(r2, sizeof r2, "%s/twin3", root);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof sa;
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(lfd, 1) < 0 ||
        getsockname(lfd, (struct sockaddr *)&sa, &len) < 0) return 0;
    ckpt_snap *a;
    uint32_t addr;
    int port;
    if (ckpt_snap_open(&a, r2, 0, 3) < 0 || ckpt_snap_peer_listen(a, &addr, &port) < 0) return 0;
    double t[6] = { 0x7f000002, port, 1, INADDR_LOOPBACK, ntohs(sa.sin_port), 1 };
    if (ckpt_snap_peer_route(a, t, 2, 0, 1, 1) != 1) return 0;
    take(a, 0, &s[1], 1);
    int cfd = accept(lfd, NULL, NULL);   /* the sums arrive; no answer */
    usleep(200000);
    double t0 = pt_now();
    ckpt_snap_close(a);
    double took = pt_now() - t0;
    close(cfd);
    close(lfd);
    if (took >= 5) printf("# close took %.1f s\n", took);
    return cfd >= 0 && took < 5;
}

/* The checksum in pieces of any size equals the one-shot sum (lengths about the 256-byte block,
 * pieces across its edges), and a flipped bit anywhere (each lane, the high byte of a word, the
 * tail) changes it. */
static int sum_pieces(void) {
    enum { N = 5000 };
    static unsigned char b[N];
    static const size_t lens[] = { 0, 1, 7, 8, 255, 256, 257, 1000, 4097, N };
    static const size_t piece[] = { 1, 3, 64, 255, 256, 300, 1 << 12 };
    for (size_t i = 0; i < N; i++) b[i] = (unsigned char)(i * 131 + (i >> 7) * 17 + 5);
    for (size_t l = 0; l < sizeof lens / sizeof *lens; l++)
        for (size_t q = 0; q < sizeof piece / sizeof *piece; q++) {
            snap_sum s;
            snap_sum_init(&s);
            for (size_t o = 0, w; o < lens[l]; o += w) {
                w = lens[l] - o < piece[q] + o % 5 ? lens[l] - o : piece[q] + o % 5;
                snap_sum_add(&s, b + o, w);
            }
            if (snap_sum_end(&s) != snap_sum_mem(b, lens[l])) return 0;
        }
    uint64_t h = snap_sum_mem(b, N);
    for (size_t at = 0; at < N; at += at < 600 ? 7 : 397)
        for (int bit = 0; bit < 8; bit += 7) {
            b[at] ^= (unsigned char)(1u << bit);
            uint64_t g = snap_sum_mem(b, N);
            b[at] ^= (unsigned char)(1u << bit);
            if (g == h) return 0;
        }
    return 1;
}

/* A slot's fill sums the chunk file as it copies: the sum equals the file's, also after a refill
 * with other values. */
static int fill_summed(const state *s) {
    char d[200];
    snprintf(d, sizeof d, "%s/fill", root);
    if (mkdir(d, 0755) < 0) return 0;
    snap_slot sl = {0};
    int ok = snap_slot_prepare(&sl, d, 0) == 0;
    for (int k = 0; k < 2 && ok; k++)
        ok = snap_slot_fill(&sl, 0, 1, 2, 6, &s[k].m, &s[k].opt, 0, 1) == 0 && sl.f[0].summed &&
             sl.f[0].sum == snap_sum_mem(sl.f[0].map, sl.f[0].bytes);
    snap_slot_free(&sl);
    return ok;
}

/* The IN_OPEN events queued on inotify fd (non-blocking): opens[w][c] += the opens of
 * chunk-<c>.safetensors in the folder watched as wd[w]. */
static void opens_count(int fd, const int *wd, int nw, int opens[][2]) {
    char buf[8192] __attribute__((aligned(8)));
    ssize_t len;
    while ((len = read(fd, buf, sizeof buf)) > 0)
        for (char *q = buf; q < buf + len;) {
            const struct inotify_event *e = (const void *)q;
            for (int w = 0; w < nw; w++)
                for (int c = 0; c < 2; c++) {
                    char nm[32];
                    snprintf(nm, sizeof nm, "chunk-%d.safetensors", c);
                    opens[w][c] += e->wd == wd[w] && e->len && !strcmp(e->name, nm);
                }
            q += sizeof *e + e->len;
        }
}

/* Each chunk file read once by a restore (opened once: the copy is the check, was summed when the
 * step was chosen and read again to be copied), counted by inotify: two ranks with their state,
 * steps 1..3, step 3 restored bitwise with each of its chunk files opened once. Then rank 1's
 * chunk of step 3 damaged (a flipped byte): step 2 restored bitwise with its states, each of
 * step 2's chunk files opened once, the damaged one once, and nothing of step 3 left in it. */
static int chunk_read_once(const state *s) {
    char r2[200], p[400], gd[4][300];
    if (!two_with_state(s, "once", r2, sizeof r2)) return 0;
    int fd = inotify_init1(IN_NONBLOCK), wd[4], opens[4][2] = { { 0 } };
    if (fd < 0) { printf("# inotify: %s\n", strerror(errno)); return 0; }
    for (int w = 0; w < 4; w++) {   /* rank 0's and rank 1's step 3, then their step 2 */
        snprintf(gd[w], sizeof gd[w], "%s/rank-%d/gen-%d", r2, w & 1, 3 - w / 2);
        wd[w] = inotify_add_watch(fd, gd[w], IN_OPEN);
    }
    ckpt_snap_found f;
    int ok = ckpt_snap_restore(r2, NULL, 0, out, &f) == 1 && f.step == 3 && restored_equals(&s[3]) &&
             restored_state(0, 3) == 1 && restored_state(1, 3) == 1;
    opens_count(fd, wd, 4, opens);
    ok &= opens[0][0] == 1 && opens[1][1] == 1 && opens[2][0] + opens[3][1] == 0;
    if (!ok) printf("# all good: step %ld, step 3's chunks opened %d and %d times\n", f.step, opens[0][0], opens[1][1]);
    memset(opens, 0, sizeof opens);
    snprintf(p, sizeof p, "%s/chunk-1.safetensors", gd[1]);
    flip_byte(p);
    opens_count(fd, wd, 4, opens);   /* the flip's own open */
    memset(opens, 0, sizeof opens);
    int rc = ckpt_snap_restore(r2, NULL, 0, out, &f);
    opens_count(fd, wd, 4, opens);
    close(fd);
    snprintf(p, sizeof p, "%s/chunk-0.safetensors", out);
    struct stat sb;
    int ok2 = rc == 1 && f.step == 2 && f.n_bad == 1 && restored_equals(&s[2]) && restored_state(0, 2) == 1 &&
              restored_state(1, 2) == 1 && opens[1][1] == 1 && opens[0][0] <= 1 && opens[2][0] == 1 &&
              opens[3][1] == 1 && stat(p, &sb) == 0;
    if (!ok2) printf("# step 3's chunk 1 damaged: rc %d step %ld bad %d, opened: step 3 %d %d, step 2 %d %d\n", rc,
                     f.step, f.n_bad, opens[0][0], opens[1][1], opens[2][0], opens[3][1]);
    return ok && ok2;
}

/* --zero 1 with 1100 ranks' moment shards in the snapshots (more than the 1024 the manifest and
 * the restore once held): ranks 0 and 1 snapshot the two chunks' parameters, every rank r the
 * flat moments [N r / R, N (r+1) / R) cut at the tensors' edges as its shard; the restore
 * writes a checkpoint of 1100 shards whose parameters and moments load bitwise. */
static int zero_many_shards(const state *s) {
    enum { R = 1100 };
    char r2[200];
    snprintf(r2, sizeof r2, "%s/zeromany", root);
    ckpt_manifest man;
    if (zero_manifest(&man, R) < 0) return 0;
    int np = gpt_param_count(&s->m);
    ckpt_slice *sl = pt_malloc(sizeof *sl * (size_t)np);
    size_t N = s->m.num_params;
    int ok = 1;
    for (int r = 0; r < R && ok; r++) {
        size_t a = N * (size_t)r / R, b = N * (size_t)(r + 1) / R;
        int n = 0;
        for (int i = 0; i < np; i++) {
            const gpt_param_info *pi = gpt_param_info_at(&s->m, i);
            size_t lo = a > pi->offset ? a - pi->offset : 0, hi = b - pi->offset < pi->count ? b - pi->offset : pi->count;
            if (b > pi->offset && a < pi->offset + pi->count && hi > lo)
                sl[n++] = (ckpt_slice){ .name = pi->name, .start = lo, .n = hi - lo, .m = s->opt.m + pi->offset + lo,
                                        .v = s->opt.v + pi->offset + lo };
        }
        ckpt_snap *sn;
        ok = ckpt_snap_open(&sn, r2, r, 1) == 0;
        if (!ok) break;
        ckpt_snap_ready(sn);
        ok = (r > 1 || ckpt_snap_stage(sn, r, zero_cf[r], zero_cf[r + 1], &s->m, NULL) == 0) && ckpt_snap_stage_shard(sn, sl, n) == 0;
        ckpt_snap_commit(sn, &man);
        ok &= ckpt_snap_close(sn) == 0;
    }
    free(sl);
    ckpt_snap_found f;
    ckpt_manifest rm;
    state l;
    if (!ok || ckpt_snap_restore(r2, NULL, 0, out, &f) != 1 || f.step != 2 || ckpt_read_manifest(&rm, out) < 0 ||
        !rm.zero || rm.n_shards != R) return 0;
    gpt_init(&l.m, &CFG);
    adamw_init(&l.opt, l.m.num_params);
    ok = ckpt_load_layers(out, &rm, &l.m, &l.opt, 0, 6) == 0 && !memcmp(l.m.params, s->m.params, sizeof(float) * N) &&
         !memcmp(l.opt.m, s->opt.m, sizeof(float) * N) && !memcmp(l.opt.v, s->opt.v, sizeof(float) * N);
    gpt_free(&l.m);
    adamw_free(&l.opt);
    return ok;
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/pt_snapXXXXXX");
    if (!mkdtemp(root)) return 2;
    snprintf(out, sizeof out, "%s/restore", root);
    state s[5];
    for (int k = 0; k < 5; k++) {
        gpt_init(&s[k].m, &CFG);
        adamw_init(&s[k].opt, s[k].m.num_params);
        state_fill(&s[k], (uint64_t)k + 1);
    }
    ckpt_snap *a, *b;
    CHECK("open two ranks' snapshots", ckpt_snap_open(&a, root, 0, 3) == 0 && ckpt_snap_open(&b, root, 1, 3) == 0, "%s", pt_err());
    for (int step = 1; step <= 4; step++) {   /* steps 1..4 on rank 0, 1..3 on rank 1 */
        take(a, 0, &s[step], step);
        ckpt_snap_heartbeat(a, step);
        if (step < 4) take(b, 1, &s[step], step);
        ckpt_snap_close(a);   /* waits for the writer: each step written, none replaced */
        ckpt_snap_open(&a, root, 0, 3);
        ckpt_snap_close(b);
        ckpt_snap_open(&b, root, 1, 3);
    }
    long st, pid;
    double when;
    char host[65];
    CHECK("heartbeat read back", ckpt_snap_read_heartbeat(root, 0, &st, &pid, &when, host) == 0 && st == 4 &&
          pid == getpid(), "step %ld pid %ld", st, pid);
    char p[400];
    snprintf(p, sizeof p, "%s/rank-0/gen-1", root);
    CHECK("only the newest 3 generations kept", access(p, F_OK) != 0, "%s still there", p);
    ckpt_snap_found f;
    int rc = ckpt_snap_restore(root, NULL, 0, out, &f);
    CHECK("restore: step 3, the newest every chunk has (rank 1 is behind)", rc == 1 && f.step == 3 &&
          f.from_rank[0] == 0 && f.from_rank[1] == 1, "rc %d step %ld: %s", rc, f.step, pt_err());
    CHECK("the restored checkpoint loads bitwise the state of step 3", restored_equals(&s[3]), "differs");
    snprintf(p, sizeof p, "%s/rank-1/gen-3/chunk-1.safetensors", root);
    flip_byte(p);
    rc = ckpt_snap_restore(root, NULL, 0, out, &f);
    CHECK("a flipped byte: that generation skipped, step 2 restored", rc == 1 && f.step == 2 && f.n_bad == 1 &&
          restored_equals(&s[2]), "rc %d step %ld bad %d", rc, f.step, f.n_bad);
    snprintf(p, sizeof p, "%s/rank-1/gen-9.tmp.123", root);
    mkdir(p, 0755);
    rc = ckpt_snap_restore(root, NULL, 0, out, &f);
    CHECK("a half-written generation is not one", rc == 1 && f.step == 2, "step %ld", f.step);
    int skip[1] = { 1 };
    rc = ckpt_snap_restore(root, skip, 1, out, &f);
    CHECK("rank 1 lost: no step is complete, nothing restored", rc == 0 && f.step == 0, "rc %d step %ld", rc, f.step);
    ckpt_snap_reset(root, 2);
    snprintf(p, sizeof p, "%s/rank-0/gen-3", root);
    CHECK("reset to step 2: later generations and heartbeats gone", access(p, F_OK) != 0 &&
          ckpt_snap_read_heartbeat(root, 0, &st, &pid, &when, host) < 0, "%s", p);
    ckpt_snap_close(a);
    ckpt_snap_close(b);
    snprintf(p, sizeof p, "%s/many", root);
    mkdir(p, 0755);
    for (int g = 1; g <= 100; g++) {   /* more generations than a fixed list held, made in no order */
        char gd[450];
        snprintf(gd, sizeof gd, "%s/gen-%d", p, (g * 37) % 100 + 1);
        mkdir(gd, 0755);
    }
    long *steps;
    int ns = snap_list_gens(p, &steps);
    int sorted = ns == 100;
    for (int i = 0; sorted && i < ns; i++) sorted = steps[i] == 100 - i;
    CHECK("100 generations of a rank: all listed, newest first", sorted, "%d listed", ns);
    free(steps);
    CHECK("slots refilled in place over 6 steps: newest and older generations restore bitwise, 3 kept",
          slots_refilled(s), "no");
    CHECK("--zero 1: parameters and every rank's moment shard restored; a lost rank's shard: none", zero_shards(&s[2]),
          "%s", pt_err());
    CHECK("peer copy: rank 0's generation kept at rank 1, restored from there without rank 0's folder",
          peer_copied(s), "%s", pt_err());
    CHECK("peer copy of every 2nd generation: 2 and 4 of 1..4 held at the peer", peer_every_2(s), "no");
    CHECK("peer copy's CPU budget: every 3rd of a copy costing 1.75 ms at 1% of 73 ms steps, the even ones always",
          budget_thins(), "no");
    CHECK("peer copy within its CPU budget (every 0): the first and the even steps' go, each one counted",
          budget_run(s), "%s", pt_err());
    CHECK("sums only to a replica: no file bytes sent, restored from the replica's files bitwise; its damaged "
          "file refused with a message, the older step restored", twin_equal(s), "%s", pt_err());
    CHECK("sums only, the replica differs: said once, every generation sent whole from then, restored from that "
          "copy bitwise", twin_unequal(s), "%s", pt_err());
    CHECK("sums only with the ranks' own state: the state whole, restored from the replica's copy with the chunk",
          twin_state(s), "%s", pt_err());
    CHECK("a rank's state file damaged at the newest step: the older step restored with its states; damaged at "
          "every step: the newest whole step without state, said", state_damaged(s), "%s", pt_err());
    CHECK("sums only, the replica never answers: close does not wait for the answer's timeout", twin_silent(s),
          "%s", pt_err());
    CHECK("a writer error: said once at the next step boundary, returned at close", writer_error_said(&s[1]), "no");
    CHECK("the checksum in pieces of any size equals the one-shot sum; a flipped bit changes it", sum_pieces(), "no");
    CHECK("a slot's fill sums the chunk file as it copies (the file's sum, also refilled)", fill_summed(s), "no");
    CHECK("each chunk file read once by a restore (the copy is the check); one damaged at the newest step: the "
          "older step restored bitwise, each of its files read once", chunk_read_once(s), "%s", pt_err());
    CHECK("--zero 1 with 1100 ranks' moment shards: restored, parameters and moments load bitwise",
          zero_many_shards(&s[2]), "%s", pt_err());
    for (int k = 0; k < 5; k++) { gpt_free(&s[k].m); adamw_free(&s[k].opt); }
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    if (system(cmd) != 0) return 2;
    TEST_DONE();
}
