/* Snapshots' peer copy (snapshot_int.h): each written generation of a rank also goes, over a TCP
 * connection of its own (not the job's communicator, so the compute path never waits on it), to
 * a rank on another host, which keeps it in memory that outlives its own process:
 * ROOT/rank-<holder>/peer-<origin>/gen-<step>/, the origin's files and snap.json as they are. A
 * sender thread sends the newest generation written (one still being sent when a newer one is
 * written: the newer one next, those between skipped); a receiver thread per connection checks
 * each file's sum (a file refilled while it was being sent fails it: that copy is dropped) and
 * renames the folder into place when whole. For layouts where no replica on another host holds
 * the same state (--dp 1, --zero 1's moment slices, a stage's replicas on one host).
 *
 * Sums only (snap_peer_sums_to): where the peer is the same stage's rank of another replica, it
 * holds the same bytes already (data parallelism without --zero 1); then only the generation's
 * snap.json and each file's sum go, the receiver compares them with its own generation of the
 * same step (waiting for it at most PEER_TWIN_WAIT_S) and answers one byte: 'E' equal (it keeps
 * the origin's snap.json, with "files_at": its own rank, as peer-<origin>/gen-<step>/: the
 * restore takes the files from its own gen-<step>/ after checking them against those sums), 'D'
 * differ, 'U' its own not there. Anything but 'E' makes the sender send that generation whole;
 * 'D' makes it send every later one whole too (said once on stderr).
 *
 * On the wire, per generation: "PTSP", origin rank (int32), step (int64), files (int32), json
 * bytes (uint32), the json; per file: name bytes (uint16), the name, bytes (uint64), sum64
 * (uint64), the data. Sums only: "PTSS" and the same, each file's sum followed by a byte saying
 * whether its data follows (the rank's own state file's does); the answer one byte.
 * Host byte order: both ends are this program on one kind of machine. This file: the sender;
 * snapshot_peer_recv.c: the receivers. */
#include "ckpt/snapshot_peer_int.h"
#include "util/pt.h"
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

snap_peer *snap_peer_new(const char *rank_dir, int rank) {
    snap_peer *p = pt_calloc(1, sizeof *p);
    snprintf(p->dir, sizeof p->dir, "%s", rank_dir);
    p->rank = rank;
    p->lfd = p->sfd = -1;
    p->st.peer_rank = -1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    pthread_cond_init(&p->own_cv, NULL);
    return p;
}

/* CPU seconds this thread has used (what the copy takes from the cores, whatever the load). */
double peer_thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void set_timeouts(int fd) {
    struct timeval tv = { .tv_sec = PEER_IO_TIMEOUT_S };
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

int peer_read_all(int fd, void *buf, size_t n) {
    for (size_t got = 0; got < n;) {
        ssize_t k = recv(fd, (char *)buf + got, n - got, 0);
        if (k <= 0) { if (k < 0 && errno == EINTR) continue; return -1; }
        got += (size_t)k;
    }
    return 0;
}

int peer_write_all(int fd, const void *buf, size_t n) {
    for (size_t put = 0; put < n;) {
        ssize_t k = send(fd, (const char *)buf + put, n - put, MSG_NOSIGNAL);
        if (k <= 0) { if (k < 0 && errno == EINTR) continue; return -1; }
        put += (size_t)k;
    }
    return 0;
}

/* Below the compute threads and below the writer (snapshot.c): nice 19, so the copy runs mostly
 * where the cores have nothing else to do (the bubbles of the rank's own pipeline, a wait for a
 * peer) and takes little from the steps when they compete. Nothing on the compute path waits
 * for it: on a busy machine it falls behind (a newer generation replaces one not yet sent).
 * Not SCHED_IDLE: on a machine loaded by other work that would starve it outright, and where
 * the cores have idle time it measured no cheaper (bench_snapshot.sh: the copy's cost is not
 * its CPU competing with the steps). (A nice value per thread is Linux's; elsewhere this does
 * nothing.) */
void peer_lower_priority(void) {
    if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), PEER_NICE) < 0) { /* keep going */ }
}

/* ---- sending ------------------------------------------------------------------------------- */

static int send_connect(snap_peer *p) {
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)p->to_port),
                              .sin_addr.s_addr = htonl(p->to_addr) };
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd < 0) return -1;
    set_timeouts(fd);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) { close(fd); return -1; }
    p->sfd = fd;
    return 0;
}

