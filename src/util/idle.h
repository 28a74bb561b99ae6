/* Background threads on cores nothing else wants: Linux's SCHED_IDLE for one thread, and back to
 * the normal policy (at the thread's nice value) when something comes to wait for it. A thread at
 * SCHED_IDLE never preempts a normal one and is preempted by one waking at once, so its work fills
 * the cores' idle time (a pipeline's bubbles, a rank's waits) instead of coming out of the steps;
 * on a machine with no idle core it gets almost nothing, so whoever would wait for it hurries it
 * first (pt_idle_set(tid, 0)). Not here: which threads, and when they are hurried (the snapshots:
 * src/ckpt/snapshot*.c, src/train/trainer_recover.c). */
#ifndef PT_UTIL_IDLE_H
#define PT_UTIL_IDLE_H

/* 1 when a thread of this process can be put at SCHED_IDLE and taken back out again (leaving it
 * needs CAP_SYS_NICE or an RLIMIT_NICE that allows the thread's nice value: probed once, by a
 * throwaway thread), else 0: then callers keep their threads at the normal policy. The
 * environment's PIPETRAIN_NO_IDLE=1 makes it 0 (benchmarks that compare both ways). */
int pt_idle_available(void);

/* Whether background work should wait for idle cores now: 1 when the machine's cores were idle
 * for at least IDLE_MIN_FRAC of their time lately (/proc/stat, sampled at most every
 * IDLE_SAMPLE_S; 0 until two samples are there), and no hurry is being backed off from
 * (pt_idle_hurried: a core was not idle when that work was needed). On a loaded machine work at
 * SCHED_IDLE would come late each time; there it keeps its normal policy, as without this. Each
 * piece of background work asks before it starts. Always 0 where not available. */
int pt_idle_wanted(void);
/* Someone had to hurry a thread that waited for idle cores: background work keeps its normal
 * policy for the next IDLE_BACKOFF_MIN_S seconds, twice as long as the last back-off when it
 * comes within one back-off's length after the last one ended (up to IDLE_BACKOFF_MAX_S). */
void pt_idle_hurried(void);

/* The calling thread's id, for pt_idle_set from another thread. */
long pt_idle_tid(void);

/* Thread tid (0: the caller) at SCHED_IDLE (idle = 1) or at the normal policy (idle = 0). 0, or
 * -1 when not available or refused (the thread's policy unchanged). */
int pt_idle_set(long tid, int idle);

#endif
