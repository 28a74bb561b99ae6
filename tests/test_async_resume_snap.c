/* Snapshots carry each rank's own state (ckpt_snap_stage_state, snapshot_state.c): two ranks'
 * generations with chunks and state files, restored into a checkpoint whose manifest lists
 * every rank's state file, bitwise; a rank that lost its folder (a lost host) still has its state
 * found in the peer's copy; a step where one rank's state is missing (a replica's rank a step
 * behind) gives way to the newest step where every rank's is; refilled generations hold the
 * newest state. The runs: tests/test_async_recover.sh. */
#include "test.h"
#include "ckpt/snapshot.h"
#include "ckpt/ckpt_state.h"
#include "util/pt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const gpt_config CFG = {.n_layer = 4, .n_head = 2, .n_embd = 16, .vocab_size = 64, .n_positions = 16};
enum { NS = 300 };
static char root[128], out[200];
static gpt_model model;
static adamw_state opt;
static float ver[3][NS];   /* each rank's state */

/* Rank r (chunk r % 2 of 2; rank 2: a replica of chunk 0) at step `step`: its chunk, and
 * (with_state) its state "2bw/older.0" of a job of `world` ranks. */
static void take_w(ckpt_snap *sn, int r, long step, int with_state, int world) {
    static const int cf[3] = { 0, 3, 6 };
    int c = r % 2;
    ckpt_manifest man = { .cfg = CFG, .step = step, .adam_t = (int)step, .batch = 4, .seq = 8 };
    snprintf(man.data_path, sizeof man.data_path, "data.txt");
    ckpt_manifest_set_layout(&man, 2, 1, 2, 1, "2bw", cf);
    for (int i = 0; i < NS; i++) ver[r][i] = (float)(step * 1000 + r * 100 + i);
    ckpt_state st = { .step = step, .n_upd = 2 * step };
    snprintf(st.sig, sizeof st.sig, "2bw P2 D1");
    ckpt_state_add(&st, "2bw/older.0", ver[r], NS, 0);
    ckpt_snap_ready(sn);
    ckpt_snap_stage(sn, c, cf[c], cf[c + 1], &model, &opt);
    if (with_state) ckpt_snap_stage_state(sn, &st, world);
    ckpt_snap_commit(sn, &man);
}

static void take(ckpt_snap *sn, int r, long step, int with_state) { take_w(sn, r, step, with_state, 2); }
static int state_is(int r, long step, int n_states);

/* Three ranks (rank 2 a replica of chunk 0) whose rank 2 is a step behind: step 3's chunks are
 * whole from ranks 0 and 1, but its state is not every rank's: the restore takes step 2, where
 * it is, rather than a step 3 without the state. */
static int lagging_replica(void) {
    char r3[200], cmd[700];
    ckpt_snap *s3[3];
    ckpt_snap_found f;
    snprintf(r3, sizeof r3, "%s-lag", root);
    for (int r = 0; r < 3; r++)
        if (ckpt_snap_open(&s3[r], r3, r, 2) < 0) return 0;
    for (long g = 1; g <= 3; g++)
        for (int r = 0; r < 3; r++)
            if (g < 3 || r < 2) take_w(s3[r], r, g, 1, 3);
    for (int r = 0; r < 3; r++) ckpt_snap_close(s3[r]);
    int rc = ckpt_snap_restore(r3, NULL, 0, out, &f);
    int ok = rc == 1 && f.step == 2 && state_is(0, 2, 3) && state_is(2, 2, 3);
    snprintf(cmd, sizeof cmd, "rm -rf %s", r3);
    if (system(cmd) != 0) { }
    return ok;
}

/* The restored folder's rank r state is step's (and its manifest lists n_states files). */
static int state_of(int r, long step, int n_states, int v);
static long peer_wait(ckpt_snap *b, long n);

/* Replicas that hold the same state (data parallelism): ranks 0 and 1 chunk 0, rank 2 chunk 1;
 * rank 0 ("on another host": its row says 127.0.0.2) sends its peer, replica rank 1, sums only
 * (its state file whole). Rank 0 lost: the restore takes its state from that copy, bitwise. */
static int twin_state(void) {
    static const int cf[3] = { 0, 3, 6 };
    char r2[200], cmd[700];
    ckpt_snap *sn[3];
    uint32_t addr[2];
    int port[2], skip[1] = { 0 };
    ckpt_snap_found f;
    snprintf(r2, sizeof r2, "%s-twin", root);
    for (int r = 0; r < 3; r++)
        if (ckpt_snap_open(&sn[r], r2, r, 3) < 0) return 0;
    if (ckpt_snap_peer_listen(sn[0], &addr[0], &port[0]) < 0 || ckpt_snap_peer_listen(sn[1], &addr[1], &port[1]) < 0)
        return 0;
    double t[9] = { 0x7f000002, port[0], 1, addr[1], port[1], 1, addr[1], 0, 2 };
    if (ckpt_snap_peer_route(sn[0], t, 3, 0, 1, 1) != 1) return 0;
    for (long g = 1; g <= 2; g++) {
        for (int r = 0; r < 3; r++) {
            int c = r == 2;
            ckpt_manifest man = { .cfg = CFG, .step = g, .adam_t = (int)g, .batch = 4, .seq = 8 };
            ckpt_manifest_set_layout(&man, 2, 2, 2, 1, "2bw", cf);
            for (int i = 0; i < NS; i++) ver[r][i] = (float)(g * 1000 + c * 100 + i);
            ckpt_state st = { .step = g, .n_upd = 2 * g };
            snprintf(st.sig, sizeof st.sig, "2bw P2 D1");
            ckpt_state_add(&st, "2bw/older.0", ver[r], NS, 0);
            ckpt_snap_ready(sn[r]);
            ckpt_snap_stage(sn[r], c, cf[c], cf[c + 1], &model, &opt);
            ckpt_snap_stage_state(sn[r], &st, 3);
            ckpt_snap_commit(sn[r], &man);
        }
        peer_wait(sn[1], g);
    }
    ckpt_snap_stats st0;
    ckpt_snap_get_stats(sn[0], &st0);
    for (int r = 0; r < 3; r++) ckpt_snap_close(sn[r]);
    snprintf(cmd, sizeof cmd, "rm -rf %s/rank-0", r2);
    if (system(cmd) != 0) { }
    int rc = ckpt_snap_restore(r2, skip, 1, out, &f);
    int ok = st0.peer_sums && st0.peer_sums_only == 2 && rc == 1 && f.step == 2 && state_of(0, 2, 3, 0) &&
             state_of(1, 2, 3, 0) && state_of(2, 2, 3, 1);
    if (!ok) printf("# sums %d, sums only %ld, rc %d, step %ld\n", st0.peer_sums, st0.peer_sums_only, rc, f.step);
    snprintf(cmd, sizeof cmd, "rm -rf %s", r2);
    if (system(cmd) != 0) { }
    return ok;
}

