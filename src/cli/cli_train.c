/* pipetrain train: flags only. Parses them into a train_opts (src/train/trainer.h), takes a
 * layout from --plan, starts MPI for --transport mpi, leaves the layout to the trainer when no
 * layout flag, --plan or --threads is given (auto_layout), and runs the library's trainer, which
 * holds the training loop (data, LR schedule, checkpoints, metrics, the measured-vs-simulated
 * report). Not here: any of the loop. */
#include "adapt/adapt.h"
#include "cli/cli.h"
#include "cli/cli_layout.h"
#include "harvest/harvest.h"
#include "model/gpt.h"
#include "optim/async_fix.h"
#include "optim/outer.h"
#include "plan/plan.h"
#include "train/train_memlimit.h"
#include "train/train_plan.h"
#include "train/trainer.h"
#include "util/half.h"
#include "util/killat.h"
#include "util/pt.h"
#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    train_opts o;                /* what the trainer gets; o.ro: the layout flags */
    const char *lr_schedule;     /* --lr-schedule: constant | cosine */
    const char *optim;           /* --optim: adamw | nadam */
    int warmup;                  /* --warmup */
    double lr_min;               /* --lr-min (NAN: lr/10) */
    const char *transport;       /* --transport (NULL: threads, or mpi under mpirun) */
    const char *split_text;      /* --split as given */
    int *split;                  /* o.ro.split: the counts of --split or of the plan (owned) */
    const char *plan;            /* --plan plan.json: the layout from `pipetrain plan --out` */
    train_plan_hold plan_hold;   /* o.ro.schedule and o.ro.split under --plan */
    int keep;                    /* --keep (-1: not given) */
    int async_window;            /* --async-window (-1: not given: the trainer's default) */
    const char *side_mem;        /* --side-mem as given */
    const char *mem_limit;       /* --mem-limit as given (N or schedule) */
    const char *wire;            /* --wire as given */
    const char **side_cmds, **side_tasks;   /* the repeatable flags' values (owned arrays) */
    const char **kill_at;        /* --kill-at values (owned array) */
    int n_kill_at;
    const char *precision;       /* --precision fp32 | bf16 */
    const char *async_fix;       /* --async-fix none | nesterov | pipemare | predict */
    double beta1, beta2, momentum_decay;   /* as given (NAN: not given; o.oc keeps its default) */
} train_args;

/* Takes every "FLAG VALUE" / "FLAG=VALUE" out of argv (cli_parse knows no repeatable flags) into
 * *list, in order. -1 when FLAG lacks its value. */
static int take_repeated(int *argc, char **argv, const char *flag, const char ***list, int *n) {
    size_t len = strlen(flag);
    int k = 1;
    *list = pt_calloc((size_t)*argc + 1, sizeof **list);
    for (int i = 1; i < *argc; i++) {
        if (strncmp(argv[i], flag, len) || (argv[i][len] && argv[i][len] != '=')) {
            argv[k++] = argv[i];
            continue;
        }
        if (argv[i][len] == '=') (*list)[(*n)++] = argv[i] + len + 1;
        else if (i + 1 < *argc) (*list)[(*n)++] = argv[++i];
        else return pt_seterr("%s needs a value", flag);
    }
    *argc = k;
    argv[k] = NULL;
    return 0;
}

/* --side-mem: bytes, with an optional K, M or G (powers of 1024). */
static int side_mem_flag(train_args *a) {
    if (!a->side_mem) return 0;
    char *end;
    double v = strtod(a->side_mem, &end), mul = 1;
    if (*end == 'K' || *end == 'k') mul = 1024.0, end++;
    else if (*end == 'M' || *end == 'm') mul = 1024.0 * 1024, end++;
    else if (*end == 'G' || *end == 'g') mul = 1024.0 * 1024 * 1024, end++;
    if (end == a->side_mem || *end || !(v > 0))
        return pt_seterr("--side-mem '%s': give bytes, optionally with K, M or G (e.g. 512M)", a->side_mem);
    a->o.side_mem = v * mul;
    return 0;
}

/* --precision bf16 without --wire: activations and gradients cross stage boundaries in bf16
 * too (--wire bf16), as the matmuls take them; --wire fp32 keeps fp32 messages. */
