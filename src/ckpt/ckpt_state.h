/* A rank's own state beyond the chunk files: what an asynchronous schedule or a correction keeps
 * (2bw's older weight version, PipeMare's velocity, prediction's last step, the update count) and
 * DiLoCo's outer state (theta_start, the outer momentum, the weights a posted change was taken
 * from, and the replica's own weights and moments, which differ between replicas inside an
 * H-cycle). One file per world rank, "state-<rank>.safetensors", in a checkpoint folder (its size
 * and checksum in the manifest, ckpt_manifest_set_states) or a snapshot generation. Named 1-D F32
 * tensors, "state/nums" (I64: the step, the update count, whether an outer change was in flight)
 * and metadata: format, version, the layout it belongs to (sig). The rank is in the file's name
 * only, so a replica whose state is the same (data parallelism) holds the same bytes. Not here: what the state
 * means (src/run/exec_rankstate.c). */
#ifndef PT_CKPT_CKPT_STATE_H
#define PT_CKPT_CKPT_STATE_H
#include <stddef.h>

#define CKPT_STATE_ITEMS 128   /* tensors of one rank's state */
#define CKPT_STATE_SIG 256

/* One tensor: n floats at f. optional: may be absent from a file (found says whether it was). */
typedef struct {
    char name[40];
    float *f;
    size_t n;
    int optional, found;
} ckpt_state_item;

typedef struct {
    char sig[CKPT_STATE_SIG];   /* the layout the state belongs to (split, schedule, mode) */
    long step;                  /* the step it was taken after */
    long n_upd;                 /* the rank's optimizer updates since the job started */
    int pending;                /* --dp-sync: a change was posted and not yet applied */
    int n;
    ckpt_state_item it[CKPT_STATE_ITEMS];
} ckpt_state;

/* The in-place form (snapshots: a file made once per slot, refilled every generation, so its
 * bytes can be sent from the mapping): every item present (one with f NULL as zeros), the
 * numbers in the "state/nums" tensor. key: of the rank and s's sig, names and sizes. */
typedef struct {
    unsigned char *map;
    size_t bytes;
    size_t off[CKPT_STATE_ITEMS + 1];   /* each item's data, then the numbers' */
    int n;
    unsigned long long key;
} ckpt_state_file;

/* Adds item name (n floats at f) to s. -1 when s is full (a bug: CKPT_STATE_ITEMS). */
int ckpt_state_add(ckpt_state *s, const char *name, float *f, size_t n, int optional);
/* dir/state-<rank>.safetensors into out[n]. */
void ckpt_state_path(char *out, size_t n, const char *dir, int rank);
/* Writes s (items with f NULL left out) as dir/state-<rank>.safetensors, atomically. 0, or -1
 * naming the file. */
int ckpt_state_write(const char *dir, int rank, const ckpt_state *s);
/* Reads dir/state-<rank>.safetensors into s's items (each item's found set; its size must be the
 * item's n) and s->step, n_upd, pending. Returns 1 when read; 0 when the file is absent, or was
 * written under another layout (its sig differs from s->sig) or without a required item: why[nw]
 * says which, nothing is written into the items; -1 naming the file and field when the file is
 * damaged (truncated, a tensor of the wrong size, metadata missing). */
int ckpt_state_read(const char *dir, int rank, ckpt_state *s, char *why, size_t nw);

/* The key of s's layout as rank's file (ckpt_state_file.key). */
unsigned long long ckpt_state_key(int rank, const ckpt_state *s);
/* Creates path with s's layout for rank (header written, data zero) and maps it into *f. 0, or -1
 * naming the file. */
int ckpt_state_map(ckpt_state_file *f, const char *path, int rank, const ckpt_state *s);
/* s's items and numbers into f's mapping (laid out for s: ckpt_state_key equal). */
void ckpt_state_fill(ckpt_state_file *f, const ckpt_state *s);
/* Unmaps f (a zeroed f is fine). */
void ckpt_state_unmap(ckpt_state_file *f);

#endif
