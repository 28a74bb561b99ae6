/* Moving a job's state to a job of another layer split, rank to rank: each rank of the new job
 * asks for what it holds (its requests, from a deferred source), each rank of the old one offers
 * what it holds (its pieces), and every piece that changes rank goes as a message from an old
 * holder to the new one over the job's world; what stays on a rank is copied. No file, no root.
 * Not here: building the new job (run_job_resplit), choosing the split (the trainer's policy). */
#ifndef PT_RUN_MOVE_H
#define PT_RUN_MOVE_H
#include "comm/comm.h"
#include "run/executor.h"
#include "run/layout.h"
#include "run/source.h"

/* World rank w's part of a move (collective over world: every rank calls it, old and new jobs
 * of the same layout lo but for the split): old, its executor in the old job; want, its new
 * job's requests (run_source_defer), filled here. Each request is served by holders of the same
 * TP rank: the rank itself where it holds the elements, else one of its replica, else the
 * lowest world rank that holds them (--zero 1 moments live on one replica each), so replicas
 * and TP ranks each move their own. The values are copied as they are: bitwise. 0, or -1 naming
 * what no rank holds or the message that failed (a wait bounded by timeout seconds). */
int run_move(const run_exec *old, const run_source_reqs *want, comm *world, const run_layout *lo,
             double timeout);

#endif
