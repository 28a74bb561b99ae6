/* --kill-at (killat.h): a small table of (rank, step, phase) and the point that checks it. */
#include "util/killat.h"
#include "util/pt.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct { int rank; long step; pt_kill_phase ph; } killat;

static killat table[PT_KILLAT_MAX];
static int n_table;

static const char *const phase_names[PT_KILL_PHASES] = { "forward", "reduce", "save" };

const char *pt_killat_phase_name(pt_kill_phase ph) {
    return (unsigned)ph < PT_KILL_PHASES ? phase_names[ph] : "?";
}

/* "forward" | "reduce" | "save" into *ph; -1 otherwise. */
static int parse_phase(const char *s, pt_kill_phase *ph) {
    for (int i = 0; i < PT_KILL_PHASES; i++)
        if (!strcmp(s, phase_names[i])) {
            *ph = (pt_kill_phase)i;
            return 0;
        }
    return -1;
}

int pt_killat_add(const char *spec) {
    killat k = { 0, 0, PT_KILL_FORWARD };
    char *end;
    const char *usage = "give RANK@STEP[:PHASE], e.g. 1@7:reduce (RANK >= 0 a world rank, STEP >= 1, "
                        "PHASE forward | reduce | save, default forward)";
    if (n_table == PT_KILLAT_MAX) return pt_seterr("--kill-at %s: at most %d kills per run", spec, PT_KILLAT_MAX);
    long r = strtol(spec, &end, 10);
    if (end == spec || *end != '@' || r < 0 || r > 1 << 20)
        return pt_seterr("--kill-at '%s': bad rank: %s", spec, usage);
    const char *s = end + 1;
    k.rank = (int)r;
    k.step = strtol(s, &end, 10);
    if (end == s || (*end && *end != ':') || k.step < 1)
        return pt_seterr("--kill-at '%s': bad step: %s", spec, usage);
    if (*end == ':' && parse_phase(end + 1, &k.ph) < 0)
        return pt_seterr("--kill-at '%s': unknown phase '%s': %s", spec, end + 1, usage);
    table[n_table++] = k;
    return 0;
}

void pt_killat_clear(void) { n_table = 0; }

void pt_killat_renumber(const int *old_of_new, int n) {
    int k = 0;
    for (int i = 0; i < n_table; i++)
        for (int r = 0; r < n; r++)
            if (table[i].rank == old_of_new[r]) {
                table[k] = table[i];
                table[k++].rank = r;
                break;
            }
    n_table = k;
}

int pt_killat_count(int *max_rank, long *max_step) {
    int mr = -1;
    long ms = 0;
    for (int i = 0; i < n_table; i++) {
        if (table[i].rank > mr) mr = table[i].rank;
        if (table[i].step > ms) ms = table[i].step;
    }
    if (max_rank) *max_rank = mr;
    if (max_step) *max_step = ms;
    return n_table;
}

int pt_killat_has_phase(pt_kill_phase ph) {
    for (int i = 0; i < n_table; i++)
        if (table[i].ph == ph) return 1;
    return 0;
}

void pt_killat_point(int rank, long step, pt_kill_phase ph) {
    for (int i = 0; i < n_table; i++) {
        if (table[i].rank != rank || table[i].step != step || table[i].ph != ph) continue;
        fprintf(stderr, "kill-at: rank %d, step %ld, %s: SIGKILL\n", rank, step, phase_names[ph]);
        fflush(stderr);
        raise(SIGKILL);
        _exit(137);   /* not reached */
    }
}
