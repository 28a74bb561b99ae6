/* train --mem-limit SIZE (docs/seq-chunks.md "Under a memory limit"): a per-rank memory limit
 * in bytes. Before the first step each rank's predicted peak (the runtime's accounting of the
 * job, run_mem, through the planner's memory model plan_mem_need at the schedule's peak in
 * flight) is compared with the limit, and a layout that does not fit is refused naming the rank;
 * then the OS enforces it: RLIMIT_DATA of this process is its ranks' limits plus
 * TRAIN_MEMLIMIT_ALLOWANCE, so an allocation past it fails ("out of memory under --mem-limit").
 * A bare integer is not a SIZE: it stays --adapt's microbatch count (adapt/adapt.h). */
#ifndef PT_TRAIN_TRAIN_MEMLIMIT_H
#define PT_TRAIN_TRAIN_MEMLIMIT_H
#include "train/trainer.h"

/* What the program and runtime hold besides the ranks' priced bytes, per process: the binary and
 * libraries' data, the data set, OpenBLAS's per-thread buffers, Open MPI's private memory. */
#define TRAIN_MEMLIMIT_ALLOWANCE (768.0 * 1024 * 1024)

/* Whether text is a SIZE (a number, then letters ending in B: "2GiB", "12XB") rather than --adapt's
 * N or "schedule" (whose parser judges everything else): 1 or 0. */
int train_memlimit_is_size(const char *text);

/* text "512MiB", "2GiB", "1.5GB", "4096KiB", "100B" (binary KiB..TiB, decimal kB..TB, case
 * insensitive) into *bytes (> 0). Returns 0, or -1 with an error quoting text. */
int train_memlimit_parse(const char *text, double *bytes);

/* With o->mem_bytes > 0, after the engine started and before the first step: refuses (-1, the
 * error naming the rank, its stages, its predicted bytes, the limit, the asynchronous window's
 * share and what would fit: a smaller --async-window, ...) a layout whose rank does not fit, else
 * sets RLIMIT_DATA (limit x the process's ranks + the allowance) and prints one line on root
 * (0). A defaulted window (--async-window left out) that does not fit shrinks first to the
 * largest that is predicted to (run_mem.pass_mb; its note says so) and returns 1: the caller
 * starts the engine again under o.ro and calls this again (each time W is smaller). Every rank
 * decides the same. 0 also when there is nothing to do. */
int train_memlimit_apply(train_ctx *t);

#endif
