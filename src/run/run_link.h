/* The links of a pipelined job as they are: each pipeline link's latency and bandwidth, each
 * direction, from a probe at the job's start (comm_link_probe over the run's own communicator:
 * the same transport, progress and fault wrapper as its messages) and then from the run's own
 * messages (each iteration's merged timeline: when a message was posted, when its receiver got
 * it, its size). This is what the end-of-run prediction and the straggler policy read:
 * run_links_apply puts a link into a cost model. Not here: the probe's messages
 * (comm/comm_link.c), the policy (train/trainer_adapt.c). docs/comm.md has the method.
 *
 * Legend: P pipeline ranks, D replicas, tp TP ranks per (replica, pipeline rank); link r joins
 * pipeline ranks r and r+1 of one replica and TP rank; direction 0 is r -> r+1 (activations),
 * 1 is r+1 -> r (gradients). */
#ifndef PT_RUN_LINK_H
#define PT_RUN_LINK_H
#include "comm/comm.h"
#include "run/layout.h"
#include "sim/sim.h"
#include "trace/timeline.h"

#define RUN_LINK_RING 32          /* a direction's bandwidth: from its last 32 timed messages */
#define RUN_LINK_PROBE_ROUNDS 3   /* the start probe: 3 pings, 3 pairs of messages each way */
#define RUN_LINK_PROBE_MAX ((size_t)1 << 22)   /* probe messages of the run's size, at most 4 MB */
/* A receive that waited less than this (seconds) says nothing of when its message arrived (it
 * may have been there before): only messages someone waited for are timed. */
#define RUN_LINK_WAIT_EPS 50e-6

typedef struct {
    double latency;             /* seconds one way of a small message (the probe's; 0: not probed) */
    double probe_bw;            /* bytes/s the probe measured (0: not probed) */
    double bandwidth;           /* bytes/s a message holds the link: bytes over the mean time
                                 * the run's last timed messages held it (their harmonic mean),
                                 * or probe_bw before any (0: unknown) */
    int n;                      /* timed messages so far (0: bandwidth is the probe's) */
    double ring[RUN_LINK_RING]; /* the last timed messages' bytes/s */
} run_link_dir;

typedef struct {
    int P, D, tp;
    run_link_dir *dir;          /* [D*tp*(P-1)*2]: run_links_at */
} run_links;

void run_links_init(run_links *L, const run_layout *lo);
void run_links_free(run_links *L);
/* Direction `back` (0: r -> r+1, 1: r+1 -> r) of link r of replica d, TP rank t. */
run_link_dir *run_links_at(const run_links *L, int d, int t, int r, int back);

/* The start probe, on world rank w (this process's rank, holding endpoint c): in phase 0 the
 * links r -> r+1 with r even, in phase 1 those with r odd (so each rank probes one link at a
 * time: run both phases on every rank, in order). Messages of `bytes` (capped at
 * RUN_LINK_PROBE_MAX). Fills the lower rank's entries of L (threads: every rank fills its own
 * links, no two the same entry). 0, or -1 naming the ranks (the job should abort). */
int run_links_probe(run_links *L, comm *c, const run_layout *lo, int w, int phase, size_t bytes, double timeout);
/* MPI: every rank gets every link's probe (sums of the entries each rank filled). Collective. */
int run_links_share(run_links *L, comm *c);

/* Times the messages of one iteration's merged, linked timeline (run_job_timeline: world ranks,
 * one clock) of `bytes` each: per direction, in the order sent, a message whose receiver waited
 * for it (RUN_LINK_WAIT_EPS) held the link from when it was posted, or from when the one before
 * it on that direction had left (its arrival less the latency), until it arrived less the
 * latency; bytes over that time is one sample of the direction's bandwidth. */
void run_links_observe(run_links *L, const timeline *tl, const run_layout *lo, double bytes);

/* The time a message of `bytes` takes on link r's slower direction, over the replicas and TP
 * ranks (latency + bytes / bandwidth); 0 when nothing is known. */
double run_links_message_time(const run_links *L, int r, double bytes);
/* Puts link r into c (links between pipeline ranks r and r+1, as sim's ranks): its latency and a
 * queue (sim_link.rate) at which a message of `bytes` holds it as long as measured on its slower
 * direction (over the replicas and TP ranks). Messages of c->act_bytes[g] (0 in a profile: then
 * every stage's act_bytes becomes `bytes`). Nothing when nothing is known of link r. */
void run_links_apply(const run_links *L, sim_costs *c, int r, double bytes);
/* "link 0-1: 3.71/3.62 MB/s, 0.12 ms (probe 4.02/3.98 MB/s)" for each link of replica 0, TP rank
 * 0 (forward/back), into buf. Returns buf. */
char *run_links_describe(const run_links *L, char *buf, int n);

#endif