static int precision_wire(train_args *a) {
    if (!a->wire && gpt_default_precision() == NN_BF16) a->o.ro.wire = PT_WIRE_BF16;
    return 0;
}

/* --wire fp32 | bf16 | fp16 into the layout (util/half.h's pt_wire). */
static int wire_flag(train_args *a) {
    pt_wire w;
    if (!a->wire) return 0;
    if (pt_wire_parse(a->wire, &w) == 0) { a->o.ro.wire = w; return 0; }
    return pt_seterr("--wire '%s': give fp32 (the default: messages as computed), bf16 or fp16 "
                     "(activations and gradients between stages in 16 bits: lossy)", a->wire);
}

/* --lr-schedule and its numbers, and --optim, into the optimizer config (the trainer checks the ranges). */
static int set_lr_schedule(train_args *a) {
    optim_config *oc = &a->o.oc;
    if (!a->lr_schedule || !strcmp(a->lr_schedule, "constant")) oc->schedule = LR_CONSTANT;
    else if (!strcmp(a->lr_schedule, "cosine")) oc->schedule = LR_COSINE;
    else return pt_seterr("--lr-schedule must be constant or cosine, got '%s'", a->lr_schedule);
    oc->warmup = a->warmup;
    oc->total_steps = a->o.steps;
    oc->lr_min = isnan(a->lr_min) ? oc->lr / 10 : a->lr_min;
    if (a->optim && optim_kind_parse(a->optim, &oc->kind) < 0) return -1;
    if (a->optim) oc->given |= OPTIM_GIVEN_KIND;
    /* --async-fix: the executor's correction and nesterov's optimizer (the fields not given);
     * without the flag the schedule's default (pipedream: nesterov), said in the run's header */
    async_fix f = async_fix_default(a->o.ro.schedule_file ? NULL : a->o.ro.schedule);
    if (a->async_fix && async_fix_parse(a->async_fix, &f) < 0) return -1;
    a->o.ro.async_fix = (int)f;
    a->o.ro.async_fix_default = !a->async_fix;
    async_fix_optim(oc, f);
    return 0;
}

/* --beta1, --beta2, --momentum-decay: a given value into the optimizer config, marked as given
 * (a correction's defaults leave it: async_fix_optim). */
static void optim_given(train_args *a) {
    optim_config *oc = &a->o.oc;
    if (!isnan(a->beta1)) oc->beta1 = a->beta1, oc->given |= OPTIM_GIVEN_BETA1;
    if (!isnan(a->beta2)) oc->beta2 = a->beta2, oc->given |= OPTIM_GIVEN_BETA2;
    if (!isnan(a->momentum_decay)) oc->momentum_decay = a->momentum_decay, oc->given |= OPTIM_GIVEN_MOMENTUM_DECAY;
}

/* --plan sets the layout: layout flags next to it are an error (which would win is not obvious);
 * the merge itself is the library's (train_plan_apply). */
static int apply_plan(train_args *a) {
    run_opts *o = &a->o.ro;
    if (o->P != CLI_UNSET || o->D != CLI_UNSET || o->M != CLI_UNSET || o->tp != CLI_UNSET ||
        o->schedule || o->schedule_file || o->split || o->chunks)
        return pt_seterr("--plan sets the layout: drop --stages/--dp/--tp/--schedule/--schedule-file/"
                         "--microbatches/--split/--chunks, or drop --plan");
    int mpi = a->transport && !strcmp(a->transport, "mpi");
    return train_plan_apply(&a->o, a->plan, mpi, &a->plan_hold, stdout);
}

/* Pipelined when any layout flag is given (then P = D = 1, 1f1b and M = P unless given); the MPI
 * world when --transport mpi. */
static int pipe_flags(train_args *a, int *argc, char ***argv, comm **world) {
    run_opts *o = &a->o.ro;
    if (!cli_layout_given(o, a->transport) && (a->o.trace || a->o.svg))
        return pt_seterr("--trace and --svg record a pipelined run (give --stages)");
    if (cli_layout_start(o, a->transport, argc, argv, world) < 0) return -1;
    /* the fault-injection test hook: threads mode wraps inside the job, MPI here (it owns world) */
    if (*world && o->fail_after > 0 && (*world)->rank == o->fail_rank)
        return comm_faulty_wrap(*world, -1, 0, o->fail_after, world);
    return 0;
}

