/* Snapshots: checkpoints kept in memory that outlives the process (a folder under /dev/shm), one
 * per rank, taken at a step boundary (one copy into files mapped once, summed on the way; a
 * helper thread sends it to a peer), so a job that loses a rank restarts at most K steps back. A snapshot is the checkpoint format of checkpoint.h:
 * each rank's generation folder holds the chunk files of the chunks it holds (parameters and
 * AdamW moments, Hugging Face names) and a snap.json naming its step, layout and each file's
 * bytes and 64-bit checksum ("sum64", snapshot_int.h). ckpt_snap_restore puts together, from every rank's folders, a
 * checkpoint folder (manifest.json and chunk files) of the newest step that every chunk can be
 * found at, which `train --resume` loads under any layout.
 * Not here: when to take one and what ranks hold (src/train), who restarts (src/launch).
 *
 *   ROOT/rank-<w>/gen-<step>/chunk-<c>.safetensors   the chunks rank w holds at that step
 *   ROOT/rank-<w>/gen-<step>/optim-<w>.safetensors   --zero 1: its moment slices (chunks then
 *                                                    hold parameters only)
 *   ROOT/rank-<w>/gen-<step>/snap.json               {"format":"pipetrain-snapshot", ...}
 *   ROOT/rank-<w>/heartbeat                          "<step> <pid> <unix time> <host>", each step
 *
 * A generation is written under "gen-<step>.tmp.<pid>" and renamed when complete (with its
 * checksums inside): under its real name it is whole, and a checksum mismatch (memory or a file
 * changed since) makes the restore skip it. Each rank keeps its newest `keep` generations. */
#ifndef PT_CKPT_SNAPSHOT_H
#define PT_CKPT_SNAPSHOT_H
#include "ckpt/checkpoint.h"
#include "ckpt/ckpt_state.h"
#include "model/gpt.h"
#include "optim/optim.h"

#define CKPT_SNAP_PIECES 8      /* chunks one rank may hold (interleaved and two-pipe layouts) */

typedef struct ckpt_snap ckpt_snap;

/* What a rank's snapshots cost and did so far. */
typedef struct {
    long taken;             /* generations handed to the writer */
    long waits;             /* boundaries at which the compute path waited for the writer */
    double wait_s;          /* seconds it waited there */
    long written;           /* generations renamed into place */
    double copy_s;          /* seconds on the compute path (the copies into the slots' files with
                             * their sums, snap.json, the rename) */
    double first_copy_s;    /* of which the first generation's (it makes and maps the files) */
    double write_s;         /* seconds in the writer thread (wall: the peer offer, the next slot) */
    double write_cpu_s;     /* CPU seconds the writer thread used */
    long last_step;         /* the newest generation written (0: none) */
    int peer_rank;          /* the rank its generations are copied to (-1: none) */
    long peer_thinned;                          /* left out within the copy's CPU budget */
    long peer_sent, peer_skipped, peer_failed;  /* generations sent whole, skipped (a newer one
                                                 * came while sending), failed */
    long peer_received, peer_dropped;           /* other ranks' generations kept here, dropped */
    double peer_send_s, peer_send_cpu_s;        /* the sender's seconds and CPU seconds */
    double peer_recv_cpu_s;                     /* the receivers' CPU seconds */
    int peer_sums;                              /* the peer is a replica: sums only while equal */
    long peer_sums_only, peer_whole_after;      /* of sent: sums only; whole after the replica's
                                                 * own differed or was not there */
    long peer_received_sums;                    /* of received: sums only, checked here */
    double peer_payload_bytes;                  /* file bytes sent */
} ckpt_snap_stats;

/* Opens world rank `rank`'s snapshots under root (created; a crashed writer's "gen-*.tmp.*"
 * folders removed) keeping the newest `keep` (>= 1) generations, and starts its writer thread.
 * 0, or -1 naming the folder. */
int ckpt_snap_open(ckpt_snap **out, const char *root, int rank, int keep);
/* At a step boundary, on the compute thread, before staging a generation: waits while the writer
 * thread is still at the previous one (its peer offer and the next slot's files; time counted in
 * stats.wait_s), so the slot to fill is the compute thread's alone. A writer faster than the
 * interval never makes a step wait. Says a writer error on stderr once (at the first boundary
 * after it). Returns 1. */
