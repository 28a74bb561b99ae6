/* Internal to comm/: the threads transport's shared state (world, groups, requests, collectives)
 * and the helpers its files share: comm_threads_base.c (lifetime, queues, requests),
 * comm_threads_coll.c (collectives), comm_threads.c (messages, test and wait, abort, the vtable).
 * Locking as comm_threads.c says. Not a public header: other modules use comm/comm.h. */
#ifndef PT_COMM_THREADS_INT_H
#define PT_COMM_THREADS_INT_H
#include "comm/comm.h"
#include <pthread.h>
#include <stddef.h>
#include <time.h>

enum { REQ_QUEUED, REQ_COPYING, REQ_DONE, REQ_FAILED };

struct tw_coll;

/* A send or receive request (or a non-blocking collective's, coll != NULL). While REQ_QUEUED a
 * message request sits in a mailbox queue of its world. */
typedef struct tw_req {
    struct tw_req *next;
    struct tw_req *live_prev, *live_next;   /* the owner endpoint's requests not yet reported */
    int is_send, state;
    int ctx;                    /* communicator id: messages of different communicators never match */
    int src, dst;               /* world ranks */
    int src_rank, dst_rank;     /* ranks in the communicator (for messages) */
    int tag;
    void *buf;                  /* receive: destination; send: source (never written) */
    size_t bytes;
    char err[256];              /* REQ_FAILED: why */
    struct tw_coll *coll;       /* a non-blocking collective: its shared state */
    int phase;                  /* collective: 0 posted, 1 own slice summed, 2 others' copied */
} tw_req;

/* One non-blocking collective of a group (ireduce), shared by its members' requests. Each member
 * sums its own slice of every member's buffer (rank order) into its own buffer once all have
 * posted, then (all = 1) copies the other members' summed slices; a member's request completes
 * when nobody reads its buffer any more (all summed, or all copied). */
typedef struct tw_coll {
    struct tw_coll *next;
    unsigned seq;               /* the group's k-th non-blocking collective */
    size_t n;
    int all;
    float **bufs;               /* [size] each member's buffer, as posted */
    int posted, summed, copied, refs;
    int failed;
    char err[256];
} tw_coll;

typedef struct { tw_req *head, *tail; } tw_queue;

typedef struct {
    pthread_mutex_t mu;
    int size;
    pthread_cond_t *wake;       /* [size] rank w's thread sleeps on wake[w] */
    tw_queue *recvs;            /* [size] receives posted by rank w, in posting order */
    tw_queue *sends;            /* [size] unmatched sends to rank w, in sending order */
    int aborted, abort_rank;
    char why[200];
    int next_ctx;
    int refs;                   /* live endpoints, all communicators */
} tw_world;

/* A communicator: shared by its member endpoints, with its own collective state. */
typedef struct tw_group {
    tw_world *w;
    int ctx, size, refs;
    int *members;               /* [size] world rank of each communicator rank */
    int arrived;                /* barrier: ranks arrived in this generation */
    unsigned gen;
    const void **bufs;          /* [size] allreduce inputs */
    size_t *counts;             /* [size] allreduce element counts */
    int *colors;                /* [size] split colors */
    struct tw_group **split_out;/* [size] split results */
    void *scratch;              /* allreduce result, scratch_cap bytes */
    size_t scratch_cap;
    int failed;                 /* the last arriver found an error (err) for this generation */
    char err[256];
    tw_coll *colls;             /* non-blocking collectives not yet completed by every member */
    unsigned *coll_seq;         /* [size] number of non-blocking collectives each rank posted */
} tw_group;

/* One rank's endpoint of a communicator, with its requests not yet reported done (freed by
 * tw_free when the caller abandoned them, e.g. after an abort). */
typedef struct { tw_group *g; tw_req *live; } tw_ep;

static inline tw_group *ep_group(comm *c) { return ((tw_ep *)c->impl)->g; }

/* ---- comm_threads_base.c ---- */

/* ---- world and group lifetime ---------------------------------------------------------- */
/* A world of `size` ranks (mailboxes, wake-ups, the lock); freed by tw_world_free. */
tw_world *tw_world_new(int size);
void tw_world_free(tw_world *w);
/* A group of n members (world ranks copied from members). Caller holds w->mu or owns w alone. */
tw_group *tw_group_new(tw_world *w, int n, const int *members);
void tw_coll_free(tw_coll *op);
void tw_group_free(tw_group *g);
/* Rank `rank`'s endpoint of group g, answering through vt (the transport's vtable). */
comm *tw_endpoint_new(tw_group *g, int rank, const comm_vtable *vt);
/* ---- queues and requests --------------------------------------------------------------- */
void tw_queue_push(tw_queue *q, tw_req *r);
/* Removes and returns the first request with (ctx, src, tag), or NULL. FIFO matching. */
tw_req *tw_queue_take(tw_queue *q, int ctx, int src, int tag);
/* Removes r from q (where it must be). */
void tw_queue_remove(tw_queue *q, tw_req *r);
/* The endpoint's live list (caller holds the lock). */
void tw_live_link(comm *c, tw_req *r);
void tw_live_unlink(comm *c, tw_req *r);
/* The errors: the job was aborted ("rank R failed: why"); a message's size is not the receive
 * buffer's (into out); a peer outside the communicator (-1 naming it, the call and the tag). */
int tw_abort_error(tw_world *w);
int tw_size_error(char *out, size_t cap, const tw_req *s, const tw_req *r);
int tw_check_peer(comm *c, const char *what, int peer, int tag);
/* A new message request of endpoint c (world ranks filled in from peer). */
tw_req *tw_req_new(comm *c, int is_send, int peer, int tag, void *buf, size_t bytes);
/* Copies `bytes` from src to dst outside the lock while `mark` is REQ_COPYING, then completes
 * mark and wakes its owner. Caller holds w->mu; it is held again on return. */
void tw_copy_unlocked(tw_world *w, tw_req *mark, int owner, void *dst, const void *src, size_t bytes);

/* ---- comm_threads_coll.c ---- */
int tw_barrier(comm *c);
int tw_allreduce_f32(comm *c, float *buf, size_t n);
int tw_allreduce_f64(comm *c, double *buf, size_t n);
/* Every rank publishes its buffer; after a barrier each copies the others' slices; a second
 * barrier keeps every buffer unchanged until all have copied. */
int tw_allgather_f32(comm *c, float *buf, size_t n);
/* A member is done with op (completed or dropped); the last one frees it. Caller holds the lock. */
void tw_coll_unref(tw_group *g, tw_coll *op);
int tw_ireduce_f32(comm *c, float *buf, size_t n, int all, comm_req **out);
/* Takes r as far as it can go without waiting (the lock is released around the arithmetic):
 * its own slice summed once all posted, the others' slices copied once all summed (all = 1).
 * *done when it completed (or the collective failed). Caller holds the lock. */
void tw_coll_progress(comm *c, tw_req *r, int *done);
/* Reports a finished collective request (freeing it). Caller holds the lock. */
int tw_coll_finish(comm *c, tw_req *r);
int tw_coll_timeout_error(comm *c, const tw_req *r, double timeout);
int tw_split(comm *c, int color, comm **out);

#endif
