/* An executor's messages: every receive of an iteration posted at its start, sends posted at
 * their action and completed lazily between actions, and the clean-up after a failure.
 * Not here: the transports (comm/), gradient collectives (exec_reduce.c), waits offered to side
 * work (exec_wait.c). */
#include "run/exec_int.h"
#include "util/half.h"
#include "util/pt.h"
#include <stdio.h>
#include <stdlib.h>

/* Tag of the message to stage g for microbatch mb: dir 0 forward activation, 1 gradient. */
static int exec_tag(const run_exec *e, int g, int mb, int dir) { return (g * e->M + mb) * 2 + dir; }

/* A message is the stream of one microbatch at a stage boundary: this TP rank's rows of it under
 * --sp, sent to the same TP rank of the next stage; in fp32, or packed to 16 bits (--wire). */
static size_t exec_msg_floats(const run_exec *e) { return (size_t)e->Ns * e->C; }
static size_t exec_msg_bytes(const run_exec *e) { return exec_msg_floats(e) * pt_wire_bytes((pt_wire)e->c.wire); }

/* --wire bf16/fp16: the 16-bit copy of message `kind` (0 send F, 1 send B, 2 receive F, 3
 * receive B) of local stage st and microbatch mb, allocated at first use, kept for the run. */
static uint16_t *exec_wire_buf(run_exec *e, const run_stage *st, int mb, int kind) {
    if (!e->wire_buf) e->wire_buf = pt_calloc((size_t)e->n_stages * e->M * 4, sizeof *e->wire_buf);
    size_t k = (((size_t)(st - e->st) * e->M) + (size_t)mb) * 4 + (size_t)kind;
    if (!e->wire_buf[k]) e->wire_buf[k] = pt_malloc(exec_msg_floats(e) * sizeof(uint16_t));
    return e->wire_buf[k];
}

void exec_wire_free(run_exec *e) {
    for (size_t k = 0; e->wire_buf && k < (size_t)e->n_stages * e->M * 4; k++) free(e->wire_buf[k]);
    free(e->wire_buf);
    e->wire_buf = NULL;
}

void run_exec_set_wire(run_exec *e, int wire) { e->c.wire = wire; }

size_t run_exec_msg_bytes(const run_exec *e) { return exec_msg_bytes(e); }

/* Where a receive lands: the fp32 buffer itself, or (--wire) its 16-bit copy. */
static void *exec_recv_buf(run_exec *e, const run_stage *st, int mb, int grad) {
    if (e->c.wire == PT_WIRE_F32) return grad ? st->dyin[mb] : st->xin[mb];
    return exec_wire_buf(e, st, mb, 2 + grad);
}

/* What a send reads: the fp32 buffer itself, or (--wire) its 16-bit copy, packed now. */
static const void *exec_send_buf(run_exec *e, const run_stage *st, int mb, int grad) {
    const float *x = grad ? st->dxo[mb] : st->out[mb];
    if (e->c.wire == PT_WIRE_F32) return x;
    uint16_t *h = exec_wire_buf(e, st, mb, grad);
    pt_wire_pack((pt_wire)e->c.wire, h, x, exec_msg_floats(e));
    return h;
}

/* Posts every receive of the iteration at once (buffers are per stage and microbatch). */
int exec_post_recvs(run_exec *e) {
    const sched *s = e->c.s;
    for (int i = 0; i < s->len[e->p]; i++) {
        sched_action a = s->acts[e->p][i];
        run_stage *st = a.stage >= 0 ? &e->st[e->loc[a.stage]] : NULL;
        int rc = 0;
        if (a.kind == ACT_RECV_F)
            rc = comm_irecv(e->c.world, st->prev_rank, exec_tag(e, a.stage, a.mb, 0),
                            exec_recv_buf(e, st, a.mb, 0), exec_msg_bytes(e), &e->recv_req[i]);
        else if (a.kind == ACT_RECV_B)
            rc = comm_irecv(e->c.world, st->next_rank, exec_tag(e, a.stage, a.mb, 1),
                            exec_recv_buf(e, st, a.mb, 1), exec_msg_bytes(e), &e->recv_req[i]);
        if (rc < 0) return pt_adderr("rank %d: posting %d%s%d: ", e->c.world_rank, a.stage,
                                     sched_kind_name(a.kind), a.mb);
    }
    return 0;
}

