/* Fault injection for recovery tests: `--kill-at RANK@STEP[:PHASE]` makes world rank RANK kill
 * itself with SIGKILL at the first action of PHASE (forward, reduce, save) of optimizer step
 * STEP, as a process killed from outside would die (no handler runs, nothing is flushed). Under
 * the threads transport every rank is a thread of one process, so the whole process dies: the
 * case of a `kill -9` of the job. Not here: who acts on the death (src/launch).
 *
 * The table is process-wide, filled before the run starts (the CLI) and read-only afterwards, so
 * every rank thread may call pt_killat_point at any time. */
#ifndef PT_UTIL_KILLAT_H
#define PT_UTIL_KILLAT_H

typedef enum { PT_KILL_FORWARD, PT_KILL_REDUCE, PT_KILL_SAVE, PT_KILL_PHASES } pt_kill_phase;

#define PT_KILLAT_MAX 16    /* --kill-at flags per run */

/* Parses "RANK@STEP[:PHASE]" (RANK >= 0, STEP >= 1, PHASE forward | reduce | save, default
 * forward) and adds it to the table. -1 with an error naming the flag and what is wrong. */
int pt_killat_add(const char *spec);
/* Empties the table (tests). */
void pt_killat_clear(void);
/* After the world shrank in place (train --recycle): the kill of rank old_of_new[i] becomes rank
 * i's; the kills of ranks not listed are dropped (their processes left the job). */
void pt_killat_renumber(const int *old_of_new, int n);
/* How many kills are set; *max_rank gets the largest RANK among them (-1: none; may be NULL),
 * *max_step the largest STEP (may be NULL), for checks against the layout and --steps. */
int pt_killat_count(int *max_rank, long *max_step);
/* 1 when some kill is set for this phase (any rank, any step): lets a caller refuse a phase
 * its layout never reaches. */
int pt_killat_has_phase(pt_kill_phase ph);
/* At the first action of phase ph of step `step` on world rank `rank`: when a kill matches,
 * prints "kill-at: rank R, step S, PHASE: SIGKILL" on stderr and raises SIGKILL (does not
 * return). Otherwise returns at once (one load and compare when the table is empty). */
void pt_killat_point(int rank, long step, pt_kill_phase ph);
/* "forward", "reduce", "save". */
const char *pt_killat_phase_name(pt_kill_phase ph);

#endif
