/* The schedule IR: allocation, editing, the text form of actions ("2F0", "1SEND_B3", "STEP"),
 * the printed grid and CSV read/write. Not the validator (sched_validate.c), not lowering
 * (sched_lower.c), not generators (sched_gen*.c). Legend: P ranks, S stages, M microbatches. */
#include "sched/sched.h"
#include "util/pt.h"
#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[ACT_N_KINDS] = {
    "F", "B", "W", "BW", "SEND_F", "RECV_F", "SEND_B", "RECV_B", "REDUCE_GRAD", "STEP",
};

/* ---- allocation and editing ---- */

sched *sched_new(int n_ranks, int n_stages, int n_pipes, int n_mb) {
    sched *s = pt_calloc(1, sizeof *s);
    s->n_ranks = n_ranks;
    s->n_stages = n_stages;
    s->n_pipes = n_pipes > 0 ? n_pipes : 1;
    s->stages_per_pipe = n_stages / s->n_pipes;
    s->n_mb = n_mb;
    s->seq_chunks = 1;
    s->stage_rank = pt_calloc((size_t)n_stages, sizeof(int));
    for (int g = 0; g < n_stages; g++) s->stage_rank[g] = n_ranks > 0 ? g % n_ranks : 0;
    s->mb_pipe = pt_calloc((size_t)n_mb, sizeof(int));
    s->len = pt_calloc((size_t)n_ranks, sizeof(int));
    s->cap = pt_calloc((size_t)n_ranks, sizeof(int));
    s->acts = pt_calloc((size_t)n_ranks, sizeof(sched_action *));
    return s;
}

void sched_free(sched *s) {
    if (!s) return;
    for (int r = 0; r < s->n_ranks; r++) free(s->acts[r]);
    free(s->acts);
    free(s->cap);
    free(s->len);
    free(s->mb_pipe);
    free(s->stage_rank);
    free(s);
}

void sched_push(sched *s, int rank, sched_kind kind, int stage, int mb) {
    if (s->len[rank] == s->cap[rank]) {
        int cap = s->cap[rank] ? 2 * s->cap[rank] : 16;
        sched_action *a = pt_malloc((size_t)cap * sizeof *a);
        if (s->len[rank]) memcpy(a, s->acts[rank], (size_t)s->len[rank] * sizeof *a);
        free(s->acts[rank]);
        s->acts[rank] = a;
        s->cap[rank] = cap;
    }
    s->acts[rank][s->len[rank]++] = (sched_action){ .stage = stage, .mb = mb, .kind = kind };
    if (sched_kind_is_comm(kind)) s->lowered = true;
}

sched *sched_copy(const sched *s) {
    sched *c = sched_new(s->n_ranks, s->n_stages, s->n_pipes, s->n_mb);
    c->stages_per_pipe = s->stages_per_pipe;
    memcpy(c->stage_rank, s->stage_rank, (size_t)s->n_stages * sizeof(int));
    memcpy(c->mb_pipe, s->mb_pipe, (size_t)s->n_mb * sizeof(int));
    for (int r = 0; r < s->n_ranks; r++)
        for (int i = 0; i < s->len[r]; i++) {
            const sched_action *a = &s->acts[r][i];
            sched_push(c, r, a->kind, a->stage, a->mb);
        }
    c->lowered = s->lowered;
    c->async = s->async;
    c->weight_versions = s->weight_versions;
    c->seq_chunks = s->seq_chunks;
    memcpy(c->name, s->name, sizeof c->name);
    return c;
}

bool sched_kind_is_compute(sched_kind k) { return k == ACT_F || k == ACT_B || k == ACT_W || k == ACT_BW; }

bool sched_kind_is_comm(sched_kind k) {
    return k == ACT_SEND_F || k == ACT_RECV_F || k == ACT_SEND_B || k == ACT_RECV_B;
}

long sched_total_actions(const sched *s) {
    long n = 0;
    for (int r = 0; r < s->n_ranks; r++) n += s->len[r];
    return n;
}

/* ---- text form of one action ---- */

const char *sched_kind_name(sched_kind k) {
    return (k >= 0 && k < ACT_N_KINDS) ? kind_names[k] : "?";
}

char *sched_action_str(const sched_action *a, char *buf, int n) {
    if (a->kind == ACT_STEP) snprintf(buf, (size_t)n, "STEP");
    else if (a->kind == ACT_REDUCE_GRAD) snprintf(buf, (size_t)n, "%dREDUCE_GRAD", a->stage);
    else snprintf(buf, (size_t)n, "%d%s%d", a->stage, sched_kind_name(a->kind), a->mb);
    return buf;
}

/* Reads a non-negative decimal at *p (advancing it); -1 if there is none or it overflows. */
#define SCHED_MAX_INDEX 100000000   /* stages and microbatches above this are surely a typo */

