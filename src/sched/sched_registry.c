/* The schedule registry: one row per generator (name, function, default chunks, pipes, async,
 * which parameters it reads, a line of help), and the dispatch sched_generate(). Everything that
 * lists, describes or picks schedules reads these rows: the CLI's help, `simulate`, the planner.
 * Not the generators themselves (sched_gen_*.c); nothing here is called back by them. */
#include "sched/gen.h"
#include "util/pt.h"
#include <pthread.h>
#include <string.h>

static const sched_generator registry[] = {
    { .name = "gpipe", .generate = gen_gpipe, .chunks = 1, .pipes = 1,
      .help = "all forwards, then all backwards (GPipe); holds M microbatches of activations" },
    { .name = "1f1b", .generate = gen_1f1b, .chunks = 1, .pipes = 1, .seq_chunks = true,
      .help = "a forward, then a backward, after a warm-up (PipeDream-flush); holds at most P" },
    { .name = "interleaved-1f1b", .generate = gen_interleaved, .chunks = 2, .more_chunks = true,
      .pipes = 1, .help = "1f1b over --chunks V stages per rank (Megatron-LM); needs M % P == 0" },
    { .name = "zb-h1", .generate = gen_zb_h1, .chunks = 1, .pipes = 1, .seq_chunks = true,
      .help = "zero bubble H1: B and W split, W's fill the cool-down; 1f1b's memory" },
    { .name = "zb-h2", .generate = gen_zb_h2, .chunks = 1, .pipes = 1,
      .help = "zero bubble H2: longer warm-up, no bubble once M >= 2P-1; about 2x 1f1b's memory" },
    { .name = "zb-v", .generate = gen_zb_v, .chunks = 2, .pipes = 1,
      .help = "zero bubble V: two stages per rank in a V, B and W split; 1.5x 1f1b's memory" },
    { .name = "chimera", .generate = gen_chimera, .chunks = 1, .pipes = 2,
      .help = "two model replicas pipelined in opposite directions; needs P even, M % P == 0" },
    { .name = "pipedream", .generate = gen_pipedream, .chunks = 1, .pipes = 1, .async = true,
      .help = "asynchronous 1f1b: a weight update after every microbatch, no flush" },
    { .name = "2bw", .generate = gen_2bw, .chunks = 1, .pipes = 1, .async = true,
      .help = "PipeDream-2BW: 1f1b order, no flush, an update per P microbatches, 2 weight versions (simulate only)" },
    { .name = "greedy", .generate = gen_greedy, .chunks = 1, .more_chunks = true, .pipes = 1,
      .stage_costs = true, .mem_limit = true, .link_delays = true,
      .help = "list scheduler by per-stage costs and link delays (simulate's) under --mem-limit; --chunks 2: a V" },
    { .name = "adaptive", .generate = gen_adaptive, .chunks = 1, .pipes = 1,
      .stage_costs = true, .mem_limit = true, .link_delays = true, .scored = true,
      .help = "for slow links and stages: best of delay-aware candidates, judged by the simulator, under --mem-limit" },
};
#define N_ROWS ((int)(sizeof registry / sizeof registry[0]))

static const char *names[N_ROWS + 1];     /* NULL-terminated, filled once from the rows */
static char name_list[N_ROWS * 24];      /* "gpipe, 1f1b, ..." */
static pthread_once_t names_once = PTHREAD_ONCE_INIT;

static void registry_build_names(void) {
    size_t used = 0;
    for (int i = 0; i < N_ROWS; i++) {
        names[i] = registry[i].name;
        used += (size_t)snprintf(name_list + used, sizeof name_list - used, "%s%s", i ? ", " : "",
                                 registry[i].name);
    }
    names[N_ROWS] = NULL;
}

const sched_generator *sched_generator_rows(int *n) {
    *n = N_ROWS;
    return registry;
}

const sched_generator *sched_generator_find(const char *name) {
    for (int i = 0; name && i < N_ROWS; i++)
        if (!strcmp(name, registry[i].name)) return &registry[i];
    return NULL;
}

const char *sched_generator_list(void) {
    pthread_once(&names_once, registry_build_names);
    return name_list;
}

const char *const *sched_generator_name_array(void) {
    pthread_once(&names_once, registry_build_names);
    return names;
}

void sched_print_generators(FILE *f) {
    fprintf(f, "schedules:\n");
    for (int i = 0; i < N_ROWS; i++) fprintf(f, "  %-22s %s\n", registry[i].name, registry[i].help);
}

sched *sched_generate(const char *name, const sched_params *p) {
    const sched_generator *g = sched_generator_find(name);
    if (!g) {
        pt_seterr("unknown schedule '%s' (known: %s)", name, sched_generator_list());
        return NULL;
    }
    if (gen_check_common(name, p) < 0) return NULL;
    if (p->seq_chunks > 1 && !g->seq_chunks) {
        pt_seterr("schedule %s does not run sequence chunks (--seq-chunks %d): use 1f1b or zb-h1",
                  name, p->seq_chunks);
        return NULL;
    }
    sched *s = g->generate(p);
    if (s && !s->name[0]) snprintf(s->name, sizeof s->name, "%s", name);
    return s;
}
