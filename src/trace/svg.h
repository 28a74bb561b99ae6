/* SVG timeline of a timeline (predicted or measured): one row per rank, F/B/W/BW blocks in their
 * colours with the microbatch inside when wide enough, idle time as grey background, sends and
 * receive waits on a thin sub-row, side work in bubbles on another (only when there is any), a
 * legend and a time axis. Drawing only; no analysis. */
#ifndef PT_SVG_H
#define PT_SVG_H
#include "trace/timeline.h"

typedef struct {
    const char *title;      /* first line of the title (e.g. "1f1b  P=4  M=8"), may be NULL */
    const char *subtitle;   /* second line (e.g. "iteration 33  bubble 27.3%"), may be NULL */
    int width;              /* picture width in pixels, 0 means 1400 */
} svg_opts;

/* Writes the picture to path. Returns 0, or -1 with an error naming the path. */
int svg_write(const timeline *tl, const svg_opts *o, const char *path);

#endif