/* A non-negative number at *p: -1 when there is none, -2 when it exceeds SCHED_MAX_INDEX. */
static int parse_uint(const char **p) {
    if (!isdigit((unsigned char)**p)) return -1;
    long v = 0;
    while (isdigit((unsigned char)**p)) {
        v = v * 10 + (**p - '0');
        if (v > SCHED_MAX_INDEX) return -2;
        (*p)++;
    }
    return (int)v;
}

/* Kind from its name (letters and '_' only); "I" is torch's name for B. -1 when unknown. */
static int kind_from_name(const char *name, size_t n) {
    if (n == 1 && name[0] == 'I') return ACT_B;
    for (int k = 0; k < ACT_N_KINDS; k++)
        if (strlen(kind_names[k]) == n && memcmp(kind_names[k], name, n) == 0) return k;
    return -1;
}

int sched_action_parse(const char *tok, sched_action *out) {
    const char *p = tok;
    if (strcmp(tok, "STEP") == 0) {
        *out = (sched_action){ .stage = -1, .mb = -1, .kind = ACT_STEP };
        return 0;
    }
    int stage = parse_uint(&p);
    if (stage == -2) return pt_seterr("bad action '%s': stage above %d", tok, SCHED_MAX_INDEX);
    const char *k0 = p;
    while (isupper((unsigned char)*p) || *p == '_') p++;
    int kind = kind_from_name(k0, (size_t)(p - k0));
    if (stage < 0 || kind < 0 || kind == ACT_STEP)
        return pt_seterr("bad action '%s' (expected <stage><kind><mb> like 2F0, 1SEND_B3, 0REDUCE_GRAD "
                         "or STEP)", tok);
    int mb = -1;
    if (kind != ACT_REDUCE_GRAD && (mb = parse_uint(&p)) == -2)
        return pt_seterr("bad action '%s': microbatch above %d", tok, SCHED_MAX_INDEX);
    if (kind != ACT_REDUCE_GRAD && mb < 0)
        return pt_seterr("bad action '%s': missing microbatch after %s", tok, kind_names[kind]);
    if (*p) return pt_seterr("bad action '%s': unexpected '%s' at the end", tok, p);
    *out = (sched_action){ .stage = stage, .mb = mb, .kind = (sched_kind)kind };
    return 0;
}

/* ---- the printed grid ---- */

void sched_print(const sched *s, FILE *f) {
    char buf[48];
    for (int r = 0; r < s->n_ranks; r++) {
        fprintf(f, "rank %d:", r);
        for (int i = 0; i < s->len[r]; i++) fprintf(f, " %s", sched_action_str(&s->acts[r][i], buf, sizeof buf));
        fputc('\n', f);
    }
}

/* Appends printf output to buf at *used, never past n-1 bytes. */
static void grid_append(char *buf, int n, int *used, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void grid_append(char *buf, int n, int *used, const char *fmt, ...) {
    if (*used >= n - 1) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *used, (size_t)(n - *used), fmt, ap);
    va_end(ap);
    if (k > 0) *used = *used + k < n - 1 ? *used + k : n - 1;
}

/* Widest cell text in columns [c0, c1] of ranks [r0, r1]. */
static int grid_width(const sched *s, int r0, int r1, int c0, int c1) {
    char tmp[48];
    int w = 1;
    for (int r = r0; r <= r1; r++)
        for (int i = c0; i <= c1 && i < s->len[r]; i++) {
            int k = (int)strlen(sched_action_str(&s->acts[r][i], tmp, sizeof tmp));
            if (k > w) w = k;
        }
    return w;
}

char *sched_format_grid(const sched *s, int mark_rank, int mark_step, int half, char *buf, int n) {
    int used = 0, mr = mark_rank < 0 ? 0 : mark_rank, ms = mark_step < 0 ? 0 : mark_step;
    int r0 = mr - 3 < 0 ? 0 : mr - 3, r1 = r0 + 7 < s->n_ranks - 1 ? r0 + 7 : s->n_ranks - 1;
    int c0 = ms - half < 0 ? 0 : ms - half, c1 = c0 + 2 * half;
    int w = grid_width(s, r0, r1, c0, c1), digits = snprintf(NULL, 0, "%d", r1 > 0 ? r1 : 0);
    char tmp[48];
    buf[0] = 0;
    if (r0 > 0) grid_append(buf, n, &used, "  ... ranks 0-%d\n", r0 - 1);
    for (int r = r0; r <= r1; r++) {
        grid_append(buf, n, &used, "  rank %*d:%s", digits, r, c0 > 0 ? " ..." : "");
        for (int i = c0; i <= c1 && i < s->len[r]; i++) {
            const char *t = sched_action_str(&s->acts[r][i], tmp, sizeof tmp);
            int pad = w - (int)strlen(t);
            if (r == mark_rank && i == mark_step) grid_append(buf, n, &used, " [%s]%*s", t, pad, "");
            else grid_append(buf, n, &used, "  %s %*s", t, pad, "");
        }
        if (mark_rank == r && mark_step >= s->len[r]) grid_append(buf, n, &used, " [end]");
        grid_append(buf, n, &used, "%s\n", c1 < s->len[r] - 1 ? " ..." : "");
    }
    if (r1 < s->n_ranks - 1) grid_append(buf, n, &used, "  ... ranks %d-%d\n", r1 + 1, s->n_ranks - 1);
    return buf;
}

