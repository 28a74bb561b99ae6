/* SVG timeline writer: lays out ranks as rows, maps time to x, draws blocks, sub-row comm spans,
 * axis and legend. Colours follow the usual pipeline pictures: F blue, B teal-green, W orange,
 * BW between B and W; a stage's second chunk on the same rank is drawn lighter. */
#include "trace/svg.h"
#include "util/pt.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROW_H 26        /* compute row height, px */
#define COMM_H 10       /* comm sub-row height, px: sends on its upper half, receive waits below */
#define SIDE_H 8        /* side-work sub-row height, px (only when side work ran) */
#define SIDE_COLOUR "#e377c2"
#define ROW_GAP 8
#define LEFT 64         /* room for "rank 12" */
#define RIGHT 16
#define TOP 56          /* two title lines */
#define LABEL_MIN_W 11  /* narrowest block that gets its microbatch number, px */
#define TOOLTIP_MAX 20000   /* more events than this: no hover titles (file size) */

typedef struct {
    FILE *f;
    double x0, scale;   /* px = x0 + t * scale */
    int *chunk;         /* [S] index of stage g among its rank's stages (0, 1, ...) */
    int tooltips;
    int side_h;         /* SIDE_H when the timeline holds side work (TL_SIDE), else 0 */
} svg_ctx;

static const char *kind_colour(sched_kind k, int light) {
    switch (k) {
    case ACT_F: return light ? "#8fb3d9" : "#3b75af";
    case ACT_B: return light ? "#8fd3c0" : "#2a9d7f";
    case ACT_W: return light ? "#f7c48f" : "#ef8a2c";
    case ACT_BW: return light ? "#c4cf98" : "#8e9f45";
    case ACT_REDUCE_GRAD: return "#9b7bb5";
    case ACT_STEP: return "#444444";
    case ACT_SEND_F: case ACT_SEND_B: return "#555555";
    default: return "#e15759";      /* receive waits */
    }
}

static int row_y(const svg_ctx *c, int r) { return TOP + r * (ROW_H + COMM_H + c->side_h + ROW_GAP); }

static void chunk_index(const timeline *tl, int *chunk) {
    int *seen = pt_calloc((size_t)tl->n_ranks, sizeof(int));
    for (int g = 0; g < tl->n_stages; g++) chunk[g] = seen[tl->stage_rank[g]]++;
    free(seen);
}

static void draw_event(const svg_ctx *c, const tl_event *e) {
    double x = c->x0 + e->start * c->scale, w = (e->end - e->start) * c->scale;
    if (w <= 0) return;
    int y = row_y(c, e->rank), h = ROW_H;
    if (e->stream == TL_SIDE) {   /* side work in a bubble: its own sub-row under the comm row */
        fprintf(c->f, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\">", x,
                y + ROW_H + COMM_H, w, SIDE_H - 1, SIDE_COLOUR);
        if (c->tooltips)
            fprintf(c->f, "<title>rank %d side task %d: %.6g .. %.6g</title>", e->rank, e->act.mb, e->start, e->end);
        fprintf(c->f, "</rect>\n");
        return;
    }
    int light = e->act.stage >= 0 && c->chunk[e->act.stage] % 2 == 1;
    if (e->stream != TL_COMPUTE) { y += ROW_H + 1 + (e->stream == TL_RECV ? COMM_H / 2 : 0); h = COMM_H / 2 - 1; }
    if (e->stream == TL_RECV && e->act.kind != ACT_RECV_F && e->act.kind != ACT_RECV_B) return;
    fprintf(c->f, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"%s\"%s>", x, y, w, h,
            kind_colour(e->act.kind, light), e->stream == TL_COMPUTE ? " stroke=\"#fff\" stroke-width=\"0.5\"" : "");
    if (c->tooltips) {
        char name[48];
        sched_action_str(&e->act, name, sizeof name);
        fprintf(c->f, "<title>rank %d %s iter %d: %.6g .. %.6g</title>", e->rank, name, e->iter, e->start, e->end);
    }
    fprintf(c->f, "</rect>\n");
    if (e->stream == TL_COMPUTE && e->act.mb >= 0 && w >= LABEL_MIN_W)
        fprintf(c->f, "<text x=\"%.2f\" y=\"%d\" class=\"lbl\">%d</text>\n", x + w / 2, y + ROW_H / 2 + 4, e->act.mb);
}

/* Tick spacing 1, 2 or 5 times a power of ten giving about 10 ticks. */
static double tick_step(double span) {
    double raw = span / 10, p = pow(10, floor(log10(raw))), m = raw / p;
    return p * (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10);
}