/* One generation to the peer: whole, or (sums) its sums only and the peer's answer in *answer. */
static int send_gen(snap_peer *p, long step, const char *json, const snap_peer_file *f, int n, int sums,
                    char *answer) {
    int32_t origin = p->rank, nf = n;
    int64_t st = step;
    uint32_t jl = (uint32_t)strlen(json);
    if (p->sfd < 0 && send_connect(p) < 0) return -1;
    int fd = p->sfd;
    int rc = peer_write_all(fd, sums ? "PTSS" : "PTSP", 4) | peer_write_all(fd, &origin, 4) | peer_write_all(fd, &st, 8) |
             peer_write_all(fd, &nf, 4) | peer_write_all(fd, &jl, 4) | peer_write_all(fd, json, jl);
    for (int i = 0; i < n && rc == 0; i++) {
        uint16_t nl = (uint16_t)strlen(f[i].name);
        uint64_t bytes = f[i].bytes, sum = f[i].sum;
        rc = peer_write_all(fd, &nl, 2) | peer_write_all(fd, f[i].name, nl) | peer_write_all(fd, &bytes, 8) |
             peer_write_all(fd, &sum, 8);
        uint8_t whole = !sums || f[i].whole;   /* sums only: the rank's own state still whole */
        if (rc == 0 && sums) rc = peer_write_all(fd, &whole, 1);
        if (rc == 0 && whole) rc = peer_write_all(fd, f[i].map, f[i].bytes);
    }
    if (rc == 0 && sums) {   /* the answer, within PEER_IO_TIMEOUT_S; snap_peer_free cuts it short */
        pthread_mutex_lock(&p->mu);
        p->awaiting = !p->stop;
        pthread_mutex_unlock(&p->mu);
        rc = p->awaiting ? peer_read_all(fd, answer, 1) : -1;
        pthread_mutex_lock(&p->mu);
        p->awaiting = 0;
        pthread_mutex_unlock(&p->mu);
    }
    if (rc < 0) { close(p->sfd); p->sfd = -1; }   /* the next generation connects again */
    return rc;
}

/* A generation to the peer: sums only while the peer is a replica that answers 'E', else whole
 * (after 'D' every later one too, said once). *how: 0 whole, 1 sums only, 2 whole after an
 * answer other than 'E'. 0, or -1 when it failed. */
static int send_one(snap_peer *p, long step, const char *json, const snap_peer_file *f, int n, int *how) {
    char a = 0;
    *how = 0;
    if (!p->sums_only) return send_gen(p, step, json, f, n, 0, NULL);
    if (send_gen(p, step, json, f, n, 1, &a) < 0) return -1;
    *how = a == 'E' ? 1 : 2;
    if (a == 'E') return 0;
    if (a == 'D') {
        p->sums_only = 0;
        if (!p->differ_said++)
            fprintf(stderr, "pipetrain: snapshot peer copy of rank %d: the replica at rank %d holds other bytes at step "
                    "%ld than this rank (not bitwise replicas: --zero 1, --dp-sync, ...): sending whole generations "
                    "to it from now on\n", p->rank, p->to_rank, step);
    }
    return send_gen(p, step, json, f, n, 0, NULL);
}

static void *send_main(void *arg) {
    snap_peer *p = arg;
    peer_lower_priority();
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->pend_step && !p->stop) pthread_cond_wait(&p->cv, &p->mu);
        if (p->stop) break;
        long step = p->pend_step;
        char *json = p->pend_json;
        snap_peer_file f[SNAP_PEER_FILES];
        int n = p->pend_n;
        memcpy(f, p->pend_f, sizeof f);
        p->pend_step = 0;
        p->pend_json = NULL;
        int must = p->pend_must;
        /* priced as the kind it will likely go as (a sums-only peer not yet answered 'E': whole) */
        double cost = (p->sums_only && p->cost_sums > 0 ? p->cost_sums : p->cost_whole) * PEER_COPY_FACTOR * p->cost_scale;
        if (p->budget > 0 && !snap_peer_budget_take(&p->tokens, &p->tokens_t, pt_now(), p->budget, cost, must)) {
            p->st.thinned++;   /* its share of the CPU has not come yet: the next one */
            free(json);
            continue;
        }
        int sums = p->sums_only;
        pthread_mutex_unlock(&p->mu);
        double t0 = pt_now(), c0 = peer_thread_cpu_s();
        int how, rc = send_one(p, step, json, f, n, &how);
        free(json);
        double c1 = peer_thread_cpu_s();
        pthread_mutex_lock(&p->mu);
        p->st.send_s += pt_now() - t0;
        p->st.send_cpu_s += c1 - c0;
        if (rc == 0) *(sums && how == 1 ? &p->cost_sums : &p->cost_whole) = c1 - c0;
        if (p->budget > 0 && cost > 0) {   /* what it really cost, not what was charged (whole after sums) */
            double used = (c1 - c0) * PEER_COPY_FACTOR * p->cost_scale;
            p->tokens -= used - cost;
            if (p->tokens < -used) p->tokens = -used;
        }
        if (rc == 0) p->st.sent++; else p->st.failed++;
        p->st.sums_only += rc == 0 && how == 1;
        p->st.whole_after += how == 2;
        for (int i = 0; rc == 0 && i < n; i++) p->st.payload_bytes += how != 1 || f[i].whole ? (double)f[i].bytes : 0;
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int snap_peer_budget_take(double *tokens, double *t, double now, double frac, double cost, int must) {
    if (!isnan(*t) && now > *t) *tokens += (now - *t) * frac;
    *t = now;
    if (cost <= 0) return 1;
    if (*tokens > cost) *tokens = cost;   /* no credit beyond one generation: no bursts */
    if (!must && *tokens < cost) return 0;
    *tokens -= cost;                      /* a forced one borrows, at most one generation's worth */
    if (*tokens < -cost) *tokens = -cost;
    return 1;
}