int ckpt_snap_ready(ckpt_snap *s);
/* After ckpt_snap_ready: copies chunk `chunk` (layers [first, end)) of m's parameters and
 * opt's moments (laid out like m->params; opt->n == m->n_held) into the generation's chunk file
 * (mapped, refilled in place: snapshot_int.h's slots): m may change or go once this returns. Up
 * to CKPT_SNAP_PIECES chunks per generation. 0, or -1 naming what does not fit; a file that
 * cannot be made is the writer's kind of error (said at the next boundary, this generation not
 * handed over, 0 returned: the run goes on). */
int ckpt_snap_stage(ckpt_snap *s, int chunk, int first, int end, const gpt_model *m,
                    const adamw_state *opt);
/* ckpt_snap_stage of TP rank tp_rank's shard (of tp) of chunk `chunk`: m is the rank's shard
 * model, opt laid out like it. The file has the whole tensors' layout with this rank's elements
 * in their places and the rest zero (a replicated tensor: TP rank 0's); the restore joins the
 * TP ranks' files of a chunk. The generation's manifest says tp. */
int ckpt_snap_stage_tp(ckpt_snap *s, int chunk, int first, int end, const gpt_model *m,
                       const adamw_state *opt, int tp_rank, int tp);
/* --zero 1 under tensor parallelism (the checkpoint keeps the moments in the chunk files then):
 * ckpt_snap_stage_tp's file of TP rank tp_rank with m's parameters and, of the moments, the
 * slices x[0..n) (run_exec_moment_slices', TP-shard indices) of replica `replica` that fall in
 * the chunk, in their places (the rest zero); with_params 0: the slices only (a chunk of a stage
 * the rank does not hold, whose tied tensor's slices it updates; m gives the table). The
 * restore needs every rank's generation (`world` ranks) and joins all files of a chunk.
 * 0, or -1 as ckpt_snap_stage. */
int ckpt_snap_stage_slices(ckpt_snap *s, int chunk, int first, int end, const gpt_model *m, int with_params,
                           const ckpt_slice *x, int n, int tp_rank, int tp, int replica, int world);
/* After ckpt_snap_ready, with --zero 1 (chunks staged with opt NULL: parameters only): this
 * rank's AdamW moment slices sl[0..n) (run_exec_moment_slices'), as the checkpoint's shard file
 * of its world rank (ckpt_write_shard's layout). The generation's manifest then says the
 * shards (ckpt_manifest_set_shards). 0, or -1 as ckpt_snap_stage. */
int ckpt_snap_stage_shard(ckpt_snap *s, const ckpt_slice *sl, int n);
/* After ckpt_snap_ready: the rank's own state st (ckpt/ckpt_state.h) of a job of `world` ranks
 * as the generation's "state-<rank>.safetensors" (a file of the slot, mapped once and refilled in
 * place, summed here; snap.json names it; the peer copy carries it, whole also to a replica that
 * gets sums only), put into the restored checkpoint when every rank's is found
 * (snapshot_state.c). A file that cannot be made is the writer's kind of error. 0. */
int ckpt_snap_stage_state(ckpt_snap *s, const ckpt_state *st, int world);
/* Makes the staged chunks generation man->step (man: config, step, adam_t, batch, seq, seeds,
 * data, layout with chunk ranges: ckpt_manifest_set_layout's) on the calling thread: their sums
 * (taken by the copies), snap.json, the folder renamed into place, so the generation is whole
 * when this returns (its cost counted in stats.copy_s); then hands it to the writer thread
 * (idle after ckpt_snap_ready) for the peer copy and the next slot. An error is said at the next
 * boundary (the run goes on). */
void ckpt_snap_commit(ckpt_snap *s, const ckpt_manifest *man);
/* The peer copy (snapshot_peer.c: whole where no replica on another host holds this rank's
 * state, else the sums only, checked against the replica's own). Starts s's receiver: other
 * ranks' generations (or their sums, with "files_at" the holder) are kept under
 * ROOT/rank-<w>/peer-<origin>/gen-<step>/ (the restore reads them as the origin's). *addr (IPv4,
 * host order) and *port: where others reach it. 0, or -1 naming the error. */
