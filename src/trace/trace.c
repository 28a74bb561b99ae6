/* Chrome trace writer: metadata, spans, send-to-consumer flows and activation counters, written
 * with fprintf (traces reach millions of events; a DOM would only cost memory). Not a reader. */
#include "trace/trace.h"
#include "util/pt.h"
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define US_PER_S 1e6

/* The output stream and how many events went out (events are separated by ",\n"). */
typedef struct { FILE *f; long n; } trace_out;

static void sep(trace_out *o) {
    if (o->n++) fputs(",\n", o->f);
}

static const char *const stream_names[TL_N_STREAMS] = { "compute", "send", "recv", "side" };

/* Any side work (TL_SIDE): then each rank gets the side track too. */
static bool has_side(const timeline *tl) {
    for (int i = 0; i < tl->n; i++)
        if (tl->ev[i].stream == TL_SIDE) return true;
    return false;
}

static void write_metadata(const timeline *tl, trace_out *o) {
    FILE *f = o->f;
    int n_streams = has_side(tl) ? TL_N_STREAMS : TL_SIDE;
    for (int r = 0; r < tl->n_ranks; r++) {
        sep(o);
        fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}}", r, r);
        sep(o);
        fprintf(f, "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"args\":{\"sort_index\":%d}}", r, r);
        for (int t = 0; t < n_streams; t++) {
            sep(o);
            fprintf(f, "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}",
                    r, t, stream_names[t]);
        }
    }
}

/* A side task's work in a bubble: "side <task>" on the rank's side track. */
static void write_side_span(const tl_event *e, trace_out *o) {
    sep(o);
    fprintf(o->f, "{\"name\":\"side %d\",\"cat\":\"side\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,"
                  "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"task\":%d,\"iter\":%d}}", e->act.mb, e->rank,
            (int)TL_SIDE, e->start * US_PER_S, (e->end - e->start) * US_PER_S, e->act.mb, e->iter);
}

static void write_span(const tl_event *e, trace_out *o) {
    FILE *f = o->f;
    char name[48];
    if (e->stream == TL_SIDE) {
        write_side_span(e, o);
        return;
    }
    sched_action_str(&e->act, name, sizeof name);
    sep(o);
    fprintf(f, "{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
               "\"args\":{\"stage\":%d,\"mb\":%d,\"kind\":\"%s\",\"iter\":%d",
            name, sched_kind_name(e->act.kind), e->rank, (int)e->stream, e->start * US_PER_S,
            (e->end - e->start) * US_PER_S, e->act.stage, e->act.mb, sched_kind_name(e->act.kind), e->iter);
    if (e->peer >= 0) fprintf(f, ",\"peer\":%d", e->peer);
    if (e->start > e->ready) fprintf(f, ",\"waited_us\":%.3f", (e->start - e->ready) * US_PER_S);
    fprintf(f, "}}");
}

/* Flow from send event i to the event that consumed its data (id = i). */
static void write_flow(const timeline *tl, int i, trace_out *o) {
    FILE *f = o->f;
    const tl_event *s = &tl->ev[i], *d = &tl->ev[s->link];
    sep(o);
    fprintf(f, "{\"name\":\"%s\",\"cat\":\"flow\",\"ph\":\"s\",\"id\":%d,\"pid\":%d,\"tid\":%d,\"ts\":%.3f}",
            sched_kind_name(s->act.kind), i, s->rank, (int)s->stream, s->start * US_PER_S);
    sep(o);
    fprintf(f, "{\"name\":\"%s\",\"cat\":\"flow\",\"ph\":\"f\",\"bp\":\"e\",\"id\":%d,\"pid\":%d,\"tid\":%d,\"ts\":%.3f}",
            sched_kind_name(s->act.kind), i, d->rank, (int)d->stream, d->start * US_PER_S);
}

typedef struct { double t; int stage, delta; } mem_change;

/* Releases sort before acquisitions at the same instant (a W ending as the next F starts). */
static int cmp_change(const void *a, const void *b) {
    const mem_change *x = a, *y = b;
    if (x->t != y->t) return x->t < y->t ? -1 : 1;
    return x->delta - y->delta;
}

/* Activations held: +1 at each F start, -1 at each W or BW end, per stage, in time order. */
static void write_counters(const timeline *tl, trace_out *o) {
    FILE *f = o->f;
    mem_change *ch = pt_malloc(sizeof *ch * (size_t)(tl->n ? tl->n : 1));
    int n = 0;
    for (int i = 0; i < tl->n; i++) {
        const tl_event *e = &tl->ev[i];
        if (e->stream != TL_COMPUTE || e->act.stage < 0 || e->act.stage >= tl->n_stages) continue;
        if (e->act.kind == ACT_F) ch[n++] = (mem_change){ e->start, e->act.stage, +1 };
        if (e->act.kind == ACT_W || e->act.kind == ACT_BW) ch[n++] = (mem_change){ e->end, e->act.stage, -1 };
    }
    qsort(ch, (size_t)n, sizeof *ch, cmp_change);
    int *cnt = pt_calloc((size_t)tl->n_stages, sizeof(int));
    double *bytes = pt_calloc((size_t)tl->n_ranks, sizeof(double));
    bool any_bytes = false;
    for (int g = 0; tl->act_bytes && g < tl->n_stages; g++) any_bytes |= tl->act_bytes[g] > 0;
    for (int i = 0; i < n; i++) {
        int g = ch[i].stage, r = tl->stage_rank[g];
        cnt[g] += ch[i].delta;
        sep(o);
        fprintf(f, "{\"name\":\"activations stage %d\",\"ph\":\"C\",\"pid\":%d,\"ts\":%.3f,\"args\":{\"microbatches\":%d}}",
                g, r, ch[i].t * US_PER_S, cnt[g]);
        if (!any_bytes) continue;
        bytes[r] += ch[i].delta * tl->act_bytes[g];
        sep(o);
        fprintf(f, "{\"name\":\"activation bytes\",\"ph\":\"C\",\"pid\":%d,\"ts\":%.3f,\"args\":{\"bytes\":%.0f}}",
                r, ch[i].t * US_PER_S, bytes[r]);
    }
    free(ch); free(cnt); free(bytes);
}

int trace_write_file(const timeline *tl, FILE *f) {
    fprintf(f, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"schedule\":\"%s\",\"ranks\":%d,\"stages\":%d,"
               "\"microbatches\":%d,\"iterations\":%d},\n\"traceEvents\":[\n",
            tl->name, tl->n_ranks, tl->n_stages, tl->n_mb, tl->n_iters);
    trace_out o = { f, 0 };
    write_metadata(tl, &o);
    for (int i = 0; i < tl->n; i++) {
        write_span(&tl->ev[i], &o);
        if (tl->ev[i].stream == TL_SEND && tl->ev[i].link >= 0 && tl->ev[i].link < tl->n) write_flow(tl, i, &o);
    }
    write_counters(tl, &o);
    fprintf(f, "\n]}\n");
    return ferror(f) ? -1 : 0;
}

int trace_write(const timeline *tl, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) return pt_seterr("trace %s: cannot open for writing: %s", path, strerror(errno));
    int rc = trace_write_file(tl, f);
    if (fclose(f) || rc) return pt_seterr("trace %s: write failed: %s", path, strerror(errno));
    return 0;
}