static void draw_axis(const svg_ctx *c, int P, double t_end, int width) {
    int y = row_y(c, P) - ROW_GAP + 4;
    fprintf(c->f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#333\"/>\n", LEFT, y, width - RIGHT, y);
    double step = tick_step(t_end);
    for (double t = 0; t <= t_end * (1 + 1e-9); t += step) {
        double x = c->x0 + t * c->scale;
        fprintf(c->f, "<line x1=\"%.2f\" y1=\"%d\" x2=\"%.2f\" y2=\"%d\" stroke=\"#333\"/>", x, y, x, y + 4);
        fprintf(c->f, "<text x=\"%.2f\" y=\"%d\" class=\"ax\">%.4g</text>\n", x, y + 15, t);
    }
    fprintf(c->f, "<text x=\"%d\" y=\"%d\" class=\"ax\" text-anchor=\"end\">time</text>\n", width - RIGHT, y + 28);
}

static void draw_legend(const svg_ctx *c, int y) {
    static const struct { sched_kind k; const char *name; } items[] = {
        {ACT_F, "F forward"}, {ACT_B, "B input grad"}, {ACT_W, "W weight grad"}, {ACT_BW, "BW (B+W)"},
        {ACT_REDUCE_GRAD, "reduce grad"}, {ACT_STEP, "step"}, {ACT_SEND_F, "send"}, {ACT_RECV_F, "recv wait"},
    };
    int x = LEFT;
    for (size_t i = 0; i < sizeof items / sizeof items[0]; i++) {
        fprintf(c->f, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"12\" fill=\"%s\"/>", x, y, kind_colour(items[i].k, 0));
        fprintf(c->f, "<text x=\"%d\" y=\"%d\" class=\"leg\">%s</text>\n", x + 18, y + 10, items[i].name);
        x += 26 + 7 * (int)strlen(items[i].name);
    }
    fprintf(c->f, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"12\" fill=\"#ececec\" stroke=\"#ccc\"/>", x, y);
    fprintf(c->f, "<text x=\"%d\" y=\"%d\" class=\"leg\">idle</text>\n", x + 18, y + 10);
    if (c->side_h) {
        x += 26 + 7 * 4;
        fprintf(c->f, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"12\" fill=\"%s\"/>", x, y, SIDE_COLOUR);
        fprintf(c->f, "<text x=\"%d\" y=\"%d\" class=\"leg\">side task (in a bubble)</text>\n", x + 18, y + 10);
    }
    fprintf(c->f, "<text x=\"%d\" y=\"%d\" class=\"leg\">lighter shade: the rank's second (odd) model chunk; "
                  "thin row under each rank: sends (upper), receive waits (lower)%s</text>\n", LEFT, y + 28,
                  c->side_h ? "; pink row: side tasks" : "");
}

static void draw_rows(const svg_ctx *c, int P, double t_end) {
    for (int r = 0; r < P; r++) {
        int y = row_y(c, r);
        fprintf(c->f, "<text x=\"%d\" y=\"%d\" class=\"rk\">rank %d</text>\n", LEFT - 6, y + ROW_H / 2 + 4, r);
        fprintf(c->f, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"#ececec\"/>\n",
                c->x0, y, t_end * c->scale, ROW_H);
        fprintf(c->f, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"#f7f7f7\"/>\n",
                c->x0, y + ROW_H + 1, t_end * c->scale, COMM_H - 1);
        if (c->side_h)
            fprintf(c->f, "<rect x=\"%.2f\" y=\"%d\" width=\"%.2f\" height=\"%d\" fill=\"#fbf3f9\"/>\n",
                    c->x0, y + ROW_H + COMM_H, t_end * c->scale, SIDE_H - 1);
    }
}

static void write_body(const timeline *tl, const svg_opts *o, FILE *f) {
    int width = o && o->width > 0 ? o->width : 1400, P = tl->n_ranks;
    double t_end = timeline_end(tl);
    if (t_end <= 0) t_end = 1;
    svg_ctx c = { f, LEFT, (width - LEFT - RIGHT) / t_end, pt_malloc(sizeof(int) * (size_t)(tl->n_stages + 1)),
                  tl->n <= TOOLTIP_MAX, 0 };
    for (int i = 0; i < tl->n && !c.side_h; i++) c.side_h = tl->ev[i].stream == TL_SIDE ? SIDE_H : 0;
    int height = row_y(&c, P) + 80;
    chunk_index(tl, c.chunk);
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\">\n", width, height, width, height);
    fprintf(f, "<style>.lbl{font-size:10px;fill:#fff;text-anchor:middle}.rk{font-size:12px;text-anchor:end}"
               ".ax{font-size:10px;text-anchor:middle}.leg{font-size:11px}.t1{font-size:15px;font-weight:bold}"
               ".t2{font-size:12px;fill:#333}</style>\n");
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n");
    fprintf(f, "<text x=\"%d\" y=\"20\" class=\"t1\">%s</text>\n", LEFT, o && o->title ? o->title : tl->name);
    if (o && o->subtitle) fprintf(f, "<text x=\"%d\" y=\"40\" class=\"t2\">%s</text>\n", LEFT, o->subtitle);
    draw_rows(&c, P, t_end);
    for (int i = 0; i < tl->n; i++) draw_event(&c, &tl->ev[i]);
    draw_axis(&c, P, t_end, width);
    draw_legend(&c, row_y(&c, P) + 34);
    fprintf(f, "</svg>\n");
    free(c.chunk);
}

int svg_write(const timeline *tl, const svg_opts *o, const char *path) {
    FILE *f = fopen(path, "w");
    if (!f) return pt_seterr("svg %s: cannot open for writing: %s", path, strerror(errno));
    write_body(tl, o, f);
    int bad = ferror(f);
    if (fclose(f) || bad) return pt_seterr("svg %s: write failed: %s", path, strerror(errno));
    return 0;
}
