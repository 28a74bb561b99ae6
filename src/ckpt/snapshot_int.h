/* Inside the snapshots (src/ckpt/snapshot*.c only): folder and file helpers of snapshot_fs.c, and
 * the slots of snapshot_slot.c (a generation's folder of chunk files, mapped once and refilled in
 * place every generation after). */
#ifndef PT_CKPT_SNAPSHOT_INT_H
#define PT_CKPT_SNAPSHOT_INT_H
#include "ckpt/snapshot.h"
#include "ckpt/ckpt_state.h"
#include <stddef.h>
#include <stdint.h>

/* Removes folder dir and the files in it (one level: a generation); absent is fine. */
void snap_remove_dir(const char *dir);
/* Removes the "gen-*.tmp.*" folders of a rank folder (a writer that died mid-generation). */
void snap_clean_tmp(const char *rank_dir);
/* The steps of all the complete generations "gen-<step>" of a rank folder, newest first, in
 * *steps (allocated; free it, NULL when none); returns how many (0 when the folder is absent). */
int snap_list_gens(const char *rank_dir, long **steps);
/* The snapshots' 64-bit checksum ("sum64") of n bytes: 32 lanes of FNV-1a's step over 64-bit
 * words (lane k takes word k of each 256-byte block; each step followed by a shift-xor: a word
 * multiply alone would leave a changed high byte out of the low bits), folded with the length,
 * then the tail bytes. The lanes are independent multiply chains (four vectors of eight), so the
 * sum runs at about memory speed. One shot (snap_sum_mem) or in pieces of any size
 * (snap_sum_init, _add, _end: the same value), e.g. each piece of a copy right after it, while
 * its bytes are in the cache. */
#define SNAP_SUM_LANES 32
#define SNAP_SUM_BLOCK ((size_t)8 * SNAP_SUM_LANES)
typedef struct {
    uint64_t h[SNAP_SUM_LANES];
    uint64_t n;                             /* bytes added */
    unsigned char buf[SNAP_SUM_BLOCK];      /* a block not yet whole */
    int nb;
} snap_sum;
void snap_sum_init(snap_sum *s);
void snap_sum_add(snap_sum *s, const unsigned char *p, size_t n);
uint64_t snap_sum_end(const snap_sum *s);
uint64_t snap_sum_mem(const unsigned char *p, size_t n);
/* snap_sum_mem of a whole file, and its size; -1 naming it. */
int snap_file_sum(const char *path, uint64_t *hash, size_t *len);
/* File `from` copied to `to`, its sum taken over the bytes as they are copied (one read: the
 * copy is the check; snapshot_state.c): 0 when its size and sum are `bytes` and `sum`, 1 when not
 * or it cannot be read (`to` removed), -1 when `to` cannot be written (pt_err names it). */
int snap_copy_checked(const char *from, const char *to, size_t bytes, uint64_t sum);

/* One tensor's bytes to file offset `at`: in a chunk file from source `what` (0 parameters, 1
 * AdamW m, 2 v) at float `src`, or (--zero 1 under TP) from slice `src`'s m (what 3) or v (4)
 * at float `sub`; in a shard file from slice `src`'s m (what 0) or v (1). */
typedef struct {
    size_t at, src, bytes;
    int what;
    size_t sub;                 /* what 3 (m) or 4 (v): the first float of slice `src` it takes */
} snap_run;

enum { SNAP_FILE_CHUNK, SNAP_FILE_SHARD };

/* One file of a slot, mapped (MAP_SHARED) for the compute thread's copies: a chunk file
 * (parameters, and moments when has_optim) or a moment-shard file (--zero 1: chunk is then the
 * world rank whose slices it holds, sig a key of the slices). */
typedef struct {
    int kind, chunk, first, end, has_optim;
    int tp_rank, tp;            /* tensor parallelism: this TP rank's shard in the whole layout */
    int replica;                /* --zero 1 under TP: the replica whose moment slices it holds (-1: none) */
    size_t n_held;              /* the floats of the model it was laid out for */
    uint64_t sig;
    unsigned char *map;
    size_t bytes;
    snap_run *run;
    int n_run;
    int ordered;                /* runs in file order, none overlapping: the fill sums as it copies */
    int summed;                 /* sum is the file's sum64 as last filled (else the writer sums it) */
    uint64_t sum;
} snap_file;

/* A generation's folder and its chunk files. Its folder is "gen-<step>" while it holds a whole
 * generation (step > 0), else "gen-free-<i>.tmp.<pid>" (being filled: never read, removed by a
 * later process's snap_clean_tmp). */
