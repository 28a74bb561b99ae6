/* Chrome trace JSON ({"traceEvents":[...]}, opens in Perfetto and chrome://tracing) written from a
 * timeline, predicted (sim) or measured (run). Writing only; no reading, no analysis.
 *
 * pid = rank ("rank r"), tid 0 compute, 1 send, 2 recv, 3 side (only when side work ran: "side T"
 * spans of side task T in the rank's bubbles); "X" spans named like the action ("2F0")
 * with args stage, mb, kind, iter; flow arrows ("s"/"f", "bp":"e") from each send to the event
 * that consumed it; "C" counters of activations held per stage (and bytes per rank when the
 * timeline has act_bytes). Times in microseconds, timeline times taken as seconds. */
#ifndef PT_TRACE_H
#define PT_TRACE_H
#include "trace/timeline.h"
#include <stdio.h>

/* Writes the trace to path. Returns 0, or -1 with an error naming the path. */
int trace_write(const timeline *tl, const char *path);
/* Same to an open stream (not closed). Returns 0, or -1 on a write error. */
int trace_write_file(const timeline *tl, FILE *f);

#endif
