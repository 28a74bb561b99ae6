/* A timeline: the start and end of every action on every rank, as predicted by the simulator or
 * measured by the runtime. Trace (trace/trace.h) and SVG (trace/svg.h) writers read only this type.
 * Not a scheduler and not a clock: it only stores events in the order they were added. */
#ifndef PT_TIMELINE_H
#define PT_TIMELINE_H
#include "sched/sched.h"

/* Where an event ran: the compute stream, the rank's outgoing / incoming communication, or side
 * work run in the rank's idle time (bubble harvesting, src/harvest). A TL_SIDE event is no
 * schedule action: act.kind = ACT_N_KINDS, act.stage = -1, act.mb = the side task's index. */
typedef enum { TL_COMPUTE, TL_SEND, TL_RECV, TL_SIDE, TL_N_STREAMS } tl_stream;

typedef struct {
    sched_action act;   /* stage, kind, mb (mb is the microbatch within its iteration) */
    int rank;           /* rank the event ran on */
    int iter;           /* iteration, from 0 */
    tl_stream stream;
    int peer;           /* SEND: destination rank, RECV: source rank, else -1 */
    int link;           /* SEND: index of the event that consumed the data (RECV or compute), or -1 */
    double ready;       /* when the rank reached the action (start - ready = time it waited) */
    double start, end;  /* seconds */
    double cpu;         /* TL_SIDE: CPU seconds the side work received in [start, end]; else 0 */
    double woke;        /* TL_SIDE: when the rank's thread, asleep in its wait while a side program
                         * ran, was woken by the arrival (the rank could not have gone on before
                         * that, side work or not); 0: the side work ran on the rank's thread */
} tl_event;

typedef struct {
    int n_ranks, n_stages, n_mb, n_iters;
    int *stage_rank;    /* [S] */
    double *act_bytes;  /* [S] bytes held per microbatch of stage g, or NULL (counts only) */
    tl_event *ev;       /* [n] events, in the order they were added */
    int n, cap;
    char name[32];      /* schedule name */
} timeline;

/* Initialises an empty timeline for a schedule's shape (copies stage_rank; act_bytes may be
 * NULL, else [S] is copied). Free with timeline_free. */
void timeline_init(timeline *tl, const sched *s, const double *act_bytes, int n_iters);
void timeline_free(timeline *tl);
/* Makes room for n events in all (no effect when there is room already). */
void timeline_reserve(timeline *tl, int n);
/* Appends one event; returns its index (events keep their index until free). */
int timeline_push(timeline *tl, const tl_event *e);
/* Latest end time over all events (0 for an empty timeline). */
double timeline_end(const timeline *tl);

#endif