typedef struct {
    char dir[1200];
    long step;
    int idx;
    snap_file f[CKPT_SNAP_PIECES];
    int n_f;
    ckpt_state_file st;         /* the rank's own state file, mapped (snapshot_state.c), or none */
} snap_slot;

/* Makes slot sl (number idx of rank folder rank_dir) ready to be filled: a whole generation it
 * held is renamed to its free name (no longer a generation), a slot never used gets its folder.
 * 0, or -1 naming the folder. */
int snap_slot_prepare(snap_slot *sl, const char *rank_dir, int idx);
/* Piece k of sl laid out for chunk `chunk` (layers [first, end) of m, with opt's moments unless
 * opt is NULL; m is TP rank tp_rank's shard model of tp, or whole when tp is 1): the file
 * already there when it matches, else (re)created (ckpt_chunk_writer's layout: whole tensors)
 * and mapped. Then copies m's parameters and opt's moments into it (a shard: into its places,
 * the other TP ranks' bytes left zero), summing the file piece by piece behind the copy (its
 * bytes still in the cache: one pass over memory; f->summed). 0, or -1 naming the file. */
int snap_slot_fill(snap_slot *sl, int k, int chunk, int first, int end, const gpt_model *m,
                   const adamw_state *opt, int tp_rank, int tp);
/* --zero 1 under tensor parallelism (the checkpoint keeps the moments in the chunk files then):
 * piece k of sl as snap_slot_fill's file of TP rank tp_rank, holding its parameters and, of the
 * moments, only the slices x[0..n) of its replica `replica` that fall in the chunk, each in its
 * place (the rest zero: the restore joins every rank's file of the chunk by OR). with_params 0:
 * the moment slices only (a chunk of another stage: a tied tensor's slices), m its table. */
int snap_slot_fill_slices(snap_slot *sl, int k, int chunk, int first, int end, const gpt_model *m,
                          int with_params, const ckpt_slice *x, int n, int tp_rank, int tp, int replica);
/* Piece k of sl as world rank `rank`'s moment-shard file of slices x[0..n) (ckpt_shard_writer's
 * layout; kept when the slices are the same), filled from them (and summed, as snap_slot_fill).
 * 0, or -1 naming the file. */
int snap_slot_fill_shard(snap_slot *sl, int k, int rank, const ckpt_slice *x, int n);
/* sl's folder renamed to "gen-<step>" under rank_dir (a folder of that name from another
 * process replaced). 0, or -1 naming it. */
int snap_slot_install(snap_slot *sl, const char *rank_dir, long step);
/* Off the compute path (the writer, after installing src): an unused slot dst (number idx) given
 * files laid out as src's, mapped and with their pages touched, so that the compute thread's
 * first fill of dst is only its copy. Does nothing to a slot in use. 0, or -1 naming the file
 * (dst left unused: the compute thread makes its files then). */
int snap_slot_clone(snap_slot *dst, const snap_slot *src, const char *rank_dir, int idx);
/* Unmaps sl's files (the folder stays). */
void snap_slot_free(snap_slot *sl);

/* ---- the ranks' own state (snapshot_state.c) ---- */
/* st (rank's, of a job of that layout) into slot sl's state file, made and mapped on first use
 * (or when the layout changed) and refilled in place after; *sum, *bytes: its sum64 and size.
 * 0, or -1 naming the file. */
int snap_state_fill(snap_slot *sl, int rank, const ckpt_state *st, uint64_t *sum, size_t *bytes);
/* The places the ranks' state files may be in, for one restore: each generation's snap.json is
 * read once (by the restore, which notes each here), not once per candidate step and rank. */
typedef struct snap_states snap_states;
struct cJSON;
/* An empty list for snapshot folder root. */
snap_states *snap_states_new(const char *root);
/* Notes generation folder gd of rank w's step `step` (own: the rank's own folder, tried before
 * the peers' copies, which are tried in the order noted) whose snap.json is j (its "state"
 * entry: world, bytes, sum64; nothing noted without one). */
void snap_states_note(snap_states *s, const char *gd, int w, long step, int own, const struct cJSON *j);
/* Whether every rank of `step` has a state file noted (nothing read: a cheap first test). */
int snap_states_listed(snap_states *s, long step);
/* Every rank's state file of `step` copied into tmpdir (rank folders left out are the ones never
 * noted), each checked against its size and sum as it is copied (one read of each; one that does
 * not check is removed and the rank's next place tried). Returns their count (the world) when
 * every rank's was copied good; 0 when some rank has none good (none left in tmpdir); -1 when
 * tmpdir cannot be written (pt_err names the file). The step's result is kept: asked again for
 * the same step and folder, it reads nothing; another step's files replace it. */