/* ---- CSV ---- */

void sched_write_csv(const sched *s, FILE *f) {
    char buf[48];
    for (int r = 0; r < s->n_ranks; r++) {
        for (int i = 0; i < s->len[r]; i++)
            fprintf(f, "%s%s", i ? "," : "", sched_action_str(&s->acts[r][i], buf, sizeof buf));
        fputc('\n', f);
    }
}

/* One parsed cell with its source position, kept until the shape is known. */
typedef struct { sched_action a; int rank, line, col; } csv_cell;

typedef struct {
    csv_cell *cells;
    int n, cap, n_rows;
    const char *where;
    bool text;              /* the printed grid: "rank r:" then cells split by spaces */
} csv_doc;

static void csv_add(csv_doc *d, csv_cell c) {
    if (d->n == d->cap) {
        d->cap = d->cap ? 2 * d->cap : 64;
        csv_cell *nc = pt_malloc((size_t)d->cap * sizeof *nc);
        if (d->n) memcpy(nc, d->cells, (size_t)d->n * sizeof *nc);
        free(d->cells);
        d->cells = nc;
    }
    d->cells[d->n++] = c;
}

/* Trims spaces and tabs at both ends of [b, e) in place; returns the new start, *e moved. */
static char *csv_trim(char *b, char **e) {
    while (b < *e && (*b == ' ' || *b == '\t' || *b == '\r')) b++;
    while (*e > b && ((*e)[-1] == ' ' || (*e)[-1] == '\t' || (*e)[-1] == '\r')) (*e)--;
    **e = 0;
    return b;
}

/* Parses one non-blank row (NUL-terminated, modified in place) as rank d->n_rows. */
/* Parses one cell; empty cells are idle slots. */
static int csv_parse_cell(csv_doc *d, char *tok, int line, int col) {
    if (!*tok) return 0;
    csv_cell cell = { .rank = d->n_rows, .line = line, .col = col };
    if (sched_action_parse(tok, &cell.a) < 0) return pt_adderr("%s:%d:%d: ", d->where, line, col);
    csv_add(d, cell);
    return 0;
}

/* Grid form: skips the "rank r:" label (r must be the row's rank); returns the rest or NULL. */
static char *text_skip_label(csv_doc *d, char *row, int line) {
    if (strncmp(row, "rank", 4) != 0) return row;
    char *colon = strchr(row, ':'), *endp;
    long r = strtol(row + 4, &endp, 10);
    if (!colon || endp != colon || r != d->n_rows) {
        pt_seterr("%s:%d: bad row label (expected 'rank %d:')", d->where, line, d->n_rows);
        return NULL;
    }
    return colon + 1;
}

/* Parses one non-blank row (NUL-terminated, modified in place) as rank d->n_rows. */
static int csv_parse_row(csv_doc *d, char *row, int line) {
    int col = 1;
    if (d->text) {
        if (!(row = text_skip_label(d, row, line))) return -1;
        char *save = NULL;
        for (char *tok = strtok_r(row, " \t\r", &save); tok; tok = strtok_r(NULL, " \t\r", &save), col++)
            if (csv_parse_cell(d, tok, line, col) < 0) return -1;
        d->n_rows++;
        return 0;
    }
    for (char *c = row;; col++) {
        char *e = strchr(c, ',');
        char *end = e ? e : c + strlen(c);
        if (csv_parse_cell(d, csv_trim(c, &end), line, col) < 0) return -1;
        if (!e) break;
        c = e + 1;
    }
    d->n_rows++;
    return 0;
}

/* Splits text into rows and parses each; blank lines and '#' lines are not ranks. */
static int csv_parse_rows(csv_doc *d, char *text) {
    int line = 1;
    for (char *p = text; *p; line++) {
        char *nl = strchr(p, '\n');
        if (nl) *nl = 0;
        char *end = p + strlen(p);
        char *row = csv_trim(p, &end);
        if (*row && *row != '#' && csv_parse_row(d, row, line) < 0) return -1;
        if (!nl) break;
        p = nl + 1;
    }
    if (d->n_rows == 0) return pt_seterr("%s: no rows (a schedule needs one row per rank)", d->where);
    return 0;
}

