/* Inside the snapshots' peer copy (snapshot_peer.c sends, snapshot_peer_recv.c receives): the
 * state both sides share and their small helpers. Not a module border: snapshot_int.h is. */
#ifndef PT_CKPT_SNAPSHOT_PEER_INT_H
#define PT_CKPT_SNAPSHOT_PEER_INT_H
#include "ckpt/snapshot_int.h"
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define PEER_MAX_CONN 16        /* senders one receiver serves */
#define PEER_KEEP 3             /* generations kept per origin */
#define PEER_IO_TIMEOUT_S 10    /* a send or receive that makes no progress this long fails */
#define PEER_NICE 19            /* the sender's and receivers' nice value: the lowest */
#define PEER_RECV_PIECE (2u << 20)  /* bytes received (one wake-up: SO_RCVLOWAT) before they are
                                     * summed, in the L3 cache: 2 MB took about 10% less CPU (sender
                                     * and receiver: dev/snapshot_peer_cpu.sh) than 64 KB pieces'
                                     * 32x the wake-ups */
#define PEER_COPY_FACTOR 2.5     /* a generation's CPU on both ends over the sender's: the receiver
                                  * used 1.3-1.6x the sender's (bench_snapshot.sh's accounts) */
#define PEER_TWIN_WAIT_S 5      /* sums only: how long a receiver waits for its own generation */

struct snap_peer {
    char dir[1024];             /* root/rank-<me> */
    int rank;
    /* receiving */
    int lfd;                    /* listening socket (-1: none) */
    pthread_t lth;
    int n_conn, conn_fd[PEER_MAX_CONN];
    pthread_t conn_th[PEER_MAX_CONN];
    /* sending */
    uint32_t to_addr;
    int to_port, to_rank, sfd;
    int awaiting;               /* the sender waits for a sums-only answer (on sfd) */
    int sums_only;              /* the peer is a replica: sums only (0 after it answered 'D') */
    int differ_said;
    pthread_t sth;
    /* the newest generation offered, not yet taken by the sender */
    long pend_step;             /* 0: none */
    char *pend_json;
    snap_peer_file pend_f[SNAP_PEER_FILES];
    int pend_n;
    int pend_must;              /* it goes whatever the budget says (snap_peer_offer) */
    int must_late_said;         /* a must-go generation replaced by the next: said once */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    long own_step;              /* this rank's newest generation written (sums only waits for it) */
    pthread_cond_t own_cv;
    int stop;
    snap_peer_stats st;
    /* the CPU budget (snap_peer_budget; 0: none): saved-up CPU seconds, when last counted, and
     * the sender's CPU for the last generation sent whole and sums only */
    double budget, tokens, tokens_t, cost_whole, cost_sums;
    double cost_scale;          /* 1 (PIPETRAIN_TEST_PEER_COST: a test's larger price) */
};

/* CPU seconds the calling thread has used (what the copy takes from the cores, whatever the load). */
double peer_thread_cpu_s(void);
/* n bytes from / to fd, whole (EINTR retried). 0, or -1 when the connection failed or ended. */
int peer_read_all(int fd, void *buf, size_t n);
int peer_write_all(int fd, const void *buf, size_t n);
/* The calling thread below the compute threads (nice PEER_NICE; the policy: snapshot_peer.c). */
void peer_lower_priority(void);

#endif
