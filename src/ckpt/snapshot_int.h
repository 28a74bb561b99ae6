/* Inside the snapshots (src/ckpt/snapshot*.c only): folder and file helpers of snapshot_fs.c. */
#ifndef PT_CKPT_SNAPSHOT_INT_H
#define PT_CKPT_SNAPSHOT_INT_H
#include <stddef.h>
#include <stdint.h>

/* Removes folder dir and the files in it (one level: a generation); absent is fine. */
void snap_remove_dir(const char *dir);
/* Removes the "gen-*.tmp.*" folders of a rank folder (a writer that died mid-generation). */
void snap_clean_tmp(const char *rank_dir);
/* The steps of all the complete generations "gen-<step>" of a rank folder, newest first, in
 * *steps (allocated; free it, NULL when none); returns how many (0 when the folder is absent). */
int snap_list_gens(const char *rank_dir, long **steps);
/* A 64-bit checksum of a whole file and its size; -1 naming it. FNV-1a's step over 64-bit words
 * (each followed by a shift-xor), bytes for a tail: eight times fewer multiplies than the
 * manifest's byte-wise FNV-1a 64, which the writer, on a helper thread but sharing the cores,
 * would pay for every byte of every generation. */
int snap_file_sum(const char *path, uint64_t *hash, size_t *len);

#endif