/* Sizes (stages, microbatches) as 1 + the largest ids seen. */
static void csv_extent(const csv_doc *d, int *n_stages, int *n_mb) {
    *n_stages = 0;
    *n_mb = 0;
    for (int i = 0; i < d->n; i++) {
        if (d->cells[i].a.stage + 1 > *n_stages) *n_stages = d->cells[i].a.stage + 1;
        if (d->cells[i].a.mb + 1 > *n_mb) *n_mb = d->cells[i].a.mb + 1;
    }
}

/* Infers stage_rank (each stage on one rank) and mb_pipe (each mb in one pipe). */
static int csv_infer_maps(const csv_doc *d, sched *s) {
    int *seen = pt_malloc((size_t)(s->n_stages + s->n_mb) * sizeof(int)), *mbp = seen + s->n_stages;
    for (int i = 0; i < s->n_stages + s->n_mb; i++) seen[i] = -1;
    int rc = 0;
    for (int i = 0; i < d->n && rc == 0; i++) {
        const csv_cell *c = &d->cells[i];
        int g = c->a.stage, mb = c->a.mb;
        if (g < 0) continue;
        if (seen[g] >= 0 && seen[g] != c->rank)
            rc = pt_seterr("%s:%d:%d: stage %d appears on ranks %d and %d", d->where, c->line, c->col,
                           g, seen[g], c->rank);
        seen[g] = c->rank;
        int pipe = g / s->stages_per_pipe;
        if (rc == 0 && mb >= 0 && mbp[mb] >= 0 && mbp[mb] != pipe)
            rc = pt_seterr("%s:%d:%d: microbatch %d runs in pipes %d and %d", d->where, c->line, c->col,
                           mb, mbp[mb], pipe);
        if (mb >= 0) mbp[mb] = pipe;
    }
    for (int g = 0; g < s->n_stages && rc == 0; g++)
        if (seen[g] < 0) rc = pt_seterr("%s: stage %d appears in no row (stages must be 0..%d)",
                                        d->where, g, s->n_stages - 1);
    for (int g = 0; g < s->n_stages && rc == 0; g++) s->stage_rank[g] = seen[g];
    for (int mb = 0; mb < s->n_mb && rc == 0; mb++) s->mb_pipe[mb] = mbp[mb] < 0 ? 0 : mbp[mb];
    free(seen);
    return rc;
}

/* Builds the schedule from parsed cells; async when some rank has more than one STEP. */
static sched *csv_build(const csv_doc *d, int n_pipes) {
    int n_stages, n_mb;
    csv_extent(d, &n_stages, &n_mb);
    if (n_pipes < 1) n_pipes = 1;
    if (n_stages % n_pipes != 0) {
        pt_seterr("%s: %d stages do not split into %d pipes", d->where, n_stages, n_pipes);
        return NULL;
    }
    sched *s = sched_new(d->n_rows, n_stages, n_pipes, n_mb);
    snprintf(s->name, sizeof s->name, "csv");
    if (csv_infer_maps(d, s) < 0) {
        sched_free(s);
        return NULL;
    }
    int *steps = pt_calloc((size_t)d->n_rows, sizeof(int));
    for (int i = 0; i < d->n; i++) {
        const csv_cell *c = &d->cells[i];
        sched_push(s, c->rank, c->a.kind, c->a.stage, c->a.mb);
        if (c->a.kind == ACT_STEP && ++steps[c->rank] > 1) s->async = true;
    }
    free(steps);
    return s;
}

/* Shared loader of both forms. */
static sched *parse_rows(const char *text, const char *where, int n_pipes, bool grid) {
    csv_doc d = { .where = where ? where : "schedule", .text = grid };
    char *copy = pt_strdup(text);
    sched *s = NULL;
    if (csv_parse_rows(&d, copy) == 0) s = csv_build(&d, n_pipes);
    free(copy);
    free(d.cells);
    return s;
}

sched *sched_parse_csv(const char *text, const char *where, int n_pipes) {
    return parse_rows(text, where, n_pipes, false);
}

sched *sched_parse_text(const char *text, const char *where, int n_pipes) {
    return parse_rows(text, where, n_pipes, true);
}

sched *sched_read_csv(const char *path, int n_pipes) {
    size_t len;
    char *text = pt_read_file(path, &len);
    if (!text) return NULL;
    if (strlen(text) != len) {
        free(text);
        pt_seterr("%s: contains a NUL byte (not a text CSV)", path);
        return NULL;
    }
    sched *s = sched_parse_csv(text, path, n_pipes);
    free(text);
    return s;
}