static int state_is(int r, long step, int n_states) { return state_of(r, step, n_states, r); }

/* The restored folder's rank r state is step's with values of v (and its manifest lists n_states files). */
static int state_of(int r, long step, int n_states, int v) {
    ckpt_manifest man;
    float got[NS];
    char why[600] = "";
    ckpt_state st = { 0 };
    snprintf(st.sig, sizeof st.sig, "2bw P2 D1");
    ckpt_state_add(&st, "2bw/older.0", got, NS, 0);
    if (ckpt_read_manifest(&man, out) < 0 || man.n_states != n_states) return 0;
    if (n_states == 0) return 1;
    if (ckpt_state_read(out, r, &st, why, sizeof why) != 1) return 0;
    for (int i = 0; i < NS; i++)
        if (got[i] != (float)(step * 1000 + v * 100 + i)) return 0;
    return st.step == step && st.n_upd == 2 * step;
}

/* Waits (at most 10 s) until b has received n peer copies; their count. */
static long peer_wait(ckpt_snap *b, long n) {
    ckpt_snap_stats st = { 0 };
    for (int i = 0; i < 1000 && st.peer_received < n; i++) {
        usleep(10000);
        ckpt_snap_get_stats(b, &st);
    }
    return st.peer_received;
}

int main(void) {
    snprintf(root, sizeof root, "/tmp/pt-snapstate-%d", (int)getpid());
    snprintf(out, sizeof out, "%s-out", root);
    gpt_init(&model, &CFG);
    gpt_init_random(&model, 5);
    adamw_init(&opt, model.num_params);
    ckpt_snap *a, *b;
    ckpt_snap_found f;
    uint32_t addr;
    int port, ok = ckpt_snap_open(&a, root, 0, 2) == 0 && ckpt_snap_open(&b, root, 1, 2) == 0 &&
                   ckpt_snap_peer_listen(b, &addr, &port) == 0 && ckpt_snap_peer_send_to(a, addr, port, 1, 1) == 0;
    CHECK("two ranks' snapshots open, rank 0's copied to rank 1", ok, "%s", pt_err());
    for (long g = 1; g <= 4; g++) {   /* the slots refilled in place: the newest kept */
        take(a, 0, g, 1);
        take(b, 1, g, g != 4);        /* step 4: rank 1 without its state */
        peer_wait(b, g);
    }
    CHECK("the peer received rank 0's generations", peer_wait(b, 4) == 4, "%ld", peer_wait(b, 4));
    int rc = ckpt_snap_restore(root, NULL, 0, out, &f);
    CHECK("a step where one rank's state is missing: the step before, with every rank's", rc == 1 && f.step == 3 &&
          state_is(0, 3, 2) && state_is(1, 3, 2),
          "rc %d step %ld: %s", rc, f.step, pt_err());
    char g4[300];
    snprintf(g4, sizeof g4, "%s/rank-1/gen-4", root);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s %s/rank-0/gen-4", g4, root);   /* back to step 3 */
    if (system(cmd) != 0) { /* the checks below say it */ }
    snprintf(cmd, sizeof cmd, "rm -rf %s/rank-1/peer-0/gen-4", root);
    if (system(cmd) != 0) { }
    rc = ckpt_snap_restore(root, NULL, 0, out, &f);
    CHECK("every rank's state restored with the chunks, bitwise, listed in the manifest", rc == 1 && f.step == 3 &&
          state_is(0, 3, 2) && state_is(1, 3, 2), "rc %d step %ld: %s", rc, f.step, pt_err());
    int skip[1] = { 0 };
    snprintf(cmd, sizeof cmd, "rm -rf %s/rank-0", root);   /* rank 0's host lost */
    if (system(cmd) != 0) { }
    rc = ckpt_snap_restore(root, skip, 1, out, &f);
    CHECK("a lost rank's state found in the peer's copy", rc == 1 && f.step == 3 && state_is(0, 3, 2) && state_is(1, 3, 2),
          "rc %d step %ld: %s", rc, f.step, pt_err());
    ckpt_snap_close(a);
    ckpt_snap_close(b);
    CHECK("a replica's rank a step behind: the newest step with every rank's state restored",
          lagging_replica(), "%s", pt_err());
    CHECK("replicas: sums only to the replica (the state whole), a lost rank's state restored from there",
          twin_state(), "%s", pt_err());
    snprintf(cmd, sizeof cmd, "rm -rf %s %s", root, out);
    if (system(cmd) != 0) { }
    gpt_free(&model);
    adamw_free(&opt);
    TEST_DONE();
}