/* Test hook: PIPETRAIN_TEST_PEER_COST=X prices each generation X times what it cost (a large
 * model's copy on a small test model: the budget then leaves out every one it may;
 * tests/test_recover_peer.sh). 1 without it. */
static double test_cost_scale(void) {
    const char *v = getenv("PIPETRAIN_TEST_PEER_COST");
    double x = v ? atof(v) : 1;
    return x > 0 ? x : 1;
}

void snap_peer_budget(snap_peer *p, double frac) {
    p->budget = frac > 0 ? frac : 0;
    p->tokens_t = NAN;   /* not started: the first generation counts from itself */
    p->cost_scale = test_cost_scale();
}

int snap_peer_send_to(snap_peer *p, uint32_t addr, int port, int peer_rank) {
    p->to_addr = addr;
    p->to_port = port;
    p->to_rank = peer_rank;
    p->st.peer_rank = peer_rank;
    pthread_create(&p->sth, NULL, send_main, p);
    return 0;
}

int snap_peer_sums_to(snap_peer *p, uint32_t addr, int port, int peer_rank) {
    p->sums_only = 1;
    return snap_peer_send_to(p, addr, port, peer_rank);
}

void snap_peer_offer(snap_peer *p, long step, const char *json, const snap_peer_file *f, int n, int must) {
    if (!p || !p->to_port) return;
    pthread_mutex_lock(&p->mu);
    if (p->pend_step && p->pend_must && !must) {   /* one that must go is not replaced by one that may */
        p->st.thinned++;
        pthread_mutex_unlock(&p->mu);
        return;
    }
    if (p->pend_step && p->pend_must && !p->must_late_said++)
        fprintf(stderr, "pipetrain: snapshot peer copy of rank %d: step %ld's generation, which must reach rank %d, "
                "was still waiting when step %ld's came: the copy takes longer than twice the snapshot interval, and "
                "a host lost now may find no step every piece is at (give a larger --snapshot-every)\n",
                p->rank, p->pend_step, p->to_rank, step);
    if (p->pend_step) p->st.skipped++;   /* the sender is still at an older one: this replaces the waiting one */
    free(p->pend_json);
    p->pend_json = pt_malloc(strlen(json) + 1);
    strcpy(p->pend_json, json);
    memcpy(p->pend_f, f, sizeof *f * (size_t)n);
    p->pend_n = n;
    p->pend_step = step;
    p->pend_must = must;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void snap_peer_own_written(snap_peer *p, long step) {
    pthread_mutex_lock(&p->mu);
    if (step > p->own_step) p->own_step = step;
    pthread_cond_broadcast(&p->own_cv);
    pthread_mutex_unlock(&p->mu);
}

void snap_peer_get_stats(snap_peer *p, snap_peer_stats *out) {
    pthread_mutex_lock(&p->mu);
    *out = p->st;
    pthread_mutex_unlock(&p->mu);
}

void snap_peer_free(snap_peer *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    if (p->awaiting) shutdown(p->sfd, SHUT_RDWR);   /* a peer gone with its host never answers */
    pthread_cond_broadcast(&p->cv);
    pthread_cond_broadcast(&p->own_cv);
    pthread_mutex_unlock(&p->mu);
    if (p->to_port) pthread_join(p->sth, NULL);
    if (p->sfd >= 0) close(p->sfd);
    if (p->lfd >= 0) {
        shutdown(p->lfd, SHUT_RDWR);   /* wakes accept */
        pthread_join(p->lth, NULL);
        close(p->lfd);
        for (int i = 0; i < p->n_conn; i++) {   /* wakes a receive; the sender's end may live on */
            shutdown(p->conn_fd[i], SHUT_RDWR);
            pthread_join(p->conn_th[i], NULL);
            close(p->conn_fd[i]);
        }
    }
    free(p->pend_json);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    pthread_cond_destroy(&p->own_cv);
    free(p);
}