int ckpt_snap_peer_listen(ckpt_snap *s, uint32_t *addr, int *port);
/* From now on every `every`-th generation s writes (every >= 1: the every-th, 2 every-th, ...
 * from here; every < 1: those of even steps and the others whose share of a CPU budget has
 * come, 1% of the wall time for the copy's CPU at both ends; generations one step apart) is also sent to addr:port (world rank
 * peer_rank), by a thread of its own, off the compute path and off the writer's (a newer
 * generation replaces one still waiting). */
int ckpt_snap_peer_send_to(ckpt_snap *s, uint32_t addr, int port, int peer_rank, int every);
/* The peer chosen from every rank's row of table[3 * R] (after ckpt_snap_peer_listen and a sum
 * over the world): row q = (IPv4 address, port (0: not listening), key). The key says which
 * ranks hold the same bytes (data-parallel replicas of one stage without --zero 1: the same key
 * > 0; 0: nobody). Rank me sends to the first rank after it (world order, wrapping) on another
 * host with its key: sums only (snapshot_peer.c; whole where they differ); with none, to the
 * first rank after it on another host, whole; all on one host: to nobody. every as
 * ckpt_snap_peer_send_to, interval the run's snapshot interval K (every < 1: the generations of
 * even multiples of K always go, the same steps on every rank). Returns the peer's rank (-1: none), or
 * -2 naming the error. */
int ckpt_snap_peer_route(ckpt_snap *s, const double *table, int R, int me, int every, int interval);
/* Writes "<step> <pid> <unix time> <host name>" into the rank's heartbeat file (in place, a few bytes): the
 * supervisor's sign that the rank goes on. */
void ckpt_snap_heartbeat(ckpt_snap *s, long step);
void ckpt_snap_get_stats(ckpt_snap *s, ckpt_snap_stats *out);
/* Waits for the generation being written, stops the writer, frees s (NULL is fine). Returns 0, or
 * -1 with the writer's first error (a failed generation is left as a temporary folder). */
int ckpt_snap_close(ckpt_snap *s);

/* ---- restore ---------------------------------------------------------------------------- */

/* What ckpt_snap_restore found. */
typedef struct {
    long step;              /* the step restored (0: none complete) */
    int from_rank[CKPT_MAX_CHUNKS];   /* chunk c is rank from_rank[c]'s (its folder, or a peer copy of it) */
    int n_chunks;
    int n_bad;              /* generations skipped as damaged (checksum, size, unreadable) */
} ckpt_snap_found;

/* Looks through root/rank-* for the newest step at which every chunk of the model (one layout's
 * chunk ranges, tiling all layers) is in some rank's generation with a good checksum, and writes
 * the checkpoint folder `dir` from those files (copied; manifest.json as ckpt_commit writes it;
 * an existing dir replaced). Ranks listed in skip[0..n_skip) are not used (a host that died
 * took its memory with it). Returns 1 with *found filled, 0 when no step is complete (dir not
 * touched), -1 naming the file or folder on failure. */
int ckpt_snap_restore(const char *root, const int *skip, int n_skip, const char *dir,
                      ckpt_snap_found *found);
/* The heartbeat of rank `rank` under root: its step, pid, unix time and host name (host: at
 * least 64 bytes, may be NULL). 0, or -1 when absent or unreadable. */
int ckpt_snap_read_heartbeat(const char *root, int rank, long *step, long *pid, double *when, char *host);
/* A rank's mark that its run ended whole (every output written; only the transport's end is left):
 * set marks ROOT/rank-<rank>/finished (set = 0 removes it, at the start of a run), finished says
 * whether it is there. launch ends an in-place job whose ranks are all marked without waiting out
 * MPI_Finalize's hold (a lost peer). */
void ckpt_snap_mark_finished(const char *root, int rank, int set);
int ckpt_snap_finished(const char *root, int rank);
/* Before a restart from step `step`: removes every rank's heartbeat under root, and the
 * generations after `step` (a future the restarted run computes again, maybe under another
 * layout: never to be mixed with its own). */
void ckpt_snap_reset(const char *root, long step);

#endif