/* --keep N: N >= 1, next to --save (0 would delete the checkpoint just written). */
/* --mem-limit: a SIZE with a unit is each rank's byte limit (train_memlimit.h); a bare N or
 * "schedule" keeps --adapt's meaning (adapt_parse_mem_limit). */
static int mem_limit_flag(const char *text, train_opts *o) {
    if (!text) return 0;
    if (train_memlimit_is_size(text)) return train_memlimit_parse(text, &o->mem_bytes);
    return adapt_parse_mem_limit(text, &o->mem_limit);
}

static int keep_flag(train_args *a) {
    if (a->keep == -1) return 0;
    if (a->keep < 1)
        return pt_seterr("--keep %d: keep at least the newest checkpoint (--keep 1 or more; leave "
                         "--keep out to keep them all)", a->keep);
    if (!a->o.save) return pt_seterr("--keep %d needs --save DIR (the folder it prunes)", a->keep);
    a->o.keep = a->keep;
    return 0;
}

/* The library's trainer over o: set up, run, free. */
static int train_main(const train_opts *o) {
    train_ctx *t;
    if (train_init(&t, o) < 0) return -1;
    int rc = train_run(t);
    train_free(t);
    return rc;
}

/* Everything a train_args owns, freed on every path (NULL fields are fine); ends MPI when it
 * was started. */
static void train_args_free(train_args *a) {
    cli_layout_stop(a->transport, a->o.world);
    free(a->split);
    train_plan_hold_free(&a->plan_hold);
    free(a->side_cmds);
    free(a->side_tasks);
    free(a->kill_at);
    cli_layout_faults_free(&a->o.ro);
}

/* argv into a (the repeatable flags first, then cli_parse, then the flags that need checks).
 * Returns the exit status to stop with (2 usage, 1 a bad value, 0 after --help), or -1 to go on. */
static int parse_args(train_args *a, int *argc, char **argv, const cli_opt *opts, int n_opts) {
    train_opts *o = &a->o;
    if (cli_layout_take_faults(argc, argv, &o->ro) < 0 ||
        take_repeated(argc, argv, "--side-command", &a->side_cmds, &o->n_side_commands) < 0 ||
        take_repeated(argc, argv, "--side-task", &a->side_tasks, &o->n_side_tasks) < 0 ||
        take_repeated(argc, argv, "--kill-at", &a->kill_at, &a->n_kill_at) < 0)
        return cli_fail("train") + 1;
    o->side_commands = a->side_cmds;
    o->side_tasks = a->side_tasks;
    int rc = cli_parse(*argc, argv, "train", "--config C.json --data FILE --batch B --seq T --steps K "
                       "--lr X [flags]", opts, n_opts);
    if (rc) {
        if (rc > 0) harvest_print_kinds(stdout);   /* --help: the side-task registry too */
        return rc < 0 ? 2 : 0;
    }
    a->transport = cli_layout_transport(a->transport);
    optim_given(a);
    for (int i = 0; i < a->n_kill_at; i++)
        if (pt_killat_add(a->kill_at[i]) < 0) return cli_fail("train");
    if (a->async_window == 0 || a->async_window < -1)
        return pt_seterr("--async-window must be >= 1 (steps a pass; 1: a flush every step), got %d",
                         a->async_window), cli_fail("train");
    o->async_window = a->async_window > 0 ? a->async_window : 0;
    if (keep_flag(a) < 0 || side_mem_flag(a) < 0 || wire_flag(a) < 0 ||
        cli_precision_apply(a->precision, stdout) < 0 || precision_wire(a) < 0 ||
        mem_limit_flag(a->mem_limit, o) < 0 ||
        cli_layout_split(a->split_text, &a->split, &o->ro.n_split) < 0)
        return cli_fail("train");
    if (o->cluster && (!o->adapt || o->mem_limit))
        return pt_seterr("--cluster %s gives --adapt's memory limit: give --adapt and no --mem-limit", o->cluster),
               cli_fail("train");
    if (o->adapt && o->ro.seq_chunks > 1)   /* its candidate schedules run whole microbatches */
        return pt_seterr("--adapt and --seq-chunks %d: give one (the adaptive schedules run whole "
                         "microbatches)", o->ro.seq_chunks), cli_fail("train");
    o->ro.split = a->split;
    /* no layout asked for (no layout flag, --plan or --threads): the trainer picks this machine's */
    o->auto_layout = !a->plan && !cli_layout_given(&o->ro, a->transport) && o->threads == 0;
    return -1;
}