int snap_states_take(snap_states *s, long step, const char *tmpdir);
/* How often so far a rank's state of a step was listed but every copy of it failed its check
 * (size, sum, unreadable or gone). */
int snap_states_bad(const snap_states *s);
/* Removes the state files the last take left in its folder (a step not used). */
void snap_states_drop(snap_states *s);
void snap_states_free(snap_states *s);

/* ---- the peer copy (snapshot_peer.c) ---- */
typedef struct snap_peer snap_peer;
#define SNAP_PEER_FILES (CKPT_SNAP_PIECES + 1)   /* a generation's files: its pieces and the rank's state */
/* A file of a written generation, as the sender sends it: its name in the folder, its mapped
 * bytes (valid until the snapshot closes; refilled later: the sum catches a torn copy). */
typedef struct {
    char name[64];
    const unsigned char *map;
    size_t bytes;
    uint64_t sum;
    int whole;                  /* the rank's own (its state file): sent whole also to a replica */
} snap_peer_file;
typedef struct {
    int peer_rank;              /* where this rank's generations go (-1: nowhere) */
    long sent, skipped, failed; /* generations sent whole, replaced by a newer one while waiting, failed */
    long thinned;               /* left out to keep the copy within its CPU budget (snap_peer_budget) */
    double send_s, send_cpu_s;  /* seconds in the sender thread, CPU seconds it used */
    long received, dropped;     /* generations of other ranks kept here, dropped (a sum) */
    double recv_cpu_s;          /* CPU seconds the receivers used */
    long sums_only;             /* of sent: sums only, the replica there holding the same bytes */
    long whole_after;           /* sums only answered 'D' or 'U': sent whole after them */
    long received_sums;         /* of received: sums only, checked against this rank's own files */
    double payload_bytes;       /* file bytes sent */
} snap_peer_stats;
/* The peer side of rank `rank` whose folder is rank_dir. */
snap_peer *snap_peer_new(const char *rank_dir, int rank);
/* A TCP listener (any address, a free port) and its thread, which takes other ranks' generations
 * into rank_dir/peer-<origin>/gen-<step>/. *addr (host order): this host's first IPv4 address
 * that is not loopback. 0, or -1 naming the error. */
int snap_peer_listen(snap_peer *p, uint32_t *addr, int *port);
/* Starts the sender thread: each offered generation goes to addr:port (world rank peer_rank). */
int snap_peer_send_to(snap_peer *p, uint32_t addr, int port, int peer_rank);
/* snap_peer_send_to to the same stage's rank of another replica (it holds the same bytes): each
 * generation's sums only, the whole one where the peer's own differs (snapshot_peer.c). */
int snap_peer_sums_to(snap_peer *p, uint32_t addr, int port, int peer_rank);
/* The copy's CPU budget (--snapshot-peer-every 0, the default; before snap_peer_send_to): the
 * sender and its receiver together aim at `frac` of the wall time's CPU, so a generation that may
 * be left out (offered with must 0) and comes before its share has is left out (counted as
 * thinned); one offered with must 1 always goes, borrowing its share. The cost of one is the
 * sender's own CPU for the last of its kind (whole, sums only) times PEER_COPY_FACTOR (the
 * receiver's side, not seen here), corrected after it went; unknown at first: it goes. 0: every
 * generation. */
void snap_peer_budget(snap_peer *p, double frac);
/* The budget's bookkeeping, pure (tests): CPU seconds saved up as *tokens by the wall time since
 * *t (NAN: not started; frac a second, at most one generation's cost), spent when a generation
 * of estimated cost `cost` CPU seconds goes (must: whatever the tokens, which then may go as low
 * as -cost). 1: it goes, 0: left out. cost <= 0: goes. */
int snap_peer_budget_take(double *tokens, double *t, double now, double frac, double cost, int must);
/* The writer, after a generation is in place: hands it to the sender (json copied; f's maps
 * must stay mapped until snap_peer_free). Returns at once; one still waiting is replaced, but
 * not one that must go by one that may (must: see snap_peer_budget; then it is left out). */
void snap_peer_offer(snap_peer *p, long step, const char *json, const snap_peer_file *f, int n, int must);
/* The compute side, after this rank's own generation `step` is in place: wakes a receiver that
 * waits for it to compare a replica's sums (sums only). */
void snap_peer_own_written(snap_peer *p, long step);
void snap_peer_get_stats(snap_peer *p, snap_peer_stats *out);

/* Stops the threads (a send in progress finishes or times out), frees p (NULL is fine). */
void snap_peer_free(snap_peer *p);

#endif