/* Completes finished sends without blocking (lazily, between actions). */
int exec_poll_sends(run_exec *e) {
    int k = 0;
    int rc = 0;
    for (int n = 0; n < e->n_pend; n++) {
        int i = e->pend[n];
        if (rc == 0 && exec_req_test(e->c.world, &e->send_req[i]) < 0) rc = -1;
        if (e->send_req[i]) e->pend[k++] = i;
    }
    e->n_pend = k;
    return rc;
}

int exec_send(run_exec *e, int i, sched_action a, int *peer) {
    run_stage *st = &e->st[e->loc[a.stage]];
    if (a.kind == ACT_SEND_F) {
        *peer = st->next_rank;
        return comm_isend(e->c.world, *peer, exec_tag(e, st->next, a.mb, 0), exec_send_buf(e, st, a.mb, 0),
                          exec_msg_bytes(e), &e->send_req[i]);
    }
    *peer = st->prev_rank;
    return comm_isend(e->c.world, *peer, exec_tag(e, st->prev, a.mb, 1), exec_send_buf(e, st, a.mb, 1),
                      exec_msg_bytes(e), &e->send_req[i]);
}

int exec_recv(run_exec *e, int i, sched_action a, int *peer) {
    run_stage *st = &e->st[e->loc[a.stage]];
    *peer = a.kind == ACT_RECV_F ? st->prev_rank : st->next_rank;
    if (!e->recv_req[i]) return pt_seterr("RECV without a posted receive");
    exec_waiting x = { .e = e, .req = &e->recv_req[i], .n = 1 };
    if (e->c.on_wait && exec_offer_wait(e, i, exec_reqs_arrived, exec_reqs_block, &x) < 0) return -1;
    comm_req **r = &e->recv_req[i];   /* NULL: it arrived during the offer */
    if (*r && e->lend) {   /* --balance-memory: a partner's lent activations are served meanwhile */
        if (exec_lend_wait(e, r, "receiving", 0) < 0) return -1;
    } else if (*r) {       /* a failed wait leaves it in its slot for exec_drop_requests */
        if (comm_wait(e->c.world, *r, e->c.timeout) < 0) return -1;
        *r = NULL;
    }
    if (e->c.wire != PT_WIRE_F32) {   /* the 16-bit copy into the fp32 buffer the stage reads */
        int grad = a.kind == ACT_RECV_B;
        pt_wire_unpack((pt_wire)e->c.wire, grad ? st->dyin[a.mb] : st->xin[a.mb],
                       exec_wire_buf(e, st, a.mb, 2 + grad), exec_msg_floats(e));
    }
    return 0;
}

/* Waits for every outstanding send and cancels nothing: a receive left over is a bug. */
int exec_finish_sends(run_exec *e) {
    for (int i = 0; i < e->c.s->len[e->p]; i++) {
        if (!e->send_req[i]) continue;
        if (comm_wait(e->c.world, e->send_req[i], e->c.timeout) < 0)   /* left for exec_drop_requests */
            return pt_adderr("rank %d: completing sends: ", e->c.world_rank);
        e->send_req[i] = NULL;
    }
    e->n_pend = 0;
    return 0;
}

/* After a failure: frees the requests that completed (test reports them); the transport drops
 * the ones still pending when the endpoint is freed. Keeps the first error; returns -1. */
int exec_drop_requests(run_exec *e) {
    char err[1024];
    snprintf(err, sizeof err, "%s", pt_err());
    comm_req **lists[2] = { e->recv_req, e->send_req };
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < e->c.s->len[e->p]; i++) {
            int done = 0;
            if (lists[k][i]) comm_test(e->c.world, lists[k][i], &done);
            lists[k][i] = NULL;
        }
    return pt_seterr("%s", err);
}