/* The layout (--plan, the layout flags, MPI), then the trainer. The exit status. */
static int run_args(train_args *a, int *argc, char ***argv) {
    train_opts *o = &a->o;
    if ((a->plan && apply_plan(a) < 0) || pipe_flags(a, argc, argv, &o->world) < 0)
        return cli_fail("train");
    if (set_lr_schedule(a) < 0 || (o->recycle && train_recycle_arm(o) < 0)) return cli_fail("train");
    int rc, standby = 0;
    while ((rc = train_main(o)) < 0 && o->recycle) {   /* a replica lost a rank: the others go on in place */
        int n = train_recycle_next(o, &standby);
        if (n == 1 && standby) rc = 0;
        if (n != 1 || standby) break;
    }
    if (rc < 0) {
        if (o->world) pt_adderr("rank %d: ", o->world->rank);
        return cli_fail("train");
    }
    return 0;
}

int cli_train(int argc, char **argv) {
    train_args a = {.o = {.steps = TRAIN_DEFAULT_STEPS, .seed = 1337, .oc = optim_config_default()}, .lr_min = NAN,
                    .keep = -1, .async_window = -1, .beta1 = NAN, .beta2 = NAN, .momentum_decay = NAN};
    train_opts *o = &a.o;
    enum { N_TRAIN_OPTS = 60 };   /* the rows below: count them when adding one */
    const char *repeated_help = NULL;   /* --side-command / --side-task: taken out before cli_parse */
    cli_opt opts[N_TRAIN_OPTS + CLI_LAYOUT_N_OPTS] = {
        {"--config", OPT_STR, &o->config, "model config JSON (Hugging Face GPT-2 keys)"},
        {"--init", OPT_STR, &o->init, "initial weights (safetensors); default: GPT-2 init from --seed"},
        {"--data", OPT_STR, &o->data, "training data: raw text (bytes) or an llm.c token file"},
        {"--tokenizer", OPT_STR, &o->tokenizer, "gpt2 | DIR: tokenise the --data text with it on the fly (src/tok)"},
        {"--batch", OPT_INT, &o->batch, "B, sequences per step"},
        {"--seq", OPT_INT, &o->seq, "T, tokens per sequence"},
        {"--steps", OPT_INT, &o->steps, "K, optimizer steps in all (default " TRAIN_STR(TRAIN_DEFAULT_STEPS) ")"},
        {"--lr", OPT_DOUBLE, &o->oc.lr, "peak learning rate (default 3e-4)"},
        {"--lr-min", OPT_DOUBLE, &a.lr_min, "cosine floor (default lr/10)"},
        {"--lr-schedule", OPT_STR, &a.lr_schedule, "constant | cosine (default constant)"},
        {"--warmup", OPT_INT, &a.warmup, "linear warm-up steps (default 0)"},
        {"--weight-decay", OPT_DOUBLE, &o->oc.weight_decay, "AdamW decoupled weight decay (default 0.1)"},
        {"--beta1", OPT_DOUBLE, &a.beta1, "AdamW beta1 (default 0.9; --async-fix nesterov: 0.99)"},
        {"--beta2", OPT_DOUBLE, &a.beta2, "AdamW beta2 (default 0.95; --async-fix nesterov: 0.999)"},
        {"--eps", OPT_DOUBLE, &o->oc.eps, "AdamW epsilon (default 1e-8)"},
        {"--optim", OPT_STR, &a.optim, "adamw | nadam (torch.optim.NAdam: L2 decay, --beta1 as its momentum) | nadamw (torch 2's "
                                       "NAdam, decoupled decay); default adamw"},
        {"--async-fix", OPT_STR, &a.async_fix, "pipedream | 2bw: none | nesterov (NAdamW, beta1 0.99, beta2 0.999 "
                                               "where --optim/--beta1/--beta2/--momentum-decay are not given) | "
                                               "pipemare | predict; default: nesterov for pipedream, none for 2bw "
                                               "(docs/async.md)"},
        {"--momentum-decay", OPT_DOUBLE, &a.momentum_decay, "NAdam's momentum decay psi (default 4e-3)"},
        {"--async-depth", OPT_INT, &o->ro.async_depth, "D: pipedream | 2bw: each stage admits max(P-g, D) forwards "
                                                       "before its first backward (default 0: 1f1b's P-g; more hide link "
                                                       "latency, hold more activations; docs/async.md)"},
        {"--defer-tie", OPT_FLAG, &o->ro.defer_tie, "pipedream: the tied embedding's gradient summed over its two "
                                                    "stages in the background, applied K = max(P, --async-depth) "
                                                    "updates later (the ends of the pipe stop waiting for each "
                                                    "other; docs/async.md)"},
        {"--async-window", OPT_INT, &a.async_window, "W: pipedream | 2bw: W steps a pass, one stream of W x M "
                                                     "microbatches (the next step's forwards enter while this step's "
                                                     "backwards return; every update and report still per step); "
                                                     "default 4 (or the largest below that divides --steps and the "
                                                     "eval/save/snapshot intervals), 1: a flush every step"},
        {"--tie-owner", OPT_FLAG, &o->ro.tie_owner, "pipedream: the tied embedding updated by its first stage as "
                                                    "its other weights (no lag), the head's copy refreshed from it "
                                                    "K = max(P, --async-depth) updates late (the ends of the pipe "
                                                    "stop waiting; docs/async.md)"},
        {"--grad-clip", OPT_DOUBLE, &o->oc.grad_clip, "max global gradient norm, 0 = off (default 1)"},
        {"--shuffle", OPT_LONG, &o->shuffle, "seed for a shuffled batch order (default 0: sequential)"},
        {"--seed", OPT_LONG, &o->seed, "init seed (default 1337)"},
        {"--metrics", OPT_STR, &o->metrics, "append one JSON line per step to this file"},
        {"--save", OPT_STR, &o->save, "checkpoint folder: writes DIR/ckpt-<step>"},
        {"--save-every", OPT_INT, &o->save_every, "also save every K steps (default: only at the end)"},
        {"--resume", OPT_STR, &o->resume, "continue from a checkpoint folder (DIR/ckpt-<step>), or the newest in DIR"},
        {"--keep", OPT_INT, &a.keep, "keep only the newest N checkpoints in --save's folder (default: all)"},
        {"--log-every", OPT_INT, &o->log_every, "progress line every N steps (default: ~50 lines)"},
        {"--threads", OPT_INT, &o->threads, "one process on N OpenBLAS threads (without it and without layout flags: the layout this machine's cores do best, said at the start); pipelined: 1 per rank, MPI: this many per process"},
        {"--fail-rank", OPT_INT, &o->ro.fail_rank, "testing: this world rank dies after --fail-after sends"},
        {"--fail-after", OPT_INT, &o->ro.fail_after, "testing: sends before --fail-rank dies (default 0: never)"},
        {"--trace", OPT_STR, &o->trace, "pipelined: Chrome trace JSON of the last step, measured"},
        {"--svg", OPT_STR, &o->svg, "pipelined: SVG timeline of the last step, measured"},
        {"--plan", OPT_STR, &a.plan, "run the layout of a plan file (pipetrain plan --out plan.json)"},
        {"--side-command", OPT_STR, &repeated_help, "[RANK:]CMD run in the bubbles of a rank (repeatable; default: any rank of the process, one at a time)"},
        {"--side-task", OPT_STR, &repeated_help, "KIND[:ARGS] a side task from the registry (repeatable; busy:US, command:CMD)"},
        {"--side-mem", OPT_STR, &a.side_mem, "bytes (K/M/G) a side task may hold; a command over it is stopped"},
        {"--eval-data", OPT_STR, &o->eval_data, "held-out tokens: eval_loss of the weights of every --eval-every steps"},
        {"--eval-every", OPT_INT, &o->eval_every, "K: evaluate the weights of steps K, 2K, ... (default: the last step)"},
        {"--eval-batches", OPT_INT, &o->eval_batches, "N batches of --batch x --seq (default: the whole file)"},
        {"--side-train", OPT_STR, &o->side_train, "CONFIG of a second model trained in the bubbles (--batch x --seq)"},
        {"--side-data", OPT_STR, &o->side_data, "its training tokens"},
        {"--side-steps", OPT_LONG, &o->side_steps, "its optimizer steps (default: as long as this run)"},
        {"--adapt", OPT_FLAG, &o->adapt, "pipelined: switch to the adaptive schedule while a link is measured slow, back "
                                         "when it clears (docs/stragglers.md)"},
        {"--cluster", OPT_STR, &o->cluster, "--adapt: the memory limit from this cluster file's device memory "
                                            "(world rank w on device w) instead of this machine's"},
        {"--mem-limit", OPT_STR, &a.mem_limit, "SIZE (512MiB, 2GiB, 1.5GB): each rank's memory limit, "
                                               "checked before the first step and set as RLIMIT_DATA (docs/seq-chunks.md); "
                                               "--adapt: microbatches of activations a stage may hold: N, or schedule "
                                               "(the starting schedule's peak); default: what the ranks' memory holds"},
        {"--wire", OPT_STR, &a.wire, "pipelined: fp32 | bf16 | fp16: how activations and gradients cross stage "
                                     "boundaries (default fp32; 16 bits halve the bytes, lossy: docs/comm.md)"},
        {"--adapt-wire", OPT_FLAG, &o->adapt_wire, "--adapt: turn on --wire bf16 when the measured links make the "
                                                   "step link-bound (lossy: docs/comm.md)"},
        {"--snapshot-every", OPT_INT, &o->snapshot_every, "K: every rank's state into --snapshot-dir every K steps, "
                                                            "written off the compute path (docs/recovery.md)"},
        {"--snapshot-dir", OPT_STR, &o->snapshot_dir, "memory that outlives the process for snapshots and heartbeats "
                                                      "(e.g. /dev/shm/NAME; pipetrain launch gives one)"},
        {"--snapshot-peer-every", OPT_INT, &o->snapshot_peer_every, "N: MPI: every N-th snapshot also copied to a rank "
                                                                    "on another host (default 0: each whose share of "
                                                                    "1% of the time's CPU has come)"},
        {"--recycle", OPT_FLAG, &o->recycle, "MPI under mpirun --enable-recovery (pipetrain launch --recycle): a replica "
                                             "that loses a rank is dropped in place, the others go on from the newest "
                                             "snapshot with its microbatches (docs/recovery.md)"},
        {"--kill-at", OPT_STR, &repeated_help, "testing: RANK@STEP[:PHASE] that rank kills itself (SIGKILL) at the first "
                                               "forward | reduce | save of that step (repeatable; default forward)"},
        cli_precision_opt(&a.precision),
        {"--dp-sync", OPT_INT, &o->ro.dp_sync, "H: replicas step on their own gradients and average their change every H "
                                               "steps with an outer Nesterov step (DiLoCo; default 1: every step, plain "
                                               "data parallelism; docs/async.md)"},
        {"--outer-lr", OPT_DOUBLE, &o->ro.outer_lr, "--dp-sync: the outer step's learning rate (default 0.7)"},
        {"--outer-momentum", OPT_DOUBLE, &o->ro.outer_momentum, "--dp-sync: the outer step's Nesterov momentum (default 0.9)"},
    };
    /* N_TRAIN_OPTS must count the rows above (a merge that adds a row must raise it) */
    assert(opts[N_TRAIN_OPTS - 1].name && !opts[N_TRAIN_OPTS].name);
    cli_layout_opts(opts + N_TRAIN_OPTS, &o->ro, &a.transport, &a.split_text);
    cli_layout_init(&o->ro);
    o->ro.outer_lr = OUTER_LR_DEFAULT;
    o->ro.outer_momentum = OUTER_MOMENTUM_DEFAULT;
    int rc = parse_args(&a, &argc, argv, opts, (int)(sizeof opts / sizeof *opts));
    if (rc < 0) rc = run_args(&a, &argc, &argv);
    train_args_free(&a);
    return rc;
}
