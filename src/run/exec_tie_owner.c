/* --tie-owner (pipedream, one replica, --async-fix none or nesterov): a tied tensor (wte: the
 * embedding on the first stage, the head's copy on the last) belongs to its first holder, the
 * owner. After microbatch k's backward every other holder sends its part of k's gradient to the
 * owner and leaves its copy alone at its update; the owner adds the parts (member order) to its
 * own and updates the tensor at its update k + 1 like its span, with no lag (the last stage runs
 * k's backward before the first does, so its part is there), and sends the new weights back.
 * Each other holder's copy is refreshed at its update v to the owner's weights after update
 * v - K (K: the forwards the first stage admits, exec_tie_k): the first stage sends them
 * before microbatch v - 1's forward, which the last stage's update v follows, so nobody waits.
 * So the gradient is not late (--defer-tie applies it K updates late on every copy): the head
 * reads weights K updates old instead, as every stage but the last reads its own. Clipping: the
 * owner's stage factor (its span and the whole tied sum) for the tensor, another holder's its
 * span alone. A resumed run starts every copy from the saved tensor (the refreshes in flight
 * are lost). Not here: when it runs (exec_reduce_stage, exec_async_update), the update itself. */
#include "run/exec_int.h"
#include "util/pt.h"
#include <stdlib.h>
#include <string.h>

struct exec_tie_owner {
    exec_tie_ring r;                  /* K slots of H requests: the sends of out's slot */
    float *out;                       /* [K][n] what this rank sent: parts (member) or weights (owner) */
    float *in;                        /* owner: (n) a part received; another holder: [K][n] the
                                       * owner's weights, version v in slot (v - 1) % K */
    comm_req **ireq;                  /* another holder: [K] their receives, posted at its update v */
    long long seq;                    /* parts sent or summed (= updates begun) */
    long long upd;                    /* updates done */
};

int exec_tie_owner_init(run_exec *e) {
    if (!e->c.tie_owner) return 0;
    for (int k = 0; k < e->n_grp; k++) {
        exec_group *gr = &e->grp[k];
        if (!exec_tie_shared(gr)) continue;
        exec_tie_owner *O = pt_calloc(1, sizeof *O);
        exec_tie_ring_init(&O->r, e, gr, gr->cm->size);
        O->out = pt_falloc((size_t)O->r.K * O->r.n);
        O->in = pt_falloc((O->r.me ? (size_t)O->r.K : 1) * O->r.n);
        O->ireq = pt_calloc((size_t)O->r.K, sizeof *O->ireq);
        gr->own = O;
    }
    return 0;
}

/* Slot s's sends complete. 0, or -1. */
static int owner_wait_slot(run_exec *e, exec_group *gr, int s) {
    return exec_tie_ring_wait(&gr->own->r, e, gr, s, "owner exchange");
}

/* The owner: receives member src's part into O->in (blocking, within the timeout). 0, or -1. */
static int owner_recv(run_exec *e, exec_group *gr, int src) {
    comm_req **r = &gr->own->ireq[0];   /* the owner's own receive slot (it posts no refreshes) */
    if (comm_irecv(gr->cm, src, COMM_TAG_TIE_LAG, gr->own->in, gr->own->r.n * sizeof(float), r) < 0 ||
        exec_req_wait(gr->cm, r, e->c.timeout) < 0)
        return pt_adderr("rank %d: tied tensor %d from member %d: ", e->c.world_rank, gr->tie, src);
    return 0;
}

/* Sends the n floats of x to member dst (or every other member, dst < 0) from send slot s. */
static int owner_send(run_exec *e, exec_group *gr, const float *x, int dst) {
    exec_tie_owner *O = gr->own;
    int s = (int)(O->seq % O->r.K);
    if (owner_wait_slot(e, gr, s) < 0) return -1;
    float *buf = O->out + (size_t)s * O->r.n;
    memcpy(buf, x, O->r.n * sizeof(float));
    for (int m = 0; m < O->r.H; m++) {
        if (m == O->r.me || (dst >= 0 && m != dst)) continue;
        comm_req **rq = &O->r.req[(size_t)s * (size_t)O->r.H + (size_t)m];
        if (comm_isend(gr->cm, m, COMM_TAG_TIE_LAG, buf, O->r.n * sizeof(float), rq) < 0)
            return pt_adderr("rank %d: posting tied tensor %d: ", e->c.world_rank, gr->tie);
    }
    return 0;
}

/* Completes what is in flight (the owner sent a version for each update another holder made
 * and posted a receive for), then frees. */
void exec_tie_owner_free(run_exec *e) {
    for (int k = 0; e->grp && k < e->n_grp; k++) {
        exec_group *gr = &e->grp[k];
        exec_tie_owner *O = gr->own;
        if (!O) continue;
        int held = 0;   /* a request whose wait failed still names its buffer: kept (comm_free ends it) */
        for (int s = 0; s < O->r.K && !held; s++)
            held = exec_req_wait(gr->cm, &O->ireq[s], e->c.timeout) < 0 || owner_wait_slot(e, gr, s) < 0;
        if (!held) {
            free(O->out);
            free(O->in);
        }
        exec_tie_ring_free(&O->r);
        free(O->ireq);
        free(O);
        gr->own = NULL;
    }
}

size_t exec_tie_owner_floats(const run_exec *e) {
    size_t n = 0;
    for (int k = 0; k < e->n_grp; k++)
        if (e->grp[k].own) n += (size_t)(2 * e->grp[k].own->r.K) * e->grp[k].own->r.n;
    return n;
}

int exec_tie_owner_reduce(run_exec *e, exec_group *gr) {
    exec_tie_owner *O = gr->own;
    if (O->r.me != 0) {               /* a part for the owner; nothing of it applied here */
        if (owner_send(e, gr, gr->g[0], 0) < 0) return -1;
        memset(gr->g[0], 0, O->r.n * sizeof(float));
    } else {
        for (int m = 1; m < O->r.H; m++) {   /* the same microbatch's parts, in member order */
            if (owner_recv(e, gr, m) < 0) return -1;
            for (size_t i = 0; i < O->r.n; i++) gr->g[0][i] += O->in[i];
        }
    }
    O->seq++;
    return 0;
}

int exec_tie_owner_publish(run_exec *e, exec_group *gr) {
    return gr->own->r.me == 0 ? owner_send(e, gr, gr->w[0], -1) : 0;
}

int exec_tie_owner_refresh(run_exec *e, exec_group *gr) {
    exec_tie_owner *O = gr->own;
    O->upd++;
    if (O->r.me == 0) return 0;       /* the owner: the caller updates it */
    int s = (int)((O->upd - 1) % O->r.K);
    float *slot = O->in + (size_t)s * O->r.n;
    if (O->upd > O->r.K) {            /* the owner's weights after update upd - K (before: the start's) */
        if (exec_req_wait(gr->cm, &O->ireq[s], e->c.timeout) < 0)   /* failed: it stays in ireq[s] */
            return pt_adderr("rank %d: tied tensor %d's refresh: ", e->c.world_rank, gr->tie);
        for (int c = 0; c < gr->n_copies; c++) memcpy(gr->w[c], slot, O->r.n * sizeof(float));
    }
    /* version upd, which the owner sends after its update upd, into the slot just emptied */
    if (comm_irecv(gr->cm, 0, COMM_TAG_TIE_LAG, slot, O->r.n * sizeof(float), &O->ireq[s]) < 0)
        return pt_adderr("rank %d: posting tied tensor %d's refresh: ", e->c.world_rank, gr->tie);
    return 1;
}
